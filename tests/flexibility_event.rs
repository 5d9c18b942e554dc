//! Issue 33, "Flexibility during an event": a gateway on the default simulated cluster, an
//! event submitted seconds after it started. While the event is in force the site's
//! flexibility curve must still be published, saying how much *more* the site can shed from
//! the caps in force, and the status's flexibility-now figure must not read zero while the
//! jobs' GPUs stand above their floors. The dashboard (in a headless Chromium, as
//! tests/dashboard.rs loads it) shows that curve and figure with words saying they are more,
//! from the caps in force.
#![allow(clippy::disallowed_methods, reason = "the test event runs on the wall clock")]

mod common;

use common::chromium::{load_async, text_of};
use flexgate::clock::Clock;
use flexgate::config::Config;
use flexgate::serve::Server;
use std::time::{Duration, Instant};

const TOKEN: &str = "flexibility-event-token-0123456789";

async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, serde_json::Value) {
    let r = flexgate::http_client::request(addr, "GET", path, None, None)
        .await
        .expect("GET");
    (r.status, r.json().unwrap_or(serde_json::Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn during_an_event_the_curve_says_how_much_more_the_site_can_shed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.gateway.data_dir = dir.path().join("data");
    config.gateway.api_token = TOKEN.into();
    config.gateway.telemetry_interval_s = 1;
    let site = config.gateway.site.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway");
    let addr = server.addr;

    // As a new user would: a meter reading, then an event at once.
    let deadline = Instant::now() + Duration::from_secs(30);
    let meter_kw = loop {
        let (_, s) = get(addr, "/v1/status").await;
        if let Some(w) = s["measured_meter_w"].as_f64() {
            break w / 1000.0;
        }
        assert!(Instant::now() < deadline, "no meter reading: {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (_, before) = get(addr, "/v1/flexibility").await;
    eprintln!(
        "before: from {} deepest {:?} W",
        before["from"],
        before["points"]
            .as_array()
            .and_then(|p| p.last())
            .map(|p| p["meter_shed_w"].clone())
    );
    // A ceiling 22 % under the meter, from now, for ten minutes: deep enough that the status's
    // figure used to read 0 kW while the jobs stood some 18 kW above their floors.
    let ceiling_kw = (meter_kw * 0.78 * 10.0).round() / 10.0;
    let start = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let body = serde_json::json!({"schema": "dr.event/1", "event_id": "ev-deeper", "revision": 1, "site": site,
        "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 600, "recovery_s": 0}})
    .to_string();
    let r = flexgate::http_client::request(addr, "POST", "/v1/events", Some(TOKEN), Some(body.as_bytes()))
        .await
        .expect("POST");
    assert_eq!(r.status, 200, "{}", r.text());

    // The event in force, its caps confirmed and settled.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, s) = get(addr, "/v1/status").await;
        if s["phase"] == "active" && s["gpu_budget_w"].as_f64().is_some() && s["unconfirmed_jobs"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the event did not become active: {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(4)).await;

    let (status, s) = get(addr, "/v1/status").await;
    assert_eq!(status, 200);
    let (code, curve) = get(addr, "/v1/flexibility").await;
    let (_, plan) = get(addr, "/v1/plan").await;
    // The room the plan leaves: each job's expected draw under its cap above its floor.
    let entries = plan["entries"].as_array().cloned().unwrap_or_default();
    let room_w: f64 = entries
        .iter()
        .map(|e| (e["expected_power_w"].as_f64().unwrap_or(0.0) - e["floor_w"].as_f64().unwrap_or(0.0)).max(0.0))
        .sum();
    eprintln!(
        "during: meter {:?} W, ceiling {:?} W, flex_available_w {:?}, GET /v1/flexibility {code} from {} deepest {:?} W; plan room above floors {room_w:.0} W",
        s["measured_meter_w"],
        s["meter_ceiling_w"],
        s["flex_available_w"],
        curve["from"],
        curve["points"]
            .as_array()
            .and_then(|p| p.last())
            .map(|p| p["meter_shed_w"].clone()),
    );
    assert!(room_w > 1000.0, "the plan leaves the jobs above their floors: {plan}");
    assert_eq!(code, 200, "no curve during the event: {curve}");
    assert_eq!(curve["from"], "current_caps", "{curve}");
    let points = curve["points"].as_array().expect("points");
    assert_eq!(points[0]["gpu_shed_w"], 0.0, "{curve}");
    let deepest = points.last().expect("levels");
    assert!(
        deepest["meter_shed_w"].as_f64().is_some_and(|w| w > 0.0),
        "nothing more to shed during the event: {curve}"
    );
    // It is measured from the caps in force: the room the plan leaves above the floors (the
    // plan's figures are rounded, its caps to 0.1 W per GPU), not the watts already shed again.
    let deepest_gpu_w = deepest["gpu_shed_w"].as_f64().expect("a figure");
    assert!(
        (deepest_gpu_w - room_w).abs() <= 1e-3 * room_w + 1.0,
        "{deepest} vs {room_w} W of room above the floors"
    );
    assert!(
        curve["from_power_w"]
            .as_f64()
            .is_some_and(|w| w < curve["uncapped_power_w"].as_f64().unwrap_or(0.0)),
        "{curve}"
    );
    assert!(curve["from_value_lost"].as_f64().is_some_and(|v| v > 0.0), "{curve}");
    assert!(
        s["flex_available_w"].as_f64().is_some_and(|w| w > 0.0),
        "flexibility now reads zero during the event: {s}"
    );

    // The dashboard shows the same: the figure, said to be more from the caps in force, and
    // the curve from them.
    let profile = dir.path().join("chromium-profile");
    let page = load_async(format!("http://{addr}/dashboard/?updates=3"), &profile).await;
    assert!(page.console.is_empty(), "console output: {:#?}", page.console);
    let shown: f64 = text_of(&page.dom, "flex")
        .parse()
        .expect("a Flexibility now figure in kW");
    assert!(shown > 0.0, "Flexibility now {shown} kW during the event");
    let note = text_of(&page.dom, "flex-note");
    assert!(note.starts_with("more, from the caps in force"), "{note}");
    let caption = text_of(&page.dom, "flex-caption");
    assert!(
        caption.contains("how much more the site can shed, from the caps in force") && caption.contains("kW more"),
        "{caption}"
    );
    assert!(page.dom.contains("class=\"flex-expected\""), "the curve is drawn");
    server.shutdown().await;
}
