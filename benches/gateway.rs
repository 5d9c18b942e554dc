//! Gateway benchmarks that criterion's summary statistics do not cover: tail latency of the
//! event path, and resident memory with a large fleet.
//!
//! `cargo bench --bench gateway` prints:
//! - submit → ledger flushed → acknowledged, and submit → plan computed and dispatched, for a
//!   fleet of ≈ 1,000 jobs: p50, p99, max over 2,000 revisions of one event (each revision moves
//!   the ceiling, so each one re-plans);
//! - meter read → plan: a measuring control pass (inventory, telemetry with the site meter, the
//!   plan that answers it, its dispatch) after each of 200 further revisions, the compute part of
//!   the meter-to-plan latency (the rest is the meter's poll period and the telemetry interval);
//! - resident set size (VmRSS) of a fresh `flexgate run` process over ≈ 10,000 simulated jobs,
//!   after it measured, accepted an event and planned. The simulated cluster lives in the same
//!   process, so this is an upper bound on the gateway's own memory.
//!
//! - with a node whose port accepts connections and never answers (a black hole) next to one
//!   real agent (the agent library, in this process): `GET /v1/status` and `POST /v1/events`
//!   over HTTP on 127.0.0.1, p50/p99/max over 200 requests each, while every control pass waits
//!   out the black hole's timeouts (`-- --black-hole` runs only this part).
//!
//! `-- --test` runs a small smoke version (used by the test script).
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use chrono::{SecondsFormat, Utc};
use flexgate::cluster::ClusterBackend;
use flexgate::cluster::sim::{SimCluster, SimConfig};
use flexgate::config::{Config, facility_for_nodes};
use flexgate::ledger::Ledger;
use flexgate::runtime::{Clock, Gateway, Transport};
use std::sync::Arc;
use std::time::{Duration, Instant};

async fn gateway(dir: &std::path::Path, nodes: u32) -> (Arc<Gateway>, usize) {
    let facility = facility_for_nodes(nodes);
    let sim = SimCluster::new(SimConfig {
        nodes,
        settle_ms: 0,
        facility: facility.clone(),
        ..SimConfig::default()
    })
    .expect("sim");
    let jobs = sim.inventory().await.expect("inventory").len();
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.facility = facility;
    let ledger = Ledger::open(&dir.join("ledger")).await.expect("ledger");
    let backend: Arc<dyn ClusterBackend> = sim;
    let gw = Gateway::start(config, Clock::real(), ledger, backend)
        .await
        .expect("gateway");
    gw.driver().tick(true).await.expect("first measurement");
    (gw, jobs)
}

fn event(revision: u64, kw: f64) -> Vec<u8> {
    let start = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    serde_json::json!({"schema": "dr.event/1", "event_id": "bench", "revision": revision, "site": "site-1",
        "target": {"form": "ceiling", "point": "meter", "kw": kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 3600, "recovery_s": 0}})
    .to_string()
    .into_bytes()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn show(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name:<44} n={:<5} p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
        samples.len(),
        percentile(&samples, 0.5).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().map_or(0.0, |d| d.as_secs_f64() * 1e3)
    );
}

/// A real agent (the library, 8 simulated GPUs) on 127.0.0.1.
async fn agent(token: &str) -> String {
    use flexgate_agent::{Agent, AgentConfig, auth::Auth, clock::SystemClock, gpu::sim::SimGpus, gpu::sim::SimOptions};
    let clock = Arc::new(SystemClock);
    let auth = Auth::from_secrets(token, None).expect("token");
    let gpus = SimGpus::new(&SimOptions::h200("n1", 8), clock.clone()).expect("sim GPUs");
    let agent = Agent::with_clock(AgentConfig::new("n1", auth), Box::new(gpus), clock).expect("agent");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(agent.serve(listener, std::future::pending::<()>()));
    url
}

/// Accepts connections and never answers.
async fn black_hole() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

/// Status reads and event acks over HTTP while a black-hole node holds every control pass.
async fn black_hole_bench(requests: usize) {
    use flexgate::cluster::agents::{AgentNode, AgentsConfig};
    let token = "bench-agent-token-0123456789";
    let dir = tempfile::tempdir().expect("dir");
    let token_file = dir.path().join("agents.token");
    std::fs::write(&token_file, token).expect("token file");
    let mut config = Config::default();
    config.gateway.data_dir = dir.path().join("data");
    config.gateway.api_token = "bench".into();
    config.gateway.telemetry_interval_s = 1;
    config.facility = facility_for_nodes(2);
    config.backend = flexgate::config::BackendConfig::Agents(AgentsConfig {
        nodes: vec![
            AgentNode {
                name: "n1".into(),
                url: agent(token).await,
                metrics_url: None,
            },
            AgentNode {
                name: "hole".into(),
                url: black_hole().await,
                metrics_url: None,
            },
        ],
        token_file: Some(token_file),
        timeout_ms: 1_000,
        retries: 1,
        dispatch_deadline_ms: 3_000,
        concurrency: 16,
        renew_every_s: 1,
        slurm: None,
        pfi_predictor: None,
        tls: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = flexgate::serve::Server::start(config, Clock::real(), None, listener)
        .await
        .expect("server");
    let addr = server.addr;
    let deadline = Instant::now() + Duration::from_secs(30);
    // Agents without a meter source: the facility model's figure.
    let meter = loop {
        if let Some(kw) = server.gateway.read().status().await.meter_kw() {
            break kw;
        }
        assert!(Instant::now() < deadline, "no meter figure");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let post = |id: String, kw: f64| {
        let start = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
        serde_json::json!({"schema": "dr.event/1", "event_id": id, "revision": 1, "site": "site-1",
            "target": {"form": "ceiling", "point": "meter", "kw": kw},
            "window": {"start": start, "ramp_s": 0, "duration_s": 3600, "recovery_s": 0}})
        .to_string()
        .into_bytes()
    };
    let r = flexgate::http_client::request(
        addr,
        "POST",
        "/v1/events",
        Some("bench"),
        Some(&post("hold".into(), meter * 0.8)),
    )
    .await
    .expect("post");
    assert_eq!(r.status, 200, "{}", r.text());
    let pass = Instant::now();
    server.gateway.driver().tick(true).await.expect("tick");
    let pass = pass.elapsed();
    let (mut reads, mut acks) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
    for i in 0..requests {
        let t = Instant::now();
        let r = flexgate::http_client::request(addr, "GET", "/v1/status", None, None)
            .await
            .expect("status");
        reads.push(t.elapsed());
        assert_eq!(r.status, 200);
        let t = Instant::now();
        let r = flexgate::http_client::request(
            addr,
            "POST",
            "/v1/events",
            Some("bench"),
            Some(&post(format!("ev-{i}"), meter * 2.0)),
        )
        .await
        .expect("post");
        acks.push(t.elapsed());
        assert_eq!(r.status, 200, "{}", r.text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "black-hole node next to a real agent: one control pass takes {:.2} s",
        pass.as_secs_f64()
    );
    show("GET /v1/status during control passes", reads);
    show("POST /v1/events → ack during control passes", acks);
    server.shutdown().await;
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let only_black_hole = std::env::args().any(|a| a == "--black-hole");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        if only_black_hole {
            black_hole_bench(200).await;
            return;
        }
        let (nodes, revisions) = if smoke { (40, 20) } else { (1_650, 2_000) };
        let dir = tempfile::tempdir().expect("dir");
        let (gw, jobs) = gateway(dir.path(), nodes).await;
        let meter = gw.read().status().await.measured_meter_kw().expect("meter");
        let (mut ack, mut recorded, mut plan) = (Vec::new(), Vec::new(), Vec::new());
        for revision in 1..=revisions {
            let kw = meter * if revision % 2 == 0 { 0.80 } else { 0.82 };
            let body = event(revision, kw);
            let start = Instant::now();
            gw.driver().submit(
            flexgate::grid::dr_event::submission(&body, flexgate_policies::event::EventSource::Http),
            Transport::Http { peer: None },
        ).await.expect("accepted");
            let acked = start.elapsed();
            gw.driver().tick(false).await.expect("plan");
            let planned = start.elapsed();
            let plan_flushed = gw.read().plan_recorded_at().await.map(|at| at.duration_since(start));
            if revision > 5 {
                ack.push(acked);
                plan.push(planned);
                recorded.extend(plan_flushed);
            }
        }
        let mut measuring = Vec::new();
        for revision in revisions + 1..=revisions + if smoke { 5 } else { 200 } {
            let kw = meter * if revision % 2 == 0 { 0.80 } else { 0.82 };
            gw.driver().submit(
                flexgate::grid::dr_event::submission(&event(revision, kw), flexgate_policies::event::EventSource::Http),
                Transport::Http { peer: None },
            )
                .await
                .expect("accepted");
            let start = Instant::now();
            gw.driver().tick(true).await.expect("measuring pass");
            measuring.push(start.elapsed());
        }
        println!("fleet: {jobs} jobs on {nodes} nodes; ledger: {} records", gw.ledger().head().0);
        show("meter read → plan (measuring pass)", measuring);
        show("submit → ledger flushed → ack", ack);
        show("submit → ack → plan computed, recorded, flushed", recorded);
        show("… → caps dispatched, confirmations flushed", plan);
        drop(gw);

        black_hole_bench(if smoke { 10 } else { 200 }).await;
        if smoke {
            return;
        }
        // Memory: a fresh `flexgate run` process with ≈ 10,000 simulated jobs, after it has
        // measured, accepted an event and planned.
        let dir = tempfile::tempdir().expect("dir");
        let config = dir.path().join("flexgate.toml");
        let mut c = Config::default();
        c.gateway.data_dir = dir.path().join("data");
        c.facility = facility_for_nodes(17_000);
        c.backend = flexgate::config::BackendConfig::Sim(SimConfig { nodes: 17_000, facility: c.facility.clone(), ..SimConfig::default() });
        std::fs::write(&config, toml::to_string(&c).expect("toml")).expect("write config");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr");
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_flexgate"))
            .args(["run", "--config", config.to_str().expect("utf-8"), "--listen", &port.to_string(), "--api-token", "bench"])
            .env("RUST_LOG", "warn")
            .spawn()
            .expect("flexgate run");
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(r) = flexgate::http_client::request(port, "GET", "/v1/status", None, None).await
                && r.status == 200
                && r.json().ok().and_then(|v| v["measured_meter_w"].as_f64()).is_some()
            {
                break;
            }
            assert!(Instant::now() < deadline, "gateway did not start");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let status = flexgate::http_client::request(port, "GET", "/v1/status", None, None).await.expect("status").json().expect("json");
        let meter = status["measured_meter_w"].as_f64().expect("meter") / 1000.0;
        let jobs = status["jobs"].as_u64().unwrap_or(0);
        let r = flexgate::http_client::request(port, "POST", "/v1/events", Some("bench"), Some(&event(1, meter * 0.8))).await.expect("post");
        assert_eq!(r.status, 200, "{}", r.text());
        tokio::time::sleep(Duration::from_secs(12)).await;
        let plan = flexgate::http_client::request(port, "GET", "/v1/plan", None, None).await.expect("plan");
        let rss = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
            .ok()
            .and_then(|s| s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
            .map_or(f64::NAN, |kib| kib / 1024.0);
        let _ = child.kill();
        let _ = child.wait();
        println!(
            "memory: `flexgate run` with {jobs} simulated jobs (cluster simulated in the same process), after planning (plan: HTTP {}): VmRSS {rss:.1} MiB",
            plan.status
        );
    });
}
