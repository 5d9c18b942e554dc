//! Byte-level access to the members of a stored record's JSON text, without parsing numbers.
//!
//! Why: verification hashes the stored bytes themselves (minus the `hash` member) and exports
//! copy stored bytes, so that a record's check never depends on how a JSON parser rounds floats.
//! serde_json's default float parser is only "best effort" (about one random double in five did
//! not survive `to_string` → `from_str`, e.g. `1429.1796795561945` read back as `…943`); the
//! workspace now enables `float_roundtrip`, but a ledger must verify the same under any build of
//! its reader. Typed decoding is used only for the meaning of the fields.

use std::ops::Range;

/// One top-level member of a JSON object text.
pub(crate) struct Member {
    /// The decoded member name.
    pub(crate) name: String,
    /// Bytes of the whole member, from its name's opening quote to the end of its value.
    pub(crate) span: Range<usize>,
    /// Bytes of the value.
    pub(crate) value: Range<usize>,
}

/// The top-level members of the JSON object `text`, in order. Rejects anything that is not a
/// single object, and duplicate member names. Values are skipped, not validated (serde_json
/// validates the same text separately).
pub(crate) fn object_members(text: &str) -> Result<Vec<Member>, String> {
    let b = text.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err("not a JSON object".to_string());
    }
    i = skip_ws(b, i + 1);
    let mut members: Vec<Member> = Vec::new();
    if b.get(i) == Some(&b'}') {
        i += 1;
    } else {
        loop {
            let start = i;
            let name_end = skip_string(b, i)?;
            let name: String =
                serde_json::from_str(&text[start..name_end]).map_err(|e| format!("bad member name: {e}"))?;
            if members.iter().any(|m| m.name == name) {
                return Err(format!("duplicate member {name:?}"));
            }
            i = skip_ws(b, name_end);
            if b.get(i) != Some(&b':') {
                return Err(format!("expected ':' after member {name:?}"));
            }
            let value_start = skip_ws(b, i + 1);
            let value_end = skip_value(b, value_start)?;
            members.push(Member {
                name,
                span: start..value_end,
                value: value_start..value_end,
            });
            i = skip_ws(b, value_end);
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(b'}') => {
                    i += 1;
                    break;
                }
                _ => return Err("expected ',' or '}' between members".to_string()),
            }
        }
    }
    if skip_ws(b, i) != b.len() {
        return Err("trailing characters after the object".to_string());
    }
    Ok(members)
}

/// `text` without its top-level member `name` (and one separating comma), or `None` if absent.
pub(crate) fn without_member(text: &str, members: &[Member], name: &str) -> Option<String> {
    let at = members.iter().position(|m| m.name == name)?;
    let cut = if at + 1 < members.len() {
        members[at].span.start..members[at + 1].span.start
    } else if at > 0 {
        members[at - 1].value.end..members[at].span.end
    } else {
        members[at].span.clone()
    };
    let mut out = String::with_capacity(text.len());
    out.push_str(&text[..cut.start]);
    out.push_str(&text[cut.end..]);
    Some(out)
}

/// The raw text of the top-level member `name`'s value.
pub(crate) fn member_text<'a>(text: &'a str, members: &[Member], name: &str) -> Option<&'a str> {
    members.iter().find(|m| m.name == name).map(|m| &text[m.value.clone()])
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// End (exclusive) of the string starting at `i`.
fn skip_string(b: &[u8], mut i: usize) -> Result<usize, String> {
    if b.get(i) != Some(&b'"') {
        return Err("expected a string".to_string());
    }
    i += 1;
    loop {
        match b.get(i) {
            Some(b'\\') => i += 2,
            Some(b'"') => return Ok(i + 1),
            Some(_) => i += 1,
            None => return Err("unterminated string".to_string()),
        }
    }
}

/// End (exclusive) of the value starting at `i`.
fn skip_value(b: &[u8], i: usize) -> Result<usize, String> {
    match b.get(i) {
        Some(b'"') => skip_string(b, i),
        Some(b'{' | b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            loop {
                match b.get(j) {
                    Some(b'"') => j = skip_string(b, j)?,
                    Some(b'{' | b'[') => {
                        depth += 1;
                        j += 1;
                    }
                    Some(b'}' | b']') => {
                        depth -= 1;
                        j += 1;
                        if depth == 0 {
                            return Ok(j);
                        }
                    }
                    Some(_) => j += 1,
                    None => return Err("unterminated object or array".to_string()),
                }
            }
        }
        Some(_) => {
            let mut j = i;
            while let Some(c) = b.get(j) {
                if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                    break;
                }
                j += 1;
            }
            if j == i {
                Err("expected a value".to_string())
            } else {
                Ok(j)
            }
        }
        None => Err("expected a value".to_string()),
    }
}
