//! Small Green Button documents for the tests, built from parts so each test changes one thing.
// Test helpers unwrap: a failure is the test's failure.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

/// 2026-07-01T00:00:00Z.
pub const T0: i64 = 1_782_864_000;

/// A usable ReadingType's fields (Wh, 15 minutes, multiplier 0), to be edited by replacing one.
pub const RT: &str = "<espi:accumulationBehaviour>4</espi:accumulationBehaviour>\
<espi:commodity>1</espi:commodity>\
<espi:flowDirection>1</espi:flowDirection>\
<espi:intervalLength>900</espi:intervalLength>\
<espi:kind>12</espi:kind>\
<espi:powerOfTenMultiplier>0</espi:powerOfTenMultiplier>\
<espi:uom>72</espi:uom>";

/// One reading, on its own line.
pub fn reading(start: i64, duration: i64, value: &str) -> String {
    format!(
        "<espi:IntervalReading><espi:timePeriod><espi:duration>{duration}</espi:duration><espi:start>{start}</espi:start></espi:timePeriod><espi:value>{value}</espi:value></espi:IntervalReading>\n"
    )
}

/// `n` consecutive 15-minute readings from `start`, each `value`.
pub fn readings(start: i64, n: i64, value: u64) -> String {
    (0..n)
        .map(|i| reading(start + i * 900, 900, &value.to_string()))
        .collect()
}

/// A block entry: interval [start, start + duration], then the readings.
pub fn block(start: i64, duration: i64, readings: &str) -> String {
    format!(
        "<entry><id>urn:test:ib-{start}</id><link rel=\"self\" href=\"UsagePoint/1/MeterReading/1/IntervalBlock/{start}\"/><link rel=\"up\" href=\"UsagePoint/1/MeterReading/1/IntervalBlock\"/><title>block</title><updated>2026-07-02T00:00:00Z</updated><content>\n<espi:IntervalBlock>\n<espi:interval><espi:duration>{duration}</espi:duration><espi:start>{start}</espi:start></espi:interval>\n{readings}</espi:IntervalBlock>\n</content></entry>\n"
    )
}

/// A feed: the UsagePoint, the MeterReading, its ReadingType with `rt`, then `blocks`. The
/// first block entry starts on line 12.
pub fn feed(rt: &str, blocks: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom" xmlns:espi="http://naesb.org/espi">
<id>urn:test:feed</id><title>test</title><updated>2026-07-02T00:00:00Z</updated>
<entry><id>urn:test:up</id><link rel="self" href="UsagePoint/1"/><title>up</title><updated>2026-07-02T00:00:00Z</updated>
<content><espi:UsagePoint><espi:ServiceCategory><espi:kind>0</espi:kind></espi:ServiceCategory></espi:UsagePoint></content></entry>
<entry><id>urn:test:mr</id><link rel="self" href="UsagePoint/1/MeterReading/1"/><link rel="related" href="UsagePoint/1/MeterReading/1/IntervalBlock"/><link rel="related" href="ReadingType/1"/><title>mr</title><updated>2026-07-02T00:00:00Z</updated>
<content><espi:MeterReading/></content></entry>
<entry><id>urn:test:rt</id><link rel="self" href="ReadingType/1"/><title>rt</title><updated>2026-07-02T00:00:00Z</updated>
<content>
<espi:ReadingType>{rt}</espi:ReadingType>
</content></entry>
{blocks}</feed>
"#
    )
}

/// A good feed: one block of a day's 96 readings of 250 Wh.
pub fn good() -> String {
    feed(RT, &block(T0, 86_400, &readings(T0, 96, 250)))
}

/// The 1-based line of the first occurrence of `needle` in `doc`.
pub fn line_of(doc: &str, needle: &str) -> u64 {
    let at = doc
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} not in the document"));
    doc[..at].matches('\n').count() as u64 + 1
}

/// The Python writer.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/write_espi.py")
}

/// Runs the Python writer with `args` into `out`, returning its JSON summary.
pub fn write_espi(out: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let output = Command::new("python3")
        .arg(script())
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "write_espi.py {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("the summary is JSON")
}
