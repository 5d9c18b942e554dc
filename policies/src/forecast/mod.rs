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

pub mod declare;
pub mod runtime;
pub mod screen;

use crate::alloc::ShedProfile;
use chrono::{DateTime, Duration, Utc};
use runtime::RuntimeModel;
use serde::{Deserialize, Serialize};

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
    /// How fast the GPUs busy move from now's count to the usual one, s (the time constant of
    /// an exponential approach): the site is not assumed to fill at once.
    pub relax_s: f64,
}

/// [`Fill::relax_s`] by default: 6 hours.
pub const FILL_RELAX_S: f64 = 6.0 * 3600.0;

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
pub const DEFAULT_SPREAD: f64 = 0.43;

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
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Band {
    /// 10th percentile: exceeded nine times in ten (the trade's "P90").
    pub p10: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
}

/// One level of a step's expected curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ForecastLevel {
    /// Meter watts shed (expected).
    pub shed_w: f64,
    /// The share of the objective's value it costs (expected).
    pub cost: f64,
}

/// One step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    /// When it was made.
    pub generated_at: DateTime<Utc>,
    /// The cost ceiling `available_w` is within.
    pub cost_ceiling: f64,
    /// The factor the model's figures were scaled by to meet the flexibility curve now.
    pub scale_to_now: f64,
    /// What it stands on, and why it is as wide as it is, in words (the caller's).
    #[serde(default)]
    pub basis: Vec<String>,
    /// The steps.
    pub steps: Vec<ForecastStep>,
}

/// The cost ceiling the gateway forecasts within by default: 10 % of the objective's value.
pub const DEFAULT_COST_CEILING: f64 = 0.10;

/// How often the gateway makes a new forecast at the latest, s (and whenever its flexibility
/// curve changes).
pub const REFRESH_S: i64 = 900;

impl Forecast {
    /// Its steps on the hour (every step whose offset from the first is a whole number of
    /// hours): what the ledger keeps of it.
    #[must_use]
    pub fn hourly(&self) -> Vec<(DateTime<Utc>, Band)> {
        self.steps
            .iter()
            .filter(|s| (s.start - self.generated_at).num_seconds() % 3600 == 0)
            .map(|s| (s.start, s.available_w))
            .collect()
    }
}

/// The spread is computed at each of the first steps and then at every this many.
const SPREAD_EVERY: usize = 4;

/// Stretches summed together by the forecast's walk before it looks inside.
const BLOCK: usize = 64;

/// The most stretches the forecast walks at each step: beyond, each job's stretches are merged
/// in twos, threes... (a fleet of 20 000 jobs of 7–8 stretches keeps 2–3 each). Up to about
/// 8 000 jobs, nothing is merged.
pub const MAX_STRETCHES: usize = 64_000;

/// Every sheddable stretch of every job and of one unknown GPU (owner `n`), sorted by cost once,
/// as columns: the per-step walk reads them in order.
struct Stretches {
    cost: Vec<f64>,
    width: Vec<f64>,
    owner: Vec<u32>,
    /// Each owner's sheddable watts in all (by rank).
    room: Vec<f64>,
    /// Each job's rank: its place in `owner`, `room` and the walk's weights (the unknown
    /// jobs' GPU stays last).
    rank_of: Vec<u32>,
}

impl Stretches {
    fn new(profiles: &[ShedProfile], fill: Option<&Fill>) -> Self {
        let n = profiles.len();
        let mut all: Vec<(f64, f64, u32)> = Vec::new();
        let mut room = vec![0.0; n + 1];
        let usable = |s: &&(f64, f64)| s.0 > 0.0 && s.0.is_finite() && s.1.is_finite();
        let total: usize = profiles.iter().map(|p| p.segments.iter().filter(usable).count()).sum();
        // A large fleet's jobs keep fewer breakpoints: `merge` consecutive stretches of a job
        // become one (their watts, their cost): each job's curve is then a coarser chord of
        // itself, and the walk's cost stays within bounds.
        let merge = total.div_ceil(MAX_STRETCHES).max(1);
        let owners = profiles.iter().chain(fill.map(|f| &f.per_gpu));
        for (o, profile) in owners.enumerate() {
            let own: Vec<&(f64, f64)> = profile.segments.iter().filter(usable).collect();
            let group = if o < n { merge } else { 1 };
            for chunk in own.chunks(group) {
                let width: f64 = chunk.iter().map(|s| s.0).sum();
                let cost = chunk.iter().map(|s| s.0 * s.1.max(0.0)).sum::<f64>() / width;
                all.push((cost, width, o as u32));
                room[o] += width;
            }
        }
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        // Jobs renumbered in the order their cheapest stretch comes: the walk then reads their
        // weights mostly forward (a cache-friendly gather).
        let mut rank_of = vec![u32::MAX; n + 1];
        let mut next = 0u32;
        for &(_, _, o) in &all {
            if (o as usize) < n && rank_of[o as usize] == u32::MAX {
                rank_of[o as usize] = next;
                next += 1;
            }
        }
        for slot in rank_of[..n].iter_mut().filter(|r| **r == u32::MAX) {
            *slot = next;
            next += 1;
        }
        rank_of[n] = n as u32;
        let mut ranked_room = vec![0.0; n + 1];
        for (o, &r) in rank_of.iter().enumerate() {
            ranked_room[r as usize] = room[o];
        }
        Self {
            cost: all.iter().map(|s| s.0).collect(),
            width: all.iter().map(|s| s.1).collect(),
            owner: all.iter().map(|s| rank_of[s.2 as usize]).collect(),
            room: ranked_room,
            rank_of,
        }
    }
}

/// The forecast over `input`'s steps.
#[must_use]
pub fn forecast(input: &ForecastInput<'_>) -> Forecast {
    let n = input.profiles.len().min(input.gpus.len()).min(input.timing.len());
    let params = input.params;
    let ceiling = params.cost_ceiling.clamp(0.0, 1.0);
    let levels = params.levels.clamp(2, 101);
    let table = Stretches::new(&input.profiles[..n], input.fill);
    let runtime = Sorted::new(input.runtime);
    // Each owner's weight at a step: a job's chance of running; the unknown jobs' GPUs (last).
    let mut presence = vec![0.0; n + 1];
    let mut shed = vec![0.0; n + 1];
    let mut block_w = vec![0.0; table.cost.len().div_ceil(BLOCK)];
    let mut block_c = vec![0.0; block_w.len()];
    let mut trackers: Vec<Tracker> = input.timing[..n].iter().map(|&t| runtime.tracker(t)).collect();
    let mut steps = Vec::with_capacity(params.steps);
    let mut carried_sd = 0.0_f64;
    let mut scale = 1.0;
    let mut gpus_now = 0.0;
    for k in 0..params.steps {
        let ahead = f64::from(params.step_s) * k as f64;
        let (mut value, mut gpus_known, mut jobs_known, mut most) = (0.0, 0.0, 0.0, 0.0);
        for (i, tracker) in trackers.iter_mut().enumerate() {
            let p = runtime.presence(tracker, ahead);
            let r = table.rank_of[i] as usize;
            presence[r] = p;
            value += p * input.profiles[i].value;
            gpus_known += p * f64::from(input.gpus[i]);
            jobs_known += p;
            most += p * table.room[r];
        }
        if k == 0 {
            gpus_now = gpus_known;
        }
        // The GPUs busy move from now's count towards the usual one; what the known jobs do not
        // hold of that, unknown jobs do.
        let fill_gpus = input.fill.map_or(0.0, |f| {
            let approach = 1.0 - (-ahead / f.relax_s.max(1.0)).exp();
            let target = gpus_now + (f.busy_gpus - gpus_now) * approach;
            (target - gpus_known).max(0.0)
        });
        presence[n] = fill_gpus;
        if let Some(fill) = input.fill {
            value += fill_gpus * fill.per_gpu.value;
            most += fill_gpus * table.room[n];
        }
        // Cheapest watts first, each weighted by its owner's chance of running, until the
        // expected cost is the ceiling's share of the expected value; and the whole curve.
        let budget = ceiling * value;
        let level_at = |l: usize| most * l as f64 / (levels - 1) as f64;
        // Each stretch's expected watts, summed by blocks in four lanes (independent sums
        // pipeline; one running sum would wait on each addition): the budget's and the levels'
        // places are found among the blocks, then inside one.
        let weight = |place: usize| presence[table.owner[place] as usize] * table.width[place];
        for (b, (bw, bc)) in block_w.iter_mut().zip(block_c.iter_mut()).enumerate() {
            let from = b * BLOCK;
            let to = (from + BLOCK).min(table.cost.len());
            let (mut lw, mut lc) = ([0.0; 4], [0.0; 4]);
            for (j, ((&owner, &width), &unit_cost)) in table.owner[from..to]
                .iter()
                .zip(&table.width[from..to])
                .zip(&table.cost[from..to])
                .enumerate()
            {
                let w = presence[owner as usize] * width;
                lw[j & 3] += w;
                lc[j & 3] += w * unit_cost;
            }
            *bw = (lw[0] + lw[1]) + (lw[2] + lw[3]);
            *bc = (lc[0] + lc[1]) + (lc[2] + lc[3]);
        }
        let (mut cost, mut watts) = (0.0, 0.0);
        let mut curve = Vec::with_capacity(levels);
        curve.push((0.0, 0.0));
        // Where the budget runs out: `(place, watts taken there)`.
        let mut cut: Option<(usize, f64)> = None;
        let mut available: Option<f64> = (budget <= 0.0).then_some(0.0);
        for (b, (&bw, &bc)) in block_w.iter().zip(&block_c).enumerate() {
            let next_level = level_at(curve.len());
            let budget_here = available.is_none() && cost + bc >= budget;
            let level_here = curve.len() < levels && watts + bw >= next_level - 1e-9;
            if budget_here || level_here {
                // Inside the block, stretch by stretch.
                let from = b * BLOCK;
                let to = (from + BLOCK).min(table.cost.len());
                for (place, &unit_cost) in table.cost[from..to].iter().enumerate() {
                    let place = from + place;
                    let w = weight(place);
                    if available.is_none() && w > 0.0 && cost + w * unit_cost >= budget {
                        let take = if unit_cost > 0.0 {
                            ((budget - cost) / unit_cost).min(w)
                        } else {
                            w
                        };
                        available = Some(watts + take);
                        cut = Some((place, take));
                    }
                    while curve.len() < levels && watts + w >= level_at(curve.len()) - 1e-9 {
                        let target = level_at(curve.len());
                        curve.push((target, cost + (target - watts).max(0.0) * unit_cost));
                    }
                    cost += w * unit_cost;
                    watts += w;
                }
            } else {
                cost += bc;
                watts += bw;
            }
        }
        while curve.len() < levels {
            curve.push((level_at(curve.len()), cost));
        }
        let mean = available.unwrap_or(watts);
        // The spread: at each of the first four steps, then at every fourth (hourly with
        // quarter-hours; the steps between carry the last one, which the band never narrows
        // from anyway).
        let var = if k < SPREAD_EVERY || k % SPREAD_EVERY == 0 {
            // Each owner's own watts (not weighted) shed at the budget's cost.
            let (until, taken) = cut.unwrap_or((table.cost.len(), 0.0));
            for (&owner, &width) in table.owner[..until].iter().zip(&table.width[..until]) {
                shed[owner as usize] += width;
            }
            if until < table.cost.len() && weight(until) > 0.0 {
                shed[table.owner[until] as usize] += table.width[until] * taken / weight(until);
            }
            let mut var: f64 = (0..n)
                .map(|i| presence[i] * (1.0 - presence[i]) * shed[i] * shed[i])
                .sum();
            if let Some(fill) = input.fill
                && fill.job_gpus > 0.0
            {
                // The unknown jobs: how many (Poisson) and which (their spread across the fleet).
                let jobs = fill_gpus / fill.job_gpus;
                let per_job = fill.job_gpus * shed[n];
                var += jobs * per_job * per_job * (1.0 + fill.shed_cv * fill.shed_cv);
            }
            // Back to zero for the next step: only what was touched.
            for &owner in &table.owner[..(until + 1).min(table.owner.len())] {
                shed[owner as usize] = 0.0;
            }
            var
        } else {
            0.0
        };
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
        basis: Vec::new(),
        steps,
    }
}

/// The most the site can shed at the meter within `ceiling` (a share of the objective's value)
/// by the flexibility curve `curve`, W: interpolated between its levels; the curve's deepest
/// level when even that costs less. Every shed up to it costs no more than `ceiling`: a hedged
/// curve can dip (`alloc::curve_aware::flexibility`), and a deeper level that costs less does not
/// count past a shallower one that costs more, since an event asking for the depth between
/// would get the costlier plan.
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
            relax_s: FILL_RELAX_S,
        }
    }
}

impl Fill {
    /// The unknown jobs as a mix of the jobs the site has run (`jobs`: each job's profile and
    /// GPUs; the recent ones, or those running now): per GPU, every job's watts and value in
    /// proportion to its GPUs, so the unknown jobs are assumed to be like the site's jobs, not a
    /// textbook one. `None` without a GPU among them.
    #[must_use]
    pub fn from_mix<'p>(
        jobs: impl IntoIterator<Item = (&'p ShedProfile, u32)>,
        busy_gpus: f64,
        shed_cv: f64,
    ) -> Option<Self> {
        let (mut value, mut gpus, mut count) = (0.0, 0.0, 0usize);
        let mut segments: Vec<(f64, f64)> = Vec::new();
        for (profile, g) in jobs {
            value += profile.value;
            gpus += f64::from(g);
            count += 1;
            segments.extend_from_slice(&profile.segments);
        }
        if gpus <= 0.0 {
            return None;
        }
        segments.iter_mut().for_each(|s| s.0 /= gpus);
        segments.sort_by(|a, b| a.1.total_cmp(&b.1));
        Some(Self {
            busy_gpus: busy_gpus.max(0.0),
            per_gpu: ShedProfile {
                value: value / gpus,
                segments,
            },
            job_gpus: gpus / count as f64,
            shed_cv: shed_cv.max(0.0),
            relax_s: FILL_RELAX_S,
        })
    }
}

/// The runtime model with its shares sorted, for fast look-ups.
struct Sorted<'a> {
    model: &'a RuntimeModel,
    shares: Vec<f64>,
}

/// One job's clock, prepared for the steps: what its timing says, and where its share of its
/// limit stands among the observed shares (the steps ask for ever later times, so a cursor
/// moves forward instead of searching each time).
#[derive(Debug, Clone, Copy)]
struct Tracker {
    queued: bool,
    /// Seconds run so far (0 for a queued job).
    elapsed: f64,
    /// Its limit, s (infinite: none), and its inverse (0: none).
    limit: f64,
    inv_limit: f64,
    /// A queued job: when its start window opens, and the inverse of its width (a uniform
    /// start); or, with `wait_exp`, an exponential wait of mean `1 / inv_wait`.
    start_lo: f64,
    inv_start_width: f64,
    wait_exp: bool,
    inv_wait: f64,
    /// When it is expected to start, s from now.
    start: f64,
    /// 1 ÷ the share of jobs that used more of their limit than this one so far (0: longer
    /// than every job seen: it runs to its limit).
    inv_now_exceed: f64,
    /// The first observed share above the latest asked.
    cursor: usize,
}

impl<'a> Sorted<'a> {
    fn new(model: &'a RuntimeModel) -> Self {
        let mut shares = model.samples().to_vec();
        shares.sort_by(f64::total_cmp);
        Self { model, shares }
    }

    fn tracker(&self, timing: JobTiming) -> Tracker {
        let (queued, elapsed, limit, expected) = match timing {
            JobTiming::Running { elapsed_s, limit_s } => (false, elapsed_s, limit_s, None),
            JobTiming::Queued {
                expected_start_in_s,
                limit_s,
            } => (true, 0.0, limit_s, expected_start_in_s.filter(|e| e.is_finite())),
        };
        let elapsed = if elapsed.is_finite() { elapsed.max(0.0) } else { 0.0 };
        let limit = limit.filter(|l| l.is_finite() && *l > 0.0);
        let x = limit.map_or(0.0, |l| elapsed / l);
        let cursor = self.shares.partition_point(|&s| s <= x);
        let now_exceed = (self.shares.len() - cursor) as f64 / self.shares.len().max(1) as f64;
        let expected = expected.map(|e| e.max(0.0));
        let half = expected.map_or(1.0, |e| (self.model.start_spread * e).max(900.0));
        Tracker {
            queued,
            elapsed,
            limit: limit.unwrap_or(f64::INFINITY),
            inv_limit: limit.map_or(0.0, |l| 1.0 / l),
            start_lo: expected.map_or(0.0, |e| e - half),
            inv_start_width: 1.0 / (2.0 * half),
            wait_exp: expected.is_none(),
            inv_wait: 1.0 / self.model.mean_wait_s.max(60.0),
            start: self.model.expected_start_in(expected),
            inv_now_exceed: if now_exceed > 0.0 { 1.0 / now_exceed } else { 0.0 },
            cursor,
        }
    }

    /// The probability that the job runs `ahead` s from now (`ahead` never decreasing for one
    /// tracker). The same figures as [`RuntimeModel::started_by`] and
    /// [`RuntimeModel::survival`], computed from the prepared clock.
    fn presence(&self, t: &mut Tracker, ahead: f64) -> f64 {
        let ahead = ahead.max(0.0);
        let (started, run_for) = if t.queued {
            let started = if t.wait_exp {
                1.0 - (-ahead * t.inv_wait).exp()
            } else {
                ((ahead - t.start_lo) * t.inv_start_width).clamp(0.0, 1.0)
            };
            if started <= 0.0 {
                return 0.0;
            }
            // Run from its expected start (or from now, if that is later than `ahead`).
            (started, ahead - t.start.min(ahead))
        } else {
            (1.0, ahead)
        };
        let at = t.elapsed + run_for;
        if t.inv_limit == 0.0 {
            // No limit: the heavy tail.
            let e = t.elapsed.max(3600.0);
            return started * e / (e + run_for);
        }
        if at >= t.limit {
            return 0.0;
        }
        if t.inv_now_exceed == 0.0 {
            return started;
        }
        let x = at * t.inv_limit;
        while self.shares.get(t.cursor).is_some_and(|&s| s <= x) {
            t.cursor += 1;
        }
        let exceed = (self.shares.len() - t.cursor) as f64 / self.shares.len() as f64;
        started * (exceed * t.inv_now_exceed).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests;
