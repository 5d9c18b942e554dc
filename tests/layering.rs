//! The layering rules of ARCHITECTURE.md ("Rules"), checked on the source: what may import
//! what. A rule that only lived in a document would drift; these fail the build's tests when
//! code crosses a line.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir` (recursively), or `dir` itself when it is a file.
fn sources(dir: &Path) -> Vec<PathBuf> {
    if dir.is_file() {
        return vec![dir.to_path_buf()];
    }
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The lines of the code under `dirs` (comments and unit-test modules aside: a test may build
/// its fixtures with any part of the crate) that name any of `forbidden`.
fn crossings(dirs: &[&str], forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for dir in dirs {
        let files = sources(&root.join(dir));
        assert!(!files.is_empty(), "{dir} has no sources: the rule checks nothing");
        for file in files {
            let text = std::fs::read_to_string(&file).expect("source");
            let lines: Vec<&str> = text.lines().collect();
            for (n, line) in lines.iter().enumerate() {
                let test_module = lines
                    .get(n + 1)
                    .is_some_and(|next| next.trim_start().starts_with("mod "));
                if line.trim() == "#[cfg(test)]" && test_module {
                    break;
                }
                let code = line.split("//").next().unwrap_or("");
                if forbidden.iter().any(|f| code.contains(f)) {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn the_driver_does_not_reach_into_the_grid_side_or_the_commands() {
    let found = crossings(&["src/runtime"], &["crate::grid", "crate::commands", "crate::serve"]);
    assert!(
        found.is_empty(),
        "the driver takes typed submissions and parses nothing:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_read_side_holds_nothing_that_can_write() {
    // No driver, no controller, no backend, no ledger writer: a standby serves this read side,
    // and nothing that serves a reader may change a cap or add a record.
    let found = crossings(
        &[
            "src/runtime/read_side.rs",
            "src/runtime/views.rs",
            "src/runtime/metrics.rs",
        ],
        &[
            "Driver",
            "Controller",
            "ClusterBackend",
            "ledger::Ledger;",
            "ledger::{Ledger",
            ": Ledger,",
            "&Ledger",
            "Mutex<",
        ],
    );
    assert!(
        found.is_empty(),
        "the read side reads the published snapshot and the ledger's reader only:\n{}",
        found.join("\n")
    );
}

#[test]
fn cluster_ledger_meter_and_reports_do_not_import_the_driver_or_the_grid_side() {
    let found = crossings(
        &[
            "src/cluster",
            "src/ledger",
            "src/meter",
            "src/intervals",
            "src/settlement",
            "src/reports",
            "src/clock.rs",
            "src/ha/keys.rs",
            "src/ha/quorum.rs",
            "src/ha/follow.rs",
            "src/ha/seed.rs",
            "src/ha/config.rs",
            "src/ha/register.rs",
            "src/ha/anchors.rs",
        ],
        &["crate::runtime", "crate::grid", "crate::commands", "crate::serve"],
    );
    assert!(
        found.is_empty(),
        "time comes from crate::clock, decisions from the core:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_decision_core_does_no_io() {
    let found = crossings(
        &["policies/src"],
        &[
            "std::fs",
            "std::net",
            "std::process",
            "tokio",
            "std::thread",
            "Utc::now",
            "SystemTime",
        ],
    );
    assert!(
        found.is_empty(),
        "policies/ is pure: inputs in, decisions out:\n{}",
        found.join("\n")
    );
    // Its dependencies are data and arithmetic only.
    let manifest = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies/Cargo.toml"))
        .expect("policies/Cargo.toml");
    let dependencies: Vec<&str> = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .expect("a [dependencies] table")
        .lines()
        .filter_map(|l| l.split(['.', ' ', '=']).next())
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect();
    let allowed = [
        "serde",
        "serde_json",
        "thiserror",
        "chrono",
        "chrono-tz",
        "imbl",
        "sha2",
        // A pure linear-program solver: the hedge's master problem (arithmetic only).
        "microlp",
    ];
    for name in &dependencies {
        assert!(
            allowed.contains(name),
            "policies/ depends on {name}, which is not pure data or arithmetic"
        );
    }
    assert!(
        dependencies.contains(&"serde"),
        "the manifest was read: {dependencies:?}"
    );
}

#[test]
fn libraries_depend_on_no_workspace_crate_and_adapters_only_on_libraries() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut checked = 0;
    for (kind, allowed_prefix) in [("libs", None), ("adapters", Some("../../libs/"))] {
        for entry in std::fs::read_dir(root.join(kind)).expect(kind) {
            let manifest = entry.expect("entry").path().join("Cargo.toml");
            let Ok(text) = std::fs::read_to_string(&manifest) else {
                continue;
            };
            checked += 1;
            for path in text
                .split("path = \"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next())
            {
                // The crate's own targets (`src/lib.rs`, `src/main.rs`) are not dependencies.
                if !path.starts_with("..") {
                    continue;
                }
                assert!(
                    allowed_prefix.is_some_and(|prefix| path.starts_with(prefix)),
                    "{} depends on {path}: a library depends on no workspace crate, an adapter only on libraries",
                    manifest.display()
                );
            }
        }
    }
    assert!(checked >= 10, "only {checked} manifests read");
}
