//! Allocation policies: split a GPU-board power budget across running jobs.
//!
//! Every policy sees the same input ([`JobSpec`]s: what is *known* about each job, plus a
//! [`Budget`]) and returns the same output ([`CapPlan`]: a per-GPU cap per job, the expected draw
//! and throughput, a reason, and any shortfall). Policies differ only in how they split the cut:
//!
//! | policy | rule |
//! |---|---|
//! | [`Weighting::Equal`] | the paper's baseline: every job loses the same fraction of P_max |
//! | [`Weighting::PfiPaper`] | the paper's rule: curtailment ∝ (P_max/T_max)·PFI |
//! | [`Weighting::Efficiency`] | the ablation: curtailment ∝ P_max/T_max |
//! | [`CurveAware::oracle`] | exact optimum on every job's true curve (concave hull) |
//! | [`CurveAware::flexgate`] | ours: the oracle's optimiser on curves *estimated* from what is known |
//!
//! Shared rules (module [`bounds`]): a job is never planned below its **floor**, the larger of
//! the power at its minimum cap and the power its QoS tier (maximum slowdown) allows, computed
//! conservatively from what is known. A budget that cannot be met with every job at its floor is
//! not forced: the plan puts every job at its floor and reports the **shortfall**.

pub mod bounds;
pub mod curve_aware;
pub mod proportional;
pub mod select;
mod types;

pub use curve_aware::{CurveAware, Prepared, ShedProfile};
pub use proportional::{Proportional, Weighting};
pub use types::*;

/// A way of turning a budget and a set of jobs into per-job caps.
///
/// Implementations are pure and deterministic: the same jobs and budget give the same plan, which
/// is what lets an auditor replay a decision from the ledger.
pub trait AllocationPolicy: Send + Sync {
    /// Stable short name, used in logs, CLI flags and reports.
    fn name(&self) -> &'static str;

    /// Plan caps for `jobs` under `budget`.
    fn plan(&self, jobs: &[JobSpec], budget: Budget) -> Result<CapPlan, PlanError>;
}
