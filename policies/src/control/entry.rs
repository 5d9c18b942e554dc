//! The ledger's schema: one typed [`Entry`] per thing the gateway records, written and read by
//! the same types.
//!
//! The controller decides by producing entries; its state is the fold of the entries it
//! produced ([`super::Controller::apply`]), so recovery, which folds the entries read back from
//! the ledger, runs the same code as live operation. Each entry is stored as one ledger record:
//! the record's coarse [`EntryKind`] (what the export filters on), the event it belongs to, an
//! optional de-duplication key, and the entry itself as the body, tagged by `"entry"`.
//!
//! Fields that recovery or the audit compute from are typed. Explanations that are only ever
//! shown (the facility model's computation chain) are kept as the JSON they were written as.

use super::cluster::{CapCommand, CapOutcome, CapResult, Unconfirmed};
use super::config::PolicyKind;
use super::trim::TrimDirection;
use crate::alloc::{FloorKind, Objective, Reason};
use crate::event::{Ack, BaselineEstimate, CeilingTarget, EffectiveCeiling, EventSource, GridEvent, Transition};
use crate::ids::EventId;
use crate::ids::JobId;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The coarse kind of a ledger record (what was asked, interpreted, decided, done and measured), for filters and the
/// export's `kind` column. Every [`Entry`] has exactly one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// Bytes received from the grid side, verbatim, with transport metadata.
    RawInput,
    /// How a raw input was understood: normalised target, baseline, ceilings.
    Interpretation,
    /// What we answered the counterparty (opt in/out, response code).
    Ack,
    /// Bytes sent to the grid side, with the peer and its answer.
    Outbound,
    /// A dispatch plan: per-job caps and the reasons for them.
    Plan,
    /// Commands sent to a cluster, with what each became.
    Dispatch,
    /// What the cluster shows against what was confirmed (drift, caps no longer measured).
    Confirmation,
    /// Meter and telemetry readings, job set changes, what is known of each job.
    Measurement,
    /// The end of a curtailment: caps back to the jobs' uncapped limits, jobs resumed.
    Restore,
    /// A manual action, with the operator's identity.
    Operator,
    /// A closed-loop trim of the GPU budget on the measured meter.
    Trim,
    /// Event lifecycle transitions.
    EventState,
    /// A checkpoint of the chain head (to be anchored elsewhere).
    Checkpoint,
    /// The gateway started.
    Startup,
    /// What the site expected it could shed in the hours ahead.
    Forecast,
}

/// Where a submission came from: the protocol and its details, recorded with the raw input.
/// The protocol alone is the event's [`EventSource`] ([`Transport::source`]), so the two can
/// never disagree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum Transport {
    /// `POST /v1/events`.
    Http {
        /// Peer address, if known.
        peer: Option<String>,
    },
    /// An OpenADR 2.0b `oadrDistributeEvent`, pulled from or pushed by a VTN.
    #[serde(rename = "openadr2b")]
    OpenAdr2b {
        /// The VTN's base URL.
        vtn: String,
        /// Ledger seq of the record holding the message's bytes.
        message_seq: u64,
    },
    /// An MQTT publish on `{prefix}/{site}/events/{event_id}`.
    Mqtt {
        /// The topic it arrived on.
        topic: String,
        /// A retained copy (delivered at subscription) rather than a live publish.
        retained: bool,
        /// A redelivery the broker flagged as a duplicate.
        dup: bool,
    },
    /// An OpenADR 3.x event object, polled from a VTN.
    #[serde(rename = "openadr3")]
    OpenAdr3 {
        /// The VTN's base URL.
        vtn: String,
        /// Ledger seq of the record holding the response body.
        message_seq: u64,
    },
}

impl Transport {
    /// The protocol, as the event model names it.
    #[must_use]
    pub fn source(&self) -> EventSource {
        match self {
            Transport::Http { .. } => EventSource::Http,
            Transport::OpenAdr2b { .. } => EventSource::OpenAdr2b,
            Transport::Mqtt { .. } => EventSource::Mqtt,
            Transport::OpenAdr3 { .. } => EventSource::OpenAdr3,
        }
    }
}

/// What was received, as received: the document's bytes, or where the adapter recorded the
/// wire message it was translated from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Received {
    /// The `dr.event/1` document, verbatim (lossy only for invalid UTF-8).
    Bytes(String),
    /// Translated from a wire message the adapter recorded (its ledger seq is in the
    /// transport).
    Translated {
        /// The event as translated.
        event: Box<GridEvent>,
        /// Which object of the wire message it came from.
        wire: WireRef,
    },
}

/// The protocol object an event was translated from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireRef {
    /// The protocol's event id (OpenADR eventID / event object id).
    pub id: String,
    /// The protocol's revision (2.0b modificationNumber, 3.x tracked revision).
    pub revision: u64,
    /// The signal it was mapped from (2.0b: `name/type/id`), if the event has several.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
}

/// A grid event as received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventReceived {
    /// When the gateway received it.
    pub received_at: DateTime<Utc>,
    /// How it came.
    pub transport: Transport,
    /// The protocol (equal to `transport`'s).
    pub source: EventSource,
    /// What came.
    pub received: Received,
}

/// What the book did with a submission (the record of [`crate::event::UpsertOutcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Upserted {
    /// A new event.
    New,
    /// A higher revision replaced the one held.
    Revised,
    /// A cancellation.
    Cancelled,
    /// A test event: tracked, never acted on.
    Test,
    /// The revision already held.
    Duplicate,
}

/// How a submission was understood.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventInterpreted {
    /// The event as normalised.
    pub event: GridEvent,
    /// Each interval's meter ceiling (`None`: nothing to enforce in it).
    pub ceilings: Vec<Option<CeilingTarget>>,
    /// The baseline relative targets were converted with.
    pub baseline: Option<BaselineEstimate>,
    /// The meter reading the ramp starts from and the recovery returns to, kW.
    pub pre_event_meter_kw: f64,
    /// When it was received.
    pub received_at: DateTime<Utc>,
    /// What the book did with it.
    pub outcome: Upserted,
    /// The facility model's settled budget for the tightest ceiling (an explanation).
    pub settled_budget: Option<serde_json::Value>,
    /// The facility parameters' fingerprint.
    pub facility_fingerprint: String,
}

/// An acknowledgment, as sent (less its own anchor: the hash of this record is the ack's
/// `log_checkpoint`, see [`Ack::log_checkpoint`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventAcked {
    /// The decision the ack carries.
    pub ack: Ack,
    /// Whether a repeat of this (event, revision) is answered with this ack (it was taken or
    /// refused on its merits; refusals for the wrong site or an expired window are not keyed,
    /// so a corrected copy is judged afresh).
    pub keyed: bool,
    /// Lowercase hex SHA-256 of the document this ack answers, byte for byte as received
    /// (`dr.event/1` over HTTP or MQTT), so that the sender can show, from this one record and its
    /// hash, that the gateway acknowledged exactly what it sent. `None` for events translated
    /// from a protocol message (OpenADR: the wire message has its own record) and for operator
    /// opt-outs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sha256: Option<String>,
}

impl Received {
    /// SHA-256 of the document as received (lowercase hex); `None` for translated events.
    #[must_use]
    pub fn sha256(&self) -> Option<String> {
        use sha2::Digest;
        match self {
            Received::Bytes(text) => {
                let digest = sha2::Sha256::digest(text.as_bytes());
                Some(digest.iter().map(|b| format!("{b:02x}")).collect())
            }
            Received::Translated { .. } => None,
        }
    }
}

/// An operator opted the site out of an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorOptOut {
    /// When.
    pub at: DateTime<Utc>,
    /// The event.
    pub event_id: String,
    /// The revision held then.
    pub revision: u64,
    /// Who (as the caller declared, behind the bearer token).
    pub operator: String,
    /// Why.
    pub reason: String,
}

/// Why a plan was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanReason {
    /// The ceiling in force changed (a phase, a ramp or recovery step, an interval, a revision).
    Ceiling,
    /// Jobs started or ended.
    JobsChanged,
    /// The closed-loop trim moved.
    Trim,
    /// A cap the planner counted on is no longer confirmed (failed, lost or drifted).
    Unconfirmed,
    /// Jobs whose caps were unconfirmed are confirmed again: plan them as flexible.
    Reconfirmed,
    /// Jobs were suspended: plan the rest with them as fixed load.
    Suspended,
    /// The first plan after a start.
    Start,
    /// A job's measured slowdown exceeded its tier: its floor was raised.
    TierBackoff,
}

/// One job's line in a recorded plan: `[job, cap_w, expected_power_w, expected_tokens_per_s,
/// floor_w, floor_kind, reason]` (an array, not an object: a 10,000-job plan is recorded,
/// hashed and flushed on the event path).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRow(pub JobId, pub f64, pub f64, pub f64, pub f64, pub FloorKind, pub Reason);

impl PlanRow {
    /// The job.
    #[must_use]
    pub fn job(&self) -> &JobId {
        &self.0
    }

    /// Its cap, W per GPU.
    #[must_use]
    pub fn cap_w(&self) -> f64 {
        self.1
    }

    /// The power the plan expects it to draw, W.
    #[must_use]
    pub fn expected_power_w(&self) -> f64 {
        self.2
    }

    /// The throughput the plan expects of it, tokens/s.
    #[must_use]
    pub fn expected_tokens_per_s(&self) -> f64 {
        self.3
    }

    /// Its floor, W.
    #[must_use]
    pub fn floor_w(&self) -> f64 {
        self.4
    }

    /// What set the floor.
    #[must_use]
    pub fn floor_kind(&self) -> FloorKind {
        self.5
    }

    /// Why it got this cap.
    #[must_use]
    pub fn reason(&self) -> Reason {
        self.6
    }
}

/// The column names of [`PlanRow`].
pub const PLAN_COLUMNS: [&str; 7] = [
    "job",
    "cap_w",
    "expected_power_w",
    "expected_tokens_per_s",
    "floor_w",
    "floor_kind",
    "reason",
];

/// A plan's allocation as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedAllocation {
    /// The policy that made it (`flexgate`, `equal`, `pfi_paper`, `efficiency`).
    pub policy: PolicyKind,
    /// The budget asked for, W.
    pub budget: f64,
    /// The jobs' uncapped draw, W.
    pub uncapped_power: f64,
    /// The planned draw, W.
    pub planned_power: f64,
    /// What the plan could not cut, W (every floor reached).
    pub shortfall: f64,
    /// Jobs of unknown elasticity that had to be capped anyway.
    pub fallbacks: Vec<JobId>,
    /// Column names of `rows`.
    pub columns: Vec<String>,
    /// One row per job.
    pub rows: Vec<PlanRow>,
    /// What the plan maximised (`progress`, `tokens`); absent in plans recorded before the
    /// gateway had objectives (they maximised tokens/s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<Objective>,
    /// What the plan expects to keep, on both objectives, by the planner's own curves: a
    /// model's figures, never a measurement (the audit sets the measured ones beside them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected: Option<Box<ExpectedOutcome>>,
    /// Column names of `notes`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub note_columns: Vec<String>,
    /// Per job, in the order of `rows`: why it was weighed and cut as it was (see [`PlanNote`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<PlanNote>,
    /// What the plan guarantees against the equal cut of the same budget, on the objective it
    /// was judged on (the hedge's contract); absent for a plan no hedge judged (a proportional
    /// rule but the equal cut, `hedge = false`, a budget not met with every job at its floor)
    /// and in plans recorded before issue 29.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<Box<PlanGuarantee>>,
}

/// A plan's contract against the equal cut of the same budget: on every curve its plausible set
/// holds (what was measured, predicted or assumed of each job), it keeps at least the equal
/// cut's value plus `worst_gain_vs_equal` of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanGuarantee {
    /// The objective the plan was judged on (`progress`, `tokens`).
    pub objective: Objective,
    /// The plan's worst gain over the equal cut on its plausible set, as a share of the equal
    /// cut's expected value (negative: the most it may lose).
    pub worst_gain_vs_equal: f64,
    /// The most it was allowed to lose, a share (the hedge's tolerance).
    pub tolerance: f64,
    /// Of `worst_gain_vs_equal`, what the measured curves' noise takes (a share, ≥ 0): two
    /// standard deviations of the plan's gain over the errors of what was measured.
    pub noise: f64,
    /// How much of the way from the equal cut to the plan the estimates alone would make was
    /// kept (1: that plan; 0: the equal cut); with a `blend`, of the way to the best mixture of
    /// plans that meets the bound (the hedge's "Mixture"; before it, the plan for the estimates
    /// blended with one scenario).
    pub kept: f64,
    /// How much of the worst cases' curves were weighed into the estimates for the plans that
    /// mixture mixes (0: none; the hedge's "Mixture"; before it, the one scenario's weight in
    /// the "Blend"). Absent in plans recorded before either.
    #[serde(default)]
    pub blend: f64,
    /// The worst case, in words.
    pub worst_case: String,
    /// Whether `worst_gain_vs_equal` was measured on every job (false: a sample's search was
    /// corrected by a step back, and it is the least concavity allows).
    pub measured: bool,
}

/// What a plan expects to keep of the jobs' uncapped throughput (planner's estimates).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ExpectedOutcome {
    /// Σ expected tokens/s ÷ Σ uncapped tokens/s.
    pub tokens_kept_share: f64,
    /// GPU- and priority-weighted mean of each job's expected share of its own uncapped
    /// throughput.
    pub progress_kept_share: f64,
}

/// One job's explanation in a recorded plan: `[gpus, priority, knowledge, expected_share]`.
///
/// `knowledge` is what the planner knew and therefore which curve it planned on:
/// `measured curve (N points)` (the job's own hull), `pfi V on grid` or
/// `predicted pfi M±S` (the estimator's curve for that PFI: the physical family mixed with
/// knee and power-law shapes of the same PFI), or `unknown` (planned as proportional, cut
/// no deeper than the equal cut's share). With the row's `reason` and `floor_kind`, and the
/// weight `gpus × priority` the objective gives it, that is why it was cut as deep as it was:
/// the planner sheds the watts its curves say cost the objective least, down to each floor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanNote(pub u32, pub f64, pub String, pub f64);

/// The column names of [`PlanNote`].
pub const PLAN_NOTE_COLUMNS: [&str; 4] = ["gpus", "priority", "knowledge", "expected_share"];

/// A plan: the ceiling it serves, the budget chain, and the caps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRecorded {
    /// When.
    pub at: DateTime<Utc>,
    /// Why now.
    pub reason: PlanReason,
    /// The generation its caps are sent with.
    pub generation: u64,
    /// The ceiling in force.
    pub ceiling: EffectiveCeiling,
    /// The facility model's ceiling inversion (an explanation).
    pub facility: serde_json::Value,
    /// The measured bound (an explanation), when there was a pre-event meter reading.
    pub measured_reduction: Option<serde_json::Value>,
    /// The open-loop budget (the larger bound), W.
    pub base_budget_w: f64,
    /// The closed-loop trim, W.
    pub trim_w: f64,
    /// Draw of jobs counted as fixed load (unconfirmed caps, suspended), W.
    pub unconfirmed_fixed_w: f64,
    /// Jobs suspended by the gateway.
    pub suspended: BTreeSet<JobId>,
    /// The budget the policy split, W.
    pub gpu_budget_w: f64,
    /// The allocation.
    pub plan: RecordedAllocation,
    /// Where the curtailment started from.
    pub curtailment_started: super::budget::OperatingPoint,
    /// When the caps must end at the latest (`None`: open-ended).
    pub until: Option<DateTime<Utc>>,
    /// What the flexibility curve in force promised for this ask (the meter figure the
    /// curtailment started from, `curtailment_started.meter_kw`, less the binding event's
    /// deepest ceiling), on the curtailment's first plan only; absent
    /// when there was no curve or no measured meter, and in older ledgers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promised: Option<Box<super::flexibility::FlexPromise>>,
}

/// Why commands were sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchPurpose {
    /// The caps of a plan.
    Plan,
    /// Unconfirmed caps re-sent to jobs whose nodes answer again.
    RetryUnconfirmed,
    /// The last plan's caps re-sent at start.
    ReapplyAtStart,
    /// Caps back to the jobs' uncapped limits: the curtailment is over (or a probe ended).
    Restore,
    /// A probe step's cap, outside events (see `probe_step`).
    Probe,
}

/// What became of one cap command (recorded as `applied`, `stale`, `unknown_job`, `failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DispatchStatus {
    /// The node applied it (`applied_w` says what it set).
    Applied,
    /// The node holds a newer generation: superseded, so in force.
    Stale,
    /// The node does not know the job.
    UnknownJob,
    /// Refused or unanswered (`detail` says why).
    Failed,
}

/// One command with what became of it: `[job, cap_w, generation, status, applied_w, detail]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchRow(
    pub JobId,
    pub f64,
    pub u64,
    pub DispatchStatus,
    pub Option<f64>,
    pub Option<String>,
);

/// The column names of [`DispatchRow`].
pub const DISPATCH_COLUMNS: [&str; 6] = ["job", "cap_w", "generation", "status", "applied_w", "detail"];

impl DispatchRow {
    /// The row for a command and its result.
    #[must_use]
    pub fn new(command: &CapCommand, result: &CapResult) -> Self {
        let (status, applied, detail) = match &result.outcome {
            CapOutcome::Applied { applied, clamped } => (
                DispatchStatus::Applied,
                Some(applied.value()),
                clamped.then(|| "clamped".to_string()),
            ),
            CapOutcome::Stale { latest } => (DispatchStatus::Stale, None, Some(format!("latest generation {latest}"))),
            CapOutcome::UnknownJob => (DispatchStatus::UnknownJob, None, None),
            CapOutcome::Failed { reason, .. } => (DispatchStatus::Failed, None, Some(reason.clone())),
        };
        DispatchRow(
            command.job.clone(),
            (command.cap.value() * 10.0).round() / 10.0,
            command.generation,
            status,
            applied,
            detail,
        )
    }

    /// Whether the cap is in force (applied, or superseded by a newer generation).
    #[must_use]
    pub fn confirmed(&self) -> bool {
        matches!(self.3, DispatchStatus::Applied | DispatchStatus::Stale)
    }

    /// Whether the cluster no longer knows the job.
    #[must_use]
    pub fn unknown_job(&self) -> bool {
        self.3 == DispatchStatus::UnknownJob
    }

    /// The job.
    #[must_use]
    pub fn job(&self) -> &JobId {
        &self.0
    }

    /// The cap sent, W per GPU.
    #[must_use]
    pub fn cap_w(&self) -> f64 {
        self.1
    }

    /// The generation it was sent with.
    #[must_use]
    pub fn generation(&self) -> u64 {
        self.2
    }

    /// What became of it.
    #[must_use]
    pub fn status(&self) -> DispatchStatus {
        self.3
    }

    /// What the node set, W per GPU, when it applied it.
    #[must_use]
    pub fn applied_w(&self) -> Option<f64> {
        self.4
    }
}

/// Commands sent and what each became.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapsDispatched {
    /// When the answers came.
    pub at: DateTime<Utc>,
    /// Why they were sent.
    pub purpose: DispatchPurpose,
    /// Column names of `rows`.
    pub columns: Vec<String>,
    /// One row per command.
    pub rows: Vec<DispatchRow>,
    /// Commands confirmed.
    pub confirmed: usize,
    /// Commands not confirmed.
    pub failed: usize,
    /// Why each job whose command failed is not confirmed, where the backend could tell
    /// (absent in records written before it existed).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unconfirmed: BTreeMap<JobId, Unconfirmed>,
}

/// A confirmed cap found not in force (a GPU reset, a driver reload, a limit raised by hand).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Drifted {
    /// The job.
    pub job: JobId,
    /// The cap the gateway confirmed, W per GPU.
    pub wanted_w_per_gpu: f64,
    /// The limit the cluster reports, W per GPU.
    pub applied_w_per_gpu: f64,
    /// The confirmed cap's generation.
    pub generation: u64,
}

/// Caps the reconcile no longer counts on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapsDrifted {
    /// When.
    pub at: DateTime<Utc>,
    /// `drift` (the cap was found raised: [`Unconfirmed::RaisedOutOfBand`]) or
    /// [`UNRELIABLE_ACTION`] (the node agent reports that it keeps re-applying the cap:
    /// [`Unconfirmed::Unreliable`]).
    pub action: String,
    /// Each drifted job.
    pub drifted: Vec<Drifted>,
}

/// A forecast of the site's flexibility in the hours ahead (`crate::forecast`), as promised
/// then: an auditor sets it against what the site could shed, and shed, when events came.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForecastRecorded {
    /// When it was made.
    pub at: DateTime<Utc>,
    /// The objective its cost ceiling is a share of.
    pub objective: crate::alloc::Objective,
    /// The cost ceiling: the most sheddable meter watts within this share of the objective's
    /// value.
    pub cost_ceiling: f64,
    /// What it stands on, in words.
    pub basis: Vec<String>,
    /// On each hour ahead: the most the site can shed at the meter within the ceiling, W, as its
    /// 10th, 50th and 90th percentiles.
    pub hourly: Vec<(DateTime<Utc>, crate::forecast::Band)>,
    /// Queued jobs it counted (`None` in records written before the queue was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_jobs: Option<usize>,
}

/// Caps the node agents re-applied by themselves because the GPUs' limits had moved under the
/// lease (a driver reload or GPU reset, another tool's set): the agents' own correction, which
/// the gateway reports so that an auditor sees each time a cap had to be put back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapsReapplied {
    /// When the gateway learned of them (the agents re-applied within their watchdog period
    /// before).
    pub at: DateTime<Utc>,
    /// Per job: re-applications on its GPUs since the previous record (or since the gateway
    /// first saw the job).
    pub reapplied: BTreeMap<JobId, u64>,
}

/// One imported interval as the ledger holds it: its end, its mean demand (kW, `None` when
/// missing) and its quality; its length is the import's `length_s`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportedRow(
    pub DateTime<Utc>,
    pub Option<f64>,
    pub crate::intervals::IntervalQuality,
);

/// The column names of [`ImportedRow`].
pub const IMPORTED_COLUMNS: [&str; 3] = ["end", "kw", "quality"];

/// Most rows in one `meter_imported` record (a year of 5-minute data is 26 records), so that
/// no record is large for the ledger or a replica's etcd batch.
pub const IMPORTED_ROWS_PER_RECORD: usize = 4096;

/// Interval meter data imported (the utility's revenue-meter data, which settlement uses
/// first): what file, by its digest, what it held, and the intervals themselves, in `parts`
/// records appended together. The interval store folds them (so every replica holds the same
/// imported data, and an auditor can rebuild it from the ledger alone). Recorded by the running
/// gateway (`POST /v1/meter/import`) or by `flexgate meter import` on a stopped gateway's
/// directory, so that a settlement computed on imported data traces to the exact file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeterImported {
    /// This record's place among the import's records, from 1.
    pub part: u32,
    /// How many records the import has.
    pub parts: u32,
    /// Column names of `rows` ([`IMPORTED_COLUMNS`]).
    pub columns: Vec<String>,
    /// This record's intervals, in time order.
    pub rows: Vec<ImportedRow>,
    /// When it was imported.
    pub at: DateTime<Utc>,
    /// The label its intervals carry (`source` in the store and the reports).
    pub source: String,
    /// `green_button` or `csv`.
    pub format: String,
    /// SHA-256 of the file's bytes, hex.
    pub sha256: String,
    /// Its size, bytes.
    pub bytes: u64,
    /// Intervals in the whole import.
    pub intervals: usize,
    /// Imported intervals of the same times it replaced (a re-issue of corrected data).
    pub replaced: usize,
    /// Their length, s.
    pub length_s: i64,
    /// The first interval's start.
    pub from: Option<DateTime<Utc>>,
    /// The last interval's end.
    pub to: Option<DateTime<Utc>>,
    /// Intervals measured, estimated and missing.
    pub quality: [usize; 3],
}

/// The [`CapsDrifted::action`] of caps the node agents report as unreliable (re-applied again
/// and again): they are no longer counted on, though they may be in force now.
pub const UNRELIABLE_ACTION: &str = "unreliable";

/// Capped jobs the backend stopped measuring (their node does not answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapsLost {
    /// When.
    pub at: DateTime<Utc>,
    /// The jobs.
    pub unmeasured_capped_jobs: Vec<JobId>,
}

/// What became of one suspend or resume request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuspendOutcome {
    /// The job.
    pub job: JobId,
    /// Its expected draw under the plan, W (suspensions only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_w: Option<f64>,
    /// `suspended`, `resumed` or `failed`.
    pub outcome: SuspendResult,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What became of one suspension or resumption (recorded as `suspended`, `resumed`, `failed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuspendResult {
    /// The scheduler suspended the job.
    Suspended,
    /// The scheduler resumed it.
    Resumed,
    /// The scheduler refused or did not answer (`reason` says which).
    Failed,
}

impl SuspendResult {
    /// The outcome of a suspension (`ok`: the scheduler did it).
    #[must_use]
    pub fn of_suspend(ok: bool) -> Self {
        if ok { Self::Suspended } else { Self::Failed }
    }

    /// The outcome of a resumption.
    #[must_use]
    pub fn of_resume(ok: bool) -> Self {
        if ok { Self::Resumed } else { Self::Failed }
    }
}

/// Jobs suspended because caps at every floor could not meet the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsSuspended {
    /// When.
    pub at: DateTime<Utc>,
    /// Why, in words.
    pub reason: String,
    /// The plan's shortfall, W.
    pub shortfall_w: f64,
    /// Each request.
    pub jobs: Vec<SuspendOutcome>,
}

/// Jobs resumed at the end of the curtailment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsResumed {
    /// When.
    pub at: DateTime<Utc>,
    /// Each request.
    pub jobs: Vec<SuspendOutcome>,
}

/// The job set changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobsChanged {
    /// When.
    pub at: DateTime<Utc>,
    /// Jobs that appeared.
    pub jobs_started: Vec<JobId>,
    /// Jobs that ended.
    pub jobs_ended: Vec<JobId>,
    /// Of the jobs that ended, those whose start and time limit the scheduler gave: how long
    /// each ran against its limit, what the forecast learns when jobs end from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<EndedRuntime>,
}

/// How long a job ran against its time limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndedRuntime {
    /// The job.
    pub job: JobId,
    /// Seconds it ran (as seen by the gateway: from the scheduler's start to the first
    /// inventory without it).
    pub runtime_s: f64,
    /// Its time limit, s.
    pub limit_s: f64,
}

/// What the planner knows of each job's elasticity, where it changed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElasticityKnown {
    /// When.
    pub at: DateTime<Utc>,
    /// Job → `sweep`, `pfi 2.10`, `predicted 1.85±0.24` or `unknown`.
    pub elasticity_known: std::collections::BTreeMap<String, String>,
}

/// Which jobs report their throughput, where it changed: `measured` (the job reports it
/// through its agent, or the simulated cluster for its jobs) or `unknown` (it reports nothing,
/// or its node did not answer). Recorded on change only, so that an auditor can tell which
/// jobs' slowdown was measured during an event and which was not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputKnown {
    /// When.
    pub at: DateTime<Utc>,
    /// Job → `measured` or `unknown`.
    pub throughput: std::collections::BTreeMap<String, String>,
}

/// A measured point of a job's curve: its cap had settled and every throughput sample counted
/// was taken under it (see `control::evidence`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputPoint {
    /// When.
    pub at: DateTime<Utc>,
    /// The job.
    pub job: String,
    /// Cap per GPU in force, W.
    pub cap_w_per_gpu: f64,
    /// The job's GPU-board power, W (measured).
    pub power_w: f64,
    /// The job's throughput, tokens/s, as the job reported it.
    pub tokens_per_s: f64,
    /// The cap was the range maximum: this is the job's uncapped point.
    pub uncapped: bool,
    /// The job's tier: the largest slowdown its owner accepts (absent: no tier).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_slowdown: Option<f64>,
    /// The profile the point belongs to (the job's signature; absent: the job id), so that a
    /// re-run of the same configuration starts from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The job's GPU count (its cap applies to each), so that an exported profile is a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

impl ThroughputPoint {
    /// The key of the profile it belongs to.
    #[must_use]
    pub fn profile_key(&self) -> &str {
        self.profile.as_deref().unwrap_or(&self.job)
    }
}

/// A job measured slower than its tier allows: its floor was raised and the plan redone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierBackedOff {
    /// When.
    pub at: DateTime<Utc>,
    /// The job.
    pub job: String,
    /// The cap per GPU it was measured at, W.
    pub cap_w_per_gpu: f64,
    /// Its measured throughput there, tokens/s.
    pub tokens_per_s: f64,
    /// Its measured uncapped throughput, tokens/s.
    pub uncapped_tokens_per_s: f64,
    /// 1 − tokens / uncapped tokens.
    pub measured_slowdown: f64,
    /// The tier's largest slowdown.
    pub allowance: f64,
    /// The floor set, W per GPU.
    pub floor_w_per_gpu: f64,
}

/// A probe step: an eligible job held at one cap of its range, outside events, to measure its
/// curve before the grid asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeStep {
    /// When.
    pub at: DateTime<Utc>,
    /// The job.
    pub job: String,
    /// Its profile key (where its points are kept).
    pub profile: String,
    /// The cap per GPU, W.
    pub cap_w_per_gpu: f64,
    /// When the step's lease ends: the cap never holds past it.
    pub until: DateTime<Utc>,
    /// The cap command's generation.
    pub generation: u64,
    /// The most the step may cost the job, as a share of its uncapped throughput (the share of
    /// its draw the cap sheds, or the slowdown measured there if larger).
    pub max_cost_share: f64,
    /// What the steps in flight, this one included, may cost together, as a share of the
    /// fleet's uncapped throughput.
    pub fleet_share_in_flight: f64,
    /// The site's budget for that share (`[probe] max_fleet_share`).
    pub fleet_share_budget: f64,
}

/// How a probe step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeOutcome {
    /// Its throughput was measured steady at the cap.
    Measured,
    /// Measured slower than the job's tier allows: the sweep goes no deeper.
    TierReached,
    /// No steady throughput within the step: the job is not probed again for a while.
    Timeout,
    /// The cluster did not apply the cap: not probed again for a while.
    CapFailed,
    /// A grid event came into force: the plan caps the job from now.
    Event,
    /// The job ended.
    JobEnded,
    /// Probing was turned off in the configuration.
    Disabled,
}

/// The end of a probe step; unless another step follows at once, the job goes back to its
/// uncapped limit (a `restore` dispatch).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeEnded {
    /// When.
    pub at: DateTime<Utc>,
    /// The job.
    pub job: String,
    /// Its profile key.
    pub profile: String,
    /// How it ended.
    pub outcome: ProbeOutcome,
    /// What was measured, or why it ended, in words.
    pub detail: String,
    /// Not probed again before this (after a timeout or a refused cap).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<DateTime<Utc>>,
}

/// One meter and GPU-board reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeterSample {
    /// When.
    pub at: DateTime<Utc>,
    /// The meter, kW: the figure the gateway acted on.
    pub meter_kw: f64,
    /// Where `meter_kw` comes from (`measured`, `stale`, `missing`, `model`; see
    /// `flexgate_policies::meter`). `None` in samples recorded before the gateway said so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meter_quality: Option<crate::meter::Quality>,
    /// GPU-board power of the measured jobs, W.
    pub gpu_board_w: f64,
    /// The ceiling in force, kW.
    pub ceiling_kw: Option<f64>,
    /// The events contributing a ceiling.
    pub events: Vec<String>,
    /// The budget of the plan in force, W.
    pub gpu_budget_w: Option<f64>,
    /// The trim in force, W.
    pub trim_w: f64,
}

/// A closed-loop trim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trimmed {
    /// When.
    pub at: DateTime<Utc>,
    /// Which way.
    pub direction: TrimDirection,
    /// Before, W.
    pub trim_w_before: f64,
    /// After, W.
    pub trim_w: f64,
    /// The reading it acted on, kW (`None` in trims migrated from schema 1, which did not
    /// record it apart from the reason's words).
    pub meter_kw: Option<f64>,
    /// The ceiling, kW (`None` as above).
    pub ceiling_kw: Option<f64>,
    /// Why, in words.
    pub reason: String,
    /// Bounds.
    pub max_trim_w: f64,
    /// Most credit (negative), W.
    pub max_credit_w: f64,
}

/// No event constrains the site any more: the curtailment is over, and every capped job is
/// sent back to its uncapped limit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CurtailmentEnded {
    /// When.
    pub at: DateTime<Utc>,
}

/// The gateway started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// When.
    pub at: DateTime<Utc>,
    /// Events rebuilt from the ledger.
    pub events_replayed: usize,
    /// Caps re-sent from the last plan.
    pub caps_reapplied: usize,
    /// The cluster backend.
    pub backend: String,
    /// The allocation policy.
    pub policy: PolicyKind,
}

/// The first record of a ledger migrated from an earlier schema: it anchors the new chain to
/// the old one (whose directory is kept as evidence).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerMigrated {
    /// When the migration ran.
    pub at: DateTime<Utc>,
    /// The schema migrated from.
    pub from_schema: u32,
    /// Records in the old ledger (all of them follow, in order).
    pub records: u64,
    /// The old ledger's head hash.
    pub head_hash: String,
    /// When the old ledger's first record was written.
    pub first_record_at: DateTime<Utc>,
}

/// A grid-side protocol, for the records of its wire messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireProtocol {
    /// OpenADR 2.0b (XML over HTTP).
    #[serde(rename = "openadr2b")]
    OpenAdr2b,
    /// OpenADR 3.x (JSON over HTTP).
    #[serde(rename = "openadr3")]
    OpenAdr3,
    /// MQTT.
    Mqtt,
}

/// A wire message's content, verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireContent {
    /// A text document (XML), lossy only for invalid UTF-8.
    Text(String),
    /// A JSON document, as received or sent.
    Json(serde_json::Value),
}

/// A protocol message received from the grid side (before any interpretation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireReceived {
    /// When.
    pub at: DateTime<Utc>,
    /// The protocol.
    pub protocol: WireProtocol,
    /// Who sent it: the VTN's URL, the MQTT topic.
    pub peer: String,
    /// The message's name (`oadrDistributeEvent`, `event`, …).
    pub message: String,
    /// The content.
    pub content: WireContent,
}

/// What the peer answered to something we sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum PeerAnswer {
    /// Taken (a success status; the reply, if any, is recorded as received).
    Accepted,
    /// Refused: an error status, with what the peer said.
    Refused {
        /// The HTTP status, when there was one.
        status: Option<u16>,
        /// What the peer said, or why the exchange failed.
        detail: String,
    },
    /// No answer came (connection refused, timeout): it may or may not have arrived.
    Unanswered {
        /// Why.
        detail: String,
    },
    /// Published; the protocol gives no answer to wait for (MQTT QoS 0/1 publish of reports).
    Published,
    /// Given up after every retry failed: it never reached the peer and will not be sent again
    /// (each attempt is recorded too, with its own answer).
    Abandoned {
        /// How often it was tried.
        attempts: u32,
        /// The last failure.
        detail: String,
    },
}

/// A protocol message we sent to the grid side, with the peer's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireSent {
    /// When the answer (or its absence) was known.
    pub at: DateTime<Utc>,
    /// The protocol.
    pub protocol: WireProtocol,
    /// To whom: the URL or topic.
    pub peer: String,
    /// The message's name (`oadrCreatedEvent`, `report`, …).
    pub message: String,
    /// The content.
    pub content: WireContent,
    /// What the peer answered.
    pub answer: PeerAnswer,
}

/// The protocol adapter answered an event by itself, before the gateway's intake saw it: the
/// decision and its reason, beside the bytes received or sent. OpenADR 2.0b: an eiTarget that is
/// not ours, a program we are not enrolled in, an unsupported signal, an out-of-range value.
/// MQTT: a payload over the `dr.event/1` size limit, a missing or invalid signature, a document
/// that does not parse, or one the screen refuses (another event's topic, stale, expired).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterOptedOut {
    /// When.
    pub at: DateTime<Utc>,
    /// The protocol.
    pub protocol: WireProtocol,
    /// The protocol's event id.
    pub event_id: String,
    /// The protocol's revision (modificationNumber).
    pub revision: u64,
    /// The response code. OpenADR 2.0b: the code sent in `oadrCreatedEvent` (200, 454, 460).
    /// MQTT, whose PUBACK carries no code: the status `POST /v1/events` answers for the same
    /// refusal (413 too large, 400 unreadable, 401 signature, 409 stale repeat, 422 not
    /// acceptable here), so one filter finds a kind of refusal whatever the transport.
    pub code: u16,
    /// Why.
    pub reason: String,
}

/// A protocol adapter's registration with its counterparty as it now stands (OpenADR 2.0b: the
/// VEN's registration with its VTN; `null` once cancelled). Recorded so that every replica of a
/// site holds it: the next leader's VEN carries on the same registration instead of registering
/// a second VEN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdapterRegistration {
    /// When.
    pub at: DateTime<Utc>,
    /// The protocol.
    pub protocol: WireProtocol,
    /// The registration as the adapter keeps it, or `null` when there is none.
    pub registration: Option<serde_json::Value>,
}

/// Every kind of thing the gateway records. See the module docs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
pub enum Entry {
    /// A grid event as received.
    EventReceived(EventReceived),
    /// How it was understood.
    EventInterpreted(EventInterpreted),
    /// What was answered.
    EventAcked(EventAcked),
    /// A lifecycle transition.
    EventPhase(Transition),
    /// An operator opt-out.
    OperatorOptOut(OperatorOptOut),
    /// A plan.
    Plan(PlanRecorded),
    /// Commands and their outcomes.
    CapsDispatched(CapsDispatched),
    /// Confirmed caps found not in force.
    CapsDrifted(CapsDrifted),
    /// Capped jobs no longer measured.
    CapsLost(CapsLost),
    /// Caps the node agents re-applied after their limits moved.
    CapsReapplied(CapsReapplied),
    /// What the site expected it could shed in the hours ahead.
    Forecast(ForecastRecorded),
    /// What the site declared it can shed, hour by hour (from the forecast, or an operator's
    /// figure with a reason).
    Declared(crate::forecast::declare::Declaration),
    /// Interval meter data imported.
    MeterImported(MeterImported),
    /// Jobs suspended.
    JobsSuspended(JobsSuspended),
    /// Jobs resumed.
    JobsResumed(JobsResumed),
    /// The job set changed.
    JobsChanged(JobsChanged),
    /// What is known of jobs' elasticity.
    ElasticityKnown(ElasticityKnown),
    /// Which jobs report their throughput.
    ThroughputKnown(ThroughputKnown),
    /// A measured point of a job's curve.
    ThroughputPoint(ThroughputPoint),
    /// A job backed off to keep its tier.
    TierBackedOff(TierBackedOff),
    /// A probe step started.
    ProbeStep(ProbeStep),
    /// A probe step ended.
    ProbeEnded(ProbeEnded),
    /// A meter reading.
    MeterSample(MeterSample),
    /// A closed-loop trim.
    Trimmed(Trimmed),
    /// The curtailment ended.
    CurtailmentEnded(CurtailmentEnded),
    /// The gateway started.
    Started(Started),
    /// A protocol message received.
    WireReceived(WireReceived),
    /// A protocol message sent, with the answer.
    WireSent(WireSent),
    /// A protocol adapter's own opt-out.
    AdapterOptedOut(AdapterOptedOut),
    /// A protocol adapter's registration with its counterparty.
    AdapterRegistration(AdapterRegistration),
    /// This ledger was migrated from an earlier schema.
    LedgerMigrated(LedgerMigrated),
}

impl Entry {
    /// The record kind it is stored under.
    #[must_use]
    pub fn kind(&self) -> EntryKind {
        match self {
            Entry::EventReceived(_) => EntryKind::RawInput,
            Entry::EventInterpreted(_) => EntryKind::Interpretation,
            Entry::EventAcked(_) => EntryKind::Ack,
            Entry::EventPhase(_) => EntryKind::EventState,
            Entry::OperatorOptOut(_) => EntryKind::Operator,
            Entry::Plan(_) => EntryKind::Plan,
            Entry::CapsDispatched(d) if d.purpose == DispatchPurpose::Restore => EntryKind::Restore,
            Entry::CapsDispatched(_) | Entry::JobsSuspended(_) => EntryKind::Dispatch,
            Entry::CapsDrifted(_) | Entry::CapsLost(_) | Entry::CapsReapplied(_) => EntryKind::Confirmation,
            Entry::JobsResumed(_) | Entry::CurtailmentEnded(_) => EntryKind::Restore,
            Entry::JobsChanged(_)
            | Entry::ElasticityKnown(_)
            | Entry::ThroughputKnown(_)
            | Entry::ThroughputPoint(_)
            | Entry::MeterSample(_)
            | Entry::MeterImported(_) => EntryKind::Measurement,
            Entry::TierBackedOff(_) | Entry::ProbeStep(_) => EntryKind::Plan,
            Entry::ProbeEnded(_) => EntryKind::Measurement,
            Entry::Trimmed(_) => EntryKind::Trim,
            Entry::Started(_) => EntryKind::Startup,
            Entry::WireReceived(_) => EntryKind::RawInput,
            Entry::WireSent(_) => EntryKind::Outbound,
            Entry::AdapterOptedOut(_) => EntryKind::Ack,
            Entry::AdapterRegistration(_) | Entry::LedgerMigrated(_) => EntryKind::Checkpoint,
            Entry::Forecast(_) => EntryKind::Forecast,
            Entry::Declared(_) => EntryKind::Operator,
        }
    }
}

/// An entry with where it goes in the ledger: the event it belongs to (the export's filter) and
/// its de-duplication key (a repeat of a keyed record is not written twice).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// The entry.
    pub entry: Entry,
    /// The grid event it belongs to.
    pub event: Option<crate::ids::EventId>,
    /// De-duplication key.
    pub dedup_key: Option<String>,
}

impl Recorded {
    /// `entry` for `event`, without a key.
    #[must_use]
    pub fn new(entry: Entry, event: Option<EventId>) -> Self {
        Recorded {
            entry,
            event,
            dedup_key: None,
        }
    }

    /// With a de-duplication key.
    #[must_use]
    pub fn keyed(mut self, key: String) -> Self {
        self.dedup_key = Some(key);
        self
    }
}

/// The de-duplication keys of the records written at most once per event revision, defined
/// once: the controller writes under them, and the driver finds an ack's first record by the
/// same key to anchor a repeated answer (they once spelled the format separately).
pub mod dedup_key {
    /// The received document of revision `revision` of `event_id`.
    #[must_use]
    pub fn event_received(event_id: &str, revision: u64) -> String {
        format!("event:{event_id}:{revision}")
    }

    /// Its interpretation (every target to a ceiling, the budget chain).
    #[must_use]
    pub fn interpretation(event_id: &str, revision: u64) -> String {
        format!("interpretation:{event_id}:{revision}")
    }

    /// Its acknowledgement: the answer every repeat of the revision gets again.
    #[must_use]
    pub fn ack(event_id: &str, revision: u64) -> String {
        format!("ack:{event_id}:{revision}")
    }
}

#[cfg(test)]
mod tests {
    use super::{DispatchRow, DispatchStatus, PlanRow, SuspendOutcome, SuspendResult};
    use crate::alloc::{FloorKind, Reason};

    /// The plan's and the dispatch's rows read and write the arrays the ledger has always held,
    /// their string columns now closed enums.
    #[test]
    fn plan_and_dispatch_rows_keep_their_recorded_form() {
        let plan = serde_json::json!(["job-1", 400.0, 3200.0, 9000.0, 1600.0, "tier", "at_tier_floor"]);
        let row: PlanRow = serde_json::from_value(plan.clone()).expect("reads");
        assert_eq!((row.floor_kind(), row.reason()), (FloorKind::Tier, Reason::AtTierFloor));
        assert_eq!((row.cap_w(), row.floor_w()), (400.0, 1600.0));
        assert_eq!(serde_json::to_value(&row).expect("writes"), plan);
        for (name, status, confirmed) in [
            ("applied", DispatchStatus::Applied, true),
            ("stale", DispatchStatus::Stale, true),
            ("unknown_job", DispatchStatus::UnknownJob, false),
            ("failed", DispatchStatus::Failed, false),
        ] {
            let recorded = serde_json::json!(["job-1", 400.0, 7, name, null, null]);
            let row: DispatchRow = serde_json::from_value(recorded.clone()).expect("reads");
            assert_eq!(
                (row.status(), row.confirmed(), row.generation()),
                (status, confirmed, 7)
            );
            assert_eq!(serde_json::to_value(&row).expect("writes"), recorded);
        }
    }

    /// The closed enum reads and writes the strings the ledger has always held.
    #[test]
    fn suspend_outcomes_keep_their_recorded_names() {
        for (result, name) in [
            (SuspendResult::Suspended, "suspended"),
            (SuspendResult::Resumed, "resumed"),
            (SuspendResult::Failed, "failed"),
        ] {
            let recorded = serde_json::json!({"job": "j1", "outcome": name});
            let read: SuspendOutcome = serde_json::from_value(recorded.clone()).expect("reads");
            assert_eq!(read.outcome, result);
            assert_eq!(serde_json::to_value(&read).expect("writes"), recorded);
        }
        assert!(serde_json::from_value::<SuspendOutcome>(serde_json::json!({"job": "j1", "outcome": "lost"})).is_err());
    }
}
