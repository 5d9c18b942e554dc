//! CSV export in the format [`crate::csv_read`] reads (the README's spec): times in UTC with
//! `Z`, figures in kWh (or kW) converted from Wh (W) in the text, so the export imports back
//! to the very same readings.

use std::io::{BufWriter, Write};

use chrono::SecondsFormat;

use crate::csv_read::MAX_SOURCE_CHARS;
use crate::decimal::format_thousandths;
use crate::error::ExportError;
use crate::reading::{Reading, Unit};
use crate::series::check_for_export;

/// Writes `readings` (one series; checked first, so nothing is written for a refused one) as
/// CSV. A `source` column is written when any reading has a source label.
pub fn write_csv<W: Write>(out: W, readings: &[Reading]) -> Result<(), ExportError> {
    let unit = check_for_export(readings)?.unwrap_or(Unit::Wh);
    for (index, r) in readings.iter().enumerate() {
        let fail = |reason: String| ExportError::Reading {
            index,
            start: r.start,
            reason,
        };
        if r.duration_s % 60 != 0 {
            return Err(fail(format!(
                "lasts {} s: the CSV format counts whole minutes",
                r.duration_s
            )));
        }
        if let Some(s) = &r.source
            && (s.chars().count() > MAX_SOURCE_CHARS
                || s.contains([',', '"', '\n', '\r'])
                || s.trim_matches([' ', '\t']) != &**s)
        {
            return Err(fail(format!(
                "source label {s:?} is not writable (at most {MAX_SOURCE_CHARS} characters, no comma, quote, newline or surrounding blanks)"
            )));
        }
    }
    let with_source = readings.iter().any(|r| r.source.is_some());
    let mut w = BufWriter::new(out);
    let value_column = match unit {
        Unit::Wh => "kwh",
        Unit::W => "kw",
    };
    write!(w, "interval_end,interval_minutes,{value_column},quality")?;
    if with_source {
        write!(w, ",source")?;
    }
    writeln!(w)?;
    for r in readings {
        let value = r.value.map(format_thousandths).unwrap_or_default();
        write!(
            w,
            "{},{},{value},{}",
            r.end().to_rfc3339_opts(SecondsFormat::Secs, true),
            r.duration_s / 60,
            r.quality.as_str()
        )?;
        if with_source {
            write!(w, ",{}", r.source.as_deref().unwrap_or(""))?;
        }
        writeln!(w)?;
    }
    w.flush()?;
    Ok(())
}
