//! A single pass over the raw bytes before serde sees them.
//!
//! serde_json recurses once per nesting level and reports a number like `1e999` only as
//! "number out of range at line 1 column 80". This pass enforces the nesting and list-length
//! limits without recursion deeper than the limit, and rejects non-finite numbers with the JSON
//! path of the offending value (`[0].intervals[1].payloads[0].values[0]`).

use super::decode::{DecodeError, Limits};

/// One step of a JSON path.
#[derive(Debug, Clone)]
enum Step {
    Key(String),
    Index(usize),
}

/// Renders a path as `[0].intervals[1].payloads`; the root is `$`.
fn render(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => {
                out.push('[');
                out.push_str(&i.to_string());
                out.push(']');
            }
        }
    }
    if out.is_empty() { "$".to_string() } else { out }
}

struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    path: Vec<Step>,
    limits: &'a Limits,
}

/// Checks nesting depth, list lengths and number ranges of `bytes`. Syntax errors found on the
/// way are reported too (with the path where they occur).
pub(crate) fn scan(bytes: &[u8], limits: &Limits) -> Result<(), DecodeError> {
    let mut s = Scanner {
        bytes,
        pos: 0,
        path: Vec::new(),
        limits,
    };
    s.skip_ws();
    s.value(1)?;
    s.skip_ws();
    if s.pos != s.bytes.len() {
        return Err(s.syntax("trailing characters after the JSON value"));
    }
    Ok(())
}

impl Scanner<'_> {
    fn syntax(&self, message: &str) -> DecodeError {
        DecodeError::Syntax {
            path: render(&self.path),
            offset: self.pos,
            message: message.to_string(),
        }
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn value(&mut self, depth: usize) -> Result<(), DecodeError> {
        match self.peek() {
            Some(b'{') | Some(b'[') if depth > self.limits.max_depth => Err(DecodeError::TooDeep {
                path: render(&self.path),
                limit: self.limits.max_depth,
            }),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => self.string().map(|_| ()),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("expected a JSON value")),
            None => Err(self.syntax("unexpected end of input")),
        }
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), DecodeError> {
        if self.bytes[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.syntax("invalid literal"))
        }
    }

    fn number(&mut self) -> Result<(), DecodeError> {
        let start = self.pos;
        while let Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.pos]).unwrap_or("");
        match text.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(()),
            Ok(_) => Err(DecodeError::Number {
                path: render(&self.path),
                text: truncate(text),
            }),
            Err(_) => Err(self.syntax("invalid number")),
        }
    }

    /// Skips a string; returns its raw contents (escapes not decoded) for use in paths.
    fn string(&mut self) -> Result<String, DecodeError> {
        self.pos += 1; // opening quote
        let start = self.pos;
        loop {
            match self.peek() {
                Some(b'"') => {
                    let raw = String::from_utf8_lossy(&self.bytes[start..self.pos]).into_owned();
                    self.pos += 1;
                    return Ok(raw);
                }
                Some(b'\\') => self.pos += 2,
                Some(_) => self.pos += 1,
                None => return Err(self.syntax("unterminated string")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> Result<(), DecodeError> {
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(());
        }
        let mut count = 0usize;
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a member name"));
            }
            let key = self.string()?;
            count += 1;
            if count > self.limits.max_list {
                return Err(DecodeError::TooMany {
                    path: render(&self.path),
                    limit: self.limits.max_list,
                });
            }
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected ':'"));
            }
            self.pos += 1;
            self.skip_ws();
            self.path.push(Step::Key(truncate(&key)));
            self.value(depth + 1)?;
            self.path.pop();
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or '}'")),
            }
        }
    }

    fn array(&mut self, depth: usize) -> Result<(), DecodeError> {
        self.pos += 1;
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(());
        }
        let mut index = 0usize;
        loop {
            if index >= self.limits.max_list {
                return Err(DecodeError::TooMany {
                    path: render(&self.path),
                    limit: self.limits.max_list,
                });
            }
            self.skip_ws();
            self.path.push(Step::Index(index));
            self.value(depth + 1)?;
            self.path.pop();
            index += 1;
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or ']'")),
            }
        }
    }
}

/// Keeps error messages short when an attacker sends a 1 MB key or number.
fn truncate(s: &str) -> String {
    if s.len() <= 64 {
        return s.to_string();
    }
    let mut end = 64;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
