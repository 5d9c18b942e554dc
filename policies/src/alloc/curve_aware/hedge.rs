//! Hedging: a plan that never loses materially to the equal cut on a plausible curve.
//!
//! The expected-value plan bets on the estimated shapes: it cuts deepest where the estimate says
//! a watt is cheapest. When the estimate's shape is wrong (a knee where it assumed a smooth
//! curve, jobs whose tokens per joule are too alike for energy intensity to rank them) the bet
//! can lose to the equal cut, which bets on nothing. A site must never do worse than the naive
//! cut because it trusted a guess, so the plan is checked against the equal cut on the curves
//! that the knowledge cannot rule out.
//!
//! **Regret against the equal cut.** Each job that is not measured has
//! [`PLAUSIBLE_SHAPES`] plausible shapes ([`crate::estimate::CurveFamily::plausible_shapes`]):
//! hinges at every depth, a power law and the physical member, at both ends of its PFI
//! interval, always in the same order. Scenario `s` gives every job its shape `s` at once: a
//! fleet whose curves all share one shape the estimate did not expect, or whose predictions are
//! all too high (the systematic errors that do not average out over many jobs, unlike a
//! prediction's random error, which the expected curve already averages over). Under scenario
//! `s` the plan gains `R_s = Σ_j V_j·(τ_js(p_j/P_j) − τ_js(e_j/P_j))` over the equal cut (`e_j`
//! the job's equal-cut power, `V_j` its uncapped value under the objective; a measured job
//! counts its own hull in every scenario; an unknown job is held at `e_j` and counts nothing).
//!
//! **The hedge.** The expected-value plan stands if `min_s R_s ≥ −REGRET_TOLERANCE × V_equal`
//! (the equal cut's expected value; [`REGRET_TOLERANCE`] by default). Otherwise it is shrunk toward the equal cut: the plan
//! `e + α·(p − e)` keeps the budget and every floor for any α ∈ [0, 1], each `R_s` is concave
//! along that line (a sum of concave curves) and 0 at α = 0, so the largest α that meets the
//! bound is found by bisection, and it always exists (α = 0 is the equal cut). Where the
//! knowledge pins the curves (measured sweeps, tokens per joule that differ ten-fold) the
//! bound allows the expected plan and nothing changes; where it does not, the plan moves toward
//! the equal cut as far as the spread of plausible curves asks, and no further.

use super::Prepared;
use crate::alloc::select::{Segment, shed_cheapest};
use crate::curve::ConcaveHull;
use crate::estimate::{PLAUSIBLE_KNOTS, PLAUSIBLE_SHAPES, PlausibleShape, plausible_knot_x, plausible_tau};
use serde::Serialize;

/// The default of how far the plan's gain over the equal cut may fall below zero in its worst
/// scenario, as a share of the equal cut's expected value.
///
/// This is the knob between betting and hedging, and no value serves every fleet: on the curve
/// zoo (BENCHMARKS.md) at 0.25 % the paper's reproduction closes only half its gap (a fleet of
/// rooflines with the same PFIs would punish its plan, and a PFI cannot tell the two apart),
/// while at 2 % it keeps 93 % of it and the hedge still cuts the worst losses of the roofline
/// and equal-tokens-per-joule fleets by a third. `flexgate simulate --hedge --hedge-tolerance`
/// sets it.
pub const REGRET_TOLERANCE: f64 = 0.02;

/// How far a predicted PFI's plausible range reaches each side of its mean, in standard
/// deviations (≈ 95 % two-sided under a normal error).
pub const PLAUSIBLE_PFI_SDS: f64 = 2.0;

/// What the hedge found for one plan (recorded with it, so a reader sees why a plan is closer to
/// the equal cut than its estimates alone would make it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hedge {
    /// The weight each scenario's gain got in the plan kept (0 everywhere when the
    /// expected-value plan met the bound; infinite when only shrinking toward the equal cut did).
    pub multipliers: [f64; PLAUSIBLE_SHAPES],
    /// How much of the way from the equal cut to the expected-value plan was kept: 1 when the
    /// expected-value plan met the bound, 0 when only the equal cut did.
    pub shrink: f64,
    /// The expected-value plan's worst scenario gain over the equal cut, in objective units.
    pub expected_plan_bound: f64,
    /// The kept plan's worst scenario gain over the equal cut.
    pub bound: f64,
    /// Which scenario is the worst for the kept plan (index into the plausible shapes: knees
    /// at 1.0, 0.9, …, 0.5, the power law, the physical member; the first eight at the low end
    /// of each job's PFI interval).
    pub worst_scenario: usize,
    /// The equal cut's expected value (the tolerance is a share of it).
    pub equal_value: f64,
}

impl Hedge {
    /// No hedge was computed (hedging off, or the budget cannot be met anyway).
    pub(super) fn not_needed() -> Self {
        Self {
            multipliers: [0.0; PLAUSIBLE_SHAPES],
            shrink: 1.0,
            expected_plan_bound: 0.0,
            bound: 0.0,
            worst_scenario: 0,
            equal_value: 0.0,
        }
    }

    /// Whether the plan was moved toward the equal cut.
    #[must_use]
    pub fn moved(&self) -> bool {
        self.shrink < 1.0 || self.multipliers.iter().any(|&m| m > 0.0)
    }
}

/// Every job's plausible shapes, concatenated.
#[derive(Debug, Clone)]
pub(super) struct PlausibleSet {
    shapes: Vec<PlausibleShape>,
    /// `shapes[offsets[i]..offsets[i+1]]` are job i's.
    offsets: Vec<u32>,
}

impl PlausibleSet {
    pub(super) fn with_capacity(jobs: usize) -> Self {
        let mut offsets = Vec::with_capacity(jobs + 1);
        offsets.push(0);
        Self {
            shapes: Vec::new(),
            offsets,
        }
    }

    /// Add the next job's shapes.
    pub(super) fn push(&mut self, shapes: &[PlausibleShape]) {
        self.shapes.extend_from_slice(shapes);
        self.offsets.push(self.shapes.len() as u32);
    }

    pub(super) fn of(&self, job: usize) -> &[PlausibleShape] {
        &self.shapes[self.offsets[job] as usize..self.offsets[job + 1] as usize]
    }
}

impl Prepared<'_> {
    /// The plan's gain over the equal cut under every scenario, in objective units.
    fn scenario_gains(&self, shed: &[f64], equal: &[f64]) -> [f64; PLAUSIBLE_SHAPES] {
        let mut gains = [0.0; PLAUSIBLE_SHAPES];
        for i in 0..self.jobs.len() {
            if !self.has_hull(i) || (shed[i] - equal[i]).abs() <= 1e-12 {
                continue;
            }
            let job = &self.jobs[i];
            let p_max = job.uncapped_power.value();
            let (power, equal_power) = (p_max - shed[i], p_max - equal[i]);
            let shapes = self.plausible.of(i);
            if shapes.len() == PLAUSIBLE_SHAPES {
                let value = self.scale[i] * job.uncapped_tokens.value();
                let (x, x_equal) = (power / p_max, equal_power / p_max);
                for (gain, shape) in gains.iter_mut().zip(shapes) {
                    *gain += value * (plausible_tau(shape, x) - plausible_tau(shape, x_equal));
                }
            } else if let (Some(at), Some(at_equal)) = (self.hull_tokens(i, power), self.hull_tokens(i, equal_power)) {
                // A measured curve is the same in every scenario.
                let gain = self.scale[i] * (at - at_equal);
                for g in &mut gains {
                    *g += gain;
                }
            }
        }
        gains
    }

    /// Hedge the plan `shed` against the equal cut `equal` (see the module docs). `base` holds
    /// the unknown jobs' equal shares and `need_known` the watts the other jobs must shed.
    pub(super) fn hedge(&self, equal: &[f64], base: &[f64], need_known: f64, shed: &mut Vec<f64>) -> Hedge {
        let equal_value = self.total_delivered(equal);
        let tolerance = self.hedge_tolerance * equal_value.abs();
        let worst = |shed: &[f64]| {
            let gains = self.scenario_gains(shed, equal);
            gains.iter().enumerate().fold(
                (f64::INFINITY, 0usize),
                |(w, at), (s, &g)| {
                    if g < w { (g, s) } else { (w, at) }
                },
            )
        };
        let (expected_plan_bound, scenario) = worst(shed);
        let mut hedge = Hedge {
            multipliers: [0.0; PLAUSIBLE_SHAPES],
            shrink: 1.0,
            expected_plan_bound,
            bound: expected_plan_bound,
            worst_scenario: scenario,
            equal_value,
        };
        if expected_plan_bound >= -tolerance {
            return hedge;
        }
        // Lagrangian steps: weigh the violated scenarios into every job's curve, more and more,
        // until the plan meets the bound in every scenario.
        let curves = self.hedge_curves(equal);
        let mut active = [false; PLAUSIBLE_SHAPES];
        active[scenario] = true;
        let mut kept: Option<(Vec<f64>, [f64; PLAUSIBLE_SHAPES])> = None;
        let mut last = shed.clone();
        for _ in 0..ACTIVE_ROUNDS {
            let weights = |mu: f64| {
                let mut w = [0.0; PLAUSIBLE_SHAPES];
                for (slot, &on) in w.iter_mut().zip(&active) {
                    if on {
                        *slot = mu;
                    }
                }
                w
            };
            let plan = |mu: f64| {
                let w = weights(mu);
                let segments = combined_segments(&curves, &w);
                let mut trial = base.to_vec();
                let unmet = shed_cheapest(&segments, need_known, &mut trial);
                (unmet <= 1e-9 * need_known.max(1.0)).then_some(trial)
            };
            let meets_active = |trial: &[f64]| {
                let gains = self.scenario_gains(trial, equal);
                gains.iter().zip(&active).all(|(&g, &on)| !on || g >= -tolerance)
            };
            // The first multiplier on a geometric ladder that meets the active scenarios, then a
            // few bisection steps back toward the one before it.
            let mut found = None;
            let mut below = 0.0;
            for mu in MULTIPLIERS {
                if let Some(trial) = plan(mu)
                    && meets_active(&trial)
                {
                    found = Some((mu, trial));
                    break;
                }
                below = mu;
            }
            let Some((mut above, mut trial)) = found else { break };
            for _ in 0..REFINE_STEPS {
                let mid = if below > 0.0 {
                    (below * above).sqrt()
                } else {
                    0.5 * above
                };
                match plan(mid) {
                    Some(t) if meets_active(&t) => {
                        above = mid;
                        trial = t;
                    }
                    _ => below = mid,
                }
            }
            let (bound, worst_now) = worst(&trial);
            last.clone_from(&trial);
            if bound >= -tolerance {
                kept = Some((trial, weights(above)));
                break;
            }
            active[worst_now] = true;
        }
        let (plan, multipliers) = match kept {
            Some(found) => found,
            None => {
                // Shrink the last plan toward the equal cut until it meets the bound: on the line
                // between them every scenario's gain is concave and 0 at the equal cut.
                let along = |alpha: f64, out: &mut [f64]| {
                    for ((o, &p), &e) in out.iter_mut().zip(&last).zip(equal) {
                        *o = e + alpha * (p - e);
                    }
                };
                let (mut feasible, mut infeasible) = (0.0, 1.0);
                let mut trial = last.clone();
                for _ in 0..SHRINK_STEPS {
                    let alpha = 0.5 * (feasible + infeasible);
                    along(alpha, &mut trial);
                    if worst(&trial).0 >= -tolerance {
                        feasible = alpha;
                    } else {
                        infeasible = alpha;
                    }
                }
                along(feasible, &mut trial);
                hedge.shrink = feasible;
                (trial, [f64::INFINITY; PLAUSIBLE_SHAPES])
            }
        };
        *shed = plan;
        let (bound, scenario) = worst(shed);
        hedge.multipliers = multipliers;
        hedge.bound = bound;
        hedge.worst_scenario = scenario;
        hedge
    }

    /// Each job with a hull, as its expected value and its gain over the equal cut in every
    /// scenario, at its hull's vertices, the plausible shapes' knots and its equal-cut power.
    fn hedge_curves(&self, equal: &[f64]) -> Vec<HedgeCurve> {
        (0..self.jobs.len())
            .filter(|&i| self.has_hull(i))
            .map(|i| {
                let job = &self.jobs[i];
                let p_max = job.uncapped_power.value();
                let floor = self.floors[i].0.value().min(p_max);
                let equal_power = p_max - equal[i];
                let vertices = &self.vertices[self.offsets[i] as usize..self.offsets[i + 1] as usize];
                let shapes = self.plausible.of(i);
                let mut powers: Vec<f64> = vertices.iter().map(|v| v.0).collect();
                if shapes.len() == PLAUSIBLE_SHAPES {
                    powers.extend(
                        (0..PLAUSIBLE_KNOTS)
                            .map(|k| plausible_knot_x(k) * p_max)
                            .filter(|&p| p > floor && p < p_max),
                    );
                }
                powers.push(equal_power);
                let value = self.scale[i] * job.uncapped_tokens.value();
                let at_equal = self.hull_tokens(i, equal_power).unwrap_or(0.0);
                let points = powers
                    .into_iter()
                    .map(|p| {
                        let expected = self.scale[i] * self.hull_tokens(i, p).unwrap_or(0.0);
                        let mut gains = [0.0; PLAUSIBLE_SHAPES];
                        if shapes.len() == PLAUSIBLE_SHAPES {
                            let (x, x_equal) = (p / p_max, equal_power / p_max);
                            for (g, shape) in gains.iter_mut().zip(shapes) {
                                *g = value * (plausible_tau(shape, x) - plausible_tau(shape, x_equal));
                            }
                        } else {
                            gains = [expected - self.scale[i] * at_equal; PLAUSIBLE_SHAPES];
                        }
                        (p, expected, gains)
                    })
                    .collect();
                HedgeCurve {
                    job: i as u32,
                    p_max,
                    points,
                }
            })
            .collect()
    }
}

/// One job's expected value and scenario gains at a few powers.
struct HedgeCurve {
    job: u32,
    p_max: f64,
    points: Vec<(f64, f64, [f64; PLAUSIBLE_SHAPES])>,
}

/// The sheddable segments of `E + Σ_s w_s·G_s` for every job (its concave hull: every part is
/// concave, the hull only irons out rounding).
fn combined_segments(curves: &[HedgeCurve], weights: &[f64; PLAUSIBLE_SHAPES]) -> Vec<Segment> {
    let mut segments = Vec::with_capacity(curves.len() * PLAUSIBLE_KNOTS);
    for c in curves {
        let hull = ConcaveHull::from_points(c.points.iter().map(|(p, expected, gains)| {
            let penalty: f64 = gains.iter().zip(weights).map(|(g, w)| g * w).sum();
            (*p, expected + penalty)
        }));
        let v = hull.vertices();
        for w in v.windows(2) {
            let width = w[1].0 - w[0].0;
            if width > 0.0 {
                segments.push(Segment {
                    slope: (w[1].1 - w[0].1) / width,
                    width,
                    job: c.job,
                });
            }
        }
        // The hull stops at its best point; watts above it cost nothing.
        if let Some(&(last, _)) = v.last()
            && c.p_max > last
        {
            segments.push(Segment {
                slope: 0.0,
                width: c.p_max - last,
                job: c.job,
            });
        }
    }
    segments
}

/// Multipliers tried in turn on the violated scenarios (objective units per objective unit).
const MULTIPLIERS: [f64; 8] = [0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0];
/// Scenarios added to the active set at most.
const ACTIVE_ROUNDS: usize = 4;
/// Bisection steps between two rungs of the ladder.
const REFINE_STEPS: usize = 3;

/// Bisection steps on the shrink factor: 2⁻¹² of the way between the plans.
const SHRINK_STEPS: usize = 12;

#[cfg(test)]
mod tests {
    use crate::alloc::{Budget, CapRange, CurveAware, Elasticity, JobSpec};
    use crate::estimate::CurveFamily;
    use crate::units::{Fraction, TokensPerSec, Watts};
    use std::sync::Arc;

    /// Jobs whose tokens per joule differ ten-fold, all with predicted PFIs: the expected-value
    /// plan cuts the low-efficiency jobs deep, which a fleet of rooflines would punish.
    fn fleet() -> Vec<JobSpec> {
        (0..12)
            .map(|i| {
                let gpus = if i % 3 == 0 { 16 } else { 8 };
                let draw = [690.0, 670.0, 630.0, 590.0][i % 4];
                let tokens_per_gpu = [450.0, 900.0, 3_000.0, 4_500.0][i % 4];
                JobSpec {
                    id: format!("j{i}").into(),
                    gpus,
                    cap_range: CapRange::H200,
                    uncapped_power: Watts(draw * f64::from(gpus)),
                    uncapped_tokens: TokensPerSec(tokens_per_gpu * f64::from(gpus)),
                    elasticity: Elasticity::PredictedPfi {
                        mean: [1.2, 1.3, 1.5, 2.2][i % 4],
                        sd: 0.241,
                        grid: None,
                    },
                    max_slowdown: None,
                    priority: 1.0,
                }
            })
            .collect()
    }

    #[test]
    fn a_hedged_plan_meets_its_bound_in_every_scenario_and_a_loose_one_is_the_expected_plan() {
        let family = Arc::new(CurveFamily::h200_generic());
        let jobs = fleet();
        let budget = Budget::Cut(Fraction::new(0.3).expect("fraction"));
        let expected = CurveAware::flexgate(family.clone())
            .prepare(&jobs)
            .expect("prepare")
            .allocate(budget);
        for tolerance in [0.0, 0.0025, 0.02] {
            let policy = CurveAware::flexgate(family.clone())
                .with_hedging(true)
                .with_hedge_tolerance(tolerance);
            let (plan, hedge) = policy.prepare(&jobs).expect("prepare").allocate_explained(budget);
            let allowed = tolerance * hedge.equal_value;
            assert!(
                hedge.bound >= -allowed - 1e-6 * hedge.equal_value,
                "{tolerance}: {hedge:?}"
            );
            assert!(
                (plan.planned_power - plan.budget).value().abs() <= 1e-6 * plan.budget.value(),
                "the budget is met exactly"
            );
            assert!(
                plan.entries
                    .iter()
                    .all(|e| e.expected_power.value() >= e.floor.value() - 1e-6)
            );
            if hedge.expected_plan_bound < -allowed {
                assert!(hedge.moved(), "{tolerance}: a violating plan is hedged");
            }
        }
        // At 0 the expected plan's worst scenario loses to the equal cut here, so it moves.
        let (_, strict) = CurveAware::flexgate(family.clone())
            .with_hedging(true)
            .with_hedge_tolerance(0.0)
            .prepare(&jobs)
            .expect("prepare")
            .allocate_explained(budget);
        assert!(strict.expected_plan_bound < 0.0 && strict.moved(), "{strict:?}");
        // A tolerance nothing violates leaves the expected-value plan as it was.
        let loose = CurveAware::flexgate(family)
            .with_hedging(true)
            .with_hedge_tolerance(1.0)
            .prepare(&jobs)
            .expect("prepare")
            .allocate(budget);
        assert_eq!(loose, expected);
    }
}
