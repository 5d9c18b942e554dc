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
        }
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
            // If the read-back fails right after a successful write, report the best estimate:
            // the new limit, under any out-of-band limit seen before the write.
            let oob = (current.enforced_mw < current.requested_mw).then_some(current.enforced_mw);
            limits = gpus.limits(info.index).unwrap_or(Limits {
                requested_mw: desired,
                enforced_mw: oob.map_or(desired, |o| o.min(desired)),
            });
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

    fn reconcile_set(&mut self, uuids: &BTreeSet<String>, gpus: &dyn GpuControl) -> BTreeMap<String, GpuOutcome> {
        uuids.iter().map(|u| (u.clone(), self.reconcile_one(u, gpus))).collect()
    }

    /// Remove a failed hold; if that leaves the GPU unheld and its baseline was captured by this
    /// operation (so the limit never changed), forget the baseline too.
    fn drop_failed_hold(&mut self, lease_id: &str, uuid: &str, captured: &BTreeSet<String>) {
        if let Some(l) = self.leases.get_mut(lease_id) {
            l.holds.remove(uuid);
        }
        if captured.contains(uuid) && !self.is_held(uuid) {
            self.baselines.remove(uuid);
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
            let before = self
                .info(uuid)
                .and_then(|i| gpus.limits(i.index).ok())
                .map(|l| l.requested_mw);
            let held = self.is_held(uuid);
            let outcome = self.reconcile_one(uuid, gpus);
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
        let mut outcomes = self.reconcile_set(&affected, gpus);
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
                        self.drop_failed_hold(id, &uuid, &captured);
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
        let outcomes = self.reconcile_set(&affected, gpus);
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
        let mut outcomes = self.reconcile_set(&affected, gpus);
        for (lease_id, uuid) in &new_holds {
            if let Some(o) = outcomes.get(uuid).copied() {
                outcomes.insert(uuid.clone(), self.settle_oob(lease_id, uuid, o, gpus));
            }
        }
        let mut failed = BTreeSet::new();
        for (lease_id, uuid) in &new_holds {
            if outcomes.get(uuid).is_some_and(|o| !o.status.is_applied()) {
                self.drop_failed_hold(lease_id, uuid, &captured);
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
        let outcomes = self.reconcile_set(&affected, gpus);
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
