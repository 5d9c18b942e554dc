//! What the site can promise tomorrow: its flexibility, step by step over the next hours, from
//! the jobs running now, the jobs queued, what is known of each, and the site's history.
//!
//! **The model.** Each job contributes its [`ShedProfile`] (the watts it can shed, cheapest
//! first, by the same estimate the plans use) when it is running. Whether it runs at a step is
//! a probability ([`runtime::RuntimeModel`]): a running job survives to its time limit as the
//! jobs that ended before it did (never past its limit); a queued job starts around the
//! scheduler's expected start and then runs as a running job would. GPUs the site usually keeps
//! busy that no known job is expected to hold are filled by **unknown jobs** with the fleet
//! prior's profile ([`Fill`]): the forecast does not assume today's fleet persists, and the
//! further ahead, the more of it is unknown (each step says how many of its GPUs are).
//!
//! At a step, the site's most sheddable watts within a **cost ceiling** (a share of the
//! objective's value, e.g. 10 % of GPU-weighted progress) are found as the plans find them: the
//! cheapest watts first, over every job weighted by its probability of running, until the
//! expected cost reaches the ceiling's share of the expected value. Its distribution: the mean
//! of that sum, and a normal spread from the jobs' presence (`p(1−p)·s²` each), the unknown
//! jobs' number and mix, widened by a calibration factor from the backtest
//! (`simulate --forecast`, seeds held out). `p10 ≤ p50 ≤ p90` are its 10th, 50th and 90th
//! percentiles (the energy trade's "P90", exceeded nine times in ten, is our `p10`).
//!
//! The band never narrows with the horizon (its spread is carried forward): nothing learned
//! later in the horizon makes a later step surer than an earlier one. A job is never counted
//! past its time limit.
//!
//! **Hour 0 is the flexibility curve now.** The first step's figures are scaled to the site's
//! flexibility curve at this moment (the allocator's own plans, hedges included), and every
//! later step by the same factor, so the forecast and the curve never disagree about now.

pub mod runtime;

use crate::alloc::ShedProfile;
use chrono::{DateTime, Duration, Utc};
use runtime::RuntimeModel;
use serde::Serialize;

/// The 10th and 90th percentiles of a normal distribution, in standard deviations.
pub const Z10: f64 = 1.281_551_565_545;

/// Steps of a 48-hour forecast in quarter-hours.
pub const STEPS_48H: usize = 192;

/// When a job runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum JobTiming {
    /// Running for `elapsed_s`, with a time limit of `limit_s` (none: unlimited).
    Running {
        /// Seconds since it started.
        elapsed_s: f64,
        /// Its time limit, s.
        limit_s: Option<f64>,
    },
    /// Queued: expected to start `expected_start_in_s` from now (none: the scheduler did not
    /// say), with a limit of `limit_s`.
    Queued {
        /// The scheduler's expected start, seconds from now.
        expected_start_in_s: Option<f64>,
        /// Its time limit, s.
        limit_s: Option<f64>,
    },
}

/// The unknown jobs that fill the GPUs the site usually keeps busy.
#[derive(Debug, Clone, PartialEq)]
pub struct Fill {
    /// GPUs the site usually keeps busy (from its history; without one, the GPUs busy now).
    pub busy_gpus: f64,
    /// What one GPU of an unknown job can shed, and at what cost (the fleet prior's profile of a
    /// typical job, divided by its GPUs).
    pub per_gpu: ShedProfile,
    /// GPUs of a typical job (the unknown jobs come in jobs of this size).
    pub job_gpus: f64,
    /// The spread of an unknown job's sheddable watts across the fleet's jobs, as a share of
    /// its mean (the fleet prior's PFI spread).
    pub shed_cv: f64,
}

/// How the forecast is made.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ForecastParams {
    /// Step length, s.
    pub step_s: u32,
    /// Steps.
    pub steps: usize,
    /// The cost ceiling: the largest share of the objective's value the site accepts to lose.
    pub cost_ceiling: f64,
    /// Levels of each step's curve (none to the most).
    pub levels: usize,
    /// The calibration factor on the spread (from the backtest).
    pub spread: f64,
}

impl Default for ForecastParams {
    fn default() -> Self {
        Self {
            step_s: 900,
            steps: STEPS_48H,
            cost_ceiling: 0.10,
            levels: crate::control::flexibility::FLEXIBILITY_LEVELS,
            spread: DEFAULT_SPREAD,
        }
    }
}

/// The spread's calibration factor (see `BENCHMARKS.md`, the forecast backtest).
pub const DEFAULT_SPREAD: f64 = 1.0;

/// The forecast's inputs: every known job (running or queued) with its profile and timing.
#[derive(Debug, Clone, Copy)]
pub struct ForecastInput<'a> {
    /// When it is made.
    pub now: DateTime<Utc>,
    /// Each job's profile.
    pub profiles: &'a [ShedProfile],
    /// Each job's GPUs.
    pub gpus: &'a [u32],
    /// Each job's timing.
    pub timing: &'a [JobTiming],
    /// The correction of the scheduler's times.
    pub runtime: &'a RuntimeModel,
    /// The unknown jobs (`None`: only the known jobs are counted).
    pub fill: Option<&'a Fill>,
    /// The meter watts one GPU-board watt shed gives at least (the facility model's lower
    /// bound, settled).
    pub meter_per_gpu_w: f64,
    /// The most the site can shed within the ceiling now, by its flexibility curve, meter W:
    /// the first step is scaled to it (`None`: no curve now; the model stands alone).
    pub now_available_w: Option<f64>,
    /// How.
    pub params: ForecastParams,
}

/// A distribution's 10th, 50th and 90th percentiles.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    /// 10th percentile: exceeded nine times in ten (the trade's "P90").
    pub p10: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
}

/// One level of a step's expected curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ForecastLevel {
    /// Meter watts shed (expected).
    pub shed_w: f64,
    /// The share of the objective's value it costs (expected).
    pub cost: f64,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForecastStep {
    /// Its start.
    pub start: DateTime<Utc>,
    /// Its end.
    pub end: DateTime<Utc>,
    /// The most the site can shed at the meter within the cost ceiling, W.
    pub available_w: Band,
    /// Known jobs expected to run.
    pub jobs_expected: f64,
    /// GPUs expected busy.
    pub gpus_expected: f64,
    /// Of those, GPUs held by jobs not known yet.
    pub gpus_unknown: f64,
    /// The step's expected curve: meter watts shed against the share of value lost.
    pub levels: Vec<ForecastLevel>,
}

/// The forecast.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    /// When it was made.
    pub generated_at: DateTime<Utc>,
    /// The cost ceiling `available_w` is within.
    pub cost_ceiling: f64,
    /// The factor the model's figures were scaled by to meet the flexibility curve now.
    pub scale_to_now: f64,
    /// The steps.
    pub steps: Vec<ForecastStep>,
}

/// One sheddable stretch of a job (`owner` its index; [`FILL`] for the unknown jobs, per GPU).
#[derive(Debug, Clone, Copy)]
struct Stretch {
    cost_per_w: f64,
    width: f64,
    owner: u32,
}

const FILL: u32 = u32::MAX;

/// The forecast over `input`'s steps.
#[must_use]
pub fn forecast(input: &ForecastInput<'_>) -> Forecast {
    let n = input.profiles.len().min(input.gpus.len()).min(input.timing.len());
    let params = input.params;
    let ceiling = params.cost_ceiling.clamp(0.0, 1.0);
    let levels = params.levels.clamp(2, 101);
    // Every stretch of every job, and the unknown jobs' per GPU, by cost: sorted once.
    let mut stretches: Vec<Stretch> = Vec::new();
    for (i, profile) in input.profiles[..n].iter().enumerate() {
        stretches.extend(
            profile
                .segments
                .iter()
                .filter(|s| s.0 > 0.0)
                .map(|&(width, cost)| Stretch {
                    cost_per_w: cost.max(0.0),
                    width,
                    owner: i as u32,
                }),
        );
    }
    if let Some(fill) = input.fill {
        stretches.extend(
            fill.per_gpu
                .segments
                .iter()
                .filter(|s| s.0 > 0.0)
                .map(|&(width, cost)| Stretch {
                    cost_per_w: cost.max(0.0),
                    width,
                    owner: FILL,
                }),
        );
    }
    stretches.sort_by(|a, b| a.cost_per_w.total_cmp(&b.cost_per_w));
    let runtime = Sorted::new(input.runtime);
    let mut presence = vec![0.0; n];
    let mut shed = vec![0.0; n];
    let mut steps = Vec::with_capacity(params.steps);
    let mut carried_sd = 0.0_f64;
    let mut scale = 1.0;
    for k in 0..params.steps {
        let ahead = f64::from(params.step_s) * k as f64;
        let (mut value, mut gpus_known, mut jobs_known) = (0.0, 0.0, 0.0);
        for (i, slot) in presence.iter_mut().enumerate() {
            let p = runtime.presence(input.timing[i], ahead);
            *slot = p;
            value += p * input.profiles[i].value;
            gpus_known += p * f64::from(input.gpus[i]);
            jobs_known += p;
        }
        let fill_gpus = input.fill.map_or(0.0, |f| (f.busy_gpus - gpus_known).max(0.0));
        if let Some(fill) = input.fill {
            value += fill_gpus * fill.per_gpu.value;
        }
        // Cheapest watts first, each weighted by its owner's chance of running, until the
        // expected cost is the ceiling's share of the expected value; and the whole curve.
        let budget = ceiling * value;
        let weight = |owner: u32| {
            if owner == FILL {
                fill_gpus
            } else {
                presence[owner as usize]
            }
        };
        let most: f64 = stretches.iter().map(|s| weight(s.owner) * s.width).sum();
        let level_at = |l: usize| most * l as f64 / (levels - 1) as f64;
        let mut curve = Vec::with_capacity(levels);
        curve.push((0.0, 0.0));
        shed.iter_mut().for_each(|s| *s = 0.0);
        let (mut cost, mut watts, mut fill_shed_per_gpu) = (0.0, 0.0, 0.0);
        let mut available: Option<f64> = (budget <= 0.0).then_some(0.0);
        for s in &stretches {
            let w = weight(s.owner);
            if w <= 0.0 {
                continue;
            }
            let (width, unit_cost) = (w * s.width, s.cost_per_w);
            // Levels this stretch passes.
            while curve.len() < levels && watts + width >= level_at(curve.len()) - 1e-9 {
                let target = level_at(curve.len());
                curve.push((target, cost + (target - watts).max(0.0) * unit_cost));
            }
            if available.is_none() {
                let room = budget - cost;
                let take = if unit_cost > 0.0 {
                    (room / unit_cost).min(width)
                } else {
                    width
                };
                let fraction = take / width;
                if s.owner == FILL {
                    fill_shed_per_gpu += s.width * fraction;
                } else {
                    shed[s.owner as usize] += s.width * fraction;
                }
                if take < width {
                    available = Some(watts + take);
                }
            }
            cost += width * unit_cost;
            watts += width;
        }
        while curve.len() < levels {
            curve.push((level_at(curve.len()), cost));
        }
        let mean = available.unwrap_or(watts);
        let mut var: f64 = (0..n)
            .map(|i| presence[i] * (1.0 - presence[i]) * shed[i] * shed[i])
            .sum();
        if let Some(fill) = input.fill
            && fill.job_gpus > 0.0
        {
            // The unknown jobs: how many (Poisson) and which (their spread across the fleet).
            let jobs = fill_gpus / fill.job_gpus;
            let per_job = fill.job_gpus * fill_shed_per_gpu;
            var += jobs * per_job * per_job * (1.0 + fill.shed_cv * fill.shed_cv);
        }
        let sd = (var.sqrt() * params.spread).max(carried_sd);
        carried_sd = sd;
        if k == 0 {
            scale = match input.now_available_w {
                Some(now) if mean > 0.0 && now.is_finite() && now >= 0.0 => now / (mean * input.meter_per_gpu_w),
                _ => 1.0,
            };
        }
        let meter = |w: f64| w * input.meter_per_gpu_w * scale;
        let start = input.now + Duration::seconds(i64::from(params.step_s) * k as i64);
        steps.push(ForecastStep {
            start,
            end: start + Duration::seconds(i64::from(params.step_s)),
            available_w: Band {
                p10: meter((mean - Z10 * sd).max(0.0)),
                p50: meter(mean),
                p90: meter(mean + Z10 * sd),
            },
            jobs_expected: jobs_known,
            gpus_expected: gpus_known + fill_gpus,
            gpus_unknown: fill_gpus,
            levels: curve
                .into_iter()
                .map(|(w, c)| ForecastLevel {
                    shed_w: meter(w),
                    cost: if value > 0.0 { c / value } else { 0.0 },
                })
                .collect(),
        });
    }
    Forecast {
        generated_at: input.now,
        cost_ceiling: ceiling,
        scale_to_now: scale,
        steps,
    }
}

/// The most the site can shed at the meter within `ceiling` (a share of the objective's value)
/// by the flexibility curve `curve`, W: interpolated between its levels; the curve's deepest
/// level when even that costs less.
#[must_use]
pub fn available_within(curve: &crate::control::flexibility::SiteFlexibility, ceiling: f64) -> f64 {
    let share = |p: &crate::control::flexibility::SiteFlexPoint| {
        if curve.uncapped_value > 0.0 {
            p.value_lost / curve.uncapped_value
        } else {
            0.0
        }
    };
    let mut best: f64 = 0.0;
    for w in curve.points.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let (ca, cb) = (share(a), share(b));
        if cb <= ceiling {
            best = best.max(b.meter_shed_kw);
        } else if ca <= ceiling && cb > ca {
            let t = (ceiling - ca) / (cb - ca);
            best = best.max(a.meter_shed_kw + t * (b.meter_shed_kw - a.meter_shed_kw));
            break;
        } else {
            break;
        }
    }
    best * 1000.0
}

impl Fill {
    /// The unknown jobs from the profile of a typical job of `job_gpus` GPUs (the fleet prior's),
    /// filling up to `busy_gpus`.
    #[must_use]
    pub fn from_typical_job(typical: &ShedProfile, job_gpus: u32, busy_gpus: f64, shed_cv: f64) -> Self {
        let g = f64::from(job_gpus.max(1));
        Self {
            busy_gpus: busy_gpus.max(0.0),
            per_gpu: ShedProfile {
                value: typical.value / g,
                segments: typical.segments.iter().map(|&(w, c)| (w / g, c)).collect(),
            },
            job_gpus: g,
            shed_cv: shed_cv.max(0.0),
        }
    }
}

/// The runtime model with its shares sorted, for fast look-ups.
struct Sorted<'a> {
    model: &'a RuntimeModel,
    shares: Vec<f64>,
}

impl<'a> Sorted<'a> {
    fn new(model: &'a RuntimeModel) -> Self {
        let mut shares = model.samples().to_vec();
        shares.sort_by(f64::total_cmp);
        Self { model, shares }
    }

    /// The share of jobs that use more than `x` of their limit.
    fn exceed(&self, x: f64) -> f64 {
        let below = self.shares.partition_point(|&s| s <= x);
        (self.shares.len() - below) as f64 / self.shares.len().max(1) as f64
    }

    fn survival(&self, elapsed: f64, limit: Option<f64>, ahead: f64) -> f64 {
        match limit.filter(|l| l.is_finite() && *l > 0.0) {
            Some(limit) => {
                if elapsed.max(0.0) + ahead.max(0.0) >= limit {
                    return 0.0;
                }
                let now = self.exceed(elapsed.max(0.0) / limit);
                if now <= 0.0 {
                    return 1.0;
                }
                (self.exceed((elapsed.max(0.0) + ahead.max(0.0)) / limit) / now).clamp(0.0, 1.0)
            }
            None => self.model.survival(elapsed, None, ahead),
        }
    }

    /// The probability that a job runs `ahead` s from now.
    fn presence(&self, timing: JobTiming, ahead: f64) -> f64 {
        match timing {
            JobTiming::Running { elapsed_s, limit_s } => self.survival(elapsed_s, limit_s, ahead),
            JobTiming::Queued {
                expected_start_in_s,
                limit_s,
            } => {
                let started = self.model.started_by(expected_start_in_s, ahead);
                if started <= 0.0 {
                    return 0.0;
                }
                // Run from its expected start (or from now, if that is later than `ahead`).
                let start = self.model.expected_start_in(expected_start_in_s).min(ahead);
                started * self.survival(0.0, limit_s, ahead - start)
            }
        }
    }
}

#[cfg(test)]
mod tests;
