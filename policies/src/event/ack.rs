//! The gateway's answer to one event revision: whether it takes part, why not, the ceiling it
//! accepted and the meter it expects, and the ledger checkpoint that anchors the receipt.
//!
//! This is the *decision*, made by the controller and recorded in the ledger. The `dr.ack/1`
//! document that carries it to a utility (HTTP body, MQTT), and the OpenADR answers, are the
//! transports' renderings of it; the decision does not know their field layouts.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Whether the gateway takes part in an event (OpenADR optIn / optOut).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Participation {
    /// The gateway will follow the event.
    In,
    /// The gateway will not follow the event (the ack's `reason` says why).
    Out,
}

/// A range of meter power, kW: what the gateway expects the meter to read while it follows an
/// event (the facility model's conservative bounds), so the utility knows what to expect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeterRangeKw {
    /// Lower bound, kW.
    pub lo: f64,
    /// Upper bound, kW.
    pub hi: f64,
}

/// The acknowledgement decided for one event revision.
///
/// Unknown members are tolerated when reading the ledger: entries written before this type was
/// separated from the `dr.ack/1` document also carry that document's `schema` member.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    /// The acknowledged event.
    pub event_id: String,
    /// The acknowledged revision.
    pub revision: u64,
    /// When the gateway received the event.
    pub received_at: DateTime<Utc>,
    /// Whether the gateway takes part.
    pub opt: Participation,
    /// Why the gateway opted out, or why a part of the event is not acted on; `None` otherwise.
    pub reason: Option<String>,
    /// The meter ceiling the gateway accepted as its target, kW.
    pub accepted_target_kw: Option<f64>,
    /// The meter reading the gateway expects while following the event.
    pub expected_meter_kw: Option<MeterRangeKw>,
    /// Hash of the ledger checkpoint that records the event's receipt: the counterparty's anchor
    /// into the gateway's tamper-evident log.
    pub log_checkpoint: String,
}

impl Ack {
    /// An acknowledgement with no reason, target or expectation; set those fields directly where
    /// they apply.
    #[must_use]
    pub fn new(
        event_id: impl Into<String>,
        revision: u64,
        received_at: DateTime<Utc>,
        opt: Participation,
        log_checkpoint: impl Into<String>,
    ) -> Self {
        Self {
            event_id: event_id.into(),
            revision,
            received_at,
            opt,
            reason: None,
            accepted_target_kw: None,
            expected_meter_kw: None,
            log_checkpoint: log_checkpoint.into(),
        }
    }
}
