//! Settlement: what the programs the site is enrolled in will pay it, computed as they compute
//! it, from the utility's interval data. `config.rs` is `[settlement]`.

pub mod config;

pub use config::{ProgramConfig, SettlementConfig};
