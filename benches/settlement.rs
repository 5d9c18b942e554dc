//! Settlement benchmarks (issue 32): the utility's data into the gateway, and a season's report.
//!
//! - `meter_import/year_5min/flexgate`: a year of 5-minute Green Button data (105,120 intervals,
//!   about 20 MB of ESPI XML) imported as `flexgate meter import` does it: parsed and checked,
//!   recorded in the ledger with its intervals (26 `meter_imported` records), folded into the
//!   interval store. Against `meter_import/year_5min/parse_only`, the Green Button parse alone
//!   of the same bytes, in the same run: the ratio is what recording and storing cost. Target:
//!   within a second.
//! - `settlement/90d_30events`: the season report over 90 days with 30 events (one a weekday
//!   afternoon, two hours each, settled on CAISO's 10-in-10 with its day-of adjustment), on a
//!   store holding 160 days of 15-minute imported data; the store is already up to date with
//!   the ledger, as the running gateway keeps it. Target: within a second.
//!
//! Data lives under `CARGO_TARGET_TMPDIR` (the target directory's disk), not `/tmp`.

use chrono::{DateTime, Datelike, Duration, TimeZone, Utc};
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use flexgate::intervals::IntervalStore;
use flexgate::intervals::import::{ImportMeta, interval_of, records};
use flexgate::ledger::{Ledger, NewRecord};
use flexgate_greenbutton::{EspiMeta, Limits, Quality, Reading, Unit, import_espi, write_espi};
use flexgate_policies::control::entry::{Entry, EventInterpreted, Recorded, Upserted};
use flexgate_policies::event::{EventSource, GridEvent, Interval as EventInterval, Target, Window};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime starts")
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("settlement-bench")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("a temporary directory under the target directory")
}

/// `days` of interval data of `minutes` from `start`: a daily cycle around 800 kW.
fn readings(start: DateTime<Utc>, days: i64, minutes: i64) -> Vec<Reading> {
    let per_day = 24 * 60 / minutes;
    (0..days * per_day)
        .map(|k| {
            let at = start + Duration::minutes(k * minutes);
            let hour = f64::from(chrono::Timelike::hour(&at));
            let kw = 800.0 + 300.0 * (std::f64::consts::PI * (hour - 6.0) / 12.0).sin().max(0.0) + (k % 7) as f64;
            Reading {
                start: at,
                duration_s: u32::try_from(minutes * 60).unwrap_or(900),
                value: Some((kw * minutes as f64 / 60.0 * 1000.0).round()),
                unit: Unit::Wh,
                quality: Quality::Measured,
                source: None,
            }
        })
        .collect()
}

fn first_of(readings: &[Reading]) -> DateTime<Utc> {
    readings.first().map_or(DateTime::UNIX_EPOCH, |r| r.start)
}

fn espi_bytes(readings: &[Reading]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let meta = EspiMeta::new("urn:flexgate:bench", "bench", first_of(readings));
    write_espi(&mut bytes, readings, &meta).expect("the export writes");
    bytes
}

/// Import `bytes` into a new data directory, as `flexgate meter import` does.
async fn import(dir: &std::path::Path, bytes: &[u8]) -> usize {
    let parsed = import_espi(bytes, &Limits::default()).expect("the file imports");
    let intervals: Vec<_> = parsed.readings.iter().map(|r| interval_of(r, "bench")).collect();
    let ledger = Ledger::open(&dir.join("ledger")).await.expect("ledger");
    let store = IntervalStore::open(dir, true).expect("store");
    let summary = store.check_import(&intervals).expect("checked");
    let meta = ImportMeta {
        source: "bench".into(),
        format: "green_button",
        sha256: String::new(),
        bytes: bytes.len() as u64,
        at: first_of(&[]),
    };
    let recorded: Vec<NewRecord> = records(&intervals, &summary, &meta)
        .into_iter()
        .map(NewRecord::from)
        .collect();
    ledger.append_all(recorded).await.expect("recorded");
    store.catch_up(&ledger.reader()).expect("folded");
    ledger.close().await.expect("closed");
    summary.intervals
}

fn event(i: usize, start: DateTime<Utc>) -> Entry {
    Entry::EventInterpreted(EventInterpreted {
        event: GridEvent {
            id: format!("ev-{i}").into(),
            revision: 1,
            source: EventSource::Http,
            site: Some("site-1".into()),
            program: Some("caiso-pdr".into()),
            issued_at: None,
            mandatory: false,
            test: false,
            cancel: false,
            priority: None,
            window: Window {
                start,
                ramp_s: 0,
                duration_s: Some(7200),
                recovery_s: 0,
                randomize_start_s: 0,
            },
            intervals: vec![EventInterval {
                offset_s: 0,
                duration_s: None,
                target: Target::Reduction {
                    kw: 100.0,
                    baseline_kw: None,
                },
            }],
        },
        ceilings: vec![],
        baseline: None,
        pre_event_meter_kw: 1000.0,
        received_at: start - Duration::hours(20),
        outcome: Upserted::New,
        settled_budget: None,
        facility_fingerprint: String::new(),
    })
}

fn benches(c: &mut Criterion) {
    let rt = runtime();
    let year_start = Utc.with_ymd_and_hms(2026, 1, 1, 8, 0, 0).single().expect("a time");
    let year = espi_bytes(&readings(year_start, 365, 5));
    eprintln!("a year of 5-minute Green Button data: {} bytes", year.len());
    let mut g = c.benchmark_group("meter_import/year_5min");
    g.sample_size(10);
    g.bench_function("parse_only", |b| {
        b.iter(|| {
            import_espi(&year[..], &Limits::default())
                .expect("parses")
                .readings
                .len()
        });
    });
    g.bench_function("flexgate", |b| {
        b.iter_batched(
            temp_dir,
            |dir| rt.block_on(import(dir.path(), &year)),
            BatchSize::PerIteration,
        );
    });
    g.finish();

    // The season: 160 days of 15-minute data, 30 weekday events in the last 90 days.
    let season_start = Utc.with_ymd_and_hms(2026, 4, 1, 7, 0, 0).single().expect("a time");
    let dir = temp_dir();
    rt.block_on(import(dir.path(), &espi_bytes(&readings(season_start, 160, 15))));
    let la = chrono_tz::America::Los_Angeles;
    let from = season_start + Duration::days(70);
    let mut events = Vec::new();
    let mut day = from.with_timezone(&la).date_naive();
    while events.len() < 30 {
        if !matches!(day.weekday(), chrono::Weekday::Sat | chrono::Weekday::Sun) {
            let at = la
                .from_local_datetime(&day.and_hms_opt(15, 0, 0).expect("15:00"))
                .single()
                .expect("15:00 exists")
                .with_timezone(&Utc);
            events.push(NewRecord::from(Recorded::new(event(events.len(), at), None)));
        }
        day = day.succ_opt().expect("a day");
        day = day.succ_opt().expect("a day");
    }
    let (store, head) = rt.block_on(async {
        let ledger = Ledger::open(&dir.path().join("ledger")).await.expect("ledger");
        ledger.append_all(events).await.expect("events");
        let store = IntervalStore::open(dir.path(), true).expect("store");
        store.catch_up(&ledger.reader()).expect("folded");
        let head = ledger.head();
        ledger.close().await.expect("closed");
        (store, head)
    });
    let config: flexgate::settlement::SettlementConfig = toml::from_str(
        "[[programs]]\nname = \"caiso-pdr\"\nbaseline = { method = \"caiso_10in10\" }\nprice_per_mwh = 120.0\n",
    )
    .expect("config");
    let to = from + Duration::days(90);
    let now = to + Duration::days(1);
    let report =
        flexgate::reports::settlement::build(&store, &config, from, to, la, head.clone(), now).expect("report");
    assert_eq!(report.events.len(), 30);
    assert_eq!(report.totals.settled, 30, "every event has a baseline");
    c.bench_function("settlement/90d_30events", |b| {
        b.iter(|| {
            flexgate::reports::settlement::build(&store, &config, from, to, la, head.clone(), now)
                .expect("report")
                .events
                .len()
        });
    });
}

criterion_group!(settlement, benches);
criterion_main!(settlement);
