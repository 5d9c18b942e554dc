//! Import of a year of 5-minute interval data (105,120 intervals), each against a plain read of
//! the same bytes, in one run.
//!
//! The input is made once, before timing, by the crate's own exporters from a deterministic
//! load (a daily cycle with noise, 1 in 97 intervals estimated, 1 in 211 missing): a Green
//! Button feed of 365 daily IntervalBlocks (about 20 MB, values in mWh) and the CSV of the same
//! readings (about 5 MB). Both imports must give back the 105,120 readings before anything is
//! timed.
//!
//! Group `greenbutton_year_5min` (throughput in input bytes):
//!
//! - `espi_import`: [`import_espi`] on the bytes in memory: the whole import (UTF-8, entity,
//!   size and depth checks, namespaces, every value parsed, the ReadingType checked, links,
//!   series rules, the readings built);
//! - `espi_import_file`: [`import_espi_file`] on the same feed written to a temporary file (the
//!   page cache holds it after the first pass): what `flexgate meter import` runs;
//! - `espi_plain_quick_xml`: the floor: quick-xml's `Reader` over the same bytes, counting start
//!   and empty elements, nothing else (no namespaces, no text decoded);
//! - `csv_import`: [`import_csv`] on the CSV;
//! - `csv_plain`: the floor: the same bytes read line by line with a UTF-8 check, fields counted.
//!
//! The ratios are import ÷ plain of each format's medians. The target is each import within a
//! second. CI smoke: `cargo bench -p flexgate-greenbutton -- --test` runs each once.
use std::hint::black_box;
use std::io::BufRead;
use std::time::Duration;

use chrono::DateTime;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use flexgate_greenbutton::{
    EspiMeta, Limits, Quality, Reading, Unit, import_csv, import_espi, import_espi_file, write_csv, write_espi,
};

const INTERVALS: usize = 105_120;

/// A year of 5-minute readings of a 1 MW-ish site, deterministic.
fn year() -> Vec<Reading> {
    let start = 1_735_689_600; // 2025-01-01T00:00:00Z
    let mut seed: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..INTERVALS)
        .map(|i| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let noise = ((seed >> 33) as f64 / f64::from(1u32 << 31)) - 0.5;
            let t = start + i as i64 * 300;
            let hour = (t % 86_400) as f64 / 3600.0;
            let kw = 800.0 + 400.0 * (0.5 - 0.5 * ((hour - 3.0) / 24.0 * std::f64::consts::TAU).cos());
            // Whole mWh, as a utility's Wh with three decimals.
            let wh = ((kw * (1.0 + 0.06 * noise)) * 1000.0 / 12.0 * 1000.0).round() / 1000.0;
            let quality = if i % 211 == 210 {
                Quality::Missing
            } else if i % 97 == 96 {
                Quality::Estimated
            } else {
                Quality::Measured
            };
            Reading {
                start: DateTime::from_timestamp(t, 0).expect("in range"),
                duration_s: 300,
                value: (quality != Quality::Missing).then_some(wh),
                unit: Unit::Wh,
                quality,
                source: None,
            }
        })
        .collect()
}

fn plain_xml(bytes: &[u8]) -> usize {
    let mut reader = quick_xml::Reader::from_reader(bytes);
    let mut buf = Vec::new();
    let mut elements = 0;
    loop {
        match reader.read_event_into(&mut buf) {
            Ok(quick_xml::events::Event::Start(_) | quick_xml::events::Event::Empty(_)) => elements += 1,
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("plain read: {e}"),
        }
        buf.clear();
    }
    elements
}

fn plain_csv(mut bytes: &[u8]) -> usize {
    let mut line = Vec::new();
    let mut fields = 0;
    loop {
        line.clear();
        match bytes.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => panic!("plain read: {e}"),
        }
        fields += std::str::from_utf8(&line).expect("UTF-8").split(',').count();
    }
    fields
}

fn bench_import(c: &mut Criterion) {
    let readings = year();
    let updated = DateTime::from_timestamp(1_767_225_600, 0).expect("in range");
    let mut xml = Vec::new();
    write_espi(
        &mut xml,
        &readings,
        &EspiMeta::new("urn:bench:year", "A year of 5-minute data", updated),
    )
    .expect("export");
    let mut csv = Vec::new();
    write_csv(&mut csv, &readings).expect("export");
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("year.xml");
    std::fs::write(&path, &xml).expect("write the feed");

    // Check once, outside the timed loops, that both imports give the year back.
    let limits = Limits::default();
    let espi = import_espi(&xml[..], &limits).expect("the feed imports");
    assert_eq!(espi.readings, readings);
    let from_csv = import_csv(&csv[..], &limits).expect("the CSV imports");
    assert_eq!(from_csv.readings, readings);
    assert!(plain_xml(&xml) > INTERVALS * 4);
    assert_eq!(plain_csv(&csv), (INTERVALS + 1) * 4);
    eprintln!(
        "greenbutton bench input: {} intervals; feed {} bytes, CSV {} bytes",
        readings.len(),
        xml.len(),
        csv.len()
    );

    let mut group = c.benchmark_group("greenbutton_year_5min");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Bytes(xml.len() as u64));
    group.bench_function("espi_import", |b| {
        b.iter(|| import_espi(black_box(&xml[..]), &limits).map(|i| i.readings.len()))
    });
    group.bench_function("espi_import_file", |b| {
        b.iter(|| import_espi_file(black_box(&path), &limits).map(|i| i.readings.len()))
    });
    group.bench_function("espi_plain_quick_xml", |b| b.iter(|| plain_xml(black_box(&xml))));
    group.throughput(Throughput::Bytes(csv.len() as u64));
    group.bench_function("csv_import", |b| {
        b.iter(|| import_csv(black_box(&csv[..]), &limits).map(|i| i.readings.len()))
    });
    group.bench_function("csv_plain", |b| b.iter(|| plain_csv(black_box(&csv))));
    group.finish();
}

criterion_group!(benches, bench_import);
criterion_main!(benches);
