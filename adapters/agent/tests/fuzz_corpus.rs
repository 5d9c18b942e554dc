//! Replays the fuzzing corpora and seeds (`fuzz/corpus/lease_request`,
//! `fuzz/corpus/state_journal`, `fuzz/seeds`) through the same checks the fuzz targets make
//! (`fuzz/fuzz_targets/checks.rs`, included below) on every test run, so a change that makes
//! any of those inputs panic, lets a lease outlive the dead-man switch or breaks a round trip
//! fails here, on stable, without a fuzzing toolchain. (The fuzz targets themselves run on
//! nightly; see `fuzz/README.md`.)

#[path = "../fuzz/fuzz_targets/checks.rs"]
mod checks;

use flexgate_agent::api;
use flexgate_agent::lease::LeaseBook;
use flexgate_agent::state;
use std::path::{Path, PathBuf};

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

#[test]
fn every_lease_request_corpus_and_seed_input_is_applied_and_expires_or_is_refused() {
    let mut inputs = files("fuzz/corpus/lease_request");
    assert!(
        inputs.len() > 200,
        "the corpus is checked in: found only {}",
        inputs.len()
    );
    inputs.extend(files("fuzz/seeds"));
    let (mut accepted, mut refused) = (0, 0);
    for path in &inputs {
        let bytes = std::fs::read(path).expect("read");
        checks::lease_request(&bytes);
        match api::decode_lease_request(&bytes, checks::now(), checks::TTL) {
            Ok(_) => accepted += 1,
            Err(_) => refused += 1,
        }
    }
    // Both kinds are present: the corpus reaches the lease book and keeps hostile bodies.
    assert!(accepted > 50 && refused > 50, "{accepted} accepted, {refused} refused");
}

#[test]
fn every_state_journal_corpus_and_seed_input_loads_and_ends_every_cap_or_is_refused() {
    let mut inputs = files("fuzz/corpus/state_journal");
    assert!(
        inputs.len() > 200,
        "the corpus is checked in: found only {}",
        inputs.len()
    );
    inputs.extend(files("fuzz/seeds"));
    let (mut loaded, mut refused_files, mut refused_leases) = (0, 0, 0);
    for path in &inputs {
        let bytes = std::fs::read(path).expect("read");
        checks::state_journal(&bytes);
        match state::parse(Path::new("leases.json"), &bytes) {
            Ok(s) => {
                loaded += 1;
                let sim = checks::gpus();
                let (_, refused) =
                    LeaseBook::from_state(s, flexgate_agent::GpuControl::gpus(&sim), checks::TTL, checks::now())
                        .expect("loads");
                refused_leases += refused.len();
            }
            Err(_) => refused_files += 1,
        }
    }
    // The corpus holds journals that load, leases the API would refuse, and broken files.
    assert!(
        loaded > 50 && refused_leases > 20 && refused_files > 50,
        "{loaded} loaded, {refused_leases} leases refused, {refused_files} files refused"
    );
}
