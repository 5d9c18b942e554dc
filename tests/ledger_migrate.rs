//! A ledger of schema 1, written by the release before typed entries (the fixture
//! `tests/fixtures/ledger-schema1.jsonl` is a real export of it: an event, its plans and
//! dispatches, a closed-loop trim, an operator opt-out and the restore), is refused at start
//! with a message naming the schema and the migration command; `flexgate log migrate` rewrites
//! it as typed entries, and the gateway then replays it.

use flexgate::cluster::ClusterBackend;
use flexgate::cluster::sim::{SimCluster, SimConfig};
use flexgate::config::{Config, facility_for_nodes};
use flexgate::ledger::{Ledger, NewRecord, Record};
use flexgate::runtime::{Clock, Gateway, StartError};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

const FIXTURE: &str = include_str!("fixtures/ledger-schema1.jsonl");

/// The fixture's records appended, in order, to a fresh ledger in `dir` (the store does not
/// interpret bodies, so this is byte for byte what schema 1 wrote, re-chained).
async fn schema1_ledger(dir: &Path) {
    let ledger = Ledger::open(dir).await.expect("open");
    let records: Vec<NewRecord> = FIXTURE
        .lines()
        .map(|line| {
            let r: Record = serde_json::from_str(line).expect("a fixture record");
            NewRecord {
                kind: r.kind,
                event: r.event,
                dedup_key: r.dedup_key,
                body: r.body,
            }
        })
        .collect();
    ledger.append_all(records).await.expect("append");
    ledger.close().await.expect("close");
}

/// `flexgate log migrate --data OLD --to TO`, as an operator runs it.
fn migrate(old: &Path, to: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_flexgate"))
        .args(["log", "migrate", "--data"])
        .arg(old)
        .arg("--to")
        .arg(to)
        .output()
        .expect("flexgate log migrate")
}

async fn start(data: &Path) -> Result<Arc<Gateway>, StartError> {
    let facility = facility_for_nodes(16);
    let sim = SimCluster::new(SimConfig {
        facility: facility.clone(),
        ..SimConfig::default()
    })
    .expect("sim");
    let mut config = Config::default();
    config.gateway.data_dir = data.to_path_buf();
    config.facility = facility;
    let ledger = Ledger::open(&data.join("ledger")).await.expect("ledger");
    let backend: Arc<dyn ClusterBackend> = sim;
    Gateway::start(config, Clock::real(), ledger, backend).await
}

#[tokio::test]
async fn a_schema_1_ledger_is_refused_then_migrated_and_replayed() {
    let dir = tempfile::tempdir().expect("dir");
    let old = dir.path().join("old");
    schema1_ledger(&old.join("ledger")).await;

    // Refused, clearly, with nothing changed.
    let refused = match start(&old).await {
        Ok(_) => panic!("a schema-1 ledger must not be replayed"),
        Err(e) => e.to_string(),
    };
    assert!(
        refused.contains("schema 1") && refused.contains("flexgate log migrate"),
        "{refused}"
    );
    assert!(
        refused.contains("record 1"),
        "names the first record that does not read: {refused}"
    );

    // Migrated by the command an operator runs.
    let new = dir.path().join("new");
    let out = migrate(&old, &new.join("ledger"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("migrated 27 records"), "{said}");
    // Migrating again into the same place is refused (nothing is overwritten).
    let again = migrate(&old, &new.join("ledger"));
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));

    // The new chain verifies; its first record anchors it to the old one.
    let report = flexgate::ledger::verify(&new.join("ledger")).expect("the migrated ledger verifies");
    // The marker, the 27 records, and the curtailment's end that schema 1 left implicit.
    assert_eq!(report.records, 29);
    let old_head = flexgate::ledger::verify(&old.join("ledger")).expect("old").head_hash;
    let mut buffer = Vec::new();
    flexgate::ledger::export(
        &new.join("ledger"),
        flexgate::ledger::ExportFormat::Jsonl,
        None,
        &mut buffer,
    )
    .expect("export");
    let first: Record = serde_json::from_slice(buffer.split(|b| *b == b'\n').next().expect("a line")).expect("record");
    assert_eq!(first.body["entry"], "ledger_migrated");
    assert_eq!(first.body["head_hash"], serde_json::json!(old_head));

    // And the gateway replays it: the event is back in the book, opted out by alice.
    let gw = start(&new).await.expect("the migrated ledger is replayed");
    let events = gw.read().events().await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].id, "ev-old");
    assert_eq!(events[0].state, "opted_out", "{events:?}");
    assert!(
        gw.read().plan().await.is_none(),
        "the restore was recorded: no plan in force"
    );
    Arc::try_unwrap(gw)
        .ok()
        .expect("sole owner")
        .close()
        .await
        .expect("close");
    let records = flexgate::commands::audit::read_records(&new).expect("records");
    let audit = flexgate::reports::audit::build(&records, "ev-old", 900, chrono_tz::Tz::UTC)
        .expect("typed entries")
        .expect("the event's audit");
    assert_eq!(audit.opt_outs.len(), 1);
    assert_eq!(audit.opt_outs[0].operator, "alice");
    assert_eq!(
        audit.trims.len(),
        1,
        "the schema-1 trim is a trim, not an operator action"
    );
    assert!(audit.plans.len() >= 2);
}
