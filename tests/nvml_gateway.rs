//! End to end through the agents' real NVML code path: the gateway with two `flexgate-agent`
//! processes, each on its own NVML test double (`tests/nvml_double/`: a test double for a driver
//! that cannot run here, loaded through the dynamic loader), holding a meter ceiling while the
//! "drivers" misbehave in the middle of the event.
//!
//! The site meter is read through a real Prometheus (Debian's, `tests/peers/setup.sh --only
//! prometheus`) from an exporter in this test that knows nothing of the agents: it reads what
//! each double's "driver" enforces (its `state` file) and what each GPU would draw, and turns
//! the GPUs' draw into a meter figure with the facility model at its nominal point. So the meter
//! the audit judges is what the drivers actually held, not what the agents said.
//!
//! 1. An event sets a ceiling at 85 % of the meter; both nodes are capped and confirmed.
//! 2. Node A's driver reloads (every limit back to its default): its agent re-applies the caps;
//!    the gateway records the re-application (`caps_reapplied`).
//! 3. Node B's driver stops applying sets on one GPU (success answered, limit unchanged), and
//!    the ceiling deepens: B's cap is reported unconfirmed as `not_applied` (`/v1/jobs`, the
//!    ledger), B counts at its measured draw, and A is planned deeper to cover it.
//! 4. The audit shows the re-application, the cap not applied, and the meter under the ceiling
//!    in every interval.
//!
//! Fails loudly when the double, Prometheus or the agent binary is missing.

#![allow(
    clippy::disallowed_methods,
    reason = "the test event and its samples run on the wall clock"
)]

mod common;

#[path = "../adapters/prometheus/tests/support/mod.rs"]
mod prometheus_support;

use common::agent::{AgentOptions, AgentProcess, TOKEN, agents_config, http, wait_for};
use flexgate::clock::Clock;
use flexgate::config::{BackendConfig, Config, facility_for_nodes};
use flexgate::meter::{MeterConfig, MeterSourceConfig, PrometheusSource};
use flexgate::serve::Server;
use flexgate_policies::units::Watts;
use serde_json::{Value, json};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const API_TOKEN: &str = "nvml-gateway-test-token-0123456789";
/// GPUs per node, and what each draws uncapped (mW; H200's limits run 200–700 W).
const GPUS: usize = 4;
const DRAW_MW: u32 = 680_000;

/// One node's NVML double: its scripting directory.
struct Double {
    dir: PathBuf,
}

impl Double {
    fn new(root: &Path, name: &str) -> Self {
        let dir = root.join(format!("double-{name}"));
        std::fs::create_dir_all(&dir).expect("double dir");
        std::fs::write(dir.join("gpus"), "h200_sxm persistence=1\n".repeat(GPUS)).expect("gpus");
        let draws: String = (0..GPUS).map(|i| format!("power {i} {DRAW_MW}\n")).collect();
        std::fs::write(dir.join("commands"), draws).expect("commands");
        Self { dir }
    }

    fn command(&self, line: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.join("commands"))
            .expect("commands");
        writeln!(f, "{line}").expect("append");
    }

    /// What the GPUs draw now, W: each GPU's draw under the limit its "driver" enforces. Before
    /// the double has written its state (no NVML call yet), uncapped.
    fn draw_w(&self) -> f64 {
        let state = std::fs::read_to_string(self.dir.join("state")).unwrap_or_default();
        let enforced: Vec<u32> = state
            .lines()
            .filter_map(|l| l.split_whitespace().nth(2).and_then(|v| v.parse().ok()))
            .collect();
        (0..GPUS)
            .map(|i| f64::from(enforced.get(i).copied().unwrap_or(DRAW_MW).min(DRAW_MW)) / 1000.0)
            .sum()
    }
}

/// A Prometheus exporter of the site meter, `site_meter_kw`: the two nodes' GPU draw (from the
/// doubles' driver state) through the facility model at its nominal point.
async fn meter_exporter(doubles: Vec<PathBuf>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let point = facility_for_nodes(2).nominal_point();
    tokio::spawn(async move {
        while let Ok((mut tcp, _)) = listener.accept().await {
            let doubles = doubles.clone();
            tokio::spawn(async move {
                let mut request = vec![0u8; 4096];
                let _ = tcp.read(&mut request).await;
                let gpu_w: f64 = doubles.iter().map(|d| Double { dir: d.clone() }.draw_w()).sum();
                let kw = point.meter_settled(Watts(gpu_w), 2).value();
                let body = format!("# TYPE site_meter_kw gauge\nsite_meter_kw {kw}\n");
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tcp.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr
}

fn event(revision: u64, ceiling_kw: f64) -> Value {
    let start = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({
        "schema": "dr.event/1", "event_id": "ev-nvml", "revision": revision, "site": "site-1",
        "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 3600, "recovery_s": 0}
    })
}

async fn get(server: &Server, path: &str) -> Value {
    http()
        .get(format!("http://{}{path}", server.addr))
        .bearer_auth(API_TOKEN)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
        .json()
        .await
        .unwrap_or_else(|e| panic!("GET {path}: not JSON: {e}"))
}

async fn submit(server: &Server, body: &Value) {
    let r = http()
        .post(format!("http://{}/v1/events", server.addr))
        .bearer_auth(API_TOKEN)
        .json(body)
        .send()
        .await
        .expect("POST /v1/events");
    let status = r.status();
    assert!(
        status.is_success(),
        "POST /v1/events: {status}: {}",
        r.text().await.unwrap_or_default()
    );
}

/// The job of `node` in `GET /v1/jobs`.
async fn job(server: &Server, node: &str) -> Value {
    let jobs = get(server, "/v1/jobs").await;
    jobs.as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == format!("node:{node}")))
        .cloned()
        .unwrap_or_else(|| panic!("no job for {node} in {jobs}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_on_the_nvml_double_hold_a_ceiling_through_a_driver_reload_and_a_set_without_effect() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (double_a, double_b) = (Double::new(dir.path(), "a"), Double::new(dir.path(), "b"));
    let on = |d: &Double| AgentOptions {
        nvml_double: Some(d.dir.clone()),
        ..AgentOptions::default()
    };
    let a = AgentProcess::start(&dir.path().join("a"), "nv-a", &on(&double_a));
    let b = AgentProcess::start(&dir.path().join("b"), "nv-b", &on(&double_b));
    assert_eq!(a.gpus().await.len(), GPUS, "the agent lists the double's GPUs");

    let exporter = meter_exporter(vec![double_a.dir.clone(), double_b.dir.clone()]).await;
    let prometheus = prometheus_support::prometheus(exporter).await;
    let mut config = Config::default();
    config.gateway.data_dir = dir.path().join("data");
    config.gateway.api_token = API_TOKEN.into();
    config.gateway.telemetry_interval_s = 1;
    config.facility = facility_for_nodes(2);
    config.meter = Some(MeterConfig {
        max_age_s: 5.0,
        sources: vec![MeterSourceConfig::Prometheus(PrometheusSource {
            id: "site".into(),
            sign: 1.0,
            poll_s: 0.5,
            timeout_ms: 1_000,
            url: prometheus.url.clone(),
            query: "site_meter_kw".into(),
        })],
    });
    let token_file = dir.path().join("agents.token");
    std::fs::write(&token_file, TOKEN).expect("token file");
    config.backend = BackendConfig::Agents(agents_config(&[&a, &b], token_file, None, 1));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("the gateway starts");

    let uncapped_kw = wait_for("a measured meter", Duration::from_secs(40), || async {
        let s = get(&server, "/v1/status").await;
        match (s["meter_quality"].as_str(), s["measured_meter_w"].as_f64()) {
            (Some("measured"), Some(w)) if s["jobs"] == 2 => Ok(w / 1000.0),
            _ => Err(format!("{s}")),
        }
    })
    .await;

    // 1. A ceiling at 85 % of the meter: both nodes capped, confirmed, the meter under it.
    let ceiling_1 = 0.85 * uncapped_kw;
    submit(&server, &event(1, ceiling_1)).await;
    let under = |ceiling: f64| {
        let server = &server;
        move || async move {
            let s = get(server, "/v1/status").await;
            let (ja, jb) = (job(server, "nv-a").await, job(server, "nv-b").await);
            let meter = s["measured_meter_w"].as_f64().unwrap_or(f64::INFINITY) / 1000.0;
            let capped = |j: &Value| j["confirmed"] == true && j["cap_w_per_gpu"].as_f64().unwrap_or(700.0) < 699.0;
            if capped(&ja) && capped(&jb) && meter <= ceiling {
                Ok(meter)
            } else {
                Err(format!("meter {meter:.2} kW, ceiling {ceiling:.2} kW; jobs {ja} {jb}"))
            }
        }
    };
    let meter_1 = wait_for(
        "both nodes capped, meter under the ceiling",
        Duration::from_secs(30),
        under(ceiling_1),
    )
    .await;
    let held_1 = chrono::Utc::now();
    let cap_a_1 = job(&server, "nv-a").await["cap_w_per_gpu"].as_f64().expect("A's cap");
    eprintln!("ceiling {ceiling_1:.2} kW (85 % of {uncapped_kw:.2}): meter {meter_1:.2} kW, both caps confirmed");

    // 2. Node A's driver reloads: every limit back to its default (700 W). The agent re-applies
    //    its caps and the gateway records it.
    let before = a.gpus().await.iter().map(|g| g.drift_corrections).sum::<u64>();
    let reload_at = chrono::Utc::now();
    double_a.command("reload");
    let corrections = wait_for(
        "node A's agent re-applied its caps",
        Duration::from_secs(10),
        || async {
            let gpus = a.gpus().await;
            let now: u64 = gpus.iter().map(|g| g.drift_corrections).sum();
            let held = gpus.iter().all(|g| g.limit_w.is_some_and(|l| l < 699.0));
            if now >= before + GPUS as u64 && held {
                Ok(now - before)
            } else {
                Err(format!("{gpus:?}"))
            }
        },
    )
    .await;
    let reapplied = wait_for(
        "the gateway recorded the re-application",
        Duration::from_secs(10),
        || async {
            let ja = job(&server, "nv-a").await;
            match ja["cap_reapplied"].as_u64() {
                Some(n) if n >= corrections => Ok(n),
                _ => Err(format!("{ja}")),
            }
        },
    )
    .await;
    let reapplied_at = chrono::Utc::now();
    eprintln!("driver reload on node A: {corrections} caps re-applied by the agent, {reapplied} seen by the gateway");
    // Hold the event a while after the re-application, so the meter shows the caps holding.
    tokio::time::sleep(Duration::from_secs(8)).await;

    // 3. Node B's GPU 0 stops applying sets; a deeper ceiling sends new caps.
    double_b.command("ignore_set 0 1");
    let ceiling_2 = 0.80 * uncapped_kw;
    let revised = chrono::Utc::now();
    submit(&server, &event(2, ceiling_2)).await;
    let jb = wait_for("node B's cap reported not applied", Duration::from_secs(20), || async {
        let jb = job(&server, "nv-b").await;
        if jb["confirmed"] == false && jb["unconfirmed"] == "not_applied" {
            Ok(jb)
        } else {
            Err(format!("{jb}"))
        }
    })
    .await;
    // B counts at its measured draw and A covers it: the meter comes under the new ceiling.
    let meter_2 = wait_for(
        "the meter under the deeper ceiling",
        Duration::from_secs(30),
        || async {
            let s = get(&server, "/v1/status").await;
            let meter = s["measured_meter_w"].as_f64().unwrap_or(f64::INFINITY) / 1000.0;
            let ja = job(&server, "nv-a").await;
            if meter <= ceiling_2 && ja["confirmed"] == true {
                Ok(meter)
            } else {
                Err(format!("meter {meter:.2} kW, ceiling {ceiling_2:.2} kW; A {ja}"))
            }
        },
    )
    .await;
    let held_2 = chrono::Utc::now();
    tokio::time::sleep(Duration::from_secs(7)).await;
    let cap_a = job(&server, "nv-a").await["cap_w_per_gpu"].as_f64().expect("A's cap");
    assert!(cap_a < cap_a_1, "A covers B's shortfall: {cap_a_1} → {cap_a} W/GPU");
    eprintln!(
        "set without effect on node B: B unconfirmed ({}), A planned deeper ({cap_a_1:.0} → {cap_a:.0} W/GPU), meter {meter_2:.2} kW under {ceiling_2:.2} kW",
        jb["unconfirmed"]
    );
    // The ledger's last plan counts B's draw as fixed load.
    let fixed_w = server
        .gateway
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.body["entry"] == "plan")
        .filter_map(|r| r.body["unconfirmed_fixed_w"].as_f64())
        .last()
        .expect("a plan");
    assert!(fixed_w > 0.0, "the last plan counts B as fixed load");

    // 4. The audit: the re-application, the cap not applied, the meter under the ceiling.
    let audit = get(&server, "/v1/events/ev-nvml/audit").await;
    let faults = audit["cap_faults"].as_array().cloned().unwrap_or_default();
    let has = |job: &str, kind: &str| faults.iter().any(|f| f["job"] == job && f["kind"] == kind);
    assert!(has("node:nv-a", "reapplied"), "{faults:?}");
    assert!(has("node:nv-b", "not_applied"), "{faults:?}");
    let intervals = audit["intervals"].as_array().cloned().unwrap_or_default();
    assert!(!intervals.is_empty(), "{audit}");
    // The meter as recorded: under the ceiling while the caps held, before the reload and from
    // the moment the re-applied caps reach the meter (its path: the exporter, Prometheus's 1 s
    // scrape, the gateway's 0.5 s poll and 1 s telemetry: within 3 s); in between, the GPUs of
    // node A ran at the driver's default limit until the agent's watchdog (1 s) re-applied the
    // caps, which the meter may show. The interval's mean, what a program settles on, stays
    // under the ceiling.
    let series = audit["series"].as_array().cloned().unwrap_or_default();
    let at = |p: &Value| {
        p[0].as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&chrono::Utc))
    };
    let settle = chrono::TimeDelta::seconds(3);
    let in_window = |from: chrono::DateTime<chrono::Utc>, to: chrono::DateTime<chrono::Utc>| -> Vec<(f64, f64)> {
        series
            .iter()
            .filter(|p| at(p).is_some_and(|t| t >= from && t < to))
            .filter_map(|p| Some((p[1].as_f64()?, p[2].as_f64()?)))
            .collect()
    };
    let before_reload = in_window(held_1, reload_at);
    let transient = in_window(reload_at, reapplied_at + settle);
    let after_reload = in_window(reapplied_at + settle, revised);
    let second = in_window(held_2 + settle, chrono::Utc::now());
    let over = |samples: &[(f64, f64)]| samples.iter().filter(|(m, c)| m > &(c + 1e-9)).count();
    let peak = transient.iter().map(|(m, _)| *m).fold(f64::NAN, f64::max);
    eprintln!(
        "meter samples: {} before the reload ({} over), {} during it (peak {peak:.2} kW against {ceiling_1:.2} kW), \
         {} after the re-application ({} over), {} under the second ceiling ({} over)",
        before_reload.len(),
        over(&before_reload),
        transient.len(),
        after_reload.len(),
        over(&after_reload),
        second.len(),
        over(&second)
    );
    assert_eq!(over(&before_reload), 0, "{series:?}");
    assert!(after_reload.len() >= 3, "{series:?}");
    assert_eq!(
        over(&after_reload),
        0,
        "the re-applied caps hold the meter under the ceiling: {series:?}"
    );
    assert!(!second.is_empty(), "{series:?}");
    assert_eq!(over(&second), 0, "{series:?}");
    for i in &intervals {
        if let (Some(mean), Some(ceiling)) = (i["mean_meter_kw"].as_f64(), i["ceiling_kw"].as_f64()) {
            eprintln!("interval {}: mean {mean:.2} kW under {ceiling:.2} kW", i["index"]);
            assert!(mean <= ceiling, "{i}");
        }
    }
    server.shutdown().await;
    drop(prometheus);
}
