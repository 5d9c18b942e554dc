//! The gateway in-process: the HTTP API through the real router, and the whole event lifecycle
//! on a simulated cluster with tokio's clock paused, so hours of event time run in milliseconds.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use axum::body::Body;
use axum::http::{Request, StatusCode};
use chrono::{Duration as ChronoDuration, SecondsFormat, Utc};
use flexgate::cluster::sim::{SimCluster, SimConfig, SimFaults};
use flexgate::cluster::{ClusterBackend, JobState};
use flexgate::config::{Config, facility_for_nodes};
use flexgate::ledger::Ledger;
use flexgate::runtime::{Clock, Gateway};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

mod common;

const TOKEN: &str = "test-token";

fn config(dir: &std::path::Path, nodes: u32) -> Config {
    let mut c = Config::default();
    c.gateway.data_dir = dir.to_path_buf();
    c.gateway.site = "site-1".into();
    c.gateway.telemetry_interval_s = 5;
    c.site.baseline_window_s = 300;
    c.control.settle_s = 30;
    c.facility = facility_for_nodes(nodes);
    c
}

async fn gateway(dir: &std::path::Path, nodes: u32, faults: SimFaults) -> (Arc<Gateway>, Arc<SimCluster>) {
    gateway_on(dir, nodes, faults, Clock::real()).await
}

async fn gateway_on(
    dir: &std::path::Path,
    nodes: u32,
    faults: SimFaults,
    clock: Clock,
) -> (Arc<Gateway>, Arc<SimCluster>) {
    let facility = facility_for_nodes(nodes);
    let sim = SimCluster::new(SimConfig {
        nodes,
        seed: 3,
        settle_ms: 0,
        faults,
        facility,
        // The same jobs throughout hours of paused time (the forecast's test has its queue).
        time_limits: false,
        ..SimConfig::default()
    })
    .expect("sim");
    let ledger = Ledger::open(&dir.join("ledger")).await.expect("ledger");
    let backend: Arc<dyn ClusterBackend> = sim.clone();
    let gw = Gateway::start(config(dir, nodes), clock, ledger, backend)
        .await
        .expect("gateway");
    (gw, sim)
}

fn event(id: &str, revision: u64, ceiling_kw: f64, start_in_s: i64, duration_s: Option<u64>) -> Value {
    let start = (Utc::now() + ChronoDuration::seconds(start_in_s)).to_rfc3339_opts(SecondsFormat::Secs, true);
    json!({"schema": "dr.event/1", "event_id": id, "revision": revision, "site": "site-1",
           "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
           "window": {"start": start, "ramp_s": 300, "duration_s": duration_s, "recovery_s": 300}})
}

async fn post(gw: &Arc<Gateway>, body: &Value, token: Option<&str>) -> (StatusCode, Value) {
    post_to(gw, "/v1/events", body, token).await
}

/// `POST` to any path through the real router.
async fn post_to(gw: &Arc<Gateway>, path: &str, body: &Value, token: Option<&str>) -> (StatusCode, Value) {
    let router = flexgate::grid::http::router(gw.clone(), TOKEN);
    let mut req = Request::post(path).header("content-type", "application/json");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let response = router
        .oneshot(req.body(Body::from(body.to_string())).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

async fn get(gw: &Arc<Gateway>, path: &str) -> (StatusCode, Vec<u8>) {
    let router = flexgate::grid::http::router(gw.clone(), TOKEN);
    let response = router
        .oneshot(Request::get(path).body(Body::empty()).expect("request"))
        .await
        .expect("response");
    let status = response.status();
    (
        status,
        axum::body::to_bytes(response.into_body(), 1 << 24)
            .await
            .expect("body")
            .to_vec(),
    )
}

async fn meter_kw(gw: &Arc<Gateway>) -> f64 {
    gw.driver().tick(true).await.expect("tick");
    gw.read().status().await.measured_meter_kw().expect("meter")
}

#[tokio::test]
async fn writes_need_the_token_and_bad_input_changes_nothing() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    let good = event("ev-1", 1, 100.0, 60, Some(1800));

    let (status, body) = post(&gw, &good, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, _) = post(&gw, &good, Some("wrong")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        gw.read().events().await.is_empty(),
        "an unauthorized request changed nothing"
    );

    for (bad, field) in [
        (json!({"schema": "dr.event/2"}), "schema"),
        (
            {
                let mut e = good.clone();
                e["window"]["ramp_s"] = json!(-5);
                e
            },
            "window.ramp_s",
        ),
        (
            {
                let mut e = good.clone();
                e["target"]["kw"] = json!("lots");
                e
            },
            "target.kw",
        ),
        (
            {
                let mut e = good.clone();
                e["surprise"] = json!(1);
                e
            },
            "surprise",
        ),
    ] {
        let (status, body) = post(&gw, &bad, Some(TOKEN)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad} → {body}");
        let named = body["field"].as_str().unwrap_or("").to_string() + " " + body["detail"].as_str().unwrap_or("");
        assert_eq!(body["status"], 400, "{body}");
        assert_eq!(body["type"], "about:blank", "{body}");
        assert!(named.contains(field), "error should name {field}: {body}");
    }
    assert!(gw.read().events().await.is_empty(), "invalid input changed nothing");

    let mut other_site = good.clone();
    other_site["site"] = json!("elsewhere");
    let (status, body) = post(&gw, &other_site, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["ack"]["opt"], "out");
    assert!(gw.read().events().await.is_empty());

    let (status, ack) = post(&gw, &good, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    assert_eq!(
        (ack["schema"].as_str(), ack["opt"].as_str()),
        (Some("dr.ack/1"), Some("in"))
    );
    assert_eq!(ack["accepted_target_kw"], 100.0);
    assert_eq!(ack["log_checkpoint"].as_str().map(str::len), Some(64));

    let (status, list) = get(&gw, "/v1/events").await;
    assert_eq!(status, StatusCode::OK);
    let list: Value = serde_json::from_slice(&list).expect("json");
    assert_eq!(list[0]["id"], "ev-1");
    assert_eq!(list[0]["revision"], 1);
    assert_eq!(list[0]["state"], "pending");
}

#[tokio::test]
async fn read_endpoints_answer() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    gw.driver().tick(true).await.expect("tick");
    for path in [
        "/healthz",
        "/v1/status",
        "/v1/jobs",
        "/metrics",
        "/openapi.json",
        "/v1/events",
    ] {
        let (status, body) = get(&gw, path).await;
        assert_eq!(status, StatusCode::OK, "{path}: {}", String::from_utf8_lossy(&body));
    }
    let (_, spec) = get(&gw, "/openapi.json").await;
    let spec: Value = serde_json::from_slice(&spec).expect("openapi is JSON");
    assert_eq!(spec["openapi"], "3.1.0");
    let (_, metrics) = get(&gw, "/metrics").await;
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics.contains("# TYPE flexgate_plans counter")
            && metrics.contains("flexgate_plans_total 0")
            && metrics.contains("flexgate_measured_meter_watts ")
            && metrics.contains("flexgate_build_info{")
            && metrics.ends_with("# EOF\n"),
        "{metrics}"
    );
    // No event: no ceiling, and no NaN standing in for one.
    assert!(
        !metrics.contains("NaN") && !metrics.contains("flexgate_meter_ceiling_watts "),
        "{metrics}"
    );
    let (status, empty) = get(&gw, "/v1/plan").await;
    assert_eq!(status, StatusCode::OK, "an empty plan without an event");
    let empty: Value = serde_json::from_slice(&empty).expect("json");
    assert_eq!(empty["in_force"], false, "{empty}");
    assert_eq!(empty["entries"], serde_json::json!([]), "{empty}");
    let (status, _) = get(&gw, "/v1/events/nope").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, status_body) = get(&gw, "/v1/status").await;
    let status_body: Value = serde_json::from_slice(&status_body).expect("json");
    for field in [
        "active_events",
        "meter_ceiling_w",
        "gpu_budget_w",
        "measured_gpu_w",
        "meter_w",
        "site",
    ] {
        assert!(status_body.get(field).is_some(), "status lacks {field}");
    }
    assert_eq!(status_body["site"], "site-1");
    // Without [ha] the gateway runs alone, and says so.
    assert_eq!(status_body["ha"]["role"], "single", "{status_body}");
    assert!(status_body.get("replication").is_none(), "{status_body}");
    // Every figure is in base units: no kW field left in the API's own views.
    for path in [
        "/v1/status",
        "/v1/jobs",
        "/v1/events",
        "/v1/plan",
        "/v1/flexibility",
        "/v1/forecast",
        "/v1/declarations",
    ] {
        let (_, body) = get(&gw, path).await;
        let text = String::from_utf8_lossy(&body);
        assert!(!text.contains("_kw\""), "{path} still has a kW field: {text}");
    }
}

#[tokio::test]
async fn revisions_higher_replaces_lower_is_refused_equal_is_repeated() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    let first = event("ev-r", 2, 100.0, 600, Some(1800));
    let (status, ack) = post(&gw, &first, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let (status, again) = post(&gw, &first, Some(TOKEN)).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "equal revision is a no-op with the same ack: {again}"
    );
    assert_eq!(again, ack, "a repeat gets the first answer, anchor included");
    // The same revision with another body: the first answer stands, and the sender is told
    // that its new body was ignored (issue 12, item 7).
    let mut other = first.clone();
    other["target"]["kw"] = json!(90.0);
    let (status, conflict) = post(&gw, &other, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{conflict}");
    let message = conflict["detail"].as_str().unwrap_or_default();
    assert!(
        message.contains("already held with a different body") && message.contains("send revision 3"),
        "{conflict}"
    );
    assert_eq!(conflict["ack"]["log_checkpoint"], ack["log_checkpoint"]);
    assert_eq!(
        gw.read().events().await[0].lowest_ceiling_w,
        Some(100_000.0),
        "the new body changed nothing"
    );
    let (status, body) = post(&gw, &event("ev-r", 1, 50.0, 600, Some(1800)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    let (status, _) = post(&gw, &event("ev-r", 3, 80.0, 600, Some(1800)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    let events = gw.read().events().await;
    assert_eq!(
        (events.len(), events[0].revision, events[0].lowest_ceiling_w),
        (1, 3, Some(80_000.0))
    );
    // A cancellation of a held event needs no target: the gateway knows what it cancels.
    let mut cancel = event("ev-r", 4, 80.0, 600, Some(1800));
    let body = cancel.as_object_mut().expect("object");
    body.remove("target");
    body.insert("cancel".into(), json!(true));
    let (status, ack) = post(&gw, &cancel, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let events = gw.read().events().await;
    assert_eq!(
        (events[0].revision, events[0].state.as_str()),
        (4, "cancelled"),
        "{events:?}"
    );
    // Anything else without a target is refused, naming the field.
    let mut untargeted = event("ev-t", 1, 80.0, 600, Some(1800));
    untargeted.as_object_mut().expect("object").remove("target");
    let (status, problem) = post(&gw, &untargeted, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{problem}");
    assert_eq!(problem["field"], "target", "{problem}");
}

#[tokio::test(start_paused = true)]
async fn an_event_caps_jobs_holds_the_ceiling_and_restores_at_the_end() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, sim) = gateway(dir.path(), 16, SimFaults::default()).await;
    // Baseline: a few telemetry ticks.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let baseline = gw.read().status().await.measured_meter_kw().expect("meter");
    let ceiling = (baseline * 0.85 * 10.0).round() / 10.0;
    // Before the event: the site publishes what shedding would cost, at the meter.
    let (code, body) = get(&gw, "/v1/flexibility").await;
    assert_eq!(code, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let curve: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(curve["source"], "planner_estimate");
    assert_eq!(curve["objective"], "progress");
    let points = curve["points"].as_array().expect("points");
    assert_eq!(points.len(), 21);
    assert_eq!(points[0]["meter_shed_w"], 0.0);
    let shed = |p: &Value| p["meter_shed_w"].as_f64().expect("number") / 1000.0;
    let lost = |p: &Value| p["progress_lost"].as_f64().expect("number");
    for w in points.windows(2) {
        assert!(shed(&w[1]) > shed(&w[0]) && lost(&w[1]) >= lost(&w[0]) - 1e-12, "{w:?}");
    }
    let most = shed(&points[20]);
    assert!(
        most > baseline - ceiling,
        "the site can shed {most} kW, the event asks {}",
        baseline - ceiling
    );
    let promised = points
        .iter()
        .find(|p| shed(p) >= baseline - ceiling)
        .map(lost)
        .expect("a level covers the event");
    assert!(promised > 0.0 && promised < 1.0, "{promised}");
    let (status, ack) = post(&gw, &event("ev-hold", 1, ceiling, 60, Some(3600)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");

    let stop = Arc::new(tokio::sync::Notify::new());
    let loop_stop = stop.clone();
    let control = tokio::spawn(
        gw.driver()
            .clone()
            .control_loop(async move { loop_stop.notified().await }),
    );

    // Ramp (60 s lead + 300 s ramp) and settle, then check the hold. Reads never wait for the
    // control loop, so with tokio's clock paused the loop may lag the jump: catch it up first.
    tokio::time::sleep(Duration::from_secs(60 + 300 + 120)).await;
    gw.driver().tick(false).await.expect("tick");
    let status = gw.read().status().await;
    assert_eq!(status.phase.as_deref(), Some("active"), "{status:?}");
    assert_eq!(status.meter_ceiling_kw(), Some(ceiling));
    let plan = gw.read().plan().await.expect("plan in force");
    assert!(
        plan.entries.iter().any(|e| e.cap_w_per_gpu < 700.0),
        "some job is capped"
    );
    // The plan says what it maximised, what it expects to keep on both objectives, and per
    // job what was known of it and how much it weighed.
    assert_eq!(plan.objective.as_deref(), Some("progress"));
    let expected = plan.expected.expect("expected outcome");
    assert!(
        expected.tokens_kept_share > 0.5 && expected.tokens_kept_share < 1.0,
        "{expected:?}"
    );
    assert!(
        expected.progress_kept_share > 0.3 && expected.progress_kept_share < 1.0,
        "{expected:?}"
    );
    for e in &plan.entries {
        assert!(e.knowledge.as_deref().is_some_and(|k| !k.is_empty()), "{e:?}");
        assert!(
            e.weight.is_some_and(|w| w >= 1.0) && e.expected_share.is_some(),
            "{e:?}"
        );
    }
    let capped: Vec<_> = plan.entries.iter().filter(|e| e.cap_w_per_gpu < 699.0).collect();
    for e in &capped {
        let applied = sim.cap_of(&e.job).expect("job");
        assert!(
            (applied.value() - e.cap_w_per_gpu).abs() < 1e-6,
            "the sim runs the planned cap"
        );
    }
    // The meter holds the ceiling for the rest of the hold.
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_secs(60)).await;
        let s = gw.read().status().await;
        let meter = s.measured_meter_kw().expect("meter");
        assert!(meter <= ceiling + 0.5, "meter {meter} above ceiling {ceiling}");
    }
    // After the window and recovery, every job is back at its uncapped limit.
    tokio::time::sleep(Duration::from_secs(3600 + 300 + 60)).await;
    gw.driver().tick(false).await.expect("tick");
    let events = gw.read().events().await;
    assert_eq!(events[0].state, "completed", "{events:?}");
    assert!(gw.read().plan().await.is_none());
    let inventory: Vec<JobState> = sim.inventory().await.expect("inventory");
    assert!(
        inventory
            .iter()
            .all(|j| (j.applied_cap.value() - j.spec.cap_range.max.value()).abs() < 1e-6),
        "caps restored"
    );
    assert!(meter_kw(&gw).await > ceiling, "load came back after the event");
    stop.notify_one();
    let _ = control.await;
}

#[tokio::test(start_paused = true)]
async fn test_events_are_acknowledged_but_never_acted_on_and_overlaps_take_the_lowest() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 8, SimFaults::default()).await;
    let baseline = meter_kw(&gw).await;
    let mut test_event = event("ev-test", 1, baseline * 0.5, 0, Some(3600));
    test_event["test"] = json!(true);
    let (status, ack) = post(&gw, &test_event, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(ack["reason"].as_str().unwrap_or("").contains("test"), "{ack}");
    tokio::time::sleep(Duration::from_secs(400)).await;
    gw.driver().tick(true).await.expect("tick");
    assert_eq!(
        gw.read().status().await.meter_ceiling_kw(),
        None,
        "a test event sets no ceiling"
    );

    post(&gw, &event("ev-a", 1, baseline * 0.9, 0, Some(3600)), Some(TOKEN)).await;
    post(&gw, &event("ev-b", 1, baseline * 0.8, 0, Some(3600)), Some(TOKEN)).await;
    tokio::time::sleep(Duration::from_secs(400)).await;
    gw.driver().tick(true).await.expect("tick");
    let status = gw.read().status().await;
    assert_eq!(
        status.meter_ceiling_kw(),
        Some(baseline * 0.8),
        "the most restrictive ceiling wins"
    );
}

#[tokio::test(start_paused = true)]
async fn unconfirmed_caps_are_counted_at_measured_power_and_state_survives_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let faults = SimFaults {
        unreachable_nodes: vec!["node-000".into()],
        ..SimFaults::default()
    };
    let (gw, _sim) = gateway(dir.path(), 8, faults.clone()).await;
    let baseline = meter_kw(&gw).await;
    post(&gw, &event("ev-keep", 1, baseline * 0.85, 0, None), Some(TOKEN)).await;
    tokio::time::sleep(Duration::from_secs(400)).await;
    gw.driver().tick(true).await.expect("tick");
    gw.driver().tick(true).await.expect("tick");
    let status = gw.read().status().await;
    assert!(
        status.unconfirmed_jobs >= 1,
        "the job on the unreachable node is unconfirmed: {status:?}"
    );
    let plan = gw.read().plan().await.expect("plan");
    assert!(
        plan.entries.len() < gw.read().jobs().await.len(),
        "unconfirmed jobs are fixed load, not planned"
    );
    // Each unconfirmed job says why: its node did not answer the command, or stopped being
    // measured.
    let jobs = gw.read().jobs().await;
    let unconfirmed: Vec<_> = jobs.iter().filter(|j| !j.confirmed).collect();
    assert!(!unconfirmed.is_empty());
    for j in &unconfirmed {
        assert!(matches!(j.unconfirmed, Some("unreachable" | "not_measured")), "{j:?}");
    }

    // Crash: drop the gateway without closing; a new one on the same ledger resumes.
    let head = gw.ledger().head();
    let clock = gw.clock();
    drop(plan);
    let gw_ptr = Arc::try_unwrap(gw).ok().expect("sole owner");
    gw_ptr.close().await.expect("close");
    let (gw2, sim2) = gateway_on(dir.path(), 8, SimFaults::default(), clock).await;
    assert!(gw2.ledger().head().0 > head.0, "startup recorded");
    let events = gw2.read().events().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].id, "ev-keep");
    let inventory = sim2.inventory().await.expect("inventory");
    assert!(
        inventory.iter().any(|j| j.applied_cap.value() < 699.0),
        "caps re-applied at start"
    );
    gw2.driver().tick(true).await.expect("tick");
    assert_eq!(gw2.read().status().await.meter_ceiling_kw(), Some(baseline * 0.85));
}

#[tokio::test(start_paused = true)]
async fn an_operator_opt_out_lifts_the_ceiling_is_recorded_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 8, SimFaults::default()).await;
    let baseline = meter_kw(&gw).await;
    post(&gw, &event("ev-op", 1, baseline * 0.8, 0, None), Some(TOKEN)).await;
    tokio::time::sleep(Duration::from_secs(400)).await;
    gw.driver().tick(true).await.expect("tick");
    assert!(gw.read().status().await.meter_ceiling_kw().is_some());

    let router = flexgate::grid::http::router(gw.clone(), TOKEN);
    let body = json!({"event_id": "ev-op", "operator": "alice", "reason": "must-run training deadline"}).to_string();
    let unauthorized = router
        .clone()
        .oneshot(
            Request::post("/v1/operator/opt-out")
                .body(Body::from(body.clone()))
                .expect("request"),
        )
        .await
        .expect("response");
    assert_eq!(unauthorized.status(), StatusCode::UNAUTHORIZED);
    assert!(gw.read().status().await.meter_ceiling_kw().is_some(), "nothing changed");
    let response = router
        .oneshot(
            Request::post("/v1/operator/opt-out")
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Body::from(body))
                .expect("request"),
        )
        .await
        .expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    gw.driver().tick(true).await.expect("tick");
    assert_eq!(
        gw.read().status().await.meter_ceiling_kw(),
        None,
        "the opted-out event no longer binds"
    );
    // The event itself says so, in the list and in its own view.
    let events = gw.read().events().await;
    assert_eq!(events[0].state, "opted_out", "{events:?}");
    assert_eq!(events[0].ceiling_w, None, "no ceiling in force");
    let (status, one) = get(&gw, "/v1/events/ev-op").await;
    assert_eq!(status, StatusCode::OK);
    let one: Value = serde_json::from_slice(&one).expect("json");
    assert_eq!(one["summary"]["state"], "opted_out", "{one}");
    // A second opt-out of the same event is refused and changes nothing.
    let again = gw.driver().operator_opt_out("ev-op", "bob", "again").await;
    assert!(again.is_err(), "{again:?}");
    // Every job is back at its uncapped limit, as the cluster reports at the next reading.
    gw.driver().tick(true).await.expect("tick");
    assert!(
        gw.read().jobs().await.iter().all(|j| j.cap_w_per_gpu >= 699.9),
        "caps lifted"
    );

    let clock = gw.clock();
    Arc::try_unwrap(gw)
        .ok()
        .expect("sole owner")
        .close()
        .await
        .expect("close");
    let mut buffer = Vec::new();
    flexgate::ledger::export(
        &dir.path().join("ledger"),
        flexgate::ledger::ExportFormat::Jsonl,
        Some("ev-op"),
        &mut buffer,
    )
    .expect("export");
    let text = String::from_utf8(buffer).expect("utf-8");
    assert!(text.contains("\"operator\":\"alice\"") && text.contains("must-run training deadline"));
    // The audit shows the opt-out with the operator's name and reason, the lifecycle ends
    // with it, and no interval is reported as if its ceiling were still in force after it.
    let records = flexgate::commands::audit::read_records(dir.path()).expect("records");
    let report = flexgate::reports::audit::build(&records, "ev-op", 900, chrono_tz::Tz::UTC)
        .expect("typed entries")
        .expect("report");
    assert_eq!(report.opt_outs.len(), 1);
    assert_eq!(report.opt_outs[0].operator, "alice");
    assert_eq!(report.opt_outs[0].reason, "must-run training deadline");
    assert!(
        report.trims.iter().all(|t| !t.reason.contains("must-run")),
        "not a trim"
    );
    let last = report.transitions.last().expect("transitions");
    assert_eq!(
        last.to,
        flexgate_policies::event::Phase::OptedOut,
        "{:?}",
        report.transitions
    );
    let interval = &report.intervals[0];
    assert!(interval.end <= report.opt_outs[0].at, "{interval:?}");
    assert!(
        interval
            .note
            .as_deref()
            .is_some_and(|n| n.contains("alice") && n.contains("must-run")),
        "{interval:?}"
    );
    let markdown = report.to_markdown();
    assert!(markdown.contains("## Operator opt-outs"), "{markdown}");
    assert!(markdown.contains("by alice"), "{markdown}");
    assert!(markdown.contains("→ opted_out"), "{markdown}");
    let (gw2, _) = gateway_on(dir.path(), 8, SimFaults::default(), clock).await;
    gw2.driver().tick(true).await.expect("tick");
    assert_eq!(
        gw2.read().status().await.meter_ceiling_kw(),
        None,
        "the opt-out survives a restart"
    );
}

#[tokio::test]
async fn an_event_whose_window_is_over_is_refused_and_does_not_shadow_a_correction() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    let stale = event("ev-late", 1, 100.0, -7200, Some(600));
    let (status, body) = post(&gw, &stale, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(body["ack"]["opt"], "out");
    assert!(body["detail"].as_str().unwrap_or("").contains("ended"), "{body}");
    assert!(gw.read().events().await.is_empty(), "nothing entered the book");
    let (status, ack) = post(&gw, &event("ev-late", 1, 100.0, 60, Some(600)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "the corrected event is taken: {ack}");
    assert_eq!(ack["opt"], "in");
}

/// When caps at every job's floor still leave the site over its ceiling, the gateway suspends
/// jobs whose flex tier allows it (largest expected draw first), records why, re-plans with
/// them as fixed load, and resumes them when the event ends; jobs that may not be suspended
/// never are.
#[tokio::test(start_paused = true)]
async fn caps_alone_short_of_the_target_suspend_the_jobs_whose_tier_allows_it() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, sim) = gateway(dir.path(), 16, SimFaults::default()).await;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let jobs: Vec<JobState> = sim.inventory().await.expect("inventory");
    let (first, second) = (jobs[0].spec.id.clone(), jobs[1].spec.id.clone());
    sim.set_suspendable(&first, true).expect("job");
    let baseline = gw.read().status().await.measured_meter_kw().expect("meter");
    // A ceiling whose GPU budget (≈ 12 kW over 128 GPUs) is below what caps at the 200 W
    // minimum draw (25.6 kW): only suspension can close the gap.
    let facility = flexgate_policies::facility::FacilityModel::new(facility_for_nodes(16)).expect("facility");
    let ceiling = facility
        .forward(
            flexgate_policies::units::Watts(12_000.0),
            16,
            &flexgate_policies::facility::CoolingState::Settled,
        )
        .expect("meter estimate")
        .hi
        .value()
        .round();
    assert!(ceiling < baseline, "{ceiling} < {baseline}");
    let (status, ack) = post(&gw, &event("ev-deep", 1, ceiling, 0, Some(1800)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let stop = Arc::new(tokio::sync::Notify::new());
    let loop_stop = stop.clone();
    let control = tokio::spawn(
        gw.driver()
            .clone()
            .control_loop(async move { loop_stop.notified().await }),
    );
    // The ledger's writer is a real thread: let real time pass while the paused clock waits.
    let settle = || async {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5)))
            .await
            .expect("sleep");
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    for _ in 0..120 {
        if sim.is_suspended(&first) == Some(true)
            && gw
                .read()
                .plan()
                .await
                .is_some_and(|p| p.entries.iter().all(|e| *e.job != *first))
        {
            break;
        }
        settle().await;
    }
    assert_eq!(sim.is_suspended(&first), Some(true), "the suspendable job is suspended");
    assert_eq!(
        sim.is_suspended(&second),
        Some(false),
        "a job whose tier does not allow it never is"
    );
    let ledger = gw.ledger();
    let suspensions: Vec<Value> = ledger
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.body["entry"] == "jobs_suspended")
        .map(|r| r.body)
        .collect();
    assert!(!suspensions.is_empty(), "a suspension record");
    let record = &suspensions[0];
    assert!(record["shortfall_w"].as_f64().is_some_and(|w| w > 0.0), "{record}");
    assert_eq!(record["jobs"][0]["job"], json!(&*first), "{record}");
    assert_eq!(record["jobs"][0]["outcome"], "suspended", "{record}");
    // The plan after it counts the suspended job as fixed load and plans the others only.
    let plan = gw.read().plan().await.expect("plan in force");
    assert!(
        plan.entries.iter().all(|e| *e.job != *first),
        "the suspended job is not planned"
    );

    // After the window and its recovery, the job is resumed and the resume recorded.
    tokio::time::sleep(Duration::from_secs(1800 + 300)).await;
    let resumed = || {
        ledger
            .iter_from(1)
            .filter_map(Result::ok)
            .any(|r| r.body["entry"] == "jobs_resumed" && r.body["jobs"][0]["outcome"] == "resumed")
    };
    for _ in 0..120 {
        if sim.is_suspended(&first) == Some(false) && resumed() {
            break;
        }
        settle().await;
    }
    assert_eq!(sim.is_suspended(&first), Some(false), "resumed at the end");
    assert!(resumed(), "a resume record");
    stop.notify_one();
    control.await.expect("control loop");
}

#[tokio::test(start_paused = true)]
async fn reconcile_notices_drift_and_re_sends_unconfirmed_caps_once_the_node_answers() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, sim) = gateway(dir.path(), 16, SimFaults::default()).await;
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let baseline = gw.read().status().await.measured_meter_kw().expect("meter");
    let (status, ack) = post(&gw, &event("ev-drift", 1, baseline * 0.85, 0, Some(3600)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let plan = gw.read().plan().await.expect("plan in force");
    // The plan states its contract against the equal cut: judged on the gateway's objective,
    // never below the equal cut by more than the tolerance on any plausible curve.
    let guarantee = plan.guarantee.clone().expect("a hedged plan states its guarantee");
    assert_eq!(guarantee.objective, "progress");
    assert!((guarantee.tolerance - 0.005).abs() < 1e-12, "{guarantee:?}");
    assert!(
        guarantee.worst_gain_vs_equal >= -guarantee.tolerance - 1e-6 && guarantee.noise >= 0.0,
        "{guarantee:?}"
    );
    assert!((0.0..=1.0).contains(&guarantee.kept) && !guarantee.worst_case.is_empty());
    let capped = plan
        .entries
        .iter()
        .find(|e| e.cap_w_per_gpu < 650.0)
        .expect("a deeply capped job")
        .clone();
    let job = flexgate_policies::ids::JobId::from(capped.job.as_str());
    assert_eq!(
        sim.cap_of(&job).map(|c| c.value()),
        Some(capped.cap_w_per_gpu),
        "the planned cap is in force"
    );
    // What the planner knew of each job's elasticity is in the ledger, for the auditor.
    let known: Vec<Value> = gw
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .map(|r| r.body)
        .filter(|b| b["elasticity_known"].is_object())
        .collect();
    // Once for every job, then only where knowledge grew from what was measured during the
    // event (a PFI from the measured points, or the measured curve), with that evidence.
    let first = known[0]["elasticity_known"].as_object().expect("map");
    assert_eq!(first.len(), gw.read().jobs().await.len());
    for (job, what) in first {
        let what = what.as_str().unwrap_or_default();
        assert!(
            ["sweep", "pfi ", "predicted ", "unknown"]
                .iter()
                .any(|p| what.starts_with(p)),
            "{job}: {what}"
        );
    }
    for later in &known[1..] {
        for (job, what) in later["elasticity_known"].as_object().expect("map") {
            let what = what.as_str().unwrap_or_default();
            // Later knowledge is learned: the job's own measured points, or, once five jobs
            // are measured (which depends on how many telemetry passes the test's timing
            // allowed), the fleet prior for a job nothing was measured of.
            assert!(
                what.starts_with("measured curve: ")
                    || (what.starts_with("partial curve: ") && what.contains(" measured points"))
                    || (what.starts_with("fleet prior: pfi ") && what.contains(" measured jobs")),
                "{job}: {what}"
            );
        }
    }
    let records_with = |pred: &dyn Fn(&Value) -> bool| -> Vec<Value> {
        gw.ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .map(|r| r.body)
            .filter(|b| pred(b))
            .collect()
    };

    // A GPU reset behind the gateway's back: the next reconcile sees the limit above the cap,
    // records the drift, counts the job at its measured draw and re-sends its cap.
    sim.revert_cap(&job).expect("job");
    assert_eq!(sim.cap_of(&job).map(|c| c.value()), Some(700.0));
    gw.driver().tick(true).await.expect("tick");
    let drift = records_with(&|b| b["action"] == "drift");
    assert_eq!(drift.len(), 1, "one drift record: {drift:?}");
    assert_eq!(drift[0]["drifted"][0]["job"], json!(&*job), "{}", drift[0]);
    assert_eq!(drift[0]["drifted"][0]["applied_w_per_gpu"].as_f64(), Some(700.0));
    let retries = records_with(&|b| b["purpose"] == "retry_unconfirmed");
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0]["rows"][0][0], json!(&*job));
    assert_eq!(retries[0]["rows"][0][3], "applied", "{}", retries[0]);
    assert!(
        sim.cap_of(&job).is_some_and(|c| c.value() < 699.0),
        "the cap is back in force"
    );
    assert_eq!(gw.read().status().await.unconfirmed_jobs, 0);

    // The job's node stops answering: the job is unconfirmed and not retried while unreachable
    // (that would hold every tick for a timeout); once it answers, its cap is re-sent.
    let node = sim
        .inventory()
        .await
        .expect("inventory")
        .into_iter()
        .find(|j| j.spec.id == job)
        .expect("job")
        .nodes[0]
        .clone();
    sim.set_faults(SimFaults {
        unreachable_nodes: vec![node.to_string()],
        ..SimFaults::default()
    })
    .expect("faults");
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    assert!(gw.read().status().await.unconfirmed_jobs >= 1);
    assert_eq!(
        records_with(&|b| b["purpose"] == "retry_unconfirmed").len(),
        1,
        "no retry while unreachable"
    );
    sim.set_faults(SimFaults::default()).expect("faults");
    tokio::time::sleep(Duration::from_secs(5)).await;
    gw.driver().tick(true).await.expect("tick");
    let retries = records_with(&|b| b["purpose"] == "retry_unconfirmed");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(gw.read().status().await.unconfirmed_jobs, 0);
    // Confirmed again, the job is planned as flexible again at the next pass.
    gw.driver().tick(true).await.expect("tick");
    assert!(
        gw.read()
            .plan()
            .await
            .expect("plan")
            .entries
            .iter()
            .any(|e| *e.job == *job)
    );
    let metrics = String::from_utf8(get(&gw, "/metrics").await.1).expect("utf-8");
    assert!(metrics.contains("flexgate_cap_drifts_total 1"), "{metrics}");
    assert!(metrics.contains("flexgate_cap_retries_total 2"), "{metrics}");
}

#[tokio::test(start_paused = true)]
async fn after_a_restart_mid_event_the_end_restores_every_job_to_its_uncapped_limit() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 8, SimFaults::default()).await;
    let baseline = meter_kw(&gw).await;
    let (status, ack) = post(&gw, &event("ev-pre", 1, baseline * 0.8, 0, Some(600)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    // Through the 300 s ramp (the ceiling steps down at its end), with revisions on top.
    for _ in 0..80 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    for revision in 2..=4 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let kw = baseline * (0.8 - 0.01 * revision as f64);
        let (status, ack) = post(&gw, &event("ev-pre", revision, kw, 0, Some(600)), Some(TOKEN)).await;
        assert_eq!(status, StatusCode::OK, "{ack}");
        gw.driver().tick(true).await.expect("tick");
    }
    let capped_before = gw
        .read()
        .jobs()
        .await
        .iter()
        .filter(|j| j.cap_w_per_gpu < 699.0)
        .count();
    assert!(capped_before > 0, "the event capped jobs");

    // Crash and restart on the same ledger; the event ends; every job goes back to 700 W.
    let clock = gw.clock();
    let gw = Arc::try_unwrap(gw).ok().expect("sole owner");
    gw.close().await.expect("close");
    let (gw2, sim2) = gateway_on(dir.path(), 8, SimFaults::default(), clock).await;
    assert!(
        gw2.read().plan().await.is_some(),
        "the plan in force is rebuilt from the ledger"
    );
    tokio::time::sleep(Duration::from_secs(600 + 300 + 60)).await;
    gw2.driver().tick(true).await.expect("tick");
    let restore = gw2
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.kind == flexgate::ledger::RecordKind::Restore && r.body["purpose"] == "restore")
        .last()
        .expect("a restore after the event")
        .body;
    let rows = restore["rows"].as_array().cloned().unwrap_or_default();
    assert!(!rows.is_empty(), "{restore}");
    assert!(
        rows.iter()
            .all(|row| row[1].as_f64() == Some(700.0) && row[3] == "applied"),
        "every capped job is restored to its uncapped limit: {restore}"
    );
    gw2.driver().tick(true).await.expect("tick");
    assert!(gw2.read().plan().await.is_none());
    assert_eq!(gw2.read().status().await.unconfirmed_jobs, 0);
    let inventory = sim2.inventory().await.expect("inventory");
    assert!(
        inventory.iter().all(|j| j.applied_cap.value() >= 699.9),
        "no cap left after the event"
    );
}

/// Finding 2 of the core issue: a second event that starts within one tick of the first one's
/// restore used to record the first event's caps as its "pre-event" caps and restore those at
/// its end, leaving jobs capped indefinitely. Driven tick by tick on a paused clock, so no
/// timing luck is involved.
#[tokio::test(start_paused = true)]
async fn back_to_back_events_end_with_every_job_at_its_uncapped_limit() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, sim) = gateway(dir.path(), 8, SimFaults::default()).await;
    let baseline = meter_kw(&gw).await;
    let (status, ack) = post(&gw, &event("ev-a", 1, baseline * 0.8, 0, Some(600)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    // Event A: 300 s ramp, 600 s window, 300 s recovery.
    for _ in 0..330 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
        if gw
            .read()
            .events()
            .await
            .iter()
            .any(|e| e.id == "ev-a" && e.state == "completed")
        {
            break;
        }
    }
    gw.driver().tick(false).await.expect("the restore of A");
    assert!(gw.read().plan().await.is_none(), "A is over and restored");
    // Event B starts right after A's restore, before any new inventory is read: submitted and
    // planned in the same instant (no measuring tick in between).
    let mut b = event("ev-b", 1, baseline * 0.7, 0, Some(600));
    b["window"]["start"] = json!(gw.clock().now().to_rfc3339_opts(SecondsFormat::Secs, true));
    let (status, ack) = post(&gw, &b, Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    gw.driver().tick(false).await.expect("tick");
    for _ in 0..260 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let events = gw.read().events().await;
    assert!(
        events.iter().all(|e| e.state == "completed"),
        "both events are over: {events:?}"
    );
    assert!(gw.read().plan().await.is_none());
    let inventory = sim.inventory().await.expect("inventory");
    assert!(
        inventory.iter().all(|j| j.applied_cap.value() >= 699.9),
        "every job is back at its uncapped limit: {:?}",
        inventory.iter().map(|j| j.applied_cap.value()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn unreachable_and_far_too_high_ceilings_are_flagged_with_a_sane_range() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    let meter = meter_kw(&gw).await;
    // A 0 kW ceiling (what a reduction larger than the baseline becomes): it cannot be met.
    let (status, ack) = post(&gw, &event("ev-zero", 1, 0.0, 600, Some(1800)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let (lo, hi) = (
        ack["expected_meter_kw"]["lo"].as_f64().expect("lo"),
        ack["expected_meter_kw"]["hi"].as_f64().expect("hi"),
    );
    assert!(lo <= hi && lo > 0.0, "an honest, non-inverted range: {ack}");
    assert!(
        ack["reason"]
            .as_str()
            .is_some_and(|r| r.contains("below the lowest meter power")),
        "{ack}"
    );
    // A ceiling ten times the meter: nothing to shed, and the meter is not promised near the
    // ceiling.
    let (status, ack) = post(&gw, &event("ev-high", 1, meter * 10.0, 600, Some(1800)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let hi = ack["expected_meter_kw"]["hi"].as_f64().expect("hi");
    assert!(
        hi < meter * 5.0,
        "promised up to {hi} kW for a meter at {meter} kW: {ack}"
    );
    assert!(
        ack["reason"]
            .as_str()
            .is_some_and(|r| r.contains("nothing needs to be shed")),
        "{ack}"
    );
}

/// A job told to the planner as very flexible (PFI 2.67) with a 10 % tier, whose true curve is
/// steep (throughput proportional to the cap): the plan cuts it, its own reported throughput
/// shows it slowed far beyond 10 %, and the gateway raises its floor and re-plans in the same
/// control pass, with the measurement in the ledger; it then runs within its tier (+2 points).
#[tokio::test(start_paused = true)]
async fn a_tiered_job_measured_slower_than_its_tier_is_backed_off_within_one_pass() {
    use flexgate_policies::alloc::{CapRange, Elasticity, JobSpec};
    use flexgate_policies::curve::{CurvePoint, PowerCurve};
    use flexgate_policies::pfi::CapGrid;
    use flexgate_policies::units::{Fraction, TokensPerSec, Watts, WattsPerGpu};
    let dir = tempfile::tempdir().expect("dir");
    let (gw, sim) = gateway(dir.path(), 16, SimFaults::default()).await;
    let first: Vec<JobState> = sim.inventory().await.expect("inventory");
    sim.end_job(&first[0].spec.id).expect("a job to make room");
    let steep = |cap: f64| CurvePoint {
        cap: WattsPerGpu(cap),
        power: Watts(cap * 8.0 * 0.95),
        tokens: TokensPerSec(10_000.0 * cap / 700.0),
    };
    let truth = PowerCurve::new(8, [200.0, 300.0, 400.0, 500.0, 600.0, 700.0].map(steep).to_vec()).expect("curve");
    let spec = JobSpec {
        id: "steep-tier10".into(),
        gpus: 8,
        cap_range: CapRange::H200,
        uncapped_power: Watts(700.0 * 8.0 * 0.95),
        uncapped_tokens: TokensPerSec(10_000.0),
        elasticity: Elasticity::Pfi {
            value: 2.67,
            grid: CapGrid::fine_h200(),
        },
        max_slowdown: Some(Fraction::new(0.10).expect("fraction")),
        priority: 1.0,
    };
    let job = sim.start_custom_job(spec, truth).expect("room");
    // Uncapped for more than a throughput window: its uncapped point is measured.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let baseline = gw.read().status().await.measured_meter_kw().expect("meter");
    let ceiling = (baseline * 0.80 * 10.0).round() / 10.0;
    let (status, ack) = post(&gw, &event("ev-tier", 1, ceiling, 0, Some(3600)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    let stop = Arc::new(tokio::sync::Notify::new());
    let loop_stop = stop.clone();
    let control = tokio::spawn(
        gw.driver()
            .clone()
            .control_loop(async move { loop_stop.notified().await }),
    );
    let records = |entry: &str| -> Vec<Value> {
        gw.ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .filter(|r| r.body["entry"] == entry)
            .map(|r| r.body)
            .collect()
    };
    let settle = || async {
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(5)))
            .await
            .expect("sleep");
        tokio::time::sleep(Duration::from_secs(5)).await;
    };
    for _ in 0..200 {
        if !records("tier_backed_off").is_empty() {
            break;
        }
        settle().await;
    }
    // The interval store folds the ledger as it goes (the season's settlement reads the events'
    // costs there): once now, mid-event, and again at the end below, resuming.
    gw.intervals().catch_up(&gw.ledger().reader()).expect("catch up");
    let backoffs = records("tier_backed_off");
    let first_backoff = backoffs
        .first()
        .unwrap_or_else(|| panic!("no back-off; plans: {:?}", records("plan")));
    assert_eq!(first_backoff["job"], "steep-tier10");
    let measured = first_backoff["measured_slowdown"].as_f64().expect("slowdown");
    assert!(measured > 0.12, "{first_backoff}");
    let uncapped = records("throughput_point")
        .into_iter()
        .find(|p| p["job"] == "steep-tier10" && p["uncapped"] == true)
        .expect("the job's uncapped point was measured before the event");
    assert!(
        (uncapped["tokens_per_s"].as_f64().expect("tokens") - 10_000.0).abs() < 1.0,
        "{uncapped}"
    );
    // The plan that follows the back-off is in the same pass: no telemetry sample comes between
    // them in the ledger (times may differ: the paused clock jumps while a flush is awaited).
    // It holds the job at its new floor.
    let floor = first_backoff["floor_w_per_gpu"].as_f64().expect("floor");
    let after_backoff = || -> Vec<Value> {
        let all: Vec<Value> = gw
            .ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .map(|r| r.body)
            .collect();
        let from = all
            .iter()
            .position(|b| b["entry"] == "tier_backed_off")
            .expect("the back-off record");
        all[from + 1..].to_vec()
    };
    for _ in 0..20 {
        if after_backoff().iter().any(|b| b["entry"] == "plan") {
            break;
        }
        settle().await;
    }
    let after = after_backoff();
    let next_plan = after
        .iter()
        .position(|b| b["entry"] == "plan")
        .expect("a plan after the back-off");
    let next_sample = after
        .iter()
        .position(|b| b["entry"] == "meter_sample")
        .unwrap_or(usize::MAX);
    assert!(
        next_plan < next_sample,
        "re-planned in the same pass: {:?}",
        &after[..next_plan + 1]
    );
    let replan = &after[next_plan];
    assert_eq!(replan["reason"], "tier_backoff", "{replan}");
    let row = replan["plan"]["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r[0] == "steep-tier10"))
        .expect("the job in the plan");
    assert!(row[1].as_f64().expect("cap") >= floor - 0.1, "{row} vs floor {floor}");
    // Let the new cap settle and the window refresh: the job now runs within its tier.
    for _ in 0..30 {
        settle().await;
    }
    let cap = sim.cap_of(&job).expect("running").value();
    let truth_slowdown = 1.0 - cap / 700.0;
    assert!(
        truth_slowdown <= 0.10 + 0.02 + 1e-9,
        "cap {cap} W: slowdown {truth_slowdown}"
    );
    let view = gw
        .read()
        .jobs()
        .await
        .into_iter()
        .find(|j| j.id == "steep-tier10")
        .expect("job");
    let reported = view.measured_tokens_per_s.expect("measured");
    assert!(reported >= 10_000.0 * (0.9 - 0.02) - 1.0, "{view:?}");
    // The audit gives the job's measured cost: its tier, both figures, the slowdown, and the
    // minutes it spent beyond its tier before the back-off took hold.
    let records: Vec<_> = gw.ledger().iter_from(1).filter_map(Result::ok).collect();
    let audit = flexgate::reports::audit::build(&records, "ev-tier", 300, chrono_tz::Tz::UTC)
        .expect("typed entries")
        .expect("the event is in the ledger");
    let row = audit
        .jobs
        .iter()
        .find(|j| j.job == "steep-tier10")
        .expect("the job in the audit");
    assert_eq!((row.tier, row.throughput), (Some(0.10), "measured"), "{row:?}");
    assert!(
        (row.uncapped_tokens_per_s.expect("uncapped") - 10_000.0).abs() < 1.0,
        "{row:?}"
    );
    assert!(row.minutes_over_tier.is_some_and(|m| m > 0.0), "{row:?}");
    assert!(
        audit.to_markdown().contains("| steep-tier10 | 10 % | 10000 |"),
        "{}",
        audit.to_markdown()
    );
    eprintln!(
        "tier back-off: measured {:.1} % slower at {:.0} W/GPU, floor {floor:.0} W/GPU, now at {cap:.0} W/GPU keeping {:.1} %",
        measured * 100.0,
        first_backoff["cap_w_per_gpu"].as_f64().unwrap_or(0.0),
        reported / 100.0
    );
    stop.notify_one();
    let _ = control.await;
    // The season's settlement reads the same cost from the interval store, folded record by
    // record over two catch-ups: one figure per event in both reports.
    gw.intervals().catch_up(&gw.ledger().reader()).expect("catch up");
    let records: Vec<_> = gw.ledger().iter_from(1).filter_map(Result::ok).collect();
    let audit = flexgate::reports::audit::build(&records, "ev-tier", 300, chrono_tz::Tz::UTC)
        .expect("typed entries")
        .expect("the event is in the ledger");
    let cost = gw
        .intervals()
        .event_cost("ev-tier")
        .expect("store")
        .expect("the event's cost");
    assert_eq!(cost.jobs, audit.jobs, "the store's fold and the audit's agree");
    assert_eq!(cost.measured_kept, audit.throughput.measured_kept);
    assert_eq!(cost.promised, audit.promised);
}

/// What was measured of a job is kept under its profile (the template's configuration in the
/// simulator; Slurm job name, GPU count and `profile=` tag on a real cluster): a new job of the
/// same configuration starts from it, and so does a restarted gateway.
#[tokio::test(start_paused = true)]
async fn a_rerun_of_a_measured_configuration_starts_from_its_profile_even_after_a_restart() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, sim) = gateway(dir.path(), 16, SimFaults::default()).await;
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let baseline = meter_kw(&gw).await;
    post(&gw, &event("ev-learn", 1, baseline * 0.8, 0, Some(1200)), Some(TOKEN)).await;
    for _ in 0..60 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    // A job measured under a cap, with its profile in the ledger.
    let points: Vec<Value> = gw
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .map(|r| r.body)
        .filter(|b| b["entry"] == "throughput_point" && b["uncapped"] == false)
        .collect();
    let point = points.first().expect("a capped point was measured");
    let (job, profile) = (
        point["job"].as_str().expect("job").to_string(),
        point["profile"]
            .as_str()
            .expect("a template job has a profile")
            .to_string(),
    );
    let learned_for = |gw: &Arc<Gateway>, id: &str, from: u64| {
        let known: Vec<Value> = gw
            .ledger()
            .iter_from(from)
            .filter_map(Result::ok)
            .map(|r| r.body)
            .filter(|b| b["elasticity_known"][id].is_string())
            .collect();
        known
            .last()
            .map(|b| b["elasticity_known"][id].as_str().unwrap_or_default().to_string())
    };
    assert!(
        learned_for(&gw, &job, 1).is_some_and(|k| k.contains("measured")),
        "{:?}",
        learned_for(&gw, &job, 1)
    );
    // The job ends; a job of the same configuration starts and is known from the first pass.
    sim.end_job(&job).expect("running");
    let rerun = find_rerun(&sim, &profile).await;
    gw.driver().tick(true).await.expect("tick");
    let known = learned_for(&gw, &rerun, 1).expect("the re-run's knowledge is recorded");
    assert!(known.contains("measured"), "{rerun}: {known}");
    // A restarted gateway folds the profile back from the ledger.
    let clock = gw.clock();
    let before_restart = gw.ledger().head().0;
    let gw_ptr = Arc::try_unwrap(gw).ok().expect("sole owner");
    gw_ptr.close().await.expect("close");
    drop(sim);
    let (gw2, sim2) = gateway_on(dir.path(), 16, SimFaults::default(), clock).await;
    // The new simulated cluster runs the same fleet again: the job of that configuration is
    // a re-run, with nothing measured in this process.
    let again = sim2
        .inventory()
        .await
        .expect("inventory")
        .into_iter()
        .find(|j| j.signature.as_deref() == Some(profile.as_str()))
        .map(|j| j.spec.id.to_string())
        .expect("the fleet has that configuration");
    gw2.driver().tick(true).await.expect("tick");
    let known = learned_for(&gw2, &again, before_restart + 1).expect("knowledge recorded after the restart");
    assert!(known.contains("measured"), "{again}: {known}");
}

/// Start jobs from the templates until one has `profile`, ending the others.
async fn find_rerun(sim: &Arc<SimCluster>, profile: &str) -> String {
    for i in 0..sim.templates().len() {
        let Ok(id) = sim.start_job(i) else { continue };
        let inventory = sim.inventory().await.expect("inventory");
        let started = inventory
            .iter()
            .find(|j| j.spec.id == id)
            .expect("the job just started");
        if started.signature.as_deref() == Some(profile) {
            return id.to_string();
        }
        sim.end_job(&id).expect("just started");
    }
    panic!("no template gives profile {profile}");
}

/// Probing on the simulated site: the jobs of the opted-in tier are stepped through their
/// sweeps outside events, within the site budget, every step and its end in the ledger, until
/// each has a measured curve; a job of another tier is never probed; after the sweeps every
/// job is back at its uncapped limit, and the first event plans on the measured curves.
#[tokio::test(start_paused = true)]
async fn probing_measures_the_opted_in_jobs_curves_before_the_first_event() {
    use flexgate::config::ProbeConfig;
    let dir = tempfile::tempdir().expect("dir");
    let nodes = 16;
    let sim = SimCluster::new(SimConfig {
        nodes,
        seed: 3,
        settle_ms: 0,
        facility: facility_for_nodes(nodes),
        tier: Some("batch".into()),
        ..SimConfig::default()
    })
    .expect("sim");
    let jobs = sim.inventory().await.expect("inventory");
    let prod = jobs[0].spec.id.to_string();
    sim.set_tier(&prod, Some("prod")).expect("running");
    let mut config = config(dir.path(), nodes);
    config.probe = ProbeConfig {
        enabled: true,
        tiers: vec!["batch".into()],
        max_fleet_share: 0.25,
        ..ProbeConfig::default()
    };
    let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
    let backend: Arc<dyn ClusterBackend> = sim.clone();
    let gw = Gateway::start(config, Clock::real(), ledger, backend)
        .await
        .expect("gateway");
    let bodies = |gw: &Arc<Gateway>| -> Vec<Value> {
        gw.ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .map(|r| r.body)
            .collect()
    };
    let known = |all: &[Value], id: &str| -> String {
        all.iter()
            .rev()
            .find_map(|b| b["elasticity_known"][id].as_str().map(ToString::to_string))
            .unwrap_or_default()
    };
    let batch: Vec<String> = jobs
        .iter()
        .map(|j| j.spec.id.to_string())
        .filter(|id| *id != prod)
        .collect();
    let mut done = false;
    for _ in 0..720 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
        let all = bodies(&gw);
        let open = !gw.read().status().await.probes_in_flight.is_empty();
        if !open && batch.iter().all(|id| known(&all, id).contains("measured curve")) {
            done = true;
            break;
        }
    }
    let all = bodies(&gw);
    let steps: Vec<&Value> = all.iter().filter(|b| b["entry"] == "probe_step").collect();
    assert!(
        done,
        "every batch job measured: {:?}",
        batch.iter().map(|id| (id, known(&all, id))).collect::<Vec<_>>()
    );
    assert!(steps.len() >= 3, "{} steps", steps.len());
    for step in &steps {
        let (in_flight, budget) = (
            step["fleet_share_in_flight"].as_f64(),
            step["fleet_share_budget"].as_f64(),
        );
        assert!(in_flight <= budget, "{step}");
        assert_ne!(step["job"], prod.as_str(), "a job of another tier was probed: {step}");
    }
    let measured_ends = all
        .iter()
        .filter(|b| b["entry"] == "probe_ended" && b["outcome"] == "measured")
        .count();
    assert!(measured_ends >= 1);
    // Every step's cap was sent with a lease ending with the step.
    let probe_dispatches: Vec<&Value> = all
        .iter()
        .filter(|b| b["entry"] == "caps_dispatched" && b["purpose"] == "probe")
        .collect();
    assert!(!probe_dispatches.is_empty());
    // Back at their uncapped limits, and the status says nothing is capped.
    tokio::time::sleep(Duration::from_secs(5)).await;
    gw.driver().tick(true).await.expect("tick");
    for job in sim.inventory().await.expect("inventory") {
        assert_eq!(job.applied_cap, job.spec.cap_range.max, "{} left capped", job.spec.id);
    }
    // The first event plans on the measured curves.
    let baseline = meter_kw(&gw).await;
    let (status, ack) = post(
        &gw,
        &event("ev-probed", 1, (baseline * 0.8 * 10.0).round() / 10.0, 0, Some(600)),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(5)).await;
        gw.driver().tick(true).await.expect("tick");
    }
    let all = bodies(&gw);
    let first_plan = all.iter().position(|b| b["entry"] == "plan").expect("a plan");
    assert!(
        all[first_plan..].iter().all(|b| b["entry"] != "probe_step"),
        "no probe during the event"
    );
    let (_, body) = get(&gw, "/v1/jobs").await;
    let listed: Value = serde_json::from_slice(&body).expect("json");
    let rows = listed.as_array().expect("jobs");
    for row in rows.iter().filter(|r| r["id"] != prod.as_str()) {
        assert_eq!(row["elasticity"], "measured sweep", "{row}");
        let evidence = row["knowledge_evidence"].as_str().unwrap_or_default();
        assert!(evidence.starts_with("measured curve: 4 points"), "{row}");
    }
}

/// The forecast: made with the flexibility curve, its first step the curve now (at the
/// ceiling), 192 ordered quarter-hour bands that never narrow, the basis in words, and each
/// refresh recorded in the ledger with its hourly bands.
#[tokio::test(start_paused = true)]
async fn the_forecast_starts_at_the_curve_now_widens_and_is_recorded() {
    let dir = tempfile::tempdir().expect("dir");
    let sim = SimCluster::new(SimConfig {
        nodes: 16,
        seed: 3,
        settle_ms: 0,
        facility: facility_for_nodes(16),
        ..SimConfig::default()
    })
    .expect("sim");
    let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
    let backend: Arc<dyn ClusterBackend> = sim;
    let gw = Gateway::start(config(dir.path(), 16), Clock::real(), ledger, backend)
        .await
        .expect("gateway");
    let (code, _) = get(&gw, "/v1/forecast").await;
    assert_eq!(code, StatusCode::NOT_FOUND, "no forecast before telemetry");
    gw.driver().tick(true).await.expect("tick");
    let (code, body) = get(&gw, "/v1/forecast").await;
    assert_eq!(code, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let forecast: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(forecast["cost_ceiling"], 0.1);
    assert_eq!(forecast["objective"], "progress");
    let steps = forecast["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 192);
    let band = |s: &Value, p: &str| s["available_w"][p].as_f64().expect("a figure");
    // Hour 0 is the curve now: the most it sheds within 10 % of the progress.
    let curve = gw.read().flexibility().await.expect("a curve");
    let now_w = flexgate_policies::forecast::available_within(&curve, 0.1);
    assert!(now_w > 0.0);
    assert!(
        (band(&steps[0], "p50") - now_w).abs() < 1e-6 * now_w,
        "{} vs {now_w}",
        steps[0]
    );
    let mut upper = 0.0;
    for s in steps {
        let (p10, p50, p90) = (band(s, "p10"), band(s, "p50"), band(s, "p90"));
        assert!(0.0 <= p10 && p10 <= p50 && p50 <= p90, "{s}");
        assert!(p90 - p50 >= upper - 1e-6, "the band never narrows: {s}");
        upper = p90 - p50;
        assert_eq!(s["levels"].as_array().map(Vec::len), Some(21));
    }
    assert!(band(&steps[191], "p90") > band(&steps[191], "p10"), "wider at 48 h");
    let basis = forecast["basis"].to_string();
    assert!(
        basis.contains("no queue from the scheduler") && basis.contains("has not been read yet"),
        "it says what it stands on: {basis}"
    );
    let recorded: Vec<Value> = gw
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.body["entry"] == "forecast")
        .map(|r| r.body)
        .collect();
    assert_eq!(recorded.len(), 1, "one forecast so far");
    assert_eq!(recorded[0]["hourly"].as_array().map(Vec::len), Some(48));
    // Fifteen minutes on, it is made (and recorded) again.
    tokio::time::sleep(Duration::from_secs(901)).await;
    gw.driver().tick(true).await.expect("tick");
    let count = gw
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.body["entry"] == "forecast")
        .count();
    assert_eq!(count, 2);

    // The simulated scheduler's queue, read (off the control path, as its task does): the next
    // pass makes a forecast on it at once (a minute after the last at the soonest), costing each
    // queued job by what is known of its configuration, and records how many it counted.
    assert!(
        gw.driver().read_queue().await,
        "the simulated cluster has a queue to poll"
    );
    tokio::time::sleep(Duration::from_secs(61)).await;
    gw.driver().tick(false).await.expect("tick");
    let (_, body) = get(&gw, "/v1/forecast").await;
    let forecast: Value = serde_json::from_slice(&body).expect("json");
    let basis = forecast["basis"].to_string();
    assert!(basis.contains("6 queued jobs"), "{basis}");
    let last = gw
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.body["entry"] == "forecast")
        .last()
        .expect("a forecast");
    assert_eq!(last.body["queued_jobs"], 6, "{}", last.body);
    let (_, jobs) = get(&gw, "/v1/jobs").await;
    let jobs: Value = serde_json::from_slice(&jobs).expect("json");
    let first = &jobs.as_array().expect("jobs")[0];
    assert!(
        first["started_at"].is_string() && first["time_limit_s"].as_f64().is_some_and(|l| l >= 86_400.0),
        "the simulated scheduler gives its jobs a start and a limit: {first}"
    );
}

/// Declaring, then delivering (issue 33): a declaration is refused without a forecast, a token
/// or a sane override (nothing recorded), then recorded from the forecast with an operator's
/// override and its reason; an event in the overridden hour is set, in the audit and in the
/// season's settlement report, against the declared figure, what the site could shed when it
/// came, and what it delivered.
#[tokio::test(start_paused = true)]
async fn a_declaration_is_recorded_with_an_operators_override_and_set_against_the_event() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 16, SimFaults::default()).await;
    let (code, body) = post_to(&gw, "/v1/declarations", &json!({"operator": "ana"}), Some(TOKEN)).await;
    assert_eq!(code, StatusCode::CONFLICT, "no forecast yet: {body}");
    for _ in 0..3 {
        gw.driver().tick(true).await.expect("tick");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let (_, forecast) = get(&gw, "/v1/forecast").await;
    let forecast: Value = serde_json::from_slice(&forecast).expect("json");
    // Declarations are made in clock hours; each hour's figure is its least quarter-hour's P10.
    let oracle = common::hours::least_p10_by_clock_hour(&forecast);
    let hour0 = common::hours::rfc3339(oracle[0].0);
    let (code, _) = post_to(&gw, "/v1/declarations", &json!({"operator": "ana"}), None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    for bad in [
        json!({"operator": "ana", "overrides": [{"start": hour0, "available_w": -1.0, "reason": "x"}]}),
        json!({"operator": "ana", "overrides": [{"start": hour0, "available_w": 3500.0, "reason": " "}]}),
        json!({"operator": "ana", "overrides": [{"start": "2020-01-01T00:00:00Z", "available_w": 3500.0, "reason": "x"}]}),
        json!({"operator": "ana", "confidence": 75}),
        json!({"operator": "", "confidence": 90}),
        json!({"operator": "ana", "kw": 3}),
    ] {
        let (code, body) = post_to(&gw, "/v1/declarations", &bad, Some(TOKEN)).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let declared_records = || {
        gw.ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .filter(|r| r.body["entry"] == "declared")
            .count()
    };
    assert_eq!(declared_records(), 0, "nothing recorded for a refused declaration");
    let (code, declared) = post_to(
        &gw,
        "/v1/declarations",
        &json!({"operator": "ana", "overrides": [{"start": hour0, "available_w": 3500.0, "reason": "chiller maintenance this hour"}]}),
        Some(TOKEN),
    )
    .await;
    assert_eq!(code, StatusCode::CREATED, "{declared}");
    assert_eq!(declared_records(), 1);
    let hours = declared["hours"].as_array().expect("hours");
    assert_eq!(hours.len(), oracle.len());
    assert!(
        oracle.len() == 48 || oracle.len() == 49,
        "48 hours ahead on clock hours"
    );
    assert_eq!(
        (hours[0]["from"].as_str(), hours[0]["available_w"].as_f64()),
        (Some("operator"), Some(3500.0))
    );
    assert_eq!(hours[0]["reason"], "chiller maintenance this hour");
    assert_eq!(hours[1]["from"], "forecast");
    for (hour, (start, least)) in hours.iter().zip(&oracle).skip(1) {
        assert_eq!(hour["start"], common::hours::rfc3339(*start));
        assert!(
            (hour["available_w"].as_f64().expect("W") - least).abs() < 1e-6,
            "{hour}"
        );
    }
    let (_, in_force) = get(&gw, "/v1/declarations").await;
    let in_force: Value = serde_json::from_slice(&in_force).expect("json");
    assert_eq!(in_force["hours"].as_array().map(Vec::len), Some(oracle.len()));
    assert_eq!(in_force["hours"][0]["operator"], "ana");

    // An event in the overridden hour, run to its end.
    let meter = gw.read().status().await.meter_kw().expect("meter");
    let (status, ack) = post(&gw, &event("ev-decl", 1, meter - 8.0, 60, Some(900)), Some(TOKEN)).await;
    assert_eq!(status, StatusCode::OK, "{ack}");
    // Lead, ramp, hold, recovery and the window after it for the baseline.
    for _ in 0..330 {
        gw.driver().tick(true).await.expect("tick");
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let records: Vec<_> = gw.ledger().iter_from(1).filter_map(Result::ok).collect();
    let audit = flexgate::reports::audit::build(&records, "ev-decl", 300, chrono_tz::Tz::UTC)
        .expect("typed entries")
        .expect("the event is in the ledger");
    let d = audit.declared.as_ref().expect("declared for the event");
    assert_eq!((d.declared_kw, d.operator.as_str(), d.confidence), (3.5, "ana", 90));
    assert_eq!(d.overridden.len(), 1, "{d:?}");
    let could = d.could_shed_kw.expect("the curve when the event came");
    assert!(
        could > 3.5,
        "the site could shed more than the operator declared: {could}"
    );
    let delivered = audit
        .delivered_kw
        .unwrap_or_else(|| panic!("delivered: {:?} {:?}", audit.baseline, audit.intervals));
    assert!(delivered > 0.0, "{delivered}");
    let md = audit.to_markdown();
    assert!(
        md.contains("Declared (by ana") && md.contains("chiller maintenance"),
        "{md}"
    );
    // The season report reads the same from the interval store.
    let today = Utc::now().date_naive();
    let path = format!(
        "/v1/settlement?from={}&to={}",
        today - chrono::Days::new(1),
        today + chrono::Days::new(2)
    );
    let (code, body) = get(&gw, &path).await;
    assert_eq!(code, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    let report: Value = serde_json::from_slice(&body).expect("json");
    let event = report["events"]
        .as_array()
        .and_then(|e| e.iter().find(|e| e["event_id"] == "ev-decl"))
        .expect("the event in the season report");
    assert_eq!(event["declared"]["declared_kw"], 3.5, "{event}");
    assert_eq!(event["declared"]["could_shed_kw"].as_f64(), Some(could));
    eprintln!("declared 3.5 kW (operator), could shed {could:.1} kW when the event came, delivered {delivered:.1} kW");
}

/// The OpenAPI document is generated from the handlers (`utoipa`), so it covers every route;
/// this checks it stays whole: every operation answers (none documented that is not served),
/// every answer body has a schema, every `$ref` resolves, and routes are only ever registered
/// through the documenting macro.
#[tokio::test]
async fn the_generated_openapi_document_is_complete_and_every_operation_is_served() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    gw.driver().tick(true).await.expect("tick");
    let (status, spec) = get(&gw, "/openapi.json").await;
    assert_eq!(status, StatusCode::OK);
    let spec: Value = serde_json::from_slice(&spec).expect("JSON");
    assert_eq!(spec, flexgate::grid::http::openapi_document(), "served = generated");
    assert!(
        spec["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")),
        "{}",
        spec["openapi"]
    );
    let paths = spec["paths"].as_object().expect("paths");
    let mut documented: Vec<String> = Vec::new();
    for (path, item) in paths {
        for (method, op) in item.as_object().expect("path item") {
            documented.push(format!("{} {path}", method.to_uppercase()));
            assert!(
                op["summary"].as_str().is_some_and(|s| !s.is_empty()),
                "{method} {path} has no summary"
            );
            let responses = op["responses"].as_object().expect("responses");
            // Every answer has a 2xx with a schema for its body; `/` only redirects.
            match responses.iter().find(|(code, _)| code.starts_with('2')) {
                Some((_, ok)) => {
                    let content = ok["content"].as_object().expect("a body");
                    assert!(
                        content.values().all(|c| c.get("schema").is_some()),
                        "{method} {path}: a 2xx body without a schema"
                    );
                }
                None => assert!(
                    (path == "/" && responses.contains_key("303"))
                        || (path == "/dashboard" && responses.contains_key("308")),
                    "{method} {path} has no 2xx answer"
                ),
            }
            for (code, answer) in responses
                .iter()
                .filter(|(c, _)| c.starts_with('4') || c.starts_with('5'))
            {
                assert!(
                    answer["content"].get("application/problem+json").is_some(),
                    "{method} {path} {code} is not a problem"
                );
            }
            // Served: a read answers without 404/405 (an unknown id gets a 404 problem).
            if method == "get" {
                let concrete = match path.as_str() {
                    // A bounded sample of the stream (it runs until the client leaves).
                    "/v1/stream" => "/v1/stream?max=1".to_string(),
                    // Reads that take a window.
                    "/v1/meter/intervals" => {
                        "/v1/meter/intervals?from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00Z".into()
                    }
                    "/v1/settlement" => "/v1/settlement?from=2026-01-01&to=2026-02-01".into(),
                    "/v1/baseline" => {
                        "/v1/baseline?method=meter_before_after&start=2026-01-01T14:00:00Z&end=2026-01-01T15:00:00Z"
                            .into()
                    }
                    _ => path.replace("{id}", "nope").replace("{file}", "app.js"),
                };
                let (status, body) = get(&gw, &concrete).await;
                if path == "/" {
                    assert_eq!(status, StatusCode::SEE_OTHER);
                } else if path == "/dashboard" {
                    assert_eq!(status, StatusCode::PERMANENT_REDIRECT);
                } else if path == "/dashboard/events/{id}" {
                    // The page loads, and says itself that the event is unknown.
                    assert_eq!(status, StatusCode::OK);
                } else if path == "/v1/baseline" {
                    // Served: on a site with no meter data yet, the method's refusal says so.
                    assert_eq!(status, StatusCode::BAD_REQUEST);
                    let problem: Value = serde_json::from_slice(&body).expect("problem JSON");
                    assert!(problem["detail"].as_str().is_some_and(|d| !d.is_empty()), "{problem}");
                } else if path.contains("{id}") {
                    assert_eq!(status, StatusCode::NOT_FOUND);
                    let problem: Value = serde_json::from_slice(&body).expect("problem JSON");
                    assert_eq!(problem["status"], 404);
                } else {
                    assert_eq!(status, StatusCode::OK, "{concrete}: {}", String::from_utf8_lossy(&body));
                }
            } else {
                // A write without the token is refused, and documented as such.
                let router = flexgate::grid::http::router(gw.clone(), TOKEN);
                let request = Request::post(path.as_str()).body(Body::from("{}")).expect("request");
                let status = router.oneshot(request).await.expect("answer").status();
                assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}");
                assert!(
                    responses.contains_key("401"),
                    "{method} {path} does not document its 401"
                );
            }
        }
    }
    documented.sort();
    assert_eq!(
        documented,
        [
            "GET /",
            "GET /dashboard",
            "GET /dashboard/",
            "GET /dashboard/assets/{file}",
            "GET /dashboard/events/{id}",
            "GET /healthz",
            "GET /metrics",
            "GET /openapi.json",
            "GET /v1/baseline",
            "GET /v1/declarations",
            "GET /v1/events",
            "GET /v1/events/{id}",
            "GET /v1/events/{id}/audit",
            "GET /v1/events/{id}/audit.svg",
            "GET /v1/flexibility",
            "GET /v1/forecast",
            "GET /v1/jobs",
            "GET /v1/ledger/verify",
            "GET /v1/meter/history",
            "GET /v1/meter/intervals",
            "GET /v1/plan",
            "GET /v1/settlement",
            "GET /v1/settlement.html",
            "GET /v1/status",
            "GET /v1/stream",
            "POST /v1/declarations",
            "POST /v1/events",
            "POST /v1/meter/import",
            "POST /v1/operator/opt-out",
        ]
    );
    // Every reference resolves into the document's components.
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                for (k, v) in map {
                    if k == "$ref" {
                        out.push(v.as_str().unwrap_or("").to_string());
                    }
                    refs(v, out);
                }
            }
            Value::Array(items) => items.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    refs(&spec["paths"], &mut all);
    refs(&spec["components"], &mut all);
    for r in all.iter().filter(|r| r.starts_with("#/components/")) {
        assert!(spec.pointer(&r[1..]).is_some(), "{r} does not resolve");
    }
    for schema in [
        "StatusView",
        "JobView",
        "PlanView",
        "EventView",
        "FlexibilityView",
        "Problem",
    ] {
        assert!(spec["components"]["schemas"][schema].is_object(), "no schema {schema}");
    }
    assert_eq!(
        spec["components"]["schemas"]["DrEventDocument"]["$id"],
        "https://flexgate.invalid/schemas/dr.event-1.json"
    );
    assert!(spec["components"]["schemas"]["DrAckDocument"]["properties"]["log_checkpoint"].is_object());
    // Routes are registered only through `routes!`, which documents them in the same step.
    let source = include_str!("../src/grid/http/mod.rs");
    assert!(
        !source.contains(".route("),
        "a route registered without its documentation"
    );
}

/// Every error is one shape, RFC 9457 problem details, including the router's own 404 and 405.
#[tokio::test]
async fn every_error_is_a_problem_document() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    let router = flexgate::grid::http::router(gw.clone(), TOKEN);
    let call = |method: &str, path: &str, token: Option<&str>, body: &str| {
        let mut request = axum::http::Request::builder().method(method).uri(path);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request.body(axum::body::Body::from(body.to_string())).expect("request");
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await.expect("answer");
            let status = response.status();
            let kind = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.expect("body");
            (
                status,
                kind,
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    for (method, path, token, body, want) in [
        ("GET", "/v1/nothing-here", None, "", StatusCode::NOT_FOUND),
        ("DELETE", "/v1/status", None, "", StatusCode::METHOD_NOT_ALLOWED),
        ("POST", "/v1/events", None, "{}", StatusCode::UNAUTHORIZED),
        ("POST", "/v1/events", Some(TOKEN), "{not json", StatusCode::BAD_REQUEST),
        ("GET", "/v1/events/nope", None, "", StatusCode::NOT_FOUND),
        (
            "POST",
            "/v1/operator/opt-out",
            Some(TOKEN),
            "{}",
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (status, kind, problem) = call(method, path, token, body).await;
        assert_eq!(status, want, "{method} {path}: {problem}");
        assert_eq!(kind, "application/problem+json", "{method} {path}");
        assert_eq!(problem["type"], "about:blank", "{method} {path}: {problem}");
        assert_eq!(problem["status"], want.as_u16(), "{method} {path}: {problem}");
        assert!(
            problem["title"].is_string() && problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{problem}"
        );
    }
}

/// The live stream sends the state at once and again as it changes, and ends as soon as the
/// gateway begins to stop (a dashboard left open must not hold a shutdown for the HTTP grace
/// period).
#[tokio::test]
async fn the_live_stream_sends_state_and_ends_when_the_gateway_stops() {
    use http_body_util::BodyExt as _;
    let dir = tempfile::tempdir().expect("dir");
    let (gw, _sim) = gateway(dir.path(), 4, SimFaults::default()).await;
    gw.driver().tick(true).await.expect("tick");
    let router = flexgate::grid::http::router(gw.clone(), TOKEN);
    let response = router
        .oneshot(Request::get("/v1/stream").body(Body::empty()).expect("request"))
        .await
        .expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = response.into_body();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("a first message at once")
        .expect("a frame")
        .expect("data");
    let text = String::from_utf8_lossy(first.data_ref().expect("data")).into_owned();
    assert!(text.starts_with("event: state\ndata: {"), "{text}");
    let state: Value = serde_json::from_str(text.trim_start_matches("event: state\ndata: ").trim()).expect("JSON");
    assert_eq!(state["seq"], 1);
    assert_eq!(state["status"]["site"], "site-1");
    gw.read().begin_shutdown();
    let ended = tokio::time::timeout(Duration::from_secs(3), async {
        while let Some(frame) = body.frame().await {
            frame.expect("frame");
        }
    })
    .await;
    assert!(ended.is_ok(), "the stream did not end when the gateway began to stop");
}
