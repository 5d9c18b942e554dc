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
//!
//! The code is split by concern; every public item is re-exported here, so paths stay
//! `flexgate_openadr::oadr2b::…`:
//!
//! - `model`: [`Message`] and the event, registration, opt and poll message types;
//! - `report`: the report message types (metadata, requests, data, cancellations);
//! - `decode`: [`Limits`], [`DecodeError`] and the decoder (with `decode/event.rs`,
//!   `decode/report.rs` and the shared element helpers in `decode/fields.rs`);
//! - `xml`: the hardened parser underneath (no DTD, no entities, limits, namespaces by URI);
//! - `duration`: ISO 8601 durations and date-times;
//! - `json`: [`normalized_json`];
//! - [`encode`](mod@encode) and [`outgoing`]: what the VEN sends;
//! - [`signal`]: signals → protocol-neutral targets;
//! - [`ven`]: the sans-IO VEN state machine.

mod decode;
mod duration;
pub mod encode;
mod json;
mod model;
pub mod outgoing;
mod report;
pub mod signal;
pub mod ven;
mod xml;

pub use decode::{DecodeError, Limits, decode, decode_with_limits};
pub use duration::{DurationError, parse_date_time, parse_duration};
pub use encode::{encode, encode_into, format_date_time, format_duration};
pub use json::normalized_json;
pub use model::{
    Availability, CancelOpt, CancelPartyRegistration, CanceledOpt, CanceledPartyRegistration, CreateOpt,
    CreatePartyRegistration, CreatedEvent, CreatedOpt, CreatedPartyRegistration, DistributeEvent, EiResponse, Event,
    EventResponse, EventStatus, Interval, ItemBase, Message, Poll, QueryRegistration, RequestEvent,
    RequestReregistration, Response, ResponseRequired, Signal, Targets, Warning,
};
pub use report::{
    CancelReport, CanceledReport, CreateReport, CreatedReport, LoadControlState, RegisterReport, RegisteredReport,
    ReportData, ReportDescription, ReportInterval, ReportMetadata, ReportPoint, ReportRequest, ReportValue,
    ResourceStatus, SamplingRate, UpdateReport, UpdatedReport,
};
