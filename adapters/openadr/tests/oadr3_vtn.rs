//! The OpenADR 3 client against a REAL OpenADR 3.1 VTN: hupe1980's `openadr` 0.4.0, started on a
//! free 127.0.0.1 port (in-memory store) and killed when the test ends. The business side (BL) is
//! plain reqwest + JSON, as a utility's back office would be; the VEN side is this crate.
//!
//! The binary is installed by `bash tests/peers/setup.sh --only oadr3` (workspace root) into
//! `target/peers/openadr/bin/openadr`; set `OPENADR_VTN_BIN` to use another. Without it these
//! tests fail (they do not skip): a green run must mean the client met a real VTN.
#![cfg(feature = "http")]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{SecondsFormat, TimeDelta, Utc};
use flexgate_openadr::oadr3::{
    Auth, CancelReason, ChangeKind, Client, ClientError, Document, EventTracker, Interval, IntervalPeriod, Polled,
    Report, ReportPayloadDescriptor, ReportResource, ValuesMap, ZeroWindow, event_targets, http_client,
    normalized_json,
};
use flexgate_openadr::target::LoadTarget;
use serde_json::{Value, json};

const BASE_PATH: &str = "/openadr3/3.1.0";

fn vtn_binary() -> PathBuf {
    let bin = match std::env::var_os("OPENADR_VTN_BIN") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/peers/openadr/bin/openadr"),
    };
    assert!(
        bin.is_file(),
        "the OpenADR 3.1 VTN binary is missing at {}.\nInstall it with `bash tests/peers/setup.sh --only oadr3` \
         from the workspace root (cargo install openadr 0.4.0, ~3-7 min), or set OPENADR_VTN_BIN.",
        bin.display()
    );
    bin
}

/// A running VTN; killed on drop.
struct Vtn {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Vtn {
    fn base(&self) -> String {
        format!("http://127.0.0.1:{}{BASE_PATH}", self.port)
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Starts `openadr vtn --listen 127.0.0.1:<port> <auth args>` and waits until it answers.
    async fn start(port: Option<u16>, auth: &[&str]) -> Vtn {
        let mut last_err = String::new();
        for _attempt in 0..5 {
            let port = port.unwrap_or_else(free_port);
            let log = std::env::temp_dir().join(format!("flexgate-oadr3-vtn-{}-{port}.log", std::process::id()));
            let out = std::fs::File::create(&log).expect("create VTN log");
            let err = out.try_clone().expect("clone log handle");
            let listen = format!("127.0.0.1:{port}");
            let child = Command::new(vtn_binary())
                .args(["vtn", "--listen", &listen])
                .args(auth)
                .env("RUST_LOG", "openadr=info")
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
                .expect("spawn the VTN");
            let mut vtn = Vtn { child, port, log };
            let http = http_client().expect("http");
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if let Ok(Some(status)) = vtn.child.try_wait() {
                    last_err = format!("VTN exited with {status}:\n{}", vtn.log_tail());
                    break;
                }
                let probe = http.get(format!("{}/auth/server", vtn.base())).send().await;
                if probe.is_ok_and(|r| r.status().is_success()) {
                    return vtn;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if last_err.is_empty() {
                last_err = format!("VTN did not answer within 20 s:\n{}", vtn.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        panic!("{last_err}");
    }
}

impl Drop for Vtn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// The business-logic side: plain HTTP + JSON with a BL token.
struct Bl {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Bl {
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let resp = rb.send().await.unwrap_or_else(|e| panic!("BL {method} {path}: {e}"));
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn create(&self, path: &str, body: Value) -> Value {
        let (status, v) = self.call(reqwest::Method::POST, path, Some(body)).await;
        assert_eq!(status, 201, "BL POST {path}: {v}");
        v
    }

    async fn setup(&self, ven_client_id: &str) -> String {
        let program = self
            .create(
                "/programs",
                json!({"objectType": "PROGRAM", "programName": "flexgate-cap"}),
            )
            .await;
        self.create(
            "/vens",
            json!({"objectType": "BL_VEN_REQUEST", "clientID": ven_client_id, "venName": "dc-east", "targets": ["site-a"]}),
        )
        .await;
        program["id"].as_str().expect("program id").to_string()
    }
}

fn rfc3339(t: chrono::DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn capacity_event(program_id: &str, start: &str, duration: &str, values: &[f64]) -> Value {
    json!({
        "objectType": "EVENT",
        "programID": program_id,
        "eventName": "evening-cap",
        "priority": 0,
        "targets": ["site-a"],
        "payloadDescriptors": [{"objectType": "EVENT_PAYLOAD_DESCRIPTOR", "payloadType": "IMPORT_CAPACITY_LIMIT", "units": "KW"}],
        "intervalPeriod": {"start": start, "duration": duration},
        "intervals": values.iter().enumerate()
            .map(|(i, v)| json!({"id": i, "payloads": [{"type": "IMPORT_CAPACITY_LIMIT", "values": [v]}]}))
            .collect::<Vec<_>>(),
    })
}

async fn poll(client: &Client, program_id: &str) -> Polled {
    client
        .get_events(Some(program_id), &["site-a"])
        .await
        .unwrap_or_else(|e| panic!("poll: {e}"))
}

fn ceilings(m: &flexgate_openadr::oadr3::EventTargets) -> Vec<f64> {
    m.targets
        .iter()
        .map(|t| match t.span.target {
            LoadTarget::Ceiling { kw } => kw,
            ref other => panic!("not a ceiling: {other:?}"),
        })
        .collect()
}

fn usage_report(event_id: &str) -> Report {
    let start = Utc::now() - TimeDelta::minutes(30);
    let payload = |kind: &str, v: Value| ValuesMap {
        kind: kind.into(),
        values: vec![serde_json::from_value(v).expect("value")],
    };
    Report {
        event_id: event_id.into(),
        client_name: "dc-east".into(),
        report_name: Some("flexgate-usage".into()),
        payload_descriptors: Some(vec![
            ReportPayloadDescriptor {
                payload_type: "USAGE".into(),
                reading_type: Some("DIRECT_READ".into()),
                units: Some("KWH".into()),
                ..Default::default()
            },
            ReportPayloadDescriptor {
                payload_type: "DEMAND".into(),
                reading_type: Some("DIRECT_READ".into()),
                units: Some("KW".into()),
                ..Default::default()
            },
        ]),
        resources: vec![ReportResource {
            resource_name: "AGGREGATED_REPORT".into(),
            interval_period: Some(IntervalPeriod {
                start: Some(start),
                duration: Some(flexgate_openadr::oadr3::IsoDuration::from_secs(1800)),
                randomize_start: None,
            }),
            intervals: vec![Interval {
                id: 0,
                interval_period: None,
                payloads: vec![payload("USAGE", json!(400.5)), payload("DEMAND", json!(790))],
            }],
        }],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_tokens_event_lifecycle_and_report() {
    let vtn = Vtn::start(None, &["--bl-token", "bltok", "--ven-token", "ventok"]).await;
    let http = http_client().expect("http");
    let bl = Bl {
        http: http.clone(),
        base: vtn.base(),
        token: "bltok".into(),
    };
    // Quirk: with --ven-token the VEN authenticates as clientID "ven"; its ven object must use it.
    let program_id = bl.setup("ven").await;
    let start = Utc::now() + TimeDelta::hours(1);
    let start = start - TimeDelta::nanoseconds(start.timestamp_subsec_nanos().into());
    let created = bl
        .create(
            "/events",
            capacity_event(&program_id, &rfc3339(start), "PT30M", &[800.0, 650.0]),
        )
        .await;
    let event_id = created["id"].as_str().expect("event id").to_string();

    let client = Client::new(vtn.base(), Auth::Bearer("ventok".into()), http.clone());
    let mut tracker = EventTracker::new();

    // 1. The VEN picks the event up.
    let Polled::Events(events) = poll(&client, &program_id).await else {
        panic!("first poll must not be 304")
    };
    assert_eq!(events.len(), 1);
    let changes = tracker.observe_poll(&events);
    assert_eq!(
        (changes[0].id.as_str(), changes[0].revision, changes[0].kind),
        (event_id.as_str(), 1, ChangeKind::New)
    );
    let m = event_targets(&events[0], Utc::now()).expect("map");
    assert_eq!(ceilings(&m), vec![800.0, 650.0]);
    assert_eq!(m.targets[0].span.start, start);
    assert_eq!(m.targets[1].span.start, start + TimeDelta::minutes(30));
    assert_eq!(m.targets[1].span.duration_s, Some(1800));
    let nj = normalized_json(&Document::Events(events.clone()));
    assert_eq!(
        nj["events"][0]["signals"][0]["intervals"][0]["values"],
        json!([800]),
        "VTN writes integers"
    );

    // 2. Unchanged → 304.
    assert_eq!(poll(&client, &program_id).await, Polled::NotModified);
    // Another VEN target sees nothing.
    assert_eq!(
        client.get_events(Some(&program_id), &["site-b"]).await.expect("site-b"),
        Polled::Events(vec![])
    );

    // 3. Modification (PUT): new value.
    let (status, v) = bl
        .call(
            reqwest::Method::PUT,
            &format!("/events/{event_id}"),
            Some(capacity_event(&program_id, &rfc3339(start), "PT30M", &[700.0, 650.0])),
        )
        .await;
    assert_eq!(status, 200, "PUT: {v}");
    let Polled::Events(events) = poll(&client, &program_id).await else {
        panic!("modified event must not be 304")
    };
    let changes = tracker.observe_poll(&events);
    assert_eq!((changes[0].revision, changes[0].kind), (2, ChangeKind::Modified));
    assert_eq!(
        ceilings(&event_targets(&events[0], Utc::now()).expect("map")),
        vec![700.0, 650.0]
    );

    // 4. Cancellation by zero window.
    let (status, v) = bl
        .call(
            reqwest::Method::PUT,
            &format!("/events/{event_id}"),
            Some(capacity_event(&program_id, "0001-01-01T00:00:00Z", "PT0S", &[700.0])),
        )
        .await;
    assert_eq!(status, 200, "PUT zero window: {v}");
    let Polled::Events(events) = poll(&client, &program_id).await else {
        panic!("304 after cancel")
    };
    let changes = tracker.observe_poll(&events);
    assert_eq!(
        (changes[0].revision, changes[0].kind),
        (
            3,
            ChangeKind::Cancelled(CancelReason::ZeroWindow(ZeroWindow::ZeroIntervals))
        )
    );
    assert!(event_targets(&events[0], Utc::now()).expect("map").cancelled.is_some());

    // 5. A "do it now" event, open-ended (0001-01-01 + P9999Y), then deleted by BL.
    let now_event = bl
        .create(
            "/events",
            capacity_event(&program_id, "0001-01-01T00:00:00Z", "P9999Y", &[500.0]),
        )
        .await;
    let now_id = now_event["id"].as_str().expect("id").to_string();
    let Polled::Events(events) = poll(&client, &program_id).await else {
        panic!("304 after create")
    };
    assert_eq!(events.len(), 2);
    let changes = tracker.observe_poll(&events);
    let new = changes.iter().find(|c| c.id == now_id).expect("new event seen");
    assert_eq!((new.revision, new.kind), (1, ChangeKind::New));
    let before = Utc::now();
    let m = event_targets(&new.event, before).expect("map");
    assert_eq!(ceilings(&m), vec![500.0]);
    assert_eq!(
        (m.targets[0].span.start, m.targets[0].span.duration_s, m.end),
        (before, None, None)
    );
    let (status, v) = bl
        .call(reqwest::Method::DELETE, &format!("/events/{now_id}"), None)
        .await;
    assert!((200..300).contains(&status), "DELETE: {status} {v}");
    let Polled::Events(events) = poll(&client, &program_id).await else {
        panic!("304 after delete")
    };
    assert_eq!(events.len(), 1);
    let changes = tracker.observe_poll(&events);
    let gone = changes.iter().find(|c| c.id == now_id).expect("deletion reported");
    assert_eq!(
        (gone.revision, gone.kind),
        (2, ChangeKind::Cancelled(CancelReason::Deleted))
    );

    // 6. Report; the VTN stores it and BL sees it.
    let stored = client.post_report(&usage_report(&event_id)).await.expect("post report");
    let report_id = stored.id.clone().expect("VTN assigns a report id");
    let (status, reports) = bl.call(reqwest::Method::GET, "/reports", None).await;
    assert_eq!(status, 200);
    let ours = reports
        .as_array()
        .expect("list")
        .iter()
        .find(|r| r["id"] == report_id.as_str())
        .unwrap_or_else(|| panic!("report {report_id} not in GET /reports: {reports}"));
    assert_eq!(ours["eventID"], event_id.as_str());
    assert_eq!(ours["clientName"], "dc-east");
    assert_eq!(
        ours["resources"][0]["intervals"][0]["payloads"][1],
        json!({"type": "DEMAND", "values": [790]})
    );

    // 7. Errors an operator will meet.
    let e = Client::new(vtn.base(), Auth::Bearer("wrong".into()), http.clone())
        .get_events(None, &["site-a"])
        .await
        .expect_err("bad token");
    assert!(matches!(e, ClientError::Unauthorized { .. }), "{e}");
    assert!(e.to_string().contains("not valid"), "problem+json detail rendered: {e}");
    eprintln!("bad token: {e}");
    let wrong_base = vtn.base().replace("3.1.0", "3.0.1");
    let e = Client::new(wrong_base, Auth::Bearer("ventok".into()), http.clone())
        .get_events(None, &[])
        .await
        .expect_err("wrong base path");
    assert!(
        matches!(e, ClientError::NotFound { .. }) && e.to_string().contains("/openadr3/3.1.0"),
        "{e}"
    );
    eprintln!("wrong base path: {e}");
    let base = vtn.base();
    drop(vtn);
    let e = client
        .get_events(Some(&program_id), &["site-a"])
        .await
        .expect_err("VTN gone");
    assert!(matches!(e, ClientError::Connect { .. }), "{e}");
    assert!(e.to_string().contains(&format!("{base}/events")), "{e}");
    eprintln!("VTN gone: {e}");
}

async fn bl_token(http: &reqwest::Client, base: &str) -> String {
    let resp = http
        .post(format!("{base}/auth/token"))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", "bl-1"),
            ("client_secret", "blsecret"),
        ])
        .send()
        .await
        .expect("BL token request");
    let v: Value = resp.json().await.expect("token json");
    v["access_token"].as_str().expect("access_token").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_client_credentials_discovery_scopes_and_retry_after_vtn_restart() {
    let auth_args = ["--client", "ven-1:vensecret:ven", "--client", "bl-1:blsecret:bl"];
    let vtn = Vtn::start(None, &auth_args).await;
    let http = http_client().expect("http");
    let bl = Bl {
        http: http.clone(),
        base: vtn.base(),
        token: bl_token(&http, &vtn.base()).await,
    };
    let program_id = bl.setup("ven-1").await;
    let start = rfc3339(Utc::now() + TimeDelta::hours(2));
    let created = bl
        .create("/events", capacity_event(&program_id, &start, "PT1H", &[900.0]))
        .await;
    let event_id = created["id"].as_str().expect("id").to_string();

    // Token URL discovered via GET /auth/server; token cached across polls.
    let ven = |secret: &str, scopes: &[&str]| {
        Client::new(
            vtn.base(),
            Auth::ClientCredentials {
                token_url: None,
                client_id: "ven-1".into(),
                client_secret: secret.into(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
            },
            http.clone(),
        )
    };
    let client = ven("vensecret", &[]);
    let Polled::Events(events) = poll(&client, &program_id).await else {
        panic!("first poll")
    };
    assert_eq!(events.len(), 1);
    assert_eq!(
        ceilings(&event_targets(&events[0], Utc::now()).expect("map")),
        vec![900.0]
    );
    assert_eq!(poll(&client, &program_id).await, Polled::NotModified);
    client
        .post_report(&usage_report(&event_id))
        .await
        .expect("report with full VEN scopes");

    // Wrong secret: the token endpoint's refusal, without the secret in the message.
    let e = ven("not-the-secret", &[])
        .get_events(None, &["site-a"])
        .await
        .expect_err("bad secret");
    assert!(matches!(e, ClientError::Token { .. }), "{e}");
    assert!(e.to_string().contains("invalid_client"), "{e}");
    assert!(!e.to_string().contains("not-the-secret"), "{e}");
    eprintln!("bad secret: {e}");

    // A token without write_reports: 403 names the scope.
    let read_only = ven("vensecret", &["read_targets"]);
    assert!(matches!(poll(&read_only, &program_id).await, Polled::Events(_)));
    let e = read_only
        .post_report(&usage_report(&event_id))
        .await
        .expect_err("no write_reports");
    assert!(matches!(e, ClientError::Forbidden { .. }), "{e}");
    assert!(e.to_string().contains("write_reports"), "{e}");
    eprintln!("missing scope: {e}");

    // Restart the VTN on the same port: it signs with a new key, so every cached token is now
    // rejected (checked with BL's). The client must get a 401, fetch a new token and succeed.
    let port = vtn.port;
    drop(vtn);
    let vtn = Vtn::start(Some(port), &auth_args).await;
    let (status, _) = bl.call(reqwest::Method::GET, "/programs", None).await;
    assert_eq!(status, 401, "tokens from the first VTN must be invalid on the second");
    assert_eq!(
        client
            .get_events(None, &["site-a"])
            .await
            .expect("retried with a fresh token"),
        Polled::Events(vec![])
    );
    drop(vtn);
}
