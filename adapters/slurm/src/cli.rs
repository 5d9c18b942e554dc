//! The Slurm commands: `squeue --json` when slurmrestd is not configured or fails, and
//! `scontrol suspend|resume` (slurmrestd up to v0.0.41 has no suspend endpoint).
//!
//! Commands run with `tokio::process`, `SLURM_CONF` from the config, `LC_ALL=C` (stable
//! messages), stdin closed, a timeout after which the child is killed, and a cap on the output
//! read. On Slurm 22.05 `squeue --json` ignores filters such as `-j` or `-t` (fixed in 24.05),
//! so the whole queue is read and filtered here.

use std::process::Stdio;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use crate::config::CliConfig;
use crate::error::SlurmError;
use crate::gres::truncate;
use crate::model::{JobSnapshot, Source};
use crate::rest::excerpt;
use crate::wire::parse_jobs;

/// Runs the Slurm commands named in a [`CliConfig`].
#[derive(Debug, Clone)]
pub struct Cli {
    config: CliConfig,
}

/// What a finished command printed.
#[derive(Debug, Clone)]
pub struct CommandOutput {
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error, lossily decoded.
    pub stderr: String,
}

impl Cli {
    /// Wraps the configuration; nothing is run yet.
    pub fn new(config: CliConfig) -> Cli {
        Cli { config }
    }

    /// The configuration in use.
    pub fn config(&self) -> &CliConfig {
        &self.config
    }

    /// Every job in the queue (all states), from `squeue --json`.
    pub async fn jobs(&self) -> Result<JobSnapshot, SlurmError> {
        let program = self.config.squeue.clone();
        let out = self.run(&program, &["--json"]).await?;
        let what = format!("{} --json", program.display());
        let parsed = parse_jobs(&out.stdout).map_err(|e| SlurmError::NotJson {
            what: what.clone(),
            reason: e.to_string(),
            excerpt: excerpt(&out.stdout),
        })?;
        if !parsed.had_jobs {
            if !parsed.errors.is_empty() {
                return Err(SlurmError::Command {
                    command: what,
                    status: "exit status 0".into(),
                    stderr: parsed
                        .errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                });
            }
            return Err(SlurmError::NotJson {
                what,
                reason: "the object has no \"jobs\" list".into(),
                excerpt: excerpt(&out.stdout),
            });
        }
        Ok(parsed.into_snapshot(Source::Cli))
    }

    /// `scontrol suspend JOBID`: stops the job's processes (SIGSTOP); its GPUs stay allocated.
    /// Needs an operator or root.
    pub async fn suspend(&self, job_id: u32) -> Result<(), SlurmError> {
        let program = self.config.scontrol.clone();
        self.run(&program, &["suspend", &job_id.to_string()]).await.map(|_| ())
    }

    /// `scontrol resume JOBID`.
    pub async fn resume(&self, job_id: u32) -> Result<(), SlurmError> {
        let program = self.config.scontrol.clone();
        self.run(&program, &["resume", &job_id.to_string()]).await.map(|_| ())
    }

    /// Runs `program args`, failing on spawn errors, a non-zero exit, the timeout, or output
    /// over the limit.
    pub async fn run(&self, program: &std::path::Path, args: &[&str]) -> Result<CommandOutput, SlurmError> {
        let command_line = std::iter::once(program.display().to_string())
            .chain(args.iter().map(|a| a.to_string()))
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(conf) = &self.config.slurm_conf {
            cmd.env("SLURM_CONF", conf);
        }
        // ETXTBSY: the binary is being replaced (a package upgrade), or another thread's fork
        // still holds a write handle to a script just written; it clears within milliseconds.
        let mut spawned = cmd.spawn();
        for _ in 0..5 {
            match &spawned {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                    spawned = cmd.spawn();
                }
                _ => break,
            }
        }
        let mut child = spawned.map_err(|e| SlurmError::Spawn {
            program: program.display().to_string(),
            reason: e.to_string(),
        })?;
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(SlurmError::Spawn {
                program: program.display().to_string(),
                reason: "no pipes to the child".into(),
            });
        };
        let limit = self.config.max_output_bytes;
        let work = async {
            let (out, err, status) =
                tokio::join!(read_capped(stdout, limit), read_capped(stderr, 64 * 1024), child.wait());
            (out, err, status)
        };
        let (out, err, status) = match tokio::time::timeout(self.config.timeout(), work).await {
            Ok(done) => done,
            Err(_) => {
                // kill_on_drop also reaps it; kill now so the timeout means the command is gone.
                let _ = child.start_kill();
                let _ = child.wait().await;
                return Err(SlurmError::Timeout {
                    what: command_line,
                    seconds: self.config.timeout().as_secs_f64(),
                });
            }
        };
        let status = status.map_err(|e| SlurmError::Spawn {
            program: program.display().to_string(),
            reason: format!("waiting for it: {e}"),
        })?;
        let err = err.map(|(bytes, _)| String::from_utf8_lossy(&bytes).trim().to_string());
        let (stdout, overflow) = out.map_err(|e| SlurmError::Spawn {
            program: program.display().to_string(),
            reason: format!("reading its output: {e}"),
        })?;
        if overflow {
            return Err(SlurmError::TooLarge {
                what: command_line,
                limit,
            });
        }
        let stderr = err.unwrap_or_default();
        if !status.success() {
            let shown = if stderr.is_empty() {
                String::from_utf8_lossy(&stdout).trim().to_string()
            } else {
                stderr.clone()
            };
            return Err(SlurmError::Command {
                command: command_line,
                status: status.to_string(),
                stderr: truncate(&shown, 1000),
            });
        }
        Ok(CommandOutput { stdout, stderr })
    }
}

/// Reads up to `limit` bytes; the flag says more was there (the rest is drained so the child
/// does not block on a full pipe).
async fn read_capped(mut r: impl AsyncRead + Unpin, limit: usize) -> std::io::Result<(Vec<u8>, bool)> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut overflow = false;
    loop {
        let n = r.read(&mut chunk).await?;
        if n == 0 {
            return Ok((buf, overflow));
        }
        if buf.len() + n > limit {
            overflow = true;
        } else {
            buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    fn cli(timeout_ms: u64, max: usize) -> Cli {
        Cli::new(CliConfig {
            timeout_ms,
            max_output_bytes: max,
            ..CliConfig::default()
        })
    }

    #[tokio::test]
    async fn captures_output_and_env() {
        let mut c = cli(5000, 1024);
        c.config.slurm_conf = Some(PathBuf::from("/x/slurm.conf"));
        let out = c
            .run(Path::new("sh"), &["-c", "echo $SLURM_CONF $LC_ALL; echo oops >&2"])
            .await
            .expect("runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "/x/slurm.conf C");
        assert_eq!(out.stderr, "oops");
    }

    #[tokio::test]
    async fn failures_are_reported() {
        let c = cli(5000, 1024);
        let e = c
            .run(
                Path::new("sh"),
                &["-c", "echo 'scontrol: error: Invalid job id specified' >&2; exit 1"],
            )
            .await
            .expect_err("fails");
        let text = e.to_string();
        assert!(
            text.contains("Invalid job id specified") && text.contains("exit status: 1"),
            "{text}"
        );

        let e = c
            .run(Path::new("/nonexistent/scontrol"), &[])
            .await
            .expect_err("missing");
        assert!(matches!(e, SlurmError::Spawn { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent/scontrol"));
    }

    #[tokio::test]
    async fn timeout_kills() {
        let c = cli(200, 1024);
        let t0 = std::time::Instant::now();
        let e = c.run(Path::new("sleep"), &["30"]).await.expect_err("times out");
        assert!(matches!(e, SlurmError::Timeout { .. }), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(5));
    }

    #[tokio::test]
    async fn output_cap() {
        let c = cli(5000, 100);
        let e = c
            .run(Path::new("sh"), &["-c", "head -c 100000 /dev/zero"])
            .await
            .expect_err("too big");
        assert!(matches!(e, SlurmError::TooLarge { limit: 100, .. }), "{e}");
    }

    #[tokio::test]
    async fn squeue_output_that_is_not_json() {
        let dir = tempfile::tempdir().expect("tmp");
        let fake = dir.path().join("squeue");
        std::fs::write(&fake, "#!/bin/sh\necho 'squeue: error: unrecognized option --json'\n").expect("write");
        make_executable(&fake);
        let c = Cli::new(CliConfig {
            squeue: fake,
            ..CliConfig::default()
        });
        let e = c.jobs().await.expect_err("not json");
        assert!(matches!(e, SlurmError::NotJson { .. }), "{e}");
        assert!(e.to_string().contains("unrecognized option"), "{e}");
    }

    pub(crate) fn make_executable(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        let mut p = std::fs::metadata(path).expect("meta").permissions();
        p.set_mode(0o755);
        std::fs::set_permissions(path, p).expect("chmod");
    }
}
