//! The paper's proportional rules: each job's curtailment is proportional to a weight.
//!
//! Curtailment `c_i = min(λ·w_i, h_i)` with headroom `h_i = P_max,i − floor_i`; λ is chosen so
//! that Σ c_i equals the cut `Σ P_max − budget`. **Clipping and redistribution**: a job whose
//! share would take it below its floor is clipped at the floor, and the overflow is spread over
//! the remaining jobs *in proportion to their weights* — exactly what raising the common λ does.
//! If every job reaches its floor the cut is not met and the plan reports the shortfall.
//!
//! Weights:
//! - `Equal`: `w = P_max` — every job loses the same fraction of its draw (the paper's baseline);
//! - `PfiPaper`: `w = (P_max/T_max)·PFI` — energy per token times flexibility (the paper's rule);
//!   the PFI is the best known value (sweep > PFI > predicted mean); unknown counts as 1;
//! - `Efficiency`: `w = P_max/T_max` — the ablation without PFI.
//!
//! Under [`Objective::Progress`] `T_max` in these weights is the job's progress weight
//! (`gpus × priority`, see [`Proportional::with_objective`]).
//!
//! Note that `PfiPaper` and `Efficiency` weights are *intensive* (watts per token/s, independent
//! of job size), as the paper writes them: a 32-GPU job and an 8-GPU job of the same model get the
//! same absolute curtailment. The curtailment is applied to the job's aggregate draw and split
//! evenly over its GPUs (`cap = (P_max − c)/gpus`).

use super::AllocationPolicy;
use super::bounds::FloorModel;
use super::types::{Budget, CapPlan, Elasticity, FloorKind, JobSpec, Objective, PlanEntry, PlanError, Reason};
use crate::estimate::CurveFamily;
use crate::pfi::{DEFAULT_EPSILON, pfi};
use crate::units::{TokensPerSec, Watts};
use std::sync::Arc;

/// Which weight the proportional rule uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Weighting {
    /// Same fraction of P_max from every job.
    Equal,
    /// ∝ (P_max/T_max)·PFI.
    PfiPaper,
    /// ∝ P_max/T_max.
    Efficiency,
}

/// A proportional-curtailment policy.
#[derive(Debug, Clone)]
pub struct Proportional {
    weighting: Weighting,
    floors: FloorModel,
    objective: Objective,
}

impl Proportional {
    /// A policy with the given weighting; `family` is used only for conservative tier floors.
    #[must_use]
    pub fn new(weighting: Weighting, family: Arc<CurveFamily>) -> Self {
        Self {
            weighting,
            floors: FloorModel::new(family),
            objective: Objective::Tokens,
        }
    }

    /// The same rule for another objective: under [`Objective::Progress`] the paper's energy per
    /// token `P_max/T_max` becomes watts per unit of the job's progress weight
    /// (`P_max / (gpus × priority)`), so the rule still cuts where a watt costs the objective
    /// least. `Equal` does not depend on the objective.
    #[must_use]
    pub fn with_objective(mut self, objective: Objective) -> Self {
        self.objective = objective;
        self
    }

    /// The rule's weighting.
    #[must_use]
    pub fn weighting(&self) -> Weighting {
        self.weighting
    }

    /// What the rule's curtailment weights are in.
    #[must_use]
    pub fn objective(&self) -> Objective {
        self.objective
    }
}

/// Best known PFI point value for a job (used by the paper's rule and for expected throughput).
#[must_use]
pub fn known_pfi(job: &JobSpec) -> Option<f64> {
    match &job.elasticity {
        Elasticity::Measured { curve, .. } => pfi(curve, DEFAULT_EPSILON).ok().map(|p| p.value),
        Elasticity::Pfi { value, .. } => Some(*value),
        Elasticity::PredictedPfi { mean, .. } => Some(*mean),
        Elasticity::Unknown => None,
    }
}

impl AllocationPolicy for Proportional {
    fn name(&self) -> &'static str {
        match self.weighting {
            Weighting::Equal => "equal",
            Weighting::PfiPaper => "pfi_paper",
            Weighting::Efficiency => "efficiency",
        }
    }

    fn plan(&self, jobs: &[JobSpec], budget: Budget) -> Result<CapPlan, PlanError> {
        for job in jobs {
            job.validate()?;
        }
        let uncapped: Watts = jobs.iter().map(|j| j.uncapped_power).sum();
        let budget_w = budget.resolve(uncapped);
        let floors: Vec<(Watts, FloorKind)> = jobs.iter().map(|j| self.floors.floor(j)).collect();
        let weights: Vec<f64> = jobs.iter().map(|j| self.weight(j)).collect();
        let headroom: Vec<f64> = jobs
            .iter()
            .zip(&floors)
            .map(|(j, f)| (j.uncapped_power - f.0).value().max(0.0))
            .collect();
        let need = (uncapped - budget_w).value().max(0.0);
        let (cuts, unmet) = proportional_cuts(&weights, &headroom, need);

        let mut entries = Vec::with_capacity(jobs.len());
        let mut planned = Watts::ZERO;
        for (((job, &(floor, floor_kind)), &cut), &room) in jobs.iter().zip(&floors).zip(&cuts).zip(&headroom) {
            let power = job.uncapped_power - Watts(cut);
            planned += power;
            let reason = if cut <= 0.0 {
                Reason::Uncapped
            } else if cut >= room - 1e-9 {
                match floor_kind {
                    FloorKind::CapMin => Reason::AtCapFloor,
                    FloorKind::Tier => Reason::AtTierFloor,
                }
            } else {
                Reason::Curtailed
            };
            let cap = if cut <= 0.0 {
                job.cap_range.max
            } else {
                power.per_gpu(job.gpus).clamp_to(job.cap_range.min, job.cap_range.max)
            };
            // Expected throughput by the rule's own model: a straight line with the known PFI.
            let pfi = known_pfi(job).unwrap_or(1.0);
            let loss = (cut / job.uncapped_power.value()) / pfi;
            entries.push(PlanEntry {
                job: job.id.clone(),
                cap,
                expected_power: power,
                expected_tokens: TokensPerSec(job.uncapped_tokens.value() * (1.0 - loss).max(0.0)),
                floor,
                floor_kind,
                reason,
            });
        }
        Ok(CapPlan {
            policy: self.name(),
            budget: budget_w,
            uncapped_power: uncapped,
            planned_power: planned,
            shortfall: Watts(unmet),
            entries,
            fallbacks: Vec::new(),
        })
    }
}

impl Proportional {
    fn weight(&self, job: &JobSpec) -> f64 {
        let intensity = job.uncapped_power.value() / self.objective.uncapped_value(job);
        match self.weighting {
            Weighting::Equal => job.uncapped_power.value(),
            Weighting::Efficiency => intensity,
            Weighting::PfiPaper => intensity * known_pfi(job).unwrap_or(1.0),
        }
    }
}

/// Solve `Σ min(λ·w_i, h_i) = need` for λ and return the cuts and the unmet remainder.
///
/// Jobs are visited in order of `h_i/w_i` (the λ at which each hits its floor); each clipped job
/// removes its headroom from the remaining need and its weight from the pool, which is the
/// "redistribute the overflow in proportion to the weights" rule in closed form.
///
/// Weights outside `(0, ∞)` come from degenerate measurements (a job reporting no throughput
/// gives an infinite energy per token; a sweep whose throughput *rises* as the cap falls gives a
/// negative PFI). They never excuse a shortfall: an infinite weight is cut to its floor first
/// (λ·∞ clips at once), and a zero, negative or NaN weight is cut only after every job with a
/// usable weight sits at its floor, in input order, just enough to meet the cut.
pub(crate) fn proportional_cuts(weights: &[f64], headroom: &[f64], need: f64) -> (Vec<f64>, f64) {
    ProportionalSplit::new(weights.to_vec(), headroom.to_vec()).cuts(need)
}

/// [`proportional_cuts`] for one set of weights and headrooms and any number of needs: the
/// order in which jobs clip (the sort) and the weight pools do not depend on the need, so a
/// caller that splits many needs over the same jobs (every plan of a preparation, every level
/// of a flexibility curve) sorts once.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProportionalSplit {
    weights: Vec<f64>,
    headroom: Vec<f64>,
    total_room: f64,
    /// Jobs with room and an infinite weight, in input order (cut first).
    infinite: Vec<usize>,
    /// Jobs with room and a usable weight, by `h_i/w_i`.
    order: Vec<usize>,
    /// `pool_from[pos]`: weight of `order[pos..]`, as suffix sums (subtracting clipped weights
    /// from a running total loses every digit of the small weights when weights span many
    /// decades: a stalled job reporting almost no throughput has a huge P/T weight).
    pool_from: Vec<f64>,
    /// Jobs with room and a zero, negative or NaN weight, in input order (cut last).
    unusable: Vec<usize>,
}

impl ProportionalSplit {
    pub(crate) fn new(weights: Vec<f64>, headroom: Vec<f64>) -> Self {
        let n = weights.len();
        let has_room = |i: usize| headroom[i] > 0.0;
        let usable = |i: usize| has_room(i) && weights[i].is_finite() && weights[i] > 0.0;
        let infinite = (0..n).filter(|&i| has_room(i) && weights[i] == f64::INFINITY).collect();
        let mut order: Vec<usize> = (0..n).filter(|&i| usable(i)).collect();
        order.sort_by(|&a, &b| (headroom[a] / weights[a]).total_cmp(&(headroom[b] / weights[b])));
        let mut pool_from = vec![0.0; order.len() + 1];
        for pos in (0..order.len()).rev() {
            pool_from[pos] = pool_from[pos + 1] + weights[order[pos]];
        }
        let unusable = (0..n)
            .filter(|&i| has_room(i) && !usable(i) && weights[i] != f64::INFINITY)
            .collect();
        Self {
            total_room: headroom.iter().sum(),
            weights,
            headroom,
            infinite,
            order,
            pool_from,
            unusable,
        }
    }

    /// The cuts for `need`, and what no job had room for.
    pub(crate) fn cuts(&self, need: f64) -> (Vec<f64>, f64) {
        let (weights, headroom) = (&self.weights, &self.headroom);
        let mut cuts = vec![0.0; weights.len()];
        if need <= 0.0 {
            return (cuts, 0.0);
        }
        if self.total_room <= need {
            cuts.copy_from_slice(headroom);
            return (cuts, need - self.total_room);
        }
        let mut clipped_room = 0.0;
        for &i in &self.infinite {
            let take = headroom[i].min(need - clipped_room);
            cuts[i] = take;
            clipped_room += take;
            if clipped_room >= need {
                return (cuts, 0.0);
            }
        }
        for (pos, &i) in self.order.iter().enumerate() {
            let remaining = need - clipped_room;
            let pool = self.pool_from[pos];
            if headroom[i] / weights[i] * pool >= remaining {
                let lambda = remaining / pool;
                for &j in &self.order[pos..] {
                    cuts[j] = (lambda * weights[j]).min(headroom[j]);
                }
                return (cuts, 0.0);
            }
            cuts[i] = headroom[i];
            clipped_room += headroom[i];
        }
        // Every usable job is at its floor: the cut continues on the jobs without a usable weight.
        for &i in &self.unusable {
            let take = headroom[i].min(need - clipped_room);
            cuts[i] = take;
            clipped_room += take;
            if clipped_room >= need {
                return (cuts, 0.0);
            }
        }
        // Only reachable through rounding: every job clipped.
        (cuts, (need - clipped_room).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_weights_cut_the_same_fraction_until_a_floor_clips() {
        // Two jobs of 1000 W each, floors at 200 W and 900 W (headroom 800 and 100).
        let (cuts, unmet) = proportional_cuts(&[1000.0, 1000.0], &[800.0, 100.0], 600.0);
        // Second job clips at 100; the remaining 500 goes to the first.
        assert_eq!(cuts, vec![500.0, 100.0]);
        assert_eq!(unmet, 0.0);
        let (cuts, _) = proportional_cuts(&[1000.0, 1000.0], &[800.0, 800.0], 600.0);
        assert_eq!(cuts, vec![300.0, 300.0]);
    }

    #[test]
    fn infeasible_cut_reports_the_shortfall() {
        let (cuts, unmet) = proportional_cuts(&[1.0, 2.0], &[100.0, 50.0], 400.0);
        assert_eq!(cuts, vec![100.0, 50.0]);
        assert_eq!(unmet, 250.0);
    }

    #[test]
    fn weights_many_decades_apart_still_meet_the_cut() {
        // A stalled job (tiny throughput → weight 2e16) next to a normal one (weight 3).
        let (cuts, unmet) = proportional_cuts(&[2e16, 3.0], &[900.0, 900.0], 1000.0);
        assert_eq!(unmet, 0.0);
        assert_eq!(cuts, vec![900.0, 100.0]);
    }

    #[test]
    fn jobs_without_a_usable_weight_are_cut_before_a_shortfall_is_reported() {
        // A negative weight (throughput rising as the cap falls) and a NaN one: the usable job
        // clips at 100, the rest comes from the others in input order.
        let (cuts, unmet) = proportional_cuts(&[-2.0, 1.0, f64::NAN], &[300.0, 100.0, 300.0], 500.0);
        assert_eq!(unmet, 0.0);
        assert_eq!(cuts, vec![300.0, 100.0, 100.0]);
        // An infinite weight is cut to its floor first.
        let (cuts, unmet) = proportional_cuts(&[f64::INFINITY, 1.0], &[50.0, 500.0], 150.0);
        assert_eq!(unmet, 0.0);
        assert_eq!(cuts, vec![50.0, 100.0]);
    }

    #[test]
    fn weights_split_in_proportion() {
        let (cuts, unmet) = proportional_cuts(&[1.0, 3.0], &[1000.0, 1000.0], 400.0);
        assert_eq!(cuts, vec![100.0, 300.0]);
        assert_eq!(unmet, 0.0);
    }
}
