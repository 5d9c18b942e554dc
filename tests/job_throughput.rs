//! A job's throughput from a real Python process, through a real agent, to a real gateway.
//!
//! Two `flexgate-agent` processes (simulated GPUs) each run one job (no Slurm: one job per
//! node, id `node:NAME`). On node A a Python 3 process runs `deploy/flexgate_throughput.py` as
//! a stand-in training loop (4,096 tokens every 50 ms, stdlib only) with the token that
//! `flexgate-agent job-token` printed for its job; the gateway must show that job's throughput
//! as measured, near 81,920 tokens/s. On node B the same loop presents node A's job token: the
//! agent refuses it (403), and the gateway must show node B's job as unknown, not as 0 or as
//! A's figure. Fails loudly when python3 or the agent binary is missing.

mod common;

use common::agent::{AgentOptions, AgentProcess, KillOnDrop as Python, TOKEN, job_token, wait_for};
use flexgate::clock::Clock;
use flexgate::config::{BackendConfig, Config, facility_for_nodes};
use flexgate::ledger::RecordKind;
use flexgate::serve::Server;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Tokens per simulated step, and the step's length: 81,920 tokens/s at best.
const TOKENS_PER_STEP: u32 = 4096;
const STEP_S: f64 = 0.05;

/// `python3 deploy/flexgate_throughput.py` reporting for `job` to `agent` with `token`.
fn training_loop(agent: &AgentProcess, job: &str, token: &str, seconds: u32) -> Python {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let child = Command::new("python3")
        .arg(root.join("deploy/flexgate_throughput.py"))
        .args([TOKENS_PER_STEP.to_string(), STEP_S.to_string(), seconds.to_string()])
        .env("FLEXGATE_JOB_ID", job)
        .env("FLEXGATE_JOB_TOKEN", token)
        .env("FLEXGATE_AGENT_URL", &agent.url)
        .env("FLEXGATE_REPORT_S", "0.5")
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 is installed (Debian's python3; tests/peers/setup.sh needs it too)");
    Python(Some(child))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_job_reports_through_its_agent_and_the_gateway_calls_it_measured() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = AgentProcess::start(&dir.path().join("a"), "tp-a", &AgentOptions::default());
    let b = AgentProcess::start(&dir.path().join("b"), "tp-b", &AgentOptions::default());
    let token_a = job_token(&dir.path().join("a"), "node:tp-a");

    let mut config = Config::default();
    config.gateway.data_dir = dir.path().join("data");
    config.gateway.api_token = "throughput-test-api-token-0123".into();
    config.gateway.telemetry_interval_s = 1;
    config.facility = facility_for_nodes(2);
    let token_file = dir.path().join("agents.token");
    std::fs::write(&token_file, TOKEN).expect("token file");
    config.backend = BackendConfig::Agents(common::agent::agents_config(&[&a, &b], token_file, None, 1));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("the gateway starts");

    let mut honest = training_loop(&a, "node:tp-a", &token_a, 8);
    let mut impostor = training_loop(&b, "node:tp-b", &token_a, 8);

    let rate = wait_for("node A's job throughput, measured", Duration::from_secs(20), || async {
        let jobs = server.gateway.read().jobs().await;
        jobs.iter()
            .find(|j| j.id == "node:tp-a" && j.throughput == "measured")
            .and_then(|j| j.measured_tokens_per_s)
            .ok_or_else(|| format!("jobs: {jobs:?}"))
    })
    .await;
    let best = f64::from(TOKENS_PER_STEP) / STEP_S;
    eprintln!("node A's job as the gateway sees it: {rate:.0} tokens/s measured (loop's best {best:.0})");
    assert!(
        (0.6 * best..=1.01 * best).contains(&rate),
        "the top-decile rate {rate:.0} tokens/s should be near {best:.0} (the helper times whole steps, and sleeps only lengthen them)"
    );
    let jobs = server.gateway.read().jobs().await;
    let b_job = jobs.iter().find(|j| j.id == "node:tp-b").expect("node B's job");
    assert_eq!(b_job.throughput, "unknown", "{b_job:?}");
    assert_eq!(b_job.measured_tokens_per_s, None, "unknown is never shown as 0");

    let out = honest.wait_with_output().expect("python ends");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains(", 0 refused"), "{out:?}");
    let out = impostor.wait_with_output().expect("python ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("refused a reading (403)"),
        "another job's token must be refused: {out:?}"
    );
    // The agent's own figure and refusal count agree with what the gateway shows.
    let text = common::agent::http()
        .get(format!("{}/metrics", a.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        text.contains("flexgate_agent_job_tokens_per_second{job=\"node:tp-a\""),
        "{text}"
    );
    // The ledger says whose throughput was measured and whose was not, as it changed.
    let known: Vec<serde_json::Value> = server
        .gateway
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.kind == RecordKind::Measurement && r.body["entry"] == "throughput_known")
        .map(|r| r.body["throughput"].clone())
        .collect();
    assert!(known.iter().any(|k| k["node:tp-a"] == "measured"), "{known:?}");
    assert!(known.iter().any(|k| k["node:tp-b"] == "unknown"), "{known:?}");
    assert!(!known.iter().any(|k| k["node:tp-b"] == "measured"), "{known:?}");
    server.shutdown().await;
}
