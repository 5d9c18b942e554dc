//! The running gateway: events in, caps out, everything recorded.
//!
//! The decisions are the pure controller's ([`flexgate_policies::control`]). The write side
//! ([`Driver`]) owns the controller, the ledger writer and the cluster backend; two things
//! drive it: submissions (HTTP, MQTT, OpenADR, each parsed by the grid side into one typed
//! [`Submission`]) and a control loop that wakes at the next event-book change, telemetry tick
//! or submission. Each decision is taken under a short lock that only queues its ledger
//! records; the flush and every cluster call happen after it. The read side ([`ReadSide`]) is
//! served from the snapshot published after each decision and from the ledger's records, and
//! holds nothing that can write.

mod control;
mod driver;
mod gateway;
pub mod metrics;
mod read_side;
pub(crate) use read_side::Published;
mod queue;
mod recovery;
mod role;
pub mod views;

pub use crate::clock::Clock;
pub use driver::{
    DeclareFailure, Driver, OperatorError, OperatorRefusal, Submission, SubmitError, SubmitOutcome, Transport, WireRef,
};
pub use gateway::{Gateway, StartError};
pub use read_side::{EventDelivery, ReadSide};
pub use role::{LeaderInfo, Role};
pub use views::{
    EventDetailView, EventView, ExpectedView, FlexibilityPointView, FlexibilityView, GuaranteeView, JobView,
    PlanEntryView, PlanView, ProbeView, ReplicaView, ReplicationView, StatusView,
};
