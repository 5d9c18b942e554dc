//! The MQTT delivery guarantee with the real binary and a real Mosquitto: SIGKILL of
//! `flexgate run` between the receipt of an event and the flush of its record loses nothing
//! and duplicates nothing.
//!
//! The gateway is stopped deterministically at that point (`FLEXGATE_PAUSE_AT`, a crash drill
//! compiled into debug builds only), then killed with SIGKILL. Events after it were recorded
//! but not acknowledged to the broker (PUBACKs go in arrival order). After a restart the broker
//! redelivers all of them: the one never recorded is recorded once, the ones recorded are
//! recognized, and every event ends up acknowledged with exactly one raw-input record.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

mod common;

use common::mosquitto::Mosquitto;
use flexgate::ledger::{Ledger, RecordKind};
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const SITE: &str = "site-1";
const EVENTS: usize = 6;
const PAUSED: &str = "ev-3";

fn start(data: &Path, broker: &Mosquitto, pause: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flexgate"));
    cmd.args([
        "run",
        "--data",
        data.to_str().expect("utf-8"),
        "--listen",
        "127.0.0.1:0",
        "--mqtt",
        &broker.url(),
        "--site",
        SITE,
    ])
    .env("FLEXGATE_API_TOKEN", "kill-test-token-0123")
    .env("RUST_LOG", "warn")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    if let Some(point) = pause {
        cmd.env("FLEXGATE_PAUSE_AT", point);
    }
    cmd.spawn().expect("flexgate run starts")
}

fn event(id: &str) -> Vec<u8> {
    let start =
        (chrono::Utc::now() + chrono::Duration::seconds(600)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    json!({"schema": "dr.event/1", "event_id": id, "revision": 1, "site": SITE, "test": true,
           "target": {"form": "ceiling", "point": "meter", "kw": 100.0},
           "window": {"start": start, "ramp_s": 0, "duration_s": 600}})
    .to_string()
    .into_bytes()
}

/// Raw-input records per event id.
async fn raw_inputs(data: &Path) -> HashMap<String, usize> {
    let ledger = Ledger::open(&data.join("ledger"))
        .await
        .expect("ledger opens after the kill");
    let mut counts = HashMap::new();
    for record in ledger.iter_from(1) {
        let record = record.expect("readable record");
        if record.kind == RecordKind::RawInput
            && let Some(id) = record.event
        {
            *counts.entry(id).or_insert(0) += 1;
        }
    }
    ledger.close().await.expect("close");
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_receipt_and_flush_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let data = dir.path().join("gw");

    // The utility: publishes events, collects acks.
    let mut options = MqttOptions::new("utility-kill", "127.0.0.1", broker.port);
    options.set_keep_alive(Duration::from_secs(5));
    let (utility, mut eventloop) = AsyncClient::new(options, 100);
    utility
        .subscribe(format!("dr/{SITE}/acks/+"), QoS::AtLeastOnce)
        .await
        .expect("subscribe");
    let (ack_tx, mut acks) = mpsc::unbounded_channel::<Value>();
    tokio::spawn(async move {
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let _ = ack_tx.send(serde_json::from_slice(&p.payload).unwrap_or(Value::Null));
                }
                Ok(_) => {}
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });

    // First run: paused at the receipt of ev-3, then killed.
    let mut gateway = start(&data, &broker, Some(&format!("mqtt_received:{PAUSED}")));
    let stderr = gateway.stderr.take().expect("stderr");
    let (paused_tx, paused_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("paused at mqtt_received") {
                let _ = paused_tx.send(line);
            }
        }
    });
    // The gateway's subscription exists once its retained status is online; publish after.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 1..=EVENTS {
        let id = format!("ev-{i}");
        utility
            .publish(format!("dr/{SITE}/events/{id}"), QoS::AtLeastOnce, false, event(&id))
            .await
            .expect("publish");
    }
    let line = paused_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the gateway reached the pause point");
    assert!(line.contains(PAUSED), "{line}");
    // Let the events after it be recorded (they cannot be acked: PUBACKs go in order).
    tokio::time::sleep(Duration::from_secs(2)).await;
    gateway.kill().expect("SIGKILL");
    let _ = gateway.wait();

    let first = raw_inputs(&data).await;
    assert_eq!(
        first.get(PAUSED),
        None,
        "killed before the paused event was recorded: {first:?}"
    );
    assert_eq!(first.get("ev-1"), Some(&1), "{first:?}");
    let mut acked_first: Vec<String> = Vec::new();
    while let Ok(ack) = acks.try_recv() {
        acked_first.push(ack["event_id"].as_str().unwrap_or_default().to_owned());
    }
    // Recorded but never acknowledged: the redelivery must be recognized, not recorded again.
    for id in ["ev-4", "ev-5", "ev-6"] {
        assert_eq!(first.get(id), Some(&1), "{id} recorded before the kill: {first:?}");
        assert!(
            !acked_first.iter().any(|a| a == id),
            "{id} acked before the kill: {acked_first:?}"
        );
    }
    assert!(!acked_first.iter().any(|id| id == PAUSED), "{acked_first:?}");

    // Second run: the broker redelivers what was not acknowledged.
    let mut gateway = start(&data, &broker, None);
    let mut acked: HashMap<String, Value> = acked_first.into_iter().map(|id| (id, Value::Null)).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while acked.len() < EVENTS {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some(ack)) = tokio::time::timeout(left, acks.recv()).await else {
            panic!("acked after the restart: {:?}", acked.keys());
        };
        assert_eq!(ack["opt"], "in", "{ack}");
        acked.insert(ack["event_id"].as_str().unwrap_or_default().to_owned(), ack);
    }
    // Give the gateway a moment to send the PUBACKs, then stop it the hard way again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    gateway.kill().expect("SIGKILL");
    let _ = gateway.wait();

    let after = raw_inputs(&data).await;
    for i in 1..=EVENTS {
        let id = format!("ev-{i}");
        assert_eq!(after.get(&id), Some(&1), "exactly one raw input for {id}: {after:?}");
    }
    let verify = Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args(["log", "verify", "--data", data.to_str().expect("utf-8")])
        .output()
        .expect("verify runs");
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stderr));
}
