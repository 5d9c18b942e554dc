//! The season's settlement: every event of a period with the program that settles it, its
//! baseline by that program's method on the utility's interval data (imported first), what was
//! delivered against what was committed (the performance factor), the estimated payment or
//! penalty, and the quality of the data it stands on; with totals. What `flexgate settlement`
//! and `GET /v1/settlement` answer.
//!
//! It reads the interval store only (intervals, curtailment windows, the events' latest
//! interpretations), never the whole ledger, so a season of 1 Hz meter samples is not walked
//! again: the store is brought up to date with the ledger first.
//!
//! Committed reduction, per event: the program's `committed_kw` when `[settlement]` states one;
//! otherwise the event's own ask where it states a reduction in kW; otherwise, for a ceiling,
//! the adjusted baseline's mean over the event less the lowest ceiling (what it took to be
//! under the ceiling). A firm service level has no reduction: compliance is the meter at or
//! under the level. Payment: delivered energy (kWh over the event's intervals) × price;
//! penalty: the energy short of the commitment × penalty price.

use crate::intervals::{EventSummary, IntervalStore, StoreError};
use crate::reports::baseline::LOOKBACK;
use crate::settlement::{ProgramConfig, SettlementConfig};
use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use flexgate_policies::baseline::{
    BaselineInput, BaselineReport, EventPerformance, Method, MethodId, compute, performance,
};
use flexgate_policies::intervals::{IntervalQuality, IntervalSeries, IntervalSource};
use serde::Serialize;

/// The report's schema name.
pub const SETTLEMENT_SCHEMA: &str = "flexgate.settlement/1";

/// A season's settlement.
#[derive(Debug, Clone, Serialize)]
pub struct SettlementReport {
    /// [`SETTLEMENT_SCHEMA`].
    pub schema: &'static str,
    /// The period: events starting in `[from, to)`.
    pub from: DateTime<Utc>,
    /// See `from`.
    pub to: DateTime<Utc>,
    /// When it was computed.
    pub generated_at: DateTime<Utc>,
    /// The site's zone (days and clock times).
    pub time_zone: String,
    /// The ledger's head when computed `(seq, hash)`: the report is reproducible from the
    /// ledger up to there.
    pub ledger_head: (u64, String),
    /// `ledger_head` signed with the site's key (see `flexgate log verify --checkpoints`);
    /// absent when the report was made without one.
    pub ledger_head_signature: Option<crate::ledger::site_key::HeadSignature>,
    /// Per event, by start.
    pub events: Vec<EventSettlement>,
    /// Over the events settled.
    pub totals: Totals,
}

/// One event's settlement.
#[derive(Debug, Clone, Serialize)]
pub struct EventSettlement {
    /// The event.
    pub event_id: String,
    /// Its revision as last interpreted.
    pub revision: u64,
    /// The program it named.
    pub program: Option<String>,
    /// The program that settles it (`None`: no `[settlement]` program applies, so the audit's
    /// meter before/after is used).
    pub settled_by: Option<String>,
    /// Its window.
    pub start: DateTime<Utc>,
    /// See `start`.
    pub end: Option<DateTime<Utc>>,
    /// What it asked, in words.
    pub targets: Vec<String>,
    /// The method and its version.
    pub method: MethodId,
    /// See `method`.
    pub version: u32,
    /// The reduction committed, kW, and where that figure comes from (`program`, `event`,
    /// `ceiling`).
    pub committed_kw: Option<f64>,
    /// See `committed_kw`.
    pub committed_from: &'static str,
    /// The baseline, or why there is none.
    pub baseline: Result<BaselineReport, String>,
    /// Delivered against committed, per interval and for the event.
    pub performance: Option<EventPerformance>,
    /// Delivered energy over the event, kWh (the mean delivered kW × its hours).
    pub delivered_kwh: Option<f64>,
    /// Energy short of the commitment, kWh.
    pub shortfall_kwh: Option<f64>,
    /// Estimated payment (delivered × price), in the price's currency.
    pub payment: Option<f64>,
    /// Estimated penalty (shortfall × penalty price).
    pub penalty: Option<f64>,
    /// The event's intervals by quality and source: what the figures stand on.
    pub data: DataQuality,
    /// The share of the event's window the site was curtailing for it (from the ledger's
    /// lifecycle records): a late start, an early end or an operator's opt-out lowers it.
    pub availability: Option<f64>,
    /// What the flexibility curve promised for the ask before the event (planner's estimate:
    /// the meter kW it would shed and the objective it would cost) and what the event cost
    /// the jobs, **measured** from their reported throughput (jobs that reported nothing are
    /// listed as unmeasured, never estimated). `None`: the site never planned for it.
    pub cost: Option<flexgate_policies::control::job_cost::EventCost>,
    /// What the site had declared for the event's hours (the latest declaration made before it
    /// began), against what it could shed when the event came (the flexibility curve then);
    /// set it against `performance.delivered_kw`. `None`: nothing declared for those hours.
    pub declared: Option<flexgate_policies::forecast::declare::DeclaredForEvent>,
    /// What a reader must know before trusting the figures: load lowered inside the
    /// adjustment window before the event (pre-curtailment lowers the baseline, hence the
    /// payment), a curtailment of the site inside it, estimated or missing intervals.
    pub warnings: Vec<String>,
}

/// How far below the baseline days the event day's load in the adjustment window may be
/// before the report warns of pre-curtailment (a share of the baseline days' load there).
pub const PRE_CURTAILMENT_SHARE: f64 = 0.05;

/// Intervals by quality and source.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DataQuality {
    /// Measured.
    pub measured: usize,
    /// Estimated.
    pub estimated: usize,
    /// Missing (absent, or present as missing).
    pub missing: usize,
    /// From the utility's imported data.
    pub imported: usize,
    /// From the gateway's own readings.
    pub gateway: usize,
}

/// Over the events of the period.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// Events in the period (test events excluded).
    pub events: usize,
    /// Events with a baseline.
    pub settled: usize,
    /// Delivered energy, kWh.
    pub delivered_kwh: f64,
    /// Energy short of the commitments, kWh.
    pub shortfall_kwh: f64,
    /// Estimated payments.
    pub payment: f64,
    /// Estimated penalties.
    pub penalty: f64,
    /// The mean of the events' performance factors.
    pub mean_performance_factor: Option<f64>,
    /// The mean, over events with measured jobs, of the GPU-weighted progress the measured
    /// jobs kept.
    pub mean_measured_progress_kept: Option<f64>,
    /// Every event's intervals together.
    pub data: DataQuality,
}

/// The method an event is settled on: its program's, else the audit's meter before/after.
fn method_for(program: Option<&ProgramConfig>) -> Method {
    program.map_or_else(
        || Method::MeterBeforeAfter {
            before_s: 900,
            after_s: 900,
        },
        |p| p.baseline.clone(),
    )
}

/// Build the report over events starting in `[from, to)` from `store` (up to date with the
/// ledger whose head is `head`).
pub fn build(
    store: &IntervalStore,
    config: &SettlementConfig,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    time_zone: Tz,
    head: (u64, String),
    now: DateTime<Utc>,
) -> Result<SettlementReport, StoreError> {
    let events: Vec<EventSummary> = store.events(from, to)?.into_iter().filter(|e| !e.test).collect();
    // One read of the data for the whole season and its look-back.
    let data = store.settlement_series(from - LOOKBACK, to + Duration::days(2))?;
    let mut settled = Vec::with_capacity(events.len());
    for event in &events {
        settled.push(settle(store, config, event, &data, time_zone, now)?);
    }
    let totals = totals(&settled);
    Ok(SettlementReport {
        schema: SETTLEMENT_SCHEMA,
        from,
        to,
        generated_at: now,
        time_zone: time_zone.name().to_string(),
        ledger_head_signature: None,
        ledger_head: head,
        events: settled,
        totals,
    })
}

fn settle(
    store: &IntervalStore,
    config: &SettlementConfig,
    event: &EventSummary,
    data: &IntervalSeries,
    time_zone: Tz,
    now: DateTime<Utc>,
) -> Result<EventSettlement, StoreError> {
    let program = config.program_for(event.program.as_deref());
    let method = method_for(program);
    // The window settled: the event's own (an open-ended one up to now). Intervals not
    // metered yet count as missing.
    let end = event.end.unwrap_or(now).max(event.start);
    let holidays = program.map_or_else(
        || crate::reports::baseline::default_holidays(method.id()),
        ProgramConfig::calendar,
    );
    // Every other day the site curtailed on is an event day; this event's own day is the
    // event's, which the methods know.
    let event_days = store.event_days(event.start - LOOKBACK, event.start, time_zone, now)?;
    let input = BaselineInput {
        data,
        start: event.start,
        end,
        time_zone,
        event_days: &event_days,
        holidays: &holidays,
    };
    let baseline = compute(&method, &input).map_err(|e| e.to_string());
    let metered = IntervalSeries::new(
        data.between(event.start, end)
            .iter()
            .filter(|i| i.start >= event.start && i.end <= end)
            .cloned()
            .collect(),
    )
    .unwrap_or_default();
    let quality = quality_of(&metered);
    let (committed_kw, committed_from) = match (program.and_then(|p| p.committed_kw), event.asked_reduction_kw) {
        (Some(kw), _) => (Some(kw), "program"),
        (None, Some(kw)) => (Some(kw), "event"),
        (None, None) => match (&baseline, event.lowest_ceiling_kw) {
            (Ok(report), Some(ceiling)) if !matches!(method, Method::FirmServiceLevel { .. }) => {
                (report.mean_adjusted_kw().map(|b| (b - ceiling).max(0.0)), "ceiling")
            }
            _ => (None, "none"),
        },
    };
    let performance = baseline
        .as_ref()
        .ok()
        .map(|report| performance(report, &metered, committed_kw));
    let hours = (end - event.start).num_seconds().max(0) as f64 / 3600.0;
    let delivered_kwh = performance.as_ref().and_then(|p| p.delivered_kw).map(|kw| kw * hours);
    let shortfall_kwh = match (performance.as_ref().and_then(|p| p.delivered_kw), committed_kw) {
        (Some(delivered), Some(committed)) => Some((committed - delivered).max(0.0) * hours),
        _ => None,
    };
    let payment = program
        .and_then(|p| p.price_per_mwh)
        .and_then(|price| Some(delivered_kwh?.max(0.0) / 1000.0 * price));
    let penalty = program
        .and_then(|p| p.penalty_per_mwh)
        .and_then(|price| Some(shortfall_kwh? / 1000.0 * price));
    let warnings = warnings(store, event, baseline.as_ref().ok(), &quality)?;
    let availability = availability(store, event, end, now)?;
    let cost = store.event_cost(&event.id)?;
    let declared = flexgate_policies::forecast::declare::for_event(
        &store.declarations_before(event.start)?,
        event.start,
        end,
        store.curve_before(event.start)?,
    );
    Ok(EventSettlement {
        event_id: event.id.clone(),
        revision: event.revision,
        program: event.program.clone(),
        settled_by: program.map(|p| p.name.clone()),
        start: event.start,
        end: event.end,
        targets: event.targets.clone(),
        method: method.id(),
        version: method.version(),
        committed_kw,
        committed_from,
        baseline,
        performance,
        delivered_kwh,
        shortfall_kwh,
        payment,
        penalty,
        data: quality,
        availability,
        cost,
        declared,
        warnings,
    })
}

/// The share of `[event.start, end)` (so far) the site was curtailing for the event.
fn availability(
    store: &IntervalStore,
    event: &EventSummary,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<Option<f64>, StoreError> {
    // Only the part of the window that has come: an event not begun has no availability yet.
    let end = end.min(now);
    let window = (end - event.start).num_milliseconds();
    if window <= 0 {
        return Ok(None);
    }
    let mut covered = 0;
    for (id, from, to) in store.curtailments(event.start, end)? {
        if id == event.id {
            let from = from.max(event.start);
            let to = to.unwrap_or(now).min(end);
            covered += (to - from).num_milliseconds().max(0);
        }
    }
    Ok(Some((covered as f64 / window as f64).min(1.0)))
}

/// The warnings of one event (see [`EventSettlement::warnings`]).
fn warnings(
    store: &IntervalStore,
    event: &EventSummary,
    baseline: Option<&BaselineReport>,
    quality: &DataQuality,
) -> Result<Vec<String>, StoreError> {
    let mut out = Vec::new();
    if let Some(a) = baseline.and_then(|b| b.adjustment.as_ref()) {
        if let (Some(day), Some(days)) = (a.event_day_kw, a.baseline_kw)
            && days > 0.0
            && day < days * (1.0 - PRE_CURTAILMENT_SHARE)
        {
            out.push(format!(
                "the load in the adjustment window before the event ({} to {}) was {:.1} % below the baseline days' there                  ({day:.1} kW against {days:.1} kW): a load lowered before an event lowers its baseline and the payment",
                a.window_start.to_rfc3339(),
                a.window_end.to_rfc3339(),
                (1.0 - day / days) * 100.0
            ));
        }
        for (other, start, end) in store.curtailments(a.window_start, a.window_end)? {
            if other != event.id {
                out.push(format!(
                    "the site was curtailing for event {other} (from {}{}) inside this event's adjustment window",
                    start.to_rfc3339(),
                    end.map_or_else(String::new, |e| format!(" to {}", e.to_rfc3339()))
                ));
            }
        }
    }
    if quality.estimated > 0 || quality.missing > 0 {
        out.push(format!(
            "{} of the event's intervals are estimated and {} missing: the figures stand on them as labelled",
            quality.estimated, quality.missing
        ));
    }
    Ok(out)
}

fn quality_of(series: &IntervalSeries) -> DataQuality {
    let mut q = DataQuality::default();
    for i in series.intervals() {
        match i.quality {
            IntervalQuality::Measured => q.measured += 1,
            IntervalQuality::Estimated => q.estimated += 1,
            IntervalQuality::Missing => q.missing += 1,
        }
        match i.source {
            IntervalSource::Gateway => q.gateway += 1,
            IntervalSource::Imported(_) => q.imported += 1,
        }
    }
    q
}

fn totals(events: &[EventSettlement]) -> Totals {
    let factors: Vec<f64> = events
        .iter()
        .filter_map(|e| e.performance.as_ref()?.performance_factor)
        .collect();
    let kept: Vec<f64> = events
        .iter()
        .filter_map(|e| Some(e.cost.as_ref()?.measured_kept?.progress_kept_share))
        .collect();
    let mut t = Totals {
        mean_measured_progress_kept: (!kept.is_empty()).then(|| kept.iter().sum::<f64>() / kept.len() as f64),
        events: events.len(),
        settled: events.iter().filter(|e| e.baseline.is_ok()).count(),
        mean_performance_factor: (!factors.is_empty()).then(|| factors.iter().sum::<f64>() / factors.len() as f64),
        ..Totals::default()
    };
    for e in events {
        t.delivered_kwh += e.delivered_kwh.unwrap_or(0.0);
        t.shortfall_kwh += e.shortfall_kwh.unwrap_or(0.0);
        t.payment += e.payment.unwrap_or(0.0);
        t.penalty += e.penalty.unwrap_or(0.0);
        t.data.measured += e.data.measured;
        t.data.estimated += e.data.estimated;
        t.data.missing += e.data.missing;
        t.data.imported += e.data.imported;
        t.data.gateway += e.data.gateway;
    }
    t
}

/// One event's promise and cost in words, for the tables: `(promised shed kW, promised
/// progress lost, measured progress kept, jobs measured of planned)`, `—` where unknown.
fn promise_and_cost(e: &EventSettlement) -> (String, String, String, String) {
    let dash = || "—".to_string();
    let promised = e.cost.as_ref().and_then(|c| c.promised);
    let measured = e
        .cost
        .as_ref()
        .map(|c| c.jobs.iter().filter(|j| j.throughput == "measured").count());
    (
        promised.map_or_else(dash, |p| format!("{:.1}", p.meter_shed_kw)),
        promised.map_or_else(dash, |p| format!("{:.1} %", p.progress_lost * 100.0)),
        e.cost
            .as_ref()
            .and_then(|c| c.measured_kept)
            .map_or_else(dash, |k| format!("{:.1} %", k.progress_kept_share * 100.0)),
        match (measured, e.cost.as_ref()) {
            (Some(m), Some(c)) => format!("{m} of {}", c.jobs_planned),
            _ => dash(),
        },
    )
}

/// The signature's line for people.
fn signature_words(report: &SettlementReport) -> String {
    report.ledger_head_signature.as_ref().map_or_else(
        || "The ledger head is not signed (no site key).".to_string(),
        |s| {
            format!(
                "Ledger head signed at {} with the site key {} ({}): signature {}. Check it, and the ledger against it, \
                 with `flexgate log verify --checkpoints` on this report's JSON.",
                s.signed_at, s.public_key, s.scheme, s.signature
            )
        },
    )
}

impl SettlementReport {
    /// The report with its ledger head signed by the site's `key` at the time it was computed.
    #[must_use]
    pub fn signed(mut self, key: &crate::ledger::site_key::SiteKey) -> Self {
        self.ledger_head_signature = Some(key.sign_head(self.ledger_head.0, &self.ledger_head.1, self.generated_at));
        self
    }

    /// The report for people (Markdown): one row per event, then the totals; every figure says
    /// its method and what data it stands on.
    #[must_use]
    pub fn to_markdown(&self, tz: Tz) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# Settlement, {} to {}\n\nComputed {} on the ledger up to record {} ({}). Baselines by each program's method on the \
             utility's imported interval data where there is, the gateway's own readings elsewhere; payments are estimates.\n",
            self.from.with_timezone(&tz).format("%Y-%m-%d"),
            self.to.with_timezone(&tz).format("%Y-%m-%d"),
            self.generated_at.to_rfc3339(),
            self.ledger_head.0,
            self.ledger_head.1
        );
        let _ = writeln!(
            out,
            "| event | start ({}) | program | method | committed kW | delivered kW | performance | delivered kWh | payment | penalty | data (measured/estimated/missing; imported/gateway) |\n|---|---|---|---|---|---|---|---|---|---|---|",
            self.time_zone
        );
        let num = |v: Option<f64>, d: usize| v.map_or_else(|| "—".to_string(), |v| format!("{v:.d$}"));
        for e in &self.events {
            let perf = e.performance.as_ref();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} v{} | {} ({}) | {} | {} | {} | {} | {} | {}/{}/{}; {}/{} |",
                e.event_id,
                e.start.with_timezone(&tz).format("%Y-%m-%d %H:%M"),
                e.settled_by.as_deref().unwrap_or("none"),
                e.method,
                e.version,
                num(e.committed_kw, 1),
                e.committed_from,
                num(perf.and_then(|p| p.delivered_kw), 1),
                perf.and_then(|p| p.performance_factor)
                    .map_or_else(|| "—".to_string(), |f| format!("{:.0} %", f * 100.0)),
                num(e.delivered_kwh, 1),
                num(e.payment, 2),
                num(e.penalty, 2),
                e.data.measured,
                e.data.estimated,
                e.data.missing,
                e.data.imported,
                e.data.gateway
            );
            if let Err(why) = &e.baseline {
                let _ = writeln!(out, "|  | no baseline: {why} |  |  |  |  |  |  |  |  |  |");
            }
            for w in &e.warnings {
                let _ = writeln!(out, "|  | warning: {w} |  |  |  |  |  |  |  |  |  |");
            }
        }
        let t = &self.totals;
        let _ = writeln!(
            out,
            "\n**Totals:** {} events, {} with a baseline; delivered {:.1} kWh, short {:.1} kWh; estimated payment {:.2}, penalty {:.2}; \
             mean performance factor {}; progress the jobs kept (measured) {}; intervals measured {}, estimated {}, missing {} \
             (imported {}, gateway {}).",
            t.events,
            t.settled,
            t.delivered_kwh,
            t.shortfall_kwh,
            t.payment,
            t.penalty,
            t.mean_performance_factor
                .map_or_else(|| "—".to_string(), |f| format!("{:.0} %", f * 100.0)),
            t.mean_measured_progress_kept
                .map_or_else(|| "—".to_string(), |k| format!("{:.1} %", k * 100.0)),
            t.data.measured,
            t.data.estimated,
            t.data.missing,
            t.data.imported,
            t.data.gateway
        );
        let _ = writeln!(
            out,
            "\n## Promised against delivered, and what it cost the jobs\n\nPromised: the site's flexibility curve before the event \
             (planner's estimate). Delivered: by the event's baseline method. Kept: measured from the jobs' reported throughput \
             (jobs that reported nothing are not estimated).\n\n\
             | event | availability | promised shed kW (estimate) | delivered kW (method) | promised progress lost (estimate) | progress kept (measured) | jobs measured |\n|---|---|---|---|---|---|---|"
        );
        for e in &self.events {
            let (shed, lost, kept, jobs) = promise_and_cost(e);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} ({}) | {} | {} | {} |",
                e.event_id,
                e.availability
                    .map_or_else(|| "—".to_string(), |a| format!("{:.0} %", a * 100.0)),
                shed,
                num(e.performance.as_ref().and_then(|p| p.delivered_kw), 1),
                e.method,
                lost,
                kept,
                jobs
            );
        }
        let _ = writeln!(
            out,
            "\n## Declared against what the site could shed and delivered\n\nDeclared: the latest declaration made before the \
             event, its least hour over the event (from the forecast at its confidence, or an operator's figure with a reason). \
             Could shed: the flexibility curve when the event came, within the declaration's cost ceiling (planner's estimate). \
             Delivered: by the event's baseline method.\n\n\
             | event | declared kW | confidence | declared at | hours declared | overridden | could shed kW (estimate) | delivered kW (method) |\n|---|---|---|---|---|---|---|---|"
        );
        for e in &self.events {
            let Some(d) = &e.declared else {
                let _ = writeln!(
                    out,
                    "| {} | — | | | | | | {} ({}) |",
                    e.event_id,
                    num(e.performance.as_ref().and_then(|p| p.delivered_kw), 1),
                    e.method
                );
                continue;
            };
            let _ = writeln!(
                out,
                "| {} | {:.1} | {} % | {} by {} | {} of {} | {} | {} | {} ({}) |",
                e.event_id,
                d.declared_kw,
                d.confidence,
                d.declared_at.with_timezone(&tz).format("%Y-%m-%d %H:%M"),
                d.operator.replace('|', "/"),
                d.hours_declared,
                d.hours_spanned,
                if d.overridden.is_empty() {
                    "—".to_string()
                } else {
                    d.overridden.join("; ").replace('|', "/")
                },
                num(d.could_shed_kw, 1),
                num(e.performance.as_ref().and_then(|p| p.delivered_kw), 1),
                e.method,
            );
        }
        let _ = writeln!(out, "\n{}", signature_words(self));
        out
    }

    /// One CSV row per event (a header first).
    #[must_use]
    pub fn to_csv(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::from(
            "event_id,revision,start,end,program,method,version,committed_kw,committed_from,delivered_kw,performance_factor,delivered_kwh,shortfall_kwh,payment,penalty,measured,estimated,missing,imported,gateway,baseline_refused,availability,promised_shed_kw,promised_progress_lost,measured_progress_kept,jobs_planned,jobs_measured,declared_kw,declared_confidence,could_shed_kw\n",
        );
        let num = |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v:.3}"));
        let field = |s: &str| s.replace([',', '\n', '"'], " ");
        for e in &self.events {
            let perf = e.performance.as_ref();
            let _ = writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                field(&e.event_id),
                e.revision,
                e.start.to_rfc3339(),
                e.end.map(|t| t.to_rfc3339()).unwrap_or_default(),
                field(e.settled_by.as_deref().unwrap_or("")),
                e.method,
                e.version,
                num(e.committed_kw),
                e.committed_from,
                num(perf.and_then(|p| p.delivered_kw)),
                num(perf.and_then(|p| p.performance_factor)),
                num(e.delivered_kwh),
                num(e.shortfall_kwh),
                num(e.payment),
                num(e.penalty),
                e.data.measured,
                e.data.estimated,
                e.data.missing,
                e.data.imported,
                e.data.gateway,
                e.baseline.as_ref().err().map(|s| field(s)).unwrap_or_default(),
                num(e.availability),
                num(e.cost.as_ref().and_then(|c| c.promised).map(|p| p.meter_shed_kw)),
                num(e.cost.as_ref().and_then(|c| c.promised).map(|p| p.progress_lost)),
                num(e
                    .cost
                    .as_ref()
                    .and_then(|c| c.measured_kept)
                    .map(|k| k.progress_kept_share)),
                e.cost.as_ref().map(|c| c.jobs_planned.to_string()).unwrap_or_default(),
                e.cost
                    .as_ref()
                    .map(|c| c.jobs.iter().filter(|j| j.throughput == "measured").count().to_string())
                    .unwrap_or_default(),
                num(e.declared.as_ref().map(|d| d.declared_kw)),
                e.declared
                    .as_ref()
                    .map(|d| d.confidence.to_string())
                    .unwrap_or_default(),
                num(e.declared.as_ref().and_then(|d| d.could_shed_kw)),
            );
        }
        out
    }
}

/// A day (`2026-07-01`, UTC midnight) or a time (RFC 3339), as the period's ends are given.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Ok(t.with_timezone(&Utc));
    }
    let day: chrono::NaiveDate = text
        .parse()
        .map_err(|_| format!("{text:?} is neither a day (YYYY-MM-DD) nor a time (RFC 3339)"))?;
    Ok(day.and_time(chrono::NaiveTime::MIN).and_utc())
}

/// Text for HTML: `<`, `>`, `&` and quotes escaped (event ids and program names come from
/// outside).
fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

impl SettlementReport {
    /// The report as one printable HTML page with its chart inline (no script, no outside
    /// resource: it prints to PDF as it shows). Every figure names its method and what data it
    /// stands on (imported from the utility, the gateway's own, estimated or missing).
    #[must_use]
    pub fn to_html(&self, tz: Tz) -> String {
        use std::fmt::Write as _;
        let num = |v: Option<f64>, d: usize| v.map_or_else(|| "—".to_string(), |v| format!("{v:.d$}"));
        let chart = flexgate_plot::Chart::new(
            "Delivered against committed reduction, per event",
            "event, in order of its start",
            "kW",
        )
        .y_from_zero(true)
        .series(flexgate_plot::Series::new(
            "delivered (kW)",
            self.events
                .iter()
                .enumerate()
                .filter_map(|(i, e)| Some((i as f64 + 1.0, e.performance.as_ref()?.delivered_kw?))),
        ))
        .series(
            flexgate_plot::Series::new(
                "committed (kW)",
                self.events
                    .iter()
                    .enumerate()
                    .filter_map(|(i, e)| Some((i as f64 + 1.0, e.committed_kw?))),
            )
            .style(flexgate_plot::LineStyle::Dashed),
        )
        .to_svg();
        let mut out = String::new();
        let t = &self.totals;
        let _ = write!(
            out,
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Settlement {from} to {to}</title>\n\
             <style>body{{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#111}}table{{border-collapse:collapse;width:100%;margin:12px 0}}\
             th,td{{border:1px solid #bbb;padding:4px 6px;text-align:left;vertical-align:top}}td.num{{text-align:right}}\
             .warn{{color:#8a3b00}}.muted{{color:#555}}dl{{display:grid;grid-template-columns:max-content auto;gap:2px 16px}}\
             @media print{{body{{margin:8mm}}}}</style></head><body>\n\
             <h1>Settlement, {from} to {to}</h1>\n\
             <p class=\"muted\">Computed {generated} on the ledger up to record {seq} (hash <code>{hash}</code>). Each event is \
             settled by its program's baseline method on the utility's imported interval data where there is, the gateway's own \
             readings elsewhere; payments and penalties are estimates. Times in {zone}.</p>\n\
             <dl><dt>Events</dt><dd>{events} ({settled} with a baseline)</dd>\
             <dt>Delivered</dt><dd>{delivered:.1} kWh</dd><dt>Short of commitments</dt><dd>{short:.1} kWh</dd>\
             <dt>Estimated payment</dt><dd>{payment:.2}</dd><dt>Estimated penalty</dt><dd>{penalty:.2}</dd>\
             <dt>Mean performance factor</dt><dd>{factor}</dd>\
             <dt>Progress the jobs kept (measured)</dt><dd>{kept}</dd>\
             <dt>Intervals</dt><dd>{m} measured, {e} estimated, {x} missing; {i} imported from the utility, {g} the gateway's own</dd></dl>\n\
             <figure>{chart}</figure>\n",
            from = self.from.with_timezone(&tz).format("%Y-%m-%d"),
            to = self.to.with_timezone(&tz).format("%Y-%m-%d"),
            generated = self.generated_at.to_rfc3339(),
            seq = self.ledger_head.0,
            hash = esc(&self.ledger_head.1),
            zone = esc(&self.time_zone),
            events = t.events,
            settled = t.settled,
            delivered = t.delivered_kwh,
            short = t.shortfall_kwh,
            payment = t.payment,
            penalty = t.penalty,
            factor = t
                .mean_performance_factor
                .map_or_else(|| "—".to_string(), |f| format!("{:.0} %", f * 100.0)),
            m = t.data.measured,
            e = t.data.estimated,
            x = t.data.missing,
            i = t.data.imported,
            g = t.data.gateway,
            kept = t.mean_measured_progress_kept.map_or_else(
                || "— (no job measured)".to_string(),
                |k| format!("{:.1} % (mean over events)", k * 100.0)
            ),
        );
        let _ = writeln!(
            out,
            "<table><thead><tr><th>Event</th><th>Start</th><th>Program</th><th>Baseline method</th><th>Committed kW</th>\
             <th>Delivered kW</th><th>Performance</th><th>Delivered kWh</th><th>Payment</th><th>Penalty</th><th>Data</th></tr></thead><tbody>"
        );
        for ev in &self.events {
            let perf = ev.performance.as_ref();
            let _ = writeln!(
                out,
                "<tr><td>{id}</td><td>{start}</td><td>{program}</td><td>{method} v{version}</td>\
                 <td class=\"num\">{committed} <span class=\"muted\">({from})</span></td><td class=\"num\">{delivered}</td>\
                 <td class=\"num\">{factor}</td><td class=\"num\">{kwh}</td><td class=\"num\">{payment}</td><td class=\"num\">{penalty}</td>\
                 <td>{m} measured, {e} estimated, {x} missing; {i} imported, {g} gateway</td></tr>",
                id = esc(&ev.event_id),
                start = ev.start.with_timezone(&tz).format("%Y-%m-%d %H:%M"),
                program = esc(ev.settled_by.as_deref().unwrap_or("none (meter before/after)")),
                method = ev.method,
                version = ev.version,
                committed = num(ev.committed_kw, 1),
                from = ev.committed_from,
                delivered = num(perf.and_then(|p| p.delivered_kw), 1),
                factor = perf
                    .and_then(|p| p.performance_factor)
                    .map_or_else(|| "—".to_string(), |f| format!("{:.0} %", f * 100.0)),
                kwh = num(ev.delivered_kwh, 1),
                payment = num(ev.payment, 2),
                penalty = num(ev.penalty, 2),
                m = ev.data.measured,
                e = ev.data.estimated,
                x = ev.data.missing,
                i = ev.data.imported,
                g = ev.data.gateway,
            );
            if let Err(why) = &ev.baseline {
                let _ = writeln!(
                    out,
                    "<tr><td></td><td colspan=\"10\" class=\"warn\">no baseline: {}</td></tr>",
                    esc(why)
                );
            }
            for w in &ev.warnings {
                let _ = writeln!(
                    out,
                    "<tr><td></td><td colspan=\"10\" class=\"warn\">{}</td></tr>",
                    esc(w)
                );
            }
        }
        let _ = writeln!(
            out,
            "</tbody></table>\n<h2>Promised against delivered, and what it cost the jobs</h2>\n\
             <p class=\"muted\">Promised: the site's flexibility curve before the event (planner's estimate). Delivered: by the \
             event's baseline method. Progress kept: measured from the jobs' reported throughput; jobs that reported nothing are \
             not estimated.</p>\n<table><thead><tr><th>Event</th><th>Availability</th><th>Promised shed kW (estimate)</th>\
             <th>Delivered kW (method)</th><th>Promised progress lost (estimate)</th><th>Progress kept (measured)</th>\
             <th>Jobs measured</th></tr></thead><tbody>"
        );
        for ev in &self.events {
            let (shed, lost, kept, jobs) = promise_and_cost(ev);
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{shed}</td><td class=\"num\">{} <span class=\"muted\">({})</span></td>\
                 <td class=\"num\">{lost}</td><td class=\"num\">{kept}</td><td>{jobs}</td></tr>",
                esc(&ev.event_id),
                ev.availability
                    .map_or_else(|| "—".to_string(), |a| format!("{:.0} %", a * 100.0)),
                num(ev.performance.as_ref().and_then(|p| p.delivered_kw), 1),
                ev.method,
            );
        }
        let _ = writeln!(
            out,
            "</tbody></table>\n<h2>Declared against what the site could shed and delivered</h2>\n\
             <p class=\"muted\">Declared: the latest declaration made before the event, its least hour over the event. Could shed: \
             the flexibility curve when the event came, within the declaration's cost ceiling (planner's estimate). Delivered: by \
             the event's baseline method.</p>\n<table><thead><tr><th>Event</th><th>Declared kW</th><th>Confidence</th>\
             <th>Declared</th><th>Overridden</th><th>Could shed kW (estimate)</th><th>Delivered kW (method)</th></tr></thead><tbody>"
        );
        for ev in &self.events {
            let delivered = num(ev.performance.as_ref().and_then(|p| p.delivered_kw), 1);
            let Some(d) = &ev.declared else {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td class=\"num\">—</td><td></td><td></td><td></td><td></td><td class=\"num\">{delivered} <span class=\"muted\">({})</span></td></tr>",
                    esc(&ev.event_id),
                    ev.method
                );
                continue;
            };
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td class=\"num\">{:.1}</td><td class=\"num\">{} %</td><td>{} by {}</td><td>{}</td>\
                 <td class=\"num\">{}</td><td class=\"num\">{delivered} <span class=\"muted\">({})</span></td></tr>",
                esc(&ev.event_id),
                d.declared_kw,
                d.confidence,
                d.declared_at.with_timezone(&tz).format("%Y-%m-%d %H:%M"),
                esc(&d.operator),
                esc(&d.overridden.join("; ")),
                num(d.could_shed_kw, 1),
                ev.method,
            );
        }
        let _ = writeln!(
            out,
            "</tbody></table>\n<p class=\"muted\" id=\"signature\" style=\"word-break:break-all\">{}</p>\n</body></html>",
            esc(&signature_words(self))
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Ledger, NewRecord};
    use chrono::TimeZone;
    use flexgate_policies::control::entry::{Entry, EventInterpreted, Recorded, Upserted};
    use flexgate_policies::event::{
        EventSource, GridEvent, Interval as EventInterval, Phase, Target, Transition, Window,
    };

    fn interpreted(start: DateTime<Utc>) -> Entry {
        Entry::EventInterpreted(EventInterpreted {
            event: GridEvent {
                id: "ev-a".into(),
                revision: 1,
                source: EventSource::Http,
                site: None,
                program: None,
                issued_at: None,
                mandatory: false,
                test: false,
                cancel: false,
                priority: None,
                window: Window {
                    start,
                    ramp_s: 0,
                    duration_s: Some(7200),
                    recovery_s: 0,
                    randomize_start_s: 0,
                },
                intervals: vec![EventInterval {
                    offset_s: 0,
                    duration_s: None,
                    target: Target::Reduction {
                        kw: 100.0,
                        baseline_kw: None,
                    },
                }],
            },
            ceilings: vec![],
            baseline: None,
            pre_event_meter_kw: 1000.0,
            received_at: start - Duration::hours(20),
            outcome: Upserted::New,
            settled_budget: None,
            facility_fingerprint: String::new(),
        })
    }

    fn phase(to: Phase, at: DateTime<Utc>) -> NewRecord {
        NewRecord::from(Recorded::new(
            Entry::EventPhase(Transition {
                event_id: "ev-a".into(),
                from: Phase::Pending,
                to,
                at,
            }),
            None,
        ))
    }

    /// Availability is the share of the event's window (so far) the site curtailed for it; the
    /// head is signed with the key given, and the signature verifies.
    #[tokio::test]
    async fn availability_counts_the_curtailed_share_and_the_head_is_signed() {
        let dir = tempfile::tempdir().expect("dir");
        let start = Utc.with_ymd_and_hms(2026, 7, 1, 20, 0, 0).single().expect("time");
        let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
        // Curtailing from 30 minutes late to the end of the 2-hour window: 75 %.
        ledger
            .append_all(vec![
                NewRecord::from(Recorded::new(interpreted(start), None)),
                phase(Phase::Active, start + Duration::minutes(30)),
                phase(Phase::Completed, start + Duration::hours(2)),
            ])
            .await
            .expect("append");
        let store = IntervalStore::open(dir.path(), true).expect("store");
        store.catch_up(&ledger.reader()).expect("catch up");
        let key = crate::ledger::site_key::SiteKey::load_or_create(dir.path()).expect("key");
        let head = ledger.head();
        let build_at = |now: DateTime<Utc>| {
            build(
                &store,
                &SettlementConfig::default(),
                start - Duration::days(1),
                start + Duration::days(1),
                Tz::UTC,
                head.clone(),
                now,
            )
            .expect("report")
            .signed(&key)
        };
        let after = build_at(start + Duration::days(1));
        let event = &after.events[0];
        assert!(
            (event.availability.expect("availability") - 0.75).abs() < 1e-9,
            "{event:?}"
        );
        // Halfway through, the window so far: 30 of 60 minutes.
        let during = build_at(start + Duration::hours(1));
        assert!((during.events[0].availability.expect("so far") - 0.5).abs() < 1e-9);
        // Before the start, nothing to say yet.
        assert_eq!(build_at(start - Duration::hours(1)).events[0].availability, None);
        let signed = after.ledger_head_signature.as_ref().expect("signed");
        assert_eq!((signed.seq, signed.hash.as_str()), (head.0, head.1.as_str()));
        assert_eq!(signed.verify(Some(&key.public_key())), Ok(()));
        let md = after.to_markdown(Tz::UTC);
        assert!(md.contains("| ev-a | 75 % |") && md.contains(&key.public_key()), "{md}");
        assert!(after.to_csv().lines().nth(1).is_some_and(|l| l.contains(",0.750,")));
        ledger.close().await.expect("close");
    }
}
