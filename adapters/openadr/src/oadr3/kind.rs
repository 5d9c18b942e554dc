//! Telling an event from a program, a report or a notification before reading it: a few
//! members say what an object is, and [`skim`] reads only those (the values of the others are
//! stepped over), so that the object can then be read once, as what it is.

use super::decode::DecodeError;
use super::lex;
use super::reader::Reader;

/// The members of an object that say what kind of object it is: which of them are present
/// (`null` included), and where the value of `objectType` is.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Hints {
    keys: u8,
    /// Byte range of the `objectType` value (the whole JSON value, quotes included).
    pub object_type: Option<(usize, usize)>,
}

impl Hints {
    /// `objectType`.
    pub const OBJECT_TYPE: u8 = 1;
    /// `operation` (notifications).
    pub const OPERATION: u8 = 2;
    /// `object` (notifications).
    pub const OBJECT: u8 = 4;
    /// `programName` (programs).
    pub const PROGRAM_NAME: u8 = 8;
    /// `eventID` (reports).
    pub const EVENT_ID: u8 = 16;
    /// `clientName` (reports).
    pub const CLIENT_NAME: u8 = 32;
    /// `programID` (events).
    pub const PROGRAM_ID: u8 = 64;
    /// `intervals` (events).
    pub const INTERVALS: u8 = 128;

    /// The bit for a member name; 0 for a name that says nothing about the kind.
    pub fn bit(key: &str) -> u8 {
        match key {
            "objectType" => Self::OBJECT_TYPE,
            "operation" => Self::OPERATION,
            "object" => Self::OBJECT,
            "programName" => Self::PROGRAM_NAME,
            "eventID" => Self::EVENT_ID,
            "clientName" => Self::CLIENT_NAME,
            "programID" => Self::PROGRAM_ID,
            "intervals" => Self::INTERVALS,
            _ => 0,
        }
    }

    /// Whether the member (a `Hints::*` bit) is present.
    pub fn has(&self, bit: u8) -> bool {
        self.keys & bit != 0
    }

    /// Notes member `bit`; false if it was noted already (a key written twice).
    pub fn note(&mut self, bit: u8) -> bool {
        let fresh = !self.has(bit);
        self.keys |= bit;
        fresh
    }

    /// Whether the object has the shape of a notification (which has an `objectType` too: the
    /// type of its object).
    pub fn is_notification(&self) -> bool {
        self.has(Self::OPERATION) && self.has(Self::OBJECT)
    }
}

/// The [`Hints`] of the object at the reader, which is left where it was. A key that says what
/// the object is and appears twice is refused here, before the kind is decided on either value.
pub(crate) fn skim(r: &mut Reader<'_>) -> Result<Hints, DecodeError> {
    let start = r.position();
    let mut hints = Hints::default();
    r.members(|r, key| {
        let bit = Hints::bit(key);
        if bit != 0 && !hints.note(bit) {
            return Err(r.duplicate());
        }
        let value_start = r.position();
        r.skip()?;
        if bit == Hints::OBJECT_TYPE {
            hints.object_type = Some((value_start, r.position()));
        }
        Ok(())
    })?;
    r.seek(start);
    Ok(hints)
}

/// The contents of the JSON string at `range` of `text` (escapes decoded); `None` if the value
/// there is not a string.
fn string_at(text: &str, (start, end): (usize, usize)) -> Option<std::borrow::Cow<'_, str>> {
    let raw = text.get(start..end)?.strip_prefix('"')?.strip_suffix('"')?;
    lex::unescape(raw).ok()
}

/// What kind of object the [`Hints`] describe: `objectType` when it is a string, else a guess
/// from the members present (`NOTIFICATION`, `PROGRAM`, `REPORT`, `EVENT`). `None` when neither
/// says.
pub(crate) fn object_kind(hints: &Hints, text: &str) -> Option<&'static str> {
    if let Some(t) = hints.object_type.and_then(|range| string_at(text, range)) {
        return match t.as_ref() {
            "EVENT" => Some("EVENT"),
            "PROGRAM" => Some("PROGRAM"),
            "REPORT" => Some("REPORT"),
            _ => None,
        };
    }
    if hints.is_notification() {
        Some("NOTIFICATION")
    } else if hints.has(Hints::PROGRAM_NAME) {
        Some("PROGRAM")
    } else if hints.has(Hints::EVENT_ID) || hints.has(Hints::CLIENT_NAME) {
        Some("REPORT")
    } else if hints.has(Hints::PROGRAM_ID) || hints.has(Hints::INTERVALS) {
        Some("EVENT")
    } else {
        None
    }
}

/// How an `objectType` value is named in an error: as written, cut to 64 bytes.
pub(crate) fn object_type_text(hints: &Hints, text: &str) -> Option<String> {
    hints
        .object_type
        .map(|(start, end)| lex::truncate(text.get(start..end).unwrap_or_default()))
}
