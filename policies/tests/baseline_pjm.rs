//! `pjm_economic` on hand-made calendars.
//!
//! Worked example: PJM publishes no worked CBL example that could be retrieved while these
//! tests were written (Manual 11's text was not reachable here), so the examples are computed
//! by hand in each test's docs, and the method is checked against the audit's own CBL on raw
//! readings (`pjm_economic_cbl`), whose rules it keeps.

mod baseline_common;

use baseline_common::*;
use chrono::{Datelike, Duration, Timelike};
use flexgate_policies::baseline::{
    BaselineError, DayType, Exclusion, HolidayCalendar, Method, compute, pjm_economic_cbl,
};
use std::collections::BTreeSet;

/// Hand example, hourly data, Thursday 11 June 2026, 14:00–16:00 New York. The five weekdays
/// before (10, 9, 8, 5, 4 June) read at 14:00 and 15:00: (100, 120), (90, 110), (80, 100),
/// (120, 140), (60, 80); means 110, 100, 90, 130, 70. High 4 of 5 drops 4 June (70):
/// 14:00 → (100 + 90 + 80 + 120) / 4 = 97.5 kW; 15:00 → (120 + 110 + 100 + 140) / 4 = 117.5 kW.
/// Same-day adjustment, 10:00–13:00: every day reads 80 kW there, the event day 88 kW, so
/// +8 kW: 105.5 and 125.5 kW.
#[test]
fn a_hand_computed_weekday_with_its_same_day_adjustment() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 6, 11, 14, 0), local(tz, 2026, 6, 11, 16, 0));
    let table = |day: u32, hour: u32| -> f64 {
        match (day, hour) {
            (10, 14) => 100.0,
            (10, 15) => 120.0,
            (9, 14) => 90.0,
            (9, 15) => 110.0,
            (8, 14) => 80.0,
            (8, 15) => 100.0,
            (5, 14) => 120.0,
            (5, 15) => 140.0,
            (4, 14) => 60.0,
            (4, 15) => 80.0,
            (11, 10..=12) => 88.0,
            (_, 10..=12) => 80.0,
            _ => 50.0,
        }
    };
    let data = series(start - Duration::days(50), start, 60, |t| {
        let l = t.with_timezone(&tz);
        Some(table(if l.month() == 6 { l.day() } else { 0 }, l.hour()))
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect("a CBL");
    assert_eq!(report.method.as_str(), "pjm_economic");
    assert_eq!(report.day_type, Some(DayType::Weekday));
    let used: Vec<(u32, bool)> = report.days_used.iter().map(|u| (u.date.day(), u.counted)).collect();
    assert_eq!(used, [(10, true), (9, true), (8, true), (5, true), (4, false)]);
    let excluded: Vec<(u32, Exclusion)> = report.days_excluded.iter().map(|e| (e.date.day(), e.reason)).collect();
    assert_eq!(excluded, [(7, Exclusion::Weekend), (6, Exclusion::Weekend)]);
    assert_eq!(report.intervals.len(), 2);
    close(report.intervals[0].baseline_kw.expect("kw"), 97.5);
    close(report.intervals[1].baseline_kw.expect("kw"), 117.5);
    let adjustment = report.adjustment.as_ref().expect("adjustment");
    assert!(adjustment.applied);
    close(adjustment.value, 8.0);
    assert_eq!(adjustment.cap, None);
    assert_eq!(adjustment.window_start, local(tz, 2026, 6, 11, 10, 0));
    assert_eq!(adjustment.window_end, local(tz, 2026, 6, 11, 13, 0));
    close(report.intervals[0].adjusted_baseline_kw.expect("kw"), 105.5);
    close(report.intervals[1].adjusted_baseline_kw.expect("kw"), 125.5);
}

/// The audit's calendar (`samples.rs`): Wednesday 2 December 2026, 14:00–16:00, each day's
/// load its day of month × 10 kW; 30 November an event day, Thanksgiving a holiday, 1 December
/// a low-usage day replaced by 20 November. The interval method gives the audit's CBL.
#[test]
fn it_agrees_with_the_audits_cbl_on_the_same_data() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 12, 2, 14, 0), local(tz, 2026, 12, 2, 16, 0));
    let data = series(start - Duration::days(60), start, 5, |t| {
        Some(f64::from(local_date(t, tz).day()) * 10.0)
    });
    let events: BTreeSet<_> = [d(2026, 11, 30)].into();
    let holidays = HolidayCalendar::default();
    let report = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect("a CBL");
    let samples: Vec<_> = data.intervals().iter().map(|i| (i.start, i.kw.expect("kw"))).collect();
    let audit = pjm_economic_cbl(&samples, start, end, tz, &events).expect("the audit's CBL");
    let dates: Vec<_> = report.days_used.iter().map(|u| u.date).collect();
    let audit_dates: Vec<_> = audit.days.iter().map(|u| u.date).collect();
    assert_eq!(dates, audit_dates);
    close(report.mean_adjusted_kw().expect("kw"), audit.kw);
    close(audit.kw, 20.0);
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 11, 30)), Some(Exclusion::EventDay));
    assert_eq!(reason(d(2026, 11, 26)), Some(Exclusion::Holiday));
    assert_eq!(reason(d(2026, 11, 28)), Some(Exclusion::Weekend));
    assert_eq!(reason(d(2026, 12, 1)), Some(Exclusion::LowUsage));
    assert_eq!(report.intervals.len(), 24);
}

/// Saturday 5 December 2026: the three most recent weekend days or holidays (29, 28 November
/// and Thanksgiving), the highest two; no event-day data before the event, so no adjustment,
/// and the report says why.
#[test]
fn a_weekend_event_uses_two_of_three_and_says_why_it_is_unadjusted() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 12, 5, 14, 0), local(tz, 2026, 12, 5, 15, 0));
    let data = series(start - Duration::days(60), start - Duration::hours(6), 15, |t| {
        Some(f64::from(local_date(t, tz).day()))
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect("a CBL");
    let used: Vec<(u32, bool)> = report.days_used.iter().map(|u| (u.date.day(), u.counted)).collect();
    assert_eq!(used, [(29, true), (28, true), (26, false)]);
    let adjustment = report.adjustment.as_ref().expect("reported");
    assert!(!adjustment.applied);
    assert!(
        adjustment
            .not_applied
            .as_deref()
            .is_some_and(|w| w.contains("event day"))
    );
    for i in &report.intervals {
        close(i.adjusted_baseline_kw.expect("kw"), 28.5);
    }
}

/// Across the end of DST (1 November 2026) each 15-minute interval is compared with the same
/// local clock time: the load is 100 kW + 10 kW per quarter hour after 14:00 local, 50 kW
/// otherwise, on every day, so the baseline of the k-th interval is 100 + 10 k whatever the
/// UTC offset of the day it came from.
#[test]
fn each_interval_matches_its_local_clock_time_across_fall_back() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 11, 4, 14, 0), local(tz, 2026, 11, 4, 16, 0));
    let data = series(start - Duration::days(40), start, 15, |t| {
        let h = local_hour(t, tz);
        Some(if (14.0..16.0).contains(&h) {
            100.0 + 40.0 * (h - 14.0)
        } else {
            50.0
        })
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect("a CBL");
    assert!(
        report.days_used.iter().any(|u| u.date < d(2026, 11, 1)),
        "days on both sides of DST"
    );
    assert!(report.days_used.iter().any(|u| u.date > d(2026, 11, 1)));
    assert_eq!(report.intervals.len(), 8);
    for (k, i) in report.intervals.iter().enumerate() {
        close(i.adjusted_baseline_kw.expect("kw"), 100.0 + 10.0 * k as f64);
    }
}

/// Saturday 14 March 2026, 02:00–03:00 New York: on Sunday 8 March (spring forward) 02:00 does
/// not exist, so that day is passed over as a DST gap and the three days are 7 March,
/// 1 March and 28 February.
#[test]
fn a_window_that_dst_skips_passes_the_day_over() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 3, 14, 2, 0), local(tz, 2026, 3, 14, 3, 0));
    let data = series(start - Duration::days(50), start, 15, |_| Some(70.0));
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect("a CBL");
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 3, 8)), Some(Exclusion::DstGap));
    let used: Vec<_> = report.days_used.iter().map(|u| u.date).collect();
    assert_eq!(used, [d(2026, 3, 7), d(2026, 3, 1), d(2026, 2, 28)]);
    close(report.mean_adjusted_kw().expect("kw"), 70.0);
}

/// A missing interval in a day's window passes the day over; the next eligible day replaces it.
#[test]
fn a_missing_interval_passes_the_day_over() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 6, 11, 14, 0), local(tz, 2026, 6, 11, 16, 0));
    let full = series(start - Duration::days(50), start, 15, |_| Some(40.0));
    let gap = local(tz, 2026, 6, 9, 15, 15);
    let data = with_missing(&full, |t| t == gap);
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect("a CBL");
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 6, 9)), Some(Exclusion::MissingData));
    let used: Vec<_> = report.days_used.iter().map(|u| u.date.day()).collect();
    assert_eq!(used, [10, 8, 5, 4, 3]);
    // Without the interval altogether (absent, not marked missing) the same.
    let absent = flexgate_policies::intervals::IntervalSeries::new(
        full.intervals().iter().filter(|i| i.start != gap).cloned().collect(),
    )
    .expect("series");
    let again = compute(
        &Method::PjmEconomic,
        &input(&absent, start, end, tz, &events, &holidays),
    )
    .expect("a CBL");
    assert_eq!(again.days_used, report.days_used);
}

/// With every weekday but three in the 45 days an event day, the CBL is refused, and the
/// refusal lists the like days beyond the look-back that had data (`too_old`).
#[test]
fn too_few_days_within_the_look_back_is_a_refusal() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 6, 11, 14, 0), local(tz, 2026, 6, 11, 16, 0));
    let data = series(start - Duration::days(80), start, 60, |_| Some(10.0));
    let keep = [d(2026, 6, 10), d(2026, 5, 20), d(2026, 5, 6)];
    let events: BTreeSet<_> = (1..=45)
        .map(|back| d(2026, 6, 11) - Duration::days(back))
        .filter(|day| !keep.contains(day))
        .collect();
    let holidays = HolidayCalendar::default();
    let err = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect_err("refused");
    let BaselineError::TooFewDays {
        found,
        needed,
        lookback_days,
        days_excluded,
        ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert_eq!((found, needed, lookback_days), (3, 5, 45));
    let too_old: Vec<_> = days_excluded
        .iter()
        .filter(|e| e.reason == Exclusion::TooOld)
        .map(|e| e.date)
        .collect();
    // 45 days before 11 June is 27 April; the weekdays before it: 24 and 23 April.
    assert_eq!(too_old, [d(2026, 4, 24), d(2026, 4, 23)]);
    assert!(days_excluded.iter().any(|e| e.reason == Exclusion::EventDay));
    assert_eq!(
        compute(
            &Method::PjmEconomic,
            &input(&data, start, start, tz, &events, &holidays)
        ),
        Err(BaselineError::EmptyWindow)
    );
    let empty = flexgate_policies::intervals::IntervalSeries::default();
    assert_eq!(
        compute(&Method::PjmEconomic, &input(&empty, start, end, tz, &events, &holidays)),
        Err(BaselineError::NoData)
    );
}

/// An operator's holiday (the day after Thanksgiving, a site shutdown) is passed over as a
/// holiday for a weekday event and becomes a like day of a weekend event.
#[test]
fn an_operator_holiday_changes_which_days_are_alike() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 12, 2, 14, 0), local(tz, 2026, 12, 2, 15, 0));
    let data = series(start - Duration::days(60), start, 60, |_| Some(10.0));
    let events = BTreeSet::new();
    let holidays = HolidayCalendar::default().with_day(d(2026, 11, 27));
    let report = compute(&Method::PjmEconomic, &input(&data, start, end, tz, &events, &holidays)).expect("a CBL");
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 11, 27)), Some(Exclusion::Holiday));
    let (sat_start, sat_end) = (local(tz, 2026, 12, 5, 14, 0), local(tz, 2026, 12, 5, 15, 0));
    let weekend = compute(
        &Method::PjmEconomic,
        &input(&data, sat_start, sat_end, tz, &events, &holidays),
    )
    .expect("a CBL");
    let used: Vec<_> = weekend.days_used.iter().map(|u| u.date.day()).collect();
    assert_eq!(used, [29, 28, 27]);
}
