//! The site's flexibility (supply) curve: what shedding each amount of GPU power would cost,
//! computed by the allocator that would carry it out.
//!
//! A flexible-compute contract should promise what the running jobs can shed, not what the
//! installed megawatts suggest. For evenly spaced shed levels from 0 to the most the jobs can
//! shed (every job at its floor) the curve plans the level with the allocator's own shedding
//! (`Prepared::shed_for`, what [`Prepared::allocate`] runs before it writes a plan's entries:
//! the same plan an event of that depth would get, without the caps and ids no curve needs) and
//! records its expected cost to the objective, the
//! tokens/s and GPU-weighted progress lost, how many jobs it caps and which QoS tiers it
//! touches. When the preparation holds plausible shapes (hedging on) each point also gives the
//! range of its cost over the plausible scenarios; without them the range is absent, not zero.
//! Each level is planned from the budget an event of that depth would send
//! (`Prepared::need_for`), so the point and the event's plan are the same to the last bit.
//!
//! Unhedged, the cost never falls as the shed grows. Hedged it can: each plan is guarded
//! against the equal cut *of its own depth*, whose loss grows with the shed, so a deeper plan
//! may be guarded less and cost less than a shallower one (`policies/tests/alloc_props.rs`
//! found a three-job fleet losing 1,594 tokens/s at a 4.2 kW shed and 11 at 4.8 kW; the best
//! plan the guard allows dips too, 8.5 at 3.6 kW and 6.0 at 3.8 kW). The curve shows what the
//! plans do, dips included; each level's cost lies between the unhedged plan's and the equal
//! cut's plus the hedge's tolerance, which that test checks.
//!
//! The curve is in GPU-board watts; the gateway converts it to the meter with the facility
//! model, as it does every budget.

use super::Prepared;
use crate::alloc::Objective;
use crate::estimate::{PLAUSIBLE_SHAPES, plausible_position};
use crate::units::{TokensPerSec, Watts};
use serde::Serialize;

/// The most levels one curve may have: more is a request for a plot, not a contract.
pub const MAX_LEVELS: usize = 1000;

/// One shed level of the curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlexPoint {
    /// GPU-board power shed from the jobs' uncapped draw.
    pub shed: Watts,
    /// Expected loss in the objective's units (tokens/s, or GPU-weighted progress × GPUs).
    pub value_lost: f64,
    /// The range of `value_lost` over the plausible scenarios (lowest, highest), when known.
    pub value_lost_range: Option<(f64, f64)>,
    /// Expected tokens/s lost, summed over the jobs.
    pub tokens_lost: TokensPerSec,
    /// Expected GPU-weighted progress lost (0 = none, 1 = every job stopped).
    pub progress_lost: f64,
    /// Jobs the plan caps.
    pub jobs_capped: usize,
    /// The distinct QoS tiers (maximum slowdowns) of the capped jobs, ascending.
    pub tiers_touched: Vec<f64>,
    /// What the plan could not shed at this level (0 below the maximum).
    pub shortfall: Watts,
}

/// The whole curve.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FlexibilityCurve {
    /// The objective the costs are in.
    pub objective: Objective,
    /// The jobs' total uncapped draw.
    pub uncapped_power: Watts,
    /// The jobs' value uncapped under the objective (Σ T_max, or Σ GPUs × priority): what
    /// `value_lost` is a share of.
    pub uncapped_value: f64,
    /// The most the jobs can shed (every job at its floor).
    pub max_shed: Watts,
    /// From no shed to `max_shed`, ascending.
    pub points: Vec<FlexPoint>,
}

impl Prepared<'_> {
    /// The flexibility curve at `levels` evenly spaced shed levels (at least 2: none and the
    /// most; at most [`MAX_LEVELS`]).
    #[must_use]
    pub fn flexibility_curve(&self, levels: usize) -> FlexibilityCurve {
        let levels = levels.clamp(2, MAX_LEVELS);
        let uncapped = self.uncapped_power;
        let max_shed: f64 = self
            .jobs
            .iter()
            .zip(&self.floors)
            .map(|(j, f)| (j.uncapped_power - f.0).value().max(0.0))
            .sum();
        let total_weight: f64 = self.jobs.iter().map(|j| f64::from(j.gpus) * j.priority).sum();
        let mut powers = vec![Watts::ZERO; self.jobs.len()];
        let points = (0..levels)
            .map(|k| {
                let level = max_shed * k as f64 / (levels - 1) as f64;
                let plan = self.shed_for(self.need_for(uncapped - Watts(level)));
                let (mut value, mut tokens, mut progress, mut capped) = (0.0, 0.0, 0.0, 0usize);
                let mut tiers: Vec<f64> = Vec::new();
                for (i, job) in self.jobs.iter().enumerate() {
                    let power = self.planned_power(i, plan.shed[i]);
                    powers[i] = power;
                    if power.value() >= job.uncapped_power.value() * (1.0 - 1e-9) {
                        continue;
                    }
                    let expected = self.expected_tokens(i, power, self.hull_tokens(i, power.value()));
                    let lost = (job.uncapped_tokens.value() - expected).max(0.0);
                    value += self.scale[i] * lost;
                    tokens += lost;
                    progress += f64::from(job.gpus) * job.priority * lost / job.uncapped_tokens.value();
                    capped += 1;
                    if let Some(tier) = job.max_slowdown {
                        tiers.push(tier.value());
                    }
                }
                tiers.sort_by(f64::total_cmp);
                tiers.dedup();
                FlexPoint {
                    shed: Watts(level),
                    value_lost: value,
                    value_lost_range: self.scenario_loss_range(&powers),
                    tokens_lost: TokensPerSec(tokens),
                    progress_lost: if total_weight > 0.0 {
                        progress / total_weight
                    } else {
                        0.0
                    },
                    jobs_capped: capped,
                    tiers_touched: tiers,
                    shortfall: Watts(plan.unmet),
                }
            })
            .collect();
        FlexibilityCurve {
            objective: self.objective,
            uncapped_power: uncapped,
            uncapped_value: self
                .jobs
                .iter()
                .zip(&self.scale)
                .map(|(j, scale)| scale * j.uncapped_tokens.value())
                .sum(),
            max_shed: Watts(max_shed),
            points,
        }
    }

    /// The plan's loss under each plausible scenario (measured and unknown jobs at their
    /// expected loss), lowest and highest; `None` when no job has plausible shapes.
    fn scenario_loss_range(&self, powers: &[Watts]) -> Option<(f64, f64)> {
        if !self.hedging {
            // Plausible shapes are prepared only for the hedge.
            return None;
        }
        // Σ value × τ_s over the jobs with plausible shapes (τ ≤ 1, so each job's loss is its
        // value less that), and the others' expected loss, which every scenario shares.
        let mut kept = [0.0; super::hedge::COLUMNS];
        let (mut plausible_value, mut shared_loss) = (0.0, 0.0);
        let mut any = false;
        for (i, (job, &power)) in self.jobs.iter().zip(powers).enumerate() {
            let value = self.scale[i] * job.uncapped_tokens.value();
            let position = plausible_position(power / job.uncapped_power);
            if self.plausible.add_values(i, position, value, &mut kept) {
                any = true;
                plausible_value += value;
            } else {
                let expected = self.expected_tokens(i, power, self.hull_tokens(i, power.value()));
                shared_loss += self.scale[i] * (job.uncapped_tokens.value() - expected).max(0.0);
            }
        }
        let losses: [f64; PLAUSIBLE_SHAPES] =
            std::array::from_fn(|s| (plausible_value - kept[s]).max(0.0) + shared_loss);
        any.then(|| {
            losses.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &l| {
                (lo.min(l), hi.max(l))
            })
        })
    }
}
