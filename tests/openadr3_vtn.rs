//! The whole gateway as an OpenADR 3.1 VEN client against a real VTN: `openadr` 0.4.0
//! (hupe1980, in-memory store, pre-shared tokens), installed by `tests/peers/setup.sh` with
//! `cargo install` and started here on a free 127.0.0.1 port.
//!
//! The business side (program, VEN, events, modifications, cancellation, deletion) is plain
//! HTTP + JSON with the BL token, as a utility's back office would send it. The gateway polls
//! every second on the real clock.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use chrono::{SecondsFormat, Utc};
use flexgate::clock::Clock;
use flexgate::config::{Config, OpenAdr3Config};
use flexgate::serve::Server;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BASE: &str = "/openadr3/3.1.0";

struct Vtn {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Vtn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    flexgate_etcd::testing::spare_port()
}

impl Vtn {
    async fn start() -> Vtn {
        let bin = std::env::var_os("OPENADR_VTN_BIN").map_or_else(
            || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/peers/openadr/bin/openadr"),
            PathBuf::from,
        );
        assert!(
            bin.is_file(),
            "the OpenADR 3.1 VTN is missing at {}: run `bash tests/peers/setup.sh` (the README test command does)",
            bin.display()
        );
        let port = free_port();
        let child = Command::new(&bin)
            .args([
                "vtn",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--bl-token",
                "bltok",
                "--ven-token",
            ])
            .arg("ventok")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the VTN");
        let vtn = Vtn {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(r) =
                flexgate::http_client::request(vtn.addr, "GET", &format!("{BASE}/auth/server"), None, None).await
                && r.status == 200
            {
                return vtn;
            }
            assert!(Instant::now() < deadline, "the VTN did not answer within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn bl(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let bytes = body.map(|b| serde_json::to_vec(&b).expect("json"));
        let resp = flexgate::http_client::request(
            self.addr,
            method,
            &format!("{BASE}{path}"),
            Some("bltok"),
            bytes.as_deref(),
        )
        .await
        .unwrap_or_else(|e| panic!("BL {method} {path}: {e}"));
        (resp.status, resp.json().unwrap_or(Value::Null))
    }
}

fn iso_in(seconds: i64) -> String {
    (Utc::now() + chrono::Duration::seconds(seconds)).to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn capacity_event(program: &str, start: &str, duration: &str, kw: f64) -> Value {
    json!({
        "objectType": "EVENT", "programID": program, "eventName": "cap", "priority": 0,
        "targets": ["site-a"],
        "payloadDescriptors": [{"objectType": "EVENT_PAYLOAD_DESCRIPTOR", "payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
        "intervalPeriod": {"start": start, "duration": duration},
        "intervals": [{"id": 0, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [kw]}]}],
    })
}

async fn eventually<T>(what: &str, timeout_s: u64, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(timeout_s);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout_s} s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_follows_a_real_openadr3_vtn() {
    let vtn = Vtn::start().await;
    let (status, program) = vtn
        .bl(
            "POST",
            "/programs",
            Some(json!({"objectType": "PROGRAM", "programName": "flexgate-it"})),
        )
        .await;
    assert_eq!(status, 201, "{program}");
    let program = program["id"].as_str().expect("program id").to_string();
    // With --ven-token the VEN authenticates as clientID "ven".
    let (status, ven) = vtn
        .bl(
            "POST",
            "/vens",
            Some(
                json!({"objectType": "BL_VEN_REQUEST", "clientID": "ven", "venName": "dc-east", "targets": ["site-a"]}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{ven}");

    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = Config::default();
    config.gateway.data_dir = dir.path().to_path_buf();
    config.gateway.api_token = "it-token-0123456789".into();
    config.gateway.telemetry_interval_s = 1;
    config.openadr3 = Some(OpenAdr3Config {
        url: format!("http://{}{BASE}", vtn.addr),
        program_id: Some(program.clone()),
        targets: vec!["site-a".into()],
        ven_name: "dc-east".into(),
        token: Some("ventok".into()),
        client_id: None,
        client_secret_file: None,
        token_url: None,
        poll_s: 1,
        timeout_s: 5,
        reports: true,
        tls: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway");
    let gw = server.gateway.clone();
    let meter = eventually("a meter reading", 20, async || {
        gw.read().status().await.measured_meter_kw()
    })
    .await;
    let ceiling_of = async |id: &str| -> Option<(f64, u64, String)> {
        let e = gw.read().event(id).await?;
        Some((
            e["detail"]["ceilings"][0]["ceiling_kw"].as_f64()?,
            e["summary"]["revision"].as_u64()?,
            e["summary"]["state"].as_str()?.to_string(),
        ))
    };

    // 1. An IMPORT_CAPACITY_LIMIT event reaches the book as a meter ceiling, and binds at its start.
    let cap = (0.8 * meter).round();
    let (status, created) = vtn
        .bl(
            "POST",
            "/events",
            Some(capacity_event(&program, &iso_in(3), "PT20S", cap)),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("event id").to_string();
    let (kw, revision, _) = eventually("the event in the book", 10, async || ceiling_of(&id).await).await;
    assert_eq!((kw, revision), (cap, 1));
    eventually("the ceiling in force", 15, async || {
        gw.read()
            .status()
            .await
            .meter_ceiling_kw()
            .filter(|c| (*c - cap).abs() < 1e-6)
    })
    .await;

    // 2. A modification (new modificationDateTime) replaces it: revision 2, new ceiling.
    let lower = (0.7 * meter).round();
    let (status, v) = vtn
        .bl(
            "PUT",
            &format!("/events/{id}"),
            Some(capacity_event(&program, &iso_in(1), "PT20S", lower)),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    eventually("the modification", 10, async || {
        let (kw, revision, _) = ceiling_of(&id).await?;
        ((kw - lower).abs() < 1e-6 && revision == 2).then_some(())
    })
    .await;

    // 3. Cancellation by a zero window (0001-01-01, PT0S).
    let (status, v) = vtn
        .bl(
            "PUT",
            &format!("/events/{id}"),
            Some(capacity_event(&program, "0001-01-01T00:00:00Z", "PT0S", lower)),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    eventually("the zero-window cancellation", 10, async || {
        let e = gw.read().event(&id).await?;
        let state = e["summary"]["state"].as_str()?;
        (state == "cancelled" || state == "recovering" || state == "completed").then_some(())
    })
    .await;
    // The gateway reported what the meter did while the event ran.
    let reports = eventually("a report for the cancelled event", 10, async || {
        let (status, reports) = vtn.bl("GET", "/reports", None).await;
        (status == 200).then_some(())?;
        let mine: Vec<Value> = reports
            .as_array()?
            .iter()
            .filter(|r| r["eventID"] == id.as_str())
            .cloned()
            .collect();
        (!mine.is_empty()).then_some(mine)
    })
    .await;
    let payloads = &reports[0]["resources"][0]["intervals"][0]["payloads"];
    let types: Vec<&str> = payloads
        .as_array()
        .expect("payloads")
        .iter()
        .filter_map(|p| p["type"].as_str())
        .collect();
    assert_eq!(
        types,
        [
            "DEMAND",
            "USAGE",
            "LOAD_SHED_DELTA_AVAILABLE",
            "X_FLEXGATE_SHED_LEVELS",
            "X_FLEXGATE_SHED_PROGRESS_LOST"
        ],
        "{payloads}"
    );
    let demand = payloads[0]["values"][0].as_f64().expect("demand kW");
    assert!(demand > 0.0 && demand < 10.0 * meter, "demand {demand} kW");
    // What the flexibility curve offered for the interval: its levels rise from no shed to the
    // most the site can shed, which is the LOAD_SHED_DELTA_AVAILABLE figure, and each costs
    // more progress than the one before; the VTN stored them as sent.
    let numbers = |i: usize| -> Vec<f64> {
        payloads[i]["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|v| v.as_f64().expect("a number"))
            .collect()
    };
    let (available, levels, cost) = (numbers(2), numbers(3), numbers(4));
    assert_eq!((levels.len(), cost.len()), (21, 21), "{payloads}");
    assert_eq!(levels[0], 0.0, "{levels:?}");
    assert!(levels.windows(2).all(|w| w[1] >= w[0]), "{levels:?}");
    assert!(cost.windows(2).all(|w| w[1] >= w[0]) && cost[20] <= 100.0, "{cost:?}");
    assert!(
        available[0] > 0.0 && available[0] < meter,
        "{available:?} of {meter} kW"
    );
    assert!((available[0] - levels[20]).abs() < 1e-9, "{available:?} {levels:?}");
    let described: Vec<(&str, &str)> = reports[0]["payloadDescriptors"]
        .as_array()
        .expect("payload descriptors")
        .iter()
        .filter_map(|d| Some((d["payloadType"].as_str()?, d["readingType"].as_str()?)))
        .collect();
    assert!(
        described.contains(&("LOAD_SHED_DELTA_AVAILABLE", "ESTIMATED"))
            && described.contains(&("DEMAND", "DIRECT_READ")),
        "modelled figures are marked ESTIMATED, measured ones DIRECT_READ: {described:?}"
    );

    // 4. Cancellation by deletion: the event disappears from the VTN's list.
    let (status, created) = vtn
        .bl(
            "POST",
            "/events",
            Some(capacity_event(&program, &iso_in(1), "PT30S", cap)),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("event id").to_string();
    eventually("the second event", 10, async || ceiling_of(&id).await).await;
    let (status, v) = vtn.bl("DELETE", &format!("/events/{id}"), None).await;
    assert!(status == 200 || status == 204, "DELETE: {status} {v}");
    eventually("the deletion as a cancellation", 10, async || {
        let e = gw.read().event(&id).await?;
        let state = e["summary"]["state"].as_str()?;
        (state == "cancelled" || state == "recovering" || state == "completed").then_some(())
    })
    .await;
    // The report of the deleted event names an event the VTN no longer has, and the VTN refuses
    // it: the refusal, with the VTN's status and words, is in the ledger beside what was sent
    // (issue 12, item 8; openleadr-rs answered such a refusal with 409, this VTN with 400).
    let refused = eventually("the refused report in the ledger", 20, async || {
        gw.ledger().iter_from(0).filter_map(Result::ok).find(|r| {
            r.event.as_deref() == Some(id.as_str())
                && r.body["message"] == "report"
                && r.body["answer"]["answer"] == "refused"
        })
    })
    .await;
    let status = refused.body["answer"]["status"].as_u64().expect("the VTN's status");
    assert!((400..500).contains(&status), "{}", refused.body);
    assert!(
        refused.body["content"]["json"]["eventID"] == id.as_str(),
        "{}",
        refused.body
    );

    // 5. A report request alone (issue 33): an event without intervals whose report descriptor
    // asks for a forecast of the shed available. The gateway posts its 48-hour forecast: one
    // interval per hour from when the forecast was made (hour 0 now, the rest in the future),
    // each with LOAD_SHED_DELTA_AVAILABLE (the firm figure, P10) and the band P10 <= P50 <= P90
    // in kW, reading type FORECAST; and it puts nothing in its book for the request.
    assert!(
        reports
            .iter()
            .all(|r| !r["reportName"].as_str().unwrap_or("").contains("forecast")),
        "an event that did not ask got no forecast: {reports:?}"
    );
    let asked_at = Utc::now();
    let (status, created) = vtn
        .bl(
            "POST",
            "/events",
            Some(json!({
                "objectType": "EVENT", "programID": program, "eventName": "forecast request",
                "targets": ["site-a"],
                "reportDescriptors": [{
                    "payloadType": "LOAD_SHED_DELTA_AVAILABLE", "readingType": "FORECAST", "units": "KW",
                    "historical": false, "reportIntervals": "OPEN_INTERVALS",
                }],
                "intervals": [],
            })),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().expect("event id").to_string();
    let forecast = eventually("the forecast report", 20, async || {
        let (status, reports) = vtn.bl("GET", "/reports", None).await;
        (status == 200).then_some(())?;
        reports
            .as_array()?
            .iter()
            .find(|r| r["eventID"] == id.as_str())
            .cloned()
    })
    .await;
    let name = forecast["reportName"].as_str().unwrap_or_default();
    assert!(
        name.contains("forecast") && name.contains("% of progress"),
        "{forecast}"
    );
    let described: Vec<(&str, &str, u64)> = forecast["payloadDescriptors"]
        .as_array()
        .expect("payload descriptors")
        .iter()
        .filter_map(|d| {
            Some((
                d["payloadType"].as_str()?,
                d["readingType"].as_str()?,
                d["confidence"].as_u64()?,
            ))
        })
        .collect();
    assert_eq!(
        described,
        [
            ("LOAD_SHED_DELTA_AVAILABLE", "FORECAST", 90),
            ("X_FLEXGATE_SHED_AVAILABLE_P10", "FORECAST", 90),
            ("X_FLEXGATE_SHED_AVAILABLE_P50", "FORECAST", 50),
            ("X_FLEXGATE_SHED_AVAILABLE_P90", "FORECAST", 10),
        ],
        "{forecast}"
    );
    let intervals = forecast["resources"][0]["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), 48, "{forecast}");
    let start_of = |i: &Value| -> chrono::DateTime<Utc> {
        i["intervalPeriod"]["start"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("an interval start: {i}"))
    };
    let first = start_of(&intervals[0]);
    assert!(
        first <= asked_at && first + chrono::Duration::hours(1) > asked_at,
        "hour 0 is the forecast's now ({first}, asked at {asked_at})"
    );
    for (h, interval) in intervals.iter().enumerate() {
        let start = start_of(interval);
        assert_eq!(start, first + chrono::Duration::hours(h as i64), "hourly: {interval}");
        assert!(h == 0 || start > asked_at, "in the future: {interval}");
        assert_eq!(interval["intervalPeriod"]["duration"], "PT1H", "{interval}");
        let value = |kind: &str| -> f64 {
            interval["payloads"]
                .as_array()
                .and_then(|p| p.iter().find(|p| p["type"] == kind))
                .and_then(|p| p["values"][0].as_f64())
                .unwrap_or_else(|| panic!("{kind}: {interval}"))
        };
        let (p10, p50, p90) = (
            value("X_FLEXGATE_SHED_AVAILABLE_P10"),
            value("X_FLEXGATE_SHED_AVAILABLE_P50"),
            value("X_FLEXGATE_SHED_AVAILABLE_P90"),
        );
        assert!(0.0 <= p10 && p10 <= p50 && p50 <= p90, "ordered: {interval}");
        assert_eq!(value("LOAD_SHED_DELTA_AVAILABLE"), p10, "{interval}");
    }
    assert!(
        gw.read().event(&id).await.is_none(),
        "a report request is not an event for the book"
    );
    let recorded = eventually("the forecast report in the ledger", 10, async || {
        gw.ledger()
            .iter_from(0)
            .filter_map(Result::ok)
            .find(|r| r.event.as_deref() == Some(id.as_str()) && r.body["message"] == "forecast report")
    })
    .await;
    assert_eq!(recorded.body["answer"]["answer"], "accepted", "{}", recorded.body);
    server.shutdown().await;
}
