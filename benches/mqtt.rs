//! The MQTT intake through a real Mosquitto on 127.0.0.1 (installed by `tests/peers/setup.sh`),
//! QoS 1 both ways, with the gateway in-process on a sled ledger on disk.
//!
//! `cargo bench --bench mqtt` prints:
//! - **sustained throughput**: a utility client publishes N distinct events as fast as it can;
//!   from the first publish to the last `dr.ack/1` received back, every event's raw input,
//!   interpretation and ack flushed before its PUBACK. Three runs, each on a fresh broker and
//!   gateway; the median is reported. The events are test events, so that the figure is the
//!   intake's, not the planner's (a burst of distinct real events would re-plan per event);
//! - **latency at 100 events/s**: 30 s of revisions of one real event at a steady 100/s, each
//!   moving the ceiling (so each one is interpreted against the meter and re-planned): p50,
//!   p99 and max of (a) publish → ack received by the utility, end to end through the broker
//!   both ways, and (b) the gateway's `received_at` → ack received by the utility.
//!
//! The broker runs with `max_inflight_messages 1000` (Mosquitto's default is 20, which caps
//! how many events the gateway can be flushing at once; see BENCHMARKS.md).
//!
//! `-- --test` runs a small smoke version (used by the test script).
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

#[allow(dead_code)] // the bench starts brokers, never restarts them
#[path = "../tests/common/mosquitto.rs"]
mod mosquitto;

use chrono::{DateTime, SecondsFormat, Utc};
use flexgate::clock::Clock;
use flexgate::config::{Config, MqttConfig};
use flexgate::serve::Server;
use mosquitto::Mosquitto;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const SITE: &str = "site-1";

/// PUBACKs the utility clients received from the broker (for diagnosing a stalled run).
static PUBACKS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

async fn gateway(broker: &Mosquitto, dir: &std::path::Path) -> Server {
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.gateway.api_token = "bench-token-0123456789".into();
    config.gateway.site = SITE.into();
    config.mqtt = Some(MqttConfig::for_url(&broker.url()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway")
}

/// A utility client; acks arrive on the channel with the instant they were read.
async fn utility(port: u16, id: &str) -> (AsyncClient, mpsc::UnboundedReceiver<(Instant, Value)>) {
    let mut options = MqttOptions::new(id, "127.0.0.1", port);
    options.set_keep_alive(Duration::from_secs(10)).set_inflight(1000);
    let (client, mut eventloop) = AsyncClient::new(options, 50_000);
    let mut network = rumqttc::NetworkOptions::new();
    network.set_tcp_nodelay(true);
    eventloop.set_network_options(network);
    client
        .subscribe(format!("dr/{SITE}/acks/+"), QoS::AtLeastOnce)
        .await
        .expect("subscribe");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut said = false;
        loop {
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::PubAck(_))) => {
                    PUBACKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    let at = Instant::now();
                    let _ = tx.send((at, serde_json::from_slice(&p.payload).unwrap_or(Value::Null)));
                }
                Ok(_) => {}
                Err(e) => {
                    // A benchmark that loses its connection measures the reconnect, not the
                    // gateway: say so (once per client; after a run its broker is gone), so
                    // that a figure is never quoted from such a run unknowingly.
                    if !said && !tx.is_closed() {
                        eprintln!("utility client: {e}");
                        said = true;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    });
    (client, rx)
}

fn event(id: &str, revision: u64, kw: f64, test: bool) -> Vec<u8> {
    let start = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    json!({"schema": "dr.event/1", "event_id": id, "revision": revision, "site": SITE, "test": test,
           "target": {"form": "ceiling", "point": "meter", "kw": kw},
           "window": {"start": start, "ramp_s": 0, "duration_s": 3600, "recovery_s": 0}})
    .to_string()
    .into_bytes()
}

/// Waits for the gateway's subscription (its retained status says online) and a meter reading.
async fn ready(server: &Server) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(kw) = server.gateway.read().status().await.measured_meter_kw() {
            tokio::time::sleep(Duration::from_millis(500)).await;
            return kw;
        }
        assert!(Instant::now() < deadline, "no meter reading");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The gateway's `/metrics` text, for saying where a stalled run stalled.
async fn scrape(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return "metrics: cannot connect".into();
    };
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    if stream.write_all(request.as_bytes()).await.is_ok() {
        let _ = stream.read_to_string(&mut text).await;
    }
    text
}

async fn throughput_run(n: usize) -> f64 {
    let dir = tempfile::tempdir().expect("dir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let (client, mut acks) = utility(broker.port, "bench-utility").await;
    ready(&server).await;
    let bodies: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            let id = format!("tp-{i}");
            let body = event(&id, 1, 100.0, true);
            (id, body)
        })
        .collect();
    let started = Instant::now();
    for (id, body) in bodies {
        client
            .publish(format!("dr/{SITE}/events/{id}"), QoS::AtLeastOnce, false, body)
            .await
            .expect("publish");
    }
    let mut seen = 0;
    let mut last = started;
    while seen < n {
        let Ok(Some((at, ack))) = tokio::time::timeout(Duration::from_secs(60), acks.recv()).await else {
            let text = scrape(server.addr).await;
            for line in text
                .lines()
                .filter(|l| !l.starts_with('#') && (l.contains("mqtt") || l.contains("ledger") || l.contains("event")))
            {
                eprintln!("{line}");
            }
            let pubacks = PUBACKS.load(std::sync::atomic::Ordering::Relaxed);
            panic!("only {seen} of {n} acks ({pubacks} of the utility's publishes acknowledged by the broker)");
        };
        assert_eq!(ack["opt"], "in", "{ack}");
        seen += 1;
        last = at;
    }
    server.shutdown().await;
    n as f64 / (last - started).as_secs_f64()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn show(name: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{name:<52} n={:<5} p50 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.99),
        ms.last().copied().unwrap_or(0.0)
    );
}

async fn latency_run(seconds: u64) {
    let dir = tempfile::tempdir().expect("dir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let (client, mut acks) = utility(broker.port, "bench-latency").await;
    let meter = ready(&server).await;
    let n = seconds * 100;
    let mut published: Vec<Instant> = Vec::with_capacity(n as usize);
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    for revision in 1..=n {
        tick.tick().await;
        // Alternate between two ceilings so that every revision moves the ceiling.
        let kw = if revision % 2 == 0 { 0.8 * meter } else { 0.82 * meter };
        let body = event("lat", revision, kw.round(), false);
        published.push(Instant::now());
        client
            .publish(format!("dr/{SITE}/events/lat"), QoS::AtLeastOnce, false, body)
            .await
            .expect("publish");
    }
    let (mut end_to_end, mut in_gateway) = (Vec::new(), Vec::new());
    let base_wall: DateTime<Utc> = Utc::now();
    let base_mono = Instant::now();
    let mut got = 0;
    while got < n {
        let Ok(Some((at, ack))) = tokio::time::timeout(Duration::from_secs(60), acks.recv()).await else {
            panic!("only {got} of {n} acks");
        };
        got += 1;
        let revision = ack["revision"].as_u64().expect("revision");
        let Some(sent) = published.get(revision as usize - 1) else {
            continue;
        };
        end_to_end.push((at - *sent).as_secs_f64() * 1e3);
        if let Some(received) = ack["received_at"]
            .as_str()
            .and_then(|s| s.parse::<DateTime<Utc>>().ok())
        {
            // The ack's arrival on the wall clock, from the monotonic instant.
            let arrived = base_wall - chrono::Duration::from_std(base_mono - at).unwrap_or_default();
            in_gateway.push((arrived - received).num_microseconds().unwrap_or(0) as f64 / 1e3);
        }
    }
    show("100 ev/s: publish → ack received (end to end)", end_to_end);
    show("100 ev/s: gateway received_at → ack received", in_gateway);
    server.shutdown().await;
}

fn main() {
    let smoke = std::env::args().any(|a| a == "--test");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_env("RUST_LOG"))
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (n, runs, seconds) = if smoke { (200, 1, 2) } else { (20_000, 3, 30) };
        let mut rates = Vec::new();
        for run in 1..=runs {
            let rate = throughput_run(n).await;
            println!("throughput run {run}: {n} events, {rate:.0} events/s (publish → last ack)");
            rates.push(rate);
        }
        rates.sort_by(f64::total_cmp);
        println!("throughput median: {:.0} events/s", rates[rates.len() / 2]);
        latency_run(seconds).await;
    });
}
