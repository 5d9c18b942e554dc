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
//!   records, for scale.
//!
//! The ledger lives under `CARGO_TARGET_TMPDIR` (the target directory's disk), not `/tmp`, which
//! may be a tmpfs where a flush costs nothing. Figures are only meaningful on the disk the
//! gateway will use; sled's flush is `sync_file_range`, not `fsync` (see the ledger module docs).
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main};
use flexgate::ledger::{Ledger, NewRecord, RecordKind};
use serde_json::json;
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

criterion_group!(benches, append, verify);
criterion_main!(benches);
