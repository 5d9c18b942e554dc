//! Per-event audit: what was asked, how it was read, what was decided and done, and what the
//! meter shows, rebuilt from the ledger alone so an auditor can reproduce it from an export.

use crate::ledger::{Entry, NotAnEntry, Record};
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use flexgate_plot::{self as plot, AxisFormat, Chart, LineStyle, Series};
use flexgate_policies::alloc::Reason;
use flexgate_policies::control::entry::{EventInterpreted, EventReceived, OperatorOptOut, Received, Trimmed};
use flexgate_policies::event::{Ack, Participation, Phase, Transition};
use serde::Serialize;
use std::fmt::Write as _;

/// The audit of one event.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// Event id.
    pub event_id: String,
    /// Every revision received, verbatim, with transport metadata.
    pub received: Vec<EventReceived>,
    /// Interpretation of each revision: target → ceiling → budget chain, baseline used.
    pub interpretations: Vec<EventInterpreted>,
    /// Acknowledgments sent.
    pub acks: Vec<Ack>,
    /// Lifecycle transitions.
    pub transitions: Vec<Transition>,
    /// Operator opt-outs, with the operator's name and reason.
    pub opt_outs: Vec<OperatorOptOut>,
    /// Plans made while this event was binding.
    pub plans: Vec<PlanSummary>,
    /// Dispatches, confirmations and restores.
    pub dispatches: Vec<DispatchSummary>,
    /// Caps that did not hold while the event was binding, in ledger order: a cap found raised
    /// (`raised_out_of_band`), re-applied by a node agent (`reapplied`), reported as undone
    /// again and again (`unreliable`), no longer measured (`not_measured`), or not confirmed
    /// by a dispatch (its kind, e.g. `not_applied`).
    pub cap_faults: Vec<CapFault>,
    /// Closed-loop trims with their reasons.
    pub trims: Vec<Trimmed>,
    /// Baseline evidence.
    pub baseline: BaselineSummary,
    /// Per interval: ceiling versus measured meter.
    pub intervals: Vec<IntervalAudit>,
    /// Jobs capped through the unknown-elasticity fallback.
    pub fallbacks: Vec<String>,
    /// Whose throughput was measured while the event ran (see [`ThroughputAudit`]).
    pub throughput: ThroughputAudit,
    /// Per job in the plans: tier, measured throughput uncapped and capped, slowdown, minutes
    /// beyond the tier (see [`JobAudit`]).
    pub jobs: Vec<JobAudit>,
    /// What the site's flexibility curve promised for the event's ask before its first plan
    /// (planner's estimates; `None` without a curve then, and in older ledgers). Set it against
    /// `throughput.measured_kept`.
    pub promised: Option<flexgate_policies::control::flexibility::FlexPromise>,
    /// What the site had declared for the event's hours (the latest declaration made before it
    /// began, from the forecast or an operator's figure), against what it could shed when the
    /// event came (the flexibility curve then, within the declaration's cost ceiling) and what
    /// it delivered (`delivered_kw`). `None` when nothing was declared for those hours.
    pub declared: Option<flexgate_policies::forecast::declare::DeclaredForEvent>,
    /// The mean delivered meter reduction over the event's intervals, kW (baseline less meter;
    /// see `intervals`).
    pub delivered_kw: Option<f64>,
    /// Meter samples `(time, meter kW, ceiling kW in force)` from baseline window to the end.
    pub series: Vec<(DateTime<Utc>, f64, Option<f64>)>,
    /// The site's time zone the report's local days and clock are in.
    pub time_zone: String,
}

/// One plan.
#[derive(Debug, Clone, Serialize)]
pub struct PlanSummary {
    /// Ledger sequence.
    pub seq: u64,
    /// The generation its caps were sent with.
    pub generation: u64,
    /// Why it was made.
    pub reason: String,
    /// Meter ceiling it served.
    pub ceiling_kw: Option<f64>,
    /// GPU budget after trim and unconfirmed load.
    pub gpu_budget_w: Option<f64>,
    /// Trim in force.
    pub trim_w: Option<f64>,
    /// Planned draw.
    pub planned_power_w: Option<f64>,
    /// Shortfall the policy could not cut.
    pub shortfall_w: Option<f64>,
    /// Jobs below their uncapped cap.
    pub jobs_capped: usize,
    /// What the plan maximised (`progress`, `tokens`; absent in older ledgers).
    pub objective: Option<String>,
    /// What it expected to keep, by the planner's curves (estimates; the measured figures are
    /// in `throughput`).
    pub expected: Option<flexgate_policies::control::entry::ExpectedOutcome>,
}

/// One dispatch (or restore).
#[derive(Debug, Clone, Serialize)]
pub struct DispatchSummary {
    /// Ledger sequence.
    pub seq: u64,
    /// Why the commands were sent: `plan`, `retry_unconfirmed`, `reapply_at_start`, `restore`.
    pub purpose: String,
    /// Commands sent.
    pub commands: usize,
    /// Confirmed by the backend.
    pub confirmed: usize,
    /// Not confirmed (failed, unknown job).
    pub failed: usize,
}

/// One cap that did not hold, as the ledger recorded it (see [`AuditReport::cap_faults`]).
#[derive(Debug, Clone, Serialize)]
pub struct CapFault {
    /// Ledger sequence.
    pub seq: u64,
    /// When it was recorded.
    pub at: DateTime<Utc>,
    /// The job.
    pub job: String,
    /// What happened: `raised_out_of_band`, `reapplied`, `unreliable`, `not_measured`, or a
    /// dispatch's unconfirmed kind.
    pub kind: String,
    /// The figures: the cap and the limit found, the re-applications counted, the dispatch's
    /// reason.
    pub detail: String,
}

/// Baseline evidence: the program's customer baseline (PJM's Economic CBL, when the ledger
/// holds enough metered history) and the meter before and after the event, both always shown.
#[derive(Debug, Clone, Serialize)]
pub struct BaselineSummary {
    /// Method of `kw`: `pjm_economic_cbl` when the CBL could be computed, else
    /// `meter_before_after` (the mean of the meter before and after the event).
    pub method: String,
    /// Mean meter over the window before the event.
    pub before_kw: Option<f64>,
    /// Mean meter over the window after recovery.
    pub after_kw: Option<f64>,
    /// Mean of `before_kw` and `after_kw` (either alone when the other is missing).
    pub before_after_kw: Option<f64>,
    /// Baseline used for the delivered reduction (see `method`).
    pub kw: Option<f64>,
    /// Samples before / after.
    pub samples: (usize, usize),
    /// Baseline recorded at interpretation time.
    pub recorded_at_interpretation_kw: Option<f64>,
    /// PJM's Economic CBL with every day it used or passed over and the same-day adjustment.
    pub cbl: Option<flexgate_policies::baseline::Cbl>,
    /// Why there is no CBL (too little history, no event window).
    pub cbl_unavailable: Option<String>,
}

/// Which of the jobs the event's plans covered reported their throughput for the whole event
/// (from `throughput_known` records): a slowdown can only be measured for those.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ThroughputAudit {
    /// Jobs in the event's plans.
    pub jobs: usize,
    /// Jobs whose throughput was measured from the event's start to its end.
    pub measured: Vec<String>,
    /// Jobs whose throughput was unknown at some time in the event (reported nothing, or
    /// their node did not answer): their slowdown is not measured.
    pub unmeasured: Vec<String>,
    /// What the jobs measured both uncapped and capped kept, on both objectives; `None` when
    /// no job was measured both ways. Only measured jobs count: nothing here is modelled.
    pub measured_kept: Option<MeasuredKept>,
}

/// What a curtailment cost one job, from its measured points (`throughput_point` records);
/// the fold is the one the season's settlement uses, so both give one figure per event.
pub use flexgate_policies::control::job_cost::{JobCost as JobAudit, MeasuredKept};
use flexgate_policies::control::job_cost::{JobCostFold, measured_kept};

/// One interval's performance.
#[derive(Debug, Clone, Serialize)]
pub struct IntervalAudit {
    /// Interval index.
    pub index: usize,
    /// Start (after ramp for the first interval).
    pub start: DateTime<Utc>,
    /// End.
    pub end: DateTime<Utc>,
    /// The event's meter ceiling for the interval.
    pub ceiling_kw: Option<f64>,
    /// Meter samples counted: read from the meter, or recorded before the gateway said where
    /// its figure came from.
    pub samples: usize,
    /// Samples in the interval whose figure was the facility model's (no meter source, or a
    /// stale or missing meter): not counted in the figures below.
    pub modelled_samples: usize,
    /// Mean measured meter.
    pub mean_meter_kw: Option<f64>,
    /// Highest measured meter.
    pub max_meter_kw: Option<f64>,
    /// Share of samples at or below the ceiling.
    pub compliance: Option<f64>,
    /// Baseline − mean meter.
    pub delivered_reduction_kw: Option<f64>,
    /// max(0, mean meter − ceiling).
    pub shortfall_kw: Option<f64>,
    /// max(0, ceiling − mean meter).
    pub over_delivery_kw: Option<f64>,
    /// Why the interval was not (or not wholly) in force, e.g. an operator's opt-out.
    pub note: Option<String>,
}

/// Build the audit of `event_id` from all ledger records, `window_s` seconds of meter before
/// and after for that baseline, and the site's `time_zone` for its CBL's local days and its
/// chart's clock. `Ok(None)` when the ledger holds nothing of the event; an error names a
/// record that is not a typed entry of this version.
pub fn build(
    records: &[Record],
    event_id: &str,
    window_s: u64,
    time_zone: chrono_tz::Tz,
) -> Result<Option<AuditReport>, NotAnEntry> {
    let mut received = Vec::new();
    let mut interpretations: Vec<EventInterpreted> = Vec::new();
    let mut acks = Vec::new();
    let mut transitions: Vec<Transition> = Vec::new();
    let mut opt_outs: Vec<OperatorOptOut> = Vec::new();
    let mut plans = Vec::new();
    let mut dispatches = Vec::new();
    let mut cap_faults: Vec<CapFault> = Vec::new();
    let mut trims = Vec::new();
    let mut fallbacks: Vec<String> = Vec::new();
    let mut meter: Vec<(DateTime<Utc>, f64, Option<f64>)> = Vec::new();
    let mut modelled: Vec<DateTime<Utc>> = Vec::new();
    let mut throughput_known: Vec<(DateTime<Utc>, String, bool)> = Vec::new();
    let mut points: Vec<flexgate_policies::control::entry::ThroughputPoint> = Vec::new();
    let mut planned_jobs: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    // Each job's objective weight (GPUs × priority) as the latest plan recorded it.
    let mut weights: std::collections::BTreeMap<String, f64> = std::collections::BTreeMap::new();
    let mut promised = None;
    // Declarations and forecasts are the site's, not an event's: every one is read.
    let mut declarations: Vec<flexgate_policies::forecast::declare::Declaration> = Vec::new();
    let mut curve_now: Vec<(DateTime<Utc>, f64)> = Vec::new();
    for record in records {
        let entry = record.entry()?;
        if let Entry::Declared(d) = &entry {
            declarations.push(d.clone());
            continue;
        }
        if let Entry::Forecast(f) = &entry {
            // Hour 0 of a forecast is the flexibility curve when it was made.
            if let Some((_, band)) = f.hourly.first() {
                curve_now.push((f.at, band.p50));
            }
            continue;
        }
        if let Entry::ThroughputPoint(p) = &entry {
            points.push(p.clone());
            continue;
        }
        if let Entry::ThroughputKnown(k) = &entry {
            for (job, known) in &k.throughput {
                throughput_known.push((k.at, job.clone(), known == "measured"));
            }
            continue;
        }
        if let Entry::MeterSample(m) = &entry {
            // A model's figure is not evidence of what the meter saw: counted apart.
            if m.meter_quality.is_some_and(|q| !q.is_measured()) {
                modelled.push(m.at);
            } else {
                meter.push((m.at, m.meter_kw, m.ceiling_kw));
            }
            continue;
        }
        if record.event.as_deref() != Some(event_id) {
            continue;
        }
        match entry {
            Entry::EventReceived(r) => received.push(r),
            Entry::EventInterpreted(i) => interpretations.push(i),
            Entry::EventAcked(a) => {
                // The anchor the counterparty was given is this record's own hash (older
                // ledgers recorded the head before the event instead: kept as written).
                let mut ack = a.ack;
                if ack.log_checkpoint.is_none() {
                    ack.log_checkpoint = Some(record.hash.clone());
                    ack.log_seq = Some(record.seq);
                }
                acks.push(ack);
            }
            Entry::EventPhase(t) => transitions.push(t),
            Entry::OperatorOptOut(o) => opt_outs.push(o),
            Entry::Plan(p) => {
                planned_jobs.extend(p.plan.rows.iter().map(|row| row.job().to_string()));
                promised = promised.or(p.promised.as_deref().copied());
                for (row, note) in p.plan.rows.iter().zip(&p.plan.notes) {
                    weights.insert(row.job().to_string(), f64::from(note.0) * note.1);
                }
                for f in &p.plan.fallbacks {
                    if !fallbacks.iter().any(|x| **x == **f) {
                        fallbacks.push(f.to_string());
                    }
                }
                plans.push(PlanSummary {
                    seq: record.seq,
                    generation: p.generation,
                    reason: serde_json::to_value(p.reason)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    ceiling_kw: Some(p.ceiling.ceiling_kw),
                    gpu_budget_w: Some(p.gpu_budget_w),
                    trim_w: Some(p.trim_w),
                    planned_power_w: Some(p.plan.planned_power),
                    shortfall_w: Some(p.plan.shortfall),
                    jobs_capped: p
                        .plan
                        .rows
                        .iter()
                        .filter(|row| !matches!(row.reason(), Reason::Uncapped | Reason::InflexibleUnknown))
                        .count(),
                    objective: p.plan.objective.map(|o| o.as_str().to_string()),
                    expected: p.plan.expected.as_deref().copied(),
                });
            }
            Entry::CapsDrifted(d) => {
                let kind = if d.action == flexgate_policies::control::entry::UNRELIABLE_ACTION {
                    "unreliable"
                } else {
                    "raised_out_of_band"
                };
                for x in &d.drifted {
                    cap_faults.push(CapFault {
                        seq: record.seq,
                        at: d.at,
                        job: x.job.to_string(),
                        kind: kind.to_string(),
                        detail: format!(
                            "cap {:.0} W/GPU (generation {}), limit found {:.0} W/GPU",
                            x.wanted_w_per_gpu, x.generation, x.applied_w_per_gpu
                        ),
                    });
                }
            }
            Entry::CapsReapplied(r) => {
                for (job, n) in &r.reapplied {
                    cap_faults.push(CapFault {
                        seq: record.seq,
                        at: r.at,
                        job: job.to_string(),
                        kind: "reapplied".to_string(),
                        detail: format!("the node agent re-applied the cap {n} time(s) after its limit moved"),
                    });
                }
            }
            Entry::CapsLost(l) => {
                for job in &l.unmeasured_capped_jobs {
                    cap_faults.push(CapFault {
                        seq: record.seq,
                        at: l.at,
                        job: job.to_string(),
                        kind: "not_measured".to_string(),
                        detail: "capped job no longer measured (node not answering)".to_string(),
                    });
                }
            }
            Entry::CapsDispatched(d) => {
                for row in d.rows.iter().filter(|r| !r.confirmed()) {
                    let kind = d.unconfirmed.get(row.job()).map_or("failed", |u| u.as_str());
                    cap_faults.push(CapFault {
                        seq: record.seq,
                        at: d.at,
                        job: row.job().to_string(),
                        kind: kind.to_string(),
                        detail: format!(
                            "{:.0} W/GPU (generation {}) not confirmed: {}",
                            row.cap_w(),
                            row.generation(),
                            row.5.as_deref().unwrap_or("no detail")
                        ),
                    });
                }
                dispatches.push(DispatchSummary {
                    seq: record.seq,
                    purpose: serde_json::to_value(d.purpose)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default(),
                    commands: d.rows.len(),
                    confirmed: d.confirmed,
                    failed: d.failed,
                });
            }
            Entry::Trimmed(t) => trims.push(t),
            _ => {}
        }
    }
    if received.is_empty() {
        return Ok(None);
    }

    // Timing: the event as last interpreted; the effective start from its first transition.
    let latest = interpretations.last();
    let event = latest.map(|i| &i.event);
    let window_start = event.map(|e| e.window.start);
    let ramp_s = event.map_or(0, |e| e.window.ramp_s);
    let started = transitions
        .iter()
        .find(|t| matches!(t.to, Phase::Ramping | Phase::Active))
        .map(|t| t.at)
        .or(window_start);
    let ended = transitions.iter().rev().find(|t| t.to.is_terminal()).map(|t| t.at);
    let recovering = transitions.iter().find(|t| t.to == Phase::Recovering).map(|t| t.at);
    let opted_out = opt_outs.first();

    let window = ChronoDuration::seconds(window_s as i64);
    let mean_in = |from: DateTime<Utc>, to: DateTime<Utc>| {
        let xs: Vec<f64> = meter
            .iter()
            .filter(|(t, _, _)| *t >= from && *t < to)
            .map(|(_, kw, _)| *kw)
            .collect();
        (
            (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64),
            xs.len(),
        )
    };
    let (before_kw, n_before) = started.map_or((None, 0), |s| mean_in(s - window, s));
    let (after_kw, n_after) = ended.map_or((None, 0), |e| mean_in(e, e + window));
    // PJM's CBL over the curtailment (ramp start to recovery), on the site's local days; the
    // days the site curtailed on (a ceiling in force in a sample) are not baseline days.
    let measured: Vec<(DateTime<Utc>, f64)> = meter.iter().map(|(t, kw, _)| (*t, *kw)).collect();
    let event_days: std::collections::BTreeSet<chrono::NaiveDate> = meter
        .iter()
        .filter(|(_, _, ceiling)| ceiling.is_some())
        .map(|(t, _, _)| t.with_timezone(&time_zone).date_naive())
        .collect();
    // An event still in force is baselined over its window so far (to the last reading).
    let so_far = started.and_then(|s| meter.iter().rev().map(|m| m.0).find(|t| *t > s));
    let cbl = match (started, recovering.or(ended).or(so_far)) {
        (Some(s), Some(e)) => flexgate_policies::baseline::pjm_economic_cbl(&measured, s, e, time_zone, &event_days)
            .map_err(|e| e.to_string()),
        _ => Err("the event has not started (no curtailment window in the ledger)".to_string()),
    };
    let before_after_kw = match (before_kw, after_kw) {
        (Some(b), Some(a)) => Some((a + b) / 2.0),
        (b, a) => b.or(a),
    };
    let (cbl, cbl_unavailable) = match cbl {
        Ok(cbl) => (Some(cbl), None),
        Err(why) => (None, Some(why)),
    };
    let baseline_kw = cbl.as_ref().map(|c| c.kw).or(before_after_kw);
    let baseline = BaselineSummary {
        method: if cbl.is_some() {
            "pjm_economic_cbl"
        } else {
            "meter_before_after"
        }
        .to_string(),
        before_kw,
        after_kw,
        before_after_kw,
        kw: baseline_kw,
        samples: (n_before, n_after),
        recorded_at_interpretation_kw: latest.and_then(|i| i.baseline.as_ref()).map(|b| b.kw),
        cbl,
        cbl_unavailable,
    };

    let mut intervals = Vec::new();
    if let (Some(start), Some(event), Some(latest)) = (window_start.or(started), event, latest) {
        let shift = started.map_or(ChronoDuration::zero(), |s| (s - start).max(ChronoDuration::zero()));
        let close = recovering.or(ended);
        let secs = |s: u64| ChronoDuration::seconds(i64::try_from(s).unwrap_or(i64::MAX / 2_000));
        for (index, interval) in event.intervals.iter().enumerate() {
            let offset = interval.offset_s;
            let mut from = start + shift + secs(offset);
            if index == 0 {
                from += secs(ramp_s);
            }
            let nominal_end = interval
                .duration_s
                .map(|d| start + shift + secs(offset.saturating_add(d)))
                .or_else(|| event.window.duration_s.map(|d| start + shift + secs(d)));
            let to = match (nominal_end, close) {
                (Some(e), Some(c)) => e.min(c),
                (Some(e), None) => e,
                (None, Some(c)) => c,
                (None, None) => meter.last().map_or(from, |m| m.0 + ChronoDuration::seconds(1)),
            };
            let to = to.max(from);
            // After an operator's opt-out the event's ceiling no longer applies.
            let note = opted_out.filter(|o| o.at <= to).map(|o| {
                format!(
                    "opted out at {} by {}: {}",
                    o.at.format("%H:%M:%S"),
                    o.operator,
                    o.reason
                )
            });
            let to = opted_out.map_or(to, |o| to.min(o.at.max(from)));
            let ceiling_kw = latest
                .ceilings
                .get(index)
                .and_then(|c| c.as_ref())
                .map(|c| c.ceiling_kw)
                .filter(|_| to > from);
            let xs: Vec<f64> = meter
                .iter()
                .filter(|(t, _, _)| *t >= from && *t < to)
                .map(|(_, kw, _)| *kw)
                .collect();
            let mean = (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64);
            intervals.push(IntervalAudit {
                index,
                start: from,
                end: to,
                ceiling_kw,
                samples: xs.len(),
                modelled_samples: modelled.iter().filter(|t| **t >= from && **t < to).count(),
                mean_meter_kw: mean,
                max_meter_kw: xs.iter().copied().reduce(f64::max),
                compliance: ceiling_kw
                    .filter(|_| !xs.is_empty())
                    .map(|c| xs.iter().filter(|kw| **kw <= c + 1e-9).count() as f64 / xs.len() as f64),
                delivered_reduction_kw: baseline_kw.zip(mean).map(|(b, m)| b - m),
                shortfall_kw: ceiling_kw.zip(mean).map(|(c, m)| (m - c).max(0.0)),
                over_delivery_kw: ceiling_kw.zip(mean).map(|(c, m)| (c - m).max(0.0)),
                note,
            });
        }
    }
    let series_from = started.map(|s| s - window);
    let series_to = ended.map(|e| e + window);
    let series = meter
        .iter()
        .filter(|(t, _, _)| series_from.is_none_or(|f| *t >= f) && series_to.is_none_or(|e| *t <= e))
        .copied()
        .collect();
    let delivered: Vec<f64> = intervals.iter().filter_map(|i| i.delivered_reduction_kw).collect();
    let delivered_kw = (!delivered.is_empty()).then(|| delivered.iter().sum::<f64>() / delivered.len() as f64);
    let declared = started.and_then(|s| {
        let end = ended
            .or_else(|| {
                let w = &event?.window;
                let total = w.ramp_s + w.duration_s?;
                Some(w.start + ChronoDuration::seconds(i64::try_from(total).ok()?))
            })
            .unwrap_or(s + ChronoDuration::hours(1));
        let curve = curve_now.iter().rev().find(|(at, _)| *at <= s).copied();
        flexgate_policies::forecast::declare::for_event(&declarations, s, end, curve)
    });
    let mut throughput = throughput_audit(&planned_jobs, &throughput_known, started, ended);
    let jobs: Vec<JobAudit> = planned_jobs
        .iter()
        .map(|job| job_audit(job, &points, started, ended))
        .collect();
    throughput.measured_kept = measured_kept(&jobs, &weights);
    Ok(Some(AuditReport {
        throughput,
        jobs,
        event_id: event_id.to_string(),
        received,
        interpretations,
        acks,
        transitions,
        opt_outs,
        plans,
        dispatches,
        cap_faults,
        trims,
        baseline,
        intervals,
        fallbacks,
        promised,
        declared,
        delivered_kw,
        series,
        time_zone: time_zone.name().to_string(),
    }))
}

/// Which `jobs` reported their throughput throughout `[started, ended]`, from the recorded
/// changes `known` (time, job, measured?), in record order. A job's state at the start is its
/// last change before it; a job never recorded is unknown.
fn throughput_audit(
    jobs: &std::collections::BTreeSet<String>,
    known: &[(DateTime<Utc>, String, bool)],
    started: Option<DateTime<Utc>>,
    ended: Option<DateTime<Utc>>,
) -> ThroughputAudit {
    let mut audit = ThroughputAudit {
        jobs: jobs.len(),
        ..ThroughputAudit::default()
    };
    for job in jobs {
        let changes = known.iter().filter(|(_, j, _)| j == job);
        let at_start = changes
            .clone()
            .rfind(|(at, _, _)| started.is_some_and(|s| *at <= s))
            .is_some_and(|(_, _, measured)| *measured);
        let lost_during = changes
            .clone()
            .any(|(at, _, measured)| !measured && started.is_none_or(|s| *at > s) && ended.is_none_or(|e| *at < e));
        // A job that started after the event began is measured from its first record.
        let first_during = changes
            .clone()
            .find(|(at, _, _)| started.is_none_or(|s| *at > s))
            .is_some_and(|(_, _, measured)| *measured);
        let began_before = changes.clone().any(|(at, _, _)| started.is_some_and(|s| *at <= s));
        let measured = if began_before { at_start } else { first_during };
        if measured && !lost_during {
            audit.measured.push(job.clone());
        } else {
            audit.unmeasured.push(job.clone());
        }
    }
    audit
}

/// What the curtailment from `started` to `ended` cost `job`, from its points.
fn job_audit(
    job: &str,
    points: &[flexgate_policies::control::entry::ThroughputPoint],
    started: Option<DateTime<Utc>>,
    ended: Option<DateTime<Utc>>,
) -> JobAudit {
    let mut fold = JobCostFold::default();
    for p in points.iter().filter(|p| p.job == job) {
        fold.offer(p, started, ended);
    }
    fold.cost(job, ended)
}

/// Text from outside (operator names, reasons, received bytes) with control characters
/// escaped, so that an auditor's terminal prints it instead of obeying it.
/// `text` with every character that could act on the auditor's terminal or hide in it (control,
/// invisible, noncharacter; see `is_unprintable`) written as its `\u{…}` escape. Everything the
/// audit prints that came from outside (ids, names, reasons, job ids) goes through this.
fn printable(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            if flexgate_policies::event::model::is_unprintable(c) && c != '\n' {
                c.escape_unicode().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

fn kw(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.1}"))
}

fn share(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{:.1} %", x * 100.0))
}

impl AuditReport {
    /// Markdown for people.
    #[must_use]
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Audit of event `{}`\n", printable(&self.event_id));
        let _ = writeln!(out, "## Received ({} revision(s))\n", self.received.len());
        for r in &self.received {
            let via = serde_json::to_string(&r.transport).unwrap_or_default();
            let what = match &r.received {
                Received::Bytes(bytes) => bytes.clone(),
                Received::Translated { event, wire } => format!(
                    "translated from {} event {} revision {}{}: {}",
                    r.source.as_str(),
                    wire.id,
                    wire.revision,
                    wire.signal.as_ref().map(|s| format!(" signal {s}")).unwrap_or_default(),
                    serde_json::to_string(event).unwrap_or_default()
                ),
            };
            let _ = writeln!(
                out,
                "- at {} via {}:\n  ```json\n  {}\n  ```",
                r.received_at.to_rfc3339(),
                via,
                printable(&what)
            );
        }
        let _ = writeln!(out, "\n## Interpretation\n");
        for i in &self.interpretations {
            let ceilings: Vec<String> = i
                .ceilings
                .iter()
                .map(|c| kw(c.as_ref().map(|c| c.ceiling_kw)))
                .collect();
            let budget = i
                .settled_budget
                .as_ref()
                .and_then(|b| b["gpu_budget"].as_f64())
                .map_or_else(
                    || "—".into(),
                    |w| format!("GPU budget {:.1} kW (settled cooling)", w / 1000.0),
                );
            let _ = writeln!(
                out,
                "- revision {}: ceilings [{}] kW; baseline {} kW ({}); outcome {}; budget chain: {}",
                i.event.revision,
                ceilings.join(", "),
                kw(i.baseline.as_ref().map(|b| b.kw)),
                i.baseline.as_ref().map_or("none", |b| b.method.as_str()),
                serde_json::to_value(i.outcome)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                budget,
            );
        }
        let _ = writeln!(out, "\n## Acknowledgments\n");
        for a in &self.acks {
            let _ = writeln!(
                out,
                "- revision {} opt {} {} (checkpoint {}{})",
                a.revision,
                if a.opt == Participation::In { "in" } else { "out" },
                printable(a.reason.as_deref().unwrap_or("")),
                a.log_checkpoint.as_deref().unwrap_or("—"),
                a.log_seq.map(|seq| format!(", record {seq}")).unwrap_or_default()
            );
        }
        if !self.opt_outs.is_empty() {
            let _ = writeln!(out, "\n## Operator opt-outs\n");
            for o in &self.opt_outs {
                let _ = writeln!(
                    out,
                    "- at {} by {} (revision {}): {}",
                    o.at.to_rfc3339(),
                    printable(&o.operator),
                    o.revision,
                    printable(&o.reason)
                );
            }
        }
        let _ = writeln!(out, "\n## Lifecycle\n");
        for t in &self.transitions {
            let _ = writeln!(
                out,
                "- {} → {} at {}",
                t.from.as_str(),
                t.to.as_str(),
                t.at.to_rfc3339()
            );
        }
        let _ = writeln!(
            out,
            "\n## Plans ({})\n\nExpected kept: the planner's estimate of the jobs' throughput kept under the plan, \
             as Σ tokens/s and as GPU-weighted progress (each job's share of its own speed); a model's figures. \
             Measured figures are under Throughput.\n\n\
             | seq | reason | ceiling kW | GPU budget kW | trim kW | planned kW | shortfall kW | jobs capped | objective | expected kept: tokens | expected kept: progress |\n\
             |---|---|---|---|---|---|---|---|---|---|---|",
            self.plans.len()
        );
        for p in &self.plans {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                p.seq,
                p.reason,
                kw(p.ceiling_kw),
                kw(p.gpu_budget_w.map(|w| w / 1000.0)),
                kw(p.trim_w.map(|w| w / 1000.0)),
                kw(p.planned_power_w.map(|w| w / 1000.0)),
                kw(p.shortfall_w.map(|w| w / 1000.0)),
                p.jobs_capped,
                p.objective.as_deref().unwrap_or("tokens (before objectives)"),
                share(p.expected.map(|e| e.tokens_kept_share)),
                share(p.expected.map(|e| e.progress_kept_share)),
            );
        }
        let _ = writeln!(
            out,
            "\n## Dispatches\n\n| seq | purpose | commands | confirmed | failed |\n|---|---|---|---|---|"
        );
        for d in &self.dispatches {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                d.seq, d.purpose, d.commands, d.confirmed, d.failed
            );
        }
        if !self.cap_faults.is_empty() {
            let _ = writeln!(
                out,
                "\n## Caps that did not hold\n\n| seq | time | job | what | detail |\n|---|---|---|---|---|"
            );
            for f in &self.cap_faults {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} |",
                    f.seq,
                    f.at.to_rfc3339(),
                    printable(&f.job),
                    f.kind,
                    printable(&f.detail)
                );
            }
        }
        if !self.trims.is_empty() {
            let _ = writeln!(out, "\n## Closed-loop trims\n");
            for t in &self.trims {
                let _ = writeln!(
                    out,
                    "- {}: trim {:.0} W → {:.0} W: {}",
                    t.at.to_rfc3339(),
                    t.trim_w_before,
                    t.trim_w,
                    t.reason
                );
            }
        }
        let b = &self.baseline;
        let _ = writeln!(
            out,
            "\n## Baseline ({})\n\nmeter before {} kW ({} samples), after {} kW ({} samples), before/after {} kW; used {} kW; recorded at interpretation {} kW",
            b.method,
            kw(b.before_kw),
            b.samples.0,
            kw(b.after_kw),
            b.samples.1,
            kw(b.before_after_kw),
            kw(b.kw),
            kw(b.recorded_at_interpretation_kw)
        );
        match (&b.cbl, &b.cbl_unavailable) {
            (Some(c), _) => {
                let days: Vec<String> = c
                    .days
                    .iter()
                    .map(|d| {
                        format!(
                            "{} {} kW{}",
                            d.date,
                            kw(d.mean_kw),
                            if d.counted { "" } else { " (not counted)" }
                        )
                    })
                    .collect();
                let passed: Vec<String> = c
                    .passed_over
                    .iter()
                    .take(12)
                    .map(|(d, why)| {
                        format!(
                            "{d} {}",
                            serde_json::to_value(why)
                                .ok()
                                .and_then(|v| v.as_str().map(str::to_string))
                                .unwrap_or_default()
                        )
                    })
                    .collect();
                let _ = writeln!(
                    out,
                    "\nPJM Economic CBL ({} days, high {} of {}, time zone {}): {}; passed over: {}. Unadjusted {:.1} kW, \
                     same-day adjustment {}, CBL {:.1} kW.",
                    match c.day_type {
                        flexgate_policies::baseline::DayType::Weekday => "weekday",
                        flexgate_policies::baseline::DayType::WeekendOrHoliday => "weekend/holiday",
                    },
                    c.x_of_y.0,
                    c.x_of_y.1,
                    c.time_zone,
                    days.join(", "),
                    if passed.is_empty() {
                        "none".to_string()
                    } else {
                        passed.join(", ")
                    },
                    c.unadjusted_kw,
                    c.adjustment.as_ref().map_or_else(
                        || "not applied (no readings in the three hours ending an hour before the start)".to_string(),
                        |a| format!(
                            "{:+.1} kW ({:.1} on the day against {:.1})",
                            a.kw, a.event_day_kw, a.baseline_days_kw
                        )
                    ),
                    c.kw
                );
            }
            (None, Some(why)) => {
                let _ = writeln!(
                    out,
                    "\nNo PJM Economic CBL: {}; the meter before and after stands in.",
                    printable(why)
                );
            }
            (None, None) => {}
        }
        let _ = writeln!(
            out,
            "\n## Performance per interval\n\n| # | start | end | ceiling kW | mean meter kW | max meter kW | samples ≤ ceiling | delivered kW | shortfall kW | over-delivery kW |\n|---|---|---|---|---|---|---|---|---|---|"
        );
        for i in &self.intervals {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                i.index,
                i.start.format("%H:%M:%S"),
                i.end.format("%H:%M:%S"),
                kw(i.ceiling_kw),
                kw(i.mean_meter_kw),
                kw(i.max_meter_kw),
                i.compliance
                    .map_or_else(|| "—".into(), |c| format!("{:.0} % of {}", c * 100.0, i.samples)),
                kw(i.delivered_reduction_kw),
                kw(i.shortfall_kw),
                kw(i.over_delivery_kw)
            );
        }
        for i in self.intervals.iter().filter(|i| i.modelled_samples > 0) {
            let _ = writeln!(
                out,
                "\nInterval {}: {} meter samples were the facility model's estimate (no meter source, or the meter stale or missing), not a reading; they are not counted above.",
                i.index, i.modelled_samples
            );
        }
        for i in self.intervals.iter().filter(|i| i.note.is_some()) {
            let _ = writeln!(
                out,
                "\nInterval {}: {}",
                i.index,
                printable(i.note.as_deref().unwrap_or(""))
            );
        }
        let t = &self.throughput;
        let _ = writeln!(
            out,
            "\n## Job throughput\n\n{} of the {} jobs in the plans reported their throughput for the whole event{}",
            t.measured.len(),
            t.jobs,
            if t.unmeasured.is_empty() {
                ".".to_string()
            } else {
                format!(
                    "; unmeasured (no report, or their node did not answer; their slowdown is not measured): {}.",
                    printable(&t.unmeasured.join(", "))
                )
            }
        );
        if self.jobs.iter().any(|j| j.throughput == "measured") {
            let _ = writeln!(
                out,
                "\n| job | tier | uncapped tokens/s (measured) | capped tokens/s (measured) | slowdown | minutes over tier |\n|---|---|---|---|---|---|"
            );
            let figure = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or_else(|| "—".to_string(), f);
            for j in &self.jobs {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {} | {} | {} |",
                    printable(&j.job),
                    figure(j.tier, &|t| format!("{:.0} %", t * 100.0)),
                    figure(j.uncapped_tokens_per_s, &|t| format!("{t:.0}")),
                    figure(j.capped_tokens_per_s, &|t| format!("{t:.0}")),
                    figure(j.measured_slowdown, &|s| format!("{:.1} %", s * 100.0)),
                    figure(j.minutes_over_tier, &|m| format!("{m:.1}")),
                );
            }
        }
        if let Some(p) = &self.promised {
            let _ = writeln!(
                out,
                "\nPromised before the first plan (the site's flexibility curve of {}, planner's estimates): \
                 shedding {:.1} kW at the meter (from the meter before the event to the deepest ceiling) would cost {:.1} % of GPU-weighted progress ({:.0} tokens/s).",
                p.curve_at.to_rfc3339(),
                p.meter_shed_kw,
                p.progress_lost * 100.0,
                p.tokens_lost_per_s
            );
        }
        if let Some(d) = &self.declared {
            let _ = writeln!(
                out,
                "\nDeclared (by {} at {}, {} % confidence, {} of the event's {} hours): {:.1} kW; could shed when the event came \
                 (the flexibility curve of {}, within the declaration's cost ceiling): {}; delivered (mean over the intervals, baseline less meter): {}.",
                printable(&d.operator),
                d.declared_at.to_rfc3339(),
                d.confidence,
                d.hours_declared,
                d.hours_spanned,
                d.declared_kw,
                d.could_shed_at
                    .map_or_else(|| "no forecast before".to_string(), |t| t.to_rfc3339()),
                d.could_shed_kw
                    .map_or_else(|| "unknown".to_string(), |k| format!("{k:.1} kW")),
                self.delivered_kw
                    .map_or_else(|| "unknown".to_string(), |k| format!("{k:.1} kW")),
            );
            for o in &d.overridden {
                let _ = writeln!(out, "- overridden by the operator: {}", printable(o));
            }
        }
        if let Some(k) = &t.measured_kept {
            let _ = writeln!(
                out,
                "\nMeasured kept ({} jobs measured uncapped and capped): {:.1} % of their tokens/s, \
                 {:.1} % GPU-weighted progress (each job's share of its own speed), i.e. {:.1} % of progress lost.",
                k.jobs,
                k.tokens_kept_share * 100.0,
                k.progress_kept_share * 100.0,
                (1.0 - k.progress_kept_share) * 100.0
            );
        }
        let _ = writeln!(
            out,
            "\n## Fallbacks\n\n{}",
            if self.fallbacks.is_empty() {
                "none".to_string()
            } else {
                format!(
                    "unknown elasticity, uniform cap: {}",
                    printable(&self.fallbacks.join(", "))
                )
            }
        );
        out
    }

    /// Meter power against the ceiling over the event, as SVG: the site's local clock on the
    /// x axis (its zone and offset named), the event's ramp, hold and recovery shaded, the
    /// baselines as dashed lines, operator opt-outs marked, the y axis from zero.
    #[must_use]
    pub fn chart(&self) -> String {
        let tz: chrono_tz::Tz = self.time_zone.parse().unwrap_or(chrono_tz::Tz::UTC);
        let x = |t: DateTime<Utc>| t.timestamp_millis() as f64 / 1000.0;
        let meter: Vec<(f64, f64)> = self.series.iter().map(|(t, kw, _)| (x(*t), *kw)).collect();
        let ceiling: Vec<(f64, f64)> = self
            .series
            .iter()
            .filter_map(|(t, _, c)| Some((x(*t), (*c)?)))
            .collect();
        let first = self.series.first().map(|s| s.0);
        let label_at = first.unwrap_or(DateTime::UNIX_EPOCH);
        let mut chart = Chart::new(
            format!("Event {}: meter power against the ceiling", self.event_id),
            plot::clock_axis_label(tz, label_at),
            "kW at the meter",
        )
        .x_format(AxisFormat::Clock(tz))
        .y_from_zero(true)
        .series(Series::new("metered power (kW)", meter))
        .series(Series::new("ceiling in force (kW)", ceiling).style(LineStyle::Step));
        // The event's phases, from its recorded transitions.
        let at = |phase: Phase| self.transitions.iter().find(|t| t.to == phase).map(|t| t.at);
        let end = self.transitions.iter().rev().find(|t| t.to.is_terminal()).map(|t| t.at);
        let (ramp, active, recovering) = (at(Phase::Ramping), at(Phase::Active), at(Phase::Recovering));
        // (from, to: open while it lasts, label, colour)
        type PhaseBand = (DateTime<Utc>, Option<DateTime<Utc>>, &'static str, &'static str);
        let mut bands: Vec<PhaseBand> = Vec::new();
        if let Some(r) = ramp {
            bands.push((r, active.or(recovering).or(end), "ramp", "#56b4e9"));
        }
        if let Some(a) = active {
            bands.push((a, recovering.or(end), "event in force", "#e69f00"));
        }
        if let Some(r) = recovering {
            bands.push((r, end, "recovery", "#56b4e9"));
        }
        let last = self.series.last().map(|s| s.0);
        for (from, to, label, colour) in bands {
            if let Some(to) = to.or(last) {
                chart = chart.band(plot::Band {
                    from: x(from),
                    to: x(to),
                    label: label.to_string(),
                    colour,
                });
            }
        }
        // The baselines over the event window, where they exist.
        let window = ramp.or(active).zip(end.or(last));
        if let Some((from, to)) = window {
            let flat = |kw: f64| [(x(from), kw), (x(to), kw)];
            if let Some(cbl) = &self.baseline.cbl {
                chart = chart.series(
                    Series::new(format!("baseline: PJM Economic CBL, {:.1} kW", cbl.kw), flat(cbl.kw))
                        .style(LineStyle::Dashed),
                );
            }
            if let Some(kw) = self.baseline.before_after_kw {
                chart = chart.series(
                    Series::new(format!("baseline: meter before/after, {kw:.1} kW"), flat(kw)).style(LineStyle::Dashed),
                );
            }
        }
        for o in &self.opt_outs {
            chart = chart.marker(plot::Marker {
                at: x(o.at),
                label: format!("opted out by {}", printable(&o.operator)),
            });
        }
        chart.to_svg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::dr_event::parse_event;
    use crate::ledger::{NewRecord, Recorded};
    use flexgate_policies::control::entry::{MeterSample, Transport, Upserted};
    use flexgate_policies::event::{CeilingTarget, EventSource};

    fn record(seq: u64, entry: Entry, event: Option<&str>) -> Record {
        let new = NewRecord::from(Recorded::new(entry, event.map(flexgate_policies::ids::EventId::from)));
        Record {
            seq,
            time: DateTime::UNIX_EPOCH,
            kind: new.kind,
            event: new.event,
            dedup_key: None,
            epoch: None,
            body: new.body,
            prev_hash: String::new(),
            hash: String::new(),
        }
    }

    fn sample(at: DateTime<Utc>, meter_kw: f64, ceiling_kw: Option<f64>) -> Entry {
        sample_of(
            at,
            meter_kw,
            ceiling_kw,
            Some(flexgate_policies::meter::Quality::Measured),
        )
    }

    fn sample_of(
        at: DateTime<Utc>,
        meter_kw: f64,
        ceiling_kw: Option<f64>,
        meter_quality: Option<flexgate_policies::meter::Quality>,
    ) -> Entry {
        Entry::MeterSample(MeterSample {
            at,
            meter_kw,
            meter_quality,
            gpu_board_w: 0.0,
            ceiling_kw,
            events: Vec::new(),
            gpu_budget_w: None,
            trim_w: 0.0,
        })
    }

    #[test]
    fn intervals_and_the_pjm_cbl_from_records() {
        let start: DateTime<Utc> = "2026-07-14T19:00:00Z".parse().expect("time");
        let mut records = Vec::new();
        let mut seq = 0;
        let mut push = |entry, event: Option<&str>| {
            seq += 1;
            records.push(record(seq, entry, event));
        };
        // Eight days of meter history every 10 minutes: the d-th 24 h before the event reads
        // 100 + d kW (the event is on Tuesday 14 July; the weekend is not a weekday baseline).
        for minutes in (0..8 * 24 * 60).step_by(10) {
            let at = start - ChronoDuration::days(8) + ChronoDuration::minutes(minutes);
            let days_before = ((start - at).num_seconds() + 86_399) / 86_400; // 1 for the last 24 h
            push(sample(at, 100.0 + days_before as f64, None), None);
        }
        let body = r#"{"schema": "dr.event/1", "event_id": "ev", "revision": 1,
            "target": {"form": "ceiling", "point": "meter", "kw": 80},
            "window": {"start": "2026-07-14T19:00:00Z", "ramp_s": 0, "duration_s": 3600, "recovery_s": 0}}"#;
        let event = parse_event(body.as_bytes(), EventSource::Http).expect("a valid event");
        push(
            Entry::EventReceived(EventReceived {
                received_at: start,
                transport: Transport::Http { peer: None },
                source: EventSource::Http,
                received: Received::Bytes(body.to_string()),
            }),
            Some("ev"),
        );
        push(
            Entry::EventInterpreted(EventInterpreted {
                event,
                ceilings: vec![Some(CeilingTarget {
                    ceiling_kw: 80.0,
                    baseline: None,
                    form: "ceiling".into(),
                    note: "80 kW at the meter".into(),
                })],
                baseline: Some(flexgate_policies::event::BaselineEstimate {
                    kw: 101.0,
                    method: "meter_before".into(),
                    window_s: 900,
                }),
                pre_event_meter_kw: 101.0,
                received_at: start,
                outcome: Upserted::New,
                settled_budget: None,
                facility_fingerprint: String::new(),
            }),
            Some("ev"),
        );
        let transition = |from, to, at| {
            Entry::EventPhase(Transition {
                event_id: "ev".into(),
                from,
                to,
                at,
            })
        };
        push(transition(Phase::Pending, Phase::Active, start), Some("ev"));
        for minutes in (0..60).step_by(10) {
            let at = start + ChronoDuration::minutes(minutes);
            push(
                sample(at, if minutes == 0 { 85.0 } else { 78.0 }, Some(80.0)),
                Some("ev"),
            );
        }
        // While the meter source was down the facility model's upper estimate stood in: those
        // figures are not evidence of the meter and must not count, either way.
        for (minutes, quality) in [
            (5, flexgate_policies::meter::Quality::Stale),
            (15, flexgate_policies::meter::Quality::Model),
            (25, flexgate_policies::meter::Quality::Missing),
        ] {
            push(
                sample_of(
                    start + ChronoDuration::minutes(minutes),
                    95.0,
                    Some(80.0),
                    Some(quality),
                ),
                Some("ev"),
            );
        }
        let end = start + ChronoDuration::hours(1);
        push(transition(Phase::Active, Phase::Completed, end), Some("ev"));
        for minutes in (0..30).step_by(10) {
            push(sample(end + ChronoDuration::minutes(minutes), 101.0, None), None);
        }

        let report = build(&records, "ev", 900, chrono_tz::Tz::UTC)
            .expect("typed entries")
            .expect("report");
        let cbl = report
            .baseline
            .cbl
            .as_ref()
            .expect("five previous weekdays are in the ledger");
        // Weekdays 13, 10, 9, 8, 7 July (11–12 a weekend): 101, 104, 105, 106, 107 kW; the
        // highest 4 of 5 → 105.5. Same day, 15:00–18:00: 101 kW against 108, 107, 106, 105 on
        // the counted days → −5.5 kW, so the CBL is 100 kW.
        let means: Vec<f64> = cbl.days.iter().filter_map(|d| d.mean_kw).collect();
        assert_eq!(means, vec![101.0, 104.0, 105.0, 106.0, 107.0]);
        assert!((cbl.unadjusted_kw - 105.5).abs() < 1e-9, "{cbl:?}");
        let adjustment = cbl.adjustment.as_ref().expect("readings before the event");
        assert!((adjustment.kw + 5.5).abs() < 1e-9, "{adjustment:?}");
        assert!((cbl.kw - 100.0).abs() < 1e-9);
        assert_eq!(report.baseline.method, "pjm_economic_cbl");
        assert_eq!(report.baseline.kw, Some(cbl.kw));
        assert_eq!(report.baseline.before_after_kw, Some(101.0));
        let md = report.to_markdown();
        assert!(
            md.contains("PJM Economic CBL (weekday days, high 4 of 5, time zone UTC)"),
            "{md}"
        );
        // The chart: local clock with the zone named, the event shaded, both baselines drawn.
        let svg = report.chart();
        for needle in [
            "local time, UTC",
            "19:00",
            "event in force",
            "baseline: PJM Economic CBL, 100.0 kW",
            "baseline: meter before/after",
        ] {
            assert!(svg.contains(needle), "the chart lacks {needle:?}");
        }
        assert!(!svg.contains("hh:mm"));
        assert_eq!(report.baseline.before_kw, Some(101.0));
        assert_eq!(report.baseline.after_kw, Some(101.0));
        let i = &report.intervals[0];
        assert_eq!(i.samples, 6);
        assert_eq!(i.modelled_samples, 3);
        assert!(
            report
                .to_markdown()
                .contains("3 meter samples were the facility model's estimate")
        );
        assert!((i.compliance.expect("compliance") - 5.0 / 6.0).abs() < 1e-9);
        let mean = (85.0 + 5.0 * 78.0) / 6.0;
        assert!((i.mean_meter_kw.expect("mean") - mean).abs() < 1e-9);
        assert!((i.delivered_reduction_kw.expect("delivered") - (100.0 - mean)).abs() < 1e-9);
        assert_eq!(i.shortfall_kw, Some(0.0));
        assert!((i.over_delivery_kw.expect("over") - (80.0 - mean)).abs() < 1e-9);
        assert!(report.chart().contains("ceiling in force"));
        assert!(
            build(&records, "other", 900, chrono_tz::Tz::UTC)
                .expect("typed entries")
                .is_none()
        );
    }

    #[test]
    fn control_characters_from_outside_are_escaped() {
        assert_eq!(printable("ok\u{1b}[2Jx\u{7}"), "ok\\u{1b}[2Jx\\u{7}");
        assert_eq!(
            printable("a\u{0}b\u{ffff}c\u{202e}d\ne"),
            "a\\u{0}b\\u{ffff}c\\u{202e}d\ne"
        );
    }
}

#[cfg(test)]
mod throughput_tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).expect("valid")
    }

    #[test]
    fn a_job_is_measured_only_if_it_reported_from_the_start_to_the_end() {
        let jobs: std::collections::BTreeSet<String> = ["steady", "silent", "dropped", "late", "never"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let known = vec![
            (at(0), "steady".to_string(), true),
            (at(0), "silent".to_string(), false),
            (at(0), "dropped".to_string(), true),
            (at(50), "dropped".to_string(), false),
            (at(60), "dropped".to_string(), true),
            (at(30), "late".to_string(), true),
            (at(200), "steady".to_string(), false),
        ];
        let audit = throughput_audit(&jobs, &known, Some(at(10)), Some(at(100)));
        assert_eq!(audit.jobs, 5);
        assert_eq!(audit.measured, vec!["late", "steady"]);
        assert_eq!(audit.unmeasured, vec!["dropped", "never", "silent"]);
    }

    #[test]
    fn a_jobs_slowdown_and_minutes_over_its_tier_come_from_its_measured_points() {
        use flexgate_policies::control::entry::ThroughputPoint;
        let point = |s: i64, cap: f64, tokens: f64, uncapped: bool| ThroughputPoint {
            at: at(s),
            job: "j".into(),
            cap_w_per_gpu: cap,
            power_w: cap * 8.0,
            tokens_per_s: tokens,
            uncapped,
            max_slowdown: Some(0.10),
            profile: None,
            gpus: None,
        };
        // Uncapped 1000 before the event; from 0 s: 600 for 120 s (40 % slower), then 900 for
        // 180 s (within the tier); the event ends at 300 s.
        let points = vec![
            point(-60, 700.0, 1000.0, true),
            point(0, 300.0, 600.0, false),
            point(120, 600.0, 900.0, false),
        ];
        let audit = job_audit("j", &points, Some(at(0)), Some(at(300)));
        assert_eq!(audit.tier, Some(0.10));
        assert_eq!(audit.uncapped_tokens_per_s, Some(1000.0));
        let capped = (600.0 * 120.0 + 900.0 * 180.0) / 300.0;
        assert_eq!(audit.capped_tokens_per_s, Some(capped));
        assert!((audit.measured_slowdown.expect("slowdown") - (1.0 - capped / 1000.0)).abs() < 1e-12);
        assert_eq!(audit.minutes_over_tier, Some(2.0));
        assert_eq!(audit.throughput, "measured");
        // Without an uncapped point nothing is claimed.
        let blind = job_audit("j", &points[1..], Some(at(0)), Some(at(300)));
        assert_eq!((blind.measured_slowdown, blind.throughput), (None, "unmeasured"));
    }
}
