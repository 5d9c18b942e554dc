//! What an ack's ledger anchor proves, and what the gateway does with a ledger that no longer
//! verifies (issue 12, item 3).
//!
//! - The `log_checkpoint` of a `dr.ack/1` is the hash of the ledger record that holds that ack,
//!   whose body carries the SHA-256 of the document it answers. Rewriting the event's records
//!   and re-chaining every later hash (which `log verify` cannot notice) changes that hash, so
//!   the sender's anchor no longer matches.
//! - A ledger whose chain is broken is refused at start, with the record and the reason.
#![allow(clippy::disallowed_methods, reason = "test events run on the wall clock")]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::{Duration as ChronoDuration, SecondsFormat, Utc};
use flexgate::cluster::ClusterBackend;
use flexgate::cluster::sim::{SimCluster, SimConfig};
use flexgate::config::{Config, facility_for_nodes};
use flexgate::ledger::{Ledger, canonical_json};
use flexgate::runtime::{Clock, Gateway, StartError};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;
use tower::ServiceExt;

const TOKEN: &str = "test-token";

fn config(dir: &Path) -> Config {
    let mut c = Config::default();
    c.gateway.data_dir = dir.to_path_buf();
    c.gateway.site = "site-1".into();
    c.facility = facility_for_nodes(4);
    c
}

async fn start(dir: &Path) -> Result<Arc<Gateway>, StartError> {
    let sim = SimCluster::new(SimConfig {
        nodes: 4,
        seed: 3,
        settle_ms: 0,
        facility: facility_for_nodes(4),
        ..SimConfig::default()
    })
    .expect("sim");
    let ledger = Ledger::open(&dir.join("ledger")).await.expect("ledger");
    let backend: Arc<dyn ClusterBackend> = sim;
    Gateway::start(config(dir), Clock::real(), ledger, backend).await
}

async fn close(gw: Arc<Gateway>) {
    Arc::try_unwrap(gw)
        .ok()
        .expect("sole owner")
        .close()
        .await
        .expect("close");
}

fn event_text(ceiling_kw: u32) -> String {
    let start = (Utc::now() + ChronoDuration::seconds(3600)).to_rfc3339_opts(SecondsFormat::Secs, true);
    json!({"schema": "dr.event/1", "event_id": "ev-anchor", "revision": 1, "site": "site-1",
           "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
           "window": {"start": start, "ramp_s": 300, "duration_s": 3600, "recovery_s": 300}})
    .to_string()
}

async fn post(gw: &Arc<Gateway>, body: &str) -> (StatusCode, Value) {
    let router = flexgate::grid::http::router(gw.clone(), TOKEN);
    let request = Request::post("/v1/events")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Body::from(body.to_string()))
        .expect("request");
    let response = router.oneshot(request).await.expect("response");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
    (status, serde_json::from_slice(&bytes).expect("a JSON answer"))
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Every stored record of a closed ledger, by seq, as JSON.
fn raw_records(ledger_dir: &Path) -> (sled::Db, sled::Tree, Vec<(u64, Value)>) {
    let db = flexgate::ledger::sled_config(ledger_dir).open().expect("sled");
    let tree = db.open_tree("records").expect("records");
    let records = tree
        .iter()
        .map(|item| {
            let (key, bytes) = item.expect("record");
            let seq = u64::from_be_bytes(<[u8; 8]>::try_from(key.as_ref()).expect("8-byte key"));
            (seq, serde_json::from_slice(&bytes).expect("record JSON"))
        })
        .collect();
    (db, tree, records)
}

/// What a forger with write access does: store `record` with its hash recomputed by the
/// documented formula, `SHA-256(prev_hash ‖ canonical_json(record without hash))`.
fn store_rehashed(tree: &sled::Tree, seq: u64, mut record: Value, prev_hash: &str) -> String {
    record["prev_hash"] = json!(prev_hash);
    record.as_object_mut().expect("object").remove("hash");
    let mut hasher = Sha256::new();
    hasher.update(hex::decode(prev_hash).expect("hex"));
    hasher.update(canonical_json(&record).as_bytes());
    let hash = hex::encode(hasher.finalize());
    record["hash"] = json!(hash);
    tree.insert(seq.to_be_bytes(), canonical_json(&record).as_bytes())
        .expect("insert");
    hash
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ack_anchor_is_its_own_record_and_a_rechained_rewrite_breaks_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(dir.path()).await.expect("start");
    let body = event_text(130);
    let (status, ack) = post(&gw, &body).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let checkpoint = ack["log_checkpoint"].as_str().expect("log_checkpoint").to_string();
    let seq = ack["log_seq"].as_u64().expect("log_seq");

    // The anchor is the record that holds this ack and the digest of what was sent.
    let record = gw.ledger().get(seq).expect("read").expect("the anchored record exists");
    assert_eq!(record.hash, checkpoint, "log_checkpoint is the hash of record log_seq");
    assert_eq!(record.event.as_deref(), Some("ev-anchor"));
    assert_eq!(record.body["ack"]["opt"], "in", "{}", record.body);
    assert_eq!(
        record.body["input_sha256"],
        sha256_hex(body.as_bytes()),
        "{}",
        record.body
    );
    assert!(
        record.body["ack"].get("log_checkpoint").is_none(),
        "a record cannot hold its own hash: {}",
        record.body
    );
    // The received document is earlier in the chain that hash covers.
    let received = (1..seq)
        .filter_map(|s| gw.ledger().get(s).expect("read"))
        .find(|r| r.event.as_deref() == Some("ev-anchor") && r.body["received"]["bytes"].is_string())
        .expect("the received document is recorded before its ack");
    assert_eq!(received.body["received"]["bytes"], body);

    // A repeat is answered with the same anchor.
    let (status, again) = post(&gw, &body).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["log_checkpoint"], checkpoint);
    assert_eq!(again["log_seq"], seq);
    close(gw).await;

    // The acks the sender kept, as checkpoints: the ledger agrees with them.
    let kept = dir.path().join("acks.jsonl");
    std::fs::write(&kept, format!("{ack}\n")).expect("acks");
    let verify = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_flexgate"))
            .args(["log", "verify", "--data"])
            .arg(dir.path())
            .arg("--checkpoints")
            .arg(&kept)
            .output()
            .expect("flexgate runs")
    };
    let before = verify();
    assert!(
        before.status.success() && String::from_utf8_lossy(&before.stdout).contains("1 checkpoints"),
        "{before:?}"
    );

    // The forger rewrites the received document (130 kW → 930 kW) and re-chains every later
    // record, so that the chain verifies again.
    let ledger_dir = dir.path().join("ledger");
    {
        let (db, tree, records) = raw_records(&ledger_dir);
        let mut prev_hash = None::<String>;
        for (s, mut value) in records {
            if s == received.seq {
                let forged = value["body"]["received"]["bytes"]
                    .as_str()
                    .expect("bytes")
                    .replace("\"kw\":130", "\"kw\":930");
                assert_ne!(forged, body, "the rewrite changes the document");
                value["body"]["received"]["bytes"] = json!(forged);
            }
            if s >= received.seq {
                let prev = prev_hash
                    .clone()
                    .unwrap_or_else(|| value["prev_hash"].as_str().expect("prev").into());
                prev_hash = Some(store_rehashed(&tree, s, value, &prev));
            }
        }
        db.flush().expect("flush");
    }
    let report = flexgate::ledger::verify(&ledger_dir).expect("a re-chained rewrite passes the chain walk");
    assert!(report.records >= seq);
    let (_db, _tree, records) = raw_records(&ledger_dir);
    let anchored = records.iter().find(|(s, _)| *s == seq).expect("record log_seq");
    assert_ne!(
        anchored.1["hash"].as_str(),
        Some(checkpoint.as_str()),
        "the sender's anchor no longer matches the rewritten ledger"
    );
    assert!(
        records
            .iter()
            .all(|(_, r)| r["hash"].as_str() != Some(checkpoint.as_str())),
        "no record of the rewritten ledger has the anchored hash"
    );
    // The rewrite verifies alone, not against the acks the sender kept.
    drop((_db, _tree, records));
    let after = verify();
    let stderr = String::from_utf8_lossy(&after.stderr);
    assert!(
        !after.status.success() && stderr.contains(&format!("record {seq}")) && stderr.contains("FAILED"),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_refuses_to_start_on_a_ledger_that_fails_verification() {
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = start(dir.path()).await.expect("start");
    let (status, ack) = post(&gw, &event_text(130)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    // Later records, so that the edited one is in the middle of the chain (the last record is
    // checked when the ledger opens).
    let (status, ack) = post(&gw, &event_text(140).replace("ev-anchor", "ev-later")).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    close(gw).await;

    // Edit the interpretation's ceiling in place: sled stores the edited value with a correct
    // checksum of its own, so only the hash chain can tell.
    let ledger_dir = dir.path().join("ledger");
    let edited_seq = {
        let (db, tree, records) = raw_records(&ledger_dir);
        let (seq, mut value) = records
            .into_iter()
            .find(|(_, r)| r["event"] == "ev-anchor" && r["body"]["ceilings"].is_array())
            .expect("the interpretation record");
        let text = canonical_json(&value["body"]).replace("\"ceiling_kw\":130", "\"ceiling_kw\":930");
        assert!(text.contains("930"), "the ceiling was found: {text}");
        value["body"] = serde_json::from_str(&text).expect("json");
        tree.insert(seq.to_be_bytes(), canonical_json(&value).as_bytes())
            .expect("insert");
        db.flush().expect("flush");
        seq
    };
    let refused = start(dir.path()).await.err().expect("the gateway must not start");
    match &refused {
        StartError::ChainBroken { seq, reason, .. } => {
            assert_eq!(*seq, edited_seq, "{refused}");
            assert!(reason.contains("hash"), "{reason}");
        }
        other => panic!("expected ChainBroken, got {other}"),
    }
    let message = refused.to_string();
    assert!(
        message.contains(&format!("record {edited_seq}")) && message.contains("does not act"),
        "{message}"
    );
}
