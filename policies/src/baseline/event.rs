//! What every method is given, checked once: the data, the event window cut into the data's
//! intervals, the zone, the event days and the holidays.

use super::calendar::HolidayCalendar;
use super::local::{Grid, Slot, local_date};
use super::method::MethodId;
use super::report::{BaselineError, BaselineReport, Detail, IntervalBaseline};
use crate::intervals::IntervalSeries;
use chrono::{DateTime, NaiveDate, Utc};
use chrono_tz::Tz;
use std::collections::BTreeSet;

/// The longest window a baseline compares: beyond a day, "the same clock time on a like day"
/// no longer names one interval.
const MAX_WINDOW_S: i64 = 24 * 3600;

/// A baseline's inputs: interval data (kW, interval-ending, one length), the event window,
/// the site's zone, the days the site curtailed on (never normal load) and the holidays.
#[derive(Debug, Clone, Copy)]
pub struct BaselineInput<'a> {
    /// The site's interval data, imported first where the caller has both.
    pub data: &'a IntervalSeries,
    /// The event's start, UTC.
    pub start: DateTime<Utc>,
    /// Its end, UTC.
    pub end: DateTime<Utc>,
    /// The site's zone: days and clock times are matched in it.
    pub time_zone: Tz,
    /// Local days on which the site curtailed (for a program's events or any other reason).
    pub event_days: &'a BTreeSet<NaiveDate>,
    /// The program's holidays.
    pub holidays: &'a HolidayCalendar,
}

/// The input with the event window on the data's grid.
pub(crate) struct Event<'a> {
    /// The input.
    pub input: &'a BaselineInput<'a>,
    /// The data's grid.
    pub grid: Grid,
    /// The event window's intervals.
    pub slots: Vec<Slot>,
    /// The local day the event starts on.
    pub date: NaiveDate,
}

impl<'a> Event<'a> {
    /// Check the window and the data.
    pub fn new(input: &'a BaselineInput<'a>) -> Result<Self, BaselineError> {
        if input.end <= input.start {
            return Err(BaselineError::EmptyWindow);
        }
        let seconds = (input.end - input.start).num_seconds();
        if seconds > MAX_WINDOW_S {
            return Err(BaselineError::WindowTooLong { seconds });
        }
        let grid = Grid::of(input.data).ok_or(BaselineError::NoData)?;
        let slots = grid.overlapping(input.start, input.end, input.time_zone);
        Ok(Self {
            input,
            grid,
            slots,
            date: local_date(input.start, input.time_zone),
        })
    }

    /// The zone.
    pub fn tz(&self) -> Tz {
        self.input.time_zone
    }

    /// Days from the event's day to `day` (negative: before).
    pub fn shift(&self, day: NaiveDate) -> i64 {
        (day - self.date).num_days()
    }

    /// Whether the site curtailed on `day`.
    pub fn is_event_day(&self, day: NaiveDate) -> bool {
        self.input.event_days.contains(&day)
    }

    /// A report of `method` with nothing chosen yet, one interval per slot with `baseline`
    /// and `adjusted` of each.
    pub fn report(
        &self,
        method: MethodId,
        rule: String,
        detail: Detail,
        baseline: impl Fn(usize) -> Option<f64>,
        adjusted: impl Fn(usize) -> Option<f64>,
    ) -> BaselineReport {
        BaselineReport {
            method,
            version: method.version(),
            rule,
            time_zone: self.tz().name().to_string(),
            holidays: self.input.holidays.clone(),
            start: self.input.start,
            end: self.input.end,
            interval_s: self.grid.length_s(),
            day_type: None,
            days_used: Vec::new(),
            days_excluded: Vec::new(),
            adjustment: None,
            detail,
            notes: Vec::new(),
            intervals: self
                .slots
                .iter()
                .enumerate()
                .map(|(k, s)| IntervalBaseline {
                    start: s.start,
                    end: s.end,
                    baseline_kw: baseline(k),
                    adjusted_baseline_kw: adjusted(k),
                    firm_service_level_kw: None,
                })
                .collect(),
        }
    }
}
