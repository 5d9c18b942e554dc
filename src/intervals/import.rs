//! From a utility's readings (the Green Button adapter's type, CSV or ESPI) to the store's
//! intervals: mean kW, interval-ending, labelled with where they came from.

use flexgate_greenbutton::{Quality, Reading};
use flexgate_policies::control::entry::{
    Entry, IMPORTED_COLUMNS, IMPORTED_ROWS_PER_RECORD, ImportedRow, MeterImported, Recorded,
};
use flexgate_policies::intervals::{Interval, IntervalQuality, IntervalSource};

/// `reading` as an imported interval labelled `source` (a CSV row's own `source` column wins).
#[must_use]
pub fn interval_of(reading: &Reading, source: &str) -> Interval {
    Interval {
        start: reading.start,
        end: reading.end(),
        kw: reading.mean_w().map(|w| w / 1000.0),
        quality: match reading.quality {
            Quality::Measured => IntervalQuality::Measured,
            Quality::Estimated => IntervalQuality::Estimated,
            Quality::Missing => IntervalQuality::Missing,
        },
        samples: 0,
        source: IntervalSource::Imported(reading.source.as_deref().unwrap_or(source).to_string()),
    }
}

/// `interval` as a reading in watt-hours, for the exports.
#[must_use]
pub fn reading_of(interval: &Interval) -> Reading {
    let duration_s = u32::try_from(interval.length_s().max(1)).unwrap_or(u32::MAX);
    Reading {
        start: interval.start,
        duration_s,
        value: interval.kwh().map(|kwh| kwh * 1000.0),
        unit: flexgate_greenbutton::Unit::Wh,
        quality: match interval.quality {
            IntervalQuality::Measured => Quality::Measured,
            IntervalQuality::Estimated => Quality::Estimated,
            IntervalQuality::Missing => Quality::Missing,
        },
        source: Some(match &interval.source {
            IntervalSource::Gateway => "gateway".into(),
            IntervalSource::Imported(name) => name.as_str().into(),
        }),
    }
}

/// Where an import came from, for its ledger records.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportMeta {
    /// The label its intervals carry.
    pub source: String,
    /// `green_button` or `csv`.
    pub format: &'static str,
    /// SHA-256 of the file, hex.
    pub sha256: String,
    /// The file's size, bytes.
    pub bytes: u64,
    /// When it was imported.
    pub at: chrono::DateTime<chrono::Utc>,
}

/// The `meter_imported` records of an import checked by
/// [`IntervalStore::check_import`](super::IntervalStore::check_import): its intervals in parts of
/// at most [`IMPORTED_ROWS_PER_RECORD`], each record with the whole import's summary.
#[must_use]
pub fn records(intervals: &[Interval], summary: &super::ImportSummary, meta: &ImportMeta) -> Vec<Recorded> {
    let chunks: Vec<&[Interval]> = intervals.chunks(IMPORTED_ROWS_PER_RECORD).collect();
    let parts = u32::try_from(chunks.len().max(1)).unwrap_or(u32::MAX);
    let make = |part: u32, chunk: &[Interval]| {
        Recorded::new(
            Entry::MeterImported(MeterImported {
                part,
                parts,
                columns: IMPORTED_COLUMNS.iter().map(ToString::to_string).collect(),
                rows: chunk.iter().map(|i| ImportedRow(i.end, i.kw, i.quality)).collect(),
                at: meta.at,
                source: meta.source.clone(),
                format: meta.format.to_string(),
                sha256: meta.sha256.clone(),
                bytes: meta.bytes,
                intervals: summary.intervals,
                replaced: summary.replaced,
                length_s: summary.length_s,
                from: summary.from,
                to: summary.to,
                quality: [summary.measured, summary.estimated, summary.missing],
            }),
            None,
        )
    };
    if chunks.is_empty() {
        return vec![make(1, &[])];
    }
    chunks
        .into_iter()
        .zip(1u32..)
        .map(|(chunk, part)| make(part, chunk))
        .collect()
}
