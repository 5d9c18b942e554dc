//! A real single-node Slurm (node `localhost`, 8 fake GPUs) through `tests/peers/slurm.sh`, for
//! integration tests: started in a scratch directory, always stopped on drop.
//!
//! Only one such Slurm can run on a machine at a time; while another test process holds it,
//! `slurm.sh start` fails naming the owner, and [`Slurm::start`] retries for up to 3 minutes
//! (every 5 s) before failing with what the script said. A missing Slurm fails at once with
//! the command that installs it: these tests never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/slurm.sh");
const INSTALL_HINT: &str = "install it as root with: bash tests/peers/setup.sh --only slurm";

/// How long to wait for another test's Slurm to be stopped.
const BUSY_WAIT: Duration = Duration::from_secs(180);

/// A running Slurm; stopped (jobs cancelled, daemons stopped) when dropped.
pub struct Slurm {
    base: PathBuf,
    _dir: tempfile::TempDir,
}

fn script(args: &[&str]) -> Output {
    Command::new("bash")
        .arg(SCRIPT)
        .args(args)
        // The owner recorded by slurm.sh: this test process, so that a Slurm left behind by a
        // killed test is recognised as a leftover by the next start.
        .env("FLEXGATE_SLURM_OWNER", std::process::id().to_string())
        .output()
        .unwrap_or_else(|e| panic!("cannot run bash {SCRIPT}: {e}"))
}

/// stdout and stderr of a command, for messages.
pub fn show(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

impl Slurm {
    /// Starts Slurm, waiting (up to 3 minutes) for another test's Slurm to go away.
    pub fn start() -> Slurm {
        let check = script(&["check"]);
        assert!(
            check.status.success(),
            "Slurm is needed for this test and is not installed: {INSTALL_HINT}\n{}",
            show(&check)
        );
        let dir = tempfile::Builder::new()
            .prefix("flexgate-cluster-slurm-")
            .tempdir_in("/tmp")
            .expect("Slurm scratch dir");
        let slurm = Slurm {
            base: dir.path().to_path_buf(),
            _dir: dir,
        };
        let base = slurm.base.to_string_lossy().to_string();
        let t0 = Instant::now();
        loop {
            let out = script(&["start", &base]);
            if out.status.success() {
                eprintln!(
                    "slurm.sh start ({:.1} s): {}",
                    t0.elapsed().as_secs_f64(),
                    show(&out).trim()
                );
                return slurm;
            }
            let said = show(&out);
            let busy = said.contains("is in use by pid") || said.contains("Only one single-node Slurm");
            assert!(
                busy && t0.elapsed() < BUSY_WAIT,
                "slurm.sh start {base} failed{}:\n{said}",
                if busy {
                    format!(
                        ": another Slurm stayed in use for {} s (only one can run at a time)",
                        BUSY_WAIT.as_secs()
                    )
                } else {
                    String::new()
                }
            );
            eprintln!(
                "slurm.sh start: another Slurm is in use; retrying in 5 s: {}",
                said.trim()
            );
            std::thread::sleep(Duration::from_secs(5));
        }
    }

    /// The scratch directory (`slurm.conf`, `gres.conf`, `token.env`, `rest.port`, `log/`).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// `BASE/slurm.conf`.
    pub fn conf(&self) -> PathBuf {
        self.base.join("slurm.conf")
    }

    /// `BASE/gres.conf` (`File=BASE/fakegpu/nvidia[0-7]`: GRES index i is device minor i).
    pub fn gres_conf(&self) -> PathBuf {
        self.base.join("gres.conf")
    }

    /// `BASE/token.env` (`SLURM_JWT=…`, readable by flexgate-slurm's `{ file = … }`).
    pub fn token_file(&self) -> PathBuf {
        self.base.join("token.env")
    }

    /// `http://127.0.0.1:PORT` of slurmrestd (JWT).
    pub fn rest_url(&self) -> String {
        let port = std::fs::read_to_string(self.base.join("rest.port")).expect("BASE/rest.port");
        format!("http://127.0.0.1:{}", port.trim())
    }

    /// flexgate-slurm's `SlurmConfig` as JSON: slurmrestd with the JWT, `squeue` as fallback.
    pub fn inventory_json(&self) -> serde_json::Value {
        serde_json::json!({
            "rest": {"url": self.rest_url(), "user_name": "slurmrest", "token": {"file": self.token_file()}},
            "cli": {"slurm_conf": self.conf()},
            "cli_fallback": true,
        })
    }

    fn command(&self, program: &str, args: &[&str]) -> Output {
        Command::new(program)
            .env("SLURM_CONF", self.conf())
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {program}: {e}"))
    }

    /// `sbatch --parsable ARGS`; the job id.
    pub fn sbatch(&self, args: &[&str]) -> u32 {
        let mut all = vec!["--parsable", "--chdir=/tmp", "-o", "/dev/null"];
        all.extend_from_slice(args);
        let out = self.command("sbatch", &all);
        assert!(out.status.success(), "sbatch {args:?}: {}", show(&out));
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .split(';')
            .next()
            .and_then(|id| id.parse().ok())
            .unwrap_or_else(|| panic!("sbatch printed {text:?}"))
    }

    /// `scancel ID`.
    pub fn scancel(&self, id: u32) {
        let out = self.command("scancel", &[&id.to_string()]);
        assert!(out.status.success(), "scancel {id}: {}", show(&out));
    }

    /// Job id → state (`RUNNING`, `PENDING`, …) from `squeue`.
    pub fn states(&self) -> Vec<(u32, String)> {
        let out = self.command("squeue", &["-h", "-o", "%i %T"]);
        assert!(out.status.success(), "squeue: {}", show(&out));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let (id, state) = l.trim().split_once(' ')?;
                Some((id.parse().ok()?, state.to_string()))
            })
            .collect()
    }

    /// Polls `squeue` until every job in `ids` is RUNNING (30 s at most).
    pub fn wait_running(&self, ids: &[u32]) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let states = self.states();
            if ids
                .iter()
                .all(|id| states.iter().any(|(j, s)| j == id && s == "RUNNING"))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "jobs {ids:?} not RUNNING within 30 s; squeue: {states:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let t0 = Instant::now();
        let out = script(&["stop", &self.base.to_string_lossy()]);
        eprintln!(
            "slurm.sh stop ({:.1} s): {}",
            t0.elapsed().as_secs_f64(),
            show(&out).trim()
        );
    }
}
