//! The report side: what auditors and energy managers read, rebuilt from the ledger alone.
//!
//! - [`audit`]: the per-event audit (what was asked, decided, done and measured);
//! - [`plot`]: SVG charts for the audit and the fleet experiment.

pub mod audit;
pub mod baseline;
pub mod plot;
