use flexgate_lab::rng::SplitMix64;
use flexgate_lab::{TruthFamily, published_groups, synthetic_templates};
use flexgate_policies::alloc::{Budget, CapRange, CurveAware, Elasticity, JobSpec, Objective};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::units::Fraction;
use std::sync::Arc;
fn main() {
    let groups = published_groups().unwrap();
    let templates = synthetic_templates(&groups, TruthFamily::Physical).unwrap();
    let n = 100_000;
    let mut rng = SplitMix64::new(0x5EED ^ n as u64);
    let jobs: Vec<JobSpec> = (0..n).map(|i| {
        let t = &templates[(rng.next_u64() % templates.len() as u64) as usize];
        let u = t.truth.uncapped();
        JobSpec { id: format!("job-{i}").into(), gpus: t.gpus, cap_range: CapRange::H200, uncapped_power: u.power, uncapped_tokens: u.tokens,
          elasticity: Elasticity::PredictedPfi { mean: (t.true_pfi.unwrap() + 0.241 * rng.normal()).clamp(0.5, 5.0), sd: 0.241, grid: None }, max_slowdown: None, priority: 1.0 }
    }).collect();
    let fam = Arc::new(CurveFamily::h200_generic());
    for tol in [0.005, 0.02] {
        let p = CurveAware::flexgate(fam.clone()).with_objective(Objective::Progress).with_hedging(true).with_hedge_tolerance(tol).prepare(&jobs).unwrap();
        let b = Budget::Cut(Fraction::new(0.3).unwrap());
        let (_, h) = p.allocate_explained(b);
        let t = std::time::Instant::now();
        for _ in 0..20 { std::hint::black_box(p.allocate(b)); }
        println!("tol {tol}: {:?} per plan {:?}", h, t.elapsed() / 20);
    }
}
