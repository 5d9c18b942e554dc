//! The forecast's backtest: a cluster whose jobs arrive, queue, run and end, forecast as the
//! gateway would forecast it, and scored against the flexibility that then existed.
//!
//! **The generator** (deterministic from its seed):
//! - a cluster of [`BacktestConfig::gpus`] GPUs, simulated in quarter-hours;
//! - arrivals: a Poisson process whose rate follows the day (twice as many submissions at 14:00
//!   as at 02:00), scaled so that the work offered is [`BacktestConfig::load`] of the cluster;
//! - GPUs per job: powers of two from 1 to 64 (8 the most common);
//! - runtimes: log-normal, median 4 h, σ = 1.2 (heavy-tailed: one job in a hundred runs over
//!   two days), at least 15 minutes, at most 7 days;
//! - time limits: the runtime times a factor uniform in [1.2, 4], rounded up to the hour, at
//!   most 7 days (users overstate); one job in ten runs into its limit and is killed there;
//! - the GPUs the site usually keeps busy: the last two days' mean; the unknown jobs are like
//!   the jobs running now and the last 200 that ended ([`Fill::from_mix`]);
//! - configurations: each job is a re-run of a known configuration with probability
//!   [`BacktestConfig::rerun_share`] (its PFI measured: the profile keyed by its signature),
//!   else a new one, with a predicted PFI (error 0.24, the paper's predictor) for half of them
//!   and nothing known for the others; true PFIs drawn from the published range 1.10–2.67;
//! - the scheduler: first come, first served, with backfill (a later job that fits the free
//!   GPUs starts); its expected starts (what `squeue --start` prints) assume every running job
//!   runs to its limit and nothing is backfilled, as Slurm's do.
//!
//! **Scoring.** Every [`BacktestConfig::every_h`] hours after a warm-up, the forecast is made
//! from what the gateway would know then (running jobs with their elapsed time and limits,
//! queued jobs with their expected starts, the runtimes seen so far, the GPUs the site kept
//! busy), and for each horizon (1, 6, 24, 48 h) set against the flexibility of the jobs then
//! running, computed the same way with nothing uncertain: the most the site could shed within
//! the cost ceiling (GPU-board watts: the facility model is a constant factor and changes no
//! ratio). Per horizon: how often the truth fell in the P10–P90 band (calibration: 80 % is
//! right), the P50's mean absolute error as a share of the mean truth, the same for the naive
//! forecast (the fleet now persists), and how often the truth fell below the P10 (a declaration
//! at 90 % confidence would have been short).

use crate::rng::SplitMix64;
use chrono::{DateTime, Duration, TimeZone, Utc};
use flexgate_policies::alloc::{CapRange, CurveAware, Elasticity, JobSpec, Objective, ShedProfile};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::forecast::runtime::RuntimeModel;
use flexgate_policies::forecast::{Fill, ForecastInput, ForecastParams, JobTiming, forecast};
use flexgate_policies::units::{TokensPerSec, Watts};
use serde::Serialize;
use std::sync::Arc;

/// The horizons scored, hours.
pub const HORIZONS_H: [u32; 4] = [1, 6, 24, 48];

/// Seeds the spread (and the fill's mix and pace) were chosen on; every other seed is held out.
/// Seeds 1–10 were the first tuning set and 11–20 its held-out set; when the band came out 1.4–1.6
/// points too wide on those, the tuning set was widened to 1–30 (seeds 11–20 thus seen) and the
/// spread chosen again on it, and seeds 31–50 were run once, after, as a fresh held-out set.
pub const TUNING_SEEDS: [u64; 30] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
];

/// The backtest's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BacktestConfig {
    /// The generator's seed.
    pub seed: u64,
    /// GPUs in the cluster.
    pub gpus: u32,
    /// Days simulated.
    pub days: u32,
    /// Days before the first forecast (the runtimes seen so far are learned from).
    pub warmup_days: u32,
    /// The work offered, as a share of the cluster.
    pub load: f64,
    /// Share of jobs that re-run a known configuration.
    pub rerun_share: f64,
    /// Hours between forecasts.
    pub every_h: u32,
    /// The forecast's parameters (its cost ceiling and spread).
    pub params: ForecastParams,
}

impl Default for BacktestConfig {
    fn default() -> Self {
        Self {
            seed: 4,
            gpus: 512,
            days: 24,
            warmup_days: 4,
            load: 0.95,
            rerun_share: 0.4,
            every_h: 3,
            // One step past 48 h, so the 48-hour horizon is scored.
            params: ForecastParams {
                steps: flexgate_policies::forecast::STEPS_48H + 1,
                ..ForecastParams::default()
            },
        }
    }
}

/// One horizon's scores.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HorizonScore {
    /// Hours ahead.
    pub horizon_h: u32,
    /// Forecasts scored.
    pub forecasts: usize,
    /// Share of them whose truth fell in the P10–P90 band.
    pub coverage: f64,
    /// The P50's mean absolute error ÷ the mean truth.
    pub p50_error: f64,
    /// The same for the naive forecast (the fleet now persists).
    pub naive_error: f64,
    /// The P50's mean signed error ÷ the mean truth (positive: it promised too much).
    pub p50_bias: f64,
    /// Share whose truth fell below the P10 (a declaration at 90 % confidence short).
    pub shortfall_rate: f64,
    /// The mean truth, GPU-board W.
    pub mean_truth_w: f64,
}

/// The backtest's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BacktestReport {
    /// The seed.
    pub seed: u64,
    /// Whether the spread was tuned on it.
    pub tuning_seed: bool,
    /// Jobs submitted.
    pub jobs: usize,
    /// Mean GPUs busy.
    pub mean_busy_gpus: f64,
    /// Per horizon.
    pub horizons: Vec<HorizonScore>,
}

#[derive(Debug, Clone)]
struct SimJob {
    gpus: u32,
    submit: i64,
    runtime: i64,
    limit: i64,
    profile: usize,
    start: Option<i64>,
}

const TICK: i64 = 900;

fn policy() -> CurveAware {
    CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()))
        .with_objective(Objective::Progress)
        .with_hedging(false)
}

fn spec(gpus: u32, elasticity: Elasticity) -> JobSpec {
    JobSpec {
        id: "job".into(),
        gpus,
        cap_range: CapRange::H200,
        uncapped_power: Watts(f64::from(gpus) * 660.0),
        uncapped_tokens: TokensPerSec(1_000.0 * f64::from(gpus)),
        elasticity,
        max_slowdown: None,
        priority: 1.0,
    }
}

fn profile_of(gpus: u32, elasticity: Elasticity) -> ShedProfile {
    policy()
        .prepare(&[spec(gpus, elasticity)])
        .ok()
        .and_then(|p| p.shed_profiles().into_iter().next())
        .unwrap_or(ShedProfile {
            value: 0.0,
            segments: Vec::new(),
        })
}

/// Profiles by knowledge, PFI to the hundredth: an 8-GPU job's, scaled to `gpus` (a job's
/// watts and value scale with its GPUs in this generator; its costs per watt do not).
#[derive(Default)]
struct Profiles {
    cache: std::collections::HashMap<(u8, i64), ShedProfile>,
}

impl Profiles {
    fn of(&mut self, gpus: u32, kind: u8, pfi: f64) -> ShedProfile {
        let key = (kind, (pfi * 100.0).round() as i64);
        let base = self.cache.entry(key).or_insert_with(|| {
            let pfi = key.1 as f64 / 100.0;
            let elasticity = match kind {
                0 => Elasticity::Unknown,
                1 => Elasticity::PredictedPfi {
                    mean: pfi,
                    sd: 0.24,
                    grid: None,
                },
                _ => Elasticity::Pfi {
                    value: pfi,
                    grid: flexgate_policies::pfi::CapGrid::paper_default_for(8),
                },
            };
            profile_of(8, elasticity)
        });
        let k = f64::from(gpus) / 8.0;
        ShedProfile {
            value: base.value * k,
            segments: base.segments.iter().map(|&(w, c)| (w * k, c)).collect(),
        }
    }
}

/// Draw the jobs of a backtest (submit times in seconds from the start).
fn generate(config: &BacktestConfig, rng: &mut SplitMix64) -> (Vec<SimJob>, Vec<ShedProfile>) {
    let horizon = i64::from(config.days) * 86_400;
    let sizes = [1u32, 2, 4, 8, 16, 32, 64];
    let size_weights = [0.08, 0.08, 0.14, 0.34, 0.18, 0.12, 0.06];
    let mean_gpus: f64 = sizes
        .iter()
        .zip(size_weights)
        .map(|(s, w)| f64::from(*s) * w)
        .sum::<f64>()
        / size_weights.iter().sum::<f64>();
    // Mean of a log-normal of median 4 h, σ 1.2.
    let mean_runtime_h = 4.0 * (1.2f64 * 1.2 / 2.0).exp();
    let rate_per_h = config.load * f64::from(config.gpus) / (mean_gpus * mean_runtime_h);
    let mut profiles: Vec<ShedProfile> = Vec::new();
    let mut cache = Profiles::default();
    let mut known: Vec<(u32, f64, usize)> = Vec::new();
    let mut jobs = Vec::new();
    let mut t = 0.0f64;
    loop {
        // Thinning: the rate at 14:00 is twice that at 02:00.
        t += -(1.0 - rng.next_f64()).ln() / (rate_per_h * 1.5) * 3600.0;
        if t >= horizon as f64 {
            break;
        }
        let hour = (t / 3600.0) % 24.0;
        let shape = 1.0 + 0.5 * (-((hour - 14.0) / 12.0 * std::f64::consts::PI).cos());
        if rng.next_f64() * 1.5 > shape {
            continue;
        }
        let (gpus, profile) = if rng.next_f64() < config.rerun_share && !known.is_empty() {
            let (gpus, _, profile) = known[(rng.next_u64() % known.len() as u64) as usize];
            (gpus, profile)
        } else {
            let gpus = sizes[rng.weighted_index(&size_weights)];
            let pfi = 1.10 + rng.next_f64() * (2.67 - 1.10);
            let predicted = rng.next_f64() < 0.5;
            let guess = if predicted {
                cache.of(gpus, 1, (pfi + 0.24 * rng.normal()).clamp(1.0, 3.0))
            } else {
                cache.of(gpus, 0, 0.0)
            };
            profiles.push(guess);
            // Its measured profile, for re-runs.
            profiles.push(cache.of(gpus, 2, pfi));
            known.push((gpus, pfi, profiles.len() - 1));
            (gpus, profiles.len() - 2)
        };
        let runtime_h = (4.0 * (1.2 * rng.normal()).exp()).clamp(0.25, 168.0);
        let limit_h = (runtime_h * (1.2 + 2.8 * rng.next_f64())).ceil().min(168.0);
        let runtime_h = if rng.next_f64() < 0.1 {
            limit_h
        } else {
            runtime_h.min(limit_h)
        };
        jobs.push(SimJob {
            gpus,
            submit: t as i64,
            runtime: (runtime_h * 3600.0) as i64,
            limit: (limit_h * 3600.0) as i64,
            profile,
            start: None,
        });
    }
    (jobs, profiles)
}

/// The scheduler's expected starts for the queue (`queue` in order), assuming every running
/// job runs to its limit and no backfill: seconds from `now`.
fn expected_starts(jobs: &[SimJob], running: &[usize], queue: &[usize], gpus: u32, now: i64) -> Vec<Option<f64>> {
    let mut ends: Vec<(i64, u32)> = running
        .iter()
        .map(|&i| {
            let j = &jobs[i];
            (j.start.unwrap_or(now) + j.limit, j.gpus)
        })
        .collect();
    ends.sort_unstable();
    let mut free = gpus.saturating_sub(running.iter().map(|&i| jobs[i].gpus).sum::<u32>());
    let mut clock = now;
    let mut out = Vec::with_capacity(queue.len());
    let mut pending: std::collections::BinaryHeap<std::cmp::Reverse<(i64, u32)>> =
        ends.into_iter().map(std::cmp::Reverse).collect();
    for &q in queue {
        let need = jobs[q].gpus;
        if need > gpus {
            out.push(None);
            continue;
        }
        while free < need {
            match pending.pop() {
                Some(std::cmp::Reverse((end, g))) => {
                    clock = clock.max(end);
                    free += g;
                }
                None => break,
            }
        }
        if free < need {
            out.push(None);
            continue;
        }
        free -= need;
        pending.push(std::cmp::Reverse((clock + jobs[q].limit, need)));
        out.push(Some((clock - now) as f64));
    }
    out
}

/// The most the running jobs can shed within the ceiling, nothing uncertain: the truth.
fn truth_w(
    jobs: &[SimJob],
    profiles: &[ShedProfile],
    running: &[usize],
    params: ForecastParams,
    at: DateTime<Utc>,
) -> f64 {
    let p: Vec<ShedProfile> = running.iter().map(|&i| profiles[jobs[i].profile].clone()).collect();
    let g: Vec<u32> = running.iter().map(|&i| jobs[i].gpus).collect();
    let timing = vec![
        JobTiming::Running {
            elapsed_s: 0.0,
            limit_s: None
        };
        running.len()
    ];
    let runtime = RuntimeModel::default();
    forecast(&ForecastInput {
        now: at,
        profiles: &p,
        gpus: &g,
        timing: &timing,
        runtime: &runtime,
        fill: None,
        meter_per_gpu_w: 1.0,
        now_available_w: None,
        params: ForecastParams { steps: 1, ..params },
    })
    .steps[0]
        .available_w
        .p50
}

/// Run one backtest.
#[must_use]
pub fn run_backtest(config: &BacktestConfig) -> BacktestReport {
    let mut rng = SplitMix64::new(config.seed);
    let (mut jobs, profiles) = generate(config, &mut rng);
    // The jobs that ended lately (their profile index and GPUs): with those running, the mix
    // the unknown jobs are assumed to be like.
    let mut ended: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    let epoch = Utc.with_ymd_and_hms(2026, 6, 1, 0, 0, 0).single().unwrap_or_default();
    let ticks = i64::from(config.days) * 86_400 / TICK;
    let mut queue: Vec<usize> = Vec::new();
    let mut running: Vec<usize> = Vec::new();
    let mut next_submit = 0usize;
    let mut runtime = RuntimeModel::default();
    let mut busy_history: Vec<f64> = Vec::new();
    // Per tick: the truth, and the forecasts made (tick made, horizon index, band).
    let mut truths: Vec<f64> = Vec::with_capacity(ticks as usize);
    let mut made: Vec<(i64, usize, flexgate_policies::forecast::Band)> = Vec::new();
    let mut naive: Vec<(i64, usize, f64)> = Vec::new();
    for tick in 0..ticks {
        let now = tick * TICK;
        // Ends.
        let mut recently_ended = Vec::new();
        running.retain(|&i| {
            let j = &jobs[i];
            let ended = j.start.is_some_and(|s| s + j.runtime <= now);
            if ended {
                runtime.observe(j.runtime as f64, j.limit as f64);
                recently_ended.push(i);
            }
            !ended
        });
        ended.extend(recently_ended);
        while ended.len() > 200 {
            ended.pop_front();
        }
        // Arrivals.
        while next_submit < jobs.len() && jobs[next_submit].submit <= now {
            queue.push(next_submit);
            next_submit += 1;
        }
        // First come, first served, with backfill.
        let mut free = config
            .gpus
            .saturating_sub(running.iter().map(|&i| jobs[i].gpus).sum::<u32>());
        queue.retain(|&q| {
            if jobs[q].gpus <= free {
                free -= jobs[q].gpus;
                jobs[q].start = Some(now);
                running.push(q);
                false
            } else {
                true
            }
        });
        let busy = f64::from(config.gpus - free);
        busy_history.push(busy);
        let at = epoch + Duration::seconds(now);
        truths.push(truth_w(&jobs, &profiles, &running, config.params, at));
        let warm = tick >= i64::from(config.warmup_days) * 86_400 / TICK;
        if warm && tick % (i64::from(config.every_h) * 3600 / TICK) == 0 {
            let known: Vec<usize> = running.iter().chain(&queue).copied().collect();
            let p: Vec<ShedProfile> = known.iter().map(|&i| profiles[jobs[i].profile].clone()).collect();
            let g: Vec<u32> = known.iter().map(|&i| jobs[i].gpus).collect();
            let starts = expected_starts(&jobs, &running, &queue, config.gpus, now);
            let mut timing: Vec<JobTiming> = running
                .iter()
                .map(|&i| JobTiming::Running {
                    elapsed_s: (now - jobs[i].start.unwrap_or(now)) as f64,
                    limit_s: Some(jobs[i].limit as f64),
                })
                .collect();
            timing.extend(queue.iter().zip(&starts).map(|(&i, start)| JobTiming::Queued {
                expected_start_in_s: *start,
                limit_s: Some(jobs[i].limit as f64),
            }));
            // The GPUs the site usually keeps busy: the last two days' mean (the first days
            // fill an empty cluster).
            let week = busy_history.len().saturating_sub(2 * 96);
            let usual = busy_history[week..].iter().sum::<f64>() / (busy_history.len() - week).max(1) as f64;
            let mix = running
                .iter()
                .chain(&ended)
                .map(|&i| (&profiles[jobs[i].profile], jobs[i].gpus));
            let fill = Fill::from_mix(mix, usual, 0.5);
            let f = forecast(&ForecastInput {
                now: at,
                profiles: &p,
                gpus: &g,
                timing: &timing,
                runtime: &runtime,
                fill: fill.as_ref(),
                meter_per_gpu_w: 1.0,
                now_available_w: None,
                params: config.params,
            });
            for (h, &horizon) in HORIZONS_H.iter().enumerate() {
                let step = (i64::from(horizon) * 3600 / i64::from(config.params.step_s)) as usize;
                if let Some(s) = f.steps.get(step) {
                    made.push((tick, h, s.available_w));
                    naive.push((tick, h, truths[tick as usize]));
                }
            }
        }
    }
    let mut horizons = Vec::new();
    for (h, &horizon) in HORIZONS_H.iter().enumerate() {
        let ahead = i64::from(horizon) * 3600 / TICK;
        let (mut n, mut covered, mut short, mut err, mut nerr, mut truth_sum, mut bias) =
            (0usize, 0, 0, 0.0, 0.0, 0.0, 0.0);
        for ((tick, hh, band), (_, _, persisted)) in made.iter().zip(&naive) {
            if *hh != h {
                continue;
            }
            let Some(&truth) = truths.get((tick + ahead) as usize) else {
                continue;
            };
            n += 1;
            covered += usize::from(band.p10 <= truth && truth <= band.p90);
            short += usize::from(truth < band.p10);
            err += (band.p50 - truth).abs();
            bias += band.p50 - truth;
            nerr += (persisted - truth).abs();
            truth_sum += truth;
        }
        let mean_truth = truth_sum / n.max(1) as f64;
        horizons.push(HorizonScore {
            horizon_h: horizon,
            forecasts: n,
            coverage: covered as f64 / n.max(1) as f64,
            p50_error: err / n.max(1) as f64 / mean_truth.max(1e-9),
            naive_error: nerr / n.max(1) as f64 / mean_truth.max(1e-9),
            p50_bias: bias / n.max(1) as f64 / mean_truth.max(1e-9),
            shortfall_rate: short as f64 / n.max(1) as f64,
            mean_truth_w: mean_truth,
        });
    }
    BacktestReport {
        seed: config.seed,
        tuning_seed: TUNING_SEEDS.contains(&config.seed),
        jobs: jobs.len(),
        mean_busy_gpus: busy_history.iter().sum::<f64>() / busy_history.len().max(1) as f64,
        horizons,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_backtest_is_deterministic_and_scores_every_horizon() {
        let config = BacktestConfig {
            seed: 1,
            gpus: 128,
            days: 8,
            warmup_days: 2,
            ..BacktestConfig::default()
        };
        let a = run_backtest(&config);
        let b = run_backtest(&config);
        assert_eq!(a, b);
        assert_eq!(a.horizons.len(), HORIZONS_H.len());
        assert!(a.jobs > 50, "{a:?}");
        assert!(a.mean_busy_gpus > 0.5 * 128.0, "{a:?}");
        for h in &a.horizons {
            assert!(h.forecasts > 0 && (0.0..=1.0).contains(&h.coverage), "{h:?}");
        }
    }
}
