//! The HTTP API over real sockets on 127.0.0.1: tokens, refusals that change nothing, the lease
//! life cycle, job hooks and metrics.

mod common;

use chrono::{TimeDelta, Utc};
use common::{CONTROL, READ, TestServer, agent, request_raw, t0};
use flexgate_agent::api::{self, GpuStatus, Health, LeaseResponse};
use flexgate_agent::metrics;
use serde_json::{Value, json};

fn limits(server: &TestServer) -> Vec<Option<f64>> {
    let r = server.get("/v1/gpus", Some(CONTROL));
    assert_eq!(r.status, 200, "{}", r.body);
    let gpus: Vec<GpuStatus> = serde_json::from_str(&r.body).expect("gpu list");
    gpus.iter().map(|g| g.limit_w).collect()
}

fn lease_body(generation: u64, secs: i64, caps: &[(u32, Value)]) -> String {
    let gpus: Vec<Value> = caps
        .iter()
        .map(|(i, cap)| json!({"uuid": format!("GPU-sim-node-t-{i}"), "cap_w": cap}))
        .collect();
    json!({
        "generation": generation,
        "expires_at": (t0() + TimeDelta::seconds(secs)).to_rfc3339(),
        "gpus": gpus,
        "restore": "pre_event",
    })
    .to_string()
}

fn assert_error(resp: &common::Resp, status: u16, kind: &str) {
    assert_eq!(resp.status, status, "{}", resp.body);
    let body = resp.json();
    assert_eq!(body["error"], kind, "{}", resp.body);
    assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()), "{}", resp.body);
}

#[test]
fn missing_or_wrong_tokens_get_401_and_change_nothing() {
    let (agent, _sim, _clock) = agent(4, false, |_| {});
    let server = TestServer::start(agent);
    let before = limits(&server);
    let body = lease_body(1, 600, &[(0, json!(300))]);
    for token in [None, Some("wrong-token-but-long-enough"), Some("")] {
        let r = server.send("PUT", "/v1/leases/evt", token, &body);
        assert_error(&r, 401, "unauthorized");
        assert!(
            r.headers.to_ascii_lowercase().contains("www-authenticate: bearer"),
            "{}",
            r.headers
        );
        assert_error(&server.send("DELETE", "/v1/leases/evt", token, ""), 401, "unauthorized");
        assert_error(
            &server.send("POST", "/v1/jobs/1/start", token, r#"{"gpus":[0]}"#),
            401,
            "unauthorized",
        );
        assert_error(&server.get("/v1/gpus", token), 401, "unauthorized");
        assert_error(&server.get("/v1/health", token), 401, "unauthorized");
        assert_error(&server.get("/metrics", token), 401, "unauthorized");
    }
    assert_eq!(limits(&server), before);
    let health: Health = serde_json::from_str(&server.get("/v1/health", Some(CONTROL)).body).expect("health");
    assert!(health.leases.is_empty());
}

#[test]
fn the_read_only_token_reads_but_gets_403_on_changes() {
    let (agent, _sim, _clock) = agent(2, false, |_| {});
    let server = TestServer::start(agent);
    let before = limits(&server);
    assert_eq!(server.get("/v1/gpus", Some(READ)).status, 200);
    assert_eq!(server.get("/v1/health", Some(READ)).status, 200);
    assert_eq!(server.get("/metrics", Some(READ)).status, 200);
    let r = server.send(
        "PUT",
        "/v1/leases/evt",
        Some(READ),
        &lease_body(1, 600, &[(0, json!(300))]),
    );
    assert_error(&r, 403, "forbidden");
    assert_error(
        &server.send("POST", "/v1/leases/evt/renew", Some(READ), "{}"),
        403,
        "forbidden",
    );
    assert_error(
        &server.send("DELETE", "/v1/leases/evt", Some(READ), ""),
        403,
        "forbidden",
    );
    assert_error(
        &server.send("POST", "/v1/jobs/7/end", Some(READ), r#"{"gpus":[0]}"#),
        403,
        "forbidden",
    );
    assert_eq!(limits(&server), before);
}

#[test]
fn malformed_bodies_get_400_and_change_nothing() {
    let (agent, _sim, _clock) = agent(2, false, |_| {});
    let server = TestServer::start(agent);
    let before = limits(&server);
    let future = (t0() + TimeDelta::minutes(5)).to_rfc3339();
    let too_many: Vec<Value> = (0..=api::MAX_GPUS_PER_REQUEST)
        .map(|i| json!({"uuid": format!("GPU-{i}"), "cap_w": 300}))
        .collect();
    let bodies = [
        "not json".to_owned(),
        "{".to_owned(),
        String::new(),
        "[]".to_owned(),
        format!(r#"{{"generation":1,"expires_at":"{future}","gpus":[{{"uuid":"GPU-sim-node-t-0","cap_w":NaN}}]}}"#),
        format!(r#"{{"generation":1,"expires_at":"{future}","gpus":[{{"uuid":"GPU-sim-node-t-0","cap_w":1e400}}]}}"#),
        lease_body(1, 300, &[(0, json!(-20))]),
        lease_body(1, 300, &[(0, json!(1e9))]),
        lease_body(1, 300, &[(0, json!("300"))]),
        lease_body(1, 300, &[(0, json!(null))]),
        lease_body(1, -10, &[(0, json!(300))]),
        lease_body(1, 0, &[(0, json!(300))]),
        lease_body(1, 25 * 3600, &[(0, json!(300))]),
        lease_body(1, 300, &[(0, json!(300)), (0, json!(250))]),
        format!(r#"{{"generation":-1,"expires_at":"{future}","gpus":[]}}"#),
        r#"{"generation":1,"expires_at":"not a time","gpus":[]}"#.to_owned(),
        r#"{"generation":1,"expires_at":"+262143-01-01T00:00:00Z","gpus":[]}"#.to_owned(),
        format!(r#"{{"generation":1,"expires_at":"{future}","gpus":[],"restore":"default"}}"#),
        format!(r#"{{"generation":1,"expires_at":"{future}","gpus":[{{"uuid":"GPU-sim-node-t-0","cap":300}}]}}"#),
        format!(r#"{{"generation":1,"expires_at":"{future}","gpus":[],"new_job_cap_w":-1}}"#),
        json!({"generation": 1, "expires_at": future, "gpus": too_many}).to_string(),
    ];
    for body in &bodies {
        let r = server.send("PUT", "/v1/leases/evt", Some(CONTROL), body);
        assert_error(&r, 400, "bad_request");
    }
    assert_error(
        &server.send("PUT", "/v1/leases/bad%20id", Some(CONTROL), &lease_body(1, 300, &[])),
        400,
        "bad_request",
    );
    assert_error(
        &server.send("POST", "/v1/leases/evt/renew", Some(CONTROL), "{\"expires_at\":5}"),
        400,
        "bad_request",
    );
    assert_error(
        &server.send("POST", "/v1/jobs/1/start", Some(CONTROL), r#"{"gpus":[-1]}"#),
        400,
        "bad_request",
    );
    assert_error(
        &server.send("POST", "/v1/jobs/1/start", Some(CONTROL), r#"{"gpus":[0,0]}"#),
        400,
        "bad_request",
    );
    assert_error(
        &server.send("POST", "/v1/jobs/a$b/start", Some(CONTROL), r#"{"gpus":[0]}"#),
        400,
        "bad_request",
    );
    let huge = vec![b' '; 100 * 1024];
    let r = request_raw(server.addr, "PUT", "/v1/leases/evt", Some(CONTROL), Some(&huge));
    assert_error(&r, 413, "payload_too_large");
    assert_eq!(limits(&server), before);
    let health: Health = serde_json::from_str(&server.get("/v1/health", Some(CONTROL)).body).expect("health");
    assert!(health.leases.is_empty());
    assert_error(&server.get("/v1/nothing", Some(CONTROL)), 404, "not_found");
}

#[test]
fn lease_life_cycle_over_http() {
    let (agent, _sim, clock) = agent(8, false, |o| {
        o.initial_limit_w.insert(1, 640.0);
    });
    let server = TestServer::start(agent.clone());
    let r = server.send(
        "PUT",
        "/v1/leases/evt-1",
        Some(CONTROL),
        &lease_body(2, 60, &[(0, json!(300)), (1, json!(150.5))]),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let resp: LeaseResponse = serde_json::from_str(&r.body).expect("lease response");
    assert_eq!((resp.lease_id.as_str(), resp.generation), ("evt-1", 2));
    assert_eq!(r.json()["applied"][1]["status"], "clamped");
    assert_eq!(resp.applied[1].applied_w, Some(200.0));
    let l = limits(&server);
    assert_eq!((l[0], l[1], l[2]), (Some(300.0), Some(200.0), Some(700.0)));

    // Repeat: same answer. Stale: 409 with the held generation.
    let again = server.send(
        "PUT",
        "/v1/leases/evt-1",
        Some(CONTROL),
        &lease_body(2, 60, &[(0, json!(300)), (1, json!(150.5))]),
    );
    assert_eq!(serde_json::from_str::<LeaseResponse>(&again.body).expect("same"), resp);
    let stale = server.send(
        "PUT",
        "/v1/leases/evt-1",
        Some(CONTROL),
        &lease_body(1, 60, &[(0, json!(500))]),
    );
    assert_error(&stale, 409, "stale_generation");
    assert_eq!(stale.json()["held_generation"], 2);

    // Renew; unknown lease 404; past deadline 400.
    let renew = json!({"expires_at": (t0() + TimeDelta::seconds(120)).to_rfc3339()}).to_string();
    let r = server.send("POST", "/v1/leases/evt-1/renew", Some(CONTROL), &renew);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["generation"], 2);
    assert_error(
        &server.send("POST", "/v1/leases/nope/renew", Some(CONTROL), &renew),
        404,
        "not_found",
    );
    let past = json!({"expires_at": (t0() - TimeDelta::seconds(1)).to_rfc3339()}).to_string();
    assert_error(
        &server.send("POST", "/v1/leases/evt-1/renew", Some(CONTROL), &past),
        400,
        "bad_request",
    );

    let health: Health = serde_json::from_str(&server.get("/v1/health", Some(READ)).body).expect("health");
    assert!(health.ready);
    assert_eq!(health.gpu_backend, api::GpuBackend::Simulated);
    assert_eq!(health.leases.len(), 1);
    assert_eq!(health.leases[0].expires_at, t0() + TimeDelta::seconds(120));
    let metric = |name: &str| -> f64 {
        let text = server.get("/metrics", Some(READ)).body;
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} not in\n{text}"))
    };
    assert_eq!(metric("flexgate_agent_leases"), 1.0);
    assert_eq!(metric("flexgate_agent_leases_expired_total"), 0.0);

    // Expiry (the dead-man switch): time passes, the watchdog pass restores pre-event limits.
    clock.advance(TimeDelta::seconds(121));
    let report = agent.tick();
    assert_eq!(report.expired, vec!["evt-1".to_owned()]);
    let l = limits(&server);
    assert_eq!((l[0], l[1]), (Some(700.0), Some(640.0)));
    // What the lease-expiry alert watches (deploy/prometheus/flexgate-alerts.yml).
    assert_eq!(metric("flexgate_agent_leases"), 0.0);
    assert_eq!(metric("flexgate_agent_leases_expired_total"), 1.0);
    assert_eq!(metric("flexgate_agent_restores_pending"), 0.0);

    // Delete of a gone lease: 200, deleted = false.
    let d = server.send("DELETE", "/v1/leases/evt-1", Some(CONTROL), "");
    assert_eq!(d.status, 200);
    assert_eq!(d.json()["deleted"], false);

    // Create and delete.
    let r = server.send(
        "PUT",
        "/v1/leases/evt-2",
        Some(CONTROL),
        &lease_body(1, 300, &[(3, json!(400))]),
    );
    assert_eq!(r.status, 200);
    assert_eq!(limits(&server)[3], Some(400.0));
    let d = server.send("DELETE", "/v1/leases/evt-2", Some(CONTROL), "");
    assert_eq!((d.status, &d.json()["deleted"]), (200, &json!(true)));
    assert_eq!(limits(&server)[3], Some(700.0));
    assert_error(
        &server.send(
            "PUT",
            "/v1/leases/evt-2",
            Some(CONTROL),
            &lease_body(1, 300, &[(3, json!(400))]),
        ),
        409,
        "stale_generation",
    );
}

#[test]
fn job_hooks_over_http() {
    let (agent, _sim, _clock) = agent(4, false, |_| {});
    let server = TestServer::start(agent);
    let mut body: Value = serde_json::from_str(&lease_body(1, 600, &[(0, json!(300))])).expect("json");
    body["new_job_cap_w"] = json!(350);
    assert_eq!(
        server
            .send("PUT", "/v1/leases/evt", Some(CONTROL), &body.to_string())
            .status,
        200
    );
    let r = server.send("POST", "/v1/jobs/4242/start", Some(CONTROL), r#"{"gpus":[2,3]}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["lease_ids"], json!(["evt"]));
    assert_eq!(r.json()["gpus"][0]["status"], "ok");
    assert_eq!(
        limits(&server),
        vec![Some(300.0), Some(700.0), Some(350.0), Some(350.0)]
    );
    let r = server.send("POST", "/v1/jobs/4242/end", Some(CONTROL), r#"{"gpus":[2,3]}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(
        limits(&server),
        vec![Some(300.0), Some(700.0), Some(700.0), Some(700.0)]
    );
    let gpus: Vec<GpuStatus> = serde_json::from_str(&server.get("/v1/gpus", Some(CONTROL)).body).expect("list");
    assert_eq!(gpus[0].held_by, vec!["evt".to_owned()]);
    assert_eq!(gpus[0].pre_event_w, Some(700.0));
    assert!(gpus[2].held_by.is_empty());
}

#[test]
fn metrics_parse_and_cover_every_gpu() {
    let (agent, _sim, _clock) = agent(8, false, |o| {
        o.oob_limit_w.insert(5, 450.0);
    });
    let server = TestServer::start(agent);
    assert_eq!(
        server
            .send(
                "PUT",
                "/v1/leases/evt",
                Some(CONTROL),
                &lease_body(1, 600, &[(2, json!(300))])
            )
            .status,
        200
    );
    let r = server.get("/metrics", Some(CONTROL));
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("text/plain"), "{}", r.headers);
    let samples = metrics::parse(&r.body).expect("parses");
    let gpus = metrics::gpu_samples(&samples);
    assert_eq!(gpus.len(), 8);
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g.gpu, Some(u32::try_from(i).expect("small")));
        assert_eq!(g.uuid, format!("GPU-sim-node-t-{i}"));
        assert_eq!(g.hostname.as_deref(), Some("node-t"));
        assert_eq!(g.model.as_deref(), Some("NVIDIA H200"));
        assert!(g.power_w.is_some_and(|p| p > 100.0 && p <= 700.0), "{g:?}");
        assert!(g.dram_active.is_some_and(|d| (0.0..=1.0).contains(&d)), "{g:?}");
        assert!(g.mem_copy_util_pct.is_some_and(|m| (0.0..=100.0).contains(&m)), "{g:?}");
        assert!(g.energy_mj.is_some_and(|e| e > 0.0), "{g:?}");
    }
    assert_eq!(gpus[2].limit_w, Some(300.0));
    assert_eq!(gpus[5].enforced_w, Some(450.0));
    assert_eq!(gpus[5].limit_w, Some(700.0));
}

#[test]
fn metrics_can_be_served_without_a_token_when_configured() {
    let (agent, _sim, _clock) = agent(1, true, |_| {});
    let server = TestServer::start(agent);
    assert_eq!(server.get("/metrics", None).status, 200);
    assert_error(&server.get("/v1/gpus", None), 401, "unauthorized");
}

#[test]
fn a_failed_permission_self_test_reports_not_ready() {
    use flexgate_agent::auth::Auth;
    use flexgate_agent::gpu::GpuError;
    use flexgate_agent::{Agent, AgentConfig};
    let (sim, clock) = common::sim("node-p", 2, |_| {});
    sim.set_fault(1, Some(GpuError::NoPermission)).expect("gpu");
    let auth = Auth::from_secrets(CONTROL, None).expect("tokens");
    let agent = Agent::with_clock(AgentConfig::new("node-p", auth), Box::new(sim), clock).expect("starts anyway");
    let server = TestServer::start(agent);
    let health: Health = serde_json::from_str(&server.get("/v1/health", Some(CONTROL)).body).expect("health");
    assert!(!health.ready);
    let reason = health.not_ready_reason.expect("reason given");
    assert!(reason.contains("GPU 1") && reason.contains("CAP_SYS_ADMIN"), "{reason}");
    // The probes need no token: alive, but not ready, and why.
    assert_eq!(server.get("/healthz", None).status, 200);
    let ready = server.get("/readyz", None);
    assert_eq!(ready.status, 503, "{}", ready.body);
    assert_eq!(ready.json()["ready"], false);
    assert!(
        ready.json()["not_ready_reason"]
            .as_str()
            .is_some_and(|r| r.contains("GPU 1"))
    );
}

/// Liveness and readiness answer without a token (systemd, Kubernetes and load balancers
/// probe without credentials) and tell nothing of leases or GPUs; `/v1/health` still needs one.
#[test]
fn the_probes_answer_without_a_token_and_disclose_nothing() {
    let (agent, _sim, _clock) = agent(2, false, |_| {});
    let server = TestServer::start(agent);
    let live = server.get("/healthz", None);
    assert_eq!((live.status, live.body.as_str()), (200, "ok\n"));
    let ready = server.get("/readyz", None);
    assert_eq!(ready.status, 200, "{}", ready.body);
    assert_eq!(ready.json(), json!({"ready": true}));
    assert_error(&server.get("/v1/health", None), 401, "unauthorized");
}

/// The gateway's benchmark runs 1,000 agents in one process: an agent must cost no OS thread.
/// 200 agents on one runtime each serve a lease; the process's thread count stays well below
/// one per agent.
#[test]
fn many_agents_share_one_runtime_without_a_thread_each() {
    use flexgate_agent::auth::Auth;
    use flexgate_agent::clock::SystemClock;
    use flexgate_agent::gpu::sim::{SimGpus, SimOptions};
    use flexgate_agent::{Agent, AgentConfig};
    use std::sync::Arc;

    fn threads() -> usize {
        let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("thread count")
    }

    const AGENTS: usize = 200;
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let runtime = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let clock = Arc::new(SystemClock);
            let auth = Auth::from_secrets(CONTROL, None).expect("tokens");
            let mut servers = Vec::new();
            for n in 0..AGENTS {
                let host = format!("n{n:04}");
                let gpus = SimGpus::new(&SimOptions::h200(&host, 8), clock.clone()).expect("sim");
                let agent = Agent::with_clock(AgentConfig::new(host, auth.clone()), Box::new(gpus), clock.clone())
                    .expect("agent");
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
                addr_tx.send(listener.local_addr().expect("addr")).expect("send");
                let mut stop = stop_rx.clone();
                servers.push(tokio::spawn(agent.serve(listener, async move {
                    let _ = stop.wait_for(|s| *s).await;
                })));
            }
            for s in servers {
                s.await.expect("joined").expect("served");
            }
        });
    });
    let addrs: Vec<_> = (0..AGENTS).map(|_| addr_rx.recv().expect("agent up")).collect();
    let expires = (Utc::now() + TimeDelta::minutes(5)).to_rfc3339();
    for (n, addr) in addrs.iter().enumerate() {
        let body = json!({"generation": 1, "expires_at": expires, "gpus": [{"uuid": format!("GPU-sim-n{n:04}-7"), "cap_w": 333}]});
        let r = common::request(*addr, "PUT", "/v1/leases/evt", Some(CONTROL), Some(&body.to_string()));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["applied"][0]["applied_w"], 333.0);
    }
    // Other tests run in parallel threads of this process; an OS thread per agent would still
    // push the count past AGENTS.
    let count = threads();
    assert!(count < AGENTS * 3 / 4, "{count} threads for {AGENTS} agents");
    stop_tx.send(true).expect("stop");
    runtime.join().expect("runtime thread");
}

#[test]
fn a_same_generation_resend_with_other_caps_gets_409_and_changes_nothing() {
    let (agent, _sim, _clock) = agent(3, false, |_| {});
    let server = TestServer::start(agent);
    let first = server.send(
        "PUT",
        "/v1/leases/evt-c",
        Some(CONTROL),
        &lease_body(2, 60, &[(0, json!(300)), (1, json!(400))]),
    );
    assert_eq!(first.status, 200, "{}", first.body);

    // An identical resend (even with a fresh deadline) stays a repeat: the first answer.
    for secs in [60, 90] {
        let again = server.send(
            "PUT",
            "/v1/leases/evt-c",
            Some(CONTROL),
            &lease_body(2, secs, &[(0, json!(300)), (1, json!(400))]),
        );
        assert_eq!(again.status, 200, "{}", again.body);
        assert_eq!(again.json(), first.json());
    }

    // Other caps, fewer GPUs, other GPUs: refused, saying so, and nothing changes.
    for caps in [
        vec![(0, json!(250)), (1, json!(400))],
        vec![(0, json!(300))],
        vec![(0, json!(300)), (1, json!(400)), (2, json!(400))],
    ] {
        let r = server.send("PUT", "/v1/leases/evt-c", Some(CONTROL), &lease_body(2, 60, &caps));
        assert_error(&r, 409, "generation_conflict");
        assert_eq!(r.json()["held_generation"], 2, "{}", r.body);
        let detail = r.json()["detail"].as_str().unwrap_or_default().to_owned();
        assert!(
            detail.contains("generation 2") && detail.contains("not applied"),
            "{detail}"
        );
        assert_eq!(limits(&server), vec![Some(300.0), Some(400.0), Some(700.0)]);
    }

    // The new caps go through under a higher generation.
    let next = server.send(
        "PUT",
        "/v1/leases/evt-c",
        Some(CONTROL),
        &lease_body(3, 60, &[(0, json!(250))]),
    );
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(limits(&server), vec![Some(250.0), Some(700.0), Some(700.0)]);
}

#[test]
fn a_job_reports_its_own_throughput_with_its_own_token_and_nothing_else() {
    let (agent, _sim, clock) = agent(2, false, |_| {});
    let own = agent.config().auth.job_token("4242");
    let other = agent.config().auth.job_token("4243");
    let server = TestServer::start(agent);
    let report = |tokens: &str, token: Option<&str>, job: &str| {
        server.send(
            "POST",
            &format!("/v1/jobs/{job}/throughput"),
            token,
            &format!(r#"{{"tokens_per_s":{tokens},"step":12}}"#),
        )
    };
    // Its own token: kept, and the figure comes back.
    let r = report("1000", Some(&own), "4242");
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["tokens_per_s"], 1000.0);
    // Another job's token, the read token, no token, a made-up one: refused, nothing kept.
    assert_error(&report("9", Some(&other), "4242"), 403, "forbidden");
    assert_error(&report("9", Some(READ), "4242"), 403, "forbidden");
    assert_error(&report("9", None, "4242"), 401, "unauthorized");
    assert_error(
        &report("9", Some("not-a-job-token-at-all"), "4242"),
        401,
        "unauthorized",
    );
    // A job token is good for nothing else, not even a read.
    assert_error(&server.get("/v1/gpus", Some(&own)), 401, "unauthorized");
    assert_error(&server.get(api::JOB_THROUGHPUT_PATH, Some(&own)), 401, "unauthorized");
    // Impossible readings: 422 with the reason; malformed ones: 400.
    assert_error(&report("-5", Some(&own), "4242"), 422, "implausible_throughput");
    let jump = report("100001", Some(&own), "4242");
    assert_error(&jump, 422, "implausible_throughput");
    assert!(
        jump.json()["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("beyond_history")),
        "{}",
        jump.body
    );
    assert_error(&report("1e400", Some(&own), "4242"), 400, "bad_request");
    assert_error(&report(r#""fast""#, Some(&own), "4242"), 400, "bad_request");
    let typo = server.send(
        "POST",
        "/v1/jobs/4242/throughput",
        Some(&own),
        r#"{"tokens_per_sec":5}"#,
    );
    assert_error(&typo, 400, "bad_request");
    // The control token may report too (tools, tests), and the read token reads the figures.
    clock.advance(TimeDelta::seconds(1));
    assert_eq!(report("1200", Some(CONTROL), "4242").status, 200);
    let r = server.get(api::JOB_THROUGHPUT_PATH, Some(READ));
    assert_eq!(r.status, 200, "{}", r.body);
    let jobs: Vec<api::JobThroughput> = serde_json::from_str(&r.body).expect("throughput list");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].job_id, "4242");
    assert_eq!(jobs[0].training_samples, 2);
    assert_eq!(jobs[0].tokens_per_s, 1200.0);
    assert_eq!(jobs[0].step, Some(12));
    assert_eq!(
        jobs[0].refused, 2,
        "the two 422s; a body that does not parse is not a reading"
    );
    // Metrics carry the figure and the refusals by reason.
    let text = server.get("/metrics", Some(READ)).body;
    assert!(
        text.contains(r#"flexgate_agent_job_tokens_per_second{job="4242",Hostname="node-t"} 1200"#),
        "{text}"
    );
    assert!(
        text.contains(r#"flexgate_agent_throughput_reports_refused_total{reason="negative",Hostname="node-t"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"flexgate_agent_throughput_reports_refused_total{reason="beyond_history",Hostname="node-t"} 1"#
        ),
        "{text}"
    );
    // The job's end hook forgets it.
    assert_eq!(
        server
            .send("POST", "/v1/jobs/4242/end", Some(CONTROL), r#"{"gpus":[]}"#)
            .status,
        200
    );
    let r = server.get(api::JOB_THROUGHPUT_PATH, Some(READ));
    assert_eq!(r.body, "[]");
}
