//! Canonical JSON as RFC 8785 (JSON Canonicalization Scheme, "JCS") defines it.
//!
//! Two parts of flexgate hash JSON and must produce the same bytes for the same value: the
//! ledger's hash chain (each record is hashed in canonical form) and the Ed25519 signatures on
//! MQTT event documents (the signed message is the document's canonical form). An auditor who
//! checks a signed event against its ledger record relies on both agreeing, so there is exactly
//! one implementation, here, in a leaf crate that both the gateway and the MQTT adapter depend on
//! (an adapter may not depend on the gateway, and the gateway's ledger may not depend on an
//! adapter).
//!
//! What is written, per RFC 8785:
//! - object members sorted by their names compared as UTF-16 code units (§3.2.3), recursively;
//! - no whitespace anywhere;
//! - strings: `"` and `\` escaped, U+0008/0009/000A/000C/000D as `\b \t \n \f \r`, other control
//!   characters below U+0020 as `\u00xx` (lower-case hex); everything else, including `/` and
//!   non-ASCII, as literal UTF-8 (§3.2.2.2);
//! - numbers in the ECMAScript `Number.prototype.toString` form (§3.2.2.3): the shortest
//!   round-tripping digits, `1e+21` not `1e21`, `0.002` not `2e-3`, `4.5` not `4.50`, integral
//!   values without a fraction (`1.0` → `1`), `-0` → `0`.
//!
//! **Integers beyond 2^53.** RFC 8785 assumes I-JSON, where every number is an IEEE-754 double,
//! so an integer above 2^53 would first be rounded (`9007199254740993` → `9007199254740992`).
//! Neither user of this crate may round silently, and they need different answers:
//! - [`Integers::Exact`] writes such an integer digit for digit. The ledger uses it: a record
//!   never loses precision, and every record the gateway writes stays within ±2^53 anyway
//!   (sequence numbers, watts, milliseconds), where the output is exactly RFC 8785's.
//! - [`Integers::SafeOnly`] refuses it ([`CanonicalError::UnsafeInteger`]). The signatures use
//!   it: two documents that differ only in such an integer would otherwise share a signature
//!   under another JCS implementation, and the application reads `revision` exactly.
//!
//! For every value within ±2^53 both rules give identical bytes, which a property test checks.

use serde_json::{Number, Value};
use std::fmt::Write as _;

/// The largest integer magnitude a double holds exactly (2^53), I-JSON's limit.
pub const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// How integers beyond ±2^53 are treated (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Integers {
    /// Written exactly, digit for digit (the ledger's rule).
    Exact,
    /// Refused (the signatures' rule).
    SafeOnly,
}

/// Why a value has no canonical form under [`Integers::SafeOnly`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CanonicalError {
    /// An integer a double cannot hold exactly.
    #[error("the integer {0} is larger in magnitude than 2^53 and has no unambiguous canonical form")]
    UnsafeInteger(String),
}

/// The canonical form of `value` with integers written exactly ([`Integers::Exact`]). Total:
/// never fails, never panics.
#[must_use]
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    // Under `Exact` nothing is refused; the error arm cannot be taken.
    if write_value(&mut out, value, Integers::Exact).is_err() {
        out.clear();
    }
    out
}

/// The canonical form of `value` under `integers`.
pub fn canonical_json_with(value: &Value, integers: Integers) -> Result<String, CanonicalError> {
    let mut out = String::new();
    write_value(&mut out, value, integers)?;
    Ok(out)
}

fn write_value(out: &mut String, value: &Value, integers: Integers) -> Result<(), CanonicalError> {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n, integers)?,
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item, integers)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (name, member)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, name);
                out.push(':');
                write_value(out, member, integers)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

fn write_number(out: &mut String, n: &Number, integers: Integers) -> Result<(), CanonicalError> {
    let magnitude = n.as_u64().or_else(|| n.as_i64().map(i64::unsigned_abs));
    if let Some(magnitude) = magnitude {
        if integers == Integers::SafeOnly && magnitude > MAX_SAFE_INTEGER {
            return Err(CanonicalError::UnsafeInteger(n.to_string()));
        }
        let _ = write!(out, "{n}"); // serde_json writes u64/i64 as plain decimal digits
    } else if let Some(f) = n.as_f64() {
        write_f64(out, f);
    } else {
        // Unreachable without serde_json's `arbitrary_precision`; fall back to its own text.
        let _ = write!(out, "{n}");
    }
    Ok(())
}

/// ECMAScript `Number::toString(x)` (ECMA-262 §6.1.6.1.20), which RFC 8785 adopts. Rust's `{:e}`
/// gives the shortest digits that round-trip, which are the digits ECMAScript uses.
fn write_f64(out: &mut String, f: f64) {
    if f == 0.0 {
        out.push('0'); // also -0
        return;
    }
    if !f.is_finite() {
        // serde_json cannot hold NaN or infinities in a Value; mirror its `null` if one appears.
        out.push_str("null");
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    let sci = format!("{:e}", f.abs()); // e.g. "3.333333333333333e8"
    let Some((mantissa, exponent)) = sci.split_once('e') else {
        out.push_str(&sci);
        return;
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        out.push_str(&sci);
        return;
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    // At most 17 significant digits, so the conversions below cannot fail.
    let k = i32::try_from(digits.len()).unwrap_or(i32::MAX); // number of significant digits
    let n = exponent + 1; // position of the decimal point relative to the digits
    let count = |x: i32| usize::try_from(x).unwrap_or(0);
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', count(n - k)));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(count(n).min(digits.len()));
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', count(-n)));
        out.push_str(&digits);
    } else {
        let e = n - 1;
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push('e');
        out.push(if e < 0 { '-' } else { '+' });
        let _ = write!(out, "{}", e.unsigned_abs());
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use serde_json::{Map, json};

    fn number(x: f64) -> String {
        canonical_json(&Value::Number(Number::from_f64(x).unwrap()))
    }

    #[test]
    #[allow(clippy::excessive_precision)] // the inputs are RFC 8785's, digit for digit
    fn numbers_match_rfc_8785_and_ecmascript() {
        for (x, want) in [
            (0.0, "0"),
            (-0.0, "0"),
            (8000.0, "8000"),
            (0.5, "0.5"),
            (-1.5, "-1.5"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1e-7, "1e-7"),
            (0.000001, "0.000001"),
            (1.2345e-7, "1.2345e-7"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (9007199254740992.0, "9007199254740992"),
            (295147905179352830000.0, "295147905179352830000"),
            (4.50, "4.5"),
            (2e-3, "0.002"),
            (0.000_001_234_5, "0.0000012345"),
            (333333333.33333329, "333333333.3333333"),
            (1e23, "1e+23"),
            (-1e-7, "-1e-7"),
        ] {
            assert_eq!(number(x), want, "{x:e}");
        }
    }

    #[test]
    fn members_sort_by_utf16_and_strings_escape_as_the_rfc_says() {
        let v: Value = serde_json::from_str(
            "{ \"b\" : [1, 2.50, -0.0, 1e3], \"a\" : \"x\\u0001\\n\\u00e9\\ud83d\\ude00\\u2028/\", \"\\u20ac\":1, \"\\ud83d\\ude00\":2, \"\\ufb33\":3 }",
        )
        .unwrap();
        // UTF-16 order: "a" < "b" < "€" (U+20AC) < "😀" (D83D…) < "פּ" (U+FB33); code-point
        // order would put the emoji last.
        assert_eq!(
            canonical_json(&v),
            "{\"a\":\"x\\u0001\\né😀\u{2028}/\",\"b\":[1,2.5,0,1000],\"€\":1,\"😀\":2,\"\u{fb33}\":3}"
        );
    }

    #[test]
    fn the_rfc_8785_appendix_example() {
        let v: Value = serde_json::from_str(
            r#"{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],
                "string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}"#,
        )
        .unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn large_integers_are_exact_or_refused_never_rounded() {
        let v = json!({"seq": 9_007_199_254_740_993u64, "neg": -9_007_199_254_740_993i64});
        assert_eq!(
            canonical_json(&v),
            r#"{"neg":-9007199254740993,"seq":9007199254740993}"#
        );
        assert_eq!(
            canonical_json_with(&v, Integers::SafeOnly),
            Err(CanonicalError::UnsafeInteger("-9007199254740993".into()))
        );
        let edge = json!([9_007_199_254_740_992u64, -9_007_199_254_740_992i64]);
        assert_eq!(
            canonical_json_with(&edge, Integers::SafeOnly).unwrap(),
            "[9007199254740992,-9007199254740992]"
        );
    }

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|i| Value::Number(i.into())),
            any::<u64>().prop_map(|u| Value::Number(u.into())),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "[\\x00-\\x1f\"\\\\/a-zé€😀\u{2028}]{0,12}".prop_map(Value::String),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec(("[a-zA-Z_é😀\\x00-\\x05]{0,6}", inner), 0..6)
                    .prop_map(|members| Value::Object(members.into_iter().collect::<Map<String, Value>>())),
            ]
        })
    }

    fn within_safe_range(v: &Value) -> bool {
        match v {
            Value::Number(n) => n
                .as_u64()
                .or_else(|| n.as_i64().map(i64::unsigned_abs))
                .is_none_or(|m| m <= MAX_SAFE_INTEGER),
            Value::Array(items) => items.iter().all(within_safe_range),
            Value::Object(map) => map.values().all(within_safe_range),
            _ => true,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, .. ProptestConfig::default() })]

        /// The canonical form is valid JSON, and canonicalising it again changes nothing (a
        /// fixed point), whatever order the members were inserted in.
        #[test]
        fn canonical_form_is_a_fixed_point_and_means_the_same(v in value()) {
            let text = canonical_json(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(canonical_json(&back), text.clone());
            prop_assert!(!text.contains('\n'), "control characters are always escaped");
        }

        /// The two integer rules agree on every value within ±2^53, and `SafeOnly` refuses
        /// exactly the others.
        #[test]
        fn the_two_integer_rules_agree_where_both_apply(v in value()) {
            match canonical_json_with(&v, Integers::SafeOnly) {
                Ok(safe) => {
                    prop_assert!(within_safe_range(&v));
                    prop_assert_eq!(safe, canonical_json(&v));
                }
                Err(CanonicalError::UnsafeInteger(_)) => prop_assert!(!within_safe_range(&v)),
            }
        }
    }
}
