//! Replicas on etcd: what an acknowledgment costs when its records must be committed in a
//! three-member etcd cluster (127.0.0.1) before the ack, beside the same gateway alone, in one
//! run: submit → records durable → ack, p50/p99/max over 500 revisions of one event on a
//! simulated fleet of 40 nodes (each revision moves the ceiling, so each is a new decision).
//!
//! `cargo bench --bench ha`; `-- --test` runs a smoke version (the test script does). Needs
//! Debian's etcd-server (`tests/peers/setup.sh --only etcd`).
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use chrono::{SecondsFormat, Utc};
use flexgate::cluster::ClusterBackend;
use flexgate::cluster::sim::{SimCluster, SimConfig};
use flexgate::config::{Config, facility_for_nodes};
use flexgate::ha::keys::Keys;
use flexgate::ha::quorum::EtcdQuorum;
use flexgate::ledger::Ledger;
use flexgate::runtime::{Clock, Gateway, Role, Transport};
use flexgate_etcd::{Campaign, Client, Election};
use std::sync::Arc;
use std::time::{Duration, Instant};

const NODES: u32 = 40;

fn config(dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.facility = facility_for_nodes(NODES);
    config
}

fn sim() -> Arc<dyn ClusterBackend> {
    SimCluster::new(SimConfig {
        nodes: NODES,
        settle_ms: 0,
        facility: facility_for_nodes(NODES),
        ..SimConfig::default()
    })
    .expect("sim")
}

fn event(revision: u64, kw: f64) -> Vec<u8> {
    let start = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    serde_json::json!({"schema": "dr.event/1", "event_id": "bench", "revision": revision, "site": "site-1",
        "target": {"form": "ceiling", "point": "meter", "kw": kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 3600, "recovery_s": 0}})
    .to_string()
    .into_bytes()
}

/// Submit `revisions` revisions; the ack latency of each after the first five.
async fn acks(gw: &Gateway, revisions: u64) -> Vec<Duration> {
    gw.driver().tick(true).await.expect("first measurement");
    let meter = gw.read().status().await.measured_meter_kw().expect("meter");
    let mut out = Vec::new();
    for revision in 1..=revisions {
        let kw = meter * if revision % 2 == 0 { 0.80 } else { 0.82 };
        let start = Instant::now();
        gw.driver()
            .submit(
                flexgate::grid::dr_event::submission(&event(revision, kw), flexgate_policies::event::EventSource::Http),
                Transport::Http { peer: None },
            )
            .await
            .expect("accepted");
        if revision > 5 {
            out.push(start.elapsed());
        }
    }
    out
}

fn show(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "{name:<40} n={:<4} p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
        samples.len(),
        ms(at(0.5)),
        ms(at(0.99)),
        ms(*samples.last().expect("samples"))
    );
    at(0.99)
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let revisions = if smoke { 20 } else { 500 };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        // Alone.
        let dir = tempfile::tempdir().expect("dir");
        let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
        let single = Gateway::start(config(dir.path()), Clock::real(), ledger, sim())
            .await
            .expect("gateway");
        let single_acks = acks(&single, revisions).await;
        drop(single);

        // A replica leading, its batches committed in etcd before each ack.
        let etcd = flexgate_etcd::testing::Cluster::start();
        let client = Arc::new(
            Client::new(
                flexgate_etcd::testing::http(),
                &etcd.endpoints(),
                Duration::from_secs(2),
            )
            .expect("client"),
        );
        let keys = Keys::new("/flexgate", "site-1");
        let election = Election::new(&client, keys.leader(), "bench", Duration::from_secs(30));
        let Ok(Campaign::Won(term)) = election.campaign().await else {
            panic!("the only replica did not win");
        };
        let dir = tempfile::tempdir().expect("dir");
        let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
        ledger.follow().await.expect("follow");
        let standby = Role::Standby {
            replica: "bench".into(),
            leader: None,
            reason: None,
        };
        let replica = Gateway::start_standby(config(dir.path()), Clock::real(), ledger, sim(), standby)
            .await
            .expect("replica");
        let quorum = EtcdQuorum::new(
            client.clone(),
            keys,
            term.epoch,
            tokio::runtime::Handle::current(),
            Duration::from_secs(5),
        )
        .await
        .expect("quorum");
        replica.ledger().lead(Box::new(quorum)).await.expect("lead");
        replica.set_role(Role::Leader {
            replica: "bench".into(),
            epoch: u64::try_from(term.epoch).expect("epoch"),
        });
        replica.driver().take_charge().await.expect("take charge");
        let ha_acks = acks(&replica, revisions).await;
        println!("simulated fleet on {NODES} nodes; etcd: three members on 127.0.0.1");
        let single_p99 = show("submit → ack, single gateway", single_acks);
        let ha_p99 = show("submit → ack, replica (committed in etcd)", ha_acks);
        println!(
            "p99 ratio, replica / single: {:.2}",
            ha_p99.as_secs_f64() / single_p99.as_secs_f64().max(1e-9)
        );
    });
}
