//! Declaring, then delivering: what the site tells a day-ahead market it can shed, hour by
//! hour, and how that is later set against what it could shed and shed when an event came.
//!
//! A declaration is made from the forecast in force (each hour's least quarter-hour at the
//! chosen confidence: its `p10` at 90 %, its median at 50 %), and an operator may override any
//! hour with a figure of their own and a reason (a maintenance window the forecast cannot know,
//! a contract that caps the offer). Every hour keeps both figures and says which was declared,
//! so an auditor sees where the operator departed from the forecast and why.
//!
//! The hours are clock hours (UTC, on the hour: what a day-ahead offer is made in), each with its
//! least quarter-hour's figure, so it holds for the whole hour; `flexgate forecast --declare`
//! exports the same hours ([`clock_hours`]), so the export and the declaration agree row for row.

use super::{Band, Forecast};
use chrono::DurationRound;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Where a declared hour's figure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeclaredFrom {
    /// The forecast at the declaration's confidence.
    Forecast,
    /// An operator's figure (with a reason).
    Operator,
}

/// One declared hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeclaredHour {
    /// Its start.
    pub start: DateTime<Utc>,
    /// Its end.
    pub end: DateTime<Utc>,
    /// The kW declared available at the meter.
    pub available_kw: f64,
    /// What the forecast said for it at the declaration's confidence, kW.
    pub forecast_kw: f64,
    /// Which of the two was declared.
    pub from: DeclaredFrom,
    /// The operator's reason, for an overridden hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A declaration, as recorded (`declared` ledger entries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Declaration {
    /// When it was made.
    pub at: DateTime<Utc>,
    /// Who made it (the operator's name, as given).
    pub operator: String,
    /// The confidence, percent: 90 (the hours' `p10`) or 50 (their median).
    pub confidence: u8,
    /// The cost ceiling of the forecast it was made from (a share of the objective's value).
    pub cost_ceiling: f64,
    /// When that forecast was made.
    pub forecast_generated_at: DateTime<Utc>,
    /// The hours.
    pub hours: Vec<DeclaredHour>,
}

/// An operator's figure for one hour.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Override {
    /// The hour's start: a clock hour (on the hour, UTC) the forecast reaches.
    pub start: DateTime<Utc>,
    /// The kW to declare.
    pub available_kw: f64,
    /// Why (required).
    pub reason: String,
}

/// Why a declaration was refused. Nothing is recorded then.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DeclareError {
    /// No forecast to declare from.
    #[error("no forecast to declare from yet (no telemetry, or a proportional policy)")]
    NoForecast,
    /// A confidence other than 90 or 50.
    #[error("confidence must be 90 (declare each hour's P10) or 50 (its median), got {0}")]
    Confidence(u8),
    /// An empty operator name.
    #[error("operator: say who declares (a name, at most 200 characters)")]
    Operator,
    /// An override that names no hour of the forecast.
    #[error(
        "override for {0}: not a clock hour the forecast reaches (on the hour, UTC, within the next 48 hours: see `flexgate forecast --declare`)"
    )]
    UnknownHour(DateTime<Utc>),
    /// An override twice for one hour.
    #[error("override for {0}: given twice")]
    Twice(DateTime<Utc>),
    /// An override's figure out of range.
    #[error(
        "override for {start}: {kw} kW is not a figure the site can declare (a finite number from 0 to {max_kw} kW)"
    )]
    Figure {
        /// The hour.
        start: DateTime<Utc>,
        /// The figure.
        kw: f64,
        /// The most the site can shed (its facility maximum, or unbounded).
        max_kw: f64,
    },
    /// An override without a reason.
    #[error("override for {0}: give a reason (at most 500 characters): an auditor will read it")]
    Reason(DateTime<Utc>),
}

/// Steps gathered into clock hours (UTC, on the hour, as day-ahead offers are made): every hour
/// the steps touch, each with its least step's percentiles, so the figure holds for the whole
/// hour; the first and last hours may be partly covered (their `start`/`end` are still the
/// clock hour's, and the figure is the least over the part the forecast reaches). Steps must be
/// in time order.
pub fn clock_hours(
    steps: impl IntoIterator<Item = (DateTime<Utc>, DateTime<Utc>, Band)>,
) -> Vec<(DateTime<Utc>, DateTime<Utc>, Band)> {
    let mut out: Vec<(DateTime<Utc>, DateTime<Utc>, Band)> = Vec::new();
    for (start, end, band) in steps {
        if end <= start {
            continue;
        }
        // Every clock hour this step overlaps.
        let mut hour = start.duration_trunc(chrono::TimeDelta::hours(1)).unwrap_or(start);
        while hour < end {
            let next = hour + chrono::TimeDelta::hours(1);
            match out.last_mut() {
                Some(last) if last.0 == hour => {
                    last.2 = Band {
                        p10: last.2.p10.min(band.p10),
                        p50: last.2.p50.min(band.p50),
                        p90: last.2.p90.min(band.p90),
                    };
                }
                _ => out.push((hour, next, band)),
            }
            hour = next;
        }
    }
    out
}

/// The forecast's clock hours (see [`clock_hours`]) at `confidence` (W): the least quarter-hour's
/// P10 at 90 %, its median at 50 %.
#[must_use]
pub fn forecast_hours(forecast: &Forecast, confidence: u8) -> Vec<(DateTime<Utc>, DateTime<Utc>, f64)> {
    clock_hours(forecast.steps.iter().map(|s| (s.start, s.end, s.available_w)))
        .into_iter()
        .map(|(start, end, band)| (start, end, if confidence >= 90 { band.p10 } else { band.p50 }))
        .collect()
}

/// The declaration `operator` makes from `forecast` at `confidence`, with `overrides`, at `now`.
/// `max_kw`: the most the site could ever shed (its facility maximum; `None`: no bound known).
pub fn declare(
    forecast: Option<&Forecast>,
    operator: &str,
    confidence: u8,
    overrides: &[Override],
    max_kw: Option<f64>,
    now: DateTime<Utc>,
) -> Result<Declaration, DeclareError> {
    let forecast = forecast.ok_or(DeclareError::NoForecast)?;
    if !matches!(confidence, 50 | 90) {
        return Err(DeclareError::Confidence(confidence));
    }
    let operator = operator.trim();
    if operator.is_empty() || operator.chars().count() > 200 {
        return Err(DeclareError::Operator);
    }
    let mut hours: Vec<DeclaredHour> = forecast_hours(forecast, confidence)
        .into_iter()
        .map(|(start, end, w)| DeclaredHour {
            start,
            end,
            available_kw: w / 1000.0,
            forecast_kw: w / 1000.0,
            from: DeclaredFrom::Forecast,
            reason: None,
        })
        .collect();
    let max_kw = max_kw.filter(|m| m.is_finite() && *m > 0.0).unwrap_or(f64::MAX);
    let mut seen = Vec::with_capacity(overrides.len());
    for o in overrides {
        if seen.contains(&o.start) {
            return Err(DeclareError::Twice(o.start));
        }
        seen.push(o.start);
        let hour = hours
            .iter_mut()
            .find(|h| h.start == o.start)
            .ok_or(DeclareError::UnknownHour(o.start))?;
        if !(o.available_kw.is_finite() && (0.0..=max_kw).contains(&o.available_kw)) {
            return Err(DeclareError::Figure {
                start: o.start,
                kw: o.available_kw,
                max_kw,
            });
        }
        let reason = o.reason.trim();
        if reason.is_empty() || reason.chars().count() > 500 {
            return Err(DeclareError::Reason(o.start));
        }
        hour.available_kw = o.available_kw;
        hour.from = DeclaredFrom::Operator;
        hour.reason = Some(reason.to_string());
    }
    Ok(Declaration {
        at: now,
        operator: operator.to_string(),
        confidence,
        cost_ceiling: forecast.cost_ceiling,
        forecast_generated_at: forecast.generated_at,
        hours,
    })
}

/// What was declared for an event's window, against what the site could shed when it came
/// (and, beside it in the reports, what it delivered).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeclaredForEvent {
    /// The least declared kW over the event's hours (what the site promised for all of it).
    pub declared_kw: f64,
    /// The confidence it was declared at.
    pub confidence: u8,
    /// When the declaration was made (the latest made before the event began).
    pub declared_at: DateTime<Utc>,
    /// Who made it.
    pub operator: String,
    /// Whether an operator overrode any of the event's hours, and why.
    pub overridden: Vec<String>,
    /// The event's hours that were declared, of those it spans.
    pub hours_declared: usize,
    /// See `hours_declared`.
    pub hours_spanned: usize,
    /// What the site could shed within the declaration's cost ceiling when the event came: the
    /// flexibility curve then (the first hour of the last forecast made before the event), kW.
    pub could_shed_kw: Option<f64>,
    /// When that curve was computed.
    pub could_shed_at: Option<DateTime<Utc>>,
}

/// The declaration in force for `[start, end)`: of `declarations` (in ledger order), the latest
/// made before `start` that declares any of the window's hours; `None` when none does. `curve`:
/// the last forecast's first-hour figure before `start` (time, W), what the site could shed.
#[must_use]
pub fn for_event(
    declarations: &[Declaration],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    curve: Option<(DateTime<Utc>, f64)>,
) -> Option<DeclaredForEvent> {
    let overlaps = |h: &DeclaredHour| h.start < end && h.end > start;
    let d = declarations
        .iter()
        .rev()
        .find(|d| d.at <= start && d.hours.iter().any(overlaps))?;
    let hours: Vec<&DeclaredHour> = d.hours.iter().filter(|h| overlaps(h)).collect();
    // The window's hours, some perhaps beyond the declaration's 48 (then undeclared).
    let hours_spanned = usize::try_from(((end - start).num_seconds().max(0) + 3599) / 3600)
        .unwrap_or(usize::MAX)
        .max(hours.len());
    Some(DeclaredForEvent {
        declared_kw: hours.iter().map(|h| h.available_kw).fold(f64::INFINITY, f64::min),
        confidence: d.confidence,
        declared_at: d.at,
        operator: d.operator.clone(),
        overridden: hours
            .iter()
            .filter(|h| h.from == DeclaredFrom::Operator)
            .map(|h| {
                format!(
                    "{}: {}",
                    h.start.format("%Y-%m-%d %H:%M UTC"),
                    h.reason.as_deref().unwrap_or("")
                )
            })
            .collect(),
        hours_declared: hours.len(),
        hours_spanned,
        could_shed_kw: curve.map(|(_, w)| w / 1000.0),
        could_shed_at: curve.map(|(at, _)| at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forecast::{Band, ForecastStep};
    use chrono::Duration;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("valid")
    }

    fn forecast() -> Forecast {
        Forecast {
            generated_at: t0(),
            cost_ceiling: 0.1,
            scale_to_now: 1.0,
            basis: Vec::new(),
            steps: (0..192)
                .map(|i| {
                    let start = t0() + Duration::minutes(15 * i64::from(i));
                    let w = 100_000.0 - 300.0 * f64::from(i) + if i % 4 == 2 { -5000.0 } else { 0.0 };
                    ForecastStep {
                        start,
                        end: start + Duration::minutes(15),
                        available_w: Band {
                            p10: w * 0.8,
                            p50: w,
                            p90: w * 1.1,
                        },
                        jobs_expected: 1.0,
                        gpus_expected: 8.0,
                        gpus_unknown: 0.0,
                        levels: Vec::new(),
                    }
                })
                .collect(),
        }
    }

    #[test]
    fn each_hour_declares_its_least_quarter_hour_at_the_confidence() {
        let f = forecast();
        let d = declare(Some(&f), "ana", 90, &[], None, t0()).expect("declared");
        assert_eq!(d.hours.len(), 48);
        // Hour 0: steps 0..4, the least is step 2 (a dip of 5 kW), its P10.
        let least = (100_000.0 - 600.0 - 5000.0) * 0.8 / 1000.0;
        assert!((d.hours[0].available_kw - least).abs() < 1e-9, "{:?}", d.hours[0]);
        assert_eq!(d.hours[0].from, DeclaredFrom::Forecast);
        let median = declare(Some(&f), "ana", 50, &[], None, t0()).expect("declared");
        assert!(median.hours[0].available_kw > d.hours[0].available_kw);
    }

    #[test]
    fn quarter_hours_from_any_minute_gather_into_clock_hours_each_at_its_least() {
        let start = t0() + Duration::minutes(7);
        let band = |w: f64| Band {
            p10: w * 0.5,
            p50: w,
            p90: w * 2.0,
        };
        let steps: Vec<_> = (0..8)
            .map(|i| {
                let s = start + Duration::minutes(15 * i);
                (s, s + Duration::minutes(15), band(100.0 - f64::from(i as i32)))
            })
            .collect();
        let hours = clock_hours(steps);
        // 08:07–10:07 touches the hours of 08:00, 09:00 and 10:00.
        assert_eq!(hours.len(), 3);
        assert_eq!((hours[0].0, hours[0].1), (t0(), t0() + Duration::hours(1)));
        assert_eq!(
            hours[0].2,
            band(97.0),
            "steps 0–3 touch 08:00 (the 4th runs 08:52–09:07)"
        );
        assert_eq!(hours[1].2, band(93.0), "steps 3–7 touch 09:00");
        assert_eq!(hours[2].2, band(93.0), "step 7 runs into 10:00");
    }

    #[test]
    fn an_operator_overrides_an_hour_with_a_reason_and_bad_overrides_change_nothing() {
        let f = forecast();
        let start = f.steps[8].start;
        let o = |kw: f64, reason: &str| Override {
            start,
            available_kw: kw,
            reason: reason.into(),
        };
        let d = declare(
            Some(&f),
            "ana",
            90,
            &[o(12.0, "chiller maintenance 02:00-03:00")],
            Some(500.0),
            t0(),
        )
        .expect("declared");
        assert_eq!(d.hours[2].available_kw, 12.0);
        assert_eq!(d.hours[2].from, DeclaredFrom::Operator);
        assert!(d.hours[2].forecast_kw > 12.0, "the forecast's figure is kept beside it");
        assert_eq!(d.hours[2].reason.as_deref(), Some("chiller maintenance 02:00-03:00"));
        for (bad, why) in [
            (vec![o(f64::NAN, "x")], "NaN"),
            (vec![o(-1.0, "x")], "negative"),
            (vec![o(600.0, "x")], "above the facility maximum"),
            (vec![o(12.0, "  ")], "no reason"),
            (vec![o(12.0, "a"), o(13.0, "b")], "twice"),
            (
                vec![Override {
                    start: start + Duration::minutes(7),
                    available_kw: 1.0,
                    reason: "x".into(),
                }],
                "not an hour",
            ),
        ] {
            assert!(declare(Some(&f), "ana", 90, &bad, Some(500.0), t0()).is_err(), "{why}");
        }
        assert_eq!(declare(None, "ana", 90, &[], None, t0()), Err(DeclareError::NoForecast));
        assert_eq!(
            declare(Some(&f), "ana", 75, &[], None, t0()),
            Err(DeclareError::Confidence(75))
        );
        assert_eq!(declare(Some(&f), " ", 90, &[], None, t0()), Err(DeclareError::Operator));
    }

    #[test]
    fn an_event_is_set_against_the_latest_declaration_made_before_it() {
        let f = forecast();
        let early = declare(Some(&f), "ana", 90, &[], None, t0()).expect("declared");
        let start = f.steps[8].start;
        let later = declare(
            Some(&f),
            "bo",
            90,
            &[Override {
                start,
                available_kw: 20.0,
                reason: "contract cap".into(),
            }],
            None,
            t0() + Duration::minutes(30),
        )
        .expect("declared");
        let after_the_event = declare(Some(&f), "cy", 50, &[], None, start + Duration::minutes(1)).expect("declared");
        let all = vec![early, later, after_the_event];
        let e = for_event(&all, start, start + Duration::minutes(90), Some((start, 70_000.0))).expect("declared");
        assert_eq!(e.operator, "bo", "the latest made before the event");
        assert_eq!(e.hours_declared, 2);
        assert_eq!(e.declared_kw, 20.0, "the least over the event's hours");
        assert_eq!(e.overridden.len(), 1);
        assert_eq!(e.could_shed_kw, Some(70.0));
        assert!(for_event(&all, t0() - Duration::hours(2), t0() - Duration::hours(1), None).is_none());
    }
}
