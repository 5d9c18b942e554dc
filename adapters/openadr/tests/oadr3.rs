//! OpenADR 3 codec, timing, mapping, tracking and (with `http`) client behaviour, from fixtures
//! in `tests/fixtures/oadr3/` (several are verbatim answers of hupe1980's and openleadr-rs's
//! VTNs) and hand-made hostile documents.

use chrono::{DateTime, TimeDelta, Utc};
use flexgate_openadr::oadr3::{
    CancelReason, ChangeKind, DecodeError, Document, DurationError, Event, EventTracker, IsoDuration, Limits,
    NotifiedObject, Operation, PayloadClass, Precedence, Report, Target, ZeroWindow, decode_any,
    decode_any_with_limits, event_targets, is_now_sentinel, normalized_json, parse_timestamp, payload_class,
    zero_window,
};
use flexgate_openadr::target::{LoadTarget, SignalRefusal};

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/oadr3/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

fn t(s: &str) -> DateTime<Utc> {
    parse_timestamp(s).expect("test timestamp")
}

fn events(name: &str) -> Vec<Event> {
    match decode_any(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}")) {
        Document::Events(es) => es,
        Document::Event(e) => vec![*e],
        other => panic!("{name}: expected events, got {}", other.name()),
    }
}

fn event(name: &str) -> Event {
    events(name).into_iter().next().expect("one event")
}

fn ceiling(kw: f64) -> LoadTarget {
    LoadTarget::Ceiling { kw }
}

// ---------------------------------------------------------------- durations and timestamps

#[test]
fn durations_parse_every_spelling() {
    let secs = |s: &str| {
        IsoDuration::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .as_fixed()
            .map(|d| d.num_milliseconds())
    };
    assert_eq!(secs("PT30M"), Some(1_800_000));
    assert_eq!(secs("P0Y0M0DT0H30M0S"), Some(1_800_000));
    assert_eq!(secs("PT0S"), Some(0));
    assert_eq!(secs("P1DT2H"), Some(93_600_000));
    assert_eq!(secs("PT0.5S"), Some(500));
    assert_eq!(secs("P2W"), Some(1_209_600_000));
    assert_eq!(secs(" +PT1H "), Some(3_600_000));
    assert_eq!(secs("PT120M"), Some(7_200_000));
    let forever = IsoDuration::parse("P9999Y").expect("P9999Y");
    assert!(forever.is_forever() && forever.as_fixed().is_none());
    assert_eq!(forever.end_from(t("2026-01-01T00:00:00Z")), None);
    assert!(
        IsoDuration::parse("P9999Y0M0DT0H0M0S")
            .expect("verbose forever")
            .is_forever()
    );
    assert!(IsoDuration::parse("P0Y0M0DT0H0M0S").expect("verbose zero").is_zero());
    assert!(IsoDuration::parse("P0D").expect("P0D").is_zero());
}

#[test]
fn durations_reject_malformed_and_negative() {
    assert_eq!(IsoDuration::parse("-PT5M"), Err(DurationError::Negative));
    assert_eq!(IsoDuration::parse(""), Err(DurationError::Empty));
    assert_eq!(IsoDuration::parse("30M"), Err(DurationError::MissingP));
    assert_eq!(IsoDuration::parse("P"), Err(DurationError::NoComponents));
    assert_eq!(IsoDuration::parse("PT"), Err(DurationError::NoComponents));
    assert_eq!(IsoDuration::parse("P1H"), Err(DurationError::Unexpected('H')));
    assert_eq!(IsoDuration::parse("PT5"), Err(DurationError::Dangling));
    assert_eq!(IsoDuration::parse("PT1.5H30M"), Err(DurationError::Fraction));
    assert_eq!(IsoDuration::parse("P1.5Y"), Err(DurationError::Fraction));
    assert_eq!(IsoDuration::parse("PT1M1H"), Err(DurationError::Unexpected('H')));
    assert_eq!(
        IsoDuration::parse("P99999999999999999999999D"),
        Err(DurationError::Overflow)
    );
    assert_eq!(IsoDuration::parse("P99999999999Y"), Err(DurationError::Overflow));
}

#[test]
fn durations_with_months_use_the_calendar_and_print_compactly() {
    let m = IsoDuration::parse("P1M").expect("P1M");
    assert_eq!(m.end_from(t("2026-01-31T00:00:00Z")), Some(t("2026-02-28T00:00:00Z")));
    assert_eq!(m.span_from(t("2026-03-01T00:00:00Z")), Some(TimeDelta::days(31)));
    let y = IsoDuration::parse("P1Y2M3DT4H5M6.25S").expect("full");
    assert_eq!(y.to_string(), "P1Y2M3DT4H5M6.25S");
    assert_eq!(
        IsoDuration::parse("P9999Y0M0DT0H0M0S").expect("v").to_string(),
        "P9999Y"
    );
    assert_eq!(IsoDuration::parse("PT90M").expect("90").to_string(), "PT1H30M");
    assert_eq!(IsoDuration::parse("P0Y0M0DT0H0M0S").expect("z").to_string(), "PT0S");
}

#[test]
fn timestamps_accept_offsets_nanoseconds_and_the_now_sentinel() {
    let ns = t("2026-11-30T01:36:22.639004168Z");
    assert_eq!(ns.timestamp_subsec_nanos(), 639_004_168);
    assert_eq!(t("2026-12-01T18:00:00+02:00"), t("2026-12-01T16:00:00Z"));
    assert_eq!(t("2026-05-07T16:00:00+00:00"), t("2026-05-07T16:00:00Z"));
    for s in [
        "0001-01-01",
        "0001-01-01T00:00:00",
        "0001-01-01T00:00:00Z",
        "0001-01-01T00:00:00.000Z",
    ] {
        assert!(is_now_sentinel(&t(s)), "{s}");
    }
    assert!(parse_timestamp("2026-07-01T00:00:00").is_err(), "no offset");
    assert!(parse_timestamp("2026-13-45T25:61:00Z").is_err());
    assert!(parse_timestamp("yesterday").is_err());
}

// ---------------------------------------------------------------- decoding

#[test]
fn decodes_hupe_vtn_answer_with_31_targets() {
    let es = events("v31_events_capacity.json");
    assert_eq!(es.len(), 1);
    let e = &es[0];
    assert_eq!(e.id.as_deref(), Some("evt-00000001"));
    assert_eq!(e.program_id, "prg-00000001");
    assert_eq!(e.priority, Some(0));
    assert_eq!(e.targets, Some(vec![Target::Name("site-a".into())]));
    assert_eq!(e.intervals.len(), 2);
    assert_eq!(e.intervals[1].payloads[0].values[0].as_f64(), Some(650.0));
    assert_eq!(
        e.modification_date_time.map(|d| d.timestamp_subsec_nanos()),
        Some(639_004_168)
    );
    assert_eq!(
        e.payload_descriptor("IMPORT_CAPACITY_LIMIT")
            .and_then(|d| d.units.as_deref()),
        Some("KW")
    );
}

#[test]
fn decodes_30_targets_report_descriptors_and_keeps_unknown_fields() {
    let e = event("v30_event_targets.json");
    let targets = e.targets.as_ref().expect("targets");
    assert_eq!(targets.len(), 4);
    assert!(matches!(&targets[1], Target::Map { kind, values } if kind == "GROUP" && values.len() == 2));
    let rd = &e.report_descriptors.as_ref().expect("rd")[0];
    assert_eq!(rd.payload_type, "USAGE");
    assert_eq!(rd.start_interval, Some(-1));
    assert!(rd.extra.contains_key("targets"));
    assert!(e.extra.contains_key("x-vendorField"));
    assert_eq!(e.priority, Some(3));
    // Plain serde agrees with the path-aware decoder.
    let via_serde: Event = serde_json::from_slice(&fixture("v30_event_targets.json")).expect("serde");
    assert_eq!(via_serde, e);
    // And a round trip keeps everything.
    let again: Event = serde_json::from_value(serde_json::to_value(&e).expect("ser")).expect("de");
    assert_eq!(again, e);
}

#[test]
fn decodes_openleadr_rs_verbose_durations_and_offsets() {
    let e = event("verbose_durations.json");
    let ip = e.interval_period.as_ref().expect("ip");
    assert_eq!(ip.start, Some(t("2026-05-07T16:00:00Z")));
    assert_eq!(ip.duration.and_then(|d| d.as_fixed()), Some(TimeDelta::minutes(30)));
    assert!(ip.randomize_start.is_some_and(|d| d.is_zero()));
    assert_eq!(e.duration.and_then(|d| d.as_fixed()), Some(TimeDelta::hours(1)));
}

#[test]
fn decode_any_recognises_every_document_kind() {
    let kinds = [
        ("v31_events_capacity.json", "events"),
        ("v30_event_targets.json", "event"),
        ("notification_31.json", "notification"),
        ("notification_30.json", "notification"),
        ("program.json", "program"),
        ("reports.json", "reports"),
    ];
    for (file, kind) in kinds {
        let doc = decode_any(&fixture(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(doc.name(), kind, "{file}");
    }
    assert_eq!(decode_any(b" [ ] ").expect("empty list"), Document::Events(vec![]));
    let Document::Notification(n) = decode_any(&fixture("notification_30.json")).expect("n30") else {
        panic!("not a notification")
    };
    assert_eq!(n.operation, Operation::Update, "3.0 PUT folds into UPDATE");
    assert!(matches!(n.object, NotifiedObject::Event(_)));
    let Document::Reports(rs) = decode_any(&fixture("reports.json")).expect("reports") else {
        panic!("not reports")
    };
    assert_eq!(rs[0].resources[0].intervals[0].payloads[1].kind, "DEMAND");
    assert!(rs[0].extra.contains_key("clientID"));
}

#[test]
fn hostile_documents_are_rejected_with_field_paths() {
    let err = |name: &str| decode_any(&fixture(name)).expect_err(name);
    assert_eq!(
        err("hostile_1e999.json"),
        DecodeError::Number {
            path: "[0].intervals[0].payloads[0].values[0]".into(),
            text: "1e999".into()
        }
    );
    let e = err("hostile_negative_duration.json");
    assert!(
        matches!(&e, DecodeError::Invalid { path, message }
            if path == "[0].intervals[1].intervalPeriod.duration" && message.contains("negative")),
        "{e}"
    );
    let e = err("hostile_bad_timestamp.json");
    assert!(
        matches!(&e, DecodeError::Invalid { path, .. } if path == "[0].modificationDateTime"),
        "{e}"
    );
    assert!(e.to_string().starts_with("[0].modificationDateTime: "), "{e}");
    let e = err("hostile_no_offset.json");
    assert!(
        matches!(&e, DecodeError::Invalid { path, .. } if path == "intervalPeriod.start"),
        "{e}"
    );
    let e = err("hostile_deep.json");
    assert!(matches!(e, DecodeError::TooDeep { limit: 32, .. }), "{e}");
}

#[test]
fn limits_bound_size_lists_and_depth() {
    let huge = vec![b' '; 4 * 1024 * 1024 + 1];
    assert!(matches!(decode_any(&huge), Err(DecodeError::TooLarge { .. })));
    let small = Limits {
        max_bytes: 1024,
        max_depth: 4,
        max_list: 3,
    };
    let list = br#"[{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"SIMPLE","values":[1,1,1,1]}]}]}]"#;
    let e = decode_any_with_limits(
        list,
        &Limits {
            max_depth: 32,
            ..small.clone()
        },
    )
    .expect_err("list");
    assert_eq!(
        e,
        DecodeError::TooMany {
            path: "[0].intervals[0].payloads[0].values".into(),
            limit: 3
        }
    );
    let e = decode_any_with_limits(list, &small).expect_err("depth");
    assert!(
        matches!(e, DecodeError::TooDeep { ref path, limit: 4 } if path == "[0].intervals[0].payloads"),
        "{e}"
    );
    // A million nested arrays (2 MB, under the size limit) is an error, not a stack overflow.
    let deep = format!("{}{}", "[".repeat(1_000_000), "]".repeat(1_000_000));
    assert!(matches!(decode_any(deep.as_bytes()), Err(DecodeError::TooDeep { .. })));
    let deep = "{\"a\":".repeat(100_000);
    assert!(matches!(decode_any(deep.as_bytes()), Err(DecodeError::TooDeep { .. })));
}

#[test]
fn malformed_fields_name_their_path() {
    let cases: [(&[u8], &str); 8] = [
        (br#"{"programID":"p","priority":"high","intervals":[]}"#, "priority"),
        (br#"{"programID":"p","priority":-1,"intervals":[]}"#, "priority"),
        (
            br#"[{"programID":"p","intervals":[{"payloads":[]}]}]"#,
            "[0].intervals[0].id",
        ),
        (
            br#"[{"programID":"p","intervals":[{"id":0.5,"payloads":[]}]}]"#,
            "[0].intervals[0].id",
        ),
        (br#"{"programID":"p","targets":[7],"intervals":[]}"#, "targets[0]"),
        (
            br#"{"programID":"p","intervals":[{"id":0,"payloads":[{"values":[1]}]}]}"#,
            "intervals[0].payloads[0].type",
        ),
        (
            br#"{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"X","values":[null]}]}]}"#,
            "intervals[0].payloads[0].values[0]",
        ),
        (br#"{"programID":"p","duration":"PT-1H","intervals":[]}"#, "duration"),
    ];
    for (doc, path) in cases {
        let e = decode_any(doc).expect_err(path);
        assert!(e.to_string().starts_with(&format!("{path}: ")), "{path}: got {e}");
    }
    assert!(matches!(decode_any(b"42"), Err(DecodeError::UnknownDocument(_))));
    assert!(matches!(
        decode_any(br#"{"foo":1}"#),
        Err(DecodeError::UnknownDocument(_))
    ));
    assert!(matches!(
        decode_any(br#"[{"programID":"p""#),
        Err(DecodeError::Syntax { .. })
    ));
    assert!(matches!(decode_any(b"[1e5, 2]"), Err(DecodeError::UnknownDocument(_))));
}

// ---------------------------------------------------------------- mapping

#[test]
fn capacity_limit_maps_to_ceilings_that_follow_each_other() {
    let m = event_targets(&event("v31_events_capacity.json"), t("2026-12-01T00:00:00Z")).expect("map");
    let spans = m.target_intervals();
    assert_eq!(spans.len(), 2);
    assert_eq!(
        (spans[0].start, spans[0].duration_s, &spans[0].target),
        (t("2026-12-01T18:00:00Z"), Some(1800), &ceiling(800.0))
    );
    assert_eq!(
        (spans[1].start, spans[1].duration_s, &spans[1].target),
        (t("2026-12-01T18:30:00Z"), Some(1800), &ceiling(650.0))
    );
    assert_eq!(m.targets[1].interval_id, 1);
    assert_eq!(m.start, Some(t("2026-12-01T18:00:00Z")));
    assert_eq!(m.end, Some(t("2026-12-01T19:00:00Z")));
    assert!(m.refusals.is_empty() && m.warnings.is_empty() && m.cancelled.is_none());
}

#[test]
fn per_interval_overrides_gaps_and_sentinel_follow_the_user_guide() {
    let m = event_targets(&event("per_interval_overrides.json"), t("2023-02-09T00:00:00Z")).expect("map");
    let got: Vec<(DateTime<Utc>, Option<u64>, LoadTarget)> = m
        .target_intervals()
        .into_iter()
        .map(|s| (s.start, s.duration_s, s.target))
        .collect();
    assert_eq!(
        got,
        vec![
            (t("2023-02-10T00:00:00Z"), Some(3600), ceiling(900.0)),
            (t("2023-02-10T01:00:00Z"), Some(7200), ceiling(800.0)), // own PT2H, follows
            (t("2023-02-10T03:00:00Z"), Some(3600), ceiling(700.0)), // follows the PT2H one
            (t("2023-02-10T08:00:00Z"), Some(1800), ceiling(600.0)), // own start: a gap
            (t("2023-02-10T08:30:00Z"), Some(3600), ceiling(500.0)), // 0001-01-01 after the first: follows
        ]
    );
    assert_eq!(m.end, Some(t("2023-02-10T09:30:00Z")));
}

#[test]
fn multi_value_payload_splits_its_interval() {
    let m = event_targets(&event("multi_value_price.json"), t("2025-06-24T00:00:00Z")).expect("map");
    let got: Vec<(DateTime<Utc>, Option<u64>, LoadTarget)> = m
        .target_intervals()
        .into_iter()
        .map(|s| (s.start, s.duration_s, s.target))
        .collect();
    let price = |value: f64| LoadTarget::Price {
        value,
        unit: Some("USD/KWH".into()),
    };
    assert_eq!(
        got,
        vec![
            (t("2025-06-25T00:00:00Z"), Some(3600), price(0.17)),
            (t("2025-06-25T01:00:00Z"), Some(3600), price(0.03)),
            (t("2025-06-25T02:00:00Z"), Some(3600), price(0.11)),
        ]
    );
}

#[test]
fn now_sentinel_with_forever_is_open_ended_from_now() {
    let now = t("2026-07-01T12:34:56Z");
    let m = event_targets(&event("forever_now.json"), now).expect("map");
    assert_eq!(m.target_intervals().len(), 1);
    let s = &m.targets[0].span;
    assert_eq!((s.start, s.duration_s, &s.target), (now, None, &ceiling(5000.0)));
    assert_eq!(m.end, None);
    assert_eq!(m.informational.len(), 1);
    assert_eq!(m.informational[0].payload_type, "ALERT_GRID_EMERGENCY");
    assert_eq!(
        m.informational[0].values,
        vec![serde_json::json!("Stage 2 emergency: shed load now")]
    );
}

#[test]
fn event_duration_forever_makes_a_single_span_open_ended() {
    let m = event_targets(&event("event_duration_forever.json"), t("2026-07-01T00:00:00Z")).expect("map");
    let s = m.target_intervals();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].start, s[0].duration_s), (t("2026-07-01T18:00:00Z"), None));
    assert_eq!((m.end, m.expanded_until), (None, None));
}

#[test]
fn event_duration_loops_and_truncates() {
    let m = event_targets(&event("looping_day.json"), t("2026-06-30T00:00:00Z")).expect("map");
    let values: Vec<f64> = m
        .target_intervals()
        .iter()
        .map(|s| match s.target {
            LoadTarget::Price { value, .. } => value,
            _ => f64::NAN,
        })
        .collect();
    assert_eq!(values, vec![0.10, 0.20, 0.10, 0.20, 0.10, 0.20]);
    assert_eq!(m.targets[5].span.start, t("2026-07-01T05:00:00Z"));
    assert_eq!(m.end, Some(t("2026-07-01T06:00:00Z")));

    let m = event_targets(&event("truncated.json"), t("2026-06-30T00:00:00Z")).expect("map");
    let got: Vec<(Option<u64>, LoadTarget)> = m
        .target_intervals()
        .into_iter()
        .map(|s| (s.duration_s, s.target))
        .collect();
    assert_eq!(
        got,
        vec![
            (Some(3600), LoadTarget::Level { level: 1 }),
            (Some(1800), LoadTarget::Level { level: 2 })
        ]
    );
    assert_eq!(m.end, Some(t("2026-07-01T01:30:00Z")));

    // P9999Y over a two-interval pattern: expanded from the cycle holding `now` for 7 days.
    let mut e = event("looping_day.json");
    e.duration = Some(IsoDuration::FOREVER);
    let now = t("2026-07-03T00:30:00Z");
    let m = event_targets(&e, now).expect("map");
    assert_eq!(m.end, None);
    assert_eq!(m.targets[0].span.start, t("2026-07-03T00:00:00Z"));
    let until = m.expanded_until.expect("expanded_until");
    assert!(
        until > now + TimeDelta::days(7) && until <= now + TimeDelta::days(7) + TimeDelta::hours(2),
        "{until}"
    );
    assert_eq!(m.targets.len(), 170);
}

/// Maps `doc`'s event on another thread and gives up after `limit`: a mapping that does not
/// finish is a failure here, not a test that never ends.
fn map_within(doc: &'static [u8], now: DateTime<Utc>, limit: std::time::Duration) -> EventTargetsResult {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(Document::Event(e)) = decode_any(doc) else {
            panic!("not an event")
        };
        let _ = tx.send(event_targets(&e, now));
    });
    rx.recv_timeout(limit).expect("event_targets must finish promptly")
}

type EventTargetsResult = Result<flexgate_openadr::oadr3::EventTargets, flexgate_openadr::oadr3::TimingError>;

#[test]
fn a_long_looping_event_whose_payloads_map_to_nothing_is_not_walked_cycle_by_cycle() {
    // Found by the decode_3 fuzz target (a timeout): P9989Y is not "forever", so the intervals
    // loop, and with nothing to repeat no span limit stopped the walk over every cycle: billions
    // of one-second cycles, past 2^31 of which the offset stopped growing and it never ended.
    let doc: &'static [u8] = br#"{"id":"ev-long","programID":"p-1","duration":"P9989Y",
        "intervalPeriod":{"start":"2026-07-01T18:00:00Z","duration":"PT1S"},
        "intervals":[{"id":0,"payloads":[{"type":"IMPORT_CAPACITY_LIMIt","values":[700]}]}]}"#;
    let m = map_within(doc, t("2026-07-01T12:00:00Z"), std::time::Duration::from_secs(5)).expect("map");
    assert!(m.targets.is_empty(), "{:?}", m.targets);
    assert_eq!(m.refusals.len(), 1, "the unknown payload type is refused, not acted on");
    let year_12015 = IsoDuration::parse("P9989Y")
        .expect("P9989Y")
        .end_from(t("2026-07-01T18:00:00Z"));
    assert_eq!(m.end, year_12015);
}

#[test]
fn a_looping_event_near_the_end_of_time_stops_there_instead_of_overflowing() {
    // Intervals of 128,679 years looping for 260,096 years: the third repetition ends beyond
    // chrono's last year (262,142), which panicked ("DateTime + TimeDelta overflowed").
    let doc: &'static [u8] = br#"{"id":"ev-far","programID":"p-1","duration":"P95000000D",
        "payloadDescriptors":[{"payloadType":"IMPORT_CAPACITY_LIMIT","units":"KW"}],
        "intervalPeriod":{"start":"2026-07-01T18:00:00Z","duration":"P47000000D"},
        "intervals":[{"id":0,"payloads":[{"type":"IMPORT_CAPACITY_LIMIT","values":[700]}]}]}"#;
    let m = map_within(doc, t("2026-07-01T12:00:00Z"), std::time::Duration::from_secs(5)).expect("map");
    let end = m.end.expect("the event ends");
    assert_eq!(m.targets.len(), 3, "three repetitions start before the end");
    let last = &m.targets[2].span;
    assert_eq!(
        last.start + TimeDelta::seconds(i64::try_from(last.duration_s.expect("clipped")).expect("secs")),
        end
    );
    assert!(m.targets.iter().all(|t| t.span.target == ceiling(700.0)));
}

#[test]
fn a_forever_loop_of_short_intervals_started_long_ago_is_expanded_from_now() {
    // More than 2^31 one-second cycles have passed since year 1: the expansion still starts at
    // the cycle that holds `now` (it used to start 68 years after the event, long in the past).
    let doc: &'static [u8] = br#"{"id":"ev-old","programID":"p-1","duration":"P9999Y",
        "payloadDescriptors":[{"payloadType":"IMPORT_CAPACITY_LIMIT","units":"KW"}],
        "intervalPeriod":{"start":"0001-01-02T00:00:00Z","duration":"PT1S"},
        "intervals":[{"id":0,"payloads":[{"type":"IMPORT_CAPACITY_LIMIT","values":[700]}]},
                     {"id":1,"payloads":[{"type":"IMPORT_CAPACITY_LIMIT","values":[600]}]}]}"#;
    let now = t("2026-07-01T12:00:00.5Z");
    let m = map_within(doc, now, std::time::Duration::from_secs(5)).expect("map");
    let first = &m.targets[0].span;
    assert!(
        first.start <= now && now < first.start + TimeDelta::seconds(2),
        "{}",
        first.start
    );
    assert_eq!(m.targets.len(), flexgate_openadr::oadr3::mapping::MAX_SPANS);
    assert!(
        m.warnings.iter().any(|w| w.contains("later repetitions omitted")),
        "{:?}",
        m.warnings
    );
}

#[test]
fn every_payload_type_is_mapped_listed_or_refused() {
    let m = event_targets(&event("all_payload_types.json"), t("2026-08-01T00:00:00Z")).expect("map");
    let by_interval = |id: i64| -> Vec<(String, LoadTarget)> {
        m.targets
            .iter()
            .filter(|t| t.interval_id == id)
            .map(|t| (t.payload_type.clone(), t.span.target.clone()))
            .collect()
    };
    let eur = Some("EUR/KWH".to_string());
    assert_eq!(
        by_interval(0),
        vec![
            ("CONTROL_LEVEL_OFFSET".into(), LoadTarget::LevelOffset { steps: 3 }),
            (
                "CONTROL_LEVEL_OFFSET_PERCENT".into(),
                LoadTarget::PercentReduction { percent: 0.2 * 100.0 }
            ),
            ("DISPATCH_SETPOINT".into(), ceiling(1000.0)),
            ("DISPATCH_SETPOINT_RELATIVE".into(), LoadTarget::Reduction { kw: 250.0 }),
            (
                "EXPORT_PRICE".into(),
                LoadTarget::Price {
                    value: 0.05,
                    unit: eur.clone()
                }
            ),
            ("IMPORT_CAPACITY_LIMIT".into(), ceiling(1200.0)),
            ("PRICE".into(), LoadTarget::Price { value: 0.31, unit: eur }),
            ("SIMPLE".into(), LoadTarget::Level { level: 2 }),
        ]
    );
    let normal: Vec<LoadTarget> = by_interval(1).into_iter().map(|(_, t)| t).collect();
    assert_eq!(normal, vec![LoadTarget::Normal; 4]);
    assert_eq!(
        m.warnings.iter().filter(|w| w.contains("asks for more load")).count(),
        2
    );
    let info: Vec<&str> = m.informational.iter().map(|n| n.payload_type.as_str()).collect();
    assert_eq!(info.len(), 13, "{info:?}");
    assert!(m.informational.iter().all(|n| n.interval_id == 2));
    let refused: Vec<(&str, u16)> = m
        .refusals
        .iter()
        .map(|r| (r.payload_type.as_str(), r.refusal.response_code()))
        .collect();
    assert_eq!(
        refused,
        vec![
            ("CONTROL_SETPOINT", 460),
            ("DISPATCH_INSTRUCTION", 460),
            ("CHARGE_STATE_SETPOINT", 460),
            ("CTA2045_REBOOT", 460),
            ("CTA2045_SET_OVERRIDE_STATUS", 460),
            ("MY_PRIVATE_SIGNAL", 460),
        ]
    );
    assert_eq!(payload_class("ALERT_WIND"), PayloadClass::Informational);
    assert_eq!(
        payload_class("EXPORT_CAPACITY_AVAILABLE_PRICE"),
        PayloadClass::Informational
    );
    assert_eq!(payload_class("LOAD_SHED"), PayloadClass::Unsupported);
}

#[test]
fn out_of_range_values_and_bad_units_are_refused_never_targets() {
    let m = event_targets(&event("out_of_range.json"), t("2026-08-01T00:00:00Z")).expect("map");
    assert!(m.targets.is_empty(), "{:?}", m.targets);
    let kinds: Vec<String> = m
        .refusals
        .iter()
        .map(|r| match &r.refusal {
            SignalRefusal::OutOfRange { value, .. } => format!("{} {value}", r.payload_type),
            SignalRefusal::Units { units, .. } => format!("{} units {units}", r.payload_type),
            SignalRefusal::Unsupported { .. } => format!("{} unsupported", r.payload_type),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "SIMPLE 5",
            "SIMPLE 1.5",
            "CONTROL_LEVEL_OFFSET 11",
            "CONTROL_LEVEL_OFFSET 2.5",
            "CONTROL_LEVEL_OFFSET_PERCENT 1.5",
            "CONTROL_LEVEL_OFFSET_PERCENT -20",
            "DISPATCH_SETPOINT_RELATIVE 50",
            "IMPORT_CAPACITY_LIMIT -1",
            "IMPORT_CAPACITY_LIMIT \"800\"",
            "IMPORT_CAPACITY_LIMIT []",
            "DISPATCH_SETPOINT units KVAR",
        ]
    );
    assert!(m.refusals.iter().all(|r| r.refusal.response_code() == 454));
    let msg = m.refusals[0].refusal.to_string();
    assert!(msg.contains("SIMPLE in interval 0") && msg.contains("0..=3"), "{msg}");
}

#[test]
fn units_convert_to_kw_and_missing_units_assume_kw_with_a_warning() {
    let m = event_targets(&event("v30_event_targets.json"), t("2024-03-01T00:00:00Z")).expect("map");
    assert_eq!(m.targets[0].span.target, ceiling(1500.0), "1.5 MW");
    assert_eq!(m.randomize_start.map(|d| d.to_string()), Some("PT5M".into()));
    let mut e = event("v31_events_capacity.json");
    e.payload_descriptors = None;
    let m = event_targets(&e, t("2026-12-01T00:00:00Z")).expect("map");
    assert_eq!(m.targets[0].span.target, ceiling(800.0));
    assert_eq!(m.warnings.len(), 1, "one warning per payload type: {:?}", m.warnings);
    assert!(m.warnings[0].contains("assumed KW"));
}

#[test]
fn zero_windows_are_cancellations() {
    let z = event("zero_window.json");
    assert_eq!(zero_window(&z), Some(ZeroWindow::ZeroIntervals));
    let m = event_targets(&z, Utc::now()).expect("map");
    assert_eq!(m.cancelled, Some(ZeroWindow::ZeroIntervals));
    assert!(m.targets.is_empty());
    let mut e = event("v31_events_capacity.json");
    assert_eq!(zero_window(&e), None);
    e.duration = Some(IsoDuration::ZERO);
    assert_eq!(zero_window(&e), Some(ZeroWindow::ZeroEventDuration));
    e.duration = None;
    e.intervals.clear();
    assert_eq!(zero_window(&e), Some(ZeroWindow::NoIntervals));
    // A missing duration is open-ended, not zero.
    let mut e = event("v31_events_capacity.json");
    e.interval_period.as_mut().expect("ip").duration = None;
    assert_eq!(zero_window(&e), None);
    let m = event_targets(&e, Utc::now()).expect("map");
    assert_eq!(
        m.targets.len(),
        1,
        "the second interval can never start: {:?}",
        m.warnings
    );
    assert_eq!(m.targets[0].span.duration_s, None);
    assert_eq!(m.warnings.len(), 2, "{:?}", m.warnings);
}

#[test]
fn an_interval_without_any_start_is_a_timing_error() {
    let doc = br#"{"programID":"p","intervals":[{"id":0,"intervalPeriod":{"duration":"PT1H"},"payloads":[]}]}"#;
    let Document::Event(e) = decode_any(doc).expect("decode") else {
        panic!()
    };
    let err = event_targets(&e, Utc::now()).expect_err("no start");
    assert_eq!(err.path, "intervals[0].intervalPeriod.start");
}

// ---------------------------------------------------------------- priority

#[test]
fn priorities_share_one_scale() {
    assert_eq!(Precedence::from_oadr3(Some(0)), Precedence::HIGHEST);
    assert_eq!(Precedence::from_oadr3(Some(0)), Precedence::from_oadr2b(1));
    assert_eq!(Precedence::from_oadr3(Some(4)), Precedence::from_oadr2b(5));
    assert_eq!(Precedence::from_oadr3(None), Precedence::LOWEST);
    assert_eq!(Precedence::from_oadr2b(0), Precedence::LOWEST);
    let mut ps = [
        Precedence::from_oadr3(None),
        Precedence::from_oadr3(Some(7)),
        Precedence::from_oadr3(Some(0)),
    ];
    ps.sort();
    assert_eq!(ps.iter().map(|p| p.rank()).collect::<Vec<_>>(), vec![0, 7, u64::MAX]);
}

// ---------------------------------------------------------------- tracking

fn with_mod(mut e: Event, modified: &str) -> Event {
    e.modification_date_time = Some(t(modified));
    e
}

fn kinds(changes: &[flexgate_openadr::oadr3::Change]) -> Vec<(String, u32, ChangeKind)> {
    changes.iter().map(|c| (c.id.clone(), c.revision, c.kind)).collect()
}

#[test]
fn tracker_follows_new_modified_cancelled_deleted_and_back() {
    let base = event("v31_events_capacity.json");
    let id = "evt-00000001".to_string();
    let mut tr = EventTracker::new();
    let a1 = with_mod(base.clone(), "2026-07-01T00:00:00Z");
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&a1))),
        vec![(id.clone(), 1, ChangeKind::New)]
    );
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&a1))),
        vec![(id.clone(), 1, ChangeKind::Unchanged)]
    );

    // modificationDateTime bumped.
    let mut a2 = with_mod(base.clone(), "2026-07-01T00:01:00Z");
    a2.intervals[0].payloads[0].values = vec![serde_json::from_str("700").expect("v")];
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&a2))),
        vec![(id.clone(), 2, ChangeKind::Modified)]
    );

    // Content changed, timestamp not bumped.
    let mut a3 = a2.clone();
    a3.priority = Some(5);
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&a3))),
        vec![(id.clone(), 3, ChangeKind::Modified)]
    );

    // An older copy (lagging replica) is ignored.
    let stale = with_mod(base.clone(), "2026-06-30T00:00:00Z");
    let c = tr.observe_poll(std::slice::from_ref(&stale));
    assert_eq!(kinds(&c), vec![(id.clone(), 3, ChangeKind::Unchanged)]);
    assert_eq!(c[0].event.priority, Some(5), "the stored version is reported");

    // Zero window.
    let z = with_mod(event("zero_window.json"), "2026-07-01T00:02:00Z");
    let cancelled = ChangeKind::Cancelled(CancelReason::ZeroWindow(ZeroWindow::ZeroIntervals));
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&z))),
        vec![(id.clone(), 4, cancelled)]
    );
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&z))),
        vec![(id.clone(), 4, ChangeKind::Unchanged)]
    );
    assert!(tr.live_ids().is_empty());

    // Revived with a real window.
    let a5 = with_mod(base.clone(), "2026-07-01T00:03:00Z");
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&a5))),
        vec![(id.clone(), 5, ChangeKind::Modified)]
    );

    // Deleted: absent from a complete poll; reported once.
    let c = tr.observe_poll(&[]);
    assert_eq!(
        kinds(&c),
        vec![(id.clone(), 6, ChangeKind::Cancelled(CancelReason::Deleted))]
    );
    assert_eq!(
        c[0].event.modification_date_time, a5.modification_date_time,
        "last version seen"
    );
    assert!(tr.observe_poll(&[]).is_empty());

    // Back again: New, revision continues.
    assert_eq!(
        kinds(&tr.observe_poll(std::slice::from_ref(&a5))),
        vec![(id.clone(), 7, ChangeKind::New)]
    );
    assert_eq!(tr.revision(&id), Some(7));
}

#[test]
fn tracker_reports_a_first_seen_zero_window_as_cancelled_and_skips_odd_entries() {
    let mut tr = EventTracker::new();
    let z = event("zero_window.json");
    let mut no_id = event("v31_events_capacity.json");
    no_id.id = None;
    let other = with_mod(event("forever_now.json"), "2026-07-01T00:00:00Z");
    let c = tr.observe_poll(&[z.clone(), no_id, other.clone(), other.clone()]);
    assert_eq!(
        kinds(&c),
        vec![
            (
                "evt-00000001".into(),
                1,
                ChangeKind::Cancelled(CancelReason::ZeroWindow(ZeroWindow::ZeroIntervals))
            ),
            ("now-1".into(), 1, ChangeKind::New),
        ]
    );
    assert_eq!(tr.live_ids(), vec!["now-1"]);
}

#[test]
fn tracker_takes_notifications() {
    let mut tr = EventTracker::new();
    let Document::Notification(n) = decode_any(&fixture("notification_31.json")).expect("n") else {
        panic!()
    };
    let c = tr.observe_notification(&n).expect("change");
    assert_eq!((c.id.as_str(), c.revision, c.kind), ("evt-7", 1, ChangeKind::New));
    let mut del = (*n).clone();
    del.operation = Operation::Delete;
    let c = tr.observe_notification(&del).expect("change");
    assert_eq!((c.revision, c.kind), (2, ChangeKind::Cancelled(CancelReason::Deleted)));
    assert_eq!(tr.observe_notification(&del), None, "a second DELETE is nothing new");
    let Document::Program(p) = decode_any(&fixture("program.json")).expect("p") else {
        panic!()
    };
    let mut other = (*n).clone();
    other.object = NotifiedObject::Program(p);
    assert_eq!(tr.observe_notification(&other), None);
}

// ---------------------------------------------------------------- normalized JSON

#[test]
fn normalized_json_has_the_2_0b_shape() {
    let v = normalized_json(&decode_any(&fixture("v31_events_capacity.json")).expect("decode"));
    for key in [
        "format",
        "message",
        "vtn_id",
        "ven_id",
        "request_id",
        "events",
        "warnings",
    ] {
        assert!(v.get(key).is_some(), "top-level {key}");
    }
    assert_eq!(v["format"], "oadr3");
    assert_eq!(v["message"], "events");
    let e = &v["events"][0];
    for key in [
        "id",
        "modification",
        "priority",
        "status",
        "test",
        "market_context",
        "start",
        "duration_s",
        "response_required",
        "signals",
        "targets",
        "raw_targets",
        "modification_date_time",
        "program_id",
        "event_name",
    ] {
        assert!(e.get(key).is_some(), "event {key}");
    }
    assert_eq!(e["id"], "evt-00000001");
    assert_eq!(e["modification"], serde_json::Value::Null);
    assert_eq!(e["test"], false);
    assert_eq!(e["priority"], 0);
    assert_eq!(e["market_context"], "prg-00000001");
    assert_eq!(e["start"], "2026-12-01T18:00:00Z");
    assert_eq!(e["duration_s"], 3600);
    assert_eq!(e["modification_date_time"], "2026-11-30T01:36:22.639004168Z");
    assert_eq!(
        e["targets"],
        serde_json::json!({"ven_id": [], "group_id": [], "resource_id": [], "party_id": []})
    );
    assert_eq!(e["raw_targets"], serde_json::json!(["site-a"]));
    let s = &e["signals"][0];
    assert_eq!(
        (s["name"].as_str(), s["type"].as_str(), s["units"].as_str()),
        (Some("IMPORT_CAPACITY_LIMIT"), Some("IMPORT_CAPACITY_LIMIT"), Some("KW"))
    );
    assert_eq!(s["scale"], serde_json::Value::Null);
    assert_eq!(
        s["intervals"][1],
        serde_json::json!({"id": 1, "start": "2026-12-01T18:30:00Z", "duration_s": 1800, "duration": "PT30M", "values": [650]})
    );
    assert_eq!(v["warnings"], serde_json::json!([]));
}

#[test]
fn normalized_json_for_30_targets_now_starts_and_other_documents() {
    let v = normalized_json(&decode_any(&fixture("v30_event_targets.json")).expect("decode"));
    assert_eq!(v["message"], "event");
    let e = &v["events"][0];
    assert_eq!(
        e["targets"],
        serde_json::json!({"ven_id": ["ven-dc-east"], "group_id": ["group-1", "group-2"], "resource_id": ["meter-1"], "party_id": []})
    );
    assert_eq!(e["raw_targets"], serde_json::json!(["POWER_SERVICE_LOCATION:psl-9"]));
    assert_eq!(e["randomize_start"], "PT5M");
    assert_eq!(e["report_descriptors"], serde_json::json!(["USAGE"]));

    let v = normalized_json(&decode_any(&fixture("forever_now.json")).expect("decode"));
    let e = &v["events"][0];
    assert_eq!(
        (e["start"].clone(), e["starts_now"].clone()),
        (serde_json::Value::Null, serde_json::json!(true))
    );
    assert_eq!(e["signals"][0]["intervals"][0]["duration_s"], serde_json::Value::Null);
    assert_eq!(
        e["signals"][1]["intervals"][0]["values"],
        serde_json::json!(["Stage 2 emergency: shed load now"])
    );

    let v = normalized_json(&decode_any(&fixture("zero_window.json")).expect("decode"));
    assert_eq!(v["events"][0]["cancelled"], true);

    let v = normalized_json(&decode_any(&fixture("notification_31.json")).expect("decode"));
    assert_eq!(
        (v["message"].as_str(), v["operation"].as_str()),
        (Some("notification"), Some("UPDATE"))
    );
    assert_eq!(v["events"][0]["id"], "evt-7");

    let v = normalized_json(&decode_any(&fixture("program.json")).expect("decode"));
    assert_eq!(
        (v["message"].as_str(), v["programs"][0]["name"].as_str()),
        (Some("program"), Some("p1"))
    );
    assert_eq!(v["events"], serde_json::json!([]));

    let v = normalized_json(&decode_any(&fixture("reports.json")).expect("decode"));
    assert_eq!(
        v["reports"][0]["resources"][0]["intervals"][0]["payloads"][1]["values"],
        serde_json::json!([790])
    );

    let v = normalized_json(&decode_any(&fixture("per_interval_overrides.json")).expect("decode"));
    let iv = &v["events"][0]["signals"][0]["intervals"];
    assert_eq!(iv[4]["start"], "2023-02-10T08:30:00Z");
    assert_eq!(v["events"][0]["duration_s"], 9.5 * 3600.0);
}

#[test]
fn reports_serialize_in_the_wire_shape() {
    let report: Report = serde_json::from_value(serde_json::json!({
        "eventID": "evt-1", "clientName": "dc-east",
        "payloadDescriptors": [{"payloadType": "DEMAND", "units": "KW", "readingType": "DIRECT_READ"}],
        "resources": [{"resourceName": "AGGREGATED_REPORT",
            "intervalPeriod": {"start": "2026-07-01T18:00:00Z", "duration": "PT30M"},
            "intervals": [{"id": 0, "payloads": [{"type": "USAGE", "values": [400.5]}, {"type": "DEMAND", "values": [790]}]}]}]
    }))
    .expect("report");
    let v = serde_json::to_value(&report).expect("ser");
    assert_eq!(v["eventID"], "evt-1");
    assert_eq!(
        v["resources"][0]["intervalPeriod"],
        serde_json::json!({"start": "2026-07-01T18:00:00Z", "duration": "PT30M"})
    );
    assert_eq!(
        v["resources"][0]["intervals"][0]["payloads"][1],
        serde_json::json!({"type": "DEMAND", "values": [790]})
    );
    assert!(v.get("programID").is_none() && v.get("id").is_none());
}

// ---------------------------------------------------------------- HTTP client against a scripted server

#[cfg(feature = "http")]
mod http {
    use std::sync::{Arc, Mutex};

    use flexgate_openadr::oadr3::{Auth, Client, ClientError, Polled, Report};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A request as the scripted server saw it.
    #[derive(Debug, Clone)]
    pub struct Seen {
        pub method: String,
        pub target: String,
        pub headers: Vec<(String, String)>,
        pub body: String,
    }

    impl Seen {
        pub fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    type Handler = Arc<dyn Fn(&Seen) -> (u16, Vec<(&'static str, String)>, Vec<u8>) + Send + Sync>;

    /// A one-request-per-connection HTTP/1.1 server on 127.0.0.1 that answers with `handler`.
    async fn serve(handler: Handler) -> (String, Arc<Mutex<Vec<Seen>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let handler = handler.clone();
                let log = log2.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut tmp = [0u8; 4096];
                    let head_end = loop {
                        let Ok(n) = sock.read(&mut tmp).await else { return };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&tmp[..n]);
                        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            break p;
                        }
                    };
                    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
                    let mut lines = head.split("\r\n");
                    let first = lines.next().unwrap_or_default().to_string();
                    let mut parts = first.split(' ');
                    let method = parts.next().unwrap_or_default().to_string();
                    let target = parts.next().unwrap_or_default().to_string();
                    let headers: Vec<(String, String)> = lines
                        .filter_map(|l| l.split_once(':'))
                        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                        .collect();
                    let len: usize = headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                        .and_then(|(_, v)| v.parse().ok())
                        .unwrap_or(0);
                    let mut body = buf[head_end + 4..].to_vec();
                    while body.len() < len {
                        let Ok(n) = sock.read(&mut tmp).await else { return };
                        if n == 0 {
                            break;
                        }
                        body.extend_from_slice(&tmp[..n]);
                    }
                    let seen = Seen {
                        method,
                        target,
                        headers,
                        body: String::from_utf8_lossy(&body).to_string(),
                    };
                    let (status, hdrs, payload) = handler(&seen);
                    log.lock().expect("log").push(seen);
                    let mut out = format!(
                        "HTTP/1.1 {status} X\r\nconnection: close\r\ncontent-length: {}\r\n",
                        payload.len()
                    );
                    for (k, v) in hdrs {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    out.push_str("\r\n");
                    let _ = sock.write_all(out.as_bytes()).await;
                    let _ = sock.write_all(&payload).await;
                    let _ = sock.shutdown().await;
                });
            }
        });
        (format!("http://{addr}/openadr3/3.1.0"), log)
    }

    fn http() -> reqwest::Client {
        flexgate_openadr::oadr3::http_client().expect("client")
    }

    fn json() -> Vec<(&'static str, String)> {
        vec![("content-type", "application/json".to_string())]
    }

    const EVENT: &str = r#"{"id":"e1","programID":"p1","modificationDateTime":"2026-07-01T00:00:00Z","intervalPeriod":{"start":"2026-07-01T18:00:00Z","duration":"PT1H"},"intervals":[{"id":0,"payloads":[{"type":"IMPORT_CAPACITY_LIMIT","values":[800]}]}]}"#;

    /// Consumers spawn polls on a multi-threaded runtime: the futures must be `Send`.
    #[test]
    fn client_futures_are_send() {
        fn assert_send<T: Send>(_: T) {}
        let client = Client::new("http://127.0.0.1:9", Auth::Anonymous, http());
        assert_send(client.get_events(None, &[]));
        assert_send(client.post_report(&Report::default()));
        assert_send(client.get_programs());
    }

    #[tokio::test]
    async fn etag_304_and_pagination() {
        let handler: Handler = Arc::new(|seen: &Seen| {
            let skip: usize = seen
                .target
                .split(['?', '&'])
                .find_map(|kv| kv.strip_prefix("skip="))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if seen.target.contains("programID=big") {
                // 50 + 50 + 3 events over three pages.
                let n = match skip {
                    0 | 50 => 50,
                    100 => 3,
                    _ => 0,
                };
                let items: Vec<String> = (0..n)
                    .map(|i| EVENT.replace("\"e1\"", &format!("\"e{}\"", skip + i)))
                    .collect();
                return (200, json(), format!("[{}]", items.join(",")).into_bytes());
            }
            if seen.header("if-none-match") == Some("W/\"v1\"") {
                return (304, vec![("etag", "W/\"v1\"".into())], Vec::new());
            }
            let mut h = json();
            h.push(("etag", "W/\"v1\"".into()));
            (200, h, format!("[{EVENT}]").into_bytes())
        });
        let (base, log) = serve(handler).await;
        let client = Client::new(format!("{base}/"), Auth::Bearer("tok".into()), http());
        let Polled::Events(es) = client
            .get_events(Some("p1"), &["site-a", "site-b"])
            .await
            .expect("poll")
        else {
            panic!("expected events")
        };
        assert_eq!(es.len(), 1);
        assert_eq!(
            client
                .get_events(Some("p1"), &["site-a", "site-b"])
                .await
                .expect("poll"),
            Polled::NotModified
        );
        // A different query does not reuse the ETag.
        assert!(matches!(
            client.get_events(Some("p1"), &["site-a"]).await.expect("poll"),
            Polled::Events(_)
        ));
        let Polled::Events(es) = client.get_events(Some("big"), &[]).await.expect("poll") else {
            panic!()
        };
        assert_eq!(es.len(), 103);
        let seen = log.lock().expect("log").clone();
        assert_eq!(seen[0].method, "GET");
        assert_eq!(seen[0].header("authorization"), Some("Bearer tok"));
        assert_eq!(
            seen[0].target,
            "/openadr3/3.1.0/events?programID=p1&targets=site-a&targets=site-b&skip=0&limit=50"
        );
        assert!(seen[3..].iter().any(|s| s.target.contains("skip=100")));
    }

    #[tokio::test]
    async fn client_credentials_discovery_caching_and_one_retry_on_401() {
        let issued = Arc::new(Mutex::new(0u32));
        let issued2 = issued.clone();
        let handler: Handler = Arc::new(move |seen: &Seen| {
            if seen.target.ends_with("/auth/server") {
                return (200, json(), br#"{"tokenURL":"PLACEHOLDER"}"#.to_vec());
            }
            if seen.target.ends_with("/auth/token") {
                // Refuses credentials in the body (like openleadr-rs); wants HTTP Basic.
                if seen.header("authorization").is_none() {
                    return (
                        400,
                        json(),
                        br#"{"error":"invalid_client","error_description":"use Basic"}"#.to_vec(),
                    );
                }
                assert!(seen.body.contains("grant_type=client_credentials"));
                assert!(seen.body.contains("scope=read_targets+write_reports"));
                let mut n = issued2.lock().expect("n");
                *n += 1;
                return (
                    200,
                    json(),
                    format!(r#"{{"access_token":"t{n}","token_type":"Bearer","expires_in":3600}}"#).into_bytes(),
                );
            }
            // The first token is "revoked" by the time it is used.
            if seen.header("authorization") == Some("Bearer t1") {
                return (
                    401,
                    vec![("content-type", "application/problem+json".into())],
                    br#"{"title":"Unauthorized","status":401,"detail":"expired"}"#.to_vec(),
                );
            }
            (200, json(), b"[]".to_vec())
        });
        let (base, log) = serve(handler).await;
        let token_url = format!("{}/auth/token", base);
        // Discovery answers with a placeholder we cannot know in advance; configure it instead and
        // check discovery separately below.
        let client = Client::new(
            base.clone(),
            Auth::ClientCredentials {
                token_url: Some(token_url),
                client_id: "ven-1".into(),
                client_secret: "s3cret".into(),
                scopes: vec!["read_targets".into(), "write_reports".into()],
            },
            http(),
        );
        assert!(
            !format!("{client:?}").contains("s3cret"),
            "Debug must not show the secret"
        );
        assert_eq!(
            client.get_events(None, &["site-a"]).await.expect("poll"),
            Polled::Events(vec![])
        );
        assert_eq!(*issued.lock().expect("n"), 2, "401 → one fresh token");
        client.get_events(None, &["site-b"]).await.expect("poll");
        assert_eq!(*issued.lock().expect("n"), 2, "cached");
        let seen = log.lock().expect("log").clone();
        let basic = seen
            .iter()
            .filter(|s| s.target.ends_with("/auth/token") && s.header("authorization").is_some());
        assert_eq!(basic.count(), 2);
        assert!(seen.iter().all(|s| !s.target.contains("s3cret")));

        // Discovery: /auth/server names a token URL that refuses us; the error says so.
        let client = Client::new(
            base,
            Auth::ClientCredentials {
                token_url: None,
                client_id: "ven-1".into(),
                client_secret: "s3cret".into(),
                scopes: vec![],
            },
            http(),
        );
        let err = client.get_events(None, &[]).await.expect_err("placeholder URL");
        let text = err.to_string();
        assert!(text.contains("PLACEHOLDER") && !text.contains("s3cret"), "{text}");
    }

    #[tokio::test]
    async fn errors_say_what_to_fix() {
        let handler: Handler = Arc::new(|seen: &Seen| {
            let problem = |status: u16, detail: &str| {
                (
                    status,
                    vec![("content-type", "application/problem+json".to_string())],
                    format!(r#"{{"type":"about:blank","title":"T{status}","status":{status},"detail":"{detail}","instance":"req-1"}}"#)
                        .into_bytes(),
                )
            };
            match seen.target.split('?').next().unwrap_or_default() {
                "/openadr3/3.1.0/events" if seen.header("authorization") == Some("Bearer bad") => {
                    problem(401, "the presented credential is not valid")
                }
                "/openadr3/3.1.0/reports" => problem(403, "the write_reports scope is required"),
                "/openadr3/3.1.0/events" if seen.header("authorization") == Some("Bearer huge") => {
                    (200, json(), vec![b' '; 5 * 1024 * 1024])
                }
                "/openadr3/3.1.0/events" if seen.header("authorization") == Some("Bearer garbage") => (
                    200,
                    json(),
                    br#"[{"programID":"p","intervals":[{"id":0,"payloads":[{"type":"X","values":[1e999]}]}]}]"#
                        .to_vec(),
                ),
                "/openadr3/3.1.0/events" => (500, vec![], b"boom".to_vec()),
                _ => problem(404, "no such endpoint"),
            }
        });
        let (base, _) = serve(handler).await;
        let c = |tok: &str| Client::new(base.clone(), Auth::Bearer(tok.into()), http());
        let e = c("bad").get_events(None, &[]).await.expect_err("401");
        assert!(matches!(e, ClientError::Unauthorized { .. }), "{e}");
        assert!(
            e.to_string().contains("rejected the token") && e.to_string().contains("not valid"),
            "{e}"
        );
        assert!(!e.to_string().contains("Bearer bad"));
        let e = c("ok").post_report(&Report::default()).await.expect_err("403");
        assert!(
            matches!(e, ClientError::Forbidden { .. }) && e.to_string().contains("write_reports"),
            "{e}"
        );
        let e = c("huge").get_events(None, &[]).await.expect_err("too large");
        assert!(matches!(e, ClientError::BodyTooLarge { .. }), "{e}");
        let e = c("garbage").get_events(None, &[]).await.expect_err("decode");
        assert!(e.to_string().contains("[0].intervals[0].payloads[0].values[0]"), "{e}");
        let e = c("ok").get_events(None, &[]).await.expect_err("500");
        assert_eq!(e.http_status(), Some(500));
        assert!(e.to_string().contains("boom"), "{e}");
        let wrong = Client::new(base.replace("/openadr3/3.1.0", ""), Auth::Anonymous, http());
        let e = wrong.get_events(None, &[]).await.expect_err("404");
        assert!(
            matches!(e, ClientError::NotFound { .. }) && e.to_string().contains("/openadr3/3.1.0"),
            "{e}"
        );
        // Nothing listening.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();
        let url = format!("http://127.0.0.1:{port}/openadr3/3.1.0");
        let e = Client::new(url.clone(), Auth::Anonymous, http())
            .get_events(None, &[])
            .await
            .expect_err("refused");
        assert!(matches!(e, ClientError::Connect { .. }), "{e}");
        assert!(e.to_string().contains(&format!("{url}/events")), "{e}");
    }

    /// A VTN that keeps the first connection alive after one answer, then drops it when the next
    /// request arrives on it (as a restarted or overloaded server does), and answers normally
    /// on new connections.
    async fn serve_then_drop_the_kept_alive_connection() -> (String, Arc<Mutex<Vec<usize>>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        // Connection number of every request that was read.
        let log = Arc::new(Mutex::new(Vec::new()));
        let log2 = log.clone();
        tokio::spawn(async move {
            for conn in 0usize.. {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let log = log2.clone();
                tokio::spawn(async move {
                    let mut pending = Vec::new();
                    let mut tmp = [0u8; 4096];
                    for request in 0.. {
                        // Read one request head (GETs carry no body).
                        let end = loop {
                            if let Some(p) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                                break p + 4;
                            }
                            let Ok(n) = sock.read(&mut tmp).await else { return };
                            if n == 0 {
                                return;
                            }
                            pending.extend_from_slice(&tmp[..n]);
                        };
                        pending.drain(..end);
                        log.lock().expect("log").push(conn);
                        if conn == 0 && request == 1 {
                            // Drop the kept-alive connection without answering.
                            return;
                        }
                        let body = b"[]";
                        let head = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
                            body.len()
                        );
                        if sock.write_all(head.as_bytes()).await.is_err() || sock.write_all(body).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (format!("http://{addr}/openadr3/3.1.0"), log)
    }

    #[tokio::test]
    async fn a_poll_on_a_dropped_keep_alive_connection_is_sent_again_on_a_fresh_one() {
        let (base, log) = serve_then_drop_the_kept_alive_connection().await;
        let client = Client::new(base, Auth::Anonymous, http());
        let first = client.get_events(None, &[]).await.expect("first poll");
        assert!(matches!(first, Polled::Events(ref e) if e.is_empty()), "{first:?}");
        let second = client
            .get_events(None, &[])
            .await
            .expect("the second poll succeeds on a new connection");
        assert!(matches!(second, Polled::Events(ref e) if e.is_empty()), "{second:?}");
        assert_eq!(
            *log.lock().expect("log"),
            vec![0, 0, 1],
            "two requests on the first connection (the second dropped), the resend on a new one"
        );
    }
}
