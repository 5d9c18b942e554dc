//! Runs the OpenADR 3.x VEN client against a VTN and connects it to the gateway.
//!
//! Every `poll_s` it fetches the events for its program and targets (ETag/304 aware), lets the
//! tracker say what changed (new, modified by modificationDateTime, cancelled by a zero window
//! or by deletion), records each change in the ledger, and submits it to the event book. When
//! an event it acted on ends or is cancelled, it POSTs a report: per event interval DEMAND in kW
//! and USAGE in kWh from the meter readings taken while the event ran (reading type
//! `DIRECT_READ`), and what the site's flexibility curve offered when the interval began
//! (reading type `ESTIMATED`, planner figures, never measured): `LOAD_SHED_DELTA_AVAILABLE`, the
//! most the site could shed at the meter, and the curve itself in two private payload types
//! (OpenADR 3 Definitions, private strings): [`SHED_LEVELS_TYPE`], the meter reductions of its
//! levels (kW, the facility model's lower bound), and [`SHED_COST_TYPE`], the expected
//! GPU-weighted progress each level would cost (percent).
//!
//! **The forecast report.** An event (or a report request alone: an event without intervals,
//! which is neither submitted to the book nor cancelled, on creation or deletion) whose
//! `reportDescriptors` ask for a forecast, one with `readingType` `FORECAST` or
//! `historical: false` (3.0.1: "False indicates report on intervals following startInterval,
//! e.g. forecast") for a payload type the gateway forecasts (`LOAD_SHED_DELTA_AVAILABLE` or one
//! of the three below), gets one report of the gateway's 48-hour forecast
//! (`build_forecast_report`) per revision that asks, as soon as the gateway has a forecast (at
//! once, or at the first poll that finds one). Its own intervals, one per hour from when the
//! forecast was made (hour 0 is the flexibility curve now, the other 47 are in the future), each
//! `PT1H` with its own start: a 3.1 VTN should ask with `reportIntervals: OPEN_INTERVALS`, since
//! a forecast cannot mirror an event's intervals. What `frequency` and `repeat` ask beyond one
//! report is not followed yet: the VTN asks again with a new revision (or reads the MQTT
//! telemetry, which carries the forecast in every sample).

use super::map::{Labels, MapPolicy, Timing, cancellation, grid_event};
use crate::config::{Config, OpenAdr3Config};
use crate::ledger::{Entry, Recorded};
use crate::runtime::{Gateway, Submission, SubmitError, Transport, WireRef};
use chrono::{DateTime, Utc};
use flexgate_openadr::oadr3::client::ClientError;
use flexgate_openadr::oadr3::{
    Auth, CancelReason, ChangeKind, Client, Event, EventTracker, Interval, IntervalPeriod, Polled, Report,
    ReportPayloadDescriptor, ReportResource, ValuesMap, ZeroWindow, event_targets,
};
use flexgate_openadr::oadr3::{IsoDuration, PayloadValue};
use flexgate_policies::control::entry::{PeerAnswer, WireContent, WireProtocol, WireReceived, WireSent};
use flexgate_policies::control::flexibility::SiteFlexibility;
use flexgate_policies::event::{EventSource, Participation};
use flexgate_policies::forecast::Forecast;
use flexgate_policies::ids::EventId;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Why the 3.x client could not start.
#[derive(Debug, thiserror::Error)]
pub enum Ven3StartError {
    /// TLS files.
    #[error("OpenADR 3: {0}")]
    Tls(#[from] flexgate_openadr::http::tls::TlsError),
    /// The HTTP client.
    #[error("OpenADR 3: {0}")]
    Client(#[from] flexgate_openadr::oadr3::ClientError),
    /// The secret file.
    #[error("OpenADR 3: cannot read client_secret_file {path}: {source}")]
    Secret {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Private report payload type: the meter reductions (kW) of the flexibility curve's levels.
pub const SHED_LEVELS_TYPE: &str = "X_FLEXGATE_SHED_LEVELS";
/// Private report payload type: the expected GPU-weighted progress (percent) each level of
/// [`SHED_LEVELS_TYPE`] would cost, in the same order.
pub const SHED_COST_TYPE: &str = "X_FLEXGATE_SHED_PROGRESS_LOST";

/// Private report payload type: the 10th percentile of the meter kW the site can shed within the
/// forecast's cost ceiling (exceeded nine times in ten, the trade's "P90").
///
/// Why private types beside the standard one: 3.0.1's `LOAD_SHED_DELTA_AVAILABLE` (a report
/// payload: "load shed delta available", one number) is the right quantity, but it takes one
/// value per interval and a descriptor says one `confidence` for its payload type, so one type
/// cannot carry a band. The forecast report therefore carries `LOAD_SHED_DELTA_AVAILABLE` with
/// the 10th percentile (descriptor `confidence` 90: the firm figure a VTN that reads only the
/// standard type can dispatch on) and the band in three private types (the Definitions allow
/// privately agreed payload types), each with its own descriptor, `readingType` `FORECAST`,
/// units `KW` and `confidence` 90, 50 and 10 (the chance the site can shed at least that much).
pub const FORECAST_P10_TYPE: &str = "X_FLEXGATE_SHED_AVAILABLE_P10";
/// Private report payload type: the median of the forecast's available kW (see
/// [`FORECAST_P10_TYPE`]).
pub const FORECAST_P50_TYPE: &str = "X_FLEXGATE_SHED_AVAILABLE_P50";
/// Private report payload type: the 90th percentile of the forecast's available kW (see
/// [`FORECAST_P10_TYPE`]).
pub const FORECAST_P90_TYPE: &str = "X_FLEXGATE_SHED_AVAILABLE_P90";

/// The report payload types the forecast report answers with.
const FORECAST_TYPES: [&str; 4] = [
    "LOAD_SHED_DELTA_AVAILABLE",
    FORECAST_P10_TYPE,
    FORECAST_P50_TYPE,
    FORECAST_P90_TYPE,
];

/// A forecast report owed to an event that asked for one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ForecastOwed {
    program_id: String,
    revision: u64,
}

/// Whether `event` asks for a forecast of what the gateway forecasts: a report descriptor of one
/// of [`FORECAST_TYPES`] with `readingType` `FORECAST` or `historical: false`.
fn asks_for_forecast(event: &Event) -> bool {
    event.report_descriptors.iter().flatten().any(|d| {
        FORECAST_TYPES.contains(&d.payload_type.trim())
            && (d.reading_type.as_deref().map(str::trim) == Some("FORECAST") || d.historical == Some(false))
    })
}

/// One interval of an event we acted on, for the report.
#[derive(Debug, Clone)]
struct ReportSpan {
    interval_id: i64,
    start: DateTime<Utc>,
    end: Option<DateTime<Utc>>,
    /// The flexibility curve in force at the first poll after the interval began (what the
    /// site offered for it); `None` until then, or when the gateway has no curve.
    offered: Option<Arc<SiteFlexibility>>,
}

/// An event the gateway is acting on.
#[derive(Debug, Clone)]
struct Tracked {
    revision: u64,
    end: Option<DateTime<Utc>>,
    spans: Vec<ReportSpan>,
}

/// The 3.x client task's state.
pub struct Ven3 {
    gateway: Arc<Gateway>,
    client: Client,
    cfg: OpenAdr3Config,
    tracker: EventTracker,
    policy: MapPolicy,
    acting: HashMap<String, Tracked>,
    /// Meter readings (time, kW) since the oldest live event started.
    meter: Vec<(DateTime<Utc>, f64)>,
    /// Events that asked for a forecast report not posted yet (no forecast so far).
    forecast_owed: HashMap<String, ForecastOwed>,
    /// Report requests alone (events without intervals that ask for a forecast): never
    /// submitted, so their deletion cancels nothing.
    report_only: HashSet<String>,
}

impl Ven3 {
    /// Builds the client; reads the secret file now so a wrong path fails at start.
    pub fn new(gateway: Arc<Gateway>, config: &Config, cfg: &OpenAdr3Config) -> Result<Self, Ven3StartError> {
        let auth = match (&cfg.token, &cfg.client_id, &cfg.client_secret_file) {
            (Some(token), _, _) => Auth::Bearer(token.clone()),
            (None, Some(client_id), Some(path)) => {
                let secret = std::fs::read_to_string(path).map_err(|source| Ven3StartError::Secret {
                    path: path.display().to_string(),
                    source,
                })?;
                Auth::ClientCredentials {
                    token_url: cfg.token_url.clone(),
                    client_id: client_id.clone(),
                    client_secret: secret.trim().to_string(),
                    scopes: Vec::new(),
                }
            }
            _ => Auth::Anonymous,
        };
        let http = flexgate_openadr::http::client(cfg.tls.as_ref(), Duration::from_secs(cfg.timeout_s))?;
        Ok(Ven3 {
            gateway,
            client: Client::new(cfg.url.clone(), auth, http),
            cfg: cfg.clone(),
            tracker: EventTracker::new(),
            policy: MapPolicy {
                level_offset_percent_per_step: config.site.level_offset_percent_per_step,
            },
            acting: HashMap::new(),
            meter: Vec::new(),
            forecast_owed: HashMap::new(),
            report_only: HashSet::new(),
        })
    }

    /// Polls until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let clock = self.gateway.clock();
        tracing::info!(vtn = %self.client.base_url(), "OpenADR 3 client started");
        loop {
            self.poll_once().await;
            let wake = clock.instant_of(clock.now() + chrono::Duration::seconds(self.cfg.poll_s as i64));
            tokio::select! {
                () = async { let _ = stop.wait_for(|s| *s).await; } => return,
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    /// One poll: fetch, track, submit, report.
    pub async fn poll_once(&mut self) {
        let targets: Vec<&str> = self.cfg.targets.iter().map(String::as_str).collect();
        let polled = self.client.get_events(self.cfg.program_id.as_deref(), &targets).await;
        let now = self.gateway.clock().now();
        self.sample(now).await;
        match polled {
            Ok(Polled::NotModified) => {}
            Ok(Polled::Events(events)) => {
                for change in self.tracker.observe_poll(&events) {
                    let revision = u64::from(change.revision);
                    match change.kind {
                        ChangeKind::Unchanged => {}
                        ChangeKind::New | ChangeKind::Modified => self.upsert(now, &change.event, revision).await,
                        ChangeKind::Cancelled(CancelReason::ZeroWindow(ZeroWindow::NoIntervals))
                            if !self.acting.contains_key(&change.id) && asks_for_forecast(&change.event) =>
                        {
                            // A report request alone: no intervals, so nothing to act on or
                            // cancel (the tracker reads an empty window as a cancellation).
                            self.record(&change.event, "report request").await;
                            self.report_only.insert(change.id.clone());
                            self.owe_forecast(&change.event, revision);
                        }
                        ChangeKind::Cancelled(reason) => {
                            self.forecast_owed.remove(&change.id);
                            let seq = self.record(&change.event, &format!("cancelled: {reason:?}")).await;
                            if self.report_only.remove(&change.id) {
                                continue;
                            }
                            self.cancel(now, &change.id, revision, seq).await;
                        }
                    }
                }
            }
            Err(e) => tracing::warn!("OpenADR 3 poll: {e}"),
        }
        self.report_ended(now).await;
        self.post_forecasts().await;
    }

    async fn sample(&mut self, now: DateTime<Utc>) {
        if self.acting.is_empty() {
            self.meter.clear();
            return;
        }
        if let Some(kw) = self.gateway.read().status().await.measured_meter_kw() {
            self.meter.push((now, kw));
        }
        let begun = |s: &ReportSpan| s.start <= now && s.offered.is_none();
        if self.acting.values().flat_map(|t| &t.spans).any(begun) {
            let curve = self.gateway.read().flexibility().await;
            for span in self
                .acting
                .values_mut()
                .flat_map(|t| t.spans.iter_mut())
                .filter(|s| begun(s))
            {
                span.offered.clone_from(&curve);
            }
        }
    }

    /// Records what the VTN said about one event (the client decoded it; the JSON is the
    /// object as received, re-serialized).
    async fn record(&self, event: &Event, change: &str) -> u64 {
        let entry = Entry::WireReceived(WireReceived {
            at: self.gateway.clock().now(),
            protocol: WireProtocol::OpenAdr3,
            peer: self.client.base_url().to_string(),
            message: format!("event ({change})"),
            content: WireContent::Json(serde_json::to_value(event).unwrap_or_default()),
        });
        match self
            .gateway
            .driver()
            .record(Recorded::new(entry, event.id.as_deref().map(EventId::from)))
            .await
        {
            Ok(appended) => appended.seq,
            Err(e) => {
                tracing::error!("ledger: cannot record an OpenADR 3 event: {e}");
                0
            }
        }
    }

    async fn upsert(&mut self, now: DateTime<Utc>, event: &Event, revision: u64) {
        let Some(id) = event.id.clone() else { return };
        let seq = self.record(event, "new or modified").await;
        self.report_only.remove(&id);
        self.owe_forecast(event, revision);
        let mapped = match event_targets(event, now) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(event = %id, "OpenADR 3 event not usable: {e}");
                self.cancel(now, &id, revision, seq).await;
                return;
            }
        };
        if !mapped.refusals.is_empty() {
            let reasons: Vec<String> = mapped.refusals.iter().map(|r| r.refusal.to_string()).collect();
            tracing::warn!(event = %id, "OpenADR 3 event refused: {}", reasons.join("; "));
            self.cancel(now, &id, revision, seq).await;
            return;
        }
        let (Some(start), spans) = (mapped.start, mapped.target_intervals()) else {
            self.cancel(now, &id, revision, seq).await;
            return;
        };
        if spans.is_empty() {
            // Informational only (alerts, prices without a load payload): nothing to act on.
            return;
        }
        let labels = Labels {
            id: id.clone(),
            revision,
            source: EventSource::OpenAdr3,
            program: Some(event.program_id.clone()),
            issued_at: event.modification_date_time,
            // 3.x: 0 is the highest; the gateway's scale (2.0b's) starts at 1.
            priority: event.priority.map(|p| p.saturating_add(1)),
            test: false,
        };
        let timing = Timing {
            start,
            duration_s: mapped
                .end
                .map(|end| u64::try_from((end - start).num_seconds()).unwrap_or(0)),
            ramp_s: 0,
            recovery_s: 0,
            randomize_start_s: mapped
                .randomize_start
                .as_ref()
                .and_then(IsoDuration::as_fixed)
                .map_or(0, |d| d.num_seconds().max(0) as u64),
        };
        let grid = grid_event(labels, timing, &spans, self.policy);
        let transport = Transport::OpenAdr3 {
            vtn: self.client.base_url().to_string(),
            message_seq: seq,
        };
        let wire = WireRef {
            id: id.to_string(),
            revision,
            signal: None,
        };
        let submission = Submission::Translated {
            event: Box::new(grid),
            wire,
        };
        match self.gateway.driver().submit(submission, transport).await {
            Ok(outcome) if outcome.ack.opt == Participation::In => {
                let report_spans = mapped
                    .targets
                    .iter()
                    .map(|t| ReportSpan {
                        interval_id: t.interval_id,
                        start: t.span.start,
                        end: t
                            .span
                            .duration_s
                            .map(|d| t.span.start + chrono::Duration::seconds(d as i64)),
                        offered: None,
                    })
                    .collect();
                self.acting.insert(
                    id,
                    Tracked {
                        revision,
                        end: mapped.end,
                        spans: report_spans,
                    },
                );
            }
            Ok(outcome) => {
                tracing::warn!(event = %id, "OpenADR 3 event opted out: {}", outcome.ack.reason.unwrap_or_default());
            }
            Err(SubmitError::Stale { .. }) => {}
            Err(e) => tracing::warn!(event = %id, "OpenADR 3 event not taken: {e}"),
        }
    }

    async fn cancel(&mut self, now: DateTime<Utc>, id: &str, revision: u64, seq: u64) {
        let transport = Transport::OpenAdr3 {
            vtn: self.client.base_url().to_string(),
            message_seq: seq,
        };
        let held = self.acting.get(id).map_or(0, |t| t.revision);
        let event = cancellation(id, revision.max(held + 1), EventSource::OpenAdr3, now);
        let submission = Submission::Translated {
            event: Box::new(event),
            wire: WireRef {
                id: id.to_string(),
                revision,
                signal: None,
            },
        };
        match self.gateway.driver().submit(submission, transport).await {
            Ok(_) | Err(SubmitError::Stale { .. }) => {}
            Err(e) => tracing::warn!(event = %id, "OpenADR 3 cancellation not taken: {e}"),
        }
        if let Some(mut tracked) = self.acting.remove(id) {
            tracked.end = Some(now);
            self.post_report(id, &tracked, now).await;
        }
    }

    /// Posts the report of every acted-on event whose end has passed.
    async fn report_ended(&mut self, now: DateTime<Utc>) {
        let ended: Vec<String> = self
            .acting
            .iter()
            .filter(|(_, t)| t.end.is_some_and(|end| end <= now))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ended {
            if let Some(tracked) = self.acting.remove(&id) {
                self.post_report(&id, &tracked, now).await;
            }
        }
    }

    async fn post_report(&self, id: &str, tracked: &Tracked, now: DateTime<Utc>) {
        if !self.cfg.reports {
            return;
        }
        let report = build_report(id, &self.cfg.ven_name, tracked, &self.meter, now);
        let Some(report) = report else {
            tracing::info!(event = %id, "OpenADR 3: no meter readings during the event; no report");
            return;
        };
        self.send_report(id, &report, "report").await;
    }
}

impl Ven3 {
    /// Owes `event` a forecast report if this revision asks for one; forgets an earlier
    /// revision's request if not.
    fn owe_forecast(&mut self, event: &Event, revision: u64) {
        let Some(id) = event.id.clone() else { return };
        if asks_for_forecast(event) {
            let owed = ForecastOwed {
                program_id: event.program_id.clone(),
                revision,
            };
            self.forecast_owed.insert(id, owed);
        } else {
            self.forecast_owed.remove(&id);
        }
    }

    /// Posts the forecast report owed to each event that asked for one, once the gateway has a
    /// forecast (without one, they wait for a later poll).
    async fn post_forecasts(&mut self) {
        if self.forecast_owed.is_empty() || !self.cfg.reports {
            return;
        }
        let Some(forecast) = self.gateway.read().forecast().await else {
            return;
        };
        let objective = self.gateway.read().config.gateway.objective.as_str();
        let owed: Vec<(String, ForecastOwed)> = self.forecast_owed.drain().collect();
        for (id, asked) in owed {
            let Some(report) = build_forecast_report(&id, &asked.program_id, &self.cfg.ven_name, &forecast, objective)
            else {
                tracing::warn!(event = %id, "OpenADR 3: the forecast has no usable hour; no forecast report");
                continue;
            };
            self.send_report(&id, &report, "forecast report").await;
            tracing::info!(event = %id, revision = asked.revision, "OpenADR 3: forecast report posted");
        }
    }

    /// Posts `report` and records what was sent with the VTN's answer (`message` names it).
    async fn send_report(&self, id: &str, report: &Report, message: &str) {
        let body = serde_json::to_value(report).unwrap_or_default();
        let answer = match self.client.post_report(report).await {
            Ok(_) => PeerAnswer::Accepted,
            Err(e) => {
                tracing::warn!(event = %id, "OpenADR 3 {message} not accepted: {e}");
                answer_of(&e)
            }
        };
        // Sent and refused alike: what the VTN was told, and what it answered.
        let entry = Entry::WireSent(WireSent {
            at: self.gateway.clock().now(),
            protocol: WireProtocol::OpenAdr3,
            peer: self.client.base_url().to_string(),
            message: message.into(),
            content: WireContent::Json(body),
            answer,
        });
        if let Err(e) = self
            .gateway
            .driver()
            .record(Recorded::new(entry, Some(EventId::from(id))))
            .await
        {
            tracing::error!(event = %id, "ledger: cannot record an OpenADR 3 {message}: {e}");
        }
    }
}

/// The forecast report for event `id` (see the module docs and [`FORECAST_P10_TYPE`]): one
/// interval per hour of the forecast, from when it was made, each `PT1H` with its own start, and
/// per interval `LOAD_SHED_DELTA_AVAILABLE` (the 10th percentile) and the three percentiles in
/// kW, `readingType` `FORECAST`. The report's name says the cost ceiling and the objective the
/// figures are within. An hour whose figures are not finite, negative or out of order (the
/// forecast makes none) is left out; `None` when no hour is left.
fn build_forecast_report(
    id: &str,
    program_id: &str,
    ven_name: &str,
    forecast: &Forecast,
    objective: &str,
) -> Option<Report> {
    // kW to the watt; `None` for what JSON cannot carry.
    let kw = |w: f64| serde_json::Number::from_f64(w.round() / 1000.0).map(PayloadValue::Number);
    let one = |kind: &str, value: PayloadValue| ValuesMap {
        kind: kind.into(),
        values: vec![value],
    };
    let hour = IsoDuration::from_time_delta(chrono::TimeDelta::hours(1));
    let mut intervals = Vec::new();
    for (start, band) in forecast.hourly() {
        if !(band.p10 >= 0.0 && band.p10 <= band.p50 && band.p50 <= band.p90) {
            continue;
        }
        let (Some(p10), Some(p50), Some(p90)) = (kw(band.p10), kw(band.p50), kw(band.p90)) else {
            continue;
        };
        intervals.push(Interval {
            id: intervals.len() as i64,
            interval_period: Some(IntervalPeriod {
                start: Some(start),
                duration: hour,
                randomize_start: None,
            }),
            payloads: vec![
                one("LOAD_SHED_DELTA_AVAILABLE", p10.clone()),
                one(FORECAST_P10_TYPE, p10),
                one(FORECAST_P50_TYPE, p50),
                one(FORECAST_P90_TYPE, p90),
            ],
        });
    }
    let first = intervals.first()?.interval_period.as_ref().and_then(|p| p.start);
    let descriptor = |kind: &str, confidence: u8| ReportPayloadDescriptor {
        object_type: Some("REPORT_PAYLOAD_DESCRIPTOR".into()),
        payload_type: kind.into(),
        reading_type: Some("FORECAST".into()),
        units: Some("KW".into()),
        extra: [("confidence".to_string(), serde_json::Value::from(confidence))]
            .into_iter()
            .collect(),
    };
    Some(Report {
        program_id: Some(program_id.to_string()),
        event_id: id.to_string(),
        client_name: ven_name.to_string(),
        report_name: Some(format!(
            "flexgate forecast {id}: meter kW the site can shed within {} % of {objective}, made {}",
            (forecast.cost_ceiling * 100.0 * 100.0).round() / 100.0,
            forecast.generated_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )),
        payload_descriptors: Some(vec![
            descriptor("LOAD_SHED_DELTA_AVAILABLE", 90),
            descriptor(FORECAST_P10_TYPE, 90),
            descriptor(FORECAST_P50_TYPE, 50),
            descriptor(FORECAST_P90_TYPE, 10),
        ]),
        resources: vec![ReportResource {
            resource_name: "AGGREGATED_REPORT".into(),
            interval_period: Some(IntervalPeriod {
                start: first,
                duration: hour,
                randomize_start: None,
            }),
            intervals,
        }],
        ..Report::default()
    })
}

/// What a failed request tells about the VTN's answer: a status it refused with, or no answer.
fn answer_of(e: &ClientError) -> PeerAnswer {
    let refused = |status: u16| PeerAnswer::Refused {
        status: Some(status),
        detail: e.to_string(),
    };
    match e {
        ClientError::Connect { .. } | ClientError::Timeout { .. } | ClientError::Transport { .. } => {
            PeerAnswer::Unanswered { detail: e.to_string() }
        }
        ClientError::Unauthorized { .. } => refused(401),
        ClientError::Forbidden { .. } => refused(403),
        ClientError::NotFound { .. } => refused(404),
        ClientError::Status { status, .. } => refused(*status),
        _ => PeerAnswer::Refused {
            status: None,
            detail: e.to_string(),
        },
    }
}

/// DEMAND (mean kW) and USAGE (kWh) per event interval, from the meter readings inside it, and
/// the flexibility the site offered for it (see the module docs).
fn build_report(
    id: &str,
    ven_name: &str,
    tracked: &Tracked,
    meter: &[(DateTime<Utc>, f64)],
    now: DateTime<Utc>,
) -> Option<Report> {
    let mut intervals = Vec::new();
    for span in &tracked.spans {
        let end = span.end.unwrap_or(now).min(tracked.end.unwrap_or(now)).min(now);
        let inside: Vec<f64> = meter
            .iter()
            .filter(|(t, _)| *t >= span.start && *t <= end)
            .map(|(_, kw)| *kw)
            .collect();
        if inside.is_empty() || end <= span.start {
            continue;
        }
        let mean_kw = inside.iter().sum::<f64>() / inside.len() as f64;
        let hours = (end - span.start).num_seconds() as f64 / 3600.0;
        let number = |v: f64| {
            serde_json::Number::from_f64((v * 1000.0).round() / 1000.0)
                .map_or(PayloadValue::Text(v.to_string()), PayloadValue::Number)
        };
        intervals.push(Interval {
            id: span.interval_id,
            interval_period: Some(IntervalPeriod {
                start: Some(span.start),
                duration: chrono::TimeDelta::try_seconds((end - span.start).num_seconds())
                    .and_then(IsoDuration::from_time_delta),
                randomize_start: None,
            }),
            payloads: [
                ValuesMap {
                    kind: "DEMAND".into(),
                    values: vec![number(mean_kw)],
                },
                ValuesMap {
                    kind: "USAGE".into(),
                    values: vec![number(mean_kw * hours)],
                },
            ]
            .into_iter()
            .chain(
                span.offered
                    .as_deref()
                    .map_or_else(Vec::new, |c| offered_payloads(c, number)),
            )
            .collect(),
        });
    }
    if intervals.is_empty() {
        return None;
    }
    let descriptor = |kind: &str, units: &str, reading: &str| ReportPayloadDescriptor {
        object_type: Some("REPORT_PAYLOAD_DESCRIPTOR".into()),
        payload_type: kind.into(),
        reading_type: Some(reading.into()),
        units: Some(units.into()),
        extra: Default::default(),
    };
    let mut descriptors = vec![
        descriptor("DEMAND", "KW", "DIRECT_READ"),
        descriptor("USAGE", "KWH", "DIRECT_READ"),
    ];
    if tracked.spans.iter().any(|s| s.offered.is_some()) {
        descriptors.extend([
            descriptor("LOAD_SHED_DELTA_AVAILABLE", "KW", "ESTIMATED"),
            descriptor(SHED_LEVELS_TYPE, "KW", "ESTIMATED"),
            descriptor(SHED_COST_TYPE, "PERCENT", "ESTIMATED"),
        ]);
    }
    Some(Report {
        event_id: id.to_string(),
        client_name: ven_name.to_string(),
        report_name: Some(format!("flexgate {id}")),
        payload_descriptors: Some(descriptors),
        resources: vec![ReportResource {
            resource_name: "AGGREGATED_REPORT".into(),
            interval_period: None,
            intervals,
        }],
        ..Report::default()
    })
}

/// What a flexibility curve offered, as report payloads: the most the site could shed at the
/// meter, and the curve's levels with their expected cost.
fn offered_payloads(curve: &SiteFlexibility, number: impl Fn(f64) -> PayloadValue) -> Vec<ValuesMap> {
    vec![
        ValuesMap {
            kind: "LOAD_SHED_DELTA_AVAILABLE".into(),
            values: vec![number(curve.most_meter_shed_kw())],
        },
        ValuesMap {
            kind: SHED_LEVELS_TYPE.into(),
            values: curve.points.iter().map(|p| number(p.meter_shed_kw)).collect(),
        },
        ValuesMap {
            kind: SHED_COST_TYPE.into(),
            values: curve.points.iter().map(|p| number(100.0 * p.progress_lost)).collect(),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexgate_openadr::oadr3::ReportDescriptor;

    use crate::grid::test_forecast::forecast;

    fn numbers(report: &Report, kind: &str) -> Vec<f64> {
        report.resources[0]
            .intervals
            .iter()
            .map(|i| {
                let p = i.payloads.iter().find(|p| p.kind == kind).expect(kind);
                assert_eq!(p.values.len(), 1, "one value per payload");
                p.values[0].to_json().as_f64().expect("a number")
            })
            .collect()
    }

    #[test]
    fn the_forecast_report_has_an_hourly_interval_each_with_its_band_in_kw() {
        let f = forecast(|k| 900_000.0 - 1000.0 * k as f64 + 0.4);
        let report = build_forecast_report("e1", "p1", "dc-east", &f, "progress").expect("a report");
        assert_eq!(
            (
                report.event_id.as_str(),
                report.program_id.as_deref(),
                report.client_name.as_str()
            ),
            ("e1", Some("p1"), "dc-east")
        );
        let name = report.report_name.clone().unwrap_or_default();
        assert!(name.contains("10 % of progress"), "{name}");
        let intervals = &report.resources[0].intervals;
        assert_eq!(intervals.len(), 48);
        for (h, i) in intervals.iter().enumerate() {
            let period = i.interval_period.as_ref().expect("each interval says when");
            assert_eq!(i.id, h as i64);
            assert_eq!(period.start, Some(f.steps[4 * h].start));
            assert_eq!(
                period.duration,
                IsoDuration::from_time_delta(chrono::TimeDelta::hours(1))
            );
        }
        let (p10, p50, p90) = (
            numbers(&report, FORECAST_P10_TYPE),
            numbers(&report, FORECAST_P50_TYPE),
            numbers(&report, FORECAST_P90_TYPE),
        );
        assert_eq!(
            numbers(&report, "LOAD_SHED_DELTA_AVAILABLE"),
            p10,
            "the standard type is the firm figure"
        );
        assert_eq!((p10[0], p10[1]), (900.0, 896.0), "kW to the watt");
        assert!((0..48).all(|h| p10[h] <= p50[h] && p50[h] <= p90[h]));
        let descriptors = report.payload_descriptors.as_deref().unwrap_or_default();
        let described: Vec<_> = descriptors
            .iter()
            .map(|d| {
                (
                    d.payload_type.as_str(),
                    d.reading_type.as_deref(),
                    d.units.as_deref(),
                    d.extra.get("confidence").and_then(serde_json::Value::as_u64),
                )
            })
            .collect();
        assert_eq!(
            described,
            [
                ("LOAD_SHED_DELTA_AVAILABLE", Some("FORECAST"), Some("KW"), Some(90)),
                (FORECAST_P10_TYPE, Some("FORECAST"), Some("KW"), Some(90)),
                (FORECAST_P50_TYPE, Some("FORECAST"), Some("KW"), Some(50)),
                (FORECAST_P90_TYPE, Some("FORECAST"), Some("KW"), Some(10)),
            ]
        );
    }

    #[test]
    fn an_hour_json_cannot_carry_is_left_out_and_no_hour_means_no_report() {
        let f = forecast(|k| if k == 4 { f64::NAN } else { 500_000.0 });
        let report = build_forecast_report("e1", "p1", "v", &f, "tokens").expect("the other hours");
        assert_eq!(report.resources[0].intervals.len(), 47);
        let text = serde_json::to_string(&report).expect("serialises");
        assert!(!text.contains("null") && !text.contains("NaN"), "{text}");
        assert!(build_forecast_report("e1", "p1", "v", &forecast(|_| f64::NAN), "tokens").is_none());
        let mut empty = forecast(|_| 1.0);
        empty.steps.clear();
        assert!(build_forecast_report("e1", "p1", "v", &empty, "tokens").is_none());
    }

    #[test]
    fn a_forecast_is_owed_only_to_an_event_that_asks_for_one_of_ours() {
        let ask = |kind: &str, reading: Option<&str>, historical: Option<bool>| Event {
            report_descriptors: Some(vec![ReportDescriptor {
                payload_type: kind.into(),
                reading_type: reading.map(Into::into),
                historical,
                ..ReportDescriptor::default()
            }]),
            ..Event::default()
        };
        assert!(asks_for_forecast(&ask(
            "LOAD_SHED_DELTA_AVAILABLE",
            Some("FORECAST"),
            Some(true)
        )));
        assert!(asks_for_forecast(&ask("LOAD_SHED_DELTA_AVAILABLE", None, Some(false))));
        assert!(asks_for_forecast(&ask(FORECAST_P50_TYPE, Some("FORECAST"), None)));
        assert!(!asks_for_forecast(&ask(
            "LOAD_SHED_DELTA_AVAILABLE",
            Some("DIRECT_READ"),
            Some(true)
        )));
        assert!(!asks_for_forecast(&ask(
            "USAGE_FORECAST",
            Some("FORECAST"),
            Some(false)
        )));
        assert!(!asks_for_forecast(&Event::default()));
    }
}
