//! Green Button export: an Atom feed with one UsagePoint, one MeterReading, its ReadingType and
//! its IntervalBlocks (and LocalTimeParameters when given), in the layout of the Green Button
//! Alliance's sample files.
//!
//! Values are written in thousandths of the unit: `uom` 72 (Wh) or 38 (W) with
//! `powerOfTenMultiplier` -3 ([`EXPORT_MULTIPLIER`]), so a reading is exact to 1 mWh (1 mW),
//! and every reading this crate imported from Green Button or CSV with three decimals or fewer
//! in Wh comes back bit for bit. Elements follow the ESPI schema's sequences (in
//! `IntervalReading`, `ReadingQuality` comes before `timePeriod` and `value`). Qualities: see
//! [`crate::quality`] (measured: no `ReadingQuality`; estimated: code 8; missing: no `value`).
//! One IntervalBlock per [`EspiMeta::block_s`] (a UTC day by default), spanning its readings.

use std::io::{BufWriter, Write};

use chrono::{DateTime, SecondsFormat, Utc};
use quick_xml::escape::escape;

use crate::error::ExportError;
use crate::quality::EXPORT_ESTIMATED_CODE;
use crate::reading::{Quality, Reading, Unit};
use crate::reading_type::LocalTimeParameters;
use crate::series::check_for_export;

/// The power-of-ten multiplier of exported values: thousandths (mWh, mW).
pub const EXPORT_MULTIPLIER: i8 = -3;

/// What an exported feed says of itself.
#[derive(Debug, Clone, PartialEq)]
pub struct EspiMeta {
    /// The feed's Atom id, an IRI (`urn:...` or `https://...`); entry ids extend it with the
    /// entry's path (`<feed_id>/ReadingType/1`).
    pub feed_id: String,
    /// The feed's title.
    pub title: String,
    /// The feed's and entries' `updated` time.
    pub updated: DateTime<Utc>,
    /// The feed's author (Atom requires one).
    pub author: String,
    /// The customer's zone, written as LocalTimeParameters when given.
    pub local_time: Option<LocalTimeParameters>,
    /// `flowDirection`: 1 forward (delivered to the site, the default) or 4 net.
    pub flow_direction: u16,
    /// Length of one IntervalBlock, s (default 86,400: a UTC day); readings are grouped by
    /// `start / block_s`.
    pub block_s: u32,
}

impl EspiMeta {
    /// Meta with the defaults: forward flow, daily blocks, author "flexgate", no zone.
    #[must_use]
    pub fn new(feed_id: impl Into<String>, title: impl Into<String>, updated: DateTime<Utc>) -> Self {
        EspiMeta {
            feed_id: feed_id.into(),
            title: title.into(),
            updated,
            author: "flexgate".into(),
            local_time: None,
            flow_direction: 1,
            block_s: 86_400,
        }
    }
}

/// Largest value ESPI's Int48 holds.
const INT48_MAX: f64 = ((1u64 << 48) - 1) as f64;

const UP: &str = "RetailCustomer/1/UsagePoint";
const MR: &str = "RetailCustomer/1/UsagePoint/1/MeterReading";

/// Writes `readings` as a Green Button feed. They must be one series (one unit and length, in
/// order, none overlapping, a value exactly when not missing), which is checked first, so nothing
/// is written for a refused one.
pub fn write_espi<W: Write>(out: W, readings: &[Reading], meta: &EspiMeta) -> Result<(), ExportError> {
    let unit = check_for_export(readings)?.unwrap_or(Unit::Wh);
    if !matches!(meta.flow_direction, 1 | 4) {
        return Err(ExportError::Options(format!(
            "flow_direction {} is neither forward (1) nor net (4)",
            meta.flow_direction
        )));
    }
    if meta.block_s == 0 {
        return Err(ExportError::Options("block_s must be at least 1".into()));
    }
    let scale = 10f64.powi(-i32::from(EXPORT_MULTIPLIER));
    let mut values = Vec::with_capacity(readings.len());
    for (index, r) in readings.iter().enumerate() {
        values.push(match r.value {
            Some(v) => {
                let scaled = (v * scale).round();
                if scaled > INT48_MAX {
                    return Err(ExportError::Reading {
                        index,
                        start: r.start,
                        reason: format!("{v} {} is beyond ESPI's Int48 in thousandths", unit.as_str()),
                    });
                }
                Some(scaled as i64)
            }
            None => None,
        });
    }
    let interval_s = readings.first().map_or(900, |r| r.duration_s);
    let mut w = BufWriter::new(out);
    let updated = meta.updated.to_rfc3339_opts(SecondsFormat::Secs, true);
    let id = escape(meta.feed_id.as_str());
    writeln!(w, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    writeln!(
        w,
        r#"<feed xmlns="http://www.w3.org/2005/Atom" xmlns:espi="http://naesb.org/espi">"#
    )?;
    writeln!(w, "  <id>{id}</id>")?;
    writeln!(w, "  <title>{}</title>", escape(meta.title.as_str()))?;
    writeln!(w, "  <updated>{updated}</updated>")?;
    writeln!(w, "  <author><name>{}</name></author>", escape(meta.author.as_str()))?;

    let entry = |w: &mut BufWriter<W>, path: &str, up: &str, related: &[&str], title: &str| -> std::io::Result<()> {
        writeln!(w, "  <entry>")?;
        writeln!(w, "    <id>{id}/{path}</id>")?;
        writeln!(w, r#"    <link rel="self" href="{path}"/>"#)?;
        writeln!(w, r#"    <link rel="up" href="{up}"/>"#)?;
        for r in related {
            writeln!(w, r#"    <link rel="related" href="{r}"/>"#)?;
        }
        writeln!(w, "    <title>{title}</title>")?;
        writeln!(w, "    <updated>{updated}</updated>")?;
        writeln!(w, "    <content>")
    };
    let end_entry = |w: &mut BufWriter<W>| -> std::io::Result<()> { writeln!(w, "    </content>\n  </entry>") };

    let mut up_related = vec!["RetailCustomer/1/UsagePoint/1/MeterReading"];
    if meta.local_time.is_some() {
        up_related.push("LocalTimeParameters/1");
    }
    entry(&mut w, "RetailCustomer/1/UsagePoint/1", UP, &up_related, "Site meter")?;
    writeln!(
        w,
        "      <espi:UsagePoint><espi:ServiceCategory><espi:kind>0</espi:kind></espi:ServiceCategory></espi:UsagePoint>"
    )?;
    end_entry(&mut w)?;

    if let Some(lt) = &meta.local_time {
        entry(
            &mut w,
            "LocalTimeParameters/1",
            "LocalTimeParameters",
            &[],
            "Local time",
        )?;
        write!(w, "      <espi:LocalTimeParameters>")?;
        if let Some(r) = &lt.dst_end_rule {
            write!(w, "<espi:dstEndRule>{}</espi:dstEndRule>", escape(r.as_str()))?;
        }
        if let Some(o) = lt.dst_offset_s {
            write!(w, "<espi:dstOffset>{o}</espi:dstOffset>")?;
        }
        if let Some(r) = &lt.dst_start_rule {
            write!(w, "<espi:dstStartRule>{}</espi:dstStartRule>", escape(r.as_str()))?;
        }
        if let Some(o) = lt.tz_offset_s {
            write!(w, "<espi:tzOffset>{o}</espi:tzOffset>")?;
        }
        writeln!(w, "</espi:LocalTimeParameters>")?;
        end_entry(&mut w)?;
    }

    let mr_self = format!("{MR}/1");
    let mr_blocks = format!("{MR}/1/IntervalBlock");
    entry(&mut w, &mr_self, MR, &[&mr_blocks, "ReadingType/1"], "Interval data")?;
    writeln!(w, "      <espi:MeterReading/>")?;
    end_entry(&mut w)?;

    let (kind, uom, title) = match unit {
        Unit::Wh => (12, 72, "Energy delivered per interval, mWh"),
        Unit::W => (37, 38, "Mean demand per interval, mW"),
    };
    entry(&mut w, "ReadingType/1", "ReadingType", &[], title)?;
    write!(w, "      <espi:ReadingType>")?;
    match unit {
        Unit::Wh => write!(
            w,
            "<espi:accumulationBehaviour>4</espi:accumulationBehaviour><espi:commodity>1</espi:commodity><espi:dataQualifier>12</espi:dataQualifier>"
        )?,
        Unit::W => write!(
            w,
            "<espi:commodity>1</espi:commodity><espi:dataQualifier>2</espi:dataQualifier>"
        )?,
    }
    writeln!(
        w,
        "<espi:flowDirection>{}</espi:flowDirection><espi:intervalLength>{interval_s}</espi:intervalLength><espi:kind>{kind}</espi:kind><espi:powerOfTenMultiplier>{EXPORT_MULTIPLIER}</espi:powerOfTenMultiplier><espi:uom>{uom}</espi:uom></espi:ReadingType>",
        meta.flow_direction
    )?;
    end_entry(&mut w)?;

    let block_s = i64::from(meta.block_s);
    let mut i = 0;
    let mut n = 0;
    while i < readings.len() {
        let key = readings[i].start.timestamp().div_euclid(block_s);
        let mut j = i + 1;
        while j < readings.len() && readings[j].start.timestamp().div_euclid(block_s) == key {
            j += 1;
        }
        n += 1;
        let start = readings[i].start.timestamp();
        let end = readings[j - 1].end().timestamp();
        entry(&mut w, &format!("{mr_blocks}/{n}"), &mr_blocks, &[], "Interval block")?;
        writeln!(w, "      <espi:IntervalBlock>")?;
        writeln!(
            w,
            "        <espi:interval><espi:duration>{}</espi:duration><espi:start>{start}</espi:start></espi:interval>",
            end - start
        )?;
        for (r, v) in readings[i..j].iter().zip(&values[i..j]) {
            write!(w, "        <espi:IntervalReading>")?;
            if r.quality == Quality::Estimated {
                write!(
                    w,
                    "<espi:ReadingQuality><espi:quality>{EXPORT_ESTIMATED_CODE}</espi:quality></espi:ReadingQuality>"
                )?;
            }
            write!(
                w,
                "<espi:timePeriod><espi:duration>{}</espi:duration><espi:start>{}</espi:start></espi:timePeriod>",
                r.duration_s,
                r.start.timestamp()
            )?;
            if let Some(v) = v {
                write!(w, "<espi:value>{v}</espi:value>")?;
            }
            writeln!(w, "</espi:IntervalReading>")?;
        }
        writeln!(w, "      </espi:IntervalBlock>")?;
        end_entry(&mut w)?;
        i = j;
    }
    writeln!(w, "</feed>")?;
    w.flush()?;
    Ok(())
}
