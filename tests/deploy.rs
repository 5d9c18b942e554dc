//! What `deploy/` ships, checked by the tools that will read it: the Prometheus alert rules by
//! Debian's `promtool` (syntax, and unit tests with cases that fire and cases that must not),
//! the systemd units by `systemd-analyze verify` (every directive known, the binaries there) and
//! `systemd-analyze security` (the exposure the hardening leaves). Both tools come from
//! `tests/peers/setup.sh`; a missing one fails loudly, never skips. The Grafana dashboard's
//! series are checked against the exposition in `src/runtime/metrics.rs`'s own tests.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn tool(name: &str, package: &str) -> PathBuf {
    for dir in ["/usr/bin", "/bin", "/usr/sbin"] {
        let path = Path::new(dir).join(name);
        if path.exists() {
            return path;
        }
    }
    panic!("{name} is not installed: run `bash tests/peers/setup.sh --only {package}`");
}

fn run(command: &mut Command) -> (bool, String, String) {
    let out = command.output().expect("the tool runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_alert_rules_pass_promtool_check_and_their_unit_tests() {
    let promtool = tool("promtool", "prometheus");
    let dir = root().join("deploy/prometheus");
    let (ok, stdout, stderr) =
        run(Command::new(&promtool)
            .current_dir(&dir)
            .args(["check", "rules", "flexgate-alerts.yml"]));
    assert!(ok && stdout.contains("SUCCESS: 15 rules found"), "{stdout}{stderr}");
    let (ok, stdout, stderr) =
        run(Command::new(&promtool)
            .current_dir(&dir)
            .args(["test", "rules", "flexgate-alerts.test.yml"]));
    assert!(ok && stdout.contains("SUCCESS"), "{stdout}{stderr}");
}

/// The unit tests are not vacuous: with one rule's threshold changed, they fail.
#[test]
fn the_alert_rule_tests_catch_a_changed_rule() {
    let promtool = tool("promtool", "prometheus");
    let dir = tempfile::tempdir().expect("tempdir");
    let rules = std::fs::read_to_string(root().join("deploy/prometheus/flexgate-alerts.yml")).expect("rules");
    let changed = rules.replace(
        "expr: flexgate_caps_unconfirmed > 0",
        "expr: flexgate_caps_unconfirmed > 5",
    );
    assert_ne!(rules, changed);
    std::fs::write(dir.path().join("flexgate-alerts.yml"), changed).expect("write");
    std::fs::copy(
        root().join("deploy/prometheus/flexgate-alerts.test.yml"),
        dir.path().join("flexgate-alerts.test.yml"),
    )
    .expect("copy");
    let (ok, stdout, stderr) =
        run(Command::new(&promtool)
            .current_dir(dir.path())
            .args(["test", "rules", "flexgate-alerts.test.yml"]));
    assert!(
        !ok && format!("{stdout}{stderr}").contains("FlexgateCapsUnconfirmed"),
        "{stdout}{stderr}"
    );
}

/// `systemd-analyze verify` checks that `ExecStart` names an executable, so each unit is
/// verified as a copy whose binary path points at this build's; nothing else is changed.
#[test]
fn the_systemd_units_verify_and_stay_hardened() {
    let analyze = tool("systemd-analyze", "systemd");
    let dir = tempfile::tempdir().expect("tempdir");
    let gateway = PathBuf::from(env!("CARGO_BIN_EXE_flexgate"));
    let agent = common::agent::binary();
    let mut units = Vec::new();
    for (unit, installed, built, max_exposure) in [
        ("flexgate.service", "/usr/local/bin/flexgate ", &gateway, 2.0),
        ("flexgate-agent.service", "/usr/local/bin/flexgate-agent ", &agent, 3.0),
    ] {
        let text = std::fs::read_to_string(root().join("deploy/systemd").join(unit)).expect("unit");
        assert!(text.contains(installed), "{unit} runs {installed}");
        for directive in [
            "NoNewPrivileges=yes",
            "StateDirectory=",
            "DynamicUser=yes",
            "ProtectSystem=strict",
        ] {
            assert!(text.contains(directive), "{unit} lacks {directive}");
        }
        let copy = dir.path().join(unit);
        std::fs::write(&copy, text.replace(installed, &format!("{} ", built.display()))).expect("write");
        let (ok, stdout, stderr) = run(Command::new(&analyze).args(["verify", "--man=no"]).arg(&copy));
        // An unknown or misspelt directive is only a warning for systemd: none is accepted.
        assert!(ok && stderr.trim().is_empty(), "{unit}: {stdout}{stderr}");
        let (ok, stdout, stderr) = run(Command::new(&analyze)
            .args(["security", "--offline=yes", "--no-pager"])
            .arg(format!("--threshold={}", (max_exposure * 10.0) as u32))
            .arg(&copy));
        let exposure = stdout
            .lines()
            .find_map(|l| l.split("Overall exposure level for ").nth(1))
            .and_then(|l| l.split(": ").nth(1))
            .and_then(|l| l.split(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{unit}: no exposure level in {stdout}{stderr}"));
        assert!(
            ok && exposure <= max_exposure,
            "{unit}: exposure {exposure} over {max_exposure}\n{stdout}{stderr}"
        );
        units.push((unit, exposure));
    }
    // The agent alone may hold a capability, and only the one NVML needs.
    let agent_unit = std::fs::read_to_string(root().join("deploy/systemd/flexgate-agent.service")).expect("unit");
    assert!(agent_unit.contains("CapabilityBoundingSet=CAP_SYS_ADMIN\n"));
    let gateway_unit = std::fs::read_to_string(root().join("deploy/systemd/flexgate.service")).expect("unit");
    assert!(gateway_unit.contains("CapabilityBoundingSet=\n"));
    eprintln!("systemd-analyze security exposure: {units:?}");
}
