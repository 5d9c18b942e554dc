//! What the gateway learns about a Slurm job, independent of where it came from (slurmrestd of
//! any supported version, or `squeue --json`).
//!
//! The gateway caps GPUs, not jobs, so the central fact is the allocation: for each node of the
//! job, which GRES indices it holds ([`NodeGpus`]). Those indices are positions in the node's
//! gres.conf device list; [`crate::gres_conf`] turns them into device minor numbers, which is
//! what the node agent reports for each GPU.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

pub use crate::tags::FlexTags;

/// A Slurm job as the gateway needs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SlurmJob {
    /// Slurm job id (for array jobs, the id of this task's job record).
    pub id: u32,
    /// Job name (`-J`).
    pub name: String,
    /// Owner's user name; the numeric uid as text when Slurm did not resolve the name.
    pub user: String,
    /// Partition the job runs in.
    pub partition: String,
    /// Base state (RUNNING, SUSPENDED, ...).
    pub state: JobState,
    /// One entry per allocated node, in Slurm's node order. Empty for jobs without an
    /// allocation (pending).
    pub nodes: Vec<NodeGpus>,
    /// The user-set comment (`--comment`).
    pub comment: String,
    /// The operator-set admin comment (`scontrol update AdminComment=`).
    pub admin_comment: String,
    /// Flex tags read from `comment` and `admin_comment` ([`crate::tags`]).
    pub flex: FlexTags,
    /// When the job started running, if it has; for a pending job, when Slurm's backfill
    /// scheduler expects it to start (`squeue --start`), once it has estimated one.
    pub start_time: Option<DateTime<Utc>>,
    /// Wall-clock limit in minutes; `None` for no limit (`INFINITE`) or not reported.
    pub time_limit_minutes: Option<u64>,
    /// GPUs the job asked for, over all its nodes (`--gres=gpu:N` per node, `--gpus=N` per
    /// job, `--gpus-per-task`), from its TRES request; `None` when it asked for none or the
    /// request could not be read. What a pending job will hold once it starts.
    #[serde(default)]
    pub gpus_requested: Option<u32>,
    /// Problems found in this job's record: flex tags ignored, a `gres_detail` that did not
    /// parse, node and GRES lists of different lengths. The job is still reported; a node whose
    /// GPUs could not be read has `indices_known == false`.
    pub warnings: Vec<String>,
}

impl SlurmJob {
    /// Every (node, GRES index) pair the job holds.
    pub fn gpu_indices(&self) -> impl Iterator<Item = (&str, u32)> + '_ {
        self.nodes
            .iter()
            .flat_map(|n| n.indices.iter().map(move |&i| (n.node.as_str(), i)))
    }

    /// Number of GPUs the job holds with known indices, over all nodes.
    pub fn gpu_count(&self) -> usize {
        self.nodes.iter().map(|n| n.indices.len()).sum()
    }

    /// True when the job holds an allocation (RUNNING or SUSPENDED): its GPUs are reserved.
    pub fn holds_allocation(&self) -> bool {
        matches!(self.state, JobState::Running | JobState::Suspended)
    }
}

/// The GPUs a job holds on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeGpus {
    /// Node name as Slurm knows it (`NodeName`).
    pub node: String,
    /// GPU type from the allocation (`h100`), if any.
    pub gres_type: Option<String>,
    /// GRES indices (`IDX`) held on this node, sorted. These index the node's gres.conf device
    /// list, **not** NVML's numbering; see [`crate::gres_conf`].
    pub indices: Vec<u32>,
    /// False when Slurm says the job holds GPUs here but not which ones (`IDX:N/A`, or a
    /// `gres_detail` entry that did not parse, or none at all for this node while the job
    /// holds GPUs elsewhere). The gateway must then treat every GPU of the node as possibly
    /// the job's.
    pub indices_known: bool,
}

/// A job's base state. Later Slurm versions report a list (base state plus flags such as
/// `COMPLETING`); the base state is kept here.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum JobState {
    /// Waiting for resources.
    Pending,
    /// Running.
    Running,
    /// Suspended (`scontrol suspend`): processes stopped, GPUs still allocated.
    Suspended,
    /// Finishing: epilog running.
    Completing,
    /// Finished successfully.
    Completed,
    /// Cancelled.
    Cancelled,
    /// Finished with a non-zero exit code.
    Failed,
    /// Hit its time limit.
    Timeout,
    /// Preempted.
    Preempted,
    /// A node failed.
    NodeFail,
    /// Out of memory.
    OutOfMemory,
    /// Nodes failed to boot.
    BootFail,
    /// Missed its deadline.
    Deadline,
    /// Anything else, verbatim (including an empty or missing state).
    Other(String),
}

impl JobState {
    /// Parses Slurm's state name (`RUNNING`); unknown names become [`JobState::Other`].
    pub fn from_slurm(name: &str) -> JobState {
        match name.trim().to_ascii_uppercase().as_str() {
            "PENDING" => JobState::Pending,
            "RUNNING" => JobState::Running,
            "SUSPENDED" => JobState::Suspended,
            "COMPLETING" => JobState::Completing,
            "COMPLETED" => JobState::Completed,
            "CANCELLED" => JobState::Cancelled,
            "FAILED" => JobState::Failed,
            "TIMEOUT" => JobState::Timeout,
            "PREEMPTED" => JobState::Preempted,
            "NODE_FAIL" => JobState::NodeFail,
            "OUT_OF_MEMORY" => JobState::OutOfMemory,
            "BOOT_FAIL" => JobState::BootFail,
            "DEADLINE" => JobState::Deadline,
            _ => JobState::Other(name.trim().to_string()),
        }
    }

    /// The base state from a list of names (`["RUNNING","COMPLETING"]`): the first base state,
    /// else `Completing` if present, else the first name.
    pub fn from_slurm_list(names: &[String]) -> JobState {
        let parsed: Vec<JobState> = names.iter().map(|n| JobState::from_slurm(n)).collect();
        parsed
            .iter()
            .find(|s| !matches!(s, JobState::Other(_) | JobState::Completing))
            .or_else(|| parsed.iter().find(|s| **s == JobState::Completing))
            .or_else(|| parsed.first())
            .cloned()
            .unwrap_or_else(|| JobState::Other(String::new()))
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            JobState::Pending => "PENDING",
            JobState::Running => "RUNNING",
            JobState::Suspended => "SUSPENDED",
            JobState::Completing => "COMPLETING",
            JobState::Completed => "COMPLETED",
            JobState::Cancelled => "CANCELLED",
            JobState::Failed => "FAILED",
            JobState::Timeout => "TIMEOUT",
            JobState::Preempted => "PREEMPTED",
            JobState::NodeFail => "NODE_FAIL",
            JobState::OutOfMemory => "OUT_OF_MEMORY",
            JobState::BootFail => "BOOT_FAIL",
            JobState::Deadline => "DEADLINE",
            JobState::Other(s) => s,
        };
        f.write_str(s)
    }
}

/// A slurmrestd OpenAPI version `v0.0.N`, ordered by `N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ApiVersion(pub u32);

impl ApiVersion {
    /// The versions this crate reads, introduced by Slurm 22.05 (38), 23.02 (39), 23.11 (40)
    /// and 24.05 (41); each release keeps serving the two before it. Their job records differ in shape (state string or list,
    /// plain or `{set, infinite, number}` numbers, `allocated_nodes` or `nodes.allocation`);
    /// [`crate::wire`] reads all of them.
    pub const KNOWN: [ApiVersion; 4] = [ApiVersion(38), ApiVersion(39), ApiVersion(40), ApiVersion(41)];

    /// Parses `v0.0.38`, `0.0.38` or `38`.
    pub fn parse(s: &str) -> Option<ApiVersion> {
        let s = s.trim();
        let s = s.strip_prefix('v').unwrap_or(s);
        let n = s.strip_prefix("0.0.").unwrap_or(s);
        if n.is_empty() || n.len() > 4 || !n.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        n.parse().ok().map(ApiVersion)
    }

    /// True for versions in [`ApiVersion::KNOWN`].
    pub fn is_known(self) -> bool {
        Self::KNOWN.contains(&self)
    }
}

impl std::fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "v0.0.{}", self.0)
    }
}

/// Where a job list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Source {
    /// slurmrestd, with the OpenAPI version used.
    Rest(ApiVersion),
    /// `squeue --json`.
    Cli,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Rest(v) => write!(f, "slurmrestd {v}"),
            Source::Cli => f.write_str("squeue --json"),
        }
    }
}

/// A list of jobs read from Slurm, with where it came from and what went wrong on the way.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSnapshot {
    /// The jobs.
    pub jobs: Vec<SlurmJob>,
    /// Which source answered.
    pub source: Source,
    /// When the CLI answered because slurmrestd failed: why it failed. The gateway should
    /// alert on this (an expired token otherwise goes unnoticed behind the fallback).
    pub rest_error: Option<String>,
    /// `errors` and `warnings` Slurm put in an otherwise usable response, and records that
    /// were skipped (no job id).
    pub slurm_messages: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_lists() {
        let s = |v: &[&str]| JobState::from_slurm_list(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&["RUNNING"]), JobState::Running);
        assert_eq!(s(&["COMPLETING", "CANCELLED"]), JobState::Cancelled);
        assert_eq!(s(&["COMPLETING"]), JobState::Completing);
        assert_eq!(s(&["WEIRD", "SUSPENDED"]), JobState::Suspended);
        assert_eq!(s(&["WEIRD"]), JobState::Other("WEIRD".into()));
        assert_eq!(s(&[]), JobState::Other(String::new()));
        assert_eq!(JobState::from_slurm("running").to_string(), "RUNNING");
    }

    #[test]
    fn versions() {
        assert_eq!(ApiVersion::parse("v0.0.38"), Some(ApiVersion(38)));
        assert_eq!(ApiVersion::parse("0.0.41"), Some(ApiVersion(41)));
        assert_eq!(ApiVersion::parse("40"), Some(ApiVersion(40)));
        assert_eq!(ApiVersion::parse("v0.0.x"), None);
        assert_eq!(ApiVersion::parse(""), None);
        assert_eq!(ApiVersion(38).to_string(), "v0.0.38");
        assert!(ApiVersion(41).is_known() && !ApiVersion(42).is_known());
        assert!(ApiVersion(40) > ApiVersion(38));
    }
}
