//! `caiso_10in10` on hand-made calendars.
//!
//! Worked example: no CAISO-published worked example could be retrieved while these tests
//! were written (the BPM for Demand Response was not reachable here); the examples are
//! computed by hand in each test's docs.

mod baseline_common;

use baseline_common::*;
use chrono::{DateTime, Datelike, Duration, Utc};
use flexgate_policies::baseline::{BaselineError, DayType, Exclusion, HolidayCalendar, HolidaySet, Method, compute};
use std::collections::BTreeSet;

/// The rank of each weekday before Tuesday 14 July 2026, most recent first.
const RANKED: [(u32, u32); 11] = [
    (7, 13),
    (7, 10),
    (7, 9),
    (7, 8),
    (7, 7),
    (7, 6),
    (7, 3),
    (7, 2),
    (7, 1),
    (6, 30),
    (6, 29),
];

/// Hourly data in Los Angeles: on the ranked weekdays 15:00 reads 100 + 10 × rank kW, 16:00
/// reads 200 kW; 11:00–14:00 reads 100 kW, on the event day `morning_kw`; 50 kW otherwise.
fn july(
    morning_kw: f64,
) -> (
    flexgate_policies::intervals::IntervalSeries,
    DateTime<Utc>,
    DateTime<Utc>,
) {
    let tz = la();
    let (start, end) = (local(tz, 2026, 7, 14, 15, 0), local(tz, 2026, 7, 14, 17, 0));
    let data = series(start - Duration::days(50), start, 60, |t| {
        let l = t.with_timezone(&tz);
        let rank = RANKED
            .iter()
            .position(|&(m, day)| l.month() == m && l.day() == day)
            .map(|p| p as f64 + 1.0);
        let h = local_hour(t, tz);
        let morning = (11.0..14.0).contains(&h);
        Some(match (rank, h as u32) {
            (Some(r), 15) => 100.0 + 10.0 * r,
            (Some(_), 16) => 200.0,
            _ if morning && local_date(t, tz) == d(2026, 7, 14) => morning_kw,
            _ if morning => 100.0,
            _ => 50.0,
        })
    });
    (data, start, end)
}

/// With the NERC holidays (4 July 2026 is a Saturday, not moved) the ten days are ranks 1–10:
/// 15:00 → 100 + 10 × 5.5 = 155 kW, 16:00 → 200 kW. The event day reads 130 kW before the
/// event against the days' 100 kW: a factor of 1.3, capped at 1.2 (bound): 186 and 240 kW.
#[test]
fn ten_days_averaged_and_the_adjustment_capped_at_twenty_percent() {
    let tz = la();
    let (data, start, end) = july(130.0);
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    assert_eq!(report.day_type, Some(DayType::Weekday));
    assert_eq!(report.days_used.len(), 10);
    assert!(report.days_used.iter().all(|u| u.counted));
    close(report.intervals[0].baseline_kw.expect("kw"), 155.0);
    close(report.intervals[1].baseline_kw.expect("kw"), 200.0);
    let a = report.adjustment.as_ref().expect("adjustment");
    assert!(a.applied && a.bound);
    close(a.uncapped.expect("factor"), 1.3);
    close(a.value, 1.2);
    assert_eq!(a.cap, Some(0.2));
    // The three hours before the event excluding the hour immediately prior.
    assert_eq!(a.window_start, local(tz, 2026, 7, 14, 11, 0));
    assert_eq!(a.window_end, local(tz, 2026, 7, 14, 14, 0));
    close(report.intervals[0].adjusted_baseline_kw.expect("kw"), 186.0);
    close(report.intervals[1].adjusted_baseline_kw.expect("kw"), 240.0);
}

/// A morning of 90 kW is a factor of 0.9, within the cap: 139.5 and 180 kW. With the federal
/// holidays 3 July (Independence Day observed) is a holiday: ranks 1–6 and 8–11, mean rank 5.9,
/// 15:00 → 159 kW.
#[test]
fn an_uncapped_factor_and_a_program_holiday_list() {
    let tz = la();
    let (data, start, end) = july(90.0);
    let events = BTreeSet::new();
    let nerc = HolidayCalendar::default();
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &nerc)).expect("baseline");
    let a = report.adjustment.as_ref().expect("adjustment");
    assert!(a.applied && !a.bound);
    close(report.intervals[0].adjusted_baseline_kw.expect("kw"), 139.5);
    close(report.intervals[1].adjusted_baseline_kw.expect("kw"), 180.0);
    let federal = HolidayCalendar::of(&[HolidaySet::UsFederal]);
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &federal)).expect("baseline");
    let reason = |day| report.days_excluded.iter().find(|e| e.date == day).map(|e| e.reason);
    assert_eq!(reason(d(2026, 7, 3)), Some(Exclusion::Holiday));
    assert_eq!(report.days_used.last().map(|u| u.date), Some(d(2026, 6, 29)));
    close(report.intervals[0].baseline_kw.expect("kw"), 159.0);
}

/// Only three non-event weekdays in the 45 days, each reading 100 kW; every other weekday
/// is an event day reading its day of month in kW. CAISO's fallback takes in the two event
/// days with the highest window load (30 and 29 June), marks them among the days used and does
/// not list them as excluded: (3 × 100 + 30 + 29) / 5 kW. Without data on the event days there
/// is nothing to take in, and the method refuses.
#[test]
fn short_of_five_days_the_highest_event_days_are_taken_in() {
    let tz = la();
    let (start, end) = (local(tz, 2026, 7, 14, 15, 0), local(tz, 2026, 7, 14, 16, 0));
    let keep = [d(2026, 7, 13), d(2026, 6, 24), d(2026, 6, 10)];
    let events: BTreeSet<_> = (1..=45)
        .map(|back| d(2026, 7, 14) - Duration::days(back))
        .filter(|day| !keep.contains(day))
        .collect();
    // Event days read their day of month kW; the kept days 100 kW.
    let data = series(start - Duration::days(50), start, 60, |t| {
        let day = local_date(t, tz);
        Some(if keep.contains(&day) {
            100.0
        } else {
            f64::from(day.day())
        })
    });
    let holidays = HolidayCalendar::default();
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    let used: Vec<_> = report.days_used.iter().map(|u| (u.date, u.event_day)).collect();
    // The weekday event days with the highest figures: 30 June (30 kW) and 29 June (29 kW).
    assert_eq!(
        used,
        [
            (d(2026, 7, 13), false),
            (d(2026, 6, 30), true),
            (d(2026, 6, 29), true),
            (d(2026, 6, 24), false),
            (d(2026, 6, 10), false),
        ]
    );
    assert!(
        report.notes.iter().any(|n| n.contains("event day")),
        "{:?}",
        report.notes
    );
    assert!(!report.days_excluded.iter().any(|e| e.date == d(2026, 6, 30)));
    close(
        report.intervals[0].baseline_kw.expect("kw"),
        (300.0 + 30.0 + 29.0) / 5.0,
    );
    // No data on the event days: nothing to fill with.
    let bare = series(start - Duration::days(50), start, 60, |t| {
        keep.contains(&local_date(t, tz)).then_some(100.0)
    });
    let err = compute(&Method::Caiso10In10, &input(&bare, start, end, tz, &events, &holidays)).expect_err("refused");
    assert!(
        matches!(
            err,
            BaselineError::TooFewDays {
                found: 3,
                needed: 5,
                ..
            }
        ),
        "{err:?}"
    );
}

/// A Sunday event (12 July 2026) uses the four most recent weekend days or holidays: 11 July,
/// 5 July, 4 July (a Saturday and Independence Day) and 28 June; each reads its day of month
/// in kW, so the baseline is their mean.
#[test]
fn a_weekend_event_uses_four_in_four() {
    let tz = la();
    let (start, end) = (local(tz, 2026, 7, 12, 15, 0), local(tz, 2026, 7, 12, 16, 0));
    let data = series(start - Duration::days(50), start, 15, |t| {
        Some(f64::from(local_date(t, tz).day()))
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    let used: Vec<_> = report.days_used.iter().map(|u| u.date).collect();
    assert_eq!(used, [d(2026, 7, 11), d(2026, 7, 5), d(2026, 7, 4), d(2026, 6, 28)]);
    close(
        report.intervals[0].baseline_kw.expect("kw"),
        (11.0 + 5.0 + 4.0 + 28.0) / 4.0,
    );
}

/// Wednesday 11 March 2026, 17:00–18:00 Los Angeles, after spring forward (8 March): the days
/// before it were on PST. The load is 300 kW from 17:00 to 18:00 local and 100 kW otherwise,
/// so the baseline is 300 kW on every interval, and no factor (morning 100 against 100).
#[test]
fn los_angeles_across_spring_forward() {
    let tz = la();
    let (start, end) = (local(tz, 2026, 3, 11, 17, 0), local(tz, 2026, 3, 11, 18, 0));
    let data = series(start - Duration::days(50), start, 5, |t| {
        Some(if (17.0..18.0).contains(&local_hour(t, tz)) {
            300.0
        } else {
            100.0
        })
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    assert!(report.days_used.iter().any(|u| u.date < d(2026, 3, 8)));
    assert_eq!(report.intervals.len(), 12);
    for i in &report.intervals {
        close(i.adjusted_baseline_kw.expect("kw"), 300.0);
    }
    close(report.adjustment.as_ref().expect("adjustment").value, 1.0);
}

/// Saturday 7 November 2026, 01:00–02:00 Los Angeles. On Sunday 1 November 01:00–02:00 happens
/// twice (PDT, then PST); the first occurrence is read. The load is 80 kW in the first 01:00
/// hour of every day, 20 kW in the repeated hour, 50 kW otherwise: the baseline is 80 kW.
#[test]
fn los_angeles_fall_back_reads_the_first_occurrence() {
    let tz = la();
    let (start, end) = (local(tz, 2026, 11, 7, 1, 0), local(tz, 2026, 11, 7, 2, 0));
    let repeated_from = local(tz, 2026, 11, 1, 0, 0) + Duration::hours(2);
    let data = series(start - Duration::days(40), start, 15, |t| {
        let h = local_hour(t, tz);
        let second = t >= repeated_from && t < repeated_from + Duration::hours(1);
        Some(if second {
            20.0
        } else if (1.0..2.0).contains(&h) {
            80.0
        } else {
            50.0
        })
    });
    let (events, holidays) = (BTreeSet::new(), HolidayCalendar::default());
    let report = compute(&Method::Caiso10In10, &input(&data, start, end, tz, &events, &holidays)).expect("baseline");
    assert!(report.days_used.iter().any(|u| u.date == d(2026, 11, 1)));
    for i in &report.intervals {
        close(i.baseline_kw.expect("kw"), 80.0);
    }
}
