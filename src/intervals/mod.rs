//! The site meter as interval data: the store beside the ledger (`store.rs`), what imports
//! turn into intervals, and what settlement reads. The decisions on intervals (how samples
//! become an interval, what a series is, the program baselines) are pure code in
//! `flexgate_policies::intervals` and `flexgate_policies::baseline`.

pub mod import;
mod store;

pub use store::{
    COMPACT_INTERVAL_S, Comparison, Curtailment, Disagreement, EventSummary, GATEWAY_INTERVAL_S, ImportSummary,
    IntervalStore, KEEP_5MIN_DAYS, StoreError,
};

#[cfg(test)]
mod tests;
