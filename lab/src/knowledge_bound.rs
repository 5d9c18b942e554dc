//! The best any plan made from what a policy is told can do on several truth families at once.
//!
//! Two truth families whose jobs carry the same knowledge (the same predicted PFIs, the same
//! draws and throughputs) give every policy the same input, so any policy, ours or one not yet
//! written, makes the same plan for both. The curve zoo asks each family's rows to pass on their
//! own (within 0.5 % of the equal cut, and at or above the paper's rule where that rule beats
//! equal); where families share their knowledge those rows must pass with *one* plan per
//! workload. Whether that is possible at all is a question about the families, not about a
//! policy, and this module answers it exactly.
//!
//! **The problem.** For families `f` with targets `t_f` (mean objective value per plan) and
//! units `u_f` (their equal cut's mean), find per-workload plans `p_w` that maximise the worst
//! margin `min_f (V_f(p) − t_f) / u_f`, where `V_f(p)` is the mean over workloads of the
//! objective read off family `f`'s true curves, as the experiment reads it. On the truths'
//! concave hulls `Ṽ_f ≥ V_f` every `Ṽ_f` is a sum of concave functions, so the relaxed problem is
//! a concave max-min, and by the minimax theorem its value equals `min_{μ ∈ simplex} D(μ)` with
//! `D(μ) = max_p Σ_f μ_f (Ṽ_f(p) − t_f) / u_f`. For fixed weights `μ` the inner maximum is one
//! water-filling per workload on the μ-weighted sum of the families' hulls, exact because that
//! sum is concave.
//!
//! **The method: cutting planes (Kelley).** Each evaluation of `D` at `μ_k` gives a plan `p_k` and
//! the margins `g_k` it reaches on every family's hulls; `D(μ) ≥ μ·g_k` for every `μ`. The small
//! linear program `min_μ max_k μ·g_k` over the simplex proposes the next `μ`, until its value and
//! the smallest `D(μ_k)` seen are within 0.001 % of the equal cut (a few dozen evaluations).
//!
//! - **Upper bound**: the smallest `D(μ_k)`. No plan does better on the hulls, so none does better
//!   on the truths, which lie below them. When it is below 0, no plan whatever meets every
//!   target: a certificate, not a failed search.
//! - **Lower bound**: a plan that is actually there. The master's dual weights `α` mix the plans
//!   found, `Σ_k α_k p_k` (a plan: budgets and floors are linear), and its worst margin is read
//!   off the *true* curves. Where the truths are concave the two bounds meet; a truth clamped at
//!   its minimum throughput (a steep knee) is not, and the gap shows it.
//!
//! The bound knows every family's true curves, and only not which one is the truth; a policy
//! also knows the truths only through predictions, so real policies sit below it.

use super::experiment::{ExperimentConfig, draw_workload, mix_weights};
use super::rng::SplitMix64;
use super::truth::JobTemplate;
use flexgate_policies::alloc::Objective;
use flexgate_policies::alloc::select::{Segment, shed_cheapest};
use flexgate_policies::curve::ConcaveHull;
use flexgate_policies::units::Fraction;
use microlp::{ComparisonOp, OptimizationDirection, Problem};
use serde::Serialize;

/// One family the plans must serve, with what its rows ask.
#[derive(Debug, Clone, Copy)]
pub struct BoundFamily<'a> {
    /// The family's name (for the report).
    pub name: &'static str,
    /// Its templates, in the same group order as every other family's.
    pub templates: &'a [JobTemplate],
    /// The mean objective value per plan its rows ask for.
    pub target: f64,
    /// What its margins are measured in: its equal cut's mean value.
    pub unit: f64,
}

/// The answer: how far above (or below) every family's target the best shared plans reach.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KnowledgeBound {
    /// The families, in the order given.
    pub families: Vec<&'static str>,
    /// A plan reaching at least this worst margin (share of each family's equal cut) exists.
    pub margin_lower: f64,
    /// No plan reaches a worst margin above this. Below 0: no plan meets every target.
    pub margin_upper: f64,
    /// The weight each family carries at the end (the families that bind have weight).
    pub weights: Vec<f64>,
    /// Evaluations of the dual function.
    pub evaluations: usize,
}

impl KnowledgeBound {
    /// Whether some plan meets every target (its lower bound is at least 0).
    #[must_use]
    pub fn attainable(&self) -> bool {
        self.margin_lower >= -MARGIN_TOLERANCE
    }

    /// Whether it is proven that no plan meets every target.
    #[must_use]
    pub fn unattainable(&self) -> bool {
        self.margin_upper < -MARGIN_TOLERANCE
    }
}

/// Why the bound could not be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BoundError {
    /// No families, families of different sizes, or a target that is not a number.
    #[error("invalid knowledge bound: {0}")]
    Invalid(String),
    /// The cutting-plane master failed (a numerical failure of the LP solver).
    #[error("the knowledge bound's linear program failed: {0}")]
    Solver(String),
}

/// Gap between the bounds at which the search stops (share of the equal cut: 0.001 %).
const GAP: f64 = 1e-5;
/// Margins this close to 0 count as 0 (rounding of sums over 10,000 jobs).
const MARGIN_TOLERANCE: f64 = 1e-7;
/// Evaluations at most.
const MAX_EVALUATIONS: usize = 120;

/// One job of one workload: its power range and every family's value at the union of the
/// families' hull vertices (already divided by the objective's denominator and the family's unit).
struct Job {
    p_max: f64,
    floor: f64,
    powers: Vec<f64>,
    /// `values[k * families + f]`: family `f`'s hull at `powers[k]`.
    values: Vec<f64>,
    /// Each family's true curve, and this job's value per token/s (divided by the denominator
    /// and the family's unit).
    truths: Vec<(flexgate_policies::curve::PowerCurve, f64)>,
}

impl Job {
    /// Family `f`'s value at `power`, linear between vertices (exact: every family's hull has
    /// its vertices among `powers`).
    /// Family `f`'s value at `power` on its true curve, as the experiment reads it (the cap
    /// that draws `power`, then the throughput at that cap).
    fn truth_value(&self, f: usize, power: f64) -> f64 {
        let (curve, per_token) = &self.truths[f];
        let cap = curve.cap_for_power(flexgate_policies::units::Watts(power));
        per_token * curve.tokens_at_cap(cap).value()
    }

    fn value(&self, f: usize, families: usize, power: f64) -> f64 {
        let k = self.powers.partition_point(|&p| p < power).min(self.powers.len() - 1);
        if k == 0 || self.powers[k] <= power {
            return self.values[k * families + f];
        }
        let (p0, p1) = (self.powers[k - 1], self.powers[k]);
        let (v0, v1) = (self.values[(k - 1) * families + f], self.values[k * families + f]);
        v0 + (power - p0) / (p1 - p0) * (v1 - v0)
    }
}

/// The best shared plans for `families` at `cut`, on the experiment's own workloads (`config`:
/// mix, workloads, jobs, seed, objective; no tiers).
pub fn knowledge_bound(
    config: &ExperimentConfig,
    cut: Fraction,
    families: &[BoundFamily<'_>],
) -> Result<KnowledgeBound, BoundError> {
    let invalid = |m: &str| Err(BoundError::Invalid(m.to_string()));
    let Some(first) = families.first() else {
        return invalid("no families");
    };
    if families.iter().any(|f| f.templates.len() != first.templates.len()) {
        return invalid("families must have one template per group, in the same order");
    }
    if families
        .iter()
        .any(|f| !(f.target.is_finite() && f.unit.is_finite() && f.unit > 0.0))
    {
        return invalid("every target and unit must be a positive finite number");
    }
    let workloads = build_workloads(config, cut, families);
    let n = families.len();
    let targets: Vec<f64> = families.iter().map(|f| f.target / f.unit).collect();
    // μ·g in percent keeps the master's coefficients near 1.
    let mut cuts: Vec<Vec<f64>> = Vec::new();
    let mut plans: Vec<Vec<Vec<f64>>> = Vec::new();
    let mut mu = vec![1.0 / n as f64; n];
    let mut upper = f64::INFINITY;
    let mut evaluations = 0;
    while evaluations < MAX_EVALUATIONS {
        let (reached, plan) = best_plans(&workloads, &mu, n);
        evaluations += 1;
        let margins: Vec<f64> = reached.iter().zip(&targets).map(|(v, t)| v - t).collect();
        upper = upper.min(mu.iter().zip(&margins).map(|(m, g)| m * g).sum());
        cuts.push(margins.iter().map(|g| 100.0 * g).collect());
        plans.push(plan);
        let (next, value) = master(&cuts, n)?;
        mu = next;
        if upper - value / 100.0 <= GAP {
            break;
        }
    }
    // The plan behind the lower bound: the plans found, mixed by the master's primal weights,
    // read off the true curves.
    let alpha = mixture(&cuts, n)?;
    // The worst margin on the true curves of the plan `power(w, i)`.
    let worst_on_truths = |power: &dyn Fn(usize, usize) -> f64| -> f64 {
        (0..n)
            .map(|f| {
                let reached: f64 = workloads
                    .iter()
                    .enumerate()
                    .map(|(w, (jobs, _))| {
                        jobs.iter()
                            .enumerate()
                            .map(|(i, job)| job.truth_value(f, power(w, i)))
                            .sum::<f64>()
                    })
                    .sum();
                reached - targets[f]
            })
            .fold(f64::INFINITY, f64::min)
    };
    // The mixture, and each plan it mixes: on a truth that is not concave (a steep knee clamped
    // at its lowest throughput) a mixture can fall inside a dent that one of its plans avoids.
    let mut lower = worst_on_truths(&|w, i| alpha.iter().zip(&plans).map(|(a, p)| a * p[w][i]).sum());
    for (a, plan) in alpha.iter().zip(&plans) {
        if *a > 0.0 {
            lower = lower.max(worst_on_truths(&|w, i| plan[w][i]));
        }
    }
    Ok(KnowledgeBound {
        families: families.iter().map(|f| f.name).collect(),
        margin_lower: lower.min(upper),
        margin_upper: upper,
        weights: mu,
        evaluations,
    })
}

/// Every workload's jobs with every family's values, and the watts each workload must shed.
fn build_workloads(config: &ExperimentConfig, cut: Fraction, families: &[BoundFamily<'_>]) -> Vec<(Vec<Job>, f64)> {
    let n = families.len();
    let base = families[0].templates;
    let weights = mix_weights(config.mix, base);
    let hulls: Vec<Vec<ConcaveHull>> = families
        .iter()
        .map(|f| f.templates.iter().map(|t| t.truth.concave_hull()).collect())
        .collect();
    let drawn: Vec<Vec<usize>> = (0..config.workloads)
        .map(|w| {
            let mut rng = SplitMix64::derive(config.seed, w as u64);
            draw_workload(config, base, &weights, &mut rng)
                .iter()
                .map(|d| d.template)
                .collect()
        })
        .collect();
    // The objective's mean is per job (tokens) or per GPU over every workload (progress).
    let denominator: f64 = match config.objective {
        Objective::Tokens => (config.workloads * config.jobs) as f64,
        Objective::Progress => drawn.iter().flatten().map(|&t| f64::from(base[t].gpus)).sum(),
    };
    drawn
        .iter()
        .map(|picks| {
            let jobs: Vec<Job> = picks
                .iter()
                .map(|&t| {
                    let template = &base[t];
                    let top = template.truth.uncapped();
                    let p_max = top.power.value();
                    let floor = template.cap_range.min.times_gpus(template.gpus).value().min(p_max);
                    let per_token = match config.objective {
                        Objective::Tokens => 1.0,
                        Objective::Progress => f64::from(template.gpus) / top.tokens.value(),
                    };
                    let mut powers: Vec<f64> = hulls
                        .iter()
                        .flat_map(|h| h[t].vertices().iter().map(|v| v.0))
                        .filter(|&p| p > floor && p < p_max)
                        .chain([floor, p_max])
                        .collect();
                    powers.sort_by(f64::total_cmp);
                    powers.dedup_by(|a, b| (*a - *b).abs() <= 1e-9 * p_max);
                    let values = powers
                        .iter()
                        .flat_map(|&p| {
                            hulls
                                .iter()
                                .zip(families)
                                .map(move |(h, f)| per_token * h[t].tokens_at(p) / denominator / f.unit)
                        })
                        .collect();
                    debug_assert_eq!(n, families.len());
                    let truths = families
                        .iter()
                        .map(|f| (f.templates[t].truth.clone(), per_token / denominator / f.unit))
                        .collect();
                    Job {
                        p_max,
                        floor,
                        powers,
                        values,
                        truths,
                    }
                })
                .collect();
            let need = cut.value() * jobs.iter().map(|j| j.p_max).sum::<f64>();
            (jobs, need)
        })
        .collect()
}

/// The plans that maximise the μ-weighted sum of the hulls (one water-filling per workload), and
/// each family's hull value of them (in its units, summed over workloads).
fn best_plans(workloads: &[(Vec<Job>, f64)], mu: &[f64], n: usize) -> (Vec<f64>, Vec<Vec<f64>>) {
    let mut reached = vec![0.0; n];
    let mut plans = Vec::with_capacity(workloads.len());
    let mut segments = Vec::new();
    let mut shed = Vec::new();
    for (jobs, need) in workloads {
        segments.clear();
        for (i, job) in jobs.iter().enumerate() {
            let blended = ConcaveHull::from_points(
                job.powers
                    .iter()
                    .enumerate()
                    .map(|(k, &p)| (p, mu.iter().enumerate().map(|(f, m)| m * job.values[k * n + f]).sum())),
            );
            let v = blended.vertices();
            for pair in v.windows(2) {
                let width = pair[1].0 - pair[0].0;
                if width > 0.0 {
                    segments.push(Segment {
                        slope: (pair[1].1 - pair[0].1) / width,
                        width,
                        job: i as u32,
                    });
                }
            }
            // Watts above the blended hull's best point cost nothing.
            if let Some(&(top, _)) = v.last()
                && job.p_max > top
            {
                segments.push(Segment {
                    slope: 0.0,
                    width: job.p_max - top,
                    job: i as u32,
                });
            }
        }
        shed.clear();
        shed.resize(jobs.len(), 0.0);
        shed_cheapest(&segments, *need, &mut shed);
        let plan: Vec<f64> = jobs
            .iter()
            .zip(&shed)
            .map(|(job, s)| (job.p_max - s).max(job.floor))
            .collect();
        for (job, &power) in jobs.iter().zip(&plan) {
            for (f, r) in reached.iter_mut().enumerate() {
                *r += job.value(f, n, power);
            }
        }
        plans.push(plan);
    }
    (reached, plans)
}

/// Solve a master LP, its failures as [`BoundError::Solver`].
fn solve(lp: &Problem) -> Result<microlp::Solution, BoundError> {
    lp.solve()
        .map_err(|e| BoundError::Solver(e.to_string()))?
        .into_solution()
        .map_err(|_| BoundError::Solver("interrupted".to_string()))
}

/// The master's primal: weights `α` over the plans found that maximise the worst family's
/// linear margin `min_f Σ_k α_k g_{k,f}`.
fn mixture(cuts: &[Vec<f64>], n: usize) -> Result<Vec<f64>, BoundError> {
    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let worst = lp.add_var(1.0, (f64::NEG_INFINITY, f64::INFINITY));
    let alpha: Vec<_> = cuts.iter().map(|_| lp.add_var(0.0, (0.0, 1.0))).collect();
    for f in 0..n {
        let mut row = vec![(worst, -1.0)];
        row.extend(alpha.iter().zip(cuts).map(|(&a, g)| (a, g[f])));
        lp.add_constraint(&row, ComparisonOp::Ge, 0.0);
    }
    let simplex: Vec<_> = alpha.iter().map(|&a| (a, 1.0)).collect();
    lp.add_constraint(&simplex, ComparisonOp::Eq, 1.0);
    let solution = solve(&lp)?;
    let weights: Vec<f64> = alpha.iter().map(|&a| solution.var_value(a).max(0.0)).collect();
    let total: f64 = weights.iter().sum();
    Ok(weights.iter().map(|w| w / total.max(f64::MIN_POSITIVE)).collect())
}

/// The cutting-plane master: `min z` over the simplex with `z ≥ μ·g_k` for every cut; its
/// minimiser and value.
fn master(cuts: &[Vec<f64>], n: usize) -> Result<(Vec<f64>, f64), BoundError> {
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let z = lp.add_var(1.0, (f64::NEG_INFINITY, f64::INFINITY));
    let mu: Vec<_> = (0..n).map(|_| lp.add_var(0.0, (0.0, 1.0))).collect();
    for g in cuts {
        let mut row = vec![(z, 1.0)];
        row.extend(mu.iter().zip(g).map(|(&m, &g)| (m, -g)));
        lp.add_constraint(&row, ComparisonOp::Ge, 0.0);
    }
    let simplex: Vec<_> = mu.iter().map(|&m| (m, 1.0)).collect();
    lp.add_constraint(&simplex, ComparisonOp::Eq, 1.0);
    let solution = solve(&lp)?;
    let weights = mu.iter().map(|&m| solution.var_value(m).max(0.0)).collect();
    Ok((weights, solution.objective()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::published_groups;
    use crate::truth::{TruthFamily, synthetic_templates};

    fn config(objective: Objective) -> ExperimentConfig {
        ExperimentConfig {
            workloads: 12,
            jobs: 40,
            seed: 3,
            objective,
            ..ExperimentConfig::default()
        }
    }

    #[test]
    fn one_family_reaches_its_own_oracle_and_no_further() {
        // Alone, the best plan is the family's oracle: a target at the oracle's value has margin
        // 0, one above it a negative margin, both bounds agreeing.
        let groups = published_groups().expect("groups");
        let physical = synthetic_templates(&groups, TruthFamily::Physical).expect("templates");
        let cut = Fraction::new(0.3).expect("cut");
        let probe = |target: f64| {
            knowledge_bound(
                &config(Objective::Tokens),
                cut,
                &[BoundFamily {
                    name: "physical",
                    templates: &physical,
                    target,
                    unit: 1.0,
                }],
            )
            .expect("bound")
        };
        let zero = probe(0.0);
        let oracle = zero.margin_upper;
        assert!(
            oracle > 0.0 && (zero.margin_upper - zero.margin_lower).abs() < 1e-6,
            "{zero:?}"
        );
        let above = probe(oracle * 1.01);
        assert!(above.unattainable() && !above.attainable(), "{above:?}");
        let below = probe(oracle * 0.99);
        assert!(below.attainable() && !below.unattainable(), "{below:?}");
    }

    #[test]
    fn two_families_meet_between_their_oracles_and_the_bounds_bracket_the_answer() {
        let groups = published_groups().expect("groups");
        let physical = synthetic_templates(&groups, TruthFamily::Physical).expect("templates");
        let knee = synthetic_templates(&groups, TruthFamily::Knee).expect("templates");
        let cut = Fraction::new(0.2).expect("cut");
        let solo = |templates: &[JobTemplate]| {
            knowledge_bound(
                &config(Objective::Progress),
                cut,
                &[BoundFamily {
                    name: "solo",
                    templates,
                    target: 0.0,
                    unit: 1.0,
                }],
            )
            .expect("bound")
            .margin_upper
        };
        let (best_physical, best_knee) = (solo(&physical), solo(&knee));
        // Ask each for its own oracle: together they cannot both have it (their best plans
        // differ), so the answer is below 0, and the bounds bracket it tightly.
        let both = knowledge_bound(
            &config(Objective::Progress),
            cut,
            &[
                BoundFamily {
                    name: "physical",
                    templates: &physical,
                    target: best_physical,
                    unit: 1.0,
                },
                BoundFamily {
                    name: "knee",
                    templates: &knee,
                    target: best_knee,
                    unit: 1.0,
                },
            ],
        )
        .expect("bound");
        assert!(both.unattainable(), "{both:?}");
        assert!(both.margin_upper - both.margin_lower <= 2.0 * GAP, "{both:?}");
        assert!(both.weights.iter().all(|w| *w > 0.0), "both bind: {both:?}");
        assert!(knowledge_bound(&config(Objective::Tokens), cut, &[]).is_err());
    }
}
