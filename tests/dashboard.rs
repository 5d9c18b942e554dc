//! The operator dashboard in a real headless Chromium (Debian's `chromium`, installed by
//! `tests/peers/setup.sh`; missing, the test fails loudly): the overview, the same page with an
//! event in progress, and the event's audit page. Each page must load with no console message
//! at all (an error, a refused resource, a CSP violation would print one), show live values
//! that change when the event runs, and be written as a screenshot for a reviewer:
//! `target/dashboard-screenshots/{overview,event,audit}.png`.
//!
//! Chromium runs with a virtual-time budget, so the page's scripts run to completion; the
//! live stream is bounded with `?updates=N` (the page closes it after N updates), so the dump
//! or the screenshot shows the page after N live updates.
#![allow(clippy::disallowed_methods, reason = "the test event runs on the wall clock")]

mod common;

use common::chromium::{load_async, screenshot, text_of};
use flexgate::clock::Clock;
use flexgate::config::Config;
use flexgate::serve::Server;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TOKEN: &str = "dashboard-test-token-0123456789";

/// [`screenshot`] on the blocking pool.
async fn screenshot_async(url: String, profile: &Path, file: PathBuf) {
    let profile = profile.to_path_buf();
    tokio::task::spawn_blocking(move || screenshot(&url, &profile, &file))
        .await
        .expect("chromium");
}

async fn status(addr: std::net::SocketAddr) -> serde_json::Value {
    let r = flexgate::http_client::request(addr, "GET", "/v1/status", None, None)
        .await
        .expect("status");
    r.json().expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_site_live_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    let mut config = Config::default();
    config.gateway.data_dir = dir.path().join("data");
    config.gateway.api_token = TOKEN.into();
    config.gateway.telemetry_interval_s = 1;
    config.gateway.site = "dc-east".into();
    config.site.time_zone = "America/New_York".into();
    // One node's agent does not answer: its job's cap cannot be confirmed, and the page must say
    // so, and why, at the top of the jobs table.
    config.backend = flexgate::config::BackendConfig::Sim(flexgate::cluster::SimConfig {
        faults: flexgate::cluster::SimFaults {
            unreachable_nodes: vec!["node-000".into()],
            ..flexgate::cluster::SimFaults::default()
        },
        ..flexgate::cluster::SimConfig::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway");
    let addr = server.addr;
    let deadline = Instant::now() + Duration::from_secs(30);
    while status(addr).await["measured_meter_w"].as_f64().is_none() {
        assert!(Instant::now() < deadline, "no meter reading");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let profile = dir.path().join("chromium-profile");
    let base = format!("http://{addr}");

    // Before any event: the site, its zone, the meter, no event; the stream delivered updates.
    let before = load_async(format!("{base}/dashboard/?updates=2"), &profile).await;
    assert!(
        before.console.is_empty(),
        "console output on the overview: {:#?}",
        before.console
    );
    assert_eq!(text_of(&before.dom, "site"), "dc-east");
    assert_eq!(text_of(&before.dom, "time-zone"), "America/New_York");
    // A single gateway has no replicas to show.
    assert!(
        before.dom.contains("id=\"replica-fact\" hidden"),
        "the replica fact shows on a single gateway"
    );
    assert!(
        before.dom.contains("data-updates=\"2\""),
        "two live updates: {}",
        text_of(&before.dom, "live")
    );
    let meter_before: f64 = text_of(&before.dom, "meter").parse().expect("a meter figure in kW");
    assert!(meter_before > 10.0, "{meter_before}");
    assert_eq!(text_of(&before.dom, "compliance"), "No event");
    assert!(
        before
            .dom
            .contains("id=\"settlement-link\" href=\"/v1/settlement.html\""),
        "the dashboard links to the season's settlement"
    );
    assert!(before.dom.contains("<svg"), "the chart is drawn");
    // The flexibility curve, from GET /v1/flexibility: the expected loss drawn, labelled an
    // estimate, with what the site can shed at the meter.
    let curve = flexgate::http_client::request(addr, "GET", "/v1/flexibility", None, None)
        .await
        .expect("GET /v1/flexibility");
    assert_eq!(curve.status, 200, "{}", curve.text());
    let curve: serde_json::Value = serde_json::from_str(&curve.text()).expect("json");
    assert!(curve["uncapped_value"].as_f64().is_some_and(|v| v > 0.0), "{curve}");
    let deepest = curve["points"].as_array().and_then(|p| p.last()).expect("levels");
    assert!(deepest["value_lost"].as_f64().is_some_and(|v| v > 0.0), "{deepest}");
    assert!(
        before.dom.contains("class=\"flex-expected\""),
        "the flexibility curve is drawn"
    );
    let caption = text_of(&before.dom, "flex-caption");
    assert!(
        caption.starts_with("The flexibility curve at") && caption.contains("not measurements"),
        "{caption}"
    );
    assert!(
        text_of(&before.dom, "ledger-verify").starts_with("intact"),
        "{}",
        text_of(&before.dom, "ledger-verify")
    );
    screenshot_async(
        format!("{base}/dashboard/?updates=2"),
        &profile,
        shots.join("overview.png"),
    )
    .await;

    // An event: a ceiling 15 % under the meter, from now, for ten minutes.
    let ceiling_kw = (meter_before * 0.85 * 10.0).round() / 10.0;
    let start = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let body = serde_json::json!({"schema": "dr.event/1", "event_id": "ev-dash", "revision": 1, "site": "dc-east",
        "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 600, "recovery_s": 0}})
    .to_string();
    let r = flexgate::http_client::request(addr, "POST", "/v1/events", Some(TOKEN), Some(body.as_bytes()))
        .await
        .expect("POST");
    assert_eq!(r.status, 200, "{}", r.text());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = status(addr).await;
        if s["phase"] == "active" && s["gpu_budget_w"].as_f64().is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the event did not become active: {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;

    let during = load_async(format!("{base}/dashboard/?updates=3"), &profile).await;
    assert!(
        during.console.is_empty(),
        "console output during the event: {:#?}",
        during.console
    );
    assert!(
        during.dom.contains("data-updates=\"3\""),
        "three live updates: {}",
        text_of(&during.dom, "live")
    );
    assert!(during.dom.contains("ev-dash"), "the event is listed");
    // Its start in the site's zone, the date as ISO 8601 writes it (no 04/12 that a US reader
    // takes for April 12).
    let start_shown = chrono::DateTime::parse_from_rfc3339(&start)
        .expect("the start")
        .with_timezone(&chrono_tz::America::New_York)
        .format("%Y-%m-%d %H:%M")
        .to_string();
    assert!(during.dom.contains(&start_shown), "{start_shown} in the events table");
    assert!(during.dom.contains(">active<"), "its state is shown");
    let ceiling_shown: f64 = text_of(&during.dom, "ceiling").parse().expect("a ceiling in kW");
    assert!(
        (ceiling_shown - ceiling_kw).abs() < 0.05,
        "{ceiling_shown} vs {ceiling_kw}"
    );
    let compliance = text_of(&during.dom, "compliance");
    assert!(
        compliance == "Under the ceiling" || compliance == "OVER the ceiling",
        "{compliance}"
    );
    assert!(
        text_of(&during.dom, "plan-in-force").starts_with("yes"),
        "{}",
        text_of(&during.dom, "plan-in-force")
    );
    // The plan card states the plan's contract against the equal cut.
    let guarantee = text_of(&during.dom, "plan-guarantee");
    assert!(
        guarantee.starts_with("worst case ") && guarantee.contains("of the equal cut's progress"),
        "{guarantee}"
    );
    assert_ne!(text_of(&during.dom, "meter"), "", "a meter figure");
    // The job whose node does not answer is listed first, not confirmed, with the reason.
    assert!(
        during.dom.contains("NOT confirmed: node did not answer")
            || during.dom.contains("NOT confirmed: node not measured"),
        "the unconfirmed cap and its reason are shown: {}",
        text_of(&during.dom, "jobs")
    );
    assert!(
        during.dom.contains("event in force") || during.dom.contains("ev-dash active"),
        "the window is shaded"
    );
    screenshot_async(
        format!("{base}/dashboard/?updates=3"),
        &profile,
        shots.join("event.png"),
    )
    .await;

    // The event's audit page, rebuilt from the live ledger.
    let audit = load_async(format!("{base}/dashboard/events/ev-dash"), &profile).await;
    assert!(
        audit.console.is_empty(),
        "console output on the audit page: {:#?}",
        audit.console
    );
    assert_eq!(text_of(&audit.dom, "event-id"), "ev-dash");
    assert_eq!(text_of(&audit.dom, "loading"), "Rebuilt from the ledger.");
    assert!(
        text_of(&audit.dom, "baseline-method").contains("meter before/after"),
        "{}",
        text_of(&audit.dom, "baseline-method")
    );
    assert_ne!(
        text_of(&audit.dom, "compliance"),
        "—",
        "an interval has metered samples"
    );
    let chart = flexgate::http_client::request(addr, "GET", "/v1/events/ev-dash/audit.svg", None, None)
        .await
        .expect("chart");
    assert_eq!(chart.status, 200);
    assert!(chart.text().contains("event in force") && chart.text().contains("America/New_York"));
    screenshot_async(
        format!("{base}/dashboard/events/ev-dash"),
        &profile,
        shots.join("audit.png"),
    )
    .await;

    // Read-only without the token: an action through the page's own endpoint needs it.
    let refused = flexgate::http_client::request(
        addr,
        "POST",
        "/v1/operator/opt-out",
        None,
        Some(br#"{"event_id":"ev-dash","operator":"x","reason":"y"}"#),
    )
    .await
    .expect("POST");
    assert_eq!(refused.status, 401);
    eprintln!("screenshots in {}", shots.display());
    server.shutdown().await;
}
