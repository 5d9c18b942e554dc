//! What an event delivered against what was committed, interval by interval and for the event:
//! the figures a settlement pays or penalises on.
//!
//! - **Delivered** (per interval): the adjusted baseline minus the metered load, kW; negative
//!   when the load rose above the baseline.
//! - **Committed**: the reduction the site committed to, kW (one figure for the event).
//! - **Performance factor**: delivered ÷ committed, per interval and for the event (the event's
//!   is the sum of delivered over the sum of committed, the intervals being of one length, so
//!   it weighs each interval alike).
//! - **Over-delivery**: per interval, what was delivered beyond the commitment (zero when
//!   short); for the event, the mean over its intervals, so that an interval's excess is not
//!   netted against another's shortfall.
//! - **Firm service level**: there is no baseline and so no delivered reduction; each
//!   interval is compliant when the meter is at or under the level, and its margin is the
//!   level minus the meter.
//!
//! An interval without a metered figure delivers nothing in the event's figures (a program
//! cannot pay for a reduction nobody measured) and is counted as missing; under a firm service
//! level it is not compliant. The metered series must have the report's interval length: its
//! intervals are matched by their start.

use super::local::value_at;
use super::method::MethodId;
use super::report::BaselineReport;
use crate::intervals::IntervalSeries;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// One interval's performance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalPerformance {
    /// Start, UTC.
    pub start: DateTime<Utc>,
    /// End, UTC.
    pub end: DateTime<Utc>,
    /// The adjusted baseline, kW (none for a firm service level).
    pub baseline_kw: Option<f64>,
    /// The firm service level, kW (that method only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firm_service_level_kw: Option<f64>,
    /// The metered load, kW.
    pub metered_kw: Option<f64>,
    /// Baseline − metered, kW.
    pub delivered_kw: Option<f64>,
    /// The committed reduction, kW.
    pub committed_kw: Option<f64>,
    /// Delivered ÷ committed.
    pub performance_factor: Option<f64>,
    /// Delivered beyond the commitment, kW (zero when short).
    pub over_delivery_kw: Option<f64>,
    /// Firm service level: the meter at or under the level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compliant: Option<bool>,
    /// Firm service level: level − metered, kW (negative: over the level).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub margin_kw: Option<f64>,
}

/// An event's performance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventPerformance {
    /// The baseline method.
    pub method: MethodId,
    /// The committed reduction, kW (none for a firm service level, or when not given).
    pub committed_kw: Option<f64>,
    /// Per interval.
    pub intervals: Vec<IntervalPerformance>,
    /// Intervals with a metered figure.
    pub intervals_metered: usize,
    /// Intervals without one.
    pub intervals_missing: usize,
    /// Mean delivered reduction over the event, kW (missing intervals deliver nothing).
    pub delivered_kw: Option<f64>,
    /// Σ delivered ÷ Σ committed.
    pub performance_factor: Option<f64>,
    /// Mean over-delivery, kW.
    pub over_delivery_kw: Option<f64>,
    /// Firm service level: intervals at or under the level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervals_compliant: Option<usize>,
}

/// The performance of the event `report` baselines, against `metered` and `committed_kw`.
#[must_use]
pub fn performance(report: &BaselineReport, metered: &IntervalSeries, committed_kw: Option<f64>) -> EventPerformance {
    let level = report.method == MethodId::FirmServiceLevel;
    let committed_kw = if level { None } else { committed_kw };
    let commitment = committed_kw.filter(|c| c.is_finite() && *c > 0.0);
    let intervals: Vec<IntervalPerformance> = report
        .intervals
        .iter()
        .map(|i| {
            let metered_kw = value_at(metered, i.start).map(|(kw, _)| kw);
            let delivered_kw = i.adjusted_baseline_kw.zip(metered_kw).map(|(b, m)| b - m);
            let margin_kw = i.firm_service_level_kw.zip(metered_kw).map(|(l, m)| l - m);
            IntervalPerformance {
                start: i.start,
                end: i.end,
                baseline_kw: i.adjusted_baseline_kw,
                firm_service_level_kw: i.firm_service_level_kw,
                metered_kw,
                delivered_kw,
                committed_kw,
                performance_factor: delivered_kw.zip(commitment).map(|(d, c)| d / c),
                over_delivery_kw: delivered_kw.zip(commitment).map(|(d, c)| (d - c).max(0.0)),
                compliant: i.firm_service_level_kw.map(|_| margin_kw.is_some_and(|m| m >= 0.0)),
                margin_kw,
            }
        })
        .collect();
    let n = intervals.len();
    let intervals_metered = intervals.iter().filter(|i| i.metered_kw.is_some()).count();
    let per_event = |f: fn(&IntervalPerformance) -> Option<f64>| {
        (n > 0 && !level).then(|| intervals.iter().map(|i| f(i).unwrap_or(0.0)).sum::<f64>() / n as f64)
    };
    let delivered_kw = per_event(|i| i.delivered_kw);
    EventPerformance {
        method: report.method,
        committed_kw,
        intervals_metered,
        intervals_missing: n - intervals_metered,
        performance_factor: delivered_kw.zip(commitment).map(|(d, c)| d / c),
        over_delivery_kw: commitment.and(per_event(|i| i.over_delivery_kw)),
        delivered_kw,
        intervals_compliant: level.then(|| intervals.iter().filter(|i| i.compliant == Some(true)).count()),
        intervals,
    }
}
