//! The invariants of the `screen` fuzz target, shared with the corpus replay test
//! (`adapters/mqtt/tests/fuzz_corpus.rs`), so that the suite checks every corpus and seed input
//! exactly as the fuzzer did. A violation panics.
//!
//! For one input, taken both as an MQTT topic and as an event payload:
//!
//! 1. **Topic.** `Topics::event_id_from_topic` never panics; an id it accepts renders back to
//!    the same topic.
//! 2. **Admission.** The payload goes through `Screen::admit` (the signature check for the
//!    topic, then the screen), exactly as the gateway calls it, under each signature policy
//!    and at two clocks. Nothing panics; with signatures off only the screen can refuse; what
//!    is admitted names the topic's event; with signatures required only a verified document
//!    is admitted; every refusal has a reason, and the screen's verdict is `Screen::check`'s.
//!    A header remembered is a duplicate the next time.
//! 3. **Signing agrees with verifying.** When the strict parse takes the payload (an object,
//!    no duplicate keys, integers within 2^53), `serde_json` reads it too; signing it for the
//!    topic gives a document that verifies for that topic and for no other, that a body-only
//!    signature of it is refused as such, and whose canonical form is the original's (so what
//!    a publisher signs is what the gateway checks); `signing_input` is the tag, the topic and
//!    the canonical bytes.

use chrono::{DateTime, Utc};
use flexgate_mqtt::signature::{
    self, MAX_SIGNED_BYTES, SIGNING_TAG, SignatureError, SignaturePolicy, SigningKey, TrustedKeys, Verified,
};
use flexgate_mqtt::{Refusal, Rejection, Screen, Topics};

/// What one input did, for the replay test's totals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// Admitted with signatures optional.
    pub admitted: bool,
    /// Admitted with signatures required (it carried a valid signature for the topic).
    pub signed: bool,
    /// Refused by the strict parse or a malformed header.
    pub malformed: bool,
    /// The sign/verify round trip ran (the payload is a strict, signable object).
    pub round_trip: bool,
}

/// The site of the topic every payload is received on.
pub const SITE: &str = "site-f";
/// The seed of the one trusted key (the seeds in `seeds/` that verify are signed with it).
pub const KEY_SEED: [u8; 32] = [0x42; 32];

fn clocks() -> [DateTime<Utc>; 2] {
    [
        DateTime::parse_from_rfc3339("2026-07-14T19:00:05Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default(),
        DateTime::parse_from_rfc3339("2031-01-01T00:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default(),
    ]
}

/// Runs every invariant on `data`.
pub fn check(data: &[u8]) -> Outcome {
    let topics = Topics::for_site(SITE).expect("a valid site");
    let key = SigningKey::from_bytes(&KEY_SEED);
    let keys = TrustedKeys::from_keys(vec![key.verifying_key()]).expect("one key");
    let mut outcome = Outcome::default();

    // 1. The input as a topic.
    let as_topic = String::from_utf8_lossy(data);
    if let Ok(id) = topics.event_id_from_topic(&as_topic) {
        assert_eq!(
            topics.event(id).as_deref(),
            Ok(&*as_topic),
            "an accepted topic renders back"
        );
    }

    // 2. The input as a payload on the topic its own event_id names (when that is a valid
    // topic level), so that documents get past the topic check; otherwise on `ev-1`.
    let event_id = flexgate_mqtt::screen::read_header(data)
        .ok()
        .map(|h| h.event_id)
        .filter(|id| topics.event(id).is_ok())
        .unwrap_or_else(|| "ev-1".to_owned());
    let topic = topics.event(&event_id).expect("a valid event id");
    let screen = Screen::default();
    for now in clocks() {
        for policy in [
            SignaturePolicy::Off,
            SignaturePolicy::Optional,
            SignaturePolicy::Required,
        ] {
            match screen.admit(&topic, &event_id, data, &keys, policy, now) {
                Ok((verified, header)) => {
                    assert_eq!(header.event_id, event_id, "admitted for another event");
                    match policy {
                        SignaturePolicy::Off => assert_eq!(verified, Verified::NotChecked),
                        SignaturePolicy::Required => {
                            assert_eq!(verified, Verified::Signed { key_index: 0 });
                            outcome.signed = true;
                        }
                        SignaturePolicy::Optional => {
                            assert_ne!(verified, Verified::NotChecked);
                            outcome.admitted = true;
                        }
                    }
                    assert_eq!(screen.check(&event_id, data, now), Ok(header.clone()));
                    let mut remembering = Screen::default();
                    remembering.remember(&header, now);
                    let again = remembering.check(&event_id, data, now);
                    assert!(
                        matches!(&again, Err(r @ Rejection::Duplicate { .. }) if r.is_repeat()),
                        "a remembered header must be a duplicate: {again:?}"
                    );
                }
                Err(refusal) => {
                    assert!(!refusal.to_string().is_empty(), "a refusal says why");
                    match &refusal {
                        Refusal::Signature(e) => {
                            assert_ne!(policy, SignaturePolicy::Off, "signatures off, yet refused: {e}");
                        }
                        Refusal::Screen(r) => {
                            assert_eq!(screen.check(&event_id, data, now).err().as_ref(), Some(r));
                        }
                    }
                    outcome.malformed |= refusal.is_malformed();
                }
            }
        }
    }

    // 3. Signing agrees with verifying.
    if let Ok(canonical) = signature::canonical_without_sig(data) {
        let mut value: serde_json::Value =
            serde_json::from_slice(data).expect("what the strict parse takes, serde_json takes");
        let mut expected_input = SIGNING_TAG.to_vec();
        expected_input.push(0);
        expected_input.extend_from_slice(topic.as_bytes());
        expected_input.push(0);
        expected_input.extend_from_slice(&canonical);
        assert_eq!(
            signature::signing_input(&topic, data).as_deref(),
            Ok(&expected_input[..])
        );
        signature::attach_signature(&topic, &mut value, &key).expect("a strict object signs");
        let signed = serde_json::to_vec(&value).expect("serializes");
        if signed.len() <= MAX_SIGNED_BYTES {
            outcome.round_trip = true;
            assert_eq!(
                signature::canonical_without_sig(&signed).as_deref(),
                Ok(&canonical[..]),
                "the canonical form survives serialization"
            );
            assert_eq!(
                signature::verify(&topic, &signed, &keys, SignaturePolicy::Required),
                Ok(Verified::Signed { key_index: 0 }),
                "a document signed for the topic verifies there"
            );
            let elsewhere = topics.event("ev-elsewhere").expect("a valid id");
            if elsewhere != topic {
                assert!(
                    matches!(
                        signature::verify(&elsewhere, &signed, &keys, SignaturePolicy::Optional),
                        Err(SignatureError::BadSignature { .. })
                    ),
                    "a signature holds for one topic only"
                );
            }
            if let serde_json::Value::Object(map) = &mut value {
                let body_only = ed25519_sign(&key, &canonical);
                map.insert("sig".into(), body_only.into());
            }
            let legacy = serde_json::to_vec(&value).expect("serializes");
            if legacy.len() <= MAX_SIGNED_BYTES {
                assert!(
                    matches!(
                        signature::verify(&topic, &legacy, &keys, SignaturePolicy::Optional),
                        Err(SignatureError::BodyOnly { .. })
                    ),
                    "a body-only signature is refused as such"
                );
            }
        }
    }
    outcome
}

/// The first scheme's signature (over the canonical document alone), base64url.
fn ed25519_sign(key: &SigningKey, message: &[u8]) -> String {
    use base64::Engine;
    use ed25519_dalek::Signer;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.sign(message).to_bytes())
}
