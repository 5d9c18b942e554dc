//! `nyiso_cbl` on hand-made calendars.
//!
//! Worked example: no NYISO-published worked example could be retrieved while these tests were
//! written (Manual 7's text was not reachable here beyond its title page); the examples are
//! computed by hand in each test's docs.

mod baseline_common;

use baseline_common::*;
use chrono::{Datelike, Duration};
use flexgate_policies::baseline::{BaselineError, Exclusion, HolidayCalendar, Method, compute};
use flexgate_policies::intervals::IntervalSeries;
use std::collections::BTreeSet;

/// The ten weekdays before Tuesday 21 July 2026, most recent first, and their loads from
/// 13:00 to 17:00.
const TEN: [(u32, f64); 10] = [
    (20, 200.0),
    (17, 180.0),
    (16, 220.0),
    (15, 150.0),
    (14, 240.0),
    (13, 170.0),
    (10, 160.0),
    (9, 230.0),
    (8, 190.0),
    (7, 210.0),
];

/// Hourly New York data: the ten days read their load from 13:00 to 17:00; 6 July reads
/// `july_6` there; every day reads 100 kW from 09:00 to 11:00, except the event day,
/// `morning`; 80 kW otherwise.
fn july(july_6: f64, morning: f64, low: Option<u32>) -> IntervalSeries {
    let tz = ny();
    let start = local(tz, 2026, 7, 21, 13, 0);
    series(start - Duration::days(40), start, 60, |t| {
        let day = local_date(t, tz);
        let h = local_hour(t, tz);
        let window = TEN
            .iter()
            .find(|(dd, _)| day.month() == 7 && day.day() == *dd)
            .map(|(dd, kw)| if Some(*dd) == low { 30.0 } else { *kw })
            .or((day == d(2026, 7, 6)).then_some(july_6));
        Some(match window {
            Some(kw) if (13.0..17.0).contains(&h) => kw,
            _ if (9.0..11.0).contains(&h) && day == d(2026, 7, 21) => morning,
            _ if (9.0..11.0).contains(&h) => 100.0,
            _ => 80.0,
        })
    })
}

/// Tuesday 21 July 2026, 13:00–17:00: the highest five of the ten are 14 July (240), 9 July
/// (230), 16 July (220), 7 July (210) and 20 July (200): 220 kW. Weather-sensitive: the event
/// day reads 110 kW from 09:00 to 11:00 against the days' 100 kW, a factor of 1.1: 242 kW.
/// Not weather-sensitive: 220 kW, no adjustment.
#[test]
fn the_highest_five_of_ten_with_and_without_the_weather_sensitive_adjustment() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 7, 21, 13, 0), local(tz, 2026, 7, 21, 17, 0));
    let data = july(50.0, 110.0, None);
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let ws = Method::NyisoCbl {
        weather_sensitive: true,
    };
    let report = compute(&ws, &input(&data, start, end, tz, &events, &holidays)).expect("CBL");
    let counted: Vec<_> = report
        .days_used
        .iter()
        .filter(|u| u.counted)
        .map(|u| u.date.day())
        .collect();
    assert_eq!(counted, [20, 16, 14, 9, 7]);
    assert_eq!(report.days_used.len(), 10);
    assert_eq!(report.intervals.len(), 4);
    let a = report.adjustment.as_ref().expect("adjustment");
    assert_eq!(a.window_start, local(tz, 2026, 7, 21, 9, 0));
    assert_eq!(a.window_end, local(tz, 2026, 7, 21, 11, 0));
    close(a.value, 1.1);
    for i in &report.intervals {
        close(i.baseline_kw.expect("kw"), 220.0);
        close(i.adjusted_baseline_kw.expect("kw"), 242.0);
    }
    let plain = Method::NyisoCbl {
        weather_sensitive: false,
    };
    let report = compute(&plain, &input(&data, start, end, tz, &events, &holidays)).expect("CBL");
    assert!(report.adjustment.is_none());
    for i in &report.intervals {
        close(i.adjusted_baseline_kw.expect("kw"), 220.0);
    }
}

/// 15 July reading 30 kW is under a quarter of the ten days' mean: a low-usage day, replaced by
/// 6 July (205 kW), which then counts among the highest five in place of 20 July:
/// (240 + 230 + 220 + 210 + 205) / 5 = 221 kW. A morning of 150 kW is a factor of 1.5,
/// bounded to 1.2: 265.2 kW.
#[test]
fn a_low_usage_day_is_replaced_and_the_factor_is_bounded() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 7, 21, 13, 0), local(tz, 2026, 7, 21, 17, 0));
    let data = july(205.0, 150.0, Some(15));
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let method = Method::NyisoCbl {
        weather_sensitive: true,
    };
    let report = compute(&method, &input(&data, start, end, tz, &events, &holidays)).expect("CBL");
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 7, 15)), Some(Exclusion::LowUsage));
    assert!(report.days_used.iter().any(|u| u.date == d(2026, 7, 6) && u.counted));
    let a = report.adjustment.as_ref().expect("adjustment");
    assert!(a.bound);
    close(a.value, 1.2);
    close(report.intervals[0].baseline_kw.expect("kw"), 221.0);
    close(report.intervals[0].adjusted_baseline_kw.expect("kw"), 265.2);
}

/// Saturday 25 July 2026: the three most recent Saturdays that are not holidays (18, 11 July;
/// 4 July is Independence Day, a Sunday-like holiday; 27 June), each reading its day of month:
/// the highest two, (27 + 18) / 2 = 22.5 kW. Sundays are unlike days.
#[test]
fn a_saturday_event_compares_saturdays() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 7, 25, 13, 0), local(tz, 2026, 7, 25, 15, 0));
    let data = series(start - Duration::days(40), start, 60, |t| {
        Some(f64::from(local_date(t, tz).day()))
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let method = Method::NyisoCbl {
        weather_sensitive: false,
    };
    let report = compute(&method, &input(&data, start, end, tz, &events, &holidays)).expect("CBL");
    let used: Vec<_> = report.days_used.iter().map(|u| (u.date.day(), u.counted)).collect();
    assert_eq!(used, [(18, true), (11, false), (27, true)]);
    close(report.intervals[0].baseline_kw.expect("kw"), 22.5);
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 7, 19)), Some(Exclusion::UnlikeDay));
    assert_eq!(reason(d(2026, 7, 4)), Some(Exclusion::UnlikeDay));
}

/// Six usable weekdays in the 30 days: the highest five of six. Four: refused.
#[test]
fn five_weekdays_at_least() {
    let tz = ny();
    let (start, end) = (local(tz, 2026, 7, 21, 13, 0), local(tz, 2026, 7, 21, 14, 0));
    let data = series(start - Duration::days(40), start, 60, |t| {
        Some(f64::from(local_date(t, tz).day()))
    });
    let holidays = HolidayCalendar::default();
    let usable = |n: usize| -> BTreeSet<_> {
        let weekdays: Vec<_> = (1..=30)
            .map(|back| d(2026, 7, 21) - Duration::days(back))
            .filter(|day| day.weekday().number_from_monday() <= 5)
            .collect();
        weekdays.into_iter().skip(n).collect()
    };
    let method = Method::NyisoCbl {
        weather_sensitive: false,
    };
    let six = usable(6);
    let report = compute(&method, &input(&data, start, end, tz, &six, &holidays)).expect("CBL");
    assert_eq!(report.days_used.len(), 6);
    assert_eq!(report.days_used.iter().filter(|u| u.counted).count(), 5);
    // 20, 17, 16, 15, 14, 13 July: the highest five drop 13 July.
    close(
        report.intervals[0].baseline_kw.expect("kw"),
        (20.0 + 17.0 + 16.0 + 15.0 + 14.0) / 5.0,
    );
    let four = usable(4);
    let err = compute(&method, &input(&data, start, end, tz, &four, &holidays)).expect_err("refused");
    assert!(
        matches!(
            err,
            BaselineError::TooFewDays {
                found: 4,
                needed: 5,
                ..
            }
        ),
        "{err:?}"
    );
}
