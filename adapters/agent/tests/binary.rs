//! The real `flexgate-agent` binary: start, serve, cap, SIGKILL, restart, expire; refusals at
//! start. These run in real time (the lease deadline is wall-clock), polling with deadlines.

mod common;

use chrono::{TimeDelta, Utc};
use common::{CONTROL, Running, command, request, write_token};
use serde_json::json;
use std::process::Command;
use std::time::{Duration, Instant};

fn nvidia_driver_present() -> bool {
    nvml_wrapper::Nvml::init().is_ok()
}

#[test]
fn simulated_agent_keeps_caps_across_sigkill_and_restores_them_on_expiry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let config = dir.path().join("agent.toml");
    std::fs::write(
        &config,
        "hostname = \"node-b\"\n[simulate]\ninitial_limit_w = { \"0\" = 650 }\n",
    )
    .expect("config");
    let state = dir.path().join("state");
    let args = [
        "--config",
        config.to_str().expect("utf-8"),
        "--simulate",
        "--gpus",
        "8",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ];

    let agent = Running::start(&args);
    let health = request(agent.addr, "GET", "/v1/health", Some(CONTROL), None).json();
    assert_eq!(health["gpu_backend"], "simulated");
    assert_eq!(health["ready"], true);
    assert_eq!(health["gpus"], 8);
    assert_eq!(
        agent.limits(),
        vec![650.0, 700.0, 700.0, 700.0, 700.0, 700.0, 700.0, 700.0]
    );

    let expires_at = Utc::now() + TimeDelta::seconds(8);
    let body = json!({
        "generation": 1,
        "expires_at": expires_at.to_rfc3339(),
        "gpus": [{"uuid": "GPU-sim-node-b-0", "cap_w": 300}, {"uuid": "GPU-sim-node-b-1", "cap_w": 250}],
        "restore": "pre_event",
    })
    .to_string();
    let r = request(agent.addr, "PUT", "/v1/leases/evt-k", Some(CONTROL), Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(&agent.limits()[..3], &[300.0, 250.0, 700.0]);

    // SIGKILL: no chance to clean up. The simulated GPUs die with the process and come back at
    // their start-up limits, like GPUs after a driver reload.
    drop(agent);
    let agent = Running::start(&args);
    assert_eq!(
        &agent.limits()[..3],
        &[300.0, 250.0, 700.0],
        "lease re-applied from the state file"
    );
    assert!(agent.stderr.lock().expect("lock").contains("start-up reconcile"));

    // Nobody renews: the dead-man switch restores the pre-event limits (650 W, not the default).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = agent.limits();
        if l[0] == 650.0 && l[1] == 700.0 {
            assert!(Utc::now() >= expires_at, "restored before the lease expired");
            break;
        }
        assert_eq!(&l[..2], &[300.0, 250.0], "caps hold until expiry");
        assert!(Instant::now() < deadline, "lease never expired: {l:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let health = request(agent.addr, "GET", "/v1/health", Some(CONTROL), None).json();
    assert_eq!(health["leases"], json!([]));
    assert!(agent.stderr.lock().expect("lock").contains("dead-man switch"));
}

#[test]
fn sigterm_stops_without_restoring_and_keeps_the_lease_on_disk() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let state = dir.path().join("state");
    let args = [
        "--simulate",
        "--gpus",
        "2",
        "--hostname",
        "node-s",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ];
    let mut agent = Running::start(&args);
    let body = json!({
        "generation": 3,
        "expires_at": (Utc::now() + TimeDelta::minutes(10)).to_rfc3339(),
        "gpus": [{"uuid": "GPU-sim-node-s-1", "cap_w": 400}],
    })
    .to_string();
    assert_eq!(
        request(agent.addr, "PUT", "/v1/leases/evt-t", Some(CONTROL), Some(&body)).status,
        200
    );
    let pid = agent.child.id().to_string();
    let status = Command::new("kill").args(["-TERM", &pid]).status().expect("kill runs");
    assert!(status.success());
    let exit = agent.child.wait().expect("agent exits");
    assert!(exit.success(), "graceful exit: {exit:?}");
    assert!(agent.stderr.lock().expect("lock").contains("caps stay in force"));
    let saved = std::fs::read_to_string(state.join("leases.json")).expect("state file");
    let saved: serde_json::Value = serde_json::from_str(&saved).expect("json");
    assert_eq!(saved["leases"][0]["id"], "evt-t");
    assert_eq!(saved["baselines"]["GPU-sim-node-s-1"], 700_000);

    let agent = Running::start(&args);
    assert_eq!(agent.limits(), vec![700.0, 400.0]);
}

#[test]
fn a_hand_edited_state_file_lease_expiring_in_9999_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let state = dir.path().join("state");
    let args = [
        "--simulate",
        "--gpus",
        "2",
        "--hostname",
        "node-e",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ];
    let agent = Running::start(&args);
    let body = json!({
        "generation": 4,
        "expires_at": (Utc::now() + TimeDelta::minutes(10)).to_rfc3339(),
        "gpus": [{"uuid": "GPU-sim-node-e-0", "cap_w": 300}],
    })
    .to_string();
    let r = request(agent.addr, "PUT", "/v1/leases/evt-e", Some(CONTROL), Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    drop(agent);

    // Someone moves the deadline to the end of time: the API never grants more than 24 h.
    let path = state.join("leases.json");
    let mut saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("state file")).expect("json");
    saved["leases"][0]["expires_at"] = "9999-12-31T23:59:59Z".into();
    saved["leases"][0]["response"]["expires_at"] = "9999-12-31T23:59:59Z".into();
    std::fs::write(&path, serde_json::to_vec_pretty(&saved).expect("json")).expect("edited");

    let agent = Running::start(&args);
    assert_eq!(agent.limits(), vec![700.0, 700.0], "the cap is not re-applied");
    let health = request(agent.addr, "GET", "/v1/health", Some(CONTROL), None).json();
    assert_eq!(health["leases"], json!([]));
    let stderr = agent.stderr.lock().expect("lock").clone();
    assert!(
        stderr.contains("state file lease refused") && stderr.contains("evt-e") && stderr.contains("dead-man switch"),
        "{stderr}"
    );
    // The gateway's next PUT (its renewal is answered 404) re-creates the lease.
    let r = request(agent.addr, "PUT", "/v1/leases/evt-e", Some(CONTROL), Some(&body));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(agent.limits(), vec![300.0, 700.0]);
}

#[test]
fn without_a_driver_the_agent_refuses_to_start_unless_simulating() {
    if nvidia_driver_present() {
        // On a GPU machine, starting would self-test by writing limits; check read-only instead
        // that NVML describes the GPUs.
        let gpus = flexgate_agent::gpu::nvml::NvmlGpus::open().expect("NVML opens where the driver loads");
        assert!(!flexgate_agent::GpuControl::gpus(&gpus).is_empty());
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let state = dir.path().join("state");
    let out = command(&[
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state.to_str().expect("utf-8"),
    ])
    .output()
    .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded)"),
        "stderr: {stderr}"
    );
    assert!(stderr.contains("use --simulate for simulated GPUs"), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "must not claim to listen");
}

#[test]
fn start_up_refusals_are_clear() {
    let dir = tempfile::tempdir().expect("tempdir");
    let state = dir.path().join("state");
    let state_arg = state.to_str().expect("utf-8");

    let out = command(&["--simulate", "--listen", "127.0.0.1:0", "--state-dir", state_arg])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no control token"),
        "{out:?}"
    );

    let out = command(&[
        "--simulate",
        "--listen",
        "127.0.0.1:0",
        "--token",
        "short",
        "--state-dir",
        state_arg,
    ])
    .output()
    .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("shorter than 16"),
        "{out:?}"
    );

    std::fs::create_dir_all(&state).expect("state dir");
    std::fs::write(state.join("leases.json"), "{ torn").expect("corrupt state");
    let token = write_token(dir.path());
    let out = command(&[
        "--simulate",
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        &token,
        "--state-dir",
        state_arg,
    ])
    .output()
    .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is corrupt") && stderr.contains("refuses to start"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(state.join("leases.json")).expect("kept"),
        "{ torn",
        "file left for inspection"
    );
}

#[test]
fn help_teaches_leases_and_the_dead_man_switch() {
    let out = command(&["--help"]).output().expect("runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "LEASE",
        "DEAD-MAN SWITCH",
        "PRE-EVENT",
        "EXAMPLES",
        "--simulate",
        "--state-dir",
        "WITHOUT restoring",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
    assert!(!help.contains(CONTROL));
}

#[test]
fn job_token_prints_the_token_the_agent_accepts_for_that_job_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    let out = command(&["job-token", "4242", "--token-file", &token])
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let auth = flexgate_agent::auth::Auth::from_secrets(CONTROL, None).expect("tokens");
    assert_eq!(printed, auth.job_token("4242"));
    assert_ne!(printed, auth.job_token("4243"));
    // A bad id is refused with the rule, and a closed stdout is an error, not a panic.
    let out = command(&["job-token", "42/../x", "--token-file", &token])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("may only contain"),
        "{out:?}"
    );
    let mut child = command(&["job-token", "4242", "--token-file", &token])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawns");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("waits");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{out:?}");
}

/// The agent logs like the gateway (the same `flexgate-logging`): `--log-format json` gives one
/// JSON object per line, and text logs into a pipe carry no colour codes.
#[test]
fn logs_are_text_without_colour_into_a_pipe_or_json_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = write_token(dir.path());
    for format in ["text", "json"] {
        let state = dir.path().join(format!("state-{format}"));
        let agent = Running::start(&[
            "--simulate",
            "--gpus",
            "2",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            &token,
            "--state-dir",
            state.to_str().expect("utf-8"),
            "--log-format",
            format,
        ]);
        // Starting is logged at info ("simulated GPUs").
        let deadline = Instant::now() + Duration::from_secs(10);
        let logs = loop {
            let logs = agent.stderr.lock().expect("lock").clone();
            if logs.contains("simulated GPUs") || Instant::now() > deadline {
                break logs;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(
            !logs.contains('\u{1b}'),
            "{format}: ANSI escapes in a piped log: {logs:?}"
        );
        let lines: Vec<&str> = logs.lines().filter(|l| !l.trim().is_empty()).collect();
        assert!(!lines.is_empty(), "{format}: no log lines");
        if format == "json" {
            for line in &lines {
                let v: serde_json::Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                assert!(v["level"].is_string() && v["message"].is_string(), "{line}");
            }
        } else {
            assert!(lines.iter().all(|l| !l.starts_with('{')), "{logs}");
        }
    }
}
