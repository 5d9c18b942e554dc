//! From what the pass collected to one checked series.
//!
//! 1. **Which readings belong together.** A file with one ReadingType and at most one
//!    MeterReading is one series, links or not. Otherwise Atom links decide: a MeterReading's
//!    `related` link names its ReadingType's `self`; an IntervalBlock belongs to the
//!    MeterReading whose `self` + `/IntervalBlock` is the block's `up` link (or the block's
//!    `self` without its last segment). Links compare equal when one is the other's suffix at a
//!    `/`, so relative and absolute forms of one link match. A block no MeterReading claims is
//!    refused: its readings would otherwise be silently dropped or misattributed.
//! 2. **Which series is imported.** Of the MeterReadings with readings, those whose ReadingType
//!    is usable ([`crate::reading_type`]); exactly one must be, unless the caller chose by link.
//!    The others are reported as skipped. None usable: the first one's refusal is the error.
//! 3. **The readings.** In file order: a reading without `timePeriod` follows the previous one
//!    in its block (the first starts at the block's `interval/start`), lasting `intervalLength`,
//!    as ESPI specifies. Each must lie inside its block's `interval`, last `intervalLength`, come
//!    after the previous reading without overlapping it, and after the multiplier imply a mean
//!    demand under [`Limits::max_site_power_w`].

use super::{Collected, EspiImport, Links, NONE_I64, ReadingTypeRec, Skipped};
use crate::error::{ImportError, Place, Reason};
use crate::limits::Limits;
use crate::quality;
use crate::reading::{Quality, Reading, Unit};
use crate::reading_type::ReadingTypeInfo;
use crate::series::{SeriesCheck, utc};

/// One MeterReading's readings: which MeterReading (none in a bare document), its ReadingType,
/// its blocks in file order.
struct Series {
    mr: Option<usize>,
    rt: usize,
    blocks: Vec<usize>,
}

/// Whether two links name the same resource: equal, or one is the other's suffix starting
/// after a `/` (a relative link and its absolute form).
pub(super) fn same_href(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    let short = short.trim_start_matches('/');
    !short.is_empty() && long.ends_with(short) && long[..long.len() - short.len()].ends_with('/')
}

fn block_of(links: &Links, mr: &Links) -> bool {
    let Some(mself) = mr.self_href.as_deref() else {
        return false;
    };
    let collection = format!("{}/IntervalBlock", mself.trim_end_matches('/'));
    if let Some(up) = links.up.as_deref()
        && (same_href(up, &collection) || mr.related.iter().any(|r| same_href(r, up)))
    {
        return true;
    }
    if let Some(own) = links.self_href.as_deref()
        && let Some((parent, _)) = own.trim_end_matches('/').rsplit_once('/')
    {
        return same_href(parent, &collection);
    }
    false
}

fn rt_of(mr: &Links, rts: &[ReadingTypeRec]) -> Option<usize> {
    rts.iter().position(|rt| {
        rt.links
            .self_href
            .as_deref()
            .is_some_and(|s| mr.related.iter().any(|r| same_href(r, s)))
    })
}

fn series_of(c: &Collected) -> Result<Vec<Series>, ImportError> {
    if c.reading_types.is_empty() {
        return Err(ImportError::file(Reason::Missing {
            what: "a ReadingType (what the readings measure)".into(),
        }));
    }
    if c.meter_readings.len() <= 1 && c.reading_types.len() == 1 {
        return Ok(vec![Series {
            mr: (!c.meter_readings.is_empty()).then_some(0),
            rt: 0,
            blocks: (0..c.blocks.len()).collect(),
        }]);
    }
    if c.meter_readings.is_empty() {
        return Err(ImportError::at(
            "ReadingType",
            c.reading_types[1].fields.place,
            Reason::Ambiguous(format!(
                "the file holds {} ReadingTypes and no MeterReading to say which readings each describes",
                c.reading_types.len()
            )),
        ));
    }
    let mut series = Vec::with_capacity(c.meter_readings.len());
    for (i, mr) in c.meter_readings.iter().enumerate() {
        let rt = match rt_of(&mr.links, &c.reading_types) {
            Some(rt) => rt,
            None if c.reading_types.len() == 1 => 0,
            None => {
                return Err(ImportError::at(
                    "MeterReading",
                    mr.place,
                    Reason::Missing {
                        what: "an Atom link (rel=related) to one of the file's ReadingTypes".into(),
                    },
                ));
            }
        };
        series.push(Series {
            mr: Some(i),
            rt,
            blocks: Vec::new(),
        });
    }
    for (b, block) in c.blocks.iter().enumerate() {
        let owner = if c.meter_readings.len() == 1 {
            Some(0)
        } else {
            c.meter_readings.iter().position(|mr| block_of(&block.links, &mr.links))
        };
        match owner {
            Some(i) => series[i].blocks.push(b),
            None => return Err(ImportError::at("IntervalBlock", block.place, Reason::Unlinked)),
        }
    }
    Ok(series)
}

/// Builds the import from one pass's findings (see the module's docs).
pub(super) fn assemble(c: Collected, limits: &Limits, select: Option<&str>) -> Result<EspiImport, ImportError> {
    let series = series_of(&c)?;
    let readings_in = |s: &Series| {
        s.blocks
            .iter()
            .map(|&b| c.blocks[b].end - c.blocks[b].first)
            .sum::<usize>()
    };
    let mr_href = |s: &Series| s.mr.and_then(|i| c.meter_readings[i].links.self_href.clone());
    let place_of = |s: &Series| match s.mr {
        Some(i) => c.meter_readings[i].place,
        None => c.reading_types[s.rt].fields.place,
    };
    let mut candidates: Vec<&Series> = series.iter().filter(|s| readings_in(s) > 0).collect();
    if let Some(sel) = select {
        candidates.retain(|s| mr_href(s).is_some_and(|h| h.ends_with(sel)));
        if candidates.is_empty() {
            return Err(ImportError::file(Reason::Missing {
                what: format!("a MeterReading with readings whose self link ends with {sel:?}"),
            }));
        }
    }
    if candidates.is_empty() {
        return Err(ImportError::file(Reason::NoReadings));
    }
    let mut usable = Vec::new();
    let mut refused = Vec::new();
    for s in candidates {
        match c.reading_types[s.rt].fields.check() {
            Ok(info) => usable.push((s, info)),
            Err(e) => refused.push((s, e)),
        }
    }
    let (chosen, info) = match usable.len() {
        0 => {
            let mut refused = refused.into_iter();
            return Err(match refused.next() {
                Some((_, e)) => e,
                None => ImportError::file(Reason::NoReadings),
            });
        }
        1 => usable.swap_remove(0),
        n => {
            let list: Vec<String> = usable
                .iter()
                .map(|(s, _)| {
                    format!(
                        "line {} ({})",
                        place_of(s).line,
                        mr_href(s).unwrap_or_else(|| "no self link".into())
                    )
                })
                .collect();
            return Err(ImportError::at(
                "MeterReading",
                place_of(usable[1].0),
                Reason::Ambiguous(format!(
                    "the file holds {n} usable MeterReadings ({}): choose one by its self link (import_espi_selecting)",
                    list.join(", ")
                )),
            ));
        }
    };
    if c.usage_points.len() == 1
        && let Some(kind) = c.usage_points[0].kind.value
        && kind != 0
    {
        let name = match kind {
            1 => " (gas)",
            2 => " (water)",
            5 => " (heat)",
            6 => " (cold)",
            _ => "",
        };
        return Err(ImportError::at(
            "UsagePoint/ServiceCategory/kind",
            c.usage_points[0].kind.place,
            Reason::Unusable(format!(
                "the UsagePoint's service kind {kind}{name} is not electricity (0)"
            )),
        ));
    }
    let skipped = refused
        .into_iter()
        .map(|(s, e)| Skipped {
            meter_reading: mr_href(s),
            line: place_of(s).line,
            reason: e.to_string(),
        })
        .collect();
    let readings = readings(&c, chosen, &info, limits)?;
    if readings.is_empty() {
        return Err(ImportError::file(Reason::NoReadings));
    }
    Ok(EspiImport {
        readings,
        meter_reading: mr_href(chosen),
        reading_type: info,
        local_time: c.local_time,
        service_kind: if c.usage_points.len() == 1 {
            c.usage_points[0].kind.value
        } else {
            None
        },
        skipped,
    })
}

/// A value times 10^multiplier, correctly rounded (the value is at most 2^48 and powers of ten
/// up to 10^22 are exact, so one multiplication or division rounds once).
fn scale(v: i64, multiplier: i8) -> f64 {
    let p = 10f64.powi(i32::from(multiplier.unsigned_abs()));
    if multiplier >= 0 { v as f64 * p } else { v as f64 / p }
}

fn readings(c: &Collected, s: &Series, info: &ReadingTypeInfo, limits: &Limits) -> Result<Vec<Reading>, ImportError> {
    let len = info.interval_length_s;
    let multiplier = info.power_of_ten_multiplier;
    let default_quality = info
        .default_quality
        .and_then(|q| quality::class_of(u64::from(q)))
        .unwrap_or(Quality::Measured);
    let total = s.blocks.iter().map(|&b| c.blocks[b].end - c.blocks[b].first).sum();
    let mut out = Vec::with_capacity(total);
    let mut check = SeriesCheck::new(Some(len), "the ReadingType's intervalLength");
    for &b in &s.blocks {
        let block = &c.blocks[b];
        let mut cursor = block.interval.map(|(start, _, _)| start);
        for raw in &c.raws[block.first..block.end] {
            let place: Place = raw.place.into();
            let at = |reason| ImportError::at("IntervalReading", place, reason);
            let (start, duration) = if raw.has_period {
                (raw.start, raw.duration)
            } else {
                let start = cursor.ok_or_else(|| {
                    at(Reason::Missing {
                        what: "timePeriod (and its IntervalBlock has no interval to count from)".into(),
                    })
                })?;
                (start, len)
            };
            let end = start + i64::from(duration);
            cursor = Some(end);
            let start_t = utc(start).ok_or_else(|| {
                at(Reason::TimeRange {
                    value: start.to_string(),
                })
            })?;
            if let Some((block_start, block_duration, _)) = block.interval {
                let block_end = block_start + i64::from(block_duration);
                if start < block_start || end > block_end {
                    let t = |s: i64| utc(s).unwrap_or_default();
                    return Err(at(Reason::OutsideBlock {
                        start: start_t,
                        end: t(end),
                        block_start: t(block_start),
                        block_end: t(block_end),
                    }));
                }
            }
            check.next(start_t, duration).map_err(at)?;
            let (value, quality) = if raw.value == NONE_I64 {
                (None, Quality::Missing)
            } else {
                let v = scale(raw.value, multiplier);
                let mean_w = match info.unit {
                    Unit::W => v,
                    Unit::Wh => v * 3600.0 / f64::from(duration),
                };
                if mean_w > limits.max_site_power_w {
                    return Err(ImportError::at(
                        "IntervalReading/value",
                        raw.value_place.into(),
                        Reason::Absurd {
                            value: raw.value,
                            multiplier,
                            unit: info.unit.as_str(),
                            duration_s: duration,
                            mean_w,
                            limit_w: limits.max_site_power_w,
                        },
                    ));
                }
                (Some(v), raw.quality.unwrap_or(default_quality))
            };
            out.push(Reading {
                start: start_t,
                duration_s: duration,
                value,
                unit: info.unit,
                quality,
                source: None,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_match_relative_and_absolute_forms() {
        assert!(same_href(
            "https://u.example/espi/1_1/resource/ReadingType/07",
            "ReadingType/07"
        ));
        assert!(same_href("ReadingType/07", "/espi/x/ReadingType/07"));
        assert!(!same_href("ReadingType/07", "ReadingType/7"));
        assert!(!same_href("a/ReadingType/17", "ReadingType/7"));
        assert!(!same_href("x", ""));
    }

    #[test]
    fn scaling_is_correctly_rounded() {
        assert_eq!(scale(1234, -3), 1.234);
        assert_eq!(scale(1234, 3), 1_234_000.0);
        assert_eq!(scale(7, 0), 7.0);
        assert_eq!(scale(1, -12), 1e-12);
        assert_eq!(scale(999_999, 12), 999_999e12);
    }
}
