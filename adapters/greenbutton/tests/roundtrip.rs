//! Export then import gives the same intervals: Green Button exactly for values in whole
//! milliwatt-hours (the export's stated multiplier, 10^-3), CSV exactly for every value; and an
//! export refuses, before writing, what is not one series.
// Test helpers outside #[test] functions unwrap too: a failure is the test's failure.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use chrono::{DateTime, Utc};
use flexgate_greenbutton::{
    EXPORT_MULTIPLIER, EspiMeta, ExportError, Limits, Quality, Reading, Unit, import_csv, import_espi, write_csv,
    write_espi,
};
use proptest::prelude::*;

fn t(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(s, 0).unwrap()
}

fn meta() -> EspiMeta {
    EspiMeta::new("urn:test:export", "test & <export>", t(1_782_864_000))
}

/// A series: `minutes`-long intervals from `start`, with gaps, qualities and values drawn.
fn series(
    unit: Unit,
    minutes: u32,
    start: i64,
    steps: Vec<(u8, u8, u64)>,
    fractional: bool,
    sources: bool,
) -> Vec<Reading> {
    let mut at = start;
    let labels: [Arc<str>; 2] = [Arc::from("utility"), Arc::from("gateway meter")];
    steps
        .into_iter()
        .map(|(gap, q, v)| {
            at += i64::from(gap % 3) * i64::from(minutes) * 60;
            let quality = match q % 5 {
                0 => Quality::Missing,
                1 => Quality::Estimated,
                _ => Quality::Measured,
            };
            // Whole milliunits for Green Button; any double for CSV.
            let value = if fractional { v as f64 / 7.0 } else { v as f64 / 1000.0 };
            let r = Reading {
                start: t(at),
                duration_s: minutes * 60,
                value: (quality != Quality::Missing).then_some(value),
                unit,
                quality,
                source: (sources && q % 2 == 0).then(|| labels[usize::from(q % 4 / 2)].clone()),
            };
            at += i64::from(minutes) * 60;
            r
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn green_button_round_trips(
        wh in any::<bool>(),
        minutes in prop::sample::select(vec![1u32, 5, 15, 30, 60]),
        start in 0i64..4_000_000_000,
        steps in prop::collection::vec((any::<u8>(), any::<u8>(), 0u64..10_000_000_000), 1..300),
        block_s in prop::sample::select(vec![3600u32, 86_400, 7 * 86_400]),
    ) {
        let unit = if wh { Unit::Wh } else { Unit::W };
        let start = start - start % 60;
        let readings = series(unit, minutes, start, steps, false, false);
        let mut meta = meta();
        meta.block_s = block_s;
        let mut xml = Vec::new();
        write_espi(&mut xml, &readings, &meta).unwrap();
        let back = import_espi(&xml[..], &Limits::default()).unwrap();
        prop_assert_eq!(&back.readings, &readings);
        prop_assert_eq!(back.reading_type.power_of_ten_multiplier, EXPORT_MULTIPLIER);
        prop_assert_eq!(back.reading_type.unit, unit);
        prop_assert_eq!(back.reading_type.interval_length_s, minutes * 60);
    }

    #[test]
    fn csv_round_trips_every_double(
        wh in any::<bool>(),
        minutes in 1u32..=1440,
        start in 0i64..4_000_000_000,
        steps in prop::collection::vec((any::<u8>(), any::<u8>(), 0u64..u64::MAX / 4), 1..300),
        sources in any::<bool>(),
    ) {
        let unit = if wh { Unit::Wh } else { Unit::W };
        let start = start - start % 60;
        let mut readings = series(unit, minutes, start, steps, true, sources);
        // Stay under the absurd-demand bound of the import (10 GW), even over one minute.
        for r in &mut readings {
            if let Some(v) = r.value.as_mut() {
                *v %= 1e6;
            }
        }
        let mut csv = Vec::new();
        write_csv(&mut csv, &readings).unwrap();
        let back = import_csv(&csv[..], &Limits::default()).unwrap();
        prop_assert_eq!(back.unit, unit);
        prop_assert_eq!(&back.readings, &readings);
    }
}

#[test]
fn the_export_is_an_atom_feed_with_the_stated_multiplier() {
    let readings = series(
        Unit::Wh,
        15,
        1_782_864_000,
        vec![(0, 2, 1_234_567), (0, 1, 5), (0, 0, 0)],
        false,
        false,
    );
    let mut xml = Vec::new();
    write_espi(&mut xml, &readings, &meta()).unwrap();
    let text = String::from_utf8(xml).unwrap();
    for needle in [
        r#"<feed xmlns="http://www.w3.org/2005/Atom" xmlns:espi="http://naesb.org/espi">"#,
        "<title>test &amp; &lt;export&gt;</title>",
        "<author><name>flexgate</name></author>",
        "<espi:powerOfTenMultiplier>-3</espi:powerOfTenMultiplier><espi:uom>72</espi:uom>",
        "<espi:value>1234567</espi:value>",
        "<espi:ReadingQuality><espi:quality>8</espi:quality></espi:ReadingQuality><espi:timePeriod>",
        "<espi:timePeriod><espi:duration>900</espi:duration><espi:start>1782865800</espi:start></espi:timePeriod></espi:IntervalReading>",
    ] {
        assert!(text.contains(needle), "{needle} not in\n{text}");
    }
}

#[test]
fn exports_refuse_what_is_not_one_series() {
    let good = series(Unit::Wh, 15, 1_782_864_000, vec![(0, 2, 1), (0, 2, 2)], false, false);
    let mut bad = good.clone();
    bad[1].start = bad[0].start;
    let mut sink = Vec::new();
    assert!(matches!(
        write_espi(&mut sink, &bad, &meta()),
        Err(ExportError::Reading { index: 1, .. })
    ));
    assert!(sink.is_empty(), "nothing written");
    let mut bad = good.clone();
    bad[1].unit = Unit::W;
    assert!(matches!(
        write_csv(&mut sink, &bad),
        Err(ExportError::Reading { index: 1, .. })
    ));
    let mut bad = good.clone();
    bad[0].value = Some(f64::NAN);
    assert!(matches!(
        write_csv(&mut sink, &bad),
        Err(ExportError::Reading { index: 0, .. })
    ));
    let mut bad = good.clone();
    bad[0].quality = Quality::Missing;
    assert!(matches!(
        write_espi(&mut sink, &bad, &meta()),
        Err(ExportError::Reading { index: 0, .. })
    ));
    let mut bad = good.clone();
    bad[1].duration_s = 300;
    assert!(matches!(
        write_espi(&mut sink, &bad, &meta()),
        Err(ExportError::Reading { index: 1, .. })
    ));
    let odd: Vec<Reading> = good
        .iter()
        .map(|r| Reading {
            duration_s: 90,
            ..r.clone()
        })
        .collect();
    assert!(matches!(
        write_csv(&mut sink, &odd),
        Err(ExportError::Reading { index: 0, .. })
    ));
    let mut bad = good.clone();
    bad[0].source = Some(Arc::from("a,b"));
    assert!(matches!(
        write_csv(&mut sink, &bad),
        Err(ExportError::Reading { index: 0, .. })
    ));
    let mut net = meta();
    net.flow_direction = 19;
    assert!(matches!(
        write_espi(&mut sink, &good, &net),
        Err(ExportError::Options(_))
    ));
    assert!(sink.is_empty(), "nothing written");
}
