//! The rules every series obeys, in both formats and both directions: one length, in time
//! order, none overlapping (gaps are allowed). They are the gateway's `IntervalSeries` rules,
//! checked here so that an import names the line of the interval that breaks them, where the
//! gateway could only name an index.

use chrono::{DateTime, Duration, Utc};

use crate::error::{ExportError, Reason};
use crate::reading::{Quality, Reading, Unit};

/// Checks readings one at a time, in the order of the file.
#[derive(Debug)]
pub(crate) struct SeriesCheck {
    previous: Option<(DateTime<Utc>, DateTime<Utc>)>,
    length_s: Option<u32>,
    source_of_length: &'static str,
}

impl SeriesCheck {
    /// `length_s`: the length every interval must have, when the format states it (ESPI's
    /// `intervalLength`); otherwise the first interval's sets it.
    pub(crate) fn new(length_s: Option<u32>, source_of_length: &'static str) -> Self {
        SeriesCheck {
            previous: None,
            length_s,
            source_of_length,
        }
    }

    /// Accepts the next interval or says why not.
    pub(crate) fn next(&mut self, start: DateTime<Utc>, duration_s: u32) -> Result<(), Reason> {
        if duration_s == 0 {
            return Err(Reason::ZeroDuration);
        }
        match self.length_s {
            Some(l) if l != duration_s => {
                return Err(Reason::Length {
                    got_s: u64::from(duration_s),
                    expected_s: u64::from(l),
                    source_of_length: self.source_of_length,
                });
            }
            Some(_) => {}
            None => self.length_s = Some(duration_s),
        }
        let end = start + Duration::seconds(i64::from(duration_s));
        if let Some((previous_start, previous_end)) = self.previous {
            if start < previous_start {
                return Err(Reason::OutOfOrder { start, previous_start });
            }
            if start < previous_end {
                return Err(Reason::Overlap {
                    start,
                    end,
                    previous_start,
                    previous_end,
                });
            }
        }
        self.previous = Some((start, end));
        Ok(())
    }
}

/// The latest time accepted, 2100-01-01T00:00:00Z: ESPI times are seconds since 1970, and a
/// later one is almost surely milliseconds or garbage.
pub(crate) const LATEST_S: i64 = 4_102_444_800;

/// A time in seconds since 1970 as a UTC time, if within 1970..2100.
pub(crate) fn utc(seconds: i64) -> Option<DateTime<Utc>> {
    if !(0..LATEST_S).contains(&seconds) {
        return None;
    }
    DateTime::from_timestamp(seconds, 0)
}

/// Checks what an export is given: one unit, the series rules, a figure exactly when not
/// missing, finite and not negative. Returns the unit (`None` for no readings).
pub(crate) fn check_for_export(readings: &[Reading]) -> Result<Option<Unit>, ExportError> {
    let unit = readings.first().map(|r| r.unit);
    let mut check = SeriesCheck::new(None, "the first reading's");
    for (index, r) in readings.iter().enumerate() {
        let fail = |reason: String| ExportError::Reading {
            index,
            start: r.start,
            reason,
        };
        if Some(r.unit) != unit {
            return Err(fail(format!(
                "unit {} differs from the first reading's; a series has one",
                r.unit.as_str()
            )));
        }
        match (r.quality, r.value) {
            (Quality::Missing, Some(_)) => return Err(fail("missing but carries a figure".into())),
            (Quality::Measured | Quality::Estimated, None) => {
                return Err(fail("has no figure but is not missing".into()));
            }
            (_, Some(v)) if !v.is_finite() || v < 0.0 => {
                return Err(fail(format!("figure {v} is not a finite, non-negative number")));
            }
            _ => {}
        }
        if r.start.timestamp() < 0 || r.end().timestamp() >= LATEST_S || r.start.timestamp_subsec_nanos() != 0 {
            return Err(fail("starts outside 1970..2100 or not on a whole second".into()));
        }
        check
            .next(r.start, r.duration_s)
            .map_err(|reason| fail(reason.to_string()))?;
    }
    Ok(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        utc(s).unwrap()
    }

    #[test]
    fn order_overlap_and_length() {
        let mut c = SeriesCheck::new(None, "the first interval's");
        c.next(t(900), 900).unwrap();
        c.next(t(2700), 900).unwrap(); // a gap is fine
        assert!(matches!(c.next(t(3000), 900), Err(Reason::Overlap { .. })));
        assert!(matches!(c.next(t(0), 900), Err(Reason::OutOfOrder { .. })));
        assert!(matches!(c.next(t(3600), 300), Err(Reason::Length { got_s: 300, .. })));
        assert!(matches!(c.next(t(3600), 0), Err(Reason::ZeroDuration)));
        c.next(t(3600), 900).unwrap();
        assert!(utc(-1).is_none() && utc(LATEST_S).is_none() && utc(LATEST_S - 1).is_some());
    }
}
