//! Matching intervals by local clock time, across DST.
//!
//! Every like-day method compares the event's 14:00 interval with 14:00 on each other day, in
//! the site's zone: the UTC offset differs across a DST change, the clock time does not. The
//! event window is cut into the data's own intervals (its grid: the series' length and phase);
//! each one carries its local start, and a day `n` days earlier is read at that local time
//! less `n` days. A local time that DST skips (the spring-forward hour) makes the day unusable
//! for that window (`DstGap`); one that DST repeats (the fall-back hour) is read at its first
//! occurrence, the earlier UTC instant, as PJM's Economic CBL in the audit always has.

use crate::intervals::{IntervalQuality, IntervalSeries};
use chrono::{DateTime, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// One interval of a window on the data's grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Slot {
    /// Start, UTC.
    pub start: DateTime<Utc>,
    /// End, UTC.
    pub end: DateTime<Utc>,
    /// Its start on the site's clock.
    pub local: NaiveDateTime,
}

/// The data's interval grid: its length and where its intervals start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grid {
    length_s: i64,
    phase_s: i64,
}

impl Grid {
    /// The grid of `data` (`None` without intervals).
    pub fn of(data: &IntervalSeries) -> Option<Grid> {
        let first = data.intervals().first()?;
        let length_s = first.length_s();
        (length_s > 0).then(|| Grid {
            length_s,
            phase_s: first.start.timestamp().rem_euclid(length_s),
        })
    }

    /// The interval length, s.
    pub fn length_s(self) -> i64 {
        self.length_s
    }

    /// The grid's start at or before `t`.
    fn floor(self, t: DateTime<Utc>) -> i64 {
        let s = t.timestamp() - self.phase_s;
        s.div_euclid(self.length_s) * self.length_s + self.phase_s
    }

    /// The grid's start at or after `t`.
    fn ceil(self, t: DateTime<Utc>) -> i64 {
        let f = self.floor(t);
        if f == t.timestamp() && t.timestamp_subsec_nanos() == 0 {
            f
        } else {
            f + self.length_s
        }
    }

    /// The grid's intervals that overlap `[from, to)`: the event window, where a partly
    /// covered interval is settled whole.
    pub fn overlapping(self, from: DateTime<Utc>, to: DateTime<Utc>, tz: Tz) -> Vec<Slot> {
        self.slots(self.floor(from), self.ceil(to), tz)
    }

    /// The grid's intervals inside `[from, to)`: adjustment and meter windows, which must
    /// not reach into the event.
    pub fn inside(self, from: DateTime<Utc>, to: DateTime<Utc>, tz: Tz) -> Vec<Slot> {
        self.slots(self.ceil(from), self.floor(to), tz)
    }

    fn slots(self, first: i64, last: i64, tz: Tz) -> Vec<Slot> {
        let mut out = Vec::new();
        let mut s = first;
        while s + self.length_s <= last {
            if let (Some(start), Some(end)) = (
                DateTime::from_timestamp(s, 0),
                DateTime::from_timestamp(s + self.length_s, 0),
            ) {
                out.push(Slot {
                    start,
                    end,
                    local: start.with_timezone(&tz).naive_local(),
                });
            }
            s += self.length_s;
        }
        out
    }
}

/// The local calendar day of `t` in `tz`.
pub(crate) fn local_date(t: DateTime<Utc>, tz: Tz) -> NaiveDate {
    t.with_timezone(&tz).date_naive()
}

/// The UTC instant of `local` shifted by `days`, the first occurrence when DST repeats it;
/// `None` in a DST gap.
pub(crate) fn shifted(tz: Tz, local: NaiveDateTime, days: i64) -> Option<DateTime<Utc>> {
    let local = local.checked_add_signed(Duration::days(days))?;
    match tz.from_local_datetime(&local) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
        LocalResult::None => None,
    }
}

/// The first instant of local day `day` (midnight, or the first time that exists when DST
/// skips midnight, as some zones do).
pub(crate) fn day_start(tz: Tz, day: NaiveDate) -> Option<DateTime<Utc>> {
    (0..=2).find_map(|h| {
        let local = day.and_hms_opt(h, 0, 0)?;
        tz.from_local_datetime(&local).earliest().map(|t| t.with_timezone(&Utc))
    })
}

/// Why a day cannot be read for a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unusable {
    /// An interval is absent or missing.
    MissingData,
    /// A local time does not exist that day.
    DstGap,
}

/// The figure of the interval starting at `start`, and whether it was estimated.
pub(crate) fn value_at(data: &IntervalSeries, start: DateTime<Utc>) -> Option<(f64, bool)> {
    let intervals = data.intervals();
    let i = intervals.binary_search_by_key(&start, |i| i.start).ok()?;
    let interval = &intervals[i];
    interval
        .kw
        .map(|kw| (kw, interval.quality == IntervalQuality::Estimated))
}

/// A day's figures at the local clock times of `slots`, which lie on the day `shift` days
/// away (negative: earlier); how many were estimated.
pub(crate) fn read_shifted(
    data: &IntervalSeries,
    tz: Tz,
    slots: &[Slot],
    shift: i64,
) -> Result<(Vec<f64>, usize), Unusable> {
    let starts: Vec<DateTime<Utc>> = slots
        .iter()
        .map(|s| shifted(tz, s.local, shift).ok_or(Unusable::DstGap))
        .collect::<Result<_, _>>()?;
    read_at(data, &starts)
}

/// The figures of the intervals starting at `starts`; how many were estimated.
pub(crate) fn read_at(data: &IntervalSeries, starts: &[DateTime<Utc>]) -> Result<(Vec<f64>, usize), Unusable> {
    let mut kw = Vec::with_capacity(starts.len());
    let mut estimated = 0;
    for start in starts {
        let (v, est) = value_at(data, *start).ok_or(Unusable::MissingData)?;
        kw.push(v);
        estimated += usize::from(est);
    }
    Ok((kw, estimated))
}

/// The event day's own figures at `slots` (UTC as they are), when all are present.
pub(crate) fn read_slots(data: &IntervalSeries, slots: &[Slot]) -> Option<Vec<f64>> {
    let starts: Vec<DateTime<Utc>> = slots.iter().map(|s| s.start).collect();
    read_at(data, &starts).ok().map(|(kw, _)| kw)
}

/// The mean of `xs` (`None` when empty).
pub(crate) fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intervals::{Interval, IntervalSource};

    fn series(starts: &[i64], len: i64) -> IntervalSeries {
        IntervalSeries::new(
            starts
                .iter()
                .map(|s| Interval {
                    start: DateTime::from_timestamp(*s, 0).expect("t"),
                    end: DateTime::from_timestamp(s + len, 0).expect("t"),
                    kw: Some(1.0),
                    quality: IntervalQuality::Measured,
                    samples: 0,
                    source: IntervalSource::Gateway,
                })
                .collect(),
        )
        .expect("series")
    }

    #[test]
    fn the_grid_follows_the_data_and_covers_partial_intervals() {
        let tz: Tz = "UTC".parse().expect("tz");
        let grid = Grid::of(&series(&[900], 900)).expect("grid");
        let t = |s| DateTime::from_timestamp(s, 0).expect("t");
        // 1000..2000 overlaps [900,1800) and [1800,2700); inside it there is none.
        assert_eq!(grid.overlapping(t(1000), t(2000), tz).len(), 2);
        assert!(grid.inside(t(1000), t(2000), tz).is_empty());
        assert_eq!(grid.inside(t(900), t(2700), tz).len(), 2);
        // A grid offset by 5 minutes.
        let grid = Grid::of(&series(&[300], 900)).expect("grid");
        let slots = grid.overlapping(t(900), t(1800), tz);
        assert_eq!(slots.first().map(|s| s.start), Some(t(300)));
        assert_eq!(slots.last().map(|s| s.end), Some(t(2100)));
    }

    #[test]
    fn skipped_local_times_are_gaps_and_repeated_ones_read_first() {
        let tz: Tz = "America/New_York".parse().expect("tz");
        let local = NaiveDate::from_ymd_opt(2026, 3, 9)
            .and_then(|d| d.and_hms_opt(2, 30, 0))
            .expect("local");
        // 8 March 2026 02:30 does not exist in New York.
        assert_eq!(shifted(tz, local, -1), None);
        let local = NaiveDate::from_ymd_opt(2026, 11, 2)
            .and_then(|d| d.and_hms_opt(1, 30, 0))
            .expect("local");
        // 1 November 2026 01:30 happens twice: EDT first (05:30 UTC).
        let first = shifted(tz, local, -1).expect("exists");
        assert_eq!(first.to_rfc3339(), "2026-11-01T05:30:00+00:00");
    }
}
