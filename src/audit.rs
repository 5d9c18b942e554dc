//! Per-event audit: what was asked, how it was read, what was decided and done, and what the
//! meter shows, rebuilt from the ledger alone so an auditor can reproduce it from an export.

use crate::ledger::{Record, RecordKind};
use crate::plot::{AxisFormat, Chart, LineStyle, Series};
use chrono::{DateTime, Duration as ChronoDuration, Utc};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Write as _;

/// The audit of one event.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// Event id.
    pub event_id: String,
    /// Every revision received, verbatim, with transport metadata.
    pub received: Vec<Value>,
    /// Interpretation of each revision: target → ceiling → budget chain, baseline used.
    pub interpretations: Vec<Value>,
    /// Acknowledgments sent.
    pub acks: Vec<Value>,
    /// Lifecycle transitions.
    pub transitions: Vec<Value>,
    /// Plans made while this event was binding.
    pub plans: Vec<PlanSummary>,
    /// Dispatches, confirmations and restores.
    pub dispatches: Vec<DispatchSummary>,
    /// Closed-loop trims with their reasons.
    pub trims: Vec<Value>,
    /// Baseline evidence.
    pub baseline: BaselineSummary,
    /// Per interval: ceiling versus measured meter.
    pub intervals: Vec<IntervalAudit>,
    /// Jobs capped through the unknown-elasticity fallback.
    pub fallbacks: Vec<String>,
    /// Meter samples `(time, meter kW, ceiling kW in force)` from baseline window to the end.
    pub series: Vec<(DateTime<Utc>, f64, Option<f64>)>,
}

/// One plan.
#[derive(Debug, Clone, Serialize)]
pub struct PlanSummary {
    /// Ledger sequence (= generation of its caps).
    pub seq: u64,
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
}

/// One dispatch (or restore).
#[derive(Debug, Clone, Serialize)]
pub struct DispatchSummary {
    /// Ledger sequence.
    pub seq: u64,
    /// `dispatch` or `restore`.
    pub kind: String,
    /// Commands sent.
    pub commands: usize,
    /// Confirmed by the backend.
    pub confirmed: usize,
    /// Not confirmed (failed, unknown job).
    pub failed: usize,
}

/// An X-of-Y-days baseline (PJM "high 4 of 5", CAISO "10 in 10"): the mean of the X highest
/// of the previous Y days' mean meter over the same time-of-day window as the event.
#[derive(Debug, Clone, Serialize)]
pub struct XOfYBaseline {
    /// X.
    pub x: usize,
    /// Y.
    pub y: usize,
    /// Mean meter of each of the Y previous days over the event window, most recent first.
    pub day_means_kw: Vec<f64>,
    /// Mean of the X highest.
    pub kw: f64,
}

/// Baseline evidence (meter-before / meter-after, and X-of-Y days when the log has the history).
#[derive(Debug, Clone, Serialize)]
pub struct BaselineSummary {
    /// Method of `kw`: `x_of_y` when the ledger holds Y previous days, else `meter_before_after`.
    pub method: String,
    /// Mean meter over the window before the event.
    pub before_kw: Option<f64>,
    /// Mean meter over the window after recovery.
    pub after_kw: Option<f64>,
    /// Baseline used for delivered reduction: the mean of before and after where both exist.
    pub kw: Option<f64>,
    /// Samples before / after.
    pub samples: (usize, usize),
    /// Baseline recorded at interpretation time.
    pub recorded_at_interpretation_kw: Option<f64>,
    /// The X-of-Y-days baseline, when the ledger holds the history.
    pub x_of_y: Option<XOfYBaseline>,
}

/// Days in the X-of-Y baseline: the highest 4 of the previous 5 days (PJM's economic CBL).
pub const BASELINE_DAYS: (usize, usize) = (4, 5);

fn x_of_y(meter: &[(DateTime<Utc>, f64, Option<f64>)], from: DateTime<Utc>, to: DateTime<Utc>) -> Option<XOfYBaseline> {
    let (x, y) = BASELINE_DAYS;
    let mut day_means = Vec::with_capacity(y);
    for day in 1..=y as i64 {
        let shift = ChronoDuration::days(day);
        let xs: Vec<f64> = meter
            .iter()
            .filter(|(t, _, _)| *t >= from - shift && *t < to - shift)
            .map(|(_, kw, _)| *kw)
            .collect();
        if xs.is_empty() {
            return None;
        }
        day_means.push(xs.iter().sum::<f64>() / xs.len() as f64);
    }
    let mut highest = day_means.clone();
    highest.sort_by(|a, b| b.total_cmp(a));
    let kw = highest.iter().take(x).sum::<f64>() / x as f64;
    Some(XOfYBaseline {
        x,
        y,
        day_means_kw: day_means,
        kw,
    })
}

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
    /// Meter samples.
    pub samples: usize,
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
}

fn at_of(value: &Value) -> Option<DateTime<Utc>> {
    serde_json::from_value(value.clone()).ok()
}

/// Build the audit of `event_id` from all ledger records, `window_s` seconds of baseline.
#[must_use]
pub fn build(records: &[Record], event_id: &str, window_s: u64) -> Option<AuditReport> {
    let mine = |r: &&Record| r.event.as_deref() == Some(event_id);
    let of_kind = |kind: RecordKind| records.iter().filter(mine).filter(move |r| r.kind == kind);
    let received: Vec<Value> = of_kind(RecordKind::RawInput).map(|r| r.body.clone()).collect();
    if received.is_empty() {
        return None;
    }
    let interpretations: Vec<Value> = of_kind(RecordKind::Interpretation).map(|r| r.body.clone()).collect();
    let acks = of_kind(RecordKind::Ack).map(|r| r.body.clone()).collect();
    let transitions: Vec<Value> = of_kind(RecordKind::EventState).map(|r| r.body.clone()).collect();
    let mut fallbacks: Vec<String> = Vec::new();
    let plans = of_kind(RecordKind::Plan)
        .map(|r| {
            let b = &r.body;
            for f in b["plan"]["fallbacks"].as_array().into_iter().flatten() {
                if let Some(f) = f.as_str()
                    && !fallbacks.iter().any(|x| x == f)
                {
                    fallbacks.push(f.to_string());
                }
            }
            PlanSummary {
                seq: r.seq,
                reason: b["reason"].as_str().unwrap_or("").to_string(),
                ceiling_kw: b["ceiling"]["ceiling_kw"].as_f64(),
                gpu_budget_w: b["gpu_budget_w"].as_f64(),
                trim_w: b["trim_w"].as_f64(),
                planned_power_w: b["plan"]["planned_power"].as_f64(),
                shortfall_w: b["plan"]["shortfall"].as_f64(),
                jobs_capped: b["plan"]["rows"].as_array().map_or(0, |rows| {
                    rows.iter()
                        .filter(|row| !matches!(row[6].as_str(), Some("uncapped" | "inflexible_unknown")))
                        .count()
                }),
            }
        })
        .collect();
    let dispatches = records
        .iter()
        .filter(mine)
        .filter(|r| matches!(r.kind, RecordKind::Dispatch | RecordKind::Restore))
        .map(|r| {
            let confirmed = r.body["confirmed"].as_u64().unwrap_or(0) as usize;
            DispatchSummary {
                seq: r.seq,
                kind: if r.kind == RecordKind::Restore {
                    "restore"
                } else {
                    "dispatch"
                }
                .to_string(),
                commands: r.body["rows"].as_array().map_or(0, Vec::len),
                confirmed,
                failed: r.body["failed"].as_u64().unwrap_or(0) as usize,
            }
        })
        .collect();
    let trims = records
        .iter()
        .filter(mine)
        .filter(|r| r.kind == RecordKind::Operator)
        .map(|r| r.body.clone())
        .collect();

    // Timing: the event as last interpreted; the effective start from its first transition.
    let latest = interpretations.last().cloned().unwrap_or(Value::Null);
    let event = &latest["event"];
    let window_start = at_of(&event["window"]["start"]);
    let ramp_s = event["window"]["ramp_s"].as_u64().unwrap_or(0);
    let started = transitions
        .iter()
        .find(|t| t["to"].as_str() == Some("ramping") || t["to"].as_str() == Some("active"))
        .and_then(|t| at_of(&t["at"]))
        .or(window_start);
    let ended = transitions
        .iter()
        .rev()
        .find(|t| matches!(t["to"].as_str(), Some("completed" | "cancelled")))
        .and_then(|t| at_of(&t["at"]));
    let recovering = transitions
        .iter()
        .find(|t| t["to"].as_str() == Some("recovering"))
        .and_then(|t| at_of(&t["at"]));

    let meter: Vec<(DateTime<Utc>, f64, Option<f64>)> = records
        .iter()
        .filter(|r| r.kind == RecordKind::Measurement)
        .filter_map(|r| {
            Some((
                at_of(&r.body["at"])?,
                r.body["meter_kw"].as_f64()?,
                r.body["ceiling_kw"].as_f64(),
            ))
        })
        .collect();
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
    let history = match (started, ended) {
        (Some(s), Some(e)) => x_of_y(&meter, s, e),
        _ => None,
    };
    let baseline_kw = match (&history, before_kw, after_kw) {
        (Some(h), _, _) => Some(h.kw),
        (None, Some(b), Some(a)) => Some((a + b) / 2.0),
        (None, Some(b), None) => Some(b),
        (None, None, a) => a,
    };
    let baseline = BaselineSummary {
        method: if history.is_some() {
            "x_of_y"
        } else {
            "meter_before_after"
        }
        .to_string(),
        before_kw,
        after_kw,
        kw: baseline_kw,
        samples: (n_before, n_after),
        recorded_at_interpretation_kw: latest["baseline"]["kw"].as_f64(),
        x_of_y: history,
    };

    let mut intervals = Vec::new();
    if let Some(start) = window_start.or(started) {
        let shift = started.map_or(ChronoDuration::zero(), |s| (s - start).max(ChronoDuration::zero()));
        let items = event["intervals"].as_array().cloned().unwrap_or_default();
        let duration = event["window"]["duration_s"].as_u64();
        let close = recovering.or(ended);
        for (index, interval) in items.iter().enumerate() {
            let offset = interval["offset_s"].as_u64().unwrap_or(0);
            let mut from = start + shift + ChronoDuration::seconds(offset as i64);
            if index == 0 {
                from += ChronoDuration::seconds(ramp_s as i64);
            }
            let nominal_end = interval["duration_s"]
                .as_u64()
                .map(|d| start + shift + ChronoDuration::seconds((offset + d) as i64))
                .or_else(|| duration.map(|d| start + shift + ChronoDuration::seconds(d as i64)));
            let to = match (nominal_end, close) {
                (Some(e), Some(c)) => e.min(c),
                (Some(e), None) => e,
                (None, Some(c)) => c,
                (None, None) => meter.last().map_or(from, |m| m.0 + ChronoDuration::seconds(1)),
            };
            let ceiling_kw = latest["ceilings"][index]["ceiling_kw"].as_f64();
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
                mean_meter_kw: mean,
                max_meter_kw: xs.iter().copied().reduce(f64::max),
                compliance: ceiling_kw
                    .filter(|_| !xs.is_empty())
                    .map(|c| xs.iter().filter(|kw| **kw <= c + 1e-9).count() as f64 / xs.len() as f64),
                delivered_reduction_kw: baseline_kw.zip(mean).map(|(b, m)| b - m),
                shortfall_kw: ceiling_kw.zip(mean).map(|(c, m)| (m - c).max(0.0)),
                over_delivery_kw: ceiling_kw.zip(mean).map(|(c, m)| (c - m).max(0.0)),
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
    Some(AuditReport {
        event_id: event_id.to_string(),
        received,
        interpretations,
        acks,
        transitions,
        plans,
        dispatches,
        trims,
        baseline,
        intervals,
        fallbacks,
        series,
    })
}

fn kw(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |x| format!("{x:.1}"))
}

impl AuditReport {
    /// Markdown for people.
    #[must_use]
    pub fn to_markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Audit of event `{}`\n", self.event_id);
        let _ = writeln!(out, "## Received ({} revision(s))\n", self.received.len());
        for r in &self.received {
            let _ = writeln!(
                out,
                "- at {} via {}:\n  ```json\n  {}\n  ```",
                r["received_at"],
                r["transport"],
                r["bytes"].as_str().unwrap_or("")
            );
        }
        let _ = writeln!(out, "\n## Interpretation\n");
        for i in &self.interpretations {
            let ceilings: Vec<String> = i["ceilings"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| kw(c["ceiling_kw"].as_f64()))
                .collect();
            let _ = writeln!(
                out,
                "- revision {}: ceilings [{}] kW; baseline {} kW ({}); outcome {}; budget chain: {}",
                i["event"]["revision"],
                ceilings.join(", "),
                kw(i["baseline"]["kw"].as_f64()),
                i["baseline"]["method"].as_str().unwrap_or("none"),
                i["outcome"].as_str().unwrap_or(""),
                i["settled_budget"]["gpu_budget"].as_f64().map_or_else(
                    || "—".into(),
                    |w| format!("GPU budget {:.1} kW (settled cooling)", w / 1000.0)
                ),
            );
        }
        let _ = writeln!(out, "\n## Acknowledgments\n");
        for a in &self.acks {
            let _ = writeln!(
                out,
                "- revision {} opt {} {} (checkpoint {})",
                a["revision"],
                a["opt"].as_str().unwrap_or(""),
                a["reason"].as_str().unwrap_or(""),
                a["log_checkpoint"].as_str().unwrap_or("")
            );
        }
        let _ = writeln!(out, "\n## Lifecycle\n");
        for t in &self.transitions {
            let _ = writeln!(
                out,
                "- {} → {} at {}",
                t["from"].as_str().unwrap_or(""),
                t["to"].as_str().unwrap_or(""),
                t["at"].as_str().unwrap_or("")
            );
        }
        let _ = writeln!(
            out,
            "\n## Plans ({})\n\n| seq | reason | ceiling kW | GPU budget kW | trim kW | planned kW | shortfall kW | jobs capped |\n|---|---|---|---|---|---|---|---|",
            self.plans.len()
        );
        for p in &self.plans {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                p.seq,
                p.reason,
                kw(p.ceiling_kw),
                kw(p.gpu_budget_w.map(|w| w / 1000.0)),
                kw(p.trim_w.map(|w| w / 1000.0)),
                kw(p.planned_power_w.map(|w| w / 1000.0)),
                kw(p.shortfall_w.map(|w| w / 1000.0)),
                p.jobs_capped
            );
        }
        let _ = writeln!(
            out,
            "\n## Dispatches\n\n| seq | kind | commands | confirmed | failed |\n|---|---|---|---|---|"
        );
        for d in &self.dispatches {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} |",
                d.seq, d.kind, d.commands, d.confirmed, d.failed
            );
        }
        if !self.trims.is_empty() {
            let _ = writeln!(out, "\n## Closed-loop trims\n");
            for t in &self.trims {
                let _ = writeln!(
                    out,
                    "- {}: {}",
                    t["at"].as_str().unwrap_or(""),
                    t["reason"].as_str().unwrap_or("")
                );
            }
        }
        let b = &self.baseline;
        let _ = writeln!(
            out,
            "\n## Baseline ({})\n\nbefore {} kW ({} samples), after {} kW ({} samples), used {} kW; recorded at interpretation {} kW",
            b.method,
            kw(b.before_kw),
            b.samples.0,
            kw(b.after_kw),
            b.samples.1,
            kw(b.kw),
            kw(b.recorded_at_interpretation_kw)
        );
        if let Some(h) = &b.x_of_y {
            let days: Vec<String> = h.day_means_kw.iter().map(|kw| format!("{kw:.1}")).collect();
            let _ = writeln!(
                out,
                "\nX-of-Y days: highest {} of the previous {} days ({} kW) → {:.1} kW",
                h.x,
                h.y,
                days.join(", "),
                h.kw
            );
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
        let _ = writeln!(
            out,
            "\n## Fallbacks\n\n{}",
            if self.fallbacks.is_empty() {
                "none".to_string()
            } else {
                format!("unknown elasticity, uniform cap: {}", self.fallbacks.join(", "))
            }
        );
        out
    }

    /// Meter power against the ceiling over the event, as SVG.
    #[must_use]
    pub fn chart(&self) -> String {
        let origin = self.series.first().map(|s| s.0);
        let x = |t: DateTime<Utc>| origin.map_or(0.0, |o| (t - o).num_milliseconds() as f64 / 1000.0);
        let meter: Vec<(f64, f64)> = self.series.iter().map(|(t, kw, _)| (x(*t), *kw)).collect();
        let ceiling: Vec<(f64, f64)> = self
            .series
            .iter()
            .filter_map(|(t, _, c)| Some((x(*t), (*c)?)))
            .collect();
        Chart::new(
            format!("Event {}: meter power against the ceiling", self.event_id),
            "time since baseline window start (hh:mm)",
            "kW at the meter",
        )
        .x_format(AxisFormat::Time)
        .series(Series::new("measured meter", meter))
        .series(Series::new("ceiling in force", ceiling).style(LineStyle::Step))
        .to_svg()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::Record;
    use serde_json::json;

    fn record(seq: u64, kind: RecordKind, event: Option<&str>, body: Value) -> Record {
        Record {
            seq,
            time: Utc::now(),
            kind,
            event: event.map(str::to_string),
            dedup_key: None,
            body,
            prev_hash: String::new(),
            hash: String::new(),
        }
    }

    #[test]
    fn intervals_baselines_and_x_of_y_from_records() {
        let start: DateTime<Utc> = "2026-07-14T19:00:00Z".parse().expect("time");
        let mut records = Vec::new();
        let mut seq = 0;
        let mut push = |kind, event: Option<&str>, body| {
            seq += 1;
            records.push(record(seq, kind, event, body));
        };
        // Six days of meter history every 10 minutes: day d before the event reads 100 + d kW.
        for minutes in (0..6 * 24 * 60).step_by(10) {
            let at = start - ChronoDuration::days(6) + ChronoDuration::minutes(minutes);
            let days_before = ((start - at).num_seconds() + 86_399) / 86_400; // 1 for the last 24 h
            push(
                RecordKind::Measurement,
                None,
                json!({"at": at, "meter_kw": 100.0 + days_before as f64, "ceiling_kw": null}),
            );
        }
        let event = json!({"id": "ev", "window": {"start": start, "ramp_s": 0, "duration_s": 3600, "recovery_s": 0},
                           "intervals": [{"offset_s": 0, "duration_s": 3600}], "revision": 1});
        push(
            RecordKind::RawInput,
            Some("ev"),
            json!({"received_at": start, "bytes": "{}"}),
        );
        push(
            RecordKind::Interpretation,
            Some("ev"),
            json!({"event": event, "ceilings": [{"ceiling_kw": 80.0}], "baseline": {"kw": 101.0}}),
        );
        push(
            RecordKind::EventState,
            Some("ev"),
            json!({"from": "pending", "to": "active", "at": start}),
        );
        for minutes in (0..60).step_by(10) {
            let at = start + ChronoDuration::minutes(minutes);
            push(
                RecordKind::Measurement,
                Some("ev"),
                json!({"at": at, "meter_kw": if minutes == 0 { 85.0 } else { 78.0 }, "ceiling_kw": 80.0}),
            );
        }
        let end = start + ChronoDuration::hours(1);
        push(
            RecordKind::EventState,
            Some("ev"),
            json!({"from": "active", "to": "completed", "at": end}),
        );
        for minutes in (0..30).step_by(10) {
            push(
                RecordKind::Measurement,
                None,
                json!({"at": end + ChronoDuration::minutes(minutes), "meter_kw": 101.0, "ceiling_kw": null}),
            );
        }

        let report = build(&records, "ev", 900).expect("report");
        let h = report
            .baseline
            .x_of_y
            .as_ref()
            .expect("five previous days are in the ledger");
        // Day means 101..105 (most recent first); highest 4 of 5: 102..105 → 103.5.
        assert_eq!(h.day_means_kw, vec![101.0, 102.0, 103.0, 104.0, 105.0]);
        assert!((h.kw - 103.5).abs() < 1e-9);
        assert_eq!(report.baseline.method, "x_of_y");
        assert_eq!(report.baseline.before_kw, Some(101.0));
        assert_eq!(report.baseline.after_kw, Some(101.0));
        let i = &report.intervals[0];
        assert_eq!(i.samples, 6);
        assert!((i.compliance.expect("compliance") - 5.0 / 6.0).abs() < 1e-9);
        let mean = (85.0 + 5.0 * 78.0) / 6.0;
        assert!((i.mean_meter_kw.expect("mean") - mean).abs() < 1e-9);
        assert!((i.delivered_reduction_kw.expect("delivered") - (103.5 - mean)).abs() < 1e-9);
        assert_eq!(i.shortfall_kw, Some(0.0));
        assert!((i.over_delivery_kw.expect("over") - (80.0 - mean)).abs() < 1e-9);
        assert!(report.to_markdown().contains("highest 4 of the previous 5 days"));
        assert!(report.chart().contains("ceiling in force"));
        assert!(build(&records, "other", 900).is_none());
    }
}
