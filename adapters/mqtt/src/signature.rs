//! Ed25519 signatures on event documents.
//!
//! TLS protects one hop; a broker sits in the middle, so an event carries its own signature in
//! the optional top-level `sig` member.
//!
//! # The scheme
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
//! 4. The signed message is those canonical bytes (UTF-8). `sig` is the 64-byte Ed25519
//!    signature (RFC 8032, "pure" Ed25519, no context) as base64url without padding (RFC 4648
//!    §5), like a JWS signature. [`verify`] also accepts the standard alphabet and padding, so
//!    publishers can use whatever base64 their language has.
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
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
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
    /// No trusted key verifies the signature: the document was changed, or signed by another key.
    #[error(
        "\"sig\" does not verify with any of the {0} trusted keys (the document was altered, or signed by an unknown key)"
    )]
    BadSignature(usize),
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

/// The signed message of a document: its canonical JSON without the top-level `sig` (the
/// scheme is in the module docs).
pub fn canonical_without_sig(bytes: &[u8]) -> Result<Vec<u8>, SignatureError> {
    let (node, _) = parse_document(bytes)?;
    canonical_node(&node)
}

/// The canonical JSON (RFC 8785, with the integer rule of the module docs) of a value.
pub fn canonical_json(value: &serde_json::Value) -> Result<Vec<u8>, SignatureError> {
    canonical_node(&Node::from_value(value))
}

/// Signs a document: the base64url `sig` for `doc`, whose own top-level `sig`, if any, is
/// ignored. Fails only when `doc` is not an object or holds an integer above 2^53.
pub fn sign(doc: &serde_json::Value, key: &SigningKey) -> Result<String, SignatureError> {
    let mut node = Node::from_value(doc);
    match &mut node {
        Node::Obj(members) => members.retain(|(k, _)| k != "sig"),
        other => return Err(SignatureError::NotAnObject(other.kind())),
    }
    let message = canonical_node(&node)?;
    let signature: Signature = key.sign(&message);
    Ok(general_purpose::URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

/// Signs `doc` in place: sets its top-level `sig` (for publishers and tests).
pub fn attach_signature(doc: &mut serde_json::Value, key: &SigningKey) -> Result<(), SignatureError> {
    let sig = sign(doc, key)?;
    match doc {
        serde_json::Value::Object(map) => {
            map.insert("sig".into(), sig.into());
            Ok(())
        }
        _ => Err(SignatureError::NotAnObject("not an object")),
    }
}

/// Checks a received document's signature under `policy` against `keys`.
///
/// With [`SignaturePolicy::Off`] nothing is read. Otherwise the document must be strict JSON
/// (no duplicate keys, at most [`MAX_SIGNED_BYTES`]); a `sig` that is present must verify
/// even when signatures are optional, because a bad signature is a sign of tampering, not an
/// absence of signing.
pub fn verify(bytes: &[u8], keys: &TrustedKeys, policy: SignaturePolicy) -> Result<Verified, SignatureError> {
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
    let message = canonical_node(&node)?;
    keys.keys
        .iter()
        .position(|k| k.verify_strict(&message, &signature).is_ok())
        .map(|key_index| Verified::Signed { key_index })
        .ok_or(SignatureError::BadSignature(keys.len()))
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

    fn signed(k: &SigningKey) -> Vec<u8> {
        let mut doc = event();
        attach_signature(&mut doc, k).unwrap();
        serde_json::to_vec_pretty(&doc).unwrap()
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
            verify(&doc, &trusted(&[&b, &a]), SignaturePolicy::Required).unwrap(),
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
        assert!(verify(reordered.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required).is_ok());
        // An integral float is the same number as the integer.
        let as_float = String::from_utf8(doc.clone()).unwrap().replace("8000", "8000.0");
        assert!(verify(as_float.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required).is_ok());
        // Standard base64 with padding is accepted too.
        let mut std_doc = v.clone();
        let raw = general_purpose::URL_SAFE_NO_PAD
            .decode(v["sig"].as_str().unwrap())
            .unwrap();
        std_doc["sig"] = general_purpose::STANDARD.encode(raw).into();
        assert!(
            verify(
                std_doc.to_string().as_bytes(),
                &trusted(&[&a]),
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
            verify(tampered.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required),
            Err(SignatureError::BadSignature(1))
        );
        let e = verify(doc.as_bytes(), &trusted(&[&b]), SignaturePolicy::Optional).unwrap_err();
        assert_eq!(e, SignatureError::BadSignature(1));
        assert!(e.to_string().contains("altered"), "{e}");
        // A second value smuggled in by a duplicate key.
        let smuggled = doc.replacen("\"revision\": 3", "\"revision\": 3, \"revision\": 4", 1);
        assert_ne!(smuggled, doc);
        assert!(matches!(
            verify(smuggled.as_bytes(), &trusted(&[&a]), SignaturePolicy::Required),
            Err(SignatureError::Json(m)) if m.contains("duplicate key")
        ));
        // Adding a member, even null, changes the message.
        let mut v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        v["priority"] = serde_json::Value::Null;
        assert!(verify(v.to_string().as_bytes(), &trusted(&[&a]), SignaturePolicy::Required).is_err());
    }

    #[test]
    fn missing_and_malformed_signatures() {
        let a = key(1);
        let keys = trusted(&[&a]);
        let unsigned = event().to_string();
        assert_eq!(
            verify(unsigned.as_bytes(), &keys, SignaturePolicy::Required),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(unsigned.as_bytes(), &keys, SignaturePolicy::Optional),
            Ok(Verified::Unsigned)
        );
        assert_eq!(
            verify(b"not json at all", &keys, SignaturePolicy::Off),
            Ok(Verified::NotChecked)
        );
        let with = |sig: serde_json::Value| {
            let mut v = event();
            v["sig"] = sig;
            v.to_string()
        };
        assert_eq!(
            verify(
                with(serde_json::Value::Null).as_bytes(),
                &keys,
                SignaturePolicy::Required
            ),
            Err(SignatureError::Missing)
        );
        assert_eq!(
            verify(with(json!(5)).as_bytes(), &keys, SignaturePolicy::Optional),
            Err(SignatureError::SigNotAString("a number"))
        );
        assert!(matches!(
            verify(
                with(json!("!!not base64!!")).as_bytes(),
                &keys,
                SignaturePolicy::Optional
            ),
            Err(SignatureError::BadBase64(_))
        ));
        assert_eq!(
            verify(with(json!("AAAA")).as_bytes(), &keys, SignaturePolicy::Optional),
            Err(SignatureError::BadLength(3))
        );
        let zeros = general_purpose::URL_SAFE_NO_PAD.encode([0u8; 64]);
        assert_eq!(
            verify(with(json!(zeros)).as_bytes(), &keys, SignaturePolicy::Required),
            Err(SignatureError::BadSignature(1))
        );
        assert_eq!(
            verify(
                signed(&a).as_slice(),
                &TrustedKeys::default(),
                SignaturePolicy::Optional
            ),
            Err(SignatureError::NoTrustedKeys)
        );
        assert_eq!(
            verify(b"[1]", &keys, SignaturePolicy::Required),
            Err(SignatureError::NotAnObject("an array"))
        );
        let huge = vec![b' '; MAX_SIGNED_BYTES + 1];
        assert_eq!(
            verify(&huge, &keys, SignaturePolicy::Required),
            Err(SignatureError::TooLarge(MAX_SIGNED_BYTES + 1))
        );
    }

    #[test]
    fn unsafe_integers_cannot_be_signed_or_verified() {
        let a = key(1);
        let mut v = event();
        v["revision"] = json!(9_007_199_254_740_993_u64);
        assert!(matches!(sign(&v, &a), Err(SignatureError::UnsafeInteger(_))));
        v["revision"] = json!(9_007_199_254_740_992_u64);
        assert!(sign(&v, &a).is_ok());
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
            assert!(verify(&s, &keys, SignaturePolicy::Required).is_err());
        }
        let doc = String::from_utf8(signed(&key(1))).unwrap();
        for cut in 0..doc.len() {
            if let Some(prefix) = doc.get(..cut) {
                let _ = verify(prefix.as_bytes(), &keys, SignaturePolicy::Required);
            }
        }
    }
}
