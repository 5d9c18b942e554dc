//! The grid side: everything that talks to utilities and aggregators. Each module turns what
//! arrives into the controller's inputs (a `GridEvent` with its `Transport`, an operator
//! action) and what the gateway publishes (acks, status, telemetry, reports) into its protocol.
//!
//! - [`dr_event`]: `dr.event/1` documents onto the event model, ack decisions onto `dr.ack/1`;
//! - [`http`]: the HTTP API (`POST /v1/events`, reads, operator actions, the OpenADR push route);
//! - [`mqtt`]: the MQTT bridge over `flexgate-mqtt`;
//! - [`openadr`]: the OpenADR 2.0b VEN and 3.x client tasks over `flexgate-openadr`.

pub mod dr_event;
pub mod http;
pub mod mqtt;
pub mod openadr;
#[cfg(test)]
pub(crate) mod test_forecast;
