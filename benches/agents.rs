//! Dispatch to real agents: `cargo bench --bench agents`.
//!
//! 1,000 `flexgate-agent` HTTP servers with 8 simulated GPUs each (8,000 GPUs), all in one
//! process on 127.0.0.1 (their own runtime, 2 threads), and the gateway's agents backend in
//! another runtime (2 threads), one job per node. Each round sends one cap command per job
//! (1,000 commands, caps alternating between two values so every round changes every GPU) and
//! measures the time until every agent confirmed (`apply` returned, every outcome
//! `Applied`). Reported: p50, p99 and max over the rounds, after one warm-up round that opens
//! the connections. Then telemetry rounds: every agent's `/metrics` page read and parsed, as
//! the closed loop does once per telemetry interval.
//!
//! `-- --test` runs a small smoke version (used by the test script); `-- --tls` serves the
//! agents over HTTPS (rustls) and has the gateway verify them against a CA.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use flexgate::cluster::agents::{AgentNode, AgentTls, AgentsBackend, AgentsConfig};
use flexgate::cluster::{CapCommand, CapOutcome, ClusterBackend};
use flexgate::config::facility_for_nodes;
use flexgate_agent::auth::Auth;
use flexgate_agent::clock::SystemClock;
use flexgate_agent::gpu::sim::{SimGpus, SimOptions};
use flexgate_agent::{Agent, AgentConfig};
use flexgate_policies::facility::FacilityModel;
use flexgate_policies::units::WattsPerGpu;
use std::sync::Arc;
use std::time::{Duration, Instant};

const TOKEN: &str = "bench-agents-token-0123456789";

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[path = "../tests/common/pki.rs"]
mod pki;

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    // `-- --tls`: the agents serve HTTPS and the gateway checks them against the CA.
    let tls = std::env::args().any(|a| a == "--tls");
    let (agents, rounds) = if smoke { (20, 5) } else { (1_000, 50) };
    let pki = tempfile::tempdir().expect("dir");
    pki::mint(pki.path());
    let server_tls = tls.then(|| {
        flexgate_agent::tls::server_config(&flexgate_agent::tls::TlsFiles {
            cert_file: pki.path().join("agent.pem"),
            key_file: pki.path().join("agent-key.pem"),
            client_ca_file: None,
        })
        .expect("server TLS")
    });

    // The agents, on their own runtime.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let fleet = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("agent runtime");
        rt.block_on(async move {
            let clock = Arc::new(SystemClock);
            let auth = Auth::from_secrets(TOKEN, None).expect("token");
            let mut servers = Vec::new();
            for n in 0..agents {
                let host = format!("n{n:04}");
                let gpus = SimGpus::new(&SimOptions::h200(&host, 8), clock.clone()).expect("sim");
                let agent = Agent::with_clock(
                    AgentConfig::new(host.clone(), auth.clone()),
                    Box::new(gpus),
                    clock.clone(),
                )
                .expect("agent");
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addr_tx
                    .send((host, listener.local_addr().expect("addr")))
                    .expect("send");
                let mut stop = stop_rx.clone();
                let shutdown = async move {
                    let _ = stop.wait_for(|s| *s).await;
                };
                servers.push(match &server_tls {
                    Some(config) => tokio::spawn(agent.serve_tls(listener, config.clone(), shutdown)),
                    None => tokio::spawn(agent.serve(listener, shutdown)),
                });
            }
            for s in servers {
                let _ = s.await;
            }
        });
    });
    let nodes: Vec<AgentNode> = (0..agents)
        .map(|_| {
            let (name, addr) = addr_rx.recv().expect("agent up");
            AgentNode {
                name,
                url: format!("{}://{addr}", if tls { "https" } else { "http" }),
                metrics_url: None,
            }
        })
        .collect();

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("gateway runtime");
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).expect("token file");
    let config = AgentsConfig {
        nodes,
        token_file: Some(token_file),
        timeout_ms: 2_000,
        retries: 2,
        dispatch_deadline_ms: 5_000,
        concurrency: 256,
        renew_every_s: 10,
        slurm: None,
        pfi_predictor: None,
        tls: tls.then(|| AgentTls {
            ca_file: pki.path().join("ca.pem"),
            cert_file: None,
            key_file: None,
        }),
    };
    let mut samples = Vec::new();
    let mut telemetry_samples = Vec::new();
    let telemetry_rounds = if smoke { 3 } else { 30 };
    rt.block_on(async {
        let facility =
            FacilityModel::new(facility_for_nodes(u32::try_from(agents).unwrap_or(u32::MAX))).expect("facility");
        let backend = AgentsBackend::new(&config, facility).expect("backend");
        let started = Instant::now();
        let jobs = backend.inventory().await.expect("inventory");
        println!(
            "inventory: {} jobs, {} GPUs, read in {:.1} ms",
            jobs.len(),
            jobs.iter().map(|j| j.spec.gpus).sum::<u32>(),
            started.elapsed().as_secs_f64() * 1e3
        );
        let until = chrono::Utc::now() + chrono::Duration::minutes(30);
        for round in 0..=rounds {
            let cap = if round % 2 == 0 { 450.0 } else { 500.0 };
            let commands: Vec<CapCommand> = jobs
                .iter()
                .map(|j| CapCommand {
                    job: j.spec.id.clone(),
                    cap: WattsPerGpu(cap),
                    generation: round as u64 + 1,
                    until: Some(until),
                })
                .collect();
            let t = Instant::now();
            let results = backend.apply(&commands).await;
            let elapsed = t.elapsed();
            let confirmed = results
                .iter()
                .filter(|r| matches!(r.outcome, CapOutcome::Applied { .. }))
                .count();
            assert_eq!(
                confirmed,
                jobs.len(),
                "round {round}: {:?}",
                results
                    .iter()
                    .find(|r| !matches!(r.outcome, CapOutcome::Applied { .. }))
            );
            if round > 0 {
                samples.push(elapsed.as_secs_f64() * 1e3);
            }
        }
        // Telemetry rounds: every agent's /metrics page read and parsed (the closed loop's
        // input, once per telemetry interval).
        for round in 0..=telemetry_rounds {
            let t = Instant::now();
            let telemetry = backend.telemetry().await.expect("telemetry");
            let elapsed = t.elapsed();
            assert_eq!(telemetry.jobs.len(), jobs.len(), "round {round}: every job measured");
            if round > 0 {
                telemetry_samples.push(elapsed.as_secs_f64() * 1e3);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
    telemetry_samples.sort_by(f64::total_cmp);
    samples.sort_by(f64::total_cmp);
    println!(
        "dispatch to {agents} agents ({} GPUs{}), every cap confirmed: n={} p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        agents * 8,
        if tls { ", TLS" } else { "" },
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        samples.last().copied().unwrap_or(0.0)
    );
    println!(
        "telemetry from {agents} agents' /metrics ({} GPUs{}): n={} p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        agents * 8,
        if tls { ", TLS" } else { "" },
        telemetry_samples.len(),
        percentile(&telemetry_samples, 0.5),
        percentile(&telemetry_samples, 0.99),
        telemetry_samples.last().copied().unwrap_or(0.0)
    );
    stop_tx.send_replace(true);
    let _ = fleet.join();
}
