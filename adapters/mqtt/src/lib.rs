//! MQTT transport for demand-response events between a utility (or aggregator) and a site
//! gateway. It knows nothing of any particular gateway: it moves `dr.event/1` documents in and
//! acknowledgements, status, telemetry and reports out, and keeps the delivery guarantees.
//!
//! # Topics ([`topics`])
//!
//! | Topic | Direction | QoS / retain | Payload |
//! |---|---|---|---|
//! | `{prefix}/{site}/events/{event_id}` | utility → gateway | QoS 1, retained | `dr.event/1` |
//! | `{prefix}/{site}/acks/{event_id}` | gateway → utility | QoS 1 | [`AckPayload`] `dr.ack/1` |
//! | `{prefix}/{site}/status` | gateway → utility | QoS 1, retained; the Last Will | [`StatusPayload`] `dr.status/1` |
//! | `{prefix}/{site}/telemetry` | gateway → utility | QoS 1 | [`TelemetryPayload`] `dr.telemetry/1` |
//! | `{prefix}/{site}/reports/{event_id}` | gateway → utility | QoS 1 | [`ReportPayload`] `dr.report/1` |
//!
//! The prefix defaults to `dr` and may span levels (`utility-x/dr`). MQTT 3.1.1 is used, which
//! every broker speaks; event expiry is enforced from the document (`window`), not from MQTT 5
//! message expiry.
//!
//! # Payloads ([`payloads`])
//!
//! Every published document has a JSON Schema (draft 2020-12): [`payloads::DR_ACK_JSON_SCHEMA`]
//! and its siblings, shipped as `deploy/schemas/dr.*.schema.json`. Fields are always present
//! (`null` when unknown) and unknown fields are refused; power is in kW, instants are RFC 3339
//! UTC. Fields are only ever added to a document, never renamed or removed: `dr.telemetry/1`
//! gained `flexibility` (the flexibility curve now, [`FlexOffer`]) and `forecast` (what the site
//! can shed in the next 48 hours, by the hour, at P10/P50/P90: [`TelemetryForecast`]).
//!
//! # Signatures ([`signature`])
//!
//! An event may carry `sig`: base64url (no padding) of the Ed25519 signature over
//! [`signature::signing_input`]: the tag `dr.event/1 sig v2`, a zero byte, the topic it is
//! published on, a zero byte, and the RFC 8785 canonical JSON of the document without its
//! top-level `sig` member. Binding the topic (prefix, site and event id) means a signed event
//! cannot be replayed at another site or under another event id. Integers above 2^53 and
//! duplicate keys are refused. With [`SignaturePolicy::Required`], unsigned or badly signed
//! events are refused; with `Optional`, unsigned ones pass but a present `sig` must verify.
//!
//! # Screening ([`screen`])
//!
//! De-duplication on `(event_id, revision)`, topic/document id agreement, stale `issued_at`
//! and expired windows; [`Screen::admit`] runs the signature check and then these. Full
//! `dr.event/1` validation is the application's.
//!
//! # Delivery: ack after flush ([`link`])
//!
//! The session is persistent (clean session off), acknowledgements are manual, and the
//! subscription is renewed on every ConnAck. Each [`IncomingEvent`] carries an [`AckHandle`];
//! the PUBACK leaves only when the application calls [`AckHandle::ack`], after its record of
//! the event is flushed. A crash before that means the broker redelivers, never that the event
//! is lost. Dropping a handle acks nothing.
//!
//! # Example
//!
//! ```no_run
//! use flexgate_mqtt::{AckPayload, MqttLink, MqttSettings, Opt, Screen, SignaturePolicy, Topics, TrustedKeys};
//!
//! # async fn record_in_ledger(_: &[u8]) -> Result<String, std::io::Error> { Ok(String::new()) }
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let topics = Topics::new("dr", "dc-east")?;
//! let mut settings = MqttSettings::new("mqtts://broker.example:8883", "flexgate-dc-east", topics)?;
//! settings.username = Some("dc-east".into());
//! settings.password = Some(flexgate_mqtt::Secret::new("from-a-secret-store"));
//! let keys = TrustedKeys::parse(&["3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"])?;
//! let mut screen = Screen::default();
//!
//! let (link, mut incoming) = MqttLink::connect(settings)?;
//! while let Some(event) = incoming.recv().await {
//!     let now = chrono::Utc::now();
//!     // A payload over the size limit arrives without its bytes, `refused` saying why.
//!     let checked = match &event.refused {
//!         Some(why) => Err(why.clone()),
//!         None => screen
//!             .admit(&event.topic, &event.event_id, &event.payload, &keys, SignaturePolicy::Required, now)
//!             .map_err(|e| e.to_string()),
//!     };
//!     let header = match checked {
//!         Ok((_, header)) => header,
//!         Err(_why) => {
//!             // Refused for good: ack so that it is not redelivered (optionally publish an
//!             // opt-out dr.ack/1 with the reason).
//!             let _ = event.ack.ack().await?;
//!             continue;
//!         }
//!     };
//!     let checkpoint = record_in_ledger(&event.payload).await?; // flushed
//!     screen.remember(&header, now);
//!     event.ack.ack().await?; // only now does the broker forget the message
//!     let ack = AckPayload::new(&header.event_id, header.revision, now, Opt::In, checkpoint);
//!     link.publish_ack(&ack).await?;
//! }
//! # Ok(())
//! # }
//! ```

pub mod link;
pub mod screen;
pub mod settings;
pub mod signature;
pub mod tls;
pub mod topics;

mod json;

/// The published documents (`dr.ack/1`, `dr.status/1`, `dr.telemetry/1`, `dr.report/1`), defined
/// once in `flexgate-dr` and re-exported here so that the adapter's API is complete on its own.
pub use flexgate_dr::payloads;

pub use link::{AckHandle, AckOutcome, ConnectionState, Incoming, IncomingEvent, LinkError, LinkStats, MqttLink};
pub use payloads::{
    AckPayload, FlexOffer, ForecastHour, GatewayState, KwBand, KwRange, Opt, Phase, ReportInterval, ReportPayload,
    StatusPayload, TelemetryForecast, TelemetryPayload,
};
pub use screen::{EventHeader, Refusal, Rejection, Screen, ScreenConfig};
pub use settings::{Backoff, BrokerAddr, MqttSettings, Secret, SettingsError};
pub use signature::{SignatureError, SignaturePolicy, TrustedKeys, Verified};
pub use tls::{TlsError, TlsFiles};
pub use topics::{TopicError, Topics};
