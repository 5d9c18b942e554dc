//! Estimating a job's whole power–throughput curve from what is known about it.
//!
//! Production rarely has a measured sweep for a job. What it has, best first:
//! 1. a measured sweep (the curve itself);
//! 2. a PFI value with the cap grid it was measured on;
//! 3. a PFI predicted from telemetry, with its uncertainty;
//! 4. nothing but the uncapped point (P_max, T_max), which is always known.
//!
//! For 2 and 3 we need a *shape*: a one-parameter family of curves, calibrated so that its PFI on
//! the stated grid equals the known value. The family is the physical model of
//! [`crate::physics`] with generic H200 constants (not those of any particular job), indexed by
//! a single parameter θ that is monotone in PFI: θ ∈ [0, 1] lowers the compute share φ from 1
//! to 0.15 at α = 2.3 (memory-bound jobs, PFI up to ≈ 4), θ ∈ [−1, 0) lowers α from 2.3 to 1.5
//! at φ = 1 (compute-bound jobs with little voltage headroom, PFI down to ≈ 0.95).
//!
//! The estimate is the physical family alone: on a physical truth it is within 0.01 of relative
//! throughput at every depth, and it is concave, so the allocator's hull *is* the estimate. A
//! PFI does not pin a shape, though, and the bet that the shape is physical is guarded
//! elsewhere, explicitly: the planner's hedge (`alloc::curve_aware::hedge`) checks every plan
//! against the equal cut on hinges at every depth and rooflines consistent with the PFI
//! ([`CurveFamily::plausible_shapes`]) and moves toward the equal cut where one would lose.
//! Until issue 14 the estimate itself was a 50/50 mixture of this family with knee and
//! power-law shapes of the same PFI; the mixture is not concave (its steep members are clamped
//! at zero), its hull is nearly straight, and under the `progress` objective the plan on it
//! was all-or-nothing and lost to the equal cut on physical truths (BENCHMARKS.md, the curve
//! zoo, has both). Guarding with the hedge instead of blurring the estimate keeps the estimate
//! right where the physics holds and the guard visible in every plan.
//!
//! The family is tabulated once ([`CurveFamily::h200_generic`]) in normalised power
//! `x = P/P_max`, so estimating a job costs a few table look-ups (about a microsecond) instead
//! of thousands of model evaluations. A predicted PFI is uncertain: the *expected* curve averages
//! the family over the PFI's normal distribution (5-point Gauss–Hermite), which is what an
//! allocator maximising expected throughput needs; a *pessimistic* curve at `mean − z·sd`
//! guards QoS limits.

pub mod measured;

use crate::curve::ConcaveHull;
use crate::pfi::CapGrid;
use crate::physics::PhysicalModel;
use crate::units::{TokensPerSec, Watts, WattsPerGpu};

/// Normalised power knots of the tabulated family: x = 0.20, 0.225, …, 1.00.
const KNOTS: usize = 33;
const KNOT_LO: f64 = 0.20;
const KNOT_STEP: f64 = (1.0 - KNOT_LO) / (KNOTS as f64 - 1.0);
/// Every how many table knots a job's hull gets a vertex (see [`NormalisedCurve::to_hull`]).
pub const HULL_KNOT_STRIDE: usize = 4;
/// Number of family members tabulated along θ ∈ [−1, 1].
const MEMBERS: usize = 161;

/// Gauss–Hermite (probabilists') nodes and weights, 5 points: E[g(Z)] ≈ Σ w_i g(z_i), Z ~ N(0,1).
const GH_NODES: [f64; 5] = [
    -2.856_970_013_872_806,
    -1.355_626_179_974_266,
    0.0,
    1.355_626_179_974_266,
    2.856_970_013_872_806,
];
const GH_WEIGHTS: [f64; 5] = [
    0.011_257_411_327_720_7,
    0.222_075_922_005_612_8,
    0.533_333_333_333_333_3,
    0.222_075_922_005_612_8,
    0.011_257_411_327_720_7,
];

/// A tabulated one-parameter family of normalised curves `τ(x; θ)` (relative throughput at
/// relative power), monotone in PFI along θ.
#[derive(Debug, Clone)]
pub struct CurveFamily {
    /// `tau[member][knot]`: relative throughput at knot power for family member `member`.
    tau: Vec<[f64; KNOTS]>,
}

impl CurveFamily {
    /// The generic H200 family described in the module docs.
    #[must_use]
    pub fn h200_generic() -> Self {
        let base = PhysicalModel::h200(1.0, 1.0);
        // Work in normalised power: P_u = 1, shares of a typical 650 W GPU.
        let normalised = PhysicalModel {
            uncapped_w: 1.0,
            static_w: base.static_w / 650.0,
            memory_w: base.memory_w / 650.0,
            ..base
        };
        let tau = (0..MEMBERS)
            .map(|member| {
                let theta = -1.0 + 2.0 * member as f64 / (MEMBERS as f64 - 1.0);
                let model = member_model(normalised, theta);
                let mut row = [0.0; KNOTS];
                for (k, slot) in row.iter_mut().enumerate() {
                    *slot = model.operating_point(knot_x(k)).1;
                }
                // Below the reachable power the clock sits at f_min; keep the row monotone.
                for k in (0..KNOTS - 1).rev() {
                    row[k] = row[k].min(row[k + 1]);
                }
                row
            })
            .collect();
        Self { tau }
    }

    /// Relative throughput of member `m` (fractional index) at relative power `x`.
    fn tau_at(&self, member: f64, x: f64) -> f64 {
        // Truncation is the floor here (a negative or NaN member truncates to 0 either way),
        // without a libm call on baseline x86-64.
        let lo = (member as usize).min(MEMBERS - 1);
        let hi = (lo + 1).min(MEMBERS - 1);
        let w = member - lo as f64;
        let a = interpolate_row(&self.tau[lo], x);
        if w <= 0.0 || lo == hi {
            return a;
        }
        a + w * (interpolate_row(&self.tau[hi], x) - a)
    }

    /// Relative throughput of member `member` (fractional index) at table knot `k`: what
    /// [`Self::tau_at`] gives at `knot_x(k)`, read off the rows instead of located and
    /// interpolated (an estimate reads every knot of five members).
    fn tau_at_knot(&self, member: f64, k: usize) -> f64 {
        let lo = (member as usize).min(MEMBERS - 1);
        let hi = (lo + 1).min(MEMBERS - 1);
        let w = member - lo as f64;
        let a = self.tau[lo][k];
        if w <= 0.0 || lo == hi {
            return a;
        }
        a + w * (self.tau[hi][k] - a)
    }

    /// PFI of member `member` on a grid's relative caps.
    fn pfi_of_member(&self, member: usize, caps: &RelativeCaps) -> Option<f64> {
        let row = &self.tau[member.min(MEMBERS - 1)];
        let (mut sum, mut kept) = (0.0, 0usize);
        for (&x, &position) in caps.xs.iter().zip(&caps.on_knots) {
            let loss = 1.0 - row_at(row, position);
            if loss >= crate::pfi::DEFAULT_EPSILON {
                sum += (1.0 - x) / loss;
                kept += 1;
            }
        }
        (kept > 0).then(|| sum / kept as f64)
    }

    /// The (fractional) member whose PFI on `caps` equals `pfi`, clamped to the family's range
    /// (so an absurd PFI yields the most or least flexible member, never panics).
    fn member_for_pfi(&self, pfi: f64, caps: &RelativeCaps) -> f64 {
        // PFI rises with the member index; binary search the table, then interpolate.
        let value = |m: usize| self.pfi_of_member(m, caps).unwrap_or(f64::INFINITY);
        let (mut lo, mut hi) = (0usize, MEMBERS - 1);
        let (mut at_lo, mut at_hi) = (value(lo), value(hi));
        if !pfi.is_finite() || pfi <= at_lo {
            return 0.0;
        }
        if pfi >= at_hi {
            return (MEMBERS - 1) as f64;
        }
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let at_mid = value(mid);
            if at_mid < pfi {
                (lo, at_lo) = (mid, at_mid);
            } else {
                (hi, at_hi) = (mid, at_mid);
            }
        }
        if at_hi > at_lo {
            lo as f64 + (pfi - at_lo) / (at_hi - at_lo)
        } else {
            lo as f64
        }
    }

    /// The lowest PFI the family can express on a grid, for a job with uncapped draw `uncapped`.
    #[must_use]
    pub fn least_flexible_pfi(&self, grid: &CapGrid, uncapped: WattsPerGpu) -> f64 {
        self.pfi_of_member(0, &relative_caps(grid, uncapped)).unwrap_or(1.0)
    }

    /// Relative throughput at relative power `x` for a job whose PFI on `grid` is `pfi`.
    #[must_use]
    pub fn shape(&self, pfi: f64, grid: &CapGrid, uncapped: WattsPerGpu) -> NormalisedCurve {
        let member = self.member_for_pfi(pfi, &relative_caps(grid, uncapped));
        NormalisedCurve {
            tau: std::array::from_fn(|k| self.tau_at_knot(member, k).clamp(0.0, 1.0)),
        }
    }

    /// Expected relative throughput over a normal PFI distribution (mean, sd), by 5-point
    /// Gauss–Hermite quadrature; PFI draws are clamped to the family's range. An average of
    /// concave members, so concave.
    #[must_use]
    pub fn expected_shape(&self, mean: f64, sd: f64, grid: &CapGrid, uncapped: WattsPerGpu) -> NormalisedCurve {
        let caps = relative_caps(grid, uncapped);
        let draws: Vec<(f64, f64)> = if sd.is_nan() || sd <= 0.0 {
            vec![(mean, 1.0)]
        } else {
            GH_NODES
                .iter()
                .zip(GH_WEIGHTS)
                .map(|(z, w)| (mean + z * sd, w))
                .collect()
        };
        let members: Vec<(f64, f64)> = draws
            .iter()
            .map(|&(pfi, w)| (self.member_for_pfi(pfi, &caps), w))
            .collect();
        let mut tau = [0.0; KNOTS];
        for (k, slot) in tau.iter_mut().enumerate() {
            *slot = members
                .iter()
                .map(|&(m, w)| w * self.tau_at_knot(m, k))
                .sum::<f64>()
                .clamp(0.0, 1.0);
        }
        NormalisedCurve { tau }
    }
}

/// Relative power of the knots of a plausible shape ([`PlausibleShape`]): 0.2, 0.3, …, 1.0, the
/// same points a job's estimated hull is sampled at ([`HULL_KNOT_STRIDE`]).
pub const PLAUSIBLE_KNOTS: usize = (KNOTS - 1) / HULL_KNOT_STRIDE + 1;

/// One plausible normalised curve: relative throughput at [`PLAUSIBLE_KNOTS`] relative powers.
pub type PlausibleShape = [f64; PLAUSIBLE_KNOTS];

/// Knee positions of the plausible set: a hinge at every depth from the top of the range (a
/// straight-line loss) to 60 % of the uncapped draw. Deeper ones are the rooflines' (the set's
/// deepest roofline stands in for any knee too deep for its PFI); a knee at 50 % was dropped in
/// issue 29 when the rooflines got columns of their own: the zoo's rows did not change without
/// it (seed 1), and its column was time the flexibility curve needed.
pub const PLAUSIBLE_KNEES: [f64; 5] = [1.0, 0.9, 0.8, 0.7, 0.6];

/// The relative power of plausible-shape knot `k`.
#[must_use]
pub fn plausible_knot_x(k: usize) -> f64 {
    knot_x(k * HULL_KNOT_STRIDE)
}

/// Relative throughput of `shape` at relative power `x`, linear between knots (and towards the
/// origin below the first knot, as the estimated hulls do).
#[must_use]
pub fn plausible_tau(shape: &PlausibleShape, x: f64) -> f64 {
    plausible_position(x).interpolate(|k| shape[k])
}

/// Where a relative power falls among the plausible knots: what [`plausible_tau`] computes before
/// it reads a shape, so that a planner evaluating every plausible shape of a job at one power
/// locates it once (the hedge does this for every job and scenario of every trial plan).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KnotPosition {
    /// Below the first knot: the first knot's value times this factor (in proportion to power).
    Below(f64),
    /// Between knot `.0` and the next, `.1` of the way.
    Between(usize, f64),
    /// At or above the last knot (relative power 1).
    Top,
}

impl KnotPosition {
    /// The value at this position of a curve whose value at knot `k` is `at(k)`.
    #[inline]
    pub fn interpolate(self, at: impl Fn(usize) -> f64) -> f64 {
        match self {
            Self::Below(factor) => at(0) * factor,
            Self::Between(k, w) => {
                let a = at(k);
                a + w * (at(k + 1) - a)
            }
            Self::Top => at(PLAUSIBLE_KNOTS - 1),
        }
    }
}

/// The [`KnotPosition`] of relative power `x`.
#[must_use]
#[inline]
pub fn plausible_position(x: f64) -> KnotPosition {
    // A multiplication, not a division: the hedge locates every job at least twice a plan.
    knot_position(PLAUSIBLE_KNOTS, x, |offset| offset * PLAUSIBLE_KNOTS_PER_UNIT)
}

/// Plausible knots per unit of relative power (the reciprocal of their spacing, 0.1).
const PLAUSIBLE_KNOTS_PER_UNIT: f64 = (PLAUSIBLE_KNOTS - 1) as f64 / (1.0 - KNOT_LO);

/// Shapes of the plausible set per PFI: the hinges, the deepest and the shallowest roofline, and
/// the physical member.
pub const PLAUSIBLE_PER_PFI: usize = PLAUSIBLE_KNEES.len() + 3;
/// Size of every job's plausible set: both ends of its PFI interval.
pub const PLAUSIBLE_SHAPES: usize = 2 * PLAUSIBLE_PER_PFI;

impl CurveFamily {
    /// Curves of very different shape that all agree with a PFI between `pfi_lo` and `pfi_hi` on
    /// `grid`: what the planner cannot rule out about a job it has not measured.
    ///
    /// A PFI fixes the mean ratio of power cut to throughput lost over a grid's caps, not where
    /// the loss happens. Every concave non-decreasing curve is a mixture of *hinges* (flat down
    /// to a knee, then linear), so hinges at every depth are the extreme members of the set
    /// consistent with one PFI: a knee high up loses throughput early and gently, a deep one
    /// nothing at first and then steeply. One bound keeps the set from being everything: no
    /// fewer tokens per joule under a cap than uncapped, `τ(x) ≥ x` (every published H200 group
    /// has PFI > 1, "throughput falls slower than power", on average over its caps). A hinge at
    /// knee `c` meets that if its slope is at most `1/c`; the deepest one that does is the
    /// *roofline* `min(1, x/r)`. The bound is a modelling choice, not a law: the physical model
    /// itself dips a little below it at the deepest caps of compute-bound jobs (group 1's truth
    /// keeps 0.31 at x = 0.35), and steeper knees are what the curve zoo's `knee_deep` and
    /// `smooth_knee` are made of. Admitting them would have the hedge guard them at the price of
    /// much of the gain on every fleet; the zoo's knowledge bound shows that no plan can pass
    /// `knee_deep`'s rows together with the paper's fleet at 30–40 % cuts. Measured (issue 29,
    /// BENCHMARKS.md, "The physical bound"): the bound physics does give, no throughput reaching
    /// zero above the power a capped GPU draws at a standstill (static power and the memory's
    /// base, 155 W on an H200, so slopes up to `1/(c − 0.24)`), applied consistently (a PFI no
    /// such hinge reaches stood in for by the steepest one) takes the paper's fleet at a 30 % cut
    /// from 93 % to 65 % of its gap; applied only where a hinge has the PFI (the deepest roofline,
    /// or `τ = x` below PFI 1, standing in elsewhere, as now) it passes every zoo row under
    /// `progress` but makes the plan bolder the worse the prediction (81 % of the paper's gap at
    /// an error of 0.1, 95 % at 0.5). Every zoo row under `progress` passes now by another way,
    /// the hedge's adverse ends (`alloc::curve_aware::hedge`), with the set as it is.
    ///
    /// The set holds, at both ends of the PFI interval, hinges at knees 1.0, 0.9, …, 0.6 (each
    /// calibrated in closed form so that its PFI on the grid, by the PFI's own definition with
    /// its ε rule, is the PFI asked; a knee too deep for that PFI, or with no grid cap below it,
    /// is replaced by the deepest roofline of that PFI), the deepest and the shallowest roofline
    /// of that PFI (the ε rule lets one PFI name two: a cap just under the knee enters the mean
    /// with a ratio far above the others), and the physical family's member:
    /// [`PLAUSIBLE_SHAPES`] shapes, always in the same order, so that shape `s` of one job and
    /// shape `s` of another are the same *kind* of curve (a fleet whose jobs all share one
    /// unexpected shape is the case to guard against).
    ///
    /// Until issue 29 the hinges were calibrated on every cap below the knee, the ε rule aside,
    /// and the set held one roofline, found by a bisection that assumed the PFI monotone in the
    /// knee: for a PFI that two rooflines share it found the shallow one, the curve zoo's
    /// `roofline` family is the deep one, and the hedge judged a fleet of them to lose 0.1–0.5 %
    /// against the equal cut where it lost 1–2 % (so that a family *in* the set missed the
    /// hedge's guarantee, which BENCHMARKS.md had put down to the predictions' errors).
    ///
    /// The set is built from the PFI's definition and that one physical bound, not from the
    /// fleet experiment's truth families: which of those it covers is measured (BENCHMARKS.md,
    /// the curve zoo).
    #[must_use]
    pub fn plausible_shapes(
        &self,
        pfi_lo: f64,
        pfi_hi: f64,
        grid: &CapGrid,
        uncapped: WattsPerGpu,
    ) -> Vec<PlausibleShape> {
        let caps = relative_caps(grid, uncapped);
        let xs = &caps.xs;
        let row = |f: &dyn Fn(f64) -> f64| {
            let mut shape = [0.0; PLAUSIBLE_KNOTS];
            for (k, slot) in shape.iter_mut().enumerate() {
                *slot = f(plausible_knot_x(k)).clamp(0.0, 1.0);
            }
            shape
        };
        let mut shapes = Vec::with_capacity(PLAUSIBLE_SHAPES);
        for pfi in [pfi_lo, pfi_hi.max(pfi_lo)] {
            let pfi = if pfi.is_finite() { pfi.max(0.5) } else { 1.0 };
            let (deepest, shallowest) = rooflines_for_pfi(pfi, xs);
            for &c in &PLAUSIBLE_KNEES {
                match hinge_slope(c, pfi, xs) {
                    Some(slope) if slope * c <= 1.0 => shapes.push(row(&|x| 1.0 - slope * (c - x).max(0.0))),
                    _ => shapes.push(row(&|x| (x / deepest).min(1.0))),
                }
            }
            shapes.push(row(&|x| (x / deepest).min(1.0)));
            shapes.push(row(&|x| (x / shallowest).min(1.0)));
            let member = self.member_for_pfi(pfi, &caps);
            shapes.push(row(&|x| self.tau_at(member, x)));
        }
        shapes
    }
}

/// The PFI of the normalised curve `tau` on the relative caps `xs`, as [`crate::pfi`] defines
/// it: the mean, over the caps that lose at least [`crate::pfi::DEFAULT_EPSILON`] of throughput,
/// of power cut over throughput lost. `None` when no cap loses that much.
///
/// The plausible set's members are calibrated with this, not with a formula of their own: a
/// member is plausible because its PFI, measured the way the predicted one was, is the one asked.
/// Until issue 29 the hinges counted every cap below the knee, also those that lose almost
/// nothing (ratios far above any PFI), so a hinge of a given PFI sat much higher than the curve
/// a sweep would measure with that PFI: the roofline of PFI 2.0 on a 590 W job's grid had its
/// knee at 63 % of the draw where the PFI's definition puts it at 51 %.
fn shape_pfi(xs: &[f64], tau: impl Fn(f64) -> f64) -> Option<f64> {
    let (sum, n) = xs
        .iter()
        .filter_map(|&x| {
            let loss = 1.0 - tau(x);
            (loss >= crate::pfi::DEFAULT_EPSILON).then(|| (1.0 - x) / loss)
        })
        .fold((0.0, 0usize), |(s, n), r| (s + r, n + 1));
    (n > 0).then(|| sum / n as f64)
}

/// The slope `k` of the hinge `1 − k·max(0, c − x)` whose PFI on `xs` is `pfi`, in closed form:
/// with the `m` caps deepest below the knee kept by the ε rule, `PFI = mean((1 − x)/(c − x))/k`
/// over them, so `k` follows, and it is the answer if it keeps exactly those caps (each loses at
/// least ε, the next one less). The most caps that are consistent win (a steeper hinge keeps
/// more). `None` when no cap lies below the knee or none is consistent.
fn hinge_slope(c: f64, pfi: f64, xs: &[f64]) -> Option<f64> {
    let epsilon = crate::pfi::DEFAULT_EPSILON;
    let mut depths: Vec<f64> = xs.iter().filter(|&&x| x < c).map(|&x| c - x).collect();
    depths.sort_by(|a, b| b.total_cmp(a));
    (1..=depths.len()).rev().find_map(|m| {
        let kept = &depths[..m];
        let ratio = kept.iter().map(|&d| (1.0 - (c - d)) / d).sum::<f64>() / m as f64;
        let k = ratio / pfi;
        let keeps_all = kept.iter().all(|&d| k * d >= epsilon * (1.0 - 1e-9));
        let drops_next = depths.get(m).is_none_or(|&d| k * d < epsilon);
        (keeps_all && drops_next).then_some(k)
    })
}

/// The deepest and the shallowest roofline `min(1, x/r)` whose PFI on the relative caps `xs` is
/// `pfi` ([`shape_pfi`]), as their knees `r`.
///
/// A PFI does not pin one roofline: the ε rule drops a cap whose loss is below ε, and a cap just
/// below the knee, kept, has a ratio far above the others, so the PFI falls as `r` rises between
/// the points where a cap enters the mean (`r = x/(1 − ε)`) and jumps up where one does. On a
/// 670 W job swept at 200–600 W, PFI 1.22 is the roofline at 0.895 and the one at 0.951. Between
/// those points the PFI is `mean(r(1 − x)/(r − x))`, decreasing in `r`, so each stretch holds at
/// most one root, found by bisection; both extremes are plausible, and they differ where it
/// matters (how much a cut just below the knee loses). `(1, 1)` for a PFI of 1 or less; the
/// lowest cap for a PFI beyond reach.
fn rooflines_for_pfi(pfi: f64, xs: &[f64]) -> (f64, f64) {
    let epsilon = crate::pfi::DEFAULT_EPSILON;
    let lowest = xs.iter().copied().fold(1.0, f64::min);
    if pfi <= 1.0 || lowest >= 1.0 {
        return (1.0, 1.0);
    }
    let pfi_at = |r: f64| shape_pfi(xs, |x| (x / r).min(1.0)).unwrap_or(f64::INFINITY);
    // The stretches' ends: where a cap enters the mean, within (lowest, 1].
    let mut ends: Vec<f64> = xs
        .iter()
        .map(|&x| x / (1.0 - epsilon))
        .filter(|&r| r > lowest && r < 1.0)
        .collect();
    ends.push(lowest);
    ends.push(1.0);
    ends.sort_by(f64::total_cmp);
    ends.dedup();
    let mut roots = ends.windows(2).filter_map(|w| {
        // Just inside the stretch, where its set of caps holds.
        let (mut deep, mut shallow) = (w[0] + 1e-9, w[1] - 1e-9);
        if deep >= shallow || !(pfi_at(shallow) <= pfi && pfi <= pfi_at(deep)) {
            return None;
        }
        for _ in 0..40 {
            let mid = 0.5 * (deep + shallow);
            if pfi_at(mid) > pfi {
                deep = mid;
            } else {
                shallow = mid;
            }
        }
        Some(0.5 * (deep + shallow))
    });
    let Some(first) = roots.next() else {
        // No roofline reaches it: the deepest one is the nearest.
        return (lowest + 1e-6, lowest + 1e-6);
    };
    let last = roots.next_back().unwrap_or(first);
    (first, last)
}

fn member_model(normalised: PhysicalModel, theta: f64) -> PhysicalModel {
    if theta >= 0.0 {
        let phi = 1.0 - theta * (1.0 - crate::physics::MIN_COMPUTE_SHARE);
        PhysicalModel {
            compute_share: phi,
            ..normalised
        }
    } else {
        let alpha = normalised.alpha + theta * (normalised.alpha - crate::physics::MIN_ALPHA);
        PhysicalModel {
            compute_share: 1.0,
            alpha,
            ..normalised
        }
    }
}

fn knot_x(k: usize) -> f64 {
    KNOT_LO + KNOT_STEP * k as f64
}

/// Linear interpolation on the table's knots, and in proportion to power below the first.
fn interpolate_row(row: &[f64; KNOTS], x: f64) -> f64 {
    row_at(row, table_position(x))
}

/// Where relative power `x` falls on the table's knots.
fn table_position(x: f64) -> KnotPosition {
    knot_position(KNOTS, x, |offset| offset / KNOT_STEP)
}

/// A table row's value at a position on its knots.
fn row_at(row: &[f64; KNOTS], position: KnotPosition) -> f64 {
    match position {
        KnotPosition::Top => row[KNOTS - 1],
        position => position.interpolate(|k| row[k]),
    }
}

/// Where `x` falls on `knots` evenly spaced knots from `KNOT_LO` to 1 (at least two), `to_knots`
/// turning an offset from `KNOT_LO` into knot spacings.
#[inline]
fn knot_position(knots: usize, x: f64, to_knots: impl Fn(f64) -> f64) -> KnotPosition {
    if x >= 1.0 {
        return KnotPosition::Top;
    }
    if x <= KNOT_LO {
        return KnotPosition::Below((x / KNOT_LO).max(0.0));
    }
    let pos = to_knots(x - KNOT_LO);
    // `pos > 0` here, so truncation is the floor (without a libm call on baseline x86-64).
    let i = (pos as usize).min(knots - 2);
    KnotPosition::Between(i, pos - i as f64)
}

/// A grid's caps relative to a job's uncapped per-GPU draw, each with where it falls on the
/// table's knots: finding a member by its PFI reads a dozen members at the same caps, so the
/// caps are located once.
struct RelativeCaps {
    /// `cap / P_u`, reference excluded.
    xs: Vec<f64>,
    /// Where each falls on the table's knots.
    on_knots: Vec<KnotPosition>,
}

/// Caps of a grid relative to the job's uncapped per-GPU draw, reference (largest cap) excluded.
/// Caps at or above the draw do not bind and are left out, as the ε rule would drop them.
fn relative_caps(grid: &CapGrid, uncapped: WattsPerGpu) -> RelativeCaps {
    let caps = grid.caps();
    let capped = caps.split_last().map_or(&[][..], |(_, rest)| rest);
    let xs: Vec<f64> = capped
        .iter()
        .map(|c| *c / uncapped)
        .filter(|x| *x < 1.0 && x.is_finite())
        .collect();
    let on_knots = xs.iter().map(|&x| table_position(x)).collect();
    RelativeCaps { xs, on_knots }
}

/// Relative throughput on the fixed normalised power knots, concave after construction.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalisedCurve {
    tau: [f64; KNOTS],
}

impl NormalisedCurve {
    /// Relative throughput at relative power `x`.
    #[must_use]
    pub fn tau_at(&self, x: f64) -> f64 {
        interpolate_row(&self.tau, x)
    }

    /// The smallest relative power at which the relative throughput is at least `tau`.
    #[must_use]
    pub fn power_for_tau(&self, tau: f64) -> f64 {
        if tau <= 0.0 {
            return 0.0;
        }
        if tau >= self.tau[KNOTS - 1] {
            return 1.0;
        }
        let k = self.tau.partition_point(|&t| t < tau);
        if k == 0 {
            return KNOT_LO * (tau / self.tau[0]).min(1.0);
        }
        let (a, b) = (self.tau[k - 1], self.tau[k]);
        let w = if b > a { (tau - a) / (b - a) } else { 1.0 };
        knot_x(k - 1) + w * KNOT_STEP
    }

    /// Scale to a job: vertices `(power W, tokens/s)` from `floor` up to `p_max`, as a hull,
    /// sampled every [`HULL_KNOT_STRIDE`] table knots (Δx = 0.1).
    ///
    /// The coarser sampling keeps a 100 k-job plan within its time budget (≈ 7 segments a job);
    /// on these smooth concave shapes the chord error is below half a percent of throughput.
    #[must_use]
    pub fn to_hull(&self, p_max: Watts, t_max: TokensPerSec, floor: Watts) -> ConcaveHull {
        let x_floor = (floor / p_max).clamp(0.0, 1.0);
        let mut pts = Vec::with_capacity(KNOTS / HULL_KNOT_STRIDE + 2);
        pts.push((floor.value(), t_max.value() * self.tau_at(x_floor)));
        for k in (0..KNOTS).step_by(HULL_KNOT_STRIDE) {
            let x = knot_x(k);
            if x > x_floor {
                pts.push((p_max.value() * x, t_max.value() * self.tau[k]));
            }
        }
        ConcaveHull::from_points(pts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pfi::pfi_on_grid;

    #[test]
    fn shape_reproduces_the_requested_pfi_on_its_grid() {
        let family = CurveFamily::h200_generic();
        for (pfi, grid, draw) in [
            (1.10, CapGrid::coarse_h200(), 690.0),
            (1.27, CapGrid::fine_h200(), 650.0),
            (2.67, CapGrid::fine_h200(), 590.0),
        ] {
            let shape = family.shape(pfi, &grid, WattsPerGpu(draw));
            let got = measured_pfi(|x| shape.tau_at(x), &grid, draw);
            assert!((got - pfi).abs() < 0.02, "asked {pfi}, family gives {got}");
        }
    }

    /// The PFI of `tau` on `grid` for a job drawing `draw` W, by the public definition
    /// ([`pfi_on_grid`]), from the exact function (not the shape's knots).
    fn measured_pfi(tau: impl Fn(f64) -> f64, grid: &CapGrid, draw: f64) -> f64 {
        let points: Vec<_> = grid
            .caps()
            .iter()
            .map(|c| {
                let x = (c.value() / draw).min(1.0);
                crate::curve::CurvePoint {
                    cap: *c,
                    power: Watts(x * draw),
                    tokens: TokensPerSec(tau(x)),
                }
            })
            .collect();
        let curve = crate::curve::PowerCurve::new(1, points).expect("curve");
        pfi_on_grid(&curve, grid, crate::pfi::DEFAULT_EPSILON)
            .expect("pfi")
            .value
    }

    #[test]
    fn every_hinge_and_roofline_of_the_plausible_set_has_the_pfi_asked() {
        let (mut rooflines, mut hinges) = (0, 0);
        for grid in [CapGrid::fine_h200(), CapGrid::coarse_h200()] {
            for draw in [590.0, 650.0, 670.0, 690.0] {
                let xs = relative_caps(&grid, WattsPerGpu(draw)).xs;
                for pfi in [1.05, 1.10, 1.22, 1.5, 2.0, 2.2, 2.67] {
                    let (deepest, shallowest) = rooflines_for_pfi(pfi, &xs);
                    assert!(deepest <= shallowest, "{deepest} > {shallowest}");
                    for r in [deepest, shallowest] {
                        // A PFI beyond every roofline's reach gets the deepest one, not its PFI.
                        if r <= xs.iter().copied().fold(1.0, f64::min) + 1e-5 {
                            continue;
                        }
                        let got = measured_pfi(|x| (x / r).min(1.0), &grid, draw);
                        assert!(
                            (got - pfi).abs() < 1e-6,
                            "roofline {r} of PFI {pfi}: {got} ({grid:?}, {draw} W)"
                        );
                        rooflines += 1;
                    }
                    for &c in &PLAUSIBLE_KNEES {
                        // A hinge steeper than `1/c` is not in the set (its roofline stands in).
                        let Some(k) = hinge_slope(c, pfi, &xs).filter(|k| k * c <= 1.0) else {
                            continue;
                        };
                        let got = measured_pfi(|x| 1.0 - k * (c - x).max(0.0), &grid, draw);
                        assert!(
                            (got - pfi).abs() < 1e-6,
                            "hinge at {c} of PFI {pfi}: {got} ({grid:?}, {draw} W)"
                        );
                        hinges += 1;
                    }
                }
            }
        }
        // 56 cases, two rooflines and five knees each: most reach their PFI (the checks above
        // are not vacuous).
        assert!(
            rooflines >= 100 && hinges >= 120,
            "{rooflines} rooflines, {hinges} hinges checked"
        );
    }

    proptest::proptest! {
        /// On any grid (2–6 caps below the draw, the 700 W reference), every roofline and
        /// hinge the set is built from has the PFI asked, by the public definition, wherever it
        /// is reachable; the deepest roofline is never above the shallowest.
        #[test]
        fn the_set_is_calibrated_by_the_pfis_definition_on_any_grid(
            caps in proptest::collection::btree_set(150u32..650, 2..7),
            draw in 560.0f64..700.0,
            pfi in 1.01f64..3.0,
        ) {
            let mut watts: Vec<f64> = caps.into_iter().map(f64::from).filter(|&c| c < draw - 5.0).collect();
            proptest::prop_assume!(watts.len() >= 2);
            watts.push(700.0);
            let grid = CapGrid(watts.into_iter().map(WattsPerGpu).collect());
            let xs = relative_caps(&grid, WattsPerGpu(draw)).xs;
            let lowest = xs.iter().copied().fold(1.0, f64::min);
            let (deepest, shallowest) = rooflines_for_pfi(pfi, &xs);
            proptest::prop_assert!(deepest <= shallowest);
            for r in [deepest, shallowest].into_iter().filter(|&r| r > lowest + 1e-5) {
                let got = measured_pfi(|x| (x / r).min(1.0), &grid, draw);
                proptest::prop_assert!((got - pfi).abs() < 1e-6, "roofline {} of PFI {}: {}", r, pfi, got);
            }
            for &c in &PLAUSIBLE_KNEES {
                if let Some(k) = hinge_slope(c, pfi, &xs).filter(|k| k * c <= 1.0) {
                    let got = measured_pfi(|x| 1.0 - k * (c - x).max(0.0), &grid, draw);
                    proptest::prop_assert!((got - pfi).abs() < 1e-6, "hinge at {} of PFI {}: {}", c, pfi, got);
                }
            }
        }
    }

    #[test]
    fn one_pfi_can_name_two_rooflines_and_the_set_holds_both() {
        // A 670 W job swept at 200–600 W: the cap at 600 W (x = 0.896) enters the mean only once
        // the knee is above 0.905, with a ratio far above the others, so PFI 1.22 is the
        // roofline at 0.895 and again the one at 0.951.
        let grid = CapGrid::fine_h200();
        let xs = relative_caps(&grid, WattsPerGpu(670.0)).xs;
        let (deepest, shallowest) = rooflines_for_pfi(1.22, &xs);
        assert!((deepest - 0.8955).abs() < 0.002, "deepest {deepest}");
        assert!((shallowest - 0.951).abs() < 0.002, "shallowest {shallowest}");
        let shapes = CurveFamily::h200_generic().plausible_shapes(1.22, 1.22, &grid, WattsPerGpu(670.0));
        assert_eq!(shapes.len(), PLAUSIBLE_SHAPES);
        let roofline = PLAUSIBLE_KNEES.len();
        // At 0.9 of the draw the deepest keeps everything, the shallowest loses 5 %.
        assert!((plausible_tau(&shapes[roofline], 0.9) - 1.0).abs() < 1e-3);
        assert!((plausible_tau(&shapes[roofline + 1], 0.9) - 0.9 / 0.951).abs() < 0.01);
    }

    #[test]
    fn more_flexible_jobs_keep_more_throughput_and_shapes_are_concave() {
        let family = CurveFamily::h200_generic();
        let grid = CapGrid::fine_h200();
        let low = family.shape(1.2, &grid, WattsPerGpu(650.0));
        let high = family.shape(2.2, &grid, WattsPerGpu(650.0));
        for x in [0.4, 0.6, 0.8] {
            assert!(high.tau_at(x) > low.tau_at(x));
        }
        for shape in [&low, &high] {
            // Concave wherever a 200 W cap can reach (x ≥ 0.3); below, the clock floor flattens it.
            let slopes: Vec<f64> = shape.tau[4..].windows(2).map(|w| w[1] - w[0]).collect();
            assert!(
                slopes.windows(2).all(|s| s[1] <= s[0] + 1e-9),
                "not concave: {slopes:?}"
            );
        }
    }

    #[test]
    fn expected_shape_orders_with_pfi_and_power_for_tau_inverts() {
        let family = CurveFamily::h200_generic();
        let grid = CapGrid::fine_h200();
        let draw = WattsPerGpu(650.0);
        let low = family.expected_shape(1.02, 0.0, &grid, draw);
        let uncertain = family.expected_shape(1.5, 0.24, &grid, draw);
        let high = family.expected_shape(2.2, 0.0, &grid, draw);
        for x in [0.4, 0.7] {
            assert!(low.tau_at(x) < uncertain.tau_at(x) && uncertain.tau_at(x) < high.tau_at(x));
        }
        let x = uncertain.power_for_tau(0.9);
        assert!((uncertain.tau_at(x) - 0.9).abs() < 1e-9);
        // The expected curve is concave where a cap can reach, so the allocator's hull is the
        // estimate itself and never bridges a stretch the estimate says is worse.
        for curve in [&low, &uncertain, &high] {
            let slopes: Vec<f64> = curve.tau[4..].windows(2).map(|w| w[1] - w[0]).collect();
            assert!(
                slopes.windows(2).all(|s| s[1] <= s[0] + 1e-9),
                "not concave: {slopes:?}"
            );
        }
        // Absurd inputs clamp rather than panic.
        let _ = family.shape(f64::NAN, &grid, draw);
        let _ = family.expected_shape(50.0, 10.0, &grid, WattsPerGpu(0.0));
        let _ = family.expected_shape(f64::NAN, f64::NAN, &grid, draw);
    }
}
