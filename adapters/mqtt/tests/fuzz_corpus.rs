//! Replays the fuzzing corpus and seeds (`fuzz/corpus/screen`, `fuzz/seeds`) through the MQTT
//! payload screening on every test run, with the fuzz target's own invariants
//! (`fuzz/fuzz_targets/screen_check.rs`), so a change that makes any of those inputs panic or
//! break an invariant fails here, on stable, without a fuzzing toolchain. (The fuzz target
//! itself runs on nightly; see `fuzz/README.md`.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../fuzz/fuzz_targets/screen_check.rs"]
mod screen_check;

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

fn run(path: &PathBuf) -> screen_check::Outcome {
    let bytes = std::fs::read(path).expect("read");
    match std::panic::catch_unwind(|| screen_check::check(&bytes)) {
        Ok(outcome) => outcome,
        Err(_) => panic!(
            "{}: an invariant of the fuzz target failed (message above)",
            path.display()
        ),
    }
}

#[test]
fn every_corpus_and_seed_input_keeps_the_fuzz_invariants() {
    let mut inputs = files("fuzz/corpus/screen");
    let corpus = inputs.len();
    assert!(corpus > 300, "the corpus is checked in: found only {corpus} files");
    inputs.extend(files("fuzz/seeds"));
    let (mut admitted, mut signed, mut malformed, mut round_trips) = (0, 0, 0, 0);
    for path in &inputs {
        let outcome = run(path);
        admitted += usize::from(outcome.admitted);
        signed += usize::from(outcome.signed);
        malformed += usize::from(outcome.malformed);
        round_trips += usize::from(outcome.round_trip);
    }
    // The corpus reaches every stage: documents admitted, signed ones verified, hostile ones
    // refused as malformed, and signable ones through the sign/verify round trip.
    assert!(
        admitted > 20 && signed > 0 && malformed > 100 && round_trips > 50,
        "{admitted} admitted, {signed} signed, {malformed} malformed, {round_trips} round trips"
    );
}

/// The hand-written seeds each do what their names say.
#[test]
fn the_seeds_are_what_they_claim() {
    let seed = |name: &str| run(&PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds").join(name));
    for valid in [
        "valid_signed_v2.json",
        "valid_signed_siteless.json",
        "valid_signed_std_base64.json",
    ] {
        let o = seed(valid);
        assert!(o.admitted && o.signed, "{valid}: {o:?}");
    }
    let o = seed("valid_unsigned.json");
    assert!(o.admitted && !o.signed && o.round_trip, "{o:?}");
    for refused in [
        "hostile_body_only_signature.json",
        "hostile_signed_for_another_site.json",
        "hostile_sig_zero.json",
    ] {
        let o = seed(refused);
        assert!(!o.admitted && !o.signed && !o.malformed, "{refused}: {o:?}");
    }
    for malformed in [
        "hostile_duplicate_revision.json",
        "hostile_duplicate_nested.json",
        "hostile_duplicate_escaped_key.json",
        "hostile_sig_twice.json",
        "hostile_arbitrary_precision_marker.json",
        "hostile_deep_nesting.json",
        "hostile_duration_over_limit.json",
        "hostile_year_262142.json",
        "hostile_oversize.json",
        "hostile_bad_utf8.json",
        "hostile_nan.json",
    ] {
        let o = seed(malformed);
        assert!(o.malformed && !o.admitted, "{malformed}: {o:?}");
    }
}
