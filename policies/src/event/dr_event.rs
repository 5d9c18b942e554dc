//! The `dr.event/1` JSON codec (PROTOCOLS.md §11) and the `dr.ack/1` acknowledgement.
//!
//! `dr.event/1` is what `POST /v1/events` and the MQTT adapter accept. Its senders are outside
//! the gateway's trust boundary, so the parser treats every document as hostile:
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
//! The document maps onto [`GridEvent`]: when `intervals` is absent the single `target` applies
//! to the whole window; when present, an interval without its own `target` inherits the
//! top-level one. [`DR_EVENT_JSON_SCHEMA`] states the same rules as a JSON Schema for publishers.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::fmt;

use super::model::{EventError, EventSource, GridEvent, Interval, MAX_DURATION_S, MAX_LEVEL, Target, Window};

/// The `schema` value of an event document.
pub const DR_EVENT_SCHEMA: &str = "dr.event/1";
/// The `schema` value of an acknowledgement.
pub const DR_ACK_SCHEMA: &str = "dr.ack/1";
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

/// Parse a `dr.event/1` document into a validated [`GridEvent`].
///
/// `source` is the transport the document came by ([`EventSource::Http`] or
/// [`EventSource::Mqtt`]); the document itself does not say, and the distinction matters for
/// acks and audits. Every error names the offending field; `(document)` means the document as a
/// whole (too large, not UTF-8, not JSON).
pub fn parse_dr_event(bytes: &[u8], source: EventSource) -> Result<GridEvent, EventError> {
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(EventError::new(
            DOCUMENT,
            format!(
                "{} bytes is larger than the {MAX_DOCUMENT_BYTES}-byte limit for a dr.event/1 document",
                bytes.len()
            ),
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| {
        EventError::new(
            DOCUMENT,
            format!("not valid UTF-8 (first invalid byte at offset {})", e.valid_up_to()),
        )
    })?;
    prescan(text)?;
    let root: J = serde_json::from_str(text).map_err(|e| EventError::new(DOCUMENT, format!("not valid JSON: {e}")))?;
    let J::Obj(entries) = &root else {
        return Err(EventError::new(
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
            return Err(EventError::new(
                "schema",
                format!("expected \"{DR_EVENT_SCHEMA}\", got {}", other.describe()),
            ));
        }
        None => {
            return Err(EventError::new(
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
    let priority = match root.opt_uint("priority", "priority")? {
        None => None,
        Some(p) => Some(
            u32::try_from(p)
                .map_err(|_| EventError::new("priority", format!("{p} is too large; expected at most {}", u32::MAX)))?,
        ),
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
                return Err(EventError::new(
                    "target",
                    "missing; an event needs a target (or intervals that each carry one)",
                ));
            };
            vec![Interval {
                offset_s: 0,
                duration_s: None,
                target,
            }]
        }
        Some([]) => {
            return Err(EventError::new(
                "intervals",
                "is empty; omit the field to apply the top-level target to the whole window",
            ));
        }
        Some(items) => {
            let mut out = Vec::with_capacity(items.len().min(super::model::MAX_INTERVALS));
            for (i, item) in items.iter().enumerate() {
                let path = format!("intervals[{i}]");
                let J::Obj(entries) = item else {
                    return Err(EventError::new(path, format!("must be an object, not {}", item.kind())));
                };
                let obj = Obj { path, entries };
                obj.check_keys(INTERVAL_FIELDS)?;
                let offset_s = obj.req_uint("offset_s", "number of seconds")?;
                let duration_s = obj.opt_uint("duration_s", "number of seconds")?;
                let target = match obj.opt_obj("target")? {
                    Some(t) => parse_target(&t)?,
                    None => headline.clone().ok_or_else(|| {
                        EventError::new(
                            obj.field("target"),
                            "missing, and there is no top-level target to inherit; give the interval a target",
                        )
                    })?,
                };
                out.push(Interval {
                    offset_s,
                    duration_s,
                    target,
                });
            }
            out
        }
    };

    let event = GridEvent {
        id,
        revision,
        source,
        site,
        program,
        issued_at,
        mandatory,
        test,
        cancel,
        priority,
        window,
        intervals,
    };
    event.validate().map_err(|e| EventError {
        field: wire_path(&e.field, single),
        message: e.message,
    })?;
    Ok(event)
}

/// Render `event` as a `dr.event/1` document.
///
/// `parse_dr_event(to_dr_event_json(e))` gives `e` back for every valid event with at least one
/// interval (the `source` is the transport's, not the document's). Intervals are written out
/// unless the event is one target over the whole window.
#[must_use]
pub fn to_dr_event_json(event: &GridEvent) -> Value {
    let mut root = Map::new();
    root.insert("schema".into(), DR_EVENT_SCHEMA.into());
    root.insert("event_id".into(), event.id.clone().into());
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
    window.insert("randomize_s".into(), w.randomize_start_s.into());
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

/// Whether the gateway takes part in an event (OpenADR optIn / optOut).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Opt {
    /// The gateway will follow the event.
    In,
    /// The gateway will not follow the event (`reason` says why).
    Out,
}

/// A range of meter power, kW: what the gateway expects the meter to read while it follows an
/// event (the facility model's conservative bounds), so the utility knows what to expect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KwRange {
    /// Lower bound, kW.
    pub lo: f64,
    /// Upper bound, kW.
    pub hi: f64,
}

/// The `dr.ack/1` acknowledgement sent for every `dr.event/1` (MQTT `dr/{site}/acks/{event_id}`,
/// HTTP response body).
///
/// It echoes the log checkpoint so that the counterparty holds an anchor of the gateway's
/// tamper-evident log (FACILITY_AND_GRID.md §4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrAck {
    /// Always [`DR_ACK_SCHEMA`].
    pub schema: String,
    /// The acknowledged event.
    pub event_id: String,
    /// The acknowledged revision.
    pub revision: u64,
    /// When the gateway received the event.
    pub received_at: DateTime<Utc>,
    /// Whether the gateway takes part.
    pub opt: Opt,
    /// Why the gateway opted out, or why a part of the event is not acted on; `null` otherwise.
    pub reason: Option<String>,
    /// The meter ceiling the gateway accepted as its target, kW.
    pub accepted_target_kw: Option<f64>,
    /// The meter reading the gateway expects while following the event.
    pub expected_meter_kw: Option<KwRange>,
    /// Hash of the ledger checkpoint that records the event's receipt.
    pub log_checkpoint: String,
}

impl DrAck {
    /// An acknowledgement with the schema filled in and no reason, target or expectation; set
    /// those fields directly where they apply.
    #[must_use]
    pub fn new(
        event_id: impl Into<String>,
        revision: u64,
        received_at: DateTime<Utc>,
        opt: Opt,
        log_checkpoint: impl Into<String>,
    ) -> Self {
        Self {
            schema: DR_ACK_SCHEMA.to_owned(),
            event_id: event_id.into(),
            revision,
            received_at,
            opt,
            reason: None,
            accepted_target_kw: None,
            expected_meter_kw: None,
            log_checkpoint: log_checkpoint.into(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Rendering helpers.

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

fn target_json(t: &Target) -> Value {
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
        Target::MeterCeiling { kw } => set("kw", kw.into()),
        Target::Reduction { kw, baseline_kw } => {
            set("kw", kw.into());
            set("baseline_kw", baseline_kw.into());
        }
        Target::Percent { percent, baseline_kw } => {
            set("percent", percent.into());
            set("baseline_kw", baseline_kw.into());
        }
        Target::CapacityFraction { fraction } => set("fraction", fraction.into()),
        Target::Level { level } => set("level", level.into()),
        Target::Price { per_mwh } => set("price_per_mwh", per_mwh.into()),
    }
    Value::Object(m)
}

/// Map a field path of the normalized model onto the wire document's names, so that errors found
/// by [`GridEvent::validate`] name what the sender actually wrote.
fn wire_path(field: &str, single_target: bool) -> String {
    let mut f = field.to_owned();
    if single_target && let Some(rest) = f.strip_prefix("intervals[0].target") {
        f = format!("target{rest}");
    }
    if f == "id" {
        return "event_id".into();
    }
    if f == "window.randomize_start_s" {
        return "window.randomize_s".into();
    }
    if f == "per_mwh" {
        return "price_per_mwh".into();
    }
    if let Some(stem) = f.strip_suffix(".per_mwh") {
        return format!("{stem}.price_per_mwh");
    }
    f
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
fn prescan(text: &str) -> Result<(), EventError> {
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
                    return Err(EventError::new(
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
                    return Err(EventError::new(
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
    fn check_keys(&self, allowed: &[&str]) -> Result<(), EventError> {
        for (idx, (k, _)) in self.entries.iter().enumerate() {
            if !allowed.contains(&k.as_str()) {
                return Err(EventError::new(
                    self.field(&sanitize_key(k)),
                    format!("unknown field; expected one of: {}", allowed.join(", ")),
                ));
            }
            if self.entries.iter().take(idx).any(|(prev, _)| prev == k) {
                return Err(EventError::new(
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

    fn req(&self, key: &str) -> Result<&'a J, EventError> {
        self.get(key)
            .ok_or_else(|| EventError::new(self.field(key), "missing (or null); this field is required"))
    }

    fn wrong(&self, key: &str, expected: &str, got: &J) -> EventError {
        EventError::new(self.field(key), format!("must be {expected}, got {}", got.describe()))
    }

    fn as_str(&self, key: &str, v: &'a J) -> Result<&'a str, EventError> {
        match v {
            J::Str(s) => Ok(s),
            other => Err(self.wrong(key, "a string", other)),
        }
    }

    fn req_str(&self, key: &str) -> Result<&'a str, EventError> {
        self.as_str(key, self.req(key)?)
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, EventError> {
        self.get(key).map(|v| self.as_str(key, v)).transpose()
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, EventError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(key, "true or false", other)),
        }
    }

    /// A non-negative integer. Integral floats (`600.0`) are accepted, as JSON does not
    /// distinguish them; negative and fractional numbers are refused.
    fn as_uint(&self, key: &str, what: &str, v: &J) -> Result<u64, EventError> {
        const MAX_EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: larger floats are not exact integers
        match *v {
            J::Num(Num::U(u)) => Ok(u),
            J::Num(Num::F(f)) if f.is_finite() && f.fract() == 0.0 && (0.0..=MAX_EXACT).contains(&f) => Ok(f as u64),
            ref other => Err(self.wrong(key, &format!("a non-negative integer {what}"), other)),
        }
    }

    fn req_uint(&self, key: &str, what: &str) -> Result<u64, EventError> {
        self.as_uint(key, what, self.req(key)?)
    }

    fn opt_uint(&self, key: &str, what: &str) -> Result<Option<u64>, EventError> {
        self.get(key).map(|v| self.as_uint(key, what, v)).transpose()
    }

    /// A duration in whole seconds, at most [`MAX_DURATION_S`].
    fn opt_secs(&self, key: &str) -> Result<Option<u64>, EventError> {
        let v = self.opt_uint(key, "number of seconds")?;
        if let Some(s) = v
            && s > MAX_DURATION_S
        {
            return Err(EventError::new(
                self.field(key),
                format!("{s} s is longer than the {MAX_DURATION_S} s (7 days) allowed"),
            ));
        }
        Ok(v)
    }

    fn opt_f64(&self, key: &str) -> Result<Option<f64>, EventError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Num(Num::U(u))) => Ok(Some(*u as f64)),
            Some(J::Num(Num::I(i))) => Ok(Some(*i as f64)),
            Some(J::Num(Num::F(f))) if f.is_finite() => Ok(Some(*f)),
            Some(other) => Err(self.wrong(key, "a finite number", other)),
        }
    }

    fn opt_time(&self, key: &str) -> Result<Option<DateTime<Utc>>, EventError> {
        let Some(s) = self.opt_str(key)? else {
            return Ok(None);
        };
        DateTime::parse_from_rfc3339(s.trim())
            .map(|t| Some(t.with_timezone(&Utc)))
            .map_err(|e| {
                EventError::new(
                    self.field(key),
                    format!(
                        "{} is not an RFC 3339 timestamp with an offset ({e}); write it like 2026-07-14T19:00:00Z",
                        J::Str(s.to_owned()).describe()
                    ),
                )
            })
    }

    fn req_time(&self, key: &str) -> Result<DateTime<Utc>, EventError> {
        self.opt_time(key)?
            .ok_or_else(|| EventError::new(self.field(key), "missing (or null); this field is required"))
    }

    fn as_obj(&self, key: &str, v: &'a J) -> Result<Obj<'a>, EventError> {
        match v {
            J::Obj(entries) => Ok(Obj {
                path: self.field(key),
                entries,
            }),
            other => Err(self.wrong(key, "an object", other)),
        }
    }

    fn req_obj(&self, key: &str) -> Result<Obj<'a>, EventError> {
        self.as_obj(key, self.req(key)?)
    }

    fn opt_obj(&self, key: &str) -> Result<Option<Obj<'a>>, EventError> {
        self.get(key).map(|v| self.as_obj(key, v)).transpose()
    }

    fn opt_arr(&self, key: &str) -> Result<Option<&'a [J]>, EventError> {
        match self.get(key) {
            None => Ok(None),
            Some(J::Arr(items)) => Ok(Some(items)),
            Some(other) => Err(self.wrong(key, "an array", other)),
        }
    }
}

fn parse_window(w: &Obj<'_>) -> Result<Window, EventError> {
    w.check_keys(WINDOW_FIELDS)?;
    let start = w.req_time("start")?;
    let ramp_s = w.opt_secs("ramp_s")?.unwrap_or(0);
    let duration_s = w.opt_secs("duration_s")?;
    let recovery_s = w.opt_secs("recovery_s")?.unwrap_or(0);
    let randomize_start_s = w.opt_uint("randomize_s", "number of seconds")?.unwrap_or(0);
    Ok(Window {
        start,
        ramp_s,
        duration_s,
        recovery_s,
        randomize_start_s,
    })
}

fn parse_target(t: &Obj<'_>) -> Result<Target, EventError> {
    t.check_keys(TARGET_FIELDS)?;
    let form = t.req_str("form")?;
    match t.req_str("point")? {
        "meter" => {}
        other => {
            return Err(EventError::new(
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
            return Err(EventError::new(
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
            return Err(EventError::new(
                t.field(f),
                format!("is not used by form \"{form}\"; set it to null or leave it out"),
            ));
        }
    }
    if t.get(required).is_none() {
        return Err(EventError::new(
            t.field(required),
            format!("missing (or null); form \"{form}\" requires it"),
        ));
    }
    let kw_field = |key: &str| -> Result<Option<f64>, EventError> {
        let v = t.opt_f64(key)?;
        if let Some(x) = v
            && x < 0.0
        {
            return Err(EventError::new(
                t.field(key),
                format!("{x} is negative; expected kW ≥ 0"),
            ));
        }
        Ok(v)
    };
    let need = |v: Option<f64>, key: &str| {
        v.ok_or_else(|| EventError::new(t.field(key), format!("missing (or null); form \"{form}\" requires it")))
    };
    let target = match form {
        "ceiling" => Target::MeterCeiling {
            kw: need(kw_field("kw")?, "kw")?,
        },
        "reduction" => Target::Reduction {
            kw: need(kw_field("kw")?, "kw")?,
            baseline_kw: kw_field("baseline_kw")?,
        },
        "percent" => Target::Percent {
            percent: need(t.opt_f64("percent")?, "percent")?,
            baseline_kw: kw_field("baseline_kw")?,
        },
        "capacity" => Target::CapacityFraction {
            fraction: need(t.opt_f64("fraction")?, "fraction")?,
        },
        "level" => {
            let level = t.opt_uint("level", "level")?.unwrap_or(0);
            let level = u8::try_from(level).ok().filter(|l| *l <= MAX_LEVEL).ok_or_else(|| {
                EventError::new(
                    t.field("level"),
                    format!("{level} is not a level: expected 0 to {MAX_LEVEL}"),
                )
            })?;
            Target::Level { level }
        }
        _ => Target::Price {
            per_mwh: need(t.opt_f64("price_per_mwh")?, "price_per_mwh")?,
        },
    };
    target.validate().map_err(|e| EventError {
        field: t.field(&wire_path(&e.field, false)),
        message: e.message,
    })?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HAPPY: &str = r#"{"schema":"dr.event/1","event_id":"ev-2026-0142","revision":3,"site":"dc-east",
        "issued_at":"2026-07-14T18:59:40Z","program":"util-dr-10min","mandatory":true,"test":false,
        "target":{"form":"ceiling","point":"meter","kw":8000,"baseline_kw":null,"percent":null,"fraction":null,
                  "level":null,"price_per_mwh":null},
        "window":{"start":"2026-07-14T19:00:00Z","ramp_s":600,"duration_s":7200,"recovery_s":600,"randomize_s":0},
        "cancel":false,"sig":"eyJhbGciOi..."}"#;

    fn parse(s: &str) -> Result<GridEvent, EventError> {
        parse_dr_event(s.as_bytes(), EventSource::Http)
    }

    /// `HAPPY` with `f` applied to its JSON tree.
    fn mutate(f: impl FnOnce(&mut Value)) -> String {
        let mut v: Value = serde_json::from_str(HAPPY).unwrap();
        f(&mut v);
        v.to_string()
    }

    fn err_field(s: &str) -> String {
        let e = parse(s).unwrap_err();
        assert!(!e.message.is_empty());
        e.field
    }

    #[test]
    fn happy_path_single_target() {
        let ev = parse(HAPPY).unwrap();
        assert_eq!(ev.id, "ev-2026-0142");
        assert_eq!(ev.revision, 3);
        assert_eq!(ev.source, EventSource::Http);
        assert_eq!(ev.site.as_deref(), Some("dc-east"));
        assert_eq!(ev.program.as_deref(), Some("util-dr-10min"));
        assert_eq!(ev.issued_at, Some("2026-07-14T18:59:40Z".parse().unwrap()));
        assert!(ev.mandatory && !ev.test && !ev.cancel);
        assert_eq!(ev.window.ramp_s, 600);
        assert_eq!(ev.window.duration_s, Some(7200));
        assert_eq!(ev.window.recovery_s, 600);
        assert_eq!(
            ev.intervals,
            vec![Interval {
                offset_s: 0,
                duration_s: None,
                target: Target::MeterCeiling { kw: 8000.0 }
            }]
        );
    }

    #[test]
    fn happy_path_with_intervals_and_inheritance() {
        let doc = mutate(|v| {
            v["intervals"] = serde_json::json!([
                {"offset_s": 0, "duration_s": 3600},
                {"offset_s": 3600, "duration_s": null, "target": {"form": "percent", "point": "meter", "percent": 20,
                 "baseline_kw": 9500}}
            ]);
        });
        let ev = parse(&doc).unwrap();
        assert_eq!(ev.intervals.len(), 2);
        assert_eq!(ev.intervals[0].target, Target::MeterCeiling { kw: 8000.0 });
        assert_eq!(ev.intervals[0].duration_s, Some(3600));
        assert_eq!(
            ev.intervals[1].target,
            Target::Percent {
                percent: 20.0,
                baseline_kw: Some(9500.0)
            }
        );
        assert_eq!(ev.intervals[1].duration_s, None);

        // Without a top-level target, every interval needs its own.
        let doc = mutate(|v| {
            v.as_object_mut().unwrap().remove("target");
            v["intervals"] = serde_json::json!([{"offset_s": 0}]);
        });
        assert_eq!(err_field(&doc), "intervals[0].target");
    }

    #[test]
    fn every_form_parses() {
        let cases = [
            (
                r#"{"form":"reduction","point":"meter","kw":1500}"#,
                Target::Reduction {
                    kw: 1500.0,
                    baseline_kw: None,
                },
            ),
            (
                r#"{"form":"percent","point":"meter","percent":12.5}"#,
                Target::Percent {
                    percent: 12.5,
                    baseline_kw: None,
                },
            ),
            (
                r#"{"form":"capacity","point":"meter","fraction":0.6}"#,
                Target::CapacityFraction { fraction: 0.6 },
            ),
            (
                r#"{"form":"level","point":"meter","level":2}"#,
                Target::Level { level: 2 },
            ),
            (
                r#"{"form":"price","point":"meter","price_per_mwh":-12.0}"#,
                Target::Price { per_mwh: -12.0 },
            ),
        ];
        for (target, want) in cases {
            let doc = mutate(|v| v["target"] = serde_json::from_str(target).unwrap());
            assert_eq!(parse(&doc).unwrap().intervals[0].target, want, "{target}");
        }
    }

    #[test]
    fn round_trip_through_json() {
        let doc = mutate(|v| {
            v["priority"] = 2.into();
            v["window"]["randomize_s"] = 120.into();
            v["intervals"] = serde_json::json!([
                {"offset_s": 0, "duration_s": 1800},
                {"offset_s": 1800, "duration_s": 1800, "target": {"form": "level", "point": "meter", "level": 3}},
                {"offset_s": 4000, "target": {"form": "reduction", "point": "meter", "kw": 250.5, "baseline_kw": 9000}}
            ]);
        });
        let ev = parse(&doc).unwrap();
        let again = parse(&to_dr_event_json(&ev).to_string()).unwrap();
        assert_eq!(again, ev);

        let single = parse(HAPPY).unwrap();
        let json = to_dr_event_json(&single);
        assert!(json.get("intervals").is_none());
        assert_eq!(json["target"]["kw"], 8000.0);
        assert_eq!(parse(&json.to_string()).unwrap(), single);

        // Sub-second instants and open-ended windows survive too.
        let doc = mutate(|v| {
            v["window"]["start"] = "2026-07-14T21:00:00.250+02:00".into();
            v["window"]["duration_s"] = Value::Null;
        });
        let ev = parse(&doc).unwrap();
        assert_eq!(ev.window.duration_s, None);
        assert_eq!(
            ev.window.start,
            "2026-07-14T19:00:00.250Z".parse::<DateTime<Utc>>().unwrap()
        );
        assert_eq!(parse(&to_dr_event_json(&ev).to_string()).unwrap(), ev);
    }

    #[test]
    fn huge_document_is_refused_before_parsing() {
        let mut doc = HAPPY.to_owned();
        doc.push_str(&" ".repeat(MAX_DOCUMENT_BYTES));
        assert_eq!(err_field(&doc), "(document)");
        // Not even UTF-8 is looked at.
        let junk = vec![0xffu8; MAX_DOCUMENT_BYTES + 1];
        let e = parse_dr_event(&junk, EventSource::Mqtt).unwrap_err();
        assert!(e.message.contains("limit"), "{e}");
    }

    #[test]
    fn invalid_utf8_and_invalid_json() {
        let e = parse_dr_event(b"{\"schema\":\"dr.event/1\xff\"}", EventSource::Http).unwrap_err();
        assert_eq!(e.field, "(document)");
        assert!(e.message.contains("UTF-8"), "{e}");
        for bad in [
            "",
            "{",
            "{\"schema\":}",
            "[1,2]",
            "\"dr.event/1\"",
            "{} {}",
            "{\"a\":1,}",
        ] {
            assert_eq!(err_field(bad), "(document)", "{bad:?}");
        }
    }

    #[test]
    fn deep_nesting_is_refused_cheaply() {
        let deep = format!(
            "{{\"schema\":\"dr.event/1\",\"x\":{}{}}}",
            "[".repeat(40),
            "]".repeat(40)
        );
        let e = parse(&deep).unwrap_err();
        assert!(e.message.contains("nesting"), "{e}");
        assert!(e.field.starts_with("x[0]"), "{e}");
        // Far deeper than serde_json's own limit: still a clean error, no stack overflow.
        let abyss = "[".repeat(60_000);
        assert!(parse(&abyss).unwrap_err().message.contains("nesting"));
        // 32 levels are fine structurally (the field is then unknown).
        let ok_depth = format!("{{\"x\":{}{}}}", "[".repeat(31), "]".repeat(31));
        assert_eq!(err_field(&ok_depth), "schema");
    }

    #[test]
    fn overflowing_numbers_name_their_field() {
        let doc = HAPPY.replace("\"kw\":8000", "\"kw\":1e999");
        assert_eq!(err_field(&doc), "target.kw");
        let doc = HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":-1e999");
        assert_eq!(err_field(&doc), "window.ramp_s");
        let doc = mutate(|v| {
            v["intervals"] =
                serde_json::json!([{"offset_s": 0, "target": {"form": "ceiling", "point": "meter", "kw": 1}}])
        })
        .replace("\"kw\":1}", "\"kw\":1e400}");
        assert_eq!(err_field(&doc), "intervals[0].target.kw");
    }

    #[test]
    fn bad_durations_are_refused_with_their_path() {
        for (bad, field) in [
            ("\"ramp_s\":-5", "window.ramp_s"),
            ("\"ramp_s\":1.5", "window.ramp_s"),
            ("\"ramp_s\":\"600\"", "window.ramp_s"),
            ("\"duration_s\":-7200", "window.duration_s"),
            ("\"duration_s\":0", "window.duration_s"),
            ("\"duration_s\":604801", "window.duration_s"),
            ("\"recovery_s\":0.25", "window.recovery_s"),
            ("\"randomize_s\":3601", "window.randomize_s"),
        ] {
            let original = bad.split(':').next().unwrap();
            let doc = match original {
                "\"ramp_s\"" => HAPPY.replace("\"ramp_s\":600", bad),
                "\"duration_s\"" => HAPPY.replace("\"duration_s\":7200", bad),
                "\"recovery_s\"" => HAPPY.replace("\"recovery_s\":600", bad),
                _ => HAPPY.replace("\"randomize_s\":0", bad),
            };
            let e = parse(&doc).unwrap_err();
            assert_eq!(e.field, field, "{bad}: {e}");
        }
        let e = parse(&HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":-5")).unwrap_err();
        assert!(
            e.message.contains("non-negative integer") && e.message.contains("-5"),
            "{e}"
        );
        // An integral float is an integer.
        assert_eq!(
            parse(&HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":600.0"))
                .unwrap()
                .window
                .ramp_s,
            600
        );
        // Interval durations too.
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": 0, "duration_s": 1.5}]));
        assert_eq!(err_field(&doc), "intervals[0].duration_s");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": -1}]));
        assert_eq!(err_field(&doc), "intervals[0].offset_s");
    }

    #[test]
    fn revision_must_be_a_non_negative_integer() {
        for bad in ["-1", "1.5", "\"3\"", "null", "true"] {
            let doc = HAPPY.replace("\"revision\":3", &format!("\"revision\":{bad}"));
            assert_eq!(err_field(&doc), "revision", "{bad}");
        }
        let doc = HAPPY.replace("\"revision\":3,", "");
        assert_eq!(err_field(&doc), "revision");
        assert_eq!(
            parse(&HAPPY.replace("\"revision\":3", "\"revision\":0"))
                .unwrap()
                .revision,
            0
        );
    }

    #[test]
    fn schema_must_be_dr_event_1() {
        assert_eq!(err_field(&HAPPY.replace("dr.event/1", "dr.event/2")), "schema");
        assert_eq!(err_field(&HAPPY.replace("\"schema\":\"dr.event/1\",", "")), "schema");
        assert_eq!(err_field(&HAPPY.replace("\"dr.event/1\"", "1")), "schema");
    }

    #[test]
    fn unknown_and_duplicate_fields_are_refused() {
        assert_eq!(
            err_field(&HAPPY.replace("\"cancel\":false", "\"cancel\":false,\"extra\":1")),
            "extra"
        );
        assert_eq!(
            err_field(&HAPPY.replace("\"ramp_s\":600", "\"ramp_s\":600,\"ramp\":5")),
            "window.ramp"
        );
        assert_eq!(
            err_field(&HAPPY.replace("\"kw\":8000", "\"kw\":8000,\"watts\":5")),
            "target.watts"
        );
        let e = parse(&HAPPY.replace("\"revision\":3", "\"revision\":3,\"revision\":4")).unwrap_err();
        assert_eq!(e.field, "revision");
        assert!(e.message.contains("more than once"), "{e}");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": 0, "duration": 5}]));
        assert_eq!(err_field(&doc), "intervals[0].duration");
    }

    #[test]
    fn missing_required_fields_are_named() {
        assert_eq!(
            err_field(&HAPPY.replace("\"event_id\":\"ev-2026-0142\",", "")),
            "event_id"
        );
        let doc = mutate(|v| {
            v.as_object_mut().unwrap().remove("window");
        });
        assert_eq!(err_field(&doc), "window");
        let doc = mutate(|v| {
            v["window"].as_object_mut().unwrap().remove("start");
        });
        assert_eq!(err_field(&doc), "window.start");
        let doc = mutate(|v| {
            v.as_object_mut().unwrap().remove("target");
        });
        assert_eq!(err_field(&doc), "target");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([]));
        assert_eq!(err_field(&doc), "intervals");
        let doc = mutate(|v| {
            v["target"].as_object_mut().unwrap().remove("point");
        });
        assert_eq!(err_field(&doc), "target.point");
    }

    #[test]
    fn target_rules() {
        let t = |target: &str| mutate(|v| v["target"] = serde_json::from_str(target).unwrap());
        for (target, field) in [
            (r#"{"form":"ceiling","point":"rack","kw":5}"#, "target.point"),
            (r#"{"form":"ceiling","point":"meter"}"#, "target.kw"),
            (
                r#"{"form":"reduction","point":"meter","baseline_kw":9000}"#,
                "target.kw",
            ),
            (r#"{"form":"percent","point":"meter","kw":5}"#, "target.kw"),
            (r#"{"form":"percent","point":"meter"}"#, "target.percent"),
            (r#"{"form":"percent","point":"meter","percent":0}"#, "target.percent"),
            (r#"{"form":"percent","point":"meter","percent":150}"#, "target.percent"),
            (r#"{"form":"capacity","point":"meter","fraction":8}"#, "target.fraction"),
            (r#"{"form":"level","point":"meter","level":4}"#, "target.level"),
            (r#"{"form":"level","point":"meter","level":1.5}"#, "target.level"),
            (r#"{"form":"level","point":"meter"}"#, "target.level"),
            (r#"{"form":"price","point":"meter"}"#, "target.price_per_mwh"),
            (r#"{"form":"ceiling","point":"meter","kw":-1}"#, "target.kw"),
            (r#"{"form":"ceiling","point":"meter","kw":"8000"}"#, "target.kw"),
            (
                r#"{"form":"reduction","point":"meter","kw":5,"baseline_kw":-3}"#,
                "target.baseline_kw",
            ),
            (r#"{"form":"watts","point":"meter","kw":5}"#, "target.form"),
            (r#"{"point":"meter","kw":5}"#, "target.form"),
            (r#"[1]"#, "target"),
        ] {
            let e = parse(&t(target)).unwrap_err();
            assert_eq!(e.field, field, "{target}: {e}");
        }
    }

    #[test]
    fn timestamps_need_rfc3339_with_offset() {
        for bad in ["2026-07-14T19:00:00", "2026-07-14", "yesterday", "2026-13-14T19:00:00Z"] {
            let doc = HAPPY.replace("2026-07-14T19:00:00Z", bad);
            assert_eq!(err_field(&doc), "window.start", "{bad}");
        }
        let doc = HAPPY.replace("2026-07-14T18:59:40Z", "18:59");
        assert_eq!(err_field(&doc), "issued_at");
        let ev = parse(&HAPPY.replace("2026-07-14T19:00:00Z", "2026-07-14T15:00:00-04:00")).unwrap();
        assert_eq!(
            ev.window.start,
            "2026-07-14T19:00:00Z".parse::<DateTime<Utc>>().unwrap()
        );
    }

    #[test]
    fn interval_layout_errors_use_wire_paths() {
        let doc = mutate(|v| {
            v["intervals"] = serde_json::json!([{"offset_s": 0, "duration_s": 4000}, {"offset_s": 3000}]);
        });
        assert_eq!(err_field(&doc), "intervals[1].offset_s");
        let doc = mutate(|v| v["intervals"] = serde_json::json!([{"offset_s": 0, "duration_s": 8000}]));
        assert_eq!(err_field(&doc), "intervals[0].duration_s");
        let doc = HAPPY.replace("\"event_id\":\"ev-2026-0142\"", "\"event_id\":\"\"");
        assert_eq!(err_field(&doc), "event_id");
        let doc = HAPPY.replace("\"site\":\"dc-east\"", "\"site\":\"dc\\u0007east\"");
        assert_eq!(err_field(&doc), "site");
    }

    #[test]
    fn wire_paths_map_model_names() {
        assert_eq!(wire_path("intervals[0].target.kw", true), "target.kw");
        assert_eq!(wire_path("intervals[0].target.kw", false), "intervals[0].target.kw");
        assert_eq!(
            wire_path("intervals[2].target.per_mwh", false),
            "intervals[2].target.price_per_mwh"
        );
        assert_eq!(wire_path("window.randomize_start_s", true), "window.randomize_s");
        assert_eq!(wire_path("id", true), "event_id");
        assert_eq!(wire_path("per_mwh", false), "price_per_mwh");
    }

    #[test]
    fn hostile_inputs_never_panic() {
        let samples: Vec<Vec<u8>> = vec![
            b"\"\\".to_vec(),
            b"{\"\\".to_vec(),
            b"{\"schema\":\"dr.event/1\",\"\\u00e9\xc3\xa9\":1}".to_vec(),
            b"{\"a\":[-]}".to_vec(),
            b"{\"a\":--1}".to_vec(),
            b"{\"a\":1e}".to_vec(),
            b"}}]]{{".to_vec(),
            format!("{{\"schema\":\"dr.event/1\",\"event_id\":\"{}\"}}", "x".repeat(60_000)).into_bytes(),
            format!("{{\"schema\":\"dr.event/1\",\"{}\":1}}", "k".repeat(1000)).into_bytes(),
            HAPPY.replace("8000", &"9".repeat(400)).into_bytes(),
        ];
        for s in samples {
            assert!(
                parse_dr_event(&s, EventSource::Mqtt).is_err(),
                "{}",
                String::from_utf8_lossy(&s)
            );
        }
        // Truncations of a valid document never panic.
        for cut in 0..HAPPY.len() {
            if let Some(prefix) = HAPPY.get(..cut) {
                let _ = parse(prefix);
            }
        }
    }

    #[test]
    fn cancel_documents_parse() {
        let ev = parse(&HAPPY.replace("\"cancel\":false", "\"cancel\":true")).unwrap();
        assert!(ev.cancel);
    }

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
        assert_eq!(
            schema["$defs"]["window"]["properties"]["randomize_s"]["maximum"],
            super::super::model::MAX_RANDOMIZE_S
        );
        assert_eq!(
            schema["properties"]["event_id"]["maxLength"],
            super::super::model::MAX_ID_CHARS
        );
    }

    #[test]
    fn ack_matches_the_documented_shape() {
        let mut ack = DrAck::new(
            "ev-2026-0142",
            3,
            "2026-07-14T18:59:41Z".parse().unwrap(),
            Opt::In,
            "ab12",
        );
        ack.accepted_target_kw = Some(8000.0);
        ack.expected_meter_kw = Some(KwRange { lo: 7700.0, hi: 7950.0 });
        let v = serde_json::to_value(&ack).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"schema":"dr.ack/1","event_id":"ev-2026-0142","revision":3,
                "received_at":"2026-07-14T18:59:41Z","opt":"in","reason":null,"accepted_target_kw":8000.0,
                "expected_meter_kw":{"lo":7700.0,"hi":7950.0},"log_checkpoint":"ab12"})
        );
        let back: DrAck = serde_json::from_value(v).unwrap();
        assert_eq!(back, ack);
        assert_eq!(serde_json::to_value(Opt::Out).unwrap(), "out");
    }
}
