//! Slurm job → node → GPU inventory for flexgate.
//!
//! A demand-response event arrives mid-job, so the gateway needs to know, at that moment,
//! which jobs run where and on which GPUs, how flexible each one says it is, and how to pause
//! the ones whose tier allows it. Slurm has no per-job power capping (its one power plugin,
//! power/cray_aries, capped whole Cray XC nodes and was removed in Slurm 24.05); the node agent
//! caps GPUs, and this crate supplies the map from jobs to those GPUs.
//!
//! ```no_run
//! # async fn demo() -> Result<(), flexgate_slurm::SlurmError> {
//! use flexgate_slurm::{RestConfig, SlurmConfig, SlurmInventory, TokenSource, parse_gres_conf};
//!
//! let inventory = SlurmInventory::new(SlurmConfig {
//!     rest: Some(RestConfig::new("http://127.0.0.1:6820", "flexgate",
//!                                TokenSource::File("/etc/flexgate/slurm.jwt".into()))),
//!     suspendable_tiers: vec!["batch".into()],
//!     ..SlurmConfig::default()
//! })?;
//! let gres = parse_gres_conf(&std::fs::read_to_string("/etc/slurm/gres.conf").unwrap_or_default())
//!     .unwrap_or_default();
//! let snapshot = inventory.running_jobs().await?;          // REST, else squeue --json
//! for job in &snapshot.jobs {
//!     let (gpus, _stale) = gres.job_gpus(job);            // (node, IDX) → device minor
//!     println!("{} {:?} {:?} on {:?}", job.id, job.state, job.flex, gpus);
//!     if inventory.may_suspend(job) { /* inventory.suspend_job(job).await? */ }
//! }
//! # Ok(()) }
//! ```
//!
//! Modules, one job each:
//! - [`model`]: [`SlurmJob`], [`NodeGpus`], [`JobState`], [`JobSnapshot`].
//! - [`gres`]: `gres_detail` strings (`gpu:h100:3(IDX:2-4)`).
//! - [`request`]: the GPUs a job asked for (its TRES request), for the jobs still pending.
//! - [`tags`]: the `flexgate:tier=…,pfi=…,max_slowdown=…` comment format.
//! - [`wire`]: tolerant JSON reading for every slurmrestd version from v0.0.38 to v0.0.41, and
//!   `squeue --json`.
//! - [`rest`]: slurmrestd client (JWT, version discovery, clear auth errors).
//! - [`cli`]: `squeue --json` and `scontrol suspend/resume` with timeouts.
//! - [`gres_conf`]: gres.conf → GRES index to device minor (what the agent reports).
//! - [`token`]: JWT sources and the local expiry check.
//! - [`hostlist`]: `node[01-04]` expressions.
//! - [`config`], [`error`], [`inventory`].
//!
//! Tested against a real single-node Slurm 22.05 (`tests/peers/slurm.sh`, test
//! `tests/real_slurm.rs`) and recorded fixtures for the other versions and multi-node jobs.

pub mod cli;
pub mod config;
pub mod error;
pub mod gres;
pub mod gres_conf;
pub mod hostlist;
pub mod inventory;
pub mod model;
pub mod request;
pub mod rest;
pub mod tags;
pub mod token;
pub mod wire;

pub use config::{CliConfig, RestConfig, SlurmConfig};
pub use error::SlurmError;
pub use gres::{GpuDetail, GresError, parse_gpu_detail};
pub use gres_conf::{GresConf, GresConfError, JobGpu, MinorSource, parse_gres_conf};
pub use inventory::SlurmInventory;
pub use model::{ApiVersion, FlexTags, JobSnapshot, JobState, NodeGpus, SlurmJob, Source};
pub use tags::{ParsedTags, job_flex_tags, parse_flex_tags};
pub use token::TokenSource;
pub use wire::{SlurmMessage, read_job_list};
