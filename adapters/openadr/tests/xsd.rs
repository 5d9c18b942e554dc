//! Schema validation of the 2.0b encoder: every `Outgoing` sample is encoded into a temporary
//! directory and validated with lxml against openleadr's bundled `oadr_20b.xsd`
//! (`tests/xsd_validate.py`).
//!
//! The Python interpreter is `$FLEXGATE_OADR2B_PYTHON`, or by default
//! `<workspace>/target/peers/oadr2b-venv/bin/python`, which `bash tests/peers/setup.sh` creates
//! (`pip install openleadr==0.5.36`). Without it this test fails and says so: a schema check
//! that silently skips is no check.

#[path = "fixtures/outgoing_samples.rs"]
mod samples;

use std::path::{Path, PathBuf};
use std::process::Command;

use flexgate_openadr::oadr2b::encode;

fn python() -> PathBuf {
    let path = match std::env::var_os("FLEXGATE_OADR2B_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/oadr2b-venv/bin/python"),
    };
    assert!(
        path.exists(),
        "no Python with openleadr at {}: run `bash tests/peers/setup.sh` in adapters/openadr \
         (creates target/peers/oadr2b-venv with openleadr==0.5.36), or set FLEXGATE_OADR2B_PYTHON",
        path.display()
    );
    path
}

/// Runs the validator over `dir`; returns (exit code, stdout + stderr).
fn validate(dir: &Path) -> (i32, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/xsd_validate.py");
    let out = Command::new(python())
        .arg(&script)
        .arg("--parse")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn every_encoded_message_is_schema_valid() {
    let dir = tempfile::tempdir().unwrap();
    let samples = samples::samples();
    for (i, (name, msg)) in samples.iter().enumerate() {
        std::fs::write(dir.path().join(format!("{i:02}_{name}.xml")), encode(msg)).unwrap();
    }
    let (code, out) = validate(dir.path());
    println!("{out}");
    assert_eq!(code, 0, "schema errors:\n{out}");
    let n = samples.len();
    assert!(n >= 22, "expected at least 22 samples, got {n}");
    assert!(out.contains(&format!("checked {n} files, 0 invalid")), "{out}");
    assert_eq!(out.matches("VALID ").count(), n, "{out}");
}

#[test]
fn validator_catches_a_wrong_document() {
    let dir = tempfile::tempdir().unwrap();
    // venID before eiResponse: out of the schema's xs:sequence order.
    let good = encode(&samples::created_event_multi());
    let bad = good
        .replacen(
            "<ei:venID>ven-dc-east-01</ei:venID></pyld:eiCreatedEvent>",
            "</pyld:eiCreatedEvent>",
            1,
        )
        .replacen(
            "<pyld:eiCreatedEvent>",
            "<pyld:eiCreatedEvent><ei:venID>ven-dc-east-01</ei:venID>",
            1,
        );
    assert_ne!(good, bad);
    std::fs::write(dir.path().join("wrong_order.xml"), bad).unwrap();
    // An unknown profile name (the schema allows only 2.0a/2.0b).
    let reg = encode(&samples::samples()[1].1).replace(">2.0b</oadr:oadrProfileName>", ">3.0</oadr:oadrProfileName>");
    std::fs::write(dir.path().join("wrong_profile.xml"), reg).unwrap();
    std::fs::write(dir.path().join("ok.xml"), good).unwrap();
    let (code, out) = validate(dir.path());
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("INVALID wrong_order.xml"), "{out}");
    assert!(out.contains("INVALID wrong_profile.xml"), "{out}");
    assert!(out.contains("VALID ok.xml"), "{out}");
    assert!(out.contains("checked 3 files, 2 invalid"), "{out}");
}
