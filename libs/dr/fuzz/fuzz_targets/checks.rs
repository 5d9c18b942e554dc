//! The properties both `flexgate-dr` fuzz targets check, shared with the stable replay test
//! (`libs/dr/tests/fuzz_corpus.rs`, which includes this file), so the corpus is held to the same
//! rules on every test run as under libFuzzer. A violated property is a panic.

// Each target and the replay test use a different part of this file.
#![allow(dead_code)]

use flexgate_dr::{
    AckPayload, MAX_DOCUMENT_BYTES, ReportPayload, StatusPayload, TelemetryPayload, parse_dr_event, to_json,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt::Debug;

/// The opening of a root object that already has a valid schema, id, revision and window: an
/// input appended to it (and closed with `}`) is a list of root members such as
/// `"target":{…}` or `"intervals":[…]`.
pub const ROOT_OPEN: &str = r#"{"schema":"dr.event/1","event_id":"fz","revision":1,"window":{"start":"2026-07-14T19:00:00Z","duration_s":3600},"#;
/// The opening of a `target` object with `point: meter`: an input appended to it (and closed
/// with `}}`) is a list of target members such as `"form":"ceiling","kw":5`.
pub const TARGET_OPEN: &str = r#"{"schema":"dr.event/1","event_id":"fz","revision":1,"window":{"start":"2026-07-14T19:00:00Z"},"target":{"point":"meter","#;

/// Outcome of one document, for the replay test's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Accepted, and its rendering parsed back equal.
    Accepted,
    /// Refused with a field and a message.
    Refused,
}

/// One `dr.event/1` document:
/// - `parse_dr_event` never panics, and a refusal names a field and says something;
/// - an accepted document, rendered with `to_json` and serialized, parses again to an equal
///   `DrEvent`, and rendering that gives the same text (the rendering is a fixed point). The one
///   allowed exception: the rendering writes inherited targets out and every target field (null
///   when unused), so it can be larger than the document; above the 64 KiB limit the re-parse
///   must refuse it for its size, and for nothing else.
pub fn dr_event(bytes: &[u8]) -> Outcome {
    match parse_dr_event(bytes) {
        Ok(event) => {
            let text = match serde_json::to_string(&event.to_json()) {
                Ok(t) => t,
                Err(e) => panic!("a rendered event must serialize: {e}"),
            };
            match parse_dr_event(text.as_bytes()) {
                Ok(back) => {
                    assert_eq!(back, event, "the rendering must parse back to the same event: {text}");
                    let again = serde_json::to_string(&back.to_json()).unwrap_or_default();
                    assert_eq!(again, text, "rendering must be a fixed point");
                }
                Err(e) => assert!(
                    text.len() > MAX_DOCUMENT_BYTES && e.field == "(document)",
                    "the rendering of an accepted event was refused: {e}\n{text}"
                ),
            }
            Outcome::Accepted
        }
        Err(e) => {
            assert!(!e.field.is_empty(), "an error must name a field: {e:?}");
            assert!(!e.message.is_empty(), "an error must say something: {e:?}");
            Outcome::Refused
        }
    }
}

/// [`dr_event`] on the input as it is and, when it is UTF-8, appended to [`ROOT_OPEN`] and to
/// [`TARGET_OPEN`], so that fragments reach the deeper code.
pub fn dr_event_all(bytes: &[u8]) -> Vec<Outcome> {
    let mut out = vec![dr_event(bytes)];
    if let Ok(s) = std::str::from_utf8(bytes) {
        out.push(dr_event(format!("{ROOT_OPEN}{s}}}").as_bytes()));
        out.push(dr_event(format!("{TARGET_OPEN}{s}}}}}").as_bytes()));
    }
    out
}

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + Debug>(name: &str, bytes: &[u8]) -> Outcome {
    match serde_json::from_slice::<T>(bytes) {
        Ok(doc) => {
            let out = match to_json(&doc) {
                Ok(o) => o,
                Err(e) => panic!("an accepted {name} must serialize: {e}; {doc:?}"),
            };
            let back: T = match serde_json::from_slice(&out) {
                Ok(b) => b,
                Err(e) => panic!(
                    "{name} as written must read back: {e}; {}",
                    String::from_utf8_lossy(&out)
                ),
            };
            assert_eq!(back, doc, "{name} must round-trip: {}", String::from_utf8_lossy(&out));
            match to_json(&back) {
                Ok(again) => assert_eq!(again, out, "{name}: writing must be a fixed point"),
                Err(e) => panic!("{name}: {e}"),
            }
            Outcome::Accepted
        }
        Err(e) => {
            assert!(!e.to_string().is_empty(), "a refusal of a {name} must say something");
            Outcome::Refused
        }
    }
}

/// The input read as each published document (`dr.ack/1`, `dr.status/1`, `dr.telemetry/1`,
/// `dr.report/1`) with its serde definition, as the MQTT tests and `log migrate` read them:
/// - reading never panics, and a refusal says something;
/// - an accepted document serializes with `to_json` (which refuses NaN and infinities, so a
///   value read from JSON must never be one), reads back equal, and writing that gives the same
///   bytes again.
pub fn payloads(bytes: &[u8]) -> Vec<Outcome> {
    vec![
        round_trip::<AckPayload>("dr.ack/1", bytes),
        round_trip::<StatusPayload>("dr.status/1", bytes),
        round_trip::<TelemetryPayload>("dr.telemetry/1", bytes),
        round_trip::<ReportPayload>("dr.report/1", bytes),
    ]
}
