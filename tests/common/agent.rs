//! The real `flexgate-agent` binary with simulated GPUs, on 127.0.0.1, for integration tests
//! of the gateway's agents backend: built on demand, started on a free port, read over its
//! HTTP API, SIGKILLed on request and on drop.
//!
//! The root crate's tests get no `CARGO_BIN_EXE_flexgate-agent` (the agent is another package),
//! so [`binary`] runs `cargo build -p flexgate-agent --bin flexgate-agent` (quick when up to
//! date) and takes the binary from the directory of `flexgate`'s own binary.

use flexgate_agent::api::GpuStatus;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The agents' control token in these tests.
pub const TOKEN: &str = "cluster-test-agent-token-0123456789";
/// A read-only token (GET only; changes answer 403).
pub const READ_TOKEN: &str = "cluster-test-read-only-token-0123";

/// Builds the agent binary once per test process and returns its path.
pub fn binary() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let gateway = Path::new(env!("CARGO_BIN_EXE_flexgate"));
            let dir = gateway
                .parent()
                .unwrap_or_else(|| panic!("{} has no directory", gateway.display()));
            let cargo = std::env::var("CARGO")
                .ok()
                .or_else(|| option_env!("CARGO").map(str::to_string))
                .unwrap_or_else(|| "cargo".to_string());
            let mut build = Command::new(&cargo);
            build.current_dir(env!("CARGO_MANIFEST_DIR")).args([
                "build",
                "-p",
                "flexgate-agent",
                "--bin",
                "flexgate-agent",
            ]);
            // The same profile as this test's binaries (target/debug or target/release).
            if dir.file_name().is_some_and(|n| n == "release") {
                build.arg("--release");
            }
            let out = build
                .output()
                .unwrap_or_else(|e| panic!("cannot run `{cargo} build -p flexgate-agent`: {e}"));
            assert!(
                out.status.success(),
                "`{cargo} build -p flexgate-agent --bin flexgate-agent` failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let path = dir.join("flexgate-agent");
            assert!(
                path.is_file(),
                "the agent binary is not at {} after `cargo build -p flexgate-agent`",
                path.display()
            );
            path
        })
        .clone()
}

/// One running agent process.
pub struct AgentProcess {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Its host name (node name, and part of its GPU UUIDs).
    pub name: String,
    stderr: Arc<Mutex<String>>,
}

/// Options beyond the defaults (8 simulated H200s at 700 W).
#[derive(Debug, Clone, Default)]
pub struct AgentOptions {
    /// Limit at start per GPU index (the pre-event limit), W.
    pub initial_limit_w: Vec<(u32, f64)>,
    /// Out-of-band (BMC) limit per GPU index, W.
    pub oob_limit_w: Vec<(u32, f64)>,
    /// Memory activity of every GPU when uncapped: (DRAM active 0–1, memory-copy %).
    pub memory_activity: Option<(f64, f64)>,
    /// The window of the jobs' throughput aggregate, s (the agent's default: 30).
    pub throughput_window_s: Option<u32>,
    /// Run on the NVML test double scripted in this directory (`tests/nvml_double/README.md`)
    /// instead of simulated GPUs: the agent's real NVML code path, through the dynamic loader.
    pub nvml_double: Option<PathBuf>,
}

/// Where `tests/peers/setup.sh --only nvml-double` builds the NVML test double; fails loudly
/// when it is missing.
pub fn nvml_double_lib_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/peers/nvml-double");
    assert!(
        dir.join("libnvidia-ml.so.1").exists(),
        "{} is missing: run `bash tests/peers/setup.sh --only nvml-double` (the README test command does)",
        dir.join("libnvidia-ml.so.1").display()
    );
    dir
}

impl AgentProcess {
    /// Starts `flexgate-agent --simulate --gpus 8 --hostname NAME` on a free port, with its state
    /// and token files in `dir`, and waits until it serves.
    pub fn start(dir: &Path, name: &str, options: &AgentOptions) -> AgentProcess {
        std::fs::create_dir_all(dir).expect("agent dir");
        let token = dir.join("agent.token");
        let read_token = dir.join("agent.read-token");
        write_secret(&token, TOKEN);
        write_secret(&read_token, READ_TOKEN);
        let map = |pairs: &[(u32, f64)]| {
            pairs
                .iter()
                .map(|(i, w)| format!("\"{i}\" = {w:.1}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let config = dir.join("agent.toml");
        let simulate = if options.nvml_double.is_some() {
            String::new()
        } else {
            format!(
                "{}[simulate]\ninitial_limit_w = {{ {} }}\noob_limit_w = {{ {} }}\n{}",
                options
                    .throughput_window_s
                    .map_or_else(String::new, |s| format!("throughput_window_s = {s}\n")),
                map(&options.initial_limit_w),
                map(&options.oob_limit_w),
                options.memory_activity.map_or_else(String::new, |(dram, copy)| format!(
                    "dram_active = {dram:.3}\nmem_copy_util_pct = {copy:.1}\n"
                ))
            )
        };
        std::fs::write(&config, simulate).expect("agent config");
        let path = |p: &Path| p.to_str().expect("utf-8 path").to_string();
        let mut command = Command::new(binary());
        command.args(["--config", &path(&config), "--hostname", name]);
        match &options.nvml_double {
            Some(double) => {
                command
                    .env("LD_LIBRARY_PATH", nvml_double_lib_dir())
                    .env("FLEXGATE_NVML_DOUBLE", double);
            }
            None => {
                command.args(["--simulate", "--gpus", "8"]);
            }
        }
        let mut child = command
            .args(["--listen", "127.0.0.1:0", "--token-file", &path(&token)])
            .args(["--read-token-file", &path(&read_token)])
            .args(["--state-dir", &path(&dir.join("state"))])
            .env("RUST_LOG", "info")
            .env_remove("FLEXGATE_AGENT_TOKEN")
            .env_remove("FLEXGATE_AGENT_TOKEN_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary().display()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = stderr.clone();
        let mut err_pipe = child.stderr.take().expect("agent stderr");
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let out = child.stdout.take().expect("agent stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("flexgate-agent listening on http://") {
                    let _ = tx.send(addr.trim().to_string());
                }
            }
        });
        let mut agent = AgentProcess {
            child: Some(child),
            url: String::new(),
            name: name.to_string(),
            stderr,
        };
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(addr) => agent.url = format!("http://{addr}"),
            Err(_) => panic!(
                "agent {name} did not print its address within 20 s; stderr:\n{}",
                agent.stderr()
            ),
        }
        agent
    }

    /// What the agent wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// `GET /v1/gpus`, sorted by minor.
    pub async fn gpus(&self) -> Vec<GpuStatus> {
        let response = http()
            .get(format!("{}/v1/gpus", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {}/v1/gpus: {e}", self.url));
        assert!(
            response.status().is_success(),
            "GET {}/v1/gpus: HTTP {}",
            self.url,
            response.status()
        );
        let mut gpus: Vec<GpuStatus> = response.json().await.expect("GPU list");
        gpus.sort_by_key(|g| g.minor);
        gpus
    }

    /// `GET /v1/health` as JSON (`leases`: `[{id, generation, expires_at, gpus}]`).
    pub async fn health(&self) -> serde_json::Value {
        let response = http()
            .get(format!("{}/v1/health", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {}/v1/health: {e}", self.url));
        response.json().await.expect("health JSON")
    }

    /// When lease `id` expires, if the agent holds it.
    pub async fn lease_expiry(&self, id: &str) -> Option<chrono::DateTime<chrono::Utc>> {
        let health = self.health().await;
        health["leases"]
            .as_array()?
            .iter()
            .find(|l| l["id"] == id)
            .and_then(|l| l["expires_at"].as_str())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    }

    /// The requested limit of every GPU, by minor.
    pub async fn limits(&self) -> Vec<f64> {
        self.gpus()
            .await
            .iter()
            .map(|g| g.limit_w.unwrap_or(f64::NAN))
            .collect()
    }

    /// SIGKILL, no chance to clean up; waits for the process to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn write_secret(path: &Path, value: &str) {
    std::fs::write(path, value).expect("token file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
    }
}

/// reqwest with rustls' ring provider, as the gateway builds it.
/// The agents backend over `agents`: 1 s timeouts, one retry, leases renewed every `renew_s`.
/// The per-job throughput token `flexgate-agent job-token` prints for `job` under the control
/// token in `dir/agent.token`.
pub fn job_token(dir: &Path, job: &str) -> String {
    let out = Command::new(binary())
        .args(["job-token", job, "--token-file"])
        .arg(dir.join("agent.token"))
        .output()
        .expect("flexgate-agent job-token runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).expect("UTF-8").trim().to_owned()
}

/// A child process killed on drop, so that a failing assertion leaves none behind.
pub struct KillOnDrop(pub Option<Child>);

impl KillOnDrop {
    /// Waits for it and takes its output.
    pub fn wait_with_output(&mut self) -> std::io::Result<std::process::Output> {
        self.0.take().expect("waited once").wait_with_output()
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn agents_config(
    agents: &[&AgentProcess],
    token_file: PathBuf,
    slurm: Option<flexgate::cluster::agents::SlurmMapping>,
    renew_s: u64,
) -> flexgate::cluster::agents::AgentsConfig {
    flexgate::cluster::agents::AgentsConfig {
        nodes: agents
            .iter()
            .map(|a| flexgate::cluster::agents::AgentNode {
                name: a.name.clone(),
                url: a.url.clone(),
                metrics_url: None,
            })
            .collect(),
        token_file: Some(token_file),
        timeout_ms: 1_000,
        retries: 1,
        dispatch_deadline_ms: 3_000,
        concurrency: 16,
        renew_every_s: renew_s,
        slurm,
        pfi_predictor: None,
        tls: None,
    }
}

/// The agent's metrics page at `url` (its own `/metrics`, with the control token).
pub async fn metrics_page(url: &str) -> String {
    http()
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// The value of the one sample of `name` on the agent's metrics page at `url`.
pub async fn metric(url: &str, name: &str) -> f64 {
    let text = metrics_page(url).await;
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
}

pub fn http() -> reqwest::Client {
    flexgate_openadr::http::client(None, Duration::from_secs(5)).expect("HTTP client")
}

/// Polls `probe` every 100 ms until it returns `Some`, or panics after `limit` with `what` and
/// the last thing `probe` saw (its `Err`).
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(saw) => {
                assert!(
                    Instant::now() < deadline,
                    "{what}: not within {:.0} s; last seen: {saw}",
                    limit.as_secs_f64()
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
