//! The lease book: which caps are in force, why, until when, and what to restore afterwards.
//!
//! This is the heart of the agent and has no network, file or clock access of its own: every
//! operation takes the time (`now`), the GPUs ([`GpuControl`]) and a [`Journal`] to persist to,
//! so the whole state machine is unit-tested with explicit times and simulated GPUs.
//!
//! # Model
//!
//! - A **lease** (`id`, `generation`, `expires_at`) holds caps on some GPUs. The gateway re-sends
//!   the whole lease declaratively: the same generation with the same caps is a harmless repeat
//!   (the stored answer is returned and nothing is re-done), the same generation with other caps
//!   is refused ([`LeaseError::GenerationConflict`]: the agent cannot apply both, and answering
//!   the first ack would hide that the new caps were ignored), a lower one is stale (refused), a
//!   higher one replaces the lease. The deadline is not part of the comparison: every resend
//!   computes it afresh (a restarted gateway re-sends its last plan's caps under their original
//!   generation), so a repeat keeps the deadline held and the answer says which one that is;
//!   renew moves it. A deleted lease leaves a tombstone, so a delayed retry of an old `PUT` cannot
//!   resurrect it. An expired lease leaves none: a gateway that lost contact may re-send its
//!   last generation with a fresh deadline, and that re-creates the lease.
//! - Each GPU's **pre-event limit** (its requested limit before any lease touched it, not the
//!   default) is saved the first time a lease caps it, and written back when no lease holds the
//!   GPU any more: on delete, on expiry (the dead-man switch), on job end, or when a newer
//!   generation drops the GPU.
//! - A GPU held by several leases gets the **lowest** cap.
//! - Caps are clamped into `[min, max]`, and never above an out-of-band limit the GPU already
//!   enforces (detected as enforced < requested).
//! - **Write-ahead**: the new intent (lease, pre-event limits) is journaled *before* any GPU is
//!   written, so an agent killed mid-operation can always put limits back at restart. If that
//!   journal write fails, the operation is refused and nothing changes.
//! - [`LeaseBook::reconcile_all`] (called by the watchdog every second) expires leases, retries
//!   restores that failed, and re-applies caps a GPU reset or driver reload wiped out (drift).
//! - **Restores retry with back-off, per GPU.** A restore that fails (refused, unresponsive,
//!   not read back) stays pending and is tried again after [`RESTORE_BACKOFF_FIRST`], doubling
//!   per failure up to [`RESTORE_BACKOFF_MAX`] ([`restore_backoff`]): a GPU that keeps failing
//!   costs the driver one call a minute, and since every GPU has its own schedule and its own
//!   deadline-bound calls, it never delays the others' restores. A `DELETE`, a job end or a
//!   new lease tries at once whatever the schedule. The schedule lives in memory only: a
//!   restarted agent tries every pending restore at start.
//! - **A reboot makes the saved pre-event limits stale** ([`LeaseBook::note_boot`]): the driver
//!   came up with its defaults (or what the site's boot scripts set), so writing back a limit
//!   saved before the reboot would impose an old value, not restore one. A pre-event limit of
//!   a GPU no valid lease holds is dropped; one of a GPU a lease still holds is read again from
//!   the GPU's limit now.
//! - **A cap is confirmed only by reading it back** within the GPU's own constraints: a read
//!   that fails or answers nonsense right after a set leaves the cap unconfirmed (and a restore
//!   pending), never assumed.
//! - **A state file is input too** ([`LeaseBook::from_state`]): a lease in it is held to the limits
//!   the API enforces on a request. One the API would refuse (a deadline further ahead than the
//!   maximum lease lifetime, such as a hand-edited year 9999, which would defeat the dead-man
//!   switch; an invalid id or cap) is dropped at load and its GPUs restored to their pre-event
//!   limits, as if it had expired: a cap nobody can vouch for comes off, and a gateway that still
//!   wants it re-creates it at its next renewal (renew answers 404, the gateway re-sends).

use crate::api::{
    self, AppliedCap, CapStatus, GpuCap, GpuLimit, JobGpu, JobRequest, JobResponse, LeaseRequest, LeaseResponse,
    LeaseSummary, MAX_GPUS_PER_REQUEST, MAX_ID_LEN, ReleaseResponse, RenewRequest, ValidationError, mw_to_w,
};
use crate::gpu::{GpuControl, GpuInfo, Limits};
use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Version of [`PersistedState`]'s layout.
pub const STATE_VERSION: u32 = 1;

/// Default most leases one agent holds at once (protects memory against a runaway client).
pub const DEFAULT_MAX_LEASES: usize = 1024;

/// Most tombstones of deleted leases kept (oldest dropped first).
const MAX_TOMBSTONES: usize = 4096;

/// One GPU's cap within a lease.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hold {
    /// What the gateway (or `new_job_cap_w`) asked for, W.
    pub requested_w: f64,
    /// The requested limit to write, mW: clamped into range and below any out-of-band limit.
    pub target_mw: u32,
    /// True when `target_mw` differs from `requested_w`.
    pub clamped: bool,
    /// Set when the GPU joined the lease through a job start (`new_job_cap_w`), with the job id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

/// A lease as the agent holds (and persists) it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lease {
    /// Lease id (from the path).
    pub id: String,
    /// Generation held.
    pub generation: u64,
    /// Deadline: the dead-man switch.
    pub expires_at: DateTime<Utc>,
    /// Cap for GPUs of jobs that start during the lease, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_job_cap_w: Option<f64>,
    /// GPUs held, by UUID.
    pub holds: BTreeMap<String, Hold>,
    /// The caps the `PUT` of this generation asked for, as sent: what a same-generation resend is
    /// compared with. Kept apart from `holds`, which lose GPUs that failed and gain GPUs of
    /// jobs that started. Absent in state files written before it existed; `response.applied`
    /// (the same GPUs and watts, once the `PUT` finished) stands in for it then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked: Option<Vec<GpuCap>>,
    /// The answer given for this generation, repeated for a repeated `PUT`.
    pub response: LeaseResponse,
}

/// What remains of a deleted lease: its generation, so stale retries are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tombstone {
    /// Generation the lease had when deleted.
    pub generation: u64,
    /// When it was deleted (tombstones are dropped after the maximum lease lifetime).
    pub deleted_at: DateTime<Utc>,
}

/// Everything the agent must not forget across a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PersistedState {
    /// Layout version ([`STATE_VERSION`]).
    pub version: u32,
    /// Leases held.
    pub leases: Vec<Lease>,
    /// Pre-event requested limits by GPU UUID, mW: present while a lease holds the GPU or its
    /// restore has not succeeded yet.
    pub baselines: BTreeMap<String, u32>,
    /// Tombstones of deleted leases.
    #[serde(default)]
    pub deleted: BTreeMap<String, Tombstone>,
    /// The highest gateway epoch (leadership term) seen, kept across restarts so that a deposed
    /// leader stays fenced after the agent restarts ([`LeaseBook::admit_epoch`]). 0 (absent from
    /// the file) until a gateway replica sends one.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fence_epoch: u64,
    /// The node's boot id when this state was written (`/proc/sys/kernel/random/boot_id`): a
    /// different one at start means the node rebooted, and the saved pre-event limits are
    /// stale ([`LeaseBook::note_boot`]). Absent from files written before it existed, or when
    /// the boot id could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Where the book persists itself; implemented by [`crate::state::FileJournal`] and, for
/// in-memory agents (benchmarks, tests), [`MemoryJournal`].
pub trait Journal: Send {
    /// Persist `state` durably before returning.
    fn save(&mut self, state: &PersistedState) -> Result<(), JournalError>;
}

/// Why the state could not be persisted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("could not persist the lease state: {0}")]
pub struct JournalError(pub String);

/// A journal that keeps nothing: for agents that need no restart safety (benchmarks, tests).
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryJournal;

impl Journal for MemoryJournal {
    fn save(&mut self, _state: &PersistedState) -> Result<(), JournalError> {
        Ok(())
    }
}

/// Why a lease operation was refused. Refused operations change nothing.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LeaseError {
    /// Invalid request (400).
    #[error("{0}")]
    Invalid(#[from] ValidationError),
    /// Lower generation than the one held (409).
    #[error("generation {requested} is older than generation {held} held for lease {id}; send a higher generation")]
    StaleGeneration {
        /// Lease id.
        id: String,
        /// Generation asked for.
        requested: u64,
        /// Generation held.
        held: u64,
    },
    /// The same generation as the lease held, with other caps (409). Nothing changed: the lease
    /// held keeps its caps. A new body needs a higher generation.
    #[error(
        "lease {id} already holds generation {generation} with other caps ({difference}); this body was not applied and the lease keeps its caps: send the new caps under a higher generation"
    )]
    GenerationConflict {
        /// Lease id.
        id: String,
        /// The generation both share.
        generation: u64,
        /// The first difference found, for people.
        difference: String,
    },
    /// The lease was deleted at this generation or later (409).
    #[error("lease {id} was deleted at generation {deleted}; a new lease under this id needs a higher generation")]
    Deleted {
        /// Lease id.
        id: String,
        /// Generation at deletion.
        deleted: u64,
    },
    /// No such lease (404).
    #[error("no lease {0} (never created, deleted, or expired)")]
    NotFound(String),
    /// Too many leases (409).
    #[error("the agent already holds {0} leases; delete some first")]
    TooManyLeases(usize),
    /// The intent could not be journaled, so nothing was applied (503).
    #[error("{0}; nothing was changed")]
    Persist(#[from] JournalError),
    /// Sent under an older gateway epoch than one already seen (409): a deposed leader. Nothing
    /// changed.
    #[error(
        "fenced: this request carries gateway epoch {epoch}, and epoch {highest} has been seen; a gateway that has lost its leadership may change no cap. Nothing was changed"
    )]
    Fenced {
        /// The epoch the request carried (0: none).
        epoch: u64,
        /// The highest epoch seen.
        highest: u64,
    },
}

/// Why a state file could not be loaded at all (the agent does not start).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// A layout this agent does not read.
    #[error("state version {0} is not supported (expected {STATE_VERSION})")]
    Version(u32),
}

/// A lease the state file held that [`LeaseBook::from_state`] refused, and why: for the log.
#[derive(Debug, Clone, PartialEq)]
pub struct RefusedLease {
    /// Lease id, as in the file.
    pub id: String,
    /// Generation, as in the file.
    pub generation: u64,
    /// Deadline, as in the file.
    pub expires_at: DateTime<Utc>,
    /// GPUs it held (they are restored).
    pub gpus: Vec<String>,
    /// What the API would have refused.
    pub reason: String,
}

/// Check a lease read from the state file against the limits the API enforces on a `PUT`: a
/// valid id, a deadline at most `max_ttl` after `now` (one already past is fine: it expires at
/// the next reconcile), valid caps and job ids, and an answer that belongs to the lease.
///
/// Only the file can carry such a lease (a hand edit, another program, a clock set far back), so
/// the agent cannot know what was meant; see [`LeaseBook::from_state`] for what it does instead.
pub fn check_loaded(lease: &Lease, now: DateTime<Utc>, max_ttl: TimeDelta) -> Result<(), String> {
    api::validate_id("lease", &lease.id).map_err(|e| e.to_string())?;
    if lease.expires_at - now > max_ttl {
        return Err(format!(
            "expires_at {} is more than {} s after agent time {}; the API never grants a lease that long, so it would defeat the dead-man switch",
            lease.expires_at.to_rfc3339(),
            max_ttl.num_seconds(),
            now.to_rfc3339()
        ));
    }
    if let Some(cap) = lease.new_job_cap_w {
        api::validate_cap_w("new_job_cap_w", cap).map_err(|e| e.to_string())?;
    }
    if lease.holds.len() > MAX_GPUS_PER_REQUEST {
        return Err(format!(
            "{} GPUs held; at most {MAX_GPUS_PER_REQUEST}",
            lease.holds.len()
        ));
    }
    for (uuid, hold) in &lease.holds {
        if uuid.is_empty() || uuid.len() > MAX_ID_LEN {
            return Err(format!("a held GPU's uuid must be 1 to {MAX_ID_LEN} characters"));
        }
        api::validate_cap_w(&format!("holds[{uuid}].requested_w"), hold.requested_w).map_err(|e| e.to_string())?;
        if let Some(job) = &hold.job {
            api::validate_id("job", job).map_err(|e| e.to_string())?;
        }
    }
    if let Some(asked) = &lease.asked {
        // The same checks as the request it records.
        let as_request = LeaseRequest {
            generation: lease.generation,
            expires_at: now + TimeDelta::seconds(1),
            gpus: asked.clone(),
            restore: api::RestorePolicy::PreEvent,
            new_job_cap_w: lease.new_job_cap_w,
        };
        as_request.validate(now, max_ttl).map_err(|e| format!("asked: {e}"))?;
    }
    if lease.response.lease_id != lease.id || lease.response.generation != lease.generation {
        return Err(format!(
            "its stored answer is for lease {} generation {}",
            lease.response.lease_id, lease.response.generation
        ));
    }
    if lease.response.applied.len() > MAX_GPUS_PER_REQUEST {
        return Err(format!(
            "its stored answer names {} GPUs; at most {MAX_GPUS_PER_REQUEST}",
            lease.response.applied.len()
        ));
    }
    Ok(())
}

/// How a same-generation `PUT` differs from the lease held, if it does, in terms of what the
/// agent would do: the set of GPUs with their caps in milliwatts (the unit written to the driver,
/// so a resend that differs only below 1 mW, or only in order, is a repeat) and `new_job_cap_w`.
fn body_difference(held: &Lease, req: &LeaseRequest) -> Option<String> {
    let held_caps: BTreeMap<&str, u32> = match &held.asked {
        Some(asked) => asked.iter().map(|c| (c.uuid.as_str(), w_to_mw(c.cap_w))).collect(),
        None => held
            .response
            .applied
            .iter()
            .map(|a| (a.uuid.as_str(), w_to_mw(a.requested_w)))
            .collect(),
    };
    let asked: BTreeMap<&str, u32> = req.gpus.iter().map(|c| (c.uuid.as_str(), w_to_mw(c.cap_w))).collect();
    for (uuid, &mw) in &asked {
        match held_caps.get(uuid) {
            None => return Some(format!("GPU {uuid} is not in the lease held")),
            Some(&was) if was != mw => {
                return Some(format!("GPU {uuid}: {} W asked, {} W held", mw_to_w(mw), mw_to_w(was)));
            }
            Some(_) => {}
        }
    }
    if let Some(uuid) = held_caps.keys().find(|u| !asked.contains_key(*u)) {
        return Some(format!("GPU {uuid} of the lease held is missing"));
    }
    let new_job = |w: Option<f64>| w.map(w_to_mw);
    if new_job(req.new_job_cap_w) != new_job(held.new_job_cap_w) {
        let show = |w: Option<f64>| w.map_or_else(|| "none".to_owned(), |w| format!("{} W", mw_to_w(w_to_mw(w))));
        return Some(format!(
            "new_job_cap_w: {} asked, {} held",
            show(req.new_job_cap_w),
            show(held.new_job_cap_w)
        ));
    }
    None
}

/// Outcome of writing one GPU towards its desired limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct GpuOutcome {
    limits: Option<Limits>,
    status: CapStatus,
}

impl GpuOutcome {
    fn limit_w(&self) -> Option<f64> {
        self.limits.map(|l| mw_to_w(l.requested_mw))
    }
    fn enforced_w(&self) -> Option<f64> {
        self.limits.map(|l| mw_to_w(l.enforced_mw))
    }
}

/// What a watchdog pass did, for logs and tests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickReport {
    /// Leases that expired and were removed.
    pub expired: Vec<String>,
    /// GPUs whose requested limit was written (restores, drift corrections), by UUID.
    pub written: Vec<String>,
    /// GPUs that could not be set to their desired limit, with the status.
    pub failed: Vec<(String, CapStatus)>,
}

/// First delay before a failed restore is tried again.
pub const RESTORE_BACKOFF_FIRST: TimeDelta = TimeDelta::seconds(1);

/// Longest delay between two tries of a failed restore: a GPU whose restore keeps failing is
/// still tried every minute, so a fixed permission or a GPU back on the bus is restored soon.
pub const RESTORE_BACKOFF_MAX: TimeDelta = TimeDelta::seconds(60);

/// The delay before the next try of a restore that has failed `failures` times in a row:
/// [`RESTORE_BACKOFF_FIRST`] after the first failure, doubling with each further one, never
/// more than [`RESTORE_BACKOFF_MAX`]. Zero failures: no delay. Pure.
#[must_use]
pub fn restore_backoff(failures: u32) -> TimeDelta {
    if failures == 0 {
        return TimeDelta::zero();
    }
    let first = RESTORE_BACKOFF_FIRST.num_milliseconds();
    let max = RESTORE_BACKOFF_MAX.num_milliseconds();
    // 2^(failures-1) overflows past 62 doublings; the cap is reached long before.
    let doublings = (failures - 1).min(32);
    TimeDelta::milliseconds(first.saturating_mul(1_i64 << doublings).min(max))
}

/// A pending restore's back-off: kept in memory, not journaled (a restarted agent tries every
/// pending restore at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RetryState {
    failures: u32,
    status: CapStatus,
    next_at: DateTime<Utc>,
}

/// What [`LeaseBook::note_boot`] did after a reboot: for the log and `/v1/health`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootReport {
    /// The boot id the state was written under.
    pub previous_boot_id: String,
    /// This boot's id.
    pub boot_id: String,
    /// GPUs no valid lease holds whose saved pre-event limit was dropped (not restored), mW.
    pub dropped: Vec<(String, u32)>,
    /// GPUs a valid lease still holds whose pre-event limit was read again: (uuid, saved mW,
    /// now mW).
    pub recaptured: Vec<(String, u32, u32)>,
}

impl RebootReport {
    /// One line for people: what was dropped and re-read, and why.
    #[must_use]
    pub fn describe(&self) -> String {
        let w = |mw: u32| format!("{} W", mw_to_w(mw));
        let dropped: Vec<String> = self
            .dropped
            .iter()
            .map(|(u, mw)| format!("{u} (saved {})", w(*mw)))
            .collect();
        let recaptured: Vec<String> = self
            .recaptured
            .iter()
            .map(|(u, was, now)| format!("{u} ({} saved, {} now)", w(*was), w(*now)))
            .collect();
        format!(
            "the node rebooted since the agent's state was saved (boot id {} then, {} now): the driver came up with its \
             own power limits, so the saved pre-event limits are stale and were not restored; dropped for GPUs no valid \
             lease holds: {}; re-read from the current limit for GPUs a lease still holds: {}",
            self.previous_boot_id,
            self.boot_id,
            if dropped.is_empty() {
                "none".to_owned()
            } else {
                dropped.join(", ")
            },
            if recaptured.is_empty() {
                "none".to_owned()
            } else {
                recaptured.join(", ")
            },
        )
    }
}

/// The lease state machine. See the module docs.
#[derive(Debug, Clone)]
pub struct LeaseBook {
    gpus: Vec<GpuInfo>,
    leases: BTreeMap<String, Lease>,
    baselines: BTreeMap<String, u32>,
    deleted: BTreeMap<String, Tombstone>,
    max_ttl: TimeDelta,
    max_leases: usize,
    dirty: bool,
    /// Leases the dead-man switch removed since the agent started (`GET /metrics`).
    expired_total: u64,
    /// The highest gateway epoch seen (persisted).
    fence_epoch: u64,
    /// Requests refused for an older epoch since the agent started (`GET /metrics`).
    fenced_total: u64,
    /// Caps re-applied on a held GPU whose limit had moved (a driver reload or reset, someone
    /// else's set), per GPU UUID, since the agent started (`GET /metrics`, `GET /v1/gpus`).
    drift_corrections: BTreeMap<String, u64>,
    /// When each held GPU's cap was last re-applied, within [`DRIFT_WINDOW`]: repeated drift
    /// marks the cap unreliable ([`LeaseBook::cap_unreliable`]).
    drift_times: BTreeMap<String, std::collections::VecDeque<DateTime<Utc>>>,
    /// The back-off of each pending restore that has failed (not persisted).
    restore_retries: BTreeMap<String, RetryState>,
    /// The node's boot id the state belongs to (persisted).
    boot_id: Option<String>,
}

/// How many re-applications within [`DRIFT_WINDOW`] make a GPU's cap unreliable: the same
/// threshold as the `FlexgateAgentCapDrift` alert (deploy/prometheus/flexgate-alerts.yml), so the
/// gateway stops trusting the cap when the operator is paged about it.
pub const DRIFT_UNRELIABLE_COUNT: usize = 3;

/// The window [`DRIFT_UNRELIABLE_COUNT`] is counted over.
pub const DRIFT_WINDOW: TimeDelta = TimeDelta::minutes(15);

fn w_to_mw(w: f64) -> u32 {
    // Inputs are validated: finite, 0..=MAX_CAP_W (1e8 mW fits u32).
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mw = (w * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32;
    mw
}

/// The requested limit to write for a cap of `cap_w` on `info`, given the GPU's limits now, and
/// whether it differs from what was asked.
fn plan_target(info: &GpuInfo, cap_w: f64, now: Limits) -> (u32, bool) {
    let asked = w_to_mw(cap_w);
    let mut target = asked.clamp(info.min_mw, info.max_mw);
    // enforced < requested means another limiter (BMC, SMBPBI) sits at `enforced`: never ask for
    // more than that, so the gateway sees that the GPU cannot go higher.
    if now.enforced_mw < now.requested_mw && target > now.enforced_mw {
        target = now.enforced_mw.clamp(info.min_mw, info.max_mw);
    }
    (target, target != asked)
}

impl LeaseBook {
    /// An empty book for these GPUs.
    #[must_use]
    pub fn new(gpus: &[GpuInfo], max_ttl: TimeDelta) -> Self {
        Self {
            gpus: gpus.to_vec(),
            leases: BTreeMap::new(),
            baselines: BTreeMap::new(),
            deleted: BTreeMap::new(),
            max_ttl,
            max_leases: DEFAULT_MAX_LEASES,
            dirty: false,
            expired_total: 0,
            fence_epoch: 0,
            fenced_total: 0,
            drift_corrections: BTreeMap::new(),
            drift_times: BTreeMap::new(),
            restore_retries: BTreeMap::new(),
            boot_id: None,
        }
    }

    /// A book restored from a persisted state, checked at `now` against the limits the API
    /// enforces, with the leases it refused. Call [`LeaseBook::reconcile_all`] next, so that
    /// valid leases are re-applied and expired or refused ones restored.
    ///
    /// A refused lease ([`check_loaded`]) is dropped without a tombstone, exactly as if it had
    /// expired: its GPUs go back to their pre-event limits, and a gateway that still wants the cap
    /// re-creates the lease under the same generation. A held GPU without a saved pre-event limit
    /// (only a hand-edited file has one) gets its default limit as the one to restore, the limit
    /// it would have after a driver reload, so that no cap is left on with nothing to restore.
    /// A tombstone dated in the future is moved to `now`, so it ages out.
    pub fn from_state(
        state: PersistedState,
        gpus: &[GpuInfo],
        max_ttl: TimeDelta,
        now: DateTime<Utc>,
    ) -> Result<(Self, Vec<RefusedLease>), LoadError> {
        if state.version != STATE_VERSION {
            return Err(LoadError::Version(state.version));
        }
        let mut book = Self::new(gpus, max_ttl);
        let mut refused = Vec::new();
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for lease in &state.leases {
            *seen.entry(lease.id.clone()).or_default() += 1;
        }
        let mut dropped_holds: Vec<String> = Vec::new();
        for lease in state.leases {
            let check = if seen.get(&lease.id).copied().unwrap_or(0) > 1 {
                Err(format!(
                    "lease id {} appears more than once, so no copy can be trusted",
                    lease.id
                ))
            } else {
                check_loaded(&lease, now, max_ttl)
            };
            match check {
                Ok(()) => {
                    book.leases.insert(lease.id.clone(), lease);
                }
                Err(reason) => {
                    dropped_holds.extend(lease.holds.keys().cloned());
                    refused.push(RefusedLease {
                        id: lease.id,
                        generation: lease.generation,
                        expires_at: lease.expires_at,
                        gpus: lease.holds.into_keys().collect(),
                        reason,
                    });
                }
            }
        }
        book.baselines = state.baselines;
        book.deleted = state.deleted;
        book.fence_epoch = state.fence_epoch;
        book.boot_id = state.boot_id;
        for t in book.deleted.values_mut() {
            if t.deleted_at > now {
                t.deleted_at = now;
                book.dirty = true;
            }
        }
        let held: Vec<String> = book
            .leases
            .values()
            .flat_map(|l| l.holds.keys().cloned())
            .chain(dropped_holds)
            .collect();
        for uuid in held {
            if book.baselines.contains_key(&uuid) {
                continue;
            }
            if let Some(default_mw) = book.info(&uuid).map(|i| i.default_mw) {
                tracing::warn!(gpu = %uuid, default_mw,
                    "state holds a cap on this GPU but no pre-event limit; its default limit will be restored");
                book.baselines.insert(uuid, default_mw);
                book.dirty = true;
            }
        }
        for uuid in book.baselines.keys() {
            if book.info(uuid).is_none() {
                tracing::warn!(gpu = %uuid, "state holds a pre-event limit for a GPU this node does not have; keeping it");
            }
        }
        if !refused.is_empty() {
            // Journal the cleaned state at the next reconcile, so the refused lease is not read
            // again at the next start (its details are in the log).
            book.dirty = true;
        }
        Ok((book, refused))
    }

    /// Limit the number of leases held at once.
    pub fn set_max_leases(&mut self, max: usize) {
        self.max_leases = max;
    }

    /// The state to persist.
    #[must_use]
    pub fn snapshot(&self) -> PersistedState {
        PersistedState {
            version: STATE_VERSION,
            leases: self.leases.values().cloned().collect(),
            baselines: self.baselines.clone(),
            deleted: self.deleted.clone(),
            fence_epoch: self.fence_epoch,
            boot_id: self.boot_id.clone(),
        }
    }

    /// Record the node's boot id `boot_id` (`None`: unknown, nothing changes) and, when the
    /// state was saved under another one, act on the reboot: the driver came up with its
    /// defaults or what the site's boot scripts set, so a saved pre-event limit is stale.
    /// Writing it back would impose an old value, not restore one. For each saved pre-event
    /// limit: a GPU no lease valid at `now` holds has it dropped (nothing to restore); a GPU a
    /// valid lease still holds has it read again from its limit now (the limit in force before
    /// the lease's cap is re-applied), or its default limit if it cannot be read. Call it after
    /// [`LeaseBook::from_state`] and before [`LeaseBook::reconcile_all`]. The change is
    /// journaled at the next persist.
    pub fn note_boot(
        &mut self,
        boot_id: Option<&str>,
        now: DateTime<Utc>,
        gpus: &dyn GpuControl,
    ) -> Option<RebootReport> {
        let boot_id = boot_id?;
        let previous = match self.boot_id.as_deref() {
            Some(b) if b == boot_id => return None,
            Some(b) => b.to_owned(),
            None => {
                // A fresh state, or one written before boot ids were recorded: nothing to
                // compare with.
                self.boot_id = Some(boot_id.to_owned());
                self.dirty = true;
                return None;
            }
        };
        let mut report = RebootReport {
            previous_boot_id: previous,
            boot_id: boot_id.to_owned(),
            dropped: Vec::new(),
            recaptured: Vec::new(),
        };
        let held_validly = |book: &Self, uuid: &str| {
            book.leases
                .values()
                .any(|l| l.expires_at > now && l.holds.contains_key(uuid))
        };
        let saved: Vec<(String, u32)> = self.baselines.iter().map(|(u, mw)| (u.clone(), *mw)).collect();
        for (uuid, was) in saved {
            if held_validly(self, &uuid) {
                let Some(info) = self.info(&uuid).cloned() else {
                    continue;
                };
                let now_mw = match gpus.limits(info.index) {
                    Ok(l) => l.requested_mw,
                    Err(e) => {
                        tracing::warn!(gpu = %uuid, error = %e, default_mw = info.default_mw,
                            "after the reboot this held GPU's limit cannot be read; its default limit becomes the one to restore");
                        info.default_mw
                    }
                };
                self.baselines.insert(uuid.clone(), now_mw);
                report.recaptured.push((uuid, was, now_mw));
            } else {
                self.baselines.remove(&uuid);
                self.restore_retries.remove(&uuid);
                report.dropped.push((uuid, was));
            }
        }
        self.boot_id = Some(boot_id.to_owned());
        self.dirty = true;
        Some(report)
    }

    /// The boot id the state belongs to.
    #[must_use]
    pub fn boot_id(&self) -> Option<&str> {
        self.boot_id.as_deref()
    }

    /// The pending restores that have failed, with their back-off, for `/v1/health`.
    #[must_use]
    pub fn restore_retries(&self) -> Vec<api::RestoreRetry> {
        self.restore_retries
            .iter()
            .map(|(uuid, r)| api::RestoreRetry {
                uuid: uuid.clone(),
                failures: r.failures,
                status: r.status,
                next_attempt_at: r.next_at,
            })
            .collect()
    }

    /// Keep a GPU's restore back-off in step with what `reconcile_one` just did at `now`: a
    /// held GPU is no restore; a restore done clears it; a restore still pending counts one
    /// more failure and is put off by [`restore_backoff`].
    fn note_restore(&mut self, uuid: &str, outcome: &GpuOutcome, now: DateTime<Utc>) {
        if self.is_held(uuid) {
            self.restore_retries.remove(uuid);
            return;
        }
        if !self.baselines.contains_key(uuid) {
            if let Some(r) = self.restore_retries.remove(uuid) {
                tracing::info!(gpu = %uuid, failures = r.failures, "pre-event limit restored after failed tries");
            }
            return;
        }
        let failures = self
            .restore_retries
            .get(uuid)
            .map_or(0, |r| r.failures)
            .saturating_add(1);
        let status = if outcome.status.is_applied() {
            CapStatus::NotApplied
        } else {
            outcome.status
        };
        let delay = restore_backoff(failures);
        let next_at = now + delay;
        tracing::warn!(gpu = %uuid, failures, status = ?status, retry_in_ms = delay.num_milliseconds(),
            "restore of the pre-event limit failed; retrying with back-off (the other GPUs are not held up)");
        self.restore_retries.insert(
            uuid.to_owned(),
            RetryState {
                failures,
                status,
                next_at,
            },
        );
    }

    /// Fencing: admit a command sent under gateway epoch `epoch` (0 when the gateway sends
    /// none, as a single gateway does), or refuse it because a later epoch has been seen. A
    /// higher epoch is journaled before the command is applied, so that after a crash and
    /// restart the agent still refuses the deposed leader; if it cannot be journaled, nothing
    /// is applied. Every command that can change a cap passes through here first.
    pub fn admit_epoch(&mut self, epoch: u64, journal: &mut dyn Journal) -> Result<(), LeaseError> {
        if epoch < self.fence_epoch {
            self.fenced_total += 1;
            return Err(LeaseError::Fenced {
                epoch,
                highest: self.fence_epoch,
            });
        }
        if epoch > self.fence_epoch {
            let mut next = self.snapshot();
            next.fence_epoch = epoch;
            journal.save(&next)?;
            self.fence_epoch = epoch;
        }
        Ok(())
    }

    /// The highest gateway epoch seen.
    #[must_use]
    pub fn fence_epoch(&self) -> u64 {
        self.fence_epoch
    }

    /// Commands refused for an older epoch since the agent started.
    #[must_use]
    pub fn fenced_total(&self) -> u64 {
        self.fenced_total
    }

    /// True when nothing is held or pending, so the watchdog can skip its pass.
    #[must_use]
    pub fn is_idle(&self) -> bool {
        self.leases.is_empty() && self.baselines.is_empty()
    }

    /// Leases the dead-man switch removed since the agent started.
    #[must_use]
    pub fn expired_total(&self) -> u64 {
        self.expired_total
    }

    /// Leases held now.
    #[must_use]
    pub fn held(&self) -> usize {
        self.leases.len()
    }

    /// The leases held, for `/v1/health`.
    #[must_use]
    pub fn summaries(&self) -> Vec<LeaseSummary> {
        self.leases
            .values()
            .map(|l| LeaseSummary {
                id: l.id.clone(),
                generation: l.generation,
                expires_at: l.expires_at,
                gpus: l.holds.keys().cloned().collect(),
                new_job_cap_w: l.new_job_cap_w,
            })
            .collect()
    }

    /// The lease with this id.
    #[must_use]
    pub fn lease(&self, id: &str) -> Option<&Lease> {
        self.leases.get(id)
    }

    /// Ids of the leases holding this GPU.
    #[must_use]
    pub fn held_by(&self, uuid: &str) -> Vec<String> {
        self.leases
            .values()
            .filter(|l| l.holds.contains_key(uuid))
            .map(|l| l.id.clone())
            .collect()
    }

    /// The saved pre-event limit of this GPU, mW.
    #[must_use]
    pub fn baseline_mw(&self, uuid: &str) -> Option<u32> {
        self.baselines.get(uuid).copied()
    }

    /// GPUs no lease holds whose pre-event limit is not restored yet.
    #[must_use]
    pub fn pending_restore(&self) -> Vec<String> {
        self.baselines.keys().filter(|u| !self.is_held(u)).cloned().collect()
    }

    /// The requested limit the book wants on this GPU, mW: the lowest cap of the leases holding
    /// it, else its pre-event limit if one is saved, else nothing.
    #[must_use]
    pub fn desired_mw(&self, uuid: &str) -> Option<u32> {
        self.leases
            .values()
            .filter_map(|l| l.holds.get(uuid).map(|h| h.target_mw))
            .min()
            .or_else(|| self.baselines.get(uuid).copied())
    }

    fn info(&self, uuid: &str) -> Option<&GpuInfo> {
        self.gpus.iter().find(|g| g.uuid == uuid)
    }

    fn is_held(&self, uuid: &str) -> bool {
        self.leases.values().any(|l| l.holds.contains_key(uuid))
    }

    fn persist(&mut self, journal: &mut dyn Journal) -> Result<(), JournalError> {
        journal.save(&self.snapshot())?;
        self.dirty = false;
        Ok(())
    }

    /// Persist after GPU writes; a failure here is logged, not returned: the intent was already
    /// journaled before the writes, and the caps are in force.
    fn persist_after(&mut self, journal: &mut dyn Journal) {
        if let Err(e) = self.persist(journal) {
            tracing::error!(error = %e, "lease state not persisted after applying; will retry on the next change");
        }
    }

    /// Move one GPU to its desired limit and, if no lease holds it any more and the restore
    /// worked, forget its pre-event limit.
    fn reconcile_one(&mut self, uuid: &str, gpus: &dyn GpuControl) -> GpuOutcome {
        let Some(info) = self.info(uuid).cloned() else {
            return GpuOutcome {
                limits: None,
                status: CapStatus::UnknownGpu,
            };
        };
        let held = self.is_held(uuid);
        let desired = self.desired_mw(uuid);
        let current = match gpus.limits(info.index) {
            Ok(l) => l,
            Err(e) => {
                return GpuOutcome {
                    limits: None,
                    status: e.status(),
                };
            }
        };
        let Some(desired) = desired else {
            return GpuOutcome {
                limits: Some(current),
                status: CapStatus::Ok,
            };
        };
        // A state file from another GPU model could hold an out-of-range value.
        let desired = desired.clamp(info.min_mw, info.max_mw);
        let mut limits = current;
        if current.requested_mw != desired {
            if let Err(e) = gpus.set_limit(info.index, desired) {
                tracing::warn!(gpu = %uuid, desired_mw = desired, error = %e, held, "could not set the power limit");
                return GpuOutcome {
                    limits: Some(current),
                    status: e.status(),
                };
            }
            // A read-back that fails (or answers a limit the GPU cannot hold) right after a
            // successful write confirms nothing: the cap is not reported in force, and a
            // restore stays pending.
            limits = match gpus.limits(info.index) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(gpu = %uuid, desired_mw = desired, error = %e, held,
                        "the power limit was set but cannot be read back: not confirmed");
                    return GpuOutcome {
                        limits: None,
                        status: e.status(),
                    };
                }
            };
            // Confirmed only by reading back: a driver can answer success and leave the limit
            // where it was (or move it to a value of its own). A cap not in force is reported,
            // and a restore not in force stays pending (its pre-event limit is kept and retried).
            if limits.requested_mw != desired {
                tracing::warn!(gpu = %uuid, desired_mw = desired, read_back_mw = limits.requested_mw,
                    enforced_mw = limits.enforced_mw, held,
                    "the driver accepted the power limit but reads back another one: not in force");
                return GpuOutcome {
                    limits: Some(limits),
                    status: CapStatus::NotApplied,
                };
            }
            tracing::info!(gpu = %uuid, from_mw = current.requested_mw, to_mw = desired, enforced_mw = limits.enforced_mw,
                restore = !held, "power limit set");
        }
        if !held && self.baselines.remove(uuid).is_some() {
            self.dirty = true;
        }
        GpuOutcome {
            limits: Some(limits),
            status: CapStatus::Ok,
        }
    }

    /// After writing: if the GPU enforces less than the requested limit (an out-of-band limiter
    /// that was hidden before, e.g. because a lease already held the GPU lower), lower this
    /// lease's target to the enforced limit, so the agent never asks for more than the GPU can
    /// give and the answer says `clamped`.
    fn settle_oob(&mut self, lease_id: &str, uuid: &str, outcome: GpuOutcome, gpus: &dyn GpuControl) -> GpuOutcome {
        let Some(limits) = outcome
            .limits
            .filter(|l| outcome.status.is_applied() && l.enforced_mw < l.requested_mw)
        else {
            return outcome;
        };
        let Some(info) = self.info(uuid).cloned() else {
            return outcome;
        };
        let Some(hold) = self.leases.get_mut(lease_id).and_then(|l| l.holds.get_mut(uuid)) else {
            return outcome;
        };
        let lowered = limits.enforced_mw.clamp(info.min_mw, info.max_mw);
        if hold.target_mw <= lowered {
            return outcome;
        }
        hold.target_mw = lowered;
        hold.clamped = true;
        self.dirty = true;
        self.reconcile_one(uuid, gpus)
    }

    /// Bring each GPU to its desired limit now (a request: no back-off waits), keeping the
    /// restore back-off in step.
    fn reconcile_set(
        &mut self,
        uuids: &BTreeSet<String>,
        gpus: &dyn GpuControl,
        now: DateTime<Utc>,
    ) -> BTreeMap<String, GpuOutcome> {
        uuids
            .iter()
            .map(|u| {
                let outcome = self.reconcile_one(u, gpus);
                self.note_restore(u, &outcome, now);
                (u.clone(), outcome)
            })
            .collect()
    }

    /// Remove a failed hold. If that leaves the GPU unheld and its pre-event limit was captured
    /// by this operation, put that limit back at once: a failed cap may still have moved the
    /// limit (a driver that clamps, a set that landed after its deadline), so the pre-event
    /// limit is forgotten only once the GPU reads it back, and otherwise stays a pending restore.
    fn drop_failed_hold(
        &mut self,
        lease_id: &str,
        uuid: &str,
        captured: &BTreeSet<String>,
        gpus: &dyn GpuControl,
        now: DateTime<Utc>,
    ) {
        if let Some(l) = self.leases.get_mut(lease_id) {
            l.holds.remove(uuid);
        }
        if captured.contains(uuid) && !self.is_held(uuid) {
            let outcome = self.reconcile_one(uuid, gpus);
            self.note_restore(uuid, &outcome, now);
        }
        self.dirty = true;
    }

    /// Remove leases whose deadline has passed (without touching GPUs) and old tombstones;
    /// returns the removed leases.
    fn remove_expired(&mut self, now: DateTime<Utc>) -> Vec<Lease> {
        let expired: Vec<String> = self
            .leases
            .values()
            .filter(|l| l.expires_at <= now)
            .map(|l| l.id.clone())
            .collect();
        let removed: Vec<Lease> = expired.iter().filter_map(|id| self.leases.remove(id)).collect();
        self.expired_total += removed.len() as u64;
        let horizon = now - self.max_ttl;
        let before = self.deleted.len();
        self.deleted.retain(|_, t| t.deleted_at > horizon);
        while self.deleted.len() > MAX_TOMBSTONES {
            let oldest = self
                .deleted
                .iter()
                .min_by_key(|(_, t)| t.deleted_at)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => self.deleted.remove(&id),
                None => break,
            };
        }
        if !removed.is_empty() || self.deleted.len() != before {
            self.dirty = true;
        }
        for l in &removed {
            tracing::info!(lease = %l.id, generation = l.generation, expires_at = %l.expires_at.to_rfc3339(),
                "lease expired (dead-man switch); restoring its GPUs");
        }
        removed
    }

    /// The watchdog pass: expire leases, then bring every GPU the book cares about to its desired
    /// limit (restores after expiry, retries of failed restores, re-application after a GPU reset
    /// or agent restart). Persists if anything changed.
    pub fn reconcile_all(
        &mut self,
        now: DateTime<Utc>,
        gpus: &dyn GpuControl,
        journal: &mut dyn Journal,
    ) -> TickReport {
        let expired = self.remove_expired(now);
        if !expired.is_empty() {
            // Journal the removal first: if the agent dies mid-restore, the restart restores.
            if let Err(e) = self.persist(journal) {
                tracing::error!(error = %e, "expiry not persisted; restoring anyway");
            }
        }
        let mut uuids: BTreeSet<String> = self.baselines.keys().cloned().collect();
        for l in self.leases.values() {
            uuids.extend(l.holds.keys().cloned());
        }
        let mut report = TickReport {
            expired: expired.into_iter().map(|l| l.id).collect(),
            ..TickReport::default()
        };
        for uuid in &uuids {
            let held = self.is_held(uuid);
            // A failed restore waits out its back-off; the others go on.
            if !held && self.restore_retries.get(uuid).is_some_and(|r| now < r.next_at) {
                continue;
            }
            let before = self
                .info(uuid)
                .and_then(|i| gpus.limits(i.index).ok())
                .map(|l| l.requested_mw);
            let outcome = self.reconcile_one(uuid, gpus);
            self.note_restore(uuid, &outcome, now);
            if outcome.status.is_applied() {
                if outcome.limits.map(|l| l.requested_mw) != before {
                    report.written.push(uuid.clone());
                    if held {
                        // The cap was in force and its limit moved: say so, every time.
                        let count = self.drift_corrections.entry(uuid.clone()).or_insert(0);
                        *count += 1;
                        let times = self.drift_times.entry(uuid.clone()).or_default();
                        times.push_back(now);
                        while times.front().is_some_and(|t| *t <= now - DRIFT_WINDOW) {
                            times.pop_front();
                        }
                        tracing::warn!(gpu = %uuid, from_mw = ?before, corrections = *count,
                            "a held GPU's power limit had moved (driver reload or reset, or another tool's set): cap re-applied");
                    }
                }
            } else {
                report.failed.push((uuid.clone(), outcome.status));
            }
        }
        if self.dirty {
            self.persist_after(journal);
        }
        report
    }

    /// True when this GPU's cap had to be re-applied [`DRIFT_UNRELIABLE_COUNT`] times within
    /// [`DRIFT_WINDOW`] before `now`: something keeps resetting its limit (a driver that unloads
    /// between jobs without persistence mode, a BMC, another tool), so between re-applications
    /// the GPU may draw uncapped. The gateway treats such a cap as unconfirmed and plans around
    /// it; the agent keeps re-applying it.
    #[must_use]
    pub fn cap_unreliable(&self, uuid: &str, now: DateTime<Utc>) -> bool {
        self.drift_times
            .get(uuid)
            .is_some_and(|t| t.iter().filter(|t| **t > now - DRIFT_WINDOW).count() >= DRIFT_UNRELIABLE_COUNT)
    }

    /// Drift corrections per GPU UUID since the agent started.
    #[must_use]
    pub fn drift_corrections(&self) -> &BTreeMap<String, u64> {
        &self.drift_corrections
    }

    /// `PUT /v1/leases/{id}`: create, repeat, or replace a lease. See the module docs.
    pub fn put(
        &mut self,
        id: &str,
        req: &LeaseRequest,
        now: DateTime<Utc>,
        gpus: &dyn GpuControl,
        journal: &mut dyn Journal,
    ) -> Result<LeaseResponse, LeaseError> {
        api::validate_id("lease", id)?;
        req.validate(now, self.max_ttl)?;
        self.reconcile_expired(now, gpus, journal);
        if let Some(held) = self.leases.get(id) {
            if req.generation < held.generation {
                return Err(LeaseError::StaleGeneration {
                    id: id.to_owned(),
                    requested: req.generation,
                    held: held.generation,
                });
            }
            if req.generation == held.generation {
                if let Some(difference) = body_difference(held, req) {
                    tracing::warn!(lease = %id, generation = req.generation, %difference,
                        "same generation with other caps refused; the lease keeps the caps it holds");
                    return Err(LeaseError::GenerationConflict {
                        id: id.to_owned(),
                        generation: req.generation,
                        difference,
                    });
                }
                let mut answer = held.response.clone();
                answer.expires_at = held.expires_at;
                return Ok(answer);
            }
        } else {
            if let Some(t) = self.deleted.get(id)
                && req.generation <= t.generation
            {
                return Err(LeaseError::Deleted {
                    id: id.to_owned(),
                    deleted: t.generation,
                });
            }
            if self.leases.len() >= self.max_leases {
                return Err(LeaseError::TooManyLeases(self.leases.len()));
            }
        }
        let backup = self.clone();

        // Plan: read each GPU (no writes yet), capture pre-event limits, compute targets.
        enum Entry {
            Unknown,
            Unreadable(CapStatus),
            Planned(String),
        }
        let mut entries = Vec::with_capacity(req.gpus.len());
        let mut holds = BTreeMap::new();
        let mut captured = BTreeSet::new();
        for cap in &req.gpus {
            let Some(info) = self.info(&cap.uuid).cloned() else {
                entries.push(Entry::Unknown);
                continue;
            };
            match gpus.limits(info.index) {
                Err(e) => entries.push(Entry::Unreadable(e.status())),
                Ok(current) => {
                    let (target_mw, clamped) = plan_target(&info, cap.cap_w, current);
                    if !self.baselines.contains_key(&cap.uuid) {
                        self.baselines.insert(cap.uuid.clone(), current.requested_mw);
                        captured.insert(cap.uuid.clone());
                    }
                    holds.insert(
                        cap.uuid.clone(),
                        Hold {
                            requested_w: cap.cap_w,
                            target_mw,
                            clamped,
                            job: None,
                        },
                    );
                    entries.push(Entry::Planned(cap.uuid.clone()));
                }
            }
        }
        let old = self.leases.remove(id);
        let mut affected: BTreeSet<String> = holds.keys().cloned().collect();
        if let Some(old) = &old {
            affected.extend(old.holds.keys().cloned());
            // GPUs that joined through a job start stay if the new generation still caps new jobs.
            if let Some(job_cap) = req.new_job_cap_w {
                let kept: Vec<(&String, &Hold)> = old
                    .holds
                    .iter()
                    .filter(|(u, h)| h.job.is_some() && !holds.contains_key(*u))
                    .collect();
                for (uuid, hold) in kept {
                    let Some(info) = self.info(uuid).cloned() else { continue };
                    let Ok(current) = gpus.limits(info.index) else { continue };
                    let (target_mw, clamped) = plan_target(&info, job_cap, current);
                    holds.insert(
                        uuid.clone(),
                        Hold {
                            requested_w: job_cap,
                            target_mw,
                            clamped,
                            job: hold.job.clone(),
                        },
                    );
                }
            }
        }
        self.deleted.remove(id);
        self.leases.insert(
            id.to_owned(),
            Lease {
                id: id.to_owned(),
                generation: req.generation,
                expires_at: req.expires_at,
                new_job_cap_w: req.new_job_cap_w,
                holds,
                asked: Some(req.gpus.clone()),
                response: LeaseResponse {
                    lease_id: id.to_owned(),
                    generation: req.generation,
                    expires_at: req.expires_at,
                    applied: Vec::new(),
                },
            },
        );
        self.dirty = true;
        if let Err(e) = self.persist(journal) {
            *self = backup;
            return Err(e.into());
        }

        // Apply.
        let mut outcomes = self.reconcile_set(&affected, gpus, now);
        for entry in &entries {
            if let Entry::Planned(uuid) = entry
                && let Some(o) = outcomes.get(uuid).copied()
            {
                outcomes.insert(uuid.clone(), self.settle_oob(id, uuid, o, gpus));
            }
        }
        let mut applied = Vec::with_capacity(req.gpus.len());
        for (cap, entry) in req.gpus.iter().zip(entries) {
            let result = match entry {
                Entry::Unknown => AppliedCap {
                    uuid: cap.uuid.clone(),
                    requested_w: cap.cap_w,
                    applied_w: None,
                    enforced_w: None,
                    status: CapStatus::UnknownGpu,
                },
                Entry::Unreadable(status) => AppliedCap {
                    uuid: cap.uuid.clone(),
                    requested_w: cap.cap_w,
                    applied_w: None,
                    enforced_w: None,
                    status,
                },
                Entry::Planned(uuid) => {
                    let o = outcomes.get(&uuid).copied().unwrap_or(GpuOutcome {
                        limits: None,
                        status: CapStatus::Failed,
                    });
                    let clamped = self
                        .leases
                        .get(id)
                        .and_then(|l| l.holds.get(&uuid))
                        .is_some_and(|h| h.clamped);
                    let status = if !o.status.is_applied() {
                        self.drop_failed_hold(id, &uuid, &captured, gpus, now);
                        o.status
                    } else if clamped {
                        CapStatus::Clamped
                    } else {
                        CapStatus::Ok
                    };
                    AppliedCap {
                        uuid,
                        requested_w: cap.cap_w,
                        applied_w: o.limit_w(),
                        enforced_w: o.enforced_w(),
                        status,
                    }
                }
            };
            applied.push(result);
        }
        let response = LeaseResponse {
            lease_id: id.to_owned(),
            generation: req.generation,
            expires_at: req.expires_at,
            applied,
        };
        if let Some(l) = self.leases.get_mut(id) {
            l.response = response.clone();
        }
        self.persist_after(journal);
        Ok(response)
    }

    /// `POST /v1/leases/{id}/renew`: move the deadline.
    pub fn renew(
        &mut self,
        id: &str,
        req: &RenewRequest,
        now: DateTime<Utc>,
        gpus: &dyn GpuControl,
        journal: &mut dyn Journal,
    ) -> Result<LeaseSummary, LeaseError> {
        api::validate_id("lease", id)?;
        api::validate_expiry(req.expires_at, now, self.max_ttl)?;
        self.reconcile_expired(now, gpus, journal);
        if !self.leases.contains_key(id) {
            return Err(LeaseError::NotFound(id.to_owned()));
        }
        let backup = self.clone();
        if let Some(l) = self.leases.get_mut(id) {
            l.expires_at = req.expires_at;
            l.response.expires_at = req.expires_at;
        }
        self.dirty = true;
        if let Err(e) = self.persist(journal) {
            *self = backup;
            return Err(e.into());
        }
        self.summaries()
            .into_iter()
            .find(|s| s.id == id)
            .ok_or_else(|| LeaseError::NotFound(id.to_owned()))
    }

    /// `DELETE /v1/leases/{id}`: end the lease and restore what no other lease holds. A missing
    /// lease is a harmless repeat (`deleted: false`).
    pub fn delete(
        &mut self,
        id: &str,
        now: DateTime<Utc>,
        gpus: &dyn GpuControl,
        journal: &mut dyn Journal,
    ) -> Result<ReleaseResponse, LeaseError> {
        api::validate_id("lease", id)?;
        self.reconcile_expired(now, gpus, journal);
        if !self.leases.contains_key(id) {
            return Ok(ReleaseResponse {
                lease_id: id.to_owned(),
                deleted: false,
                restored: Vec::new(),
            });
        }
        let backup = self.clone();
        let Some(lease) = self.leases.remove(id) else {
            return Ok(ReleaseResponse {
                lease_id: id.to_owned(),
                deleted: false,
                restored: Vec::new(),
            });
        };
        self.deleted.insert(
            id.to_owned(),
            Tombstone {
                generation: lease.generation,
                deleted_at: now,
            },
        );
        self.dirty = true;
        if let Err(e) = self.persist(journal) {
            *self = backup;
            return Err(e.into());
        }
        let affected: BTreeSet<String> = lease.holds.keys().cloned().collect();
        let outcomes = self.reconcile_set(&affected, gpus, now);
        self.persist_after(journal);
        tracing::info!(lease = %id, generation = lease.generation, gpus = affected.len(), "lease deleted");
        Ok(ReleaseResponse {
            lease_id: id.to_owned(),
            deleted: true,
            restored: outcomes
                .into_iter()
                .map(|(uuid, o)| GpuLimit {
                    uuid,
                    limit_w: o.limit_w(),
                    enforced_w: o.enforced_w(),
                    status: o.status,
                })
                .collect(),
        })
    }

    fn by_minor(&self, index: u32) -> Option<GpuInfo> {
        self.gpus.iter().find(|g| g.minor == index).cloned()
    }

    /// `POST /v1/jobs/{job_id}/start` (Slurm prolog): cap the job's GPUs at `new_job_cap_w` of
    /// every active lease that sets one, and make them part of those leases.
    pub fn job_start(
        &mut self,
        job_id: &str,
        req: &JobRequest,
        now: DateTime<Utc>,
        gpus: &dyn GpuControl,
        journal: &mut dyn Journal,
    ) -> Result<JobResponse, LeaseError> {
        api::validate_id("job", job_id)?;
        req.validate()?;
        self.reconcile_expired(now, gpus, journal);
        let capping: Vec<(String, f64)> = self
            .leases
            .values()
            .filter_map(|l| l.new_job_cap_w.map(|c| (l.id.clone(), c)))
            .collect();
        let backup = self.clone();
        let mut captured = BTreeSet::new();
        let mut new_holds: Vec<(String, String)> = Vec::new(); // (lease, uuid)
        let mut read_errors = BTreeMap::new();
        let job_gpus = if capping.is_empty() { &[][..] } else { &req.gpus[..] };
        for &index in job_gpus {
            let Some(info) = self.by_minor(index) else { continue };
            let current = match gpus.limits(info.index) {
                Ok(c) => c,
                Err(e) => {
                    read_errors.insert(index, e.status());
                    continue;
                }
            };
            for (lease_id, cap_w) in &capping {
                let Some(lease) = self.leases.get_mut(lease_id) else {
                    continue;
                };
                if lease.holds.contains_key(&info.uuid) {
                    continue;
                }
                let (target_mw, clamped) = plan_target(&info, *cap_w, current);
                lease.holds.insert(
                    info.uuid.clone(),
                    Hold {
                        requested_w: *cap_w,
                        target_mw,
                        clamped,
                        job: Some(job_id.to_owned()),
                    },
                );
                new_holds.push((lease_id.clone(), info.uuid.clone()));
            }
            if !self.baselines.contains_key(&info.uuid) && new_holds.iter().any(|(_, u)| *u == info.uuid) {
                self.baselines.insert(info.uuid.clone(), current.requested_mw);
                captured.insert(info.uuid.clone());
            }
        }
        if !new_holds.is_empty() {
            self.dirty = true;
            if let Err(e) = self.persist(journal) {
                *self = backup;
                return Err(e.into());
            }
        }
        let affected: BTreeSet<String> = new_holds.iter().map(|(_, u)| u.clone()).collect();
        let mut outcomes = self.reconcile_set(&affected, gpus, now);
        for (lease_id, uuid) in &new_holds {
            if let Some(o) = outcomes.get(uuid).copied() {
                outcomes.insert(uuid.clone(), self.settle_oob(lease_id, uuid, o, gpus));
            }
        }
        let mut failed = BTreeSet::new();
        for (lease_id, uuid) in &new_holds {
            if outcomes.get(uuid).is_some_and(|o| !o.status.is_applied()) {
                self.drop_failed_hold(lease_id, uuid, &captured, gpus, now);
                failed.insert(uuid.clone());
            }
        }
        if !new_holds.is_empty() {
            self.persist_after(journal);
            tracing::info!(job = %job_id, gpus = affected.len(), leases = capping.len(), "job started during a lease; GPUs capped");
        }
        let gpus_out = req
            .gpus
            .iter()
            .map(|&index| {
                let Some(info) = self.by_minor(index) else {
                    return JobGpu {
                        index,
                        uuid: None,
                        limit_w: None,
                        enforced_w: None,
                        status: CapStatus::UnknownGpu,
                    };
                };
                if let Some(&status) = read_errors.get(&index) {
                    return JobGpu {
                        index,
                        uuid: Some(info.uuid),
                        limit_w: None,
                        enforced_w: None,
                        status,
                    };
                }
                let outcome = outcomes.get(&info.uuid).copied().unwrap_or_else(|| GpuOutcome {
                    limits: gpus.limits(info.index).ok(),
                    status: CapStatus::Ok,
                });
                let clamped = new_holds.iter().any(|(l, u)| {
                    *u == info.uuid
                        && self
                            .leases
                            .get(l)
                            .and_then(|l| l.holds.get(u))
                            .is_some_and(|h| h.clamped)
                });
                let status = if !outcome.status.is_applied() {
                    outcome.status
                } else if clamped {
                    CapStatus::Clamped
                } else {
                    CapStatus::Ok
                };
                JobGpu {
                    index,
                    uuid: Some(info.uuid),
                    limit_w: outcome.limit_w(),
                    enforced_w: outcome.enforced_w(),
                    status,
                }
            })
            .collect();
        let mut lease_ids: Vec<String> = new_holds
            .iter()
            .filter(|(_, u)| !failed.contains(u))
            .map(|(l, _)| l.clone())
            .collect();
        lease_ids.sort();
        lease_ids.dedup();
        Ok(JobResponse {
            job_id: job_id.to_owned(),
            lease_ids,
            gpus: gpus_out,
        })
    }

    /// `POST /v1/jobs/{job_id}/end` (Slurm epilog): drop the job's GPUs from every lease and
    /// restore their pre-event limits.
    pub fn job_end(
        &mut self,
        job_id: &str,
        req: &JobRequest,
        now: DateTime<Utc>,
        gpus: &dyn GpuControl,
        journal: &mut dyn Journal,
    ) -> Result<JobResponse, LeaseError> {
        api::validate_id("job", job_id)?;
        req.validate()?;
        self.reconcile_expired(now, gpus, journal);
        let backup = self.clone();
        let mut affected = BTreeSet::new();
        let mut lease_ids = BTreeSet::new();
        for &index in &req.gpus {
            let Some(info) = self.by_minor(index) else { continue };
            for lease in self.leases.values_mut() {
                if lease.holds.remove(&info.uuid).is_some() {
                    lease_ids.insert(lease.id.clone());
                }
            }
            if self.baselines.contains_key(&info.uuid) {
                affected.insert(info.uuid.clone());
            }
        }
        if !lease_ids.is_empty() {
            self.dirty = true;
            if let Err(e) = self.persist(journal) {
                *self = backup;
                return Err(e.into());
            }
        }
        let outcomes = self.reconcile_set(&affected, gpus, now);
        if self.dirty {
            self.persist_after(journal);
        }
        if !affected.is_empty() {
            tracing::info!(job = %job_id, gpus = affected.len(), "job ended; GPUs restored to pre-event limits");
        }
        let gpus_out = req
            .gpus
            .iter()
            .map(|&index| {
                let Some(info) = self.by_minor(index) else {
                    return JobGpu {
                        index,
                        uuid: None,
                        limit_w: None,
                        enforced_w: None,
                        status: CapStatus::UnknownGpu,
                    };
                };
                let outcome = outcomes
                    .get(&info.uuid)
                    .copied()
                    .unwrap_or_else(|| match gpus.limits(info.index) {
                        Ok(l) => GpuOutcome {
                            limits: Some(l),
                            status: CapStatus::Ok,
                        },
                        Err(e) => GpuOutcome {
                            limits: None,
                            status: e.status(),
                        },
                    });
                JobGpu {
                    index,
                    uuid: Some(info.uuid),
                    limit_w: outcome.limit_w(),
                    enforced_w: outcome.enforced_w(),
                    status: outcome.status,
                }
            })
            .collect();
        Ok(JobResponse {
            job_id: job_id.to_owned(),
            lease_ids: lease_ids.into_iter().collect(),
            gpus: gpus_out,
        })
    }

    /// Expire leases before serving a request, so a request never sees a dead lease.
    fn reconcile_expired(&mut self, now: DateTime<Utc>, gpus: &dyn GpuControl, journal: &mut dyn Journal) {
        if self.leases.values().any(|l| l.expires_at <= now) {
            self.reconcile_all(now, gpus, journal);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{GpuBackend, RestorePolicy};
    use crate::gpu::{GpuError, Readings};
    use std::sync::Mutex;

    /// One GPU of [`Fake`]: its limit and the faults a test scripts.
    #[derive(Debug, Clone, Default)]
    struct FakeGpu {
        requested_mw: u32,
        /// Every set answers this error.
        set_error: Option<GpuError>,
        /// Every read answers this error.
        read_error: Option<GpuError>,
        /// The driver raises any limit set to at least this (0: none).
        clamp_mw: u32,
        /// Sets made (including failed ones).
        sets: u32,
    }

    /// A scripted driver: limits held in memory, faults per GPU.
    struct Fake {
        gpus: Vec<GpuInfo>,
        state: Mutex<Vec<FakeGpu>>,
    }

    impl Fake {
        fn new(n: u32) -> Self {
            Self {
                gpus: (0..n)
                    .map(|index| GpuInfo {
                        uuid: uuid(index),
                        index,
                        minor: index,
                        pci: String::new(),
                        name: "fake".into(),
                        min_mw: 200_000,
                        default_mw: 700_000,
                        max_mw: 700_000,
                    })
                    .collect(),
                state: Mutex::new(
                    (0..n)
                        .map(|_| FakeGpu {
                            requested_mw: 700_000,
                            ..FakeGpu::default()
                        })
                        .collect(),
                ),
            }
        }

        fn with<T>(&self, i: u32, f: impl FnOnce(&mut FakeGpu) -> T) -> T {
            let mut state = self.state.lock().expect("lock");
            f(&mut state[i as usize])
        }

        fn limit(&self, i: u32) -> u32 {
            self.with(i, |g| g.requested_mw)
        }

        fn sets(&self, i: u32) -> u32 {
            self.with(i, |g| g.sets)
        }
    }

    impl GpuControl for Fake {
        fn backend(&self) -> GpuBackend {
            GpuBackend::Simulated
        }
        fn gpus(&self) -> &[GpuInfo] {
            &self.gpus
        }
        fn limits(&self, index: u32) -> Result<Limits, GpuError> {
            self.with(index, |g| match &g.read_error {
                Some(e) => Err(e.clone()),
                None => Ok(Limits {
                    requested_mw: g.requested_mw,
                    enforced_mw: g.requested_mw,
                }),
            })
        }
        fn set_limit(&self, index: u32, limit_mw: u32) -> Result<(), GpuError> {
            self.with(index, |g| {
                g.sets += 1;
                if let Some(e) = &g.set_error {
                    return Err(e.clone());
                }
                g.requested_mw = limit_mw.max(g.clamp_mw);
                Ok(())
            })
        }
        fn readings(&self, _: u32) -> Result<Readings, GpuError> {
            Err(GpuError::NotSupported)
        }
    }

    fn uuid(i: u32) -> String {
        format!("GPU-fake-{i}")
    }

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_782_907_200, 0).unwrap_or_default()
    }

    fn at(ms: i64) -> DateTime<Utc> {
        t0() + TimeDelta::milliseconds(ms)
    }

    fn lease(gpus: &[(u32, f64)], expires_at: DateTime<Utc>) -> LeaseRequest {
        LeaseRequest {
            generation: 1,
            expires_at,
            gpus: gpus.iter().map(|&(i, cap_w)| GpuCap { uuid: uuid(i), cap_w }).collect(),
            restore: RestorePolicy::PreEvent,
            new_job_cap_w: None,
        }
    }

    #[test]
    fn the_restore_back_off_doubles_from_one_second_to_a_minute() {
        let s = |n| restore_backoff(n).num_seconds();
        assert_eq!(restore_backoff(0), TimeDelta::zero());
        assert_eq!((s(1), s(2), s(3), s(4), s(5), s(6)), (1, 2, 4, 8, 16, 32));
        assert_eq!((s(7), s(8), s(100), s(u32::MAX)), (60, 60, 60, 60));
        // Property: never decreasing, never above the cap, never below the first delay.
        for n in 1..1_000 {
            assert!(restore_backoff(n + 1) >= restore_backoff(n), "{n}");
            assert!(restore_backoff(n) <= RESTORE_BACKOFF_MAX, "{n}");
            assert!(restore_backoff(n) >= RESTORE_BACKOFF_FIRST, "{n}");
        }
    }

    /// A restore refused on GPU 1 is retried after 1, 2, 4 s, never blocking GPU 0's restore,
    /// which happens at once; once the driver takes it, GPU 1 is restored at its next try.
    #[test]
    fn a_failed_restore_backs_off_per_gpu_and_never_holds_the_others_up() {
        let fake = Fake::new(2);
        let mut book = LeaseBook::new(fake.gpus(), TimeDelta::hours(24));
        let j = &mut MemoryJournal;
        book.put("evt", &lease(&[(0, 300.0), (1, 300.0)], at(600_000)), at(0), &fake, j)
            .expect("put");
        fake.with(1, |g| g.set_error = Some(GpuError::NoPermission));
        let d = book.delete("evt", at(1_000), &fake, j).expect("deleted");
        assert_eq!(d.restored[0].status, CapStatus::Ok);
        assert_eq!(d.restored[1].status, CapStatus::NoPermission);
        assert_eq!((fake.limit(0), fake.limit(1)), (700_000, 300_000));
        assert_eq!(book.pending_restore(), vec![uuid(1)]);
        let retries = book.restore_retries();
        assert_eq!(
            (retries[0].failures, retries[0].status, retries[0].next_attempt_at),
            (1, CapStatus::NoPermission, at(2_000))
        );
        // Not due: no call at all on GPU 1.
        let sets = fake.sets(1);
        assert_eq!(book.reconcile_all(at(1_900), &fake, j), TickReport::default());
        assert_eq!(fake.sets(1), sets);
        // Due at 2 s: tried, failed, next at 2 + 2 s; then at 4 + 4 s.
        let r = book.reconcile_all(at(2_000), &fake, j);
        assert_eq!(r.failed, vec![(uuid(1), CapStatus::NoPermission)]);
        assert_eq!(book.restore_retries()[0].next_attempt_at, at(4_000));
        book.reconcile_all(at(3_000), &fake, j);
        assert_eq!(fake.sets(1), sets + 1, "not before 4 s");
        book.reconcile_all(at(4_000), &fake, j);
        assert_eq!(book.restore_retries()[0].next_attempt_at, at(8_000));
        // Meanwhile another lease on GPU 0 comes and goes: its restore is at once.
        book.put("evt2", &lease(&[(0, 250.0)], at(600_000)), at(5_000), &fake, j)
            .expect("put");
        assert_eq!(fake.limit(0), 250_000);
        book.delete("evt2", at(5_000), &fake, j).expect("deleted");
        assert_eq!(fake.limit(0), 700_000);
        // The permission comes back; GPU 1 is restored at its next try, 8 s.
        fake.with(1, |g| g.set_error = None);
        book.reconcile_all(at(7_999), &fake, j);
        assert_eq!(fake.limit(1), 300_000);
        let r = book.reconcile_all(at(8_000), &fake, j);
        assert_eq!(r.written, vec![uuid(1)]);
        assert_eq!(fake.limit(1), 700_000);
        assert!(book.is_idle());
        assert!(book.restore_retries().is_empty());
    }

    /// A request (a lease that takes the GPU again and is deleted) tries at once, whatever the
    /// back-off says; a held GPU has no back-off.
    #[test]
    fn a_request_restores_at_once_whatever_the_back_off() {
        let fake = Fake::new(1);
        let mut book = LeaseBook::new(fake.gpus(), TimeDelta::hours(24));
        let j = &mut MemoryJournal;
        book.put("a", &lease(&[(0, 300.0)], at(600_000)), at(0), &fake, j)
            .expect("put");
        fake.with(0, |g| g.set_error = Some(GpuError::GpuLost));
        for s in [0, 1, 3, 7, 15] {
            book.reconcile_all(at(s * 1_000), &fake, j);
        }
        book.delete("a", at(20_000), &fake, j).expect("deleted");
        for s in [21, 23, 27, 35] {
            book.reconcile_all(at(s * 1_000), &fake, j);
        }
        assert!(book.restore_retries()[0].failures >= 4);
        fake.with(0, |g| g.set_error = None);
        book.put("b", &lease(&[(0, 400.0)], at(600_000)), at(36_000), &fake, j)
            .expect("put");
        assert!(book.restore_retries().is_empty(), "a held GPU is no restore");
        book.delete("b", at(36_000), &fake, j).expect("deleted");
        assert_eq!(fake.limit(0), 700_000, "the pre-event limit, at once");
        assert!(book.is_idle());
    }

    /// Property: under any pattern of failures, every pending restore is tried exactly when its
    /// back-off is due (a model of the schedule, written from the rule, says when), each GPU on
    /// its own schedule, and one that is tried while the driver takes it ends restored.
    #[test]
    fn property_restores_are_tried_exactly_when_due_each_gpu_on_its_own_schedule() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _case in 0..200 {
            let n = 3;
            let fake = Fake::new(n);
            let mut book = LeaseBook::new(fake.gpus(), TimeDelta::hours(24));
            let j = &mut MemoryJournal;
            let all: Vec<(u32, f64)> = (0..n).map(|i| (i, 300.0)).collect();
            book.put("evt", &lease(&all, at(600_000)), at(0), &fake, j)
                .expect("put");
            // Each GPU fails with its own probability (0 %, some, most).
            let fail_pct: Vec<u64> = (0..n).map(|_| next() % 100).collect();
            let mut model: Vec<Option<(u32, DateTime<Utc>)>> = vec![None; n as usize];
            let mut pending: Vec<bool> = vec![true; n as usize];
            let mut now = at(0);
            let mut first = true;
            for _step in 0..60 {
                for i in 0..n {
                    let fails = next() % 100 < fail_pct[i as usize];
                    fake.with(i, |g| g.set_error = fails.then_some(GpuError::NoPermission));
                }
                let before: Vec<u32> = (0..n).map(|i| fake.sets(i)).collect();
                if first {
                    book.delete("evt", now, &fake, j).expect("deleted");
                    first = false;
                } else {
                    book.reconcile_all(now, &fake, j);
                }
                for i in 0..n {
                    let k = i as usize;
                    let tried = fake.sets(i) > before[k];
                    let due = pending[k] && model[k].is_none_or(|(_, next_at)| now >= next_at);
                    assert_eq!(
                        tried, due,
                        "GPU {i} at {now}: tried {tried}, due {due}, model {:?}",
                        model[k]
                    );
                    if tried {
                        if fake.limit(i) == 700_000 {
                            pending[k] = false;
                            model[k] = None;
                        } else {
                            let failures = model[k].map_or(0, |(f, _)| f) + 1;
                            model[k] = Some((failures, now + restore_backoff(failures)));
                        }
                    }
                    assert_eq!(book.pending_restore().contains(&uuid(i)), pending[k]);
                }
                // The watchdog's ticks: about a second apart, sometimes late.
                now += TimeDelta::milliseconds(500 + i64::try_from(next() % 2_500).unwrap_or(0));
            }
        }
    }

    /// A set the driver answers with success but whose read-back fails confirms nothing: the
    /// cap is not reported in force, and a restore stays pending.
    #[test]
    fn a_read_back_that_fails_confirms_nothing() {
        let fake = Fake::new(1);
        let mut book = LeaseBook::new(fake.gpus(), TimeDelta::hours(24));
        let j = &mut MemoryJournal;
        let before = book.snapshot();
        struct ReadFailsAfterSet<'a>(&'a Fake);
        impl GpuControl for ReadFailsAfterSet<'_> {
            fn backend(&self) -> GpuBackend {
                GpuBackend::Simulated
            }
            fn gpus(&self) -> &[GpuInfo] {
                self.0.gpus()
            }
            fn limits(&self, index: u32) -> Result<Limits, GpuError> {
                if self.0.sets(index) > 0 {
                    return Err(GpuError::Implausible("5000000 mW read back".into()));
                }
                self.0.limits(index)
            }
            fn set_limit(&self, index: u32, limit_mw: u32) -> Result<(), GpuError> {
                self.0.set_limit(index, limit_mw)
            }
            fn readings(&self, index: u32) -> Result<Readings, GpuError> {
                self.0.readings(index)
            }
        }
        let gpus = ReadFailsAfterSet(&fake);
        let r = book
            .put("evt", &lease(&[(0, 300.0)], at(600_000)), at(0), &gpus, j)
            .expect("put");
        assert_eq!(r.applied[0].status, CapStatus::ImplausibleReading);
        assert_eq!(r.applied[0].applied_w, None);
        // The set may have landed (it did): its pre-event limit stays, to be restored.
        assert!(book.lease("evt").is_some_and(|l| l.holds.is_empty()));
        assert_eq!(book.pending_restore(), vec![uuid(0)]);
        assert_ne!(book.snapshot(), before);
        // Once the GPU reads sanely again, the restore goes through.
        book.reconcile_all(at(1_000), &fake, j);
        assert_eq!(fake.limit(0), 700_000);
        assert!(book.pending_restore().is_empty());
    }

    /// A cap the driver raises (clamps) moved the limit though it failed: the pre-event limit
    /// is put back at once, not forgotten.
    #[test]
    fn a_failed_cap_that_moved_the_limit_is_restored_not_forgotten() {
        let fake = Fake::new(1);
        fake.with(0, |g| g.clamp_mw = 500_000);
        let mut book = LeaseBook::new(fake.gpus(), TimeDelta::hours(24));
        let j = &mut MemoryJournal;
        let r = book
            .put("evt", &lease(&[(0, 300.0)], at(600_000)), at(0), &fake, j)
            .expect("put");
        assert_eq!(r.applied[0].status, CapStatus::NotApplied);
        assert_eq!(r.applied[0].applied_w, Some(500.0));
        assert_eq!(fake.limit(0), 700_000, "the pre-event limit is back");
        assert!(book.pending_restore().is_empty());
    }

    fn book_with_saved(fake: &Fake, boot: &str) -> LeaseBook {
        // GPU 0 held by a valid lease, GPU 1 by one that expired while the agent was down,
        // GPU 2 pending a restore; every pre-event limit saved is a non-default 550 W.
        for i in 0..3 {
            fake.with(i, |g| g.requested_mw = 550_000);
        }
        let mut book = LeaseBook::new(fake.gpus(), TimeDelta::hours(24));
        let j = &mut MemoryJournal;
        book.note_boot(Some(boot), at(0), fake);
        book.put("long", &lease(&[(0, 300.0)], at(3_600_000)), at(0), fake, j)
            .expect("put");
        book.put("short", &lease(&[(1, 300.0)], at(10_000)), at(0), fake, j)
            .expect("put");
        book.put("gone", &lease(&[(2, 300.0)], at(3_600_000)), at(0), fake, j)
            .expect("put");
        fake.with(2, |g| g.set_error = Some(GpuError::NoPermission));
        book.delete("gone", at(1_000), fake, j).expect("deleted");
        fake.with(2, |g| g.set_error = None);
        let (book, refused) =
            LeaseBook::from_state(book.snapshot(), fake.gpus(), TimeDelta::hours(24), at(60_000)).expect("loads");
        assert!(refused.is_empty());
        book
    }

    #[test]
    fn the_same_boot_keeps_the_saved_pre_event_limits() {
        let fake = Fake::new(3);
        let mut book = book_with_saved(&fake, "boot-a");
        assert_eq!(book.note_boot(Some("boot-a"), at(60_000), &fake), None);
        assert_eq!(
            book.note_boot(None, at(60_000), &fake),
            None,
            "unknown: nothing changes"
        );
        assert_eq!(book.boot_id(), Some("boot-a"));
        book.reconcile_all(at(60_000), &fake, &mut MemoryJournal);
        assert_eq!(
            (fake.limit(0), fake.limit(1), fake.limit(2)),
            (300_000, 550_000, 550_000),
            "an agent restart restores the saved limits"
        );
    }

    /// After a reboot the driver holds its defaults (700 W; a boot script set GPU 0 to 600 W):
    /// no saved 550 W is written anywhere; GPU 0's lease still holds, and its restore is to the
    /// limit it had after the reboot.
    #[test]
    fn after_a_reboot_no_stale_pre_event_limit_is_restored() {
        let fake = Fake::new(3);
        let mut book = book_with_saved(&fake, "boot-a");
        for i in 0..3 {
            fake.with(i, |g| g.requested_mw = 700_000);
        }
        fake.with(0, |g| g.requested_mw = 600_000);
        let report = book.note_boot(Some("boot-b"), at(60_000), &fake).expect("a reboot");
        assert_eq!(report.previous_boot_id, "boot-a");
        assert_eq!(report.dropped, vec![(uuid(1), 550_000), (uuid(2), 550_000)]);
        assert_eq!(report.recaptured, vec![(uuid(0), 550_000, 600_000)]);
        assert!(report.describe().contains("rebooted"), "{}", report.describe());
        assert_eq!(book.snapshot().boot_id.as_deref(), Some("boot-b"));
        let j = &mut MemoryJournal;
        book.reconcile_all(at(60_000), &fake, j);
        assert_eq!(
            (fake.limit(0), fake.limit(1), fake.limit(2)),
            (300_000, 700_000, 700_000)
        );
        assert_eq!(
            (fake.sets(1), fake.sets(2)),
            (1, 2),
            "nothing written on GPUs 1 and 2 since the reboot"
        );
        book.delete("long", at(61_000), &fake, j).expect("deleted");
        assert_eq!(
            fake.limit(0),
            600_000,
            "the limit after the reboot, not the saved 550 W"
        );
        assert!(book.is_idle());
        assert_eq!(book.note_boot(Some("boot-b"), at(62_000), &fake), None);
    }

    #[test]
    fn a_state_without_a_boot_id_records_this_one() {
        let fake = Fake::new(1);
        let mut book = LeaseBook::new(fake.gpus(), TimeDelta::hours(24));
        assert_eq!(book.note_boot(Some("boot-a"), at(0), &fake), None);
        assert_eq!(book.snapshot().boot_id.as_deref(), Some("boot-a"));
        let json = serde_json::to_string(&book.snapshot()).expect("json");
        assert!(json.contains("\"boot_id\":\"boot-a\""), "{json}");
        let mut old = LeaseBook::new(fake.gpus(), TimeDelta::hours(24)).snapshot();
        old.boot_id = None;
        let json = serde_json::to_string(&old).expect("json");
        assert!(!json.contains("boot_id"), "absent when unknown: {json}");
    }
}
