//! Grid events: the normalized model, the `dr.event/1` codec, target conversion and the event
//! book.
//!
//! The flow inside the core is one direction (ARCHITECTURE.md): an adapter produces a
//! [`GridEvent`] (for HTTP and MQTT via [`parse_dr_event`]); [`event_ceilings`] turns each of its
//! intervals into an absolute meter ceiling with the baseline recorded; [`EventBook::upsert`]
//! applies the revision rules and schedules the lifecycle; [`EventBook::effective_ceiling`] says
//! what the allocator must respect now and [`EventBook::next_wakeup`] when to ask again.
//!
//! All of it is pure and deterministic (time is an argument), so the runtime can replay the
//! ledger into an identical book and tests can run a day of events in milliseconds.

pub mod book;
pub mod delivery;
pub mod dr_event;
pub mod model;
pub mod target;

pub use book::{
    BookEntry, CancelRecord, EffectiveCeiling, EventBook, Phase, Release, STEP_MAX_S, Transition, UpsertOutcome,
    randomize_offset_s,
};
pub use delivery::{IntervalDelivery, interval_delivery};
pub use dr_event::{
    DR_ACK_SCHEMA, DR_EVENT_JSON_SCHEMA, DR_EVENT_SCHEMA, DrAck, KwRange, MAX_DEPTH, MAX_DOCUMENT_BYTES, Opt,
    parse_dr_event, to_dr_event_json,
};
pub use model::{EventError, EventSource, GridEvent, Interval, Target, Window};
pub use target::{BaselineEstimate, CeilingTarget, LevelRule, PriceRule, SiteContext, event_ceilings, to_ceiling};
