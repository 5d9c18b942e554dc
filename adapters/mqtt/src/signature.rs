//! Ed25519 signatures on event documents.
//!
//! TLS protects one hop; a broker sits in the middle, so an event carries its own signature in
//! the optional top-level `sig` member.
//!
//! # The scheme (v2: the signature binds the topic)
//!
//! 1. Parse the document as JSON. Refuse it if any object anywhere repeats a key (see below).
//! 2. Remove the top-level member `sig`, if present. The document must be an object.
//! 3. Serialize what remains canonically, as RFC 8785 (JSON Canonicalization Scheme) does:
//!    - no whitespace;
//!    - object members sorted by their keys compared as sequences of UTF-16 code units;
//!    - strings with `"` and `\` escaped, U+0008/09/0A/0C/0D as `\b \t \n \f \r`, other
//!      characters below U+0020 as `\u00xx` (lowercase hex), everything else as literal UTF-8;
//!    - numbers as ECMAScript's `Number.prototype.toString` writes the IEEE-754 double:
//!      `8000.0` and `8000` both become `8000`, `0.5` stays `0.5`, `1e21` becomes `1e+21`,
//!      `1e-7` stays `1e-7`, `-0` becomes `0`.
//!
//!    One deliberate departure, in the safe direction: an integer literal whose magnitude is
//!    above 2^53 (9007199254740992) is refused instead of being rounded to a double, because the
//!    application reads integers such as `revision` exactly, and two documents that differ
//!    there would otherwise share a signature.
//! 4. The signed message ([`signing_input`]) is the 17 ASCII bytes of [`SIGNING_TAG`]
//!    (`dr.event/1 sig v2`), one zero byte, the full MQTT topic the event is published on
//!    (`{prefix}/{site}/events/{event_id}`, UTF-8), one zero byte, then the canonical bytes of
//!    step 3. `sig` is the 64-byte Ed25519 signature of that message (RFC 8032, "pure" Ed25519,
//!    no context) as base64url without padding (RFC 4648 §5), like a JWS signature. [`verify`]
//!    also accepts the standard alphabet and padding, so publishers can use whatever base64
//!    their language has.
//!
//! **Why the topic is signed.** The first scheme signed the body alone, and `site` is optional
//! in `dr.event/1`, so a site-less event signed for one site verified at every site trusting
//! the key: anyone who could publish at another site could replay it there. The topic names
//! the prefix, the site and the event id, so a signature now holds for one topic only; the
//! screen separately checks that the document's `event_id` is the topic's, and the gateway that
//! a `site` the document names is its own. The tag keeps these signatures from being valid for
//! any other message a key holder signs, and versions the scheme. A zero byte cannot occur in
//! an MQTT topic (MQTT 3.1.1 §4.7.3) nor in the tag, so the three parts cannot be confused.
//! A signature made with the first scheme is refused with [`SignatureError::BodyOnly`], which
//! says how to re-sign.
//!
//! A bridge that rewrites topics between the utility and the gateway's broker breaks these
//! signatures: the topic signed is the topic the gateway receives.
//!
//! Any RFC 8785 library produces the same bytes for any document this module accepts, so a
//! publisher in another language needs only JCS and Ed25519. Verification uses
//! `verify_strict` (refuses small-order keys and non-canonical signatures), and every trusted
//! key is tried in turn: the document names no key id.
//!
//! Duplicate keys are detected here (a strict parse), not left to the application's parser,
//! so that this module is safe on its own.

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, general_purpose};
use ed25519_dalek::{Signature, Signer};
/// The key types, re-exported so that a publisher (or a test) can sign without depending on
/// `ed25519-dalek` itself.
pub use ed25519_dalek::{SigningKey, VerifyingKey};
use flexgate_jcs::{CanonicalError, Integers};

use crate::json::{Node, parse_strict};

/// Largest document the signature check reads, bytes (the `dr.event/1` limit).
pub const MAX_SIGNED_BYTES: usize = 64 * 1024;
/// The largest integer magnitude a signed document may carry (2^53, as in RFC 8785).
pub const MAX_SAFE_INTEGER: u64 = flexgate_jcs::MAX_SAFE_INTEGER;

/// What a received document must prove. In configuration files: `required`, `optional` or
/// `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignaturePolicy {
    /// Every document must carry a `sig` that one of the trusted keys verifies.
    Required,
    /// A document without `sig` passes as unsigned; one with `sig` must verify.
    #[default]
    Optional,
    /// Signatures are not looked at (the document is not even parsed here).
    Off,
}

/// The outcome of a successful [`verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    /// The signature verified with the trusted key at this index (order of configuration).
    Signed {
        /// Index into [`TrustedKeys`].
        key_index: usize,
    },
    /// No `sig`, and the policy is [`SignaturePolicy::Optional`].
    Unsigned,
    /// The policy is [`SignaturePolicy::Off`].
    NotChecked,
}

/// Why a document or a key was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The document is larger than [`MAX_SIGNED_BYTES`].
    #[error("the document is {0} bytes, more than the {MAX_SIGNED_BYTES}-byte limit")]
    TooLarge(usize),
    /// Not JSON, or a key repeats (the message names it).
    #[error("the document is not acceptable JSON: {0}")]
    Json(String),
    /// The document is not a JSON object.
    #[error("the document is {0}, not a JSON object")]
    NotAnObject(&'static str),
    /// An integer that a double cannot hold exactly.
    #[error("the integer {0} is larger in magnitude than 2^53 and cannot be signed unambiguously")]
    UnsafeInteger(String),
    /// A float that JSON cannot carry.
    #[error("a number is NaN or infinite")]
    NonFinite,
    /// The policy requires a signature and there is none (or it is `null`).
    #[error("the document has no \"sig\", and signatures are required")]
    Missing,
    /// `sig` is not a string.
    #[error("\"sig\" must be a base64url string, not {0}")]
    SigNotAString(&'static str),
    /// `sig` is not base64.
    #[error("\"sig\" is not base64url (or base64): {0}")]
    BadBase64(String),
    /// `sig` decodes to the wrong number of bytes.
    #[error("\"sig\" decodes to {0} bytes; an Ed25519 signature has 64")]
    BadLength(usize),
    /// No trusted key verifies the signature for this topic: the document was changed, it was
    /// signed for another topic (another site, another event), or by another key.
    #[error(
        "\"sig\" does not verify for topic {topic} with any of the {keys} trusted keys (the document was altered, \
         signed for another topic or site, or signed by an unknown key)"
    )]
    BadSignature {
        /// How many keys were tried.
        keys: usize,
        /// The topic the signature was checked for (without control characters, at most 300
        /// characters).
        topic: String,
    },
    /// A trusted key signed the document alone, as the first scheme did: such a signature
    /// holds at every site and topic, so it is refused. The publisher must sign the v2 input.
    #[error(
        "\"sig\" signs the document alone (the superseded scheme, replayable at any site or topic); sign \
         \"dr.event/1 sig v2\", a zero byte, the topic {topic}, a zero byte and the canonical document"
    )]
    BodyOnly {
        /// The topic the signature should have bound (as in [`SignatureError::BadSignature`]).
        topic: String,
    },
    /// The topic cannot be part of a signed message (it contains U+0000, which MQTT forbids in
    /// topics and which separates the parts of the message).
    #[error("the topic contains U+0000 and cannot be signed")]
    BadTopic,
    /// A signature must be checked but no key is configured.
    #[error("the document must be verified but no trusted key is configured")]
    NoTrustedKeys,
    /// A configured public key is unusable.
    #[error("trusted key {index}: {why}")]
    BadKey {
        /// Position in the configured list.
        index: usize,
        /// What is wrong with it.
        why: String,
    },
}

/// The public keys whose signatures are accepted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedKeys {
    keys: Vec<VerifyingKey>,
}

impl TrustedKeys {
    /// Keys given as text: 64 hex digits, or base64/base64url (padded or not) of 32 bytes.
    /// Small-order ("weak") keys are refused: anyone can forge signatures for them.
    pub fn parse<S: AsRef<str>>(encoded: &[S]) -> Result<Self, SignatureError> {
        let mut keys = Vec::with_capacity(encoded.len());
        for (index, text) in encoded.iter().enumerate() {
            keys.push(parse_key(index, text.as_ref().trim())?);
        }
        Self::from_keys(keys)
    }

    /// Keys already decoded. Refuses weak keys and duplicates (a sign of a configuration slip).
    pub fn from_keys(keys: Vec<VerifyingKey>) -> Result<Self, SignatureError> {
        for (index, key) in keys.iter().enumerate() {
            if key.is_weak() {
                return Err(SignatureError::BadKey {
                    index,
                    why: "it is a small-order (weak) key, for which signatures can be forged".into(),
                });
            }
            if keys.get(..index).is_some_and(|before| before.contains(key)) {
                return Err(SignatureError::BadKey {
                    index,
                    why: "it repeats an earlier key".into(),
                });
            }
        }
        Ok(Self { keys })
    }

    /// How many keys are trusted.
    #[must_use]
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is trusted.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The trusted keys, in configuration order.
    #[must_use]
    pub fn keys(&self) -> &[VerifyingKey] {
        &self.keys
    }
}

fn parse_key(index: usize, text: &str) -> Result<VerifyingKey, SignatureError> {
    let bad = |why: String| SignatureError::BadKey { index, why };
    let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        hex::decode(text).map_err(|e| bad(format!("not hex: {e}")))?
    } else {
        decode_base64(text).map_err(|e| bad(format!("neither 64 hex digits nor base64: {e}")))?
    };
    let array: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| bad(format!("{} bytes; an Ed25519 public key has 32", bytes.len())))?;
    VerifyingKey::from_bytes(&array).map_err(|_| bad("not a valid Ed25519 public key (not a curve point)".into()))
}

const INDIFFERENT: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const URL_SAFE_ANY: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::URL_SAFE, INDIFFERENT);
const STANDARD_ANY: GeneralPurpose = GeneralPurpose::new(&base64::alphabet::STANDARD, INDIFFERENT);

fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    if text.contains(['+', '/']) {
        STANDARD_ANY.decode(text)
    } else {
        URL_SAFE_ANY.decode(text)
    }
}

/// The domain-separation tag that starts every signed message (step 4 of the scheme).
pub const SIGNING_TAG: &[u8] = b"dr.event/1 sig v2";

/// The canonical JSON of a document without its top-level `sig` (step 3 of the scheme; the
/// ledger's and the signatures' canonical forms agree on it).
pub fn canonical_without_sig(bytes: &[u8]) -> Result<Vec<u8>, SignatureError> {
    let (node, _) = parse_document(bytes)?;
    canonical_node(&node)
}

/// The exact bytes signed for a document published on `topic`: [`SIGNING_TAG`], a zero byte,
/// the topic, a zero byte, and [`canonical_without_sig`] of the document.
pub fn signing_input(topic: &str, bytes: &[u8]) -> Result<Vec<u8>, SignatureError> {
    let (node, _) = parse_document(bytes)?;
    message(topic, &canonical_node(&node)?)
}

fn message(topic: &str, canonical: &[u8]) -> Result<Vec<u8>, SignatureError> {
    if topic.contains('\0') {
        return Err(SignatureError::BadTopic);
    }
    let mut out = Vec::with_capacity(SIGNING_TAG.len() + topic.len() + canonical.len() + 2);
    out.extend_from_slice(SIGNING_TAG);
    out.push(0);
    out.extend_from_slice(topic.as_bytes());
    out.push(0);
    out.extend_from_slice(canonical);
    Ok(out)
}

/// The canonical JSON (RFC 8785, with the integer rule of the module docs) of a value.
pub fn canonical_json(value: &serde_json::Value) -> Result<Vec<u8>, SignatureError> {
    canonical_node(&Node::from_value(value))
}

/// Signs a document for `topic`: the base64url `sig` for `doc`, whose own top-level `sig`, if
/// any, is ignored. Fails only when `doc` is not an object, holds an integer above 2^53, or the
/// topic contains U+0000.
pub fn sign(topic: &str, doc: &serde_json::Value, key: &SigningKey) -> Result<String, SignatureError> {
    let mut node = Node::from_value(doc);
    match &mut node {
        Node::Obj(members) => members.retain(|(k, _)| k != "sig"),
        other => return Err(SignatureError::NotAnObject(other.kind())),
    }
    let message = message(topic, &canonical_node(&node)?)?;
    let signature: Signature = key.sign(&message);
    Ok(general_purpose::URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

/// Signs `doc` for `topic` in place: sets its top-level `sig` (for publishers and tests).
pub fn attach_signature(topic: &str, doc: &mut serde_json::Value, key: &SigningKey) -> Result<(), SignatureError> {
    let sig = sign(topic, doc, key)?;
    match doc {
        serde_json::Value::Object(map) => {
            map.insert("sig".into(), sig.into());
            Ok(())
        }
        _ => Err(SignatureError::NotAnObject("not an object")),
    }
}

/// Checks the signature of a document received on `topic` under `policy` against `keys`.
///
/// With [`SignaturePolicy::Off`] nothing is read. Otherwise the document must be strict JSON
/// (no duplicate keys, at most [`MAX_SIGNED_BYTES`]); a `sig` that is present must verify
/// for this topic even when signatures are optional, because a bad signature is a sign of
/// tampering or replay, not an absence of signing.
pub fn verify(
    topic: &str,
    bytes: &[u8],
    keys: &TrustedKeys,
    policy: SignaturePolicy,
) -> Result<Verified, SignatureError> {
    if policy == SignaturePolicy::Off {
        return Ok(Verified::NotChecked);
    }
    let (node, sig) = parse_document(bytes)?;
    let sig = match sig {
        None | Some(Node::Null) => {
            return match policy {
                SignaturePolicy::Required => Err(SignatureError::Missing),
                _ => Ok(Verified::Unsigned),
            };
        }
        Some(Node::Str(s)) => s,
        Some(other) => return Err(SignatureError::SigNotAString(other.kind())),
    };
    if keys.is_empty() {
        return Err(SignatureError::NoTrustedKeys);
    }
    let raw = decode_base64(sig.trim()).map_err(|e| SignatureError::BadBase64(e.to_string()))?;
    let array: [u8; 64] = raw
        .as_slice()
        .try_into()
        .map_err(|_| SignatureError::BadLength(raw.len()))?;
    let signature = Signature::from_bytes(&array);
    let canonical = canonical_node(&node)?;
    let signed = message(topic, &canonical)?;
    if let Some(key_index) = keys
        .keys
        .iter()
        .position(|k| k.verify_strict(&signed, &signature).is_ok())
    {
        return Ok(Verified::Signed { key_index });
    }
    let topic = shown_topic(topic);
    // Only to word the refusal: a publisher still on the body-only scheme learns what to fix.
    if keys
        .keys
        .iter()
        .any(|k| k.verify_strict(&canonical, &signature).is_ok())
    {
        return Err(SignatureError::BodyOnly { topic });
    }
    Err(SignatureError::BadSignature {
        keys: keys.len(),
        topic,
    })
}

/// A topic as it may appear in an error: no control characters, at most 300 characters.
fn shown_topic(topic: &str) -> String {
    topic.chars().filter(|c| !c.is_control()).take(300).collect()
}

/// Parses strictly and splits off the top-level `sig`.
fn parse_document(bytes: &[u8]) -> Result<(Node, Option<Node>), SignatureError> {
    if bytes.len() > MAX_SIGNED_BYTES {
        return Err(SignatureError::TooLarge(bytes.len()));
    }
    let mut node = parse_strict(bytes).map_err(|e| SignatureError::Json(e.to_string()))?;
    let Node::Obj(members) = &mut node else {
        return Err(SignatureError::NotAnObject(node.kind()));
    };
    let sig = members
        .iter()
        .position(|(k, _)| k == "sig")
        .map(|i| members.remove(i).1);
    Ok((node, sig))
}

/// The canonical bytes of a strictly parsed tree: the one RFC 8785 implementation of the
/// workspace (`flexgate-jcs`, shared with the ledger) under its integer rule that refuses
/// magnitudes above 2^53. The tree has no duplicate keys (the strict parse refused them), so
/// turning it into a `serde_json::Value` loses nothing.
fn canonical_node(node: &Node) -> Result<Vec<u8>, SignatureError> {
    let value = node.to_value().ok_or(SignatureError::NonFinite)?;
    flexgate_jcs::canonical_json_with(&value, Integers::SafeOnly)
        .map(String::into_bytes)
        .map_err(|e| match e {
            CanonicalError::UnsafeInteger(text) => SignatureError::UnsafeInteger(text),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    fn trusted(keys: &[&SigningKey]) -> TrustedKeys {
        TrustedKeys::from_keys(keys.iter().map(|k| k.verifying_key()).collect()).unwrap()
    }

    fn event() -> serde_json::Value {
        json!({"schema":"dr.event/1","event_id":"ev-2026-0142","revision":3,"site":"dc-east",
            "issued_at":"2026-07-14T18:59:40Z","program":"util-dr-10min","mandatory":true,
            "target":{"form":"ceiling","point":"meter","kw":8000,"baseline_kw":null},
            "window":{"start":"2026-07-14T19:00:00Z","ramp_s":600,"duration_s":7200},"cancel":false})
    }

    const TOPIC: &str = "dr/dc-east/events/ev-2026-0142";

    fn signed(k: &SigningKey) -> Vec<u8> {
        let mut doc = event();
        attach_signature(TOPIC, &mut doc, k).unwrap();
        serde_json::to_vec_pretty(&doc).unwrap()
    }

    fn bad_signature(keys: usize) -> SignatureError {
        SignatureError::BadSignature {
            keys,
            topic: TOPIC.into(),
        }
    }

    #[test]
    fn canonical_form_sorts_escapes_and_normalizes() {
        let doc = "{ \"b\" : [1, 2.50, -0.0, 1e3], \"a\" : \"x\\u0001\\n\\u00e9\\ud83d\\ude00\\u2028\", \"sig\":\"zz\", \"\\u20ac\":1, \"\\ud83d\\ude00\":2, \"\\ufb33\":3 }";
        let c = String::from_utf8(canonical_without_sig(doc.as_bytes()).unwrap()).unwrap();
        // UTF-16 order: "a" < "b" < "€" (U+20AC) < "😀" (D83D…) < "פּ" (U+FB33); the
        // code-point order would put the emoji last.
        assert_eq!(
            c,
            "{\"a\":\"x\\u0001\\né😀\u{2028}\",\"b\":[1,2.5,0,1000],\"€\":1,\"😀\":2,\"\u{fb33}\":3}"
        );
        // Nested "sig" members are data, not the signature.
        let c = canonical_without_sig(br#"{"x":{"sig":1}}"#).unwrap();
        assert_eq!(c, br#"{"x":{"sig":1}}"#);
        // Floats are read correctly rounded (serde_json's `float_roundtrip`): RFC 8785's own
        // example, which a publisher's JCS library writes as 333333333.3333333. Without the
        // feature the parser read it one ULP off and every such signature failed.
        let c = canonical_without_sig(br#"{"x":333333333.33333329,"y":1E30,"z":1429.1796795561945}"#).unwrap();
        assert_eq!(c, br#"{"x":333333333.3333333,"y":1e+30,"z":1429.1796795561945}"#);
    }

    #[test]
    fn valid_signatures_verify_with_the_right_key() {
        let (a, b) = (key(1), key(2));
        let doc = signed(&a);
        assert_eq!(
            verify(TOPIC, &doc, &trusted(&[&b, &a]), SignaturePolicy::Required).unwrap(),
            Verified::Signed { key_index: 1 }
        );
        // Whitespace and member order are not part of the signed message.
        let v: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        let mut members: Vec<(String, serde_json::Value)> = v.as_object().unwrap().clone().into_iter().collect();
        members.reverse();
        let reordered = format!(
            "{{{}}}",
            members
                .iter()
                .map(|(k, v)| format!("{}:{}", json!(k), v))
                .collect::<Vec<_>>()
                .join(" , ")
        );
        assert!(verify(TOPIC, reordered.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required).is_ok());
        // An integral float is the same number as the integer.
        let as_float = String::from_utf8(doc.clone()).unwrap().replace("8000", "8000.0");
        assert!(verify(TOPIC, as_float.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required).is_ok());
        // Standard base64 with padding is accepted too.
        let mut std_doc = v.clone();
        let raw = general_purpose::URL_SAFE_NO_PAD
            .decode(v["sig"].as_str().unwrap())
            .unwrap();
        std_doc["sig"] = general_purpose::STANDARD.encode(raw).into();
        assert!(
            verify(
                TOPIC,
                std_doc.to_string().as_bytes(),
                &trusted(&[&a]),
                SignaturePolicy::Required
            )
            .is_ok()
        );
    }

    #[test]
    fn the_signature_binds_the_topic() {
        let a = key(1);
        let keys = trusted(&[&a]);
        let doc = signed(&a);
        assert!(verify(TOPIC, &doc, &keys, SignaturePolicy::Required).is_ok());
        for other in [
            "dr/dc-west/events/ev-2026-0142",
            "dr/dc-east/events/ev-2026-0143",
            "utility-x/dr/dc-east/events/ev-2026-0142",
        ] {
            assert_eq!(
                verify(other, &doc, &keys, SignaturePolicy::Optional),
                Err(SignatureError::BadSignature {
                    keys: 1,
                    topic: other.into()
                }),
                "{other}"
            );
        }
        // The replay the first scheme allowed: an event without `site`, signed for one site,
        // published at another.
        let mut siteless = event();
        siteless.as_object_mut().unwrap().remove("site");
        attach_signature(TOPIC, &mut siteless, &a).unwrap();
        let bytes = siteless.to_string();
        assert!(verify(TOPIC, bytes.as_bytes(), &keys, SignaturePolicy::Required).is_ok());
        let e = verify(
            "dr/dc-west/events/ev-2026-0142",
            bytes.as_bytes(),
            &keys,
            SignaturePolicy::Required,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("for topic dr/dc-west/events/ev-2026-0142"),
            "{e}"
        );
    }

    #[test]
    fn body_only_signatures_are_refused_with_how_to_re_sign() {
        let a = key(1);
        let mut v = event();
        let body_only = a.sign(&canonical_json(&v).unwrap());
        v["sig"] = general_purpose::URL_SAFE_NO_PAD.encode(body_only.to_bytes()).into();
        let e = verify(
            TOPIC,
            v.to_string().as_bytes(),
            &trusted(&[&a]),
            SignaturePolicy::Optional,
        )
        .unwrap_err();
        assert_eq!(e, SignatureError::BodyOnly { topic: TOPIC.into() });
        assert!(
            e.to_string().contains("\"dr.event/1 sig v2\", a zero byte, the topic"),
            "{e}"
        );
    }

    #[test]
    fn the_signing_input_is_the_tag_the_topic_and_the_canonical_document() {
        let doc = br#"{ "b": 1.0, "a": "x", "sig": "ignored" }"#;
        assert_eq!(
            signing_input("dr/s/events/e", doc).unwrap(),
            b"dr.event/1 sig v2\0dr/s/events/e\0{\"a\":\"x\",\"b\":1}"
        );
        assert_eq!(SIGNING_TAG.len(), 17);
        assert_eq!(signing_input("dr/s\0/events/e", doc), Err(SignatureError::BadTopic));
        assert_eq!(
            sign("a\0b", &event(), &key(1)),
            Err(SignatureError::BadTopic),
            "a publisher cannot sign an ambiguous message either"
        );
        // What `sign` signs is exactly `signing_input`.
        let a = key(1);
        let doc = signed(&a);
        let v: serde_json::Value = serde_json::from_slice(&doc).unwrap();
        let raw = general_purpose::URL_SAFE_NO_PAD
            .decode(v["sig"].as_str().unwrap())
            .unwrap();
        let sig = Signature::from_bytes(&raw.as_slice().try_into().unwrap());
        let input = signing_input(TOPIC, &doc).unwrap();
        assert!(a.verifying_key().verify_strict(&input, &sig).is_ok());
    }

    /// The worked example in adapters/mqtt/README.md (Signatures), whose signature was made
    /// from that description alone, with Python's `cryptography` and `json` modules: this
    /// implementation must agree with it byte for byte.
    #[test]
    fn the_readme_example_signs_and_verifies_as_documented() {
        let key = key(1);
        assert_eq!(
            hex::encode(key.verifying_key().as_bytes()),
            "8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c"
        );
        let topic = "dr/dc-east/events/ev-1";
        let doc = json!({"schema":"dr.event/1","event_id":"ev-1","revision":2,
            "target":{"form":"ceiling","point":"meter","kw":8000.0},
            "window":{"start":"2026-07-14T19:00:00Z","duration_s":7200}});
        let input = signing_input(topic, doc.to_string().as_bytes()).unwrap();
        let mut expected = b"dr.event/1 sig v2\0dr/dc-east/events/ev-1\0".to_vec();
        expected.extend_from_slice(
            br#"{"event_id":"ev-1","revision":2,"schema":"dr.event/1","target":{"form":"ceiling","kw":8000,"point":"meter"},"window":{"duration_s":7200,"start":"2026-07-14T19:00:00Z"}}"#,
        );
        assert_eq!(input, expected);
        let sig = "Wslfac7auLbOHynvPWMFCisu2Iov-RwVhoueeuTS5piVSzIjx7_Y9pKy3v0T0mqRjBK5VpI6spTpGG29tzUzDw";
        assert_eq!(sign(topic, &doc, &key).unwrap(), sig);
        let mut published = doc.clone();
        published["sig"] = sig.into();
        assert!(
            verify(
                topic,
                published.to_string().as_bytes(),
                &trusted(&[&key]),
                SignaturePolicy::Required
            )
            .is_ok()
        );
    }

    #[test]
    fn tampering_and_wrong_keys_are_refused() {
        let (a, b) = (key(1), key(2));
        let doc = String::from_utf8(signed(&a)).unwrap();
        let tampered = doc.replace("8000", "9000");
        assert_eq!(
            verify(TOPIC, tampered.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required),
            Err(bad_signature(1))
        );
        let e = verify(TOPIC, doc.as_bytes(), &trusted(&[&b]), SignaturePolicy::Optional).unwrap_err();
        assert_eq!(e, bad_signature(1));
        assert!(e.to_string().contains("altered"), "{e}");
        // A second value smuggled in by a duplicate key.
        let smuggled = doc.replacen("\"revision\": 3", "\"revision\": 3, \"revision\": 4", 1);
        assert_ne!(smuggled, doc);
        assert!(matches!(
            verify(TOPIC, smuggled.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required),
            Err(SignatureError::Json(m)) if m.contains("duplicate key")
        ));
        // Adding a member, even null, changes the message.
        let mut v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        v["priority"] = serde_json::Value::Null;
        assert!(
            verify(
                TOPIC,
                v.to_string().as_bytes(),
                &trusted(&[&a]),
                SignaturePolicy::Required
            )
            .is_err()
        );
    }

    #[test]
    fn missing_and_malformed_signatures() {
        let a = key(1);
        let keys = trusted(&[&a]);
        let unsigned = event().to_string();
        assert_eq!(
            verify(TOPIC, unsigned.as_bytes(), &keys, SignaturePolicy::Required),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(TOPIC, unsigned.as_bytes(), &keys, SignaturePolicy::Optional),
            Ok(Verified::Unsigned)
        );
        assert_eq!(
            verify(TOPIC, b"not json at all", &keys, SignaturePolicy::Off),
            Ok(Verified::NotChecked)
        );
        let with = |sig: serde_json::Value| {
            let mut v = event();
            v["sig"] = sig;
            v.to_string()
        };
        assert_eq!(
            verify(
                TOPIC,
                with(serde_json::Value::Null).as_bytes(),
                &keys,
                SignaturePolicy::Required
            ),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(TOPIC, with(json!(5)).as_bytes(), &keys, SignaturePolicy::Optional),
            Err(SignatureError::SigNotAString("a number"))
        );
        assert!(matches!(
            verify(
                TOPIC,
                with(json!("!!not base64!!")).as_bytes(),
                &keys,
                SignaturePolicy::Optional
            ),
            Err(SignatureError::BadBase64(_))
        ));
        assert_eq!(
            verify(TOPIC, with(json!("AAAA")).as_bytes(), &keys, SignaturePolicy::Optional),
            Err(SignatureError::BadLength(3))
        );
        let zeros = general_purpose::URL_SAFE_NO_PAD.encode([0u8; 64]);
        assert_eq!(
            verify(TOPIC, with(json!(zeros)).as_bytes(), &keys, SignaturePolicy::Required),
            Err(bad_signature(1))
        );
        assert_eq!(
            verify(
                TOPIC,
                signed(&a).as_slice(),
                &TrustedKeys::default(),
                SignaturePolicy::Optional
            ),
            Err(SignatureError::NoTrustedKeys)
        );
        assert_eq!(
            verify(TOPIC, b"[1]", &keys, SignaturePolicy::Required),
            Err(SignatureError::NotAnObject("an array"))
        );
        let huge = vec![b' '; MAX_SIGNED_BYTES + 1];
        assert_eq!(
            verify(TOPIC, &huge, &keys, SignaturePolicy::Required),
            Err(SignatureError::TooLarge(MAX_SIGNED_BYTES + 1))
        );
    }

    #[test]
    fn unsafe_integers_cannot_be_signed_or_verified() {
        let a = key(1);
        let mut v = event();
        v["revision"] = json!(9_007_199_254_740_993_u64);
        assert!(matches!(sign(TOPIC, &v, &a), Err(SignatureError::UnsafeInteger(_))));
        v["revision"] = json!(9_007_199_254_740_992_u64);
        assert!(sign(TOPIC, &v, &a).is_ok());
        let doc = br#"{"revision":-9007199254740993,"sig":"AAAA"}"#;
        assert!(matches!(
            canonical_without_sig(doc),
            Err(SignatureError::UnsafeInteger(_))
        ));
    }

    #[test]
    fn trusted_keys_parse_hex_and_base64() {
        let vk = key(7).verifying_key();
        let hex_key = hex::encode(vk.as_bytes());
        let b64 = general_purpose::STANDARD.encode(vk.as_bytes());
        let b64url = general_purpose::URL_SAFE_NO_PAD.encode(key(8).verifying_key().as_bytes());
        let keys = TrustedKeys::parse(&[hex_key.as_str(), &b64url]).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys.keys()[0], vk);
        assert!(TrustedKeys::parse(&[b64.as_str()]).is_ok());
        let e = TrustedKeys::parse(&[hex_key.as_str(), &b64]).unwrap_err();
        assert!(e.to_string().contains("repeats"), "{e}");
        let e = TrustedKeys::parse(&["abcd"]).unwrap_err();
        assert!(e.to_string().contains("3 bytes"), "{e}");
        assert!(TrustedKeys::parse(&["not a key!"]).is_err());
        // The identity point is a weak key.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let e = TrustedKeys::parse(&[hex::encode(identity)]).unwrap_err();
        assert!(e.to_string().contains("weak"), "{e}");
    }

    #[test]
    fn hostile_documents_never_panic() {
        let keys = trusted(&[&key(1)]);
        let samples: Vec<Vec<u8>> = vec![
            b"{\"sig\":\"".to_vec(),
            b"{\"a\":1e999,\"sig\":\"AAAA\"}".to_vec(),
            "[".repeat(60_000).into_bytes(),
            b"{\"sig\":\"\xff\"}".to_vec(),
            format!("{{\"sig\":\"{}\"}}", "A".repeat(60_000)).into_bytes(),
        ];
        for s in samples {
            assert!(verify(TOPIC, &s, &keys, SignaturePolicy::Required).is_err());
        }
        let doc = String::from_utf8(signed(&key(1))).unwrap();
        for cut in 0..doc.len() {
            if let Some(prefix) = doc.get(..cut) {
                let _ = verify(TOPIC, prefix.as_bytes(), &keys, SignaturePolicy::Required);
            }
        }
    }
}
