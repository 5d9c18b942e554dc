//! The best any plan can do on two truth families at once, which share all their knowledge.
//!
//! The physical fleet and a zoo family with the same PFIs give a planner identical inputs, so any
//! policy plans them identically. Which pairs of outcomes are possible at all? For weights μ the
//! oracle's solver maximises `physical + μ·other` on the exact truth curves of both; since both
//! are concave, the plans it finds trace the whole Pareto frontier. Each line gives one plan's
//! gap closure on the physical fleet and its throughput against the equal cut on the other.
//!
//! ```sh
//! cargo run --release -p flexgate-policies --example two_truth_frontier -- roofline 0.3
//! ```
//!
//! Production mix, seed 7, 100 workloads of 100 jobs (the zoo's). Only families that keep the
//! physical fleet's throughput and predictions (knees, rooflines, saturating, power laws, mixed)
//! share its knowledge; `equal_tpj`, `biased` and `missing` tell a planner something else, so for
//! them the frontier is no bound on what a policy could do.

use flexgate_policies::alloc::{
    AllocationPolicy, Budget, CapPlan, CurveAware, Elasticity, JobSpec, Proportional, Weighting,
};
use flexgate_policies::curve::{CurvePoint, PowerCurve};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::fleet::experiment::mix_weights;
use flexgate_policies::fleet::rng::SplitMix64;
use flexgate_policies::fleet::zoo::ZooFamily;
use flexgate_policies::fleet::{JobTemplate, Mix, TruthFamily, published_groups};
use flexgate_policies::units::Fraction;
use std::process::ExitCode;
use std::sync::Arc;

const WORKLOADS: u64 = 100;
const JOBS: usize = 100;
const SEED: u64 = 7;
const WEIGHTS: [f64; 8] = [0.0, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 1e6];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(other) = args.first().and_then(|n| ZooFamily::by_name(n)) else {
        eprintln!("usage: two_truth_frontier FAMILY [CUT]   (FAMILY: a `simulate --zoo` family name)");
        return ExitCode::from(2);
    };
    let Some(cut) = args
        .get(1)
        .map_or(Some(0.3), |c| c.parse().ok())
        .and_then(|c| Fraction::new(c).ok())
    else {
        eprintln!("CUT must be a fraction in [0, 1)");
        return ExitCode::from(2);
    };
    match run(other, cut) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(other: ZooFamily, cut: Fraction) -> Result<(), Box<dyn std::error::Error>> {
    let groups = published_groups()?;
    let physical = ZooFamily::Builtin(TruthFamily::Physical).templates(&groups)?;
    let others = other.templates(&groups)?;
    let family = Arc::new(CurveFamily::h200_generic());
    let oracle = CurveAware::oracle(family.clone());
    let equal = Proportional::new(Weighting::Equal, family);
    let weights = mix_weights(Mix::Production, &physical);
    let budget = Budget::Cut(cut);
    println!("cut {:.0} %, physical and {}", cut.value() * 100.0, other.name());
    for mu in WEIGHTS {
        // [plan, equal, each family's own oracle] × [physical, other]
        let mut sums = [[0.0; 2]; 3];
        for w in 0..WORKLOADS {
            let mut rng = SplitMix64::derive(SEED, w);
            let picks: Vec<usize> = (0..JOBS).map(|_| rng.weighted_index(&weights)).collect();
            let blend = |a: &PowerCurve, b: &PowerCurve| -> Result<PowerCurve, Box<dyn std::error::Error>> {
                let points = a
                    .points()
                    .iter()
                    .zip(b.points())
                    .map(|(p, q)| CurvePoint {
                        tokens: p.tokens * (1.0 / (1.0 + mu)) + q.tokens * (mu / (1.0 + mu)),
                        ..*p
                    })
                    .collect();
                Ok(PowerCurve::new(a.gpus(), points)?)
            };
            let blended: Vec<PowerCurve> = picks
                .iter()
                .map(|&t| blend(&physical[t].truth, &others[t].truth))
                .collect::<Result<_, _>>()?;
            let plan = oracle.plan(&measured_jobs(&picks, &physical, &blended), budget)?;
            let equal_plan = equal.plan(&measured_jobs(&picks, &physical, &blended), budget)?;
            for (f, templates) in [&physical, &others].into_iter().enumerate() {
                let own: Vec<PowerCurve> = picks.iter().map(|&t| templates[t].truth.clone()).collect();
                let own_oracle = oracle.plan(&measured_jobs(&picks, templates, &own), budget)?;
                for (row, p) in [&plan, &equal_plan, &own_oracle].into_iter().enumerate() {
                    sums[row][f] += realized(p, &picks, templates);
                }
            }
        }
        let [plan, equal, best] = sums;
        println!(
            "μ {mu:>9}: physical gap closure {:6.1} %   {} vs equal {:+6.2} % (its oracle {:+.2} %)",
            (plan[0] - equal[0]) / (best[0] - equal[0]) * 100.0,
            other.name(),
            (plan[1] / equal[1] - 1.0) * 100.0,
            (best[1] / equal[1] - 1.0) * 100.0
        );
    }
    Ok(())
}

/// The drawn jobs with `curves` as their measured (true) curves.
fn measured_jobs(picks: &[usize], templates: &[JobTemplate], curves: &[PowerCurve]) -> Vec<JobSpec> {
    picks
        .iter()
        .zip(curves)
        .enumerate()
        .map(|(i, (&t, curve))| {
            let top = curve.uncapped();
            JobSpec {
                id: format!("w{i}").into(),
                gpus: templates[t].gpus,
                cap_range: templates[t].cap_range,
                uncapped_power: top.power,
                uncapped_tokens: top.tokens,
                elasticity: Elasticity::Measured { curve: curve.clone() },
                max_slowdown: None,
                priority: 1.0,
            }
        })
        .collect()
}

/// Tokens/s the plan's caps deliver on the templates' true curves.
fn realized(plan: &CapPlan, picks: &[usize], templates: &[JobTemplate]) -> f64 {
    plan.entries
        .iter()
        .zip(picks)
        .map(|(e, &t)| templates[t].truth.tokens_at_cap(e.cap).value())
        .sum()
}
