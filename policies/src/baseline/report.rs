//! The one report every method gives, and the one refusal.
//!
//! A settlement is checked by someone who has only the report and the meter data, so the
//! report says everything the figure depends on: the method and its version, the zone the days
//! were matched in, every day looked at (used, counted or not, and excluded with its reason),
//! the adjustment with its window and cap, and a baseline for every interval of the data's own
//! length over the event window. It serializes to the JSON `flexgate baseline --json` prints.

use super::calendar::{DayType, HolidayCalendar};
use super::method::MethodId;
use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;

/// A method's baseline for one event window, with everything needed to reproduce it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BaselineReport {
    /// The method's stable id (`pjm_economic`, `caiso_10in10`, ...).
    pub method: MethodId,
    /// The version of the method's rules this report follows.
    pub version: u32,
    /// The rule in words (day counts, look-back, adjustment), so a reader need not look the
    /// version up.
    pub rule: String,
    /// The IANA zone days and clock times were matched in.
    pub time_zone: String,
    /// The holiday calendar days were classed by.
    pub holidays: HolidayCalendar,
    /// The event window, UTC.
    pub start: DateTime<Utc>,
    /// Its end, UTC.
    pub end: DateTime<Utc>,
    /// The data's interval length, s: one entry of `intervals` per interval.
    pub interval_s: i64,
    /// The event day's type under the holiday calendar (for the methods that compare days).
    pub day_type: Option<DayType>,
    /// The days the baseline was made of, most recent first, each with its mean over the
    /// event's local clock window and whether it counted in the mean.
    pub days_used: Vec<DayUsed>,
    /// The days looked at and not used, most recent first, with the reason.
    pub days_excluded: Vec<DayExcluded>,
    /// The day-of adjustment, where the method has one.
    pub adjustment: Option<Adjustment>,
    /// What is particular to the method (the x of y, the matched pair, the level, the meter
    /// windows).
    pub detail: Detail,
    /// Plain statements a reader needs (a fallback taken, a figure that is not a baseline).
    pub notes: Vec<String>,
    /// One baseline per interval of the event window.
    pub intervals: Vec<IntervalBaseline>,
}

impl BaselineReport {
    /// The mean adjusted baseline over the window's intervals, kW (`None` for a firm service
    /// level, which has none).
    #[must_use]
    pub fn mean_adjusted_kw(&self) -> Option<f64> {
        let xs: Vec<f64> = self.intervals.iter().filter_map(|i| i.adjusted_baseline_kw).collect();
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    }
}

/// One day the baseline used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DayUsed {
    /// The local calendar day (for a window that crosses midnight, the day it starts on).
    pub date: NaiveDate,
    /// Its mean load over the event's local clock window, kW.
    pub mean_kw: f64,
    /// Whether it is among the days averaged (the highest x, the middle days, the matched day).
    pub counted: bool,
    /// How many of its intervals were estimated rather than measured.
    pub estimated_intervals: usize,
    /// Its whole local day's energy, kWh, where the method ranks days by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub daily_kwh: Option<f64>,
    /// How far its pair is from the event's, kW² (the matching day pair).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub match_distance: Option<f64>,
    /// An event day taken in because too few other days were found (the method's own
    /// fallback); such a day is not listed among the excluded.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub event_day: bool,
}

/// One day looked at and not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DayExcluded {
    /// The local calendar day.
    pub date: NaiveDate,
    /// Why.
    pub reason: Exclusion,
}

/// Why a day was not used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Exclusion {
    /// The site curtailed on it: not normal load.
    EventDay,
    /// A holiday, not a like day of a weekday event.
    Holiday,
    /// A Saturday or Sunday, not a like day of a weekday event.
    Weekend,
    /// A weekday, not a like day of a weekend or holiday event.
    Weekday,
    /// A weekend day or holiday of another kind than the event's (NYISO's Saturday against
    /// Sunday).
    UnlikeDay,
    /// Its load in the window is under the method's share of the days selected with it.
    LowUsage,
    /// An interval it needs is absent or missing.
    MissingData,
    /// A local clock time it needs does not exist that day (DST spring-forward).
    DstGap,
    /// A like day with data, but beyond the method's look-back (listed when too few days
    /// were found within it).
    TooOld,
    /// The day before it is an event day, has no data or is not like the day before the
    /// event (the matching day pair).
    DayBeforeUnusable,
}

impl Exclusion {
    /// Its name in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Exclusion::EventDay => "event day",
            Exclusion::Holiday => "holiday",
            Exclusion::Weekend => "weekend",
            Exclusion::Weekday => "weekday",
            Exclusion::UnlikeDay => "unlike day",
            Exclusion::LowUsage => "low usage",
            Exclusion::MissingData => "missing data",
            Exclusion::DstGap => "DST gap",
            Exclusion::TooOld => "too old",
            Exclusion::DayBeforeUnusable => "day before unusable",
        }
    }
}

/// How the adjustment changes the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AdjustmentKind {
    /// A kW offset added to every interval.
    Additive,
    /// A factor every interval is multiplied by.
    Multiplicative,
}

/// The day-of adjustment: the event day's load before the event against the baseline's over
/// the same local clock times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Adjustment {
    /// Additive or multiplicative.
    pub kind: AdjustmentKind,
    /// The adjustment window on the event day, UTC (the other days use its local clock times).
    pub window_start: DateTime<Utc>,
    /// Its end, UTC.
    pub window_end: DateTime<Utc>,
    /// The event day's mean load over the window, kW.
    pub event_day_kw: Option<f64>,
    /// The unadjusted baseline's mean over the window, kW.
    pub baseline_kw: Option<f64>,
    /// The offset (kW) or factor before the cap.
    pub uncapped: Option<f64>,
    /// The offset (kW) or factor applied: 0 or 1 when not applied.
    pub value: f64,
    /// The cap as a share of the baseline (0.2: the factor stays within 0.8–1.2), if any.
    pub cap: Option<f64>,
    /// Whether the cap bound.
    pub bound: bool,
    /// Whether it was applied.
    pub applied: bool,
    /// Why not, when not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applied: Option<String>,
}

/// What is particular to a method.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Detail {
    /// A mean of selected like days.
    LikeDays {
        /// Days averaged.
        counted: usize,
        /// Days wanted (fewer may be used where the method allows).
        wanted: usize,
        /// Calendar days searched back from the day before the event.
        lookback_days: i64,
        /// What the days are ranked by: `window_mean`, `daily_energy`, or `none`.
        ranked_by: &'static str,
    },
    /// The matching day pair.
    MatchingDayPair {
        /// The matched pair's first day.
        day_before: NaiveDate,
        /// Its second day, whose load is the baseline.
        day: NaiveDate,
        /// Σ of squared differences over the matched intervals, kW².
        distance_kw2: f64,
        /// Intervals compared.
        matched_intervals: usize,
        /// Calendar days searched.
        lookback_days: i64,
    },
    /// A firm service level: no baseline.
    FirmServiceLevel {
        /// The level the metered load must stay at or under, kW.
        level_kw: f64,
    },
    /// The meter before (and after) the event.
    MeterBeforeAfter {
        /// The window before, UTC.
        before_start: DateTime<Utc>,
        /// Its end (the event's start).
        before_end: DateTime<Utc>,
        /// Its mean, kW, and how many intervals.
        before_kw: Option<f64>,
        /// Intervals in it.
        before_intervals: usize,
        /// The window after (empty when not used).
        after_start: DateTime<Utc>,
        /// Its end.
        after_end: DateTime<Utc>,
        /// Its mean, kW.
        after_kw: Option<f64>,
        /// Intervals in it.
        after_intervals: usize,
    },
}

/// The baseline of one interval of the event window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IntervalBaseline {
    /// Start, UTC.
    pub start: DateTime<Utc>,
    /// End, UTC (the interval's label).
    pub end: DateTime<Utc>,
    /// The unadjusted baseline, kW (`None` for a firm service level).
    pub baseline_kw: Option<f64>,
    /// The baseline after the adjustment, kW: the figure reductions are measured from.
    pub adjusted_baseline_kw: Option<f64>,
    /// The firm service level, kW, for that method: compliance is the meter at or under it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub firm_service_level_kw: Option<f64>,
}

/// Why a method gave no baseline.
#[derive(Debug, Clone, PartialEq, thiserror::Error, Serialize)]
#[serde(tag = "refused", rename_all = "snake_case")]
pub enum BaselineError {
    /// The window is empty or reversed.
    #[error("the event window is empty")]
    EmptyWindow,
    /// The window is longer than a day: like days cannot be matched by clock time.
    #[error("the event window lasts {seconds} s; a baseline compares windows of at most a day")]
    WindowTooLong {
        /// Its length.
        seconds: i64,
    },
    /// There is no interval data.
    #[error("no interval data")]
    NoData,
    /// Too few usable like days within the look-back, and the method has no fallback left.
    #[error("{found} usable {like} days in the {lookback_days} days before the event, {needed} needed")]
    TooFewDays {
        /// The like days sought.
        like: &'static str,
        /// Days found.
        found: usize,
        /// Days needed.
        needed: usize,
        /// The look-back, calendar days.
        lookback_days: i64,
        /// Every day looked at, with its reason (and like days with data beyond the
        /// look-back, `too_old`).
        days_excluded: Vec<DayExcluded>,
    },
    /// The event's own pair (the day before and the morning) lacks data to match on.
    #[error("the event's day before and morning ({from} to {to}) lack {missing} intervals to match on")]
    EventPairIncomplete {
        /// The matching period, UTC.
        from: DateTime<Utc>,
        /// Its end.
        to: DateTime<Utc>,
        /// Intervals absent or missing.
        missing: usize,
    },
    /// No candidate pair for the matching day pair.
    #[error("no usable day pair in the {lookback_days} days before the event")]
    NoMatchingPair {
        /// The look-back, calendar days.
        lookback_days: i64,
        /// Every day looked at, with its reason.
        days_excluded: Vec<DayExcluded>,
    },
    /// No meter data before or after the event.
    #[error("no meter data between {before_start} and {before_end} nor between {after_start} and {after_end}")]
    NoMeterBeforeOrAfter {
        /// The window before.
        before_start: DateTime<Utc>,
        /// Its end.
        before_end: DateTime<Utc>,
        /// The window after.
        after_start: DateTime<Utc>,
        /// Its end.
        after_end: DateTime<Utc>,
    },
    /// A method parameter that cannot be used.
    #[error("{parameter}: {why}")]
    InvalidParameter {
        /// Which.
        parameter: &'static str,
        /// Why.
        why: String,
    },
}
