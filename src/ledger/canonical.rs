//! Canonical JSON for hashing: RFC 8785 (JSON Canonicalization Scheme, "JCS") style.
//!
//! The ledger hashes records in this form, so the bytes must not depend on how a value was built.
//! This workspace enables serde_json's `preserve_order` feature (maps keep insertion order), so
//! the same object can serialise in many key orders; canonicalisation removes that freedom.
//!
//! What is implemented, per RFC 8785:
//! - object members sorted by their names compared as UTF-16 code units (§3.2.3), recursively;
//! - no whitespace anywhere;
//! - strings: `"` and `\` escaped, U+0008/0009/000A/000C/000D as `\b \t \n \f \r`, other control
//!   characters below U+0020 as `\u00xx` (lower-case hex); everything else, including `/` and
//!   non-ASCII, written as literal UTF-8 (§3.2.2.2);
//! - floating-point numbers in the ECMAScript `Number.prototype.toString` form (§3.2.2.3): the
//!   shortest round-tripping digits, `1e+21` not `1e21`, `0.002` not `2e-3`, `4.5` not `4.50`,
//!   integral values without a fraction (`1.0` → `1`), `-0` → `0`.
//!
//! **Deviation from RFC 8785:** integers that serde_json holds exactly (`u64`/`i64`) are written
//! exactly, digit for digit. RFC 8785 assumes I-JSON, where every number is an IEEE-754 double, so
//! an integer above 2^53 would be rounded to the nearest double first (`9007199254740993` →
//! `9007199254740992`). Records never lose precision here; a third-party JCS implementation
//! will produce identical bytes for every record whose integers stay within ±2^53, which is all
//! the gateway writes (sequence numbers, watts, milliseconds).

use serde_json::{Number, Value};
use std::fmt::Write as _;

/// Serialises `value` in canonical form (see the module docs). Total: never fails, never panics.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
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
                write_value(out, member);
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &Number) {
    if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(f) = n.as_f64() {
        write_f64(out, f);
    } else {
        // Unreachable without serde_json's `arbitrary_precision`; fall back to its own text.
        let _ = write!(out, "{n}");
    }
}

/// ECMAScript `Number::toString(x)` for finite `x` (ECMA-262 §6.1.6.1.20), which RFC 8785 adopts.
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
    // Rust's `{:e}` gives the shortest digits that round-trip, e.g. "3.333333333333333e8".
    let sci = format!("{:e}", f.abs());
    let Some((mantissa, exponent)) = sci.split_once('e') else {
        out.push_str(&sci);
        return;
    };
    let Ok(exponent) = exponent.parse::<i32>() else {
        out.push_str(&sci);
        return;
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i32; // number of significant digits
    let n = exponent + 1; // position of the decimal point relative to the digits
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        let e = n - 1;
        let (first, rest) = digits.split_at(1);
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
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
