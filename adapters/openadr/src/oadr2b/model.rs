//! The decoded 2.0b messages: [`Message`] and the plain types of the event, registration, opt
//! and poll messages.
//!
//! Separate from the decoder so that the types a VEN works with read as one list, without
//! the XML walking; the report messages are in `report` for the same reason.

use chrono::{DateTime, TimeDelta, Utc};

use super::outgoing;
use super::report::{
    CancelReport, CanceledReport, CreateReport, CreatedReport, RegisterReport, RegisteredReport, UpdateReport,
    UpdatedReport,
};

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
    /// What makes this event unusable although the message decoded (an unreadable event or
    /// interval duration such as `PT`), each naming its element. The VEN refuses such an event
    /// with 454 and these reasons; its `duration` then means nothing and is never acted on.
    pub invalid: Vec<String>,
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
