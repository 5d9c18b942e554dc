use super::*;
use crate::ledger::{Ledger, NewRecord};
use chrono::{DateTime, Duration, TimeZone, Utc};
use flexgate_policies::control::entry::{Entry, MeterSample, Recorded};
use flexgate_policies::intervals::{Interval, IntervalQuality, IntervalSource};
use flexgate_policies::meter::Quality;

fn t(d: u32, h: u32, m: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 7, d, h, m, 0).single().expect("valid")
}

fn imported(end: DateTime<Utc>, minutes: i64, kw: Option<f64>) -> Interval {
    Interval {
        start: end - Duration::minutes(minutes),
        end,
        kw,
        quality: if kw.is_some() {
            IntervalQuality::Measured
        } else {
            IntervalQuality::Missing
        },
        samples: 0,
        source: IntervalSource::Imported("utility.xml".into()),
    }
}

fn sample(at: DateTime<Utc>, kw: f64, quality: Quality) -> NewRecord {
    NewRecord::from(Recorded::new(
        Entry::MeterSample(MeterSample {
            at,
            meter_kw: kw,
            meter_quality: Some(quality),
            gpu_board_w: 0.0,
            ceiling_kw: None,
            events: vec![],
            gpu_budget_w: None,
            trim_w: 0.0,
        }),
        None,
    ))
}

/// The gateway's intervals come from the ledger's samples, resume where they stopped (an open
/// interval is written once, whole), and say how they were obtained.
#[tokio::test]
async fn the_gateways_intervals_are_derived_from_the_ledger_and_resume() {
    let dir = tempfile::tempdir().expect("dir");
    let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
    let store = IntervalStore::open(dir.path(), true).expect("store");
    // 10:00–10:05: a reading every second, all measured, at 100 kW.
    let mut records: Vec<NewRecord> = (1..=300)
        .map(|s| sample(t(1, 10, 0) + Duration::seconds(s), 100.0, Quality::Measured))
        .collect();
    // 10:05–10:10: half the readings, the first of them stale (a model's 150 kW).
    records.extend((1..=150).map(|s| {
        let q = if s < 10 { Quality::Stale } else { Quality::Measured };
        let kw = if s < 10 { 150.0 } else { 120.0 };
        sample(t(1, 10, 5) + Duration::seconds(s * 2), kw, q)
    }));
    ledger.append_all(records).await.expect("append");
    assert_eq!(
        store.catch_up(&ledger.reader()).expect("catch up"),
        1,
        "the open interval waits"
    );
    // The next interval's first reading closes the second; catching up again re-reads only it.
    ledger
        .append_all(vec![sample(
            t(1, 10, 10) + Duration::seconds(1),
            90.0,
            Quality::Measured,
        )])
        .await
        .expect("append");
    assert_eq!(store.catch_up(&ledger.reader()).expect("catch up"), 1);
    assert_eq!(store.catch_up(&ledger.reader()).expect("idempotent"), 0);
    let got = store.gateway(t(1, 10, 0), t(1, 10, 10)).expect("read");
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].quality, IntervalQuality::Measured);
    assert_eq!((got[0].kw, got[0].samples), (Some(100.0), 300));
    assert_eq!(
        got[1].quality,
        IntervalQuality::Estimated,
        "a stale feed and too few readings"
    );
    assert_eq!((got[1].kw, got[1].samples), (Some(120.0), 150));
    ledger.close().await.expect("close");
}

/// Imported intervals take precedence for settlement; the gateway's fill the gaps at the
/// imported length; a re-import replaces; another length over the same times is refused; the
/// integrity check finds an imported figure the gateway's readings disagree with.
#[tokio::test]
async fn imports_take_precedence_and_disagreements_are_reported() {
    let dir = tempfile::tempdir().expect("dir");
    let store = IntervalStore::open(dir.path(), true).expect("store");
    // The gateway's own 5-minute intervals, 10:00–11:00, measured at 100 kW.
    for k in 1..=12 {
        let end = t(2, 10, 0) + Duration::minutes(5 * k);
        let mut i = imported(end, 5, Some(100.0));
        i.source = IntervalSource::Gateway;
        i.samples = 300;
        store.put_gateway(&i).expect("put");
    }
    // The utility's 15-minute data for 10:00–10:45 (10:30–10:45 reads 130 kW).
    let data = vec![
        imported(t(2, 10, 15), 15, Some(101.0)),
        imported(t(2, 10, 30), 15, Some(99.0)),
        imported(t(2, 10, 45), 15, Some(130.0)),
    ];
    let meta = import::ImportMeta {
        source: "utility.xml".into(),
        format: "green_button",
        sha256: "00".into(),
        bytes: 1,
        at: t(3, 0, 0),
    };
    let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
    let summary = store.check_import(&data).expect("import");
    assert_eq!((summary.intervals, summary.replaced, summary.length_s), (3, 0, 900));
    let records = import::records(&data, &summary, &meta);
    ledger
        .append_all(records.into_iter().map(NewRecord::from).collect())
        .await
        .expect("recorded");
    store.catch_up(&ledger.reader()).expect("folded");
    let again = store.check_import(&data).expect("a re-import");
    assert_eq!(again.replaced, 3);
    let series = store.settlement_series(t(2, 10, 0), t(2, 11, 0)).expect("series");
    let got: Vec<(DateTime<Utc>, Option<f64>, bool)> = series
        .intervals()
        .iter()
        .map(|i| (i.end, i.kw, matches!(i.source, IntervalSource::Imported(_))))
        .collect();
    assert_eq!(
        got,
        vec![
            (t(2, 10, 15), Some(101.0), true),
            (t(2, 10, 30), Some(99.0), true),
            (t(2, 10, 45), Some(130.0), true),
            (t(2, 11, 0), Some(100.0), false),
        ]
    );
    assert_eq!(series.intervals()[3].quality, IntervalQuality::Measured);
    // Five-minute data over the same times: refused, nothing stored.
    let five = store.check_import(&[imported(t(2, 10, 5), 5, Some(1.0))]);
    assert!(
        matches!(five, Err(StoreError::Invalid(ref m)) if m.contains("another interval length")),
        "{five:?}"
    );
    // Overlapping or out of order: refused.
    assert!(
        store
            .check_import(&[
                imported(t(2, 12, 30), 15, Some(1.0)),
                imported(t(2, 12, 15), 15, Some(1.0))
            ])
            .is_err()
    );
    // Not labelled imported: refused.
    let mut own = imported(t(2, 13, 0), 15, Some(1.0));
    own.source = IntervalSource::Gateway;
    assert!(store.check_import(&[own]).is_err());
    let check = store.compare(t(2, 10, 0), t(2, 11, 0), 0.02).expect("compare");
    assert_eq!(check.compared, 3);
    assert_eq!(check.disagreements.len(), 1);
    assert_eq!(check.disagreements[0].end, t(2, 10, 45));
    assert!((check.disagreements[0].share - (100.0 - 130.0) / 130.0).abs() < 1e-12);
    ledger.close().await.expect("close");
}

/// Past the retention of 5-minute intervals they are folded into 15-minute ones, which still
/// read back through `gateway`.
#[test]
fn old_five_minute_intervals_compact_to_fifteen() {
    let dir = tempfile::tempdir().expect("dir");
    let store = IntervalStore::open(dir.path(), true).expect("store");
    for (k, kw) in [(1, 90.0), (2, 100.0), (3, 110.0), (4, 50.0)] {
        let mut i = imported(t(1, 0, 0) + Duration::minutes(5 * k), 5, Some(kw));
        i.source = IntervalSource::Gateway;
        i.samples = 300;
        store.put_gateway(&i).expect("put");
    }
    let folded = store
        .compact(t(1, 0, 0) + Duration::days(KEEP_5MIN_DAYS + 1))
        .expect("compact");
    assert_eq!(folded, 4);
    let got = store.gateway(t(1, 0, 0), t(1, 1, 0)).expect("read");
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[0].kw, got[0].quality, got[0].samples),
        (Some(100.0), IntervalQuality::Measured, 900)
    );
    assert_eq!(
        got[1].quality,
        IntervalQuality::Estimated,
        "one of three: not a whole interval"
    );
    assert!(IntervalStore::open(&dir.path().join("nothing"), false).is_err());
}
