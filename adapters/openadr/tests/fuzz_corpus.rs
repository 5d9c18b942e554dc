//! Replays the fuzzing corpora and seeds through the decoders on every test run, so a change
//! that makes any of those inputs panic fails here, on stable, without a fuzzing toolchain:
//! `fuzz/corpus/decode_2b` and `fuzz/seeds` through the OpenADR 2.0b decoder,
//! `fuzz/corpus/decode_3` and `fuzz/seeds_3` through the OpenADR 3 decoder. (The fuzz targets
//! themselves run on nightly; see `fuzz/README.md`.)

use flexgate_openadr::oadr2b::{decode, normalized_json};
use flexgate_openadr::oadr3;
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

#[test]
fn every_oadr3_corpus_and_seed_input_decodes_or_fails_cleanly() {
    let mut inputs = files("fuzz/corpus/decode_3");
    inputs.extend(files("fuzz/seeds_3"));
    assert!(
        inputs.len() > 500,
        "the corpus is checked in: found only {}",
        inputs.len()
    );
    let limits = oadr3::Limits::default();
    let (mut ok, mut refused) = (0, 0);
    for path in &inputs {
        let bytes = std::fs::read(path).expect("read");
        let events = oadr3::decode_events(&bytes, &limits);
        match oadr3::decode_any(&bytes) {
            Ok(doc) => {
                let json = oadr3::normalized_json(&doc);
                serde_json::to_string(&json).expect("normalized JSON serializes");
                // The client's GET /events path reads the same events.
                match doc {
                    oadr3::Document::Events(list) => assert_eq!(Ok(list), events, "{}", path.display()),
                    oadr3::Document::Event(e) => assert_eq!(Ok(vec![*e]), events, "{}", path.display()),
                    _ => {}
                }
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
    assert!(ok > 50 && refused > 50, "{ok} decoded, {refused} refused");
}
