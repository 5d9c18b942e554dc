//! The operator dashboard in a real headless Chromium (Debian's `chromium`, installed by
//! `tests/peers/setup.sh`; missing, the test fails loudly): the overview, the same page with an
//! event in progress, the event's audit page, and the overview's 48-hour forecast panel. Each
//! page must load with no console message at all (an error, a refused resource, a CSP violation
//! would print one), show live values that change when the event runs, and be written as a
//! screenshot for a reviewer:
//! `target/dashboard-screenshots/{overview,event,audit,forecast}.png`.
//!
//! Chromium runs with a virtual-time budget, so the page's scripts run to completion; the
//! live stream is bounded with `?updates=N` (the page closes it after N updates), so the dump
//! or the screenshot shows the page after N live updates.
#![allow(clippy::disallowed_methods, reason = "the test event runs on the wall clock")]

mod common;

use common::chromium::{load_async, run_chromium, screenshot, text_of};
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

/// One browser test at a time: two gateways and two Chromiums at once on a small machine slow
/// each other's live stream.
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A screenshot of a window `height` pixels tall (the page down to a panel far below the fold:
/// a headless screenshot shows the window, not a scrolled view), on the blocking pool.
async fn tall_screenshot_async(url: String, profile: &Path, file: PathBuf, height: u32) {
    let profile = profile.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let _ = std::fs::remove_file(&file);
        // The last --window-size given wins over the helper's own.
        let (_, stderr) = run_chromium(
            &url,
            &profile,
            &[
                format!("--screenshot={}", file.display()),
                format!("--window-size=1400,{height}"),
            ],
        );
        let size = std::fs::metadata(&file).map(|m| m.len()).unwrap_or(0);
        assert!(
            size > 20_000,
            "no screenshot at {} ({size} bytes): {stderr}",
            file.display()
        );
    })
    .await
    .expect("chromium");
}

async fn status(addr: std::net::SocketAddr) -> serde_json::Value {
    let r = flexgate::http_client::request(addr, "GET", "/v1/status", None, None)
        .await
        .expect("status");
    r.json().expect("JSON")
}

/// Where the screenshots go, created.
fn screenshot_dir() -> PathBuf {
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/dashboard-screenshots");
    std::fs::create_dir_all(&shots).expect("screenshot directory");
    shots
}

/// The site the pages show: 1 s telemetry, named, in New York's time zone (local clock times).
fn site_config(dir: &Path) -> Config {
    let mut config = Config::default();
    config.gateway.data_dir = dir.join("data");
    config.gateway.api_token = TOKEN.into();
    config.gateway.telemetry_interval_s = 1;
    config.gateway.site = "dc-east".into();
    config.site.time_zone = "America/New_York".into();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_site_live_in_a_real_browser() {
    let _browser = BROWSER.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let shots = screenshot_dir();
    let mut config = site_config(dir.path());
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

/// The numbers of an SVG `points` attribute of the first element with `class` in a dumped DOM.
fn points_of(dom: &str, class: &str) -> Vec<(f64, f64)> {
    let at = dom
        .find(&format!("class=\"{class}\""))
        .unwrap_or_else(|| panic!("no {class} in the page"));
    let rest = &dom[at..];
    let open = rest.find("points=\"").expect("a points attribute") + "points=\"".len();
    let rest = &rest[open..];
    rest[..rest.find('"').expect("the attribute ends")]
        .split_whitespace()
        .map(|p| {
            let (x, y) = p.split_once(',').expect("x,y");
            (x.parse().expect("x"), y.parse().expect("y"))
        })
        .collect()
}

/// Issue 33, what the site can promise tomorrow: the overview draws `GET /v1/forecast` as a band
/// chart (the kW the site can shed at the meter over the next 48 h, P10–P90 shaded, the median
/// drawn, now marked), names the cost ceiling, when the forecast was made and what it stands on,
/// with no console message; written as `target/dashboard-screenshots/forecast.png`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_shows_the_48_hour_forecast() {
    let _browser = BROWSER.lock().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let shots = screenshot_dir();
    let config = site_config(dir.path());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway");
    let addr = server.addr;
    // The first telemetry pass makes the flexibility curve, and the forecast with it.
    let read_forecast = || async move {
        let r = flexgate::http_client::request(addr, "GET", "/v1/forecast", None, None)
            .await
            .expect("GET /v1/forecast");
        (r.status == 200).then(|| r.json().expect("JSON"))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let forecast = loop {
        if let Some(f) = read_forecast().await {
            break f;
        }
        assert!(Instant::now() < deadline, "no forecast from the gateway");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let steps = forecast["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 192, "48 h of quarter-hours");
    let band = |s: &serde_json::Value, p: &str| s["available_w"][p].as_f64().expect("a percentile") / 1000.0;
    let profile = dir.path().join("chromium-profile");
    let base = format!("http://{addr}");

    let page = load_async(format!("{base}/dashboard/?updates=1"), &profile).await;
    assert!(
        page.console.is_empty(),
        "console output on the overview with a forecast: {:#?}",
        page.console
    );
    let dom = &page.dom;
    assert!(dom.contains("id=\"forecast\""), "the forecast panel is on the page");
    assert!(dom.contains("Forecast: the next 48 h"), "its title");
    // The band: each quarter-hour a flat step of P90 out and P10 back; the median likewise.
    let band_points = points_of(dom, "forecast-band");
    let p50_points = points_of(dom, "forecast-p50");
    assert_eq!(band_points.len(), 4 * steps.len(), "the band's outline");
    assert_eq!(p50_points.len(), 2 * steps.len(), "the median's steps");
    // Inside the chart (viewBox 1200 × 320, zero kW at y = 258), left to right, and the median inside the band
    // (SVG's y grows downwards: P90's edge above, P10's below).
    for (i, &(x, y)) in p50_points.iter().enumerate() {
        assert!((0.0..=1200.0).contains(&x) && (0.0..=320.0).contains(&y), "{x},{y}");
        if i > 0 {
            assert!(x >= p50_points[i - 1].0, "the median runs left to right");
        }
        let upper = band_points[i].1;
        let lower = band_points[band_points.len() - 1 - i].1;
        assert!(
            upper <= y + 1e-6 && y <= lower + 1e-6,
            "P10 ≤ P50 ≤ P90 at point {i}: {upper} {y} {lower}"
        );
    }
    assert!(
        p50_points.iter().any(|&(_, y)| y < 258.0 - 1.0),
        "the median stands above zero kW: {p50_points:?}"
    );
    assert!(dom.contains("class=\"forecast-now\""), "now is marked");
    // The labels: the legend, the kW axis, the cost ceiling, in the objective's words.
    for label in [
        "P10–P90",
        "P50 (median)",
        "kW sheddable at the meter",
        "the trade's “P90”",
    ] {
        assert!(dom.contains(label), "{label} on the page");
    }
    let words = if forecast["objective"] == "tokens" {
        "tokens/s"
    } else {
        "GPU-weighted progress"
    };
    let ceiling = forecast["cost_ceiling"].as_f64().expect("the cost ceiling");
    assert_eq!(
        text_of(dom, "forecast-ceiling"),
        format!(
            "Cost ceiling in use: at most {} % of {words} lost.",
            (ceiling * 1000.0).round() / 10.0
        ),
        "the cost ceiling"
    );
    assert!(
        text_of(dom, "forecast-ceiling").contains("at most 10 % of GPU-weighted progress lost"),
        "the default ceiling and objective"
    );
    // Dates as ISO 8601 in the site's zone: now, and the next midnight on the time axis.
    let new_york = |at: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(at.as_str().expect("a time"))
            .expect("RFC 3339")
            .with_timezone(&chrono_tz::America::New_York)
    };
    let first = new_york(&steps[0]["start"]);
    let now_label = format!("now {}", first.format("%Y-%m-%d %H:%M"));
    assert!(dom.contains(&now_label), "{now_label} on the chart");
    let tomorrow = (first.date_naive() + chrono::Days::new(1))
        .format("%Y-%m-%d")
        .to_string();
    assert!(
        dom.contains(&format!(">{tomorrow}</text>")),
        "tomorrow's midnight, {tomorrow}, on the time axis"
    );
    let caption = text_of(dom, "forecast-caption");
    assert!(
        caption.starts_with("Made 20") && caption.contains("is our P10") && caption.contains("not measurements"),
        "{caption}"
    );
    // What it stands on, each line listed.
    let basis = forecast["basis"].as_array().expect("basis");
    assert!(!basis.is_empty(), "the forecast says what it stands on");
    for line in basis {
        let line = line.as_str().expect("a line");
        let escaped = line.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
        assert!(dom.contains(&format!("<li>{escaped}</li>")), "the basis line {line:?}");
    }
    // The figures match the API's, where the gateway made no new forecast meanwhile.
    let after = read_forecast().await.expect("still a forecast");
    if after["generated_at"] == forecast["generated_at"] {
        let made = new_york(&forecast["generated_at"]).format("%Y-%m-%d %H:%M").to_string();
        assert!(
            caption.starts_with(&format!("Made {made} (America/New_York)")),
            "{caption}"
        );
        let last = steps.last().expect("a last step");
        for p in ["p10", "p50", "p90"] {
            let shown = format!("P{} {:.1}<", &p[1..], band(last, p));
            assert!(dom.contains(&shown), "{shown} at the end of the chart");
        }
    } else {
        eprintln!("a new forecast while the page loaded: its figures are not compared with the API's");
    }

    let file = shots.join("forecast.png");
    tall_screenshot_async(format!("{base}/dashboard/?updates=1"), &profile, file.clone(), 2000).await;
    eprintln!("forecast screenshot: {}", file.display());
    server.shutdown().await;
}
