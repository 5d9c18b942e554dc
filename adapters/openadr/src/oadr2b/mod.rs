//! OpenADR 2.0b: decoding of VTN → VEN messages into plain Rust types.
//!
//! Entry points: [`decode`] (default [`Limits`]), [`decode_with_limits`], and
//! [`normalized_json`] for a stable, prefix-independent JSON view.

mod duration;
mod json;
pub mod encode;
pub mod outgoing;
pub mod signal;
pub mod ven;
mod xml;

use chrono::{DateTime, TimeDelta, Utc};

pub use duration::{DurationError, parse_date_time, parse_duration};
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

/// `oadrRegisterReport` (minimal: ids only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterReport {
    pub request_id: String,
    /// `ei:reportRequestID` of each `oadr:oadrReport`.
    pub report_request_ids: Vec<String>,
    /// `ei:reportSpecifierID` of each `oadr:oadrReport`, when present.
    pub report_specifier_ids: Vec<String>,
    pub ven_id: Option<String>,
}

/// One `oadr:oadrReportRequest`: what the VTN wants reported, how often.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportRequest {
    /// `ei:reportRequestID`.
    pub report_request_id: String,
    /// `ei:reportSpecifier/ei:reportSpecifierID`: which of the VEN's registered reports.
    pub report_specifier_id: String,
    /// `xcal:granularity`: sampling interval (`PT0S` or absent = the VEN's choice).
    pub granularity: Option<TimeDelta>,
    /// `ei:reportBackDuration`: how often to send (`PT0S`/absent = with every sample).
    pub report_back_duration: Option<TimeDelta>,
    /// `ei:reportInterval` dtstart, when the request is bounded.
    pub start: Option<DateTime<Utc>>,
    /// `ei:reportInterval` duration (`None` or `PT0S` = until cancelled).
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
        name: node.name.clone(),
    }
}

fn single_child(node: &Node) -> Result<&Node, DecodeError> {
    let mut it = node.children.iter().filter(|c| c.ns != Ns::Ds);
    let first = it.next().ok_or_else(|| DecodeError::Missing {
        path: format!("{}/*", node.name),
    })?;
    if let Some(extra) = it.next() {
        return Err(DecodeError::Invalid {
            path: node.name.clone(),
            value: extra.name.clone(),
            reason: "more than one message".into(),
        });
    }
    Ok(first)
}

fn unwrap_payload(root: &Node) -> Result<&Node, DecodeError> {
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
fn req<'a>(node: &'a Node, ns: &Ns, name: &str, path: &str) -> Result<&'a Node, DecodeError> {
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

fn dur(text: &str, path: &str) -> Result<TimeDelta, DecodeError> {
    parse_duration(text).map_err(|e| invalid(path, text.trim(), e.to_string()))
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

impl Cx<'_> {
    fn limited<'a>(&self, node: &'a Node, ns: &'a Ns, name: &'a str, path: &str) -> Result<Vec<&'a Node>, DecodeError> {
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
        let p = m.name.as_str();
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
                let reports = self.limited(m, &Ns::Oadr, "oadrReport", p)?;
                Message::RegisterReport(RegisterReport {
                    request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                    report_request_ids: reports
                        .iter()
                        .filter_map(|r| opt_text(r, &Ns::Ei, "reportRequestID"))
                        .collect(),
                    report_specifier_ids: reports
                        .iter()
                        .filter_map(|r| opt_text(r, &Ns::Ei, "reportSpecifierID"))
                        .collect(),
                    ven_id: opt_text(m, &Ns::Ei, "venID"),
                })
            }
            "oadrRegisteredReport" => Message::RegisteredReport(RegisteredReport {
                response: ei_response(req(m, &Ns::Ei, "eiResponse", p)?, &join(p, "eiResponse"))?,
                report_request_ids: self.report_request_ids(m, p)?,
                report_requests: Vec::new(), // TODO(codec helper): decode in full
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCreateReport" => Message::CreateReport(CreateReport {
                request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                report_request_ids: self.report_request_ids(m, p)?,
                report_requests: Vec::new(), // TODO(codec helper): decode in full
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
            "oadrCancelReport" => Message::CancelReport(CancelReport {
                request_id: req_text(m, &Ns::Pyld, "requestID", p)?,
                report_request_ids: self.texts(m, &Ns::Ei, "reportRequestID", p)?,
                report_to_follow: opt_text(m, &Ns::Pyld, "reportToFollow").is_some_and(|t| t == "true" || t == "1"),
                ven_id: opt_text(m, &Ns::Ei, "venID"),
            }),
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

    fn distribute(&mut self, m: &Node) -> Result<DistributeEvent, DecodeError> {
        let p = m.name.as_str();
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
            .map(|c| ItemBase {
                kind: c.name.clone(),
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
            });
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
