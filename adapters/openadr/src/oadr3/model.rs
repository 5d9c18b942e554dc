//! Serde types for the OpenADR 3 objects a VEN reads (program, event, notification) and writes
//! (report).
//!
//! They are tolerant: every object keeps the fields it does not know in `extra`, so a 3.1.1
//! field or a private extension (User Guide "Private Extensions") survives a round trip, and
//! both 3.0 targets (`[{"type":"VEN_NAME","values":[..]}]`) and 3.1 targets (plain strings) are
//! accepted. For untrusted bytes use [`super::decode_any`], which adds size, depth and range
//! limits, refuses duplicate keys and names the field path in its errors;
//! `serde_json::from_slice::<Event>` also works but reports errors without a path and keeps the
//! last of two equal keys.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::time::{IsoDuration, serde_ts_opt};

/// The temporal part of an event or interval (User Guide §7.3): at the event level, defaults for
/// every interval; at the interval level, overrides.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IntervalPeriod {
    /// Absolute start; `0001-01-01` means "now" ([`super::time::is_now_sentinel`]).
    #[serde(default, with = "serde_ts_opt", skip_serializing_if = "Option::is_none")]
    pub start: Option<DateTime<Utc>>,
    /// Length of the interval (or of each interval, at the event level). `P9999Y` = forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<IsoDuration>,
    /// The receiver shifts the start by a uniform random amount in ±this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub randomize_start: Option<IsoDuration>,
}

/// One value of a payload: payload types carry numbers, strings (`ALERT_*`), booleans or points
/// (`CURVE`); the variant keeps the wire form so `800` stays an integer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PayloadValue {
    /// An integer or a float.
    Number(serde_json::Number),
    /// A string (alerts, `DISPATCH_INSTRUCTION`, private types).
    Text(String),
    /// A boolean.
    Bool(bool),
    /// A point (`CURVE`).
    Point {
        /// x coordinate.
        x: f64,
        /// y coordinate.
        y: f64,
    },
    /// Anything else, kept as given.
    Other(Value),
}

impl PayloadValue {
    /// The value as a float, when it is a number.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PayloadValue::Number(n) => n.as_f64(),
            _ => None,
        }
    }

    /// The value as plain JSON.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// A `valuesMap`: a type and its values (payloads, 3.0 targets, attributes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ValuesMap {
    /// The payload type, e.g. `IMPORT_CAPACITY_LIMIT`, `PRICE`, `USAGE`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The values; several values of a single-valued type split the interval (User Guide §7.3).
    #[serde(default)]
    pub values: Vec<PayloadValue>,
}

/// One target, in either specification version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Target {
    /// 3.1: a plain string, matched against the targets the VTN granted this VEN.
    Name(String),
    /// 3.0: a valuesMap such as `{"type":"VEN_NAME","values":["ven-1"]}`.
    Map {
        /// `VEN_NAME`, `GROUP`, `RESOURCE_NAME`, `POWER_SERVICE_LOCATION`, ...
        #[serde(rename = "type")]
        kind: String,
        /// The target values.
        #[serde(default)]
        values: Vec<Value>,
    },
}

/// An event interval: an id (for reports), optional overrides of the event's interval period,
/// and payloads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interval {
    /// Client-assigned number; reports echo it. Not a sequence number.
    pub id: i64,
    /// Overrides of the event-level interval period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_period: Option<IntervalPeriod>,
    /// The payloads (values by type).
    #[serde(default)]
    pub payloads: Vec<ValuesMap>,
}

/// Context for an event payload type: its units and currency.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventPayloadDescriptor {
    /// `EVENT_PAYLOAD_DESCRIPTOR`, when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_type: Option<String>,
    /// Which payload type this describes.
    pub payload_type: String,
    /// e.g. `KW`, `KWH`, `PERCENT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<String>,
    /// e.g. `USD`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub currency: Option<String>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A report request carried by an event or program.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportDescriptor {
    /// The report payload type asked for, e.g. `USAGE`.
    pub payload_type: String,
    /// e.g. `DIRECT_READ`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading_type: Option<String>,
    /// Units asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<String>,
    /// Whether one aggregated report is wanted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<bool>,
    /// First interval to report on (-1 = end of last interval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_interval: Option<i64>,
    /// Number of intervals (-1 = all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_intervals: Option<i64>,
    /// Historical (true) or forecast (false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub historical: Option<bool>,
    /// Intervals between reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency: Option<i64>,
    /// Number of reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repeat: Option<i64>,
    /// Fields this crate does not model (targets, reportIntervals, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// An OpenADR 3 event (3.0 and 3.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// VTN-assigned id; absent only in a create request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// When the VTN created it.
    #[serde(default, with = "serde_ts_opt", skip_serializing_if = "Option::is_none")]
    pub created_date_time: Option<DateTime<Utc>>,
    /// When the VTN last changed it: the only change marker 3.x has (no modificationNumber).
    #[serde(default, with = "serde_ts_opt", skip_serializing_if = "Option::is_none")]
    pub modification_date_time: Option<DateTime<Utc>>,
    /// `EVENT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_type: Option<String>,
    /// The program this event belongs to (the 3.x market context).
    #[serde(rename = "programID", default)]
    pub program_id: String,
    /// Free-form name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_name: Option<String>,
    /// 0 = highest, absent = lowest (the opposite of 2.0b; see [`super::Precedence`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
    /// Who the event is for; `None` = everyone the VTN shows it to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<Target>>,
    /// Reports the VTN asks for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_descriptors: Option<Vec<ReportDescriptor>>,
    /// Units and currency per payload type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_descriptors: Option<Vec<EventPayloadDescriptor>>,
    /// Defaults for every interval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_period: Option<IntervalPeriod>,
    /// The intervals, in order.
    #[serde(default)]
    pub intervals: Vec<Interval>,
    /// Truncates or loops the intervals (User Guide §7.3); `P9999Y` = repeat forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<IsoDuration>,
    /// Fields this crate does not model.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Event {
    /// The descriptor for `payload_type`, if the event has one.
    pub fn payload_descriptor(&self, payload_type: &str) -> Option<&EventPayloadDescriptor> {
        self.payload_descriptors
            .as_deref()
            .unwrap_or_default()
            .iter()
            .find(|d| d.payload_type == payload_type)
    }
}

/// An OpenADR 3 program: the context (name, descriptors) that events refer to by `programID`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Program {
    /// VTN-assigned id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// When the VTN created it.
    #[serde(default, with = "serde_ts_opt", skip_serializing_if = "Option::is_none")]
    pub created_date_time: Option<DateTime<Utc>>,
    /// When the VTN last changed it.
    #[serde(default, with = "serde_ts_opt", skip_serializing_if = "Option::is_none")]
    pub modification_date_time: Option<DateTime<Utc>>,
    /// `PROGRAM`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_type: Option<String>,
    /// Short name.
    #[serde(default)]
    pub program_name: String,
    /// Long name (3.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_long_name: Option<String>,
    /// The program's default interval period.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_period: Option<IntervalPeriod>,
    /// Event and report payload descriptors, kept as given (they mix both kinds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_descriptors: Option<Vec<Value>>,
    /// Who the program is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<Target>>,
    /// Fields this crate does not model (retailer, country, descriptions, ...).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Context for a report payload type.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportPayloadDescriptor {
    /// `REPORT_PAYLOAD_DESCRIPTOR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_type: Option<String>,
    /// e.g. `USAGE`, `DEMAND`.
    pub payload_type: String,
    /// e.g. `DIRECT_READ`, `MEAN`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reading_type: Option<String>,
    /// e.g. `KW`, `KWH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub units: Option<String>,
    /// Fields this crate does not model (accuracy, confidence).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The data for one resource (or `AGGREGATED_REPORT` for a site total) in a report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportResource {
    /// The resource's name, or `AGGREGATED_REPORT`.
    pub resource_name: String,
    /// Defaults for the intervals below.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_period: Option<IntervalPeriod>,
    /// The data; interval ids echo the event's.
    #[serde(default)]
    pub intervals: Vec<Interval>,
}

/// A report a VEN posts (`POST /reports`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// VTN-assigned id (absent when creating).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// When the VTN created it.
    #[serde(default, with = "serde_ts_opt", skip_serializing_if = "Option::is_none")]
    pub created_date_time: Option<DateTime<Utc>>,
    /// When the VTN last changed it.
    #[serde(default, with = "serde_ts_opt", skip_serializing_if = "Option::is_none")]
    pub modification_date_time: Option<DateTime<Utc>>,
    /// `REPORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_type: Option<String>,
    /// The program (3.0 requires it; 3.1 dropped it and VTNs ignore it).
    #[serde(rename = "programID", default, skip_serializing_if = "Option::is_none")]
    pub program_id: Option<String>,
    /// The event this report answers.
    #[serde(rename = "eventID", default)]
    pub event_id: String,
    /// The VEN's name for itself.
    #[serde(default)]
    pub client_name: String,
    /// Free-form name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_name: Option<String>,
    /// Units per payload type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload_descriptors: Option<Vec<ReportPayloadDescriptor>>,
    /// The data, per resource.
    #[serde(default)]
    pub resources: Vec<ReportResource>,
    /// Fields this crate does not model (3.1 adds `clientID`).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// What a notification carries.
#[derive(Debug, Clone, PartialEq)]
pub enum NotifiedObject {
    /// `objectType` EVENT.
    Event(Box<Event>),
    /// `objectType` PROGRAM.
    Program(Box<Program>),
    /// `objectType` REPORT.
    Report(Box<Report>),
    /// Anything else (subscriptions, vens, resources), kept as given.
    Other(Value),
}

/// The operation a notification reports, with 3.0's HTTP verbs folded into 3.1's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// 3.1 `CREATE`, 3.0 `POST`.
    Create,
    /// 3.1 `READ`, 3.0 `GET`.
    Read,
    /// 3.1 `UPDATE`, 3.0 `PUT`.
    Update,
    /// `DELETE` in both.
    Delete,
}

impl Operation {
    /// Parses 3.1 (`CREATE`/`READ`/`UPDATE`/`DELETE`) and 3.0 (`POST`/`GET`/`PUT`/`DELETE`)
    /// names, case-insensitively.
    pub fn parse(s: &str) -> Option<Operation> {
        match s.trim().to_ascii_uppercase().as_str() {
            "CREATE" | "POST" => Some(Operation::Create),
            "READ" | "GET" => Some(Operation::Read),
            "UPDATE" | "PUT" => Some(Operation::Update),
            "DELETE" => Some(Operation::Delete),
            _ => None,
        }
    }

    /// The 3.1 name.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Read => "READ",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }
}

/// A push notification (webhook or MQTT body): what happened to which object.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    /// `EVENT`, `PROGRAM`, `REPORT`, ...
    pub object_type: String,
    /// What happened.
    pub operation: Operation,
    /// The object after the operation (before it, for DELETE).
    pub object: NotifiedObject,
    /// Targets of the notification (3.1), when given.
    pub targets: Option<Vec<Target>>,
}
