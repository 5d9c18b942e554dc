//! The cluster side of the gateway: one trait that every cluster backend satisfies.
//!
//! The dispatcher must not care whether caps reach real GPUs through node agents (HTTP + NVML,
//! with Slurm mapping jobs to nodes) or an in-process simulation: it plans against
//! [`ClusterBackend::inventory`], sends [`CapCommand`]s through [`ClusterBackend::apply`], and
//! closes the loop on [`ClusterBackend::telemetry`]. Keeping that surface small and declarative
//! (a cap per job, stamped with a generation) is what makes retries safe: a command re-sent
//! after a timeout cannot undo a newer one (BACKENDS.md §6), and a failure on one node is
//! reported per job instead of failing the whole dispatch (§7).
//!
//! Every type that crosses this boundary is `Serialize`, because the gateway writes what it
//! asked for and what the cluster answered into the ledger.

pub mod agents;
pub mod sim;

use chrono::{DateTime, Utc};
use flexgate_policies::alloc::JobSpec;
use flexgate_policies::units::{Kilowatts, TokensPerSec, Watts, WattsPerGpu};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

pub use sim::{SimCluster, SimConfig, SimError, SimFaults};

/// A cluster the gateway can read and cap: simulated, node agents, or anything else.
///
/// Implementations are shared between the dispatcher, the reconcile loop and the HTTP API,
/// hence `Send + Sync` and `&self` methods; they do their own locking.
#[async_trait::async_trait]
pub trait ClusterBackend: Send + Sync {
    /// Running jobs with what is known about them and what they draw now.
    ///
    /// The planner needs the jobs' uncapped points and elasticity (what is *known*, never the
    /// truth) and the caps currently applied, so that it plans against measured draw.
    async fn inventory(&self) -> Result<Vec<JobState>, BackendError>;

    /// Apply per-job caps; idempotent per (job, generation): re-sending a generation already
    /// applied changes nothing and reports the same result. A generation lower than the latest
    /// applied for that job is refused as stale.
    ///
    /// Returns one result per command, in the order of the commands, so that a partial failure
    /// tells the gateway exactly which jobs to re-plan around. Never fails as a whole: a
    /// backend that cannot be reached answers [`CapOutcome::Failed`] for every command.
    async fn apply(&self, commands: &[CapCommand]) -> Vec<CapResult>;

    /// Current measurements: per-job draw and throughput, GPU-board total and the meter.
    ///
    /// The closed loop trims caps on these, and reports to the utility quote them.
    async fn telemetry(&self) -> Result<Telemetry, BackendError>;

    /// A short name for logs ("sim", "agents"), so every ledger record says which backend
    /// produced it.
    fn name(&self) -> &str;

    /// Suspend a running job (its GPUs drop to idle draw) because caps alone cannot meet the
    /// target. Only for jobs the inventory marks [`JobState::suspendable`]: the job's flex tier
    /// says it may be paused. Backends that cannot suspend say so.
    async fn suspend(&self, job: &str) -> Result<(), BackendError> {
        Err(BackendError::Protocol(format!(
            "the {} backend cannot suspend jobs (job {job})",
            self.name()
        )))
    }

    /// Resume a job suspended by [`ClusterBackend::suspend`] (at the end of the curtailment).
    async fn resume(&self, job: &str) -> Result<(), BackendError> {
        Err(BackendError::Protocol(format!(
            "the {} backend cannot resume jobs (job {job})",
            self.name()
        )))
    }
}

/// One running job as the cluster reports it: the planner's input plus the cap state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobState {
    /// What the planner needs: id, GPU count, cap range, uncapped power (P_max) and throughput
    /// (T_max), and the elasticity that is *known* (not the truth), and the QoS limit.
    pub spec: JobSpec,
    /// Nodes the job runs on, so that node faults can be mapped to the jobs they affect.
    pub nodes: Vec<String>,
    /// Per-GPU cap now applied to each of the job's GPUs (the range maximum means uncapped).
    pub applied_cap: WattsPerGpu,
    /// Generation of the latest applied cap command (0 before any), so that the gateway
    /// numbers its next command above it after a restart.
    pub generation: u64,
    /// The job's aggregate GPU-board power now, as measured.
    pub measured_power: Watts,
    /// The job's throughput now, as measured.
    pub measured_tokens: TokensPerSec,
    /// Whether the job's flex tier allows suspending it when caps alone cannot meet a target.
    pub suspendable: bool,
}

/// One per-job cap to apply to each of the job's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapCommand {
    /// The job to cap.
    pub job: Arc<str>,
    /// Per-GPU cap; the backend clamps it into the GPUs' range and says so.
    pub cap: WattsPerGpu,
    /// Monotone per job: a higher generation wins, an equal one is a harmless repeat, a lower
    /// one is stale. This is what makes retries and reordered deliveries safe.
    pub generation: u64,
    /// When the cap must end at the latest (the event's end, recovery included); a backend
    /// with leases never holds a cap past it, even if the gateway is gone. `None`: open-ended
    /// (an event without an end), renewed for as long as the gateway wants it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
}

/// What became of one [`CapCommand`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapResult {
    /// The job the command was for.
    pub job: Arc<str>,
    /// The command's generation, so that a result can be matched to its command.
    pub generation: u64,
    /// What happened.
    pub outcome: CapOutcome,
}

/// The outcome of a cap command, per job: the gateway re-plans around anything but `Applied`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum CapOutcome {
    /// The cap is in force.
    Applied {
        /// The per-GPU cap actually set, after clamping into the GPUs' range. The gateway
        /// must account with this value, not with what it asked for.
        applied: WattsPerGpu,
        /// True when the requested cap was outside the range and had to be clamped, so that
        /// the gateway redistributes the shortfall.
        clamped: bool,
    },
    /// A newer generation is already applied; nothing changed.
    Stale {
        /// The latest generation applied for this job.
        latest: u64,
    },
    /// The backend knows no such job (it ended, or the inventory is out of date).
    UnknownJob,
    /// The cap could not be applied (node unreachable, GPU error); the previous cap stays in
    /// force, and the gateway must not assume the new one.
    Failed {
        /// What went wrong, for the log and the operator.
        reason: String,
    },
}

impl CapOutcome {
    /// The cap now in force because of this command, if it was applied.
    #[must_use]
    pub fn applied(&self) -> Option<WattsPerGpu> {
        match self {
            CapOutcome::Applied { applied, .. } => Some(*applied),
            _ => None,
        }
    }
}

/// One sample of what the cluster draws and delivers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Telemetry {
    /// When the sample was taken.
    pub at: DateTime<Utc>,
    /// Per-job measurements; jobs the backend could not measure (unreachable nodes) are
    /// absent, so the gateway can count them conservatively (BACKENDS.md §7).
    pub jobs: Vec<JobTelemetry>,
    /// Total GPU-board power of the measured jobs (the sum over `jobs`).
    pub gpu_board_power: Watts,
    /// Facility power at the utility meter, which sees everything, measured or not.
    pub meter_kw: Kilowatts,
    /// Nodes behind the meter (all of them, busy or idle), for the facility model's host term.
    pub nodes: u32,
}

/// One job's measured draw and throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobTelemetry {
    /// The job.
    pub job: Arc<str>,
    /// Aggregate GPU-board power of the job.
    pub power: Watts,
    /// Training throughput of the job.
    pub tokens: TokensPerSec,
}

/// Why a backend could not answer at all (per-job failures are [`CapOutcome::Failed`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum BackendError {
    /// The backend (scheduler, agents) could not be reached.
    #[error(
        "cluster backend unreachable: {0}; check the network and that the agents run; the gateway keeps the last known state"
    )]
    Unreachable(String),
    /// No measurement for this period (a telemetry gap); a later sample may succeed.
    #[error("no telemetry sample: {0}; the gateway holds the last sample and retries")]
    TelemetryGap(String),
    /// The backend answered with something the gateway cannot use.
    #[error("cluster backend answered unexpectedly: {0}; check that gateway and agent versions match")]
    Protocol(String),
}
