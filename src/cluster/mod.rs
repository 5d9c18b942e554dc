//! The cluster side of the gateway: one trait that every cluster backend satisfies.
//!
//! The dispatcher must not care whether caps reach real GPUs through node agents (HTTP + NVML,
//! with Slurm mapping jobs to nodes) or an in-process simulation: it plans against
//! [`ClusterBackend::inventory`], sends [`CapCommand`]s through [`ClusterBackend::apply`], and
//! closes the loop on [`ClusterBackend::telemetry`]. Keeping that surface small and declarative
//! (a cap per job, stamped with a generation) is what makes retries safe: a command re-sent
//! after a timeout cannot undo a newer one, and a failure on one node is reported per job
//! instead of failing the whole dispatch.
//!
//! Every type that crosses this boundary is `Serialize`, because the gateway writes what it
//! asked for and what the cluster answered into the ledger.

pub mod agents;
pub mod sim;

use serde::Serialize;

pub use flexgate_policies::control::cluster::{
    CapCommand, CapOutcome, CapResult, JobState, JobTelemetry, QueuedJob, Telemetry,
};

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

    /// Drive the cluster under `epoch` (a replica that leads; its commands carry the epoch, so
    /// that the agents refuse a deposed leader's), or stop driving it (`None`: a standby renews
    /// and sends nothing). A single gateway never calls it. Backends without fencing ignore it.
    fn set_term(&self, epoch: Option<u64>) {
        let _ = epoch;
    }

    /// Raise every node's fence to the epoch set by [`ClusterBackend::set_term`], so that a
    /// deposed leader is refused everywhere at once, not only where this leader has sent a cap.
    /// Called by a replica when it takes charge. Returns the nodes that could not be reached (they
    /// are fenced by this leader's first command to them). Backends without fencing: nothing.
    async fn fence(&self) -> Vec<String> {
        Vec::new()
    }

    /// Per node agent: its node name and whether it answered the last poll (the metric
    /// `flexgate_agent_up` and its alert). Backends without agents have none.
    fn agents_answering(&self) -> Vec<(String, bool)> {
        Vec::new()
    }

    /// The jobs the scheduler holds in its queue, with their expected starts and time limits,
    /// for the forecast. `None`: this backend has no scheduler queue (the forecast then says
    /// so and widens). Called off the control path, under a deadline: it may be slow.
    async fn queue(&self) -> Option<Result<Vec<QueuedJob>, BackendError>> {
        None
    }

    /// Resume a job suspended by [`ClusterBackend::suspend`] (at the end of the curtailment).
    async fn resume(&self, job: &str) -> Result<(), BackendError> {
        Err(BackendError::Protocol(format!(
            "the {} backend cannot resume jobs (job {job})",
            self.name()
        )))
    }
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
