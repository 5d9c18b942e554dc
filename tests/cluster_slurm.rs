//! The gateway on real processes (issue 6): a real single-node Slurm (8 fake GPUs, node
//! `localhost`), real `flexgate-agent` processes with simulated GPUs, and the gateway either
//! in-process or as the real `flexgate run` binary, all on 127.0.0.1.
//!
//! - an event caps exactly the GPUs of the chosen Slurm jobs (GRES index → device minor) at the
//!   planned values, and no other GPU;
//! - a job that ends mid-event gets its GPUs' pre-event limits back and the budget re-planned;
//! - the gateway SIGKILLed mid-event: the agent restores every pre-event limit once the lease
//!   TTL (three renew periods) has passed, not at once and not much later;
//! - an agent SIGKILLed mid-event: its job counts at its maximum draw, unconfirmed, and the
//!   confirmed job is capped deeper (no Slurm: it has one node, this needs two);
//! - out-of-range caps are clamped and reported; a refused token changes nothing;
//! - untagged jobs get a PFI predicted from the agents' `/metrics` (DRAM activity × memory-copy
//!   utilisation of their uncapped run) and the more flexible one is cut deeper;
//! - the commented `type = "agents"` example of deploy/flexgate.toml loads.
//!
//! - a Slurm job tagged with a 10 % tier, told very flexible (PFI 2.67) but whose real throughput
//!   (a Python loop reporting through the agent, its speed following its GPUs' limit) falls as
//!   fast as its cap, is measured beyond its tier under the event's cap and backed off in the
//!   same control pass, and keeps its tier at the new cap.
//!
//! Slurm is started by tests/peers/slurm.sh; only one can run on the machine, so the test
//! functions that need it take [`SLURM`] first. Missing Slurm, agent binary or python3 fails,
//! never skips.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

mod common;

use common::agent::{AgentOptions, AgentProcess, KillOnDrop, READ_TOKEN, TOKEN, job_token, wait_for};
use common::slurm::Slurm;
use flexgate::cluster::agents::{AgentsBackend, AgentsConfig, SlurmMapping};
use flexgate::cluster::{CapCommand, CapOutcome, ClusterBackend};
use flexgate::config::{BackendConfig, Config, facility_for_nodes};
use flexgate::http_client::request;
use flexgate::ledger::RecordKind;
use flexgate::runtime::{Clock, JobView, PlanView, Transport};
use flexgate::serve::Server;
use flexgate_agent::api::GpuStatus;
use flexgate_policies::facility::FacilityModel;
use flexgate_policies::units::WattsPerGpu;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SITE: &str = "site-1";
const API_TOKEN: &str = "cluster-test-api-token-0123";
/// Lease renewal period; the TTL is three of them.
const RENEW_S: u64 = 1;
const TTL: Duration = Duration::from_secs(3 * RENEW_S);
/// The gateway's telemetry and inventory period (its control tick).
const TICK: Duration = Duration::from_secs(1);
/// One single-node Slurm per machine: the tests that start one take this first.
static SLURM: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

fn event(id: &str, revision: u64, ceiling_kw: f64) -> Vec<u8> {
    let start = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    serde_json::to_vec(&json!({
        "schema": "dr.event/1", "event_id": id, "revision": revision, "site": SITE,
        "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 600, "recovery_s": 0}
    }))
    .expect("event JSON")
}

fn agents_config(agents: &[&AgentProcess], token_file: PathBuf, slurm: Option<SlurmMapping>) -> AgentsConfig {
    common::agent::agents_config(agents, token_file, slurm, RENEW_S)
}

/// A gateway config over `backend`: 1 s ticks, the facility model sized to `nodes`, and no
/// closed-loop trim (settle time of an hour) so that plans change only for the reasons tested.
fn gateway_config(data: &Path, backend: AgentsConfig, nodes: u32) -> Config {
    let mut config = Config::default();
    config.gateway.data_dir = data.to_path_buf();
    config.gateway.api_token = API_TOKEN.into();
    config.gateway.site = SITE.into();
    config.gateway.telemetry_interval_s = TICK.as_secs();
    config.facility = facility_for_nodes(nodes);
    config.control.settle_s = 3600;
    config.backend = BackendConfig::Agents(backend);
    config
}

fn token_file(dir: &Path, name: &str, token: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, token).expect("token file");
    path
}

async fn start_gateway(config: Config) -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    Server::start(config, Clock::real(), None, listener)
        .await
        .unwrap_or_else(|e| panic!("the gateway did not start: {e}"))
}

async fn submit(server: &Server, id: &str, ceiling_kw: f64) {
    let outcome = server
        .gateway
        .driver()
        .submit(
            flexgate::grid::dr_event::submission(
                &event(id, 1, ceiling_kw),
                flexgate_policies::event::EventSource::Http,
            ),
            Transport::Http { peer: None },
        )
        .await
        .unwrap_or_else(|e| panic!("event {id} refused: {e}"));
    let ack = serde_json::to_value(&outcome.ack).expect("ack JSON");
    assert_eq!(ack["opt"], "in", "{ack}");
}

/// Waits for a meter figure and the jobs `want` (id, GPUs) in the gateway's inventory. With
/// agents and no meter source the figure is the facility model's, and says so.
async fn wait_inventory(server: &Server, want: &[(String, u32)]) -> f64 {
    wait_for("the gateway's inventory and meter", Duration::from_secs(20), || async {
        let jobs = server.gateway.read().jobs().await;
        let status = server.gateway.read().status().await;
        assert!(
            status.measured_meter_kw().is_none(),
            "a model's figure is never called measured"
        );
        if let Some(quality) = status.meter_quality {
            assert_eq!(quality, flexgate_policies::meter::Quality::Model);
        }
        let meter = status.meter_kw();
        let found = want
            .iter()
            .all(|(id, n)| jobs.iter().any(|j| &j.id == id && j.gpus == *n));
        match meter {
            Some(kw) if found && jobs.len() == want.len() => Ok(kw),
            _ => Err(format!("jobs {}, meter {meter:?}", brief_jobs(&jobs))),
        }
    })
    .await
}

fn brief_jobs(jobs: &[JobView]) -> String {
    let rows: Vec<String> = jobs
        .iter()
        .map(|j| {
            format!(
                "{}: {} GPUs on {:?}, cap {:.1} W{}, measured {:.0} W, gen {}",
                j.id,
                j.gpus,
                j.nodes,
                j.cap_w_per_gpu,
                if j.confirmed { "" } else { " UNCONFIRMED" },
                j.measured_power_w,
                j.generation
            )
        })
        .collect();
    format!("[{}]", rows.join("; "))
}

fn brief_plan(plan: Option<&PlanView>) -> String {
    plan.map_or("none".into(), |p| {
        let caps: Vec<String> = p
            .entries
            .iter()
            .map(|e| format!("{} {:.1} W", e.job, e.cap_w_per_gpu))
            .collect();
        format!(
            "generation {:?} budget {:.0} W shortfall {:.0} W caps [{}]",
            p.generation,
            p.gpu_budget_w.unwrap_or(0.0),
            p.shortfall_w,
            caps.join(", ")
        )
    })
}

fn brief_gpus(gpus: &[GpuStatus]) -> String {
    let rows: Vec<String> = gpus
        .iter()
        .map(|g| {
            format!(
                "{}:{:.1}{}",
                g.minor,
                g.limit_w.unwrap_or(f64::NAN),
                if g.held_by.is_empty() {
                    String::new()
                } else {
                    format!("({})", g.held_by.join("+"))
                }
            )
        })
        .collect();
    rows.join(" ")
}

fn cap_of(plan: &PlanView, job: &str) -> Option<f64> {
    plan.entries.iter().find(|e| &*e.job == job).map(|e| e.cap_w_per_gpu)
}

/// What a GPU's limit must be under a planned per-GPU cap: the cap, or (at the range maximum,
/// which the backend sends as a release) the pre-event limit.
fn expected_limit(cap: f64, pre_event: f64) -> f64 {
    if cap >= 700.0 - 0.5 { pre_event } else { cap }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 0.01
}

/// Device minors of a Slurm job's GPUs, from `scontrol -d show job` (`IDX:0-1` or `IDX:0,2`),
/// mapped through gres.conf (here `File=…/nvidia[0-7]`: index i is minor i).
fn slurm_minors(slurm: &Slurm, job: u32) -> Vec<u32> {
    let out = Command::new("scontrol")
        .env("SLURM_CONF", slurm.conf())
        .args(["-d", "show", "job", &job.to_string()])
        .output()
        .expect("scontrol runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let idx = text
        .split("IDX:")
        .nth(1)
        .and_then(|rest| rest.split(')').next())
        .unwrap_or_else(|| panic!("no IDX in `scontrol -d show job {job}`:\n{text}"));
    let mut minors = Vec::new();
    for part in idx.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (
                    a.trim().parse().expect("IDX range start"),
                    b.trim().parse().expect("IDX range end"),
                );
                minors.extend(a..=b);
            }
            None => minors.push(part.trim().parse().expect("IDX")),
        }
    }
    let gres = std::fs::read_to_string(slurm.gres_conf()).expect("gres.conf");
    let conf = flexgate_slurm::parse_gres_conf(&gres).expect("gres.conf parses");
    let listed = conf.node_minors("localhost").expect("gres.conf lists localhost");
    minors.iter().map(|&i| listed[i as usize]).collect()
}

/// Records of `kind` in the in-process gateway's ledger.
fn records(server: &Server, kind: RecordKind) -> Vec<(u64, Value)> {
    server
        .gateway
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.kind == kind)
        .map(|r| (r.seq, r.body))
        .collect()
}

/// Dispatch rows (job, cap_w, generation, status, applied_w, detail) from the ledger.
fn dispatch_rows(server: &Server) -> Vec<Value> {
    records(server, RecordKind::Dispatch)
        .into_iter()
        .flat_map(|(_, body)| body["rows"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// The real `flexgate run` binary, SIGKILLed on drop.
struct GatewayProcess {
    child: Option<Child>,
    addr: SocketAddr,
}

impl GatewayProcess {
    fn start(config: &Config, data: &Path) -> GatewayProcess {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], flexgate_etcd::testing::spare_port()));
        let file = data.with_extension("toml");
        let mut config = config.clone();
        config.gateway.api_token = String::new();
        std::fs::write(&file, toml::to_string(&config).expect("config as TOML")).expect("config file");
        // What the binary will read is what was meant.
        let loaded = Config::load(Some(&file)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(loaded.backend, config.backend);
        let child = Command::new(env!("CARGO_BIN_EXE_flexgate"))
            .args(["run", "--config", file.to_str().expect("utf-8")])
            .args(["--data", data.to_str().expect("utf-8"), "--listen", &addr.to_string()])
            .env("FLEXGATE_API_TOKEN", API_TOKEN)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("flexgate run starts");
        GatewayProcess {
            child: Some(child),
            addr,
        }
    }

    async fn get(&self, path: &str) -> Value {
        match request(self.addr, "GET", path, None, None).await {
            Ok(r) if r.status == 200 => r.json().unwrap_or(Value::Null),
            _ => Value::Null,
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the gateway");
            let _ = child.wait();
        }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// Slurm: caps on the right GPUs, job end, gateway killed
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slurm_jobs_are_capped_on_their_gpus_released_when_they_end_and_when_the_gateway_dies() {
    let _one_slurm = SLURM.lock().await;
    let t_all = Instant::now();
    let slurm = Slurm::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // Pre-event limits that are not the default, so that "restored" means the limit the GPU had.
    let agent = AgentProcess::start(
        &dir.path().join("agent"),
        "localhost",
        &AgentOptions {
            initial_limit_w: vec![(0, 650.0), (3, 600.0), (6, 500.0)],
            ..AgentOptions::default()
        },
    );
    let pre_event = agent.limits().await;
    assert_eq!(pre_event, vec![650.0, 700.0, 700.0, 600.0, 700.0, 700.0, 500.0, 700.0]);

    let j1 = slurm.sbatch(&["--gres=gpu:2", "--comment", "flexgate:pfi=2.5", "--wrap", "sleep 600"]);
    let j2 = slurm.sbatch(&["--gres=gpu:3", "--comment", "flexgate:pfi=1.2", "--wrap", "sleep 600"]);
    slurm.wait_running(&[j1, j2]);
    let (m1, m2) = (slurm_minors(&slurm, j1), slurm_minors(&slurm, j2));
    assert_eq!((m1.as_slice(), m2.as_slice()), (&[0, 1][..], &[2, 3, 4][..]));
    let (id1, id2) = (j1.to_string(), j2.to_string());
    let mapping = SlurmMapping {
        inventory: slurm.inventory_json(),
        gres_conf: Some(slurm.gres_conf()),
    };
    let backend = agents_config(&[&agent], token_file(dir.path(), "agent.token", TOKEN), Some(mapping));

    // 1. An event caps exactly the jobs' GPUs at the planned values.
    let t0 = Instant::now();
    let server = start_gateway(gateway_config(&dir.path().join("gw"), backend.clone(), 1)).await;
    let meter = wait_inventory(&server, &[(id1.clone(), 2), (id2.clone(), 3)]).await;
    let jobs = server.gateway.read().jobs().await;
    for (id, pfi) in [(&id1, "PFI 2.50"), (&id2, "PFI 1.20")] {
        let job = jobs.iter().find(|j| &j.id == id).expect("job listed");
        assert_eq!(job.nodes, vec!["localhost".to_string()], "{}", brief_jobs(&jobs));
        assert_eq!(
            job.elasticity,
            pfi,
            "flex tag from the Slurm comment: {}",
            brief_jobs(&jobs)
        );
    }
    let ceiling = (meter - 2.0).max(0.5);
    submit(&server, "ev-slurm", ceiling).await;
    let lease = |id: &str| format!("flexgate-{id}");
    let (plan1, gpus1) = wait_for(
        "a plan in force, confirmed, with the agent's GPUs at its caps",
        Duration::from_secs(15),
        || async {
            let plan = server.gateway.read().plan().await;
            let jobs = server.gateway.read().jobs().await;
            let gpus = agent.gpus().await;
            let seen = || {
                format!(
                    "plan {}; jobs {}; GPUs {}",
                    brief_plan(plan.as_ref()),
                    brief_jobs(&jobs),
                    brief_gpus(&gpus)
                )
            };
            let Some(p) = plan.as_ref() else { return Err(seen()) };
            let (Some(c1), Some(c2)) = (cap_of(p, &id1), cap_of(p, &id2)) else {
                return Err(seen());
            };
            let confirmed = jobs.iter().all(|j| j.confirmed);
            let on_gpus = gpus.iter().all(|g| {
                let m = g.minor as usize;
                let (want, holder) = if m1.contains(&g.minor) {
                    (expected_limit(c1, pre_event[m]), (c1 < 699.5).then(|| lease(&id1)))
                } else if m2.contains(&g.minor) {
                    (expected_limit(c2, pre_event[m]), (c2 < 699.5).then(|| lease(&id2)))
                } else {
                    (pre_event[m], None)
                };
                g.limit_w.is_some_and(|l| close(l, want)) && g.held_by == holder.into_iter().collect::<Vec<_>>()
            });
            // The plan must not have moved while the GPUs were read.
            let still = server
                .gateway
                .read()
                .plan()
                .await
                .is_some_and(|q| q.generation == p.generation);
            if confirmed && on_gpus && still {
                Ok((p.clone(), gpus))
            } else {
                Err(seen())
            }
        },
    )
    .await;
    let (c1, c2) = (cap_of(&plan1, &id1).unwrap_or(0.0), cap_of(&plan1, &id2).unwrap_or(0.0));
    assert!(
        c1 < 699.5 && c2 < 699.5,
        "the ceiling {ceiling:.2} kW (meter {meter:.2} kW) should cap both jobs: {}",
        brief_plan(Some(&plan1))
    );
    eprintln!(
        "1. caps on the jobs' GPUs in {:.1} s: ceiling {ceiling:.2} kW (meter {meter:.2} kW), {}; GPUs {}",
        t0.elapsed().as_secs_f64(),
        brief_plan(Some(&plan1)),
        brief_gpus(&gpus1)
    );

    // 2. Job 1 ends mid-event: its GPUs get their pre-event limits back, the budget is re-planned.
    let t0 = Instant::now();
    slurm.scancel(j1);
    let plan2 = wait_for(
        "job 1's GPUs restored and a new plan for job 2 alone",
        Duration::from_secs(10),
        || async {
            let plan = server.gateway.read().plan().await;
            let jobs = server.gateway.read().jobs().await;
            let gpus = agent.gpus().await;
            let seen = || {
                format!(
                    "plan {}; jobs {}; GPUs {}",
                    brief_plan(plan.as_ref()),
                    brief_jobs(&jobs),
                    brief_gpus(&gpus)
                )
            };
            let Some(p) = plan.as_ref() else { return Err(seen()) };
            let Some(c2) = cap_of(p, &id2) else { return Err(seen()) };
            let ok = p.generation != plan1.generation
                && p.entries.len() == 1
                && jobs.len() == 1
                && jobs.iter().all(|j| j.confirmed)
                && gpus.iter().all(|g| {
                    let m = g.minor as usize;
                    let want = if m2.contains(&g.minor) {
                        expected_limit(c2, pre_event[m])
                    } else {
                        pre_event[m]
                    };
                    g.limit_w.is_some_and(|l| close(l, want)) && (m2.contains(&g.minor) || g.held_by.is_empty())
                });
            if ok { Ok(p.clone()) } else { Err(seen()) }
        },
    )
    .await;
    let c2_after = cap_of(&plan2, &id2).unwrap_or(0.0);
    assert!(
        c2_after >= c2 - 0.5,
        "the budget job 1 freed goes to job 2: cap {c2:.1} W before, {c2_after:.1} W after"
    );
    eprintln!(
        "2. job {j1} ended: GPUs {m1:?} restored and re-planned in {:.1} s: {}",
        t0.elapsed().as_secs_f64(),
        brief_plan(Some(&plan2))
    );
    // The in-process gateway goes; nobody renews its leases, so they expire and the GPUs come back.
    server.shutdown().await;
    wait_for(
        "every GPU back at its pre-event limit",
        TTL + Duration::from_secs(5),
        || async {
            let gpus = agent.gpus().await;
            let limits: Vec<f64> = gpus.iter().map(|g| g.limit_w.unwrap_or(f64::NAN)).collect();
            if limits == pre_event && gpus.iter().all(|g| g.held_by.is_empty()) {
                Ok(())
            } else {
                Err(brief_gpus(&gpus))
            }
        },
    )
    .await;

    // 3. The real gateway binary, SIGKILLed mid-event: the agent restores every pre-event limit
    // when the lease expires, after about the TTL.
    let t0 = Instant::now();
    let data = dir.path().join("gw-binary");
    let mut gateway = GatewayProcess::start(&gateway_config(&data, backend, 1), &data);
    let meter = wait_for(
        "the gateway binary's inventory and meter",
        Duration::from_secs(30),
        || async {
            let status = gateway.get("/v1/status").await;
            let jobs = gateway.get("/v1/jobs").await;
            let listed = jobs
                .as_array()
                .is_some_and(|j| j.iter().any(|j| j["id"] == id2.as_str() && j["gpus"] == 3));
            // Agents without a meter source: the facility model's figure, named as such.
            match status["meter_w"].as_f64().map(|w| w / 1000.0) {
                Some(kw) if listed && status["meter_quality"] == "model" => Ok(kw),
                _ => Err(format!("status {status}; jobs {jobs}")),
            }
        },
    )
    .await;
    let ceiling = (meter - 2.0).max(0.5);
    let r = request(
        gateway.addr,
        "POST",
        "/v1/events",
        Some(API_TOKEN),
        Some(&event("ev-kill", 1, ceiling)),
    )
    .await
    .expect("POST /v1/events");
    assert_eq!(r.status, 200, "{}", r.text());
    let cap = wait_for("the binary's caps on job 2's GPUs", Duration::from_secs(15), || async {
        let plan = gateway.get("/v1/plan").await;
        let jobs = gateway.get("/v1/jobs").await;
        let gpus = agent.gpus().await;
        let seen = || format!("plan {plan}; jobs {jobs}; GPUs {}", brief_gpus(&gpus));
        let cap = plan["entries"]
            .as_array()
            .and_then(|e| e.iter().find(|e| e["job"] == id2.as_str()))
            .and_then(|e| e["cap_w_per_gpu"].as_f64());
        let Some(cap) = cap.filter(|c| *c < 699.5) else {
            return Err(seen());
        };
        let confirmed = jobs
            .as_array()
            .is_some_and(|j| j.iter().all(|j| j["confirmed"] == true));
        let capped = gpus.iter().all(|g| {
            let want = if m2.contains(&g.minor) {
                cap
            } else {
                pre_event[g.minor as usize]
            };
            g.limit_w.is_some_and(|l| close(l, want))
        });
        if confirmed && capped { Ok(cap) } else { Err(seen()) }
    })
    .await;
    eprintln!(
        "3. the gateway binary capped job {j2} at {cap:.1} W in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    // The binary renews its lease (its expiry moves on), then dies without a word.
    let lease2 = lease(&id2);
    let first = agent.lease_expiry(&lease2).await;
    wait_for(
        "a renewal of the binary's lease",
        Duration::from_secs(RENEW_S) * 3,
        || async {
            match agent.lease_expiry(&lease2).await {
                Some(t) if first.is_some_and(|f| t > f) => Ok(()),
                other => Err(format!("lease {lease2} expires at {other:?} (first seen {first:?})")),
            }
        },
    )
    .await;
    let killed = Instant::now();
    gateway.kill();
    // A renewal the agent was still reading may land after the kill: the last expiry seen counts.
    let expiry = std::sync::Mutex::new(None);
    let held_until = std::sync::Mutex::new(Duration::ZERO);
    let (restored, restored_at) = wait_for(
        "pre-event limits back after the gateway's SIGKILL",
        TTL + Duration::from_secs(5),
        || async {
            let gpus = agent.gpus().await;
            let now = chrono::Utc::now();
            let limits: Vec<f64> = gpus.iter().map(|g| g.limit_w.unwrap_or(f64::NAN)).collect();
            if limits == pre_event && gpus.iter().all(|g| g.held_by.is_empty()) {
                return Ok((killed.elapsed(), now));
            }
            if let Some(t) = agent.lease_expiry(&lease2).await {
                *expiry.lock().expect("lock") = Some(t);
            }
            let still_capped = gpus.iter().all(|g| {
                let want = if m2.contains(&g.minor) {
                    cap
                } else {
                    pre_event[g.minor as usize]
                };
                g.limit_w.is_some_and(|l| close(l, want))
            });
            assert!(
                still_capped,
                "caps changed before the lease ended: {}",
                brief_gpus(&gpus)
            );
            *held_until.lock().expect("lock") = killed.elapsed();
            Err(brief_gpus(&gpus))
        },
    )
    .await;
    let expiry = expiry.lock().expect("lock").expect("the lease was seen after the kill");
    eprintln!(
        "3. gateway SIGKILLed: caps held for {:.2} s, pre-event limits back after {:.2} s (TTL {} s), {:.2} s after the lease's expiry",
        held_until.lock().expect("lock").as_secs_f64(),
        restored.as_secs_f64(),
        TTL.as_secs(),
        (restored_at - expiry).num_milliseconds() as f64 / 1000.0
    );
    assert!(
        restored_at >= expiry,
        "limits restored at {restored_at}, before the lease expired at {expiry}"
    );
    assert!(
        restored >= TTL / 2,
        "the lease ended {:.2} s after the kill, before half its TTL: the caps did not outlive the gateway",
        restored.as_secs_f64()
    );
    assert!(
        restored <= TTL + Duration::from_secs(2),
        "pre-event limits came back {:.2} s after the kill, later than TTL + 2 s",
        restored.as_secs_f64()
    );
    assert!(
        agent.stderr().contains("dead-man switch"),
        "the agent says why it restored"
    );

    // 4. Caps alone cannot meet a deep ceiling: the job whose tier allows it is suspended
    //    through Slurm, the other is not, and both run again when the event ends.
    let t0 = Instant::now();
    let j3 = slurm.sbatch(&[
        "--gres=gpu:3",
        "--comment",
        "flexgate:tier=batch",
        "--wrap",
        "sleep 600",
    ]);
    slurm.wait_running(&[j3]);
    let id3 = j3.to_string();
    let mut inventory = slurm.inventory_json();
    inventory["suspendable_tiers"] = json!(["batch"]);
    let backend = agents_config(
        &[&agent],
        token_file(dir.path(), "agent.token", TOKEN),
        Some(SlurmMapping {
            inventory,
            gres_conf: Some(slurm.gres_conf()),
        }),
    );
    let server = start_gateway(gateway_config(&dir.path().join("gw4"), backend, 1)).await;
    wait_inventory(&server, &[(id2.clone(), 3), (id3.clone(), 3)]).await;
    // A GPU budget of 300 W for 6 GPUs whose minimum is 200 W each: caps leave a shortfall.
    let facility = flexgate_policies::facility::FacilityModel::new(facility_for_nodes(1)).expect("facility");
    let deep = facility
        .forward(
            flexgate_policies::units::Watts(300.0),
            1,
            &flexgate_policies::facility::CoolingState::Settled,
        )
        .expect("meter estimate")
        .hi
        .value();
    let start = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let short = serde_json::to_vec(&json!({
        "schema": "dr.event/1", "event_id": "ev-deep", "revision": 1, "site": SITE,
        "target": {"form": "ceiling", "point": "meter", "kw": deep},
        "window": {"start": start, "ramp_s": 0, "duration_s": 8, "recovery_s": 0}
    }))
    .expect("event JSON");
    server
        .gateway
        .driver()
        .submit(
            flexgate::grid::dr_event::submission(&short, flexgate_policies::event::EventSource::Http),
            Transport::Http { peer: None },
        )
        .await
        .expect("deep event accepted");
    let state_of = |id: u32| {
        slurm
            .states()
            .into_iter()
            .find(|(j, _)| *j == id)
            .map(|(_, s)| s)
            .unwrap_or_default()
    };
    wait_for(
        "the batch-tier job suspended by Slurm",
        Duration::from_secs(10),
        || async {
            let (s2, s3) = (state_of(j2), state_of(j3));
            if s3 == "SUSPENDED" {
                Ok(())
            } else {
                Err(format!(
                    "job {j2} {s2}, job {j3} {s3}; plan {}",
                    brief_plan(server.gateway.read().plan().await.as_ref())
                ))
            }
        },
    )
    .await;
    assert_eq!(
        state_of(j2),
        "RUNNING",
        "a job without a suspendable tier is never suspended"
    );
    let suspended_at = t0.elapsed();
    wait_for(
        "the suspended job resumed after the event",
        Duration::from_secs(20),
        || async {
            let s3 = state_of(j3);
            if s3 == "RUNNING" {
                Ok(())
            } else {
                Err(format!("job {j3} {s3}"))
            }
        },
    )
    .await;
    eprintln!(
        "4. deep ceiling {deep:.2} kW: job {j3} (tier batch) SUSPENDED after {:.1} s, job {j2} kept running; resumed after the event, {:.1} s in all",
        suspended_at.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    server.shutdown().await;

    eprintln!(
        "Slurm scenarios in {:.1} s (Slurm stops next)",
        t_all.elapsed().as_secs_f64()
    );
    drop(agent);
    drop(slurm);
}

// ---------------------------------------------------------------------------------------------
// No Slurm (one job per node): an agent killed mid-event
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_killed_mid_event_moves_its_shortfall_onto_the_confirmed_job() {
    let dir = tempfile::tempdir().expect("tempdir");
    let n1 = AgentProcess::start(&dir.path().join("n1"), "n1", &AgentOptions::default());
    let mut n2 = AgentProcess::start(&dir.path().join("n2"), "n2", &AgentOptions::default());
    let backend = agents_config(&[&n1, &n2], token_file(dir.path(), "agent.token", TOKEN), None);
    // No closed-loop trim (gateway_config): the re-plan must come from the gateway noticing
    // at its next tick that a capped job is no longer measured (src/runtime/control.rs).
    let config = gateway_config(&dir.path().join("gw"), backend, 2);
    let server = start_gateway(config).await;
    let (job1, job2) = ("node:n1".to_string(), "node:n2".to_string());
    let meter = wait_inventory(&server, &[(job1.clone(), 8), (job2.clone(), 8)]).await;
    let ceiling = meter - 3.5;
    submit(&server, "ev-agents", ceiling).await;
    let (before, n1_before) = wait_for("both nodes capped and confirmed", Duration::from_secs(15), || async {
        let plan = server.gateway.read().plan().await;
        let jobs = server.gateway.read().jobs().await;
        let seen = || format!("plan {}; jobs {}", brief_plan(plan.as_ref()), brief_jobs(&jobs));
        let Some(p) = plan.as_ref() else { return Err(seen()) };
        let (Some(c1), Some(c2)) = (cap_of(p, &job1), cap_of(p, &job2)) else {
            return Err(seen());
        };
        let limits1 = n1.limits().await;
        let limits2 = n2.limits().await;
        let on = limits1.iter().all(|l| close(*l, c1)) && limits2.iter().all(|l| close(*l, c2));
        if c1 < 699.5 && c2 < 699.5 && c1 > 200.5 && jobs.iter().all(|j| j.confirmed) && on {
            Ok((p.clone(), c1))
        } else {
            Err(format!("{}; n1 {limits1:?}; n2 {limits2:?}", seen()))
        }
    })
    .await;
    eprintln!(
        "4. ceiling {ceiling:.2} kW (meter {meter:.2} kW): {}",
        brief_plan(Some(&before))
    );
    // The plan in force just before the kill (the closed loop may have lowered it a little).
    let n1_before = server
        .gateway
        .read()
        .plan()
        .await
        .and_then(|p| cap_of(&p, &job1))
        .unwrap_or(n1_before);

    let killed = Instant::now();
    n2.kill();
    let (after, fixed_w) = wait_for(
        "node:n2 unconfirmed, counted as fixed load, node:n1 capped deeper",
        TICK * 2 + Duration::from_secs(RENEW_S) + Duration::from_secs(8),
        || async {
            let plan = server.gateway.read().plan().await;
            let jobs = server.gateway.read().jobs().await;
            let limits1 = n1.limits().await;
            let seen = || {
                format!(
                    "plan {}; jobs {}; n1 {limits1:?}",
                    brief_plan(plan.as_ref()),
                    brief_jobs(&jobs)
                )
            };
            let Some(p) = plan.as_ref() else { return Err(seen()) };
            let unconfirmed = jobs.iter().any(|j| j.id == job2 && !j.confirmed);
            let Some(c1) = cap_of(p, &job1) else { return Err(seen()) };
            let fixed = records(&server, RecordKind::Plan)
                .into_iter()
                .find(|(_, body)| body["generation"].as_u64() == p.generation)
                .and_then(|(_, body)| body["unconfirmed_fixed_w"].as_f64())
                .unwrap_or(0.0);
            let ok = unconfirmed
                && cap_of(p, &job2).is_none()
                && fixed > 0.0
                && c1 < n1_before - 0.5
                && limits1.iter().all(|l| close(*l, c1));
            if ok { Ok((p.clone(), fixed)) } else { Err(seen()) }
        },
    )
    .await;
    let took = killed.elapsed();
    let jobs = server.gateway.read().jobs().await;
    let n2_measured = jobs.iter().find(|j| j.id == job2).map_or(0.0, |j| j.measured_power_w);
    assert!(
        close(fixed_w, n2_measured) && n2_measured >= 8.0 * 700.0 - 0.5,
        "the unreachable node counts at its maximum draw as fixed load: fixed {fixed_w:.0} W, node:n2 measured {n2_measured:.0} W"
    );
    eprintln!(
        "4. agent n2 SIGKILLed: re-planned in {:.2} s: node:n2 fixed at {fixed_w:.0} W, node:n1 {n1_before:.1} W -> {:.1} W; {}",
        took.as_secs_f64(),
        cap_of(&after, &job1).unwrap_or(f64::NAN),
        brief_plan(Some(&after))
    );
    assert!(
        took <= TICK * 2 + Duration::from_secs(RENEW_S) + Duration::from_secs(3),
        "re-planned {:.2} s after the kill: more than two control ticks + a renew period + 3 s",
        took.as_secs_f64()
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Untagged jobs: PFI predicted from the agents' /metrics steers the cut (no Slurm needed)
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untagged_jobs_get_a_pfi_predicted_from_agent_metrics_and_the_more_flexible_is_cut_deeper() {
    let dir = tempfile::tempdir().expect("tempdir");
    // n2 runs a memory-bound job, n1 a compute-bound one. With equal predicted PFIs the planner
    // cut n1 deeper here (382 W vs 462 W per GPU: their simulated GPUs draw differently), so only
    // the prediction can make n2 the deeper cut.
    let memory = |dram, copy| AgentOptions {
        memory_activity: Some((dram, copy)),
        ..AgentOptions::default()
    };
    let n1 = AgentProcess::start(&dir.path().join("n1"), "n1", &memory(0.32, 26.0));
    let n2 = AgentProcess::start(&dir.path().join("n2"), "n2", &memory(0.52, 38.0));
    // The site's measured jobs: PFI rises steeply with DRAM activity x memory-copy utilisation.
    let samples = json!([
        {"pfi": 1.20, "dram_active": 0.30, "mem_copy_util_pct": 25.0, "cluster": "dense_pt"},
        {"pfi": 1.45, "dram_active": 0.35, "mem_copy_util_pct": 30.0, "cluster": "dense_pt"},
        {"pfi": 1.80, "dram_active": 0.42, "mem_copy_util_pct": 34.0, "cluster": "dense_ft"},
        {"pfi": 2.20, "dram_active": 0.48, "mem_copy_util_pct": 37.0, "cluster": "moe_ft"},
        {"pfi": 2.60, "dram_active": 0.55, "mem_copy_util_pct": 40.0, "cluster": "moe_pt"},
    ]);
    let mut backend = agents_config(&[&n1, &n2], token_file(dir.path(), "agent.token", TOKEN), None);
    backend.pfi_predictor = Some(flexgate::cluster::agents::PredictorSource {
        samples: token_file(dir.path(), "pfi-samples.json", &samples.to_string()),
        min_readings: 3,
    });
    let server = start_gateway(gateway_config(&dir.path().join("gw"), backend, 2)).await;
    let (job1, job2) = ("node:n1".to_string(), "node:n2".to_string());
    let meter = wait_inventory(&server, &[(job1.clone(), 8), (job2.clone(), 8)]).await;
    // Three 1 s readings of each uncapped run, then both have a predicted PFI.
    let predicted = wait_for("both jobs' PFI predicted", Duration::from_secs(15), || async {
        let jobs = server.gateway.read().jobs().await;
        let pfi = |id: &str| {
            jobs.iter()
                .find(|j| j.id == id)
                .and_then(|j| j.elasticity.strip_prefix("predicted PFI "))
                .and_then(|rest| rest.split(' ').next())
                .and_then(|mean| mean.parse::<f64>().ok())
        };
        match (pfi(&job1), pfi(&job2)) {
            (Some(a), Some(b)) => Ok((a, b)),
            _ => Err(brief_jobs(&jobs)),
        }
    })
    .await;
    let known: Vec<Value> = records(&server, RecordKind::Measurement)
        .into_iter()
        .filter_map(|(_, b)| b.get("elasticity_known").cloned())
        .collect();
    assert!(
        known
            .iter()
            .any(|k| k[&job1].as_str().is_some_and(|s| s.starts_with("predicted "))),
        "the prediction is recorded for the auditor: {known:?}"
    );
    submit(&server, "ev-predicted", meter - 3.0).await;
    let plan = wait_for("both nodes capped and confirmed", Duration::from_secs(15), || async {
        let plan = server.gateway.read().plan().await;
        let jobs = server.gateway.read().jobs().await;
        let seen = || format!("plan {}; jobs {}", brief_plan(plan.as_ref()), brief_jobs(&jobs));
        let Some(p) = plan.as_ref() else { return Err(seen()) };
        let capped = cap_of(p, &job1).is_some_and(|c| c < 699.5) || cap_of(p, &job2).is_some_and(|c| c < 699.5);
        if capped && jobs.iter().all(|j| j.confirmed) {
            Ok(p.clone())
        } else {
            Err(seen())
        }
    })
    .await;
    let (c1, c2) = (
        cap_of(&plan, &job1).unwrap_or(700.0),
        cap_of(&plan, &job2).unwrap_or(700.0),
    );
    eprintln!(
        "6. predicted PFI node:n1 {:.2}, node:n2 {:.2} -> caps {c1:.1} W, {c2:.1} W: {}",
        predicted.0,
        predicted.1,
        brief_plan(Some(&plan))
    );
    assert!(
        predicted.1 > predicted.0 + 0.5,
        "the memory-bound job is predicted more flexible: {predicted:?}"
    );
    assert!(
        c2 < c1 - 0.5,
        "the job with the higher predicted PFI is cut deeper: node:n2 {c2:.1} W vs node:n1 {c1:.1} W"
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Refused tokens change nothing; out-of-range caps are clamped and reported
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_change_nothing_and_out_of_range_caps_are_clamped_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    // GPU 0 sits under an out-of-band (BMC) limit of 300 W: a cap above it is clamped to it.
    let agent = AgentProcess::start(
        &dir.path().join("n3"),
        "n3",
        &AgentOptions {
            initial_limit_w: vec![(5, 600.0)],
            oob_limit_w: vec![(0, 300.0)],
            ..AgentOptions::default()
        },
    );
    let pre_event = agent.limits().await;
    let job = "node:n3".to_string();
    let unchanged = || async {
        let gpus = agent.gpus().await;
        let limits: Vec<f64> = gpus.iter().map(|g| g.limit_w.unwrap_or(f64::NAN)).collect();
        assert_eq!(limits, pre_event, "GPU limits changed: {}", brief_gpus(&gpus));
        assert!(
            gpus.iter().all(|g| g.held_by.is_empty()),
            "a lease holds a GPU: {}",
            brief_gpus(&gpus)
        );
    };

    // A token the agent does not know: the gateway refuses to start and says why.
    let wrong = agents_config(
        &[&agent],
        token_file(dir.path(), "wrong.token", "not-the-agents-token-at-all"),
        None,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let refused = Server::start(
        gateway_config(&dir.path().join("gw-wrong"), wrong, 1),
        Clock::real(),
        None,
        listener,
    )
    .await;
    let error = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("401"), "start with a wrong agent token: {error:?}");
    unchanged().await;

    // The read-only token: the gateway reads the GPUs, but every cap is refused (403): the job is
    // unconfirmed, the refusal recorded, and nothing changed on the agent.
    let read_only = agents_config(&[&agent], token_file(dir.path(), "read.token", READ_TOKEN), None);
    let server = start_gateway(gateway_config(&dir.path().join("gw-read"), read_only, 1)).await;
    let meter = wait_inventory(&server, &[(job.clone(), 8)]).await;
    submit(&server, "ev-refused", meter - 2.0).await;
    let row = wait_for("a refused dispatch in the ledger", Duration::from_secs(10), || async {
        let rows = dispatch_rows(&server);
        let jobs = server.gateway.read().jobs().await;
        rows.iter()
            .find(|r| r[0] == job.as_str() && r[3] == "failed")
            .cloned()
            .ok_or_else(|| format!("dispatch rows {rows:?}; jobs {}", brief_jobs(&jobs)))
    })
    .await;
    assert!(row[5].as_str().is_some_and(|d| d.contains("403")), "{row}");
    let jobs = server.gateway.read().jobs().await;
    assert!(jobs.iter().all(|j| !j.confirmed), "{}", brief_jobs(&jobs));
    assert!(server.gateway.read().status().await.unconfirmed_jobs == 1);
    assert!(dispatch_rows(&server).iter().all(|r| r[3] != "applied"));
    unchanged().await;
    server.shutdown().await;

    // Directly on the backend: below the GPUs' 200 W minimum → 200 W, clamped, and said so.
    let backend = AgentsBackend::new(
        &agents_config(&[&agent], token_file(dir.path(), "agent.token", TOKEN), None),
        FacilityModel::new(facility_for_nodes(1)).expect("facility"),
    )
    .expect("backend");
    backend.inventory().await.expect("inventory");
    let until = Some(chrono::Utc::now() + chrono::Duration::minutes(10));
    let command = |cap: f64, generation: u64| CapCommand {
        job: flexgate_policies::ids::JobId::from(job.as_str()),
        cap: WattsPerGpu(cap),
        generation,
        until,
    };
    let r = backend.apply(&[command(120.0, 1)]).await;
    assert_eq!(
        r[0].outcome,
        CapOutcome::Applied {
            applied: WattsPerGpu(200.0),
            clamped: true
        }
    );
    assert!(
        agent.limits().await.iter().all(|l| close(*l, 200.0)),
        "{:?}",
        agent.limits().await
    );
    // At the maximum: the end of the curtailment, the pre-event limits come back.
    let r = backend.apply(&[command(700.0, 2)]).await;
    assert!(matches!(r[0].outcome, CapOutcome::Applied { .. }), "{:?}", r[0].outcome);
    unchanged().await;
    drop(backend);

    // Through a plan: GPU 0's out-of-band limit clamps the planned cap; the ledger says so.
    let full = agents_config(&[&agent], dir.path().join("agent.token"), None);
    let server = start_gateway(gateway_config(&dir.path().join("gw-clamp"), full, 1)).await;
    let meter = wait_inventory(&server, &[(job.clone(), 8)]).await;
    submit(&server, "ev-clamp", meter - 1.0).await;
    let (row, gpus) = wait_for("a clamped dispatch in the ledger", Duration::from_secs(10), || async {
        let rows = dispatch_rows(&server);
        let gpus = agent.gpus().await;
        match rows.iter().find(|r| r[0] == job.as_str() && r[3] == "applied") {
            Some(row) => Ok((row.clone(), gpus)),
            None => Err(format!(
                "dispatch rows {rows:?}; plan {}",
                brief_plan(server.gateway.read().plan().await.as_ref())
            )),
        }
    })
    .await;
    let cap = row[1].as_f64().unwrap_or(f64::NAN);
    assert!(
        cap > 300.0 && cap < 699.5,
        "the plan should cap above GPU 0's 300 W: {row}"
    );
    assert_eq!(row[5], "clamped", "{row}; GPUs {}", brief_gpus(&gpus));
    assert!(close(gpus[0].limit_w.unwrap_or(0.0), 300.0), "{}", brief_gpus(&gpus));
    // (The ledger rounds caps to 0.1 W.)
    assert!(
        gpus[1..]
            .iter()
            .all(|g| g.limit_w.is_some_and(|l| (l - cap).abs() <= 0.05 + 1e-9)),
        "{}",
        brief_gpus(&gpus)
    );
    eprintln!("5. clamped through a plan: {row}; GPUs {}", brief_gpus(&gpus));
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// the forecast on Slurm's queue (issue 33)
// ---------------------------------------------------------------------------------------------

/// The gateway's latest forecast as `GET /v1/forecast` serves it.
async fn forecast_doc(server: &Server) -> Option<Value> {
    let r = request(server.addr, "GET", "/v1/forecast", None, None).await.ok()?;
    (r.status == 200).then(|| r.json().ok()).flatten()
}

/// Seconds from the forecast's making to a step's start.
fn step_offset_s(doc: &Value, step: &Value) -> f64 {
    let at = |v: &Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default())
            .map(|t| t.timestamp_millis() as f64 / 1000.0)
            .unwrap_or(f64::NAN)
    };
    at(&step["start"]) - at(&doc["generated_at"])
}

/// The most known jobs expected in the steps starting `from_s` or later after the forecast
/// was made.
fn most_jobs_from(doc: &Value, from_s: f64) -> f64 {
    doc["steps"]
        .as_array()
        .map(|steps| {
            steps
                .iter()
                .filter(|s| step_offset_s(doc, s) >= from_s)
                .filter_map(|s| s["jobs_expected"].as_f64())
                .fold(0.0, f64::max)
        })
        .unwrap_or(f64::NAN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forecast_follows_slurms_queue_and_the_declaration_agrees_with_it() {
    let _one_slurm = SLURM.lock().await;
    let slurm = Slurm::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let agent = AgentProcess::start(&dir.path().join("agent"), "localhost", &AgentOptions::default());
    // Two running jobs with limits (2 h and 1 h) fill the node's 8 GPUs; a third (30 min) waits
    // for the 1-hour one: Slurm's backfill expects it to start when that one's limit is up.
    let a = slurm.sbatch(&["--gres=gpu:4", "-t", "120", "-J", "pretrain", "--wrap", "sleep 3000"]);
    let b = slurm.sbatch(&[
        "--gres=gpu:4",
        "-t",
        "60",
        "-J",
        "finetune",
        "--comment",
        "flexgate:pfi=2.2",
        "--wrap",
        "sleep 3000",
    ]);
    slurm.wait_running(&[a, b]);
    let c = slurm.sbatch(&[
        "--gres=gpu:4",
        "-t",
        "30",
        "-J",
        "eval",
        "--comment",
        "flexgate:pfi=1.4",
        "--wrap",
        "sleep 3000",
    ]);
    let mapping = SlurmMapping {
        inventory: slurm.inventory_json(),
        gres_conf: Some(slurm.gres_conf()),
    };
    let backend = agents_config(&[&agent], token_file(dir.path(), "agent.token", TOKEN), Some(mapping));
    let mut config = gateway_config(&dir.path().join("gw"), backend, 1);
    config.forecast.queue_poll_s = 1;
    config.forecast.min_refresh_s = 1;
    let server = start_gateway(config).await;
    wait_inventory(&server, &[(a.to_string(), 4), (b.to_string(), 4)]).await;
    let jobs = server.gateway.read().jobs().await;
    for job in &jobs {
        let want = if job.id == a.to_string() { 7200.0 } else { 3600.0 };
        assert_eq!(job.time_limit_s, Some(want), "Slurm's limit: {job:?}");
        assert!(job.started_at.is_some(), "Slurm's start: {job:?}");
    }

    // 1. The queue is read: the forecast counts the queued job from Slurm's expected start, and
    //    no job past its limit (the last can end 2 h from now: the 2-hour job; the queued one
    //    starts around the 1-hour mark, 30 min late at most, and runs 30 min at most).
    let before = wait_for("a forecast on Slurm's queue", Duration::from_secs(60), || async {
        let doc = forecast_doc(&server).await.ok_or("no forecast yet")?;
        let basis = doc["basis"].to_string();
        let late = most_jobs_from(&doc, 2.0 * 3600.0 + 60.0);
        if basis.contains("1 queued jobs") && late == 0.0 {
            Ok(doc)
        } else {
            Err(format!("basis {basis}; jobs expected after 2 h: {late}"))
        }
    })
    .await;
    let steps = before["steps"].as_array().expect("steps");
    let now_jobs = steps[0]["jobs_expected"].as_f64().expect("jobs");
    assert!((1.5..=2.05).contains(&now_jobs), "the two running jobs now: {now_jobs}");
    let around_start = most_jobs_from(&before, 3600.0);
    assert!(
        around_start > 0.0,
        "the queued job is expected around its start: {before}"
    );
    for s in steps {
        let band = &s["available_w"];
        let (p10, p50, p90) = (band["p10"].as_f64(), band["p50"].as_f64(), band["p90"].as_f64());
        assert!(p10 <= p50 && p50 <= p90, "{s}");
    }

    // 2. The declaration export and GET /v1/forecast agree, hour by hour (the declaration's
    //    hour is its least quarter-hour's P10).
    let addr = server.addr.to_string();
    let mut agreed = false;
    for _ in 0..5 {
        let doc = forecast_doc(&server).await.expect("a forecast");
        let exe = env!("CARGO_BIN_EXE_flexgate");
        let addr = addr.clone();
        let out = tokio::task::spawn_blocking(move || {
            Command::new(exe)
                .args(["forecast", "--gateway", addr.as_str(), "--declare", "--format", "json"])
                .env_remove("FLEXGATE_LISTEN")
                .output()
        })
        .await
        .expect("joined")
        .expect("flexgate forecast runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let declared: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        if declared["forecast_generated_at"] != doc["generated_at"] {
            continue; // made again in between: ask again
        }
        let oracle = common::hours::least_p10_by_clock_hour(&doc);
        let hours = declared["hours"].as_array().expect("hours");
        assert_eq!(hours.len(), oracle.len());
        for (hour, (start, least)) in hours.iter().zip(&oracle) {
            assert_eq!(hour["start"], common::hours::rfc3339(*start), "on the clock hour");
            let kw = hour["available_kw"].as_f64().expect("kW");
            assert!((kw - least / 1000.0).abs() < 1e-9, "hour {start}: {kw} kW vs {least} W");
        }
        agreed = true;
        break;
    }
    assert!(agreed, "the forecast kept changing between the two reads");

    // 3. The 1-hour job ends early: the queued job starts at once on its GPUs, and the forecast
    //    follows: the queue is empty, and after the new job's 30-minute limit only the 2-hour
    //    job can still run.
    slurm.scancel(b);
    slurm.wait_running(&[a, c]);
    wait_inventory(&server, &[(a.to_string(), 4), (c.to_string(), 4)]).await;
    let after = wait_for(
        "a forecast after the queued job started",
        Duration::from_secs(60),
        || async {
            let doc = forecast_doc(&server).await.ok_or("no forecast")?;
            let basis = doc["basis"].to_string();
            let after_c = most_jobs_from(&doc, 30.0 * 60.0 + 60.0);
            if basis.contains("queue is empty") && after_c <= 1.0 + 1e-9 {
                Ok(doc)
            } else {
                Err(format!("basis {basis}; jobs expected after 31 min: {after_c}"))
            }
        },
    )
    .await;
    let now_jobs = after["steps"][0]["jobs_expected"].as_f64().expect("jobs");
    assert!((1.5..=2.05).contains(&now_jobs), "the two running jobs now: {now_jobs}");
    assert_eq!(
        most_jobs_from(&after, 2.0 * 3600.0 + 60.0),
        0.0,
        "none past its limit: {after}"
    );
    let recorded = records(&server, RecordKind::Forecast);
    assert!(
        recorded.iter().any(|(_, r)| r["queued_jobs"] == 1) && recorded.iter().any(|(_, r)| r["queued_jobs"] == 0),
        "the ledger keeps both forecasts"
    );
    let changed: Vec<(u64, Value)> = records(&server, RecordKind::Measurement)
        .into_iter()
        .filter(|(_, r)| r["entry"] == "jobs_changed")
        .collect();
    let runtimes: Vec<&Value> = changed
        .iter()
        .filter_map(|(_, r)| r["runtimes"].as_array())
        .flatten()
        .collect();
    assert!(
        runtimes
            .iter()
            .any(|r| r["job"].as_str() == Some(b.to_string().as_str()) && r["limit_s"] == 3600.0),
        "the job that ended is learned from: {changed:?}"
    );
    server.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// deploy/flexgate.toml's agents example
// ---------------------------------------------------------------------------------------------

#[test]
fn the_commented_agents_backend_example_loads() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/flexgate.toml"))
        .expect("deploy/flexgate.toml");
    // The block: from `# [backend]` followed by `# type = "agents"`, every `#` line after it.
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .windows(2)
        .position(|w| w[0].trim_end() == "# [backend]" && w[1].starts_with("# type = \"agents\""))
        .expect("deploy/flexgate.toml has a commented [backend] type = \"agents\" block");
    let block: Vec<String> = lines[start..]
        .iter()
        .take_while(|l| l.starts_with('#'))
        .map(|l| {
            l.strip_prefix("# ")
                .or_else(|| l.strip_prefix('#'))
                .unwrap_or(l)
                .to_string()
        })
        .collect();
    assert!(block.len() > 10, "{block:?}");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("flexgate.toml");
    std::fs::write(&file, block.join("\n") + "\n").expect("config");
    let config = Config::load(Some(&file)).unwrap_or_else(|e| panic!("{e}\n{}", block.join("\n")));
    let BackendConfig::Agents(agents) = &config.backend else {
        panic!("the example is not an agents backend: {:?}", config.backend)
    };
    assert_eq!(agents.nodes.len(), 2);
    assert_eq!(agents.renew_every_s, 10);
    let slurm = agents.slurm.as_ref().expect("the example maps jobs with Slurm");
    assert_eq!(slurm.gres_conf.as_deref(), Some(Path::new("/etc/slurm/gres.conf")));
    assert_eq!(slurm.inventory["rest"]["user_name"], "slurmrest", "{}", slurm.inventory);
    // It builds (contacts nothing) once its files exist: the Slurm part is a valid
    // flexgate-slurm config too.
    let mut agents = agents.clone();
    agents.token_file = Some(token_file(dir.path(), "agent-token", TOKEN));
    let gres = token_file(
        dir.path(),
        "gres.conf",
        "NodeName=gpu-node-0[1-2] Name=gpu File=/dev/nvidia[0-7]\n",
    );
    if let Some(slurm) = agents.slurm.as_mut() {
        slurm.gres_conf = Some(gres);
    }
    assert_eq!(
        agents.nodes[1].metrics_url.as_deref(),
        Some("http://10.0.0.12:9400/metrics")
    );
    let predictor = agents.pfi_predictor.as_mut().expect("the example predicts PFI");
    assert_eq!(predictor.min_readings, 30);
    // An unusable samples file is refused with its path and the reason.
    predictor.samples = token_file(dir.path(), "pfi-samples.json", r#"[{"pfi": 1.2}]"#);
    let facility = || FacilityModel::new(facility_for_nodes(2)).expect("facility");
    let refused = AgentsBackend::new(&agents, facility()).expect_err("bad samples");
    assert!(refused.to_string().contains("pfi-samples.json"), "{refused}");
    let samples = r#"[{"pfi": 1.2, "dram_active": 0.2, "mem_copy_util_pct": 20, "cluster": "a"},
                      {"pfi": 1.6, "dram_active": 0.4, "mem_copy_util_pct": 30, "cluster": "b"},
                      {"pfi": 2.1, "dram_active": 0.6, "mem_copy_util_pct": 45, "cluster": "c"}]"#;
    if let Some(p) = agents.pfi_predictor.as_mut() {
        p.samples = token_file(dir.path(), "pfi-samples.json", samples);
    }
    // TLS files as the example names them, minted here.
    let tls = agents.tls.as_mut().expect("the example uses TLS to the agents");
    assert!(agents.nodes.iter().all(|n| n.url.starts_with("https://")));
    common::pki::mint(dir.path());
    tls.ca_file = dir.path().join("ca.pem");
    tls.cert_file = Some(dir.path().join("gateway.pem"));
    tls.key_file = Some(dir.path().join("gateway-key.pem"));
    AgentsBackend::new(&agents, facility()).unwrap_or_else(|e| panic!("the example does not build a backend: {e}"));
    // Unknown fields are refused, so a typo in the example would have failed above.
    let typo = block.join("\n").replace("renew_every_s", "renew_every");
    std::fs::write(&file, typo).expect("config");
    assert!(Config::load(Some(&file)).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_slurm_job_measured_beyond_its_tier_under_a_real_cap_is_backed_off_in_one_pass() {
    let _one_slurm = SLURM.lock().await;
    let slurm = Slurm::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let agent_dir = dir.path().join("agent");
    let agent = AgentProcess::start(
        &agent_dir,
        "localhost",
        &AgentOptions {
            throughput_window_s: Some(5),
            ..AgentOptions::default()
        },
    );
    let steep = slurm.sbatch(&[
        "--gres=gpu:4",
        "--comment",
        "flexgate:tier=gold,pfi=2.67,max_slowdown=0.10",
        "--wrap",
        "sleep 600",
    ]);
    let other = slurm.sbatch(&["--gres=gpu:4", "--comment", "flexgate:pfi=1.5", "--wrap", "sleep 600"]);
    slurm.wait_running(&[steep, other]);
    let minors = slurm_minors(&slurm, steep);
    let id = steep.to_string();
    // The job's own training loop: throughput proportional to its GPUs' limit.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let minor_list = minors.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
    let mut python = KillOnDrop(Some(
        Command::new("python3")
            .arg(root.join("tests/peers/capped_training.py"))
            .args([minor_list.as_str(), "4096", "0.05", "300"])
            .env("FLEXGATE_JOB_ID", &id)
            .env("FLEXGATE_JOB_TOKEN", job_token(&agent_dir, &id))
            .env("FLEXGATE_AGENT_URL", &agent.url)
            .env("FLEXGATE_TEST_READ_TOKEN", READ_TOKEN)
            .env_remove("RANK")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 is installed (tests/peers/setup.sh needs it too)"),
    ));
    let mapping = SlurmMapping {
        inventory: slurm.inventory_json(),
        gres_conf: Some(slurm.gres_conf()),
    };
    let backend = agents_config(&[&agent], token_file(dir.path(), "agent.token", TOKEN), Some(mapping));
    let server = start_gateway(gateway_config(&dir.path().join("gw"), backend, 1)).await;
    let meter = wait_inventory(&server, &[(id.clone(), 4), (other.to_string(), 4)]).await;
    let bodies = || -> Vec<Value> {
        server
            .gateway
            .ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .map(|r| r.body)
            .collect()
    };
    let uncapped = wait_for(
        "the job's uncapped throughput measured",
        Duration::from_secs(40),
        || async {
            bodies()
                .into_iter()
                .find(|b| b["entry"] == "throughput_point" && b["job"] == id.as_str() && b["uncapped"] == true)
                .ok_or_else(|| {
                    format!(
                        "points: {:?}",
                        bodies()
                            .iter()
                            .filter(|b| b["entry"] == "throughput_point")
                            .collect::<Vec<_>>()
                    )
                })
        },
    )
    .await;
    let uncapped_tokens = uncapped["tokens_per_s"].as_f64().expect("tokens");
    assert!(uncapped_tokens > 40_000.0, "{uncapped}");
    let ceiling = (meter - 1.5).max(0.5);
    submit(&server, "ev-tier", ceiling).await;
    let backoff = wait_for("the tiered job backed off", Duration::from_secs(60), || async {
        let all = bodies();
        all.iter()
            .find(|b| b["entry"] == "tier_backed_off" && b["job"] == id.as_str())
            .cloned()
            .ok_or_else(|| {
                let plans: Vec<&Value> = all.iter().filter(|b| b["entry"] == "plan").collect();
                let points: Vec<&Value> = all.iter().filter(|b| b["entry"] == "throughput_point").collect();
                format!("plans {plans:?}; points {points:?}")
            })
    })
    .await;
    let slowdown = backoff["measured_slowdown"].as_f64().expect("slowdown");
    let capped_at = backoff["cap_w_per_gpu"].as_f64().expect("cap");
    let floor = backoff["floor_w_per_gpu"].as_f64().expect("floor");
    assert!(slowdown > 0.12, "measured beyond its 10 % tier: {backoff}");
    // Throughput proportional to the cap: the slowdown is the cap's share below 700 W.
    assert!((slowdown - (1.0 - capped_at / 700.0)).abs() < 0.06, "{backoff}");
    assert!(floor > capped_at, "{backoff}");
    // Re-planned in the same pass: the next plan comes before the next meter sample, and holds
    // the job at its new floor. The back-off and the plan are two appends, so the ledger can be
    // read between them: wait until a plan or a meter sample follows the back-off, then see
    // which came first.
    let after = wait_for(
        "a plan or a meter sample after the back-off",
        Duration::from_secs(20),
        || async {
            let all = bodies();
            let at = all
                .iter()
                .position(|b| b["entry"] == "tier_backed_off")
                .expect("the back-off record");
            let after = all[at + 1..].to_vec();
            if after
                .iter()
                .any(|b| b["entry"] == "plan" || b["entry"] == "meter_sample")
            {
                Ok(after)
            } else {
                Err(format!("after the back-off: {after:?}"))
            }
        },
    )
    .await;
    let next_plan = after.iter().position(|b| b["entry"] == "plan");
    let next_sample = after.iter().position(|b| b["entry"] == "meter_sample");
    let plan = match (next_plan, next_sample) {
        (Some(p), Some(m)) if p < m => &after[p],
        (Some(p), None) => &after[p],
        _ => panic!("no plan before the next meter sample: {after:?}"),
    };
    assert_eq!(plan["reason"], "tier_backoff", "{plan}");
    let rows = plan["plan"]["rows"].as_array().expect("rows");
    let row = rows.iter().find(|r| r[0] == id.as_str()).expect("the job is planned");
    let new_cap = row[1].as_f64().expect("cap");
    assert!(new_cap >= floor - 0.5, "held at its floor {floor}: {row}");
    // At the new cap the job keeps its tier, measured.
    let kept = wait_for("a steady point at the new cap", Duration::from_secs(40), || async {
        bodies()
            .into_iter()
            .rev()
            .find(|b| {
                b["entry"] == "throughput_point"
                    && b["job"] == id.as_str()
                    && b["uncapped"] == false
                    && b["cap_w_per_gpu"].as_f64().is_some_and(|c| (c - new_cap).abs() < 1.0)
            })
            .ok_or_else(|| "none yet".to_string())
    })
    .await;
    let kept_share = kept["tokens_per_s"].as_f64().expect("tokens") / uncapped_tokens;
    assert!(
        kept_share >= 0.87,
        "keeps its tier (10 % + 2 % tolerance, and noise): {kept} vs {uncapped_tokens}"
    );
    eprintln!(
        "tier back-off on real agents: measured {:.1} % slower at {capped_at:.0} W/GPU, floor {floor:.0} W/GPU, \
         then {:.1} % of uncapped at {new_cap:.0} W/GPU",
        slowdown * 100.0,
        kept_share * 100.0
    );
    let _ = python.0.as_mut().map(Child::kill);
    let out = python.wait_with_output().expect("python output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("Traceback"), "{stderr}");
    server.shutdown().await;
}
