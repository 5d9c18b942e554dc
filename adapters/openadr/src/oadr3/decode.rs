//! Decoding untrusted OpenADR 3 JSON with limits and field paths in every error.
//!
//! The size is checked first ([`Limits::max_bytes`]), then UTF-8 (the whole input at once,
//! faster than string by string), then one pass of the typed reader (`oadr3/reader.rs`,
//! `oadr3/typed.rs`) builds the model straight from the text, member by member. On the way it
//! enforces the nesting depth, list lengths and number ranges, and it refuses a key written twice
//! in one object; every error names the JSON path of the value
//! (`[0].intervals[1].intervalPeriod.duration: negative duration`). Unknown fields are kept in
//! each object's `extra`. Errors come in document order, except that a document of no known
//! kind is read to its end first, so that a limit or syntax error anywhere in it is what is
//! reported.
//!
//! This pass used to parse into a `serde_json::Value` tree (after a separate limit scan) and
//! convert the tree field by field, which made the decoder 2.5× slower than openleadr-rs's
//! plain serde types. Deserializing the model with serde and tracking the path was the other
//! way. It was not taken: the model's `flatten`ed `extra` maps and its untagged targets and
//! payload values make serde buffer each object into an intermediate tree anyway, a
//! `flatten`ed map and a `Value` keep the last of two equal keys without a word, and a type
//! error carries no path unless every visitor is wrapped. The hand reader has none of these
//! costs; its lexical rules are in `oadr3/lex.rs`.

use super::kind::{self, object_kind, object_type_text};
use super::model::{Event, Notification, NotifiedObject, Program, Report};
use super::reader::Reader;
use super::typed;

/// Bounds on what [`decode_any_with_limits`] accepts, so a hostile or broken VTN cannot make the
/// VEN allocate or recurse without bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest document in bytes (default 4 MiB, as for 2.0b).
    pub max_bytes: usize,
    /// Deepest nesting of arrays and objects (default 32; a real event needs 7). At most 128
    /// is honoured, whatever is set, so that decoding never runs out of stack.
    pub max_depth: usize,
    /// Most elements in one array or members in one object (default 10,000).
    pub max_list: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bytes: 4 * 1024 * 1024,
            max_depth: 32,
            max_list: 10_000,
        }
    }
}

/// Why a document was rejected. Every variant that concerns a value names its JSON path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Larger than [`Limits::max_bytes`].
    #[error("document is {size} bytes, more than the limit of {limit}")]
    TooLarge {
        /// Size of the input.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Nested deeper than [`Limits::max_depth`].
    #[error("{path}: nested deeper than {limit} levels")]
    TooDeep {
        /// Where the limit was hit.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// An array or object with more than [`Limits::max_list`] entries.
    #[error("{path}: more than {limit} entries")]
    TooMany {
        /// The array or object.
        path: String,
        /// The limit.
        limit: usize,
    },
    /// A number that does not fit a 64-bit float (`1e999`).
    #[error("{path}: number {text} is out of range")]
    Number {
        /// Where it is.
        path: String,
        /// The number as written (truncated).
        text: String,
    },
    /// Not JSON.
    #[error("{path}: invalid JSON at byte {offset}: {message}")]
    Syntax {
        /// Where the parser was.
        path: String,
        /// Byte offset.
        offset: usize,
        /// What was wrong.
        message: String,
    },
    /// A required field is missing.
    #[error("{path}: missing")]
    Missing {
        /// The missing field.
        path: String,
    },
    /// A field has the wrong type or an invalid value (bad timestamp, negative duration, ...).
    #[error("{path}: {message}")]
    Invalid {
        /// The field.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A key that appears twice in one object. serde_json would keep the last, so the same bytes
    /// could be read two ways; `dr.event/1` refuses them too.
    #[error("{path}: appears more than once; send each field once")]
    Duplicate {
        /// The repeated member (`[0].intervals[1].id`).
        path: String,
    },
    /// Valid JSON that is none of the documents [`decode_any`] accepts.
    #[error("not an OpenADR 3 event, event list, program, report or notification: {0}")]
    UnknownDocument(String),
}

/// A decoded OpenADR 3 document.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    /// One event (`GET /events/{id}`, a create/update answer).
    Event(Box<Event>),
    /// A list of events (`GET /events`); an empty list decodes as this.
    Events(Vec<Event>),
    /// One program.
    Program(Box<Program>),
    /// A list of programs (`GET /programs`).
    Programs(Vec<Program>),
    /// One report.
    Report(Box<Report>),
    /// A list of reports (`GET /reports`).
    Reports(Vec<Report>),
    /// A webhook or MQTT notification.
    Notification(Box<Notification>),
}

impl Document {
    /// The `message` name used by [`super::normalized_json`]: `event`, `events`, `program`,
    /// `programs`, `report`, `reports`, `notification`.
    pub fn name(&self) -> &'static str {
        match self {
            Document::Event(_) => "event",
            Document::Events(_) => "events",
            Document::Program(_) => "program",
            Document::Programs(_) => "programs",
            Document::Report(_) => "report",
            Document::Reports(_) => "reports",
            Document::Notification(_) => "notification",
        }
    }

    /// The events the document carries (a notification's event included), in order.
    pub fn events(&self) -> Vec<&Event> {
        match self {
            Document::Event(e) => vec![e.as_ref()],
            Document::Events(es) => es.iter().collect(),
            Document::Notification(n) => match &n.object {
                NotifiedObject::Event(e) => vec![e.as_ref()],
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}

/// Decodes a single event, a list of events, a program (or list), a report (or list), or a
/// notification, with the default [`Limits`].
pub fn decode_any(bytes: &[u8]) -> Result<Document, DecodeError> {
    decode_any_with_limits(bytes, &Limits::default())
}

/// [`decode_any`] with explicit limits.
pub fn decode_any_with_limits(bytes: &[u8], limits: &Limits) -> Result<Document, DecodeError> {
    let text = checked(bytes, limits)?;
    let mut r = Reader::new(text, limits);
    let doc = match r.peek() {
        Some(b'[') => decode_list(&mut r, text)?,
        Some(b'{') => decode_object(&mut r, text)?,
        _ => {
            let err = DecodeError::UnknownDocument(format!("a top-level {}", r.kind()));
            return Err(r.first_error_or(err));
        }
    };
    r.finish()?;
    Ok(doc)
}

/// Decodes a `GET /events` answer: a JSON array of events (a single event object is accepted
/// too, as a list of one).
pub fn decode_events(bytes: &[u8], limits: &Limits) -> Result<Vec<Event>, DecodeError> {
    let text = checked(bytes, limits)?;
    let mut r = Reader::new(text, limits);
    let events = match r.peek() {
        Some(b'[') => r.list(typed::event)?.unwrap_or_default(),
        Some(b'{') => vec![typed::event(&mut r)?],
        _ => {
            let err = DecodeError::UnknownDocument(format!("a top-level {}", r.kind()));
            return Err(r.first_error_or(err));
        }
    };
    r.finish()?;
    Ok(events)
}

/// The size check and UTF-8.
fn checked<'a>(bytes: &'a [u8], limits: &Limits) -> Result<&'a str, DecodeError> {
    if bytes.len() > limits.max_bytes {
        return Err(DecodeError::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    std::str::from_utf8(bytes).map_err(|e| DecodeError::Syntax {
        path: "$".into(),
        offset: e.valid_up_to(),
        message: "invalid UTF-8".into(),
    })
}

/// The top-level object: its kind from its [`Hints`], then the object read as that kind.
fn decode_object(r: &mut Reader<'_>, text: &str) -> Result<Document, DecodeError> {
    let hints = match kind::skim(r) {
        Ok(h) => h,
        Err(e) => return Err(r.first_error_or(e)),
    };
    // A notification has `objectType` too (the object's type), so look for its shape first.
    if hints.is_notification() {
        return typed::notification(r, text).map(|n| Document::Notification(Box::new(n)));
    }
    match object_kind(&hints, text) {
        Some("EVENT") => Ok(Document::Event(Box::new(typed::event(r)?))),
        Some("PROGRAM") => Ok(Document::Program(Box::new(typed::program(r)?))),
        Some("REPORT") => Ok(Document::Report(Box::new(typed::report(r)?))),
        _ => {
            let err = DecodeError::UnknownDocument(match object_type_text(&hints, text) {
                Some(t) => format!("objectType {t}"),
                None => "an object without objectType".into(),
            });
            Err(r.first_error_or(err))
        }
    }
}

/// A top-level list, whose kind is its first element's (skimmed before it is read). Every
/// other element notes its own kind as it is read; one of another known kind refuses the list,
/// also when reading it as the list's kind failed.
fn decode_list(r: &mut Reader<'_>, text: &str) -> Result<Document, DecodeError> {
    let mut doc = Document::Events(Vec::new());
    let mut list_kind: Option<&'static str> = None;
    r.elements(|r, i| {
        let Some(kind) = list_kind else {
            let own = match r.peek() {
                Some(b'{') => match kind::skim(r) {
                    Ok(h) => object_kind(&h, text),
                    Err(e) => return Err(r.first_error_or(e)),
                },
                _ => None,
            };
            let err = match own {
                Some(k @ ("EVENT" | "PROGRAM" | "REPORT")) => {
                    doc = match k {
                        "PROGRAM" => Document::Programs(vec![typed::program(r)?]),
                        "REPORT" => Document::Reports(vec![typed::report(r)?]),
                        _ => Document::Events(vec![typed::event(r)?]),
                    };
                    list_kind = Some(k);
                    return Ok(());
                }
                Some(other) => DecodeError::UnknownDocument(format!("a list of {other} objects")),
                None => DecodeError::UnknownDocument(format!("[0] is a {}", r.kind())),
            };
            return Err(r.first_error_or(err));
        };
        let mark = r.mark();
        r.note_next_object();
        let read = match &mut doc {
            Document::Events(v) => typed::event(r).map(|e| v.push(e)),
            Document::Programs(v) => typed::program(r).map(|p| v.push(p)),
            Document::Reports(v) => typed::report(r).map(|p| v.push(p)),
            _ => Ok(()),
        };
        let own = match read {
            Ok(()) => object_kind(&r.take_noted(), text),
            Err(e) => {
                // Perhaps it failed because it is something else: say so if it is.
                r.take_noted();
                r.reset(mark);
                let other = match r.peek() {
                    Some(b'{') => kind::skim(r).ok().and_then(|h| object_kind(&h, text)),
                    _ => None,
                };
                Some(other.filter(|own| *own != kind).ok_or(e)?)
            }
        };
        if own.is_some_and(|own| own != kind) {
            let err = DecodeError::Invalid {
                path: format!("[{i}]"),
                message: format!("a list of {kind} objects holds another kind"),
            };
            return Err(r.first_error_or(err));
        }
        Ok(())
    })?;
    Ok(doc)
}
