use super::*;
use crate::alloc::{CapRange, CurveAware, Elasticity, JobSpec, Objective};
use crate::control::flexibility::at_the_meter;
use crate::estimate::CurveFamily;
use crate::facility::{FacilityModel, FacilityParams, Timing};
use crate::units::{TokensPerSec, Watts};
use chrono::TimeZone;
use proptest::prelude::*;
use std::sync::Arc;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 5, 12, 0, 0).single().expect("time")
}

fn job(i: usize, gpus: u32, pfi: f64) -> JobSpec {
    JobSpec {
        id: format!("j{i}").into(),
        gpus,
        cap_range: CapRange::H200,
        uncapped_power: Watts(f64::from(gpus) * 660.0),
        uncapped_tokens: TokensPerSec(1_000.0 * f64::from(gpus) * (1.0 + i as f64 % 3.0)),
        elasticity: Elasticity::PredictedPfi {
            mean: pfi,
            sd: 0.2,
            grid: None,
        },
        max_slowdown: None,
        priority: 1.0,
    }
}

fn policy(hedging: bool) -> CurveAware {
    CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()))
        .with_objective(Objective::Progress)
        .with_hedging(hedging)
}

fn meter_per_w(facility: &FacilityModel) -> f64 {
    facility
        .forward_reduction(Watts(1000.0), Timing::Settled)
        .expect("a reduction")
        .lo
        .value()
}

/// The model alone, on the jobs running now with nothing ending soon, gives the allocator's
/// own flexibility curve (no hedge: the same cheapest-watts-first plan) at the ceiling.
#[test]
fn hour_zero_is_the_flexibility_curve_now() {
    let jobs: Vec<JobSpec> = (0..12).map(|i| job(i, 8 << (i % 3), 1.1 + 0.13 * i as f64)).collect();
    let facility = FacilityModel::new(FacilityParams::default()).expect("facility");
    let prepared = policy(false).prepare(&jobs).expect("prepared");
    let curve = at_the_meter(&prepared.flexibility_curve(101), &facility, now());
    let profiles = prepared.shed_profiles();
    let gpus: Vec<u32> = jobs.iter().map(|j| j.gpus).collect();
    let timing = vec![
        JobTiming::Running {
            elapsed_s: 3600.0,
            limit_s: None
        };
        jobs.len()
    ];
    let runtime = RuntimeModel::default();
    for ceiling in [0.02, 0.05, 0.10, 0.20] {
        let expected = available_within(&curve, ceiling);
        let input = ForecastInput {
            now: now(),
            profiles: &profiles,
            gpus: &gpus,
            timing: &timing,
            runtime: &runtime,
            fill: None,
            meter_per_gpu_w: meter_per_w(&facility),
            now_available_w: None,
            params: ForecastParams {
                cost_ceiling: ceiling,
                steps: 4,
                ..ForecastParams::default()
            },
        };
        let alone = forecast(&input);
        let step0 = alone.steps[0].available_w;
        assert!(
            (step0.p50 - expected).abs() <= 0.01 * expected.max(1.0),
            "ceiling {ceiling}: model {} W, curve {expected} W",
            step0.p50
        );
        // Nothing is uncertain now.
        assert!((step0.p10 - step0.p50).abs() < 1e-6 && (step0.p90 - step0.p50).abs() < 1e-6);
        // Scaled to the curve (hedges included, as the gateway publishes it): exactly it.
        let hedged = at_the_meter(
            &policy(true).prepare(&jobs).expect("prepared").flexibility_curve(21),
            &facility,
            now(),
        );
        let now_w = available_within(&hedged, ceiling);
        let scaled = forecast(&ForecastInput {
            now_available_w: Some(now_w),
            ..input
        });
        assert!((scaled.steps[0].available_w.p50 - now_w).abs() < 1e-6 * now_w.max(1.0));
    }
}

/// One job of a random fleet: GPUs, PFI, hours running, its limit in hours, queued, expected
/// start in hours.
type JobDraw = (u32, f64, f64, Option<f64>, bool, Option<f64>);

fn fleet() -> impl Strategy<Value = Vec<JobDraw>> {
    // (gpus, pfi, elapsed h, limit h, queued, expected start h)
    prop::collection::vec(
        (
            prop::sample::select(vec![1u32, 2, 4, 8, 16, 32]),
            1.1..2.7f64,
            0.0..30.0f64,
            prop::option::of(1.0..72.0f64),
            any::<bool>(),
            prop::option::of(0.0..40.0f64),
        ),
        1..40,
    )
}

fn build(spec: &[JobDraw]) -> (Vec<ShedProfile>, Vec<u32>, Vec<JobTiming>, ShedProfile) {
    let jobs: Vec<JobSpec> = spec.iter().enumerate().map(|(i, s)| job(i, s.0, s.1)).collect();
    let prepared = policy(false).prepare(&jobs).expect("prepared");
    let typical = policy(false)
        .prepare(&[job(999, 8, 1.8)])
        .expect("typical")
        .shed_profiles()
        .remove(0);
    let timing = spec
        .iter()
        .map(|&(_, _, elapsed, limit, queued, start)| {
            let limit_s = limit.map(|h| h * 3600.0);
            if queued {
                JobTiming::Queued {
                    expected_start_in_s: start.map(|h| h * 3600.0),
                    limit_s,
                }
            } else {
                JobTiming::Running {
                    elapsed_s: (elapsed * 3600.0).min(limit_s.unwrap_or(f64::MAX) * 0.99),
                    limit_s,
                }
            }
        })
        .collect();
    (
        prepared.shed_profiles(),
        jobs.iter().map(|j| j.gpus).collect(),
        timing,
        typical,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Ordered percentiles; a band that never narrows with the horizon; no job counted past its
    /// time limit; the known jobs never counted above their number.
    #[test]
    fn bands_are_ordered_widen_and_never_count_a_job_past_its_end(spec in fleet(), busy in 0.0..200.0f64, with_fill in any::<bool>()) {
        let (profiles, gpus, timing, typical) = build(&spec);
        let runtime = RuntimeModel::default();
        let fill = Fill::from_typical_job(&typical, 8, busy, 0.4);
        let f = forecast(&ForecastInput {
            now: now(),
            profiles: &profiles,
            gpus: &gpus,
            timing: &timing,
            runtime: &runtime,
            fill: with_fill.then_some(&fill),
            meter_per_gpu_w: 1.1,
            now_available_w: None,
            params: ForecastParams { steps: 192, ..ForecastParams::default() },
        });
        let mut last_upper = 0.0;
        for (k, step) in f.steps.iter().enumerate() {
            let b = step.available_w;
            prop_assert!(b.p10 <= b.p50 + 1e-9 && b.p50 <= b.p90 + 1e-9, "{b:?}");
            prop_assert!(b.p10 >= 0.0);
            let upper = b.p90 - b.p50;
            prop_assert!(upper >= last_upper - 1e-6 * (1.0 + last_upper), "step {k}: {upper} after {last_upper}");
            last_upper = upper;
            let ahead = 900.0 * k as f64;
            let alive = timing.iter().filter(|t| match t {
                JobTiming::Running { elapsed_s, limit_s } => limit_s.is_none_or(|l| elapsed_s + ahead < l),
                JobTiming::Queued { limit_s, .. } => limit_s.is_none_or(|l| ahead < l + 40.0 * 3600.0 * 1.5),
            }).count();
            prop_assert!(step.jobs_expected <= alive as f64 + 1e-9);
            for w in step.levels.windows(2) {
                prop_assert!(w[1].shed_w >= w[0].shed_w - 1e-9 && w[1].cost >= w[0].cost - 1e-12);
            }
        }
    }
}

/// A running job past its limit contributes nothing; one whose limit is far off does.
#[test]
fn a_job_past_its_limit_is_not_counted() {
    let (profiles, gpus, _, _) = build(&[(8, 2.0, 0.0, None, false, None), (8, 2.0, 0.0, None, false, None)]);
    let timing = [
        JobTiming::Running {
            elapsed_s: 3000.0,
            limit_s: Some(3600.0),
        },
        JobTiming::Running {
            elapsed_s: 0.0,
            limit_s: Some(100.0 * 3600.0),
        },
    ];
    let runtime = RuntimeModel::default();
    let f = forecast(&ForecastInput {
        now: now(),
        profiles: &profiles,
        gpus: &gpus,
        timing: &timing,
        runtime: &runtime,
        fill: None,
        meter_per_gpu_w: 1.0,
        now_available_w: None,
        params: ForecastParams {
            steps: 8,
            ..ForecastParams::default()
        },
    });
    assert!((f.steps[0].jobs_expected - 2.0).abs() < 1e-9);
    // From 10 minutes on, the first is past its limit.
    assert!(f.steps[1].jobs_expected <= 1.0 + 1e-9, "{:?}", f.steps[1]);
    assert!(f.steps[1].available_w.p50 < f.steps[0].available_w.p50);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The forecast's prepared clocks give the runtime model's own figures: a job runs `ahead`
    /// on with probability started-by × survival, as `RuntimeModel` defines them.
    #[test]
    fn the_prepared_clock_agrees_with_the_runtime_model(
        queued in any::<bool>(),
        elapsed_h in 0.0..50.0f64,
        limit_h in prop::option::of(0.5..80.0f64),
        expected_h in prop::option::of(0.0..40.0f64),
        learned in any::<bool>(),
    ) {
        let mut model = RuntimeModel::default();
        if learned {
            for i in 0..40 {
                model.observe(f64::from(i % 9 + 1) * 1800.0, 6.0 * 3600.0);
            }
        }
        let limit_s = limit_h.map(|h| h * 3600.0);
        let timing = if queued {
            JobTiming::Queued { expected_start_in_s: expected_h.map(|h| h * 3600.0), limit_s }
        } else {
            JobTiming::Running { elapsed_s: (elapsed_h * 3600.0).min(limit_s.unwrap_or(f64::MAX) * 0.999), limit_s }
        };
        let sorted = Sorted::new(&model);
        let mut tracker = sorted.tracker(timing);
        for k in 0..192 {
            let ahead = 900.0 * f64::from(k);
            let fast = sorted.presence(&mut tracker, ahead);
            let reference = match timing {
                JobTiming::Running { elapsed_s, limit_s } => model.survival(elapsed_s, limit_s, ahead),
                JobTiming::Queued { expected_start_in_s, limit_s } => {
                    let started = model.started_by(expected_start_in_s, ahead);
                    if started <= 0.0 {
                        0.0
                    } else {
                        let start = model.expected_start_in(expected_start_in_s).min(ahead);
                        started * model.survival(0.0, limit_s, ahead - start)
                    }
                }
            };
            prop_assert!((fast - reference).abs() < 1e-9, "step {k}: {fast} vs {reference} for {timing:?}");
        }
    }
}

/// A hedged curve can dip (a deeper plan guarded less than a shallower one): what the site can
/// shed within a ceiling stops where the curve first crosses it, since an event asking for a
/// depth past that crossing would get a plan costing more than the ceiling, however cheap a
/// deeper level is.
#[test]
fn a_dip_past_the_ceiling_does_not_count() {
    use crate::control::flexibility::{FlexFrom, SiteFlexPoint, SiteFlexibility};
    let point = |kw: f64, lost: f64| SiteFlexPoint {
        gpu_shed_w: kw * 800.0,
        meter_shed_kw: kw,
        meter_shed_kw_nominal: kw,
        progress_lost: lost / 100.0,
        tokens_lost_per_s: lost,
        value_lost: lost,
        value_lost_range: None,
        jobs_capped: 1,
        tiers_touched: Vec::new(),
    };
    let curve = SiteFlexibility {
        at: now(),
        objective: Objective::Tokens,
        source: "planner_estimate",
        from: FlexFrom::Uncapped,
        uncapped_power_w: 10_000.0,
        uncapped_value: 100.0,
        from_power_w: 10_000.0,
        from_value_lost: 0.0,
        // Shares of the value lost: 0, 1 %, 3 %, then 0.5 % at the deepest level.
        points: vec![point(0.0, 0.0), point(1.0, 1.0), point(2.0, 3.0), point(3.0, 0.5)],
        from_draws_w: Vec::new(),
    };
    // 2 % is crossed halfway between 1 and 2 kW; the cheap 3 kW level does not count.
    assert!((available_within(&curve, 0.02) - 1_500.0).abs() < 1e-9);
    // With every level within the ceiling, the deepest.
    assert!((available_within(&curve, 0.05) - 3_000.0).abs() < 1e-9);
}
