//! `dr.event/1` documents onto the event model, and the acknowledgement decision onto `dr.ack/1`.
//!
//! The documents themselves are defined once in `flexgate-dr`, which checks their structure; the
//! value ranges are the event model's ([`GridEvent::validate`], [`Target::validate`] in
//! policies/). This module joins the two and names every error by the path the sender wrote
//! (`target.kw`, `window.randomize_s`, `event_id`), not by the model's field names, because
//! the error goes back to the sender in an ack or an HTTP 400.

use flexgate_dr::{AckPayload, DrEvent, DrInterval, DrTarget, DrWindow, KwRange, Opt, parse_dr_event};
use flexgate_policies::event::{Ack, EventError, EventSource, GridEvent, Interval, Participation, Target, Window};

/// The submission a `dr.event/1` document makes: the event it parses to, with the document's
/// text, or why it does not parse. What HTTP and MQTT hand the driver.
#[must_use]
pub fn submission(bytes: &[u8], source: EventSource) -> crate::runtime::Submission {
    match parse_event(bytes, source) {
        Ok(event) => crate::runtime::Submission::Document {
            event: Box::new(event),
            raw: String::from_utf8_lossy(bytes).into_owned(),
        },
        Err(e) => crate::runtime::Submission::Invalid(e),
    }
}

/// Parses a `dr.event/1` document (`flexgate-dr`) and maps it onto a validated [`GridEvent`].
///
/// `source` is the transport the document came by ([`EventSource::Http`] or
/// [`EventSource::Mqtt`]); the document itself does not say, and the distinction matters for
/// acks and audits.
pub fn parse_event(bytes: &[u8], source: EventSource) -> Result<GridEvent, EventError> {
    let doc = parse_dr_event(bytes).map_err(|e| EventError::new(e.field, e.message))?;
    // The top-level target first, so that an error in it names `target.…` even when intervals
    // inherit it (the model would report it at the first interval that does).
    if let Some(headline) = doc.target {
        model_target(headline).validate().map_err(|e| EventError {
            field: format!("target.{}", wire_path(&e.field, false)),
            message: e.message,
        })?;
    }
    for (i, interval) in doc.intervals.iter().enumerate() {
        model_target(interval.target).validate().map_err(|e| EventError {
            field: if doc.single_target {
                format!("target.{}", wire_path(&e.field, false))
            } else {
                format!("intervals[{i}].target.{}", wire_path(&e.field, false))
            },
            message: e.message,
        })?;
    }
    let event = GridEvent {
        id: doc.event_id.into(),
        revision: doc.revision,
        source,
        site: doc.site,
        program: doc.program,
        issued_at: doc.issued_at,
        mandatory: doc.mandatory,
        test: doc.test,
        cancel: doc.cancel,
        priority: doc.priority,
        window: Window {
            start: doc.window.start,
            ramp_s: doc.window.ramp_s,
            duration_s: doc.window.duration_s,
            recovery_s: doc.window.recovery_s,
            randomize_start_s: doc.window.randomize_s,
        },
        intervals: doc
            .intervals
            .iter()
            .map(|iv| Interval {
                offset_s: iv.offset_s,
                duration_s: iv.duration_s,
                target: model_target(iv.target),
            })
            .collect(),
    };
    event.validate().map_err(|e| EventError {
        field: wire_path(&e.field, doc.single_target),
        message: e.message,
    })?;
    Ok(event)
}

/// The `dr.event/1` document of `event` (for publishers, tests and the round trip): one target
/// over the whole window when the event is exactly that, intervals otherwise.
#[must_use]
pub fn to_document(event: &GridEvent) -> DrEvent {
    let single_target = matches!(event.intervals.as_slice(), [only] if only.offset_s == 0 && only.duration_s.is_none());
    let w = &event.window;
    DrEvent {
        event_id: event.id.to_string(),
        revision: event.revision,
        site: event.site.clone(),
        issued_at: event.issued_at,
        program: event.program.clone(),
        mandatory: event.mandatory,
        test: event.test,
        priority: event.priority,
        window: DrWindow {
            start: w.start,
            ramp_s: w.ramp_s,
            duration_s: w.duration_s,
            recovery_s: w.recovery_s,
            randomize_s: w.randomize_start_s,
        },
        target: event.intervals.first().map(|iv| document_target(&iv.target)),
        intervals: event
            .intervals
            .iter()
            .map(|iv| DrInterval {
                offset_s: iv.offset_s,
                duration_s: iv.duration_s,
                target: document_target(&iv.target),
            })
            .collect(),
        single_target,
        cancel: event.cancel,
    }
}

/// The `dr.ack/1` document of an acknowledgement decision (HTTP body, MQTT).
#[must_use]
pub fn ack_payload(ack: &Ack) -> AckPayload {
    let opt = match ack.opt {
        Participation::In => Opt::In,
        Participation::Out => Opt::Out,
    };
    let mut payload = AckPayload::new(
        ack.event_id.to_string(),
        ack.revision,
        ack.received_at,
        opt,
        // Every ack leaves the runtime anchored (set from its flushed record).
        ack.log_checkpoint.clone().unwrap_or_default(),
    );
    payload.log_seq = ack.log_seq;
    payload.reason.clone_from(&ack.reason);
    payload.accepted_target_kw = ack.accepted_target_kw;
    payload.expected_meter_kw = ack.expected_meter_kw.map(|r| KwRange { lo: r.lo, hi: r.hi });
    payload
}

fn model_target(t: DrTarget) -> Target {
    match t {
        DrTarget::MeterCeiling { kw } => Target::MeterCeiling { kw },
        DrTarget::Reduction { kw, baseline_kw } => Target::Reduction { kw, baseline_kw },
        DrTarget::Percent { percent, baseline_kw } => Target::Percent { percent, baseline_kw },
        DrTarget::CapacityFraction { fraction } => Target::CapacityFraction { fraction },
        DrTarget::Level { level } => Target::Level { level },
        DrTarget::Price { per_mwh } => Target::Price { per_mwh },
    }
}

fn document_target(t: &Target) -> DrTarget {
    match *t {
        Target::MeterCeiling { kw } => DrTarget::MeterCeiling { kw },
        Target::Reduction { kw, baseline_kw } => DrTarget::Reduction { kw, baseline_kw },
        Target::Percent { percent, baseline_kw } => DrTarget::Percent { percent, baseline_kw },
        Target::CapacityFraction { fraction } => DrTarget::CapacityFraction { fraction },
        Target::Level { level } => DrTarget::Level { level },
        Target::Price { per_mwh } => DrTarget::Price { per_mwh },
    }
}

/// Maps a field path of the event model onto the document's names, so that errors found by
/// [`GridEvent::validate`] name what the sender actually wrote.
fn wire_path(field: &str, single_target: bool) -> String {
    let mut f = field.to_owned();
    if single_target && let Some(rest) = f.strip_prefix("intervals[0].target") {
        f = format!("target{rest}");
    }
    if f == "id" {
        return "event_id".into();
    }
    if f == "window.randomize_start_s" {
        return "window.randomize_s".into();
    }
    if f == "per_mwh" {
        return "price_per_mwh".into();
    }
    if let Some(stem) = f.strip_suffix(".per_mwh") {
        return format!("{stem}.price_per_mwh");
    }
    f
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use chrono::{DateTime, Utc};
    use flexgate_dr::{DR_EVENT_JSON_SCHEMA, MAX_DOCUMENT_BYTES};
    use flexgate_policies::event::model;
    use flexgate_policies::event::{Interval, MeterRangeKw, Participation, Target};
    use serde_json::Value;

    const HAPPY: &str = r#"{"schema":"dr.event/1","event_id":"ev-2026-0142","revision":3,"site":"dc-east",
        "issued_at":"2026-07-14T18:59:40Z","program":"util-dr-10min","mandatory":true,"test":false,
        "target":{"form":"ceiling","point":"meter","kw":8000,"baseline_kw":null,"percent":null,"fraction":null,
                  "level":null,"price_per_mwh":null},
        "window":{"start":"2026-07-14T19:00:00Z","ramp_s":600,"duration_s":7200,"recovery_s":600,"randomize_s":0},
        "cancel":false,"sig":"eyJhbGciOi..."}"#;

    fn parse(s: &str) -> Result<GridEvent, EventError> {
        parse_event(s.as_bytes(), EventSource::Http)
    }

    /// `HAPPY` with `f` applied to its JSON tree.
    fn mutate(f: impl FnOnce(&mut Value)) -> String {
        let mut v: Value = serde_json::from_str(HAPPY).unwrap();
        f(&mut v);
        v.to_string()
    }

    fn err_field(s: &str) -> String {
        let e = parse(s).unwrap_err();
        assert!(!e.message.is_empty());
        e.field
    }

    #[test]
    fn happy_path_single_target() {
        let ev = parse(HAPPY).unwrap();
        assert_eq!(ev.id, "ev-2026-0142");
        assert_eq!(ev.revision, 3);
        assert_eq!(ev.source, EventSource::Http);
        assert_eq!(ev.site.as_deref(), Some("dc-east"));
        assert_eq!(ev.program.as_deref(), Some("util-dr-10min"));
        assert_eq!(ev.issued_at, Some("2026-07-14T18:59:40Z".parse().unwrap()));
        assert!(ev.mandatory && !ev.test && !ev.cancel);
        assert_eq!(ev.window.ramp_s, 600);
        assert_eq!(ev.window.duration_s, Some(7200));
        assert_eq!(ev.window.recovery_s, 600);
        assert_eq!(
            ev.intervals,
            vec![Interval {
                offset_s: 0,
                duration_s: None,
                target: Target::MeterCeiling { kw: 8000.0 }
            }]
        );
    }

    #[test]
    fn happy_path_with_intervals_and_inheritance() {
        let doc = mutate(|v| {
            v["intervals"] = serde_json::json!([
                {"offset_s": 0, "duration_s": 3600},
                {"offset_s": 3600, "duration_s": null, "target": {"form": "percent", "point": "meter", "percent": 20,
                 "baseline_kw": 9500}}
            ]);
        });
        let ev = parse(&doc).unwrap();
        assert_eq!(ev.intervals.len(), 2);
        assert_eq!(ev.intervals[0].target, Target::MeterCeiling { kw: 8000.0 });
        assert_eq!(ev.intervals[0].duration_s, Some(3600));
        assert_eq!(
            ev.intervals[1].target,
            Target::Percent {
                percent: 20.0,
                baseline_kw: Some(9500.0)
            }
        );
        assert_eq!(ev.intervals[1].duration_s, None);

        // Without a top-level target, every interval needs its own.
        let doc = mutate(|v| {
            v.as_object_mut().unwrap().remove("target");
            v["intervals"] = serde_json::json!([{"offset_s": 0}]);
        });
        assert_eq!(err_field(&doc), "intervals[0].target");
    }

    #[test]
    fn every_form_parses() {
        let cases = [
            (
                r#"{"form":"reduction","point":"meter","kw":1500}"#,
                Target::Reduction {
                    kw: 1500.0,
                    baseline_kw: None,
                },
            ),
            (
                r#"{"form":"percent","point":"meter","percent":12.5}"#,
                Target::Percent {
                    percent: 12.5,
                    baseline_kw: None,
                },
            ),
            (
                r#"{"form":"capacity","point":"meter","fraction":0.6}"#,
                Target::CapacityFraction { fraction: 0.6 },
            ),
            (
                r#"{"form":"level","point":"meter","level":2}"#,
                Target::Level { level: 2 },
            ),
            (
                r#"{"form":"price","point":"meter","price_per_mwh":-12.0}"#,
                Target::Price { per_mwh: -12.0 },
            ),
        ];
        for (target, want) in cases {
            let doc = mutate(|v| v["target"] = serde_json::from_str(target).unwrap());
            assert_eq!(parse(&doc).unwrap().intervals[0].target, want, "{target}");
        }
    }

    #[test]
    fn round_trip_through_json() {
        let doc = mutate(|v| {
            v["priority"] = 2.into();
            v["window"]["randomize_s"] = 120.into();
            v["intervals"] = serde_json::json!([
                {"offset_s": 0, "duration_s": 1800},
                {"offset_s": 1800, "duration_s": 1800, "target": {"form": "level", "point": "meter", "level": 3}},
                {"offset_s": 4000, "target": {"form": "reduction", "point": "meter", "kw": 250.5, "baseline_kw": 9000}}
            ]);
        });
        let ev = parse(&doc).unwrap();
        let again = parse(&to_document(&ev).to_json().to_string()).unwrap();
        assert_eq!(again, ev);

        let single = parse(HAPPY).unwrap();
        let json = to_document(&single).to_json();
        assert!(json.get("intervals").is_none());
        assert_eq!(json["target"]["kw"], 8000.0);
        assert_eq!(parse(&json.to_string()).unwrap(), single);

        // Sub-second instants and open-ended windows survive too.
        let doc = mutate(|v| {
            v["window"]["start"] = "2026-07-14T21:00:00.250+02:00".into();
            v["window"]["duration_s"] = Value::Null;
        });
        let ev = parse(&doc).unwrap();
        assert_eq!(ev.window.duration_s, None);
        assert_eq!(
            ev.window.start,
            "2026-07-14T19:00:00.250Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(parse(&to_document(&ev).to_json().to_string()).unwrap(), ev);
    }

    #[test]
    fn huge_document_is_refused_before_parsing() {
        let mut doc = HAPPY.to_owned();
        doc.push_str(&" ".repeat(MAX_DOCUMENT_BYTES));
        assert_eq!(err_field(&doc), "(document)");
        // Not even UTF-8 is looked at.
        let junk = vec![0xffu8; MAX_DOCUMENT_BYTES + 1];
        let e = parse_event(&junk, EventSource::Mqtt).unwrap_err();
        assert!(e.message.contains("limit"), "{e}");
    }

    #[test]
    fn invalid_utf8_and_invalid_json() {
        let e = parse_event(b"{\"schema\":\"dr.event/1\xff\"}", EventSource::Http).unwrap_err();
        assert_eq!(e.field, "(document)");
        assert!(e.message.contains("UTF-8"), "{e}");
        for bad in [
            "",
            "{",
            "{\"schema\":}",
            "[1,2]",
            "\"dr.event/1\"",
            "{} {}",
            "{\"a\":1,}",
        ] {
            assert_eq!(err_field(bad), "(document)", "{bad:?}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_cheaply() {
        let deep = format!(
            "{{\"schema\":\"dr.event/1\",\"x\":{}{}}}",
            "[".repeat(40),
            "]".repeat(40)
        );
        let e = parse(&deep).unwrap_err();
        assert!(e.message.contains("nesting"), "{e}");
        assert!(e.field.starts_with("x[0]"), "{e}");
        // Far deeper than serde_json's own limit: still a clean error, no stack overflow.
        let abyss = "[".repeat(60_000);
        assert!(parse(&abyss).unwrap_err().message.contains("nesting"));
        // 32 levels are fine structurally (the field is then unknown).
        let ok_depth = format!("{{\"x\":{}{}}}", "[".repeat(31), "]".repeat(31));
        assert_eq!(err_field(&ok_depth), "schema");
    }

    #[test]
    fn overflowing_numbers_name_their_field() {
        let doc = HAPPY.replace("\"kw\":8000", "\"kw\":1e999");
        assert_eq!(err_field(&doc), "target.kw");
        let doc = HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":-1e999");
        assert_eq!(err_field(&doc), "window.ramp_s");
        let doc = mutate(|v| {
            v["intervals"] =
                serde_json::json!([{"offset_s": 0, "target": {"form": "ceiling", "point": "meter", "kw": 1}}])
        })
        .replace("\"kw\":1}", "\"kw\":1e400}");
        assert_eq!(err_field(&doc), "intervals[0].target.kw");
    }

    #[test]
    fn bad_durations_are_refused_with_their_path() {
        for (bad, field) in [
            ("\"ramp_s\":-5", "window.ramp_s"),
            ("\"ramp_s\":1.5", "window.ramp_s"),
            ("\"ramp_s\":\"600\"", "window.ramp_s"),
            ("\"duration_s\":-7200", "window.duration_s"),
            ("\"duration_s\":0", "window.duration_s"),
            ("\"duration_s\":604801", "window.duration_s"),
            ("\"recovery_s\":0.25", "window.recovery_s"),
            ("\"randomize_s\":3601", "window.randomize_s"),
        ] {
            let original = bad.split(':').next().unwrap();
            let doc = match original {
                "\"ramp_s\"" => HAPPY.replace("\"ramp_s\":600", bad),
                "\"duration_s\"" => HAPPY.replace("\"duration_s\":7200", bad),
                "\"recovery_s\"" => HAPPY.replace("\"recovery_s\":600", bad),
                _ => HAPPY.replace("\"randomize_s\":0", bad),
            };
            let e = parse(&doc).unwrap_err();
            assert_eq!(e.field, field, "{bad}: {e}");
        }
        let e = parse(&HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":-5")).unwrap_err();
        assert!(
            e.message.contains("non-negative integer") && e.message.contains("-5"),
            "{e}"
        );
        // An integral float is an integer.
        assert_eq!(
            parse(&HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":600.0"))
                .unwrap()
                .window
                .ramp_s,
            600
        );
        // Interval durations too.
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": 0, "duration_s": 1.5}]));
        assert_eq!(err_field(&doc), "intervals[0].duration_s");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": -1}]));
        assert_eq!(err_field(&doc), "intervals[0].offset_s");
    }

    #[test]
    fn revision_must_be_a_non_negative_integer() {
        for bad in ["-1", "1.5", "\"3\"", "null", "true"] {
            let doc = HAPPY.replace("\"revision\":3", &format!("\"revision\":{bad}"));
            assert_eq!(err_field(&doc), "revision", "{bad}");
        }
        let doc = HAPPY.replace("\"revision\":3,", "");
        assert_eq!(err_field(&doc), "revision");
        assert_eq!(
            parse(&HAPPY.replace("\"revision\":3", "\"revision\":0"))
                .unwrap()
                .revision,
            0
        );
    }

    #[test]
    fn schema_must_be_dr_event_1() {
        assert_eq!(err_field(&HAPPY.replace("dr.event/1", "dr.event/2")), "schema");
        assert_eq!(err_field(&HAPPY.replace("\"schema\":\"dr.event/1\",", "")), "schema");
        assert_eq!(err_field(&HAPPY.replace("\"dr.event/1\"", "1")), "schema");
    }

    #[test]
    fn unknown_and_duplicate_fields_are_refused() {
        assert_eq!(
            err_field(&HAPPY.replace("\"cancel\":false", "\"cancel\":false,\"extra\":1")),
            "extra"
        );
        assert_eq!(
            err_field(&HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":600,\"ramp\":5")),
            "window.ramp"
        );
        assert_eq!(
            err_field(&HAPPY.replace("\"kw\":8000", "\"kw\":8000,\"watts\":5")),
            "target.watts"
        );
        let e = parse(&HAPPY.replace("\"revision\":3", "\"revision\":3,\"revision\":4")).unwrap_err();
        assert_eq!(e.field, "revision");
        assert!(e.message.contains("more than once"), "{e}");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": 0, "duration": 5}]));
        assert_eq!(err_field(&doc), "intervals[0].duration");
    }

    #[test]
    fn missing_required_fields_are_named() {
        assert_eq!(
            err_field(&HAPPY.replace("\"event_id\":\"ev-2026-0142\",", "")),
            "event_id"
        );
        let doc = mutate(|v| {
            v.as_object_mut().unwrap().remove("window");
        });
        assert_eq!(err_field(&doc), "window");
        let doc = mutate(|v| {
            v["window"].as_object_mut().unwrap().remove("start");
        });
        assert_eq!(err_field(&doc), "window.start");
        let doc = mutate(|v| {
            v.as_object_mut().unwrap().remove("target");
        });
        assert_eq!(err_field(&doc), "target");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([]));
        assert_eq!(err_field(&doc), "intervals");
        let doc = mutate(|v| {
            v["target"].as_object_mut().unwrap().remove("point");
        });
        assert_eq!(err_field(&doc), "target.point");
    }

    #[test]
    fn target_rules() {
        let t = |target: &str| mutate(|v| v["target"] = serde_json::from_str(target).unwrap());
        for (target, field) in [
            (r#"{"form":"ceiling","point":"rack","kw":5}"#, "target.point"),
            (r#"{"form":"ceiling","point":"meter"}"#, "target.kw"),
            (
                r#"{"form":"reduction","point":"meter","baseline_kw":9000}"#,
                "target.kw",
            ),
            (r#"{"form":"percent","point":"meter","kw":5}"#, "target.kw"),
            (r#"{"form":"percent","point":"meter"}"#, "target.percent"),
            (r#"{"form":"percent","point":"meter","percent":0}"#, "target.percent"),
            (r#"{"form":"percent","point":"meter","percent":150}"#, "target.percent"),
            (r#"{"form":"capacity","point":"meter","fraction":8}"#, "target.fraction"),
            (r#"{"form":"level","point":"meter","level":4}"#, "target.level"),
            (r#"{"form":"level","point":"meter","level":1.5}"#, "target.level"),
            (r#"{"form":"level","point":"meter"}"#, "target.level"),
            (r#"{"form":"price","point":"meter"}"#, "target.price_per_mwh"),
            (r#"{"form":"ceiling","point":"meter","kw":-1}"#, "target.kw"),
            (r#"{"form":"ceiling","point":"meter","kw":"8000"}"#, "target.kw"),
            (
                r#"{"form":"reduction","point":"meter","kw":5,"baseline_kw":-3}"#,
                "target.baseline_kw",
            ),
            (r#"{"form":"watts","point":"meter","kw":5}"#, "target.form"),
            (r#"{"point":"meter","kw":5}"#, "target.form"),
            (r#"[1]"#, "target"),
        ] {
            let e = parse(&t(target)).unwrap_err();
            assert_eq!(e.field, field, "{target}: {e}");
        }
    }

    #[test]
    fn timestamps_need_rfc3339_with_offset() {
        for bad in ["2026-07-14T19:00:00", "2026-07-14", "yesterday", "2026-13-14T19:00:00Z"] {
            let doc = HAPPY.replace("2026-07-14T19:00:00Z", bad);
            assert_eq!(err_field(&doc), "window.start", "{bad}");
        }
        let doc = HAPPY.replace("2026-07-14T18:59:40Z", "18:59");
        assert_eq!(err_field(&doc), "issued_at");
        let ev = parse(&HAPPY.replace("2026-07-14T19:00:00Z", "2026-07-14T15:00:00-04:00")).unwrap();
        assert_eq!(
            ev.window.start,
            "2026-07-14T19:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
    }

    #[test]
    fn interval_layout_errors_use_wire_paths() {
        let doc = mutate(|v| {
            v["intervals"] = serde_json::json!([{"offset_s": 0, "duration_s": 4000}, {"offset_s": 3000}]);
        });
        assert_eq!(err_field(&doc), "intervals[1].offset_s");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": 0, "duration_s": 8000}]));
        assert_eq!(err_field(&doc), "intervals[0].duration_s");
        let doc = HAPPY.replace("\"event_id\":\"ev-2026-0142\"", "\"event_id\":\"\"");
        assert_eq!(err_field(&doc), "event_id");
        let doc = HAPPY.replace("\"site\":\"dc-east\"", "\"site\":\"dc\\u0007east\"");
        assert_eq!(err_field(&doc), "site");
    }

    #[test]
    fn wire_paths_map_model_names() {
        assert_eq!(wire_path("intervals[0].target.kw", true), "target.kw");
        assert_eq!(wire_path("intervals[0].target.kw", false), "intervals[0].target.kw");
        assert_eq!(
            wire_path("intervals[2].target.per_mwh", false),
            "intervals[2].target.price_per_mwh"
        );
        assert_eq!(wire_path("window.randomize_start_s", true), "window.randomize_s");
        assert_eq!(wire_path("id", true), "event_id");
        assert_eq!(wire_path("per_mwh", false), "price_per_mwh");
    }

    #[test]
    fn hostile_inputs_never_panic() {
        let samples: Vec<Vec<u8>> = vec![
            b"\"\\".to_vec(),
            b"{\"\\".to_vec(),
            b"{\"schema\":\"dr.event/1\",\"\\u00e9\xc3\xa9\":1}".to_vec(),
            b"{\"a\":[-]}".to_vec(),
            b"{\"a\":--1}".to_vec(),
            b"{\"a\":1e}".to_vec(),
            b"}}]]{{".to_vec(),
            format!("{{\"schema\":\"dr.event/1\",\"event_id\":\"{}\"}}", "x".repeat(60_000)).into_bytes(),
            format!("{{\"schema\":\"dr.event/1\",\"{}\":1}}", "k".repeat(1000)).into_bytes(),
            HAPPY.replace("8000", &"9".repeat(400)).into_bytes(),
        ];
        for s in samples {
            assert!(
                parse_event(&s, EventSource::Mqtt).is_err(),
                "{}",
                String::from_utf8_lossy(&s)
            );
        }
        // Truncations of a valid document never panic.
        for cut in 0..HAPPY.len() {
            if let Some(prefix) = HAPPY.get(..cut) {
                let _ = parse(prefix);
            }
        }
    }

    #[test]
    fn cancel_documents_parse() {
        let ev = parse(&HAPPY.replace("\"cancel\":false", "\"cancel\":true")).unwrap();
        assert!(ev.cancel);
    }

    #[test]
    fn the_json_schema_states_the_model_limits() {
        let schema: Value = serde_json::from_str(DR_EVENT_JSON_SCHEMA).unwrap();
        assert_eq!(schema["$defs"]["seconds"]["maximum"], model::MAX_DURATION_S);
        assert_eq!(flexgate_dr::MAX_DURATION_S, model::MAX_DURATION_S);
        assert_eq!(flexgate_dr::MAX_LEVEL, model::MAX_LEVEL);
        assert_eq!(flexgate_dr::MAX_INTERVALS, model::MAX_INTERVALS);
        assert_eq!(
            schema["$defs"]["window"]["properties"]["randomize_s"]["maximum"],
            model::MAX_RANDOMIZE_S
        );
        assert_eq!(schema["properties"]["event_id"]["maxLength"], model::MAX_ID_CHARS);
    }

    #[test]
    fn the_ack_decision_renders_as_the_documented_dr_ack() {
        let mut ack = Ack::new(
            "ev-2026-0142",
            3,
            "2026-07-14T18:59:41Z".parse().unwrap(),
            Participation::In,
        );
        ack.log_checkpoint = Some("ab12".into());
        ack.log_seq = Some(7);
        ack.accepted_target_kw = Some(8000.0);
        ack.expected_meter_kw = Some(MeterRangeKw { lo: 7700.0, hi: 7950.0 });
        let v = serde_json::to_value(ack_payload(&ack)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"schema":"dr.ack/1","event_id":"ev-2026-0142","revision":3,
                "received_at":"2026-07-14T18:59:41Z","opt":"in","reason":null,"accepted_target_kw":8000.0,
                "expected_meter_kw":{"lo":7700.0,"hi":7950.0},"log_checkpoint":"ab12","log_seq":7})
        );
        ack.opt = Participation::Out;
        ack.reason = Some("test".into());
        let v = serde_json::to_value(ack_payload(&ack)).unwrap();
        assert_eq!((v["opt"].as_str(), v["reason"].as_str()), (Some("out"), Some("test")));
    }
}
