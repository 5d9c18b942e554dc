//! Planning benchmarks.
//!
//! Fleets of N jobs are drawn (deterministically) from the 25 synthetic templates of the
//! published H200 groups, with physical truth curves. Policies see what production usually has,
//! a telemetry-predicted PFI: the template's true PFI plus N(0, 0.241²) noise, with sd 0.241; the
//! oracle sees the true curves.
//!
//! - `flexgate_allocate/N`: `Prepared::allocate` for a 30 % cut, curves estimated beforehand
//!   (what a demand-response event costs once jobs are known);
//! - `flexgate_allocate_hedged_progress/N`: the same plan as the gateway makes it by default,
//!   maximising GPU-weighted progress with the hedge against the equal cut on;
//! - `flexgate_allocate_hedged_progress_measured/N`: the same plan on jobs known by their own
//!   noisy sweeps (5 caps, 1 % noise), whose error and band the hedge guards;
//! - `flexibility_curve_20_hedged_progress/N`: the site's 20-level flexibility curve, likewise;
//! - `flexgate_plan_end_to_end/N`: `plan`, estimation of every curve and floor included;
//! - `equal_plan/N`: the paper's equal-cut baseline, for comparison;
//! - `oracle_allocate/N`: the oracle's allocation on the prepared true curves;
//! - `fleet_experiment/500x100x9`: the whole default experiment (500 workloads × 100 jobs × 9
//!   cuts, five policies), its workloads spread over the machine's cores as `simulate` runs it;
//! - `fleet_experiment_one_thread/500x100x9`: the same on one thread;
//! - `learning_lookup/N`: what the gateway does per job and per inventory pass to plan on what
//!   it measured: `JobEvidence::learned` for every job (a third with a partial curve, a third
//!   full, a third only uncapped), the cost a plan pays when knowledge changed;
//! - `learning_intake/N`: one telemetry pass's steady readings folded into the jobs' evidence
//!   (`worth_recording` and `JobEvidence::add` per job).
//!
//! Sample sizes and times are set so that the whole file runs in a few minutes on two cores.
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use flexgate_lab::rng::SplitMix64;
use flexgate_lab::truth::SweepPlan;
use flexgate_lab::{
    ExperimentConfig, JobTemplate, TruthFamily, published_groups, run_experiment_on, synthetic_templates,
};
use flexgate_policies::alloc::{
    AllocationPolicy, Budget, CurveAware, Elasticity, JobSpec, Objective, Proportional, Weighting,
};
use flexgate_policies::control::entry::ThroughputPoint;
use flexgate_policies::control::evidence::{JobEvidence, worth_recording};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::units::{Fraction, Watts, WattsPerGpu};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

/// Fleet sizes of the scaling benchmarks.
const SIZES: [usize; 3] = [100, 10_000, 100_000];
/// The paper's leave-one-out RMSE of the PFI predictor, used as the prediction's sd.
const PREDICTOR_SD: f64 = 0.241;

fn templates() -> Vec<JobTemplate> {
    let groups = published_groups().expect("the embedded group table parses");
    synthetic_templates(&groups, TruthFamily::Physical).expect("every published group calibrates")
}

/// `n` jobs drawn uniformly from the templates, each with a noisy predicted PFI, and the same jobs
/// with their true curves for the oracle.
fn fleet(templates: &[JobTemplate], n: usize) -> (Vec<JobSpec>, Vec<JobSpec>) {
    let mut rng = SplitMix64::new(0x5EED ^ n as u64);
    let mut jobs = Vec::with_capacity(n);
    let mut oracle_jobs = Vec::with_capacity(n);
    for i in 0..n {
        let t = &templates[(rng.next_u64() % templates.len() as u64) as usize];
        let true_pfi = t.true_pfi.expect("synthetic templates carry their published PFI");
        let uncapped = t.truth.uncapped();
        let job = JobSpec {
            id: format!("job-{i}").into(),
            gpus: t.gpus,
            cap_range: t.cap_range,
            uncapped_power: uncapped.power,
            uncapped_tokens: uncapped.tokens,
            elasticity: Elasticity::PredictedPfi {
                mean: (true_pfi + PREDICTOR_SD * rng.normal()).clamp(0.5, 5.0),
                sd: PREDICTOR_SD,
                grid: None,
            },
            max_slowdown: None,
            priority: 1.0,
        };
        oracle_jobs.push(JobSpec {
            elasticity: Elasticity::exact(t.truth.clone()),
            ..job.clone()
        });
        jobs.push(job);
    }
    (jobs, oracle_jobs)
}

/// `jobs` as the gateway knows them once it has measured each one: its own sweep of its
/// template's true curve at 5 caps, each point the mean of 4 readings 1 % off.
fn measured_fleet(templates: &[JobTemplate], jobs: &[JobSpec]) -> Vec<JobSpec> {
    let plan = SweepPlan {
        caps: [250.0, 350.0, 450.0, 550.0, 620.0].map(WattsPerGpu).to_vec(),
        readings: 4,
        noise: 0.01,
    };
    let mut rng = SplitMix64::new(0x5EE9 ^ jobs.len() as u64);
    jobs.iter()
        .enumerate()
        .map(|(i, job)| {
            let t = templates
                .iter()
                .find(|t| t.truth.uncapped().power == job.uncapped_power && t.gpus == job.gpus)
                .unwrap_or(&templates[i % templates.len()]);
            let elasticity = plan
                .measure(&t.truth, t.cap_range.max, &mut rng)
                .expect("a sweep of a valid curve");
            JobSpec {
                elasticity,
                uncapped_power: t.truth.uncapped().power,
                uncapped_tokens: t.truth.uncapped().tokens,
                ..job.clone()
            }
        })
        .collect()
}

fn cut() -> Budget {
    Budget::Cut(Fraction::new(0.3).expect("0.3 is a fraction"))
}

/// Fewer samples, taken flat, for the large fleets whose iterations last milliseconds or more.
fn configure(group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>, n: usize) {
    group.throughput(Throughput::Elements(n as u64));
    let (samples, mode, seconds) = match n {
        100_000.. => (10, SamplingMode::Flat, 6),
        10_000.. => (20, SamplingMode::Flat, 3),
        _ => (50, SamplingMode::Auto, 3),
    };
    group
        .sample_size(samples)
        .sampling_mode(mode)
        .measurement_time(Duration::from_secs(seconds));
}

fn scaling(c: &mut Criterion) {
    let family = Arc::new(CurveFamily::h200_generic());
    let templates = templates();
    let fleets: Vec<(usize, Vec<JobSpec>, Vec<JobSpec>)> = SIZES
        .iter()
        .map(|&n| {
            let (jobs, oracle_jobs) = fleet(&templates, n);
            (n, jobs, oracle_jobs)
        })
        .collect();
    let family_for_defaults = family.clone();
    let flexgate = CurveAware::flexgate(family.clone());
    let oracle = CurveAware::oracle(family.clone());
    let equal = Proportional::new(Weighting::Equal, family);

    let mut group = c.benchmark_group("flexgate_allocate");
    for (n, jobs, _) in &fleets {
        configure(&mut group, *n);
        let prepared = flexgate.prepare(jobs).expect("synthetic jobs are valid");
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(prepared.allocate(black_box(cut()))));
        });
    }
    group.finish();

    // What the gateway runs by default: the progress objective, hedged.
    let gateway_default = CurveAware::flexgate(family_for_defaults.clone())
        .with_objective(Objective::Progress)
        .with_hedging(true);
    let mut group = c.benchmark_group("flexgate_allocate_hedged_progress");
    for (n, jobs, _) in &fleets {
        configure(&mut group, *n);
        let prepared = gateway_default.prepare(jobs).expect("synthetic jobs are valid");
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(prepared.allocate(black_box(cut()))));
        });
    }
    group.finish();
    // The same on jobs the gateway measured: each job's own noisy sweep (5 caps, 1 % noise
    // over 4 readings), denoised at preparation, its error and band guarded by the hedge.
    let mut group = c.benchmark_group("flexgate_allocate_hedged_progress_measured");
    for (n, jobs, _) in &fleets {
        configure(&mut group, *n);
        let measured = measured_fleet(&templates, jobs);
        let prepared = gateway_default.prepare(&measured).expect("synthetic jobs are valid");
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(prepared.allocate(black_box(cut()))));
        });
    }
    group.finish();
    let mut group = c.benchmark_group("flexibility_curve_20_hedged_progress");
    for (n, jobs, _) in fleets.iter().filter(|(n, _, _)| *n <= 10_000) {
        configure(&mut group, *n);
        let prepared = gateway_default.prepare(jobs).expect("synthetic jobs are valid");
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(prepared.flexibility_curve(black_box(20))));
        });
    }
    group.finish();

    // The site's flexibility curve: 20 shed levels, each planned by the allocator.
    let mut group = c.benchmark_group("flexibility_curve_20");
    for (n, jobs, _) in fleets.iter().filter(|(n, _, _)| *n <= 10_000) {
        configure(&mut group, *n);
        let prepared = flexgate.prepare(jobs).expect("synthetic jobs are valid");
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(prepared.flexibility_curve(black_box(20))));
        });
    }
    group.finish();
    // Baseline: the same 20 levels as 20 full plans (what the curve did before it shared the
    // allocator's shedding without writing entries).
    let mut group = c.benchmark_group("flexibility_curve_20_by_allocate");
    for (n, jobs, _) in fleets.iter().filter(|(n, _, _)| *n <= 10_000) {
        configure(&mut group, *n);
        let prepared = flexgate.prepare(jobs).expect("synthetic jobs are valid");
        let uncapped: Watts = jobs.iter().map(|j| j.uncapped_power).sum();
        let most = prepared.flexibility_curve(2).max_shed;
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                for k in 0..20 {
                    let shed = Watts(most.value() * f64::from(k) / 19.0);
                    black_box(prepared.allocate(Budget::Absolute(uncapped - shed)));
                }
            });
        });
    }
    group.finish();

    let mut group = c.benchmark_group("flexgate_plan_end_to_end");
    for (n, jobs, _) in &fleets {
        configure(&mut group, *n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(flexgate.plan(black_box(jobs), cut())));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("equal_plan");
    for (n, jobs, _) in &fleets {
        configure(&mut group, *n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(equal.plan(black_box(jobs), cut())));
        });
    }
    group.finish();

    let mut group = c.benchmark_group("oracle_allocate");
    for (n, _, oracle_jobs) in &fleets {
        configure(&mut group, *n);
        let prepared = oracle.prepare(oracle_jobs).expect("synthetic jobs are valid");
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| black_box(prepared.allocate(black_box(cut()))));
        });
    }
    group.finish();
}

/// Evidence for `n` jobs: every job measured uncapped; a third also at one or two caps (a partial
/// curve), a third at four caps down to 250 W (a full curve).
fn evidence(templates: &[JobTemplate], n: usize) -> Vec<(JobSpec, JobEvidence)> {
    let (jobs, _) = fleet(templates, n);
    jobs.into_iter()
        .enumerate()
        .map(|(i, job)| {
            let t = &templates[i % templates.len()];
            let mut e = JobEvidence::default();
            let caps: &[f64] = match i % 3 {
                0 => &[],
                1 => &[550.0, 450.0],
                _ => &[600.0, 450.0, 350.0, 250.0],
            };
            for (k, &cap) in std::iter::once(&700.0).chain(caps).enumerate() {
                let cap = WattsPerGpu(cap);
                e.add(&ThroughputPoint {
                    at: chrono::DateTime::from_timestamp(1_800_000_000 + k as i64, 0).expect("valid"),
                    job: job.id.to_string(),
                    cap_w_per_gpu: cap.value(),
                    power_w: t.truth.power_at_cap(cap).value(),
                    tokens_per_s: t.truth.tokens_at_cap(cap).value(),
                    uncapped: k == 0,
                    max_slowdown: None,
                    profile: None,
                    gpus: None,
                });
            }
            (job, e)
        })
        .collect()
}

fn learning(c: &mut Criterion) {
    let templates = templates();
    for n in [1_000, 10_000] {
        let measured = evidence(&templates, n);
        let mut group = c.benchmark_group("learning_lookup");
        configure(&mut group, n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let upgraded = measured.iter().filter_map(|(job, e)| e.learned(black_box(job))).count();
                black_box(upgraded)
            });
        });
        group.finish();
        let mut group = c.benchmark_group("learning_intake");
        configure(&mut group, n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_batched_ref(
                || measured.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
                |evidence| {
                    for (i, e) in evidence.iter_mut().enumerate() {
                        let at = chrono::DateTime::from_timestamp(1_800_001_000, 0).expect("valid");
                        let tokens = 1000.0 + i as f64;
                        if worth_recording(e.previous(false, 500.0), tokens, at) {
                            e.add(&ThroughputPoint {
                                at,
                                job: String::new(),
                                cap_w_per_gpu: 500.0,
                                power_w: 4000.0,
                                tokens_per_s: tokens,
                                uncapped: false,
                                max_slowdown: None,
                                profile: None,
                                gpus: None,
                            });
                        }
                    }
                },
                criterion::BatchSize::LargeInput,
            );
        });
        group.finish();
        // What a learned upgrade of one job costs the next plan: everything re-estimated (the
        // baseline) against only the changed job (`prepare_updating`).
        let (jobs, _) = fleet(&templates, n);
        let policy = CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()));
        let previous = policy.prepare_owned(jobs.clone()).expect("valid fleet");
        let mut upgraded = jobs.clone();
        upgraded[n / 2].elasticity = Elasticity::Pfi {
            value: 2.0,
            grid: flexgate_policies::pfi::CapGrid::paper_default_for(upgraded[n / 2].gpus),
        };
        let mut group = c.benchmark_group("upgrade_then_plan_full");
        configure(&mut group, n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let prepared = policy.prepare_owned(black_box(upgraded.clone())).expect("valid");
                black_box(prepared.allocate(cut()))
            });
        });
        group.finish();
        let mut group = c.benchmark_group("upgrade_then_plan_incremental");
        configure(&mut group, n);
        group.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter(|| {
                let prepared = policy
                    .prepare_updating(black_box(upgraded.clone()), &previous)
                    .expect("valid");
                black_box(prepared.allocate(cut()))
            });
        });
        group.finish();
    }
}

fn experiment(c: &mut Criterion) {
    let templates = templates();
    let config = ExperimentConfig::default();
    let id = format!("{}x{}x{}", config.workloads, config.jobs, config.cuts.len());
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    // As `simulate` runs it (every core), then on one thread: what it costs without the others.
    for (name, threads) in [("fleet_experiment", cores), ("fleet_experiment_one_thread", 1)] {
        let mut group = c.benchmark_group(name);
        group
            .sample_size(10)
            .sampling_mode(SamplingMode::Flat)
            .warm_up_time(Duration::from_millis(500))
            .measurement_time(Duration::from_secs(10));
        group.bench_function(&id, |b| {
            b.iter(|| black_box(run_experiment_on(threads, &config, &templates, "bench", &mut |_| {})));
        });
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = scaling, learning, experiment
}
criterion_main!(benches);
