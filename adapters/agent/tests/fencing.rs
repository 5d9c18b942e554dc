//! Fencing over real sockets: an agent keeps the highest gateway epoch it has seen (in its state
//! file, across its own restarts) and refuses every command that can change a cap under a lower
//! one, so that a gateway replica that has lost its leadership can change no cap.

mod common;

use chrono::TimeDelta;
use common::{CONTROL, READ, TestServer, request_with_headers, sim, t0};
use flexgate_agent::api::{self, GpuStatus};
use flexgate_agent::auth::Auth;
use flexgate_agent::{Agent, AgentConfig};
use serde_json::{Value, json};
use std::path::Path;

fn lease(generation: u64, cap_w: f64) -> String {
    json!({
        "generation": generation,
        "expires_at": (t0() + TimeDelta::seconds(60)).to_rfc3339(),
        "gpus": [{"uuid": "GPU-sim-node-t-0", "cap_w": cap_w}],
        "restore": "pre_event",
    })
    .to_string()
}

fn limit_w(server: &TestServer) -> Option<f64> {
    let gpus: Vec<GpuStatus> = serde_json::from_str(&server.get("/v1/gpus", Some(READ)).body).expect("gpus");
    gpus[0].limit_w
}

/// An agent on simulated GPUs that keeps its state in `dir`.
fn agent_in(
    dir: &Path,
    sim: &flexgate_agent::gpu::sim::SimGpus,
    clock: std::sync::Arc<flexgate_agent::clock::ManualClock>,
) -> Agent {
    let mut config = AgentConfig::new("node-t", Auth::from_secrets(CONTROL, Some(READ)).expect("tokens"));
    config.state_dir = Some(dir.to_path_buf());
    Agent::with_clock(config, Box::new(sim.clone()), clock).expect("agent starts")
}

fn put(server: &TestServer, id: &str, epoch: Option<&str>, body: &str) -> common::Resp {
    let headers: Vec<(&str, &str)> = epoch.map(|e| (api::EPOCH_HEADER, e)).into_iter().collect();
    request_with_headers(
        server.addr,
        "PUT",
        &format!("/v1/leases/{id}"),
        Some(CONTROL),
        &headers,
        Some(body),
    )
}

fn metric(server: &TestServer, name: &str) -> f64 {
    let text = server.get("/metrics", Some(READ)).body;
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in the metrics:\n{text}"))
}

#[test]
fn a_command_under_an_older_epoch_is_refused_counted_and_changes_nothing_even_after_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let (sim, clock) = sim("node-t", 2, |_| {});
    let server = TestServer::start(agent_in(dir.path(), &sim, clock.clone()));

    // A single gateway (no epoch) works as before.
    let r = put(&server, "evt-1", None, &lease(1, 500.0));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(limit_w(&server), Some(500.0));

    // A replica leads under epoch 7: accepted, and from now on the floor.
    let r = put(&server, "evt-1", Some("7"), &lease(2, 400.0));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(limit_w(&server), Some(400.0));
    assert_eq!(metric(&server, "flexgate_agent_fence_epoch"), 7.0);

    // The deposed leader (epoch 6), with a higher generation: refused, nothing changed.
    let r = put(&server, "evt-1", Some("6"), &lease(9, 300.0));
    assert_eq!(r.status, 409, "{}", r.body);
    let body: Value = r.json();
    assert_eq!(body["error"], "fenced", "{body}");
    assert_eq!(body["fence_epoch"], 7, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("epoch 6") && d.contains("7")),
        "{body}"
    );
    assert_eq!(limit_w(&server), Some(400.0), "a fenced command changed a cap");
    // No epoch at all is epoch 0: refused too once a replica has led.
    assert_eq!(put(&server, "evt-1", None, &lease(10, 300.0)).status, 409);
    // Renew, delete and job hooks are fenced the same way.
    let renew = json!({"expires_at": (t0() + TimeDelta::seconds(90)).to_rfc3339()}).to_string();
    let stale = [(api::EPOCH_HEADER, "6")];
    for (method, path, body) in [
        ("POST", "/v1/leases/evt-1/renew", Some(renew.as_str())),
        ("DELETE", "/v1/leases/evt-1", None),
        ("POST", "/v1/jobs/77/start", Some(r#"{"gpus":[1]}"#)),
        ("POST", "/v1/jobs/77/end", Some(r#"{"gpus":[1]}"#)),
    ] {
        let r = request_with_headers(server.addr, method, path, Some(CONTROL), &stale, body);
        assert_eq!(r.status, 409, "{method} {path}: {}", r.body);
        assert_eq!(r.json()["error"], "fenced");
    }
    assert_eq!(limit_w(&server), Some(400.0));
    assert_eq!(metric(&server, "flexgate_agent_fenced_commands_total"), 6.0);
    // A header that is not an epoch is a bad request, not epoch 0.
    assert_eq!(put(&server, "evt-1", Some("seven"), &lease(11, 300.0)).status, 400);
    assert_eq!(put(&server, "evt-1", Some("-1"), &lease(11, 300.0)).status, 400);

    // The agent restarts: the floor was journaled, so the deposed leader is still refused and
    // the leader is still obeyed.
    drop(server);
    let server = TestServer::start(agent_in(dir.path(), &sim, clock));
    assert_eq!(metric(&server, "flexgate_agent_fence_epoch"), 7.0);
    assert_eq!(put(&server, "evt-1", Some("6"), &lease(12, 300.0)).status, 409);
    assert_eq!(limit_w(&server), Some(400.0));
    let r = put(&server, "evt-1", Some("8"), &lease(13, 350.0));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(limit_w(&server), Some(350.0));
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("leases.json")).expect("state file")).expect("json");
    assert_eq!(state["fence_epoch"], 8, "{state}");

    // A new leader raises the fence everywhere at once, without sending a cap.
    let fence = |epoch: &'static str| {
        request_with_headers(
            server.addr,
            "POST",
            api::FENCE_PATH,
            Some(CONTROL),
            &[(api::EPOCH_HEADER, epoch)],
            None,
        )
    };
    let r = fence("9");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["fence_epoch"], 9);
    assert_eq!(fence("8").status, 409);
    assert_eq!(limit_w(&server), Some(350.0), "the fence changes no cap");
}

#[test]
fn a_state_file_without_an_epoch_reads_as_epoch_zero_and_is_written_without_one() {
    let dir = tempfile::tempdir().expect("dir");
    let (sim, clock) = sim("node-t", 1, |_| {});
    let server = TestServer::start(agent_in(dir.path(), &sim, clock));
    assert_eq!(put(&server, "evt-1", None, &lease(1, 500.0)).status, 200);
    let state: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("leases.json")).expect("state file")).expect("json");
    assert!(
        state.get("fence_epoch").is_none(),
        "a single gateway's state file is unchanged: {state}"
    );
    assert_eq!(metric(&server, "flexgate_agent_fence_epoch"), 0.0);
}
