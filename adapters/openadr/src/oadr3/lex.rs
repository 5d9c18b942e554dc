//! JSON's lexical rules (RFC 8259 §6 numbers, §7 strings) for the reader ([`super::reader`]),
//! as strict as serde_json's, which the decoder used before: no leading zeros, no bare `.5` or
//! `1.`, no unescaped control characters, only the escapes JSON defines, and a `\u` surrogate
//! must be paired. Numbers are turned into the same `serde_json::Number` serde_json would give.

use std::borrow::Cow;

/// Where a number ends and what it says, read on the way.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NumberToken {
    /// One past its last byte.
    pub end: usize,
    /// No fraction and no exponent: an integer in JSON's terms.
    pub integer: bool,
    negative: bool,
    exponent: bool,
    /// The digits before and after the point, as one integer, while there are at most 19.
    mantissa: u64,
    /// How many digits there are, before and after the point.
    digits: u32,
    /// How many of them are after the point.
    fraction_digits: u32,
}

/// Lexes the number starting at `start` (a `-` or a digit). Errors say what is malformed.
#[inline]
pub(crate) fn number(bytes: &[u8], start: usize) -> Result<NumberToken, &'static str> {
    let mut t = NumberToken {
        end: start,
        integer: true,
        negative: false,
        exponent: false,
        mantissa: 0,
        digits: 0,
        fraction_digits: 0,
    };
    let mut i = start;
    // Reads a run of digits into the mantissa.
    let run = |i: &mut usize, t: &mut NumberToken| -> u32 {
        let mut n = 0;
        while let Some(&d) = bytes.get(*i).filter(|d| d.is_ascii_digit()) {
            if t.digits < 19 {
                t.mantissa = t.mantissa * 10 + u64::from(d - b'0');
            }
            t.digits += 1;
            n += 1;
            *i += 1;
        }
        n
    };
    if bytes.get(i) == Some(&b'-') {
        t.negative = true;
        i += 1;
    }
    match bytes.get(i) {
        Some(b'0') => {
            i += 1;
            t.digits = 1;
            if bytes.get(i).is_some_and(u8::is_ascii_digit) {
                return Err("invalid number: leading zero");
            }
        }
        Some(b'1'..=b'9') => {
            run(&mut i, &mut t);
        }
        _ => return Err("invalid number"),
    }
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        let n = run(&mut i, &mut t);
        if n == 0 {
            return Err("invalid number: no digit after the decimal point");
        }
        t.fraction_digits = n;
        t.integer = false;
    }
    if let Some(b'e' | b'E') = bytes.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = bytes.get(i) {
            i += 1;
        }
        if !bytes.get(i).is_some_and(u8::is_ascii_digit) {
            return Err("invalid number: no digit in the exponent");
        }
        while bytes.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        t.integer = false;
        t.exponent = true;
    }
    t.end = i;
    Ok(t)
}

/// Exact powers of ten as f64 (every one up to 10^22 is).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// The JSON number `text` (lexed as `token`) as serde_json reads it, so that a value decoded
/// here equals the same value read by `serde_json::from_slice`: an integer is a `u64` when it is
/// not negative and fits, an `i64` when it is negative and fits, else (like every fraction,
/// exponent and `-0`) the nearest `f64`. The workspace enables serde_json's `float_roundtrip`,
/// which rounds correctly, as `str::parse::<f64>` does; a test compares the two on awkward
/// numbers. `None` when it does not fit an f64 (`1e999`, or an integer of more than 309 digits).
///
/// The common cases skip the general parsers: an integer of up to 19 digits is the mantissa
/// read while lexing, and a decimal of up to 15 digits without an exponent (`800.0`, `0.25`) is
/// the mantissa divided by an exact power of ten, which IEEE 754 rounds correctly because both
/// operands are exact (the classic fast path every correct float parser takes).
#[inline]
pub(crate) fn to_number(text: &str, token: NumberToken) -> Option<serde_json::Number> {
    if token.integer {
        let significand = if token.digits <= 19 {
            Some(token.mantissa)
        } else {
            text.trim_start_matches('-').parse::<u64>().ok()
        };
        if let Some(significand) = significand {
            if !token.negative {
                return Some(significand.into());
            }
            // serde_json's rule: `-0` and magnitudes beyond i64 become floats.
            let negated = (significand as i64).wrapping_neg();
            return if negated >= 0 {
                serde_json::Number::from_f64(-(significand as f64))
            } else {
                Some(negated.into())
            };
        }
    }
    if !token.integer && !token.exponent && token.digits <= 15 {
        let magnitude = token.mantissa as f64 / POW10[token.fraction_digits as usize];
        return serde_json::Number::from_f64(if token.negative { -magnitude } else { magnitude });
    }
    text.parse::<f64>().ok().and_then(serde_json::Number::from_f64)
}

/// What a byte inside a string is: 0 plain, 1 the closing quote, 2 a backslash, 3 a control
/// character (which JSON requires to be escaped).
const fn string_classes() -> [u8; 256] {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = 3;
        b += 1;
    }
    table[b'"' as usize] = 1;
    table[b'\\' as usize] = 2;
    table
}

/// See [`string_classes`].
pub(crate) static STRING_CLASS: [u8; 256] = string_classes();

/// Finds the end of the string whose contents start at `start` (just past the opening quote).
/// Returns the position of the closing quote and whether the contents hold an escape. Escapes
/// are checked for their form here (`\u` needs four hex digits); their meaning, surrogate pairs
/// included, is checked by [`unescape`].
///
/// Both passes spend most of their time here, so plain bytes are skipped eight at a time: a
/// word is tested at once for a quote, a backslash or a control character (the usual SWAR
/// tests for a zero byte and for a byte below 0x20), and only a word holding one is looked at
/// byte by byte. It is always inlined, with the reader's `raw_string`: left as calls (which
/// the compiler chose) they were 5 % of the instructions of decoding an event list.
#[inline(always)]
pub(crate) fn string_end(bytes: &[u8], start: usize) -> Result<(usize, bool), (usize, &'static str)> {
    // Most strings hold no escape: find the first special byte and, if it is the closing
    // quote, that is all. Anything else goes the long way, from there.
    let i = skip_plain(bytes, start);
    if bytes.get(i) == Some(&b'"') {
        return Ok((i, false));
    }
    string_end_slow(bytes, i)
}

/// [`string_end`] from `i`, byte by byte where there are escapes.
#[inline(never)]
fn string_end_slow(bytes: &[u8], mut i: usize) -> Result<(usize, bool), (usize, &'static str)> {
    let mut escaped = false;
    loop {
        i = skip_plain(bytes, i);
        let Some(&b) = bytes.get(i) else {
            return Err((i, "unterminated string"));
        };
        match STRING_CLASS[usize::from(b)] {
            0 => i += 1,
            1 => return Ok((i, escaped)),
            2 => {
                escaped = true;
                match bytes.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                    Some(b'u') => {
                        let hex = bytes.get(i + 2..i + 6).unwrap_or_default();
                        if hex.len() != 4 || !hex.iter().all(u8::is_ascii_hexdigit) {
                            return Err((i, "invalid \\u escape: four hex digits expected"));
                        }
                        i += 6;
                    }
                    Some(_) => return Err((i, "invalid escape")),
                    None => return Err((i, "unterminated string")),
                }
            }
            _ => return Err((i, "control character in a string: it must be escaped")),
        }
    }
}

/// The position of the first byte from `i` on that is a quote, a backslash or a control
/// character, or of the last partial word (which the caller then reads byte by byte).
#[inline(always)]
fn skip_plain(bytes: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_le_bytes(word);
        let quote = w ^ (ONES * u64::from(b'"'));
        let backslash = w ^ (ONES * u64::from(b'\\'));
        // A byte is flagged when it is zero after the XOR (quote, backslash) or below 0x20. A
        // borrow can flag a byte above a real hit, never below one, so the lowest flag is real.
        let hits = (quote.wrapping_sub(ONES) & !quote
            | backslash.wrapping_sub(ONES) & !backslash
            | w.wrapping_sub(ONES * 0x20) & !w)
            & HIGH;
        if hits != 0 {
            return i + (hits.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i
}

/// Decodes the escapes of string contents `raw` (which [`string_end`] accepted). A `\u`
/// escape of a UTF-16 surrogate must be followed by its other half, as serde_json requires.
pub(crate) fn unescape(raw: &str) -> Result<Cow<'_, str>, &'static str> {
    if !raw.contains('\\') {
        return Ok(Cow::Borrowed(raw));
    }
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let esc = &rest[at + 1..];
        let mut chars = esc.chars();
        let used = match chars.next() {
            Some('"') => {
                out.push('"');
                1
            }
            Some('\\') => {
                out.push('\\');
                1
            }
            Some('/') => {
                out.push('/');
                1
            }
            Some('b') => {
                out.push('\u{8}');
                1
            }
            Some('f') => {
                out.push('\u{c}');
                1
            }
            Some('n') => {
                out.push('\n');
                1
            }
            Some('r') => {
                out.push('\r');
                1
            }
            Some('t') => {
                out.push('\t');
                1
            }
            Some('u') => {
                let first = hex4(esc.get(1..5))?;
                match first {
                    0xD800..=0xDBFF => {
                        let second = match esc.get(5..7) {
                            Some("\\u") => hex4(esc.get(7..11))?,
                            _ => return Err("invalid \\u escape: unpaired surrogate"),
                        };
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err("invalid \\u escape: unpaired surrogate");
                        }
                        let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
                        out.push(char::from_u32(code).ok_or("invalid \\u escape")?);
                        11
                    }
                    0xDC00..=0xDFFF => return Err("invalid \\u escape: unpaired surrogate"),
                    code => {
                        out.push(char::from_u32(code).ok_or("invalid \\u escape")?);
                        5
                    }
                }
            }
            _ => return Err("invalid escape"),
        };
        rest = esc.get(used..).ok_or("invalid escape")?;
    }
    out.push_str(rest);
    Ok(Cow::Owned(out))
}

fn hex4(digits: Option<&str>) -> Result<u32, &'static str> {
    digits
        .filter(|d| d.len() == 4 && d.bytes().all(|b| b.is_ascii_hexdigit()))
        .and_then(|d| u32::from_str_radix(d, 16).ok())
        .ok_or("invalid \\u escape: four hex digits expected")
}

/// The JSON kind of the value that starts with byte `b`, as error messages name it.
pub(crate) fn kind_of_byte(b: Option<u8>) -> &'static str {
    match b {
        Some(b'{') => "object",
        Some(b'[') => "array",
        Some(b'"') => "string",
        Some(b't' | b'f') => "boolean",
        Some(b'n') => "null",
        Some(b'-' | b'0'..=b'9') => "number",
        _ => "nothing",
    }
}

/// Keeps error messages short when an attacker sends a 1 MB key or number.
pub(crate) fn truncate(s: &str) -> String {
    if s.len() <= 64 {
        return s.to_string();
    }
    let mut end = 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
