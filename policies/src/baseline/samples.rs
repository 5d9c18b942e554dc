//! PJM's Economic CBL on the gateway's own meter readings, one figure for the event window:
//! the audit's baseline (`src/reports/audit.rs`) since before interval data existed. The
//! program baselines on interval data, one figure per interval, are [`super::compute`]'s;
//! `pjm_economic` there follows the same rules.
//!
//! [`pjm_economic_cbl`] follows PJM's Economic Load Response CBL (PJM Manual 11, customer
//! baseline load):
//!
//! - **Day type.** A weekday event (Monday to Friday, not a NERC holiday) uses the five most
//!   recent eligible weekdays and averages the **highest four** ("high 4 of 5"); an event on a
//!   weekend day or a NERC holiday uses the three most recent eligible weekend days or holidays
//!   and averages the **highest two** ("high 2 of 3").
//! - **Eligible days** are found walking back from the day before the event, at most 45
//!   calendar days. A day is passed over when it is of the other type, when the site was
//!   curtailing on it (an event day: it is not "normal" load), when the ledger holds no meter
//!   reading in the window that day, or when its load in the window is below a quarter of the
//!   mean of the days selected with it (a low-usage day: a shutdown, not a baseline).
//! - **Window.** Each day's figure is its mean metered load over the same local clock times as
//!   the event, in the site's time zone with its DST rules: a 14:00–16:00 event is compared
//!   with 14:00–16:00 on each day, whatever UTC offset that day had.
//! - **Same-day adjustment** (symmetric additive): the site's mean load over the three hours
//!   ending one hour before the event starts, minus the same hours' mean over the selected
//!   days, added to the CBL (up or down). Without a reading in that window on the event day it
//!   is not applied, and the CBL says so.
//!
//! NERC holidays: New Year's Day, Memorial Day, Independence Day, Labor Day, Thanksgiving and
//! Christmas; one falling on a Sunday is observed the Monday after, one on a Saturday is not
//! moved.
//!
//! Pure: meter samples, the event's window, the zone and the event days in; the CBL with every
//! day it used or passed over, and why, out.

use super::calendar::DayType;
use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;
use serde::Serialize;
use std::collections::BTreeSet;

/// How far back eligible days are searched.
pub const LOOKBACK_DAYS: i64 = 45;

/// Below this share of the selected days' mean a day is a low-usage day, passed over.
pub const LOW_USAGE_SHARE: f64 = 0.25;

/// Why a day was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PassedOver {
    /// The site was curtailing on it.
    EventDay,
    /// Its load in the window was under a quarter of the selected days' mean.
    LowUsage,
    /// No meter reading in the window that day.
    NoData,
    /// The window's local clock time does not exist that day (a DST gap).
    NoSuchLocalTime,
}

/// One day looked at.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineDay {
    /// The local calendar day.
    pub date: NaiveDate,
    /// Its mean metered load over the event's local clock window, kW (absent without data).
    pub mean_kw: Option<f64>,
    /// Meter readings in the window.
    pub samples: usize,
    /// Whether it is among the `x` highest of the days used.
    pub counted: bool,
}

/// The symmetric additive same-day adjustment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SameDayAdjustment {
    /// The event day's mean load over the three hours ending one hour before the start, kW.
    pub event_day_kw: f64,
    /// The counted days' mean over the same local hours, kW.
    pub baseline_days_kw: f64,
    /// `event_day_kw − baseline_days_kw`, added to the CBL.
    pub kw: f64,
}

/// A customer baseline load for one event window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Cbl {
    /// The rule followed: `pjm_economic`.
    pub rule: &'static str,
    /// The IANA time zone the days and windows are in.
    pub time_zone: String,
    /// The event's day type, hence `x_of_y`.
    pub day_type: DayType,
    /// `(x, y)` of the rule applied.
    pub x_of_y: (usize, usize),
    /// The `y` days used, most recent first.
    pub days: Vec<BaselineDay>,
    /// The days passed over while searching, most recent first, and why (other day types are
    /// not listed).
    pub passed_over: Vec<(NaiveDate, PassedOver)>,
    /// The mean of the `x` highest days, kW.
    pub unadjusted_kw: f64,
    /// The same-day adjustment, when the event day has readings in its window.
    pub adjustment: Option<SameDayAdjustment>,
    /// The baseline: `unadjusted_kw` plus the adjustment, kW (never below zero).
    pub kw: f64,
}

/// Why no CBL could be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
pub enum CblUnavailable {
    /// Not enough eligible days within the look-back.
    #[error(
        "{found} eligible {} days with meter readings in the {LOOKBACK_DAYS} days before the event, {needed} \
         needed",
        match day_type { DayType::Weekday => "weekday", DayType::WeekendOrHoliday => "weekend or holiday" }
    )]
    TooFewDays {
        /// The event's day type.
        day_type: DayType,
        /// Days found.
        found: usize,
        /// Days needed (`y`).
        needed: usize,
    },
    /// The window is empty or reversed.
    #[error("the event window is empty")]
    EmptyWindow,
}

/// The UTC instant of a local wall-clock time, the earlier one when DST repeats it; `None`
/// in a DST gap.
fn instant(tz: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    tz.from_local_datetime(&local).earliest().map(|t| t.with_timezone(&Utc))
}

/// Mean and count of the readings in `[from, to)`.
fn mean_in(samples: &[(DateTime<Utc>, f64)], from: DateTime<Utc>, to: DateTime<Utc>) -> (Option<f64>, usize) {
    let start = samples.partition_point(|(t, _)| *t < from);
    let end = samples.partition_point(|(t, _)| *t < to);
    let xs = &samples[start..end.max(start)];
    let n = xs.len();
    let sum: f64 = xs.iter().map(|(_, kw)| kw).sum();
    ((n > 0).then(|| sum / n as f64), n)
}

/// The same local clock window as `[start, end)` (in `tz`) on `day`: `None` in a DST gap.
fn window_on(
    tz: Tz,
    day: NaiveDate,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let local_start = start.with_timezone(&tz).naive_local();
    let local_end = end.with_timezone(&tz).naive_local();
    let offset_days = local_start.date().signed_duration_since(day);
    let from = instant(tz, local_start - offset_days)?;
    let to = instant(tz, local_end - offset_days)?;
    Some((from, to))
}

/// PJM's Economic CBL of the event `[start, end)` (see the module docs). `samples` are the
/// metered readings `(time, kW)` (only measured ones: a model's figure is not a baseline);
/// `event_days` the local days on which the site curtailed (passed over).
pub fn pjm_economic_cbl(
    samples: &[(DateTime<Utc>, f64)],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    tz: Tz,
    event_days: &BTreeSet<NaiveDate>,
) -> Result<Cbl, CblUnavailable> {
    if end <= start {
        return Err(CblUnavailable::EmptyWindow);
    }
    let mut samples: Vec<(DateTime<Utc>, f64)> = samples.iter().copied().filter(|(_, kw)| kw.is_finite()).collect();
    samples.sort_by_key(|(t, _)| *t);
    let event_day = start.with_timezone(&tz).date_naive();
    let day_type = DayType::of(event_day);
    let (x, y) = day_type.x_of_y();
    let mut passed_over = Vec::new();
    // Candidates of the right type, most recent first, with their window means.
    let mut candidates: Vec<BaselineDay> = Vec::new();
    for back in 1..=LOOKBACK_DAYS {
        let day = event_day - Duration::days(back);
        if DayType::of(day) != day_type {
            continue;
        }
        if event_days.contains(&day) {
            passed_over.push((day, PassedOver::EventDay));
            continue;
        }
        let Some((from, to)) = window_on(tz, day, start, end) else {
            passed_over.push((day, PassedOver::NoSuchLocalTime));
            continue;
        };
        let (mean, n) = mean_in(&samples, from, to);
        match mean {
            Some(mean_kw) => candidates.push(BaselineDay {
                date: day,
                mean_kw: Some(mean_kw),
                samples: n,
                counted: false,
            }),
            None => passed_over.push((day, PassedOver::NoData)),
        }
    }
    // The y most recent, replacing low-usage days by the next candidate until none is left.
    let mut days: Vec<BaselineDay> = Vec::new();
    let mut queue = candidates.into_iter();
    loop {
        while days.len() < y {
            match queue.next() {
                Some(day) => days.push(day),
                None => break,
            }
        }
        if days.len() < y {
            return Err(CblUnavailable::TooFewDays {
                day_type,
                found: days.len(),
                needed: y,
            });
        }
        let mean = days.iter().filter_map(|d| d.mean_kw).sum::<f64>() / days.len() as f64;
        let before = days.len();
        days.retain(|d| {
            let low = d.mean_kw.unwrap_or(0.0) < LOW_USAGE_SHARE * mean;
            if low {
                passed_over.push((d.date, PassedOver::LowUsage));
            }
            !low
        });
        if days.len() == before {
            break;
        }
    }
    passed_over.sort_by_key(|p| std::cmp::Reverse(p.0));
    let mut order: Vec<usize> = (0..days.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (days[a].mean_kw.unwrap_or(0.0), days[b].mean_kw.unwrap_or(0.0));
        b.total_cmp(&a)
    });
    for &i in order.iter().take(x) {
        days[i].counted = true;
    }
    let counted: Vec<&BaselineDay> = days.iter().filter(|d| d.counted).collect();
    let unadjusted_kw = counted.iter().filter_map(|d| d.mean_kw).sum::<f64>() / x as f64;
    let adjustment = same_day_adjustment(&samples, start, tz, &counted);
    let kw = (unadjusted_kw + adjustment.as_ref().map_or(0.0, |a| a.kw)).max(0.0);
    Ok(Cbl {
        rule: "pjm_economic",
        time_zone: tz.name().to_string(),
        day_type,
        x_of_y: (x, y),
        days,
        passed_over,
        unadjusted_kw,
        adjustment,
        kw,
    })
}

/// The symmetric additive adjustment: the three hours ending one hour before `start`.
fn same_day_adjustment(
    samples: &[(DateTime<Utc>, f64)],
    start: DateTime<Utc>,
    tz: Tz,
    counted: &[&BaselineDay],
) -> Option<SameDayAdjustment> {
    let (from, to) = (start - Duration::hours(4), start - Duration::hours(1));
    let (event_day_kw, _) = mean_in(samples, from, to);
    let event_day_kw = event_day_kw?;
    let means: Vec<f64> = counted
        .iter()
        .filter_map(|d| {
            let (f, t) = window_on(tz, d.date, from, to)?;
            mean_in(samples, f, t).0
        })
        .collect();
    if means.len() != counted.len() || means.is_empty() {
        return None;
    }
    let baseline_days_kw = means.iter().sum::<f64>() / means.len() as f64;
    Some(SameDayAdjustment {
        event_day_kw,
        baseline_days_kw,
        kw: event_day_kw - baseline_days_kw,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::calendar::is_nerc_holiday;
    use chrono::Datelike;
    use proptest::prelude::*;

    fn ny() -> Tz {
        "America/New_York".parse().expect("zone")
    }

    /// Readings every 5 minutes for `days` days before and including `end`, from `load(t)`.
    fn history(end: DateTime<Utc>, days: i64, load: impl Fn(DateTime<Utc>) -> f64) -> Vec<(DateTime<Utc>, f64)> {
        let mut t = end - Duration::days(days);
        let mut out = Vec::new();
        while t < end {
            out.push((t, load(t)));
            t += Duration::minutes(5);
        }
        out
    }

    fn local(tz: Tz, y: i32, m: u32, d: u32, h: u32) -> DateTime<Utc> {
        tz.with_ymd_and_hms(y, m, d, h, 0, 0)
            .single()
            .expect("a local time")
            .with_timezone(&Utc)
    }

    #[test]
    fn nerc_holidays_with_their_observed_days() {
        let d = |y, m, day| NaiveDate::from_ymd_opt(y, m, day).expect("date");
        for holiday in [
            d(2026, 1, 1),
            d(2026, 5, 25),
            d(2026, 7, 4),
            d(2026, 9, 7),
            d(2026, 11, 26),
            d(2026, 12, 25),
            d(2023, 1, 2),   // New Year's Day on a Sunday: observed Monday
            d(2022, 12, 26), // Christmas on a Sunday
        ] {
            assert!(is_nerc_holiday(holiday), "{holiday}");
        }
        for not in [
            d(2026, 7, 3),
            d(2026, 5, 18),
            d(2023, 1, 1),
            d(2026, 11, 27),
            d(2021, 12, 24),
        ] {
            assert!(!is_nerc_holiday(not), "{not}");
        }
        assert_eq!(DayType::of(d(2026, 7, 4)), DayType::WeekendOrHoliday);
        assert_eq!(DayType::of(d(2026, 12, 2)), DayType::Weekday);
    }

    /// A weekday event: the five most recent weekdays, skipping the weekend, an event day and
    /// Thanksgiving; the four highest counted; the same-day adjustment from 10:00–13:00.
    #[test]
    fn a_weekday_event_uses_the_high_four_of_five_previous_weekdays() {
        let tz = ny();
        // Wednesday 2 Dec 2026, 14:00–16:00 local (EST).
        let (start, end) = (local(tz, 2026, 12, 2, 14), local(tz, 2026, 12, 2, 16));
        // Each day's load is its day of month × 10 kW, so the days are told apart.
        let samples = history(start, 60, |t| f64::from(t.with_timezone(&tz).day()) * 10.0);
        let event_days: BTreeSet<NaiveDate> = [NaiveDate::from_ymd_opt(2026, 11, 30).expect("date")].into();
        let cbl = pjm_economic_cbl(&samples, start, end, tz, &event_days).expect("a CBL");
        let dates: Vec<String> = cbl.days.iter().map(|d| d.date.to_string()).collect();
        // Tue 1 Dec (10 kW, under a quarter of the five days' mean: a low-usage day, replaced);
        // Mon 30 Nov is an event day; Fri 27, Wed 25, Tue 24, Mon 23 Nov (Thu 26 is
        // Thanksgiving, 28–29 a weekend), then Fri 20 Nov in place of 1 Dec.
        assert_eq!(
            dates,
            ["2026-11-27", "2026-11-25", "2026-11-24", "2026-11-23", "2026-11-20"]
        );
        assert!(cbl.passed_over.contains(&(
            NaiveDate::from_ymd_opt(2026, 11, 30).expect("date"),
            PassedOver::EventDay
        )));
        // High 4 of 5: 27, 25, 24, 23 → (270 + 250 + 240 + 230) / 4; 20 Nov (200 kW) is not counted.
        assert_eq!(cbl.x_of_y, (4, 5));
        assert_eq!(cbl.day_type, DayType::Weekday);
        assert!(
            cbl.passed_over
                .iter()
                .any(|(d, why)| d.day() == 1 && *why == PassedOver::LowUsage),
            "{cbl:?}"
        );
        let counted: Vec<u32> = cbl.days.iter().filter(|d| d.counted).map(|d| d.date.day()).collect();
        assert_eq!(counted.len(), 4);
        assert!(
            (cbl.unadjusted_kw - (270.0 + 250.0 + 240.0 + 230.0) / 4.0).abs() < 1e-9,
            "{cbl:?}"
        );
        // Same day: 2 Dec reads 20 kW in 10:00–13:00; the counted days read their own level.
        let adjustment = cbl.adjustment.as_ref().expect("adjusted");
        assert!((adjustment.event_day_kw - 20.0).abs() < 1e-9);
        assert!((adjustment.kw - (20.0 - cbl.unadjusted_kw)).abs() < 1e-9);
        assert!((cbl.kw - 20.0).abs() < 1e-9, "{cbl:?}");
    }

    #[test]
    fn a_weekend_event_uses_the_high_two_of_three_weekend_days_and_holidays() {
        let tz = ny();
        // Saturday 5 Dec 2026.
        let (start, end) = (local(tz, 2026, 12, 5, 14), local(tz, 2026, 12, 5, 15));
        let samples = history(start - Duration::hours(6), 60, |t| {
            f64::from(t.with_timezone(&tz).day())
        });
        let cbl = pjm_economic_cbl(&samples, start, end, tz, &BTreeSet::new()).expect("a CBL");
        let dates: Vec<u32> = cbl.days.iter().map(|d| d.date.day()).collect();
        // Sun 29, Sat 28, Thanksgiving Thu 26 Nov.
        assert_eq!(dates, [29, 28, 26]);
        assert_eq!(cbl.x_of_y, (2, 3));
        assert!((cbl.unadjusted_kw - (29.0 + 28.0) / 2.0).abs() < 1e-9);
        // No readings in the event day's adjustment window (they stop 6 h before): none applied.
        assert!(cbl.adjustment.is_none());
        assert_eq!(cbl.kw, cbl.unadjusted_kw);
    }

    /// Across the end of DST (1 Nov 2026 in New York) the window stays on local clock time:
    /// a day's 14:00–16:00 is 19:00–21:00 UTC after, 18:00–20:00 UTC before.
    #[test]
    fn the_window_follows_local_clock_time_across_dst() {
        let tz = ny();
        let (start, end) = (local(tz, 2026, 11, 4, 14), local(tz, 2026, 11, 4, 16));
        // The load is 100 kW from 14:00 to 16:00 local, 10 kW otherwise, every day.
        let samples = history(start, 30, |t| {
            let h = t.with_timezone(&tz).hour();
            if (14..16).contains(&h) { 100.0 } else { 10.0 }
        });
        let cbl = pjm_economic_cbl(&samples, start, end, tz, &BTreeSet::new()).expect("a CBL");
        assert!(
            cbl.days
                .iter()
                .any(|d| d.date < NaiveDate::from_ymd_opt(2026, 11, 1).expect("date"))
        );
        for day in &cbl.days {
            assert!((day.mean_kw.expect("data") - 100.0).abs() < 1e-9, "{day:?}");
        }
        assert!((cbl.unadjusted_kw - 100.0).abs() < 1e-9);
    }

    #[test]
    fn too_little_history_is_said_not_filled_in() {
        let tz: Tz = "UTC".parse().expect("zone");
        let start = Utc.with_ymd_and_hms(2026, 12, 2, 14, 0, 0).single().expect("t");
        let samples = history(start, 3, |_| 50.0);
        let err = pjm_economic_cbl(&samples, start, start + Duration::hours(1), tz, &BTreeSet::new())
            .expect_err("three days are not five weekdays");
        assert_eq!(
            err,
            CblUnavailable::TooFewDays {
                day_type: DayType::Weekday,
                found: 2,
                needed: 5
            }
        );
        assert_eq!(
            pjm_economic_cbl(&samples, start, start, tz, &BTreeSet::new()),
            Err(CblUnavailable::EmptyWindow)
        );
    }

    use chrono::Timelike as _;

    proptest! {
        /// For any history: the unadjusted CBL lies between the lowest and highest day used,
        /// exactly `x` days are counted and they are the highest, no day used is an event day
        /// or of the other type, and a flat load gives that load with no adjustment.
        #[test]
        fn the_cbl_is_the_mean_of_the_highest_eligible_days(
            loads in proptest::collection::vec(1.0f64..1000.0, 60),
            event_day_mask in proptest::collection::vec(proptest::bool::weighted(0.15), 60),
            start_day in 0u32..28,
            hour in 0u32..20,
            flat in proptest::option::of(1.0f64..1000.0),
        ) {
            let tz = ny();
            let start = local(tz, 2026, 12, 1 + start_day.min(27), hour.max(5));
            let end = start + Duration::hours(2);
            let day0 = start.with_timezone(&tz).date_naive();
            let samples = history(start, 60, |t| {
                let back = (day0 - t.with_timezone(&tz).date_naive()).num_days().clamp(0, 59) as usize;
                flat.unwrap_or(loads[back])
            });
            let event_days: BTreeSet<NaiveDate> = event_day_mask
                .iter()
                .enumerate()
                .filter(|(_, e)| **e)
                .map(|(i, _)| day0 - Duration::days(i as i64 + 1))
                .collect();
            match pjm_economic_cbl(&samples, start, end, tz, &event_days) {
                Ok(cbl) => {
                    let (x, y) = cbl.x_of_y;
                    prop_assert_eq!(cbl.days.len(), y);
                    prop_assert_eq!(cbl.days.iter().filter(|d| d.counted).count(), x);
                    let means: Vec<f64> = cbl.days.iter().map(|d| d.mean_kw.unwrap_or(f64::NAN)).collect();
                    let lo = means.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = means.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    prop_assert!(cbl.unadjusted_kw >= lo - 1e-9 && cbl.unadjusted_kw <= hi + 1e-9);
                    let lowest_counted = cbl.days.iter().filter(|d| d.counted).filter_map(|d| d.mean_kw).fold(f64::INFINITY, f64::min);
                    for d in cbl.days.iter().filter(|d| !d.counted) {
                        prop_assert!(d.mean_kw.unwrap_or(0.0) <= lowest_counted + 1e-9);
                    }
                    for d in &cbl.days {
                        prop_assert!(!event_days.contains(&d.date));
                        prop_assert_eq!(DayType::of(d.date), cbl.day_type);
                        prop_assert!(d.date < day0);
                    }
                    if let Some(v) = flat {
                        prop_assert!((cbl.kw - v).abs() < 1e-6);
                        prop_assert!(cbl.adjustment.as_ref().is_none_or(|a| a.kw.abs() < 1e-6));
                    }
                    prop_assert!(cbl.kw >= 0.0);
                }
                Err(CblUnavailable::TooFewDays { found, needed, .. }) => prop_assert!(found < needed),
                Err(CblUnavailable::EmptyWindow) => prop_assert!(false, "the window is two hours"),
            }
        }
    }
}
