//! What the gateway measured of each job's curve while it ran, and the QoS tiers checked on it.
//!
//! **Points.** Every telemetry sample in which a job's throughput is *steady* (the backend says
//! every sample its figure aggregates was taken once the cap now in force had settled) is a
//! point of the job's real curve: (cap per GPU, GPU-board power, tokens/s). The uncapped point
//! (cap at the range maximum) is the job's own T_max; capped points are kept per 10 W bucket.
//! A point is recorded in the ledger (`throughput_point`) when its bucket is new, when its figure
//! moved more than [`RECORD_CHANGE`], or every [`RECORD_EVERY_S`] seconds, and the durable state
//! is the fold of those records, so a restart keeps what was measured.
//!
//! **Tiers on measured throughput.** A job with a tier (largest slowdown its owner accepts) whose
//! measured slowdown at its cap (1 − capped tokens / uncapped tokens, both measured) exceeds the
//! allowance by more than [`TIER_TOLERANCE`] gets a floor: the cap at which, interpolating
//! linearly between its measured points, it would keep its allowance. Throughput is concave in
//! the cap on every curve measured in the paper, so the chord lies under the curve and the
//! linear floor is at or above the true one: the back-off errs toward the job. The floor is
//! recorded (`tier_backed_off`, with the measurement that triggered it), the plan is redone at
//! once with the job's range raised to it, and the shortfall moves onto the other jobs. Floors
//! only rise during a curtailment and are dropped when it ends.

use super::cluster::{JobState, Telemetry};
use super::entry::{Entry, PlanReason, Recorded, ThroughputPoint, TierBackedOff};
use super::{Controller, Effect};
use crate::alloc::{Elasticity, JobSpec};
use crate::curve::{CurvePoint, PowerCurve};
use crate::ids::JobId;
use crate::pfi::{CapGrid, DEFAULT_EPSILON, pfi_from_points};
use crate::units::{TokensPerSec, Watts, WattsPerGpu};
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Expected relative error of one steady throughput reading (the mean of the top decile of a
/// window's samples: a percent or two on a real job).
pub const READING_NOISE: f64 = 0.02;

/// How many readings' worth the prior spread of a reading ([`READING_NOISE`]) weighs when a
/// point's standard error is estimated from its own readings ([`point_standard_error`]).
pub const SPREAD_PRIOR_READINGS: f64 = 1.0;

/// The standard error of a point's mean throughput (tokens/s) from its readings: `mean` their
/// mean, `m2` the sum of their squared deviations from it, `count` how many.
///
/// The spread of a handful of readings is itself uncertain (two that happen to agree say
/// little), so it is pooled with a reading's usual spread ([`READING_NOISE`] of the figure) as a
/// prior worth [`SPREAD_PRIOR_READINGS`] readings, the conjugate update of a normal variance:
/// `s² = (m2 + k·(σ₀·mean)²) / (count − 1 + k)`, and the mean's error is `s/√count`. One reading
/// gets the prior's error; many get their own spread's.
#[must_use]
pub fn point_standard_error(mean: f64, m2: f64, count: u32) -> f64 {
    let n = f64::from(count.max(1));
    let prior = SPREAD_PRIOR_READINGS * (READING_NOISE * mean.abs()).powi(2);
    let m2 = if m2.is_finite() { m2.max(0.0) } else { 0.0 };
    let variance = (m2 + prior) / (n - 1.0 + SPREAD_PRIOR_READINGS);
    (variance / n).sqrt()
}

/// Width of a cap bucket, W per GPU: caps closer than this are one point.
pub const BUCKET_W: f64 = 10.0;

/// How far a cap may move, W per GPU, and its job's throughput still count as steady at the
/// cap where settling began: a throughput reading is a point of one bucket ([`BUCKET_W`]), and a
/// plan that mixes in the equal cut (every hedged plan, and the equal rule itself) moves every
/// job's cap by a few watts at each closed-loop trim. A backend that restarted settling at every
/// such move would never see a steady reading during a curtailment, and nothing would be learned
/// from it.
pub const STEADY_CAP_TOLERANCE_W: f64 = BUCKET_W;

/// Whether a job whose cap moved from `anchor` (the cap its settling began at) to `cap`, W per
/// GPU, must settle again.
#[must_use]
pub fn cap_moved(anchor: f64, cap: f64) -> bool {
    // A non-finite cap (never expected) counts as a move.
    !matches!((cap - anchor).abs(), moved if moved <= STEADY_CAP_TOLERANCE_W)
}

/// A point is recorded again when its throughput moved by more than this share.
pub const RECORD_CHANGE: f64 = 0.05;

/// ... or when this long has passed since it was last recorded, s.
pub const RECORD_EVERY_S: i64 = 300;

/// Measured slowdown beyond the tier's allowance tolerated before backing off (absolute):
/// a reported figure is noisy by a percent or two.
pub const TIER_TOLERANCE: f64 = 0.02;

/// One measured point of a job's curve.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Point {
    /// Cap per GPU in force, W.
    pub cap_w: f64,
    /// The job's GPU-board power, W.
    pub power_w: f64,
    /// The job's reported throughput, tokens/s.
    pub tokens: f64,
    /// When it was measured.
    pub at: DateTime<Utc>,
}

/// Most profiles kept: beyond, the one measured longest ago is forgotten (a site runs far fewer
/// distinct training configurations; this bounds memory against a stream of unique names).
pub const MAX_PROFILES: usize = 100_000;

/// Most readings one point averages: beyond, a new reading still moves it by 1/16, so a job
/// whose behaviour changes (a new software version under the same signature) is followed.
pub const MAX_AVERAGED: u32 = 16;

/// What was measured of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobEvidence {
    /// The uncapped point: the running mean of its readings.
    pub uncapped: Option<Point>,
    /// One point per capped bucket (key: cap / [`BUCKET_W`], rounded), the running mean of its
    /// readings, so that repeated measurements shrink the noise.
    pub capped: BTreeMap<i64, Point>,
    /// Readings averaged into each capped point, and into the uncapped one (key `i64::MAX`).
    pub readings: BTreeMap<i64, u32>,
    /// The spread of each point's readings (same keys): the sum of their squared deviations from
    /// the point's mean (Welford's), from which the point's standard error is estimated
    /// ([`point_standard_error`]). Once a point averages [`MAX_AVERAGED`] readings it follows
    /// new ones with that weight, and so does its spread.
    pub spread: BTreeMap<i64, f64>,
    /// Bumped by every reading, so that what was learned from it is recomputed only when it
    /// changed (`learned` costs about 1 µs a job; the inventory pass runs under the lock).
    #[serde(skip)]
    pub version: u64,
}

/// `old` (the mean of `count` readings) with `new` folded in; the cap and time are the new one's.
fn averaged(old: &Point, new: &Point, count: u32) -> Point {
    let n = f64::from(count);
    Point {
        cap_w: new.cap_w,
        power_w: (old.power_w * n + new.power_w) / (n + 1.0),
        tokens: (old.tokens * n + new.tokens) / (n + 1.0),
        at: new.at,
    }
}

/// The bucket of a cap.
#[must_use]
pub fn bucket(cap_w: f64) -> i64 {
    // Caps are bounded by the agent's 100 kW limit, so the rounded value fits.
    #[allow(clippy::cast_possible_truncation)]
    let b = (cap_w / BUCKET_W).round() as i64;
    b
}

impl JobEvidence {
    /// Fold one recorded point.
    pub fn add(&mut self, p: &ThroughputPoint) {
        self.version += 1;
        let point = Point {
            cap_w: p.cap_w_per_gpu,
            power_w: p.power_w,
            tokens: p.tokens_per_s,
            at: p.at,
        };
        let key = if p.uncapped { i64::MAX } else { bucket(p.cap_w_per_gpu) };
        let count = self.readings.entry(key).or_insert(0);
        let spread = self.spread.entry(key).or_insert(0.0);
        let slot = if p.uncapped {
            self.uncapped.as_mut()
        } else {
            self.capped.get_mut(&key)
        };
        match slot {
            Some(old) if *count > 0 => {
                let before = old.tokens;
                *old = averaged(old, &point, *count);
                // Welford's update; at the cap on readings the sum is kept at that many.
                let n = f64::from(*count);
                let grown = *spread + (point.tokens - before) * (point.tokens - old.tokens);
                *spread = if *count >= MAX_AVERAGED {
                    grown * n / (n + 1.0)
                } else {
                    grown
                };
                if !spread.is_finite() || *spread < 0.0 {
                    *spread = 0.0;
                }
            }
            _ => {
                if p.uncapped {
                    self.uncapped = Some(point);
                } else {
                    self.capped.insert(key, point);
                }
                *count = 0;
                *spread = 0.0;
            }
        }
        *count = (*count + 1).min(MAX_AVERAGED);
    }

    /// The standard error of a point's mean throughput (tokens/s) from its readings' spread and
    /// count ([`point_standard_error`]); `key` as in [`Self::readings`].
    #[must_use]
    pub fn standard_error(&self, key: i64, tokens: f64) -> f64 {
        let count = self.readings.get(&key).copied().unwrap_or(1);
        let spread = self.spread.get(&key).copied().unwrap_or(0.0);
        point_standard_error(tokens, spread, count)
    }

    /// The point recorded for the same bucket (or the uncapped one).
    #[must_use]
    pub fn previous(&self, uncapped: bool, cap_w: f64) -> Option<&Point> {
        if uncapped {
            self.uncapped.as_ref()
        } else {
            self.capped.get(&bucket(cap_w))
        }
    }
}

/// Capped points needed, the lowest within [`FULL_REACH`] of the cap range above its minimum,
/// for the measured points to stand as the job's whole curve.
pub const FULL_POINTS: usize = 3;

/// See [`FULL_POINTS`]: the share of the cap range above its minimum the lowest point must reach.
pub const FULL_REACH: f64 = 0.25;

/// How much of a job's curve was measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Some capped points, above the lowest quarter of the range.
    Partial,
    /// [`FULL_POINTS`] capped points reaching the lowest quarter of the range.
    Full,
}

/// What the measured points say of a job, for the planner and the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    /// What the planner is given.
    pub elasticity: Elasticity,
    /// How much was measured.
    pub level: Level,
    /// The evidence, for `elasticity_known`.
    pub note: String,
    /// The PFI of the measured points (for the fleet prior), when it could be computed.
    pub pfi: Option<f64>,
}

/// Jobs with a measured PFI needed before their spread stands in as the prior of the jobs
/// nothing is known of ([`fleet_prior`]).
pub const FLEET_PRIOR_MIN_JOBS: usize = 5;

/// The prior for a job nothing is known of, once [`FLEET_PRIOR_MIN_JOBS`] jobs of this site were
/// measured: a PFI predicted as the mean of theirs, with their spread as its error (at least the
/// paper's predictor error, 0.241), rounded to 0.05 so that it moves only when the measured
/// fleet does. Before that, `None`: such a job stays *unknown* and is cut last (the conservative
/// fallback), which is safe but never measures it; with the prior it is cut as a typical job of
/// this site would be, hedged by the spread, so that the next event measures it and its own
/// curve replaces the prior.
#[must_use]
pub fn fleet_prior(pfis: &[f64]) -> Option<(Elasticity, String)> {
    let finite: Vec<f64> = pfis.iter().copied().filter(|p| p.is_finite() && *p > 0.0).collect();
    if finite.len() < FLEET_PRIOR_MIN_JOBS {
        return None;
    }
    let n = finite.len() as f64;
    let mean = finite.iter().sum::<f64>() / n;
    let var = finite.iter().map(|p| (p - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let round = |v: f64| (v * 20.0).round() / 20.0;
    let mean = round(mean.clamp(0.5, 5.0));
    let sd = round(var.sqrt().max(crate::predictor::PAPER_PREDICTOR_RMSE));
    Some((
        Elasticity::PredictedPfi { mean, sd, grid: None },
        format!("fleet prior: pfi {mean:.2}±{sd:.2} from {} measured jobs", finite.len()),
    ))
}

impl JobEvidence {
    /// What the measured points say of the job's elasticity, or `None` while they say nothing
    /// (no uncapped point, no capped point, or no measured cap that bound).
    ///
    /// Either way the planner is given the measured points with each one's standard error
    /// ([`Elasticity::Measured`] with `tokens_sd`); it fits its family to them, denoises them
    /// and hedges the error left (module `crate::estimate::measured`), and below the lowest
    /// point the fitted family member stands in for what was not measured:
    ///
    /// - **Full**: [`FULL_POINTS`] capped points reaching down near the range minimum;
    /// - **Partial**: fewer, or higher up.
    ///
    /// (Until issue 29 a partial curve was given as the PFI of its points on their caps, taken
    /// as exact, and a full one as points shrunk toward the family with a fixed 2 % noise: under
    /// the `progress` objective, where plans rank jobs by the slopes of curves that differ by
    /// less than one reading's noise, those plans lost to the equal cut. `flexgate simulate
    /// --season 20 --objective progress` has the figures.)
    ///
    /// A measured curve's throughput is scaled so that its uncapped point is the planner's
    /// T_max for the job (`spec.uncapped_tokens`): with node agents T_max is the job's GPU
    /// count, and a curve in real tokens/s would be ranked against other jobs on another scale.
    #[must_use]
    pub fn learned(&self, spec: &JobSpec) -> Option<Learned> {
        let uncapped = self.uncapped.filter(|u| u.tokens > 0.0 && u.power_w > 0.0)?;
        let (lo, hi) = (spec.cap_range.min.value(), spec.cap_range.max.value());
        let mut capped: Vec<Point> = self
            .capped
            .values()
            .filter(|p| p.cap_w < hi - BUCKET_W / 2.0 && p.cap_w >= lo - 0.5 && p.tokens.is_finite() && p.power_w > 0.0)
            .copied()
            .collect();
        if capped.is_empty() {
            return None;
        }
        capped.sort_by(|a, b| a.cap_w.total_cmp(&b.cap_w));
        let span = format!("{:.0}–{:.0} W", capped[0].cap_w, hi);
        let measured_points = capped.len() + 1;
        // A cap that did not bind measures nothing of the curve.
        let (pfi, _) = self.measured_pfi(&capped, &uncapped, hi)?;
        let deep = capped.len() >= FULL_POINTS && capped[0].cap_w <= lo + FULL_REACH * (hi - lo);
        let mut points = capped;
        points.push(Point { cap_w: hi, ..uncapped });
        let curve = self.curve(spec, &points, uncapped.tokens)?;
        let tokens_sd = self.points_standard_errors(spec, &points, &uncapped);
        Some(Learned {
            elasticity: Elasticity::measured(curve, tokens_sd),
            level: if deep { Level::Full } else { Level::Partial },
            note: if deep {
                format!("measured curve: {measured_points} points, {span}")
            } else {
                format!("partial curve: {measured_points} measured points, {span}, pfi {pfi:.2}")
            },
            pfi: Some(pfi),
        })
    }

    /// The standard error of each of `points`' throughput (the uncapped one last), on the
    /// planner's scale (the uncapped point's throughput is `spec.uncapped_tokens`), from each
    /// point's readings ([`point_standard_error`]). A capped point's relative throughput is its
    /// figure over the uncapped one, so the uncapped point's own error moves it too; the two are
    /// added in quadrature. The uncapped point itself is the scale, exact by definition.
    ///
    /// The planner denoises the points against its family and hedges what error is left
    /// (module `crate::estimate::measured`): a 2 % error on points 100 W apart moves a slope by
    /// far more than 2 %, and planning ranks jobs by slopes. (Until issue 29 the points were
    /// shrunk here toward the family member of their own PFI, with a fixed 2 % noise, and the
    /// planner then took them as exact.)
    fn points_standard_errors(&self, spec: &JobSpec, points: &[Point], uncapped: &Point) -> Vec<f64> {
        let scale = spec.uncapped_tokens.value() / uncapped.tokens;
        let top_relative = self.standard_error(i64::MAX, uncapped.tokens) / uncapped.tokens;
        points
            .iter()
            .map(|p| {
                if p.cap_w >= spec.cap_range.max.value() - BUCKET_W / 2.0 {
                    return 0.0;
                }
                let own = self.standard_error(bucket(p.cap_w), p.tokens);
                let relative = (own / uncapped.tokens).hypot(p.tokens / uncapped.tokens * top_relative);
                relative * uncapped.tokens * scale
            })
            .collect()
    }

    /// The PFI of the measured capped points against the uncapped one, on their caps.
    fn measured_pfi(&self, capped: &[Point], uncapped: &Point, hi: f64) -> Option<(f64, CapGrid)> {
        let mut caps: Vec<WattsPerGpu> = capped.iter().map(|p| WattsPerGpu(p.cap_w)).collect();
        caps.push(WattsPerGpu(hi));
        let measured: Vec<(WattsPerGpu, Watts, TokensPerSec)> = capped
            .iter()
            .map(|p| (WattsPerGpu(p.cap_w), Watts(p.power_w), TokensPerSec(p.tokens)))
            .collect();
        let pfi = pfi_from_points(
            (Watts(uncapped.power_w), TokensPerSec(uncapped.tokens)),
            &measured,
            CapGrid(caps),
            DEFAULT_EPSILON,
        )
        .ok()
        .filter(|p| p.value.is_finite() && p.value > 0.0)?;
        Some((pfi.value, pfi.grid))
    }

    /// `points` (increasing caps, the uncapped one last) as a curve on the planner's scale:
    /// power non-decreasing in the cap and never above it (a non-binding cap reads a little
    /// noisy), throughput scaled so that the uncapped point is the planner's T_max.
    fn curve(&self, spec: &JobSpec, points: &[Point], uncapped_tokens: f64) -> Option<PowerCurve> {
        let scale = spec.uncapped_tokens.value() / uncapped_tokens;
        let mut curve_points: Vec<CurvePoint> = points
            .iter()
            .map(|p| CurvePoint {
                cap: WattsPerGpu(p.cap_w),
                power: Watts(p.power_w),
                tokens: TokensPerSec((p.tokens * scale).max(f64::MIN_POSITIVE)),
            })
            .collect();
        crate::curve::settle_measured_power(spec.gpus, &mut curve_points);
        PowerCurve::new(spec.gpus, curve_points).ok()
    }
}

/// Whether a new reading is worth a ledger record, given the last one recorded for its bucket.
#[must_use]
pub fn worth_recording(previous: Option<&Point>, tokens: f64, at: DateTime<Utc>) -> bool {
    match previous {
        None => true,
        Some(p) => {
            let moved = if p.tokens > 0.0 {
                (tokens - p.tokens).abs() / p.tokens > RECORD_CHANGE
            } else {
                tokens > 0.0
            };
            moved || (at - p.at).num_seconds() >= RECORD_EVERY_S
        }
    }
}

/// The cap per GPU at which a job measured at `current` would keep `1 − allowance` of its
/// uncapped throughput, interpolating linearly between its measured points at higher caps
/// (the uncapped one included); `None` when it is within its tier (with the tolerance), or
/// when nothing above `current` was measured.
#[must_use]
pub fn tier_floor(allowance: f64, current: &Point, evidence: &JobEvidence, max_cap_w: f64) -> Option<f64> {
    let uncapped = evidence.uncapped?;
    if uncapped.tokens <= 0.0 || current.cap_w >= max_cap_w - 0.5 {
        return None;
    }
    let slowdown = 1.0 - current.tokens / uncapped.tokens;
    if slowdown <= allowance + TIER_TOLERANCE {
        return None;
    }
    let wanted = (1.0 - allowance) * uncapped.tokens;
    // The lowest measured point above the current cap that keeps the allowance.
    let above = evidence
        .capped
        .values()
        .filter(|p| p.cap_w > current.cap_w + 0.5 && p.tokens >= wanted)
        .min_by(|a, b| a.cap_w.total_cmp(&b.cap_w))
        .copied()
        .unwrap_or(Point {
            cap_w: max_cap_w,
            ..uncapped
        });
    let gain = above.tokens - current.tokens;
    let floor = if gain > 0.0 {
        current.cap_w + (above.cap_w - current.cap_w) * ((wanted - current.tokens) / gain).clamp(0.0, 1.0)
    } else {
        above.cap_w
    };
    Some(floor.clamp(current.cap_w, max_cap_w))
}

/// The measured slowdown of `current` against the uncapped point.
#[must_use]
pub fn slowdown(current: &Point, uncapped: &Point) -> f64 {
    1.0 - current.tokens / uncapped.tokens
}

/// What a cached [`JobEvidence::learned`] was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LearnedKey {
    version: u64,
    range: (u64, u64),
    t_max: u64,
    gpus: u32,
}

/// A job's learned knowledge, cached with what it was computed from.
pub(crate) type LearnedCache = std::collections::HashMap<JobId, (LearnedKey, Option<Learned>)>;

/// One steady reading to check against its job's tier: job, profile key, the point, the tier,
/// the range maximum.
type TierReading = (JobId, Arc<str>, Point, Option<crate::units::Fraction>, f64);

impl Controller {
    /// Take each steady reading as a point of its job's curve, then check the tiers on it.
    pub(crate) fn learn_from(&mut self, t: &Telemetry, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let jobs: std::collections::HashMap<&str, &JobState> = self.jobs.iter().map(|j| (&*j.spec.id, j)).collect();
        let mut points = Vec::new();
        let mut readings = Vec::new();
        for reading in &t.jobs {
            let Some(m) = reading.tokens.filter(|m| m.steady) else {
                continue;
            };
            let Some(job) = jobs.get(&*reading.job) else {
                continue;
            };
            if self.suspended.contains(&job.spec.id) || !m.tokens.value().is_finite() {
                continue;
            }
            let cap = job.applied_cap.value();
            let uncapped = cap >= job.spec.cap_range.max.value() - 0.5;
            // A reading that draws more than the cap allows was not taken at that cap: the
            // telemetry predates the cap's taking effect (a node reports on its own clock, and a
            // busy one late). Taken as a point, it would make the job's sweep invalid
            // (`PowerCurve::new` refuses it, and `flexgate pfi` on its exported profile failed).
            let allowed = cap * f64::from(job.spec.gpus) * crate::curve::POWER_ABOVE_CAP_TOLERANCE;
            if !uncapped && reading.power.value() > allowed {
                continue;
            }
            let point = Point {
                cap_w: cap,
                power_w: reading.power.value(),
                tokens: m.tokens.value(),
                at: now,
            };
            readings.push((
                job.spec.id.clone(),
                job.profile_key().clone(),
                point,
                job.spec.max_slowdown,
                job.spec.cap_range.max.value(),
            ));
            let previous = self
                .evidence
                .get(job.profile_key())
                .and_then(|e| e.previous(uncapped, cap));
            if worth_recording(previous, point.tokens, now) {
                points.push(ThroughputPoint {
                    at: now,
                    job: job.spec.id.to_string(),
                    cap_w_per_gpu: cap,
                    power_w: point.power_w,
                    tokens_per_s: point.tokens,
                    uncapped,
                    max_slowdown: job.spec.max_slowdown.map(|f| f.value()),
                    profile: job.signature.as_ref().map(ToString::to_string),
                    gpus: Some(job.spec.gpus),
                });
            }
        }
        for p in points {
            self.record(effects, Recorded::new(Entry::ThroughputPoint(p), None));
        }
        if self.plan.is_some() {
            self.check_tiers(&readings, now, effects);
        }
    }

    fn check_tiers(&mut self, readings: &[TierReading], now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let mut backed_off = false;
        for (job, profile, point, tier, max_cap) in readings {
            let Some(allowance) = tier.map(|f| f.value()) else {
                continue;
            };
            let Some(evidence) = self.evidence.get(profile) else {
                continue;
            };
            let Some(floor) = tier_floor(allowance, point, evidence, *max_cap) else {
                continue;
            };
            if self.tier_floors.get(job).is_some_and(|f| *f >= floor - 1.0) {
                continue;
            }
            let Some(uncapped) = evidence.uncapped else { continue };
            let measured = slowdown(point, &uncapped);
            effects.push(Effect::Warn(format!(
                "job {job} is measured {:.1} % slower at {:.0} W/GPU than uncapped, beyond its tier's {:.0} %: raising its floor to {floor:.0} W/GPU and re-planning the others",
                measured * 100.0,
                point.cap_w,
                allowance * 100.0
            )));
            let event = self.binding_event();
            self.record(
                effects,
                Recorded::new(
                    Entry::TierBackedOff(TierBackedOff {
                        at: now,
                        job: job.to_string(),
                        cap_w_per_gpu: point.cap_w,
                        tokens_per_s: point.tokens,
                        uncapped_tokens_per_s: uncapped.tokens,
                        measured_slowdown: measured,
                        allowance,
                        floor_w_per_gpu: floor,
                    }),
                    event,
                ),
            );
            backed_off = true;
        }
        if backed_off {
            self.pending = Some(PlanReason::TierBackoff);
            effects.push(Effect::Wake);
        }
    }
}

impl JobEvidence {
    /// When anything of it was last measured.
    #[must_use]
    pub fn last_measured(&self) -> Option<DateTime<Utc>> {
        self.capped.values().chain(self.uncapped.iter()).map(|p| p.at).max()
    }
}

impl Controller {
    pub(crate) fn forget_oldest_profile(&mut self) {
        let oldest = self
            .evidence
            .iter()
            .min_by_key(|(_, e)| e.last_measured())
            .map(|(k, _)| k.clone());
        if let Some(key) = oldest {
            self.evidence.remove(&key);
        }
    }

    /// The jobs as the cluster reports them, with what was measured of each standing in for what
    /// the cluster says where it says more, and the note of that evidence for the ledger.
    pub(crate) fn with_learned_elasticity(&mut self, mut jobs: Vec<JobState>) -> Vec<JobState> {
        let mut notes = std::collections::HashMap::new();
        let mut cache = std::mem::take(&mut self.learned_cache);
        let mut fresh = std::collections::HashMap::with_capacity(cache.len());
        for job in &mut jobs {
            let Some(evidence) = self.evidence.get(job.profile_key()) else {
                continue;
            };
            // What was learned depends on the evidence and on the spec's range and T_max.
            let key = LearnedKey {
                version: evidence.version,
                range: (
                    job.spec.cap_range.min.value().to_bits(),
                    job.spec.cap_range.max.value().to_bits(),
                ),
                t_max: job.spec.uncapped_tokens.value().to_bits(),
                gpus: job.spec.gpus,
            };
            let learned = match cache.remove(&job.spec.id) {
                Some((k, learned)) if k == key => learned,
                _ => evidence.learned(&job.spec),
            };
            if let Some(learned) = &learned {
                job.spec.elasticity = learned.elasticity.clone();
                notes.insert(job.spec.id.clone(), learned.note.clone());
            }
            fresh.insert(job.spec.id.clone(), (key, learned));
        }
        // Jobs nothing is known of take the fleet's measured PFIs as their prior.
        let pfis: Vec<f64> = fresh.values().filter_map(|(_, l)| l.as_ref()?.pfi).collect();
        let prior = fleet_prior(&pfis);
        self.outlook.fleet_prior = prior.as_ref().map(|(p, _)| p.clone());
        if let Some((prior, note)) = prior {
            for job in &mut jobs {
                if job.spec.elasticity == Elasticity::Unknown {
                    job.spec.elasticity = prior.clone();
                    notes.insert(job.spec.id.clone(), note.clone());
                }
            }
        }
        self.learned_cache = fresh;
        self.knowledge_notes = Arc::new(notes);
        jobs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("valid")
    }

    fn p(cap_w: f64, tokens: f64) -> Point {
        Point {
            cap_w,
            power_w: cap_w * 8.0,
            tokens,
            at: at(0),
        }
    }

    fn evidence(uncapped: f64, capped: &[(f64, f64)]) -> JobEvidence {
        JobEvidence {
            uncapped: Some(p(700.0, uncapped)),
            capped: capped.iter().map(|&(c, t)| (bucket(c), p(c, t))).collect(),
            readings: BTreeMap::new(),
            spread: BTreeMap::new(),
            version: 0,
        }
    }

    #[test]
    fn within_the_tier_and_its_tolerance_nothing_happens() {
        let e = evidence(1000.0, &[]);
        assert_eq!(
            tier_floor(0.10, &p(400.0, 895.0), &e, 700.0),
            None,
            "10.5 % ≤ 10 % + 2 %"
        );
        assert_eq!(
            tier_floor(0.10, &p(700.0, 500.0), &e, 700.0),
            None,
            "uncapped: nothing to raise"
        );
        assert_eq!(tier_floor(0.10, &p(400.0, 500.0), &JobEvidence::default(), 700.0), None);
    }

    #[test]
    fn the_floor_interpolates_to_the_allowance_between_measured_points() {
        // At 300 W: 600 tokens/s (40 % slower); tier 10 % → 900 wanted.
        // Chord to the uncapped point: 300 + 400 × (300 / 400) = 600 W.
        assert_eq!(
            tier_floor(0.10, &p(300.0, 600.0), &evidence(1000.0, &[]), 700.0),
            Some(600.0)
        );
        // A point measured at 450 W with 950 tokens/s keeps the tier: interpolate to it instead.
        // 300 + 150 × (300 / 350) = 428.57 W.
        let floor = tier_floor(0.10, &p(300.0, 600.0), &evidence(1000.0, &[(450.0, 950.0)]), 700.0).expect("a floor");
        assert!((floor - (300.0 + 150.0 * 300.0 / 350.0)).abs() < 1e-9, "{floor}");
    }

    #[test]
    fn on_a_concave_curve_the_linear_floor_keeps_the_tier() {
        // True curve: tokens = 1000 × (cap / 700)^0.5, concave. Any cap c with a point below the
        // tier gets a floor f whose true throughput is at least the allowance.
        let truth = |cap: f64| 1000.0 * (cap / 700.0).sqrt();
        for cap in [200.0, 250.0, 300.0, 400.0, 500.0] {
            let current = p(cap, truth(cap));
            if let Some(floor) = tier_floor(0.10, &current, &evidence(1000.0, &[]), 700.0) {
                assert!(
                    truth(floor) >= 900.0 - 1e-9,
                    "cap {cap}: floor {floor} keeps {}",
                    truth(floor)
                );
            }
        }
    }

    fn spec(tokens: f64) -> JobSpec {
        JobSpec {
            id: "j".into(),
            gpus: 8,
            cap_range: crate::alloc::CapRange::H200,
            uncapped_power: Watts(5600.0),
            uncapped_tokens: TokensPerSec(tokens),
            elasticity: Elasticity::Unknown,
            max_slowdown: None,
            priority: 1.0,
        }
    }

    #[test]
    fn knowledge_grows_from_nothing_to_a_partial_then_a_full_measured_curve() {
        // Truth: tokens = 1000 × (cap / 700)^0.6 (flexible); power = 8 × cap.
        let at_cap = |cap: f64| p(cap, 1000.0 * (cap / 700.0f64).powf(0.6));
        let mut e = JobEvidence::default();
        assert_eq!(e.learned(&spec(8.0)), None, "nothing measured");
        e.uncapped = Some(at_cap(700.0));
        assert_eq!(e.learned(&spec(8.0)), None, "only the uncapped point");
        e.capped.insert(bucket(550.0), at_cap(550.0));
        let partial = e.learned(&spec(8.0)).expect("a partial curve");
        assert_eq!(partial.level, Level::Partial);
        let Elasticity::Measured { curve, tokens_sd } = &partial.elasticity else {
            panic!("the measured points: {partial:?}")
        };
        assert_eq!(curve.points().len(), 2);
        assert_eq!(tokens_sd.len(), 2);
        // Its PFI, for the fleet prior: (1 − P/Pmax) / (1 − T/Tmax) at the one capped point.
        let x: f64 = 550.0 / 700.0;
        let value = partial.pfi.expect("a pfi");
        assert!((value - (1.0 - x) / (1.0 - x.powf(0.6))).abs() < 1e-9, "{value}");
        assert_eq!(
            partial.note,
            format!("partial curve: 2 measured points, 550–700 W, pfi {value:.2}")
        );
        for cap in [250.0, 400.0] {
            e.capped.insert(bucket(cap), at_cap(cap));
        }
        let full = e.learned(&spec(8.0)).expect("a full curve");
        assert_eq!(full.level, Level::Full);
        let Elasticity::Measured { curve, tokens_sd } = &full.elasticity else {
            panic!("the measured curve: {full:?}")
        };
        // Scaled so that its uncapped point is the planner's T_max (8, the GPU count), the
        // readings as they were (the planner denoises them), each with its standard error.
        assert!((curve.uncapped().tokens.value() - 8.0).abs() < 1e-9);
        let scaled = 8.0 * (400.0f64 / 700.0).powf(0.6);
        assert!((curve.tokens_at_cap(WattsPerGpu(400.0)).value() - scaled).abs() <= 1e-9);
        assert_eq!(tokens_sd.len(), curve.points().len());
        assert_eq!(tokens_sd.last(), Some(&0.0), "the uncapped point is the scale");
        // One reading each: the prior's error, a reading's usual spread (and the uncapped
        // point's, in quadrature).
        let one = READING_NOISE * scaled;
        assert!(tokens_sd[1] >= one && tokens_sd[1] < 1.5 * one, "{tokens_sd:?}");
        assert_eq!(full.note, "measured curve: 4 points, 250–700 W");
    }

    /// A steady reading of `tokens` at a 400 W cap.
    fn reading(tokens: f64) -> ThroughputPoint {
        ThroughputPoint {
            at: at(0),
            job: "j".into(),
            cap_w_per_gpu: 400.0,
            power_w: 3200.0,
            tokens_per_s: tokens,
            uncapped: false,
            max_slowdown: None,
            profile: None,
            gpus: None,
        }
    }

    #[test]
    fn a_point_read_many_times_has_the_standard_error_of_its_readings() {
        let mut e = JobEvidence::default();
        // Readings 1 % apart about 1000: their own spread soon outweighs the 2 % prior.
        let mut errors = Vec::new();
        for k in 0..12 {
            e.add(&reading(if k % 2 == 0 { 990.0 } else { 1010.0 }));
            errors.push(e.standard_error(bucket(400.0), 1000.0));
        }
        assert!(errors.windows(2).all(|w| w[1] < w[0]), "{errors:?}");
        let last = errors[errors.len() - 1];
        // s² = (12 · 10² + 20²) / 12, over √12.
        let expected = ((12.0 * 100.0 + 400.0) / 12.0f64).sqrt() / 12.0f64.sqrt();
        assert!((last - expected).abs() < 1e-9, "{last} vs {expected}");
        // Past the cap on readings the spread follows new readings with that weight.
        for _ in 0..100 {
            e.add(&reading(1000.0));
        }
        assert!(e.standard_error(bucket(400.0), 1000.0) < last);
        assert!(e.spread[&bucket(400.0)].is_finite());
    }

    #[test]
    fn repeated_readings_of_a_point_are_averaged() {
        let mut e = JobEvidence::default();
        for tokens in [900.0, 1100.0, 1000.0] {
            e.add(&reading(tokens));
        }
        assert!((e.capped[&bucket(400.0)].tokens - 1000.0).abs() < 1e-9);
        assert_eq!(e.readings[&bucket(400.0)], 3);
    }

    #[test]
    fn a_point_is_recorded_when_new_moved_or_old() {
        let previous = p(400.0, 1000.0);
        assert!(worth_recording(None, 1.0, at(0)));
        assert!(!worth_recording(Some(&previous), 1040.0, at(10)));
        assert!(worth_recording(Some(&previous), 1060.0, at(10)));
        assert!(worth_recording(Some(&previous), 1000.0, at(RECORD_EVERY_S)));
        assert_eq!(bucket(404.0), bucket(396.0));
        assert_ne!(bucket(404.0), bucket(416.0));
    }
}
