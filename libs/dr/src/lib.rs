//! The `dr.*` JSON documents, each defined exactly once, with its JSON Schema.
//!
//! | Document | Direction | Carried by | Type |
//! |---|---|---|---|
//! | `dr.event/1` | utility → gateway | `POST /v1/events`, MQTT `{prefix}/{site}/events/{event_id}` | [`DrEvent`] ([`parse_dr_event`]) |
//! | `dr.ack/1` | gateway → utility | HTTP response body, MQTT `{prefix}/{site}/acks/{event_id}` | [`AckPayload`] |
//! | `dr.status/1` | gateway → utility | MQTT `{prefix}/{site}/status` (retained) | [`StatusPayload`] |
//! | `dr.telemetry/1` | gateway → utility | MQTT `{prefix}/{site}/telemetry` | [`TelemetryPayload`] |
//! | `dr.report/1` | gateway → utility | MQTT `{prefix}/{site}/reports/{event_id}` | [`ReportPayload`] |
//!
//! Why a crate of its own: the gateway's HTTP intake and the MQTT adapter speak the same
//! documents, an adapter may not depend on the gateway (nor the gateway's pure core on an
//! adapter), and two copies of one document drift. This leaf crate depends on nothing in the
//! workspace. It knows the documents, not the gateway's model: the gateway maps a [`DrEvent`]
//! onto its event model (which checks the value ranges) and its acknowledgement decision onto
//! an [`AckPayload`].

pub mod event;
pub mod payloads;

pub use event::{
    DR_EVENT_JSON_SCHEMA, DR_EVENT_SCHEMA, DocumentError, DrEvent, DrInterval, DrTarget, DrWindow, MAX_DEPTH,
    MAX_DOCUMENT_BYTES, MAX_DURATION_S, MAX_INTERVALS, MAX_LEVEL, parse_dr_event,
};
pub use payloads::{
    AckPayload, DR_ACK_JSON_SCHEMA, DR_ACK_SCHEMA, DR_REPORT_JSON_SCHEMA, DR_REPORT_SCHEMA, DR_STATUS_JSON_SCHEMA,
    DR_STATUS_SCHEMA, DR_TELEMETRY_JSON_SCHEMA, DR_TELEMETRY_SCHEMA, FlexOffer, ForecastHour, GatewayState, KwBand,
    KwRange, Opt, PayloadError, Phase, ReportInterval, ReportPayload, StatusPayload, TelemetryForecast,
    TelemetryPayload, to_json,
};
