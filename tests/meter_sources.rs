//! The gateway on a real Modbus meter: a pymodbus 3.8.6 server (PyPI, installed by
//! `tests/peers/setup.sh` into `target/peers/modbus-venv`) serving a site meter whose power
//! rises 1 kW every 100 ms from 1,000 kW (`adapters/modbus/tests/modbus_meter.py`). The
//! gateway must act on that reading and call it measured, then, when the meter hangs, fall
//! back to the facility model's upper estimate and say so in the status, the metrics and the
//! ledger. Fails loudly, never skips, when pymodbus is missing.

#[path = "../adapters/prometheus/tests/support/mod.rs"]
mod prometheus_support;

use flexgate::clock::Clock;
use flexgate::config::Config;
use flexgate::ledger::RecordKind;
use flexgate::meter::{MeterConfig, MeterSourceConfig, ModbusSource, PrometheusSource};
use flexgate::serve::Server;
use flexgate_modbus::{Order, Register, Table, ValueType};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Meter {
    child: Child,
    port: u16,
}

impl Drop for Meter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pymodbus_meter() -> Meter {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/peers/modbus-venv/bin/python");
    assert!(
        python.exists(),
        "pymodbus is not installed at {}: run `bash tests/peers/setup.sh --only modbus`",
        python.display()
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let mut child = Command::new(python)
        .arg(root.join("adapters/modbus/tests/modbus_meter.py"))
        .arg(port.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("pymodbus starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("its first line");
    assert!(line.starts_with("listening"), "pymodbus said {line:?}");
    Meter { child, port }
}

/// A gateway on the simulated cluster, measuring every second, with `meter` as its sources.
async fn gateway(dir: &std::path::Path, meter: MeterConfig) -> Server {
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.gateway.api_token = "it-token-0123456789".into();
    config.gateway.telemetry_interval_s = 1;
    config.site.facility_max_kw = 2_000.0;
    config.meter = Some(meter);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway")
}

async fn status(server: &Server) -> serde_json::Value {
    serde_json::to_value(server.gateway.read().status().await).expect("status as JSON")
}

async fn wait_for(
    server: &Server,
    what: &str,
    within_s: u64,
    test: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(within_s);
    loop {
        let s = status(server).await;
        if test(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what} not within {within_s} s; status {s}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_acts_on_a_real_modbus_meter_and_falls_back_when_it_hangs() {
    let meter = pymodbus_meter();
    let dir = tempfile::tempdir().expect("tempdir");
    let meter_config = MeterConfig {
        max_age_s: 2.0,
        sources: vec![MeterSourceConfig::Modbus(ModbusSource {
            id: "incomer".into(),
            sign: 1.0,
            poll_s: 0.3,
            timeout_ms: 300,
            address: format!("127.0.0.1:{}", meter.port),
            register: Register {
                unit_id: 1,
                table: Table::Holding,
                address: 3059,
                value_type: ValueType::Float32,
                word_order: Order::BigEndian,
                byte_order: Order::BigEndian,
                scale_to_kw: 1.0,
            },
        })],
    };
    let server = gateway(dir.path(), meter_config).await;

    // The meter's own figure, called measured.
    let fresh = wait_for(&server, "a measured meter", 20, |s| s["meter_quality"] == "measured").await;
    let kw = fresh["measured_meter_w"].as_f64().expect("measured_meter_w") / 1000.0;
    assert!(
        (1_000.0..1_400.0).contains(&kw),
        "the pymodbus meter's figure, not the simulated site's: {fresh}"
    );
    assert_eq!(fresh["meter_w"], fresh["measured_meter_w"]);
    let metrics = server.gateway.read().metrics().await;
    assert!(
        metrics.contains("flexgate_meter_quality{quality=\"measured\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("flexgate_measured_meter_watts "), "{metrics}");

    // The meter hangs: reads time out, the reading ages past max_age_s, and the facility
    // model's upper estimate stands in, never the last reading.
    let status = Command::new("kill")
        .args(["-USR1", &meter.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let stale = wait_for(&server, "a stale meter", 20, |s| s["meter_quality"] == "stale").await;
    assert!(stale["measured_meter_w"].is_null(), "{stale}");
    let fallback = stale["meter_w"].as_f64().expect("meter_w") / 1000.0;
    assert!(
        fallback < 900.0,
        "the simulated site's model upper estimate, not the meter's last ~1,000 kW: {stale}"
    );
    let metrics = server.gateway.read().metrics().await;
    assert!(
        metrics.contains("flexgate_meter_quality{quality=\"stale\"} 1"),
        "{metrics}"
    );
    // The history keeps each figure's own quality: the readings, then the stale stand-ins
    // (it once called every figure that was not a reading `model`).
    let history = server.gateway.read().meter_history(3600).await;
    let qualities: Vec<&str> = history.points.iter().map(|p| p.quality).collect();
    assert!(
        qualities.contains(&"measured") && qualities.contains(&"stale") && !qualities.contains(&"model"),
        "{qualities:?}"
    );
    assert!(
        !metrics.contains("flexgate_measured_meter_watts "),
        "a stale figure is not shown as measured: {metrics}"
    );
    let errors = metrics
        .lines()
        .find_map(|l| l.strip_prefix("flexgate_meter_read_errors_total{source=\"incomer\"} "))
        .and_then(|v| v.parse::<u64>().ok())
        .expect("the source's error counter");
    assert!(errors > 0, "{metrics}");

    // The ledger says where every sample came from.
    let samples: Vec<_> = server
        .gateway
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.kind == RecordKind::Measurement && r.body["entry"] == "meter_sample")
        .collect();
    let measured = samples
        .iter()
        .find(|r| r.body["meter_quality"] == "measured")
        .expect("a measured sample");
    assert!(
        measured.body["meter_kw"].as_f64().is_some_and(|kw| kw >= 1_000.0),
        "{}",
        measured.body
    );
    let stale = samples
        .iter()
        .find(|r| r.body["meter_quality"] == "stale")
        .expect("a stale sample");
    assert!(
        stale.body["meter_kw"].as_f64().is_some_and(|kw| kw < 900.0),
        "{}",
        stale.body
    );
    server.shutdown().await;
}

/// A meter whose register holds NaN (as some do while starting up) answers every read: each
/// figure is a reading the screen refuses, counted in `flexgate_meter_readings_refused_total`,
/// not a read error, and the gateway never calls the site measured on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nan_from_a_modbus_meter_is_a_refused_reading_not_a_read_error() {
    let meter = pymodbus_meter();
    let dir = tempfile::tempdir().expect("tempdir");
    let meter_config = MeterConfig {
        max_age_s: 2.0,
        sources: vec![MeterSourceConfig::Modbus(ModbusSource {
            id: "starting".into(),
            sign: 1.0,
            poll_s: 0.2,
            timeout_ms: 300,
            address: format!("127.0.0.1:{}", meter.port),
            register: Register {
                unit_id: 1,
                table: Table::Holding,
                address: 300,
                value_type: ValueType::Float32,
                word_order: Order::BigEndian,
                byte_order: Order::BigEndian,
                scale_to_kw: 1.0,
            },
        })],
    };
    let server = gateway(dir.path(), meter_config).await;
    let counter = |metrics: &str, name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{{source=\"starting\"}} ")))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let metrics = server.gateway.read().metrics().await;
        if counter(&metrics, "flexgate_meter_readings_refused_total").is_some_and(|n| n >= 3) {
            break metrics;
        }
        assert!(Instant::now() < deadline, "no refused reading counted: {metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(
        counter(&metrics, "flexgate_meter_read_errors_total"),
        Some(0),
        "a NaN is the meter's answer, not a failed read: {metrics}"
    );
    let s = status(&server).await;
    assert_ne!(s["meter_quality"], "measured", "{s}");
    assert!(s["measured_meter_w"].is_null(), "{s}");
    server.shutdown().await;
}

/// Two Prometheus sources with signs: the site is the sum of both feeds minus feed b (as if b
/// were generation behind the meter), read through a real Prometheus; when the exporter stops,
/// the series are gone and the gateway falls back and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_sources_sum_with_their_signs_and_a_vanished_series_is_not_measured() {
    let exporter = prometheus_support::Exporter::start().await;
    let prom = prometheus_support::prometheus(exporter.addr).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let source = |id: &str, sign: f64, query: &str| {
        MeterSourceConfig::Prometheus(PrometheusSource {
            id: id.into(),
            sign,
            poll_s: 0.5,
            timeout_ms: 1_000,
            url: prom.url.clone(),
            query: query.into(),
        })
    };
    let meter_config = MeterConfig {
        max_age_s: 3.0,
        sources: vec![
            source("all-feeds", 1.0, "sum(site_feed_power_watts) / 1000"),
            source("feed-b", -1.0, "sum(site_feed_power_watts{feed=\"b\"}) / 1000"),
        ],
    };
    let server = gateway(dir.path(), meter_config).await;

    // Feed a alone: 400 kW plus 1 kW per scrape (feed b's 100 kW cancels out).
    let fresh = wait_for(&server, "a measured meter", 30, |s| s["meter_quality"] == "measured").await;
    let kw = fresh["measured_meter_w"].as_f64().expect("measured") / 1000.0;
    let scrapes = exporter.scrapes.load(std::sync::atomic::Ordering::SeqCst) as f64;
    assert!(
        (400.0..=400.0 + scrapes).contains(&kw),
        "{kw} kW after {scrapes} scrapes: {fresh}"
    );

    exporter.task.abort();
    let gone = wait_for(&server, "a stale meter", 30, |s| s["meter_quality"] == "stale").await;
    assert!(gone["measured_meter_w"].is_null(), "{gone}");
    let metrics = server.gateway.read().metrics().await;
    assert!(
        metrics.contains("flexgate_meter_read_errors_total{source=\"all-feeds\"}"),
        "{metrics}"
    );
    server.shutdown().await;
    drop(prom);
}

/// A real Prometheus scrapes the gateway's `/metrics` (OpenMetrics text from the Prometheus
/// client library): the target is up with no scrape error, and the series come out with their
/// base-unit names, histograms and build info as Prometheus reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_the_gateways_metrics() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.gateway.data_dir = dir.path().to_path_buf();
    config.gateway.api_token = "it-token-0123456789".into();
    config.gateway.telemetry_interval_s = 1;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway");
    let prom = prometheus_support::prometheus(server.addr).await;
    let http = prometheus_support::http();
    let query = |q: &'static str| {
        let http = http.clone();
        let url = format!("{}/api/v1/query", prom.url);
        async move {
            let answer: serde_json::Value = http
                .get(url)
                .query(&[("query", q)])
                .send()
                .await
                .expect("query")
                .json()
                .await
                .expect("JSON");
            answer["data"]["result"].as_array().cloned().unwrap_or_default()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let build = loop {
        let result = query("flexgate_build_info").await;
        if !result.is_empty() {
            break result;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus has no flexgate_build_info after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(build[0]["metric"]["version"], env!("CARGO_PKG_VERSION"), "{build:?}");
    assert_eq!(build[0]["value"][1], "1");
    let targets: serde_json::Value = http
        .get(format!("{}/api/v1/targets", prom.url))
        .send()
        .await
        .expect("targets")
        .json()
        .await
        .expect("JSON");
    let target = &targets["data"]["activeTargets"][0];
    assert_eq!(target["health"], "up", "{target}");
    assert_eq!(target["lastError"], "", "{target}");
    for series in [
        "flexgate_plans_total",
        "flexgate_ack_latency_seconds_count",
        "flexgate_ledger_flush_duration_seconds_bucket",
        "flexgate_gpu_power_watts",
        "flexgate_meter_quality",
    ] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while query_is_empty(&query, series).await {
            assert!(Instant::now() < deadline, "Prometheus has no {series}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    server.shutdown().await;
    drop(prom);
}

async fn query_is_empty<F, Fut>(query: &F, series: &'static str) -> bool
where
    F: Fn(&'static str) -> Fut,
    Fut: std::future::Future<Output = Vec<serde_json::Value>>,
{
    query(series).await.is_empty()
}
