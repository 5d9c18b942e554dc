//! One job's power–throughput curve, as measured by a sweep of static per-GPU caps.
//!
//! A point says: with every GPU of the job capped at `cap`, the job drew `power` in aggregate
//! (below `gpus × cap` when the cap does not bind) and trained at `tokens` per second. Between
//! measured caps we interpolate linearly, exactly as the paper reads throughput off its curves.
//! For optimisation we also need the *upper concave hull* in (power, tokens) space: on it the
//! marginal tokens per watt only falls as power grows, which makes greedy water-filling exact.

use crate::units::{TokensPerSec, Watts, WattsPerGpu};
use serde::{Deserialize, Serialize};

/// One measured operating point of a job.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// Per-GPU power cap applied to every GPU of the job.
    pub cap: WattsPerGpu,
    /// The job's realized aggregate GPU power under that cap.
    pub power: Watts,
    /// The job's throughput under that cap.
    pub tokens: TokensPerSec,
}

/// Why a set of points is not a usable curve. Each variant names the offending point so that a
/// person fixing a fleet file or a sweep knows where to look.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CurveError {
    /// No points at all.
    #[error("a power curve needs at least one measured point; got none")]
    Empty,
    /// A job must have GPUs for its per-GPU caps to mean anything.
    #[error("a power curve needs a GPU count of at least 1")]
    NoGpus,
    /// NaN or infinite field.
    #[error("point {index}: {field} is not a finite number")]
    NotFinite {
        /// Position of the point in the input.
        index: usize,
        /// Field name: `cap_w`, `power_w` or `tokens_per_s`.
        field: &'static str,
    },
    /// Negative or zero where a positive number is required.
    #[error("point {index}: {field} must be positive, got {value}")]
    NotPositive {
        /// Position of the point in the input.
        index: usize,
        /// Field name.
        field: &'static str,
        /// The offending value.
        value: f64,
    },
    /// Two points at the same cap.
    #[error("points {first} and {second} have the same cap {cap_w} W")]
    DuplicateCap {
        /// Earlier point (input order).
        first: usize,
        /// Later point (input order).
        second: usize,
        /// The repeated cap.
        cap_w: f64,
    },
    /// Realized power fell when the cap was raised: the sweep is broken or mislabeled.
    #[error(
        "power is not monotone in the cap: {higher_power_w} W at cap {lower_cap_w} W but \
         {lower_power_w} W at the higher cap {higher_cap_w} W"
    )]
    NonMonotonePower {
        /// The lower cap.
        lower_cap_w: f64,
        /// Power measured at the lower cap.
        higher_power_w: f64,
        /// The higher cap.
        higher_cap_w: f64,
        /// Power measured at the higher cap.
        lower_power_w: f64,
    },
    /// A cap cannot make a GPU draw more than the cap (beyond measurement noise).
    #[error(
        "point {index}: realized power {power_w} W exceeds {gpus} GPUs × cap {cap_w} W by more \
         than 2 %"
    )]
    PowerAboveCap {
        /// Position of the point in the input.
        index: usize,
        /// Realized power.
        power_w: f64,
        /// GPU count of the job.
        gpus: u32,
        /// The cap.
        cap_w: f64,
    },
}

/// A validated power–throughput curve for one job: points sorted by cap, power non-decreasing.
///
/// The highest-cap point is the job's uncapped reference (P_max, T_max): production always knows
/// it, because it is simply what the job draws and delivers today.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PowerCurve {
    gpus: u32,
    points: Vec<CurvePoint>,
}

/// Relative slack allowed between realized power and `gpus × cap` (meter and sampling noise).
/// The controller applies the same rule before it takes a reading as a point of a job's curve,
/// so that what it learns is always a valid sweep.
pub const POWER_ABOVE_CAP_TOLERANCE: f64 = 1.02;

/// Measured readings as a sweep's points: sorted by cap, each point's power at most what its
/// cap allows and at least the power at the next lower cap. A cap near or above the job's own
/// draw does not bind, and two such caps read the same power give or take the meter's noise
/// (3,364 W at 416 W/GPU, 3,353 W at 431 W/GPU): a real measurement that
/// [`PowerCurve::new`] would refuse as non-monotone. The gateway learns its curves through this,
/// and `flexgate pfi` reads an exported profile through it too, so both see the same sweep.
pub fn settle_measured_power(gpus: u32, points: &mut [CurvePoint]) {
    points.sort_by(|a, b| a.cap.value().total_cmp(&b.cap.value()));
    let mut floor_w = 0.0f64;
    for p in points.iter_mut() {
        let power = p.power.value().min(f64::from(gpus) * p.cap.value()).max(floor_w);
        floor_w = power;
        p.power = Watts(power);
    }
}

impl PowerCurve {
    /// Validate and sort measured points.
    ///
    /// Errors on: no points, NaN/infinite or non-positive numbers, duplicate caps, power that
    /// falls as the cap rises, or power above `gpus × cap` (beyond 2 % noise). Throughput is not
    /// required to be monotone: noisy sweeps exist, and the concave hull irons them out.
    pub fn new(gpus: u32, points: Vec<CurvePoint>) -> Result<Self, CurveError> {
        if gpus == 0 {
            return Err(CurveError::NoGpus);
        }
        if points.is_empty() {
            return Err(CurveError::Empty);
        }
        for (index, p) in points.iter().enumerate() {
            for (field, value) in [
                ("cap_w", p.cap.value()),
                ("power_w", p.power.value()),
                ("tokens_per_s", p.tokens.value()),
            ] {
                if !value.is_finite() {
                    return Err(CurveError::NotFinite { index, field });
                }
                if value <= 0.0 {
                    return Err(CurveError::NotPositive { index, field, value });
                }
            }
            let ceiling = p.cap.times_gpus(gpus).value() * POWER_ABOVE_CAP_TOLERANCE;
            if p.power.value() > ceiling {
                return Err(CurveError::PowerAboveCap {
                    index,
                    power_w: p.power.value(),
                    gpus,
                    cap_w: p.cap.value(),
                });
            }
        }
        let mut order: Vec<usize> = (0..points.len()).collect();
        order.sort_by(|&a, &b| points[a].cap.value().total_cmp(&points[b].cap.value()));
        for pair in order.windows(2) {
            let (lo, hi) = (points[pair[0]], points[pair[1]]);
            if lo.cap == hi.cap {
                return Err(CurveError::DuplicateCap {
                    first: pair[0].min(pair[1]),
                    second: pair[0].max(pair[1]),
                    cap_w: lo.cap.value(),
                });
            }
            if hi.power < lo.power {
                return Err(CurveError::NonMonotonePower {
                    lower_cap_w: lo.cap.value(),
                    higher_power_w: lo.power.value(),
                    higher_cap_w: hi.cap.value(),
                    lower_power_w: hi.power.value(),
                });
            }
        }
        let points = order.into_iter().map(|i| points[i]).collect();
        Ok(Self { gpus, points })
    }

    /// Number of GPUs the job runs on (every cap applies to each of them).
    #[must_use]
    pub fn gpus(&self) -> u32 {
        self.gpus
    }

    /// The measured points, sorted by ascending cap.
    #[must_use]
    pub fn points(&self) -> &[CurvePoint] {
        &self.points
    }

    /// The uncapped reference point (highest cap): P_max and T_max.
    #[must_use]
    pub fn uncapped(&self) -> CurvePoint {
        // `new` guarantees at least one point.
        self.points[self.points.len() - 1]
    }

    /// The lowest measured point.
    #[must_use]
    pub fn lowest(&self) -> CurvePoint {
        self.points[0]
    }

    /// Realized job power at a per-GPU cap, by linear interpolation between measured caps.
    ///
    /// Below the lowest measured cap the GPUs would draw at most the cap, so power is
    /// `min(gpus × cap, lowest measured power)`; above the highest cap the job is uncapped.
    #[must_use]
    pub fn power_at_cap(&self, cap: WattsPerGpu) -> Watts {
        Watts(self.interpolate_by_cap(cap, |p| p.power.value(), true))
    }

    /// Throughput at a per-GPU cap, by linear interpolation between measured caps.
    ///
    /// Below the lowest measured cap throughput is extrapolated in proportion to power (a
    /// pessimistic guess that never invents throughput).
    #[must_use]
    pub fn tokens_at_cap(&self, cap: WattsPerGpu) -> TokensPerSec {
        TokensPerSec(self.interpolate_by_cap(cap, |p| p.tokens.value(), false))
    }

    fn interpolate_by_cap(&self, cap: WattsPerGpu, field: impl Fn(&CurvePoint) -> f64, is_power: bool) -> f64 {
        let lowest = self.lowest();
        if cap <= lowest.cap {
            // Below the sweep a cap binds: power is at most gpus × cap, and throughput falls in
            // proportion to power (the same rule as `ConcaveHull::tokens_at`, so that planning
            // on the hull and accounting on the curve agree).
            let power = lowest.power.value().min(cap.times_gpus(self.gpus).value()).max(0.0);
            return if is_power {
                power
            } else {
                lowest.tokens.value() * power / lowest.power.value()
            };
        }
        let uncapped = self.uncapped();
        if cap >= uncapped.cap {
            return field(&uncapped);
        }
        let upper = self.points.partition_point(|p| p.cap < cap);
        let (a, b) = (self.points[upper - 1], self.points[upper]);
        let t = (cap - a.cap) / (b.cap - a.cap);
        field(&a) + t * (field(&b) - field(&a))
    }

    /// Throughput when the job draws `power`, read off the curve by linear interpolation in
    /// power (the paper's accounting). Clamped to the measured power range.
    #[must_use]
    pub fn tokens_at_power(&self, power: Watts) -> TokensPerSec {
        let pts = &self.points;
        if power <= pts[0].power {
            return pts[0].tokens;
        }
        let last = pts[pts.len() - 1];
        if power >= last.power {
            return last.tokens;
        }
        let upper = pts.partition_point(|p| p.power < power);
        let (a, b) = (pts[upper - 1], pts[upper]);
        if b.power == a.power {
            return b.tokens;
        }
        let t = (power - a.power) / (b.power - a.power);
        TokensPerSec(a.tokens.value() + t * (b.tokens.value() - a.tokens.value()))
    }

    /// The smallest per-GPU cap at which the job draws `power` (inverse of [`Self::power_at_cap`]).
    ///
    /// Choosing the *smallest* such cap matters where caps do not bind: a job drawing 560 W per
    /// GPU uncapped is equally uncapped at 600 W and 700 W, and the planner should say so.
    #[must_use]
    pub fn cap_for_power(&self, power: Watts) -> WattsPerGpu {
        let pts = &self.points;
        let lowest = pts[0];
        if power <= lowest.power {
            // Below the sweep, a binding cap draws exactly gpus × cap.
            return power.per_gpu(self.gpus).min(lowest.cap);
        }
        let last = pts[pts.len() - 1];
        if power >= last.power {
            let first_at_max = pts.partition_point(|p| p.power < last.power);
            return pts[first_at_max].cap;
        }
        let upper = pts.partition_point(|p| p.power < power);
        let (a, b) = (pts[upper - 1], pts[upper]);
        let t = (power - a.power) / (b.power - a.power);
        WattsPerGpu(a.cap.value() + t * (b.cap.value() - a.cap.value()))
    }

    /// The upper concave hull of the (power, tokens) points, restricted to its non-decreasing
    /// part: the best throughput achievable at each power by a planner that may choose any cap.
    #[must_use]
    pub fn concave_hull(&self) -> ConcaveHull {
        ConcaveHull::from_points(self.points.iter().map(|p| (p.power.value(), p.tokens.value())))
    }
}

/// A non-decreasing concave piecewise-linear function of power, given by its vertices.
///
/// Slopes (tokens/s per watt) strictly decrease from the first to the last segment, which is
/// what makes greedy water-filling on marginal throughput per watt optimal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ConcaveHull {
    /// Vertices `(power W, tokens/s)`, ascending in power.
    vertices: Vec<(f64, f64)>,
}

impl ConcaveHull {
    /// Upper concave hull (monotone chain) of arbitrary points; points that lie beyond the
    /// throughput maximum are dropped, since more power for less throughput is never chosen.
    pub fn from_points(points: impl IntoIterator<Item = (f64, f64)>) -> Self {
        let mut hull: Vec<(f64, f64)> = points.into_iter().collect();
        let kept = upper_hull_in_place(&mut hull);
        hull.truncate(kept);
        Self { vertices: hull }
    }

    /// Vertices `(power W, tokens/s)` in ascending power.
    #[must_use]
    pub fn vertices(&self) -> &[(f64, f64)] {
        &self.vertices
    }

    /// Hull throughput at `power`. Above the last vertex it stays at the maximum; below the first
    /// it falls in proportion to power: nothing was measured there, and assuming the lowest
    /// point's throughput would make those watts look free to shed.
    #[must_use]
    pub fn tokens_at(&self, power: f64) -> f64 {
        let v = &self.vertices;
        let Some(&first) = v.first() else { return 0.0 };
        if power <= first.0 {
            return if first.0 > 0.0 {
                first.1 * (power / first.0).max(0.0)
            } else {
                first.1
            };
        }
        let last = v[v.len() - 1];
        if power >= last.0 {
            return last.1;
        }
        let upper = v.partition_point(|x| x.0 < power);
        let (a, b) = (v[upper - 1], v[upper]);
        a.1 + (power - a.0) / (b.0 - a.0) * (b.1 - a.1)
    }
}

/// The upper concave hull of `points` (any order, non-finite points ignored), written to their
/// front; returns the number of its vertices. [`ConcaveHull::from_points`] builds it in the one
/// buffer it collects the points into, with no copy for the sort's dedup or the chain.
fn upper_hull_in_place(points: &mut [(f64, f64)]) -> usize {
    let mut n = 0;
    for k in 0..points.len() {
        let (p, t) = points[k];
        if p.is_finite() && t.is_finite() {
            points[n] = (p, t);
            n += 1;
        }
    }
    let pts = &mut points[..n];
    let order = |a: &(f64, f64), b: &(f64, f64)| a.0.total_cmp(&b.0).then(b.1.total_cmp(&a.1));
    if !pts.is_sorted_by(|a, b| order(a, b).is_le()) {
        pts.sort_unstable_by(order);
    }
    // Keep the best tokens per power, then build the chain in place (it never outruns the input).
    let mut hull = 0;
    for k in 0..n {
        let point = pts[k];
        if hull > 0 && pts[hull - 1].0 == point.0 {
            continue;
        }
        while hull >= 2 {
            let (a, b) = (pts[hull - 2], pts[hull - 1]);
            // Remove b if it lies on or below the chord a→point.
            let cross = (b.0 - a.0) * (point.1 - a.1) - (b.1 - a.1) * (point.0 - a.0);
            if cross >= 0.0 {
                hull -= 1;
            } else {
                break;
            }
        }
        pts[hull] = point;
        hull += 1;
    }
    // Keep only the non-decreasing part (up to the last of equal maxima).
    pts[..hull]
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.1.total_cmp(&b.1.1))
        .map_or(0, |(i, _)| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(cap: f64, power: f64, tokens: f64) -> CurvePoint {
        CurvePoint {
            cap: WattsPerGpu(cap),
            power: Watts(power),
            tokens: TokensPerSec(tokens),
        }
    }

    fn sample() -> PowerCurve {
        // 2 GPUs: caps 200..700, uncapped draw 600 W/GPU.
        PowerCurve::new(
            2,
            vec![
                pt(700.0, 1200.0, 1000.0),
                pt(200.0, 400.0, 500.0),
                pt(400.0, 800.0, 850.0),
                pt(600.0, 1200.0, 1000.0),
            ],
        )
        .expect("valid curve")
    }

    #[test]
    fn sorts_and_interpolates() {
        let c = sample();
        assert_eq!(c.points()[0].cap, WattsPerGpu(200.0));
        assert_eq!(c.uncapped().tokens, TokensPerSec(1000.0));
        assert_eq!(c.power_at_cap(WattsPerGpu(300.0)), Watts(600.0));
        assert_eq!(c.tokens_at_cap(WattsPerGpu(300.0)), TokensPerSec(675.0));
        assert_eq!(c.tokens_at_power(Watts(1000.0)), TokensPerSec(925.0));
        assert_eq!(c.power_at_cap(WattsPerGpu(100.0)), Watts(200.0));
        assert_eq!(c.tokens_at_cap(WattsPerGpu(100.0)), TokensPerSec(250.0));
    }

    #[test]
    fn cap_for_power_picks_the_smallest_binding_cap() {
        let c = sample();
        assert_eq!(c.cap_for_power(Watts(1200.0)), WattsPerGpu(600.0));
        assert_eq!(c.cap_for_power(Watts(600.0)), WattsPerGpu(300.0));
        assert_eq!(c.cap_for_power(Watts(300.0)), WattsPerGpu(150.0));
    }

    #[test]
    fn rejects_bad_points_with_the_field_named() {
        assert_eq!(PowerCurve::new(8, vec![]), Err(CurveError::Empty));
        assert_eq!(PowerCurve::new(0, vec![pt(1.0, 1.0, 1.0)]), Err(CurveError::NoGpus));
        let err = PowerCurve::new(1, vec![pt(700.0, f64::NAN, 1.0)]).unwrap_err();
        assert_eq!(
            err,
            CurveError::NotFinite {
                index: 0,
                field: "power_w"
            }
        );
        let err = PowerCurve::new(1, vec![pt(700.0, 600.0, 1.0), pt(700.0, 500.0, 1.0)]).unwrap_err();
        assert!(matches!(err, CurveError::DuplicateCap { cap_w, .. } if cap_w == 700.0));
        let err = PowerCurve::new(2, vec![pt(700.0, 500.0, 1.0), pt(500.0, 550.0, 1.0)]).unwrap_err();
        assert!(matches!(err, CurveError::NonMonotonePower { .. }));
        let err = PowerCurve::new(1, vec![pt(500.0, 600.0, 1.0)]).unwrap_err();
        assert!(matches!(err, CurveError::PowerAboveCap { .. }));
        let err = PowerCurve::new(1, vec![pt(500.0, 400.0, -3.0)]).unwrap_err();
        assert!(err.to_string().contains("tokens_per_s"));
    }

    #[test]
    fn measured_power_near_the_jobs_own_draw_is_settled_into_a_valid_sweep() {
        // Two caps above the job's draw read it give or take the meter's noise; the uncapped
        // point reads a watt less than the cap below it; one reading exceeds its cap.
        let mut points = vec![
            pt(431.4, 3353.5, 900.0),
            pt(416.0, 3364.2, 899.0),
            pt(300.0, 2500.0, 700.0),
            pt(700.0, 3352.0, 901.0),
        ];
        assert!(PowerCurve::new(8, points.clone()).is_err(), "refused as read");
        assert!(matches!(
            PowerCurve::new(8, points[..2].to_vec()).unwrap_err(),
            CurveError::NonMonotonePower { .. }
        ));
        settle_measured_power(8, &mut points);
        let caps: Vec<f64> = points.iter().map(|p| p.cap.value()).collect();
        assert_eq!(caps, [300.0, 416.0, 431.4, 700.0]);
        let powers: Vec<f64> = points.iter().map(|p| p.power.value()).collect();
        assert_eq!(
            powers,
            [2400.0, 3328.0, 3353.5, 3353.5],
            "clamped to the cap, then never falling"
        );
        assert!(PowerCurve::new(8, points).is_ok());
    }

    #[test]
    fn hull_removes_dents_and_the_decreasing_tail() {
        let h = ConcaveHull::from_points([
            (100.0, 10.0),
            (200.0, 12.0),
            (300.0, 30.0),
            (400.0, 35.0),
            (500.0, 34.0),
        ]);
        assert_eq!(h.vertices(), &[(100.0, 10.0), (300.0, 30.0), (400.0, 35.0)]);
        assert_eq!(h.tokens_at(200.0), 20.0);
        assert_eq!(h.tokens_at(1000.0), 35.0);
        let slopes: Vec<f64> = h
            .vertices()
            .windows(2)
            .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0))
            .collect();
        assert!(slopes.windows(2).all(|s| s[0] > s[1]));
    }
}
