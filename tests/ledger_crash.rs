//! Kill -9 harness for the ledger (the durability promise behind "One writer, group commit" in
//! ARCHITECTURE.md): no acknowledged record may be lost when the process dies at a random
//! moment.
//!
//! The test re-executes its own binary as the child (`crash_child`, selected by an environment
//! variable; without it that test does nothing). The child opens the ledger and appends records
//! with dedup keys `k{N}`, eight at a time, printing `ack N` only after `append` returned. The
//! parent SIGKILLs it (`Child::kill` sends SIGKILL on Unix) after a pseudo-random 20–300 ms, then
//! checks that the ledger opens, that every acknowledged N is present (and that the acknowledged
//! Ns form a gap-free prefix), that no key was written twice, and that the chain verifies. The
//! next child continues from the highest acknowledged N on the same ledger, so keys that were
//! written but never acknowledged come back as duplicates.
//!
//! Environment: `FLEXGATE_LEDGER_CRASH_ROUNDS` (default 25), `FLEXGATE_LEDGER_CRASH_SEED`.

use flexgate::ledger::{Ledger, NewRecord, RecordKind, verify};
use serde_json::json;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const CHILD_DIR: &str = "FLEXGATE_LEDGER_CRASH_CHILD_DIR";
const CHILD_START: &str = "FLEXGATE_LEDGER_CRASH_CHILD_START";
const CHILD_WINDOWS: &str = "FLEXGATE_LEDGER_CRASH_CHILD_WINDOWS";
/// Appends in flight at once in the child (so group commits hold several records).
const WINDOW: u64 = 8;

/// The child process. Does nothing unless the parent set `CHILD_DIR`.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let start: u64 = std::env::var(CHILD_START).unwrap().parse().unwrap();
    let windows: Option<u64> = std::env::var(CHILD_WINDOWS).ok().map(|w| w.parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let ledger = Ledger::open(Path::new(&dir)).await.unwrap();
        let mut n = start;
        let mut done = 0;
        while windows.is_none_or(|w| done < w) {
            let tasks: Vec<_> = (n..n + WINDOW)
                .map(|k| {
                    let ledger = ledger.clone();
                    let entry = NewRecord::new(RecordKind::Measurement, json!({"n": k, "kw": k as f64 / 3.0}))
                        .with_event("crash-test")
                        .with_dedup_key(format!("k{k}"));
                    tokio::spawn(async move { (k, ledger.append(entry).await) })
                })
                .collect();
            for task in tasks {
                let (k, appended) = task.await.unwrap();
                appended.unwrap();
                println!("ack {k}"); // only after append returned, i.e. after the flush
            }
            n += WINDOW;
            done += 1;
        }
        ledger.close().await.unwrap();
    });
}

/// splitmix64: a small deterministic PRNG for the kill delays.
struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Starts the child and a thread collecting the Ns it acknowledges (complete lines only).
fn spawn_child(dir: &Path, start: u64, windows: Option<u64>) -> (Child, JoinHandle<Vec<u64>>) {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command
        .args(["crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR, dir)
        .env(CHILD_START, start.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    match windows {
        Some(w) => command.env(CHILD_WINDOWS, w.to_string()),
        None => command.env_remove(CHILD_WINDOWS),
    };
    let mut child = command.spawn().expect("the child process starts");
    let stdout = child.stdout.take().expect("the child's stdout is piped");
    let reader = std::thread::spawn(move || {
        let mut reader = BufReader::new(stdout);
        let mut acks = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => break,
                Ok(_) if line.last() != Some(&b'\n') => break, // cut off by the kill: not an ack
                Ok(_) => {
                    // libtest may have printed "test crash_child ... " on the same line.
                    let text = String::from_utf8_lossy(&line);
                    if let Some((_, n)) = text.trim_end().rsplit_once("ack ") {
                        acks.push(n.parse().expect("an ack line holds a number"));
                    }
                }
            }
        }
        acks
    });
    (child, reader)
}

/// Reopens the ledger and checks everything the harness promises; returns the record count.
fn check(runtime: &tokio::runtime::Runtime, dir: &Path, acked: &BTreeSet<u64>, context: &str) -> u64 {
    let keys = runtime.block_on(async {
        let ledger = Ledger::open(dir)
            .await
            .unwrap_or_else(|e| panic!("{context}: reopening failed: {e}"));
        for n in acked {
            assert!(
                ledger.find_dedup(&format!("k{n}")).expect("dedup lookup").is_some(),
                "{context}: acknowledged record k{n} was lost"
            );
        }
        // Keys written but never acknowledged lie within one window after the last ack.
        let first_unacked = acked.last().map_or(0, |n| n + 1);
        let unacked = (first_unacked..first_unacked + 2 * WINDOW)
            .filter(|n| ledger.find_dedup(&format!("k{n}")).expect("dedup lookup").is_some())
            .count() as u64;
        ledger.close().await.expect("close");
        acked.len() as u64 + unacked
    });
    // The auditor's path: open the store from scratch and walk the whole chain (hashes, links,
    // gaps, and the dedup index: every record's key must point back at that record).
    let report = verify(dir).unwrap_or_else(|f| panic!("{context}: {f}"));
    assert_eq!(
        report.records, keys,
        "{context}: every record holds a distinct key k{{N}}"
    );
    report.records
}

#[test]
fn kill_9_loses_no_acknowledged_record() {
    let rounds: u64 = std::env::var("FLEXGATE_LEDGER_CRASH_ROUNDS").map_or(25, |r| r.parse().unwrap());
    let seed: u64 = std::env::var("FLEXGATE_LEDGER_CRASH_SEED").map_or(0xF1E8_6A7E_u64, |s| s.parse().unwrap());
    let root = tempfile::Builder::new()
        .prefix("ledger-crash")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let dir = root.path().join("ledger");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut prng = Prng(seed);
    let mut acked: BTreeSet<u64> = BTreeSet::new();
    let started = Instant::now();
    let mut rounds_with_acks = 0;
    for round in 0..rounds {
        let next = acked.last().map_or(0, |n| n + 1);
        let delay = Duration::from_millis(20 + prng.next() % 281);
        let (mut child, reader) = spawn_child(&dir, next, None);
        std::thread::sleep(delay);
        if let Some(status) = child.try_wait().unwrap() {
            panic!("round {round}: the child exited on its own ({status}) before the kill");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let acks = reader.join().unwrap();
        if !acks.is_empty() {
            rounds_with_acks += 1;
        }
        acked.extend(acks);
        let context = format!("round {round} (seed {seed}, kill after {delay:?})");
        // Acknowledged Ns form a gap-free prefix: each child starts after the last acknowledged N.
        assert_eq!(
            acked.len() as u64,
            acked.last().map_or(0, |n| n + 1),
            "{context}: gap in acks"
        );
        let records = check(&runtime, &dir, &acked, &context);
        assert!(records >= acked.len() as u64, "{context}");
    }

    // A last child runs to completion and closes cleanly on the same ledger.
    let next = acked.last().map_or(0, |n| n + 1);
    let (mut child, reader) = spawn_child(&dir, next, Some(4));
    let status = child.wait().unwrap();
    assert!(status.success(), "the final child failed: {status}");
    let acks = reader.join().unwrap();
    assert_eq!(acks, (next..next + 4 * WINDOW).collect::<Vec<_>>());
    acked.extend(acks);
    let records = check(&runtime, &dir, &acked, "final");
    assert_eq!(
        records,
        acked.len() as u64,
        "after a clean run every record was acknowledged"
    );

    eprintln!(
        "{rounds} SIGKILL rounds ({rounds_with_acks} with acks), {} acknowledged records, none lost, {:.1} s",
        acked.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(rounds_with_acks > 0, "no round got far enough to acknowledge anything");
}
