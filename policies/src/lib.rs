//! The pure decision core of flexgate.
//!
//! Everything here is deterministic and free of I/O and async, so it can be property-tested and
//! benchmarked in isolation and replayed exactly from the ledger: units, power–throughput curves,
//! the Power Flexibility Index (PFI), the telemetry predictor of PFI, the facility model that
//! turns meter targets into GPU-board budgets, and the allocation policies. The fleet
//! simulator that compares them (the paper's experiment, the curve zoo, the season) is the
//! `flexgate-lab` crate beside this one: the gateway's decisions do not carry it.
#![forbid(unsafe_code)]

pub mod alloc;
pub mod baseline;
pub mod control;
pub mod curve;
pub mod estimate;
pub mod event;
pub mod facility;
pub mod forecast;
pub mod ids;
pub mod intervals;
pub mod meter;
pub mod pfi;
pub mod physics;
pub mod predictor;
pub mod units;
