//! What crosses the boundary between the gateway and a cluster: the jobs as the cluster reports
//! them, the cap commands the controller decides, what became of them, and telemetry.
//!
//! These are plain data so that the controller can decide on them without I/O, and every one
//! is `Serialize`, because the ledger records what was asked and what the cluster answered.
//! The async trait that moves them lives with the gateway's cluster drivers.

use crate::alloc::JobSpec;
use crate::ids::JobId;
use crate::meter::Quality;
use crate::units::{Kilowatts, TokensPerSec, Watts, WattsPerGpu};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One running job as the cluster reports it: the planner's input plus the cap state.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobState {
    /// What the planner needs: id, GPU count, cap range, uncapped power (P_max) and throughput
    /// (T_max), and the elasticity that is *known* (not the truth), and the QoS limit.
    pub spec: JobSpec,
    /// Nodes the job runs on, so that node faults can be mapped to the jobs they affect.
    pub nodes: Vec<crate::ids::NodeId>,
    /// Per-GPU cap now applied to each of the job's GPUs (the range maximum means uncapped).
    pub applied_cap: WattsPerGpu,
    /// Generation of the latest applied cap command (0 before any), so that the gateway
    /// numbers its next command above it after a restart.
    pub generation: u64,
    /// The job's aggregate GPU-board power now, as measured.
    pub measured_power: Watts,
    /// The job's throughput now, as the job itself reported it (the mean of the top 10 % of its
    /// training samples in the agent's window); `None` when it reports nothing: the gateway
    /// then knows the job's draw but not what a cap costs it.
    pub measured_tokens: Option<TokensPerSec>,
    /// Whether the job's flex tier allows suspending it when caps alone cannot meet a target.
    pub suspendable: bool,
    /// The key of the job's profile: what the gateway measured of it is kept under this key, so
    /// that a re-run of the same training configuration starts from it (Slurm: job name, GPU
    /// count and the `profile=` flex tag). `None`: the job id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Arc<str>>,
    /// The job's flex tier as the scheduler tags it (Slurm: `tier=`), for the gateway's
    /// per-tier choices (probing). `None`: untagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<Arc<str>>,
    /// True when the cap on some GPU of the job keeps being undone (the node agent re-applied
    /// it 3 times within 15 minutes): it may be in force now, but the gateway does not count on
    /// it ([`Unconfirmed::Unreliable`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cap_unreliable: bool,
    /// How many times the node agents have re-applied a cap on the job's GPUs after its limit
    /// moved (a counter that only grows while the agents run; it restarts with an agent). The
    /// gateway records each increase (`caps_reapplied`).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cap_reapplied: u64,
    /// When the job started, as the scheduler says (`None`: not said). With its time limit it
    /// tells the forecast when the job will have ended at the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    /// The job's time limit, s (`None`: unlimited, or not said). Read through
    /// [`crate::forecast::screen`] before use: a scheduler may say nonsense.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<f64>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A job the scheduler holds in its queue: what the forecast needs of it (it holds no GPU yet,
/// so nothing is capped or measured).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedJob {
    /// The scheduler's id.
    pub id: JobId,
    /// GPUs it asked for.
    pub gpus: u32,
    /// Its profile key, formed as for a running job (Slurm: name, GPU count, `profile=` tag), so
    /// that a re-run of a configuration measured before is costed by what was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Arc<str>>,
    /// A PFI the scheduler was told (Slurm's `pfi=` flex tag), used where nothing was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pfi: Option<f64>,
    /// Its QoS tier's largest slowdown, if tagged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_slowdown: Option<f64>,
    /// Its priority (1 unless tagged).
    pub priority: f64,
    /// When the scheduler expects to start it (`None`: it does not say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_start: Option<DateTime<Utc>>,
    /// Its time limit, s (`None`: unlimited, or not said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_s: Option<f64>,
}

/// What the scheduler said of its queue, read off the control path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SchedulerView {
    /// When it was read.
    pub at: DateTime<Utc>,
    /// The queue, or why there is none: the backend has no scheduler queue, it did not answer
    /// within its deadline, or it failed.
    pub queue: Result<Vec<QueuedJob>, String>,
}

impl JobState {
    /// The key its measurements are kept under: its signature, or its id.
    #[must_use]
    pub fn profile_key(&self) -> &Arc<str> {
        self.signature.as_ref().unwrap_or(self.spec.id.shared())
    }
}

/// One per-job cap to apply to each of the job's GPUs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapCommand {
    /// The job to cap.
    pub job: JobId,
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
    pub job: JobId,
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
        /// Why, as a kind the gateway shows per job (`/v1/jobs`, the dashboard, the ledger's
        /// `caps_dispatched.unconfirmed`). Absent when the backend cannot tell.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        why: Option<Unconfirmed>,
    },
}

/// Why a cap is not confirmed in force: what `/v1/jobs` shows as `unconfirmed` and the ledger
/// records per job. Every kind means the same to the planner (the job counts at its measured
/// draw and the shortfall is re-planned on the other jobs); the kind tells the operator what to
/// fix.
///
/// A cap that is in force but lower than asked (clamped into the GPU's range, or held lower by
/// an out-of-band limiter such as a BMC) is confirmed, with `clamped`, not listed here: it only
/// draws less.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unconfirmed {
    /// The node (agent) did not answer, or answered with an error of its own.
    Unreachable,
    /// The node refused the command (a deposed gateway's epoch, a conflicting generation, an
    /// invalid request).
    Refused,
    /// The driver answered the set with success but the limit read back is not the cap.
    NotApplied,
    /// The limit was raised above the confirmed cap after it was set (a driver reload or GPU
    /// reset, another tool's set): found by the reconcile, re-sent.
    RaisedOutOfBand,
    /// The cap keeps being undone on a GPU of the job (re-applied 3 times within 15 minutes by
    /// the agent): the agent keeps re-applying it, but the GPU may draw uncapped between
    /// re-applications, so the gateway does not count on it.
    Unreliable,
    /// The agent may not set power limits (no root / `CAP_SYS_ADMIN`).
    NoPermission,
    /// A GPU of the job fell off the bus or needs a reset.
    GpuLost,
    /// A GPU of the job did not answer the driver within the agent's deadline (a hung call).
    Unresponsive,
    /// A GPU of the job cannot be power-capped, or is unknown to its node's agent.
    NotSupported,
    /// Any other driver error (the agent's log has it).
    DriverError,
    /// The job's node stopped reporting measurements, so the cap cannot be seen in force.
    NotMeasured,
}

impl Unconfirmed {
    /// The kind in the words the API and the ledger use (`not_applied`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Unconfirmed::Unreachable => "unreachable",
            Unconfirmed::Refused => "refused",
            Unconfirmed::NotApplied => "not_applied",
            Unconfirmed::RaisedOutOfBand => "raised_out_of_band",
            Unconfirmed::Unreliable => "unreliable",
            Unconfirmed::NoPermission => "no_permission",
            Unconfirmed::GpuLost => "gpu_lost",
            Unconfirmed::Unresponsive => "unresponsive",
            Unconfirmed::NotSupported => "not_supported",
            Unconfirmed::DriverError => "driver_error",
            Unconfirmed::NotMeasured => "not_measured",
        }
    }
}

impl CapOutcome {
    /// What happened, in words, for the ledger and the log.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            CapOutcome::Applied { applied, clamped } => {
                format!(
                    "applied {:.0} W/GPU{}",
                    applied.value(),
                    if *clamped { ", clamped" } else { "" }
                )
            }
            CapOutcome::Stale { latest } => format!("stale: generation {latest} is newer"),
            CapOutcome::UnknownJob => "the cluster knows no such job".into(),
            CapOutcome::Failed { reason, .. } => format!("failed: {reason}"),
        }
    }

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
    /// absent, so the gateway can count them conservatively (at their cap, or their
    /// uncapped limit when none is confirmed).
    pub jobs: Vec<JobTelemetry>,
    /// Total GPU-board power of the measured jobs (the sum over `jobs`).
    pub gpu_board_power: Watts,
    /// Facility power at the utility meter, which sees everything, measured or not.
    pub meter_kw: Kilowatts,
    /// Where `meter_kw` comes from: the meter's own reading (`measured`), or the facility
    /// model's estimate (`model`, and `stale`/`missing` when a meter source failed and the
    /// model's upper estimate stands in). The closed loop trims only on a measured figure.
    /// Absent in documents from before meter sources: taken as the model's (never as measured).
    #[serde(default = "model_quality")]
    pub meter_quality: Quality,
    /// Nodes behind the meter (all of them, busy or idle), for the facility model's host term.
    pub nodes: u32,
}

fn model_quality() -> Quality {
    Quality::Model
}

/// One job's measured draw and throughput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobTelemetry {
    /// The job.
    pub job: JobId,
    /// Aggregate GPU-board power of the job.
    pub power: Watts,
    /// Training throughput the job reported, `None` when it reports nothing (unknown, never 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<MeasuredThroughput>,
}

/// A job's reported throughput and the span of samples it aggregates.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeasuredThroughput {
    /// Mean of the top 10 % of the job's training-phase samples in the window.
    pub tokens: TokensPerSec,
    /// When the oldest sample counted arrived: a cap applied before it held for every sample.
    pub since: DateTime<Utc>,
    /// Training samples counted.
    pub samples: u32,
    /// True when every sample counted was taken once the job's cap now in force had settled,
    /// so that the figure is the job's throughput *at that cap* (a point of its curve). The
    /// backend decides it on its own clock, the one the samples were timed by.
    #[serde(default)]
    pub steady: bool,
}
