//! The running gateway: events in, caps out, everything recorded.
//!
//! The decisions are the pure controller's ([`flexgate_policies::control`]); this module is its
//! driver. One [`Gateway`] owns the controller, the ledger handle and the cluster backend. Two
//! things drive it: submissions (HTTP, MQTT, OpenADR) and a control loop that wakes at the next
//! event-book change, telemetry tick or submission. Each decision is taken under a short lock
//! that only queues its ledger records; the flush and every cluster call happen after it, and
//! reads are served from the snapshot published after each decision.

mod control;
mod gateway;
pub mod metrics;
pub(crate) use gateway::Published;
mod recovery;
pub mod views;

pub use crate::clock::Clock;
pub use gateway::{
    EventDelivery, Gateway, OperatorError, StartError, Submission, SubmitError, SubmitOutcome, Transport, WireRef,
};
pub use views::{
    EventDetailView, EventView, ExpectedView, FlexibilityPointView, FlexibilityView, GuaranteeView, JobView,
    PlanEntryView, PlanView, ProbeView, StatusView,
};
