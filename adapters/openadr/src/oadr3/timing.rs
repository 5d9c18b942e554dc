//! When each interval of an event starts and ends (User Guide §7.3, §7.4).
//!
//! Rules, in the order they apply to interval `i`:
//!
//! 1. An interval's own `intervalPeriod.start` wins, unless it is the `0001-01-01` sentinel.
//! 2. Otherwise the first interval starts at the event's `intervalPeriod.start`; a sentinel there
//!    (or on the first interval, when the event has no start) means "now".
//! 3. Otherwise (intervals after the first) the interval starts where the previous one ends:
//!    consecutive intervals without their own start follow each other.
//! 4. The duration is the interval's own `intervalPeriod.duration`, else the event's. `P9999Y` is
//!    open-ended; a missing duration is read as open-ended too (openleadr-rs: "a duration of
//!    default null indicates infinity") and produces a warning.
//!
//! [`zero_window`] is the cancellation rule used by [`super::EventTracker`] and
//! [`super::event_targets`].

use chrono::{DateTime, TimeDelta, Utc};

use super::model::Event;
use super::time::{IsoDuration, is_now_sentinel};

/// Why an event's window is empty, which this crate reads as a cancellation (an OpenADR 3 VTN
/// cancels an event by deleting it or by setting its window to `0001-01-01`/`PT0S`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ZeroWindow {
    /// `intervals` is empty: there is nothing to act on. (A report-only event also looks like
    /// this; for a load-control VEN it carries no instruction either.)
    NoIntervals,
    /// `duration` (the event's) is zero: the lifespan is truncated to nothing.
    ZeroEventDuration,
    /// Every interval's effective duration is zero (typically the event's intervalPeriod set to
    /// `{"start":"0001-01-01T00:00:00Z","duration":"PT0S"}` with no per-interval durations).
    ZeroIntervals,
}

/// The cancellation rule: an event whose window is empty is cancelled. `None` for a live event.
///
/// Precisely: no intervals; or an event `duration` of zero; or every interval's effective
/// duration (own, else the event's `intervalPeriod.duration`) present and zero. A missing
/// duration does not count as zero (it is open-ended).
pub fn zero_window(event: &Event) -> Option<ZeroWindow> {
    if event.intervals.is_empty() {
        return Some(ZeroWindow::NoIntervals);
    }
    if event.duration.is_some_and(|d| d.is_zero()) {
        return Some(ZeroWindow::ZeroEventDuration);
    }
    let default = event.interval_period.as_ref().and_then(|p| p.duration);
    let all_zero = event.intervals.iter().all(|iv| {
        iv.interval_period
            .as_ref()
            .and_then(|p| p.duration)
            .or(default)
            .is_some_and(|d| d.is_zero())
    });
    all_zero.then_some(ZeroWindow::ZeroIntervals)
}

/// Where an interval ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// At this time.
    At(DateTime<Utc>),
    /// Never (`P9999Y`, or no duration at all).
    Forever,
    /// Cannot be known without the current time (the chain starts "now").
    Unknown,
}

/// One interval of an event, placed in time.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// Position in `event.intervals`.
    pub index: usize,
    /// The interval's `id`.
    pub id: i64,
    /// Start; `None` when it depends on "now" and no `now` was given.
    pub start: Option<DateTime<Utc>>,
    /// The effective duration as written (own, else the event's); `None` = none given.
    pub duration: Option<IsoDuration>,
    /// Where it ends.
    pub end: End,
    /// The effective randomizeStart (own, else the event's).
    pub randomize_start: Option<IsoDuration>,
}

impl Slot {
    /// The length in seconds, rounded; `None` when open-ended or unknown.
    pub fn duration_s(&self) -> Option<u64> {
        match (self.start, self.end) {
            (Some(s), End::At(e)) => Some(round_secs(e - s)),
            (_, End::Forever) => None,
            _ => self.duration.and_then(|d| d.as_fixed()).map(round_secs),
        }
    }
}

/// Seconds, rounded to the nearest whole second; negative spans are 0.
pub(crate) fn round_secs(d: TimeDelta) -> u64 {
    let ms = d.num_milliseconds().max(0);
    u64::try_from((ms + 500) / 1000).unwrap_or(0)
}

/// Why an event's intervals cannot be placed in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct TimingError {
    /// The interval or field, e.g. `intervals[0].intervalPeriod.start`.
    pub path: String,
    /// What is missing or wrong.
    pub message: String,
}

/// Places every interval of `event` in time. With `now = None` the "now" sentinel leaves starts
/// unknown (used by the deterministic JSON view); with `Some(now)` every start is known.
/// Intervals that can never start (after an open-ended one, with no start of their own) are
/// skipped with a warning.
pub fn resolve(
    event: &Event,
    now: Option<DateTime<Utc>>,
    warnings: &mut Vec<String>,
) -> Result<Vec<Slot>, TimingError> {
    let ev = event.interval_period.as_ref();
    let ev_start = ev.and_then(|p| p.start);
    let ev_duration = ev.and_then(|p| p.duration);
    let ev_randomize = ev.and_then(|p| p.randomize_start);
    let mut slots = Vec::with_capacity(event.intervals.len());
    let mut prev_end: Option<End> = None;
    let mut warned_missing = false;
    for (i, iv) in event.intervals.iter().enumerate() {
        let own = iv.interval_period.as_ref();
        let own_start = own.and_then(|p| p.start);
        let start: Option<DateTime<Utc>> = match own_start {
            Some(s) if !is_now_sentinel(&s) => Some(s),
            _ => match prev_end {
                None => match ev_start {
                    Some(s) if !is_now_sentinel(&s) => Some(s),
                    Some(_) => now,
                    None if own_start.is_some() => now,
                    None => {
                        return Err(TimingError {
                            path: format!("intervals[{i}].intervalPeriod.start"),
                            message: "missing, and the event has no intervalPeriod.start".into(),
                        });
                    }
                },
                Some(End::At(t)) => Some(t),
                Some(End::Unknown) => None,
                Some(End::Forever) => {
                    warnings.push(format!(
                        "intervals[{i}]: follows an open-ended interval and has no start of its own; skipped"
                    ));
                    continue;
                }
            },
        };
        let duration = own.and_then(|p| p.duration).or(ev_duration);
        if duration.is_none() && !warned_missing {
            warned_missing = true;
            warnings.push(format!(
                "intervals[{i}]: no duration (own or event default); read as open-ended"
            ));
        }
        let end = match duration {
            None => End::Forever,
            Some(d) if d.is_forever() => End::Forever,
            Some(d) => match start {
                Some(s) => d.end_from(s).map_or(End::Forever, End::At),
                None => End::Unknown,
            },
        };
        prev_end = Some(end);
        slots.push(Slot {
            index: i,
            id: iv.id,
            start,
            duration,
            end,
            randomize_start: own.and_then(|p| p.randomize_start).or(ev_randomize),
        });
    }
    Ok(slots)
}
