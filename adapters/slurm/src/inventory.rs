//! What the gateway calls: the jobs that hold GPUs, and suspend/resume.
//!
//! Reading prefers slurmrestd (one HTTP request, no fork, works from another host) and falls
//! back to `squeue --json` on the gateway host when REST is not configured or fails. The
//! snapshot says which source answered and why REST failed, so a broken token is visible even
//! while the fallback hides it from the data path.

use tracing::warn;

use crate::cli::Cli;
use crate::config::SlurmConfig;
use crate::error::SlurmError;
use crate::model::{JobSnapshot, SlurmJob};
use crate::rest::RestClient;

/// The gateway's handle on Slurm.
#[derive(Debug)]
pub struct SlurmInventory {
    rest: Option<RestClient>,
    cli: Cli,
    cli_fallback: bool,
    suspendable_tiers: Vec<String>,
}

impl SlurmInventory {
    /// Checks the configuration and builds the HTTP client; contacts nothing.
    pub fn new(config: SlurmConfig) -> Result<SlurmInventory, SlurmError> {
        let rest = config.rest.as_ref().map(RestClient::new).transpose()?;
        Ok(SlurmInventory {
            rest,
            cli: Cli::new(config.cli),
            cli_fallback: config.cli_fallback,
            suspendable_tiers: config
                .suspendable_tiers
                .iter()
                .map(|t| t.trim().to_ascii_lowercase())
                .collect(),
        })
    }

    /// The REST client, when configured.
    pub fn rest(&self) -> Option<&RestClient> {
        self.rest.as_ref()
    }

    /// The command runner.
    pub fn cli(&self) -> &Cli {
        &self.cli
    }

    /// Jobs that hold an allocation: RUNNING, and SUSPENDED (their GPUs stay allocated, and
    /// the gateway may have to resume them). Each job's per-node GPU indices, flex tags and
    /// record warnings are filled in; see [`SlurmJob`].
    pub async fn running_jobs(&self) -> Result<JobSnapshot, SlurmError> {
        let mut snapshot = self.all_jobs().await?;
        snapshot.jobs.retain(SlurmJob::holds_allocation);
        Ok(snapshot)
    }

    /// Every job Slurm reports, in any state.
    pub async fn all_jobs(&self) -> Result<JobSnapshot, SlurmError> {
        let Some(rest) = &self.rest else {
            return self.cli.jobs().await;
        };
        let rest_error = match rest.jobs().await {
            Ok(snapshot) => return Ok(snapshot),
            Err(e) => e,
        };
        if !self.cli_fallback {
            return Err(rest_error);
        }
        warn!(error = %rest_error, "slurmrestd failed; reading jobs with squeue --json");
        match self.cli.jobs().await {
            Ok(mut snapshot) => {
                let mut why = rest_error.to_string();
                if let SlurmError::AuthRefused { status: 500, .. } = rest_error {
                    why.push_str("; squeue reached slurmctld, so slurmctld is up: the token is what was refused");
                }
                snapshot.rest_error = Some(why);
                Ok(snapshot)
            }
            Err(cli_error) => Err(SlurmError::BothFailed {
                rest: Box::new(rest_error),
                cli: Box::new(cli_error),
            }),
        }
    }

    /// Suspends a job (`scontrol suspend`), whatever its tier. Prefer
    /// [`SlurmInventory::suspend_job`], which checks the tier.
    pub async fn suspend(&self, job_id: u32) -> Result<(), SlurmError> {
        self.cli.suspend(job_id).await
    }

    /// Resumes a suspended job (`scontrol resume`).
    pub async fn resume(&self, job_id: u32) -> Result<(), SlurmError> {
        self.cli.resume(job_id).await
    }

    /// True when the job's tier is in `suspendable_tiers`. Untagged jobs are never
    /// suspendable.
    pub fn may_suspend(&self, job: &SlurmJob) -> bool {
        job.flex
            .tier
            .as_ref()
            .is_some_and(|t| self.suspendable_tiers.iter().any(|s| s == t))
    }

    /// Suspends `job` if its tier allows it; [`SlurmError::NotSuspendable`] otherwise.
    pub async fn suspend_job(&self, job: &SlurmJob) -> Result<(), SlurmError> {
        if !self.may_suspend(job) {
            return Err(SlurmError::NotSuspendable {
                job_id: job.id,
                tier: job.flex.tier.clone(),
                allowed: self.suspendable_tiers.clone(),
            });
        }
        self.suspend(job.id).await
    }
}
