//! The grid side: everything that talks to utilities and aggregators. Each module turns what
//! arrives into the controller's inputs (a `GridEvent` with its `Transport`, an operator
//! action) and what the gateway publishes (acks, status, telemetry, reports) into its protocol.
//!
//! - [`http`]: the HTTP API (`POST /v1/events`, reads, operator actions, the OpenADR push route);
//! - [`mqtt`]: the MQTT bridge over `flexgate-mqtt`;
//! - [`openadr`]: the OpenADR 2.0b VEN and 3.x client tasks over `flexgate-openadr`.

pub mod http;
pub mod mqtt;
pub mod openadr;
