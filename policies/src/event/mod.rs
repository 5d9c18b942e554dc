//! Grid events: the normalized model, the acknowledgement decision, target conversion and the
//! event book. The wire documents (`dr.event/1`, `dr.ack/1`, OpenADR) are the transports'; they
//! map onto [`GridEvent`] and from [`Ack`].
//!
//! The flow inside the core is one direction (ARCHITECTURE.md): an adapter produces a
//! [`GridEvent`] (for HTTP and MQTT from a `dr.event/1` document); [`event_ceilings`] turns each of its
//! intervals into an absolute meter ceiling with the baseline recorded; [`EventBook::upsert`]
//! applies the revision rules and schedules the lifecycle; [`EventBook::effective_ceiling`] says
//! what the allocator must respect now and [`EventBook::next_wakeup`] when to ask again.
//!
//! All of it is pure and deterministic (time is an argument), so the runtime can replay the
//! ledger into an identical book and tests can run a day of events in milliseconds.

pub mod ack;
pub mod book;
pub mod delivery;
pub mod model;
pub mod target;

pub use ack::{Ack, MeterRangeKw, Participation};
pub use book::{
    BookEntry, CancelRecord, EffectiveCeiling, EventBook, Phase, Release, STEP_MAX_S, Transition, UpsertOutcome,
    randomize_offset_s,
};
pub use delivery::{IntervalDelivery, interval_delivery};
pub use model::{EventError, EventSource, GridEvent, Interval, Target, Window};
pub use target::{BaselineEstimate, CeilingTarget, LevelRule, PriceRule, SiteContext, event_ceilings, to_ceiling};
