//! The fleet lab: the paper's allocation experiment and its extensions (the curve zoo, a season
//! of events with learning, the knowledge bound), what `flexgate simulate` runs.
//!
//! It stands beside the decision core (`flexgate-policies`), not in it: the gateway plans with
//! the core alone, and the lab plans with the very same policies on synthetic fleets whose true
//! curves it knows, so that every claim about the policies is measured against the truth. Like
//! the core it is pure (no I/O, no async); it is the one crate of the two that starts threads
//! (`run_experiment` plans independent workloads on std's scoped threads).

pub mod experiment;
pub mod file;
pub mod forecast_backtest;
pub mod groups;
pub mod knowledge_bound;
pub mod rng;
pub mod season;
pub mod truth;
pub mod zoo;

pub use experiment::{
    ExperimentConfig, ExperimentReport, KnowledgeLevel, Mix, TierMix, run_experiment, run_experiment_on,
};
pub use file::parse_fleet;
pub use groups::published_groups;
pub use season::{SeasonConfig, SeasonReport, run_season};
pub use truth::{JobTemplate, TruthFamily, synthetic_templates};
