//! # flexgate-openadr
//!
//! A small, reusable OpenADR codec. It has no dependency on flexgate; it turns wire messages
//! into plain Rust types and a stable JSON view.
//!
//! ## Covered now: OpenADR 2.0b decoding
//!
//! - [`oadr2b::decode`] takes one `oadrPayload` (optionally with `oadrSignedObject`, whose
//!   `ds:Signature` is skipped, *not verified*), a bare `oadrSignedObject`, or a bare message,
//!   and returns a [`oadr2b::Message`]: `oadrDistributeEvent` in full (events, active period,
//!   tolerance, notification/ramp-up/recovery, signals with itemBase, current value,
//!   intervals and multiple payload values, event and per-signal targets),
//!   `oadrCreatedPartyRegistration`, `oadrRequestReregistration`,
//!   `oadrCancelPartyRegistration`, `oadrResponse`, and minimal (id-only) `oadrRegisterReport`,
//!   `oadrRegisteredReport`, `oadrCreateReport`, `oadrCancelReport`. Any other well-formed oadr
//!   message becomes `Message::Other { name }`.
//! - Namespaces are matched by URI (quick-xml `NsReader`), never by prefix: `oadr:`/`ei:`,
//!   default namespaces, EPRI's `d3p1:` and JAXB's `ns1…ns14` decode identically.
//! - Text nodes are trimmed. ISO 8601 durations are parsed in full by
//!   [`oadr2b::parse_duration`] (`PT120M`, `P1DT2H`, `PT0.5S`, `P0Y0M0DT0H30M0S`, signs);
//!   date-times need an offset and may carry surrounding whitespace. An event duration of
//!   `PT0S` means open-ended (`None`).
//! - Missing required elements and invalid values produce errors naming the element path,
//!   e.g. `oadrDistributeEvent/oadrEvent[1]/eiEvent/eventDescriptor/eventID`.
//! - Hostile input: DOCTYPE/DTD and every entity but the five predefined ones are rejected
//!   (nothing is ever expanded); size (4 MiB), depth (64), element count and list length
//!   (10,000 events, signals, intervals, values or targets) are limited ([`oadr2b::Limits`]);
//!   NaN/infinite values, non-UTF-8 input and truncated documents are errors. Decoding never
//!   panics.
//! - Non-fatal oddities become warnings on `DistributeEvent`: interval durations that do not
//!   add up to the active period, a per-interval `xcal:dtstart` (as openleadr writes it), uids
//!   that are not 0-based and consecutive, `x-loadControlCapacity` values outside [0, 1],
//!   SIMPLE levels outside 0..3, duplicate event IDs.
//! - [`oadr2b::normalized_json`] renders any message as JSON; for `oadrDistributeEvent`:
//!
//! ```text
//! {"format": "oadr2b", "message": "oadrDistributeEvent", "vtn_id": .., "ven_id": null, "request_id": ..,
//!  "events": [{"id", "modification", "priority", "status", "test", "market_context", "created",
//!              "start", "duration_s", "start_after_s", "notification_s", "ramp_up_s", "recovery_s",
//!              "response_required",
//!              "signals": [{"name", "type", "id", "item", "description", "units", "scale", "current_value",
//!                           "intervals": [{"uid", "start", "duration_s", "values"}], "targets"}],
//!              "targets": {"ven_id": [], "group_id": [], "resource_id": [], "party_id": []}}],
//!  "warnings": ["path: message", ..]}
//! ```
//!
//! Each interval's `start` is the event's dtstart plus the durations of the intervals before it.
//!
//! ## Not covered yet
//!
//! - Encoding (oadrCreatedEvent, registration, reports, poll): nothing is written yet.
//! - The VEN state machine (registration, event store with modificationNumber rules, implied
//!   cancellation, opt-in/out, randomised start).
//! - Transports (simple HTTP pull/push, TLS, XML signatures: signatures are not verified).
//! - Report bodies (metadata, intervals) beyond the ids listed above; EiOpt messages decode as
//!   `Message::Other`.
//! - OpenADR 3.x.
//!
//! ## Example
//!
//! ```
//! let xml = br#"<oadrPayload xmlns="http://openadr.org/oadr-2.0b/2012/07"><oadrSignedObject>
//!   <oadrRequestReregistration><venID xmlns="http://docs.oasis-open.org/ns/energyinterop/201110">V1</venID>
//!   </oadrRequestReregistration></oadrSignedObject></oadrPayload>"#;
//! let msg = flexgate_openadr::oadr2b::decode(xml)?;
//! assert_eq!(msg.name(), "oadrRequestReregistration");
//! # Ok::<(), flexgate_openadr::oadr2b::DecodeError>(())
//! ```

#[cfg(feature = "http")]
pub mod http;
pub mod oadr2b;
pub mod oadr3;
pub mod target;
