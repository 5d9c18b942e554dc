//! The gateway's answer to one event revision: whether it takes part, why not, the ceiling it
//! accepted and the meter it expects, and the ledger checkpoint that anchors the receipt (set once recorded).
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
    pub event_id: crate::ids::EventId,
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
    /// The counterparty's anchor into the gateway's tamper-evident log: the hash of the ledger
    /// record that holds this acknowledgement, and that record's sequence number.
    ///
    /// A record cannot hold its own hash, so the decision is recorded without it (`None`) and the
    /// runtime sets it from the ledger once that record is flushed, before the ack is sent. The
    /// record holds the decision and the SHA-256 of the input it answers, and its hash chains
    /// over every earlier record (the received input among them): rewriting either changes the
    /// hash the counterparty holds. Acks recorded before this anchor existed carry here the hash
    /// of the record *before* the event's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_checkpoint: Option<String>,
    /// Sequence number of the record `log_checkpoint` is the hash of (see there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_seq: Option<u64>,
}

impl Ack {
    /// An acknowledgement with no reason, target or expectation; set those fields directly where
    /// they apply.
    #[must_use]
    pub fn new(
        event_id: impl Into<crate::ids::EventId>,
        revision: u64,
        received_at: DateTime<Utc>,
        opt: Participation,
    ) -> Self {
        Self {
            event_id: event_id.into(),
            revision,
            received_at,
            opt,
            reason: None,
            accepted_target_kw: None,
            expected_meter_kw: None,
            log_checkpoint: None,
            log_seq: None,
        }
    }
}
