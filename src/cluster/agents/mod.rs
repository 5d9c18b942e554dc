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
//!   GPUs confirmed; otherwise it is [`CapOutcome::Failed`] and the gateway counts it at its
//!   measured draw and re-plans the shortfall onto confirmed jobs (BACKENDS.md §7);
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
//! telemetry predictor (design/PFI.md) on the means of the job's *uncapped* run, carried with
//! its prediction error so the planner can treat it as uncertain; otherwise it is unknown and
//! the planner falls back conservatively. Without a meter source the meter is the facility
//! model's estimate from the measured GPU power (a job's GPUs that did not report counted at
//! their maximum), so closed-loop trim then acts on an estimate (logged at start).

pub mod client;

use super::{BackendError, CapCommand, CapOutcome, CapResult, ClusterBackend, JobState, JobTelemetry, Telemetry};
use chrono::{DateTime, Utc};
use client::{AgentEndpoint, CallError, CallPolicy, Caller, Verb};
use flexgate_agent::api::{
    CapStatus, GpuCap, GpuStatus, LeaseRequest, LeaseResponse, ReleaseResponse, RenewRequest, RestorePolicy, gpus_path,
    lease_path, renew_path,
};
use flexgate_agent::metrics::GpuSample;
use flexgate_policies::alloc::{CapRange, Elasticity, JobSpec};
use flexgate_policies::facility::{CoolingState, FacilityModel};
use flexgate_policies::pfi::CapGrid;
use flexgate_policies::predictor::{PfiPredictor, TelemetrySample, UncappedRunMeans};
use flexgate_policies::units::{Fraction, Kilowatts, TokensPerSec, Watts, WattsPerGpu};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// `[backend] type = "agents"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// Every GPU node's agent.
    pub nodes: Vec<AgentNode>,
    /// File holding the agents' control token (the same on every node); if absent, the
    /// environment variable `FLEXGATE_AGENT_TOKEN`.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    /// Per-request timeout, ms (default 2,000).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Retries per call after the first attempt, inside the deadline (default 2).
    #[serde(default = "default_retries")]
    pub retries: u32,
    /// How long a whole dispatch may take before unconfirmed jobs count as failed, ms
    /// (default 5,000).
    #[serde(default = "default_dispatch_deadline_ms")]
    pub dispatch_deadline_ms: u64,
    /// Calls in flight at once (default 256).
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    /// Lease renewal period, s (default 10); the lease TTL is three periods.
    #[serde(default = "default_renew_every_s")]
    pub renew_every_s: u64,
    /// How jobs map to GPUs: Slurm (its config as in flexgate-slurm's `SlurmConfig`, plus
    /// `gres_conf` for index → device minor), or, when absent, each node is one job.
    #[serde(default)]
    pub slurm: Option<SlurmMapping>,
    /// Predict the PFI of jobs without a `pfi=` flex tag from their uncapped run's telemetry
    /// (design/PFI.md, "Telemetry predictor"); without it such jobs count as inflexible.
    #[serde(default)]
    pub pfi_predictor: Option<PredictorSource>,
    /// TLS to the agents (`https://` node URLs): the CA that signs their certificates, and this
    /// gateway's client certificate where the agents require one (mTLS). Without it, `https://`
    /// agents are checked against the system's trust store.
    #[serde(default)]
    pub tls: Option<AgentTls>,
}

/// How the gateway trusts the agents, and proves itself to them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentTls {
    /// CA certificates (PEM) that sign the agents' server certificates.
    pub ca_file: PathBuf,
    /// The gateway's client certificate chain (PEM), for agents started with a client CA.
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// The key of `cert_file` (PEM).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
}

/// Where the telemetry predictor learns from: jobs of this site whose PFI was measured.
///
/// The paper's own training telemetry was not published, so there is no built-in fit; the
/// samples are the same JSON array `flexgate predictor` validates (fit it there first and look
/// at its leave-one-cluster-out score before trusting it here).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PredictorSource {
    /// JSON array of `{pfi, dram_active, mem_copy_util_pct, cluster}`.
    pub samples: PathBuf,
    /// Telemetry readings of a job's uncapped run before its prediction is used (default 30:
    /// half a minute at the gateway's 1 Hz, enough to average over training steps).
    #[serde(default = "default_min_readings")]
    pub min_readings: u64,
}

fn default_min_readings() -> u64 {
    30
}

/// Slurm as the job → GPU map.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmMapping {
    /// flexgate-slurm's `SlurmConfig` (rest, cli, cli_fallback, suspendable_tiers).
    #[serde(default)]
    pub inventory: serde_json::Value,
    /// The cluster's gres.conf, for GRES index → device minor; without it, index = minor.
    #[serde(default)]
    pub gres_conf: Option<PathBuf>,
}

/// One node's agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentNode {
    /// The node name the scheduler uses.
    pub name: String,
    /// The agent's base URL.
    pub url: String,
    /// Where to read the node's GPU telemetry (Prometheus text, dcgm-exporter's names), if not
    /// the agent's own `/metrics`: e.g. a dcgm-exporter at `http://node:9400/metrics`. The
    /// agents' token is never sent there.
    #[serde(default)]
    pub metrics_url: Option<String>,
}

fn default_timeout_ms() -> u64 {
    2_000
}
fn default_retries() -> u32 {
    2
}
fn default_dispatch_deadline_ms() -> u64 {
    5_000
}
fn default_concurrency() -> usize {
    256
}
fn default_renew_every_s() -> u64 {
    10
}

/// Why the backend could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AgentsError {
    /// A setting is unusable.
    #[error("agents backend: {0}")]
    Config(String),
    /// The token file.
    #[error("agents backend: cannot read token_file {path}: {source}")]
    Token {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Where a job's GPUs are: (node index, GPU uuid).
#[derive(Debug, Clone)]
struct MappedJob {
    id: Arc<str>,
    /// Slurm's job id (for suspension); `None` without Slurm.
    slurm_id: Option<u32>,
    /// Its flex tier allows suspension (Slurm's `suspendable_tiers`).
    suspendable: bool,
    gpus: Vec<(usize, String)>,
    pfi: Option<f64>,
    max_slowdown: Option<f64>,
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
    job_index: HashMap<Arc<str>, usize>,
    /// Latest generation confirmed or attempted per job.
    generations: HashMap<Arc<str>, u64>,
    /// Leases wanted, per (job, node index).
    leases: HashMap<(Arc<str>, usize), WantedLease>,
    /// Highest draw seen while a job was uncapped (its P_max estimate).
    uncapped_seen: HashMap<Arc<str>, f64>,
    /// Each GPU's maximum limit as last reported, to count it at that when it goes unmeasured.
    gpu_max: HashMap<String, f64>,
    /// Memory-activity means of each job's uncapped run, for the PFI predictor.
    uncapped_runs: HashMap<Arc<str>, UncappedRunMeans>,
    /// Jobs suspended through this backend (their telemetry is not their uncapped run).
    suspended: std::collections::HashSet<Arc<str>>,
}

impl Known {
    /// Jobs holding a lease on some node, computed once per pass (one set lookup per job
    /// instead of a scan of every lease).
    fn capped_jobs(&self) -> std::collections::HashSet<Arc<str>> {
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
    /// Builds the backend (contacts nothing). `facility` estimates the meter from GPU power.
    pub fn new(config: &AgentsConfig, facility: FacilityModel) -> Result<Arc<Self>, AgentsError> {
        let bad = |m: String| AgentsError::Config(m);
        if config.nodes.is_empty() {
            return Err(bad("nodes is empty: list every GPU node's agent ({ name, url })".into()));
        }
        if config.concurrency == 0 || config.renew_every_s == 0 || config.timeout_ms == 0 {
            return Err(bad("concurrency, renew_every_s and timeout_ms must be positive".into()));
        }
        let token = match &config.token_file {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|source| AgentsError::Token {
                    path: path.display().to_string(),
                    source,
                })?
                .trim()
                .to_string(),
            None => std::env::var("FLEXGATE_AGENT_TOKEN").unwrap_or_default(),
        };
        if token.len() < 16 {
            return Err(bad(
                "no agent token (at least 16 characters): set token_file or FLEXGATE_AGENT_TOKEN".into(),
            ));
        }
        let slurm = match &config.slurm {
            None => None,
            Some(mapping) => {
                let slurm_config: flexgate_slurm::SlurmConfig = serde_json::from_value(mapping.inventory.clone())
                    .map_err(|e| bad(format!("slurm.inventory: {e}")))?;
                let inventory = flexgate_slurm::SlurmInventory::new(slurm_config).map_err(|e| bad(e.to_string()))?;
                let gres = match &mapping.gres_conf {
                    Some(path) => {
                        let text = std::fs::read_to_string(path)
                            .map_err(|e| bad(format!("slurm.gres_conf {}: {e}", path.display())))?;
                        flexgate_slurm::parse_gres_conf(&text).map_err(|e| bad(e.to_string()))?
                    }
                    None => flexgate_slurm::GresConf::default(),
                };
                Some((inventory, gres))
            }
        };
        let predictor = match &config.pfi_predictor {
            None => None,
            Some(source) => {
                let text = std::fs::read_to_string(&source.samples)
                    .map_err(|e| bad(format!("pfi_predictor.samples {}: {e}", source.samples.display())))?;
                let samples: Vec<TelemetrySample> = serde_json::from_str(&text).map_err(|e| {
                    bad(format!(
                        "pfi_predictor.samples {}: not a JSON array of {{pfi, dram_active, mem_copy_util_pct, cluster}}: {e}",
                        source.samples.display()
                    ))
                })?;
                let model = PfiPredictor::fit(&samples)
                    .map_err(|e| bad(format!("pfi_predictor.samples {}: {e}", source.samples.display())))?;
                tracing::info!(
                    samples = model.n(),
                    intercept = model.intercept(),
                    slope = model.slope(),
                    residual_sd = model.residual_sd(),
                    "PFI predictor fitted: untagged jobs get a predicted PFI after {} uncapped readings",
                    source.min_readings
                );
                Some((model, source.min_readings))
            }
        };
        let mut metrics = Vec::with_capacity(config.nodes.len());
        for n in &config.nodes {
            metrics.push(match &n.metrics_url {
                Some(url) => {
                    let parsed = reqwest::Url::parse(url)
                        .map_err(|e| bad(format!("node {}: metrics_url {url}: {e}", n.name)))?;
                    if !matches!(parsed.scheme(), "http" | "https") {
                        return Err(bad(format!("node {}: metrics_url {url} is not http(s)", n.name)));
                    }
                    (url.clone(), false)
                }
                None => (
                    format!("{}{}", n.url.trim_end_matches('/'), flexgate_agent::api::METRICS_PATH),
                    true,
                ),
            });
        }
        let tls = match &config.tls {
            None => None,
            Some(t) => {
                if t.cert_file.is_some() != t.key_file.is_some() {
                    return Err(bad("tls: cert_file and key_file go together".into()));
                }
                if let Some(n) = config.nodes.iter().find(|n| !n.url.starts_with("https://")) {
                    return Err(bad(format!(
                        "tls is set but node {} has url {}: use https:// (or drop [backend.tls])",
                        n.name, n.url
                    )));
                }
                Some(flexgate_openadr::http::tls::TlsSettings {
                    ca_file: Some(t.ca_file.clone()),
                    cert_file: t.cert_file.clone(),
                    key_file: t.key_file.clone(),
                    vtn_fingerprint: None,
                })
            }
        };
        let in_clear: Vec<&str> = config
            .nodes
            .iter()
            .filter(|n| n.url.starts_with("http://") && !is_loopback_url(&n.url))
            .map(|n| n.name.as_str())
            .collect();
        if !in_clear.is_empty() {
            tracing::warn!(
                nodes = in_clear.len(),
                first = in_clear[0],
                "agents reached over plain http:// off this host: the control token travels in clear text; \
                 start the agents with TLS and use https:// with [backend.tls]"
            );
        }
        let timeout = Duration::from_millis(config.timeout_ms);
        let http = flexgate_openadr::http::client(tls.as_ref(), timeout).map_err(|e| bad(format!("agent TLS: {e}")))?;
        let agents = config
            .nodes
            .iter()
            .map(|n| AgentEndpoint {
                node: n.name.clone(),
                url: n.url.clone(),
            })
            .collect::<Vec<_>>();
        let known = Known {
            gpus: vec![None; agents.len()],
            ..Known::default()
        };
        Ok(Arc::new(AgentsBackend {
            agents,
            caller: Caller {
                http,
                token,
                policy: CallPolicy {
                    timeout,
                    retries: config.retries,
                    backoff: Duration::from_millis(100),
                },
            },
            deadline: Duration::from_millis(config.dispatch_deadline_ms),
            limit: Arc::new(Semaphore::new(config.concurrency)),
            renew_every: Duration::from_secs(config.renew_every_s),
            slurm,
            facility,
            metrics,
            predictor,
            known: Mutex::new(known),
        }))
    }

    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The lease TTL: three renew periods (BACKENDS.md §6).
    fn ttl(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.renew_every * 3).unwrap_or(chrono::Duration::seconds(30))
    }

    fn expiry(&self, until: Option<DateTime<Utc>>) -> DateTime<Utc> {
        // Agents check expiries against their own (wall) clocks.
        let by_ttl = crate::runtime::clock::wall_now() + self.ttl();
        until.map_or(by_ttl, |u| u.min(by_ttl))
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

    /// Reads every agent's GPUs at once; a node that does not answer keeps `None`.
    /// Also returns, when no agent answered, why (the first few errors), so that a refused
    /// token reads as such instead of as a network problem.
    async fn poll_gpus(&self) -> (Vec<Option<Vec<GpuStatus>>>, Option<String>) {
        let deadline = Instant::now() + self.caller.policy.timeout;
        let path = gpus_path();
        let calls = (0..self.agents.len()).map(|i| {
            let path = path.clone();
            async move {
                self.agent_call::<(), Vec<GpuStatus>>(i, Verb::Get, &path, None, deadline)
                    .await
                    .map_err(|e| {
                        tracing::warn!("agent GPU poll: {e}");
                        e.to_string()
                    })
            }
        });
        let results = futures_util::future::join_all(calls).await;
        let none_answered = all_failed("no agent answered", &results);
        (results.into_iter().map(Result::ok).collect(), none_answered)
    }

    /// Jobs → GPUs, from Slurm or one job per node.
    async fn map_jobs(&self, gpus: &[Option<Vec<GpuStatus>>]) -> Result<Vec<MappedJob>, BackendError> {
        let node_index: HashMap<&str, usize> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.node.as_str(), i))
            .collect();
        let Some((inventory, gres)) = &self.slurm else {
            let previous = self.known().jobs.clone();
            return Ok(gpus
                .iter()
                .enumerate()
                .filter_map(|(i, g)| {
                    let id = format!("node:{}", self.agents[i].node);
                    match g {
                        Some(g) => Some(MappedJob {
                            id: Arc::from(id),
                            slurm_id: None,
                            suspendable: false,
                            gpus: g.iter().map(|s| (i, s.uuid.clone())).collect(),
                            pfi: None,
                            max_slowdown: None,
                        }),
                        // A node that did not answer keeps its job, with its GPUs unknown, as
                        // under Slurm: its draw counts at the maximum and its caps stay wanted,
                        // instead of the job vanishing from the plan while its GPUs still draw.
                        None => previous.iter().find(|j| *j.id == *id).cloned(),
                    }
                })
                .collect());
        };
        let snapshot = inventory
            .running_jobs()
            .await
            .map_err(|e| BackendError::Unreachable(format!("Slurm: {e}")))?;
        if let Some(why) = &snapshot.rest_error {
            tracing::warn!("slurmrestd failed, squeue answered: {why}");
        }
        let mut jobs = Vec::new();
        for job in &snapshot.jobs {
            let (job_gpus, errors) = gres.job_gpus(job);
            for e in errors {
                tracing::warn!(job = %job.id, "GPU mapping: {e}");
            }
            let mut mapped = Vec::new();
            for g in job_gpus {
                let Some(&node) = node_index.get(g.node.as_str()) else {
                    tracing::warn!(job = %job.id, node = %g.node, "job runs on a node without a configured agent");
                    continue;
                };
                // A node that did not answer keeps its GPUs unknown: the job is still listed
                // (with what is known) so that the planner counts it conservatively.
                let uuid = gpus[node]
                    .as_ref()
                    .and_then(|list| list.iter().find(|s| s.minor == g.minor))
                    .map_or_else(|| format!("{}:minor{}", g.node, g.minor), |s| s.uuid.clone());
                mapped.push((node, uuid));
            }
            if mapped.is_empty() {
                continue;
            }
            jobs.push(MappedJob {
                id: Arc::from(job.id.to_string()),
                slurm_id: Some(job.id),
                suspendable: inventory.may_suspend(job),
                gpus: mapped,
                pfi: job.flex.pfi.filter(|p| p.is_finite() && *p > 0.0),
                max_slowdown: job.flex.max_slowdown,
            });
        }
        Ok(jobs)
    }

    fn job_state(
        &self,
        job: &MappedJob,
        gpus: &[Option<Vec<GpuStatus>>],
        known: &mut Known,
        capped_jobs: &std::collections::HashSet<Arc<str>>,
    ) -> JobState {
        let statuses: Vec<Option<&GpuStatus>> = job
            .gpus
            .iter()
            .map(|(node, uuid)| gpus[*node].as_ref().and_then(|l| l.iter().find(|s| &s.uuid == uuid)))
            .collect();
        let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
        let mut measured = 0.0;
        let mut applied = 0.0f64;
        for s in statuses.iter().flatten() {
            lo = lo.max(s.min_w);
            hi = hi.min(s.max_w);
            // Unknown draw counts at the GPU's maximum: never assume less than might be drawn.
            measured += s.power_w.unwrap_or(s.max_w);
            applied = applied.max(s.enforced_w.or(s.limit_w).unwrap_or(s.max_w));
        }
        let unknown = statuses.iter().filter(|s| s.is_none()).count();
        if !hi.is_finite() || lo <= 0.0 || lo > hi {
            (lo, hi) = (200.0, 700.0);
        }
        measured += unknown as f64 * hi;
        if applied <= 0.0 {
            applied = hi;
        }
        let n = job.gpus.len();
        let capped = capped_jobs.contains(&job.id);
        let seen = known.uncapped_seen.entry(job.id.clone()).or_insert(0.0);
        if !capped {
            *seen = seen.max(measured);
        }
        let uncapped = seen.max(n as f64 * lo).max(1.0);
        let predicted = self.predictor.as_ref().and_then(|(model, min_readings)| {
            known
                .uncapped_runs
                .get(&job.id)
                .and_then(|run| run.predict(model, *min_readings))
                .filter(|p| p.mean.is_finite() && p.mean > 0.0 && p.sd.is_finite())
        });
        let elasticity = match (job.pfi, predicted) {
            (Some(value), _) => Elasticity::Pfi {
                value,
                grid: CapGrid::fine_h200(),
            },
            (None, Some(p)) => Elasticity::PredictedPfi {
                mean: p.mean,
                sd: p.sd,
                grid: None,
            },
            (None, None) => Elasticity::Unknown,
        };
        JobState {
            spec: JobSpec {
                id: job.id.clone(),
                gpus: u32::try_from(n).unwrap_or(u32::MAX),
                cap_range: CapRange {
                    min: WattsPerGpu(lo),
                    max: WattsPerGpu(hi),
                },
                uncapped_power: Watts(uncapped),
                uncapped_tokens: TokensPerSec(n as f64),
                elasticity,
                max_slowdown: job.max_slowdown.and_then(|f| Fraction::new(f).ok()),
            },
            nodes: {
                let mut nodes: Vec<String> = job.gpus.iter().map(|(i, _)| self.agents[*i].node.clone()).collect();
                nodes.dedup();
                nodes
            },
            applied_cap: WattsPerGpu(applied.min(hi)),
            generation: known.generations.get(&job.id).copied().unwrap_or(0),
            measured_power: Watts(measured),
            measured_tokens: TokensPerSec(0.0),
            suspendable: job.suspendable,
        }
    }

    /// Keeps every wanted lease alive; re-creates it where the agent lost it (restart without
    /// state, or expiry while unreachable). Runs until the backend is dropped.
    pub fn spawn_renewal(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = self.renew_every;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(backend) = weak.upgrade() else { return };
                backend.renew_all().await;
            }
        })
    }

    /// One renewal round (also the reconcile: a lease the agent no longer holds is re-sent).
    pub async fn renew_all(&self) {
        let now = crate::runtime::clock::wall_now();
        let wanted: Vec<((Arc<str>, usize), WantedLease)> = {
            let mut known = self.known();
            // A lease past the event's end is not renewed; the agent's expiry restores it.
            known.leases.retain(|_, l| l.until.is_none_or(|u| u > now));
            known.leases.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let deadline = Instant::now() + self.renew_every;
        let calls = wanted.into_iter().map(|((job, node), lease)| async move {
            let id = lease_id(&job);
            let body = RenewRequest {
                expires_at: self.expiry(lease.until),
            };
            match self
                .agent_call::<_, serde_json::Value>(node, Verb::Post, &renew_path(&id), Some(&body), deadline)
                .await
            {
                Ok(_) => {}
                Err(CallError::Refused { status: 404, .. }) => {
                    tracing::warn!(job = %job, node = %self.agents[node].node, "agent lost the lease; re-sending it");
                    let _ = self.put_lease(node, &job, &lease, deadline).await;
                }
                Err(e) => tracing::warn!(job = %job, "lease renewal: {e}"),
            }
        });
        futures_util::future::join_all(calls).await;
    }

    async fn put_lease(
        &self,
        node: usize,
        job: &str,
        lease: &WantedLease,
        deadline: Instant,
    ) -> Result<LeaseResponse, CallError> {
        let body = LeaseRequest {
            generation: lease.generation,
            expires_at: self.expiry(lease.until),
            gpus: lease
                .uuids
                .iter()
                .map(|u| GpuCap {
                    uuid: u.clone(),
                    cap_w: lease.cap_w,
                })
                .collect(),
            restore: RestorePolicy::PreEvent,
            new_job_cap_w: None,
        };
        self.agent_call(node, Verb::Put, &lease_path(&lease_id(job)), Some(&body), deadline)
            .await
    }

    /// Applies one job's command on every node holding its GPUs.
    async fn apply_one(&self, command: &CapCommand, deadline: Instant) -> CapOutcome {
        let (job, latest) = {
            let known = self.known();
            let job = known.job_index.get(&command.job).map(|&i| known.jobs[i].clone());
            (job, known.generations.get(&command.job).copied().unwrap_or(0))
        };
        let Some(job) = job else {
            return CapOutcome::UnknownJob;
        };
        if command.generation < latest {
            return CapOutcome::Stale { latest };
        }
        let mut per_node: HashMap<usize, Vec<String>> = HashMap::new();
        for (node, uuid) in &job.gpus {
            per_node.entry(*node).or_default().push(uuid.clone());
        }
        let max_w = {
            let known = self.known();
            job.gpus
                .iter()
                .filter_map(|(n, u)| {
                    known.gpus[*n]
                        .as_ref()
                        .and_then(|l| l.iter().find(|s| &s.uuid == u))
                        .map(|s| s.max_w)
                })
                .fold(f64::INFINITY, f64::min)
        };
        // A cap at (or above) the GPUs' maximum is the end of the curtailment: release.
        let release = max_w.is_finite() && command.cap.value() >= max_w - 0.5;
        let calls = per_node.into_iter().map(|(node, uuids)| {
            let job = &job;
            async move {
                let lease = WantedLease {
                    generation: command.generation,
                    cap_w: command.cap.value(),
                    uuids,
                    until: command.until,
                };
                let result = if release {
                    self.agent_call::<(), ReleaseResponse>(
                        node,
                        Verb::Delete,
                        &lease_path(&lease_id(&job.id)),
                        None,
                        deadline,
                    )
                    .await
                    .map(|_| (max_w, false))
                } else {
                    self.put_lease(node, &job.id, &lease, deadline).await.and_then(|r| {
                        let mut worst = 0.0f64;
                        let mut clamped = false;
                        for a in &r.applied {
                            if !a.status.is_applied() {
                                return Err(CallError::Refused {
                                    node: self.agents[node].node.clone(),
                                    status: 200,
                                    detail: format!("GPU {}: {:?}", a.uuid, a.status),
                                    held_generation: None,
                                });
                            }
                            clamped |= a.status == CapStatus::Clamped;
                            worst = worst.max(a.enforced_w.or(a.applied_w).unwrap_or(a.requested_w));
                        }
                        Ok((worst, clamped))
                    })
                };
                (node, lease, result)
            }
        });
        let results = futures_util::future::join_all(calls).await;
        let mut known = self.known();
        known.generations.insert(job.id.clone(), command.generation);
        let mut applied = 0.0f64;
        let mut clamped = false;
        let mut failures = Vec::new();
        for (node, lease, result) in results {
            match result {
                Ok((w, c)) => {
                    applied = applied.max(w);
                    clamped |= c;
                    if release {
                        known.leases.remove(&(job.id.clone(), node));
                    } else {
                        known.leases.insert((job.id.clone(), node), lease);
                    }
                }
                Err(CallError::Refused {
                    status: 409,
                    held_generation: Some(held),
                    ..
                }) => return CapOutcome::Stale { latest: held },
                Err(e) => {
                    // Keep wanting the lease: the renewal round re-sends it when the node is back.
                    if !release {
                        known.leases.insert((job.id.clone(), node), lease);
                    }
                    failures.push(e.to_string());
                }
            }
        }
        if failures.is_empty() {
            CapOutcome::Applied {
                applied: WattsPerGpu(applied),
                clamped,
            }
        } else {
            CapOutcome::Failed {
                reason: failures.join("; "),
            }
        }
    }
}

impl AgentsBackend {
    /// Deletes the leases of jobs that are gone, restoring their GPUs' pre-event limits.
    async fn release_leases(&self, leases: &[(Arc<str>, usize)]) {
        let deadline = Instant::now() + self.deadline;
        let calls = leases.iter().map(|(job, node)| async move {
            tracing::info!(job = %job, node = %self.agents[*node].node, "job ended: releasing its GPUs");
            if let Err(e) = self
                .agent_call::<(), ReleaseResponse>(*node, Verb::Delete, &lease_path(&lease_id(job)), None, deadline)
                .await
            {
                tracing::warn!(job = %job, "releasing the GPUs of an ended job: {e}; the lease expires by itself");
            }
        });
        futures_util::future::join_all(calls).await;
    }
}

/// Largest plausible board power of one GPU, W: a reading above it (or negative, or NaN) is
/// a broken exporter, and the GPU counts as unmeasured instead.
const MAX_PLAUSIBLE_GPU_W: f64 = 5_000.0;

/// One node's GPU readings from its metrics page, by UUID.
type MetricsPage = HashMap<String, GpuSample>;

impl AgentsBackend {
    /// Reads every node's metrics page at once (the agent's `/metrics`, or the node's
    /// `metrics_url`); a node that does not answer, or whose page does not parse, is `None`.
    /// Also says why when no node answered.
    async fn scrape_metrics(&self) -> (Vec<Option<MetricsPage>>, Option<String>) {
        let deadline = Instant::now() + self.caller.policy.timeout;
        let calls = self.metrics.iter().enumerate().map(|(i, (url, own))| async move {
            let node = &self.agents[i].node;
            let _permit = self
                .limit
                .acquire()
                .await
                .map_err(|_| format!("{node}: backend closed"))?;
            let text = self
                .caller
                .scrape(node, url, *own, deadline)
                .await
                .map_err(|e| e.to_string())?;
            let samples = flexgate_agent::metrics::parse(&text).map_err(|e| format!("{node}: {url}: {e}"))?;
            Ok::<MetricsPage, String>(
                flexgate_agent::metrics::gpu_samples(&samples)
                    .into_iter()
                    .map(|mut g| {
                        g.power_w = g.power_w.filter(|w| (0.0..=MAX_PLAUSIBLE_GPU_W).contains(w));
                        (g.uuid.clone(), g)
                    })
                    .collect(),
            )
        });
        let results = futures_util::future::join_all(calls).await;
        for e in results.iter().filter_map(|r| r.as_ref().err()) {
            tracing::warn!("GPU telemetry: {e}");
        }
        let none_answered = all_failed("no node's GPU telemetry could be read", &results);
        (results.into_iter().map(Result::ok).collect(), none_answered)
    }

    /// Adds this round's memory activity to the uncapped runs of jobs that are neither capped
    /// nor suspended, and says when a job's PFI prediction becomes available.
    fn observe_uncapped_runs(&self, known: &mut Known, activity: &[(Arc<str>, f64, f64)]) {
        let Some((model, min_readings)) = &self.predictor else {
            return;
        };
        let capped_jobs = known.capped_jobs();
        for (job, dram, copy) in activity {
            let capped = capped_jobs.contains(job);
            if capped || known.suspended.contains(job) {
                continue;
            }
            let run = known.uncapped_runs.entry(job.clone()).or_default();
            if let Err(e) = run.observe(*dram, *copy) {
                tracing::warn!(job = %job, "memory telemetry refused for PFI prediction: {e}");
                continue;
            }
            if run.samples() == *min_readings
                && let Some(p) = run.predict(model, *min_readings)
            {
                let (lo, hi) = p.interval(0.9);
                tracing::info!(job = %job, dram_active = dram, mem_copy_util_pct = copy,
                    "PFI predicted from the uncapped run: {:.2} (90 % interval {lo:.2}–{hi:.2})", p.mean);
            }
        }
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

/// Whether `url`'s host is this machine (loopback), where clear text does not leave the host.
fn is_loopback_url(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| {
        let host = u.host_str().unwrap_or_default();
        host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

/// The lease id of a job's caps (the same on every node of the job).
fn lease_id(job: &str) -> String {
    let clean: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_:+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    format!("flexgate-{clean}")
}

#[async_trait::async_trait]
impl ClusterBackend for AgentsBackend {
    async fn inventory(&self) -> Result<Vec<JobState>, BackendError> {
        let (gpus, none_answered) = self.poll_gpus().await;
        if let Some(why) = none_answered {
            return Err(BackendError::Unreachable(why));
        }
        let jobs = self.map_jobs(&gpus).await?;
        let running: std::collections::HashSet<&str> = jobs.iter().map(|j| &*j.id).collect();
        let ended: Vec<(Arc<str>, usize)> = {
            let mut known = self.known();
            let ended: Vec<(Arc<str>, usize)> = known
                .leases
                .keys()
                .filter(|(job, _)| !running.contains(&**job))
                .cloned()
                .collect();
            for key in &ended {
                known.leases.remove(key);
                known.generations.remove(&key.0);
                known.uncapped_seen.remove(&key.0);
            }
            ended
        };
        // A job that ended mid-event gives its GPUs back at once (the Slurm epilog does the
        // same on the node; whichever comes first, the other is a no-op).
        self.release_leases(&ended).await;
        let mut known = self.known();
        // Forget what was learned about jobs that are gone (ids are not reused meaningfully).
        known.uncapped_seen.retain(|id, _| running.contains(&**id));
        known.uncapped_runs.retain(|id, _| running.contains(&**id));
        known.suspended.retain(|id| running.contains(&**id));
        let capped_jobs = known.capped_jobs();
        let states = jobs
            .iter()
            .map(|j| self.job_state(j, &gpus, &mut known, &capped_jobs))
            .collect();
        known.job_index = jobs.iter().enumerate().map(|(i, j)| (j.id.clone(), i)).collect();
        known.jobs = jobs.into();
        known.store_gpus(gpus);
        Ok(states)
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
        let (pages, none_answered) = self.scrape_metrics().await;
        if let Some(why) = none_answered {
            return Err(BackendError::TelemetryGap(why));
        }
        let reading = |node: usize, uuid: &str| pages[node].as_ref().and_then(|p| p.get(uuid));
        let jobs = self.known().jobs.clone();
        let mut per_job = Vec::new();
        // Each job's GPU-mean memory activity now, for the predictor (only if every GPU said).
        let mut activity: Vec<(Arc<str>, f64, f64)> = Vec::new();
        for job in jobs.iter() {
            // A job with any GPU unmeasured is left out: the gateway counts it conservatively.
            let mut power = 0.0;
            let mut complete = true;
            let (mut dram, mut copy, mut with_activity) = (0.0, 0.0, 0usize);
            for (node, uuid) in &job.gpus {
                let gpu = reading(*node, uuid);
                match gpu.and_then(|g| g.power_w) {
                    Some(w) => power += w,
                    None => complete = false,
                }
                if let Some((d, c)) = gpu.and_then(|g| g.dram_active.zip(g.mem_copy_util_pct)) {
                    dram += d;
                    copy += c;
                    with_activity += 1;
                }
            }
            if complete {
                per_job.push(JobTelemetry {
                    job: job.id.clone(),
                    power: Watts(power),
                    tokens: TokensPerSec(0.0),
                });
            }
            if with_activity == job.gpus.len() && with_activity > 0 {
                let n = with_activity as f64;
                activity.push((job.id.clone(), dram / n, copy / n));
            }
        }
        let measured: f64 = pages
            .iter()
            .flatten()
            .flat_map(|p| p.values())
            .filter_map(|g| g.power_w)
            .sum();
        let mut known = self.known();
        // The meter sees every GPU, measured or not: a job's GPU that did not report (its node
        // unreachable) counts at its maximum (BACKENDS.md §7), so that losing an agent never
        // lowers the estimate and the closed loop never gives budget back for it.
        let unmeasured: f64 = jobs
            .iter()
            .flat_map(|j| &j.gpus)
            .filter(|(node, uuid)| reading(*node, uuid).and_then(|g| g.power_w).is_none())
            .map(|(_, uuid)| known.gpu_max.get(uuid).copied().unwrap_or(700.0))
            .sum();
        self.observe_uncapped_runs(&mut known, &activity);
        drop(known);
        let estimated = measured + unmeasured;
        let nodes = u32::try_from(self.agents.len()).unwrap_or(u32::MAX);
        let meter = self
            .facility
            .forward(Watts(estimated), nodes, &CoolingState::Settled)
            .map(|m| m.nominal)
            .unwrap_or(Kilowatts(estimated / 1000.0));
        Ok(Telemetry {
            at: crate::runtime::clock::wall_now(),
            gpu_board_power: per_job.iter().map(|j| j.power).sum(),
            jobs: per_job,
            meter_kw: meter,
            nodes,
        })
    }

    fn name(&self) -> &str {
        "agents"
    }

    async fn suspend(&self, job: &str) -> Result<(), BackendError> {
        let (inventory, id) = self.suspension_target(job)?;
        inventory
            .suspend(id)
            .await
            .map_err(|e| BackendError::Unreachable(format!("Slurm: suspending job {id}: {e}")))?;
        self.known().suspended.insert(Arc::from(job));
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
