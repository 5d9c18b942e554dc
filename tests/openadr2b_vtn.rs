//! The whole gateway as an OpenADR 2.0b VEN against a real VTN: openleadr 0.5.36 (PyPI),
//! started by this test on 127.0.0.1 from `tests/peers/oadr2b_vtn.py` with the virtualenv that
//! `tests/peers/setup.sh` creates (the README test command runs it first).
//!
//! One VTN and one gateway serve every scenario in order (registration, setpoint, modify,
//! cancel, delta, percent offset, capacity, SIMPLE, target mismatch, re-registration, reports),
//! on the real clock: openleadr schedules by wall time. Every message we send passes openleadr's
//! XSD validation, or it would answer HTTP 400 and the scenario would stall and fail.
#![allow(clippy::disallowed_methods, reason = "test events and peers run on the wall clock")]

use chrono::{SecondsFormat, Utc};
use flexgate::clock::Clock;
use flexgate::config::Config;
use flexgate::serve::Server;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::{Duration, Instant};

mod common;

use common::oadr2b_vtn::{PROGRAM, Vtn};

const VEN_NAME: &str = "flexgate-it";

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

fn iso_in(seconds: i64) -> String {
    (Utc::now() + chrono::Duration::seconds(seconds)).to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

struct Site {
    server: Server,
    data_dir: PathBuf,
    vtn: Vtn,
    ven_id: String,
}

impl Site {
    /// The gateway's view of `id`: (state, revision, ceiling of the first interval, baseline).
    async fn event(&self, id: &str) -> Option<Value> {
        self.server.gateway.read().event(id).await
    }

    async fn ceiling_of(&self, id: &str) -> Option<(f64, Option<f64>)> {
        let e = self.event(id).await?;
        let c = &e["detail"]["ceilings"][0];
        Some((c["ceiling_kw"].as_f64()?, c["baseline"]["kw"].as_f64()))
    }

    async fn opt_of(&self, id: &str) -> Option<Value> {
        let state = self.vtn.state().await;
        state["opt_responses"][id].as_array().and_then(|a| a.last().cloned())
    }

    async fn add_event(&self, mut body: Value) -> String {
        body["ven_id"] = json!(self.ven_id);
        body["market_context"] = json!(PROGRAM);
        self.vtn.post("/admin/event", body).await["event_id"]
            .as_str()
            .expect("event_id")
            .to_string()
    }
}

async fn start_site() -> Site {
    start_site_with(Vtn::start().await).await
}

async fn start_site_with(vtn: Vtn) -> Site {
    let dir = tempfile::tempdir().expect("tempdir").keep();
    let config = site_config(&vtn, &dir);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(config, Clock::real(), None, listener)
        .await
        .expect("gateway starts");
    let ven_id = eventually("registration at the VTN", 30, async || {
        vtn.registered_ven_id(VEN_NAME).await
    })
    .await;
    Site {
        server,
        data_dir: dir,
        vtn,
        ven_id,
    }
}

/// The gateway's configuration for `vtn`, its data in `dir`.
fn site_config(vtn: &Vtn, dir: &std::path::Path) -> Config {
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.gateway.api_token = "it-token-0123456789".into();
    config.gateway.telemetry_interval_s = 1;
    config.site.baseline_window_s = 20;
    config.site.facility_max_kw = 400.0;
    config.openadr2b = Some(vtn.ven_config(VEN_NAME));
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_follows_a_real_openleadr_vtn() {
    let site = start_site().await;
    let gw = site.server.gateway.clone();
    // The VEN saved its registration where a restart finds it (the VTN lists the registration
    // as soon as it answers, a moment before the VEN has read the answer and saved it).
    let registration = site.data_dir.join(flexgate::grid::openadr::ven2b::REGISTRATION_FILE);
    let saved = eventually("the saved registration", 10, async || {
        std::fs::read_to_string(&registration).ok()
    })
    .await;
    assert!(saved.contains(&site.ven_id), "{saved}");
    let meter = eventually("a meter reading", 20, async || {
        gw.read().status().await.measured_meter_kw()
    })
    .await;
    assert!(meter > 10.0, "meter {meter}");

    // 1. LOAD_DISPATCH setpoint, applied at dtstart and not before.
    let setpoint = (0.8 * meter).round();
    let id = site
        .add_event(
            json!({"signal_name": "LOAD_DISPATCH", "signal_type": "setpoint", "start": iso_in(5),
                          "intervals": [{"duration_s": 30, "value": setpoint}]}),
        )
        .await;
    let (ceiling, _) = eventually("the setpoint event in the book", 10, async || {
        site.ceiling_of(&id).await
    })
    .await;
    assert!(close(ceiling, setpoint), "ceiling {ceiling} for setpoint {setpoint} kW");
    let opt = eventually("oadrCreatedEvent at the VTN", 10, async || site.opt_of(&id).await).await;
    assert_eq!(opt["opt_type"], "optIn", "{opt}");
    assert_eq!(opt["response_code"], 200, "{opt}");
    let first_binding = eventually("the setpoint binding the site", 20, async || {
        let status = gw.read().status().await;
        status
            .meter_ceiling_kw()
            .filter(|c| close(*c, setpoint))
            .map(|_| status.at)
    })
    .await;
    let start = site.event(&id).await.expect("event")["summary"]["start"]
        .as_str()
        .expect("start")
        .parse::<chrono::DateTime<Utc>>()
        .expect("start time");
    assert!(
        first_binding >= start,
        "ceiling in force at {first_binding}, before dtstart {start}"
    );

    // 2. Modify: the VTN raises modificationNumber; the book follows with the new value.
    let lower = (0.7 * meter).round();
    site.vtn
        .post(
            "/admin/modify",
            json!({"event_id": id, "intervals": [{"duration_s": 30, "value": lower}]}),
        )
        .await;
    eventually("the modified setpoint", 15, async || {
        let (c, _) = site.ceiling_of(&id).await?;
        close(c, lower).then_some(())
    })
    .await;
    let revision = site.event(&id).await.expect("event")["summary"]["revision"].as_u64();
    assert_eq!(revision, Some(1), "openleadr's first modification is number 1");

    // 3. Cancel: the ceiling goes away.
    site.vtn.post("/admin/cancel", json!({"event_id": id})).await;
    eventually("the cancellation", 15, async || {
        let e = site.event(&id).await?;
        let state = e["summary"]["state"].as_str()?.to_string();
        (state == "cancelled" || state == "recovering" || state == "completed").then_some(())
    })
    .await;
    let answered = eventually("optIn for the cancellation", 10, async || {
        let o = site.opt_of(&id).await?;
        (o["modification_number"] == 2).then_some(o)
    })
    .await;
    assert_eq!(answered["opt_type"], "optIn", "{answered}");

    // 4. LOAD_DISPATCH delta: ceiling = baseline − |delta|.
    let delta = (0.1 * meter).round();
    let id = site
        .add_event(
            json!({"signal_name": "LOAD_DISPATCH", "signal_type": "delta", "start": iso_in(2),
                          "intervals": [{"duration_s": 20, "value": -delta}]}),
        )
        .await;
    let (ceiling, baseline) = eventually("the delta event", 10, async || site.ceiling_of(&id).await).await;
    let baseline = baseline.expect("a delta records its baseline");
    assert!(
        close(ceiling, baseline - delta),
        "ceiling {ceiling}, baseline {baseline}, delta {delta}"
    );

    // 5. x-loadControlPercentOffset −20: ceiling = 80 % of the baseline.
    let id = site
        .add_event(
            json!({"signal_name": "LOAD_CONTROL", "signal_type": "x-loadControlPercentOffset",
                          "measurement": "none", "start": iso_in(2),
                          "intervals": [{"duration_s": 20, "value": -20.0}]}),
        )
        .await;
    let (ceiling, baseline) = eventually("the percent event", 10, async || site.ceiling_of(&id).await).await;
    assert!(close(ceiling, 0.8 * baseline.expect("baseline")), "ceiling {ceiling}");

    // 6. x-loadControlCapacity 0.5: ceiling = half the facility maximum (400 kW).
    let id = site
        .add_event(
            json!({"signal_name": "LOAD_CONTROL", "signal_type": "x-loadControlCapacity",
                          "measurement": "none", "start": iso_in(2),
                          "intervals": [{"duration_s": 20, "value": 0.5}]}),
        )
        .await;
    let (ceiling, _) = eventually("the capacity event", 10, async || site.ceiling_of(&id).await).await;
    assert!(close(ceiling, 200.0), "ceiling {ceiling}");

    // 7. SIMPLE level 2: the site table sheds 20 % of the baseline.
    let id = site
        .add_event(
            json!({"signal_name": "SIMPLE", "signal_type": "level", "measurement": "none",
                          "start": iso_in(2), "intervals": [{"duration_s": 20, "value": 2}]}),
        )
        .await;
    let (ceiling, baseline) = eventually("the SIMPLE event", 10, async || site.ceiling_of(&id).await).await;
    assert!(close(ceiling, 0.8 * baseline.expect("baseline")), "ceiling {ceiling}");

    // 8. A target that is not ours: optOut with a reason, nothing in the book.
    let refused_before = refused_total(&gw).await;
    let id = site
        .add_event(
            json!({"signal_name": "LOAD_DISPATCH", "signal_type": "setpoint", "start": iso_in(2),
                          "targets": {"group_id": "someone-else"},
                          "intervals": [{"duration_s": 20, "value": setpoint}]}),
        )
        .await;
    let opt = eventually("the opt-out", 10, async || site.opt_of(&id).await).await;
    assert_eq!(opt["opt_type"], "optOut", "{opt}");
    assert!(
        opt["response_description"].as_str().unwrap_or("").contains("eiTarget"),
        "the reason names the target: {opt}"
    );
    assert!(
        site.event(&id).await.is_none(),
        "an event for someone else must not reach the book"
    );
    // The VEN's own decision is in the ledger with its reason, not only inside the XML sent.
    let decided = gw
        .ledger()
        .iter_from(1)
        .filter_map(Result::ok)
        .find(|r| r.body["entry"] == "adapter_opted_out" && r.body["event_id"] == json!(id))
        .expect("the VEN's opt-out is recorded");
    assert!(
        decided.body["reason"].as_str().unwrap_or("").contains("eiTarget"),
        "{}",
        decided.body
    );
    assert_eq!(
        refused_total(&gw).await,
        refused_before + 1.0,
        "the VEN's opt-out is counted in flexgate_events_refused_total"
    );

    // 9. The VTN forgets us: the VEN re-registers and keeps working.
    let before = site.vtn.state().await["registrations"].as_array().map_or(0, Vec::len);
    site.vtn.post("/admin/forget_ven", json!({"ven_id": site.ven_id})).await;
    let ven_id = eventually("re-registration", 20, async || {
        let state = site.vtn.state().await;
        let regs = state["registrations"].as_array()?;
        (regs.len() > before || regs.iter().filter(|r| r["ven_name"] == VEN_NAME).count() > 1)
            .then(|| {
                regs.iter()
                    .rev()
                    .find(|r| r["ven_name"] == VEN_NAME && r["active"] == true)?["ven_id"]
                    .as_str()
                    .map(str::to_string)
            })
            .flatten()
    })
    .await;
    let id = site
        .vtn
        .post(
            "/admin/event",
            json!({"ven_id": ven_id, "market_context": PROGRAM, "signal_name": "LOAD_DISPATCH",
                   "signal_type": "setpoint", "start": iso_in(2), "intervals": [{"duration_s": 10, "value": setpoint}]}),
        )
        .await["event_id"]
        .as_str()
        .expect("id")
        .to_string();
    eventually("an event after re-registration", 15, async || {
        site.ceiling_of(&id).await
    })
    .await;

    // 10. Reports: the VTN asked for TELEMETRY_USAGE and got our meter readings.
    let values = eventually("TELEMETRY_USAGE values at the VTN", 20, async || {
        let state = site.vtn.state().await;
        let values = state["report_values"]
            .as_object()?
            .iter()
            .find(|(k, _)| k.ends_with("meter_kw"))?
            .1
            .clone();
        (values.as_array()?.len() >= 2).then_some(values)
    })
    .await;
    for point in values.as_array().expect("values") {
        let kw = point[1].as_f64().expect("a number");
        assert!(kw > 0.0 && kw < 10_000.0, "meter kW reported: {kw}");
    }
    // And every exchange is in the ledger: the distributes in, the created events out.
    let exported: Vec<_> = gw.ledger().iter_from(0).map(|r| r.expect("ledger record")).collect();
    let inbound = exported
        .iter()
        .filter(|r| r.body["message"] == "oadrDistributeEvent")
        .count();
    let outbound = exported
        .iter()
        .filter(|r| r.body["message"] == "oadrCreatedEvent")
        .count();
    assert!(
        inbound >= 8 && outbound >= 8,
        "ledger holds {inbound} distributes and {outbound} created events"
    );
    site.server.shutdown().await;
}

/// Two events back to back from a real VTN: B starts about a second after A ends (so after A's
/// restore, within one or two control ticks). When both are over, no cap is left: every job is
/// back at its uncapped limit (a curtailed snapshot once became B's "pre-event" state).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_events_from_openleadr_leave_every_job_uncapped() {
    let site = start_site().await;
    let gw = site.server.gateway.clone();
    let meter = eventually("a meter reading", 20, async || {
        gw.read().status().await.measured_meter_kw()
    })
    .await;
    let a_start = Utc::now() + chrono::Duration::seconds(4);
    let a_end = a_start + chrono::Duration::seconds(12);
    let b_start = a_end + chrono::Duration::seconds(1);
    let at = |t: chrono::DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Secs, true);
    let a = site
        .add_event(
            json!({"signal_name": "LOAD_DISPATCH", "signal_type": "setpoint", "start": at(a_start),
                          "intervals": [{"duration_s": 12, "value": (0.7 * meter).round()}]}),
        )
        .await;
    let b = site
        .add_event(
            json!({"signal_name": "LOAD_DISPATCH", "signal_type": "setpoint", "start": at(b_start),
                          "intervals": [{"duration_s": 12, "value": (0.75 * meter).round()}]}),
        )
        .await;
    // A caps jobs while it is in force.
    eventually("A capping jobs", 20, async || {
        let capped = gw.read().jobs().await.iter().any(|j| j.cap_w_per_gpu < 699.0);
        (capped && gw.read().status().await.active_events.contains(&a)).then_some(())
    })
    .await;
    // B takes over right after A.
    eventually("B in force", 30, async || {
        gw.read().status().await.active_events.contains(&b).then_some(())
    })
    .await;
    // After both: nothing in force, no plan, every job at 700 W as the cluster reports it.
    eventually(
        "every job back at its uncapped limit after both events",
        40,
        async || {
            let status = gw.read().status().await;
            let jobs = gw.read().jobs().await;
            let uncapped = jobs.iter().all(|j| j.cap_w_per_gpu >= 699.9 && j.confirmed);
            (status.active_events.is_empty() && gw.read().plan().await.is_none() && uncapped && !jobs.is_empty())
                .then_some(())
        },
    )
    .await;
    for id in [&a, &b] {
        let state = site.event(id).await.expect("event")["summary"]["state"].clone();
        assert_eq!(state, "completed", "{id}: {state}");
    }
    site.server.shutdown().await;
}

/// Stock openleadr 0.5.36 requests TELEMETRY_STATUS too and then answers 500 to every update
/// that carries a status point (its own bug). The usage data must keep flowing: each report
/// goes in its own oadrUpdateReport, and each refusal is in the ledger (issue 12, item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reports_keep_flowing_when_the_stock_vtn_refuses_status_reports() {
    let site = start_site_with(Vtn::start_with(&["--request-status"]).await).await;
    let gw = site.server.gateway.clone();
    let values = eventually("TELEMETRY_USAGE values at the VTN", 30, async || {
        let state = site.vtn.state().await;
        let values = state["report_values"]
            .as_object()?
            .iter()
            .find(|(k, _)| k.ends_with("meter_kw"))?
            .1
            .clone();
        (values.as_array()?.len() >= 3).then_some(values)
    })
    .await;
    assert!(values.as_array().is_some_and(|v| v.len() >= 3), "{values}");
    // The status updates were refused, and the ledger says so with the VTN's answer.
    let refused = eventually("a refused TELEMETRY_STATUS update in the ledger", 20, async || {
        gw.ledger().iter_from(0).filter_map(Result::ok).find(|r| {
            r.body["message"] == "oadrUpdateReport"
                && r.body["answer"]["answer"] == "refused"
                && r.body["content"].to_string().contains("TELEMETRY_STATUS")
        })
    })
    .await;
    assert_eq!(refused.body["answer"]["status"], 500, "{}", refused.body);
    // The status point carried the most the site's flexibility curve can shed at the meter,
    // 2.0b's one place for it (oadrLoadControlState/oadrCapacity).
    let content = refused.body["content"].to_string();
    let capacity = content
        .split("<oadr:oadrCapacity><oadr:oadrCurrent>")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no oadrCapacity in the status update: {content}"));
    let most = gw
        .read()
        .flexibility()
        .await
        .map(|c| c.most_meter_shed_kw())
        .expect("a flexibility curve");
    assert!(
        capacity > 0.0 && (capacity - most).abs() <= 0.01 * most,
        "{capacity} kW vs the curve's {most} kW"
    );
    // That figure is all 2.0b carries of the site's flexibility: the forecast has no honest
    // 2.0b report (issue 33; `src/grid/openadr/ven2b.rs` says why), so the VEN offers its two
    // telemetry reports and nothing projected, while the gateway does hold a forecast.
    assert!(gw.read().forecast().await.is_some(), "the gateway has a forecast");
    let offered = site.vtn.state().await["reports_offered"].clone();
    let reports: Vec<&Value> = offered
        .as_object()
        .into_iter()
        .flat_map(|vens| vens.values())
        .filter_map(Value::as_array)
        .flatten()
        .collect();
    let mut names: Vec<&str> = reports.iter().filter_map(|r| r["report_name"].as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names, ["TELEMETRY_STATUS", "TELEMETRY_USAGE"], "{offered}");
    let reading_types: Vec<&str> = reports
        .iter()
        .filter_map(|r| r["report_descriptions"].as_array())
        .flatten()
        .filter_map(|d| d["reading_type"].as_str())
        .collect();
    assert!(
        !reading_types.is_empty() && !reading_types.contains(&"Projected"),
        "{reading_types:?}"
    );
    // And the usage data was taken by the VTN (an accepted answer), not refused along with the
    // status: sent together, every update would have been refused.
    let accepted_usage = eventually("an accepted TELEMETRY_USAGE update in the ledger", 20, async || {
        gw.ledger().iter_from(0).filter_map(Result::ok).find(|r| {
            let content = r.body["content"].to_string();
            r.body["message"] == "oadrUpdateReport"
                && r.body["answer"]["answer"] == "accepted"
                && content.contains("TELEMETRY_USAGE")
                && !content.contains("TELEMETRY_STATUS")
        })
    })
    .await;
    assert!(accepted_usage.seq > 0);
    site.server.shutdown().await;
}

/// `flexgate_events_refused_total` as `/metrics` shows it.
async fn refused_total(gw: &flexgate::runtime::Gateway) -> f64 {
    let metrics = gw.read().metrics().await;
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("flexgate_events_refused_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no refusal counter in {metrics}"))
}

/// A gateway that takes over the site's data without the VEN's registration file (a replica
/// beginning to lead, which holds its predecessor's ledger but not its files) carries on as the
/// same VEN: the registration comes from the ledger, and the VTN sees no second registration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registration_recorded_in_the_ledger_is_carried_on_without_its_file() {
    let site = start_site().await;
    let registered = |state: &Value| {
        state["registrations"]
            .as_array()
            .map_or(0, |r| r.iter().filter(|r| r["ven_name"] == VEN_NAME).count())
    };
    assert_eq!(registered(&site.vtn.state().await), 1);
    let Site {
        server,
        data_dir,
        vtn,
        ven_id,
    } = site;
    // The VEN records its registration in the ledger, then writes its file, once the VTN's
    // answer is in: a moment after the VTN lists it. Wait for the file (hence the record), so
    // that what is removed is a file that was written (CI once shut down in between, under
    // load).
    let file = data_dir.join(flexgate::grid::openadr::ven2b::REGISTRATION_FILE);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while !file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the VEN never wrote {}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shutdown().await;
    std::fs::remove_file(&file).expect("the file was there");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let server = Server::start(site_config(&vtn, &data_dir), Clock::real(), None, listener)
        .await
        .expect("the gateway starts again");
    // It polls as the registered VEN: an event for that VEN id reaches it.
    let id = vtn
        .post(
            "/admin/event",
            json!({"ven_id": ven_id, "market_context": PROGRAM, "signal_name": "SIMPLE",
                   "signal_type": "level", "start": iso_in(60), "intervals": [{"duration_s": 60, "value": 1}]}),
        )
        .await["event_id"]
        .as_str()
        .expect("id")
        .to_string();
    eventually("the event at the same VEN", 30, async || {
        let events = server.gateway.read().events().await;
        events.iter().any(|e| e.id.contains(&id)).then_some(())
    })
    .await;
    assert_eq!(registered(&vtn.state().await), 1, "a second registration");
    server.shutdown().await;
}
