//! Replays the fuzzing corpora and seeds (`fuzz/corpus/dr_event`, `fuzz/corpus/dr_payloads`,
//! `fuzz/seeds`) through the same checks the fuzz targets make (`fuzz/fuzz_targets/checks.rs`,
//! included below) on every test run, so a change that makes any of those inputs panic, or
//! breaks a round trip, fails here, on stable, without a fuzzing toolchain. (The fuzz targets
//! themselves run on nightly; see `fuzz/README.md`.)

#[path = "../fuzz/fuzz_targets/checks.rs"]
mod checks;

use checks::Outcome;
use std::path::PathBuf;

fn files(dir: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    out.sort();
    out
}

fn count(outcomes: &[Outcome]) -> (usize, usize) {
    let ok = outcomes.iter().filter(|o| **o == Outcome::Accepted).count();
    (ok, outcomes.len() - ok)
}

#[test]
fn every_dr_event_corpus_and_seed_input_parses_and_round_trips_or_is_refused_with_a_field() {
    let mut inputs = files("fuzz/corpus/dr_event");
    assert!(
        inputs.len() > 500,
        "the corpus is checked in: found only {}",
        inputs.len()
    );
    inputs.extend(files("fuzz/seeds"));
    let mut outcomes = Vec::new();
    for path in &inputs {
        let bytes = std::fs::read(path).expect("read");
        outcomes.extend(checks::dr_event_all(&bytes));
    }
    // Both kinds are present: the corpus reaches deep into valid documents and keeps hostile ones.
    let (ok, refused) = count(&outcomes);
    assert!(ok > 50 && refused > 1000, "{ok} accepted, {refused} refused");
}

#[test]
fn every_payload_corpus_and_seed_input_round_trips_or_is_refused_with_a_message() {
    let mut inputs = files("fuzz/corpus/dr_payloads");
    assert!(
        inputs.len() > 500,
        "the corpus is checked in: found only {}",
        inputs.len()
    );
    inputs.extend(files("fuzz/seeds"));
    let mut per_kind = [(0usize, 0usize); 4];
    for path in &inputs {
        let bytes = std::fs::read(path).expect("read");
        for (kind, outcome) in checks::payloads(&bytes).into_iter().enumerate() {
            match outcome {
                Outcome::Accepted => per_kind[kind].0 += 1,
                Outcome::Refused => per_kind[kind].1 += 1,
            }
        }
    }
    // Each of dr.ack/1, dr.status/1, dr.telemetry/1 and dr.report/1 is reached and refused.
    for (kind, (ok, refused)) in ["ack", "status", "telemetry", "report"].iter().zip(per_kind) {
        assert!(
            ok > 10 && refused > 100,
            "dr.{kind}/1: {ok} accepted, {refused} refused"
        );
    }
}
