//! Everything that can go wrong talking to Slurm, worded for the operator who has to fix it.

use crate::wire::SlurmMessage;

/// The message every refused-token error starts with: the two usual causes, named.
pub const AUTH_REFUSED_HINT: &str =
    "slurmrestd refused the token (is slurmrestd started with SLURM_JWT=daemon? is the token expired?)";

/// An error from slurmrestd, a Slurm command, or the configuration.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// slurmrestd answered 401/403, or (Slurm 22.05) a 500 whose only errors are the
    /// "Unspecified error" slurmctld returns for a token it rejects.
    #[error("{AUTH_REFUSED_HINT}: {url} answered HTTP {status}: {detail}")]
    AuthRefused {
        /// Request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Body or Slurm errors, shortened.
        detail: String,
    },
    /// The configured JWT's `exp` claim is in the past; no request was sent.
    #[error(
        "the slurmrestd token expired at {expired_at}; make a new one with `scontrol token username=USER lifespan=SECONDS`"
    )]
    TokenExpired {
        /// Expiry time, RFC 3339.
        expired_at: String,
    },
    /// The token could not be loaded or is malformed.
    #[error("slurmrestd token: {reason}")]
    Token {
        /// What is wrong.
        reason: String,
    },
    /// No TCP or unix-socket connection to slurmrestd.
    #[error("cannot connect to slurmrestd at {url}: {reason} (is slurmrestd running and listening there?)")]
    Connect {
        /// Request URL (and socket path, for unix sockets).
        url: String,
        /// The transport's error chain.
        reason: String,
    },
    /// A request or command did not finish in time.
    #[error("{what} did not answer within {seconds} s")]
    Timeout {
        /// The request URL or command line.
        what: String,
        /// The limit.
        seconds: f64,
    },
    /// Any other transport failure (reset connection, bad HTTP).
    #[error("request to {url} failed: {reason}")]
    Transport {
        /// Request URL.
        url: String,
        /// The transport's error chain.
        reason: String,
    },
    /// slurmrestd answered with an error status and Slurm error entries.
    #[error("{url} answered HTTP {status}: {}", join(.errors))]
    Slurm {
        /// Request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Slurm's `errors` list.
        errors: Vec<SlurmMessage>,
    },
    /// An error status without a usable Slurm error list.
    #[error("{url} answered HTTP {status}: {body}")]
    Http {
        /// Request URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// Start of the body.
        body: String,
    },
    /// A body that is not the JSON expected.
    #[error("{what} did not return a JSON job list ({reason}); it starts with {excerpt:?}")]
    NotJson {
        /// Request URL or command.
        what: String,
        /// The parser's complaint.
        reason: String,
        /// Start of the body.
        excerpt: String,
    },
    /// A response or command output larger than the configured limit.
    #[error(
        "{what} returned more than {limit} bytes (raise max_body_bytes / max_output_bytes if the cluster is that large)"
    )]
    TooLarge {
        /// Request URL or command.
        what: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// slurmrestd offers no OpenAPI version this crate reads.
    #[error("slurmrestd at {url} offers no known API version (offered: {}; known: v0.0.38 to v0.0.41); start it with -s openapi/v0.0.38 or set rest.version", if .offered.is_empty() { "none".to_string() } else { .offered.join(", ") })]
    NoKnownVersion {
        /// Base URL.
        url: String,
        /// Versions seen in `/openapi/v3`.
        offered: Vec<String>,
    },
    /// A Slurm command could not be started.
    #[error("cannot run {program}: {reason} (is slurm-client installed, and the path in the config right?)")]
    Spawn {
        /// The program path.
        program: String,
        /// The OS error.
        reason: String,
    },
    /// A Slurm command exited with an error.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status, as text.
        status: String,
        /// Its standard error (shortened), or standard output when stderr was empty.
        stderr: String,
    },
    /// slurmrestd failed and so did the CLI fallback.
    #[error("slurmrestd failed: {rest}; the squeue fallback failed too: {cli}")]
    BothFailed {
        /// The REST error.
        rest: Box<SlurmError>,
        /// The CLI error.
        cli: Box<SlurmError>,
    },
    /// A job's tier does not allow suspension.
    #[error("job {job_id} has tier {tier:?}, which is not in suspendable_tiers {allowed:?}; not suspending it")]
    NotSuspendable {
        /// Job id.
        job_id: u32,
        /// The job's tier (`None`: untagged).
        tier: Option<String>,
        /// The configured suspendable tiers.
        allowed: Vec<String>,
    },
    /// A configuration value that cannot work.
    #[error("slurm configuration: {0}")]
    Config(String),
}

fn join(errors: &[SlurmMessage]) -> String {
    if errors.is_empty() {
        return "(no error details)".into();
    }
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

impl SlurmError {
    /// True for errors that a new token fixes (refused or expired token, unreadable token).
    pub fn is_auth(&self) -> bool {
        matches!(
            self,
            SlurmError::AuthRefused { .. } | SlurmError::TokenExpired { .. } | SlurmError::Token { .. }
        )
    }
}
