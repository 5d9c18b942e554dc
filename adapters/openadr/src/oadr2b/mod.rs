//! OpenADR 2.0b: decoding of every 2.0b message into plain Rust types, and encoding of every
//! message a VEN sends.
//!
//! Entry points: [`decode`] (default [`Limits`]), [`decode_with_limits`], and
//! [`normalized_json`] for a stable, prefix-independent JSON view; [`encode()`] turns an
//! [`outgoing::Outgoing`] into one schema-valid `oadrPayload` document.
//!
//! All 23 messages of the 2.0b schema decode to their own [`Message`] variant: the VTN → VEN
//! ones for the VEN, the VEN → VTN ones so that what we send round-trips and any captured
//! message can be inspected. Only an unknown element name becomes [`Message::Other`].

mod duration;
pub mod encode;
mod json;
pub mod outgoing;
pub mod signal;
pub mod ven;
mod xml;

use chrono::{DateTime, TimeDelta, Utc};

pub use duration::{DurationError, parse_date_time, parse_duration};
pub use encode::{encode, encode_into, format_date_time, format_duration};
pub use json::normalized_json;
use xml::{Node, Ns};

/// Resource limits applied while decoding hostile or broken input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted document, in bytes.
    pub max_bytes: usize,
    /// Deepest accepted element nesting.
    pub max_depth: usize,
    /// Most elements in one document.
    pub max_elements: usize,
    /// Most items in one list (events, signals, intervals, values, targets).
    pub max_items: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 4 * 1024 * 1024,
            max_depth: 64,
            max_elements: 500_000,
            max_items: 10_000,
        }
    }
}

/// Why a document could not be decoded. Element paths start at the message element
/// (e.g. `oadrDistributeEvent/oadrEvent[1]/eiEvent/eventDescriptor/eventID`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecodeError {
    /// The input exceeds [`Limits::max_bytes`].
    #[error("document is {size} bytes, more than the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    /// The input is not UTF-8.
    #[error("document is not valid UTF-8 (valid up to byte {valid_up_to})")]
    NotUtf8 { valid_up_to: usize },
    /// The XML declaration names an encoding other than UTF-8.
    #[error("unsupported encoding {0:?}; only UTF-8 is accepted")]
    UnsupportedEncoding(String),
    /// A DOCTYPE/DTD is present (never accepted: no entity expansion, ever).
    #[error("DOCTYPE/DTD is not allowed")]
    Doctype,
    /// An entity reference other than the five predefined ones or a character reference.
    #[error("entity reference &{name}; is not allowed (only lt, gt, amp, quot, apos and character references)")]
    Entity { name: String },
    /// Nesting deeper than [`Limits::max_depth`].
    #[error("elements nested deeper than the limit of {limit}")]
    TooDeep { limit: usize },
    /// More elements than [`Limits::max_elements`].
    #[error("more than {limit} elements")]
    TooManyElements { limit: usize },
    /// A list longer than [`Limits::max_items`].
    #[error("{path}: more than {limit} items")]
    TooMany { path: String, limit: usize },
    /// A prefix with no namespace declaration in scope.
    #[error("namespace prefix {prefix:?} is not declared")]
    UnknownPrefix { prefix: String },
    /// Malformed XML, as reported by the parser.
    #[error("malformed XML near byte {position}: {message}")]
    Xml { position: u64, message: String },
    /// The document ends with elements still open.
    #[error("document is truncated: <{open_element}> is not closed")]
    Truncated { open_element: String },
    /// No root element.
    #[error("document has no root element")]
    Empty,
    /// The root (or the payload's content) is not an OpenADR 2.0b message.
    #[error("not an OpenADR 2.0b message: {{{namespace}}}{name}")]
    NotOpenAdr { namespace: String, name: String },
    /// A required element is absent.
    #[error("{path}: required element is missing")]
    Missing { path: String },
    /// An element's content is invalid.
    #[error("{path}: invalid value {value:?}: {reason}")]
    Invalid {
        path: String,
        value: String,
        reason: String,
    },
}

/// A decoded OpenADR 2.0b message.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    DistributeEvent(DistributeEvent),
    CreatedPartyRegistration(CreatedPartyRegistration),
    RequestReregistration(RequestReregistration),
    CancelPartyRegistration(CancelPartyRegistration),
    Response(Response),
    RegisterReport(RegisterReport),
    RegisteredReport(RegisteredReport),
    CreateReport(CreateReport),
    CancelReport(CancelReport),
    /// `oadrCanceledPartyRegistration`: the VTN confirms the VEN's cancellation.
    CanceledPartyRegistration(CanceledPartyRegistration),
    /// `oadrUpdatedReport`: the VTN acknowledges report data (and may cancel the report).
    UpdatedReport(UpdatedReport),
    /// `oadrCreatedOpt`: the VTN acknowledges an opt.
    CreatedOpt(CreatedOpt),
    /// `oadrCanceledOpt`: the VTN acknowledges an opt cancellation.
    CanceledOpt(CanceledOpt),
    /// `oadrCanceledReport` (normally VEN → VTN; decoded for round trips and inspection).
    CanceledReport(CanceledReport),
    /// `oadrCreatedReport` (VEN → VTN; decoded for round trips and inspection).
    CreatedReport(CreatedReport),
    /// `oadrCreatedEvent` (VEN → VTN; decoded for round trips and inspection).
    CreatedEvent(CreatedEvent),
    /// `oadrPoll` (VEN → VTN).
    Poll(Poll),
    /// `oadrQueryRegistration` (VEN → VTN).
    QueryRegistration(QueryRegistration),
    /// `oadrCreatePartyRegistration` (VEN → VTN).
    CreatePartyRegistration(CreatePartyRegistration),
    /// `oadrRequestEvent` (VEN → VTN).
    RequestEvent(RequestEvent),
    /// `oadrUpdateReport` (VEN → VTN): report data.
    UpdateReport(UpdateReport),
    /// `oadrCreateOpt` (VEN → VTN).
    CreateOpt(CreateOpt),
    /// `oadrCancelOpt` (VEN → VTN).
    CancelOpt(CancelOpt),
    /// A well-formed message in the oadr namespace that this crate does not decode yet.
    Other {
        name: String,
    },
}

impl Message {
    /// The message's element name, e.g. `oadrDistributeEvent`.
    pub fn name(&self) -> &str {
        match self {
            Message::DistributeEvent(_) => "oadrDistributeEvent",
            Message::CreatedPartyRegistration(_) => "oadrCreatedPartyRegistration",
            Message::RequestReregistration(_) => "oadrRequestReregistration",
            Message::CancelPartyRegistration(_) => "oadrCancelPartyRegistration",
            Message::Response(_) => "oadrResponse",
            Message::RegisterReport(_) => "oadrRegisterReport",
            Message::RegisteredReport(_) => "oadrRegisteredReport",
            Message::CreateReport(_) => "oadrCreateReport",
            Message::CancelReport(_) => "oadrCancelReport",
            Message::CanceledPartyRegistration(_) => "oadrCanceledPartyRegistration",
            Message::UpdatedReport(_) => "oadrUpdatedReport",
            Message::CreatedOpt(_) => "oadrCreatedOpt",
            Message::CanceledOpt(_) => "oadrCanceledOpt",
            Message::CanceledReport(_) => "oadrCanceledReport",
            Message::CreatedReport(_) => "oadrCreatedReport",
            Message::CreatedEvent(_) => "oadrCreatedEvent",
            Message::Poll(_) => "oadrPoll",
            Message::QueryRegistration(_) => "oadrQueryRegistration",
            Message::CreatePartyRegistration(_) => "oadrCreatePartyRegistration",
            Message::RequestEvent(_) => "oadrRequestEvent",
            Message::UpdateReport(_) => "oadrUpdateReport",
            Message::CreateOpt(_) => "oadrCreateOpt",
            Message::CancelOpt(_) => "oadrCancelOpt",
            Message::Other { name } => name,
        }
    }
}

/// `ei:eiResponse`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EiResponse {
    pub code: String,
    pub description: Option<String>,
    pub request_id: Option<String>,
}

/// A non-fatal oddity found while decoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// `oadrDistributeEvent`.
#[derive(Debug, Clone, PartialEq)]
pub struct DistributeEvent {
    pub response: Option<EiResponse>,
    pub request_id: String,
    pub vtn_id: String,
    pub events: Vec<Event>,
    pub warnings: Vec<Warning>,
}

/// `ei:eventStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventStatus {
    None,
    Far,
    Near,
    Active,
    Completed,
    Cancelled,
}

impl EventStatus {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            EventStatus::None => "none",
            EventStatus::Far => "far",
            EventStatus::Near => "near",
            EventStatus::Active => "active",
            EventStatus::Completed => "completed",
            EventStatus::Cancelled => "cancelled",
        }
    }
}

/// `oadr:oadrResponseRequired`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseRequired {
    Always,
    Never,
}

impl ResponseRequired {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ResponseRequired::Always => "always",
            ResponseRequired::Never => "never",
        }
    }
}

/// One `oadr:oadrEvent`.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: String,
    pub modification_number: u32,
    /// 2.0b priority: lower is higher, 0 = no priority. `None` when absent.
    pub priority: Option<u32>,
    pub market_context: Option<String>,
    pub created: Option<DateTime<Utc>>,
    pub status: EventStatus,
    /// `true` unless `ei:testEvent` is absent or exactly `false`.
    pub test: bool,
    pub vtn_comment: Option<String>,
    pub dtstart: DateTime<Utc>,
    /// `None` for an open-ended event (`PT0S`).
    pub duration: Option<TimeDelta>,
    /// `xcal:tolerance/xcal:tolerate/xcal:startafter`.
    pub start_after: Option<TimeDelta>,
    pub notification: Option<TimeDelta>,
    pub ramp_up: Option<TimeDelta>,
    pub recovery: Option<TimeDelta>,
    pub response_required: Option<ResponseRequired>,
    pub signals: Vec<Signal>,
    pub targets: Targets,
}

/// `ei:eiEventSignal`.
#[derive(Debug, Clone, PartialEq)]
pub struct Signal {
    pub name: String,
    pub signal_type: String,
    pub id: String,
    pub item_base: Option<ItemBase>,
    pub current_value: Option<f64>,
    pub intervals: Vec<Interval>,
    /// A per-signal `ei:eiTarget`, if any.
    pub targets: Option<Targets>,
}

/// The signal's itemBase (e.g. `power:powerReal`, `oadr:currency`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemBase {
    /// Element local name, e.g. `powerReal`.
    pub kind: String,
    pub description: Option<String>,
    pub units: Option<String>,
    /// SI scale code (`k`, `M`, `none`, …).
    pub scale: Option<String>,
}

/// `ei:interval`.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    pub uid: Option<String>,
    /// `None` when the element is absent (only allowed for a single interval, which then
    /// spans the event).
    pub duration: Option<TimeDelta>,
    /// A per-interval `xcal:dtstart` (openleadr writes one; starts are still computed from
    /// the event's dtstart).
    pub dtstart: Option<DateTime<Utc>>,
    pub values: Vec<f64>,
}

/// `ei:eiTarget`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Targets {
    pub ven_id: Vec<String>,
    pub group_id: Vec<String>,
    pub resource_id: Vec<String>,
    pub party_id: Vec<String>,
}

impl Targets {
    /// No target of any kind.
    pub fn is_empty(&self) -> bool {
        self.ven_id.is_empty() && self.group_id.is_empty() && self.resource_id.is_empty() && self.party_id.is_empty()
    }
}

impl Event {
    /// The start of each interval of `signal`: dtstart plus the durations before it.
    pub fn interval_starts(&self, signal: &Signal) -> Vec<DateTime<Utc>> {
        let mut at = self.dtstart;
        signal
            .intervals
            .iter()
            .map(|i| {
                let start = at;
                at += i.duration.unwrap_or_default();
                start
            })
            .collect()
    }
}

/// `oadrCreatedPartyRegistration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedPartyRegistration {
    pub response: EiResponse,
    pub registration_id: Option<String>,
    pub ven_id: Option<String>,
    pub vtn_id: Option<String>,
    pub profiles: Vec<String>,
    pub poll_freq: Option<TimeDelta>,
}

/// `oadrRequestReregistration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestReregistration {
    pub ven_id: Option<String>,
}

/// `oadrCancelPartyRegistration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelPartyRegistration {
    pub request_id: String,
    pub registration_id: String,
    pub ven_id: Option<String>,
}

/// `oadrResponse`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub response: EiResponse,
    pub ven_id: Option<String>,
}

/// `oadrRegisterReport`: a party's report metadata (what it can report).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterReport {
    pub request_id: String,
    /// `ei:reportRequestID` of each `oadr:oadrReport`.
    pub report_request_ids: Vec<String>,
    /// `ei:reportSpecifierID` of each `oadr:oadrReport`, when present.
    pub report_specifier_ids: Vec<String>,
    /// Each `oadr:oadrReport` in full (the ids above are shortcuts into these).
    pub reports: Vec<ReportMetadata>,
    pub ven_id: Option<String>,
}

/// One metadata `oadr:oadrReport` in `oadrRegisterReport`. Identifiers the schema requires are
/// still optional here, so that a VEN can answer a sloppy VTN's registration instead of failing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportMetadata {
    /// `ei:eiReportID` (normally absent in metadata).
    pub report_id: Option<String>,
    /// `ei:reportRequestID` (openleadr and this crate write `0` for metadata).
    pub report_request_id: Option<String>,
    /// `ei:reportSpecifierID`: the id a later `oadrReportRequest` names.
    pub report_specifier_id: Option<String>,
    /// `ei:reportName`, e.g. `METADATA_TELEMETRY_USAGE`.
    pub report_name: Option<String>,
    /// `ei:createdDateTime`.
    pub created: Option<DateTime<Utc>>,
    /// `xcal:duration`: how far back data can be asked for.
    pub duration: Option<TimeDelta>,
    /// The data points (`oadr:oadrReportDescription`).
    pub descriptions: Vec<ReportDescription>,
}

/// One `oadr:oadrReportDescription`: a data point a party offers to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportDescription {
    /// `ei:rID`, unique within the report; report requests and data refer to it.
    pub r_id: String,
    /// `ei:reportDataSource` (which resource/VEN the point belongs to), if given.
    pub data_source: Option<Targets>,
    /// `ei:reportType`, e.g. `usage`, `x-resourceStatus`.
    pub report_type: Option<String>,
    /// The itemBase (units), e.g. `powerReal` in kW.
    pub item_base: Option<ItemBase>,
    /// `ei:readingType`, e.g. `Direct Read`.
    pub reading_type: Option<String>,
    /// `emix:marketContext`, if the point is offered to one market only.
    pub market_context: Option<String>,
    /// `oadr:oadrSamplingRate`.
    pub sampling_rate: Option<SamplingRate>,
}

/// `oadr:oadrSamplingRate`: how often a point can be sampled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplingRate {
    /// `oadr:oadrMinPeriod`.
    pub min_period: TimeDelta,
    /// `oadr:oadrMaxPeriod`.
    pub max_period: TimeDelta,
    /// `oadr:oadrOnChange`: sampled on change (no faster than `min_period`).
    pub on_change: bool,
}

/// One data `oadr:oadrReport` in `oadrUpdateReport`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportData {
    /// `ei:eiReportID` (unique per report sent).
    pub report_id: Option<String>,
    /// `ei:reportRequestID`: the request this data answers.
    pub report_request_id: String,
    /// `ei:reportSpecifierID`: the metadata report the data comes from.
    pub report_specifier_id: String,
    /// `ei:reportName`, e.g. `TELEMETRY_USAGE`.
    pub report_name: Option<String>,
    /// `ei:createdDateTime`.
    pub created: Option<DateTime<Utc>>,
    /// `xcal:dtstart` of the reported span.
    pub start: Option<DateTime<Utc>>,
    /// `xcal:duration` of the reported span.
    pub duration: Option<TimeDelta>,
    /// `strm:intervals`.
    pub intervals: Vec<ReportInterval>,
}

/// One `ei:interval` of report data.
///
/// Consecutive `ei:interval`s with the same dtstart, duration and uid decode as one interval
/// with all their points (a sample is often written one point per interval).
#[derive(Debug, Clone, PartialEq)]
pub struct ReportInterval {
    /// `xcal:dtstart`.
    pub start: Option<DateTime<Utc>>,
    /// `xcal:duration`.
    pub duration: Option<TimeDelta>,
    /// `xcal:uid/xcal:text`.
    pub uid: Option<String>,
    /// One per `oadr:oadrReportPayload`.
    pub points: Vec<ReportPoint>,
}

/// One `oadr:oadrReportPayload`: a data point's value in an interval.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportPoint {
    /// `ei:rID`.
    pub r_id: String,
    /// The payload.
    pub value: ReportValue,
    /// `ei:confidence` (0–100).
    pub confidence: Option<u32>,
    /// `ei:accuracy`.
    pub accuracy: Option<f64>,
    /// `oadr:oadrDataQuality`, e.g. `No Quality - No Value` (then `value` carries no reading).
    pub data_quality: Option<String>,
}

/// A report payload.
#[derive(Debug, Clone, PartialEq)]
pub enum ReportValue {
    /// `ei:payloadFloat/ei:value`.
    Float(f64),
    /// `oadr:oadrPayloadResourceStatus`.
    ResourceStatus(ResourceStatus),
}

/// `oadr:oadrPayloadResourceStatus` (TELEMETRY_STATUS).
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceStatus {
    /// `oadr:oadrOnline`.
    pub online: bool,
    /// `oadr:oadrManualOverride`.
    pub manual_override: bool,
    /// `oadr:oadrLoadControlState`, if present.
    pub load_control: Option<LoadControlState>,
}

/// `oadr:oadrLoadControlState`: the `oadrCurrent` value of each state type present.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadControlState {
    /// `oadr:oadrCapacity/oadr:oadrCurrent`.
    pub capacity: Option<f64>,
    /// `oadr:oadrLevelOffset/oadr:oadrCurrent`.
    pub level_offset: Option<f64>,
    /// `oadr:oadrPercentOffset/oadr:oadrCurrent`.
    pub percent_offset: Option<f64>,
    /// `oadr:oadrSetPoint/oadr:oadrCurrent`.
    pub set_point: Option<f64>,
}

/// One `oadr:oadrReportRequest`: what the VTN wants reported, how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRequest {
    /// `ei:reportRequestID`.
    pub report_request_id: String,
    /// `ei:reportSpecifier/ei:reportSpecifierID`: which of the VEN's registered reports.
    pub report_specifier_id: String,
    /// `xcal:granularity`: sampling interval (`None` when absent or `PT0S`: the VEN's choice).
    pub granularity: Option<TimeDelta>,
    /// `ei:reportBackDuration`: how often to send (`None` when absent or `PT0S`: with every
    /// sample).
    pub report_back_duration: Option<TimeDelta>,
    /// `ei:reportInterval` dtstart, when the request is bounded.
    pub start: Option<DateTime<Utc>>,
    /// `ei:reportInterval` duration (`None` when absent or `PT0S`: until cancelled).
    pub duration: Option<TimeDelta>,
    /// `ei:specifierPayload/ei:rID` of each requested data point.
    pub r_ids: Vec<String>,
}

/// `oadrRegisteredReport` (minimal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisteredReport {
    pub response: EiResponse,
    pub report_request_ids: Vec<String>,
    /// The `oadrReportRequest`s it carries (a VTN may request reports right here).
    pub report_requests: Vec<ReportRequest>,
    pub ven_id: Option<String>,
}

/// `oadrCreateReport` (minimal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateReport {
    pub request_id: String,
    pub report_request_ids: Vec<String>,
    /// The `oadrReportRequest`s in full.
    pub report_requests: Vec<ReportRequest>,
    pub ven_id: Option<String>,
}

/// `oadrCancelReport` (minimal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelReport {
    pub request_id: String,
    pub report_request_ids: Vec<String>,
    pub report_to_follow: bool,
    pub ven_id: Option<String>,
}

/// `oadrCanceledPartyRegistration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanceledPartyRegistration {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// `ei:registrationID`.
    pub registration_id: Option<String>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrUpdatedReport`: the VTN's acknowledgement of `oadrUpdateReport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatedReport {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// An `oadr:oadrCancelReport` piggy-backed on the acknowledgement (stop those reports).
    pub cancel_report: Option<CancelReport>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrCreatedOpt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedOpt {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// `ei:optID` of the opt acknowledged.
    pub opt_id: String,
}

/// `oadrCanceledOpt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanceledOpt {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// `ei:optID`: pairs the answer with the opt it acknowledges.
    pub opt_id: Option<String>,
}

/// `oadrCancelOpt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelOpt {
    /// `pyld:requestID`: echoed in the answer.
    pub request_id: String,
    /// `ei:optID`: pairs the answer with the opt it acknowledges.
    pub opt_id: String,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: String,
}

/// `oadrCreatedReport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedReport {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// `oadr:oadrPendingReports/ei:reportRequestID`: every report request still active.
    pub pending_report_request_ids: Vec<String>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrCanceledReport`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanceledReport {
    /// `ei:eiResponse`: the code tells whether the request was accepted.
    pub response: EiResponse,
    /// `oadr:oadrPendingReports/ei:reportRequestID`: every report request still active.
    pub pending_report_request_ids: Vec<String>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrCreatedEvent` (`pyld:eiCreatedEvent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedEvent {
    /// The root `ei:eiResponse` (200 with an empty requestID from a conforming VEN).
    pub response: EiResponse,
    /// One per `ei:eventResponses/ei:eventResponse`.
    pub event_responses: Vec<EventResponse>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: String,
}

/// One `ei:eventResponse`: a VEN's opt decision for one event version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventResponse {
    /// `ei:responseCode`, e.g. `200`, `460`.
    pub code: String,
    /// `ei:responseDescription` (why, for an opt-out).
    pub description: Option<String>,
    /// The `pyld:requestID` of the `oadrDistributeEvent` answered.
    pub request_id: Option<String>,
    /// `ei:qualifiedEventID/ei:eventID`.
    pub event_id: String,
    /// `ei:qualifiedEventID/ei:modificationNumber`: which version of the event was answered.
    pub modification_number: u32,
    /// `ei:optType`.
    pub opt: outgoing::OptType,
}

/// `oadrPoll`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poll {
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: String,
}

/// `oadrQueryRegistration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryRegistration {
    /// `pyld:requestID`: echoed in the answer.
    pub request_id: String,
}

/// `oadrCreatePartyRegistration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatePartyRegistration {
    /// `pyld:requestID`: echoed in the answer.
    pub request_id: String,
    /// Set when re-registering.
    pub registration_id: Option<String>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
    /// `oadr:oadrProfileName` (`2.0a`/`2.0b`).
    pub profile_name: String,
    /// `oadr:oadrTransportName` (`simpleHttp`/`xmpp`).
    pub transport_name: String,
    /// `oadr:oadrTransportAddress`: where a push VTN reaches the VEN.
    pub transport_address: Option<String>,
    /// `oadr:oadrReportOnly`.
    pub report_only: bool,
    /// `oadr:oadrXmlSignature`: whether the VEN signs its messages.
    pub xml_signature: bool,
    /// `oadr:oadrVenName`, for the VTN operator.
    pub ven_name: Option<String>,
    /// `oadr:oadrHttpPullModel`, when given.
    pub http_pull_model: Option<bool>,
}

/// `oadrRequestEvent` (`pyld:eiRequestEvent`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestEvent {
    /// `pyld:requestID`: echoed in the answer.
    pub request_id: String,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: String,
    /// `pyld:replyLimit`.
    pub reply_limit: Option<u32>,
}

/// `oadrUpdateReport`: report data.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateReport {
    /// `pyld:requestID`: echoed in the answer.
    pub request_id: String,
    /// Each data `oadr:oadrReport`.
    pub reports: Vec<ReportData>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: Option<String>,
}

/// `oadrCreateOpt`: an opt-in/out for an event or an availability schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOpt {
    /// `ei:optID`: pairs the answer with the opt it acknowledges.
    pub opt_id: String,
    /// `ei:optType`.
    pub opt: outgoing::OptType,
    /// `ei:optReason`, e.g. `mustRun`.
    pub reason: String,
    /// `emix:marketContext`, when the opt is for one program only.
    pub market_context: Option<String>,
    /// `ei:venID`: checked against our own to detect misdirected messages.
    pub ven_id: String,
    /// `xcal:vavailability` periods (for a schedule rather than an event).
    pub availability: Vec<Availability>,
    /// `ei:createdDateTime`.
    pub created: Option<DateTime<Utc>>,
    /// `pyld:requestID`: echoed in the answer.
    pub request_id: String,
    /// `ei:qualifiedEventID/ei:eventID`, when the opt is about one event.
    pub event_id: Option<String>,
    /// `ei:qualifiedEventID/ei:modificationNumber`, with `event_id`.
    pub modification_number: Option<u32>,
    /// `ei:eiTarget`.
    pub targets: Targets,
}

/// One `xcal:available` period of an opt schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// `xcal:dtstart`.
    pub start: DateTime<Utc>,
    /// `xcal:duration`.
    pub duration: TimeDelta,
}

/// Decodes one `oadrPayload` (optionally wrapping `oadrSignedObject`), a bare
/// `oadrSignedObject`, or a bare message, with the default [`Limits`].
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    decode_with_limits(bytes, &Limits::default())
}

/// [`decode`] with explicit limits.
pub fn decode_with_limits(bytes: &[u8], limits: &Limits) -> Result<Message, DecodeError> {
    let root = xml::parse(bytes, limits)?;
    let msg = unwrap_payload(&root)?;
    let mut cx = Cx {
        limits,
        warnings: Vec::new(),
    };
    cx.message(msg)
}

fn not_oadr(node: &Node) -> DecodeError {
    DecodeError::NotOpenAdr {
        namespace: node.ns.uri().to_owned(),
        name: node.name.to_string(),
    }
}

fn single_child<'a>(node: &'a Node<'a>) -> Result<&'a Node<'a>, DecodeError> {
    let mut it = node.children.iter().filter(|c| c.ns != Ns::Ds);
    let first = it.next().ok_or_else(|| DecodeError::Missing {
        path: format!("{}/*", node.name),
    })?;
    if let Some(extra) = it.next() {
        return Err(DecodeError::Invalid {
            path: node.name.to_string(),
            value: extra.name.to_string(),
            reason: "more than one message".into(),
        });
    }
    Ok(first)
}

fn unwrap_payload<'a>(root: &'a Node<'a>) -> Result<&'a Node<'a>, DecodeError> {
    if root.ns != Ns::Oadr {
        return Err(not_oadr(root));
    }
    let mut node = root;
    if node.name == "oadrPayload" {
        node = single_child(node)?;
        if !node.is(&Ns::Oadr, "oadrSignedObject") {
            return Err(not_oadr(node));
        }
    }
    if node.name == "oadrSignedObject" {
        node = single_child(node)?;
        if node.ns != Ns::Oadr {
            return Err(not_oadr(node));
        }
    }
    Ok(node)
}

struct Cx<'l> {
    limits: &'l Limits,
    warnings: Vec<Warning>,
}

fn join(path: &str, name: &str) -> String {
    format!("{path}/{name}")
}

fn invalid(path: &str, value: &str, reason: impl Into<String>) -> DecodeError {
    DecodeError::Invalid {
        path: path.to_owned(),
        value: value.to_owned(),
        reason: reason.into(),
    }
}

/// Required child.
fn req<'a>(node: &'a Node<'a>, ns: &Ns, name: &str, path: &str) -> Result<&'a Node<'a>, DecodeError> {
    node.child(ns, name)
        .ok_or_else(|| DecodeError::Missing { path: join(path, name) })
}

/// Required non-empty text of a child.
fn req_text(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<String, DecodeError> {
    let t = req(node, ns, name, path)?.trimmed();
    if t.is_empty() {
        return Err(invalid(&join(path, name), t, "must not be empty"));
    }
    Ok(t.to_owned())
}

/// Optional trimmed text of a child (`None` when absent or empty).
fn opt_text(node: &Node, ns: &Ns, name: &str) -> Option<String> {
    node.child(ns, name)
        .map(|c| c.trimmed().to_owned())
        .filter(|t| !t.is_empty())
}

fn parse_u32(text: &str, path: &str) -> Result<u32, DecodeError> {
    text.trim()
        .parse::<u32>()
        .map_err(|e| invalid(path, text, e.to_string()))
}

fn parse_float(text: &str, path: &str) -> Result<f64, DecodeError> {
    let t = text.trim();
    let v = t.parse::<f64>().map_err(|e| invalid(path, t, e.to_string()))?;
    if !v.is_finite() {
        return Err(invalid(path, t, "NaN and infinite values are not accepted"));
    }
    Ok(v)
}

/// A duration element's value. Besides [`parse_duration`]'s ISO 8601 forms this accepts a bare
/// `P` or `PT` as zero: the 2.0b XSD pattern allows them, and openleadr writes a zero
/// `timedelta` as `P` (e.g. the granularity of an on-change report request).
fn dur(text: &str, path: &str) -> Result<TimeDelta, DecodeError> {
    let t = text.trim();
    if matches!(t.strip_prefix(['+', '-']).unwrap_or(t), "P" | "PT") {
        return Ok(TimeDelta::zero());
    }
    parse_duration(t).map_err(|e| invalid(path, t, e.to_string()))
}

fn date_time(text: &str, path: &str) -> Result<DateTime<Utc>, DecodeError> {
    parse_date_time(text).map_err(|e| invalid(path, text.trim(), format!("not an ISO 8601 date-time with offset: {e}")))
}

/// `<xcal:duration><xcal:duration>PT1H</xcal:duration></xcal:duration>`-style wrapper under `node/name`.
fn opt_wrapped_duration(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<Option<TimeDelta>, DecodeError> {
    let Some(outer) = node.child(ns, name) else {
        return Ok(None);
    };
    let p = join(path, name);
    let inner = req(outer, &Ns::Xcal, "duration", &p)?;
    dur(&inner.text, &join(&p, "duration")).map(Some)
}

fn ei_response(node: &Node, path: &str) -> Result<EiResponse, DecodeError> {
    Ok(EiResponse {
        code: req_text(node, &Ns::Ei, "responseCode", path)?,
        description: opt_text(node, &Ns::Ei, "responseDescription"),
        request_id: opt_text(node, &Ns::Pyld, "requestID"),
    })
}

fn parse_bool(text: &str, path: &str) -> Result<bool, DecodeError> {
    match text.trim() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        other => Err(invalid(path, other, "expected true|false|1|0")),
    }
}

fn req_bool(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<bool, DecodeError> {
    parse_bool(&req(node, ns, name, path)?.text, &join(path, name))
}

fn opt_bool(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<Option<bool>, DecodeError> {
    match node.child(ns, name) {
        Some(b) => parse_bool(&b.text, &join(path, name)).map(Some),
        None => Ok(None),
    }
}

fn opt_date_time(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<Option<DateTime<Utc>>, DecodeError> {
    match node.child(ns, name) {
        Some(x) => date_time(&x.text, &join(path, name)).map(Some),
        None => Ok(None),
    }
}

/// `xcal:dtstart/xcal:date-time` under `node`, if present.
fn opt_dtstart(node: &Node, path: &str) -> Result<Option<DateTime<Utc>>, DecodeError> {
    match node.child(&Ns::Xcal, "dtstart") {
        Some(ds) => {
            let dp = join(path, "dtstart");
            date_time(&req(ds, &Ns::Xcal, "date-time", &dp)?.text, &join(&dp, "date-time")).map(Some)
        }
        None => Ok(None),
    }
}

/// `PT0S` becomes `None` (OpenADR's "unset"); negative durations are errors.
fn nonzero(d: Option<TimeDelta>, path: &str) -> Result<Option<TimeDelta>, DecodeError> {
    match d {
        Some(d) if d < TimeDelta::zero() => Err(invalid(path, "", "negative duration")),
        Some(d) if d == TimeDelta::zero() => Ok(None),
        other => Ok(other),
    }
}

fn opt_type(node: &Node, path: &str) -> Result<outgoing::OptType, DecodeError> {
    match req(node, &Ns::Ei, "optType", path)?.trimmed() {
        "optIn" => Ok(outgoing::OptType::OptIn),
        "optOut" => Ok(outgoing::OptType::OptOut),
        other => Err(invalid(&join(path, "optType"), other, "expected optIn|optOut")),
    }
}

/// An itemBase element: anything carrying `itemUnits`/`itemDescription` or a scale code.
fn is_item_base(c: &Node) -> bool {
    c.children
        .iter()
        .any(|x| x.name == "itemUnits" || x.name == "itemDescription" || x.is(&Ns::Scale, "siScaleCode"))
}

fn item_base(c: &Node) -> ItemBase {
    ItemBase {
        kind: c.name.to_string(),
        description: c
            .children
            .iter()
            .find(|x| x.name == "itemDescription")
            .map(|x| x.trimmed().to_owned()),
        units: c
            .children
            .iter()
            .find(|x| x.name == "itemUnits")
            .map(|x| x.trimmed().to_owned()),
        scale: opt_text(c, &Ns::Scale, "siScaleCode"),
    }
}

fn opt_float(node: &Node, ns: &Ns, name: &str, path: &str) -> Result<Option<f64>, DecodeError> {
    match node.child(ns, name) {
        Some(x) => parse_float(&x.text, &join(path, name)).map(Some),
        None => Ok(None),
    }
}

fn report_point(pl: &Node, p: &str) -> Result<ReportPoint, DecodeError> {
    let value = if let Some(pf) = pl.child(&Ns::Ei, "payloadFloat") {
        let pfp = join(p, "payloadFloat");
        ReportValue::Float(parse_float(
            &req(pf, &Ns::Ei, "value", &pfp)?.text,
            &join(&pfp, "value"),
        )?)
    } else if let Some(rs) = pl.child(&Ns::Oadr, "oadrPayloadResourceStatus") {
        let rsp = join(p, "oadrPayloadResourceStatus");
        let load_control = match rs.child(&Ns::Oadr, "oadrLoadControlState") {
            Some(lc) => {
                let lcp = join(&rsp, "oadrLoadControlState");
                let current = |name: &str| -> Result<Option<f64>, DecodeError> {
                    match lc.child(&Ns::Oadr, name) {
                        Some(x) => {
                            let xp = join(&lcp, name);
                            parse_float(&req(x, &Ns::Oadr, "oadrCurrent", &xp)?.text, &join(&xp, "oadrCurrent"))
                                .map(Some)
                        }
                        None => Ok(None),
                    }
                };
                Some(LoadControlState {
                    capacity: current("oadrCapacity")?,
                    level_offset: current("oadrLevelOffset")?,
                    percent_offset: current("oadrPercentOffset")?,
                    set_point: current("oadrSetPoint")?,
                })
            }
            None => None,
        };
        ReportValue::ResourceStatus(ResourceStatus {
            online: req_bool(rs, &Ns::Oadr, "oadrOnline", &rsp)?,
            manual_override: req_bool(rs, &Ns::Oadr, "oadrManualOverride", &rsp)?,
            load_control,
        })
    } else {
        return Err(DecodeError::Missing {
            path: join(p, "payloadFloat"),
        });
    };
    Ok(ReportPoint {
        r_id: req_text(pl, &Ns::Ei, "rID", p)?,
        value,
        confidence: match pl.child(&Ns::Ei, "confidence") {
            Some(c) => Some(parse_u32(&c.text, &join(p, "confidence"))?),
            None => None,
        },
        accuracy: opt_float(pl, &Ns::Ei, "accuracy", p)?,
        data_quality: opt_text(pl, &Ns::Oadr, "oadrDataQuality"),
    })
}

impl Cx<'_> {
    fn limited<'a>(
        &self,
        node: &'a Node<'a>,
        ns: &'a Ns,
        name: &'a str,
        path: &str,
    ) -> Result<Vec<&'a Node<'a>>, DecodeError> {
        let items: Vec<&Node> = node.all(ns, name).take(self.limits.max_items + 1).collect();
        if items.len() > self.limits.max_items {
            return Err(DecodeError::TooMany {
                path: join(path, name),
                limit: self.limits.max_items,
            });
        }
        Ok(items)
    }

    fn texts(&self, node: &Node, ns: &Ns, name: &str, path: &str) -> Result<Vec<String>, DecodeError> {
        Ok(self
            .limited(node, ns, name, path)?
            .into_iter()
            .map(|n| n.trimmed().to_owned())
            .collect())
    }

    fn warn(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.warnings.push(Warning {
            path: path.into(),
            message: message.into(),
        });
    }

    fn message(&mut self, m: &Node) -> Result<Message, DecodeError> {
        let p = m.name.as_ref();
        Ok(match p {
            "oadrDistributeEvent" => Message::DistributeEvent(self.distribute(m)?),
            "oadrCreatedPartyRegistration" => {
                let response = ei_response(req(m, &Ns::Ei, "eiResponse", p)?, &join(p, "eiResponse"))?;
                let mut profiles = Vec::new();
                if let Some(ps) = m.child(&Ns::Oadr, "oadrProfiles") {
                    let pp = join(p, "oadrProfiles");
                    for prof in self.limited(ps, &Ns::Oadr, "oadrProfile", &pp)? {
                        if let Some(n) = opt_text(prof, &Ns::Oadr, "oadrProfileName") {
                            profiles.push(n);
                        }
                    }
                }
                Message::CreatedPartyRegistration(CreatedPartyRegistration {
                    response,
                    registration_id: opt_text(m, &Ns::Ei, "registrationID"),
                    ven_id: opt_text(m, &Ns::Ei, "venID"),
                    vtn_id: opt_text(m, &Ns::Ei, "vtnID"),
                    profiles,
                    poll_freq: opt_wrapped_duration(m, &Ns::Oadr, "oadrRequestedOadrPollFreq", p)?,
                })
            }
            "oadrRequestReregistration" => Message::RequestReregistration(RequestReregistration {
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCancelPartyRegistration" => Message::CancelPartyRegistration(CancelPartyRegistration {
                request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                registration_id: req_text(m, &Ns::Ei, "registrationID", p)?,
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrResponse" => Message::Response(Response {
                response: ei_response(req(m, &Ns::Ei, "eiResponse", p)?, &join(p, "eiResponse"))?,
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrRegisterReport" => {
                let nodes = self.limited(m, &Ns::Oadr, "oadrReport", p)?;
                let mut reports = Vec::with_capacity(nodes.len());
                for (i, r) in nodes.iter().enumerate() {
                    reports.push(self.report_metadata(r, &format!("{p}/oadrReport[{}]", i + 1))?);
                }
                Message::RegisterReport(RegisterReport {
                    request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                    report_request_ids: reports.iter().filter_map(|r| r.report_request_id.clone()).collect(),
                    report_specifier_ids: reports.iter().filter_map(|r| r.report_specifier_id.clone()).collect(),
                    reports,
                    ven_id: opt_text(m, &Ns::Ei, "venID"),
                })
            }
            "oadrRegisteredReport" => Message::RegisteredReport(RegisteredReport {
                response: self.response_of(m, p)?,
                report_request_ids: self.report_request_ids(m, p)?,
                report_requests: self.report_requests(m, p)?,
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCreateReport" => Message::CreateReport(CreateReport {
                request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                report_request_ids: self.report_request_ids(m, p)?,
                report_requests: self.report_requests(m, p)?,
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCancelReport" => Message::CancelReport(self.cancel_report(m, p)?),
            "oadrCanceledPartyRegistration" => Message::CanceledPartyRegistration(CanceledPartyRegistration {
                response: self.response_of(m, p)?,
                registration_id: opt_text(m, &Ns::Ei, "registrationID"),
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrUpdatedReport" => Message::UpdatedReport(UpdatedReport {
                response: self.response_of(m, p)?,
                cancel_report: match m.child(&Ns::Oadr, "oadrCancelReport") {
                    Some(c) => Some(self.cancel_report(c, &join(p, "oadrCancelReport"))?),
                    None => None,
                },
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCreatedOpt" => Message::CreatedOpt(CreatedOpt {
                response: self.response_of(m, p)?,
                opt_id: req_text(m, &Ns::Ei, "optID", p)?,
            }),
            "oadrCanceledOpt" => Message::CanceledOpt(CanceledOpt {
                response: self.response_of(m, p)?,
                opt_id: opt_text(m, &Ns::Ei, "optID"),
            }),
            "oadrCancelOpt" => Message::CancelOpt(CancelOpt {
                request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                opt_id: req_text(m, &Ns::Ei, "optID", p)?,
                ven_id: req_text(m, &Ns::Ei, "venID", p)?,
            }),
            "oadrCreatedReport" => Message::CreatedReport(CreatedReport {
                response: self.response_of(m, p)?,
                pending_report_request_ids: self.pending_reports(m, p)?,
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCanceledReport" => Message::CanceledReport(CanceledReport {
                response: self.response_of(m, p)?,
                pending_report_request_ids: self.pending_reports(m, p)?,
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCreatedEvent" => Message::CreatedEvent(self.created_event(m, p)?),
            "oadrPoll" => Message::Poll(Poll {
                ven_id: req_text(m, &Ns::Ei, "venID", p)?,
            }),
            "oadrQueryRegistration" => Message::QueryRegistration(QueryRegistration {
                request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
            }),
            "oadrCreatePartyRegistration" => Message::CreatePartyRegistration(CreatePartyRegistration {
                request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                registration_id: opt_text(m, &Ns::Ei, "registrationID"),
                ven_id: opt_text(m, &Ns::Ei, "venID"),
                profile_name: req_text(m, &Ns::Oadr, "oadrProfileName", p)?,
                transport_name: req_text(m, &Ns::Oadr, "oadrTransportName", p)?,
                transport_address: opt_text(m, &Ns::Oadr, "oadrTransportAddress"),
                report_only: req_bool(m, &Ns::Oadr, "oadrReportOnly", p)?,
                xml_signature: req_bool(m, &Ns::Oadr, "oadrXmlSignature", p)?,
                ven_name: opt_text(m, &Ns::Oadr, "oadrVenName"),
                http_pull_model: opt_bool(m, &Ns::Oadr, "oadrHttpPullModel", p)?,
            }),
            "oadrRequestEvent" => {
                let rp = join(p, "eiRequestEvent");
                let r = req(m, &Ns::Pyld, "eiRequestEvent", p)?;
                Message::RequestEvent(RequestEvent {
                    request_id: req_text(r, &Ns::Pyld, "requestID", &rp)?,
                    ven_id: req_text(r, &Ns::Ei, "venID", &rp)?,
                    reply_limit: match r.child(&Ns::Pyld, "replyLimit") {
                        Some(l) => Some(parse_u32(&l.text, &join(&rp, "replyLimit"))?),
                        None => None,
                    },
                })
            }
            "oadrUpdateReport" => {
                let nodes = self.limited(m, &Ns::Oadr, "oadrReport", p)?;
                let mut reports = Vec::with_capacity(nodes.len());
                for (i, r) in nodes.iter().enumerate() {
                    reports.push(self.report_data(r, &format!("{p}/oadrReport[{}]", i + 1))?);
                }
                Message::UpdateReport(UpdateReport {
                    request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                    reports,
                    ven_id: opt_text(m, &Ns::Ei, "venID"),
                })
            }
            "oadrCreateOpt" => Message::CreateOpt(self.create_opt(m, p)?),
            other => Message::Other { name: other.to_owned() },
        })
    }

    fn report_request_ids(&self, m: &Node, p: &str) -> Result<Vec<String>, DecodeError> {
        let reqs = self.limited(m, &Ns::Oadr, "oadrReportRequest", p)?;
        let mut out = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            out.push(req_text(
                r,
                &Ns::Ei,
                "reportRequestID",
                &format!("{p}/oadrReportRequest[{}]", i + 1),
            )?);
        }
        Ok(out)
    }

    /// The required `ei:eiResponse` of message `m`.
    fn response_of(&self, m: &Node, p: &str) -> Result<EiResponse, DecodeError> {
        ei_response(req(m, &Ns::Ei, "eiResponse", p)?, &join(p, "eiResponse"))
    }

    fn cancel_report(&self, m: &Node, p: &str) -> Result<CancelReport, DecodeError> {
        Ok(CancelReport {
            request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
            report_request_ids: self.texts(m, &Ns::Ei, "reportRequestID", p)?,
            report_to_follow: opt_text(m, &Ns::Pyld, "reportToFollow").is_some_and(|t| t == "true" || t == "1"),
            ven_id: opt_text(m, &Ns::Ei, "venID"),
        })
    }

    /// `oadr:oadrPendingReports/ei:reportRequestID` (the element itself may be absent).
    fn pending_reports(&self, m: &Node, p: &str) -> Result<Vec<String>, DecodeError> {
        match m.child(&Ns::Oadr, "oadrPendingReports") {
            Some(pr) => Ok(self
                .texts(pr, &Ns::Ei, "reportRequestID", &join(p, "oadrPendingReports"))?
                .into_iter()
                .filter(|t| !t.is_empty())
                .collect()),
            None => Ok(Vec::new()),
        }
    }

    /// Every `oadr:oadrReportRequest` that has an `ei:reportSpecifier`, in full. (A request
    /// without one is schema-invalid; its id still appears in `report_request_ids`, so the VEN
    /// can answer it.)
    fn report_requests(&self, m: &Node, p: &str) -> Result<Vec<ReportRequest>, DecodeError> {
        let reqs = self.limited(m, &Ns::Oadr, "oadrReportRequest", p)?;
        let mut out = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            let rp = format!("{p}/oadrReportRequest[{}]", i + 1);
            let Some(spec) = r.child(&Ns::Ei, "reportSpecifier") else {
                continue;
            };
            let sp = join(&rp, "reportSpecifier");
            let (start, duration) = match spec.child(&Ns::Ei, "reportInterval") {
                Some(ri) => {
                    let ip = join(&sp, "reportInterval");
                    let props = req(ri, &Ns::Xcal, "properties", &ip)?;
                    let pp = join(&ip, "properties");
                    let start = match props.child(&Ns::Xcal, "dtstart") {
                        Some(ds) => {
                            let dp = join(&pp, "dtstart");
                            Some(date_time(
                                &req(ds, &Ns::Xcal, "date-time", &dp)?.text,
                                &join(&dp, "date-time"),
                            )?)
                        }
                        None => None,
                    };
                    (
                        start,
                        nonzero(opt_wrapped_duration(props, &Ns::Xcal, "duration", &pp)?, &pp)?,
                    )
                }
                None => (None, None),
            };
            let payloads = self.limited(spec, &Ns::Ei, "specifierPayload", &sp)?;
            let mut r_ids = Vec::with_capacity(payloads.len());
            for (j, pl) in payloads.iter().enumerate() {
                r_ids.push(req_text(
                    pl,
                    &Ns::Ei,
                    "rID",
                    &format!("{sp}/specifierPayload[{}]", j + 1),
                )?);
            }
            out.push(ReportRequest {
                report_request_id: req_text(r, &Ns::Ei, "reportRequestID", &rp)?,
                report_specifier_id: req_text(spec, &Ns::Ei, "reportSpecifierID", &sp)?,
                granularity: nonzero(opt_wrapped_duration(spec, &Ns::Xcal, "granularity", &sp)?, &sp)?,
                report_back_duration: nonzero(opt_wrapped_duration(spec, &Ns::Ei, "reportBackDuration", &sp)?, &sp)?,
                start,
                duration,
                r_ids,
            });
        }
        Ok(out)
    }

    fn report_metadata(&self, r: &Node, p: &str) -> Result<ReportMetadata, DecodeError> {
        let nodes = self.limited(r, &Ns::Oadr, "oadrReportDescription", p)?;
        let mut descriptions = Vec::with_capacity(nodes.len());
        for (i, d) in nodes.iter().enumerate() {
            let dp = format!("{p}/oadrReportDescription[{}]", i + 1);
            let sampling_rate = match d.child(&Ns::Oadr, "oadrSamplingRate") {
                Some(sr) => {
                    let srp = join(&dp, "oadrSamplingRate");
                    Some(SamplingRate {
                        min_period: dur(
                            &req(sr, &Ns::Oadr, "oadrMinPeriod", &srp)?.text,
                            &join(&srp, "oadrMinPeriod"),
                        )?,
                        max_period: dur(
                            &req(sr, &Ns::Oadr, "oadrMaxPeriod", &srp)?.text,
                            &join(&srp, "oadrMaxPeriod"),
                        )?,
                        on_change: opt_bool(sr, &Ns::Oadr, "oadrOnChange", &srp)?.unwrap_or(false),
                    })
                }
                None => None,
            };
            descriptions.push(ReportDescription {
                r_id: req_text(d, &Ns::Ei, "rID", &dp)?,
                data_source: match d.child(&Ns::Ei, "reportDataSource") {
                    Some(t) => Some(self.targets(t, &join(&dp, "reportDataSource"))?),
                    None => None,
                },
                report_type: opt_text(d, &Ns::Ei, "reportType"),
                item_base: d.children.iter().find(|c| is_item_base(c)).map(item_base),
                reading_type: opt_text(d, &Ns::Ei, "readingType"),
                market_context: opt_text(d, &Ns::Emix, "marketContext"),
                sampling_rate,
            });
        }
        Ok(ReportMetadata {
            report_id: opt_text(r, &Ns::Ei, "eiReportID"),
            report_request_id: opt_text(r, &Ns::Ei, "reportRequestID"),
            report_specifier_id: opt_text(r, &Ns::Ei, "reportSpecifierID"),
            report_name: opt_text(r, &Ns::Ei, "reportName"),
            created: opt_date_time(r, &Ns::Ei, "createdDateTime", p)?,
            duration: opt_wrapped_duration(r, &Ns::Xcal, "duration", p)?,
            descriptions,
        })
    }

    fn report_data(&self, r: &Node, p: &str) -> Result<ReportData, DecodeError> {
        let mut intervals: Vec<ReportInterval> = Vec::new();
        if let Some(ints) = r.child(&Ns::Strm, "intervals") {
            let ip = join(p, "intervals");
            for (i, n) in self.limited(ints, &Ns::Ei, "interval", &ip)?.iter().enumerate() {
                let np = format!("{ip}/interval[{}]", i + 1);
                let payloads = self.limited(n, &Ns::Oadr, "oadrReportPayload", &np)?;
                let mut points = Vec::with_capacity(payloads.len());
                for (j, pl) in payloads.iter().enumerate() {
                    points.push(report_point(pl, &format!("{np}/oadrReportPayload[{}]", j + 1))?);
                }
                let interval = ReportInterval {
                    start: opt_dtstart(n, &np)?,
                    duration: opt_wrapped_duration(n, &Ns::Xcal, "duration", &np)?,
                    uid: n.child(&Ns::Xcal, "uid").and_then(|u| opt_text(u, &Ns::Xcal, "text")),
                    points,
                };
                // Consecutive intervals with the same start, duration and uid are one sample
                // written one point per interval (as openleadr reads them): merge them back.
                match intervals.last_mut() {
                    Some(last)
                        if interval.start.is_some()
                            && (last.start, last.duration, &last.uid)
                                == (interval.start, interval.duration, &interval.uid) =>
                    {
                        last.points.extend(interval.points);
                    }
                    _ => intervals.push(interval),
                }
            }
        }
        Ok(ReportData {
            report_id: opt_text(r, &Ns::Ei, "eiReportID"),
            report_request_id: req_text(r, &Ns::Ei, "reportRequestID", p)?,
            report_specifier_id: req_text(r, &Ns::Ei, "reportSpecifierID", p)?,
            report_name: opt_text(r, &Ns::Ei, "reportName"),
            created: opt_date_time(r, &Ns::Ei, "createdDateTime", p)?,
            start: opt_dtstart(r, p)?,
            duration: opt_wrapped_duration(r, &Ns::Xcal, "duration", p)?,
            intervals,
        })
    }

    fn created_event(&self, m: &Node, p: &str) -> Result<CreatedEvent, DecodeError> {
        let cp = join(p, "eiCreatedEvent");
        let c = req(m, &Ns::Pyld, "eiCreatedEvent", p)?;
        let mut event_responses = Vec::new();
        if let Some(ers) = c.child(&Ns::Ei, "eventResponses") {
            let ersp = join(&cp, "eventResponses");
            for (i, er) in self.limited(ers, &Ns::Ei, "eventResponse", &ersp)?.iter().enumerate() {
                let ep = format!("{ersp}/eventResponse[{}]", i + 1);
                let qp = join(&ep, "qualifiedEventID");
                let q = req(er, &Ns::Ei, "qualifiedEventID", &ep)?;
                event_responses.push(EventResponse {
                    code: req_text(er, &Ns::Ei, "responseCode", &ep)?,
                    description: opt_text(er, &Ns::Ei, "responseDescription"),
                    request_id: opt_text(er, &Ns::Pyld, "requestID"),
                    event_id: req_text(q, &Ns::Ei, "eventID", &qp)?,
                    modification_number: parse_u32(
                        &req(q, &Ns::Ei, "modificationNumber", &qp)?.text,
                        &join(&qp, "modificationNumber"),
                    )?,
                    opt: opt_type(er, &ep)?,
                });
            }
        }
        Ok(CreatedEvent {
            response: self.response_of(c, &cp)?,
            event_responses,
            ven_id: req_text(c, &Ns::Ei, "venID", &cp)?,
        })
    }

    fn create_opt(&self, m: &Node, p: &str) -> Result<CreateOpt, DecodeError> {
        let mut availability = Vec::new();
        if let Some(va) = m.child(&Ns::Xcal, "vavailability") {
            let vp = join(p, "vavailability");
            let comps = req(va, &Ns::Xcal, "components", &vp)?;
            let cp = join(&vp, "components");
            for (i, a) in self.limited(comps, &Ns::Xcal, "available", &cp)?.iter().enumerate() {
                let ap = format!("{cp}/available[{}]", i + 1);
                let pp = join(&ap, "properties");
                let props = req(a, &Ns::Xcal, "properties", &ap)?;
                availability.push(Availability {
                    start: opt_dtstart(props, &pp)?.ok_or_else(|| DecodeError::Missing {
                        path: join(&pp, "dtstart"),
                    })?,
                    duration: opt_wrapped_duration(props, &Ns::Xcal, "duration", &pp)?.ok_or_else(|| {
                        DecodeError::Missing {
                            path: join(&pp, "duration"),
                        }
                    })?,
                });
            }
        }
        let (event_id, modification_number) = match m.child(&Ns::Ei, "qualifiedEventID") {
            Some(q) => {
                let qp = join(p, "qualifiedEventID");
                (
                    Some(req_text(q, &Ns::Ei, "eventID", &qp)?),
                    Some(parse_u32(
                        &req(q, &Ns::Ei, "modificationNumber", &qp)?.text,
                        &join(&qp, "modificationNumber"),
                    )?),
                )
            }
            None => (None, None),
        };
        Ok(CreateOpt {
            opt_id: req_text(m, &Ns::Ei, "optID", p)?,
            opt: opt_type(m, p)?,
            reason: req_text(m, &Ns::Ei, "optReason", p)?,
            market_context: opt_text(m, &Ns::Emix, "marketContext"),
            ven_id: req_text(m, &Ns::Ei, "venID", p)?,
            availability,
            created: opt_date_time(m, &Ns::Ei, "createdDateTime", p)?,
            request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
            event_id,
            modification_number,
            targets: match m.child(&Ns::Ei, "eiTarget") {
                Some(t) => self.targets(t, &join(p, "eiTarget"))?,
                None => Targets::default(),
            },
        })
    }

    fn distribute(&mut self, m: &Node) -> Result<DistributeEvent, DecodeError> {
        let p = m.name.as_ref();
        let response = match m.child(&Ns::Ei, "eiResponse") {
            Some(r) => Some(ei_response(r, &join(p, "eiResponse"))?),
            None => None,
        };
        let request_id = req_text(m, &Ns::Pyld, "requestID", p)?;
        let vtn_id = req_text(m, &Ns::Ei, "vtnID", p)?;
        let nodes = self.limited(m, &Ns::Oadr, "oadrEvent", p)?;
        let mut events = Vec::with_capacity(nodes.len());
        for (i, n) in nodes.iter().enumerate() {
            events.push(self.event(n, &format!("{p}/oadrEvent[{}]", i + 1))?);
        }
        for (i, e) in events.iter().enumerate() {
            if events[..i].iter().any(|o| o.id == e.id) {
                self.warn(
                    format!("{p}/oadrEvent[{}]", i + 1),
                    format!("duplicate eventID {:?}", e.id),
                );
            }
        }
        Ok(DistributeEvent {
            response,
            request_id,
            vtn_id,
            events,
            warnings: std::mem::take(&mut self.warnings),
        })
    }

    fn event(&mut self, n: &Node, p: &str) -> Result<Event, DecodeError> {
        let ei_p = join(p, "eiEvent");
        let ei = req(n, &Ns::Ei, "eiEvent", p)?;
        let dp = join(&ei_p, "eventDescriptor");
        let d = req(ei, &Ns::Ei, "eventDescriptor", &ei_p)?;
        let id = req_text(d, &Ns::Ei, "eventID", &dp)?;
        let modification_number = parse_u32(
            &req(d, &Ns::Ei, "modificationNumber", &dp)?.text,
            &join(&dp, "modificationNumber"),
        )?;
        let priority = match d.child(&Ns::Ei, "priority") {
            Some(x) if !x.trimmed().is_empty() => Some(parse_u32(&x.text, &join(&dp, "priority"))?),
            _ => None,
        };
        let market_context = d
            .child(&Ns::Ei, "eiMarketContext")
            .and_then(|mc| opt_text(mc, &Ns::Emix, "marketContext"));
        let created = match d.child(&Ns::Ei, "createdDateTime") {
            Some(x) => Some(date_time(&x.text, &join(&dp, "createdDateTime"))?),
            None => None,
        };
        let sp = join(&dp, "eventStatus");
        let status_text = req(d, &Ns::Ei, "eventStatus", &dp)?.trimmed();
        let status = match status_text {
            "none" => EventStatus::None,
            "far" => EventStatus::Far,
            "near" => EventStatus::Near,
            "active" => EventStatus::Active,
            "completed" => EventStatus::Completed,
            "cancelled" => EventStatus::Cancelled,
            other => return Err(invalid(&sp, other, "expected none|far|near|active|completed|cancelled")),
        };
        let test = d.child(&Ns::Ei, "testEvent").is_some_and(|t| t.trimmed() != "false");
        let vtn_comment = opt_text(d, &Ns::Ei, "vtnComment");

        let ap = join(&ei_p, "eiActivePeriod");
        let active = req(ei, &Ns::Ei, "eiActivePeriod", &ei_p)?;
        let pp = join(&ap, "properties");
        let props = req(active, &Ns::Xcal, "properties", &ap)?;
        let dtp = join(&pp, "dtstart");
        let dtstart_node = req(req(props, &Ns::Xcal, "dtstart", &pp)?, &Ns::Xcal, "date-time", &dtp)?;
        let dtstart = date_time(&dtstart_node.text, &join(&dtp, "date-time"))?;
        let duration =
            opt_wrapped_duration(props, &Ns::Xcal, "duration", &pp)?.ok_or_else(|| DecodeError::Missing {
                path: join(&pp, "duration"),
            })?;
        let duration = (duration != TimeDelta::zero()).then_some(duration);
        if duration.is_some_and(|d| d < TimeDelta::zero()) {
            return Err(invalid(&join(&pp, "duration"), "", "negative event duration"));
        }
        let start_after = match props.child(&Ns::Xcal, "tolerance") {
            Some(tol) => {
                let tp = join(&pp, "tolerance");
                match tol
                    .child(&Ns::Xcal, "tolerate")
                    .and_then(|t| t.child(&Ns::Xcal, "startafter"))
                {
                    Some(sa) => Some(dur(&sa.text, &format!("{tp}/tolerate/startafter"))?),
                    None => None,
                }
            }
            None => None,
        };
        let notification = opt_wrapped_duration(props, &Ns::Ei, "x-eiNotification", &pp)?;
        let ramp_up = opt_wrapped_duration(props, &Ns::Ei, "x-eiRampUp", &pp)?;
        let recovery = opt_wrapped_duration(props, &Ns::Ei, "x-eiRecovery", &pp)?;

        let rp = join(p, "oadrResponseRequired");
        let response_required = match n.child(&Ns::Oadr, "oadrResponseRequired").map(|r| r.trimmed()) {
            None => None,
            Some("always") => Some(ResponseRequired::Always),
            Some("never") => Some(ResponseRequired::Never),
            Some(other) => return Err(invalid(&rp, other, "expected always|never")),
        };

        let sigs_p = join(&ei_p, "eiEventSignals");
        let sigs = req(ei, &Ns::Ei, "eiEventSignals", &ei_p)?;
        let sig_nodes = self.limited(sigs, &Ns::Ei, "eiEventSignal", &sigs_p)?;
        let mut signals = Vec::with_capacity(sig_nodes.len());
        for (i, s) in sig_nodes.iter().enumerate() {
            signals.push(self.signal(s, &format!("{sigs_p}/eiEventSignal[{}]", i + 1), duration)?);
        }
        let targets = match ei.child(&Ns::Ei, "eiTarget") {
            Some(t) => self.targets(t, &join(&ei_p, "eiTarget"))?,
            None => Targets::default(),
        };
        Ok(Event {
            id,
            modification_number,
            priority,
            market_context,
            created,
            status,
            test,
            vtn_comment,
            dtstart,
            duration,
            start_after,
            notification,
            ramp_up,
            recovery,
            response_required,
            signals,
            targets,
        })
    }

    fn targets(&self, t: &Node, p: &str) -> Result<Targets, DecodeError> {
        Ok(Targets {
            ven_id: self.texts(t, &Ns::Ei, "venID", p)?,
            group_id: self.texts(t, &Ns::Ei, "groupID", p)?,
            resource_id: self.texts(t, &Ns::Ei, "resourceID", p)?,
            party_id: self.texts(t, &Ns::Ei, "partyID", p)?,
        })
    }

    fn signal(&mut self, s: &Node, p: &str, event_duration: Option<TimeDelta>) -> Result<Signal, DecodeError> {
        let name = req_text(s, &Ns::Ei, "signalName", p)?;
        let signal_type = req_text(s, &Ns::Ei, "signalType", p)?;
        let id = req_text(s, &Ns::Ei, "signalID", p)?;
        let item_base = s
            .children
            .iter()
            .find(|c| matches!(c.ns, Ns::Power | Ns::Emix | Ns::Oadr) || c.child(&Ns::Scale, "siScaleCode").is_some())
            .map(item_base);
        let current_value = match s.child(&Ns::Ei, "currentValue") {
            Some(cv) => {
                let cp = join(p, "currentValue");
                let pf = req(cv, &Ns::Ei, "payloadFloat", &cp)?;
                let pfp = join(&cp, "payloadFloat");
                Some(parse_float(
                    &req(pf, &Ns::Ei, "value", &pfp)?.text,
                    &join(&pfp, "value"),
                )?)
            }
            None => None,
        };
        let ip = join(p, "intervals");
        let ints = req(s, &Ns::Strm, "intervals", p)?;
        let int_nodes = self.limited(ints, &Ns::Ei, "interval", &ip)?;
        let single = int_nodes.len() == 1;
        let mut intervals = Vec::with_capacity(int_nodes.len());
        for (i, n) in int_nodes.iter().enumerate() {
            let np = format!("{ip}/interval[{}]", i + 1);
            let duration = opt_wrapped_duration(n, &Ns::Xcal, "duration", &np)?;
            if duration.is_none() && !single {
                return Err(DecodeError::Missing {
                    path: join(&np, "duration"),
                });
            }
            if duration.is_some_and(|d| d < TimeDelta::zero()) {
                return Err(invalid(&join(&np, "duration"), "", "negative interval duration"));
            }
            let uid = n.child(&Ns::Xcal, "uid").and_then(|u| opt_text(u, &Ns::Xcal, "text"));
            if uid.as_deref() != Some(i.to_string().as_str()) {
                self.warn(&np, format!("uid {uid:?} is not the 0-based position {i}"));
            }
            let dtstart = match n.child(&Ns::Xcal, "dtstart") {
                Some(ds) => {
                    let dp = join(&np, "dtstart");
                    let dt = date_time(&req(ds, &Ns::Xcal, "date-time", &dp)?.text, &join(&dp, "date-time"))?;
                    self.warn(
                        &np,
                        "per-interval dtstart (openleadr style); starts are computed from the event dtstart",
                    );
                    Some(dt)
                }
                None => None,
            };
            let payloads = self.limited(n, &Ns::Ei, "signalPayload", &np)?;
            if payloads.is_empty() {
                return Err(DecodeError::Missing {
                    path: join(&np, "signalPayload"),
                });
            }
            let mut values = Vec::with_capacity(payloads.len());
            for (j, pl) in payloads.iter().enumerate() {
                let plp = if payloads.len() == 1 {
                    join(&np, "signalPayload")
                } else {
                    format!("{np}/signalPayload[{}]", j + 1)
                };
                let pf = req(pl, &Ns::Ei, "payloadFloat", &plp)?;
                let pfp = join(&plp, "payloadFloat");
                let v = parse_float(&req(pf, &Ns::Ei, "value", &pfp)?.text, &join(&pfp, "value"))?;
                values.push(v);
            }
            intervals.push(Interval {
                uid,
                duration,
                dtstart,
                values,
            });
        }
        // Interval durations must add up to the active period (conformance rule 8).
        if let Some(total) = event_duration
            && !(single && intervals[0].duration.is_none())
        {
            let sum = intervals
                .iter()
                .filter_map(|i| i.duration)
                .fold(TimeDelta::zero(), |a, b| a + b);
            if sum != total && !intervals.is_empty() {
                self.warn(
                    &ip,
                    format!(
                        "interval durations add up to {}s, the event lasts {}s",
                        sum.num_seconds(),
                        total.num_seconds()
                    ),
                );
            }
        }
        match (name.as_str(), signal_type.as_str()) {
            (_, "x-loadControlCapacity") => {
                for (i, iv) in intervals.iter().enumerate() {
                    if iv.values.iter().any(|v| !(0.0..=1.0).contains(v)) {
                        self.warn(
                            format!("{ip}/interval[{}]", i + 1),
                            format!("x-loadControlCapacity value {:?} is outside [0, 1]", iv.values),
                        );
                    }
                }
            }
            ("SIMPLE", _) => {
                for (i, iv) in intervals.iter().enumerate() {
                    if iv.values.iter().any(|v| !(0.0..=3.0).contains(v) || v.fract() != 0.0) {
                        self.warn(
                            format!("{ip}/interval[{}]", i + 1),
                            format!("SIMPLE level {:?} is not one of 0, 1, 2, 3", iv.values),
                        );
                    }
                }
            }
            _ => {}
        }
        let targets = match s.child(&Ns::Ei, "eiTarget") {
            Some(t) => Some(self.targets(t, &join(p, "eiTarget"))?),
            None => None,
        };
        Ok(Signal {
            name,
            signal_type,
            id,
            item_base,
            current_value,
            intervals,
            targets,
        })
    }
}
