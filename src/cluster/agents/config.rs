//! The `[backend] type = "agents"` configuration (nodes, token, timeouts, Slurm mapping, PFI
//! predictor, TLS) and building the backend from it.
//!
//! Separate from the backend's behaviour because everything here runs once, at start, and
//! either yields a working [`AgentsBackend`] or says which setting is wrong; nothing here talks
//! to an agent.

use super::client::{AgentEndpoint, CallPolicy, Caller};
use super::{AgentsBackend, Known};
use flexgate_policies::facility::FacilityModel;
use flexgate_policies::predictor::{PfiPredictor, TelemetrySample};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;

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
    /// (the least-squares fit of `flexgate_policies::predictor`); without it such jobs count as
    /// inflexible.
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
                epoch: Arc::default(),
            },
            active: std::sync::atomic::AtomicBool::new(true),
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
