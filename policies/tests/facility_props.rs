//! Property tests of the facility model: forward(inverse(x)) meets x conservatively over the
//! plausible ranges of every parameter of a real site (host overhead, PSU and distribution
//! efficiencies, static load, cooling COP and lags: the bounds in [`params`]).
#![allow(clippy::unwrap_used)]

use flexgate_policies::facility::{
    Bounded, CoolingState, Efficiency, FacilityModel, FacilityParams, FacilityPoint, PreEvent, Timing,
};
use flexgate_policies::units::{Kilowatts, Watts};
use proptest::prelude::*;

/// A range `lo ≤ nominal ≤ hi` inside `[min, max]`.
fn bounded(min: f64, max: f64) -> impl Strategy<Value = Bounded> {
    prop::array::uniform3(min..=max).prop_map(|mut v| {
        v.sort_by(f64::total_cmp);
        Bounded::new(v[0], v[1], v[2])
    })
}

/// A marginal efficiency as the model bounds it: `hi` = 1.00 (the reduction bound).
fn marginal(min: f64) -> impl Strategy<Value = Bounded> {
    (min..=0.97f64, 0.0..=1.0f64).prop_map(|(lo, u)| Bounded::new(lo, lo + u * (1.0 - lo), 1.0))
}

/// Parameter sets over plausible site ranges, with site-measured quantities sized for ≤ 2,000 nodes.
fn params() -> impl Strategy<Value = FacilityParams> {
    (
        (
            bounded(0.0, 500.0),
            bounded(1.5, 2.8),
            marginal(0.86),
            bounded(0.90, 0.97),
            marginal(0.96),
            bounded(0.90, 0.99),
        ),
        (
            bounded(0.0, 1000.0),
            bounded(0.0, 1000.0),
            bounded(0.02, 0.30),
            bounded(60.0, 300.0),
            bounded(300.0, 1800.0),
        ),
        (
            300.0..=3600.0f64,
            0.0..=300.0f64,
            0.0..=300.0f64,
            4.0..=8.0f64,
            0.0..=100.0f64,
        ),
    )
        .prop_map(
            |(
                (static_site_kw, host, psu_m, psu_a, dist_m, dist_a),
                (fabric_kw, cool_fixed_kw, k_cool, cool_dead_time_s, cool_tau_s),
                (cool_credit_after_s, meter_err_kw, noise_kw, gpu_max_kw_per_node, cool_err),
            )| FacilityParams {
                static_site_kw,
                host_fixed_kw_per_node: host,
                eta_psu: Efficiency {
                    marginal: psu_m,
                    average: psu_a,
                },
                eta_dist: Efficiency {
                    marginal: dist_m,
                    average: dist_a,
                },
                fabric_kw,
                cool_fixed_kw,
                k_cool,
                cool_dead_time_s,
                cool_tau_s,
                cool_credit_after_s,
                meter_err_kw,
                noise_kw,
                gpu_max_kw_per_node,
                cooling_meter_err_kw: cool_err,
            },
        )
}

/// What is known before the event: 0 settled, 1 pre-event GPU power, 2 unknown, 3 measured
/// cooling. `frac` scales the pre-event GPU power or cooling; `seconds` is the time since.
#[derive(Debug, Clone, Copy)]
struct Situation {
    kind: u8,
    seconds: f64,
    frac: f64,
}

fn situation(kinds: std::ops::Range<u8>) -> impl Strategy<Value = Situation> {
    (kinds, prop_oneof![0.0..=1800.0f64, 0.0..=10_800.0f64], 0.0..=1.0f64).prop_map(|(kind, seconds, frac)| Situation {
        kind,
        seconds,
        frac,
    })
}

fn full_gpu(p: &FacilityParams, nodes: u32) -> Watts {
    Kilowatts(f64::from(nodes) * p.gpu_max_kw_per_node).to_watts()
}

impl Situation {
    /// The cooling state, and the pre-event GPU power a realisation starts from (if any).
    fn state(self, p: &FacilityParams, nodes: u32, full_meter: f64) -> (CoolingState, Option<Watts>) {
        let pre_gpu = full_gpu(p, nodes) * self.frac;
        let after = |pre_event| CoolingState::AfterStep {
            seconds: self.seconds,
            pre_event,
        };
        match self.kind {
            0 => (CoolingState::Settled, None),
            1 => (after(PreEvent::GpuPower { gpu: pre_gpu }), Some(pre_gpu)),
            2 => (after(PreEvent::Unknown), Some(pre_gpu)),
            _ => (
                after(PreEvent::MeasuredCooling {
                    cooling: Kilowatts(0.4 * full_meter * self.frac),
                }),
                None,
            ),
        }
    }
}

fn lerp(b: Bounded, u: f64) -> f64 {
    (b.lo + u * (b.hi - b.lo)).clamp(b.lo, b.hi)
}

/// A realisation of every parameter inside its range.
fn point(p: &FacilityParams, u: &[f64; 11]) -> FacilityPoint {
    FacilityPoint {
        static_site_kw: lerp(p.static_site_kw, u[0]),
        host_fixed_kw_per_node: lerp(p.host_fixed_kw_per_node, u[1]),
        eta_psu_avg: lerp(p.eta_psu.average, u[2]),
        eta_dist_avg: lerp(p.eta_dist.average, u[3]),
        eta_psu_marginal: lerp(p.eta_psu.marginal, u[4]),
        eta_dist_marginal: lerp(p.eta_dist.marginal, u[5]),
        fabric_kw: lerp(p.fabric_kw, u[6]),
        cool_fixed_kw: lerp(p.cool_fixed_kw, u[7]),
        k_cool: lerp(p.k_cool, u[8]),
        cool_dead_time_s: lerp(p.cool_dead_time_s, u[9]),
        cool_tau_s: lerp(p.cool_tau_s, u[10]),
    }
}

fn tol(x: f64) -> f64 {
    1e-9 * x.abs().max(1.0)
}

fn model_and_full_meter(p: &FacilityParams, nodes: u32) -> (FacilityModel, f64) {
    let m = FacilityModel::new(p.clone()).unwrap();
    let full = m
        .forward(full_gpu(p, nodes), nodes, &CoolingState::Settled)
        .unwrap()
        .hi
        .value();
    (m, full)
}

proptest! {
    /// (1) Ceiling: the forward model's upper-bound meter at the returned budget, plus the meter
    /// error, is within the FSL, in every cooling state; an infeasible ceiling gives zero.
    #[test]
    fn facility_ceiling_budget_keeps_the_upper_bound_under_fsl(
        p in params(),
        nodes in 1u32..2000,
        fsl_frac in 0.0..=1.3f64,
        sit in situation(0..4),
    ) {
        let (m, full) = model_and_full_meter(&p, nodes);
        let fsl = fsl_frac * full;
        let (state, _) = sit.state(&p, nodes, full);
        let b = m.ceiling_budget(Kilowatts(fsl), nodes, &state).unwrap();
        prop_assert!(b.gpu_budget.value() >= 0.0 && b.gpu_budget.is_finite());
        if b.feasible {
            let est = m.forward(b.gpu_budget, nodes, &state).unwrap();
            prop_assert!(
                est.hi.value() + p.meter_err_kw <= fsl + tol(fsl),
                "meter hi {} + err {} > fsl {}", est.hi, p.meter_err_kw, fsl
            );
            prop_assert!(est.hi.value() <= fsl + tol(fsl));
            prop_assert_eq!(b.infeasible_by, Kilowatts::ZERO);
        } else {
            prop_assert_eq!(b.gpu_budget, Watts::ZERO);
            prop_assert!(b.infeasible_by.value() >= 0.0);
            if matches!(state, CoolingState::Settled) {
                let zero = m.forward(Watts::ZERO, nodes, &state).unwrap();
                prop_assert!(zero.hi.value() + p.meter_err_kw >= fsl - tol(fsl));
            }
        }
    }

    /// (1′) Ceiling, stronger: any realisation of the parameters (and of the cooling lag) inside
    /// their ranges keeps the meter at the budget within FSL − meter_err, and lies inside the
    /// forward model's bounds.
    #[test]
    fn facility_ceiling_budget_holds_for_every_realisation(
        p in params(),
        nodes in 1u32..2000,
        fsl_frac in 0.0..=1.3f64,
        sit in situation(0..3),
        u in prop::array::uniform11(0.0..=1.0f64),
    ) {
        let (m, full) = model_and_full_meter(&p, nodes);
        let fsl = fsl_frac * full;
        let (state, pre_gpu) = sit.state(&p, nodes, full);
        let b = m.ceiling_budget(Kilowatts(fsl), nodes, &state).unwrap();
        let pt = point(&p, &u);
        let realised = match pre_gpu {
            Some(pre) => pt.meter_after_step(pre, b.gpu_budget, nodes, sit.seconds),
            None => pt.meter_settled(b.gpu_budget, nodes),
        };
        let est = m.forward(b.gpu_budget, nodes, &state).unwrap();
        let t = tol(est.hi.value());
        prop_assert!(realised.value() <= est.hi.value() + t, "{realised} > hi {}", est.hi);
        prop_assert!(realised.value() >= est.lo.value() - t, "{realised} < lo {}", est.lo);
        if b.feasible {
            prop_assert!(realised.value() + p.meter_err_kw <= fsl + tol(fsl));
        }
    }

    /// (2) Reduction: the forward model's lower-bound meter reduction from shedding the returned
    /// ΔG covers the commitment plus margins; so does any realisation, in the incremental
    /// (marginal) form and in the absolute form measured against a settled baseline.
    #[test]
    fn facility_reduction_requirement_delivers_at_least_the_target(
        p in params(),
        nodes in 1u32..2000,
        target in 0.0..=5000.0f64,
        settled in any::<bool>(),
        seconds in prop_oneof![0.0..=1800.0f64, 0.0..=10_800.0f64],
        extra_frac in 0.0..=1.0f64,
        u in prop::array::uniform11(0.0..=1.0f64),
    ) {
        let m = FacilityModel::new(p.clone()).unwrap();
        let timing = if settled { Timing::Settled } else { Timing::After { seconds } };
        let req = m.reduction_requirement(Kilowatts(target), timing).unwrap();
        let need = target + p.meter_err_kw + p.noise_kw;
        prop_assert!(req.gpu_shed.is_finite() && req.gpu_shed.value() >= 0.0);
        prop_assert!((req.required_meter_reduction.value() - need).abs() <= tol(need));

        let fwd = m.forward_reduction(req.gpu_shed, timing).unwrap();
        prop_assert!(fwd.lo.value() >= need - tol(need), "lo {} < need {need}", fwd.lo);
        prop_assert!(fwd.lo <= fwd.nominal && fwd.nominal <= fwd.hi);

        let pt = point(&p, &u);
        prop_assert!(pt.reduction(req.gpu_shed, timing).value() >= need - tol(need));

        let baseline_gpu = req.gpu_shed + full_gpu(&p, nodes) * extra_frac;
        let after_gpu = baseline_gpu - req.gpu_shed;
        let baseline = pt.meter_settled(baseline_gpu, nodes);
        let after = match timing {
            Timing::Settled => pt.meter_settled(after_gpu, nodes),
            Timing::After { seconds } => pt.meter_after_step(baseline_gpu, after_gpu, nodes, seconds),
        };
        prop_assert!(
            (baseline - after).value() >= need - tol(baseline.value()),
            "absolute drop {} < need {need}", baseline - after
        );
    }

    /// (3) The ceiling budget is monotone in the FSL (and the shortfall anti-monotone).
    #[test]
    fn facility_ceiling_budget_is_monotone_in_fsl(
        p in params(),
        nodes in 1u32..2000,
        a in -0.2..=1.3f64,
        b in -0.2..=1.3f64,
        sit in situation(0..4),
    ) {
        let (m, full) = model_and_full_meter(&p, nodes);
        let (state, _) = sit.state(&p, nodes, full);
        let (lo, hi) = if a <= b { (a * full, b * full) } else { (b * full, a * full) };
        let low = m.ceiling_budget(Kilowatts(lo), nodes, &state).unwrap();
        let high = m.ceiling_budget(Kilowatts(hi), nodes, &state).unwrap();
        prop_assert!(low.gpu_budget.value() <= high.gpu_budget.value() + tol(high.gpu_budget.value()));
        prop_assert!(low.infeasible_by.value() + tol(low.infeasible_by.value()) >= high.infeasible_by.value());
    }

    /// (4) Valid parameters give finite, non-negative, ordered outputs and chains.
    #[test]
    fn facility_outputs_are_finite_non_negative_and_ordered(
        p in params(),
        nodes in 0u32..2000,
        gpu_frac in 0.0..=1.0f64,
        fsl_frac in -0.2..=1.3f64,
        target in 0.0..=5000.0f64,
        sit in situation(0..4),
    ) {
        let (m, full) = model_and_full_meter(&p, nodes);
        let (state, _) = sit.state(&p, nodes, full);
        let gpu = full_gpu(&p, nodes) * gpu_frac;

        let est = m.forward(gpu, nodes, &state).unwrap();
        for v in [est.lo, est.nominal, est.hi] {
            prop_assert!(v.is_finite() && v.value() >= 0.0, "{est:?}");
        }
        let t = tol(est.hi.value());
        prop_assert!(est.lo.value() <= est.nominal.value() + t);
        prop_assert!(est.nominal.value() <= est.hi.value() + t);
        prop_assert!(est.chain.iter().all(|s| s.value.is_finite()));

        let b = m.ceiling_budget(Kilowatts(fsl_frac * full), nodes, &state).unwrap();
        for v in [b.gpu_budget.value(), b.infeasible_by.value(), b.heat_load.value(), b.cooling.value()] {
            prop_assert!(v.is_finite() && v >= 0.0, "{b:?}");
        }
        prop_assert!(b.chain.iter().all(|s| s.value.is_finite()));

        let timing = match state {
            CoolingState::Settled => Timing::Settled,
            CoolingState::AfterStep { seconds, .. } => Timing::After { seconds },
        };
        let req = m.reduction_requirement(Kilowatts(target), timing).unwrap();
        prop_assert!(req.gpu_shed.is_finite() && req.gpu_shed.value() >= 0.0);
        prop_assert!(req.multiplier.is_finite() && req.multiplier >= 1.0);
        prop_assert!(req.chain.iter().all(|s| s.value.is_finite()));
        let fwd = m.forward_reduction(gpu, timing).unwrap();
        for v in [fwd.lo, fwd.nominal, fwd.hi] {
            prop_assert!(v.is_finite() && v.value() >= 0.0);
        }
    }
}
