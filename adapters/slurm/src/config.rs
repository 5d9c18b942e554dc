//! Configuration: where slurmrestd is and how to authenticate, where the Slurm commands are,
//! and which tiers may be suspended. Deserializes from the gateway's TOML (`[slurm]`):
//!
//! ```toml
//! [slurm]
//! suspendable_tiers = ["batch", "preemptible"]
//!
//! [slurm.rest]
//! url = "http://127.0.0.1:6820"          # or "unix:/run/slurmrestd/slurmrestd.sock"
//! user_name = "flexgate"
//! token = { file = "/etc/flexgate/slurm.jwt" }
//! # version = "v0.0.38"                  # pin instead of discovering
//!
//! [slurm.cli]
//! slurm_conf = "/etc/slurm/slurm.conf"
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::error::SlurmError;
use crate::model::ApiVersion;
use crate::token::TokenSource;

/// Everything [`crate::SlurmInventory`] needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SlurmConfig {
    /// slurmrestd; `None` reads jobs with `squeue --json` only.
    pub rest: Option<RestConfig>,
    /// The Slurm commands: `squeue` for the fallback, `scontrol` for suspend/resume (slurmrestd
    /// up to v0.0.41 has no suspend).
    pub cli: CliConfig,
    /// Read jobs with `squeue --json` when slurmrestd fails (default true). The snapshot says
    /// which source answered and why REST failed.
    pub cli_fallback: bool,
    /// Tiers whose jobs [`crate::SlurmInventory::suspend_job`] may suspend, lowercase. Empty
    /// (the default) suspends nothing: suspending is opt-in per tier.
    pub suspendable_tiers: Vec<String>,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        SlurmConfig {
            rest: None,
            cli: CliConfig::default(),
            cli_fallback: true,
            suspendable_tiers: Vec::new(),
        }
    }
}

/// How to reach slurmrestd.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestConfig {
    /// `http://host:port`, `https://host:port`, or `unix:/path/to/socket`.
    pub url: String,
    /// Sent as `X-SLURM-USER-NAME`; the user the token was made for.
    pub user_name: String,
    /// Sent as `X-SLURM-USER-TOKEN`.
    pub token: TokenSource,
    /// Use this API version (`v0.0.38`) instead of discovering it from `/openapi/v3`.
    #[serde(default)]
    pub version: Option<String>,
    /// Per-request timeout in milliseconds (default 10 000).
    #[serde(default = "default_rest_timeout_ms")]
    pub timeout_ms: u64,
    /// Largest response accepted, in bytes (default 256 MiB; a 22.05 job record is about
    /// 3.5 KB, so this is some 70 000 jobs).
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
}

impl RestConfig {
    /// A config for `url` with the defaults for everything optional.
    pub fn new(url: impl Into<String>, user_name: impl Into<String>, token: TokenSource) -> Self {
        RestConfig {
            url: url.into(),
            user_name: user_name.into(),
            token,
            version: None,
            timeout_ms: default_rest_timeout_ms(),
            max_body_bytes: default_max_body(),
        }
    }

    /// The pinned version, if any, checked.
    pub fn pinned_version(&self) -> Result<Option<ApiVersion>, SlurmError> {
        match &self.version {
            None => Ok(None),
            Some(v) => match ApiVersion::parse(v) {
                Some(parsed) if parsed.is_known() => Ok(Some(parsed)),
                _ => Err(SlurmError::Config(format!(
                    "rest.version {v:?} is not one of v0.0.38, v0.0.39, v0.0.40, v0.0.41"
                ))),
            },
        }
    }

    /// The timeout as a [`Duration`].
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }
}

/// Where the Slurm commands are and how to run them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CliConfig {
    /// `squeue` (default: found on `PATH`).
    pub squeue: PathBuf,
    /// `scontrol` (default: found on `PATH`).
    pub scontrol: PathBuf,
    /// Passed as `SLURM_CONF` to the commands; unset keeps the environment's (or
    /// `/etc/slurm/slurm.conf`).
    pub slurm_conf: Option<PathBuf>,
    /// Per-command timeout in milliseconds (default 30 000); the command is killed after it.
    pub timeout_ms: u64,
    /// Largest output accepted, in bytes (default 256 MiB).
    pub max_output_bytes: usize,
}

impl Default for CliConfig {
    fn default() -> Self {
        CliConfig {
            squeue: PathBuf::from("squeue"),
            scontrol: PathBuf::from("scontrol"),
            slurm_conf: None,
            timeout_ms: 30_000,
            max_output_bytes: default_max_body(),
        }
    }
}

impl CliConfig {
    /// The timeout as a [`Duration`].
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.max(1))
    }
}

fn default_rest_timeout_ms() -> u64 {
    10_000
}

fn default_max_body() -> usize {
    256 * 1024 * 1024
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_json_with_defaults() {
        let c: SlurmConfig = serde_json::from_value(serde_json::json!({
            "rest": {"url": "unix:/run/s.sock", "user_name": "fg", "token": {"file": "/etc/t"}},
            "suspendable_tiers": ["batch"]
        }))
        .expect("parses");
        let rest = c.rest.expect("rest");
        assert_eq!(rest.timeout(), Duration::from_secs(10));
        assert_eq!(rest.token, TokenSource::File("/etc/t".into()));
        assert!(c.cli_fallback);
        assert_eq!(c.cli.squeue, PathBuf::from("squeue"));
        let bad: Result<SlurmConfig, _> = serde_json::from_value(serde_json::json!({"rset": {}}));
        assert!(bad.is_err(), "unknown keys are refused");
    }

    #[test]
    fn pinned_versions() {
        let mut r = RestConfig::new("http://x", "u", TokenSource::Value("t".into()));
        assert_eq!(r.pinned_version().expect("none"), None);
        r.version = Some("v0.0.40".into());
        assert_eq!(r.pinned_version().expect("ok"), Some(ApiVersion(40)));
        r.version = Some("v0.0.99".into());
        assert!(r.pinned_version().is_err());
    }
}
