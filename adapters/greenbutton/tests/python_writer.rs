//! Green Button files written by an independent tool (`write_espi.py`: Python's standard
//! library, from the ESPI schema) import to exactly what the tool says it wrote: counts, every
//! value in Wh after the multiplier, every quality, the times, the zone and the ReadingType.
// Test helpers outside #[test] functions unwrap too: a failure is the test's failure.
#![allow(clippy::unwrap_used)]

mod common;

use chrono::DateTime;
use flexgate_greenbutton::{
    EspiMeta, Limits, Quality, Unit, import_csv, import_espi, import_espi_file, import_espi_selecting, write_csv,
    write_espi,
};
use serde_json::Value;

fn check_against_summary(got: &flexgate_greenbutton::EspiImport, summary: &Value) {
    let n = summary["readings"].as_u64().unwrap() as usize;
    assert_eq!(got.readings.len(), n);
    let step = summary["interval_s"].as_u64().unwrap();
    assert_eq!(u64::from(got.reading_type.interval_length_s), step);
    assert_eq!(
        i64::from(got.reading_type.power_of_ten_multiplier),
        summary["multiplier"].as_i64().unwrap()
    );
    assert_eq!(got.reading_type.unit, Unit::Wh);
    assert_eq!(
        got.readings[0].start.timestamp(),
        summary["first_start"].as_i64().unwrap()
    );
    assert_eq!(
        got.readings[n - 1].end().timestamp(),
        summary["last_end"].as_i64().unwrap()
    );
    let count = |q: Quality| got.readings.iter().filter(|r| r.quality == q).count() as u64;
    assert_eq!(count(Quality::Measured), summary["measured"].as_u64().unwrap());
    assert_eq!(count(Quality::Estimated), summary["estimated"].as_u64().unwrap());
    assert_eq!(count(Quality::Missing), summary["missing"].as_u64().unwrap());
    let wh = summary["wh"].as_array().expect("--dump");
    let quality = summary["quality"].as_array().expect("--dump");
    for (i, r) in got.readings.iter().enumerate() {
        // Exact: both sides scale the same integer by the same power of ten, correctly rounded.
        assert_eq!(r.value, wh[i].as_f64(), "reading {i} at {}", r.start);
        assert_eq!(r.quality.as_str(), quality[i].as_str().unwrap(), "reading {i}");
        assert_eq!(r.duration_s as u64, step);
        assert_eq!(
            r.start.timestamp(),
            summary["first_start"].as_i64().unwrap() + (i as i64) * step as i64
        );
    }
    let sum: f64 = got.readings.iter().filter_map(|r| r.value).sum();
    let expected = summary["sum_wh"].as_f64().unwrap();
    assert!((sum - expected).abs() <= 1e-9 * expected, "sum {sum} vs {expected}");
}

#[test]
fn sixty_days_of_five_minute_data_import_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("60d.xml");
    let summary = common::write_espi(
        &path,
        &[
            "--days",
            "60",
            "--interval-minutes",
            "5",
            "--multiplier",
            "-3",
            "--dump",
        ],
    );
    assert_eq!(summary["readings"], 17_280);
    let got = import_espi_file(&path, &Limits::default()).unwrap();
    check_against_summary(&got, &summary);
    assert!(summary["estimated"].as_u64().unwrap() > 100 && summary["missing"].as_u64().unwrap() > 50);
    let lt = got.local_time.as_ref().expect("LocalTimeParameters");
    assert_eq!((lt.tz_offset_s, lt.dst_offset_s), (Some(-18000), Some(3600)));
    assert_eq!(lt.dst_start_rule.as_deref(), Some("360E2000"));
    assert_eq!(got.reading_type.currency, Some(840));
    assert_eq!(got.service_kind, Some(0));
    assert!(got.meter_reading.as_deref().unwrap().ends_with("/MeterReading/01"));
    assert!(got.skipped.is_empty());
}

#[test]
fn every_multiplier_the_writer_uses_scales_exactly() {
    let dir = tempfile::tempdir().unwrap();
    for (m, minutes) in [("0", "15"), ("3", "60"), ("-2", "15"), ("1", "5")] {
        let path = dir.path().join(format!("m{m}.xml"));
        let summary = common::write_espi(
            &path,
            &[
                "--days",
                "3",
                "--interval-minutes",
                minutes,
                "--multiplier",
                m,
                "--seed",
                m,
                "--dump",
            ],
        );
        let got = import_espi_file(&path, &Limits::default()).unwrap_or_else(|e| panic!("multiplier {m}: {e}"));
        check_against_summary(&got, &summary);
    }
}

#[test]
fn entry_order_does_not_matter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocks-first.xml");
    let summary = common::write_espi(&path, &["--days", "2", "--order", "blocks-first", "--dump"]);
    let got = import_espi_file(&path, &Limits::default()).unwrap();
    check_against_summary(&got, &summary);
}

#[test]
fn a_second_meter_the_site_cannot_use_is_skipped_and_said_to_be() {
    let dir = tempfile::tempdir().unwrap();
    for (what, why) in [("gas", "commodity 7"), ("received", "flowDirection 19")] {
        let path = dir.path().join(format!("{what}.xml"));
        let summary = common::write_espi(&path, &["--days", "2", "--second-meter", what, "--dump"]);
        let got = import_espi_file(&path, &Limits::default()).unwrap();
        check_against_summary(&got, &summary);
        assert_eq!(got.skipped.len(), 1, "{what}");
        assert!(
            got.skipped[0]
                .meter_reading
                .as_deref()
                .unwrap()
                .ends_with("/MeterReading/02")
        );
        assert!(got.skipped[0].reason.contains(why), "{}", got.skipped[0].reason);
    }
}

#[test]
fn two_usable_meters_need_a_choice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two.xml");
    // The "received" meter made usable by editing its flowDirection to forward: now both are.
    common::write_espi(&path, &["--days", "1", "--second-meter", "received"]);
    let xml = std::fs::read_to_string(&path).unwrap().replace(
        "<espi:flowDirection>19</espi:flowDirection>",
        "<espi:flowDirection>1</espi:flowDirection>",
    );
    let e = import_espi(xml.as_bytes(), &Limits::default()).unwrap_err();
    assert_eq!(e.element, "MeterReading");
    assert!(e.to_string().contains("2 usable MeterReadings"), "{e}");
    let one = import_espi_selecting(xml.as_bytes(), &Limits::default(), "MeterReading/02").unwrap();
    assert_eq!(one.readings.len(), 288);
    assert!(one.meter_reading.unwrap().ends_with("/MeterReading/02"));
    let other = import_espi_selecting(xml.as_bytes(), &Limits::default(), "MeterReading/01").unwrap();
    assert_eq!(other.readings.len(), 288);
}

#[test]
fn the_writers_file_round_trips_through_both_exports() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rt.xml");
    common::write_espi(&path, &["--days", "7", "--multiplier", "-1"]);
    let first = import_espi_file(&path, &Limits::default()).unwrap();
    let updated = DateTime::from_timestamp(common::T0, 0).unwrap();
    let mut meta = EspiMeta::new("urn:test:export", "export", updated);
    meta.local_time = first.local_time.clone();
    let mut xml = Vec::new();
    write_espi(&mut xml, &first.readings, &meta).unwrap();
    let again = import_espi(&xml[..], &Limits::default()).unwrap();
    assert_eq!(again.readings, first.readings);
    assert_eq!(again.local_time, first.local_time);
    let mut csv = Vec::new();
    write_csv(&mut csv, &first.readings).unwrap();
    let from_csv = import_csv(&csv[..], &Limits::default()).unwrap();
    assert_eq!(from_csv.readings, first.readings);
}
