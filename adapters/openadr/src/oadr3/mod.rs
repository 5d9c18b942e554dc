//! # OpenADR 3.x VEN client
//!
//! Everything a VEN needs to follow a 3.0 or 3.1 VTN, usable without knowing anything about
//! flexgate:
//!
//! - [`model`]: serde types for events, programs, reports and notifications, tolerant of unknown
//!   fields and of both target styles (3.0 valuesMaps, 3.1 strings).
//! - [`decode_any`]: untrusted bytes → [`Document`] in one pass, with [`Limits`] on size
//!   (4 MiB), nesting depth and list length; out-of-range numbers (`1e999`), a key written twice
//!   in one object, negative durations and malformed timestamps are errors that name the field
//!   path.
//! - [`time`]: ISO 8601 durations with years and months (`P9999Y` = forever, the verbose
//!   `P0Y0M0DT0H30M0S`) and RFC 3339 timestamps (`+00:00`, nanoseconds, the `0001-01-01` "now"
//!   sentinel).
//! - [`normalized_json`]: the same JSON shape as [`crate::oadr2b::normalized_json`].
//! - [`event_targets`]: payloads → [`crate::target::LoadTarget`] spans (see [`mapping`] for the
//!   table, signs and units).
//! - [`EventTracker`]: New / Modified / Cancelled / Unchanged with a per-event revision, from
//!   complete polls or notifications (sans I/O).
//! - [`Precedence`]: 3.x and 2.0b priorities on one scale.
//! - `Client` (feature `http`): `GET /events` with ETag/304 and pagination, `POST /reports`,
//!   bearer tokens or OAuth2 client credentials with caching and one retry on 401.
//!
//! ```
//! use flexgate_openadr::oadr3::{decode_any, event_targets, Document};
//! use flexgate_openadr::target::LoadTarget;
//!
//! let body = br#"[{"id":"e1","programID":"p1","modificationDateTime":"2026-07-01T12:00:00Z",
//!   "payloadDescriptors":[{"payloadType":"IMPORT_CAPACITY_LIMIT","units":"KW"}],
//!   "intervalPeriod":{"start":"2026-07-01T18:00:00Z","duration":"PT30M"},
//!   "intervals":[{"id":0,"payloads":[{"type":"IMPORT_CAPACITY_LIMIT","values":[800]}]}]}]"#;
//! let Document::Events(events) = decode_any(body)? else { unreachable!() };
//! let now = chrono::Utc::now();
//! let mapped = event_targets(&events[0], now)?;
//! assert_eq!(mapped.targets[0].span.target, LoadTarget::Ceiling { kw: 800.0 });
//! assert_eq!(mapped.targets[0].span.duration_s, Some(1800));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "http")]
pub mod client;
pub mod decode;
pub mod json;
mod kind;
mod lex;
pub mod mapping;
pub mod model;
pub mod priority;
mod reader;
pub mod time;
pub mod timing;
pub mod tracker;
mod typed;

#[cfg(feature = "http")]
pub use client::{Auth, Client, ClientError, Polled, Problem, http_client};
pub use decode::{DecodeError, Document, Limits, decode_any, decode_any_with_limits, decode_events};
pub use json::normalized_json;
pub use mapping::{
    EventTargets, MappedTarget, PayloadClass, PayloadNote, PayloadRefusal, event_targets, payload_class,
};
pub use model::{
    Event, EventPayloadDescriptor, Interval, IntervalPeriod, Notification, NotifiedObject, Operation, PayloadValue,
    Program, Report, ReportDescriptor, ReportPayloadDescriptor, ReportResource, Target, ValuesMap,
};
pub use priority::Precedence;
pub use time::{DurationError, IsoDuration, TimestampError, is_now_sentinel, now_sentinel, parse_timestamp};
pub use timing::{TimingError, ZeroWindow, zero_window};
pub use tracker::{CancelReason, Change, ChangeKind, EventTracker};
