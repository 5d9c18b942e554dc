//! Properties every method keeps on random calendars: New York and Los Angeles, events near
//! the DST changes and holidays, random event days, holiday lists, missing intervals and
//! interval lengths.
//!
//! - A constant load gives a baseline equal to it, on every interval, for every method that
//!   has a baseline (a firm service level has none), whatever the calendar.
//! - Scaling every load by k scales every baseline by k, and chooses the same days.
//! - No day is both used and excluded; no day used is the event's or later, beyond the
//!   method's look-back, or an event day unless the method's fallback took it in (and says
//!   so); the used days are like days of the event's.
//! - One interval per interval of the data's grid over the window; no adjusted baseline is
//!   negative; a capped factor stays within its cap.

mod baseline_common;

use baseline_common::*;
use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use flexgate_policies::baseline::{
    BaselineError, BaselineReport, DayType, HolidayCalendar, HolidaySet, Method, MethodId, compute,
};
use flexgate_policies::intervals::IntervalSeries;
use proptest::prelude::*;
use std::collections::BTreeSet;

/// A random calendar and event.
#[derive(Debug, Clone)]
struct Case {
    tz: Tz,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    minutes: i64,
    event_days: BTreeSet<NaiveDate>,
    holidays: HolidayCalendar,
    /// Days back from the event whose one interval at `missing_hour` is missing.
    missing: BTreeSet<i64>,
    missing_hour: u32,
    /// Per-day levels, by days back from the event.
    levels: Vec<f64>,
}

fn case() -> impl Strategy<Value = Case> {
    let anchors = vec![
        d(2026, 3, 8),
        d(2026, 11, 1),
        d(2026, 7, 4),
        d(2026, 11, 26),
        d(2026, 12, 25),
        d(2026, 6, 10),
    ];
    (
        prop::bool::ANY,
        prop::sample::select(anchors),
        -3i64..12,
        0u32..23,
        prop::sample::select(vec![0u32, 15, 30, 45]),
        1i64..16,
        prop::bool::ANY,
        proptest::collection::vec(prop::bool::weighted(0.12), 70),
        0usize..3,
        proptest::collection::vec(prop::bool::weighted(0.05), 70),
        0u32..24,
        proptest::collection::vec(1.0f64..1000.0, 72),
    )
        .prop_filter_map(
            "a local start that exists",
            |(ny_zone, anchor, offset, hour, minute, quarters, hourly, events, cal, missing, missing_hour, levels)| {
                let tz = if ny_zone { ny() } else { la() };
                let day = anchor + Duration::days(offset);
                let start = tz
                    .from_local_datetime(&day.and_hms_opt(hour, minute, 0)?)
                    .earliest()?
                    .with_timezone(&Utc);
                let event_days = events
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| **e)
                    .map(|(i, _)| day - Duration::days(i as i64 + 1))
                    .collect();
                let holidays = match cal {
                    0 => HolidayCalendar::default(),
                    1 => HolidayCalendar::of(&[HolidaySet::UsFederal]),
                    _ => HolidayCalendar::of(&[HolidaySet::CaliforniaTou]).with_day(day - Duration::days(3)),
                };
                Some(Case {
                    tz,
                    start,
                    end: start + Duration::minutes(15 * quarters),
                    minutes: if hourly { 60 } else { 15 },
                    event_days,
                    holidays,
                    missing: missing
                        .iter()
                        .enumerate()
                        .filter(|(_, m)| **m)
                        .map(|(i, _)| i as i64 + 1)
                        .collect(),
                    missing_hour,
                    levels,
                })
            },
        )
}

impl Case {
    fn event_date(&self) -> NaiveDate {
        local_date(self.start, self.tz)
    }

    /// 70 days of data to two hours after the event, the load `load(day back, local hour)`.
    fn data(&self, load: impl Fn(i64, f64) -> f64) -> IntervalSeries {
        let grid = 60 * self.minutes;
        let from = DateTime::from_timestamp((self.start - Duration::days(70)).timestamp().div_euclid(grid) * grid, 0)
            .expect("t");
        let to = self.end + Duration::hours(3);
        let day0 = self.event_date();
        let data = series(from, to, self.minutes, |t| {
            let back = (day0 - local_date(t, self.tz)).num_days();
            Some(load(back, local_hour(t, self.tz)))
        });
        with_missing(&data, |t| {
            let back = (day0 - local_date(t, self.tz)).num_days();
            self.missing.contains(&back) && local_hour(t, self.tz).floor() as u32 == self.missing_hour
        })
    }

    fn run(&self, method: &Method, data: &IntervalSeries) -> Result<BaselineReport, BaselineError> {
        compute(
            method,
            &input(data, self.start, self.end, self.tz, &self.event_days, &self.holidays),
        )
    }
}

/// The refusals random calendars may meet; any other is a bug.
fn acceptable(err: &BaselineError) -> bool {
    matches!(
        err,
        BaselineError::TooFewDays { .. }
            | BaselineError::NoMatchingPair { .. }
            | BaselineError::EventPairIncomplete { .. }
            | BaselineError::NoMeterBeforeOrAfter { .. }
    )
}

fn lookback(method: MethodId) -> i64 {
    match method {
        MethodId::PjmEconomic | MethodId::Caiso10In10 => 45,
        MethodId::ErcotMiddle8Of10 | MethodId::ErcotMatchingDayPair => 60,
        MethodId::NyisoCbl => 30,
        MethodId::FirmServiceLevel | MethodId::MeterBeforeAfter => 0,
    }
}

/// What every report keeps (see the module docs).
fn check_report(case: &Case, r: &BaselineReport) -> Result<(), TestCaseError> {
    let day0 = case.event_date();
    let used: BTreeSet<NaiveDate> = r.days_used.iter().map(|u| u.date).collect();
    for e in &r.days_excluded {
        prop_assert!(!used.contains(&e.date), "{} used and excluded", e.date);
    }
    for u in &r.days_used {
        prop_assert!(u.date < day0);
        prop_assert!((day0 - u.date).num_days() <= lookback(r.method), "{} too old", u.date);
        prop_assert!(!case.event_days.contains(&u.date) || u.event_day);
        if u.event_day {
            prop_assert_eq!(r.method, MethodId::Caiso10In10);
            prop_assert!(!r.notes.is_empty());
        }
        if let Some(day_type) = r.day_type {
            let like = case.holidays.day_type(u.date) == day_type;
            prop_assert!(like || r.method == MethodId::NyisoCbl && day_type == DayType::WeekendOrHoliday);
        }
    }
    // The grid's intervals over the window, consecutive, covering it.
    let first = r.intervals.first().expect("at least one interval");
    let last = r.intervals.last().expect("at least one interval");
    prop_assert!(first.start <= case.start && case.start < first.end);
    prop_assert!(last.end >= case.end && last.start < case.end);
    for w in r.intervals.windows(2) {
        prop_assert_eq!(w[0].end, w[1].start);
        prop_assert_eq!((w[0].end - w[0].start).num_minutes(), case.minutes);
    }
    for i in &r.intervals {
        prop_assert!(i.adjusted_baseline_kw.is_none_or(|kw| kw >= 0.0 && kw.is_finite()));
    }
    if let Some(a) = &r.adjustment
        && let (true, Some(cap)) = (a.applied, a.cap)
    {
        prop_assert!(a.value >= 1.0 - cap - 1e-12 && a.value <= 1.0 + cap + 1e-12);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// A constant load: every baseline equals it.
    #[test]
    fn a_constant_load_is_its_own_baseline(case in case(), level in 0.5f64..2000.0) {
        let data = case.data(|_, _| level);
        for method in all_methods(level) {
            match case.run(&method, &data) {
                Ok(r) => {
                    check_report(&case, &r)?;
                    for i in &r.intervals {
                        if method.id() == MethodId::FirmServiceLevel {
                            prop_assert_eq!(i.adjusted_baseline_kw, None);
                            continue;
                        }
                        let (b, a) = (i.baseline_kw.expect("kw"), i.adjusted_baseline_kw.expect("kw"));
                        prop_assert!((b - level).abs() < 1e-9 * level, "{:?}: {} != {}", method, b, level);
                        prop_assert!((a - level).abs() < 1e-9 * level, "{:?}: {} != {}", method, a, level);
                    }
                }
                Err(e) => prop_assert!(acceptable(&e), "{:?}: {:?}", method, e),
            }
        }
    }

    /// Every load times k: every baseline times k, the same days.
    #[test]
    fn scaling_the_load_scales_the_baseline(case in case(), k in 0.05f64..20.0) {
        let load = |back: i64, hour: f64| case.levels[back.clamp(0, 71) as usize] * (1.0 + 0.5 * (hour / 24.0));
        let data = case.data(load);
        let scaled = case.data(|back, hour| k * load(back, hour));
        for method in all_methods(100.0) {
            match (case.run(&method, &data), case.run(&method, &scaled)) {
                (Ok(a), Ok(b)) => {
                    check_report(&case, &a)?;
                    check_report(&case, &b)?;
                    let days = |r: &BaselineReport| r.days_used.iter().map(|u| (u.date, u.counted)).collect::<Vec<_>>();
                    prop_assert_eq!(days(&a), days(&b), "{:?}", method);
                    for (x, y) in a.intervals.iter().zip(&b.intervals) {
                        if let (Some(x), Some(y)) = (x.adjusted_baseline_kw, y.adjusted_baseline_kw) {
                            prop_assert!((y - k * x).abs() <= 1e-9 * (k * x).abs().max(1.0), "{:?}: {} vs {} × {}", method, y, k, x);
                        }
                    }
                }
                (Err(a), Err(b)) => {
                    prop_assert!(acceptable(&a), "{:?}: {:?}", method, a);
                    prop_assert_eq!(std::mem::discriminant(&a), std::mem::discriminant(&b));
                }
                (a, b) => prop_assert!(false, "{:?}: {:?} against {:?}", method, a.map(|r| r.days_used), b.map(|r| r.days_used)),
            }
        }
    }
}
