//! Ledger benchmarks: durable records per second.
//!
//! Every append resolves only after sled's flush, so throughput comes from group commit: the
//! writer flushes once per batch of whatever is pending.
//!
//! - `ledger_append/group_commit_64x200`: 64 concurrent appenders, 200 appends each (12,800
//!   records of ~512-byte bodies, each with a dedup key) on a 4-worker Tokio runtime. Target:
//!   ≥ 5,000 durable records/s.
//! - `ledger_append/sequential_1x200`: one appender, 200 appends one after the other, so one
//!   flush per record: the baseline that group commit improves on.
//! - `ledger_verify/12800`: full chain verification (hashes, links, dedup index) of 12,800
//!   records, for scale (the gateway walks the whole chain at start).
//! - `sled_commit/flush` and `sled_commit/flush_fdatasync`: one ~512-byte insert and flush of a
//!   bare sled tree, without and with the `fdatasync(2)` of sled's log file that the ledger adds
//!   after every flush (`src/ledger/durable.rs`): the cost of durability against power loss,
//!   measured in the same run as the ledger figures.
//! - `sled_commit/ack_shaped/*`: the commit an event's acknowledgment waits for (three records
//!   and their de-duplication entries in one transaction over two trees), then with sled's
//!   flush, then with the `fdatasync`: where the ack's time goes, stage by stage.
//!
//! The ledger lives under `CARGO_TARGET_TMPDIR` (the target directory's disk), not `/tmp`, which
//! may be a tmpfs where a flush costs nothing. Figures are only meaningful on the disk the
//! gateway will use (see the ledger module docs for what each flush guarantees).
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use flexgate::ledger::{Ledger, NewRecord, RecordKind};
use serde_json::json;
use sled::Transactional;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const APPENDERS: u64 = 64;
const PER_APPENDER: u64 = 200;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a Tokio runtime starts")
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ledger-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory under the target directory")
}

/// A ~512-byte measurement body (canonical JSON of the body is 512 ± a few bytes).
fn body(appender: u64, i: u64) -> serde_json::Value {
    json!({
        "meter": "rev-1",
        "appender": appender,
        "i": i,
        "kw": 1234.5 + i as f64 / 7.0,
        "quality": "ok",
        "note": "x".repeat(420),
    })
}

/// Appends `appenders × per_appender` records concurrently; returns the elapsed time.
async fn burst(ledger: &Ledger, appenders: u64, per_appender: u64, run: u64) -> Duration {
    let started = Instant::now();
    let tasks: Vec<_> = (0..appenders)
        .map(|a| {
            let ledger = ledger.clone();
            tokio::spawn(async move {
                for i in 0..per_appender {
                    let entry = NewRecord::new(RecordKind::Measurement, body(a, i))
                        .with_event("bench")
                        .with_dedup_key(format!("{run}/{a}/{i}"));
                    let appended = ledger.append(entry).await.expect("append");
                    assert!(!appended.duplicate);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("an appender task finishes");
    }
    started.elapsed()
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    let dir = temp_dir();
    let ledger = rt.block_on(Ledger::open(dir.path())).expect("open");
    let runs = AtomicU64::new(0);
    let mut group = c.benchmark_group("ledger_append");
    group
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .measurement_time(Duration::from_secs(15));

    group.throughput(Throughput::Elements(APPENDERS * PER_APPENDER));
    group.bench_function(
        BenchmarkId::new("group_commit", format!("{APPENDERS}x{PER_APPENDER}")),
        |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        rt.block_on(burst(
                            &ledger,
                            APPENDERS,
                            PER_APPENDER,
                            runs.fetch_add(1, Ordering::Relaxed),
                        ))
                    })
                    .sum()
            })
        },
    );

    group.throughput(Throughput::Elements(PER_APPENDER));
    group.bench_function(BenchmarkId::new("sequential", format!("1x{PER_APPENDER}")), |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| rt.block_on(burst(&ledger, 1, PER_APPENDER, runs.fetch_add(1, Ordering::Relaxed))))
                .sum()
        })
    });
    group.finish();
    rt.block_on(ledger.close()).expect("close");
}

fn verify(c: &mut Criterion) {
    let rt = runtime();
    let dir = temp_dir();
    let records = APPENDERS * PER_APPENDER;
    rt.block_on(async {
        let ledger = Ledger::open(dir.path()).await.expect("open");
        burst(&ledger, APPENDERS, PER_APPENDER, 0).await;
        ledger.close().await.expect("close");
    });
    let mut group = c.benchmark_group("ledger_verify");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.throughput(Throughput::Elements(records));
    group.bench_function(BenchmarkId::from_parameter(records), |b| {
        b.iter(|| {
            let report = flexgate::ledger::verify(dir.path()).expect("the chain verifies");
            assert_eq!(report.records, records);
        })
    });
    group.finish();
}

/// The durability step alone: sled's flush (`sync_file_range`), then the same plus
/// `fdatasync` of the log file, one record per commit.
fn sled_commit(c: &mut Criterion) {
    let dir = temp_dir();
    let db = sled::Config::new()
        .path(dir.path())
        .cache_capacity(16 << 20)
        .open()
        .expect("sled opens");
    let tree = db.open_tree("records").expect("tree");
    let log = std::fs::File::open(dir.path().join("db")).expect("sled's log file");
    let value = flexgate::ledger::canonical_json(&body(0, 0)).into_bytes();
    let mut key = 0u64;
    let mut group = c.benchmark_group("sled_commit");
    group.throughput(Throughput::Elements(1));
    group.bench_function("flush", |b| {
        b.iter(|| {
            key += 1;
            tree.insert(key.to_be_bytes(), value.as_slice()).expect("insert");
            db.flush().expect("flush");
        })
    });
    group.bench_function("flush_fdatasync", |b| {
        b.iter(|| {
            key += 1;
            tree.insert(key.to_be_bytes(), value.as_slice()).expect("insert");
            db.flush().expect("flush");
            log.sync_data().expect("fdatasync");
        })
    });
    // The shape of an event's acknowledgment commit: three records (raw input, interpretation,
    // ack: 705, 2,752 and 743 bytes as the gateway bench writes them) and their
    // de-duplication entries, in one transaction over the two trees, as the ledger writer does.
    let dedup = db.open_tree("dedup").expect("tree");
    let ack_records: Vec<Vec<u8>> = [705usize, 2_752, 743].iter().map(|n| vec![b'x'; *n]).collect();
    let ack_commit = |key: &mut u64| {
        let mut records = sled::Batch::default();
        let mut keys = sled::Batch::default();
        for value in &ack_records {
            *key += 1;
            records.insert(&key.to_be_bytes(), value.as_slice());
            keys.insert(format!("ack:ev-{key}:1").as_bytes(), &key.to_be_bytes());
        }
        let written: Result<(), sled::transaction::TransactionError<()>> =
            (&tree, &dedup).transaction(|(records_tx, dedup_tx)| {
                records_tx.apply_batch(&records)?;
                dedup_tx.apply_batch(&keys)?;
                Ok(())
            });
        written.expect("transaction");
    };
    group.bench_function("ack_shaped/transaction", |b| b.iter(|| ack_commit(&mut key)));
    group.bench_function("ack_shaped/transaction_flush", |b| {
        b.iter(|| {
            ack_commit(&mut key);
            db.flush().expect("flush");
        })
    });
    group.bench_function("ack_shaped/transaction_flush_fdatasync", |b| {
        b.iter(|| {
            ack_commit(&mut key);
            db.flush().expect("flush");
            log.sync_data().expect("fdatasync");
        })
    });
    group.finish();
}

criterion_group!(benches, append, verify, sled_commit);
criterion_main!(benches);
