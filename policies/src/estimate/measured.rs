//! A measured curve whose points are noisy: what the planner plans on, and how wrong it may be.
//!
//! A point of a measured curve is the mean of a few throughput readings at one cap, each off by a
//! percent or two. Planning ranks jobs by the *slopes* between points, and a 1.5 % error on two
//! points 0.1 of the draw apart moves a slope by up to 0.3 of relative throughput per relative
//! power: as much as the slopes of two quite different jobs differ. Planning on the raw points
//! therefore cuts jobs at random where they are alike, and loses to the equal cut (which is the
//! best plan for identical concave curves). So the points are denoised, and the error left is
//! carried to the hedge.
//!
//! **The estimate** is the empirical-Bayes posterior mean under a prior centred on the
//! estimator's physical family ([`CurveFamily`]):
//!
//! 1. the family member that fits the points best in weighted least squares (weights
//!    `1/(σᵢ² + m²)`, `m` = [`FAMILY_MISFIT`], the family's own misfit to a physical truth)
//!    stands for the shape the points share, with the standard error of its index from the
//!    fit's curvature (the Fisher information `Σ gᵢ²/σᵢ²`, `gᵢ` the member's sensitivity at the
//!    point);
//! 2. **whether the readings can tell the curve from that member at all**: if the departures
//!    `dᵢ` pass a χ² test at 99 % (`Σ dᵢ²/(σᵢ² + m²)` within the quantile, one degree of
//!    freedom fewer than points), the curve is read as the member. What the readings add beyond
//!    it cannot be told from their noise and the family's misfit, and following it cuts jobs
//!    apart at random;
//! 3. otherwise each departure is part noise, part real (a knee, a roofline: shapes the family
//!    does not have). The real part's spread `b` is estimated from the departures themselves
//!    (method of moments: `b² = mean(dᵢ² − σᵢ²)`, at least [`MIN_DISCREPANCY`]), and each
//!    departure is kept in the share `kᵢ = b²/(b² + σᵢ²)`: a point whose departure is within its
//!    noise falls back onto the family, one far beyond it is believed;
//! 4. the posterior variance of each point, `kᵢσᵢ² + (1 − kᵢ)²gᵢ² se²` (`kᵢ = 0` for a curve read
//!    as its member: the member's own uncertainty), is the error the hedge guards.
//!
//! Where the data cannot tell two jobs apart (both fit the same member within their noise) their
//! estimates coincide, so the planner cuts them alike: it does not gamble on noise. Where they
//! differ by more than the noise, the estimate follows the readings.
//!
//! **Why step 2 (issue 29).** Without it, a physical truth measured at 4–6 caps with 0.5–2 %
//! noise kept most of each point's noise (`b` cannot fall below [`MIN_DISCREPANCY`], about a
//! reading's error, so `kᵢ` was ½ or more), and under `progress` at a 40 % cut the plan closed
//! 23 % of the equal → oracle gap where planning on the member alone closed 64 % unhedged (curve
//! zoo, `sweep_physical`, seed 7). Weighing the fit by the noise alone had also let the deepest
//! point (the smallest throughput, so the smallest noise) hold the member, leaving the points
//! above it 2–5 % off, so that the test would have rejected most physical truths. With both:
//! `sweep_physical` under `progress` at 30 / 40 % closes 88 / 58 % (seed 7; 88 / 53 % seed 1),
//! every `sweep_*` row passes its bar, and the shapes the family lacks still fail the test and
//! are followed (`sweep_mixed` at 40 %: 56 % of its gap, 71 % before; `sweep_exact`, read
//! exactly, unchanged). The misfit is the family's approximation of a truth's shape, the same
//! for every job of one kind, not a random error per job, so it is not added to the posterior
//! variance the hedge guards (added, it held every plan at the equal cut: 1–3 % of that gap).
//!
//! The uncapped point is the job's own T_max, the scale of its relative throughput: it is exact
//! by definition.

use super::{CurveFamily, MEMBERS};

/// The least spread of a real curve about the family member that fits it, in relative
/// throughput, once its points have departed from the member by more than [`FAMILY_MISFIT`]
/// allows: a departure of that size is never taken for noise alone.
pub const MIN_DISCREPANCY: f64 = 0.01;

/// How far a physical truth's points lie from the family member that fits them, in relative
/// throughput, at most: the family approximates the physical model (module [`super`]), and
/// measured without noise at the curve zoo's sweep caps (4–6 caps from 200 W to 40 W below the
/// draw) the 25 published groups' physical truths depart from their best member by an RMS of
/// 0.008–0.021 (0.021 for group 16, PFI 2.67), most at the deepest cap (up to 0.035, where the
/// clock floor bends the truth). It enters the fit's weights (a point 0.2 % off is not believed
/// to 0.2 % about the family's *shape*) and the test of whether a sweep reads as its member.
pub const FAMILY_MISFIT: f64 = 0.02;

/// The one-sided standard normal quantile of the test a sweep's departures from its member pass
/// to be read as the member: 2.326, so that a curve the family does describe is taken for one
/// 99 times in 100.
const MEMBER_TEST_Z: f64 = 2.326;

/// The `1 − α` quantile of χ² with `k` degrees of freedom for the normal quantile `z` of `1 − α`,
/// by the Wilson–Hilferty cube: within 1 % of the exact value for every `k ≥ 1` at this level,
/// far inside what the test's misfit constant is known to.
fn chi_square_quantile(k: f64, z: f64) -> f64 {
    let c = 2.0 / (9.0 * k);
    k * (1.0 - c + z * c.sqrt()).powi(3)
}

/// One noisy measured point in relative units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoisyPoint {
    /// Relative power `P / P_max`, below 1.
    pub x: f64,
    /// Relative throughput `T / T_max` as measured.
    pub tau: f64,
    /// Standard error of `tau` (0 for an exact point).
    pub sd: f64,
}

impl NoisyPoint {
    /// The variance of the point's departure from the family member that describes its curve:
    /// its noise and the family's misfit ([`FAMILY_MISFIT`]).
    fn departure_variance(&self) -> f64 {
        self.sd * self.sd + FAMILY_MISFIT * FAMILY_MISFIT
    }
}

/// The denoised curve of a job's noisy measured points.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredEstimate {
    /// The estimated curve `(x, τ)`, increasing in `x`, ending at `(1, 1)`: the denoised points,
    /// and between and below them the fitted member's shape carried by the points' departures
    /// from it (interpolated linearly between points), at the plausible knots (every 0.1 of the
    /// draw). A sweep measures a handful of caps; a straight chord between two of them lies
    /// below a concave truth, and a plan on chords puts jobs at the measured caps, never
    /// between, and loses what the curve keeps in between.
    pub curve: Vec<(f64, f64)>,
    /// `(x, τ)` at the measured relative powers, increasing, then `(1, 1)`.
    pub points: Vec<(f64, f64)>,
    /// The posterior standard error of each of `points` (0 at the top).
    pub sd: Vec<f64>,
    /// The least and the most a concave curve through the denoised points can keep at each
    /// plausible knot (the chord between two points, and the lesser of their neighbours'
    /// segments extended); the estimate itself below the lowest point. The hedge guards both:
    /// a sweep says nothing of where between two of its caps the curve bends.
    pub band: [super::PlausibleShape; 2],
    /// The estimate's standard error where it is known, `(x, sd)`, increasing: at every point,
    /// and below the lowest one at the plausible knots, where the curve is the fitted member's
    /// extrapolation and the member's own uncertainty grows with the depth.
    pub noise: Vec<(f64, f64)>,
    /// The family member (fractional index) the points fit best.
    pub member: f64,
    /// The estimated spread of the points' real departures from it.
    pub discrepancy: f64,
}

impl MeasuredEstimate {
    /// The posterior standard error at relative power `x`, linear between points (and the
    /// lowest point's below it).
    #[must_use]
    pub fn sd_at(&self, x: f64) -> f64 {
        interpolate(&self.points, &self.sd, x)
    }
}

/// Linear interpolation of `values` (one per point of `points`) at `x`, clamped at both ends.
fn interpolate(points: &[(f64, f64)], values: &[f64], x: f64) -> f64 {
    let upper = points.partition_point(|p| p.0 < x);
    match (upper.checked_sub(1), values.get(upper)) {
        (None, Some(&v)) => v,
        (Some(k), Some(&v)) => {
            let (x0, x1) = (points[k].0, points[upper].0);
            let w = if x1 > x0 { (x - x0) / (x1 - x0) } else { 1.0 };
            values[k] + w * (v - values[k])
        }
        (_, None) => values.last().copied().unwrap_or(0.0),
    }
}

/// What concavity allows between the vertices of a concave set of points: at least the chord
/// between two neighbours, at most the lesser of their outer neighbours' segments extended (and
/// never above 1).
struct ConcaveBand {
    vertices: Vec<(f64, f64)>,
}

impl ConcaveBand {
    fn new(points: &[(f64, f64)]) -> Self {
        let hull = crate::curve::ConcaveHull::from_points(points.iter().copied());
        Self {
            vertices: hull.vertices().to_vec(),
        }
    }

    /// The chord and the highest concave curve through the vertices, at `x`.
    fn bounds(&self, x: f64) -> (f64, f64) {
        let v = &self.vertices;
        let upper = v.partition_point(|p| p.0 < x);
        if upper == 0 || upper >= v.len() {
            let at = v.get(upper.min(v.len().saturating_sub(1))).map_or(1.0, |p| p.1);
            return (at, at);
        }
        let (a, b) = (v[upper - 1], v[upper]);
        let slope = |p: (f64, f64), q: (f64, f64)| (q.1 - p.1) / (q.0 - p.0);
        let chord = a.1 + slope(a, b) * (x - a.0);
        let mut high: f64 = 1.0;
        if upper >= 2 {
            high = high.min(a.1 + slope(v[upper - 2], a) * (x - a.0));
        }
        if let Some(&c) = v.get(upper + 1) {
            high = high.min(b.1 + slope(b, c) * (x - b.0));
        }
        (chord, high.max(chord))
    }
}

impl CurveFamily {
    /// The denoised curve of `points` (noisy measured points below the uncapped one, in any
    /// order; non-finite ones are left out): see the module docs.
    #[must_use]
    pub fn denoise(&self, points: &[NoisyPoint]) -> MeasuredEstimate {
        let mut pts: Vec<NoisyPoint> = points
            .iter()
            .copied()
            .filter(|p| p.x.is_finite() && p.tau.is_finite() && p.sd.is_finite() && p.x > 0.0 && p.x < 1.0)
            .map(|p| NoisyPoint { sd: p.sd.max(0.0), ..p })
            .collect();
        pts.sort_by(|a, b| a.x.total_cmp(&b.x));
        if pts.is_empty() {
            return MeasuredEstimate {
                band: [[1.0; super::PLAUSIBLE_KNOTS]; 2],
                curve: vec![(1.0, 1.0)],
                points: vec![(1.0, 1.0)],
                sd: vec![0.0],
                noise: vec![(1.0, 0.0)],
                member: 0.0,
                discrepancy: 0.0,
            };
        }
        let member = self.best_member(&pts);
        let fitted: Vec<f64> = pts.iter().map(|p| self.tau_at(member, p.x)).collect();
        let reads_as_member = reads_as_member(&pts, &fitted);
        // The member's sensitivity at each point, one member either side.
        let step = |m: f64| (m - 1.0).max(0.0)..=(m + 1.0).min((MEMBERS - 1) as f64);
        let range = step(member);
        let span = range.end() - range.start();
        let sensitivity_at = |x: f64| {
            if span > 0.0 {
                (self.tau_at(*range.end(), x) - self.tau_at(*range.start(), x)) / span
            } else {
                0.0
            }
        };
        let sensitivity: Vec<f64> = pts.iter().map(|p| sensitivity_at(p.x)).collect();
        let information: f64 = pts
            .iter()
            .zip(&sensitivity)
            .filter(|(p, _)| p.sd > 0.0)
            .map(|(p, g)| (g / p.sd).powi(2))
            .sum();
        let member_var = if information > 0.0 { 1.0 / information } else { 0.0 };
        let n = pts.len() as f64;
        let excess = pts
            .iter()
            .zip(&fitted)
            .map(|(p, f)| (p.tau - f).powi(2) - p.sd * p.sd)
            .sum::<f64>()
            / n;
        let b2 = if reads_as_member {
            0.0
        } else {
            excess.max(MIN_DISCREPANCY * MIN_DISCREPANCY)
        };
        let mut out_points = Vec::with_capacity(pts.len() + 1);
        let mut out_sd = Vec::with_capacity(pts.len() + 1);
        for ((p, f), g) in pts.iter().zip(&fitted).zip(&sensitivity) {
            let s2 = p.sd * p.sd;
            let keep = if reads_as_member {
                0.0
            } else if s2 > 0.0 {
                b2 / (b2 + s2)
            } else {
                1.0
            };
            let tau = f + keep * (p.tau - f);
            let var = keep * s2 + (1.0 - keep).powi(2) * g * g * member_var;
            out_points.push((p.x, tau.clamp(0.0, 1.0)));
            out_sd.push(var.sqrt());
        }
        out_points.push((1.0, 1.0));
        out_sd.push(0.0);
        // The departures of the denoised points from the member, 0 at the top, carried between
        // points linearly and below the lowest as it is.
        let departures: Vec<f64> = out_points
            .iter()
            .map(|&(x, tau)| if x >= 1.0 { 0.0 } else { tau - self.tau_at(member, x) })
            .collect();
        // Below the lowest point the member's uncertainty grows with its sensitivity.
        let (lowest_x, lowest_sd) = (out_points[0].0, out_sd[0]);
        let lowest_g = sensitivity_at(lowest_x);
        let noise: Vec<(f64, f64)> = (0..super::PLAUSIBLE_KNOTS)
            .map(super::plausible_knot_x)
            .filter(|&x| x < lowest_x - 1e-9)
            .map(|x| {
                let g = sensitivity_at(x);
                let extra = (g * g - lowest_g * lowest_g).max(0.0) * member_var;
                (x, (lowest_sd * lowest_sd + extra).sqrt())
            })
            .chain(out_points.iter().map(|p| p.0).zip(out_sd.iter().copied()))
            .collect();
        let band = ConcaveBand::new(&out_points);
        // How far the member's shape is trusted between points: fully where the points depart
        // from it by no more than the family's own misfit, less as they depart further.
        let trust = if reads_as_member {
            1.0
        } else {
            (MIN_DISCREPANCY * MIN_DISCREPANCY / b2).min(1.0)
        };
        let lowest = out_points[0].0;
        let mut curve: Vec<(f64, f64)> = (0..super::PLAUSIBLE_KNOTS)
            .map(super::plausible_knot_x)
            .filter(|&x| x < 1.0)
            .chain(out_points.iter().map(|p| p.0))
            .map(|x| {
                let tau = if x >= 1.0 {
                    1.0
                } else if x < lowest {
                    self.tau_at(member, x) + interpolate(&out_points, &departures, x)
                } else {
                    let (low, high) = band.bounds(x);
                    let family = (self.tau_at(member, x) + interpolate(&out_points, &departures, x)).clamp(low, high);
                    trust * family + (1.0 - trust) * 0.5 * (low + high)
                };
                (x, tau.clamp(0.0, 1.0))
            })
            .collect();
        curve.sort_by(|a, b| a.0.total_cmp(&b.0));
        curve.dedup_by(|a, b| (a.0 - b.0).abs() < 1e-9);
        // What concavity allows between the points, at the plausible knots; below the lowest
        // point the estimate (its uncertainty there is in `noise`).
        let estimate_at = |x: f64| interpolate(&curve, &curve.iter().map(|c| c.1).collect::<Vec<_>>(), x);
        let between = |x: f64, pick: fn((f64, f64)) -> f64| {
            if x >= 1.0 {
                1.0
            } else if x < lowest {
                estimate_at(x)
            } else {
                pick(band.bounds(x)).clamp(0.0, 1.0)
            }
        };
        let band_low = std::array::from_fn(|k| between(super::plausible_knot_x(k), |b| b.0));
        let band_high = std::array::from_fn(|k| between(super::plausible_knot_x(k), |b| b.1));
        MeasuredEstimate {
            band: [band_low, band_high],
            curve,
            noise,
            points: out_points,
            sd: out_sd,
            member,
            discrepancy: b2.sqrt(),
        }
    }

    /// The (fractional) member minimising `Σ (τᵢ − τ_m(xᵢ))² / (σᵢ² + FAMILY_MISFIT²)`
    /// (unweighted where every point is exact): a coarse scan, then the neighbourhood of its
    /// best, then a parabola through the best and its neighbours.
    ///
    /// The misfit is in every weight because a point's departure from the *member* is its noise
    /// plus the family's misfit to the truth: weighed by its noise alone, the deepest point
    /// (whose throughput is smallest, so its noise is) held the fit, and the member that met it
    /// left the points above it 2–5 % off.
    fn best_member(&self, pts: &[NoisyPoint]) -> f64 {
        let sse = |m: usize| -> f64 {
            let row = &self.tau[m];
            pts.iter()
                .map(|p| (p.tau - super::interpolate_row(row, p.x)).powi(2) / p.departure_variance())
                .sum()
        };
        const COARSE: usize = 8;
        let mut best = (0..MEMBERS)
            .step_by(COARSE)
            .chain(std::iter::once(MEMBERS - 1))
            .map(|m| (m, sse(m)))
            .fold((0, f64::INFINITY), |b, c| if c.1 < b.1 { c } else { b });
        let (lo, hi) = (best.0.saturating_sub(COARSE), (best.0 + COARSE).min(MEMBERS - 1));
        for m in lo..=hi {
            let v = sse(m);
            if v < best.1 {
                best = (m, v);
            }
        }
        let m = best.0;
        if m == 0 || m == MEMBERS - 1 {
            return m as f64;
        }
        let (a, b, c) = (sse(m - 1), best.1, sse(m + 1));
        let curvature = a - 2.0 * b + c;
        if curvature > 0.0 {
            m as f64 + (0.5 * (a - c) / curvature).clamp(-0.5, 0.5)
        } else {
            m as f64
        }
    }
}

/// Whether noisy points read as the family member `fitted` gives them: their departures from it
/// are within their noise and the family's misfit ([`FAMILY_MISFIT`]), by a χ² test at 99 %
/// with one degree of freedom fewer than points (the member was fitted to them). An exact
/// point (no noise) never does: it is what it is.
fn reads_as_member(pts: &[NoisyPoint], fitted: &[f64]) -> bool {
    if pts.is_empty() || pts.iter().any(|p| p.sd <= 0.0) {
        return false;
    }
    let chi_square: f64 = pts
        .iter()
        .zip(fitted)
        .map(|(p, f)| (p.tau - f).powi(2) / p.departure_variance())
        .sum();
    let freedom = (pts.len() as f64 - 1.0).max(1.0);
    chi_square <= chi_square_quantile(freedom, MEMBER_TEST_Z)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pfi::CapGrid;
    use crate::units::WattsPerGpu;

    fn family() -> CurveFamily {
        CurveFamily::h200_generic()
    }

    /// A member's curve read at `xs`, each point off by `errors[i]`, all with sd `sd`.
    fn sampled(f: &CurveFamily, pfi: f64, xs: &[f64], errors: &[f64], sd: f64) -> Vec<NoisyPoint> {
        let shape = f.shape(pfi, &CapGrid::fine_h200(), WattsPerGpu(650.0));
        xs.iter()
            .zip(errors)
            .map(|(&x, e)| NoisyPoint {
                x,
                tau: shape.tau_at(x) + e,
                sd,
            })
            .collect()
    }

    #[test]
    fn points_within_their_noise_of_a_member_fall_back_onto_it() {
        let f = family();
        let xs = [0.35, 0.5, 0.65, 0.8];
        let errors = [0.012, -0.015, 0.01, -0.012];
        let truth = f.shape(1.6, &CapGrid::fine_h200(), WattsPerGpu(650.0));
        let estimate = f.denoise(&sampled(&f, 1.6, &xs, &errors, 0.015));
        for (&(x, tau), sd) in estimate.points.iter().zip(&estimate.sd) {
            let error = (tau - truth.tau_at(x)).abs();
            assert!(error < 0.008, "x {x}: estimate {tau} vs truth {}", truth.tau_at(x));
            assert!(
                *sd < 0.015 || x >= 1.0,
                "the posterior is tighter than one reading: {sd}"
            );
        }
        assert_eq!(estimate.points.last(), Some(&(1.0, 1.0)));
        assert_eq!(estimate.sd.last(), Some(&0.0));
    }

    #[test]
    fn a_curve_within_the_familys_misfit_and_its_noise_is_read_as_its_member() {
        let f = family();
        let xs = [0.3, 0.45, 0.6, 0.75, 0.9];
        // The shape of a physical truth's misfit at a sweep's caps (the deepest point high, the
        // middle ones low, by up to 0.03), and readings 1 % off on top.
        let misfit = [0.03, -0.01, -0.012, -0.008, -0.002];
        let noise = [0.008, -0.01, 0.006, 0.009, -0.007];
        let errors: Vec<f64> = misfit.iter().zip(&noise).map(|(m, n)| m + n).collect();
        let pts = sampled(&f, 1.8, &xs, &errors, 0.01);
        let estimate = f.denoise(&pts);
        assert!(reads_as_member(
            &pts,
            &pts.iter().map(|p| f.tau_at(estimate.member, p.x)).collect::<Vec<_>>()
        ));
        assert_eq!(estimate.discrepancy, 0.0, "{estimate:?}");
        for (&(x, tau), sd) in estimate.points.iter().zip(&estimate.sd) {
            if x < 1.0 {
                assert!(
                    (tau - f.tau_at(estimate.member, x)).abs() < 1e-12,
                    "x {x}: the member's value, not the reading's"
                );
                assert!(*sd < 0.01, "only the member's own uncertainty is left: {sd}");
            }
        }
        // The same departures read exactly are what the curve is.
        let exact: Vec<NoisyPoint> = pts.iter().map(|p| NoisyPoint { sd: 0.0, ..*p }).collect();
        assert!(!reads_as_member(&exact, &[0.0; 5]));
        let kept = f.denoise(&exact);
        for (p, &(x, tau)) in exact.iter().zip(&kept.points) {
            assert_eq!((p.x, p.tau), (x, tau));
        }
    }

    #[test]
    fn the_chi_square_quantile_is_within_one_percent_of_the_table() {
        // χ² at 99 %, 1–5 degrees of freedom and 10 (any statistics table).
        for (k, exact) in [
            (1.0, 6.635),
            (2.0, 9.210),
            (3.0, 11.345),
            (4.0, 13.277),
            (5.0, 15.086),
            (10.0, 23.209),
        ] {
            let q = chi_square_quantile(k, MEMBER_TEST_Z);
            assert!((q / exact - 1.0).abs() < 0.01, "k {k}: {q} vs {exact}");
        }
    }

    #[test]
    fn a_shape_the_family_lacks_is_followed_where_it_departs_beyond_the_noise() {
        let f = family();
        // A knee at 0.6: nothing lost above it, steeply below.
        let xs = [0.35, 0.5, 0.7, 0.85];
        let knee = |x: f64| 1.0 - 1.6 * (0.6f64 - x).max(0.0);
        let pts: Vec<NoisyPoint> = xs
            .iter()
            .map(|&x| NoisyPoint {
                x,
                tau: knee(x),
                sd: 0.01,
            })
            .collect();
        let estimate = f.denoise(&pts);
        for &(x, tau) in &estimate.points {
            assert!((tau - knee(x)).abs() < 0.03, "x {x}: {tau} vs {}", knee(x));
        }
        assert!(estimate.discrepancy > 2.0 * MIN_DISCREPANCY, "{estimate:?}");
    }

    #[test]
    fn exact_points_are_kept_and_nonsense_is_left_out() {
        let f = family();
        let pts = [
            NoisyPoint {
                x: 0.5,
                tau: 0.8,
                sd: 0.0,
            },
            NoisyPoint {
                x: 0.7,
                tau: 0.9,
                sd: 0.0,
            },
            NoisyPoint {
                x: f64::NAN,
                tau: 0.9,
                sd: 0.0,
            },
            NoisyPoint {
                x: 0.6,
                tau: f64::INFINITY,
                sd: 0.0,
            },
            NoisyPoint {
                x: 1.5,
                tau: 0.9,
                sd: 0.0,
            },
        ];
        let estimate = f.denoise(&pts);
        assert_eq!(estimate.points, vec![(0.5, 0.8), (0.7, 0.9), (1.0, 1.0)]);
        assert!(estimate.sd.iter().all(|s| *s == 0.0));
        assert_eq!(f.denoise(&[]).points, vec![(1.0, 1.0)]);
        assert!((estimate.sd_at(0.6) - 0.0).abs() < 1e-12);
    }
}
