//! The gateway's MQTT side against a real Mosquitto broker on 127.0.0.1 (started per test by
//! `common::mosquitto`; installed by `tests/peers/setup.sh`). The utility is a plain rumqttc
//! client: it publishes `dr.event/1` documents and reads the gateway's acks and status.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

mod common;

use chrono::{SecondsFormat, Utc};
use common::mosquitto::Mosquitto;
use flexgate::clock::Clock;
use flexgate::config::{Config, MqttConfig};
use flexgate::serve::Server;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

const SITE: &str = "site-1";

/// A utility-side client: publishes events, collects everything under `dr/site-1/`.
struct Utility {
    client: AsyncClient,
    seen: mpsc::UnboundedReceiver<(String, Vec<u8>, bool)>,
}

impl Utility {
    async fn connect(port: u16, id: &str) -> Utility {
        Utility::connect_to(port, id, &format!("dr/{SITE}/#")).await
    }

    /// A utility client that collects everything under `filter`.
    async fn connect_to(port: u16, id: &str, filter: &str) -> Utility {
        let mut options = MqttOptions::new(id, "127.0.0.1", port);
        options.set_keep_alive(Duration::from_secs(5));
        // Room for the oversized events the tests publish (and see again on `dr/site-1/#`).
        options.set_max_packet_size(64 * 1024 * 1024, 64 * 1024 * 1024);
        let (client, mut eventloop) = AsyncClient::new(options, 20_000);
        client.subscribe(filter, QoS::AtLeastOnce).await.expect("subscribe");
        let (tx, seen) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                match eventloop.poll().await {
                    Ok(Event::Incoming(Packet::Publish(p))) => {
                        let _ = tx.send((p.topic.clone(), p.payload.to_vec(), p.retain));
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        });
        Utility { client, seen }
    }

    async fn publish_on(&self, topic: &str, body: &[u8]) {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, body.to_vec())
            .await
            .expect("publish");
    }

    async fn publish(&self, event_id: &str, body: &[u8]) {
        self.client
            .publish(
                format!("dr/{SITE}/events/{event_id}"),
                QoS::AtLeastOnce,
                false,
                body.to_vec(),
            )
            .await
            .expect("publish");
    }

    async fn publish_retained(&self, event_id: &str, body: &[u8]) {
        self.client
            .publish(
                format!("dr/{SITE}/events/{event_id}"),
                QoS::AtLeastOnce,
                true,
                body.to_vec(),
            )
            .await
            .expect("publish");
    }

    /// The next message on `topic`, within `timeout_s`.
    async fn next_on(&mut self, topic: &str, timeout_s: u64) -> Value {
        let deadline = Instant::now() + Duration::from_secs(timeout_s);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(Some((t, body, _))) = tokio::time::timeout(left, self.seen.recv()).await else {
                panic!("nothing on {topic} within {timeout_s} s");
            };
            if t == topic {
                return serde_json::from_slice(&body).expect("JSON payload");
            }
        }
    }
}

fn event(id: &str, revision: u64, ceiling_kw: f64, start_in_s: i64, test: bool) -> Vec<u8> {
    let start = (Utc::now() + chrono::Duration::seconds(start_in_s)).to_rfc3339_opts(SecondsFormat::Secs, true);
    serde_json::to_vec(&json!({
        "schema": "dr.event/1", "event_id": id, "revision": revision, "site": SITE, "test": test,
        "target": {"form": "ceiling", "point": "meter", "kw": ceiling_kw},
        "window": {"start": start, "ramp_s": 0, "duration_s": 600}
    }))
    .expect("json")
}

async fn gateway(broker: &Mosquitto, dir: &std::path::Path) -> Server {
    gateway_with(broker, dir, |_| {}).await
}

/// A gateway for `SITE` with its MQTT settings adjusted by `adjust` (site, signatures).
async fn gateway_with(broker: &Mosquitto, dir: &std::path::Path, adjust: impl FnOnce(&mut Config)) -> Server {
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.gateway.api_token = "it-token-0123456789".into();
    config.gateway.site = SITE.into();
    config.gateway.telemetry_interval_s = 1;
    let mut mqtt = MqttConfig::for_url(&broker.url());
    mqtt.telemetry_interval_s = 1;
    config.mqtt = Some(mqtt);
    adjust(&mut config);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_is_planned_capped_and_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let mut utility = Utility::connect(broker.port, "utility-1").await;
    let status = utility.next_on(&format!("dr/{SITE}/status"), 10).await;
    assert_eq!(status["state"], "online", "{status}");
    let meter = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(kw) = server.gateway.read().status().await.measured_meter_kw() {
                break kw;
            }
            assert!(Instant::now() < deadline, "no meter reading");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // Before the event, uncapped jobs offer flexibility, less than the whole meter. A message
    // published before the first plannable telemetry carries none yet (null, never a made-up
    // figure): take the first that has it.
    let before = {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let message = utility.next_on(&format!("dr/{SITE}/telemetry"), 10).await;
            if message["flex_available_kw"].is_number() {
                break message;
            }
            assert!(message["flex_available_kw"].is_null(), "{message}");
            assert!(Instant::now() < deadline, "no telemetry with flexibility: {message}");
        }
    };
    let flex = before["flex_available_kw"].as_f64().expect("flexibility advertised");
    assert!(
        flex > 0.0 && flex < before["meter_kw"].as_f64().unwrap_or(0.0),
        "{before}"
    );
    // The 48-hour forecast rides along (issue 33): every sample has the key, `null` until the
    // gateway has made one; then 48 hours from when it was made, each with the meter kW the site
    // can shed within the cost ceiling at P10 <= P50 <= P90, as the gateway holds it.
    let (sample, forecast) = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let message = utility.next_on(&format!("dr/{SITE}/telemetry"), 10).await;
            let f = message
                .get("forecast")
                .expect("the forecast key is always there")
                .clone();
            if f.is_object() {
                break (message, f);
            }
            assert!(f.is_null(), "{message}");
            assert!(Instant::now() < deadline, "no telemetry with a forecast: {message}");
        }
    };
    let hourly = forecast["hourly"].as_array().expect("hourly");
    assert_eq!(hourly.len(), 48, "{forecast}");
    assert_eq!(forecast["objective"], "progress", "{forecast}");
    let ceiling_share = forecast["cost_ceiling"].as_f64().expect("cost ceiling");
    assert!(ceiling_share > 0.0 && ceiling_share <= 1.0, "{forecast}");
    let at = |v: &Value| -> chrono::DateTime<chrono::Utc> {
        v.as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("an instant: {v}"))
    };
    let made = at(&forecast["generated_at"]);
    assert!(made <= at(&sample["ts"]), "{sample}");
    assert_eq!(at(&hourly[0]["start"]), made, "hour 0 is the forecast's now");
    for (h, hour) in hourly.iter().enumerate() {
        assert_eq!(at(&hour["start"]), made + chrono::Duration::hours(h as i64), "{hour}");
        assert_eq!(at(&hour["end"]), made + chrono::Duration::hours(h as i64 + 1), "{hour}");
        let band = |p: &str| {
            hour["available_kw"][p]
                .as_f64()
                .unwrap_or_else(|| panic!("{p}: {hour}"))
        };
        let (p10, p50, p90) = (band("p10"), band("p50"), band("p90"));
        assert!(0.0 <= p10 && p10 <= p50 && p50 <= p90, "ordered bands: {hour}");
    }
    let held = server.gateway.read().forecast().await.expect("the gateway's forecast");
    let held_hourly = held.hourly();
    if held.generated_at == made {
        for (hour, (start, band)) in hourly.iter().zip(&held_hourly) {
            assert_eq!(at(&hour["start"]), *start);
            let p10 = hour["available_kw"]["p10"].as_f64().unwrap_or(f64::NAN);
            assert!(
                (p10 - band.p10.round() / 1000.0).abs() < 1e-9,
                "{hour} against {band:?} W"
            );
        }
    }
    let bytes = serde_json::to_vec(&sample).expect("json").len();
    assert!(
        bytes < 16 * 1024,
        "a sample with its forecast stays small: {bytes} bytes"
    );
    let ceiling = (0.8 * meter).round();
    utility.publish("ev-1", &event("ev-1", 1, ceiling, 0, false)).await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/ev-1"), 10).await;
    assert_eq!(ack["schema"], "dr.ack/1");
    assert_eq!(ack["event_id"], "ev-1");
    assert_eq!(ack["revision"], 1);
    assert_eq!(ack["opt"], "in", "{ack}");
    assert_eq!(ack["accepted_target_kw"].as_f64(), Some(ceiling));
    let (lo, hi) = (
        ack["expected_meter_kw"]["lo"].as_f64(),
        ack["expected_meter_kw"]["hi"].as_f64(),
    );
    assert!(
        matches!((lo, hi), (Some(lo), Some(hi)) if lo <= hi && hi <= ceiling + 1e-9),
        "{ack}"
    );
    assert_eq!(ack["log_checkpoint"].as_str().map(str::len), Some(64), "{ack}");
    // The event reached the book and a plan capped jobs under it.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(plan) = server.gateway.read().plan().await
            && server.gateway.read().status().await.meter_ceiling_kw() == Some(ceiling)
        {
            let plan = serde_json::to_value(&plan).expect("plan");
            assert!(plan.to_string().contains("cap"), "{plan}");
            break;
        }
        assert!(Instant::now() < deadline, "no plan under the MQTT event's ceiling");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Telemetry flows.
    let telemetry = utility.next_on(&format!("dr/{SITE}/telemetry"), 10).await;
    assert!(telemetry["meter_kw"].as_f64().is_some(), "{telemetry}");
    // During the event the jobs sit near their floors, so little or nothing is left to offer
    // (the figure is conservative); it is never negative.
    let flex = telemetry["flex_available_kw"].as_f64().expect("flexibility advertised");
    assert!(flex >= 0.0, "{telemetry}");
    // The flexibility curve rides along: 21 levels, from no shed to the most, costs rising.
    let curve = telemetry["flexibility"]
        .as_array()
        .expect("flexibility curve published");
    assert_eq!(curve.len(), 21, "{telemetry}");
    assert_eq!(curve[0]["meter_shed_kw"], 0.0);
    for w in curve.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert!(b["meter_shed_kw"].as_f64() > a["meter_shed_kw"].as_f64(), "{telemetry}");
        let lost = |p: &Value| p["progress_lost"].as_f64().expect("number");
        assert!(lost(b) >= lost(a) - 1e-9, "{telemetry}");
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_payloads_get_refusals_and_change_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let mut utility = Utility::connect(broker.port, "utility-2").await;
    utility.next_on(&format!("dr/{SITE}/status"), 10).await;
    let start = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let valid = |id: &str| -> Value {
        json!({"schema": "dr.event/1", "event_id": id, "revision": 1, "site": SITE,
               "target": {"form": "ceiling", "point": "meter", "kw": 100.0},
               "window": {"start": start, "ramp_s": 0, "duration_s": 600}})
    };
    let mut cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("bad-json", b"{\"schema\": \"dr.event/1\", ".to_vec(), "JSON"),
        (
            "bad-schema",
            serde_json::to_vec(&{
                let mut v = valid("bad-schema");
                v["schema"] = json!("dr.event/9");
                v
            })
            .expect("json"),
            "schema",
        ),
        ("nan", Vec::new(), ""),
        (
            "neg-duration",
            serde_json::to_vec(&{
                let mut v = valid("neg-duration");
                v["window"]["duration_s"] = json!(-5);
                v
            })
            .expect("json"),
            "duration_s",
        ),
        (
            "other-site",
            serde_json::to_vec(&{
                let mut v = valid("other-site");
                v["site"] = json!("site-9");
                v
            })
            .expect("json"),
            "site",
        ),
        (
            "bad-sig",
            serde_json::to_vec(&{
                let mut v = valid("bad-sig");
                v["sig"] = json!("AAAA");
                v
            })
            .expect("json"),
            "signature",
        ),
        (
            "huge",
            {
                let mut v = valid("huge");
                v["program"] = json!("x".repeat(70_000));
                serde_json::to_vec(&v).expect("json")
            },
            "",
        ),
    ];
    // NaN is not JSON: write it by hand.
    cases[2].1 = String::from_utf8(serde_json::to_vec(&valid("nan")).expect("json"))
        .expect("utf8")
        .replace("100.0", "NaN")
        .into_bytes();
    for (id, body, _) in &cases {
        utility.publish(id, body).await;
    }
    for (id, _, expect) in &cases {
        let ack = utility.next_on(&format!("dr/{SITE}/acks/{id}"), 10).await;
        assert_eq!(ack["opt"], "out", "{id}: {ack}");
        let reason = ack["reason"].as_str().unwrap_or_default().to_lowercase();
        assert!(!reason.is_empty(), "{id}: a refusal says why: {ack}");
        assert!(reason.contains(&expect.to_lowercase()), "{id}: {reason}");
        assert!(
            server.gateway.read().event(id).await.is_none(),
            "{id} must not reach the book"
        );
    }
    // Each refusal is counted once, whether the MQTT bridge or the intake refused it.
    let metrics = server.gateway.read().metrics().await;
    let refused = metrics
        .lines()
        .find_map(|l| l.strip_prefix("flexgate_events_refused_total "))
        .and_then(|v| v.trim().parse::<f64>().ok());
    assert_eq!(refused, Some(cases.len() as f64), "{metrics}");
    // Still running: a valid event afterwards is taken.
    utility
        .publish("fine", &serde_json::to_vec(&valid("fine")).expect("json"))
        .await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/fine"), 10).await;
    assert_eq!(ack["opt"], "in", "{ack}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_mid_event_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let mut utility = Utility::connect(broker.port, "utility-3").await;
    utility.next_on(&format!("dr/{SITE}/status"), 10).await;
    utility.publish("before", &event("before", 1, 100.0, 0, false)).await;
    assert_eq!(
        utility.next_on(&format!("dr/{SITE}/acks/before"), 10).await["opt"],
        "in"
    );

    broker.restart();
    // The utility reconnects too (its own session), then publishes during the event.
    let mut utility = Utility::connect(broker.port, "utility-3b").await;
    // The retained status may first say offline (the broker published the gateway's Will when
    // it went down); the gateway republishes online once it has reconnected.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = utility.next_on(&format!("dr/{SITE}/status"), 30).await;
        if status["state"] == "online" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status never back online after the restart: {status}"
        );
    }
    utility.publish("after", &event("after", 1, 90.0, 0, false)).await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/after"), 20).await;
    assert_eq!(ack["opt"], "in", "{ack}");
    assert!(server.gateway.read().event("after").await.is_some());
    assert!(server.gateway.read().event("before").await.is_some());
    server.shutdown().await;
}

/// The link's back-pressure rule (`flexgate_mqtt::link` docs): the event loop never waits for
/// the application, so QoS 0 events past the queue limit are dropped and counted, while QoS 1
/// events are all kept. (rumqttd delivers at the subscription's QoS, so this needs Mosquitto.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn qos0_events_past_the_queue_limit_are_dropped_and_counted_qos1_never() {
    use flexgate_mqtt::{MqttLink, MqttSettings, Topics};
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let utility = Utility::connect(broker.port, "utility-q").await;
    let mut settings =
        MqttSettings::new(&broker.url(), "gw-qos0", Topics::for_site(SITE).expect("topics")).expect("settings");
    settings.channel_capacity = 3;
    let (link, mut incoming) = MqttLink::connect(settings).expect("link");
    assert!(link.wait_connected(Duration::from_secs(10)).await.is_some());
    for i in 0..20 {
        let id = format!("q0-{i}");
        utility
            .client
            .publish(
                format!("dr/{SITE}/events/{id}"),
                QoS::AtMostOnce,
                false,
                event(&id, 1, 100.0, 60, true),
            )
            .await
            .expect("publish");
    }
    for i in 0..20 {
        utility
            .publish(&format!("q1-{i}"), &event(&format!("q1-{i}"), 1, 100.0, 60, true))
            .await;
    }
    // Nobody receives meanwhile: 3 QoS 0 events are kept, 17 dropped, all 20 QoS 1 kept.
    let deadline = Instant::now() + Duration::from_secs(10);
    while link.stats().delivered.load(Ordering::Relaxed) < 23 {
        assert!(Instant::now() < deadline, "delivered {:?}", link.stats());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(link.stats().dropped.load(Ordering::Relaxed), 17);
    assert_eq!(incoming.waiting(), 23);
    let mut ids = Vec::new();
    for _ in 0..23 {
        let ev = tokio::time::timeout(Duration::from_secs(5), incoming.recv())
            .await
            .expect("in time")
            .expect("open");
        ids.push(ev.event_id.clone());
        let _ = ev.ack.ack().await.expect("ack");
    }
    let expected: Vec<String> = (0..3)
        .map(|i| format!("q0-{i}"))
        .chain((0..20).map(|i| format!("q1-{i}")))
        .collect();
    assert_eq!(ids, expected);
    assert_eq!(incoming.waiting(), 0);
    link.close(Duration::from_secs(5)).await.expect("close");
}

/// A burst of `BURST_N` (default 10,000) events published as fast as one client can: every one
/// is answered on `acks/{id}`, and the ledger holds exactly one raw input and one ack per
/// event. One event in ten is a second revision of an earlier one, so that revisions of one
/// event arrive while the first is still in the pipeline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_events_is_acknowledged_in_full_and_recorded_exactly_once() {
    use flexgate::ledger::RecordKind;
    use std::collections::HashMap;
    let n: usize = std::env::var("BURST_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let mut utility = Utility::connect(broker.port, "utility-burst").await;
    let _ = utility.next_on(&format!("dr/{SITE}/status"), 10).await;
    // (id, revision) of every publish, in order.
    let sent: Vec<(String, u64)> = (0..n)
        .map(|i| {
            if i % 10 == 9 {
                (format!("burst-{}", i - 5), 2)
            } else {
                (format!("burst-{i}"), 1)
            }
        })
        .collect();
    let started = Instant::now();
    for (id, revision) in &sent {
        utility.publish(id, &event(id, *revision, 100.0, 600, true)).await;
    }
    eprintln!("burst: {n} events handed to the client in {:?}", started.elapsed());
    let mut acked: HashMap<(String, u64), String> = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some((topic, body, _))) = tokio::time::timeout(left, utility.seen.recv()).await else {
            panic!("only {} of {n} acks within 120 s", acked.len());
        };
        if topic.starts_with(&format!("dr/{SITE}/acks/")) {
            let ack: Value = serde_json::from_slice(&body).expect("ack JSON");
            let key = (
                ack["event_id"].as_str().expect("id").to_owned(),
                ack["revision"].as_u64().expect("revision"),
            );
            let opt = ack["opt"].as_str().expect("opt").to_owned();
            assert!(acked.insert(key.clone(), opt).is_none(), "two acks for {key:?}");
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "burst: {n} events acknowledged in {elapsed:?} ({:.0} events/s)",
        n as f64 / elapsed.as_secs_f64()
    );
    for key in &sent {
        assert_eq!(acked.get(key).map(String::as_str), Some("in"), "{key:?}");
    }
    let ledger = server.gateway.ledger();
    let (mut raw, mut acks) = (0usize, 0usize);
    for record in ledger.iter_from(1) {
        let record = record.expect("readable record");
        match record.kind {
            RecordKind::RawInput if record.body["transport"]["transport"] == "mqtt" => {
                // The transport decides the recorded source (MQTT events were once "http").
                assert_eq!(record.body["source"], "mqtt", "{}", record.body);
                raw += 1;
            }
            RecordKind::Ack => acks += 1,
            _ => {}
        }
    }
    assert_eq!(raw, n, "raw input records");
    assert_eq!(acks, n, "ack records");
    server.shutdown().await;
}

/// After an event ends the gateway publishes `dr.report/1` on `reports/{event_id}`: per
/// interval the ceiling, the baseline, the mean metered power and the shortfall; the report is
/// also in the ledger as an outbound record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_follows_the_end_of_each_event() {
    use flexgate::ledger::RecordKind;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let mut utility = Utility::connect(broker.port, "utility-report").await;
    let _ = utility.next_on(&format!("dr/{SITE}/status"), 10).await;
    let meter = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(kw) = server.gateway.read().status().await.measured_meter_kw() {
                break kw;
            }
            assert!(Instant::now() < deadline, "no meter reading");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // Two 3 s intervals, the second tighter, starting now, no ramp or recovery.
    let start = Utc::now().to_rfc3339_opts(SecondsFormat::Millis, true);
    let (c1, c2) = ((0.9 * meter).round(), (0.8 * meter).round());
    let body = serde_json::to_vec(&json!({
        "schema": "dr.event/1", "event_id": "ev-rep", "revision": 1, "site": SITE,
        "window": {"start": start, "ramp_s": 0, "duration_s": 6, "recovery_s": 0},
        "intervals": [
            {"offset_s": 0, "duration_s": 3, "target": {"form": "ceiling", "point": "meter", "kw": c1}},
            {"offset_s": 3, "duration_s": 3, "target": {"form": "ceiling", "point": "meter", "kw": c2}}
        ]
    }))
    .expect("json");
    utility.publish("ev-rep", &body).await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/ev-rep"), 10).await;
    assert_eq!(ack["opt"], "in", "{ack}");
    let report = utility.next_on(&format!("dr/{SITE}/reports/ev-rep"), 30).await;
    assert_eq!(report["schema"], "dr.report/1", "{report}");
    assert_eq!(report["event_id"], "ev-rep");
    assert_eq!(report["revision"], 1);
    let intervals = report["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), 2, "{report}");
    assert_eq!(intervals[0]["ceiling_kw"].as_f64(), Some(c1));
    assert_eq!(intervals[1]["ceiling_kw"].as_f64(), Some(c2));
    let mut total = 0.0;
    for iv in intervals {
        let mean = iv["mean_meter_kw"].as_f64().expect("metered");
        let baseline = iv["baseline_kw"].as_f64().expect("baseline");
        let ceiling = iv["ceiling_kw"].as_f64().expect("ceiling");
        let shortfall = iv["shortfall_kw"].as_f64().expect("shortfall");
        assert!((iv["delivered_reduction_kw"].as_f64().expect("delivered") - (baseline - mean)).abs() < 1e-6);
        assert!((shortfall - (mean - ceiling).max(0.0)).abs() < 1e-6, "{iv}");
        assert_eq!(iv["compliant"].as_bool(), Some(shortfall <= 0.0));
        let hours = (chrono::DateTime::parse_from_rfc3339(iv["end"].as_str().expect("end")).expect("time")
            - chrono::DateTime::parse_from_rfc3339(iv["start"].as_str().expect("start")).expect("time"))
        .num_milliseconds() as f64
            / 3.6e6;
        total += shortfall * hours;
    }
    assert!(
        (report["total_shortfall_kwh"].as_f64().expect("total") - total).abs() < 1e-9,
        "{report}"
    );
    assert_eq!(report["log_checkpoint"].as_str().map(str::len), Some(64));
    // Recorded as sent.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let recorded = server
            .gateway
            .ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .any(|r| r.kind == RecordKind::Outbound && r.body["peer"] == format!("dr/{SITE}/reports/ev-rep"));
        if recorded {
            break;
        }
        assert!(Instant::now() < deadline, "report not in the ledger");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.shutdown().await;
}

/// More events end at once than the gateway's phase-change channel holds (1,024): the bridge
/// lags behind it, and must still publish every report, catching up from the book.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_report_goes_out_when_more_events_end_at_once_than_the_phase_channel_holds() {
    const EVENTS: usize = 1_300;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let mut utility = Utility::connect_to(broker.port, "utility-burst-reports", &format!("dr/{SITE}/#")).await;
    let _ = utility.next_on(&format!("dr/{SITE}/status"), 10).await;
    let meter = {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(kw) = server.gateway.read().status().await.measured_meter_kw() {
                break kw;
            }
            assert!(Instant::now() < deadline, "no meter reading");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // All start now and end together, 4 s on, so their terminal phase changes arrive in one
    // burst.
    let start = (Utc::now() + chrono::Duration::seconds(1)).to_rfc3339_opts(SecondsFormat::Secs, true);
    for i in 0..EVENTS {
        let id = format!("ev-end-{i}");
        let body = serde_json::to_vec(&json!({
            "schema": "dr.event/1", "event_id": id, "revision": 1, "site": SITE,
            "target": {"form": "ceiling", "point": "meter", "kw": (0.95 * meter).round()},
            "window": {"start": start, "ramp_s": 0, "duration_s": 4, "recovery_s": 0}
        }))
        .expect("json");
        utility.publish(&id, &body).await;
    }
    let mut acks = HashSet::new();
    let mut reports = HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(90);
    while reports.len() < EVENTS {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Some((topic, body, _))) = tokio::time::timeout(left, utility.seen.recv()).await else {
            panic!(
                "{} of {EVENTS} acks, {} of {EVENTS} reports within 90 s",
                acks.len(),
                reports.len()
            );
        };
        if let Some(id) = topic.strip_prefix(&format!("dr/{SITE}/acks/")) {
            let ack: Value = serde_json::from_slice(&body).expect("ack");
            assert_eq!(ack["opt"], "in", "{ack}");
            acks.insert(id.to_string());
        } else if let Some(id) = topic.strip_prefix(&format!("dr/{SITE}/reports/")) {
            let report: Value = serde_json::from_slice(&body).expect("report");
            assert_eq!(report["event_id"], id, "{report}");
            assert!(reports.insert(id.to_string()), "one report per event: {id} twice");
        }
    }
    assert_eq!(acks.len(), EVENTS);
    server.shutdown().await;
}

/// How many times `client_id` connected to the broker started in `broker_dir`, from the
/// broker's own log (Mosquitto writes "New client connected from … as {client_id} (…)").
fn connections(broker_dir: &std::path::Path, client_id: &str) -> usize {
    let log = std::fs::read_to_string(broker_dir.join("mosquitto.log")).unwrap_or_default();
    let needle = format!(" as {client_id} (");
    log.lines()
        .filter(|l| l.contains("New client connected") && l.contains(&needle))
        .count()
}

/// A `dr.event/1` document of at least `bytes` bytes (a long `program`), otherwise valid.
fn oversized(id: &str, bytes: usize) -> Vec<u8> {
    let start = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    serde_json::to_vec(&json!({
        "schema": "dr.event/1", "event_id": id, "revision": 1, "site": SITE, "test": true,
        "program": "x".repeat(bytes),
        "target": {"form": "ceiling", "point": "meter", "kw": 100.0},
        "window": {"start": start, "ramp_s": 0, "duration_s": 600}
    }))
    .expect("json")
}

/// The `adapter_opted_out` records of `event_id` in the gateway's ledger.
fn opted_out(server: &Server, event_id: &str) -> Vec<Value> {
    server
        .gateway
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .filter(|r| r.event.as_deref() == Some(event_id) && r.body["entry"] == "adapter_opted_out")
        .map(|r| r.body)
        .collect()
}

/// The opt-out for an oversized event names the limit, and says nothing of the document it
/// could not read (the revision is unknown: 0).
fn assert_refused_for_size(ack: &Value, id: &str) {
    assert_eq!(ack["event_id"], id, "{ack}");
    assert_eq!(ack["opt"], "out", "{ack}");
    let reason = ack["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("exceeds the 65536-byte limit"), "{reason}");
    assert_eq!(ack["log_checkpoint"].as_str().map(str::len), Some(64), "{ack}");
}

/// A refusal's ack is anchored on the refusal's own ledger record.
fn assert_anchored_on_the_refusal(server: &Server, ack: &Value) {
    let seq = ack["log_seq"].as_u64().unwrap_or_else(|| panic!("log_seq: {ack}"));
    let record = server.gateway.ledger().get(seq).expect("readable").expect("present");
    assert_eq!(record.body["entry"], "adapter_opted_out", "{}", record.body);
    assert_eq!(ack["log_checkpoint"].as_str(), Some(record.hash.as_str()), "{ack}");
}

/// Issue 12, item 1: a retained event above the old 1 MiB transport limit, waiting at the
/// broker before the gateway starts, used to fail every connection (rumqttc refused the packet
/// by disconnecting, the broker sent it again at every subscription): no event was taken
/// again. Now it is refused with an opt-out naming the size limit and recorded once, even
/// though it comes back at every subscription; the link connects once and intake goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_retained_event_waiting_at_start_is_refused_and_intake_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker_dir = dir.path().join("broker");
    let broker = Mosquitto::start(&broker_dir);
    let mut utility = Utility::connect(broker.port, "utility-big-retained").await;
    let id = "big-retained";
    utility.publish_retained(id, &oversized(id, 1_500_000)).await;
    // The broker has it once it comes back on the utility's own subscription.
    let echo = utility.next_on(&format!("dr/{SITE}/events/{id}"), 10).await;
    assert_eq!(echo["event_id"], id);

    let server = gateway(&broker, &dir.path().join("gw")).await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/{id}"), 10).await;
    assert_refused_for_size(&ack, id);
    assert_anchored_on_the_refusal(&server, &ack);
    let started = Instant::now();
    utility
        .publish("after-big", &event("after-big", 1, 100.0, 0, true))
        .await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/after-big"), 5).await;
    assert_eq!(ack["opt"], "in", "{ack}");
    eprintln!(
        "the valid event was acknowledged {:?} after it was published",
        started.elapsed()
    );
    // No flapping: the gateway connected once, and stays connected.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(connections(&broker_dir, "flexgate-site-1"), 1, "the link reconnected");
    let records = opted_out(&server, id);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["protocol"], "mqtt");
    assert_eq!(records[0]["code"], 413);
    assert!(server.gateway.read().event(id).await.is_none());
    server.shutdown().await;

    // The retained copy comes back at the next start: answered again, recorded once.
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/{id}"), 10).await;
    assert_refused_for_size(&ack, id);
    assert_eq!(opted_out(&server, id).len(), 1);
    assert_eq!(connections(&broker_dir, "flexgate-site-1"), 2);
    server.shutdown().await;
}

/// Issue 12, item 1, live: QoS 1 events of 1.5 MB and 24 MB (beyond the old limit and any
/// round cap below the protocol's) published to a running gateway are each refused with an
/// opt-out and acknowledged, so the broker does not redeliver them; a valid event published
/// after them is taken within seconds, and the link never reconnects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_live_events_are_refused_without_dropping_the_link() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker_dir = dir.path().join("broker");
    let broker = Mosquitto::start(&broker_dir);
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let mut utility = Utility::connect(broker.port, "utility-big-live").await;
    let status = utility.next_on(&format!("dr/{SITE}/status"), 10).await;
    assert_eq!(status["state"], "online", "{status}");
    for (id, size) in [("big-live", 1_500_000), ("huge-live", 24_000_000)] {
        utility.publish(id, &oversized(id, size)).await;
        let ack = utility.next_on(&format!("dr/{SITE}/acks/{id}"), 15).await;
        assert_refused_for_size(&ack, id);
        let records = opted_out(&server, id);
        assert_eq!(records.len(), 1, "{records:?}");
        let reason = records[0]["reason"].as_str().unwrap_or_default();
        let measured: usize = reason
            .strip_prefix("payload of ")
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(measured > size, "the reason names the size: {reason}");
    }
    let started = Instant::now();
    utility
        .publish("after-huge", &event("after-huge", 1, 100.0, 0, true))
        .await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/after-huge"), 5).await;
    assert_eq!(ack["opt"], "in", "{ack}");
    eprintln!(
        "the valid event was acknowledged {:?} after it was published",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(connections(&broker_dir, "flexgate-site-1"), 1, "the link reconnected");
    // Acknowledged, so the broker keeps nothing for the gateway: a restart redelivers neither.
    server.shutdown().await;
    let mut utility = Utility::connect(broker.port, "utility-big-live-2").await;
    let server = gateway(&broker, &dir.path().join("gw")).await;
    let deadline = Instant::now() + Duration::from_secs(4);
    while let Ok(Some((topic, _, _))) =
        tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), utility.seen.recv()).await
    {
        assert!(
            !topic.starts_with(&format!("dr/{SITE}/acks/")),
            "{topic}: an acknowledged event was delivered again"
        );
    }
    server.shutdown().await;
}

/// The utility's signing key in the signature tests, and its public key as configured.
const SIGNING_SEED: [u8; 32] = [7; 32];

/// `doc` with its `sig` for `topic` (the scheme in adapters/mqtt/README.md, Signatures).
fn signed_for(topic: &str, mut doc: Value) -> Vec<u8> {
    let key = flexgate_mqtt::signature::SigningKey::from_bytes(&SIGNING_SEED);
    flexgate_mqtt::signature::attach_signature(topic, &mut doc, &key).expect("sign");
    serde_json::to_vec(&doc).expect("json")
}

/// A gateway for `site` that requires signatures by the test key.
async fn signing_gateway(broker: &Mosquitto, dir: &std::path::Path, site: &str) -> Server {
    let public = hex::encode(
        flexgate_mqtt::signature::SigningKey::from_bytes(&SIGNING_SEED)
            .verifying_key()
            .as_bytes(),
    );
    gateway_with(broker, dir, |config| {
        config.gateway.site = site.into();
        if let Some(mqtt) = config.mqtt.as_mut() {
            mqtt.signatures = flexgate_mqtt::SignaturePolicy::Required;
            mqtt.trusted_keys = vec![public];
        }
    })
    .await
}

/// Issue 12, item 4: the signature covered the body alone and `site` is optional, so an event
/// without `site`, signed for one site, was accepted at every site trusting the key. The
/// signature now binds the topic (prefix, site, event id): the legitimate event is taken at
/// site-1; the same bytes replayed at site-2, or at site-1 under another event id, are
/// refused with a reason that names the signature and the topic, and recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_event_replayed_at_another_site_or_topic_is_refused() {
    use flexgate::ledger::RecordKind;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Mosquitto::start(&dir.path().join("broker"));
    let site_a = signing_gateway(&broker, &dir.path().join("gw-a"), SITE).await;
    let site_b = signing_gateway(&broker, &dir.path().join("gw-b"), "site-2").await;
    let mut utility = Utility::connect_to(broker.port, "utility-signing", "dr/+/acks/#").await;
    // Open-ended, no `issued_at`, no `site`: nothing in the body ties it to a site or a time.
    let doc = json!({"schema": "dr.event/1", "event_id": "ev-signed", "revision": 1, "test": true,
        "target": {"form": "ceiling", "point": "meter", "kw": 100},
        "window": {"start": "2026-01-01T00:00:00Z", "ramp_s": 0, "duration_s": null}});
    let bytes = signed_for(&format!("dr/{SITE}/events/ev-signed"), doc);
    for server in [&site_a, &site_b] {
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.gateway.read().status().await.measured_meter_kw().is_none() {
            assert!(Instant::now() < deadline, "gateway not running");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    utility.publish_on(&format!("dr/{SITE}/events/ev-signed"), &bytes).await;
    let ack = utility.next_on(&format!("dr/{SITE}/acks/ev-signed"), 10).await;
    assert_eq!(ack["opt"], "in", "the legitimate event: {ack}");
    assert!(site_a.gateway.read().event("ev-signed").await.is_some());

    // The capture replayed at another site, and at this site as another event.
    for (server, topic, ack_topic) in [
        (&site_b, "dr/site-2/events/ev-signed", "dr/site-2/acks/ev-signed"),
        (&site_a, "dr/site-1/events/ev-replayed", "dr/site-1/acks/ev-replayed"),
    ] {
        utility.publish_on(topic, &bytes).await;
        let ack = utility.next_on(ack_topic, 10).await;
        assert_eq!(ack["opt"], "out", "{topic}: {ack}");
        let reason = ack["reason"].as_str().unwrap_or_default();
        assert!(
            reason.starts_with("signature: ") && reason.contains(&format!("for topic {topic}")),
            "{topic}: {reason}"
        );
        let event_id = topic.rsplit('/').next().unwrap_or_default();
        if event_id == "ev-replayed" {
            assert!(server.gateway.read().event(event_id).await.is_none());
        }
        let records: Vec<_> = server
            .gateway
            .ledger()
            .iter_from(1)
            .filter_map(Result::ok)
            .filter(|r| r.event.as_deref() == Some(event_id))
            .collect();
        let refusal = records
            .iter()
            .find(|r| r.body["entry"] == "adapter_opted_out")
            .unwrap_or_else(|| panic!("{topic}: the refusal is recorded: {records:?}"));
        assert_eq!(refusal.body["code"], 401, "{}", refusal.body);
        assert_eq!(refusal.body["reason"].as_str(), Some(reason));
        assert_anchored_on_the_refusal(server, &ack);
        let received = records
            .iter()
            .find(|r| r.kind == RecordKind::RawInput)
            .unwrap_or_else(|| panic!("{topic}: the bytes are recorded: {records:?}"));
        assert_eq!(received.body["peer"], topic);
        assert_eq!(
            received.body["content"]["text"].as_str().map(str::as_bytes),
            Some(&bytes[..])
        );
    }
    assert!(
        site_b.gateway.read().event("ev-signed").await.is_none(),
        "the replay must not reach site-2's book"
    );
    site_a.shutdown().await;
    site_b.shutdown().await;
}
