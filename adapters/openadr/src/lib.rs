//! # flexgate-openadr
//!
//! A small, reusable OpenADR codec. It has no dependency on flexgate; it turns wire messages
//! into plain Rust types and a stable JSON view.
//!
//! ## What is in it
//!
//! - **OpenADR 2.0b codec** ([`oadr2b`]): [`oadr2b::decode`] reads every 2.0b message type
//!   (VTN → VEN and VEN → VTN) into plain types; [`oadr2b::encode::encode`] writes every message a
//!   VEN sends ([`oadr2b::outgoing::Outgoing`]), valid against the 2.0b XSD (the tests check each
//!   one with lxml against the schema openleadr ships, and a real openleadr VTN accepts them).
//!   Namespaces are matched by URI, never by prefix (`oadr:`, default namespaces, EPRI's
//!   `d3p1:`, JAXB's `ns1…ns14` decode identically); text is trimmed; ISO 8601 durations are
//!   parsed in full; missing required elements name their path, e.g.
//!   `oadrDistributeEvent/oadrEvent[1]/eiEvent/eventDescriptor/eventID`.
//! - **Hostile input**: no DOCTYPE/DTD, no entity but the five predefined ones (nothing is ever
//!   expanded), size (4 MiB), depth (64), element and list limits ([`oadr2b::Limits`]); NaN and
//!   infinities, non-UTF-8 and truncated documents are errors; decoding never panics (fuzzed:
//!   see `fuzz/README.md`).
//! - **2.0b VEN** ([`oadr2b::ven`]): a sans-IO state machine — registration (query, create,
//!   persisted venID/registrationID/vtnID, re-registration, cancellation both ways), RegisterReport
//!   both ways, RequestEvent at start, polling at the VTN's frequency, the distribute rules
//!   (modificationNumber, implied cancellation, empty distribute, responseRequired), opt-out by
//!   itself for targets and market contexts that are not ours and for unsupported (460) or
//!   out-of-range (454) signals, test events, oadrCreateOpt, TELEMETRY_USAGE and
//!   TELEMETRY_STATUS reports at the requested granularity. Time is an argument; every side
//!   effect is an action the caller runs, so it is tested with a simulated clock.
//! - **Signals → targets** ([`oadr2b::signal`], [`target`]): every load signal (LOAD_DISPATCH,
//!   LOAD_CONTROL, SIMPLE), scaled by its itemBase, becomes a protocol-neutral
//!   [`target::LoadTarget`]; prices are informational; out-of-range values are refusals, never
//!   targets.
//! - **OpenADR 3.x** ([`oadr3`]): model (3.0 and 3.1 targets), decoding with limits, payloads →
//!   targets (interval defaults and overrides, multi-value sub-intervals, `P9999Y`,
//!   `0001-01-01` = now, verbose durations), priorities on one scale with 2.0b, a change
//!   tracker (modificationDateTime, deletion, zero window) and, with the `http` feature, a
//!   client with bearer tokens or OAuth2 client credentials, ETag/304 and report posting.
//! - **Transports** (feature `http`, default): [`http::tls`] builds rustls (ring) client
//!   configurations — TLS 1.2+, client certificate, CA, an optional VTN fingerprint pin
//!   (openleadr's form) — and explains the classic certificate mistakes (swapped files, key not
//!   matching the certificate, wrong CA, wrong host name, missing client certificate);
//!   [`http::oadr2b::Oadr2bHttp`] POSTs 2.0b messages and returns raw and decoded answers.
//! - [`oadr2b::normalized_json`] and [`oadr3::normalized_json`] render any message as the same
//!   JSON shape (the `flexgate openadr decode` command prints it):
//!
//! ```text
//! {"format": "oadr2b" | "oadr3", "message": "oadrDistributeEvent" | "events" | ..., "vtn_id", "ven_id", "request_id",
//!  "events": [{"id", "modification", "priority", "status", "test", "market_context", "start", "duration_s",
//!              "response_required",
//!              "signals": [{"name", "type", "units", "scale", "intervals": [{"start", "duration_s", "values"}]}],
//!              "targets": {"ven_id": [], "group_id": [], "resource_id": [], "party_id": []}}],
//!  "warnings": ["path: message", ..]}
//! ```
//!
//! ## Not covered
//!
//! - XML signatures (`oadrXmlSignature`): `ds:Signature` is skipped on input, never verified,
//!   and nothing is signed; registration says `oadrXmlSignature=false`.
//! - XMPP transport; OpenADR 3 webhook/MQTT notification *delivery* (notifications decode and
//!   track, but the client polls).
//! - The VEN does not randomize starts itself; it hands `startafter` to the consumer.
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
