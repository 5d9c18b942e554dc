//! The fleet simulator: the paper's allocation experiment and its extensions.

pub mod experiment;
pub mod file;
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
