//! `meter_before_after`: the meter before (and after) the event, as the audit has always shown
//! beside the CBL.
//!
//! Source: ERCOT's ERS *Technical Requirements & Scope of Work* names "meter before / meter
//! after" among its default baselines (ERCOT, *Revised ERS Test Analysis and Default Baseline
//! Options*, 2016); for a flat load such as an AI cluster's it is the natural check of a
//! like-day baseline. As implemented (the audit's rule, `src/reports/audit.rs`):
//!
//! - the mean metered load over `before_s` seconds before the event's start and, when
//!   `after_s` is not zero, over `after_s` seconds after its end: the data's intervals each
//!   window touches that lie wholly outside the event (so hourly data and an event starting at
//!   14:15 take 13:00–14:00 as "the hour before");
//! - the baseline is the mean of the two means, or the one there is when the other window has
//!   no data (an event still in force has no "after"); neither → refused;
//! - the same figure for every interval: there are no days and no adjustment.
//!
//! Worked example: none is needed beyond the audit's own; the tests compute it by hand.

use super::event::Event;
use super::local::{Slot, mean, read_slots};
use super::method::MethodId;
use super::report::{BaselineError, BaselineReport, Detail};
use chrono::Duration;

/// The meter before/after baseline of `event`.
pub(crate) fn compute(event: &Event<'_>, before_s: u32, after_s: u32) -> Result<BaselineReport, BaselineError> {
    if before_s == 0 && after_s == 0 {
        return Err(BaselineError::InvalidParameter {
            parameter: "before_s",
            why: "both windows are empty".to_string(),
        });
    }
    let input = event.input;
    let (tz, data) = (event.tz(), input.data);
    let (before_start, before_end) = (input.start - Duration::seconds(i64::from(before_s)), input.start);
    let (after_start, after_end) = (input.end, input.end + Duration::seconds(i64::from(after_s)));
    // The intervals each window touches that lie wholly outside the event, with a figure (an
    // event in force has no "after").
    let window_mean = |from, to, outside: &dyn Fn(&Slot) -> bool| {
        let present: Vec<f64> = event
            .grid
            .overlapping(from, to, tz)
            .iter()
            .filter(|s| from < to && outside(s))
            .filter_map(|s| read_slots(data, std::slice::from_ref(s)))
            .flatten()
            .collect();
        (mean(&present), present.len())
    };
    let (before_kw, before_intervals) = window_mean(before_start, before_end, &|s| s.end <= input.start);
    let (after_kw, after_intervals) = window_mean(after_start, after_end, &|s| s.start >= input.end);
    let kw = match (before_kw, after_kw) {
        (Some(b), Some(a)) => (a + b) / 2.0,
        (Some(x), None) | (None, Some(x)) => x,
        (None, None) => {
            return Err(BaselineError::NoMeterBeforeOrAfter {
                before_start,
                before_end,
                after_start,
                after_end,
            });
        }
    };
    let text = if after_s == 0 {
        format!("mean metered load over the {before_s} s before the start")
    } else {
        format!(
            "mean of the metered load over the {before_s} s before the start and the {after_s} s after the end \
             (either alone when the other has no data)"
        )
    };
    let detail = Detail::MeterBeforeAfter {
        before_start,
        before_end,
        before_kw,
        before_intervals,
        after_start,
        after_end,
        after_kw,
        after_intervals,
    };
    let mut report = event.report(MethodId::MeterBeforeAfter, text, detail, |_| Some(kw), |_| Some(kw));
    if after_s > 0 && after_kw.is_none() {
        report
            .notes
            .push("no meter data after the event: the baseline is the meter before alone".to_string());
    } else if before_kw.is_none() {
        report
            .notes
            .push("no meter data before the event: the baseline is the meter after alone".to_string());
    }
    Ok(report)
}
