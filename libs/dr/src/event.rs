//! The `dr.event/1` document: the curtailment event flexgate accepts on `POST /v1/events` and on
//! MQTT (`{prefix}/{site}/events/{event_id}`), its hostile-input parser and its JSON Schema.
//!
//! Its senders are outside the gateway's trust boundary, so the parser treats every document as
//! hostile:
//!
//! - size is checked before anything else (64 KiB), then UTF-8, then nesting depth (32) and
//!   number overflow with a cheap byte scan, and only then does `serde_json` build a tree;
//! - the tree is walked by hand instead of derived, so every error names its field as a dotted
//!   path (`window.ramp_s`, `intervals[1].target.kw`) — serde's own messages name a line and a
//!   column, which an MQTT publisher cannot act on;
//! - unknown and duplicate fields are refused (a duplicate key is how a signed body smuggles a
//!   second value past a verifier that reads the first);
//! - it never panics.
//!
//! [`parse_dr_event`] gives a [`DrEvent`], the document as written with its structure checked
//! and its interval targets resolved: when `intervals` is absent the single `target` applies to
//! the whole window; when present, an interval without its own `target` inherits the top-level
//! one. The ranges that belong to the gateway's event model (a kW ceiling is not negative, a
//! percentage is in (0, 100], a window is not absurd) are checked by the model, after this
//! crate: the gateway maps a [`DrEvent`] onto its model and names every error by its document
//! path. [`DR_EVENT_JSON_SCHEMA`] states the rules as a JSON Schema for publishers.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

/// Longest accepted window, ramp, recovery or interval, seconds (7 days): a DR event is hours.
pub const MAX_DURATION_S: u64 = 7 * 24 * 3600;
/// Highest abstract level (OpenADR SIMPLE: 0 normal to 3 emergency).
pub const MAX_LEVEL: u8 = 3;
/// Most intervals in one event (a week of 5-minute intervals is 2016).
pub const MAX_INTERVALS: usize = 4096;

/// Why a document was refused: the offending field as a dotted document path
/// (`intervals[1].target.kw`, or `(document)` for the whole document) and what to send instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct DocumentError {
    /// Dotted path of the offending field, or `(document)`.
    pub field: String,
    /// What was wrong and, where it helps, what to send instead.
    pub message: String,
}

impl DocumentError {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// A `dr.event/1` document as written, structure checked, interval targets resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct DrEvent {
    /// `event_id`: the sender's id, stable across revisions.
    pub event_id: String,
    /// `revision`: higher replaces lower.
    pub revision: u64,
    /// `site`: the site the event is for, when the sender says.
    pub site: Option<String>,
    /// `issued_at`.
    pub issued_at: Option<DateTime<Utc>>,
    /// `program`: the DR program's name.
    pub program: Option<String>,
    /// `mandatory` (absent: false).
    pub mandatory: bool,
    /// `test` (absent: false): a test event is recorded and acknowledged, never acted on.
    pub test: bool,
    /// `priority`: lower is more important (OpenADR's rule).
    pub priority: Option<u32>,
    /// `window`.
    pub window: DrWindow,
    /// The top-level `target` as written (absent when every interval carries its own).
    pub target: Option<DrTarget>,
    /// The intervals with their targets resolved; one interval over the whole window when the
    /// document has no `intervals`.
    pub intervals: Vec<DrInterval>,
    /// Whether the document had no `intervals` member (one target for the whole window).
    pub single_target: bool,
    /// `cancel` (absent: false).
    pub cancel: bool,
}

/// `window` of a `dr.event/1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrWindow {
    /// `start`.
    pub start: DateTime<Utc>,
    /// `ramp_s` (absent: 0).
    pub ramp_s: u64,
    /// `duration_s`; absent or null: open-ended until cancelled.
    pub duration_s: Option<u64>,
    /// `recovery_s` (absent: 0).
    pub recovery_s: u64,
    /// `randomize_s` (absent: 0).
    pub randomize_s: u64,
}

/// One element of `intervals` (or the whole window), its target resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct DrInterval {
    /// `offset_s` from the window's start.
    pub offset_s: u64,
    /// `duration_s`; null: to the end of the window.
    pub duration_s: Option<u64>,
    /// Its own `target`, or the top-level one it inherits.
    pub target: DrTarget,
}

/// A `target` object: one of the six forms and the values that form uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DrTarget {
    /// `ceiling`: keep the meter at or below `kw`.
    MeterCeiling {
        /// `kw`.
        kw: f64,
    },
    /// `reduction`: reduce the meter by `kw` below the baseline.
    Reduction {
        /// `kw`.
        kw: f64,
        /// `baseline_kw`, when the sender says.
        baseline_kw: Option<f64>,
    },
    /// `percent`: reduce the meter by `percent` % of the baseline.
    Percent {
        /// `percent`.
        percent: f64,
        /// `baseline_kw`, when the sender says.
        baseline_kw: Option<f64>,
    },
    /// `capacity`: keep the meter at or below `fraction` of the facility maximum.
    CapacityFraction {
        /// `fraction`.
        fraction: f64,
    },
    /// `level`: an abstract level 0..=3.
    Level {
        /// `level`.
        level: u8,
    },
    /// `price`: a price signal per MWh.
    Price {
        /// `price_per_mwh`.
        per_mwh: f64,
    },
}

impl DrTarget {
    /// The document's `form` value.
    #[must_use]
    pub fn form(&self) -> &'static str {
        match self {
            DrTarget::MeterCeiling { .. } => "ceiling",
            DrTarget::Reduction { .. } => "reduction",
            DrTarget::Percent { .. } => "percent",
            DrTarget::CapacityFraction { .. } => "capacity",
            DrTarget::Level { .. } => "level",
            DrTarget::Price { .. } => "price",
        }
    }
}

/// The `schema` value of an event document.
pub const DR_EVENT_SCHEMA: &str = "dr.event/1";
/// Largest accepted document, bytes (64 KiB): a real event is well under 2 KiB, and the limit
/// bounds the work a hostile sender can cause before anything is parsed.
pub const MAX_DOCUMENT_BYTES: usize = 64 * 1024;
/// Deepest accepted nesting of objects and arrays (a real event nests 4 deep).
pub const MAX_DEPTH: usize = 32;

/// The field path used for errors about the document as a whole.
const DOCUMENT: &str = "(document)";

const ROOT_FIELDS: &[&str] = &[
    "schema",
    "event_id",
    "revision",
    "site",
    "issued_at",
    "program",
    "mandatory",
    "test",
    "priority",
    "target",
    "window",
    "intervals",
    "cancel",
    "sig",
];
const WINDOW_FIELDS: &[&str] = &["start", "ramp_s", "duration_s", "recovery_s", "randomize_s"];
const INTERVAL_FIELDS: &[&str] = &["offset_s", "duration_s", "target"];
const TARGET_FIELDS: &[&str] = &[
    "form",
    "point",
    "kw",
    "baseline_kw",
    "percent",
    "fraction",
    "level",
    "price_per_mwh",
];
/// Target fields that carry a value (everything but `form` and `point`).
const TARGET_VALUE_FIELDS: &[&str] = &["kw", "baseline_kw", "percent", "fraction", "level", "price_per_mwh"];

/// JSON Schema (draft 2020-12) of `dr.event/1`, for publishers that validate before sending
/// (the MQTT users asked for it). It states the same rules as [`parse_dr_event`]; a test keeps
/// the field lists of the two in step.
pub const DR_EVENT_JSON_SCHEMA: &str = r##"{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://flexgate.invalid/schemas/dr.event-1.json",
  "title": "dr.event/1",
  "description": "A demand-response curtailment event for a flexgate gateway (POST /v1/events, or MQTT topic dr/{site}/events/{event_id}). Documents larger than 65536 bytes or nested deeper than 32 levels are refused. A null optional field means the same as an absent one.",
  "type": "object",
  "additionalProperties": false,
  "required": ["schema", "event_id", "revision", "window"],
  "properties": {
    "schema": { "const": "dr.event/1" },
    "event_id": {
      "description": "Event identity together with revision. Printable, no leading or trailing whitespace.",
      "type": "string", "minLength": 1, "maxLength": 128, "pattern": "^\\S(.*\\S)?$"
    },
    "revision": {
      "description": "Increments on every change, cancellation included. Lower than the held revision: ignored; equal: duplicate; higher: replaces the whole event.",
      "type": "integer", "minimum": 0
    },
    "site": { "type": ["string", "null"], "maxLength": 256 },
    "issued_at": { "type": ["string", "null"], "format": "date-time" },
    "program": { "type": ["string", "null"], "maxLength": 256 },
    "mandatory": { "type": ["boolean", "null"], "description": "Default false." },
    "test": { "type": ["boolean", "null"], "description": "Test events are acknowledged and logged but never change a power cap. Default false." },
    "priority": { "type": ["integer", "null"], "minimum": 0, "maximum": 4294967295 },
    "target": {
      "description": "The event's target; applies to the whole window when intervals is absent, and to every interval that has no target of its own.",
      "$ref": "#/$defs/target"
    },
    "window": { "$ref": "#/$defs/window" },
    "intervals": {
      "description": "Optional schedule: ordered, non-overlapping, inside the window. Offsets are from the (randomized) window start.",
      "type": ["array", "null"], "minItems": 1, "maxItems": 4096,
      "items": { "$ref": "#/$defs/interval" }
    },
    "cancel": { "type": ["boolean", "null"], "description": "This revision cancels the event. Default false." },
    "sig": { "type": ["string", "null"], "description": "Ed25519 signature (base64url, no padding) over the RFC 8785 canonical JSON of the document without its top-level sig member; checked by the MQTT transport against the configured trusted keys (adapters/mqtt/README.md, Signatures). Not checked by the HTTP API, which authenticates the caller instead." }
  },
  "anyOf": [
    { "required": ["target"], "properties": { "target": { "type": "object" } } },
    {
      "required": ["intervals"],
      "properties": { "intervals": { "type": "array", "items": { "required": ["target"], "properties": { "target": { "type": "object" } } } } }
    }
  ],
  "$defs": {
    "seconds": { "type": ["integer", "null"], "minimum": 0, "maximum": 604800 },
    "positive_seconds": { "type": ["integer", "null"], "minimum": 1, "maximum": 604800 },
    "window": {
      "type": "object",
      "additionalProperties": false,
      "required": ["start"],
      "properties": {
        "start": { "type": "string", "format": "date-time", "description": "RFC 3339 with an offset, e.g. 2026-07-14T19:00:00Z." },
        "ramp_s": { "$ref": "#/$defs/seconds", "description": "Seconds after the start by which the target must be met. Default 0." },
        "duration_s": { "$ref": "#/$defs/positive_seconds", "description": "Window length; null or absent: open-ended until cancelled." },
        "recovery_s": { "$ref": "#/$defs/seconds", "description": "Seconds over which the ceiling is released after the end. Default 0." },
        "randomize_s": { "type": ["integer", "null"], "minimum": 0, "maximum": 3600, "description": "Maximum start delay the gateway may pick. Default 0." }
      }
    },
    "interval": {
      "type": "object",
      "additionalProperties": false,
      "required": ["offset_s"],
      "properties": {
        "offset_s": { "type": "integer", "minimum": 0, "maximum": 604800 },
        "duration_s": { "$ref": "#/$defs/positive_seconds", "description": "null or absent: until the window ends (last interval only)." },
        "target": { "$ref": "#/$defs/target" }
      }
    },
    "target": {
      "type": "object",
      "additionalProperties": false,
      "required": ["form", "point"],
      "properties": {
        "form": { "enum": ["ceiling", "reduction", "percent", "capacity", "level", "price"] },
        "point": { "const": "meter" },
        "kw": { "type": ["number", "null"], "minimum": 0 },
        "baseline_kw": { "type": ["number", "null"], "minimum": 0 },
        "percent": { "type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 100 },
        "fraction": { "type": ["number", "null"], "minimum": 0, "maximum": 1 },
        "level": { "type": ["integer", "null"], "minimum": 0, "maximum": 3 },
        "price_per_mwh": { "type": ["number", "null"] }
      },
      "allOf": [
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "ceiling" } } },
          "then": {
            "required": ["kw"],
            "properties": { "kw": { "type": "number" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "reduction" } } },
          "then": {
            "required": ["kw"],
            "properties": { "kw": { "type": "number" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "percent" } } },
          "then": {
            "required": ["percent"],
            "properties": { "percent": { "type": "number" }, "kw": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "capacity" } } },
          "then": {
            "required": ["fraction"],
            "properties": { "fraction": { "type": "number" }, "kw": { "type": "null" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "level": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "level" } } },
          "then": {
            "required": ["level"],
            "properties": { "level": { "type": "integer" }, "kw": { "type": "null" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "price_per_mwh": { "type": "null" } }
          }
        },
        {
          "if": { "required": ["form"], "properties": { "form": { "const": "price" } } },
          "then": {
            "required": ["price_per_mwh"],
            "properties": { "price_per_mwh": { "type": "number" }, "kw": { "type": "null" }, "baseline_kw": { "type": "null" }, "percent": { "type": "null" }, "fraction": { "type": "null" }, "level": { "type": "null" } }
          }
        }
      ]
    }
  }
}
"##;

/// Parse a `dr.event/1` document. Every error names the offending field; `(document)` means the
/// document as a whole (too large, not UTF-8, not JSON).
pub fn parse_dr_event(bytes: &[u8]) -> Result<DrEvent, DocumentError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::new(
            DOCUMENT,
            format!(
                "{} bytes is larger than the {MAX_DOCUMENT_BYTES}-byte limit for a dr.event/1 document",
                bytes.len()
            ),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        DocumentError::new(
            DOCUMENT,
            format!("not valid UTF-8 (first invalid byte at offset {})", e.valid_up_to()),
        )
    })?;
    prescan(text)?;
    let root: J =
        serde_json::from_str(text).map_err(|e| DocumentError::new(DOCUMENT, format!("not valid JSON: {e}")))?;
    let J::Obj(entries) = &root else {
        return Err(DocumentError::new(
            DOCUMENT,
            format!("must be a JSON object, not {}", root.kind()),
        ));
    };
    let root = Obj {
        path: String::new(),
        entries,
    };

    match root.get("schema") {
        Some(J::Str(s)) if s == DR_EVENT_SCHEMA => {}
        Some(other) => {
            return Err(DocumentError::new(
                "schema",
                format!("expected \"{DR_EVENT_SCHEMA}\", got {}", other.describe()),
            ));
        }
        None => {
            return Err(DocumentError::new(
                "schema",
                format!("missing; expected \"{DR_EVENT_SCHEMA}\""),
            ));
        }
    }
    root.check_keys(ROOT_FIELDS)?;

    let id = root.req_str("event_id")?.to_owned();
    let revision = root.req_uint("revision", "revision number")?;
    let site = root.opt_str("site")?.map(str::to_owned);
    let program = root.opt_str("program")?.map(str::to_owned);
    let issued_at = root.opt_time("issued_at")?;
    let mandatory = root.opt_bool("mandatory")?.unwrap_or(false);
    let test = root.opt_bool("test")?.unwrap_or(false);
    let cancel = root.opt_bool("cancel")?.unwrap_or(false);
    let priority =
        match root.opt_uint("priority", "priority")? {
            None => None,
            Some(p) => Some(u32::try_from(p).map_err(|_| {
                DocumentError::new("priority", format!("{p} is too large; expected at most {}", u32::MAX))
            })?),
        };
    // The signature is verified by the transport over the raw bytes; here it only has to be a string.
    root.opt_str("sig")?;

    let window = parse_window(&root.req_obj("window")?)?;
    let headline = match root.opt_obj("target")? {
        Some(t) => Some(parse_target(&t)?),
        None => None,
    };
    let single = root.get("intervals").is_none();
    let intervals = match root.opt_arr("intervals")? {
        None => {
            let Some(target) = headline else {
                return Err(DocumentError::new(
                    "target",
                    "missing; an event needs a target (or intervals that each carry one)",
                ));
            };
            vec![DrInterval {
                offset_s: 0,
                duration_s: None,
                target,
            }]
        }
        Some([]) => {
            return Err(DocumentError::new(
                "intervals",
                "is empty; omit the field to apply the top-level target to the whole window",
            ));
        }
        Some(items) => {
            let mut out = Vec::with_capacity(items.len().min(MAX_INTERVALS));
            for (i, item) in items.iter().enumerate() {
                let path = format!("intervals[{i}]");
                let J::Obj(entries) = item else {
                    return Err(DocumentError::new(
                        path,
                        format!("must be an object, not {}", item.kind()),
                    ));
                };
                let obj = Obj { path, entries };
                obj.check_keys(INTERVAL_FIELDS)?;
                let offset_s = obj.req_uint("offset_s", "number of seconds")?;
                let duration_s = obj.opt_uint("duration_s", "number of seconds")?;
                let target = match obj.opt_obj("target")? {
                    Some(t) => parse_target(&t)?,
                    None => headline.ok_or_else(|| {
                        DocumentError::new(
                            obj.field("target"),
                            "missing, and there is no top-level target to inherit; give the interval a target",
                        )
                    })?,
                };
                out.push(DrInterval {
                    offset_s,
                    duration_s,
                    target,
                });
            }
            out
        }
    };

    Ok(DrEvent {
        event_id: id,
        revision,
        site,
        issued_at,
        program,
        mandatory,
        test,
        priority,
        window,
        target: headline,
        intervals,
        single_target: single,
        cancel,
    })
}

impl DrEvent {
    /// The document as JSON. `parse_dr_event` of it gives `self` back for every document with
    /// at least one interval. Intervals are written out unless the event is one target over the
    /// whole window.
    #[must_use]
    pub fn to_json(&self) -> Value {
        render(self)
    }
}

fn render(event: &DrEvent) -> Value {
    let mut root = Map::new();
    root.insert("schema".into(), DR_EVENT_SCHEMA.into());
    root.insert("event_id".into(), event.event_id.clone().into());
    root.insert("revision".into(), event.revision.into());
    root.insert("site".into(), event.site.clone().into());
    root.insert("issued_at".into(), event.issued_at.map(rfc3339).into());
    root.insert("program".into(), event.program.clone().into());
    root.insert("mandatory".into(), event.mandatory.into());
    root.insert("test".into(), event.test.into());
    if let Some(p) = event.priority {
        root.insert("priority".into(), p.into());
    }
    if let Some(first) = event.intervals.first() {
        root.insert("target".into(), target_json(&first.target));
    }
    let w = &event.window;
    let mut window = Map::new();
    window.insert("start".into(), rfc3339(w.start).into());
    window.insert("ramp_s".into(), w.ramp_s.into());
    window.insert("duration_s".into(), w.duration_s.into());
    window.insert("recovery_s".into(), w.recovery_s.into());
    window.insert("randomize_s".into(), w.randomize_s.into());
    root.insert("window".into(), Value::Object(window));
    let whole_window = matches!(event.intervals.as_slice(), [only] if only.offset_s == 0 && only.duration_s.is_none());
    if !whole_window && !event.intervals.is_empty() {
        let items = event
            .intervals
            .iter()
            .map(|iv| {
                let mut m = Map::new();
                m.insert("offset_s".into(), iv.offset_s.into());
                m.insert("duration_s".into(), iv.duration_s.into());
                m.insert("target".into(), target_json(&iv.target));
                Value::Object(m)
            })
            .collect();
        root.insert("intervals".into(), Value::Array(items));
    }
    root.insert("cancel".into(), event.cancel.into());
    Value::Object(root)
}

// ---------------------------------------------------------------------------------------------
// Rendering helpers.

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn target_json(t: &DrTarget) -> Value {
    let mut m = Map::new();
    m.insert("form".into(), t.form().into());
    m.insert("point".into(), "meter".into());
    for f in TARGET_VALUE_FIELDS {
        m.insert((*f).into(), Value::Null);
    }
    let mut set = |k: &str, v: Value| {
        m.insert(k.into(), v);
    };
    match *t {
        DrTarget::MeterCeiling { kw } => set("kw", kw.into()),
        DrTarget::Reduction { kw, baseline_kw } => {
            set("kw", kw.into());
            set("baseline_kw", baseline_kw.into());
        }
        DrTarget::Percent { percent, baseline_kw } => {
            set("percent", percent.into());
            set("baseline_kw", baseline_kw.into());
        }
        DrTarget::CapacityFraction { fraction } => set("fraction", fraction.into()),
        DrTarget::Level { level } => set("level", level.into()),
        DrTarget::Price { per_mwh } => set("price_per_mwh", per_mwh.into()),
    }
    Value::Object(m)
}

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

/// A key as it may appear in an error path: printable, at most 64 characters.
fn sanitize_key(raw: &str) -> String {
    let mut s: String = raw.chars().filter(|c| !c.is_control()).take(64).collect();
    if raw.chars().count() > 64 {
        s.push('…');
    }
    s
}

/// Cheap structural scan before serde: refuses nesting deeper than [`MAX_DEPTH`] and numbers that
/// overflow an `f64` (like `1e999`, which would become infinity), naming the field where it
/// happens. It is not a JSON validator: on anything malformed it stops and lets `serde_json`
/// report the syntax error.
fn prescan(text: &str) -> Result<(), DocumentError> {
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

// ---------------------------------------------------------------------------------------------
// Parsing: a JSON tree that keeps duplicate keys (so they can be refused with their path).

#[derive(Debug, Clone, Copy)]
enum Num {
    U(u64),
    I(i64),
    F(f64),
}

#[derive(Debug)]
enum J {
    Null,
    Bool(bool),
    Num(Num),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "a boolean",
            J::Num(_) => "a number",
            J::Str(_) => "a string",
            J::Arr(_) => "an array",
            J::Obj(_) => "an object",
        }
    }

    /// A short rendering for error messages (strings quoted and truncated).
    fn describe(&self) -> String {
        match self {
            J::Str(s) => {
                let short: String = s.chars().filter(|c| !c.is_control()).take(64).collect();
                format!("\"{short}\"")
            }
            J::Num(n) => n.to_string(),
            J::Bool(b) => b.to_string(),
            other => other.kind().to_owned(),
        }
    }
}

impl fmt::Display for Num {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Num::U(u) => write!(f, "{u}"),
            Num::I(i) => write!(f, "{i}"),
            Num::F(x) => write!(f, "{x}"),
        }
    }
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JVisitor)
    }
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<J, E> {
        Ok(if v >= 0 {
            J::Num(Num::U(v.unsigned_abs()))
        } else {
            J::Num(Num::I(v))
        })
    }
    fn visit_u64<E>(self, v: u64) -> Result<J, E> {
        Ok(J::Num(Num::U(v)))
    }
    fn visit_f64<E>(self, v: f64) -> Result<J, E> {
        Ok(J::Num(Num::F(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<J, E> {
        Ok(J::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<J, E> {
        Ok(J::Str(v))
    }
    fn visit_unit<E>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_none<E>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<J>()? {
            items.push(item);
        }
        Ok(J::Arr(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut entries = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, J>()? {
            entries.push((k, v));
        }
        Ok(J::Obj(entries))
    }
}

// ---------------------------------------------------------------------------------------------
// Parsing: typed, path-aware access to one object.

struct Obj<'a> {
    /// Path of this object (empty for the root).
    path: String,
    entries: &'a [(String, J)],
}

impl<'a> Obj<'a> {
    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Refuse unknown and duplicate keys.
    fn check_keys(&self, allowed: &[&str]) -> Result<(), DocumentError> {
        for (idx, (k, _)) in self.entries.iter().enumerate() {
            if !allowed.contains(&k.as_str()) {
                return Err(DocumentError::new(
                    self.field(&sanitize_key(k)),
                    format!("unknown field; expected one of: {}", allowed.join(", ")),
                ));
            }
            if self.entries.iter().take(idx).any(|(prev, _)| prev == k) {
                return Err(DocumentError::new(
                    self.field(k),
                    "appears more than once; send each field once",
                ));
            }
        }
        Ok(())
    }

    /// The value of `key`; `null` counts as absent.
    fn get(&self, key: &str) -> Option<&'a J> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
            .filter(|v| !matches!(v, J::Null))
    }

    fn req(&self, key: &str) -> Result<&'a J, DocumentError> {
        self.get(key)
            .ok_or_else(|| DocumentError::new(self.field(key), "missing (or null); this field is required"))
    }

    fn wrong(&self, key: &str, expected: &str, got: &J) -> DocumentError {
        DocumentError::new(self.field(key), format!("must be {expected}, got {}", got.describe()))
    }

    fn as_str(&self, key: &str, v: &'a J) -> Result<&'a str, DocumentError> {
        match v {
            J::Str(s) => Ok(s),
            other => Err(self.wrong(key, "a string", other)),
        }
    }

    fn req_str(&self, key: &str) -> Result<&'a str, DocumentError> {
        self.as_str(key, self.req(key)?)
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, DocumentError> {
        self.get(key).map(|v| self.as_str(key, v)).transpose()
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, DocumentError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(key, "true or false", other)),
        }
    }

    /// A non-negative integer. Integral floats (`600.0`) are accepted, as JSON does not
    /// distinguish them; negative and fractional numbers are refused.
    fn as_uint(&self, key: &str, what: &str, v: &J) -> Result<u64, DocumentError> {
        const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: larger floats are not exact integers
        match *v {
            J::Num(Num::U(u)) => Ok(u),
            J::Num(Num::F(f)) if f.is_finite() && f.fract() == 0.0 && (0.0..=MAX_EXACT).contains(&f) => Ok(f as u64),
            ref other => Err(self.wrong(key, &format!("a non-negative integer {what}"), other)),
        }
    }

    fn req_uint(&self, key: &str, what: &str) -> Result<u64, DocumentError> {
        self.as_uint(key, what, self.req(key)?)
    }

    fn opt_uint(&self, key: &str, what: &str) -> Result<Option<u64>, DocumentError> {
        self.get(key).map(|v| self.as_uint(key, what, v)).transpose()
    }

    /// A duration in whole seconds, at most [`MAX_DURATION_S`].
    fn opt_secs(&self, key: &str) -> Result<Option<u64>, DocumentError> {
        let v = self.opt_uint(key, "number of seconds")?;
        if let Some(s) = v
            && s > MAX_DURATION_S
        {
            return Err(DocumentError::new(
                self.field(key),
                format!("{s} s is longer than the {MAX_DURATION_S} s (7 days) allowed"),
            ));
        }
        Ok(v)
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>, DocumentError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Num(Num::U(u))) => Ok(Some(*u as f64)),
            Some(J::Num(Num::I(i))) => Ok(Some(*i as f64)),
            Some(J::Num(Num::F(f))) if f.is_finite() => Ok(Some(*f)),
            Some(other) => Err(self.wrong(key, "a finite number", other)),
        }
    }

    fn opt_time(&self, key: &str) -> Result<Option<DateTime<Utc>>, DocumentError> {
        let Some(s) = self.opt_str(key)? else {
            return Ok(None);
        };
        DateTime::parse_from_rfc3339(s.trim())
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|e| {
                DocumentError::new(
                    self.field(key),
                    format!(
                        "{} is not an RFC 3339 timestamp with an offset ({e}); write it like 2026-07-14T19:00:00Z",
                        J::Str(s.to_owned()).describe()
                    ),
                )
            })
    }

    fn req_time(&self, key: &str) -> Result<DateTime<Utc>, DocumentError> {
        self.opt_time(key)?
            .ok_or_else(|| DocumentError::new(self.field(key), "missing (or null); this field is required"))
    }

    fn as_obj(&self, key: &str, v: &'a J) -> Result<Obj<'a>, DocumentError> {
        match v {
            J::Obj(entries) => Ok(Obj {
                path: self.field(key),
                entries,
            }),
            other => Err(self.wrong(key, "an object", other)),
        }
    }

    fn req_obj(&self, key: &str) -> Result<Obj<'a>, DocumentError> {
        self.as_obj(key, self.req(key)?)
    }

    fn opt_obj(&self, key: &str) -> Result<Option<Obj<'a>>, DocumentError> {
        self.get(key).map(|v| self.as_obj(key, v)).transpose()
    }

    fn opt_arr(&self, key: &str) -> Result<Option<&'a [J]>, DocumentError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Arr(items)) => Ok(Some(items)),
            Some(other) => Err(self.wrong(key, "an array", other)),
        }
    }
}

fn parse_window(w: &Obj<'_>) -> Result<DrWindow, DocumentError> {
    w.check_keys(WINDOW_FIELDS)?;
    let start = w.req_time("start")?;
    let ramp_s = w.opt_secs("ramp_s")?.unwrap_or(0);
    let duration_s = w.opt_secs("duration_s")?;
    let recovery_s = w.opt_secs("recovery_s")?.unwrap_or(0);
    let randomize_s = w.opt_uint("randomize_s", "number of seconds")?.unwrap_or(0);
    Ok(DrWindow {
        start,
        ramp_s,
        duration_s,
        recovery_s,
        randomize_s,
    })
}

fn parse_target(t: &Obj<'_>) -> Result<DrTarget, DocumentError> {
    t.check_keys(TARGET_FIELDS)?;
    let form = t.req_str("form")?;
    match t.req_str("point")? {
        "meter" => {}
        other => {
            return Err(DocumentError::new(
                t.field("point"),
                format!(
                    "{} is not supported; targets apply to the utility meter, so send \"meter\"",
                    J::Str(other.to_owned()).describe()
                ),
            ));
        }
    }
    // Which value fields each form takes; any other non-null value field is refused, because a
    // sender who writes `percent` on a `ceiling` target meant something the gateway would ignore.
    let (uses, required): (&[&str], &str) = match form {
        "ceiling" => (&["kw"], "kw"),
        "reduction" => (&["kw", "baseline_kw"], "kw"),
        "percent" => (&["percent", "baseline_kw"], "percent"),
        "capacity" => (&["fraction"], "fraction"),
        "level" => (&["level"], "level"),
        "price" => (&["price_per_mwh"], "price_per_mwh"),
        other => {
            return Err(DocumentError::new(
                t.field("form"),
                format!(
                    "{} is not a target form; expected one of: ceiling, reduction, percent, capacity, level, price",
                    J::Str(other.to_owned()).describe()
                ),
            ));
        }
    };
    for f in TARGET_VALUE_FIELDS {
        if !uses.contains(f) && t.get(f).is_some() {
            return Err(DocumentError::new(
                t.field(f),
                format!("is not used by form \"{form}\"; set it to null or leave it out"),
            ));
        }
    }
    if t.get(required).is_none() {
        return Err(DocumentError::new(
            t.field(required),
            format!("missing (or null); form \"{form}\" requires it"),
        ));
    }
    let kw_field = |key: &str| -> Result<Option<f64>, DocumentError> {
        let v = t.opt_f64(key)?;
        if let Some(x) = v
            && x < 0.0
        {
            return Err(DocumentError::new(
                t.field(key),
                format!("{x} is negative; expected kW ≥ 0"),
            ));
        }
        Ok(v)
    };
    let need = |v: Option<f64>, key: &str| {
        v.ok_or_else(|| DocumentError::new(t.field(key), format!("missing (or null); form \"{form}\" requires it")))
    };
    let target = match form {
        "ceiling" => DrTarget::MeterCeiling {
            kw: need(kw_field("kw")?, "kw")?,
        },
        "reduction" => DrTarget::Reduction {
            kw: need(kw_field("kw")?, "kw")?,
            baseline_kw: kw_field("baseline_kw")?,
        },
        "percent" => DrTarget::Percent {
            percent: need(t.opt_f64("percent")?, "percent")?,
            baseline_kw: kw_field("baseline_kw")?,
        },
        "capacity" => DrTarget::CapacityFraction {
            fraction: need(t.opt_f64("fraction")?, "fraction")?,
        },
        "level" => {
            let level = t.opt_uint("level", "level")?.unwrap_or(0);
            let level = u8::try_from(level).ok().filter(|l| *l <= MAX_LEVEL).ok_or_else(|| {
                DocumentError::new(
                    t.field("level"),
                    format!("{level} is not a level: expected 0 to {MAX_LEVEL}"),
                )
            })?;
            DrTarget::Level { level }
        }
        _ => DrTarget::Price {
            per_mwh: need(t.opt_f64("price_per_mwh")?, "price_per_mwh")?,
        },
    };
    Ok(target)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // The parser's behaviour on whole documents, including the model's value ranges, is tested
    // where the document meets the model (the gateway's `grid::dr_event`); here, the document's
    // own structure.

    #[test]
    fn json_schema_is_valid_json_and_matches_the_parser() {
        let schema: Value = serde_json::from_str(DR_EVENT_JSON_SCHEMA).unwrap();
        assert_eq!(schema["$schema"], "https://json-schema.org/draft/2020-12/schema");
        let keys = |v: &Value| -> Vec<String> {
            let mut k: Vec<String> = v["properties"].as_object().unwrap().keys().cloned().collect();
            k.sort();
            k
        };
        let sorted = |s: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = s.iter().map(|x| (*x).to_owned()).collect();
            v.sort();
            v
        };
        assert_eq!(keys(&schema), sorted(ROOT_FIELDS));
        assert_eq!(keys(&schema["$defs"]["window"]), sorted(WINDOW_FIELDS));
        assert_eq!(keys(&schema["$defs"]["interval"]), sorted(INTERVAL_FIELDS));
        assert_eq!(keys(&schema["$defs"]["target"]), sorted(TARGET_FIELDS));
        assert_eq!(schema["properties"]["schema"]["const"], DR_EVENT_SCHEMA);
        assert_eq!(schema["$defs"]["seconds"]["maximum"], MAX_DURATION_S);
    }

    #[test]
    fn interval_targets_are_resolved_and_the_document_round_trips() {
        let doc = r#"{"schema":"dr.event/1","event_id":"e","revision":1,
            "target":{"form":"ceiling","point":"meter","kw":100},
            "window":{"start":"2026-07-14T19:00:00Z","duration_s":3600},
            "intervals":[{"offset_s":0,"duration_s":600},
                         {"offset_s":600,"target":{"form":"level","point":"meter","level":2}}]}"#;
        let ev = parse_dr_event(doc.as_bytes()).unwrap();
        assert!(!ev.single_target);
        assert_eq!(ev.target, Some(DrTarget::MeterCeiling { kw: 100.0 }));
        assert_eq!(ev.intervals[0].target, DrTarget::MeterCeiling { kw: 100.0 });
        assert_eq!(ev.intervals[1].target, DrTarget::Level { level: 2 });
        assert_eq!(parse_dr_event(ev.to_json().to_string().as_bytes()).unwrap(), ev);
        let e = parse_dr_event(doc.replace(r#""level":2"#, r#""level":4"#).as_bytes()).unwrap_err();
        assert_eq!(e.field, "intervals[1].target.level");
    }
}
