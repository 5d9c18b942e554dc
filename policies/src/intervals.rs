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
