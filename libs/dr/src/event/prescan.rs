//! The cheap byte scan that runs before `serde_json` builds a tree: nesting depth and number
//! overflow, refused with the path where they happen.

use super::{DOCUMENT, DocumentError, MAX_DEPTH};

// ---------------------------------------------------------------------------------------------
// Parsing: the byte pre-scan.

/// One open container during the pre-scan.
enum Frame {
    Obj { key: Option<String>, expect_key: bool },
    Arr { index: usize },
}

fn frames_path(stack: &[Frame]) -> String {
    let mut p = String::new();
    for f in stack {
        match f {
            Frame::Obj { key: Some(k), .. } => {
                if !p.is_empty() {
                    p.push('.');
                }
                p.push_str(k);
            }
            Frame::Obj { key: None, .. } => {}
            Frame::Arr { index } => p.push_str(&format!("[{index}]")),
        }
        if p.len() > 256 {
            p.push('…');
            break;
        }
    }
    if p.is_empty() { DOCUMENT.to_owned() } else { p }
}

/// A key as it may appear in an error path: printable, at most 64 characters, never empty (an
/// error must name its field: the empty key is shown as `""`, a key of control characters only
/// as `(unprintable)`).
pub(super) fn sanitize_key(raw: &str) -> String {
    let mut s: String = raw.chars().filter(|c| !c.is_control()).take(64).collect();
    if raw.chars().count() > 64 {
        s.push('…');
    }
    if s.is_empty() {
        return if raw.is_empty() {
            "\"\"".to_owned()
        } else {
            "(unprintable)".to_owned()
        };
    }
    s
}

/// Cheap structural scan before serde: refuses nesting deeper than [`MAX_DEPTH`] and numbers that
/// overflow an `f64` (like `1e999`, which would become infinity), naming the field where it
/// happens. It is not a JSON validator: on anything malformed it stops and lets `serde_json`
/// report the syntax error.
pub(super) fn prescan(text: &str) -> Result<(), DocumentError> {
    let bytes = text.as_bytes();
    let mut stack: Vec<Frame> = Vec::new();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'"' => {
                let start = i + 1;
                let mut j = start;
                while let Some(&c) = bytes.get(j) {
                    match c {
                        b'\\' => j += 2,
                        b'"' => break,
                        _ => j += 1,
                    }
                }
                if let Some(Frame::Obj { key, expect_key }) = stack.last_mut()
                    && *expect_key
                {
                    *key = Some(sanitize_key(text.get(start..j.min(bytes.len())).unwrap_or("?")));
                    *expect_key = false;
                }
                i = j + 1;
            }
            b'{' | b'[' => {
                if stack.len() >= MAX_DEPTH {
                    return Err(DocumentError::new(
                        frames_path(&stack),
                        format!("nesting deeper than {MAX_DEPTH} levels; a dr.event/1 document nests 4 deep"),
                    ));
                }
                stack.push(if b == b'{' {
                    Frame::Obj {
                        key: None,
                        expect_key: true,
                    }
                } else {
                    Frame::Arr { index: 0 }
                });
                i += 1;
            }
            b'}' | b']' => {
                stack.pop();
                i += 1;
            }
            b',' => {
                match stack.last_mut() {
                    Some(Frame::Obj { key, expect_key }) => {
                        *key = None;
                        *expect_key = true;
                    }
                    Some(Frame::Arr { index }) => *index += 1,
                    None => {}
                }
                i += 1;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while bytes
                    .get(i)
                    .is_some_and(|c| matches!(c, b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'))
                {
                    i += 1;
                }
                let token = text.get(start..i).unwrap_or("");
                if let Ok(v) = token.parse::<f64>()
                    && !v.is_finite()
                {
                    let shown: String = token.chars().take(32).collect();
                    return Err(DocumentError::new(
                        frames_path(&stack),
                        format!("the number {shown} is too large for a 64-bit float; send a finite number"),
                    ));
                }
            }
            _ => i += 1,
        }
    }
    Ok(())
}
