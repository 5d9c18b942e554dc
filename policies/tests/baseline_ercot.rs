//! `ercot_middle_8of10` and `ercot_matching_day_pair` on hand-made calendars.
//!
//! Worked example: no ERCOT-published worked example could be retrieved while these tests
//! were written (the baseline methodology procedure was not reachable here beyond its title);
//! the examples are computed by hand in each test's docs.

mod baseline_common;

use baseline_common::*;
use chrono::{Datelike, Duration};
use flexgate_policies::baseline::{BaselineError, Detail, Exclusion, HolidayCalendar, Method, compute};
use std::collections::BTreeSet;

/// The ten weekdays before Wednesday 12 August 2026, most recent first, and their flat loads.
const TEN: [((u32, u32), f64); 10] = [
    ((8, 11), 50.0),
    ((8, 10), 60.0),
    ((8, 7), 70.0),
    ((8, 6), 80.0),
    ((8, 5), 90.0),
    ((8, 4), 100.0),
    ((8, 3), 110.0),
    ((7, 31), 120.0),
    ((7, 30), 130.0),
    ((7, 29), 40.0),
];

/// Wednesday 12 August 2026, 15:00–16:00 Chicago, 15-minute data. Each of the ten days reads
/// its flat load all day, except 11 August, which reads 500 kW from 15:00 to 16:00. Ranked by
/// daily energy, 30 July (130 kW × 24 h = 3120 kWh) is the highest and 29 July (960 kWh) the
/// lowest; 11 August (50 × 23 + 500 = 1650 kWh) stays, though its window is the highest: the
/// baseline is (500 + 60 + 70 + 80 + 90 + 100 + 110 + 120) / 8 = 141.25 kW. The event-day
/// factor compares 12:00–14:00: the event day reads 170 kW, the counted days' mean there is
/// (50 + 60 + ... + 120) / 8 = 85 kW, so 2.0, uncapped: 282.5 kW.
#[test]
fn the_middle_eight_by_daily_energy_with_an_uncapped_scalar_adjustment() {
    let tz = tz("America/Chicago");
    let (start, end) = (local(tz, 2026, 8, 12, 15, 0), local(tz, 2026, 8, 12, 16, 0));
    let data = series(start - Duration::days(70), start, 15, |t| {
        let day = local_date(t, tz);
        let h = local_hour(t, tz);
        let flat = TEN
            .iter()
            .find(|((m, dd), _)| day.month() == *m && day.day() == *dd)
            .map(|(_, kw)| *kw);
        Some(match flat {
            _ if day == d(2026, 8, 11) && (15.0..16.0).contains(&h) => 500.0,
            Some(kw) => kw,
            None if day == d(2026, 8, 12) => 170.0,
            None => 75.0,
        })
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(
        &Method::ErcotMiddle8Of10,
        &input(&data, start, end, tz, &events, &holidays),
    )
    .expect("baseline");
    let not_counted: Vec<_> = report.days_used.iter().filter(|u| !u.counted).map(|u| u.date).collect();
    assert_eq!(not_counted, [d(2026, 7, 30), d(2026, 7, 29)]);
    close(report.days_used[0].daily_kwh.expect("energy"), 1650.0);
    assert!(matches!(
        report.detail,
        Detail::LikeDays {
            counted: 8,
            wanted: 10,
            ranked_by: "daily_energy",
            ..
        }
    ));
    for i in &report.intervals {
        close(i.baseline_kw.expect("kw"), 141.25);
        close(i.adjusted_baseline_kw.expect("kw"), 282.5);
    }
    let a = report.adjustment.as_ref().expect("adjustment");
    assert_eq!((a.cap, a.bound), (None, false));
    assert_eq!(a.window_start, local(tz, 2026, 8, 12, 12, 0));
    assert_eq!(a.window_end, local(tz, 2026, 8, 12, 14, 0));
}

/// A missing interval anywhere in a day (03:00 on 10 August) passes it over: its energy is not
/// known. With only nine usable weekdays in the 60 days the method refuses.
#[test]
fn a_day_needs_its_whole_day_and_ten_days_are_needed() {
    let tz = tz("America/Chicago");
    let (start, end) = (local(tz, 2026, 8, 12, 15, 0), local(tz, 2026, 8, 12, 16, 0));
    let full = series(start - Duration::days(70), start, 15, |_| Some(60.0));
    let gap = local(tz, 2026, 8, 10, 3, 0);
    let data = with_missing(&full, |t| t == gap);
    let holidays = HolidayCalendar::default();
    let events = BTreeSet::new();
    let report = compute(
        &Method::ErcotMiddle8Of10,
        &input(&data, start, end, tz, &events, &holidays),
    )
    .expect("baseline");
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 8, 10)), Some(Exclusion::MissingData));
    assert_eq!(report.days_used.last().map(|u| u.date), Some(d(2026, 7, 28)));
    // All but nine weekdays in the 60 days are event days.
    let events: BTreeSet<_> = (10..=60).map(|back| d(2026, 8, 12) - Duration::days(back)).collect();
    let err = compute(
        &Method::ErcotMiddle8Of10,
        &input(&full, start, end, tz, &events, &holidays),
    )
    .expect_err("refused");
    assert!(matches!(err, BaselineError::TooFewDays { needed: 10, .. }), "{err:?}");
}

/// Thursday 13 August 2026, 15:00–17:00 Chicago, hourly data. Every day reads a flat level
/// 100 + 5 kW per day away from 29 July, except 28 and 29 July and the event's own pair
/// (12 August and 13 August's morning), which read 100 kW; each day's 15:00–17:00 reads
/// 300 kW + its day of month, except 28 July's and 12 August's, 300 kW. The pair (28, 29 July)
/// matches the event's exactly (distance 0):
/// the baseline is 29 July's window, 329 kW, and the event-day factor is 100 / 100 = 1.
/// Mondays are passed over (their day before is a Sunday, unlike Wednesday 12 August), and so
/// is a day whose day before was an event day.
#[test]
fn the_matching_day_pair_takes_the_closest_pairs_second_day() {
    let tz = tz("America/Chicago");
    let (start, end) = (local(tz, 2026, 8, 13, 15, 0), local(tz, 2026, 8, 13, 17, 0));
    let data = series(start - Duration::days(70), start, 60, |t| {
        let day = local_date(t, tz);
        let h = local_hour(t, tz);
        let flat = if [d(2026, 7, 28), d(2026, 7, 29), d(2026, 8, 12), d(2026, 8, 13)].contains(&day) {
            100.0
        } else {
            100.0 + 5.0 * ((day - d(2026, 7, 29)).num_days().abs() as f64)
        };
        let marker = if [d(2026, 7, 28), d(2026, 8, 12)].contains(&day) {
            0.0
        } else {
            f64::from(day.day())
        };
        Some(if (15.0..17.0).contains(&h) {
            300.0 + marker
        } else {
            flat
        })
    });
    let events: BTreeSet<_> = [d(2026, 8, 4)].into();
    let holidays = HolidayCalendar::default();
    let method = Method::ErcotMatchingDayPair { lookback_days: 60 };
    let report = compute(&method, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    let Detail::MatchingDayPair {
        day_before,
        day,
        distance_kw2,
        matched_intervals,
        ..
    } = report.detail
    else {
        panic!("{:?}", report.detail);
    };
    assert_eq!((day_before, day), (d(2026, 7, 28), d(2026, 7, 29)));
    close(distance_kw2, 0.0);
    // The whole day before (24 h) and the event day to an hour before the start (14 h).
    assert_eq!(matched_intervals, 38);
    for i in &report.intervals {
        close(i.baseline_kw.expect("kw"), 329.0);
        close(i.adjusted_baseline_kw.expect("kw"), 329.0);
    }
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 8, 10)), Some(Exclusion::DayBeforeUnusable), "a Monday");
    assert_eq!(
        reason(d(2026, 8, 5)),
        Some(Exclusion::DayBeforeUnusable),
        "after an event day"
    );
    assert_eq!(reason(d(2026, 8, 4)), Some(Exclusion::EventDay));
    assert_eq!(reason(d(2026, 8, 8)), Some(Exclusion::Weekend));
    let counted: Vec<_> = report.days_used.iter().filter(|u| u.counted).map(|u| u.date).collect();
    assert_eq!(counted, [d(2026, 7, 29)]);
    assert!(report.days_used.iter().all(|u| u.match_distance.is_some()));
}

/// The event's own pair must be complete: an interval missing on the day before refuses the
/// method, saying how many are missing.
#[test]
fn the_matching_day_pair_refuses_an_incomplete_event_pair() {
    let tz = tz("America/Chicago");
    let (start, end) = (local(tz, 2026, 8, 13, 15, 0), local(tz, 2026, 8, 13, 17, 0));
    let full = series(start - Duration::days(70), start, 60, |_| Some(100.0));
    let gap = local(tz, 2026, 8, 12, 9, 0);
    let data = with_missing(&full, |t| t == gap);
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let method = Method::ErcotMatchingDayPair { lookback_days: 60 };
    let err = compute(&method, &input(&data, start, end, tz, &events, &holidays)).expect_err("refused");
    assert!(
        matches!(err, BaselineError::EventPairIncomplete { missing: 1, .. }),
        "{err:?}"
    );
    // Flat data everywhere: every pair is at distance 0, and the most recent wins.
    let report = compute(&method, &input(&full, start, end, tz, &events, &holidays)).expect("baseline");
    let Detail::MatchingDayPair { day, .. } = report.detail else {
        panic!("{:?}", report.detail);
    };
    assert_eq!(day, d(2026, 8, 12));
}
