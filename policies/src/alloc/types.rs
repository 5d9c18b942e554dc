//! Inputs and outputs shared by every allocation policy.

use crate::curve::PowerCurve;
use crate::ids::JobId;
use crate::pfi::CapGrid;
use crate::units::{Fraction, TokensPerSec, Watts, WattsPerGpu};
use serde::Serialize;

/// The per-GPU cap range a GPU accepts (NVML's min/max power-management limits).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CapRange {
    /// Lowest cap the GPU accepts (200 W on H200 SXM). Never hard-code: read it from NVML.
    pub min: WattsPerGpu,
    /// Highest cap (700 W on H200 SXM); setting it means "uncapped".
    pub max: WattsPerGpu,
}

impl CapRange {
    /// The H200 SXM range, for simulation and examples.
    pub const H200: CapRange = CapRange {
        min: WattsPerGpu(200.0),
        max: WattsPerGpu(700.0),
    };
}

/// What is known about how a job trades power for throughput, best first.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Elasticity {
    /// A measured sweep (for the oracle: the true curve).
    Measured {
        /// The measured curve.
        curve: PowerCurve,
        /// The standard error of each point's throughput (tokens/s, in the curve's point order),
        /// from its readings' spread and count: what the measurement cannot rule out. Empty when
        /// the curve is exact (a true curve, or a sweep that states no uncertainty), which the
        /// planner then takes as it is; otherwise it plans on the points denoised
        /// ([`crate::estimate::measured`]) and its hedge guards their error.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tokens_sd: Vec<f64>,
    },
    /// A measured PFI with the grid it was measured on.
    Pfi {
        /// The PFI value.
        value: f64,
        /// The caps of the sweep that produced it.
        grid: CapGrid,
    },
    /// A PFI predicted from telemetry, with the predictor's standard error for a new job.
    PredictedPfi {
        /// Predicted PFI.
        mean: f64,
        /// Standard deviation of the prediction (the paper's LOO RMSE is 0.241).
        sd: f64,
        /// Grid the predictor was trained on, if known; otherwise the paper's grid for the job
        /// size is assumed (fine for ≤ 8 GPUs, coarse above).
        grid: Option<CapGrid>,
    },
    /// Nothing beyond the uncapped point: treated as inflexible unless the budget needs it.
    Unknown,
}

impl Elasticity {
    /// A measured curve taken as exact (a true curve, or a sweep without stated uncertainty).
    #[must_use]
    pub fn exact(curve: PowerCurve) -> Self {
        Self::Measured {
            curve,
            tokens_sd: Vec::new(),
        }
    }

    /// A measured curve whose points' throughput carries standard errors `tokens_sd` (tokens/s,
    /// one per point); they must be as many as the points, finite and non-negative, or the
    /// job is refused when planned ([`JobSpec::validate`]).
    #[must_use]
    pub fn measured(curve: PowerCurve, tokens_sd: Vec<f64>) -> Self {
        Self::Measured { curve, tokens_sd }
    }
}

/// One running job as a policy sees it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobSpec {
    /// Job identifier (shared, cheap to clone into plans).
    pub id: crate::ids::JobId,
    /// GPUs the job runs on; its cap applies to each of them.
    pub gpus: u32,
    /// Cap range of the job's GPUs.
    pub cap_range: CapRange,
    /// P_max: the job's measured aggregate draw now, uncapped. Always known in production.
    pub uncapped_power: Watts,
    /// T_max: the job's throughput now, uncapped. Always known in production.
    pub uncapped_tokens: TokensPerSec,
    /// What is known about its elasticity.
    pub elasticity: Elasticity,
    /// QoS tier: the largest throughput loss the job's owner accepts (0, 10, 25, 50 % in the
    /// field demonstrations). `None` means no limit beyond the cap range.
    pub max_slowdown: Option<Fraction>,
    /// The site's weight for this job's progress under [`Objective::Progress`] (1 unless the
    /// scheduler says otherwise, e.g. a Slurm `priority=` flex tag). Ignored by
    /// [`Objective::Tokens`].
    pub priority: f64,
}

/// What a plan maximises.
///
/// Summing tokens/s across different models favours the models that make the most tokens per
/// watt (small ones): a 70B job that keeps a quarter of its throughput costs the sum little.
/// Sites usually care about each job's *progress*: the fraction of its own uncapped throughput it
/// keeps, weighted by the GPUs it holds (what the site is paid for) and a priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// Σ tokens/s: the paper's objective (the default of `flexgate simulate`, so the paper's
    /// table reproduces, and for now of the gateway).
    Tokens,
    /// Σ gpus × priority × (tokens/s ÷ uncapped tokens/s): GPU-weighted progress (the
    /// gateway's `objective = "progress"`).
    #[default]
    Progress,
}

impl Objective {
    /// The stable name used in configuration, reports and the ledger.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::Progress => "progress",
        }
    }

    /// What one token/s of `job` is worth under this objective.
    #[must_use]
    pub fn value_per_token(self, job: &JobSpec) -> f64 {
        match self {
            Self::Tokens => 1.0,
            Self::Progress => f64::from(job.gpus) * job.priority / job.uncapped_tokens.value(),
        }
    }

    /// What `job` is worth uncapped under this objective (T_max, or gpus × priority).
    #[must_use]
    pub fn uncapped_value(self, job: &JobSpec) -> f64 {
        match self {
            Self::Tokens => job.uncapped_tokens.value(),
            Self::Progress => f64::from(job.gpus) * job.priority,
        }
    }
}

/// The largest priority weight a job may carry: a scheduler tag of 10⁶ is a typo, not a policy.
pub const MAX_PRIORITY: f64 = 1000.0;

/// A job the planner refuses to plan, with the field at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("job {job}: {field} {problem}")]
pub struct PlanError {
    /// The job's id.
    pub job: String,
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl JobSpec {
    /// Check the numbers a policy relies on; the error names the job and field.
    pub fn validate(&self) -> Result<(), PlanError> {
        let err = |field: &'static str, problem: String| PlanError {
            job: self.id.to_string(),
            field,
            problem,
        };
        if self.gpus == 0 {
            return Err(err("gpus", "must be at least 1".into()));
        }
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !positive(self.uncapped_power.value()) {
            return Err(err(
                "uncapped_power",
                format!("must be a positive number, got {}", self.uncapped_power.value()),
            ));
        }
        if !positive(self.uncapped_tokens.value()) {
            return Err(err(
                "uncapped_tokens",
                format!("must be a positive number, got {}", self.uncapped_tokens.value()),
            ));
        }
        let (lo, hi) = (self.cap_range.min.value(), self.cap_range.max.value());
        if !positive(lo) || !positive(hi) || lo > hi {
            return Err(err(
                "cap_range",
                format!("must satisfy 0 < min ≤ max, got [{lo}, {hi}]"),
            ));
        }
        if !(self.priority.is_finite() && self.priority > 0.0 && self.priority <= MAX_PRIORITY) {
            return Err(err(
                "priority",
                format!("must be a number in (0, {MAX_PRIORITY}], got {}", self.priority),
            ));
        }
        match &self.elasticity {
            Elasticity::Pfi { value, .. } if !positive(*value) => {
                Err(err("pfi", format!("must be a positive number, got {value}")))
            }
            Elasticity::Measured { curve, tokens_sd }
                if !tokens_sd.is_empty()
                    && (tokens_sd.len() != curve.points().len()
                        || tokens_sd.iter().any(|s| !s.is_finite() || *s < 0.0)) =>
            {
                Err(err(
                    "tokens_sd",
                    format!(
                        "needs one finite non-negative standard error per point ({} points), got {:?}",
                        curve.points().len(),
                        tokens_sd
                    ),
                ))
            }
            Elasticity::PredictedPfi { mean, sd, .. } if !positive(*mean) || !sd.is_finite() || *sd < 0.0 => Err(err(
                "pfi_predicted",
                format!("needs a positive mean and a non-negative sd, got {mean} ± {sd}"),
            )),
            _ => Ok(()),
        }
    }
}

/// How much GPU-board power the jobs may draw in total.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Budget {
    /// An absolute aggregate budget (from the facility model).
    Absolute(Watts),
    /// A cut as a fraction of the jobs' total uncapped draw (the paper's experiment).
    Cut(Fraction),
}

impl Budget {
    /// The absolute budget for these jobs.
    #[must_use]
    pub fn resolve(self, total_uncapped: Watts) -> Watts {
        match self {
            Budget::Absolute(w) => w,
            Budget::Cut(f) => total_uncapped * f.complement().value(),
        }
    }
}

/// Why a job got the cap it got (recorded in the ledger next to the cap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Not curtailed: the cap is the GPU maximum.
    Uncapped,
    /// Curtailed to a level chosen by the policy's rule.
    Curtailed,
    /// Held at the GPUs' minimum cap: cannot go lower.
    AtCapFloor,
    /// Held at the lowest power its QoS tier allows.
    AtTierFloor,
    /// Elasticity unknown: left uncapped because the budget was met without it.
    InflexibleUnknown,
    /// Elasticity unknown, but the budget needed its watts: uniform conservative cap.
    FallbackUniform,
}

impl Reason {
    /// The name it is serialized under (snake case), without going through serde: ledgers write
    /// one per job per plan.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Uncapped => "uncapped",
            Self::Curtailed => "curtailed",
            Self::AtCapFloor => "at_cap_floor",
            Self::AtTierFloor => "at_tier_floor",
            Self::InflexibleUnknown => "inflexible_unknown",
            Self::FallbackUniform => "fallback_uniform",
        }
    }
}

/// Which limit sets a job's floor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FloorKind {
    /// The GPUs' minimum cap.
    CapMin,
    /// The job's QoS tier (maximum slowdown).
    Tier,
}

impl FloorKind {
    /// The name it is serialized under (snake case), without going through serde.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CapMin => "cap_min",
            Self::Tier => "tier",
        }
    }
}

/// One job's line in a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanEntry {
    /// Job id.
    pub job: JobId,
    /// Per-GPU cap to apply to each of the job's GPUs.
    pub cap: WattsPerGpu,
    /// Expected aggregate draw under that cap (at most `gpus × cap`).
    pub expected_power: Watts,
    /// Expected throughput under that cap, by the policy's own knowledge.
    pub expected_tokens: TokensPerSec,
    /// Lowest power the policy would ever plan for this job, and what set it.
    pub floor: Watts,
    /// What set the floor.
    pub floor_kind: FloorKind,
    /// Why this cap.
    pub reason: Reason,
}

/// A plan: caps for every job, and honesty about what it could not do.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapPlan {
    /// Policy that made it.
    pub policy: &'static str,
    /// The aggregate budget asked for.
    pub budget: Watts,
    /// Total uncapped draw of the jobs (Σ P_max).
    pub uncapped_power: Watts,
    /// Total expected draw under the plan.
    pub planned_power: Watts,
    /// How far the plan stays above the budget because every floor was reached (0 if met).
    pub shortfall: Watts,
    /// Per-job caps, in the order of the input jobs.
    pub entries: Vec<PlanEntry>,
    /// Jobs whose elasticity was unknown and that had to be capped anyway.
    pub fallbacks: Vec<JobId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn as_str_names_match_serde() {
        for r in [
            Reason::Uncapped,
            Reason::Curtailed,
            Reason::AtCapFloor,
            Reason::AtTierFloor,
            Reason::InflexibleUnknown,
            Reason::FallbackUniform,
        ] {
            assert_eq!(serde_json::to_value(r).ok(), Some(serde_json::json!(r.as_str())));
        }
        for f in [FloorKind::CapMin, FloorKind::Tier] {
            assert_eq!(serde_json::to_value(f).ok(), Some(serde_json::json!(f.as_str())));
        }
    }
}
