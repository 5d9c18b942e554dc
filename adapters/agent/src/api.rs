//! The agent's wire protocol (for operators: "Protocol" in `adapters/agent/README.md`): JSON
//! bodies of every endpoint, shared by the agent and the gateway's HTTP client so that both
//! sides agree by construction.
//!
//! | Method and path | Body | Answer |
//! |---|---|---|
//! | `GET /v1/gpus` | – | `[`[`GpuStatus`]`]` |
//! | `PUT /v1/leases/{id}` | [`LeaseRequest`] | [`LeaseResponse`] |
//! | `POST /v1/leases/{id}/renew` | [`RenewRequest`] | [`LeaseSummary`] |
//! | `DELETE /v1/leases/{id}` | – | [`ReleaseResponse`] |
//! | `GET /v1/health` | – | [`Health`] |
//! | `POST /v1/fence` (with [`EPOCH_HEADER`]) | – | [`FenceResponse`] |
//! | `POST /v1/jobs/{job_id}/start` | [`JobRequest`] | [`JobResponse`] |
//! | `POST /v1/jobs/{job_id}/end` | [`JobRequest`] | [`JobResponse`] |
//! | `POST /v1/jobs/{job_id}/throughput` | [`ThroughputReport`] (the job's own token, see [`crate::auth`]) | [`ThroughputAccepted`] |
//! | `GET /v1/jobs/throughput` | – | `[`[`JobThroughput`]`]` |
//! | `GET /metrics` | – | Prometheus text (see [`crate::metrics`]) |
//! | `GET /healthz` (no token) | – | `ok`: liveness |
//! | `GET /readyz` (no token) | – | `{"ready": true}`, or 503 with `not_ready_reason` |
//!
//! Every error is an [`ErrorBody`] with a 4xx/5xx status. Power is in watts (`f64`) on the wire;
//! the agent works in NVML's milliwatts inside.
//!
//! Requests reject unknown fields (a misspelt `cap_w` must not silently mean "no cap");
//! responses accept them, so a gateway keeps working against a newer agent.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

pub use crate::throughput::{JobThroughput, Phase, ThroughputReport};

/// Path of the gateway's read of every job's throughput.
pub const JOB_THROUGHPUT_PATH: &str = "/v1/jobs/throughput";

/// Answer to a throughput report the agent kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputAccepted {
    /// The job id from the path.
    pub job_id: String,
    /// The job's figure now (top-decile mean of its training samples in the window), tokens/s;
    /// `null` until it has reported a training-phase sample.
    pub tokens_per_s: Option<f64>,
}

/// The header a gateway replica sends its epoch (leadership term) in, on every command that can
/// change a cap (`PUT`/`DELETE` of a lease, renew, job start and end). The agent keeps the
/// highest epoch it has seen, across its own restarts, and refuses a command under a lower one
/// with 409 `fenced`, so that a leader that has lost its term can change no cap. Absent means
/// epoch 0: a single gateway never sends it, and is refused once a replica has.
pub const EPOCH_HEADER: &str = "flexgate-epoch";

/// Answer to `POST /v1/fence`: the highest gateway epoch the agent has seen now. A new leader
/// calls it on every agent when it takes over, so that the deposed leader is refused everywhere,
/// not only where the new leader has sent a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FenceResponse {
    /// The highest epoch seen (after this call).
    pub fence_epoch: u64,
}

/// Path of the fence.
pub const FENCE_PATH: &str = "/v1/fence";

/// Prefix of every versioned endpoint.
pub const API_PREFIX: &str = "/v1";

/// Where the agent listens unless told otherwise: loopback, so that nothing is exposed by
/// accident.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9450";

/// Most GPUs one request may name: a node has 8–16; more is a bug or an attack.
pub const MAX_GPUS_PER_REQUEST: usize = 64;

/// Largest `cap_w` accepted. Caps above a GPU's maximum are clamped, but a value this large is a
/// unit mix-up (milliwatts sent as watts) and is refused instead of being read as "uncapped".
pub const MAX_CAP_W: f64 = 100_000.0;

/// Longest lease or job id accepted.
pub const MAX_ID_LEN: usize = 128;

/// Default longest lease: a lease must die if the gateway dies, so its deadline is bounded.
pub const DEFAULT_MAX_LEASE_TTL: TimeDelta = TimeDelta::hours(24);

/// One GPU as `GET /v1/gpus` reports it: identity, cap range and current readings.
///
/// The range is read from the driver at agent start (never hard-coded; OEM VBIOSes differ).
/// Readings are `null` when the driver could not answer (`error` says why), so the gateway
/// can count the GPU conservatively instead of trusting a stale number.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// NVML UUID (`GPU-…`); the key every lease uses.
    pub uuid: String,
    /// NVML index (PCI order).
    pub index: u32,
    /// Device minor number (`/dev/nvidiaN`): what Slurm's gres.conf indices map to.
    pub minor: u32,
    /// PCI bus id (`00000000:18:00.0`).
    pub pci: String,
    /// Product name (`NVIDIA H200`).
    pub name: String,
    /// Lowest settable power limit, W.
    pub min_w: f64,
    /// Default power limit, W (not necessarily the pre-event limit).
    pub default_w: f64,
    /// Highest settable power limit, W.
    pub max_w: f64,
    /// Requested (software) power limit now, W.
    pub limit_w: Option<f64>,
    /// Enforced power limit now (minimum of all limiters, out-of-band ones included), W.
    pub enforced_w: Option<f64>,
    /// Power draw now, W (NVML averages over about 1 s on recent GPUs).
    pub power_w: Option<f64>,
    /// Energy since driver load, mJ.
    pub energy_mj: Option<u64>,
    /// Ids of the leases that cap this GPU now.
    #[serde(default)]
    pub held_by: Vec<String>,
    /// Limit the agent will restore when no lease holds the GPU any more, W.
    #[serde(default)]
    pub pre_event_w: Option<f64>,
    /// Why some reading is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Times the agent re-applied a held cap on this GPU because its limit had moved (driver
    /// reload or reset, another tool's set), since the agent started. The gateway records each
    /// increase in its ledger.
    #[serde(default)]
    pub drift_corrections: u64,
    /// True when the cap had to be re-applied 3 times within 15 minutes: the agent keeps
    /// re-applying it, but between re-applications the GPU may draw uncapped, so the gateway
    /// counts the cap as unconfirmed (`cap_unreliable`) and plans around it.
    #[serde(default)]
    pub cap_unreliable: bool,
    /// The number of MIG instances the GPU is split into, when it is in MIG mode; `null` when
    /// MIG is off or the driver cannot tell. A GPU in MIG mode has **one** power limit for all
    /// its instances: every job on any of them runs under the same cap, and the agent holds
    /// the lowest cap any lease asks for on the GPU (restoring the pre-event limit only when no
    /// lease holds it). The gateway must plan such a GPU as one capped unit shared by the jobs
    /// on its instances, never cap one instance alone. Absent from older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_instances: Option<u32>,
}

/// What to restore when a lease ends. Only `pre_event` exists: the limit a GPU had before any
/// lease touched it (NVML has no command to reset a power limit, and the default limit is not
/// always what was there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RestorePolicy {
    /// Restore the limit saved when the first lease capped the GPU.
    #[default]
    PreEvent,
}

/// One GPU's cap in a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuCap {
    /// NVML UUID of the GPU.
    pub uuid: String,
    /// Requested cap, W. Clamped into the GPU's range; non-finite or negative values are refused.
    pub cap_w: f64,
}

/// Body of `PUT /v1/leases/{id}`: the declarative state of one lease.
///
/// Idempotent per generation: the same generation with the same caps returns the stored answer
/// and does nothing (`expires_at` is not compared: the answer carries the deadline held); the
/// same generation with other caps is refused (409 `generation_conflict`), so a sender learns
/// that its new caps were not applied; a lower generation than the one held is refused (409
/// `stale_generation`); a higher one replaces the lease, and GPUs it no longer names are
/// restored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LeaseRequest {
    /// Monotone per lease id, chosen by the gateway.
    pub generation: u64,
    /// When the agent restores the lease's GPUs unless renewed: the dead-man switch. Must be in
    /// the future and no further ahead than the agent's maximum (24 h by default).
    pub expires_at: DateTime<Utc>,
    /// Caps, one per GPU (no GPU twice).
    pub gpus: Vec<GpuCap>,
    /// What to restore at the end; only `pre_event`.
    #[serde(default)]
    pub restore: RestorePolicy,
    /// If set, GPUs of jobs that start while the lease is active (Slurm prolog →
    /// `POST /v1/jobs/{id}/start`) are capped at this value and belong to the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_job_cap_w: Option<f64>,
}

/// Per-GPU outcome of a cap request.
///
/// `applied_w` is the requested limit now in force on the GPU: lower than `requested_w` when
/// clamped, or when another lease holds a lower cap (then `status` is still `ok`, since this
/// lease's cap is honoured). `enforced_w` is what the GPU actually enforces (out-of-band limits
/// included): the gateway must account with it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppliedCap {
    /// GPU UUID, as requested.
    pub uuid: String,
    /// Cap asked for, W.
    pub requested_w: f64,
    /// Requested limit in force after the call, W (`null` if the GPU could not be set or read).
    pub applied_w: Option<f64>,
    /// Enforced limit after the call, W (`null` if it could not be read).
    pub enforced_w: Option<f64>,
    /// What happened.
    pub status: CapStatus,
}

/// Per-GPU result status. Anything but `ok`/`clamped` means the cap is **not** in force and the
/// gateway must re-plan around that GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CapStatus {
    /// In force as asked.
    Ok,
    /// In force, but moved into the GPU's range or below an out-of-band limit: see `applied_w`.
    Clamped,
    /// The agent lacks root/`CAP_SYS_ADMIN` (a configuration error).
    NoPermission,
    /// The GPU cannot be power-capped.
    NotSupported,
    /// The GPU fell off the bus or needs a reset.
    GpuLost,
    /// The driver did not answer within the agent's deadline (a hung call): the GPU is
    /// unresponsive, and nothing is known of its limit.
    Unresponsive,
    /// The driver answered the set with success, but the limit read back is higher than the
    /// cap (a set that did not take effect, or a driver that raised it): the cap is not in
    /// force. `applied_w` is the limit read back.
    NotApplied,
    /// The driver answered with a value no GPU can have: a power limit outside the GPU's own
    /// constraints (or constraints that cannot be right: a minimum of 0, or above the maximum).
    /// Refused: nothing the agent read from it is trusted, so the cap is not confirmed; the
    /// reason is in `GET /v1/gpus` `error` and the agent's log.
    ImplausibleReading,
    /// No GPU with that UUID (or index) on this node.
    UnknownGpu,
    /// Any other driver error; the agent log has the details.
    Failed,
}

impl CapStatus {
    /// True when the cap is in force (`ok` or `clamped`).
    #[must_use]
    pub fn is_applied(self) -> bool {
        matches!(self, CapStatus::Ok | CapStatus::Clamped)
    }
}

/// Answer to `PUT /v1/leases/{id}`; repeated verbatim for a repeated generation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseResponse {
    /// The lease id from the path.
    pub lease_id: String,
    /// The generation now held.
    pub generation: u64,
    /// The lease's deadline.
    pub expires_at: DateTime<Utc>,
    /// One entry per requested GPU, in request order.
    pub applied: Vec<AppliedCap>,
}

/// Body of `POST /v1/leases/{id}/renew`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// New deadline; same bounds as [`LeaseRequest::expires_at`].
    pub expires_at: DateTime<Utc>,
}

/// A lease as `GET /v1/health` and renew report it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseSummary {
    /// Lease id.
    pub id: String,
    /// Generation held.
    pub generation: u64,
    /// Deadline.
    pub expires_at: DateTime<Utc>,
    /// UUIDs of the GPUs the lease caps now (job-start GPUs included).
    pub gpus: Vec<String>,
    /// The cap for GPUs of jobs starting during the lease, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_job_cap_w: Option<f64>,
}

/// Answer to `DELETE /v1/leases/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseResponse {
    /// The lease id from the path.
    pub lease_id: String,
    /// False when there was no such lease (already deleted or expired): a harmless repeat.
    pub deleted: bool,
    /// GPUs whose limits changed because of the deletion.
    pub restored: Vec<GpuLimit>,
}

/// A GPU's limits after the agent restored or re-capped it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuLimit {
    /// GPU UUID.
    pub uuid: String,
    /// Requested limit in force, W.
    pub limit_w: Option<f64>,
    /// Enforced limit, W.
    pub enforced_w: Option<f64>,
    /// `ok` if the write succeeded; otherwise the agent retries every watchdog tick.
    pub status: CapStatus,
}

/// Which GPU control backend the agent runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuBackend {
    /// Real GPUs through the NVIDIA driver.
    Nvml,
    /// Simulated GPUs (`--simulate`).
    Simulated,
}

/// Answer to `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    /// `nvml` or `simulated`.
    pub gpu_backend: GpuBackend,
    /// False when the readiness check (writing each GPU's current limit back, at start and
    /// every 30 s) failed: caps would not work, so the gateway must treat this node's GPUs as
    /// uncappable.
    pub ready: bool,
    /// Why the agent is not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready_reason: Option<String>,
    /// Host name used in metrics labels and simulated UUIDs.
    pub hostname: String,
    /// Number of GPUs.
    pub gpus: usize,
    /// Leases held now.
    pub leases: Vec<LeaseSummary>,
    /// GPUs that no lease holds but whose pre-event limit could not be restored yet (retried
    /// every watchdog tick).
    #[serde(default)]
    pub pending_restore: Vec<String>,
    /// The pending restores that have failed, with their back-off: each is retried after 1 s,
    /// then 2, 4, … up to 60 s between tries, per GPU, so one GPU that keeps failing neither
    /// floods the driver nor delays the other GPUs' restores.
    #[serde(default)]
    pub restore_retries: Vec<RestoreRetry>,
    /// GPUs the driver lists but the agent could not take charge of (lost at start, unreadable):
    /// left out of `/v1/gpus`, so the gateway plans without them; the others are served.
    #[serde(default)]
    pub unavailable_gpus: Vec<UnavailableGpu>,
    /// What an operator should fix though caps work (a GPU's persistence mode off, with the
    /// reason and the fix); checked at start and every 30 s.
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// A pending restore that has failed, and when the agent tries it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoreRetry {
    /// GPU UUID.
    pub uuid: String,
    /// Tries that failed in a row.
    pub failures: u32,
    /// What the last try answered.
    pub status: CapStatus,
    /// When the next try is due (the watchdog makes it at its first pass from then on).
    pub next_attempt_at: DateTime<Utc>,
}

/// A GPU the agent serves without, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnavailableGpu {
    /// Its NVML index.
    pub index: u32,
    /// What the driver answered.
    pub reason: String,
}

/// Body of the Slurm job hooks `POST /v1/jobs/{job_id}/start|end`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRequest {
    /// GPU indices as in `SLURM_JOB_GPUS` (NVML index = device minor on a node whose gres.conf
    /// lists `/dev/nvidia*` in order; the agent matches on the minor number).
    pub gpus: Vec<u32>,
}

/// Answer to the job hooks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResponse {
    /// The job id from the path.
    pub job_id: String,
    /// Leases the job's GPUs now belong to (start), or were dropped from (end).
    pub lease_ids: Vec<String>,
    /// One entry per requested GPU, in request order.
    pub gpus: Vec<JobGpu>,
}

/// One GPU of a job hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobGpu {
    /// The index from the request.
    pub index: u32,
    /// UUID of the matching GPU (`null` if none).
    pub uuid: Option<String>,
    /// Requested limit in force after the hook, W.
    pub limit_w: Option<f64>,
    /// Enforced limit after the hook, W.
    pub enforced_w: Option<f64>,
    /// `ok`, `clamped` (capped at a clamped `new_job_cap_w`), `unknown_gpu` or a driver error.
    pub status: CapStatus,
}

/// Machine-readable error kinds of [`ErrorBody`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Malformed JSON or an invalid value (400).
    BadRequest,
    /// Missing or wrong token (401).
    Unauthorized,
    /// The read-only token tried to change something (403).
    Forbidden,
    /// No such lease or path (404).
    NotFound,
    /// A lower (or deleted) generation than the one held (409); see `held_generation`.
    StaleGeneration,
    /// The same generation as the lease held, with other caps (409): nothing changed, the lease
    /// keeps the caps it holds; `held_generation` is that generation. Send the new caps under a
    /// higher one.
    GenerationConflict,
    /// Some other conflict, e.g. too many leases (409).
    Conflict,
    /// Body too large (413).
    PayloadTooLarge,
    /// A throughput report that cannot be true (NaN, negative, absurd, far above the job's own
    /// figure): refused and counted, nothing kept (422). `detail` starts with the reason code.
    ImplausibleThroughput,
    /// The state file could not be written, so nothing was changed (503).
    Unavailable,
    /// Sent under an older gateway epoch than one the agent has seen: a deposed leader (409);
    /// `fence_epoch` is the highest seen. Nothing changed.
    Fenced,
    /// A bug (500).
    Internal,
    /// A kind this version does not know (from a newer agent).
    #[serde(other)]
    Other,
}

/// Every error answer: what went wrong and, for people, what to do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Machine-readable kind.
    pub error: ErrorKind,
    /// Human-readable explanation.
    pub detail: String,
    /// With `stale_generation` and `generation_conflict`: the generation the agent holds (or
    /// deleted), so the gateway can number its next request above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_generation: Option<u64>,
    /// With `fenced`: the highest gateway epoch the agent has seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_epoch: Option<u64>,
}

/// Why a request body or path was refused (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValidationError(pub String);

fn invalid(msg: impl Into<String>) -> ValidationError {
    ValidationError(msg.into())
}

/// Check a lease or job id: 1–128 characters from `A-Z a-z 0-9 . _ : + -`, so ids are safe in
/// URLs, logs and file contents.
pub fn validate_id(kind: &str, id: &str) -> Result<(), ValidationError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(invalid(format!("{kind} id must be 1 to {MAX_ID_LEN} characters")));
    }
    if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b".-_:+".contains(&b)) {
        return Err(invalid(format!("{kind} id may only contain A-Z a-z 0-9 . _ : + -")));
    }
    Ok(())
}

/// Check a cap value in watts: finite, not negative, and not absurdly large.
pub fn validate_cap_w(what: &str, cap_w: f64) -> Result<(), ValidationError> {
    if !cap_w.is_finite() {
        return Err(invalid(format!("{what} must be a finite number of watts")));
    }
    if cap_w < 0.0 {
        return Err(invalid(format!("{what} must not be negative (got {cap_w} W)")));
    }
    if cap_w > MAX_CAP_W {
        return Err(invalid(format!(
            "{what} = {cap_w} W is above {MAX_CAP_W} W; caps are in watts, not milliwatts"
        )));
    }
    Ok(())
}

/// Check a lease deadline against `now`: strictly in the future and at most `max_ttl` ahead.
pub fn validate_expiry(
    expires_at: DateTime<Utc>,
    now: DateTime<Utc>,
    max_ttl: TimeDelta,
) -> Result<(), ValidationError> {
    if expires_at <= now {
        return Err(invalid(format!(
            "expires_at {} is not in the future (agent time {})",
            expires_at.to_rfc3339(),
            now.to_rfc3339()
        )));
    }
    if expires_at - now > max_ttl {
        return Err(invalid(format!(
            "expires_at {} is more than {} s ahead; a lease must end if the gateway dies, so renew it instead",
            expires_at.to_rfc3339(),
            max_ttl.num_seconds()
        )));
    }
    Ok(())
}

impl LeaseRequest {
    /// Check everything that does not depend on the GPUs present: expiry bounds, cap values, GPU
    /// count and duplicates.
    pub fn validate(&self, now: DateTime<Utc>, max_ttl: TimeDelta) -> Result<(), ValidationError> {
        validate_expiry(self.expires_at, now, max_ttl)?;
        if self.gpus.len() > MAX_GPUS_PER_REQUEST {
            return Err(invalid(format!(
                "{} GPUs in one lease; at most {MAX_GPUS_PER_REQUEST}",
                self.gpus.len()
            )));
        }
        for (i, gpu) in self.gpus.iter().enumerate() {
            if gpu.uuid.is_empty() || gpu.uuid.len() > MAX_ID_LEN {
                return Err(invalid(format!("gpus[{i}].uuid must be 1 to {MAX_ID_LEN} characters")));
            }
            validate_cap_w(&format!("gpus[{i}].cap_w"), gpu.cap_w)?;
            if self.gpus[..i].iter().any(|g| g.uuid == gpu.uuid) {
                return Err(invalid(format!("GPU {} appears twice in one lease", gpu.uuid)));
            }
        }
        if let Some(cap) = self.new_job_cap_w {
            validate_cap_w("new_job_cap_w", cap)?;
        }
        Ok(())
    }
}

/// Decode and check the body of `PUT /v1/leases/{id}` at agent time `now`: JSON into a
/// [`LeaseRequest`] (unknown fields refused), then [`LeaseRequest::validate`]. The one path from
/// bytes to a request that the lease book may see; the HTTP handler and the fuzz target
/// (`adapters/agent/fuzz`) both go through it.
pub fn decode_lease_request(
    body: &[u8],
    now: DateTime<Utc>,
    max_ttl: TimeDelta,
) -> Result<LeaseRequest, ValidationError> {
    let req: LeaseRequest = serde_json::from_slice(body).map_err(|e| invalid(format!("invalid JSON body: {e}")))?;
    req.validate(now, max_ttl)?;
    Ok(req)
}

impl JobRequest {
    /// Check the GPU list: bounded, no duplicates.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.gpus.len() > MAX_GPUS_PER_REQUEST {
            return Err(invalid(format!(
                "{} GPUs in one job request; at most {MAX_GPUS_PER_REQUEST}",
                self.gpus.len()
            )));
        }
        for (i, idx) in self.gpus.iter().enumerate() {
            if self.gpus[..i].contains(idx) {
                return Err(invalid(format!("GPU index {idx} appears twice")));
            }
        }
        Ok(())
    }
}

/// Path of `GET /v1/gpus`.
#[must_use]
pub fn gpus_path() -> String {
    format!("{API_PREFIX}/gpus")
}

/// Path of `PUT`/`DELETE /v1/leases/{id}` (the id must pass [`validate_id`]).
#[must_use]
pub fn lease_path(id: &str) -> String {
    format!("{API_PREFIX}/leases/{id}")
}

/// Path of `POST /v1/leases/{id}/renew`.
#[must_use]
pub fn renew_path(id: &str) -> String {
    format!("{API_PREFIX}/leases/{id}/renew")
}

/// Liveness probe, answered without a token.
pub const LIVENESS_PATH: &str = "/healthz";

/// Readiness probe (the start-up self-test), answered without a token.
pub const READINESS_PATH: &str = "/readyz";

/// Path of `GET /v1/health`.
#[must_use]
pub fn health_path() -> String {
    format!("{API_PREFIX}/health")
}

/// Path of `POST /v1/jobs/{job_id}/start`.
#[must_use]
pub fn job_start_path(job_id: &str) -> String {
    format!("{API_PREFIX}/jobs/{job_id}/start")
}

/// Path of `POST /v1/jobs/{job_id}/end`.
#[must_use]
pub fn job_end_path(job_id: &str) -> String {
    format!("{API_PREFIX}/jobs/{job_id}/end")
}

/// Path of the Prometheus endpoint.
pub const METRICS_PATH: &str = "/metrics";

/// Milliwatts (NVML's unit) to watts (the wire's).
#[must_use]
pub fn mw_to_w(mw: u32) -> f64 {
    f64::from(mw) / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).expect("valid time").to_utc()
    }

    #[test]
    fn lease_request_round_trips_and_defaults_restore() {
        let json = r#"{"generation":3,"expires_at":"2026-01-01T00:10:00Z","gpus":[{"uuid":"GPU-a","cap_w":350.5}]}"#;
        let req: LeaseRequest = serde_json::from_str(json).expect("parses");
        assert_eq!(req.restore, RestorePolicy::PreEvent);
        assert_eq!(req.new_job_cap_w, None);
        assert_eq!(req.expires_at, t("2026-01-01T00:10:00Z"));
        let back: LeaseRequest = serde_json::from_str(&serde_json::to_string(&req).expect("ser")).expect("de");
        assert_eq!(back, req);
    }

    #[test]
    fn lease_request_rejects_unknown_fields_and_restore_modes() {
        let typo = r#"{"generation":3,"expires_at":"2026-01-01T00:10:00Z","gpus":[{"uuid":"GPU-a","cap":350}]}"#;
        assert!(serde_json::from_str::<LeaseRequest>(typo).is_err());
        let restore = r#"{"generation":3,"expires_at":"2026-01-01T00:10:00Z","gpus":[],"restore":"default"}"#;
        assert!(serde_json::from_str::<LeaseRequest>(restore).is_err());
    }

    #[test]
    fn validation_catches_bad_values() {
        let now = t("2026-01-01T00:00:00Z");
        let ok = LeaseRequest {
            generation: 1,
            expires_at: now + TimeDelta::minutes(5),
            gpus: vec![GpuCap {
                uuid: "GPU-a".into(),
                cap_w: 300.0,
            }],
            restore: RestorePolicy::PreEvent,
            new_job_cap_w: None,
        };
        assert!(ok.validate(now, DEFAULT_MAX_LEASE_TTL).is_ok());

        let mut past = ok.clone();
        past.expires_at = now;
        assert!(past.validate(now, DEFAULT_MAX_LEASE_TTL).is_err());

        let mut far = ok.clone();
        far.expires_at = now + TimeDelta::hours(25);
        assert!(far.validate(now, DEFAULT_MAX_LEASE_TTL).is_err());

        for bad in [f64::NAN, f64::INFINITY, -1.0, 1e9] {
            let mut r = ok.clone();
            r.gpus[0].cap_w = bad;
            assert!(r.validate(now, DEFAULT_MAX_LEASE_TTL).is_err(), "cap {bad} accepted");
            let mut r = ok.clone();
            r.new_job_cap_w = Some(bad);
            assert!(
                r.validate(now, DEFAULT_MAX_LEASE_TTL).is_err(),
                "new_job_cap {bad} accepted"
            );
        }

        let mut dup = ok.clone();
        dup.gpus.push(dup.gpus[0].clone());
        assert!(dup.validate(now, DEFAULT_MAX_LEASE_TTL).is_err());

        let mut many = ok.clone();
        many.gpus = (0..=MAX_GPUS_PER_REQUEST)
            .map(|i| GpuCap {
                uuid: format!("GPU-{i}"),
                cap_w: 300.0,
            })
            .collect();
        assert!(many.validate(now, DEFAULT_MAX_LEASE_TTL).is_err());
    }

    #[test]
    fn ids_are_restricted() {
        assert!(validate_id("lease", "evt-42:job.7_a+0").is_ok());
        assert!(validate_id("lease", "").is_err());
        assert!(validate_id("lease", "a/b").is_err());
        assert!(validate_id("lease", "a b").is_err());
        assert!(validate_id("lease", &"x".repeat(MAX_ID_LEN + 1)).is_err());
    }

    #[test]
    fn job_request_rejects_duplicates() {
        assert!(JobRequest { gpus: vec![0, 1, 2] }.validate().is_ok());
        assert!(JobRequest { gpus: vec![0, 1, 0] }.validate().is_err());
    }

    #[test]
    fn error_body_tolerates_unknown_kinds() {
        let body: ErrorBody = serde_json::from_str(r#"{"error":"something_new","detail":"x"}"#).expect("parses");
        assert_eq!(body.error, ErrorKind::Other);
        let stale = ErrorBody {
            error: ErrorKind::StaleGeneration,
            detail: "d".into(),
            held_generation: Some(4),
            fence_epoch: None,
        };
        let text = serde_json::to_string(&stale).expect("ser");
        assert!(text.contains(r#""error":"stale_generation""#) && text.contains(r#""held_generation":4"#));
    }
}
