//! `ercot_matching_day_pair`: ERCOT's matching day pair baseline, where interval data allows.
//!
//! Source: ERCOT *Demand Response Baseline Methodologies* (procedure; first published as the
//! EILS *Default Baseline Methodologies*) and the ERS *Technical Requirements & Scope of Work*,
//! which name the matching day pair among ERCOT's default baselines, with the same event-day
//! adjustment as the others. The documents describe the idea (find the past pair of days whose
//! load best matches the event's pair, and use the second day's load) without a formula that
//! could be retrieved while writing this module, so the rule implemented is stated in full:
//!
//! - **The event's pair** is the whole local day before the event plus the event day from local
//!   midnight to **one hour before the event** (the hour before may already be ramping). Every
//!   one of its intervals must be in the data, or the method refuses
//!   ([`BaselineError::EventPairIncomplete`]): a match on part of it would be another rule.
//! - **Candidate pairs** are (D − 1, D) for each day D within the look-back (60 calendar days by
//!   default, a parameter) such that D is a like day of the event (weekday; or weekend day or
//!   holiday), D is not an event day, D − 1 is not an event day and has the same day type as
//!   the day before the event, and both have every interval needed at the same local clock
//!   times.
//! - **Distance**: the sum over the pair's intervals of the squared difference between the
//!   candidate's load and the event's, kW², intervals matched by local clock time (DST: a
//!   skipped time makes the pair unusable, a repeated one is read at its first occurrence).
//! - **The baseline** is D's load at each event interval's local clock time, for the closest
//!   pair (ties: the most recent), then ERCOT's event-day adjustment
//!   ([`super::ercot`]: scalar, from 3 h to 1 h before the start, uncapped).
//! - No pair → refused ([`BaselineError::NoMatchingPair`]).
//!
//! Worked example: none published by ERCOT was found here; the tests use hand-made calendars.

use super::adjust::apply;
use super::ercot::ADJUSTMENT;
use super::event::Event;
use super::likedays::same_day_type;
use super::local::{Slot, Unusable, day_start, mean, read_at, read_shifted, value_at};
use super::method::MethodId;
use super::report::{BaselineError, BaselineReport, DayExcluded, DayUsed, Detail, Exclusion};
use chrono::{Duration, NaiveDate};

/// A candidate pair read for the event.
struct Candidate {
    day: NaiveDate,
    window: Vec<f64>,
    adjust: Vec<f64>,
    estimated: usize,
    distance: f64,
}

/// ERCOT's matching day pair of `event`, searching `lookback_days` back.
pub(crate) fn compute(event: &Event<'_>, lookback_days: u32) -> Result<BaselineReport, BaselineError> {
    let input = event.input;
    let (tz, data) = (event.tz(), input.data);
    let lookback_days = i64::from(lookback_days);
    let holidays = input.holidays;
    let day_type = holidays.day_type(event.date);
    let day_before = event.date - Duration::days(1);
    let before_type = holidays.day_type(day_before);
    let incomplete = |missing| BaselineError::EventPairIncomplete {
        from: input.start - Duration::days(1),
        to: input.start,
        missing,
    };
    let from = day_start(tz, day_before).ok_or_else(|| incomplete(0))?;
    let to = input.start - Duration::hours(1);
    let pair: Vec<Slot> = event.grid.inside(from, to, tz);
    let split = split_at_event_day(&pair, event.date);
    let starts: Vec<_> = pair.iter().map(|s| s.start).collect();
    let reference = match read_at(data, &starts) {
        Ok((kw, _)) => kw,
        Err(_) => {
            let missing = starts.iter().filter(|s| value_at(data, **s).is_none()).count();
            return Err(BaselineError::EventPairIncomplete { from, to, missing });
        }
    };
    let adjust_slots = ADJUSTMENT.slots(event);
    let like = same_day_type(holidays, day_type);
    let mut candidates: Vec<Candidate> = Vec::new();
    let mut excluded = Vec::new();
    for back in 1..=lookback_days {
        let day = event.date - Duration::days(back);
        let exclude = |reason| DayExcluded { date: day, reason };
        if let Some(reason) = like(day) {
            excluded.push(exclude(reason));
            continue;
        }
        if event.is_event_day(day) {
            excluded.push(exclude(Exclusion::EventDay));
            continue;
        }
        let previous = day - Duration::days(1);
        if event.is_event_day(previous) || holidays.day_type(previous) != before_type {
            excluded.push(exclude(Exclusion::DayBeforeUnusable));
            continue;
        }
        let shift = event.shift(day);
        let read = (|| {
            let (window, est_w) = read_shifted(data, tz, &event.slots, shift)?;
            let (adjust, est_a) = read_shifted(data, tz, &adjust_slots, shift)?;
            let (morning, est_m) = read_shifted(data, tz, &pair[split..], shift)?;
            Ok::<_, Unusable>((window, adjust, morning, est_w + est_a + est_m))
        })();
        let (window, adjust, morning, estimated) = match read {
            Ok(r) => r,
            Err(u) => {
                excluded.push(exclude(u.into()));
                continue;
            }
        };
        let Ok((before, _)) = read_shifted(data, tz, &pair[..split], shift) else {
            excluded.push(exclude(Exclusion::DayBeforeUnusable));
            continue;
        };
        let distance = before
            .iter()
            .chain(morning.iter())
            .zip(reference.iter())
            .map(|(c, r)| (c - r) * (c - r))
            .sum();
        candidates.push(Candidate {
            day,
            window,
            adjust,
            estimated,
            distance,
        });
    }
    let mut best: Option<&Candidate> = None;
    for c in &candidates {
        if best.is_none_or(|b| c.distance < b.distance) {
            best = Some(c);
        }
    }
    let Some(best) = best else {
        return Err(BaselineError::NoMatchingPair {
            lookback_days,
            days_excluded: excluded,
        });
    };
    let adjustment = ADJUSTMENT.adjust(event, &adjust_slots, mean(&best.adjust));
    let text = format!(
        "the load of the {} day D within {lookback_days} days whose pair (D − 1, D until 1 h before \
         the start) is closest to the event's (least squares, by local clock time); {}",
        day_type.as_str(),
        ADJUSTMENT.describe()
    );
    let detail = Detail::MatchingDayPair {
        day_before: best.day - Duration::days(1),
        day: best.day,
        distance_kw2: best.distance,
        matched_intervals: pair.len(),
        lookback_days,
    };
    let mut report = event.report(
        MethodId::ErcotMatchingDayPair,
        text,
        detail,
        |k| best.window.get(k).copied(),
        |k| best.window.get(k).map(|b| apply(Some(&adjustment), *b)),
    );
    report.day_type = Some(day_type);
    report.days_used = candidates
        .iter()
        .map(|c| DayUsed {
            date: c.day,
            mean_kw: mean(&c.window).unwrap_or(0.0),
            counted: c.day == best.day,
            estimated_intervals: c.estimated,
            daily_kwh: None,
            match_distance: Some(c.distance),
            event_day: false,
        })
        .collect();
    report.days_excluded = excluded;
    report.adjustment = Some(adjustment);
    Ok(report)
}

/// Where the pair's slots pass from the day before to the event day: the slots before the
/// index returned lie on the day before (by local date).
fn split_at_event_day(pair: &[Slot], event_date: NaiveDate) -> usize {
    pair.iter().take_while(|s| s.local.date() < event_date).count()
}
