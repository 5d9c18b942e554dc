//! The JSON documents the gateway publishes, each with its JSON Schema (draft 2020-12):
//!
//! | Type | `schema` | Topic | Schema constant |
//! |---|---|---|---|
//! | [`AckPayload`] | `dr.ack/1` | `{prefix}/{site}/acks/{event_id}` | [`DR_ACK_JSON_SCHEMA`] |
//! | [`StatusPayload`] | `dr.status/1` | `{prefix}/{site}/status` (retained) | [`DR_STATUS_JSON_SCHEMA`] |
//! | [`TelemetryPayload`] | `dr.telemetry/1` | `{prefix}/{site}/telemetry` | [`DR_TELEMETRY_JSON_SCHEMA`] |
//! | [`ReportPayload`] | `dr.report/1` | `{prefix}/{site}/reports/{event_id}` | [`DR_REPORT_JSON_SCHEMA`] |
//!
//! The same schemas ship as `deploy/schemas/dr.{ack,status,telemetry,report}.schema.json` for
//! MQTT-facing users who never read Rust; a test keeps the files equal to the constants.
//!
//! Conventions shared by all four: power is in kW, energy in kWh, instants are RFC 3339 UTC
//! (`2026-07-14T19:00:00Z`), every field is always present (an unknown value is `null`, never an
//! absent key), and unknown fields are refused (`additionalProperties: false`). Within a version
//! fields are only ever added (`flexibility` and `forecast` joined `dr.telemetry/1` that way), each
//! with the schema files updated in the same change: a consumer that validates should take the
//! schema shipped with the gateway it talks to, or ignore fields it does not know. Renaming or
//! removing a field means a new version. A number that is NaN or infinite is refused when serializing
//! ([`to_json`]) instead of silently becoming `null`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, Serializer};

/// `schema` of an acknowledgement.
pub const DR_ACK_SCHEMA: &str = "dr.ack/1";
/// `schema` of a status document.
pub const DR_STATUS_SCHEMA: &str = "dr.status/1";
/// `schema` of a telemetry sample.
pub const DR_TELEMETRY_SCHEMA: &str = "dr.telemetry/1";
/// `schema` of a performance report.
pub const DR_REPORT_SCHEMA: &str = "dr.report/1";

/// A payload could not be serialized.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// A number is NaN or infinite (JSON has no such numbers), or serde failed otherwise.
    #[error("cannot serialize the payload: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Serializes a payload to compact JSON, refusing NaN and infinite numbers.
pub fn to_json<T: Serialize>(payload: &T) -> Result<Vec<u8>, PayloadError> {
    Ok(serde_json::to_vec(payload)?)
}

fn finite<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        Err(serde::ser::Error::custom(format!(
            "{v} is not a finite number; JSON cannot carry it"
        )))
    }
}

#[allow(clippy::ref_option)] // serde's serialize_with passes `&Option<f64>`.
fn finite_opt<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
    match v {
        Some(x) => finite(x, s),
        None => s.serialize_none(),
    }
}

/// Whether the gateway takes part in an event (OpenADR optIn / optOut).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Opt {
    /// The gateway will follow the event.
    In,
    /// The gateway will not follow the event (`reason` says why).
    Out,
}

/// A range of meter power, kW.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KwRange {
    /// Lower bound, kW.
    #[serde(serialize_with = "finite")]
    pub lo: f64,
    /// Upper bound, kW.
    #[serde(serialize_with = "finite")]
    pub hi: f64,
}

/// `dr.ack/1`: the receipt of one event revision, published on `acks/{event_id}` after the
/// event is recorded, so that the utility learns whether the site takes part and what the meter
/// will read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckPayload {
    /// Always [`DR_ACK_SCHEMA`].
    pub schema: String,
    /// The acknowledged event.
    pub event_id: String,
    /// The acknowledged revision.
    pub revision: u64,
    /// When the gateway received the event.
    pub received_at: DateTime<Utc>,
    /// Whether the gateway takes part.
    pub opt: Opt,
    /// Why the gateway opted out or ignores part of the event; `null` otherwise.
    pub reason: Option<String>,
    /// The meter ceiling the gateway accepted as its target, kW.
    #[serde(serialize_with = "finite_opt")]
    pub accepted_target_kw: Option<f64>,
    /// The meter reading the gateway expects while it follows the event.
    pub expected_meter_kw: Option<KwRange>,
    /// The counterparty's anchor into the gateway's tamper-evident log: the hash of the ledger
    /// record that holds this acknowledgement (the decision, and the SHA-256 of the document it
    /// answers), which chains over every earlier record, the received document among them.
    pub log_checkpoint: String,
    /// Sequence number of the ledger record `log_checkpoint` is the hash of. Absent in acks of
    /// gateways that anchored the ack on the record before the event's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_seq: Option<u64>,
}

impl AckPayload {
    /// An acknowledgement with the schema filled in and no reason, target or expectation.
    #[must_use]
    pub fn new(
        event_id: impl Into<String>,
        revision: u64,
        received_at: DateTime<Utc>,
        opt: Opt,
        log_checkpoint: impl Into<String>,
    ) -> Self {
        Self {
            schema: DR_ACK_SCHEMA.to_owned(),
            event_id: event_id.into(),
            revision,
            received_at,
            opt,
            reason: None,
            accepted_target_kw: None,
            expected_meter_kw: None,
            log_checkpoint: log_checkpoint.into(),
            log_seq: None,
        }
    }
}

/// Liveness of the gateway as the utility sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GatewayState {
    /// Connected and able to act on events.
    Online,
    /// Gone: the Last Will, or an orderly shutdown.
    Offline,
    /// Connected, but cannot act fully (a meter or a cluster backend is missing).
    Degraded,
}

/// Where the gateway is within an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Lowering power towards the event's target.
    RampingDown,
    /// Holding the target.
    Holding,
    /// Releasing the ceiling after the event.
    RampingUp,
    /// No event in force.
    Idle,
}

/// `dr.status/1`: the gateway's retained state on `status`; its offline form is the Last Will,
/// so a subscriber always finds the latest word of the gateway, even after a crash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusPayload {
    /// Always [`DR_STATUS_SCHEMA`].
    pub schema: String,
    /// The site the gateway serves.
    pub site: String,
    /// Online, offline or degraded.
    pub state: GatewayState,
    /// The event in force, if any.
    pub active_event: Option<String>,
    /// Where the gateway is within that event; `null` when unknown (e.g. in the Last Will).
    pub phase: Option<Phase>,
    /// Latest meter reading, kW; `null` unless it was read off the meter (see `meter_quality`).
    #[serde(serialize_with = "finite_opt")]
    pub meter_kw: Option<f64>,
    /// Where the gateway's meter figure comes from: `measured` (a reading, then in `meter_kw`),
    /// `stale` or `missing` (a meter source failed: the facility model's upper estimate stands
    /// in), `model` (no meter source: the facility model's estimate); `null` when unknown.
    #[serde(default)]
    pub meter_quality: Option<String>,
    /// Latest sum of GPU board power, kW.
    #[serde(serialize_with = "finite_opt")]
    pub gpu_board_kw: Option<f64>,
    /// How far the site could lower its meter power now, kW.
    #[serde(serialize_with = "finite_opt")]
    pub flex_available_kw: Option<f64>,
    /// When this status was written. In the Last Will: when the connection that registered it
    /// was opened (the broker publishes the Will unchanged).
    pub ts: DateTime<Utc>,
    /// Hash of the latest ledger checkpoint.
    pub log_checkpoint: Option<String>,
}

impl StatusPayload {
    /// A status with everything but the state unknown.
    #[must_use]
    pub fn new(site: impl Into<String>, state: GatewayState, ts: DateTime<Utc>) -> Self {
        Self {
            schema: DR_STATUS_SCHEMA.to_owned(),
            site: site.into(),
            state,
            active_event: None,
            phase: None,
            meter_kw: None,
            meter_quality: None,
            gpu_board_kw: None,
            flex_available_kw: None,
            ts,
            log_checkpoint: None,
        }
    }

    /// The Last Will: offline, nothing else known.
    #[must_use]
    pub fn offline(site: impl Into<String>, ts: DateTime<Utc>) -> Self {
        Self::new(site, GatewayState::Offline, ts)
    }
}

/// `dr.telemetry/1`: one periodic sample of the site's power.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryPayload {
    /// Always [`DR_TELEMETRY_SCHEMA`].
    pub schema: String,
    /// The site the gateway serves.
    pub site: String,
    /// When the sample was taken.
    pub ts: DateTime<Utc>,
    /// Meter power, kW; `null` when the meter is not reading (see `meter_quality`).
    #[serde(serialize_with = "finite_opt")]
    pub meter_kw: Option<f64>,
    /// Where the gateway's meter figure comes from: `measured`, `stale`, `missing` or `model`
    /// (see [`StatusPayload::meter_quality`]); `meter_kw` is given only when `measured`.
    #[serde(default)]
    pub meter_quality: Option<String>,
    /// Sum of GPU board power, kW; `null` when no backend reports.
    #[serde(serialize_with = "finite_opt")]
    pub gpu_board_kw: Option<f64>,
    /// How far the site could lower its meter power now, kW.
    #[serde(serialize_with = "finite_opt")]
    pub flex_available_kw: Option<f64>,
    /// The site's flexibility curve now: what shedding each amount at the meter is expected to
    /// cost the running jobs, ascending from no shed to every job at its floor (the planner's
    /// estimates, not measurements); `null` when the gateway has none (no telemetry yet, or a
    /// proportional policy). Absent in samples of older gateways.
    #[serde(default)]
    pub flexibility: Option<Vec<FlexOffer>>,
    /// What the site expects it can shed at the meter in the next 48 hours, hour by hour; `null`
    /// when the gateway has none (no flexibility curve yet, or a proportional policy). Absent in
    /// samples of older gateways.
    #[serde(default)]
    pub forecast: Option<TelemetryForecast>,
}

/// The site's flexibility forecast in `dr.telemetry/1`: hour by hour over the next 48 hours, the
/// most the site can shed at the meter while losing at most `cost_ceiling` of the objective's
/// value, as the 10th, 50th and 90th percentiles of its distribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryForecast {
    /// When the gateway made it (it makes one at least every 15 minutes, and whenever its
    /// flexibility curve changes).
    pub generated_at: DateTime<Utc>,
    /// The largest share of the objective's value (0–1) the figures allow the jobs to lose.
    #[serde(serialize_with = "finite")]
    pub cost_ceiling: f64,
    /// The objective the ceiling is a share of (`progress` or `tokens`); `null` when unknown.
    pub objective: Option<String>,
    /// The hours, in time order, from `generated_at`.
    pub hourly: Vec<ForecastHour>,
}

/// One hour of a [`TelemetryForecast`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForecastHour {
    /// Its start.
    pub start: DateTime<Utc>,
    /// Its end (exclusive).
    pub end: DateTime<Utc>,
    /// The most the site can shed at the meter within the cost ceiling, kW.
    pub available_kw: KwBand,
}

/// A distribution's 10th, 50th and 90th percentiles, kW: `p10 <= p50 <= p90`. `p10` is exceeded
/// nine times in ten (what the energy trade calls the "P90"): declare at `p10` for 90 %
/// confidence.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KwBand {
    /// 10th percentile, kW.
    #[serde(serialize_with = "finite")]
    pub p10: f64,
    /// Median, kW.
    #[serde(serialize_with = "finite")]
    pub p50: f64,
    /// 90th percentile, kW.
    #[serde(serialize_with = "finite")]
    pub p90: f64,
}

/// One level of the flexibility curve in `dr.telemetry/1`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlexOffer {
    /// The meter reduction this level gives at least (the facility model's lower bound), kW.
    #[serde(serialize_with = "finite")]
    pub meter_shed_kw: f64,
    /// Expected GPU-weighted progress lost (0 = none, 1 = every job stopped).
    #[serde(serialize_with = "finite")]
    pub progress_lost: f64,
    /// Expected tokens/s lost, summed over the jobs.
    #[serde(serialize_with = "finite")]
    pub tokens_lost_per_s: f64,
    /// Jobs the plan for this level would cap.
    pub jobs_capped: u64,
}

impl TelemetryPayload {
    /// A sample with the schema filled in.
    #[must_use]
    pub fn new(
        site: impl Into<String>,
        ts: DateTime<Utc>,
        meter_kw: Option<f64>,
        gpu_board_kw: Option<f64>,
        flex_available_kw: Option<f64>,
    ) -> Self {
        Self {
            schema: DR_TELEMETRY_SCHEMA.to_owned(),
            site: site.into(),
            ts,
            meter_kw,
            meter_quality: None,
            gpu_board_kw,
            flex_available_kw,
            flexibility: None,
            forecast: None,
        }
    }
}

/// One interval of a performance report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportInterval {
    /// Interval start.
    pub start: DateTime<Utc>,
    /// Interval end (exclusive).
    pub end: DateTime<Utc>,
    /// The meter ceiling in force, kW.
    #[serde(serialize_with = "finite")]
    pub ceiling_kw: f64,
    /// The baseline the reduction is measured against, kW; `null` when the event has none.
    #[serde(serialize_with = "finite_opt")]
    pub baseline_kw: Option<f64>,
    /// Mean meter power over the interval, kW; `null` when the meter had no data.
    #[serde(serialize_with = "finite_opt")]
    pub mean_meter_kw: Option<f64>,
    /// `baseline_kw - mean_meter_kw`; `null` when either is unknown.
    #[serde(serialize_with = "finite_opt")]
    pub delivered_reduction_kw: Option<f64>,
    /// `max(0, mean_meter_kw - ceiling_kw)`; `null` when the meter had no data.
    #[serde(serialize_with = "finite_opt")]
    pub shortfall_kw: Option<f64>,
    /// Whether the interval met the ceiling; `null` when the meter had no data.
    pub compliant: Option<bool>,
    /// Samples in the interval that were the facility model's figure, not a meter reading: left
    /// out of `mean_meter_kw` and of everything computed from it.
    #[serde(default)]
    pub modelled_samples: u64,
}

impl ReportInterval {
    /// An interval with the derived fields (`delivered_reduction_kw`, `shortfall_kw`,
    /// `compliant`) computed from the ceiling, the baseline and the mean meter power.
    #[must_use]
    pub fn measured(
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        ceiling_kw: f64,
        baseline_kw: Option<f64>,
        mean_meter_kw: Option<f64>,
    ) -> Self {
        let shortfall_kw = mean_meter_kw.map(|m| (m - ceiling_kw).max(0.0));
        Self {
            start,
            end,
            ceiling_kw,
            baseline_kw,
            mean_meter_kw,
            delivered_reduction_kw: baseline_kw.zip(mean_meter_kw).map(|(b, m)| b - m),
            shortfall_kw,
            compliant: shortfall_kw.map(|s| s <= 0.0),
            modelled_samples: 0,
        }
    }

    /// Shortfall energy of this interval, kWh (0 when unknown or when `end` is before `start`).
    #[must_use]
    pub fn shortfall_kwh(&self) -> f64 {
        let hours = (self.end - self.start).num_milliseconds().max(0) as f64 / 3_600_000.0;
        self.shortfall_kw.unwrap_or(0.0) * hours
    }
}

/// `dr.report/1`: what the site delivered during one event, published on
/// `reports/{event_id}` after the event ends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReportPayload {
    /// Always [`DR_REPORT_SCHEMA`].
    pub schema: String,
    /// The site the gateway serves.
    pub site: String,
    /// The reported event.
    pub event_id: String,
    /// The revision that was in force.
    pub revision: u64,
    /// One entry per interval, in time order.
    pub intervals: Vec<ReportInterval>,
    /// Sum over the intervals of `shortfall_kw × duration`, kWh (unknown intervals count 0).
    #[serde(serialize_with = "finite")]
    pub total_shortfall_kwh: f64,
    /// Hash of the ledger checkpoint that covers the event.
    pub log_checkpoint: String,
}

impl ReportPayload {
    /// A report with `total_shortfall_kwh` computed from the intervals.
    #[must_use]
    pub fn new(
        site: impl Into<String>,
        event_id: impl Into<String>,
        revision: u64,
        intervals: Vec<ReportInterval>,
        log_checkpoint: impl Into<String>,
    ) -> Self {
        let total_shortfall_kwh = intervals.iter().map(ReportInterval::shortfall_kwh).sum();
        Self {
            schema: DR_REPORT_SCHEMA.to_owned(),
            site: site.into(),
            event_id: event_id.into(),
            revision,
            intervals,
            total_shortfall_kwh,
            log_checkpoint: log_checkpoint.into(),
        }
    }
}

/// JSON Schema of `dr.ack/1` ([`AckPayload`]); shipped as `deploy/schemas/dr.ack.schema.json`.
pub const DR_ACK_JSON_SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://flexgate.invalid/schemas/dr.ack-1.json",
  "title": "dr.ack/1",
  "description": "A flexgate gateway's receipt of one dr.event/1 revision, published with QoS 1 on {prefix}/{site}/acks/{event_id} after the event is recorded in the gateway's ledger. Every field is present; unknown values are null.",
  "type": "object",
  "additionalProperties": false,
  "required": ["schema", "event_id", "revision", "received_at", "opt", "reason", "accepted_target_kw", "expected_meter_kw", "log_checkpoint"],
  "properties": {
    "schema": { "const": "dr.ack/1" },
    "event_id": { "type": "string", "minLength": 1, "maxLength": 128, "description": "The acknowledged event." },
    "revision": { "type": "integer", "minimum": 0, "description": "The acknowledged revision." },
    "received_at": { "type": "string", "format": "date-time", "description": "When the gateway received the event (RFC 3339, UTC)." },
    "opt": { "enum": ["in", "out"], "description": "Whether the gateway takes part in the event." },
    "reason": { "type": ["string", "null"], "description": "Why the gateway opted out, or ignores part of the event; null otherwise." },
    "accepted_target_kw": { "type": ["number", "null"], "description": "The meter ceiling the gateway accepted as its target, kW." },
    "expected_meter_kw": {
      "description": "The meter reading the gateway expects while it follows the event, kW.",
      "type": ["object", "null"],
      "additionalProperties": false,
      "required": ["lo", "hi"],
      "properties": {
        "lo": { "type": "number" },
        "hi": { "type": "number" }
      }
    },
    "log_checkpoint": { "type": "string", "description": "Hash (lowercase hex SHA-256) of the ledger record that holds this acknowledgement: the decision and the SHA-256 of the document it answers (input_sha256). The record's hash chains over every earlier record, the received document among them, so rewriting either changes this hash." },
    "log_seq": { "type": "integer", "minimum": 1, "description": "Sequence number of the ledger record log_checkpoint is the hash of." }
  }
}
"##;

/// JSON Schema of `dr.status/1` ([`StatusPayload`]); shipped as
/// `deploy/schemas/dr.status.schema.json`.
pub const DR_STATUS_JSON_SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://flexgate.invalid/schemas/dr.status-1.json",
  "title": "dr.status/1",
  "description": "A flexgate gateway's state, published retained with QoS 1 on {prefix}/{site}/status. The gateway registers the offline form (state offline, other values null) as its MQTT Last Will, so the retained status turns offline when the gateway vanishes. Every field is present; unknown values are null.",
  "type": "object",
  "additionalProperties": false,
  "required": ["schema", "site", "state", "active_event", "phase", "meter_kw", "meter_quality", "gpu_board_kw", "flex_available_kw", "ts", "log_checkpoint"],
  "properties": {
    "schema": { "const": "dr.status/1" },
    "site": { "type": "string", "minLength": 1, "maxLength": 128 },
    "state": { "enum": ["online", "offline", "degraded"], "description": "degraded: connected, but a meter or a cluster backend is missing." },
    "active_event": { "type": ["string", "null"], "description": "The event in force, if any." },
    "phase": { "enum": ["ramping_down", "holding", "ramping_up", "idle", null], "description": "Where the gateway is within the active event; null when unknown." },
    "meter_kw": { "type": ["number", "null"], "description": "Latest meter reading, kW; null unless it was read off the meter (meter_quality measured)." },
    "meter_quality": { "enum": ["measured", "stale", "missing", "model", null], "description": "Where the gateway's meter figure comes from: a reading (measured), the facility model's upper estimate because a meter source failed (stale, missing), or the facility model's estimate on a site without a meter source (model); null when unknown." },
    "gpu_board_kw": { "type": ["number", "null"], "description": "Latest sum of GPU board power, kW." },
    "flex_available_kw": { "type": ["number", "null"], "description": "How far the site could lower its meter power now, kW." },
    "ts": { "type": "string", "format": "date-time", "description": "When the status was written; in the Last Will, when the connection that registered it opened." },
    "log_checkpoint": { "type": ["string", "null"], "description": "Hash of the latest ledger checkpoint." }
  }
}
"##;

/// JSON Schema of `dr.telemetry/1` ([`TelemetryPayload`]); shipped as
/// `deploy/schemas/dr.telemetry.schema.json`.
pub const DR_TELEMETRY_JSON_SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://flexgate.invalid/schemas/dr.telemetry-1.json",
  "title": "dr.telemetry/1",
  "description": "A periodic power sample of a flexgate site, published with QoS 1 on {prefix}/{site}/telemetry. Every field is present; unknown values are null.",
  "type": "object",
  "additionalProperties": false,
  "required": ["schema", "site", "ts", "meter_kw", "meter_quality", "gpu_board_kw", "flex_available_kw", "flexibility", "forecast"],
  "properties": {
    "schema": { "const": "dr.telemetry/1" },
    "site": { "type": "string", "minLength": 1, "maxLength": 128 },
    "ts": { "type": "string", "format": "date-time", "description": "When the sample was taken (RFC 3339, UTC)." },
    "meter_kw": { "type": ["number", "null"], "description": "Meter power, kW; null when the meter is not reading (meter_quality is not measured)." },
    "meter_quality": { "enum": ["measured", "stale", "missing", "model", null], "description": "Where the gateway's meter figure comes from: measured, stale, missing or model (see dr.status/1); meter_kw is given only when measured." },
    "gpu_board_kw": { "type": ["number", "null"], "description": "Sum of GPU board power, kW; null when no backend reports." },
    "flex_available_kw": { "type": ["number", "null"], "description": "How far the site could lower its meter power now, kW." },
    "flexibility": {
      "type": ["array", "null"],
      "description": "The site's flexibility curve now, ascending from no shed to every job at its floor: the planner's estimates of what each meter reduction would cost the running jobs; null when the gateway has none.",
      "items": {
        "type": "object",
        "additionalProperties": false,
        "required": ["meter_shed_kw", "progress_lost", "tokens_lost_per_s", "jobs_capped"],
        "properties": {
          "meter_shed_kw": { "type": "number", "minimum": 0, "description": "The meter reduction this level gives at least (facility model's lower bound), kW." },
          "progress_lost": { "type": "number", "minimum": 0, "description": "Expected GPU-weighted progress lost (0 = none, 1 = every job stopped)." },
          "tokens_lost_per_s": { "type": "number", "minimum": 0, "description": "Expected tokens/s lost, summed over the jobs." },
          "jobs_capped": { "type": "integer", "minimum": 0, "description": "Jobs the plan for this level would cap." }
        }
      }
    },
    "forecast": {
      "type": ["object", "null"],
      "description": "What the site expects it can shed at the meter in the next 48 hours, hour by hour, within a cost ceiling; null when the gateway has none (no flexibility curve yet, or a proportional policy).",
      "additionalProperties": false,
      "required": ["generated_at", "cost_ceiling", "objective", "hourly"],
      "properties": {
        "generated_at": { "type": "string", "format": "date-time", "description": "When the gateway made the forecast (at least every 15 minutes, and whenever its flexibility curve changes)." },
        "cost_ceiling": { "type": "number", "minimum": 0, "description": "The largest share of the objective's value (0-1) the figures allow the jobs to lose." },
        "objective": { "type": ["string", "null"], "description": "The objective the ceiling is a share of: progress (GPU-weighted progress) or tokens (tokens/s)." },
        "hourly": {
          "type": "array",
          "description": "The hours from generated_at, in time order (48 of them).",
          "items": {
            "type": "object",
            "additionalProperties": false,
            "required": ["start", "end", "available_kw"],
            "properties": {
              "start": { "type": "string", "format": "date-time" },
              "end": { "type": "string", "format": "date-time", "description": "Exclusive." },
              "available_kw": {
                "type": "object",
                "description": "The most the site can shed at the meter within the cost ceiling, kW: the 10th, 50th and 90th percentiles, p10 <= p50 <= p90. p10 is exceeded nine times in ten (the energy trade's P90): declare at p10 for 90 % confidence.",
                "additionalProperties": false,
                "required": ["p10", "p50", "p90"],
                "properties": {
                  "p10": { "type": "number", "minimum": 0 },
                  "p50": { "type": "number", "minimum": 0 },
                  "p90": { "type": "number", "minimum": 0 }
                }
              }
            }
          }
        }
      }
    }
  }
}
"##;

/// JSON Schema of `dr.report/1` ([`ReportPayload`]); shipped as
/// `deploy/schemas/dr.report.schema.json`.
pub const DR_REPORT_JSON_SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://flexgate.invalid/schemas/dr.report-1.json",
  "title": "dr.report/1",
  "description": "What a flexgate site delivered during one event, published with QoS 1 on {prefix}/{site}/reports/{event_id} after the event ends. Every field is present; unknown values are null.",
  "type": "object",
  "additionalProperties": false,
  "required": ["schema", "site", "event_id", "revision", "intervals", "total_shortfall_kwh", "log_checkpoint"],
  "properties": {
    "schema": { "const": "dr.report/1" },
    "site": { "type": "string", "minLength": 1, "maxLength": 128 },
    "event_id": { "type": "string", "minLength": 1, "maxLength": 128 },
    "revision": { "type": "integer", "minimum": 0, "description": "The revision that was in force." },
    "intervals": { "type": "array", "items": { "$ref": "#/$defs/interval" }, "description": "One entry per interval, in time order." },
    "total_shortfall_kwh": { "type": "number", "minimum": 0, "description": "Sum over the intervals of shortfall_kw times the interval length, kWh; intervals without meter data count 0." },
    "log_checkpoint": { "type": "string", "description": "Hash of the ledger checkpoint that covers the event." }
  },
  "$defs": {
    "interval": {
      "type": "object",
      "additionalProperties": false,
      "required": ["start", "end", "ceiling_kw", "baseline_kw", "mean_meter_kw", "delivered_reduction_kw", "shortfall_kw", "compliant", "modelled_samples"],
      "properties": {
        "start": { "type": "string", "format": "date-time" },
        "end": { "type": "string", "format": "date-time", "description": "Exclusive." },
        "ceiling_kw": { "type": "number", "description": "The meter ceiling in force, kW." },
        "baseline_kw": { "type": ["number", "null"], "description": "The baseline the reduction is measured against, kW; null when the event has none." },
        "mean_meter_kw": { "type": ["number", "null"], "description": "Mean meter power over the interval, kW; null when the meter had no data." },
        "delivered_reduction_kw": { "type": ["number", "null"], "description": "baseline_kw - mean_meter_kw; null when either is unknown." },
        "shortfall_kw": { "type": ["number", "null"], "minimum": 0, "description": "max(0, mean_meter_kw - ceiling_kw); null when the meter had no data." },
        "compliant": { "type": ["boolean", "null"], "description": "Whether the interval met the ceiling; null when the meter had no data." },
        "modelled_samples": { "type": "integer", "minimum": 0, "description": "Samples in the interval that were the facility model's figure, not a meter reading: left out of mean_meter_kw and everything computed from it." }
      }
    }
  }
}
"##;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    /// Enough of JSON Schema for these four schemas: type, const, enum, required, properties,
    /// additionalProperties: false, items, local $ref, minimum, minLength/maxLength and
    /// format: date-time. Returns the first violation.
    fn check(schema: &Value, root: &Value, v: &Value, path: &str) -> Result<(), String> {
        if let Some(r) = schema.get("$ref").and_then(Value::as_str) {
            let name = r.strip_prefix("#/$defs/").unwrap();
            return check(&root["$defs"][name], root, v, path);
        }
        if let Some(c) = schema.get("const")
            && c != v
        {
            return Err(format!("{path}: {v} is not {c}"));
        }
        if let Some(e) = schema.get("enum").and_then(Value::as_array)
            && !e.contains(v)
        {
            return Err(format!("{path}: {v} not in {e:?}"));
        }
        if let Some(ty) = schema.get("type") {
            let types: Vec<&str> = match ty {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().map(|x| x.as_str().unwrap()).collect(),
                _ => panic!("bad type"),
            };
            let kind = match v {
                Value::Null => "null",
                Value::Bool(_) => "boolean",
                Value::Number(n) if n.is_u64() || n.is_i64() => "integer",
                Value::Number(_) => "number",
                Value::String(_) => "string",
                Value::Array(_) => "array",
                Value::Object(_) => "object",
            };
            if !(types.contains(&kind) || (kind == "integer" && types.contains(&"number"))) {
                return Err(format!("{path}: {kind} is not {types:?}"));
            }
        }
        if v.is_null() {
            return Ok(());
        }
        if let (Some(min), Some(n)) = (schema.get("minimum").and_then(Value::as_f64), v.as_f64())
            && n < min
        {
            return Err(format!("{path}: {n} < {min}"));
        }
        if let Some(s) = v.as_str() {
            let len = s.chars().count() as u64;
            if schema.get("minLength").and_then(Value::as_u64).is_some_and(|m| len < m)
                || schema.get("maxLength").and_then(Value::as_u64).is_some_and(|m| len > m)
            {
                return Err(format!("{path}: length {len}"));
            }
            if schema.get("format").and_then(Value::as_str) == Some("date-time") {
                DateTime::parse_from_rfc3339(s).map_err(|e| format!("{path}: {s}: {e}"))?;
            }
        }
        if let Some(obj) = v.as_object() {
            for req in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
                let req = req.as_str().unwrap();
                if !obj.contains_key(req) {
                    return Err(format!("{path}: missing {req}"));
                }
            }
            let props = schema.get("properties").and_then(Value::as_object);
            for (k, item) in obj {
                match props.and_then(|p| p.get(k)) {
                    Some(sub) => check(sub, root, item, &format!("{path}.{k}"))?,
                    None if schema.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("{path}: unknown field {k}"));
                    }
                    None => {}
                }
            }
        }
        if let (Some(items), Some(arr)) = (schema.get("items"), v.as_array()) {
            for (i, item) in arr.iter().enumerate() {
                check(items, root, item, &format!("{path}[{i}]"))?;
            }
        }
        Ok(())
    }

    fn validate(schema_text: &str, payload: &impl Serialize) -> Result<(), String> {
        let schema: Value = serde_json::from_str(schema_text).unwrap();
        let doc: Value = serde_json::from_slice(&to_json(payload).unwrap()).unwrap();
        check(&schema, &schema, &doc, "$")
    }

    fn sample_ack() -> AckPayload {
        let mut ack = AckPayload::new("ev-2026-0142", 3, t("2026-07-14T18:59:41Z"), Opt::In, "ab12");
        ack.accepted_target_kw = Some(8000.0);
        ack.expected_meter_kw = Some(KwRange { lo: 7700.0, hi: 7950.0 });
        ack
    }

    fn sample_status() -> StatusPayload {
        let mut s = StatusPayload::new("dc-east", GatewayState::Online, t("2026-07-14T19:05:00Z"));
        s.active_event = Some("ev-2026-0142".into());
        s.phase = Some(Phase::RampingDown);
        s.meter_kw = Some(7930.0);
        s.gpu_board_kw = Some(3010.0);
        s.flex_available_kw = Some(2400.0);
        s.log_checkpoint = Some("ab12".into());
        s
    }

    fn sample_forecast() -> TelemetryForecast {
        let hour = |h: u32, p10: f64| ForecastHour {
            start: t("2026-07-14T19:05:00Z") + chrono::Duration::hours(i64::from(h)),
            end: t("2026-07-14T20:05:00Z") + chrono::Duration::hours(i64::from(h)),
            available_kw: KwBand {
                p10,
                p50: p10 + 150.0,
                p90: p10 + 320.0,
            },
        };
        TelemetryForecast {
            generated_at: t("2026-07-14T19:05:00Z"),
            cost_ceiling: 0.1,
            objective: Some("progress".into()),
            hourly: vec![hour(0, 1180.0), hour(1, 1010.5)],
        }
    }

    fn sample_report() -> ReportPayload {
        let intervals = vec![
            ReportInterval::measured(
                t("2026-07-14T19:00:00Z"),
                t("2026-07-14T19:30:00Z"),
                8000.0,
                Some(10_000.0),
                Some(8200.0),
            ),
            ReportInterval::measured(t("2026-07-14T19:30:00Z"), t("2026-07-14T20:00:00Z"), 8000.0, None, None),
        ];
        ReportPayload::new("dc-east", "ev-2026-0142", 3, intervals, "cd34")
    }

    #[test]
    fn ack_has_the_documented_shape() {
        let v = serde_json::to_value(sample_ack()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"schema":"dr.ack/1","event_id":"ev-2026-0142","revision":3,
                "received_at":"2026-07-14T18:59:41Z","opt":"in","reason":null,"accepted_target_kw":8000.0,
                "expected_meter_kw":{"lo":7700.0,"hi":7950.0},"log_checkpoint":"ab12"})
        );
        assert_eq!(serde_json::from_value::<AckPayload>(v).unwrap(), sample_ack());
    }

    #[test]
    fn samples_validate_against_their_schemas() {
        validate(DR_ACK_JSON_SCHEMA, &sample_ack()).unwrap();
        let mut out = AckPayload::new("e", 0, t("2026-07-14T18:59:41Z"), Opt::Out, "x");
        out.reason = Some("test event".into());
        validate(DR_ACK_JSON_SCHEMA, &out).unwrap();
        validate(DR_STATUS_JSON_SCHEMA, &sample_status()).unwrap();
        validate(
            DR_STATUS_JSON_SCHEMA,
            &StatusPayload::offline("dc-east", t("2026-07-14T19:05:00Z")),
        )
        .unwrap();
        let mut tele = TelemetryPayload::new("dc-east", t("2026-07-14T19:05:00Z"), Some(7930.5), None, Some(2400.0));
        validate(DR_TELEMETRY_JSON_SCHEMA, &tele).unwrap();
        tele.flexibility = Some(vec![
            FlexOffer {
                meter_shed_kw: 0.0,
                progress_lost: 0.0,
                tokens_lost_per_s: 0.0,
                jobs_capped: 0,
            },
            FlexOffer {
                meter_shed_kw: 1200.0,
                progress_lost: 0.08,
                tokens_lost_per_s: 51_000.0,
                jobs_capped: 140,
            },
        ]);
        validate(DR_TELEMETRY_JSON_SCHEMA, &tele).unwrap();
        let mut doc = serde_json::to_value(&tele).unwrap();
        doc["flexibility"][1]["jobs_capped"] = (-1).into();
        let schema: Value = serde_json::from_str(DR_TELEMETRY_JSON_SCHEMA).unwrap();
        assert!(
            check(&schema, &schema, &doc, "$").is_err(),
            "a negative count is refused"
        );
        tele.forecast = Some(sample_forecast());
        validate(DR_TELEMETRY_JSON_SCHEMA, &tele).unwrap();
        let doc = serde_json::to_value(&tele).unwrap();
        assert_eq!(serde_json::from_value::<TelemetryPayload>(doc.clone()).unwrap(), tele);
        // The forecast's objects: every field required and described, nothing else allowed.
        fn sorted(mut keys: Vec<&str>) -> Vec<&str> {
            keys.sort_unstable();
            keys
        }
        let forecast = &schema["properties"]["forecast"];
        let hour = &forecast["properties"]["hourly"]["items"];
        let band = &hour["properties"]["available_kw"];
        let f = &doc["forecast"];
        for (sub, v) in [
            (forecast, f),
            (hour, &f["hourly"][0]),
            (band, &f["hourly"][0]["available_kw"]),
        ] {
            let fields = sorted(v.as_object().unwrap().keys().map(String::as_str).collect());
            let required = sorted(
                sub["required"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(Value::as_str)
                    .collect(),
            );
            let described = sorted(
                sub["properties"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(String::as_str)
                    .collect(),
            );
            assert_eq!((&fields, &fields), (&required, &described));
            assert_eq!(sub["additionalProperties"], Value::Bool(false));
        }
        let mut bad = doc.clone();
        bad["forecast"]["hourly"][0]["available_kw"]["p10"] = (-1.0).into();
        assert!(check(&schema, &schema, &bad, "$").is_err(), "a negative kW is refused");
        let mut nan = tele.clone();
        if let Some(f) = nan.forecast.as_mut() {
            f.hourly[1].available_kw.p50 = f64::NAN;
        }
        assert!(to_json(&nan).is_err(), "NaN is never serialised");
        validate(DR_REPORT_JSON_SCHEMA, &sample_report()).unwrap();
    }

    #[test]
    fn the_checker_catches_violations() {
        let schema: Value = serde_json::from_str(DR_STATUS_JSON_SCHEMA).unwrap();
        let mut doc = serde_json::to_value(sample_status()).unwrap();
        doc["state"] = "sleepy".into();
        assert!(check(&schema, &schema, &doc, "$").is_err());
        let mut doc = serde_json::to_value(sample_status()).unwrap();
        doc.as_object_mut().unwrap().remove("phase");
        assert!(check(&schema, &schema, &doc, "$").is_err());
        let mut doc = serde_json::to_value(sample_status()).unwrap();
        doc["extra"] = 1.into();
        assert!(check(&schema, &schema, &doc, "$").is_err());
        let mut doc = serde_json::to_value(sample_status()).unwrap();
        doc["meter_kw"] = "7930".into();
        assert!(check(&schema, &schema, &doc, "$").is_err());
        let schema: Value = serde_json::from_str(DR_REPORT_JSON_SCHEMA).unwrap();
        let mut doc = serde_json::to_value(sample_report()).unwrap();
        doc["intervals"][1]["end"] = "tomorrow".into();
        assert!(check(&schema, &schema, &doc, "$").is_err());
    }

    /// Every field of every type is `required` in its schema and listed in `properties`, and
    /// vice versa: the Rust types and the published schemas cannot drift apart.
    #[test]
    fn schema_field_sets_equal_the_types() {
        fn keys(v: &Value) -> Vec<String> {
            let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        }
        fn required(v: &Value) -> Vec<String> {
            let mut k: Vec<String> = v["required"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_owned())
                .collect();
            k.sort();
            k
        }
        let cases: [(&str, Value); 4] = [
            (DR_ACK_JSON_SCHEMA, serde_json::to_value(sample_ack()).unwrap()),
            (DR_STATUS_JSON_SCHEMA, serde_json::to_value(sample_status()).unwrap()),
            (
                DR_TELEMETRY_JSON_SCHEMA,
                serde_json::to_value(TelemetryPayload::new("s", t("2026-07-14T19:05:00Z"), None, None, None)).unwrap(),
            ),
            (DR_REPORT_JSON_SCHEMA, serde_json::to_value(sample_report()).unwrap()),
        ];
        // The one optional field (`dr.ack/1`'s `log_seq`, absent in acks of older gateways) is
        // in `properties` but not in `required`: compare `required` with a document without it
        // and `properties` with one that has it.
        let mut full_ack = sample_ack();
        full_ack.log_seq = Some(7);
        let optional = [("dr.ack/1", serde_json::to_value(full_ack).unwrap())];
        for (text, doc) in cases {
            let schema: Value = serde_json::from_str(text).unwrap();
            assert_eq!(keys(&doc), required(&schema), "{}", schema["title"]);
            let full = optional
                .iter()
                .find(|(title, _)| schema["title"] == *title)
                .map_or(&doc, |(_, d)| d);
            assert_eq!(keys(full), keys(&schema["properties"]), "{}", schema["title"]);
        }
        let schema: Value = serde_json::from_str(DR_REPORT_JSON_SCHEMA).unwrap();
        let iv = serde_json::to_value(&sample_report().intervals[0]).unwrap();
        assert_eq!(keys(&iv), required(&schema["$defs"]["interval"]));
        assert_eq!(keys(&iv), keys(&schema["$defs"]["interval"]["properties"]));
        let ack: Value = serde_json::from_str(DR_ACK_JSON_SCHEMA).unwrap();
        assert_eq!(
            keys(&serde_json::to_value(KwRange { lo: 1.0, hi: 2.0 }).unwrap()),
            keys(&ack["properties"]["expected_meter_kw"]["properties"])
        );
    }

    #[test]
    fn shipped_schema_files_equal_the_constants() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/schemas");
        for (file, constant) in [
            ("dr.ack.schema.json", DR_ACK_JSON_SCHEMA),
            ("dr.status.schema.json", DR_STATUS_JSON_SCHEMA),
            ("dr.telemetry.schema.json", DR_TELEMETRY_JSON_SCHEMA),
            ("dr.report.schema.json", DR_REPORT_JSON_SCHEMA),
        ] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            let shipped: Value = serde_json::from_str(&text).unwrap();
            let expected: Value = serde_json::from_str(constant).unwrap();
            assert_eq!(shipped, expected, "regenerate deploy/schemas/{file} from its constant");
        }
    }

    #[test]
    fn report_arithmetic() {
        let r = sample_report();
        let first = &r.intervals[0];
        assert_eq!(first.shortfall_kw, Some(200.0));
        assert_eq!(first.delivered_reduction_kw, Some(1800.0));
        assert_eq!(first.compliant, Some(false));
        assert_eq!(r.intervals[1].compliant, None);
        assert!((r.total_shortfall_kwh - 100.0).abs() < 1e-9);
        let ok = ReportInterval::measured(
            t("2026-07-14T19:00:00Z"),
            t("2026-07-14T19:30:00Z"),
            8000.0,
            None,
            Some(7000.0),
        );
        assert_eq!(ok.shortfall_kw, Some(0.0));
        assert_eq!(ok.compliant, Some(true));
    }

    #[test]
    fn non_finite_numbers_are_refused_not_nulled() {
        let mut ack = sample_ack();
        ack.accepted_target_kw = Some(f64::NAN);
        assert!(to_json(&ack).is_err());
        let mut ack = sample_ack();
        ack.expected_meter_kw = Some(KwRange {
            lo: f64::NEG_INFINITY,
            hi: 1.0,
        });
        assert!(to_json(&ack).is_err());
        let mut r = sample_report();
        r.total_shortfall_kwh = f64::INFINITY;
        let e = to_json(&r).unwrap_err();
        assert!(e.to_string().contains("finite"), "{e}");
    }
}
