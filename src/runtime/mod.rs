//! The running gateway: events in, caps out, everything recorded.
//!
//! One [`Gateway`] owns the event book, the ledger handle, the cluster backend and the plan in
//! force. Two things drive it: submissions (HTTP today, MQTT and OpenADR later) and a control
//! loop that wakes at the next event-book change or telemetry tick. Both end in the same step:
//! meter ceiling → GPU budget (facility model) → plan (configured policy) → diff against the caps
//! in force → dispatch → confirmations, each recorded in the ledger before it is acted on.

pub mod clock;
mod control;
mod gateway;
mod recovery;
mod views;

pub use clock::Clock;
pub use gateway::{EventDelivery, Gateway, OperatorError, StartError, SubmitError, SubmitOutcome, Transport};
pub use views::{EventView, JobView, PlanView, StatusView};
