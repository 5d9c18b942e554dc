//! The CSV format: what it accepts (the README's spec) and each refusal, named by line and
//! column.
// Test helpers outside #[test] functions unwrap too: a failure is the test's failure.
#![allow(clippy::unwrap_used)]

use std::time::Instant;

use flexgate_greenbutton::{ImportError, Limits, Quality, Reason, Unit, import_csv, import_csv_file};

const GOOD: &str = "interval_end,interval_minutes,kwh,quality,source\n\
2026-07-01T00:15:00-04:00,15,12.5,measured,utility\n\
2026-07-01T00:30:00-04:00,15,0.75,estimated,utility\n\
2026-07-01T00:45:00-04:00,15,,missing,\n\
2026-07-01T01:15:00-04:00,15,3,measured,gateway\n";

fn refuse(text: &str) -> ImportError {
    match import_csv(text.as_bytes(), &Limits::default()) {
        Ok(got) => panic!("accepted {} rows of a bad file", got.readings.len()),
        Err(e) => e,
    }
}

#[test]
fn the_documented_format_reads() {
    let got = import_csv(GOOD.as_bytes(), &Limits::default()).unwrap();
    assert_eq!((got.unit, got.interval_s, got.readings.len()), (Unit::Wh, 900, 4));
    let r = &got.readings[0];
    // 00:15 at -04:00 ends the interval 04:00–04:15 UTC.
    assert_eq!(r.start.to_rfc3339(), "2026-07-01T04:00:00+00:00");
    assert_eq!(r.value, Some(12_500.0));
    assert_eq!(got.readings[1].value, Some(750.0));
    assert_eq!(got.readings[1].quality, Quality::Estimated);
    assert_eq!(
        (got.readings[2].value, got.readings[2].quality),
        (None, Quality::Missing)
    );
    assert_eq!(got.readings[2].source, None);
    assert_eq!(got.readings[3].source.as_deref(), Some("gateway"));
    // One string per label, shared.
    assert!(std::sync::Arc::ptr_eq(
        got.readings[0].source.as_ref().unwrap(),
        got.readings[1].source.as_ref().unwrap()
    ));
    // Column order is free, CRLF, a BOM, blanks around fields and blank lines are fine; kW too.
    let other = "\u{feff}quality, kw ,interval_minutes,interval_end\r\nmeasured, 1.5 ,5,2026-07-01T00:05:00Z\r\n\r\nmeasured,2,5,2026-07-01T00:10:00Z";
    let got = import_csv(other.as_bytes(), &Limits::default()).unwrap();
    assert_eq!((got.unit, got.readings.len()), (Unit::W, 2));
    assert_eq!(got.readings[0].value, Some(1500.0));
}

#[test]
fn non_utf8_is_refused_naming_the_line_and_byte() {
    let mut bytes = GOOD.as_bytes().to_vec();
    let line3 = GOOD.match_indices('\n').nth(1).unwrap().0 + 1;
    bytes[line3 + 30] = 0xE9; // a Latin-1 é
    let e = import_csv(&bytes[..], &Limits::default()).unwrap_err();
    assert_eq!(e.line, Some(3));
    assert_eq!(
        e.reason,
        Reason::NotUtf8 {
            byte: (line3 + 30) as u64,
            in_line: Some(31)
        }
    );
    assert!(e.to_string().contains("byte 31 of its line"), "{e}");
}

#[test]
fn bad_rows_are_refused_naming_the_line_and_column() {
    let row = |r: &str| format!("interval_end,interval_minutes,kwh,quality\n2026-07-01T00:15:00Z,15,1,measured\n{r}\n");
    let cases = [
        ("2026-07-01T00:30:00,15,1,measured", "interval_end", 1, "RFC 3339"),
        ("2026-07-01 00:30,15,1,measured", "interval_end", 1, "RFC 3339"),
        (
            "2026-07-01T00:30:00.5Z,15,1,measured",
            "interval_end",
            1,
            "whole second",
        ),
        (
            "2026-07-01T00:30:00Z,fifteen,1,measured",
            "interval_minutes",
            2,
            "minutes",
        ),
        (
            "2026-07-01T00:30:00Z,-15,1,measured",
            "interval_minutes",
            2,
            "negative duration",
        ),
        (
            "2026-07-01T00:30:00Z,0,1,measured",
            "interval_minutes",
            2,
            "zero duration",
        ),
        ("2026-07-01T00:30:00Z,15,-1,measured", "kwh", 3, "negative"),
        ("2026-07-01T00:30:00Z,15,NaN,measured", "kwh", 3, "finite"),
        ("2026-07-01T00:30:00Z,15,1e3,measured", "kwh", 3, "plain decimal"),
        (
            "2026-07-01T00:30:00Z,15,1,good",
            "quality",
            4,
            "measured, estimated or missing",
        ),
        ("2026-07-01T00:30:00Z,15,,measured", "kwh", 3, "needs a figure"),
        (
            "2026-07-01T00:30:00Z,15,2,missing",
            "kwh",
            3,
            "must leave the figure empty",
        ),
        ("2026-07-01T00:30:00Z,15,\"1\",measured", "kwh", 3, "quoted"),
        (
            "2026-07-01T00:30:00Z,15,99999999,measured",
            "kwh",
            3,
            "kWh written as Wh?",
        ),
    ];
    for (r, element, column, why) in cases {
        let e = refuse(&row(r));
        assert_eq!(
            (e.element.as_str(), e.line, e.column),
            (element, Some(3), Some(column)),
            "{r}: {e}"
        );
        assert!(e.to_string().contains(why), "{r}: {e}");
    }
    let e = refuse(&row("2026-07-01T00:30:00Z,15,1"));
    assert_eq!((e.element.as_str(), e.line), ("row", Some(3)));
    assert_eq!(e.reason, Reason::FieldCount { got: 3, expected: 4 });
}

#[test]
fn overlapping_out_of_order_and_mixed_lengths_are_refused() {
    let head = "interval_end,interval_minutes,kwh,quality\n2026-07-01T01:00:00Z,15,1,measured\n";
    let e = refuse(&format!("{head}2026-07-01T01:10:00Z,15,1,measured\n"));
    assert!(matches!(e.reason, Reason::Overlap { .. }), "{e}");
    assert_eq!((e.element.as_str(), e.line), ("interval_end", Some(3)));
    let e = refuse(&format!("{head}2026-07-01T00:30:00Z,15,1,measured\n"));
    assert!(matches!(e.reason, Reason::OutOfOrder { .. }), "{e}");
    let e = refuse(&format!("{head}2026-07-01T01:05:00Z,5,1,measured\n"));
    assert!(
        matches!(
            e.reason,
            Reason::Length {
                got_s: 300,
                expected_s: 900,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.line, Some(3));
}

#[test]
fn header_problems_are_named() {
    for (h, why) in [
        ("2026-07-01T00:15:00Z,15,1,measured", "unknown column"),
        ("interval_end,interval_minutes,kwh", "no quality column"),
        ("interval_end,interval_minutes,kwh,kw,quality", "both present"),
        ("interval_end,interval_minutes,quality", "neither a kwh nor a kw"),
        ("interval_end,interval_minutes,kwh,quality,kwh", "appears twice"),
        ("interval_end,interval_minutes,kWh,quality", "unknown column"),
    ] {
        let e = refuse(&format!("{h}\n2026-07-01T00:15:00Z,15,1,measured\n"));
        assert_eq!((e.element.as_str(), e.line), ("header", Some(1)), "{h}");
        assert!(e.to_string().contains(why), "{h}: {e}");
    }
    assert!(matches!(refuse("").reason, Reason::Missing { .. }));
    assert_eq!(
        refuse("interval_end,interval_minutes,kwh,quality\n").reason,
        Reason::NoReadings
    );
}

#[test]
fn limits_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.csv");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(2 * 1024 * 1024 * 1024)
        .unwrap();
    let t = Instant::now();
    let e = import_csv_file(&path, &Limits::default()).unwrap_err();
    assert!(t.elapsed().as_millis() < 500);
    assert!(matches!(e.reason, Reason::TooLarge { .. }), "{e}");
    let long = format!(
        "interval_end,interval_minutes,kwh,quality,source\n2026-07-01T00:15:00Z,15,1,measured,{}\n",
        "x".repeat(100_000)
    );
    let e = refuse(&long);
    assert!(matches!(e.reason, Reason::TokenTooLong { .. }), "{e}");
    assert_eq!(e.line, Some(2));
    let few = Limits {
        max_readings: 2,
        ..Limits::default()
    };
    let e = import_csv(GOOD.as_bytes(), &few).unwrap_err();
    assert_eq!(
        (e.line, e.reason.clone()),
        (Some(4), Reason::TooManyReadings { limit: 2 })
    );
    let label = format!(
        "interval_end,interval_minutes,kwh,quality,source\n2026-07-01T00:15:00Z,15,1,measured,{}\n",
        "y".repeat(65)
    );
    assert_eq!(refuse(&label).element, "source");
}
