//! Replays the fuzzing corpus and seeds (`fuzz/corpus/decode_2b`, `fuzz/seeds`) through the
//! decoder on every test run, so a change that makes any of those inputs panic fails here, on
//! stable, without a fuzzing toolchain. (The fuzz target itself runs on nightly; see
//! `fuzz/README.md`.)

use flexgate_openadr::oadr2b::{decode, normalized_json};
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

#[test]
fn every_corpus_and_seed_input_decodes_or_fails_cleanly() {
    let mut inputs = files("fuzz/corpus/decode_2b");
    inputs.extend(files("fuzz/seeds"));
    assert!(
        inputs.len() > 1000,
        "the corpus is checked in: found only {}",
        inputs.len()
    );
    let (mut ok, mut refused) = (0, 0);
    for path in &inputs {
        let bytes = std::fs::read(path).expect("read");
        match decode(&bytes) {
            Ok(msg) => {
                let json = normalized_json(&msg);
                serde_json::to_string(&json).expect("normalized JSON serializes");
                ok += 1;
            }
            Err(e) => {
                assert!(
                    !e.to_string().is_empty(),
                    "{}: an error must say something",
                    path.display()
                );
                refused += 1;
            }
        }
    }
    // Both kinds are present: the corpus reaches deep into valid messages and keeps hostile ones.
    assert!(ok > 50 && refused > 50, "{ok} decoded, {refused} refused");
}
