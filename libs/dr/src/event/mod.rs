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
use serde_json::{Map, Value};

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
    /// document has no `intervals`; none for a cancellation that gives no target.
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
mod prescan;
mod schema;
mod tree;

use prescan::prescan;
pub use schema::DR_EVENT_JSON_SCHEMA;
use tree::{J, Obj};

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
        // A cancellation names the event; what it cancelled is the gateway's to know.
        None if headline.is_none() && cancel => Vec::new(),
        None => {
            let Some(target) = headline else {
                return Err(DocumentError::new(
                    "target",
                    "missing; an event needs a target (or intervals that each carry one); only a cancellation (\"cancel\": true) may leave both out",
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
    /// The document as JSON. `parse_dr_event` of it gives `self` back for every event it
    /// parsed (and for every event with at least one interval whose `target` and `single_target`
    /// agree with its intervals): the top-level `target` is written as it was (or, when the
    /// intervals are left out, as the one interval's target), and the intervals are written out
    /// unless the document had none, i.e. one target over the whole window.
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
    let whole_window = matches!(event.intervals.as_slice(), [only] if only.offset_s == 0 && only.duration_s.is_none());
    // Only a document without `intervals` is rendered without them: one that had them (even a
    // single one over the whole window) must parse back with `single_target` false.
    let omit_intervals = event.intervals.is_empty() || (event.single_target && whole_window);
    let write_intervals = !omit_intervals;
    // The top-level target as written; without intervals, the one interval's target is the
    // whole event's.
    let headline = match (event.target, write_intervals) {
        (Some(t), _) => Some(t),
        (None, false) => event.intervals.first().map(|iv| iv.target),
        (None, true) => None,
    };
    if let Some(t) = headline {
        root.insert("target".into(), target_json(&t));
    }
    let w = &event.window;
    let mut window = Map::new();
    window.insert("start".into(), rfc3339(w.start).into());
    window.insert("ramp_s".into(), w.ramp_s.into());
    window.insert("duration_s".into(), w.duration_s.into());
    window.insert("recovery_s".into(), w.recovery_s.into());
    window.insert("randomize_s".into(), w.randomize_s.into());
    root.insert("window".into(), Value::Object(window));
    if write_intervals {
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

    #[test]
    fn documents_as_written_round_trip_whatever_carries_the_target() {
        // Each of these once rendered to another document: the first interval's target became a
        // top-level `target` that was never written, and one interval over the whole window lost
        // its `intervals` member.
        for doc in [
            r#"{"schema":"dr.event/1","event_id":"e","revision":1,
                "window":{"start":"2026-07-14T19:00:00Z","duration_s":3600},
                "intervals":[{"offset_s":0,"target":{"form":"ceiling","point":"meter","kw":100}}]}"#,
            r#"{"schema":"dr.event/1","event_id":"e","revision":1,
                "window":{"start":"2026-07-14T19:00:00Z"},
                "intervals":[{"offset_s":0,"target":{"form":"level","point":"meter","level":1}},
                             {"offset_s":60,"target":{"form":"level","point":"meter","level":2}}]}"#,
            r#"{"schema":"dr.event/1","event_id":"e","revision":1,
                "target":{"form":"ceiling","point":"meter","kw":100},
                "window":{"start":"2026-07-14T19:00:00Z"},
                "intervals":[{"offset_s":0}]}"#,
            r#"{"schema":"dr.event/1","event_id":"e","revision":1,
                "target":{"form":"price","point":"meter","price_per_mwh":80},
                "window":{"start":"2026-07-14T19:00:00Z"},
                "intervals":[{"offset_s":0,"target":{"form":"level","point":"meter","level":3}}]}"#,
        ] {
            let ev = parse_dr_event(doc.as_bytes()).unwrap();
            let text = ev.to_json().to_string();
            assert_eq!(parse_dr_event(text.as_bytes()).unwrap(), ev, "{text}");
        }
    }

    #[test]
    fn a_cancellation_needs_no_target_and_anything_else_does() {
        let cancel = r#"{"schema":"dr.event/1","event_id":"e","revision":2,"cancel":true,
            "window":{"start":"2026-07-14T19:00:00Z"}}"#;
        let ev = parse_dr_event(cancel.as_bytes()).unwrap();
        assert!(ev.cancel && ev.intervals.is_empty() && ev.target.is_none());
        assert_eq!(parse_dr_event(ev.to_json().to_string().as_bytes()).unwrap(), ev);
        let e = parse_dr_event(cancel.replace(r#""cancel":true"#, r#""cancel":false"#).as_bytes()).unwrap_err();
        assert_eq!(e.field, "target");
        assert!(e.message.contains("only a cancellation"), "{e}");
    }

    #[test]
    fn an_unknown_key_that_prints_as_nothing_is_still_named() {
        // Found by the fuzz target (libs/dr/fuzz): the empty key, or one of control characters
        // only, was refused with an empty field path.
        for (key, field) in [("", r#""""#), (r"\u0007\u001b", "(unprintable)"), (r"\u0000x", "x")] {
            let doc = format!(r#"{{"schema":"dr.event/1","{key}":1}}"#);
            let e = parse_dr_event(doc.as_bytes()).unwrap_err();
            assert_eq!(e.field, field, "{doc}");
            assert!(e.message.starts_with("unknown field"), "{e}");
            let doc = format!(
                r#"{{"schema":"dr.event/1","event_id":"e","revision":1,"window":{{"start":"2026-07-14T19:00:00Z","{key}":1}}}}"#
            );
            assert_eq!(
                parse_dr_event(doc.as_bytes()).unwrap_err().field,
                format!("window.{field}")
            );
        }
    }

    #[test]
    fn instants_that_leave_rfc_3339_years_in_utc_are_refused() {
        // Found by the fuzz target (libs/dr/fuzz): 9999-12-31T23:59:59-23:59 is year 10000 in
        // UTC, which the gateway then wrote as "+10000-…", a document it refuses itself.
        let doc = |start: &str| {
            format!(
                r#"{{"schema":"dr.event/1","event_id":"e","revision":1,"window":{{"start":"{start}"}},
                "target":{{"form":"level","point":"meter","level":1}}}}"#
            )
        };
        for start in ["9999-12-31T23:59:59.999999999-23:59", "0000-01-01T00:00:00+00:01"] {
            let e = parse_dr_event(doc(start).as_bytes()).unwrap_err();
            assert_eq!(e.field, "window.start", "{start}");
            assert!(e.message.contains("0000 to 9999"), "{e}");
        }
        for start in [
            "9999-12-31T23:59:59.999999999Z",
            "0000-01-01T00:00:00Z",
            "9999-12-31T23:00:00-00:59",
        ] {
            let ev = parse_dr_event(doc(start).as_bytes()).unwrap();
            assert_eq!(parse_dr_event(ev.to_json().to_string().as_bytes()).unwrap(), ev);
        }
    }
}
