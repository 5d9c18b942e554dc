//! The report side: what auditors and energy managers read, rebuilt from the ledger alone.
//!
//! - [`audit`]: the per-event audit (what was asked, decided, done and measured);
//! - [`plot`]: SVG charts for the audit and the fleet experiment, drawn by the leaf crate
//!   `flexgate-plot` (`libs/plot`), re-exported here so that `flexgate::reports::plot` keeps
//!   naming them for code written against the old module.

pub mod audit;
pub mod baseline;
pub mod settlement;
pub use flexgate_plot as plot;
