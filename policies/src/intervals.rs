//! Interval meter data: the site's load as a utility settles it, one figure per fixed interval.
//!
//! Settlement is computed on revenue-meter interval data (5 or 15 minutes, hourly for some
//! programs), not on a gateway's readings one by one. An [`Interval`] is **interval-ending**
//! as utilities label it (the 14:15 interval is 14:00–14:15) but is stored with both ends, in
//! UTC; days and hours are matched in the site's zone by the code that reads it. Each interval
//! carries its mean demand (kW: energy over the interval divided by its length), how it was
//! obtained ([`IntervalQuality`]), where it came from ([`IntervalSource`]) and, for the
//! gateway's own intervals, how many meter readings it holds.
//!
//! [`IntervalSeries`] is a checked run of intervals: one length, ordered, not overlapping. Gaps
//! are allowed (a missing interval is simply absent, or present with quality `missing`).
//! Everything here is pure data and arithmetic: the store, the imports and the reports live
//! in the gateway crate and the Green Button adapter.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// How an interval's figure was obtained, as a utility's meter data management system labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalQuality {
    /// From meter readings covering the interval (the gateway's: every reading measured; an
    /// import's: the utility's validated reading).
    Measured,
    /// Estimated: some readings were missing or not the meter's (a model's, a stale feed's),
    /// or the utility's data says estimated (ESPI quality 7/8/9...). Usable, and said to be.
    Estimated,
    /// No usable figure: the interval is held only to say so. `kw` is `None`.
    Missing,
}

impl IntervalQuality {
    /// The name used in the API, the CSV and the reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            IntervalQuality::Measured => "measured",
            IntervalQuality::Estimated => "estimated",
            IntervalQuality::Missing => "missing",
        }
    }
}

/// Where an interval came from. Imported data is what settlement uses: it takes precedence over
/// the gateway's own where both cover an interval.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum IntervalSource {
    /// Aggregated by the gateway from its meter readings.
    Gateway,
    /// Imported from a file (Green Button or CSV); the name says which (the file name, or the
    /// import's label).
    Imported(String),
}

/// One interval of meter data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Start (exclusive of the previous interval's end), UTC.
    pub start: DateTime<Utc>,
    /// End, UTC: the interval's label (interval-ending).
    pub end: DateTime<Utc>,
    /// Mean demand over the interval, kW; `None` when missing.
    pub kw: Option<f64>,
    /// How it was obtained.
    pub quality: IntervalQuality,
    /// Meter readings it holds (the gateway's intervals; 0 for an import).
    pub samples: u32,
    /// Where it came from.
    pub source: IntervalSource,
}

impl Interval {
    /// Its length, s.
    #[must_use]
    pub fn length_s(&self) -> i64 {
        (self.end - self.start).num_seconds()
    }

    /// Its energy, kWh, when its figure is known.
    #[must_use]
    pub fn kwh(&self) -> Option<f64> {
        self.kw.map(|kw| kw * self.length_s() as f64 / 3600.0)
    }
}

/// Why a run of intervals is not a series.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SeriesError {
    /// An interval whose end is not after its start.
    #[error("interval {index} ({start} to {end}) is empty or reversed")]
    Empty {
        /// Its position.
        index: usize,
        /// Its start.
        start: DateTime<Utc>,
        /// Its end.
        end: DateTime<Utc>,
    },
    /// Intervals of different lengths in one series.
    #[error("interval {index} lasts {got_s} s; the series' intervals last {length_s} s")]
    Length {
        /// Its position.
        index: usize,
        /// Its length.
        got_s: i64,
        /// The series' length.
        length_s: i64,
    },
    /// An interval that starts before the previous one ended (out of order, or overlapping).
    #[error("interval {index} starts at {start}, before the previous one ends at {previous_end}")]
    Overlap {
        /// Its position.
        index: usize,
        /// Its start.
        start: DateTime<Utc>,
        /// The previous interval's end.
        previous_end: DateTime<Utc>,
    },
    /// A figure that cannot be a site's demand (NaN, infinite, negative).
    #[error("interval {index} ({end}) has an impossible demand {kw} kW")]
    Value {
        /// Its position.
        index: usize,
        /// Its end.
        end: DateTime<Utc>,
        /// The figure.
        kw: f64,
    },
    /// A missing interval that carries a figure, or a present one without.
    #[error("interval {index} ({end}) is {quality} but {}", if *has_kw { "carries a figure" } else { "has no figure" })]
    Quality {
        /// Its position.
        index: usize,
        /// Its end.
        end: DateTime<Utc>,
        /// Its quality.
        quality: &'static str,
        /// Whether it had a figure.
        has_kw: bool,
    },
}

/// A checked run of intervals of one length, in time order, none overlapping.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct IntervalSeries {
    intervals: Vec<Interval>,
}

impl IntervalSeries {
    /// Check `intervals` (see [`SeriesError`] for what is refused).
    pub fn new(intervals: Vec<Interval>) -> Result<Self, SeriesError> {
        let length_s = intervals.first().map(Interval::length_s);
        let mut previous_end: Option<DateTime<Utc>> = None;
        for (index, i) in intervals.iter().enumerate() {
            if i.end <= i.start {
                return Err(SeriesError::Empty {
                    index,
                    start: i.start,
                    end: i.end,
                });
            }
            if let Some(length_s) = length_s
                && i.length_s() != length_s
            {
                return Err(SeriesError::Length {
                    index,
                    got_s: i.length_s(),
                    length_s,
                });
            }
            if let Some(previous_end) = previous_end
                && i.start < previous_end
            {
                return Err(SeriesError::Overlap {
                    index,
                    start: i.start,
                    previous_end,
                });
            }
            match (i.quality, i.kw) {
                (IntervalQuality::Missing, Some(_))
                | (IntervalQuality::Measured | IntervalQuality::Estimated, None) => {
                    return Err(SeriesError::Quality {
                        index,
                        end: i.end,
                        quality: i.quality.as_str(),
                        has_kw: i.kw.is_some(),
                    });
                }
                (_, Some(kw)) if !kw.is_finite() || kw < 0.0 => {
                    return Err(SeriesError::Value { index, end: i.end, kw });
                }
                _ => {}
            }
            previous_end = Some(i.end);
        }
        Ok(Self { intervals })
    }

    /// The intervals, in time order.
    #[must_use]
    pub fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// The intervals' length, s (`None` for an empty series).
    #[must_use]
    pub fn length_s(&self) -> Option<i64> {
        self.intervals.first().map(Interval::length_s)
    }

    /// The intervals that overlap `[from, to)`, in time order.
    #[must_use]
    pub fn between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> &[Interval] {
        let first = self.intervals.partition_point(|i| i.end <= from);
        let last = self.intervals.partition_point(|i| i.start < to);
        &self.intervals[first..last.max(first)]
    }

    /// The mean demand over `[from, to)` from the intervals that lie inside it with a figure,
    /// kW, and how many there were; `None` without any.
    #[must_use]
    pub fn mean_kw(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> Option<(f64, usize)> {
        let xs: Vec<f64> = self
            .between(from, to)
            .iter()
            .filter(|i| i.start >= from && i.end <= to)
            .filter_map(|i| i.kw)
            .collect();
        (!xs.is_empty()).then(|| (xs.iter().sum::<f64>() / xs.len() as f64, xs.len()))
    }

    /// The series as a vector.
    #[must_use]
    pub fn into_inner(self) -> Vec<Interval> {
        self.intervals
    }
}

/// Builds the gateway's own intervals from its meter samples, in time order: each sample falls
/// in the interval of `length_s` (aligned on the epoch, so on the clock: 5-minute intervals end
/// at :05, :10, ...) that contains it, and an interval is closed by the first sample past its
/// end (or by [`IntervalBuilder::close_before`]).
///
/// An interval is **measured** when it holds at least `min_measured` samples and every one was
/// the meter's own figure; **estimated** when it holds fewer, or any figure was a model's
/// (a stale or missing feed, or no meter at all): its figure is then the mean of the measured
/// samples if there are any, else of the model's; an interval without samples is not emitted
/// (absent is missing). Sample counts make the rule auditable from the interval alone.
#[derive(Debug, Clone)]
pub struct IntervalBuilder {
    length_s: i64,
    min_measured: u32,
    open: Option<Bucket>,
}

#[derive(Debug, Clone)]
struct Bucket {
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    measured_sum: f64,
    measured_n: u32,
    other_sum: f64,
    other_n: u32,
}

impl Bucket {
    fn close(self) -> Interval {
        let samples = self.measured_n + self.other_n;
        let (kw, quality) = if self.measured_n > 0 {
            (
                self.measured_sum / f64::from(self.measured_n),
                IntervalQuality::Measured,
            )
        } else {
            (
                self.other_sum / f64::from(self.other_n.max(1)),
                IntervalQuality::Estimated,
            )
        };
        Interval {
            start: self.start,
            end: self.end,
            kw: Some(kw),
            quality,
            samples,
            source: IntervalSource::Gateway,
        }
    }
}

impl IntervalBuilder {
    /// Intervals of `length_s` (at least 60), called measured from `min_measured` samples.
    #[must_use]
    pub fn new(length_s: u32, min_measured: u32) -> Self {
        Self {
            length_s: i64::from(length_s.max(60)),
            min_measured: min_measured.max(1),
            open: None,
        }
    }

    /// The interval `at` falls in: `(start, end]` on the clock, as interval-ending data is
    /// labelled (a sample exactly at 14:05 belongs to 14:00–14:05).
    #[must_use]
    pub fn slot(&self, at: DateTime<Utc>) -> (DateTime<Utc>, DateTime<Utc>) {
        let t = at.timestamp();
        let end = (t + self.length_s - 1).div_euclid(self.length_s) * self.length_s;
        let end = DateTime::from_timestamp(end, 0).unwrap_or(at);
        (end - chrono::Duration::seconds(self.length_s), end)
    }

    /// Add one sample (`kw` the figure the gateway acted on, `measured` whether it was the
    /// meter's own); returns the interval it closed, if any. A sample older than the open
    /// interval (a clock step back) is ignored.
    pub fn offer(&mut self, at: DateTime<Utc>, kw: f64, measured: bool) -> Option<Interval> {
        if !kw.is_finite() || kw < 0.0 {
            return None;
        }
        let (start, end) = self.slot(at);
        let closed = match &self.open {
            Some(b) if b.end == end => None,
            Some(b) if end < b.end => return None,
            Some(_) => self.open.take().map(|b| self.finish(b)),
            None => None,
        };
        let bucket = self.open.get_or_insert(Bucket {
            start,
            end,
            measured_sum: 0.0,
            measured_n: 0,
            other_sum: 0.0,
            other_n: 0,
        });
        if measured {
            bucket.measured_sum += kw;
            bucket.measured_n += 1;
        } else {
            bucket.other_sum += kw;
            bucket.other_n += 1;
        }
        closed
    }

    /// Close the open interval if `now` is past its end (no sample will fall in it any more).
    pub fn close_before(&mut self, now: DateTime<Utc>) -> Option<Interval> {
        if self.open.as_ref().is_some_and(|b| now >= b.end) {
            return self.open.take().map(|b| self.finish(b));
        }
        None
    }

    fn finish(&self, bucket: Bucket) -> Interval {
        let short = bucket.measured_n < self.min_measured;
        let mixed = bucket.other_n > 0;
        let mut interval = bucket.close();
        if short || mixed {
            interval.quality = IntervalQuality::Estimated;
        }
        interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(h: u32, m: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 7, 1, h, m, 0).single().expect("valid")
    }

    fn iv(h: u32, m: u32, kw: Option<f64>) -> Interval {
        let end = at(h, m);
        Interval {
            start: end - chrono::Duration::minutes(15),
            end,
            kw,
            quality: if kw.is_some() {
                IntervalQuality::Measured
            } else {
                IntervalQuality::Missing
            },
            samples: 0,
            source: IntervalSource::Gateway,
        }
    }

    #[test]
    fn the_builder_closes_clock_aligned_intervals_with_their_quality() {
        let mut b = IntervalBuilder::new(300, 3);
        let t = |m: u32, s: u32| Utc.with_ymd_and_hms(2026, 7, 1, 10, m, s).single().expect("valid");
        // 10:00:00 belongs to the interval ending 10:00 (interval-ending), 10:00:01 to 10:05.
        assert_eq!(b.slot(t(0, 0)).1, t(0, 0));
        assert_eq!(b.slot(t(0, 1)), (t(0, 0), t(5, 0)));
        for s in [1, 20, 40] {
            assert_eq!(b.offer(t(1, s), 100.0 + f64::from(s), true), None);
        }
        // A model's figure in the next interval: the first closes measured.
        let first = b.offer(t(6, 0), 500.0, false).expect("closed");
        assert_eq!((first.start, first.end), (t(0, 0), t(5, 0)));
        assert_eq!(first.quality, IntervalQuality::Measured);
        assert_eq!(first.samples, 3);
        assert!((first.kw.expect("kw") - (101.0 + 120.0 + 140.0) / 3.0).abs() < 1e-9);
        b.offer(t(7, 0), 200.0, true);
        // Mixed: estimated, its figure the measured samples' mean.
        let second = b.close_before(t(10, 0)).expect("closed by time");
        assert_eq!(second.quality, IntervalQuality::Estimated);
        assert_eq!(second.kw, Some(200.0));
        assert_eq!(second.samples, 2);
        assert_eq!(b.close_before(t(20, 0)), None, "nothing open");
        // Too few samples: estimated.
        b.offer(t(21, 0), 50.0, true);
        assert_eq!(
            b.close_before(t(25, 0)).map(|i| i.quality),
            Some(IntervalQuality::Estimated)
        );
        // A sample older than the open interval is ignored.
        b.offer(t(31, 0), 10.0, true);
        assert_eq!(b.offer(t(22, 0), 10.0, true), None);
    }

    #[test]
    fn a_series_is_ordered_one_length_and_not_overlapping() {
        let s = IntervalSeries::new(vec![iv(10, 15, Some(100.0)), iv(10, 30, None), iv(11, 0, Some(120.0))])
            .expect("a gap is fine");
        assert_eq!(s.length_s(), Some(900));
        assert_eq!(s.between(at(10, 10), at(10, 40)).len(), 2);
        assert_eq!(s.mean_kw(at(10, 0), at(11, 0)), Some((110.0, 2)));
        let out_of_order = IntervalSeries::new(vec![iv(10, 30, Some(1.0)), iv(10, 15, Some(1.0))]);
        assert!(matches!(out_of_order, Err(SeriesError::Overlap { index: 1, .. })));
        let mut five = iv(10, 45, Some(1.0));
        five.start = five.end - chrono::Duration::minutes(5);
        assert!(matches!(
            IntervalSeries::new(vec![iv(10, 30, Some(1.0)), five]),
            Err(SeriesError::Length { index: 1, .. })
        ));
        assert!(matches!(
            IntervalSeries::new(vec![iv(10, 30, Some(f64::NAN))]),
            Err(SeriesError::Value { .. })
        ));
        let mut lying = iv(10, 30, None);
        lying.quality = IntervalQuality::Measured;
        assert!(matches!(
            IntervalSeries::new(vec![lying]),
            Err(SeriesError::Quality { .. })
        ));
    }
}
