//! A pull reader over the document's text, from which [`super::typed`] builds the model
//! directly, in one pass, with no `serde_json::Value` in between (that tree, and converting it
//! field by field, made the decoder 2.5× slower than plain serde).
//!
//! The reader enforces the [`Limits`] as it goes, with the path of the value where a limit is
//! hit: nesting depth when a container opens, list length when an element or member is added,
//! and a number that does not fit an f64 (`1e999`) when it is read. Its recursion is bounded by
//! the depth limit, and the limit by [`DEPTH_CEILING`], so no input can exhaust the stack.
//!
//! It keeps the JSON path as a stack of borrowed steps and renders it only when an error is
//! made, so paths cost a push and a pop per member. Strings are borrowed from the input unless
//! they hold escapes. Every object it reads, typed or not, refuses a key it has already seen
//! ([`DecodeError::Duplicate`]): serde_json would keep the last one, so one document could be
//! read two ways.

use std::borrow::Cow;

use serde::de::Unexpected;
use serde_json::{Map, Number, Value};

use super::decode::{DecodeError, Limits};
use super::kind::Hints;
use super::lex::{self, truncate};

/// The deepest nesting honoured whatever [`Limits::max_depth`] says (serde_json's own bound,
/// which the decoder had before): the reader recurses once per level, and this keeps it far
/// from the end of any thread's stack.
pub(crate) const DEPTH_CEILING: usize = 128;

/// One step of the reader's path.
///
/// A key is kept as written (a slice of the input, escapes not decoded), so a step is copied,
/// never allocated.
#[derive(Debug, Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// A pull reader positioned on one JSON value of `text`.
pub(crate) struct Reader<'a> {
    text: &'a str,
    bytes: &'a [u8],
    pos: usize,
    path: Vec<Step<'a>>,
    depth: usize,
    max_depth: usize,
    max_list: usize,
    /// While not 0: the [`Hints`] of the objects at this depth are noted in `noted`.
    note_depth: usize,
    noted: Hints,
}

/// A place to come back to with [`Reader::reset`]: the position, the path and the depth.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mark {
    pos: usize,
    path_len: usize,
    depth: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `text`, with an empty path (`$`), enforcing `limits` (but for
    /// the size, which the caller checks before it has text).
    pub fn new(text: &'a str, limits: &Limits) -> Reader<'a> {
        let mut r = Reader {
            text,
            bytes: text.as_bytes(),
            pos: 0,
            path: Vec::with_capacity(8),
            depth: 0,
            max_depth: limits.max_depth.min(DEPTH_CEILING),
            max_list: limits.max_list,
            note_depth: 0,
            noted: Hints::default(),
        };
        r.ws();
        r
    }

    /// Where the reader is, with its path and depth.
    pub fn mark(&self) -> Mark {
        Mark {
            pos: self.pos,
            path_len: self.path.len(),
            depth: self.depth,
        }
    }

    /// Goes back to `mark`, also after an error left the path and depth where it happened.
    pub fn reset(&mut self, mark: Mark) {
        self.pos = mark.pos;
        self.path.truncate(mark.path_len);
        self.depth = mark.depth;
    }

    /// Starts noting the [`Hints`] of the next object read (at the next depth), as it is read:
    /// a list's elements tell their own kind this way without being read twice.
    pub fn note_next_object(&mut self) {
        self.note_depth = self.depth + 1;
        self.noted = Hints::default();
    }

    /// Stops noting and gives what was noted.
    pub fn take_noted(&mut self) -> Hints {
        self.note_depth = 0;
        self.noted
    }

    /// Reads the whole document again from the start, without building anything, and gives the
    /// first error in it, or `err` if there is none. Used before refusing a document for being
    /// of no known kind, so that a limit or syntax error anywhere is what the sender hears: it
    /// is the more useful of the two, and what a parse-first decoder would have said.
    pub fn first_error_or(&mut self, err: DecodeError) -> DecodeError {
        self.pos = 0;
        self.path.clear();
        self.depth = 0;
        self.note_depth = 0;
        self.ws();
        match self.ignore().and_then(|()| self.finish()) {
            Ok(()) => err,
            Err(first) => first,
        }
    }

    // ------------------------------------------------------------------ position and errors

    /// Skips whitespace.
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// The next byte (after whitespace, which every reading method skips first).
    #[inline]
    pub fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    /// The JSON kind of the next value, as messages name it.
    #[inline]
    pub fn kind(&self) -> &'static str {
        lex::kind_of_byte(self.peek())
    }

    /// Whether the next value is `null` (which the model reads as an absent field).
    #[inline]
    pub fn at_null(&self) -> bool {
        self.peek() == Some(b'n')
    }

    /// The byte position, to come back to with [`Self::seek`].
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Moves to `pos` (a position [`Self::position`] gave).
    #[inline]
    pub fn seek(&mut self, pos: usize) {
        self.pos = pos;
    }

    /// Errors unless only whitespace is left.
    pub fn finish(&mut self) -> Result<(), DecodeError> {
        self.ws();
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            Err(self.syntax("trailing characters after the JSON value"))
        }
    }

    /// The current path: `[0].intervals[1].payloads`, `priority`, or `$` for the root.
    pub fn here(&self) -> String {
        self.render(None)
    }

    /// The path of member `key` of the current object.
    pub fn here_key(&self, key: &str) -> String {
        self.render(Some(key))
    }

    fn render(&self, extra: Option<&str>) -> String {
        let mut out = String::new();
        for step in &self.path {
            match step {
                Step::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(&truncate(k));
                }
                Step::Index(i) => {
                    out.push('[');
                    out.push_str(&i.to_string());
                    out.push(']');
                }
            }
        }
        if let Some(k) = extra {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(k);
        }
        if out.is_empty() { "$".to_string() } else { out }
    }

    /// Runs `read` with member `key` on the path: for a value read out of order (a
    /// notification's `object`, read once its type is known).
    pub fn at_key<T>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        self.path.push(Step::Key(key));
        let out = read(self)?;
        self.path.pop();
        Ok(out)
    }

    /// [`DecodeError::Invalid`] at the current path.
    pub fn invalid(&self, message: impl Into<String>) -> DecodeError {
        DecodeError::Invalid {
            path: self.here(),
            message: message.into(),
        }
    }

    /// Refuses the next value for its type, with `message(its kind)`, at the current path. The
    /// value is read first, so that a limit or syntax error inside it (`1e999` where a string
    /// belongs) is what is reported, as it would be wherever the value stood.
    pub fn wrong(&mut self, message: impl FnOnce(&'static str) -> String) -> DecodeError {
        let path = self.here();
        let kind = self.kind();
        if let Err(e) = self.ignore() {
            return e;
        }
        DecodeError::Invalid {
            path,
            message: message(kind),
        }
    }

    /// "expected X, found a Y" for the next value (see [`Self::wrong`]).
    pub fn wrong_kind(&mut self, expected: &str) -> DecodeError {
        self.wrong(|kind| format!("expected {expected}, found a {kind}"))
    }

    /// [`DecodeError::Missing`] for member `key` of the current object.
    pub fn missing(&self, key: &str) -> DecodeError {
        DecodeError::Missing {
            path: self.here_key(key),
        }
    }

    /// [`DecodeError::Duplicate`] for the member being read.
    pub fn duplicate(&self) -> DecodeError {
        DecodeError::Duplicate { path: self.here() }
    }

    fn syntax(&self, message: &str) -> DecodeError {
        DecodeError::Syntax {
            path: self.here(),
            offset: self.pos,
            message: message.to_string(),
        }
    }

    // ------------------------------------------------------------------ containers

    /// Reads an object member by member: `each` gets the reader (on the member's value, with the
    /// member on the path) and the decoded key, and must read the value. Errors unless the next
    /// value is an object ("expected an object, found a …", at the current path).
    pub fn members(
        &mut self,
        mut each: impl FnMut(&mut Reader<'a>, &str) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if self.peek() != Some(b'{') {
            return Err(self.wrong_kind("an object"));
        }
        self.enter()?;
        self.pos += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.leave();
            return Ok(());
        }
        let mut count = 0usize;
        loop {
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a member name"));
            }
            let (raw, escaped) = self.raw_string()?;
            count += 1;
            if count > self.max_list {
                return Err(DecodeError::TooMany {
                    path: self.here(),
                    limit: self.max_list,
                });
            }
            let key = self.unescaped(raw, escaped)?;
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("expected ':'"));
            }
            self.pos += 1;
            self.ws();
            self.path.push(Step::Key(raw));
            if self.depth == self.note_depth {
                let bit = Hints::bit(&key);
                let value_start = self.pos;
                self.noted.note(bit);
                each(self, &key)?;
                if bit == Hints::OBJECT_TYPE {
                    self.noted.object_type = Some((value_start, self.pos));
                }
            } else {
                each(self, &key)?;
            }
            self.path.pop();
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.ws();
                }
                Some(b'}') => {
                    self.pos += 1;
                    self.leave();
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or '}'")),
            }
        }
    }

    /// Reads an array element by element, each with its index on the path. Errors unless the
    /// next value is an array.
    pub fn elements(
        &mut self,
        mut each: impl FnMut(&mut Reader<'a>, usize) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        if self.peek() != Some(b'[') {
            return Err(self.wrong_kind("an array"));
        }
        self.enter()?;
        self.pos += 1;
        self.ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.leave();
            return Ok(());
        }
        let mut index = 0;
        loop {
            if index >= self.max_list {
                return Err(DecodeError::TooMany {
                    path: self.here(),
                    limit: self.max_list,
                });
            }
            self.path.push(Step::Index(index));
            each(self, index)?;
            self.path.pop();
            index += 1;
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    self.ws();
                }
                Some(b']') => {
                    self.pos += 1;
                    self.leave();
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or ']'")),
            }
        }
    }

    /// An array read into a `Vec`, `null` being `None`.
    pub fn list<T>(
        &mut self,
        mut item: impl FnMut(&mut Reader<'a>) -> Result<T, DecodeError>,
    ) -> Result<Option<Vec<T>>, DecodeError> {
        if self.at_null() {
            self.null()?;
            return Ok(None);
        }
        let mut out = Vec::new();
        self.elements(|r, _| {
            out.push(item(r)?);
            Ok(())
        })?;
        Ok(Some(out))
    }

    /// Counts nesting: the root container is level 1.
    #[inline]
    fn enter(&mut self) -> Result<(), DecodeError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(DecodeError::TooDeep {
                path: self.here(),
                limit: self.max_depth,
            });
        }
        Ok(())
    }

    #[inline]
    fn leave(&mut self) {
        self.depth -= 1;
    }

    // ------------------------------------------------------------------ scalars

    /// Reads a string (the next value must be one): its contents as written and whether they
    /// hold an escape.
    #[inline(always)]
    fn raw_string(&mut self) -> Result<(&'a str, bool), DecodeError> {
        let start = self.pos + 1;
        let (end, escaped) = match lex::string_end(self.bytes, start) {
            Ok(found) => found,
            Err((at, message)) => {
                self.pos = at;
                return Err(self.syntax(message));
            }
        };
        let raw = self.text.get(start..end).ok_or_else(|| self.syntax("invalid UTF-8"))?;
        self.pos = end + 1;
        Ok((raw, escaped))
    }

    /// Decodes the escapes of `raw` (contents of the string that ended just before the reader).
    #[inline(always)]
    fn unescaped(&self, raw: &'a str, escaped: bool) -> Result<Cow<'a, str>, DecodeError> {
        if !escaped {
            return Ok(Cow::Borrowed(raw));
        }
        lex::unescape(raw).map_err(|m| DecodeError::Syntax {
            path: self.here(),
            offset: self.pos - raw.len() - 1,
            message: m.to_string(),
        })
    }

    /// Reads a string (the next value must be one); borrowed unless it holds escapes.
    #[inline]
    fn string(&mut self) -> Result<Cow<'a, str>, DecodeError> {
        let (raw, escaped) = self.raw_string()?;
        self.unescaped(raw, escaped)
    }

    /// `null`.
    #[inline]
    fn null(&mut self) -> Result<(), DecodeError> {
        self.literal("null")
    }

    #[inline]
    fn literal(&mut self, word: &str) -> Result<(), DecodeError> {
        if self.bytes.get(self.pos..self.pos + word.len()) == Some(word.as_bytes()) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.syntax("invalid literal"))
        }
    }

    /// Reads a number (the next value must be one) as serde_json would.
    #[inline]
    fn number(&mut self) -> Result<Number, DecodeError> {
        let start = self.pos;
        let token = lex::number(self.bytes, start).map_err(|m| self.syntax(m))?;
        let text = self.text.get(start..token.end).unwrap_or("");
        self.pos = token.end;
        lex::to_number(text, token).ok_or_else(|| DecodeError::Number {
            path: self.here(),
            text: truncate(text),
        })
    }

    /// A string field; `null` is `None`. Borrowed from the input when it has no escapes.
    #[inline]
    pub fn opt_str(&mut self) -> Result<Option<Cow<'a, str>>, DecodeError> {
        match self.peek() {
            Some(b'"') => self.string().map(Some),
            Some(b'n') => self.null().map(|_| None),
            _ => Err(self.wrong_kind("a string")),
        }
    }

    /// A string field, owned; `null` is `None`.
    #[inline]
    pub fn opt_string(&mut self) -> Result<Option<String>, DecodeError> {
        Ok(self.opt_str()?.map(Cow::into_owned))
    }

    /// An integer field; `null` is `None`. A float with no fraction (`3.0`) is accepted.
    #[inline]
    pub fn opt_integer(&mut self) -> Result<Option<i64>, DecodeError> {
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => {
                let n = self.number()?;
                if let Some(i) = n.as_i64() {
                    return Ok(Some(i));
                }
                match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
                    _ => Err(self.invalid(format!("expected an integer, found {n}"))),
                }
            }
            Some(b'n') => self.null().map(|_| None),
            _ => Err(self.wrong_kind("an integer")),
        }
    }

    /// A string field that serde reads (`payloadType`, `operation`): a wrong type is described
    /// in serde's words, as the decoder always has.
    pub fn serde_string(&mut self) -> Result<Option<String>, DecodeError> {
        match self.peek() {
            Some(b'"') => Ok(Some(self.string()?.into_owned())),
            Some(b'n') => self.null().map(|_| None),
            _ => Err(self.serde_invalid("a string")),
        }
    }

    /// A boolean field that serde reads (`aggregate`, `historical`).
    pub fn serde_bool(&mut self) -> Result<Option<bool>, DecodeError> {
        match self.peek() {
            Some(b't') => self.literal("true").map(|_| Some(true)),
            Some(b'f') => self.literal("false").map(|_| Some(false)),
            Some(b'n') => self.null().map(|_| None),
            _ => Err(self.serde_invalid("a boolean")),
        }
    }

    /// A list of plain values that serde reads (valuesMap target values, a program's payload
    /// descriptors).
    pub fn serde_values(&mut self) -> Result<Option<Vec<Value>>, DecodeError> {
        match self.peek() {
            Some(b'[') => self.list(Reader::value),
            Some(b'n') => self.null().map(|_| None),
            _ => Err(self.serde_invalid("a sequence")),
        }
    }

    /// serde's "invalid type: string \"x\", expected a boolean" for the next value.
    fn serde_invalid(&mut self, expected: &str) -> DecodeError {
        let at = self.here();
        let found = match self.value() {
            Ok(v) => describe(&v),
            Err(e) => return e,
        };
        DecodeError::Invalid {
            path: at,
            message: format!("invalid type: {found}, expected {expected}"),
        }
    }

    // ------------------------------------------------------------------ plain values

    /// Any JSON value, as serde_json's `Value`; objects refuse duplicate keys.
    pub fn value(&mut self) -> Result<Value, DecodeError> {
        match self.peek() {
            Some(b'"') => Ok(Value::String(self.string()?.into_owned())),
            Some(b'-' | b'0'..=b'9') => Ok(Value::Number(self.number()?)),
            Some(b't') => self.literal("true").map(|_| Value::Bool(true)),
            Some(b'f') => self.literal("false").map(|_| Value::Bool(false)),
            Some(b'n') => self.null().map(|_| Value::Null),
            Some(b'[') => {
                let mut items = Vec::new();
                self.elements(|r, _| {
                    items.push(r.value()?);
                    Ok(())
                })?;
                Ok(Value::Array(items))
            }
            Some(b'{') => {
                let mut map = Map::new();
                self.members(|r, key| r.member_into(&mut map, key))?;
                Ok(Value::Object(map))
            }
            Some(_) => Err(self.syntax("expected a JSON value")),
            None => Err(self.syntax("unexpected end of input")),
        }
    }

    /// Reads the current member's value into `map` under `key`, refusing a key `map` has.
    /// This is how every object keeps the fields the model does not know (`extra`).
    pub fn member_into(&mut self, map: &mut Map<String, Value>, key: &str) -> Result<(), DecodeError> {
        if map.contains_key(key) {
            return Err(self.duplicate());
        }
        let v = self.value()?;
        map.insert(key.to_owned(), v);
        Ok(())
    }

    /// Reads and drops the current member's value, for members a type does not keep; its
    /// objects still refuse duplicate keys.
    pub fn ignore(&mut self) -> Result<(), DecodeError> {
        self.value().map(drop)
    }

    /// Steps over the next value without building it or checking what is inside (strings are
    /// still found exactly, so brackets in them do not count), to come back later with
    /// [`Self::seek`] and read it properly.
    pub fn skip(&mut self) -> Result<(), DecodeError> {
        match self.peek() {
            Some(b'"') => {
                let start = self.pos + 1;
                match lex::string_end(self.bytes, start) {
                    Ok((end, _)) => {
                        self.pos = end + 1;
                        Ok(())
                    }
                    Err((at, message)) => {
                        self.pos = at;
                        Err(self.syntax(message))
                    }
                }
            }
            Some(b'{' | b'[') => {
                let mut depth = 0usize;
                loop {
                    match self.peek() {
                        Some(b'{' | b'[') => {
                            depth += 1;
                            self.pos += 1;
                        }
                        Some(b'}' | b']') => {
                            depth -= 1;
                            self.pos += 1;
                            if depth == 0 {
                                return Ok(());
                            }
                        }
                        Some(b'"') => self.skip()?,
                        Some(_) => self.pos += 1,
                        None => return Err(self.syntax("unexpected end of input")),
                    }
                }
            }
            _ => self.value().map(drop),
        }
    }
}

/// serde's description of a value in "invalid type" messages (`integer \`5\``, `string "x"`).
fn describe(v: &Value) -> String {
    let unexpected = match v {
        Value::Null => Unexpected::Unit,
        Value::Bool(b) => Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Unexpected::Unsigned(u),
            (None, Some(i), _) => Unexpected::Signed(i),
            (None, None, f) => Unexpected::Float(f.unwrap_or(f64::NAN)),
        },
        Value::String(s) => Unexpected::Str(s),
        Value::Array(_) => Unexpected::Seq,
        Value::Object(_) => Unexpected::Map,
    };
    unexpected.to_string()
}
