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
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Width of a cap bucket, W per GPU: caps closer than this are one point.
pub const BUCKET_W: f64 = 10.0;

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

/// What was measured of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobEvidence {
    /// The latest uncapped point.
    pub uncapped: Option<Point>,
    /// The latest point per capped bucket (key: cap / [`BUCKET_W`], rounded).
    pub capped: BTreeMap<i64, Point>,
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
        let point = Point {
            cap_w: p.cap_w_per_gpu,
            power_w: p.power_w,
            tokens: p.tokens_per_s,
            at: p.at,
        };
        if p.uncapped {
            self.uncapped = Some(point);
        } else {
            self.capped.insert(bucket(p.cap_w_per_gpu), point);
        }
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
            let point = Point {
                cap_w: cap,
                power_w: reading.power.value(),
                tokens: m.tokens.value(),
                at: now,
            };
            readings.push((
                job.spec.id.clone(),
                point,
                job.spec.max_slowdown,
                job.spec.cap_range.max.value(),
            ));
            let previous = self.evidence.get(&job.spec.id).and_then(|e| e.previous(uncapped, cap));
            if worth_recording(previous, point.tokens, now) {
                points.push(ThroughputPoint {
                    at: now,
                    job: job.spec.id.to_string(),
                    cap_w_per_gpu: cap,
                    power_w: point.power_w,
                    tokens_per_s: point.tokens,
                    uncapped,
                    max_slowdown: job.spec.max_slowdown.map(|f| f.value()),
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

    fn check_tiers(
        &mut self,
        readings: &[(Arc<str>, Point, Option<crate::units::Fraction>, f64)],
        now: DateTime<Utc>,
        effects: &mut Vec<Effect>,
    ) {
        let mut backed_off = false;
        for (job, point, tier, max_cap) in readings {
            let Some(allowance) = tier.map(|f| f.value()) else {
                continue;
            };
            let Some(evidence) = self.evidence.get(job) else {
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
