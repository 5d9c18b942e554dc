//! Two gateway replicas on a real three-member etcd (127.0.0.1) as one OpenADR 2.0b VEN of a
//! real openleadr VTN (`tests/common/oadr2b_vtn.rs`): only the leader polls; when it dies, the
//! next leader carries on as the same VEN. The VTN sees one registration, one answer per event
//! version (the new leader's oadrRequestEvent brings back the event its predecessor answered,
//! and it is not answered again), and a cancellation sent after the takeover reaches the
//! gateway event the predecessor created.
//!
//! The replicas run in this process with the simulated cluster (the agents' side of a takeover
//! is `tests/ha_gateway.rs` and `tests/ha_process.rs`).
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

mod common;

use chrono::{SecondsFormat, Utc};
use common::agent::wait_for;
use common::oadr2b_vtn::{PROGRAM, Vtn};
use flexgate::clock::Clock;
use flexgate::config::Config;
use flexgate::ha::config::HaConfig;
use flexgate::runtime::Role;
use flexgate::serve::Server;
use flexgate_etcd::testing::Cluster;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

const VEN_NAME: &str = "flexgate-ha";

fn config(data: &Path, name: &str, vtn: &Vtn, etcd: &Cluster) -> Config {
    let mut config = Config::default();
    config.gateway.data_dir = data.to_path_buf();
    config.gateway.api_token = "ha-openadr-token-0123456789".into();
    config.gateway.site = "site-oadr".into();
    config.gateway.telemetry_interval_s = 1;
    config.site.facility_max_kw = 400.0;
    config.openadr2b = Some(vtn.ven_config(VEN_NAME));
    config.ha = Some(HaConfig {
        replica: name.into(),
        endpoints: etcd.endpoints(),
        advertise_url: Some(format!("http://{name}.invalid:8080")),
        term_ttl_s: 3,
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

/// Replicas `gw-a` and `gw-b` of one site, each with its data under `dir`.
async fn start_replicas(dir: &Path, vtn: &Vtn, etcd: &Cluster) -> Vec<Option<Server>> {
    let mut servers = Vec::new();
    for name in ["gw-a", "gw-b"] {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let config = config(&dir.join(name), name, vtn, etcd);
        servers.push(Some(
            Server::start(config, Clock::real(), None, listener)
                .await
                .unwrap_or_else(|e| panic!("{name} did not start: {e}")),
        ));
    }
    servers
}

fn leader_of(servers: &[Option<Server>]) -> Result<usize, String> {
    let leaders: Vec<usize> = servers
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.as_ref()
                .is_some_and(|s| matches!(s.gateway.read().role(), Role::Leader { .. }))
        })
        .map(|(i, _)| i)
        .collect();
    match leaders[..] {
        [one] => Ok(one),
        [] => Err("no leader yet".into()),
        _ => panic!("two leaders at once"),
    }
}

/// The VTN's answers from our VEN, counted per (event, modificationNumber).
fn answers(state: &Value) -> BTreeMap<(String, u64), Vec<String>> {
    let mut out: BTreeMap<(String, u64), Vec<String>> = BTreeMap::new();
    if let Some(by_event) = state["opt_responses"].as_object() {
        for (event, list) in by_event {
            for r in list.as_array().into_iter().flatten() {
                let m = r["modification_number"].as_u64().unwrap_or(u64::MAX);
                out.entry((event.clone(), m))
                    .or_default()
                    .push(r["opt_type"].as_str().unwrap_or("?").to_string());
            }
        }
    }
    out
}

fn registrations(state: &Value) -> usize {
    state["registrations"]
        .as_array()
        .map_or(0, |r| r.iter().filter(|r| r["ven_name"] == VEN_NAME).count())
}

/// Whether `server`'s ledger holds an OpenADR 2.0b registration.
fn registration_recorded(server: &Server) -> bool {
    server.gateway.ledger().iter_from(1).flatten().any(|record| {
        matches!(
            record.entry(),
            Ok(flexgate::ledger::Entry::AdapterRegistration(r)) if r.registration.is_some()
        )
    })
}

fn iso_in(seconds: i64) -> String {
    (Utc::now() + chrono::Duration::seconds(seconds)).to_rfc3339_opts(SecondsFormat::Secs, true)
}

async fn add_event(vtn: &Vtn, ven_id: &str) -> String {
    vtn.post(
        "/admin/event",
        json!({"ven_id": ven_id, "market_context": PROGRAM, "signal_name": "SIMPLE",
               "signal_type": "level", "start": iso_in(120), "intervals": [{"duration_s": 600, "value": 1}]}),
    )
    .await["event_id"]
        .as_str()
        .expect("event_id")
        .to_string()
}

async fn has_event(server: &Server, id: &str) -> Result<String, String> {
    let events = server.gateway.read().events().await;
    events
        .iter()
        .find(|e| e.id == id)
        .map(|e| e.state.clone())
        .ok_or_else(|| format!("not among {:?}", events.iter().map(|e| &e.id).collect::<Vec<_>>()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_leader_is_the_same_ven_one_registration_one_answer_per_event_version() {
    let etcd = Cluster::start();
    let vtn = Vtn::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let mut servers = start_replicas(dir.path(), &vtn, &etcd).await;
    let first = wait_for("a leader", Duration::from_secs(20), || async { leader_of(&servers) }).await;
    let next = 1 - first;
    let ven_id = wait_for("the registration at the VTN", Duration::from_secs(30), || async {
        vtn.registered_ven_id(VEN_NAME)
            .await
            .ok_or_else(|| "not registered yet".to_string())
    })
    .await;

    // The leader answers the first event; the standby takes in the event from etcd.
    let e1 = add_event(&vtn, &ven_id).await;
    wait_for("the leader's optIn", Duration::from_secs(20), || async {
        let answered = answers(&vtn.state().await);
        match answered.get(&(e1.clone(), 0)) {
            Some(opts) if opts == &["optIn".to_string()] => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    wait_for("the standby to hold the event", Duration::from_secs(15), || async {
        has_event(servers[next].as_ref().expect("standby"), &e1).await
    })
    .await;

    // The leader dies (no resignation, nothing flushed); the standby leads as the same VEN.
    servers[first].take().expect("leader").kill();
    wait_for("the next leader", Duration::from_secs(20), || async {
        match leader_of(&servers)? {
            i if i == next => Ok(()),
            other => Err(format!("replica {other} leads")),
        }
    })
    .await;
    let e2 = add_event(&vtn, &ven_id).await;
    wait_for(
        "the next leader's optIn to a new event",
        Duration::from_secs(30),
        || async {
            let answered = answers(&vtn.state().await);
            answered
                .get(&(e2.clone(), 0))
                .filter(|opts| *opts == &["optIn".to_string()])
                .map(|_| ())
                .ok_or_else(|| format!("{answered:?}"))
        },
    )
    .await;
    let leader = servers[next].as_ref().expect("the next leader");
    assert!(
        has_event(leader, &e2).await.is_ok(),
        "the new event is in the next leader's book"
    );

    // A cancellation sent after the takeover reaches the event the first leader created.
    vtn.post("/admin/cancel", json!({"event_id": e1})).await;
    wait_for(
        "the cancellation at the next leader",
        Duration::from_secs(20),
        || async {
            match has_event(leader, &e1).await? {
                state if state == "cancelled" || state == "completed" => Ok(()),
                state => Err(state),
            }
        },
    )
    .await;
    // Let a few more polls pass, then count: one registration, one answer per version.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let state = vtn.state().await;
    assert_eq!(
        registrations(&state),
        1,
        "a second registration: {}",
        state["registrations"]
    );
    let answered = answers(&state);
    for ((event, m), opts) in &answered {
        assert_eq!(
            opts.len(),
            1,
            "event {event} version {m} answered {} times: {opts:?}",
            opts.len()
        );
    }
    assert_eq!(answered.get(&(e1.clone(), 0)).map(Vec::len), Some(1), "{answered:?}");
    assert!(
        answered.contains_key(&(e1.clone(), 1)),
        "the cancellation is answered: {answered:?}"
    );
    for server in servers.into_iter().flatten() {
        server.shutdown().await;
    }
}

/// While etcd has no quorum nothing can be recorded, so an event the VTN sends then is left
/// unanswered (never opted out of: a "could not record" opt-out would tell the utility the site
/// declines). When the quorum returns, a leader takes the event without an operator, answering
/// it once with optIn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_sent_while_etcd_has_no_quorum_is_taken_once_the_quorum_returns() {
    let mut etcd = Cluster::start();
    let vtn = Vtn::start().await;
    let dir = tempfile::tempdir().expect("dir");
    let servers = start_replicas(dir.path(), &vtn, &etcd).await;
    wait_for("a leader", Duration::from_secs(20), || async { leader_of(&servers) }).await;
    let ven_id = wait_for("the registration at the VTN", Duration::from_secs(30), || async {
        vtn.registered_ven_id(VEN_NAME)
            .await
            .ok_or_else(|| "not registered yet".to_string())
    })
    .await;
    // The registration is durable (in every replica's ledger) before etcd goes: a registration
    // the VTN gave but no quorum recorded would be known to this leader alone.
    wait_for(
        "the registration in the standby's ledger",
        Duration::from_secs(15),
        || async {
            let standby = servers
                .iter()
                .flatten()
                .find(|s| matches!(s.gateway.read().role(), Role::Standby { .. }))
                .ok_or("no standby")?;
            registration_recorded(standby)
                .then_some(())
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    // Two of three members down: no quorum. The event is queued for the VEN's next poll, which
    // the leader (its term not yet over) still makes.
    etcd.kill_member(1);
    etcd.kill_member(2);
    let e1 = add_event(&vtn, &ven_id).await;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let answered = answers(&vtn.state().await);
    assert!(
        !answered.contains_key(&(e1.clone(), 0)),
        "an event that could not be recorded was answered: {answered:?}"
    );
    etcd.start_member(1);
    etcd.start_member(2);
    etcd.wait_healthy(Duration::from_secs(30));
    wait_for("the optIn once the quorum is back", Duration::from_secs(40), || async {
        let answered = answers(&vtn.state().await);
        match answered.get(&(e1.clone(), 0)) {
            Some(opts) if opts == &["optIn".to_string()] => Ok(()),
            other => Err(format!("{other:?} in {answered:?}")),
        }
    })
    .await;
    let leader = wait_for("a leader", Duration::from_secs(20), || async { leader_of(&servers) }).await;
    assert!(
        has_event(servers[leader].as_ref().expect("leader"), &e1).await.is_ok(),
        "the event is in the leader's book"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let state = vtn.state().await;
    assert_eq!(
        registrations(&state),
        1,
        "a second registration: {}",
        state["registrations"]
    );
    for ((event, m), opts) in &answers(&state) {
        assert_eq!(opts, &["optIn".to_string()], "event {event} version {m}");
    }
    for server in servers.into_iter().flatten() {
        server.shutdown().await;
    }
}
