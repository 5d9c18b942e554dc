//! Two gateway replicas on a real three-member etcd (127.0.0.1), driving real `flexgate-agent`
//! processes: one leads, the other serves reads and refuses writes naming it; when the leader
//! dies in the middle of an event, the standby leads within the term's TTL and a few seconds,
//! every acknowledged event is in its ledger, and no cap is ever restored on the way.
//!
//! Here the replicas run in this process (killed by aborting every task, with no resignation
//! and nothing flushed on the way out); the process-level rounds (SIGKILL, SIGSTOP) are
//! `tests/ha_process.rs`.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

mod common;

use common::agent::{AgentOptions, AgentProcess, agents_config, wait_for};
use flexgate::clock::Clock;
use flexgate::config::{BackendConfig, Config, facility_for_nodes};
use flexgate::ha::config::HaConfig;
use flexgate::http_client::request;
use flexgate::runtime::Role;
use flexgate::serve::Server;
use flexgate_etcd::testing::Cluster;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const API_TOKEN: &str = "ha-test-api-token-0123456789";
const TERM_TTL_S: u64 = 3;

fn config(data: &Path, name: &str, agents: &[&AgentProcess], token_file: &Path, etcd: &Cluster) -> Config {
    let mut config = Config::default();
    config.gateway.data_dir = data.to_path_buf();
    config.gateway.api_token = API_TOKEN.into();
    config.gateway.site = "site-1".into();
    config.gateway.telemetry_interval_s = 1;
    config.facility = facility_for_nodes(agents.len() as u32);
    // Leases of 3 × 5 s: a 3 s term plus the takeover fits well inside.
    config.backend = BackendConfig::Agents(agents_config(agents, token_file.to_path_buf(), None, 5));
    config.ha = Some(HaConfig {
        replica: name.into(),
        endpoints: etcd.endpoints(),
        advertise_url: Some(format!("http://{name}.invalid:8080")),
        term_ttl_s: TERM_TTL_S,
        prefix: "/flexgate".into(),
        etcd_timeout_ms: 1_000,
        retain_records: 100_000,
        tls: None,
        user: None,
        password_file: None,
    });
    config.validate().expect("a valid configuration");
    config
}

fn event(id: &str, ceiling_kw: f64) -> Vec<u8> {
    let start = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    serde_json::to_vec(&json!({
        "schema": "dr.event/1", "event_id": id, "revision": 1, "site": "site-1",
        "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 900, "recovery_s": 0}
    }))
    .expect("event JSON")
}

fn leader_of(servers: &[Option<Server>]) -> Option<usize> {
    let leaders: Vec<usize> = servers
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.as_ref()
                .is_some_and(|s| matches!(s.gateway.read().role(), Role::Leader { .. }))
        })
        .map(|(i, _)| i)
        .collect();
    assert!(leaders.len() <= 1, "two leaders at once");
    leaders.first().copied()
}

fn epoch_of(server: &Server) -> u64 {
    match server.gateway.read().role() {
        Role::Leader { epoch, .. } => epoch,
        other => panic!("not a leader: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_standby_takes_over_a_killed_leader_mid_event_and_no_cap_is_ever_restored() {
    let etcd = Cluster::start();
    let dir = tempfile::tempdir().expect("dir");
    let agents = [
        AgentProcess::start(&dir.path().join("n1"), "n1", &AgentOptions::default()),
        AgentProcess::start(&dir.path().join("n2"), "n2", &AgentOptions::default()),
    ];
    let agent_refs: Vec<&AgentProcess> = agents.iter().collect();
    let token_file = dir.path().join("agents.token");
    std::fs::write(&token_file, common::agent::TOKEN).expect("token file");
    let mut servers = Vec::new();
    for name in ["gw-a", "gw-b"] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let config = config(&dir.path().join(name), name, &agent_refs, &token_file, &etcd);
        servers.push(Some(
            Server::start(config, Clock::real(), None, listener)
                .await
                .unwrap_or_else(|e| panic!("{name} did not start: {e}")),
        ));
    }
    let first = wait_for("a leader", Duration::from_secs(20), || async {
        leader_of(&servers).ok_or_else(|| "none yet".to_string())
    })
    .await;
    let standby = 1 - first;
    let leader_addr = servers[first].as_ref().expect("leader").addr;
    let standby_addr = servers[standby].as_ref().expect("standby").addr;
    let first_epoch = epoch_of(servers[first].as_ref().expect("leader"));

    // The leader reads the cluster; an event at 70 % of its meter figure caps every GPU.
    let meter = wait_for("a meter figure", Duration::from_secs(30), || async {
        let s = servers[first].as_ref().expect("leader").gateway.read().status().await;
        s.meter_kw().filter(|_| s.jobs >= 2).ok_or_else(|| format!("{s:?}"))
    })
    .await;
    let ack = request(
        leader_addr,
        "POST",
        "/v1/events",
        Some(API_TOKEN),
        Some(&event("ev-1", meter * 0.7)),
    )
    .await
    .expect("submit");
    assert_eq!(ack.status, 200, "{}", ack.text());
    let ack: Value = ack.json().expect("ack");
    assert_eq!(ack["opt"], "in", "{ack}");

    // The standby refuses a write, naming the leader (once it has seen the election), and
    // serves the event it took in.
    wait_for("the standby to name the leader", Duration::from_secs(10), || async {
        match servers[standby].as_ref().expect("standby").gateway.read().role() {
            Role::Standby { leader: Some(_), .. } => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let refused = request(
        standby_addr,
        "POST",
        "/v1/events",
        Some(API_TOKEN),
        Some(&event("ev-2", meter * 0.7)),
    )
    .await
    .expect("submit");
    assert_eq!(refused.status, 503, "{}", refused.text());
    let problem: Value = refused.json().expect("problem");
    let leader_name = ["gw-a", "gw-b"][first];
    assert_eq!(problem["leader"]["replica"], leader_name, "{problem}");
    assert!(
        problem["detail"].as_str().is_some_and(|d| d.contains(leader_name)),
        "{problem}"
    );
    wait_for("the event on the standby", Duration::from_secs(10), || async {
        let events = servers[standby]
            .as_ref()
            .expect("standby")
            .gateway
            .read()
            .events()
            .await;
        events
            .iter()
            .any(|e| e.id == "ev-1")
            .then_some(())
            .ok_or_else(|| format!("{events:?}"))
    })
    .await;

    // /v1/status on the standby: its role, the leader, and every replica with its lag.
    let status = wait_for(
        "the replicas in the standby's status",
        Duration::from_secs(10),
        || async {
            let r = request(standby_addr, "GET", "/v1/status", None, None)
                .await
                .map_err(|e| e.to_string())?;
            let status: Value = r.json().map_err(|e| e.to_string())?;
            let replicas = status["replication"]["replicas"].as_array().map_or(0, Vec::len);
            (replicas == 2)
                .then_some(status.clone())
                .ok_or_else(|| status.to_string())
        },
    )
    .await;
    assert_eq!(status["replication"]["role"], "standby", "{status}");
    assert_eq!(
        status["ha"], status["replication"],
        "`ha` is the replication view on a replica"
    );
    assert_eq!(status["replication"]["leader"], leader_name, "{status}");
    assert_eq!(status["replication"]["epoch"], first_epoch, "{status}");
    // The standby's dashboard, in a real headless Chromium, says who it is and who leads.
    let profile = tempfile::tempdir().expect("profile");
    let page =
        common::chromium::load_async(format!("http://{standby_addr}/dashboard/?updates=2"), profile.path()).await;
    assert!(page.console.is_empty(), "{:?}", page.console);
    let shown = common::chromium::text_of(&page.dom, "replica");
    let me = ["gw-a", "gw-b"][standby];
    assert!(
        shown.contains(&format!("{me} stands by; {leader_name} leads (epoch {first_epoch})")),
        "{shown}"
    );
    let metrics = request(standby_addr, "GET", "/metrics", None, None)
        .await
        .expect("metrics")
        .text();
    assert!(
        metrics.contains("flexgate_ha_leader 0") && metrics.contains("flexgate_ha_leader_known 1"),
        "{metrics}"
    );

    let capped = |limits: &[f64]| limits.iter().all(|w| *w < 699.0);
    wait_for("caps on every GPU", Duration::from_secs(20), || async {
        let mut all = Vec::new();
        for a in &agents {
            all.extend(a.limits().await);
        }
        capped(&all).then_some(()).ok_or_else(|| format!("{all:?}"))
    })
    .await;

    // The leader dies. From now until the new leader has re-leased every cap, no GPU may go
    // back to its pre-event limit.
    let killed_at = Instant::now();
    servers[first].take().expect("leader").kill();
    let mut takeover = None;
    while killed_at.elapsed() < Duration::from_secs(TERM_TTL_S + 15) {
        for a in &agents {
            let limits = a.limits().await;
            assert!(
                capped(&limits),
                "{} restored a cap during the takeover, {:?} after the kill: {limits:?}\n{}",
                a.name,
                killed_at.elapsed(),
                a.stderr().lines().rev().take(25).collect::<Vec<_>>().join("\n")
            );
        }
        if takeover.is_none() && leader_of(&servers) == Some(standby) {
            takeover = Some(killed_at.elapsed());
        }
        if takeover.is_some_and(|t| killed_at.elapsed() > t + Duration::from_secs(3)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let takeover = takeover.expect("the standby did not take over");
    assert!(
        takeover <= Duration::from_secs(TERM_TTL_S + 5),
        "took over after {takeover:?}"
    );
    let new_leader = servers[standby].as_ref().expect("new leader");
    assert!(epoch_of(new_leader) > first_epoch);

    // Everything acknowledged is there; the chain verifies, with the term change in it.
    let events = new_leader.gateway.read().events().await;
    assert!(events.iter().any(|e| e.id == "ev-1"), "{events:?}");
    new_leader.gateway.ledger().verify().expect("the chain verifies");
    let epochs: std::collections::BTreeSet<Option<u64>> = new_leader
        .gateway
        .ledger()
        .iter_from(1)
        .map(|r| r.expect("record").epoch)
        .collect();
    assert!(
        epochs.contains(&Some(first_epoch)) && epochs.contains(&Some(epoch_of(new_leader))),
        "{epochs:?}"
    );
    // `flexgate ha status` reads the same from etcd, with no gateway's help.
    let toml = dir.path().join("ha.toml");
    std::fs::write(
        &toml,
        format!(
            "[gateway]\nsite = \"site-1\"\n\n[ha]\nreplica = \"observer\"\nendpoints = {:?}\nterm_ttl_s = {TERM_TTL_S}\netcd_timeout_ms = 1000\n",
            etcd.endpoints()
        ),
    )
    .expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args(["ha", "status", "--config", toml.to_str().expect("utf-8"), "--json"])
        .output()
        .expect("flexgate ha status");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(seen["leader"], ["gw-a", "gw-b"][standby], "{seen}");
    assert_eq!(seen["epoch"], epoch_of(new_leader), "{seen}");
    assert!(
        seen["replicas"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["name"] == ["gw-a", "gw-b"][standby])),
        "{seen}"
    );
    let table = std::process::Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args(["ha", "status", "--config", toml.to_str().expect("utf-8")])
        .output()
        .expect("flexgate ha status");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains(&format!("leader: {}", ["gw-a", "gw-b"][standby])),
        "{table}"
    );
    // The new leader accepts writes.
    let ack = request(
        standby_addr,
        "POST",
        "/v1/events",
        Some(API_TOKEN),
        Some(&event("ev-3", meter * 0.7)),
    )
    .await
    .expect("submit");
    assert_eq!(ack.status, 200, "{}", ack.text());
    // No lease lapsed at any agent.
    for a in &agents {
        assert_eq!(
            common::agent::metric(&a.url, "flexgate_agent_leases_expired_total").await,
            0.0,
            "{}",
            a.name
        );
    }
    for s in servers.into_iter().flatten() {
        s.shutdown().await;
    }
}

/// A second replica under a name already running is refused at start with a clear error; a
/// replica whose etcd cannot be reached starts as a standby that says why (it keeps trying, so
/// systemd does not crash-loop it) and serves reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_name_is_refused_and_an_unreachable_etcd_leaves_a_standby_that_says_why() {
    let etcd = Cluster::start();
    let dir = tempfile::tempdir().expect("dir");
    let agent = AgentProcess::start(&dir.path().join("n1"), "n1", &AgentOptions::default());
    let token_file = dir.path().join("agents.token");
    std::fs::write(&token_file, common::agent::TOKEN).expect("token file");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let first = Server::start(
        config(&dir.path().join("a1"), "gw-a", &[&agent], &token_file, &etcd),
        Clock::real(),
        None,
        listener,
    )
    .await
    .expect("the first gw-a starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let second = Server::start(
        config(&dir.path().join("a2"), "gw-a", &[&agent], &token_file, &etcd),
        Clock::real(),
        None,
        listener,
    )
    .await;
    let Err(e) = second else {
        panic!("a second replica named gw-a started");
    };
    assert!(
        e.to_string().contains("another replica named \"gw-a\" is running"),
        "{e}"
    );
    first.shutdown().await;

    // Nothing listens at these endpoints.
    let mut lonely = config(&dir.path().join("b"), "gw-b", &[&agent], &token_file, &etcd);
    if let Some(ha) = lonely.ha.as_mut() {
        ha.endpoints = (0..3)
            .map(|_| {
                let port = std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .expect("port");
                format!("http://127.0.0.1:{port}")
            })
            .collect();
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let standby = Server::start(lonely, Clock::real(), None, listener)
        .await
        .expect("a replica without etcd still starts");
    let status = wait_for("a standby that says why", Duration::from_secs(15), || async {
        let r = request(standby.addr, "GET", "/v1/status", None, None)
            .await
            .map_err(|e| e.to_string())?;
        let s: Value = r.json().map_err(|e| e.to_string())?;
        let reason = s["replication"]["reason"].as_str().unwrap_or("");
        (s["replication"]["role"] == "standby" && reason.contains("etcd"))
            .then_some(s.clone())
            .ok_or_else(|| s.to_string())
    })
    .await;
    assert!(status["replication"]["leader"].is_null(), "{status}");
    let refused = request(
        standby.addr,
        "POST",
        "/v1/events",
        Some(API_TOKEN),
        Some(&event("ev-x", 10.0)),
    )
    .await
    .expect("submit");
    assert_eq!(refused.status, 503, "{}", refused.text());
    standby.shutdown().await;
}
