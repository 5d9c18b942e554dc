//! Fuzz target for the OpenADR 3 JSON decoder.
//!
//! Invariants checked (a violation is a panic, which libFuzzer reports as a crash):
//! - `decode_any` and `decode_events` never panic, whatever the bytes, and every error says
//!   something;
//! - the two agree: a list of events from `decode_any` is what `decode_events` gives;
//! - what decodes goes on without panicking through what a VEN does with it next:
//!   `normalized_json` (whose value must serialize and parse back equal), `event_targets` and
//!   `zero_window` for every event, and the `EventTracker` over two polls;
//! - events serialize (the model's `Serialize`, what a VEN would store or send) and decode back
//!   to the same events (with no size or list limit: the model writes `programID` and
//!   `intervals` even when the input left them out), when their timestamps stay within years
//!   1–9999 (RFC 3339 has no other years, so a `9999-12-31T23:59:59-23:59` that is in year
//!   10000 in UTC cannot be written back) and none but the sentinel falls on 0001-01-01 (which
//!   reads back as the sentinel).
//!
//! To get past the outer shape quickly, valid UTF-8 input is also decoded wrapped as a list
//! element, as an event's intervals and as a notification's object.
#![no_main]

use chrono::{DateTime, Datelike, TimeZone, Utc};
use flexgate_openadr::oadr3::{
    Document, Event, EventTracker, Limits, decode_any, decode_events, event_targets, normalized_json, now_sentinel,
    zero_window,
};
use libfuzzer_sys::fuzz_target;

/// Whether `t` reads back as itself once written: a year RFC 3339 can write, and not a time on
/// 0001-01-01 other than the "now" sentinel itself (any such time reads back as the sentinel).
fn writable(t: &Option<DateTime<Utc>>) -> bool {
    t.is_none_or(|t| {
        (1..=9999).contains(&t.year()) && (t.date_naive() != now_sentinel().date_naive() || t == now_sentinel())
    })
}

/// Whether every timestamp of `e` can be written as RFC 3339 and read back.
fn timestamps_writable(e: &Event) -> bool {
    let period = |p: &Option<flexgate_openadr::oadr3::IntervalPeriod>| p.as_ref().is_none_or(|p| writable(&p.start));
    writable(&e.created_date_time)
        && writable(&e.modification_date_time)
        && period(&e.interval_period)
        && e.intervals.iter().all(|iv| period(&iv.interval_period))
}

fn follow_events(events: &[&Event]) {
    let now = Utc.with_ymd_and_hms(2026, 7, 1, 12, 0, 0).single().expect("a valid instant");
    for e in events {
        let _ = event_targets(e, now);
        let _ = zero_window(e);
    }
    let owned: Vec<Event> = events.iter().map(|e| (*e).clone()).collect();
    let mut tracker = EventTracker::new();
    let _ = tracker.observe_poll(&owned);
    let _ = tracker.observe_poll(&owned);
}

fn check(bytes: &[u8]) {
    let limits = Limits::default();
    let any = decode_any(bytes);
    let events = decode_events(bytes, &limits);
    for e in [any.as_ref().err(), events.as_ref().err()].into_iter().flatten() {
        assert!(!e.to_string().is_empty(), "an error must say something");
    }
    match (&any, &events) {
        (Ok(Document::Events(a)), b) => assert_eq!(Ok(a), b.as_ref(), "decode_any and decode_events disagree"),
        (Ok(Document::Event(a)), b) => {
            assert_eq!(Ok(&vec![a.as_ref().clone()]), b.as_ref(), "decode_any and decode_events disagree")
        }
        _ => {}
    }
    if let Ok(doc) = &any {
        let _ = doc.name();
        let value = normalized_json(doc);
        let text = serde_json::to_string(&value).expect("normalized_json must serialize");
        let back: serde_json::Value = serde_json::from_str(&text).expect("normalized_json output must parse back");
        assert_eq!(back, value, "normalized_json must round-trip through its serialization");
        follow_events(&doc.events());
    }
    if let Ok(events) = &events
        && events.iter().all(timestamps_writable)
    {
        // The model writes members the input may have left out (`programID`, `intervals`), so
        // an event at the member limit can be over it when written back: the round trip checks
        // values, not limits.
        let unlimited = Limits {
            max_bytes: usize::MAX,
            max_list: usize::MAX,
            ..Limits::default()
        };
        let written = serde_json::to_vec(events).expect("events serialize");
        let again = decode_events(&written, &unlimited).expect("serialized events decode");
        assert_eq!(&again, events, "events must decode back to themselves");
    }
}

const EVENT_OPEN: &str = r#"{"id":"f","programID":"p","intervalPeriod":{"start":"2026-07-01T18:00:00Z","duration":"PT15M"},"payloadDescriptors":[{"payloadType":"IMPORT_CAPACITY_LIMIT","units":"KW"}],"intervals":["#;
const NOTIFICATION_OPEN: &str = r#"{"objectType":"EVENT","operation":"PUT","object":"#;

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Ok(s) = std::str::from_utf8(data) {
        check(format!("[{s}]").as_bytes());
        check(format!("{EVENT_OPEN}{s}]}}").as_bytes());
        check(format!("{NOTIFICATION_OPEN}{s}}}").as_bytes());
    }
});
