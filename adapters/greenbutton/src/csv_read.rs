//! CSV import: the crate's documented interval format (the README's "CSV format" is the spec),
//! read line by line with the same bounds as the XML.
//!
//! Written by hand rather than with the `csv` crate: the format is deliberately smaller than
//! RFC 4180 (no quoting, so no field holds a comma, a quote or a newline), which makes every
//! line one row and every error a line and a field number, and costs no new dependency.

use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};

use crate::decimal::{DecimalError, parse_scaled};
use crate::error::{ImportError, Place, Reason, quote};
use crate::limits::{Bounded, Limits, open_checked};
use crate::reading::{Quality, Reading, Unit};
use crate::series::{LATEST_S, SeriesCheck};

/// A CSV import.
#[derive(Debug, Clone, PartialEq)]
pub struct CsvImport {
    /// The rows, in time order.
    pub readings: Vec<Reading>,
    /// `kwh` columns give [`Unit::Wh`], `kw` columns [`Unit::W`] (values converted exactly).
    pub unit: Unit,
    /// The intervals' length, s.
    pub interval_s: u32,
}

/// Longest `source` label, characters.
pub const MAX_SOURCE_CHARS: usize = 64;
/// Most distinct `source` labels in one file (each is kept once).
pub const MAX_SOURCES: usize = 1024;

/// Imports a CSV file; a file over [`Limits::max_bytes`] is refused from its size, unread.
pub fn import_csv_file(path: &Path, limits: &Limits) -> Result<CsvImport, ImportError> {
    let file = open_checked(path, limits)?;
    import_csv(file, limits)
}

/// The header's columns: the index of each known one.
#[derive(Debug)]
struct Header {
    fields: usize,
    end: usize,
    minutes: usize,
    value: usize,
    unit: Unit,
    quality: usize,
    source: Option<usize>,
}

fn header_err(line: u64, column: u64, msg: String) -> ImportError {
    ImportError {
        element: "header".into(),
        line: Some(line),
        column: Some(column),
        reason: Reason::Header(msg),
    }
}

fn parse_header(text: &str, line: u64) -> Result<Header, ImportError> {
    let mut slots: [Option<usize>; 6] = [None; 6];
    const NAMES: [&str; 6] = ["interval_end", "interval_minutes", "kwh", "kw", "quality", "source"];
    let mut fields = 0;
    for (i, raw) in text.split(',').enumerate() {
        fields += 1;
        let name = raw.trim_matches([' ', '\t']);
        let column = i as u64 + 1;
        let Some(k) = NAMES.iter().position(|n| *n == name) else {
            return Err(header_err(
                line,
                column,
                format!(
                    "unknown column {:?}: the header names interval_end, interval_minutes, kwh or kw, quality, and optionally source (the first line must be the header)",
                    quote(name)
                ),
            ));
        };
        if slots[k].is_some() {
            return Err(header_err(line, column, format!("column {name} appears twice")));
        }
        slots[k] = Some(i);
    }
    let need = |k: usize| slots[k].ok_or_else(|| header_err(line, 1, format!("the header has no {} column", NAMES[k])));
    let (value, unit) = match (slots[2], slots[3]) {
        (Some(i), None) => (i, Unit::Wh),
        (None, Some(i)) => (i, Unit::W),
        (Some(_), Some(i)) => {
            return Err(header_err(
                line,
                i as u64 + 1,
                "kwh and kw both present: a file holds one".into(),
            ));
        }
        (None, None) => {
            return Err(header_err(
                line,
                1,
                "the header has neither a kwh nor a kw column".into(),
            ));
        }
    };
    Ok(Header {
        fields,
        end: need(0)?,
        minutes: need(1)?,
        value,
        unit,
        quality: need(4)?,
        source: slots[5],
    })
}

/// Imports the CSV format from a stream.
pub fn import_csv<R: Read>(input: R, limits: &Limits) -> Result<CsvImport, ImportError> {
    let mut r = Bounded::new(input, limits);
    let mut raw = Vec::with_capacity(256);
    let mut line_no = 0u64;
    let mut header: Option<Header> = None;
    let mut readings: Vec<Reading> = Vec::new();
    let mut check = SeriesCheck::new(None, "the first row's interval_minutes");
    let mut sources: HashMap<String, Arc<str>> = HashMap::new();
    loop {
        raw.clear();
        r.mark();
        let offset = r.offset();
        let n = r.read_until(b'\n', &mut raw).map_err(|e| match r.hit() {
            Some(reason @ Reason::ReadTooMuch { .. }) => ImportError::file(reason.clone()),
            Some(reason) => ImportError {
                element: "row".into(),
                line: Some(line_no + 1),
                column: None,
                reason: reason.clone(),
            },
            None => ImportError::file(Reason::Io(e.to_string())),
        })?;
        if n == 0 {
            break;
        }
        line_no += 1;
        let text = std::str::from_utf8(&raw).map_err(|e| ImportError {
            element: "row".into(),
            line: Some(line_no),
            column: None,
            reason: Reason::NotUtf8 {
                byte: offset + e.valid_up_to() as u64,
                in_line: Some(e.valid_up_to() as u64 + 1),
            },
        })?;
        let text = if line_no == 1 {
            text.trim_start_matches('\u{feff}')
        } else {
            text
        };
        let text = text.strip_suffix('\n').unwrap_or(text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        if text.trim_matches([' ', '\t']).is_empty() {
            continue;
        }
        let Some(h) = header.as_ref() else {
            header = Some(parse_header(text, line_no)?);
            continue;
        };
        if readings.len() >= limits.max_readings {
            return Err(ImportError {
                element: "row".into(),
                line: Some(line_no),
                column: None,
                reason: Reason::TooManyReadings {
                    limit: limits.max_readings,
                },
            });
        }
        // The header has at most six columns (each known name once), so a row's fields fit
        // in an array: no allocation per row.
        let mut slots = [""; 6];
        let mut count = 0;
        for f in text.split(',') {
            if let Some(slot) = slots.get_mut(count) {
                *slot = f.trim_matches([' ', '\t']);
            }
            count += 1;
        }
        if count != h.fields {
            return Err(ImportError {
                element: "row".into(),
                line: Some(line_no),
                column: None,
                reason: Reason::FieldCount {
                    got: count,
                    expected: h.fields,
                },
            });
        }
        let fields = &slots[..count];
        if let Some(i) = fields.iter().position(|f| f.contains('"')) {
            return Err(at(h, i, line_no, Reason::Quoted));
        }
        let reading = row(h, limits, fields, line_no, &mut sources)?;
        check
            .next(reading.start, reading.duration_s)
            .map_err(|reason| at(h, h.end, line_no, reason))?;
        readings.push(reading);
    }
    let Some(h) = header else {
        return Err(ImportError::file(Reason::Missing {
            what: "the header line".into(),
        }));
    };
    let Some(first) = readings.first() else {
        return Err(ImportError::file(Reason::NoReadings));
    };
    Ok(CsvImport {
        interval_s: first.duration_s,
        unit: h.unit,
        readings,
    })
}

/// An error at field `i` of a row: the column's name and number.
fn at(h: &Header, i: usize, line: u64, reason: Reason) -> ImportError {
    let name = if i == h.end {
        "interval_end"
    } else if i == h.minutes {
        "interval_minutes"
    } else if i == h.value {
        if h.unit == Unit::Wh { "kwh" } else { "kw" }
    } else if i == h.quality {
        "quality"
    } else if Some(i) == h.source {
        "source"
    } else {
        "row"
    };
    ImportError::at(
        name,
        Place {
            line,
            column: i as u64 + 1,
        },
        reason,
    )
}

fn row(
    h: &Header,
    limits: &Limits,
    fields: &[&str],
    line: u64,
    sources: &mut HashMap<String, Arc<str>>,
) -> Result<Reading, ImportError> {
    let invalid = |i: usize, expected: &'static str| {
        at(
            h,
            i,
            line,
            Reason::Invalid {
                value: quote(fields[i]),
                expected,
            },
        )
    };
    let end_text = fields[h.end];
    let end = DateTime::parse_from_rfc3339(end_text)
        .map_err(|_| invalid(h.end, "an RFC 3339 time with its offset (2026-07-01T14:05:00-04:00)"))?;
    if end.timestamp_subsec_nanos() != 0 {
        return Err(invalid(h.end, "a whole second"));
    }
    let minutes: u32 = match fields[h.minutes].parse::<i64>() {
        Ok(m) if m < 0 => {
            return Err(at(
                h,
                h.minutes,
                line,
                Reason::NegativeDuration(quote(fields[h.minutes])),
            ));
        }
        Ok(0) => return Err(at(h, h.minutes, line, Reason::ZeroDuration)),
        Ok(m) if m <= 1440 => m as u32,
        _ => return Err(invalid(h.minutes, "a whole number of minutes from 1 to 1440")),
    };
    let end = end.with_timezone(&Utc);
    let start = end - Duration::minutes(i64::from(minutes));
    if start.timestamp() < 0 || end.timestamp() >= LATEST_S {
        return Err(at(h, h.end, line, Reason::TimeRange { value: quote(end_text) }));
    }
    let quality =
        Quality::from_name(fields[h.quality]).ok_or_else(|| invalid(h.quality, "measured, estimated or missing"))?;
    let value_text = fields[h.value];
    let value = if value_text.is_empty() {
        None
    } else {
        // kWh and kW become Wh and W by moving the decimal point, exactly.
        let v = parse_scaled(value_text, 3).map_err(|e| {
            let reason = match e {
                DecimalError::Negative => Reason::NegativeValue(quote(value_text)),
                DecimalError::NotFinite => Reason::NotFinite(quote(value_text)),
                DecimalError::Syntax => Reason::Invalid {
                    value: quote(value_text),
                    expected: "a plain decimal (digits, optionally a point and digits)",
                },
            };
            at(h, h.value, line, reason)
        })?;
        if !v.is_finite() {
            return Err(at(h, h.value, line, Reason::NotFinite(quote(value_text))));
        }
        let mean_w = match h.unit {
            Unit::W => v,
            Unit::Wh => v * 60.0 / f64::from(minutes),
        };
        if mean_w > limits.max_site_power_w {
            return Err(at(
                h,
                h.value,
                line,
                Reason::TooHigh {
                    mean_w,
                    limit_w: limits.max_site_power_w,
                },
            ));
        }
        Some(v)
    };
    if (quality == Quality::Missing) == value.is_some() {
        return Err(at(
            h,
            h.value,
            line,
            Reason::QualityValue {
                quality: quality.as_str(),
                has_value: value.is_some(),
            },
        ));
    }
    let source = match h.source.map(|i| (i, fields[i])) {
        None | Some((_, "")) => None,
        Some((i, label)) => {
            if label.chars().count() > MAX_SOURCE_CHARS {
                return Err(invalid(i, "a source label of at most 64 characters"));
            }
            if let Some(s) = sources.get(label) {
                Some(Arc::clone(s))
            } else {
                if sources.len() >= MAX_SOURCES {
                    return Err(at(
                        h,
                        i,
                        line,
                        Reason::TooMany {
                            limit: MAX_SOURCES,
                            which: "MAX_SOURCES (distinct source labels)",
                        },
                    ));
                }
                let s: Arc<str> = Arc::from(label);
                sources.insert(label.to_string(), Arc::clone(&s));
                Some(s)
            }
        }
    };
    Ok(Reading {
        start,
        duration_s: minutes * 60,
        value,
        unit: h.unit,
        quality,
        source,
    })
}
