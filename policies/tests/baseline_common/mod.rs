//! Hand-made calendars for the baseline tests: interval data from a load function, local
//! times in a zone, and the inputs every method takes.
#![allow(dead_code)]

use chrono::{DateTime, Duration, NaiveDate, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use flexgate_policies::baseline::{BaselineInput, HolidayCalendar, Method};
use flexgate_policies::intervals::{Interval, IntervalQuality, IntervalSeries, IntervalSource};
use std::collections::BTreeSet;

/// A zone by name.
pub fn tz(name: &str) -> Tz {
    name.parse().expect("zone")
}

/// New York.
pub fn ny() -> Tz {
    tz("America/New_York")
}

/// Los Angeles.
pub fn la() -> Tz {
    tz("America/Los_Angeles")
}

/// A date.
pub fn d(y: i32, m: u32, day: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, day).expect("date")
}

/// The UTC instant of a local time that exists once.
pub fn local(tz: Tz, y: i32, m: u32, day: u32, h: u32, min: u32) -> DateTime<Utc> {
    tz.with_ymd_and_hms(y, m, day, h, min, 0)
        .single()
        .expect("a local time that exists once")
        .with_timezone(&Utc)
}

/// The local hour of `t` as a fraction (14.25 for 14:15).
pub fn local_hour(t: DateTime<Utc>, tz: Tz) -> f64 {
    let l = t.with_timezone(&tz);
    f64::from(l.hour()) + f64::from(l.minute()) / 60.0
}

/// The local date of `t`.
pub fn local_date(t: DateTime<Utc>, tz: Tz) -> NaiveDate {
    t.with_timezone(&tz).date_naive()
}

/// Intervals of `minutes` from `from` to `to` (both on the grid), each interval's figure
/// `load(start)`: `None` leaves the interval out (absent).
pub fn series(
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    minutes: i64,
    load: impl Fn(DateTime<Utc>) -> Option<f64>,
) -> IntervalSeries {
    let len = Duration::minutes(minutes);
    let mut out = Vec::new();
    let mut t = from;
    while t + len <= to {
        if let Some(kw) = load(t) {
            out.push(Interval {
                start: t,
                end: t + len,
                kw: Some(kw),
                quality: IntervalQuality::Measured,
                samples: 0,
                source: IntervalSource::Imported("test".to_string()),
            });
        }
        t += len;
    }
    IntervalSeries::new(out).expect("a series")
}

/// `series` with the intervals for which `missing(start)` holds kept as `missing` intervals.
pub fn with_missing(data: &IntervalSeries, missing: impl Fn(DateTime<Utc>) -> bool) -> IntervalSeries {
    IntervalSeries::new(
        data.intervals()
            .iter()
            .cloned()
            .map(|mut i| {
                if missing(i.start) {
                    i.kw = None;
                    i.quality = IntervalQuality::Missing;
                }
                i
            })
            .collect(),
    )
    .expect("a series")
}

/// The input of an event.
pub fn input<'a>(
    data: &'a IntervalSeries,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    tz: Tz,
    event_days: &'a BTreeSet<NaiveDate>,
    holidays: &'a HolidayCalendar,
) -> BaselineInput<'a> {
    BaselineInput {
        data,
        start,
        end,
        time_zone: tz,
        event_days,
        holidays,
    }
}

/// Every method, the firm service level at `level_kw`.
pub fn all_methods(level_kw: f64) -> Vec<Method> {
    vec![
        Method::PjmEconomic,
        Method::Caiso10In10,
        Method::ErcotMiddle8Of10,
        Method::ErcotMatchingDayPair { lookback_days: 60 },
        Method::NyisoCbl {
            weather_sensitive: true,
        },
        Method::NyisoCbl {
            weather_sensitive: false,
        },
        Method::FirmServiceLevel { level_kw },
        Method::MeterBeforeAfter {
            before_s: 3600,
            after_s: 3600,
        },
    ]
}

/// Assert two figures agree to a millionth of a kW.
#[track_caller]
pub fn close(a: f64, b: f64) {
    assert!((a - b).abs() < 1e-6, "{a} != {b}");
}
