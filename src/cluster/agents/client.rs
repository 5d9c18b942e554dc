//! HTTP calls to node agents: one request with a timeout, retried with backoff on transport
//! errors and 5xx answers, never on a 4xx (the agent understood and said no).
//!
//! Every call is bounded twice: by the per-request timeout, and by the caller's deadline, so a
//! retry never runs past the moment the answer stops being useful.

use flexgate_agent::api::{CapStatus, ErrorBody};
use flexgate_policies::control::cluster::Unconfirmed;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::time::Duration;
use tokio::time::Instant;

/// How an agent call ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CallError {
    /// No answer (connection refused, timeout, reset) within the deadline.
    #[error("{node}: no answer ({detail})")]
    Unreachable {
        /// The node.
        node: String,
        /// The last transport error.
        detail: String,
    },
    /// The agent answered with an error status.
    #[error("{node}: HTTP {status}: {detail}")]
    Refused {
        /// The node.
        node: String,
        /// HTTP status.
        status: u16,
        /// The agent's `detail`, or the body.
        detail: String,
        /// For 409 on a lease: the generation the agent holds.
        held_generation: Option<u64>,
        /// The agent's machine-readable kind of refusal, when it gave one.
        kind: Option<flexgate_agent::api::ErrorKind>,
    },
    /// The answer was not the JSON we expect (a version mismatch).
    #[error("{node}: unexpected answer: {detail}")]
    Protocol {
        /// The node.
        node: String,
        /// What could not be read.
        detail: String,
    },
    /// The agent answered, but a GPU's cap is not in force: its read-back says why, or the
    /// agent reports that the cap keeps being undone on it.
    #[error("{node}: GPU {gpu}: cap not in force ({})", why.as_str())]
    NotInForce {
        /// The node.
        node: String,
        /// The GPU's UUID.
        gpu: String,
        /// Why.
        why: Unconfirmed,
    },
}

impl CallError {
    /// The kind of [`Unconfirmed`] this failure leaves a cap in.
    #[must_use]
    pub fn unconfirmed(&self) -> Unconfirmed {
        match self {
            CallError::Unreachable { .. } => Unconfirmed::Unreachable,
            // An agent that cannot persist (503) or errs (5xx) has not applied the cap either;
            // to the operator it is a node problem, like no answer.
            CallError::Refused { status, .. } if *status >= 500 => Unconfirmed::Unreachable,
            CallError::Refused { .. } | CallError::Protocol { .. } => Unconfirmed::Refused,
            CallError::NotInForce { why, .. } => *why,
        }
    }
}

/// What a GPU's [`CapStatus`] (other than `ok`/`clamped`) means for the job's cap.
#[must_use]
pub fn unconfirmed_of(status: CapStatus) -> Unconfirmed {
    match status {
        CapStatus::NoPermission => Unconfirmed::NoPermission,
        CapStatus::NotSupported | CapStatus::UnknownGpu => Unconfirmed::NotSupported,
        CapStatus::GpuLost => Unconfirmed::GpuLost,
        CapStatus::Unresponsive => Unconfirmed::Unresponsive,
        CapStatus::NotApplied => Unconfirmed::NotApplied,
        // A limit outside the GPU's own constraints is the driver's error too: nothing it said
        // of the GPU is trusted.
        CapStatus::ImplausibleReading | CapStatus::Ok | CapStatus::Clamped | CapStatus::Failed => {
            Unconfirmed::DriverError
        }
    }
}

/// One agent: where it listens and how to authenticate.
#[derive(Debug, Clone)]
pub struct AgentEndpoint {
    /// Node name (as the scheduler knows it).
    pub node: String,
    /// Base URL, e.g. `http://10.0.0.7:9450`.
    pub url: String,
}

/// Retry and timeout policy for agent calls.
#[derive(Debug, Clone, Copy)]
pub struct CallPolicy {
    /// Per-request timeout.
    pub timeout: Duration,
    /// Attempts after the first.
    pub retries: u32,
    /// First backoff; doubles per retry.
    pub backoff: Duration,
}

/// A request to make, as data, so that fan-out code can hold many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET.
    Get,
    /// PUT with a JSON body.
    Put,
    /// POST with a JSON body.
    Post,
    /// DELETE.
    Delete,
}

/// What every call shares: the connection pool, the token and the retry policy.
#[derive(Clone)]
pub struct Caller {
    /// Connection pool.
    pub http: reqwest::Client,
    /// The agents' control token (never logged).
    pub token: String,
    /// Timeouts and retries.
    pub policy: CallPolicy,
    /// The epoch (leadership term) every command that can change a cap is sent under, in the
    /// agents' fencing header; 0 (a single gateway): no header.
    pub epoch: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl Caller {
    /// Calls `path` on `agent` and reads a JSON answer, retrying as the module docs say,
    /// giving up at `deadline`.
    pub async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        agent: &AgentEndpoint,
        verb: Verb,
        path: &str,
        body: Option<&B>,
        deadline: Instant,
    ) -> Result<T, CallError> {
        call(self, agent, verb, path, body, deadline).await
    }
}

/// Largest metrics page read, bytes: dcgm-exporter's full field set for 8 GPUs is about
/// 100 kB; anything far beyond is a misconfigured or hostile endpoint, not telemetry.
pub const MAX_METRICS_BYTES: usize = 4 << 20;

impl Caller {
    /// Reads a Prometheus text page once (telemetry runs every second; the next round is the
    /// retry). The control token goes only to the node's own agent (`authenticated`), never to
    /// a separate exporter. Pages over [`MAX_METRICS_BYTES`] are refused unread.
    pub async fn scrape(
        &self,
        node: &str,
        url: &str,
        authenticated: bool,
        deadline: Instant,
    ) -> Result<String, CallError> {
        let unreachable = |detail: String| CallError::Unreachable {
            node: node.to_string(),
            detail,
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(unreachable("deadline passed".into()));
        }
        let mut request = self.http.get(url).timeout(self.policy.timeout.min(left));
        if authenticated {
            request = request.bearer_auth(&self.token);
        }
        let mut response = request.send().await.map_err(|e| unreachable(e.to_string()))?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            return Err(CallError::Refused {
                node: node.to_string(),
                status,
                detail: format!("metrics page {url}"),
                held_generation: None,
                kind: None,
            });
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| unreachable(e.to_string()))? {
            if body.len() + chunk.len() > MAX_METRICS_BYTES {
                return Err(CallError::Protocol {
                    node: node.to_string(),
                    detail: format!("metrics page {url} is over {MAX_METRICS_BYTES} bytes"),
                });
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(|_| CallError::Protocol {
            node: node.to_string(),
            detail: format!("metrics page {url} is not UTF-8"),
        })
    }
}

async fn call<B: Serialize + ?Sized, T: DeserializeOwned>(
    caller: &Caller,
    agent: &AgentEndpoint,
    verb: Verb,
    path: &str,
    body: Option<&B>,
    deadline: Instant,
) -> Result<T, CallError> {
    let policy = caller.policy;
    let url = format!("{}{}", agent.url.trim_end_matches('/'), path);
    let mut attempt = 0u32;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let outcome = if left.is_zero() {
            Err(CallError::Unreachable {
                node: agent.node.clone(),
                detail: "deadline passed".into(),
            })
        } else {
            once(caller, agent, verb, &url, body, policy.timeout.min(left)).await
        };
        let retryable = match &outcome {
            Ok(_) => false,
            Err(CallError::Unreachable { .. }) => true,
            Err(CallError::Refused { status, .. }) => *status >= 500,
            Err(CallError::Protocol { .. } | CallError::NotInForce { .. }) => false,
        };
        let backoff = policy.backoff.saturating_mul(2u32.saturating_pow(attempt));
        if !retryable || attempt >= policy.retries || Instant::now() + backoff >= deadline {
            return outcome;
        }
        tokio::time::sleep(backoff).await;
        attempt += 1;
    }
}

async fn once<B: Serialize + ?Sized, T: DeserializeOwned>(
    caller: &Caller,
    agent: &AgentEndpoint,
    verb: Verb,
    url: &str,
    body: Option<&B>,
    timeout: Duration,
) -> Result<T, CallError> {
    let http = &caller.http;
    let epoch = caller.epoch.load(std::sync::atomic::Ordering::SeqCst);
    let mut request = match verb {
        Verb::Get => http.get(url),
        Verb::Put => http.put(url),
        Verb::Post => http.post(url),
        Verb::Delete => http.delete(url),
    }
    .bearer_auth(&caller.token)
    .timeout(timeout);
    if epoch > 0 && verb != Verb::Get {
        request = request.header(flexgate_agent::api::EPOCH_HEADER, epoch);
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await.map_err(|e| CallError::Unreachable {
        node: agent.node.clone(),
        detail: e.to_string(),
    })?;
    let status = response.status().as_u16();
    let bytes = response.bytes().await.map_err(|e| CallError::Unreachable {
        node: agent.node.clone(),
        detail: e.to_string(),
    })?;
    if !(200..300).contains(&status) {
        let (detail, held_generation, kind) = match serde_json::from_slice::<ErrorBody>(&bytes) {
            Ok(e) => (e.detail, e.held_generation, Some(e.error)),
            Err(_) => (String::from_utf8_lossy(&bytes).chars().take(300).collect(), None, None),
        };
        return Err(CallError::Refused {
            node: agent.node.clone(),
            status,
            detail,
            held_generation,
            kind,
        });
    }
    serde_json::from_slice(&bytes).map_err(|e| CallError::Protocol {
        node: agent.node.clone(),
        detail: e.to_string(),
    })
}
