//! What an event delivered, interval by interval, measured at the meter: the numbers a
//! utility settles on and an auditor checks.
//!
//! Pure: the book entry says what was asked and when, the meter samples say what happened.
//! Compliance is judged from the moment the ceiling was due: an interval that begins inside
//! the event's ramp is measured from the ramp's end, since the ramp is the time the event
//! itself gives the site to get there. An event cancelled or released early is measured up to
//! the release.

use super::book::BookEntry;
use super::model::plus_secs;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One interval of an event as delivered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalDelivery {
    /// Index of the interval in the event.
    pub index: usize,
    /// Start of the measured span (the interval's start, or the ramp's end if later).
    pub start: DateTime<Utc>,
    /// End of the measured span (the interval's end, the release, or `now`, whichever is first).
    pub end: DateTime<Utc>,
    /// The meter ceiling asked for, kW.
    pub ceiling_kw: f64,
    /// What the reduction is measured against, kW: the baseline of a relative target, else the
    /// meter reading before the event.
    pub baseline_kw: f64,
    /// Mean of the meter readings in `[start, end)`, kW; `None` without readings (a model's
    /// figures never stand in for them here).
    pub mean_meter_kw: Option<f64>,
    /// Number of meter readings the mean is taken over.
    pub samples: usize,
    /// Samples in `[start, end)` that were the facility model's figure, not a reading (no meter
    /// source, or the meter stale or missing): left out of the mean.
    pub modelled_samples: usize,
}

impl IntervalDelivery {
    /// `baseline − mean meter`, kW.
    #[must_use]
    pub fn delivered_reduction_kw(&self) -> Option<f64> {
        self.mean_meter_kw.map(|m| self.baseline_kw - m)
    }

    /// `max(0, mean meter − ceiling)`, kW.
    #[must_use]
    pub fn shortfall_kw(&self) -> Option<f64> {
        self.mean_meter_kw.map(|m| (m - self.ceiling_kw).max(0.0))
    }
}

/// Every interval of `entry` that has a ceiling and whose measured span has begun by `now`,
/// with the meter samples (time, kW; any order) that fall in it.
#[must_use]
pub fn interval_delivery(
    entry: &BookEntry,
    meter: &[(DateTime<Utc>, f64)],
    modelled: &[DateTime<Utc>],
    now: DateTime<Utc>,
) -> Vec<IntervalDelivery> {
    let due_from = plus_secs(entry.effective_start, entry.ramp_s());
    let cut = entry.release.map_or(now, |r| r.at.min(now));
    let mut out = Vec::new();
    for (index, ceiling) in entry.ceilings.iter().enumerate() {
        let Some(ceiling) = ceiling else { continue };
        let Some((start, end)) = entry.interval_span(index) else {
            continue;
        };
        let start = start.max(due_from);
        let end = end.map_or(cut, |e| e.min(cut));
        if end <= start {
            continue;
        }
        let inside: Vec<f64> = meter
            .iter()
            .filter(|(t, kw)| *t >= start && *t < end && kw.is_finite())
            .map(|(_, kw)| *kw)
            .collect();
        let mean_meter_kw = (!inside.is_empty()).then(|| inside.iter().sum::<f64>() / inside.len() as f64);
        out.push(IntervalDelivery {
            index,
            start,
            end,
            ceiling_kw: ceiling.ceiling_kw,
            baseline_kw: ceiling.baseline.as_ref().map_or(entry.pre_event_meter_kw, |b| b.kw),
            mean_meter_kw,
            samples: inside.len(),
            modelled_samples: modelled.iter().filter(|t| **t >= start && **t < end).count(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::book::EventBook;
    use crate::event::model::{EventSource, GridEvent, Interval, Target, Window};
    use crate::event::target::CeilingTarget;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 7, 1, 18, 0, 0).single().expect("valid time") + chrono::Duration::seconds(s)
    }

    fn ceiling(kw: f64) -> Option<CeilingTarget> {
        Some(CeilingTarget {
            ceiling_kw: kw,
            baseline: None,
            form: "ceiling".into(),
            note: String::new(),
        })
    }

    /// Two 600 s intervals (900 kW, then 800 kW) after a 120 s ramp, pre-event meter 1000 kW.
    fn book_with_event(cancel_at: Option<i64>) -> EventBook {
        let event = GridEvent {
            id: "ev".into(),
            revision: 1,
            source: EventSource::Http,
            site: None,
            program: None,
            issued_at: None,
            mandatory: true,
            test: false,
            cancel: false,
            priority: None,
            window: Window {
                start: at(0),
                duration_s: Some(1200),
                ramp_s: 120,
                recovery_s: 0,
                randomize_start_s: 0,
            },
            intervals: vec![
                Interval {
                    offset_s: 0,
                    duration_s: Some(600),
                    target: Target::MeterCeiling { kw: 900.0 },
                },
                Interval {
                    offset_s: 600,
                    duration_s: Some(600),
                    target: Target::MeterCeiling { kw: 800.0 },
                },
            ],
        };
        let mut book = EventBook::new();
        book.upsert(event, vec![ceiling(900.0), ceiling(800.0)], 1000.0, at(-60));
        if let Some(s) = cancel_at {
            let mut c = book.get("ev").expect("held").event.clone();
            c.revision = 2;
            c.cancel = true;
            book.upsert(c, vec![], 1000.0, at(s));
        }
        book
    }

    #[test]
    fn intervals_are_measured_from_the_ramp_end_against_the_pre_event_meter() {
        let book = book_with_event(None);
        let entry = book.get("ev").expect("held");
        // A sample in the ramp (ignored), 880 and 920 in the first interval, 850 in the second.
        let meter = vec![(at(60), 990.0), (at(200), 880.0), (at(500), 920.0), (at(700), 850.0)];
        let d = interval_delivery(entry, &meter, &[], at(2000));
        assert_eq!(d.len(), 2);
        assert_eq!((d[0].start, d[0].end), (at(120), at(600)));
        assert_eq!(d[0].mean_meter_kw, Some(900.0));
        assert_eq!(d[0].samples, 2);
        assert_eq!(d[0].delivered_reduction_kw(), Some(100.0));
        assert_eq!(d[0].shortfall_kw(), Some(0.0));
        assert_eq!((d[1].start, d[1].end), (at(600), at(1200)));
        assert_eq!(d[1].shortfall_kw(), Some(50.0));
        assert_eq!(d[1].delivered_reduction_kw(), Some(150.0));
    }

    #[test]
    fn a_cancelled_event_is_measured_up_to_the_cancellation_and_unmeasured_spans_say_so() {
        let book = book_with_event(Some(300));
        let entry = book.get("ev").expect("held");
        let d = interval_delivery(entry, &[], &[at(200)], at(2000));
        // Only the first interval began before the cancellation, and nothing was metered: the
        // model's figure in it is counted apart, never taken as a reading.
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].mean_meter_kw, d[0].modelled_samples), (None, 1));
        assert_eq!((d[0].start, d[0].end), (at(120), at(300)));
        assert_eq!(d[0].mean_meter_kw, None);
        assert_eq!(d[0].shortfall_kw(), None);
        // Before the ramp ends nothing is due yet.
        let book = book_with_event(None);
        assert!(interval_delivery(book.get("ev").expect("held"), &[], &[], at(100)).is_empty());
    }
}
