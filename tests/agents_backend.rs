//! The agents backend against real `flexgate-agent` HTTP servers (simulated GPUs, in this
//! process, on 127.0.0.1), one job per node (no scheduler): caps land on exactly the job's
//! GPUs, out-of-range caps are clamped and reported, a release restores the pre-event limits,
//! stale generations are refused, a wrong token and a dead agent give `Failed` with nothing
//! changed, and the renewal round re-creates a lease an agent lost.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

mod common;

use flexgate::cluster::agents::{AgentNode, AgentTls, AgentsBackend, AgentsConfig, PredictorSource};
use flexgate::cluster::{CapCommand, CapOutcome, ClusterBackend};
use flexgate::config::facility_for_nodes;
use flexgate_agent::api::GpuStatus;
use flexgate_agent::auth::Auth;
use flexgate_agent::clock::SystemClock;
use flexgate_agent::gpu::sim::{SimGpus, SimOptions};
use flexgate_agent::{Agent, AgentConfig};
use flexgate_policies::alloc::Elasticity;
use flexgate_policies::control::cluster::Unconfirmed;
use flexgate_policies::facility::FacilityModel;
use flexgate_policies::predictor::{PfiPredictor, TelemetrySample};
use flexgate_policies::units::WattsPerGpu;
use std::sync::Arc;
use tokio::sync::watch;

const TOKEN: &str = "agents-backend-test-token-0123";

struct Cluster {
    urls: Vec<String>,
    stops: Vec<watch::Sender<bool>>,
    dir: tempfile::TempDir,
}

async fn start_agent(name: &str, stop: watch::Receiver<bool>) -> String {
    start_agent_at(name, "127.0.0.1:0", stop).await
}

/// An agent without a state directory: a restart forgets its leases, as after a reboot.
async fn start_agent_at(name: &str, addr: &str, stop: watch::Receiver<bool>) -> String {
    let clock = Arc::new(SystemClock);
    let auth = Auth::from_secrets(TOKEN, None).expect("token");
    let gpus = SimGpus::new(&SimOptions::h200(name, 8), clock.clone()).expect("sim");
    let agent = Agent::with_clock(AgentConfig::new(name, auth), Box::new(gpus), clock).expect("agent");
    let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let mut stop = stop;
    tokio::spawn(agent.serve(listener, async move {
        let _ = stop.wait_for(|s| *s).await;
    }));
    url
}

async fn cluster(n: usize) -> Cluster {
    let mut urls = Vec::new();
    let mut stops = Vec::new();
    for i in 0..n {
        let (tx, rx) = watch::channel(false);
        urls.push(start_agent(&format!("n{i}"), rx).await);
        stops.push(tx);
    }
    Cluster {
        urls,
        stops,
        dir: tempfile::tempdir().expect("dir"),
    }
}

fn backend(c: &Cluster, token: &str) -> Arc<AgentsBackend> {
    backend_with(c, token, &[], None)
}

/// A backend whose node `i` reads its telemetry from `metrics_urls[i]` when given.
fn backend_with(
    c: &Cluster,
    token: &str,
    metrics_urls: &[Option<String>],
    pfi_predictor: Option<PredictorSource>,
) -> Arc<AgentsBackend> {
    let token_file = c.dir.path().join(format!("token-{}", token.len()));
    std::fs::write(&token_file, token).expect("token file");
    let config = AgentsConfig {
        nodes: c
            .urls
            .iter()
            .enumerate()
            .map(|(i, url)| AgentNode {
                name: format!("n{i}"),
                url: url.clone(),
                metrics_url: metrics_urls.get(i).cloned().flatten(),
            })
            .collect(),
        token_file: Some(token_file),
        timeout_ms: 500,
        retries: 1,
        dispatch_deadline_ms: 2_000,
        concurrency: 16,
        renew_every_s: 1,
        slurm: None,
        pfi_predictor,
        tls: None,
    };
    AgentsBackend::new(&config, FacilityModel::new(facility_for_nodes(3)).expect("facility")).expect("backend")
}

/// reqwest with rustls' ring provider, as the gateway builds it.
fn http() -> reqwest::Client {
    flexgate_openadr::http::client(None, std::time::Duration::from_secs(5)).expect("HTTP client")
}

async fn gpus(url: &str) -> Vec<GpuStatus> {
    let client = http();
    client
        .get(format!("{url}/v1/gpus"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET /v1/gpus")
        .json()
        .await
        .expect("GPU list")
}

fn command(job: &str, cap: f64, generation: u64) -> CapCommand {
    CapCommand {
        job: flexgate_policies::ids::JobId::from(job),
        cap: WattsPerGpu(cap),
        generation,
        until: Some(chrono::Utc::now() + chrono::Duration::minutes(10)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_land_on_the_jobs_gpus_and_come_back_off() {
    let c = cluster(3).await;
    let b = backend(&c, TOKEN);
    let jobs = b.inventory().await.expect("inventory");
    assert_eq!(jobs.len(), 3);
    let job0 = jobs.iter().find(|j| &*j.spec.id == "node:n0").expect("job of n0");
    assert_eq!(job0.spec.gpus, 8);
    assert_eq!(
        (job0.spec.cap_range.min.value(), job0.spec.cap_range.max.value()),
        (200.0, 700.0)
    );
    assert!(job0.measured_power.value() > 0.0);
    let before: Vec<Vec<GpuStatus>> = futures(&c).await;

    // Cap n0's job at 400 W: exactly its 8 GPUs, nothing else.
    let r = b.apply(&[command("node:n0", 400.0, 1)]).await;
    assert_eq!(
        r[0].outcome,
        CapOutcome::Applied {
            applied: WattsPerGpu(400.0),
            clamped: false
        }
    );
    let after = futures(&c).await;
    assert!(after[0].iter().all(|g| g.limit_w == Some(400.0)), "{:?}", after[0]);
    assert_eq!(
        after[1].iter().map(|g| g.limit_w).collect::<Vec<_>>(),
        before[1].iter().map(|g| g.limit_w).collect::<Vec<_>>()
    );
    assert_eq!(
        after[2].iter().map(|g| g.limit_w).collect::<Vec<_>>(),
        before[2].iter().map(|g| g.limit_w).collect::<Vec<_>>()
    );

    // Below the GPUs' minimum: clamped to 200 W and said so.
    let r = b.apply(&[command("node:n1", 120.0, 2)]).await;
    assert_eq!(
        r[0].outcome,
        CapOutcome::Applied {
            applied: WattsPerGpu(200.0),
            clamped: true
        }
    );
    assert!(gpus(&c.urls[1]).await.iter().all(|g| g.limit_w == Some(200.0)));

    // A stale generation for n0 is refused and changes nothing.
    let r = b.apply(&[command("node:n0", 300.0, 0)]).await;
    assert!(
        matches!(r[0].outcome, CapOutcome::Stale { latest: 1 }),
        "{:?}",
        r[0].outcome
    );
    assert!(gpus(&c.urls[0]).await.iter().all(|g| g.limit_w == Some(400.0)));

    // The same generation again with another cap: the agent refuses it (409
    // generation_conflict) and keeps 400 W; the gateway reports a failure, not a newer plan.
    let r = b.apply(&[command("node:n0", 350.0, 1)]).await;
    match &r[0].outcome {
        CapOutcome::Failed { reason, why } => {
            assert!(reason.contains("held with other caps"), "{reason}");
            assert_eq!(*why, Some(Unconfirmed::Refused));
        }
        other => panic!("expected a failure naming the conflict, got {other:?}"),
    }
    assert!(gpus(&c.urls[0]).await.iter().all(|g| g.limit_w == Some(400.0)));

    // Unknown job.
    let r = b.apply(&[command("node:n9", 300.0, 3)]).await;
    assert_eq!(r[0].outcome, CapOutcome::UnknownJob);

    // Release (cap at the maximum): the pre-event limits come back exactly.
    let r = b.apply(&[command("node:n0", 700.0, 4)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);
    let restored = gpus(&c.urls[0]).await;
    for (now, was) in restored.iter().zip(&before[0]) {
        assert_eq!(now.limit_w, was.limit_w, "{}", now.uuid);
    }

    // Telemetry: every job measured.
    let t = b.telemetry().await.expect("telemetry");
    assert_eq!(t.jobs.len(), 3);
    assert!(t.meter_kw.value() > t.gpu_board_power.value() / 1000.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_caps_carry_its_epoch_and_a_deposed_leaders_are_refused_by_the_agents() {
    let c = cluster(2).await;
    let old_leader = backend(&c, TOKEN);
    let new_leader = backend(&c, TOKEN);
    for b in [&old_leader, &new_leader] {
        b.inventory().await.expect("inventory");
    }
    old_leader.set_term(Some(5));
    let r = old_leader.apply(&[command("node:n0", 400.0, 1)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);
    // The next term's leader raises every agent's fence to epoch 6 as it takes charge.
    new_leader.set_term(Some(6));
    assert!(new_leader.fence().await.is_empty(), "every agent fenced");
    let r = new_leader.apply(&[command("node:n0", 450.0, 2)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);
    // The old leader, still running, is refused: nothing changes, and it says why.
    let r = old_leader
        .apply(&[command("node:n0", 300.0, 3), command("node:n1", 300.0, 3)])
        .await;
    for result in &r {
        match &result.outcome {
            CapOutcome::Failed { reason, why } => {
                assert!(reason.contains("deposed leader"), "{reason}");
                assert_eq!(*why, Some(Unconfirmed::Refused));
            }
            other => panic!("a deposed leader's cap went through: {other:?}"),
        }
    }
    assert!(gpus(&c.urls[0]).await.iter().all(|g| g.limit_w == Some(450.0)));
    assert!(gpus(&c.urls[1]).await.iter().all(|g| g.limit_w == Some(700.0)));
    // A standby renews nothing.
    old_leader.set_term(None);
    old_leader.renew_all().await;
    let metrics = http()
        .get(format!("{}/metrics", c.urls[0]))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains("flexgate_agent_fence_epoch{Hostname=\"n0\"} 6"),
        "{metrics}"
    );
    assert!(
        metrics.contains("flexgate_agent_fenced_commands_total{Hostname=\"n0\"} 1"),
        "{metrics}"
    );
}

async fn futures(c: &Cluster) -> Vec<Vec<GpuStatus>> {
    let mut out = Vec::new();
    for url in &c.urls {
        out.push(gpus(url).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_or_a_dead_agent_fails_the_job_and_changes_nothing() {
    let c = cluster(2).await;
    let good = backend(&c, TOKEN);
    good.inventory().await.expect("inventory");
    let before = gpus(&c.urls[0]).await;

    let bad = backend(&c, "not-the-agents-token-at-all");
    // Inventory with a refused token: no agent answers usefully.
    assert!(bad.inventory().await.is_err());

    // A dead agent: its job fails (not assumed capped); the other one is applied.
    c.stops[1].send_replace(true);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let r = good
        .apply(&[command("node:n0", 500.0, 1), command("node:n1", 500.0, 1)])
        .await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);
    assert!(
        matches!(&r[1].outcome, CapOutcome::Failed { reason, why: Some(Unconfirmed::Unreachable) } if reason.contains("n1")),
        "{:?}",
        r[1].outcome
    );
    let after = gpus(&c.urls[0]).await;
    assert!(after.iter().all(|g| g.limit_w == Some(500.0)));
    assert_eq!(before.len(), after.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_renewal_round_recreates_a_lease_the_agent_lost() {
    let c = cluster(1).await;
    let b = backend(&c, TOKEN);
    b.inventory().await.expect("inventory");
    let r = b.apply(&[command("node:n0", 450.0, 1)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }));
    // The agent restarts without its state (a reboot): the lease and the cap are gone.
    c.stops[0].send_replace(true);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let addr = c.urls[0].trim_start_matches("http://").to_string();
    let (_tx, rx) = watch::channel(false);
    start_agent_at("n0", &addr, rx).await;
    assert!(gpus(&c.urls[0]).await.iter().all(|g| g.limit_w != Some(450.0)));
    b.renew_all().await;
    assert!(gpus(&c.urls[0]).await.iter().all(|g| g.limit_w == Some(450.0)));
}

/// Reads an agent's own `/metrics` and gathers its GPUs' samples.
async fn metrics_of(url: &str) -> Vec<flexgate_agent::metrics::GpuSample> {
    let text = http()
        .get(format!("{url}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("text");
    flexgate_agent::metrics::gpu_samples(&flexgate_agent::metrics::parse(&text).expect("parse"))
}

/// Site samples for the predictor: PFI rising with the memory feature, with some scatter.
fn predictor_samples(dir: &std::path::Path) -> (PredictorSource, PfiPredictor) {
    let samples: Vec<TelemetrySample> = [
        (0.20, 20.0, 1.25, "dense_pt"),
        (0.30, 25.0, 1.40, "dense_pt"),
        (0.40, 30.0, 1.62, "dense_ft"),
        (0.45, 35.0, 1.80, "dense_ft"),
        (0.55, 40.0, 2.10, "moe_pt"),
        (0.60, 45.0, 2.35, "moe_ft"),
    ]
    .into_iter()
    .map(|(dram, copy, pfi, cluster)| TelemetrySample {
        pfi,
        dram_active: dram,
        mem_copy_util_pct: copy,
        cluster: cluster.into(),
    })
    .collect();
    let path = dir.join("pfi-samples.json");
    std::fs::write(&path, serde_json::to_string(&samples).expect("json")).expect("samples file");
    (
        PredictorSource {
            samples: path,
            min_readings: 3,
        },
        PfiPredictor::fit(&samples).expect("fit"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telemetry_comes_from_metrics_and_predicts_the_pfi_of_uncapped_untagged_jobs() {
    let c = cluster(2).await;
    let (source, model) = predictor_samples(c.dir.path());
    let b = backend_with(&c, TOKEN, &[], Some(source));
    let jobs = b.inventory().await.expect("inventory");
    assert!(
        jobs.iter().all(|j| j.spec.elasticity == Elasticity::Unknown),
        "nothing known yet"
    );
    // n1's job is capped before any reading: a capped run says nothing about memory-boundedness.
    let r = b.apply(&[command("node:n1", 450.0, 1)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);

    let mut dram = Vec::new();
    let mut copy = Vec::new();
    for round in 0..3 {
        let t = b.telemetry().await.expect("telemetry");
        assert_eq!(
            t.meter_quality,
            flexgate_policies::meter::Quality::Model,
            "without a meter source the meter figure is the facility model's, never called measured"
        );
        let page = metrics_of(&c.urls[0]).await;
        assert_eq!(page.len(), 8);
        let page_power: f64 = page.iter().filter_map(|g| g.power_w).sum();
        let job_power = t
            .jobs
            .iter()
            .find(|j| &*j.job == "node:n0")
            .expect("n0 measured")
            .power
            .value();
        // Both read the same simulated GPUs a moment apart.
        assert!(
            (job_power - page_power).abs() < 0.03 * page_power,
            "round {round}: job power {job_power} W vs /metrics {page_power} W"
        );
        dram.push(page.iter().filter_map(|g| g.dram_active).sum::<f64>() / 8.0);
        copy.push(page.iter().filter_map(|g| g.mem_copy_util_pct).sum::<f64>() / 8.0);
        if round < 2 {
            let jobs = b.inventory().await.expect("inventory");
            assert_eq!(jobs[0].spec.elasticity, Elasticity::Unknown, "not before 3 readings");
        }
    }
    let jobs = b.inventory().await.expect("inventory");
    let n0 = jobs.iter().find(|j| &*j.spec.id == "node:n0").expect("n0");
    let expected = model
        .predict(dram.iter().sum::<f64>() / 3.0, copy.iter().sum::<f64>() / 3.0)
        .expect("prediction");
    match &n0.spec.elasticity {
        Elasticity::PredictedPfi { mean, sd, grid } => {
            assert!((mean - expected.mean).abs() < 0.05, "{mean} vs {}", expected.mean);
            assert!((sd - expected.sd).abs() < 0.02, "{sd} vs {}", expected.sd);
            assert!(grid.is_none());
        }
        other => panic!("n0 should have a predicted PFI, has {other:?}"),
    }
    let n1 = jobs.iter().find(|j| &*j.spec.id == "node:n1").expect("n1");
    assert_eq!(n1.spec.elasticity, Elasticity::Unknown, "a capped job is not sampled");
}

/// A stand-in dcgm-exporter page server: serves `page`, remembers whether any request carried
/// an Authorization header.
async fn exporter(page: Arc<std::sync::Mutex<String>>, saw_auth: Arc<std::sync::atomic::AtomicBool>) -> String {
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/metrics",
        get(move |headers: axum::http::HeaderMap| {
            let page = page.clone();
            let saw_auth = saw_auth.clone();
            async move {
                if headers.contains_key("authorization") {
                    saw_auth.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                page.lock().expect("page").clone()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/metrics", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn dcgm_page(host: &str, power: &str) -> String {
    let mut page =
        String::from("# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n");
    for i in 0..8 {
        page.push_str(&format!(
            "DCGM_FI_DEV_POWER_USAGE{{gpu=\"{i}\",UUID=\"GPU-sim-{host}-{i}\",device=\"nvidia{i}\",modelName=\"NVIDIA H200\",Hostname=\"{host}\"}} {power}\n"
        ));
    }
    page
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dcgm_exporter_page_is_read_without_the_token_and_broken_pages_count_as_unmeasured() {
    let c = cluster(2).await;
    let page = Arc::new(std::sync::Mutex::new(dcgm_page("n0", "123.5")));
    let saw_auth = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let url = exporter(page.clone(), saw_auth.clone()).await;
    let b = backend_with(&c, TOKEN, &[Some(url)], None);
    b.inventory().await.expect("inventory");
    let t = b.telemetry().await.expect("telemetry");
    let n0 = t.jobs.iter().find(|j| &*j.job == "node:n0").expect("n0 measured");
    assert!((n0.power.value() - 8.0 * 123.5).abs() < 1e-9, "{}", n0.power.value());
    assert!(t.jobs.iter().any(|j| &*j.job == "node:n1"), "n1 read from its agent");
    assert!(
        !saw_auth.load(std::sync::atomic::Ordering::SeqCst),
        "the agents' token never goes to an exporter"
    );
    let healthy_meter = t.meter_kw.value();

    // Broken pages: NaN or absurd power, garbage, a page over the size limit. The node's GPUs
    // are then unmeasured: its job leaves the per-job telemetry and the meter estimate counts
    // its GPUs at their maximum, never at less.
    let huge = "# padding\n".repeat(600_000);
    for broken in [
        dcgm_page("n0", "NaN"),
        dcgm_page("n0", "-5"),
        dcgm_page("n0", "1e9"),
        "<html>not metrics</html>\n{{{".to_string(),
        huge,
    ] {
        *page.lock().expect("page") = broken.clone();
        let t = b.telemetry().await.expect("n1 still answers");
        assert!(
            !t.jobs.iter().any(|j| &*j.job == "node:n0"),
            "n0 unmeasured with page {:.60}",
            broken
        );
        assert!(t.jobs.iter().any(|j| &*j.job == "node:n1"));
        assert!(
            t.meter_kw.value() > healthy_meter,
            "unmeasured GPUs count at their maximum: {} vs {healthy_meter}",
            t.meter_kw.value()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// TLS and mutual TLS between the gateway and the agents
// ---------------------------------------------------------------------------------------------

/// PEM files minted for one test (see tests/common/pki.rs).
struct Pki {
    dir: tempfile::TempDir,
}

impl Pki {
    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }
}

fn pki() -> Pki {
    let dir = tempfile::tempdir().expect("dir");
    common::pki::mint(dir.path());
    Pki { dir }
}

/// One agent serving HTTPS; with `mtls`, it also demands a client certificate from the CA.
async fn start_tls_agent(name: &str, pki: &Pki, mtls: bool, stop: watch::Receiver<bool>) -> String {
    let clock = Arc::new(SystemClock);
    let auth = Auth::from_secrets(TOKEN, None).expect("token");
    let gpus = SimGpus::new(&SimOptions::h200(name, 8), clock.clone()).expect("sim");
    let agent = Agent::with_clock(AgentConfig::new(name, auth), Box::new(gpus), clock).expect("agent");
    let tls = flexgate_agent::tls::server_config(&flexgate_agent::tls::TlsFiles {
        cert_file: pki.path("agent.pem"),
        key_file: pki.path("agent-key.pem"),
        client_ca_file: mtls.then(|| pki.path("ca.pem")),
    })
    .expect("server TLS");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://{}", listener.local_addr().expect("addr"));
    let mut stop = stop;
    tokio::spawn(agent.serve_tls(listener, tls, async move {
        let _ = stop.wait_for(|s| *s).await;
    }));
    url
}

fn tls_backend(pki: &Pki, url: &str, tls: Option<AgentTls>) -> Result<Arc<AgentsBackend>, String> {
    let token_file = pki.path("agent-token");
    std::fs::write(&token_file, TOKEN).expect("token file");
    let config = AgentsConfig {
        nodes: vec![AgentNode {
            name: "n0".into(),
            url: url.into(),
            metrics_url: None,
        }],
        token_file: Some(token_file),
        timeout_ms: 1_000,
        retries: 0,
        dispatch_deadline_ms: 2_000,
        concurrency: 16,
        renew_every_s: 1,
        slurm: None,
        pfi_predictor: None,
        tls,
    };
    AgentsBackend::new(&config, FacilityModel::new(facility_for_nodes(1)).expect("facility")).map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_mutual_tls_only_a_gateway_with_a_client_certificate_from_the_ca_changes_caps() {
    let pki = pki();
    let (_stop, rx) = watch::channel(false);
    let url = start_tls_agent("n0", &pki, true, rx).await;
    let with = |ca: &str, identity: Option<&str>| {
        Some(AgentTls {
            ca_file: pki.path(&format!("{ca}.pem")),
            cert_file: identity.map(|i| pki.path(&format!("{i}.pem"))),
            key_file: identity.map(|i| pki.path(&format!("{i}-key.pem"))),
        })
    };

    // The gateway with its client certificate: inventory, a cap, telemetry from /metrics.
    let gateway = tls_backend(&pki, &url, with("ca", Some("gateway"))).expect("backend");
    let jobs = gateway.inventory().await.expect("inventory over mTLS");
    assert_eq!(jobs.len(), 1);
    let r = gateway.apply(&[command("node:n0", 450.0, 1)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);
    let t = gateway.telemetry().await.expect("telemetry over mTLS");
    assert_eq!(t.jobs.len(), 1);
    let capped = |jobs: &[flexgate::cluster::JobState]| jobs[0].applied_cap.value();
    assert_eq!(capped(&gateway.inventory().await.expect("inventory")), 450.0);

    // Without a client certificate, or with one from another CA: the handshake fails, the
    // token never gets a chance, and nothing changes.
    for (who, tls) in [
        ("no client certificate", with("ca", None)),
        ("a client certificate from another CA", with("ca", Some("intruder"))),
    ] {
        let intruder = tls_backend(&pki, &url, tls).expect("backend");
        assert!(intruder.inventory().await.is_err(), "{who}: inventory refused");
        let r = intruder.apply(&[command("node:n0", 300.0, 2)]).await;
        assert!(
            matches!(r[0].outcome, CapOutcome::UnknownJob | CapOutcome::Failed { .. }),
            "{who}: {:?}",
            r[0].outcome
        );
        assert_eq!(
            capped(&gateway.inventory().await.expect("inventory")),
            450.0,
            "{who}: nothing changed"
        );
    }

    // A gateway that does not trust the agent's CA refuses to talk to it.
    let untrusting = tls_backend(&pki, &url, with("other-ca", Some("gateway"))).expect("backend");
    let e = untrusting.inventory().await.expect_err("untrusted agent");
    assert!(e.to_string().contains("n0"), "{e}");

    // Configuration mistakes are refused up front, naming the fix.
    let e = tls_backend(&pki, "http://127.0.0.1:9", with("ca", Some("gateway"))).expect_err("http with tls");
    assert!(e.contains("https://"), "{e}");
    let mut half = with("ca", Some("gateway"));
    if let Some(t) = half.as_mut() {
        t.key_file = None;
    }
    let e = tls_backend(&pki, &url, half).expect_err("cert without key");
    assert!(e.contains("cert_file and key_file"), "{e}");
    let e = tls_backend(&pki, &url, with("missing", None)).expect_err("missing CA file");
    assert!(e.contains("missing.pem"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_token_still_decides_and_plain_http_to_the_tls_port_gets_nothing() {
    let pki = pki();
    let (_stop, rx) = watch::channel(false);
    let url = start_tls_agent("n0", &pki, false, rx).await;
    let tls = Some(AgentTls {
        ca_file: pki.path("ca.pem"),
        cert_file: None,
        key_file: None,
    });
    let gateway = tls_backend(&pki, &url, tls.clone()).expect("backend");
    gateway.inventory().await.expect("inventory over TLS");
    let r = gateway.apply(&[command("node:n0", 500.0, 1)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);

    // The wrong token over a good TLS connection changes nothing.
    std::fs::write(pki.path("agent-token"), "a-wrong-token-of-enough-length").expect("token");
    let wrong = {
        let config = AgentsConfig {
            nodes: vec![AgentNode {
                name: "n0".into(),
                url: url.clone(),
                metrics_url: None,
            }],
            token_file: Some(pki.path("agent-token")),
            timeout_ms: 1_000,
            retries: 0,
            dispatch_deadline_ms: 2_000,
            concurrency: 4,
            renew_every_s: 1,
            slurm: None,
            pfi_predictor: None,
            tls,
        };
        AgentsBackend::new(&config, FacilityModel::new(facility_for_nodes(1)).expect("facility")).expect("backend")
    };
    let e = wrong.inventory().await.expect_err("wrong token");
    assert!(e.to_string().contains("401"), "{e}");
    assert_eq!(
        gateway.inventory().await.expect("inventory")[0].applied_cap.value(),
        500.0
    );

    // Plain HTTP to the TLS port: no answer an HTTP client can use; the agent keeps serving.
    let plain = url.replace("https://", "http://");
    let answer = http().get(format!("{plain}/v1/health")).bearer_auth(TOKEN).send().await;
    assert!(
        answer.is_err() || answer.as_ref().is_ok_and(|r| !r.status().is_success()),
        "{answer:?}"
    );
    gateway.inventory().await.expect("still serving TLS");
}
