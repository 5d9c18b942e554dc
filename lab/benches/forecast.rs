//! The day-ahead forecast's cost.
//!
//! 10 000 running and 10 000 queued jobs drawn from the 25 synthetic templates of the published
//! H200 groups (each with a predicted PFI, as production usually knows them), prepared as the
//! gateway prepares them by default (progress, hedged):
//!
//! - `forecast_48h/10k+10k`: the 48-hour forecast, 192 quarter-hours × 21 levels, from the jobs'
//!   profiles (what a refresh costs when only the clock or the queue's times moved);
//! - `forecast_48h_prepared/10k+10k`: the same with every job's curve estimated first and its
//!   profile taken (what a refresh costs when the set of jobs changed);
//! - `flexibility_curve_21/10k`: the site's flexibility curve now, 21 levels, over the 10 000
//!   running jobs: the yardstick the forecast is set against in the same run;
//! - `screen_queue/100k`: reading a scheduler's answer of 100 000 queued jobs (a third with
//!   absurd times) down to the 10 000 expected soonest, as the gateway does before a forecast.
use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use flexgate_lab::rng::SplitMix64;
use flexgate_lab::{TruthFamily, published_groups, synthetic_templates};
use flexgate_policies::alloc::{CurveAware, Elasticity, JobSpec, Objective};
use flexgate_policies::control::cluster::{QueuedJob, SchedulerView};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::forecast::runtime::RuntimeModel;
use flexgate_policies::forecast::{Fill, ForecastInput, ForecastParams, JobTiming, forecast, screen};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const RUNNING: usize = 10_000;
const QUEUED: usize = 10_000;

fn jobs() -> Vec<JobSpec> {
    let groups = published_groups().expect("the embedded group table parses");
    let templates = synthetic_templates(&groups, TruthFamily::Physical).expect("templates calibrate");
    let mut rng = SplitMix64::new(0xF0CA);
    (0..RUNNING + QUEUED)
        .map(|i| {
            let t = &templates[(rng.next_u64() % templates.len() as u64) as usize];
            let pfi = t.true_pfi.expect("published PFI");
            JobSpec {
                id: format!("job-{i}").into(),
                gpus: t.gpus,
                cap_range: t.cap_range,
                uncapped_power: t.truth.uncapped().power,
                uncapped_tokens: t.truth.uncapped().tokens,
                elasticity: Elasticity::PredictedPfi {
                    mean: (pfi + 0.241 * rng.normal()).clamp(0.5, 5.0),
                    sd: 0.241,
                    grid: None,
                },
                max_slowdown: None,
                priority: 1.0,
            }
        })
        .collect()
}

fn timing() -> Vec<JobTiming> {
    let mut rng = SplitMix64::new(0x71E);
    (0..RUNNING + QUEUED)
        .map(|i| {
            let limit = 3600.0 * (1.0 + 71.0 * rng.next_f64()).ceil();
            if i < RUNNING {
                JobTiming::Running {
                    elapsed_s: limit * 0.9 * rng.next_f64(),
                    limit_s: Some(limit),
                }
            } else {
                JobTiming::Queued {
                    expected_start_in_s: (rng.next_f64() < 0.8).then(|| 48.0 * 3600.0 * rng.next_f64()),
                    limit_s: Some(limit),
                }
            }
        })
        .collect()
}

fn benches(c: &mut Criterion) {
    let policy = CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()))
        .with_objective(Objective::Progress)
        .with_hedging(true);
    let jobs = jobs();
    let timing = timing();
    let gpus: Vec<u32> = jobs.iter().map(|j| j.gpus).collect();
    let runtime = RuntimeModel::default();
    let prepared = policy.prepare(&jobs).expect("valid jobs");
    let profiles = prepared.shed_profiles();
    let busy: f64 = gpus[..RUNNING].iter().map(|&g| f64::from(g)).sum();
    let fill = Fill::from_mix(
        profiles[..RUNNING].iter().zip(gpus[..RUNNING].iter().copied()),
        busy,
        0.5,
    )
    .expect("a mix");
    let base = ForecastInput {
        now: chrono::DateTime::UNIX_EPOCH,
        profiles: &profiles,
        gpus: &gpus,
        timing: &timing,
        runtime: &runtime,
        fill: Some(&fill),
        meter_per_gpu_w: 1.1,
        now_available_w: None,
        params: ForecastParams::default(),
    };
    let steps = forecast(&base).steps;
    assert_eq!((steps.len(), steps[0].levels.len()), (192, 21));

    let mut group = c.benchmark_group("forecast");
    group
        .sample_size(20)
        .sampling_mode(SamplingMode::Flat)
        .measurement_time(Duration::from_secs(5));
    group.bench_function("forecast_48h/10k+10k", |b| {
        b.iter(|| black_box(forecast(black_box(&base))));
    });
    group.bench_function("forecast_48h_prepared/10k+10k", |b| {
        b.iter(|| {
            let prepared = policy.prepare(black_box(&jobs)).expect("valid jobs");
            let profiles = prepared.shed_profiles();
            black_box(forecast(&ForecastInput {
                profiles: &profiles,
                ..base
            }))
        });
    });
    let running = policy.prepare(&jobs[..RUNNING]).expect("valid jobs");
    group.bench_function("flexibility_curve_21/10k", |b| {
        b.iter(|| black_box(running.flexibility_curve(black_box(21))));
    });
    let now = chrono::DateTime::UNIX_EPOCH + chrono::Duration::days(20_000);
    let mut rng = SplitMix64::new(0x0E0E);
    let answer = SchedulerView {
        at: now,
        queue: Ok((0..100_000u32)
            .map(|i| QueuedJob {
                id: format!("q{i}").into(),
                gpus: 8,
                signature: Some(format!("cfg-{}", i % 50).into()),
                pfi: None,
                max_slowdown: None,
                priority: 1.0,
                expected_start: Some(
                    now + chrono::Duration::seconds((rng.next_f64() * 7.0 * 86_400.0) as i64 - 86_400),
                ),
                time_limit_s: Some(if i % 3 == 0 {
                    1e9
                } else {
                    3600.0 * (1.0 + 47.0 * rng.next_f64())
                }),
            })
            .collect()),
    };
    group.bench_function("screen_queue/100k", |b| {
        b.iter(|| black_box(screen::queue(Some(black_box(&answer)), now)));
    });
    group.finish();
}

criterion_group!(forecast_benches, benches);
criterion_main!(forecast_benches);
