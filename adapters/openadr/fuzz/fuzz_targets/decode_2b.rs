//! Fuzz target for the OpenADR 2.0b decoder.
//!
//! Invariants checked (a violation is a panic, which libFuzzer reports as a crash):
//! - `decode` never panics, whatever the bytes;
//! - when it succeeds, `normalized_json` never panics and its value serializes to a string that
//!   parses back to the same value.
//!
//! To get past the envelope, valid UTF-8 input is also decoded twice more: wrapped as the body of
//! an `oadrSignedObject` (all OpenADR namespaces declared on the payload, so a fragment like
//! `<oadr:oadrDistributeEvent>…` is meaningful), and wrapped as the content of an `ei:eiEvent`
//! inside an otherwise valid `oadrDistributeEvent`.
#![no_main]

use flexgate_openadr::oadr2b::{decode, normalized_json};
use libfuzzer_sys::fuzz_target;

const PAYLOAD_OPEN: &str = concat!(
    r#"<oadr:oadrPayload xmlns:oadr="http://openadr.org/oadr-2.0b/2012/07""#,
    r#" xmlns:ei="http://docs.oasis-open.org/ns/energyinterop/201110""#,
    r#" xmlns:pyld="http://docs.oasis-open.org/ns/energyinterop/201110/payloads""#,
    r#" xmlns:emix="http://docs.oasis-open.org/ns/emix/2011/06""#,
    r#" xmlns:power="http://docs.oasis-open.org/ns/emix/2011/06/power""#,
    r#" xmlns:scale="http://docs.oasis-open.org/ns/emix/2011/06/siscale""#,
    r#" xmlns:xcal="urn:ietf:params:xml:ns:icalendar-2.0""#,
    r#" xmlns:strm="urn:ietf:params:xml:ns:icalendar-2.0:stream""#,
    r#" xmlns:ds="http://www.w3.org/2000/09/xmldsig#">"#,
    r#"<oadr:oadrSignedObject>"#,
);
const PAYLOAD_CLOSE: &str = "</oadr:oadrSignedObject></oadr:oadrPayload>";
const EVENT_OPEN: &str = concat!(
    r#"<oadr:oadrDistributeEvent ei:schemaVersion="2.0b">"#,
    r#"<ei:eiResponse><ei:responseCode>200</ei:responseCode><ei:responseDescription>OK</ei:responseDescription><pyld:requestID/></ei:eiResponse>"#,
    r#"<pyld:requestID>R</pyld:requestID><ei:vtnID>V</ei:vtnID><oadr:oadrEvent><ei:eiEvent>"#,
);
const EVENT_CLOSE: &str = "</ei:eiEvent><oadr:oadrResponseRequired>always</oadr:oadrResponseRequired></oadr:oadrEvent></oadr:oadrDistributeEvent>";

fn check(bytes: &[u8]) {
    if let Ok(msg) = decode(bytes) {
        let _ = msg.name();
        let value = normalized_json(&msg);
        let text = serde_json::to_string(&value).expect("normalized_json must serialize");
        let back: serde_json::Value = serde_json::from_str(&text).expect("normalized_json output must parse back");
        assert_eq!(back, value, "normalized_json must round-trip through its serialization");
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if let Ok(s) = std::str::from_utf8(data) {
        check(format!("{PAYLOAD_OPEN}{s}{PAYLOAD_CLOSE}").as_bytes());
        check(format!("{PAYLOAD_OPEN}{EVENT_OPEN}{s}{EVENT_CLOSE}{PAYLOAD_CLOSE}").as_bytes());
    }
});
