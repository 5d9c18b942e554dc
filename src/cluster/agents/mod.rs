//! The cluster backend over real node agents (`flexgate-agent`, one per GPU node), with jobs
//! mapped to GPUs by Slurm, or each node taken as one job where there is no scheduler.
//!
//! What it promises the dispatcher ([`ClusterBackend`]):
//! - **caps land on the right GPUs**: a job's GPUs are Slurm's GRES indices per node, mapped to
//!   device minors (gres.conf) and matched to the agent's GPUs by minor;
//! - **caps end when the event does**: every cap is a lease on the agent, renewed while it is
//!   wanted, never past the event's end, with a TTL of at least three renew periods; if the
//!   gateway dies the agents restore the pre-event limits when the leases expire;
//! - **no silent partial success**: a job counts as capped only when every node holding its
//!   GPUs confirmed; otherwise it is [`CapOutcome::Failed`](super::CapOutcome::Failed) and the
//!   gateway counts it at its measured draw and re-plans the shortfall onto confirmed jobs (as
//!   `README.md`, "Real GPUs: node agents and Slurm", tells operators);
//! - **bounded time**: calls fan out with bounded parallelism, each with a timeout, retried
//!   with backoff only inside the dispatch deadline.
//!
//! - **telemetry like a DCGM shop**: GPU power, DRAM activity and memory-copy utilisation come
//!   from each node's Prometheus page (the agent's `/metrics`, or a dcgm-exporter named by
//!   `metrics_url`); the closed loop trims on that power, and a page that is missing, broken,
//!   oversized or absurd leaves its GPUs unmeasured (counted at their maximum), never at less.
//!
//! What agents cannot know is said plainly in the inventory: training throughput is not
//! visible to them, so a job's uncapped throughput is taken as proportional to its GPU count
//! and its measured throughput is reported as 0. Elasticity comes from the job's flex tags
//! (`flexgate:pfi=…` in its Slurm comment); otherwise, with `[backend.pfi_predictor]`, from the
//! telemetry predictor (`flexgate_policies::predictor`) on the means of the job's *uncapped* run, carried with
//! its prediction error so the planner can treat it as uncertain; otherwise it is unknown and
//! the planner falls back conservatively. Without a meter source the meter is the facility
//! model's estimate from the measured GPU power (a job's GPUs that did not report counted at
//! their maximum), so closed-loop trim then acts on an estimate (logged at start).

pub mod client;
mod config;
mod dispatch;
mod inventory;
mod shared;
mod telemetry;

pub use config::{AgentNode, AgentTls, AgentsConfig, AgentsError, PredictorSource, SlurmMapping};

use super::{BackendError, CapCommand, CapResult, ClusterBackend, JobState, Telemetry};
use chrono::{DateTime, Utc};
use client::{AgentEndpoint, CallError, Caller, Verb};
use flexgate_agent::api::GpuStatus;
use flexgate_policies::facility::FacilityModel;
use flexgate_policies::ids::JobId;
use flexgate_policies::predictor::{PfiPredictor, UncappedRunMeans};
use serde::Serialize;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Where a job's GPUs are: (node index, GPU uuid).
#[derive(Debug, Clone)]
struct MappedJob {
    id: JobId,
    /// Slurm's job id (for suspension); `None` without Slurm.
    slurm_id: Option<u32>,
    /// Its flex tier allows suspension (Slurm's `suspendable_tiers`).
    suspendable: bool,
    gpus: Vec<(usize, String)>,
    pfi: Option<f64>,
    max_slowdown: Option<f64>,
    /// Weight of its progress (the admin comment's `priority=` tag; 1 without one).
    priority: f64,
    /// Profile key: Slurm job name, GPU count and `profile=` tag.
    signature: Option<Arc<str>>,
    /// Its flex tier (`tier=` tag).
    tier: Option<Arc<str>>,
    /// When it started and its time limit, s, as Slurm says (`None` without Slurm).
    started_at: Option<DateTime<Utc>>,
    time_limit_s: Option<f64>,
}

/// A lease the gateway wants on one node.
#[derive(Debug, Clone)]
struct WantedLease {
    generation: u64,
    cap_w: f64,
    uuids: Vec<String>,
    until: Option<DateTime<Utc>>,
}

#[derive(Default)]
struct Known {
    /// Last GPU report per node; `None` when the node did not answer the last poll.
    gpus: Vec<Option<Vec<GpuStatus>>>,
    /// Jobs as last mapped (shared: telemetry and dispatch read them without copying).
    jobs: Arc<[MappedJob]>,
    /// Position of each job in `jobs`, for dispatch's per-command lookup.
    job_index: HashMap<JobId, usize>,
    /// Latest generation confirmed or attempted per job.
    generations: HashMap<JobId, u64>,
    /// Leases wanted, per (job, node index).
    leases: HashMap<(JobId, usize), WantedLease>,
    /// Highest draw seen while a job was uncapped (its P_max estimate).
    uncapped_seen: HashMap<JobId, f64>,
    /// Each GPU's maximum limit as last reported, to count it at that when it goes unmeasured.
    gpu_max: HashMap<String, f64>,
    /// Memory-activity means of each job's uncapped run, for the PFI predictor.
    uncapped_runs: HashMap<JobId, UncappedRunMeans>,
    /// Jobs suspended through this backend (their telemetry is not their uncapped run).
    suspended: std::collections::HashSet<JobId>,
    /// Each job's throughput as it last reported it to an agent (jobs that report nothing are
    /// absent: unknown, never 0).
    throughput: HashMap<JobId, flexgate_policies::control::cluster::MeasuredThroughput>,
    /// When each job's applied cap last moved beyond
    /// [`flexgate_policies::control::evidence::STEADY_CAP_TOLERANCE_W`] of the cap its settling
    /// began at (the enforced limit its GPUs report), and that cap: the throughput samples
    /// before it were taken at another point of the curve.
    cap_changed: HashMap<JobId, chrono::DateTime<chrono::Utc>>,
    cap_seen: HashMap<JobId, f64>,
    /// Per node, whether it answered the last GPU poll (empty before the first).
    answered: Vec<bool>,
}

impl Known {
    /// Jobs holding a lease on some node, computed once per pass (one set lookup per job
    /// instead of a scan of every lease).
    fn capped_jobs(&self) -> std::collections::HashSet<JobId> {
        self.leases.keys().map(|(job, _)| job.clone()).collect()
    }

    /// Stores a poll's answers, remembering each GPU's maximum.
    fn store_gpus(&mut self, gpus: Vec<Option<Vec<GpuStatus>>>) {
        for s in gpus.iter().flatten().flatten() {
            self.gpu_max.insert(s.uuid.clone(), s.max_w);
        }
        self.gpus = gpus;
    }
}

/// The backend.
pub struct AgentsBackend {
    agents: Vec<AgentEndpoint>,
    caller: Caller,
    deadline: Duration,
    limit: Arc<Semaphore>,
    renew_every: Duration,
    slurm: Option<(flexgate_slurm::SlurmInventory, flexgate_slurm::GresConf)>,
    facility: FacilityModel,
    /// Per node: the metrics page and whether it is the agent's own (the token goes only there).
    metrics: Vec<(String, bool)>,
    /// The fitted PFI predictor and the readings it needs per job.
    predictor: Option<(PfiPredictor, u64)>,
    known: Mutex<Known>,
    /// Whether this gateway drives the agents now: always for a single gateway, only while
    /// leading for a replica (a standby renews no lease).
    active: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for AgentsBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentsBackend")
            .field("agents", &self.agents.len())
            .field("slurm", &self.slurm.is_some())
            .finish_non_exhaustive()
    }
}

impl AgentsBackend {
    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One bounded, retried call.
    async fn agent_call<B: Serialize + ?Sized + Sync, T: serde::de::DeserializeOwned>(
        &self,
        node: usize,
        verb: Verb,
        path: &str,
        body: Option<&B>,
        deadline: Instant,
    ) -> Result<T, CallError> {
        let _permit = self.limit.acquire().await.map_err(|_| CallError::Unreachable {
            node: self.agents[node].node.clone(),
            detail: "backend closed".into(),
        })?;
        self.caller.call(&self.agents[node], verb, path, body, deadline).await
    }
}

/// When every node's call failed, says so with the first few reasons (so that a refused token
/// reads as such, not as a network problem); `None` when at least one node answered.
fn all_failed<T>(what: &str, results: &[Result<T, String>]) -> Option<String> {
    let errors: Vec<&str> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .map(String::as_str)
        .collect();
    if results.is_empty() || errors.len() < results.len() {
        return None;
    }
    let shown = &errors[..errors.len().min(3)];
    let more = match errors.len() - shown.len() {
        0 => String::new(),
        n => format!(" (and {n} more)"),
    };
    Some(format!("{what}: {}{more}", shown.join("; ")))
}

#[async_trait::async_trait]
impl ClusterBackend for AgentsBackend {
    async fn inventory(&self) -> Result<Vec<JobState>, BackendError> {
        self.read_inventory().await
    }

    /// Slurm's pending jobs (none without Slurm: one job per node has no queue).
    async fn queue(&self) -> Option<Result<Vec<super::QueuedJob>, BackendError>> {
        let (inventory, _) = self.slurm.as_ref()?;
        Some(inventory::queued_jobs(inventory).await)
    }

    async fn apply(&self, commands: &[CapCommand]) -> Vec<CapResult> {
        let deadline = Instant::now() + self.deadline;
        let calls = commands.iter().map(|c| async move {
            CapResult {
                job: c.job.clone(),
                generation: c.generation,
                outcome: self.apply_one(c, deadline).await,
            }
        });
        futures_util::future::join_all(calls).await
    }
    async fn telemetry(&self) -> Result<Telemetry, BackendError> {
        self.read_telemetry().await
    }

    fn name(&self) -> &str {
        "agents"
    }

    async fn fence(&self) -> Vec<String> {
        let deadline = Instant::now() + self.deadline;
        let calls = (0..self.agents.len()).map(|node| async move {
            let answer = self
                .agent_call::<(), flexgate_agent::api::FenceResponse>(
                    node,
                    client::Verb::Post,
                    flexgate_agent::api::FENCE_PATH,
                    None,
                    deadline,
                )
                .await;
            (node, answer)
        });
        let mut unreached = Vec::new();
        for (node, answer) in futures_util::future::join_all(calls).await {
            if let Err(e) = answer {
                tracing::warn!(node = %self.agents[node].node, "could not raise the agent's fence: {e}");
                unreached.push(self.agents[node].node.clone());
            }
        }
        unreached
    }

    fn set_term(&self, epoch: Option<u64>) {
        use std::sync::atomic::Ordering;
        match epoch {
            Some(e) => {
                self.caller.epoch.store(e, Ordering::SeqCst);
                self.active.store(true, Ordering::SeqCst);
            }
            None => self.active.store(false, Ordering::SeqCst),
        }
    }

    fn agents_answering(&self) -> Vec<(String, bool)> {
        let known = self.known();
        self.agents
            .iter()
            .zip(&known.answered)
            .map(|(agent, answered)| (agent.node.clone(), *answered))
            .collect()
    }

    async fn suspend(&self, job: &str) -> Result<(), BackendError> {
        let (inventory, id) = self.suspension_target(job)?;
        inventory
            .suspend(id)
            .await
            .map_err(|e| BackendError::Unreachable(format!("Slurm: suspending job {id}: {e}")))?;
        self.known().suspended.insert(JobId::from(job));
        Ok(())
    }

    async fn resume(&self, job: &str) -> Result<(), BackendError> {
        let (inventory, id) = self.suspension_target(job)?;
        inventory
            .resume(id)
            .await
            .map_err(|e| BackendError::Unreachable(format!("Slurm: resuming job {id}: {e}")))?;
        self.known().suspended.remove(job);
        Ok(())
    }
}

impl AgentsBackend {
    /// Slurm and the job's id, if Slurm may suspend it (its tier is in `suspendable_tiers`).
    fn suspension_target(&self, job: &str) -> Result<(&flexgate_slurm::SlurmInventory, u32), BackendError> {
        let Some((inventory, _)) = &self.slurm else {
            return Err(BackendError::Protocol(format!(
                "job {job}: suspension needs Slurm ([backend.slurm])"
            )));
        };
        let known = self.known();
        let mapped = known
            .jobs
            .iter()
            .find(|j| &*j.id == job)
            .ok_or_else(|| BackendError::Protocol(format!("no running job {job}")))?;
        match (mapped.slurm_id, mapped.suspendable) {
            (Some(id), true) => Ok((inventory, id)),
            _ => Err(BackendError::Protocol(format!(
                "job {job}: its flex tier is not in suspendable_tiers"
            ))),
        }
    }
}
