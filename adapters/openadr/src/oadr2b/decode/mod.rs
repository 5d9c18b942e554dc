//! Decoding: untrusted bytes → [`Message`], under [`Limits`].
//!
//! The parser (`xml`) turns the bytes into a namespace-resolved tree; this module unwraps
//! `oadrPayload`/`oadrSignedObject`, dispatches on the message element and decodes the small
//! messages itself. The event messages are decoded in `event`, the report messages in
//! `report`, and the element helpers shared by all (required/optional children, numbers,
//! durations, dates, paths) are in `fields`, so that each file reads as one part of the schema.

mod event;
mod fields;
mod report;

use super::model::{
    Availability, CancelOpt, CancelPartyRegistration, CanceledOpt, CanceledPartyRegistration, CreateOpt,
    CreatePartyRegistration, CreatedEvent, CreatedOpt, CreatedPartyRegistration, EiResponse, EventResponse, Message,
    Poll, QueryRegistration, RequestEvent, RequestReregistration, Response, Targets, Warning,
};
use super::report::{
    CanceledReport, CreateReport, CreatedReport, RegisterReport, RegisteredReport, UpdateReport, UpdatedReport,
};
use super::xml::{self, All, Node, Ns};
use fields::{
    Path, ei_response, missing, opt_bool, opt_date_time, opt_dtstart, opt_text, opt_type, opt_wrapped_duration,
    parse_u32, req, req_bool, req_text,
};

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

/// Decodes one `oadrPayload` (optionally wrapping `oadrSignedObject`), a bare
/// `oadrSignedObject`, or a bare message, with the default [`Limits`].
pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
    decode_with_limits(bytes, &Limits::default())
}

/// [`decode`] with explicit limits.
pub fn decode_with_limits(bytes: &[u8], limits: &Limits) -> Result<Message, DecodeError> {
    let tree = xml::parse(bytes, limits)?;
    let msg = unwrap_payload(tree.root())?;
    let mut cx = Cx {
        limits,
        warnings: Vec::new(),
        event_problems: Vec::new(),
    };
    cx.message(msg)
}

fn not_oadr(node: Node) -> DecodeError {
    DecodeError::NotOpenAdr {
        namespace: node.ns_uri().to_owned(),
        name: node.name().to_owned(),
    }
}

fn single_child(node: Node) -> Result<Node, DecodeError> {
    let mut it = node.children().filter(|c| c.ns() != Ns::Ds);
    let first = it.next().ok_or_else(|| DecodeError::Missing {
        path: format!("{}/*", node.name()),
    })?;
    if let Some(extra) = it.next() {
        return Err(DecodeError::Invalid {
            path: node.name().to_owned(),
            value: extra.name().to_owned(),
            reason: "more than one message".into(),
        });
    }
    Ok(first)
}

fn unwrap_payload(root: Node) -> Result<Node, DecodeError> {
    if root.ns() != Ns::Oadr {
        return Err(not_oadr(root));
    }
    let mut node = root;
    if node.name() == "oadrPayload" {
        node = single_child(node)?;
        if !node.is(Ns::Oadr, "oadrSignedObject") {
            return Err(not_oadr(node));
        }
    }
    if node.name() == "oadrSignedObject" {
        node = single_child(node)?;
        if node.ns() != Ns::Oadr {
            return Err(not_oadr(node));
        }
    }
    Ok(node)
}

struct Cx<'l> {
    limits: &'l Limits,
    warnings: Vec<Warning>,
    /// What is wrong with the event being decoded, alone (an unreadable duration): collected
    /// into its [`Event::invalid`](crate::oadr2b::Event) so that the VEN refuses that event
    /// (454) and still answers the others, instead of the whole message failing to decode.
    event_problems: Vec<String>,
}

/// The children of one name under a node, counted and found within [`Limits::max_items`]
/// (see [`Cx::limited`]). Iterating walks the children again instead of collecting them: no
/// allocation per list.
struct Limited<'t, 'n> {
    all: All<'t, 'n>,
    left: usize,
}

impl<'t> Iterator for Limited<'t, '_> {
    type Item = Node<'t>;

    fn next(&mut self) -> Option<Node<'t>> {
        let n = self.all.next()?;
        self.left = self.left.saturating_sub(1);
        Some(n)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Limited<'_, '_> {}

impl Cx<'_> {
    /// The `{ns}name` children of `node`, refused when there are more than
    /// [`Limits::max_items`].
    fn limited<'t, 'n>(
        &self,
        node: Node<'t>,
        ns: Ns,
        name: &'n str,
        path: &Path,
    ) -> Result<Limited<'t, 'n>, DecodeError> {
        let all = node.all(ns, name);
        let left = all.clone().take(self.limits.max_items + 1).count();
        if left > self.limits.max_items {
            return Err(DecodeError::TooMany {
                path: path.child(name).render(),
                limit: self.limits.max_items,
            });
        }
        Ok(Limited { all, left })
    }

    fn texts(&self, node: Node, ns: Ns, name: &str, path: &Path) -> Result<Vec<String>, DecodeError> {
        Ok(self
            .limited(node, ns, name, path)?
            .map(|n| n.trimmed().to_owned())
            .collect())
    }

    fn warn(&mut self, path: &Path, message: impl Into<String>) {
        self.warnings.push(Warning {
            path: path.render(),
            message: message.into(),
        });
    }

    fn message(&mut self, m: Node) -> Result<Message, DecodeError> {
        let p = &Path::Root(m.name());
        Ok(match m.name() {
            "oadrDistributeEvent" => Message::DistributeEvent(self.distribute(m)?),
            "oadrCreatedPartyRegistration" => {
                let response = ei_response(req(m, Ns::Ei, "eiResponse", p)?, &p.child("eiResponse"))?;
                let mut profiles = Vec::new();
                if let Some(ps) = m.child(Ns::Oadr, "oadrProfiles") {
                    let pp = p.child("oadrProfiles");
                    for prof in self.limited(ps, Ns::Oadr, "oadrProfile", &pp)? {
                        if let Some(n) = opt_text(prof, Ns::Oadr, "oadrProfileName") {
                            profiles.push(n);
                        }
                    }
                }
                Message::CreatedPartyRegistration(CreatedPartyRegistration {
                    response,
                    registration_id: opt_text(m, Ns::Ei, "registrationID"),
                    ven_id: opt_text(m, Ns::Ei, "venID"),
                    vtn_id: opt_text(m, Ns::Ei, "vtnID"),
                    profiles,
                    poll_freq: opt_wrapped_duration(m, Ns::Oadr, "oadrRequestedOadrPollFreq", p)?,
                })
            }
            "oadrRequestReregistration" => Message::RequestReregistration(RequestReregistration {
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrCancelPartyRegistration" => Message::CancelPartyRegistration(CancelPartyRegistration {
                request_id: req_text(m, Ns::Pyld, "requestID", p)?,
                registration_id: req_text(m, Ns::Ei, "registrationID", p)?,
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrResponse" => Message::Response(Response {
                response: ei_response(req(m, Ns::Ei, "eiResponse", p)?, &p.child("eiResponse"))?,
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrRegisterReport" => {
                let nodes = self.limited(m, Ns::Oadr, "oadrReport", p)?;
                let mut reports = Vec::with_capacity(nodes.len());
                for (i, r) in nodes.enumerate() {
                    reports.push(self.report_metadata(r, &p.nth("oadrReport", i))?);
                }
                Message::RegisterReport(RegisterReport {
                    request_id: req_text(m, Ns::Pyld, "requestID", p)?,
                    report_request_ids: reports.iter().filter_map(|r| r.report_request_id.clone()).collect(),
                    report_specifier_ids: reports.iter().filter_map(|r| r.report_specifier_id.clone()).collect(),
                    reports,
                    ven_id: opt_text(m, Ns::Ei, "venID"),
                })
            }
            "oadrRegisteredReport" => Message::RegisteredReport(RegisteredReport {
                response: self.response_of(m, p)?,
                report_request_ids: self.report_request_ids(m, p)?,
                report_requests: self.report_requests(m, p)?,
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrCreateReport" => Message::CreateReport(CreateReport {
                request_id: req_text(m, Ns::Pyld, "requestID", p)?,
                report_request_ids: self.report_request_ids(m, p)?,
                report_requests: self.report_requests(m, p)?,
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrCancelReport" => Message::CancelReport(self.cancel_report(m, p)?),
            "oadrCanceledPartyRegistration" => Message::CanceledPartyRegistration(CanceledPartyRegistration {
                response: self.response_of(m, p)?,
                registration_id: opt_text(m, Ns::Ei, "registrationID"),
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrUpdatedReport" => Message::UpdatedReport(UpdatedReport {
                response: self.response_of(m, p)?,
                cancel_report: match m.child(Ns::Oadr, "oadrCancelReport") {
                    Some(c) => Some(self.cancel_report(c, &p.child("oadrCancelReport"))?),
                    None => None,
                },
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrCreatedOpt" => Message::CreatedOpt(CreatedOpt {
                response: self.response_of(m, p)?,
                opt_id: req_text(m, Ns::Ei, "optID", p)?,
            }),
            "oadrCanceledOpt" => Message::CanceledOpt(CanceledOpt {
                response: self.response_of(m, p)?,
                opt_id: opt_text(m, Ns::Ei, "optID"),
            }),
            "oadrCancelOpt" => Message::CancelOpt(CancelOpt {
                request_id: req_text(m, Ns::Pyld, "requestID", p)?,
                opt_id: req_text(m, Ns::Ei, "optID", p)?,
                ven_id: req_text(m, Ns::Ei, "venID", p)?,
            }),
            "oadrCreatedReport" => Message::CreatedReport(CreatedReport {
                response: self.response_of(m, p)?,
                pending_report_request_ids: self.pending_reports(m, p)?,
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrCanceledReport" => Message::CanceledReport(CanceledReport {
                response: self.response_of(m, p)?,
                pending_report_request_ids: self.pending_reports(m, p)?,
                ven_id: opt_text(m, Ns::Ei, "venID"),
            }),
            "oadrCreatedEvent" => Message::CreatedEvent(self.created_event(m, p)?),
            "oadrPoll" => Message::Poll(Poll {
                ven_id: req_text(m, Ns::Ei, "venID", p)?,
            }),
            "oadrQueryRegistration" => Message::QueryRegistration(QueryRegistration {
                request_id: req_text(m, Ns::Pyld, "requestID", p)?,
            }),
            "oadrCreatePartyRegistration" => Message::CreatePartyRegistration(CreatePartyRegistration {
                request_id: req_text(m, Ns::Pyld, "requestID", p)?,
                registration_id: opt_text(m, Ns::Ei, "registrationID"),
                ven_id: opt_text(m, Ns::Ei, "venID"),
                profile_name: req_text(m, Ns::Oadr, "oadrProfileName", p)?,
                transport_name: req_text(m, Ns::Oadr, "oadrTransportName", p)?,
                transport_address: opt_text(m, Ns::Oadr, "oadrTransportAddress"),
                report_only: req_bool(m, Ns::Oadr, "oadrReportOnly", p)?,
                xml_signature: req_bool(m, Ns::Oadr, "oadrXmlSignature", p)?,
                ven_name: opt_text(m, Ns::Oadr, "oadrVenName"),
                http_pull_model: opt_bool(m, Ns::Oadr, "oadrHttpPullModel", p)?,
            }),
            "oadrRequestEvent" => {
                let rp = p.child("eiRequestEvent");
                let r = req(m, Ns::Pyld, "eiRequestEvent", p)?;
                Message::RequestEvent(RequestEvent {
                    request_id: req_text(r, Ns::Pyld, "requestID", &rp)?,
                    ven_id: req_text(r, Ns::Ei, "venID", &rp)?,
                    reply_limit: match r.child(Ns::Pyld, "replyLimit") {
                        Some(l) => Some(parse_u32(l.text(), &rp.child("replyLimit"))?),
                        None => None,
                    },
                })
            }
            "oadrUpdateReport" => {
                let nodes = self.limited(m, Ns::Oadr, "oadrReport", p)?;
                let mut reports = Vec::with_capacity(nodes.len());
                for (i, r) in nodes.enumerate() {
                    reports.push(self.report_data(r, &p.nth("oadrReport", i))?);
                }
                Message::UpdateReport(UpdateReport {
                    request_id: req_text(m, Ns::Pyld, "requestID", p)?,
                    reports,
                    ven_id: opt_text(m, Ns::Ei, "venID"),
                })
            }
            "oadrCreateOpt" => Message::CreateOpt(self.create_opt(m, p)?),
            other => Message::Other { name: other.to_owned() },
        })
    }

    /// The required `ei:eiResponse` of message `m`.
    fn response_of(&self, m: Node, p: &Path) -> Result<EiResponse, DecodeError> {
        ei_response(req(m, Ns::Ei, "eiResponse", p)?, &p.child("eiResponse"))
    }

    fn created_event(&self, m: Node, p: &Path) -> Result<CreatedEvent, DecodeError> {
        let cp = p.child("eiCreatedEvent");
        let c = req(m, Ns::Pyld, "eiCreatedEvent", p)?;
        let mut event_responses = Vec::new();
        if let Some(ers) = c.child(Ns::Ei, "eventResponses") {
            let ersp = cp.child("eventResponses");
            for (i, er) in self.limited(ers, Ns::Ei, "eventResponse", &ersp)?.enumerate() {
                let ep = ersp.nth("eventResponse", i);
                let qp = ep.child("qualifiedEventID");
                let q = req(er, Ns::Ei, "qualifiedEventID", &ep)?;
                event_responses.push(EventResponse {
                    code: req_text(er, Ns::Ei, "responseCode", &ep)?,
                    description: opt_text(er, Ns::Ei, "responseDescription"),
                    request_id: opt_text(er, Ns::Pyld, "requestID"),
                    event_id: req_text(q, Ns::Ei, "eventID", &qp)?,
                    modification_number: parse_u32(
                        req(q, Ns::Ei, "modificationNumber", &qp)?.text(),
                        &qp.child("modificationNumber"),
                    )?,
                    opt: opt_type(er, &ep)?,
                });
            }
        }
        Ok(CreatedEvent {
            response: self.response_of(c, &cp)?,
            event_responses,
            ven_id: req_text(c, Ns::Ei, "venID", &cp)?,
        })
    }

    fn create_opt(&self, m: Node, p: &Path) -> Result<CreateOpt, DecodeError> {
        let mut availability = Vec::new();
        if let Some(va) = m.child(Ns::Xcal, "vavailability") {
            let vp = p.child("vavailability");
            let comps = req(va, Ns::Xcal, "components", &vp)?;
            let cp = vp.child("components");
            for (i, a) in self.limited(comps, Ns::Xcal, "available", &cp)?.enumerate() {
                let ap = cp.nth("available", i);
                let pp = ap.child("properties");
                let props = req(a, Ns::Xcal, "properties", &ap)?;
                availability.push(Availability {
                    start: opt_dtstart(props, &pp)?.ok_or_else(|| missing(&pp.child("dtstart")))?,
                    duration: opt_wrapped_duration(props, Ns::Xcal, "duration", &pp)?
                        .ok_or_else(|| missing(&pp.child("duration")))?,
                });
            }
        }
        let (event_id, modification_number) = match m.child(Ns::Ei, "qualifiedEventID") {
            Some(q) => {
                let qp = p.child("qualifiedEventID");
                (
                    Some(req_text(q, Ns::Ei, "eventID", &qp)?),
                    Some(parse_u32(
                        req(q, Ns::Ei, "modificationNumber", &qp)?.text(),
                        &qp.child("modificationNumber"),
                    )?),
                )
            }
            None => (None, None),
        };
        Ok(CreateOpt {
            opt_id: req_text(m, Ns::Ei, "optID", p)?,
            opt: opt_type(m, p)?,
            reason: req_text(m, Ns::Ei, "optReason", p)?,
            market_context: opt_text(m, Ns::Emix, "marketContext"),
            ven_id: req_text(m, Ns::Ei, "venID", p)?,
            availability,
            created: opt_date_time(m, Ns::Ei, "createdDateTime", p)?,
            request_id: req_text(m, Ns::Pyld, "requestID", p)?,
            event_id,
            modification_number,
            targets: match m.child(Ns::Ei, "eiTarget") {
                Some(t) => self.targets(t, &p.child("eiTarget"))?,
                None => Targets::default(),
            },
        })
    }
}
