//! The flexgate application: everything between the command line and the decision core.
//!
//! A library as well as a binary so that end-to-end tests (and later the gateway runtime's
//! tests) can drive the application in-process. It wires the pure `flexgate-policies` crate to
//! files, terminals and charts; it holds no allocation math and no protocol parsing.
#![forbid(unsafe_code)]

// Grid side (utilities in), cluster side (GPUs out), reports (auditors), and the driver of the
// decision core between them; ARCHITECTURE.md has the map. `clock` is a leaf every side reads
// time through, so that none of them imports the driver for it.
pub mod clock;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod grid;
pub mod ha;
pub mod http_client;
pub mod intervals;
pub mod ledger;
pub mod meter;
pub mod reports;
pub mod runtime;
pub mod serve;
pub mod settlement;
