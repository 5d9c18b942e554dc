//! Decoding untrusted OpenADR 3 JSON with limits and field paths in every error.
//!
//! Three passes: a size check, a byte scan (nesting depth, list lengths, finite numbers),
//! then serde_json into a `Value`, which is converted field by field so that an error names the
//! field (`[0].intervals[1].intervalPeriod.duration: negative duration`). Unknown fields are
//! kept in each object's `extra`.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::model::{
    Event, EventPayloadDescriptor, Interval, IntervalPeriod, Notification, NotifiedObject, Operation, PayloadValue,
    Program, Report, ReportDescriptor, ReportPayloadDescriptor, ReportResource, Target, ValuesMap,
};
use super::scan::scan;
use super::time::{IsoDuration, parse_timestamp};

/// Bounds on what [`decode_any_with_limits`] accepts, so a hostile or broken VTN cannot make the
/// VEN allocate or recurse without bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest document in bytes (default 4 MiB, as for 2.0b).
    pub max_bytes: usize,
    /// Deepest nesting of arrays and objects (default 32; a real event needs 7).
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
    let value = parse_checked(bytes, limits)?;
    match &value {
        Value::Array(items) => decode_list(items),
        Value::Object(map) => decode_object(map, ""),
        other => Err(DecodeError::UnknownDocument(format!("a top-level {}", kind_of(other)))),
    }
}

/// Decodes a `GET /events` answer: a JSON array of events (a single event object is accepted
/// too, as a list of one).
pub fn decode_events(bytes: &[u8], limits: &Limits) -> Result<Vec<Event>, DecodeError> {
    let value = parse_checked(bytes, limits)?;
    match &value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| event_from(v, &format!("[{i}]")))
            .collect(),
        Value::Object(_) => Ok(vec![event_from(&value, "")?]),
        other => Err(DecodeError::UnknownDocument(format!("a top-level {}", kind_of(other)))),
    }
}

/// Size check, limit scan, then serde_json.
pub(crate) fn parse_checked(bytes: &[u8], limits: &Limits) -> Result<Value, DecodeError> {
    if bytes.len() > limits.max_bytes {
        return Err(DecodeError::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    scan(bytes, limits)?;
    serde_json::from_slice(bytes).map_err(|e| DecodeError::Syntax {
        path: "$".into(),
        offset: 0,
        message: e.to_string(),
    })
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// What kind of object a map is: `objectType` when present, else a guess from its fields.
fn object_kind(map: &Map<String, Value>) -> Option<&'static str> {
    if let Some(Value::String(t)) = map.get("objectType") {
        return match t.as_str() {
            "EVENT" => Some("EVENT"),
            "PROGRAM" => Some("PROGRAM"),
            "REPORT" => Some("REPORT"),
            _ => None,
        };
    }
    if map.contains_key("operation") && map.contains_key("object") {
        Some("NOTIFICATION")
    } else if map.contains_key("programName") {
        Some("PROGRAM")
    } else if map.contains_key("eventID") || map.contains_key("clientName") {
        Some("REPORT")
    } else if map.contains_key("programID") || map.contains_key("intervals") {
        Some("EVENT")
    } else {
        None
    }
}

fn decode_object(map: &Map<String, Value>, path: &str) -> Result<Document, DecodeError> {
    // A notification has `objectType` too (the object's type), so look for its shape first.
    if map.contains_key("operation") && map.contains_key("object") {
        return notification_from(map, path).map(|n| Document::Notification(Box::new(n)));
    }
    let v = Value::Object(map.clone());
    match object_kind(map) {
        Some("EVENT") => Ok(Document::Event(Box::new(event_from(&v, path)?))),
        Some("PROGRAM") => Ok(Document::Program(Box::new(program_from(&v, path)?))),
        Some("REPORT") => Ok(Document::Report(Box::new(report_from(&v, path)?))),
        _ => Err(DecodeError::UnknownDocument(match map.get("objectType") {
            Some(t) => format!("objectType {t}"),
            None => "an object without objectType".into(),
        })),
    }
}

fn decode_list(items: &[Value]) -> Result<Document, DecodeError> {
    let Some(first) = items.first() else {
        return Ok(Document::Events(Vec::new()));
    };
    let kind = match first {
        Value::Object(m) => object_kind(m),
        _ => None,
    };
    let kind = kind.ok_or_else(|| DecodeError::UnknownDocument(format!("[0] is a {}", kind_of(first))))?;
    for (i, item) in items.iter().enumerate().skip(1) {
        let k = match item {
            Value::Object(m) => object_kind(m),
            _ => None,
        };
        if k.is_some_and(|k| k != kind) {
            return Err(DecodeError::Invalid {
                path: format!("[{i}]"),
                message: format!("a list of {kind} objects holds another kind"),
            });
        }
    }
    let paths = (0..items.len()).map(|i| format!("[{i}]"));
    match kind {
        "EVENT" => items
            .iter()
            .zip(paths)
            .map(|(v, p)| event_from(v, &p))
            .collect::<Result<_, _>>()
            .map(Document::Events),
        "PROGRAM" => items
            .iter()
            .zip(paths)
            .map(|(v, p)| program_from(v, &p))
            .collect::<Result<_, _>>()
            .map(Document::Programs),
        "REPORT" => items
            .iter()
            .zip(paths)
            .map(|(v, p)| report_from(v, &p))
            .collect::<Result<_, _>>()
            .map(Document::Reports),
        other => Err(DecodeError::UnknownDocument(format!("a list of {other} objects"))),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

/// A JSON object being converted, with its path.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn new(v: &'a Value, path: &str) -> Result<Obj<'a>, DecodeError> {
        match v {
            Value::Object(map) => Ok(Obj {
                map,
                path: path.to_string(),
            }),
            other => Err(DecodeError::Invalid {
                path: if path.is_empty() { "$".into() } else { path.into() },
                message: format!("expected an object, found a {}", kind_of(other)),
            }),
        }
    }

    fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// The field, `null` counting as absent.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// A leaf field through serde (strings, numbers, booleans, plain maps).
    fn leaf<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| DecodeError::Invalid {
                    path: self.at(key),
                    message: e.to_string(),
                }),
        }
    }

    fn required<T: DeserializeOwned>(&self, key: &str) -> Result<T, DecodeError> {
        self.leaf(key)?
            .ok_or_else(|| DecodeError::Missing { path: self.at(key) })
    }

    fn string(&self, key: &str) -> Result<Option<String>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(DecodeError::Invalid {
                path: self.at(key),
                message: format!("expected a string, found a {}", kind_of(other)),
            }),
        }
    }

    fn timestamp(&self, key: &str) -> Result<Option<DateTime<Utc>>, DecodeError> {
        match self.string(key)? {
            None => Ok(None),
            Some(s) => parse_timestamp(&s).map(Some).map_err(|e| DecodeError::Invalid {
                path: self.at(key),
                message: format!("{e}: {s:?}"),
            }),
        }
    }

    fn duration(&self, key: &str) -> Result<Option<IsoDuration>, DecodeError> {
        match self.string(key)? {
            None => Ok(None),
            Some(s) => IsoDuration::parse(&s).map(Some).map_err(|e| DecodeError::Invalid {
                path: self.at(key),
                message: format!("{e}: {s:?}"),
            }),
        }
    }

    /// An integer field; floats with no fraction (`3.0`) are accepted.
    fn integer(&self, key: &str) -> Result<Option<i64>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Number(n)) => {
                if let Some(i) = n.as_i64() {
                    return Ok(Some(i));
                }
                match n.as_f64() {
                    Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Some(f as i64)),
                    _ => Err(DecodeError::Invalid {
                        path: self.at(key),
                        message: format!("expected an integer, found {n}"),
                    }),
                }
            }
            Some(other) => Err(DecodeError::Invalid {
                path: self.at(key),
                message: format!("expected an integer, found a {}", kind_of(other)),
            }),
        }
    }

    /// A list field converted element by element.
    fn list<T>(
        &self,
        key: &str,
        f: impl Fn(&Value, &str) -> Result<T, DecodeError>,
    ) -> Result<Option<Vec<T>>, DecodeError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => {
                let base = self.at(key);
                items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| f(v, &format!("{base}[{i}]")))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some)
            }
            Some(other) => Err(DecodeError::Invalid {
                path: self.at(key),
                message: format!("expected an array, found a {}", kind_of(other)),
            }),
        }
    }

    /// The members not in `known`.
    fn extra(&self, known: &[&str]) -> Map<String, Value> {
        self.map
            .iter()
            .filter(|(k, _)| !known.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

fn interval_period_from(v: &Value, path: &str) -> Result<IntervalPeriod, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(IntervalPeriod {
        start: o.timestamp("start")?,
        duration: o.duration("duration")?,
        randomize_start: o.duration("randomizeStart")?,
    })
}

fn payload_value_from(v: &Value, path: &str) -> Result<PayloadValue, DecodeError> {
    Ok(match v {
        Value::Number(n) => PayloadValue::Number(n.clone()),
        Value::String(s) => PayloadValue::Text(s.clone()),
        Value::Bool(b) => PayloadValue::Bool(*b),
        Value::Object(m) => match (m.get("x").and_then(Value::as_f64), m.get("y").and_then(Value::as_f64)) {
            (Some(x), Some(y)) if m.len() == 2 => PayloadValue::Point { x, y },
            _ => PayloadValue::Other(v.clone()),
        },
        Value::Null => {
            return Err(DecodeError::Invalid {
                path: path.into(),
                message: "null is not a payload value".into(),
            });
        }
        Value::Array(_) => PayloadValue::Other(v.clone()),
    })
}

fn values_map_from(v: &Value, path: &str) -> Result<ValuesMap, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(ValuesMap {
        kind: o
            .string("type")?
            .ok_or_else(|| DecodeError::Missing { path: o.at("type") })?,
        values: o.list("values", payload_value_from)?.unwrap_or_default(),
    })
}

fn target_from(v: &Value, path: &str) -> Result<Target, DecodeError> {
    match v {
        Value::String(s) => Ok(Target::Name(s.clone())),
        Value::Object(_) => {
            let o = Obj::new(v, path)?;
            Ok(Target::Map {
                kind: o
                    .string("type")?
                    .ok_or_else(|| DecodeError::Missing { path: o.at("type") })?,
                values: o.leaf::<Vec<Value>>("values")?.unwrap_or_default(),
            })
        }
        other => Err(DecodeError::Invalid {
            path: path.into(),
            message: format!(
                "a target is a string (3.1) or a valuesMap (3.0), not a {}",
                kind_of(other)
            ),
        }),
    }
}

fn interval_from(v: &Value, path: &str) -> Result<Interval, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(Interval {
        id: o
            .integer("id")?
            .ok_or_else(|| DecodeError::Missing { path: o.at("id") })?,
        interval_period: o
            .get("intervalPeriod")
            .map(|p| interval_period_from(p, &o.at("intervalPeriod")))
            .transpose()?,
        payloads: o.list("payloads", values_map_from)?.unwrap_or_default(),
    })
}

fn event_payload_descriptor_from(v: &Value, path: &str) -> Result<EventPayloadDescriptor, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(EventPayloadDescriptor {
        object_type: o.string("objectType")?,
        payload_type: o.required("payloadType")?,
        units: o.string("units")?,
        currency: o.string("currency")?,
        extra: o.extra(&["objectType", "payloadType", "units", "currency"]),
    })
}

fn report_descriptor_from(v: &Value, path: &str) -> Result<ReportDescriptor, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(ReportDescriptor {
        payload_type: o.required("payloadType")?,
        reading_type: o.string("readingType")?,
        units: o.string("units")?,
        aggregate: o.leaf("aggregate")?,
        start_interval: o.integer("startInterval")?,
        num_intervals: o.integer("numIntervals")?,
        historical: o.leaf("historical")?,
        frequency: o.integer("frequency")?,
        repeat: o.integer("repeat")?,
        extra: o.extra(&[
            "payloadType",
            "readingType",
            "units",
            "aggregate",
            "startInterval",
            "numIntervals",
            "historical",
            "frequency",
            "repeat",
        ]),
    })
}

/// Converts one event object, naming `path` (e.g. `[3]`) in errors.
pub(crate) fn event_from(v: &Value, path: &str) -> Result<Event, DecodeError> {
    let o = Obj::new(v, path)?;
    let priority = match o.integer("priority")? {
        None => None,
        Some(p) => Some(u32::try_from(p).map_err(|_| DecodeError::Invalid {
            path: o.at("priority"),
            message: format!("priority must be a non-negative integer, found {p}"),
        })?),
    };
    Ok(Event {
        id: o.string("id")?,
        created_date_time: o.timestamp("createdDateTime")?,
        modification_date_time: o.timestamp("modificationDateTime")?,
        object_type: o.string("objectType")?,
        program_id: o.string("programID")?.unwrap_or_default(),
        event_name: o.string("eventName")?,
        priority,
        targets: o.list("targets", target_from)?,
        report_descriptors: o.list("reportDescriptors", report_descriptor_from)?,
        payload_descriptors: o.list("payloadDescriptors", event_payload_descriptor_from)?,
        interval_period: o
            .get("intervalPeriod")
            .map(|p| interval_period_from(p, &o.at("intervalPeriod")))
            .transpose()?,
        intervals: o.list("intervals", interval_from)?.unwrap_or_default(),
        duration: o.duration("duration")?,
        extra: o.extra(&[
            "id",
            "createdDateTime",
            "modificationDateTime",
            "objectType",
            "programID",
            "eventName",
            "priority",
            "targets",
            "reportDescriptors",
            "payloadDescriptors",
            "intervalPeriod",
            "intervals",
            "duration",
        ]),
    })
}

fn program_from(v: &Value, path: &str) -> Result<Program, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(Program {
        id: o.string("id")?,
        created_date_time: o.timestamp("createdDateTime")?,
        modification_date_time: o.timestamp("modificationDateTime")?,
        object_type: o.string("objectType")?,
        program_name: o.string("programName")?.unwrap_or_default(),
        program_long_name: o.string("programLongName")?,
        interval_period: o
            .get("intervalPeriod")
            .map(|p| interval_period_from(p, &o.at("intervalPeriod")))
            .transpose()?,
        payload_descriptors: o.leaf("payloadDescriptors")?,
        targets: o.list("targets", target_from)?,
        extra: o.extra(&[
            "id",
            "createdDateTime",
            "modificationDateTime",
            "objectType",
            "programName",
            "programLongName",
            "intervalPeriod",
            "payloadDescriptors",
            "targets",
        ]),
    })
}

fn report_payload_descriptor_from(v: &Value, path: &str) -> Result<ReportPayloadDescriptor, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(ReportPayloadDescriptor {
        object_type: o.string("objectType")?,
        payload_type: o.required("payloadType")?,
        reading_type: o.string("readingType")?,
        units: o.string("units")?,
        extra: o.extra(&["objectType", "payloadType", "readingType", "units"]),
    })
}

fn report_resource_from(v: &Value, path: &str) -> Result<ReportResource, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(ReportResource {
        resource_name: o.string("resourceName")?.unwrap_or_default(),
        interval_period: o
            .get("intervalPeriod")
            .map(|p| interval_period_from(p, &o.at("intervalPeriod")))
            .transpose()?,
        intervals: o.list("intervals", interval_from)?.unwrap_or_default(),
    })
}

fn report_from(v: &Value, path: &str) -> Result<Report, DecodeError> {
    let o = Obj::new(v, path)?;
    Ok(Report {
        id: o.string("id")?,
        created_date_time: o.timestamp("createdDateTime")?,
        modification_date_time: o.timestamp("modificationDateTime")?,
        object_type: o.string("objectType")?,
        program_id: o.string("programID")?,
        event_id: o.string("eventID")?.unwrap_or_default(),
        client_name: o.string("clientName")?.unwrap_or_default(),
        report_name: o.string("reportName")?,
        payload_descriptors: o.list("payloadDescriptors", report_payload_descriptor_from)?,
        resources: o.list("resources", report_resource_from)?.unwrap_or_default(),
        extra: o.extra(&[
            "id",
            "createdDateTime",
            "modificationDateTime",
            "objectType",
            "programID",
            "eventID",
            "clientName",
            "reportName",
            "payloadDescriptors",
            "resources",
        ]),
    })
}

fn notification_from(map: &Map<String, Value>, path: &str) -> Result<Notification, DecodeError> {
    let v = Value::Object(map.clone());
    let o = Obj::new(&v, path)?;
    let op_text: String = o.required("operation")?;
    let operation = Operation::parse(&op_text).ok_or_else(|| DecodeError::Invalid {
        path: o.at("operation"),
        message: format!("unknown operation {op_text:?} (expected CREATE/READ/UPDATE/DELETE or 3.0's POST/GET/PUT)"),
    })?;
    let object_value = o
        .get("object")
        .ok_or_else(|| DecodeError::Missing { path: o.at("object") })?;
    let object_path = o.at("object");
    let object_type = match o.string("objectType")? {
        Some(t) => t,
        None => match object_value {
            Value::Object(m) => object_kind(m).unwrap_or("UNKNOWN").to_string(),
            _ => "UNKNOWN".to_string(),
        },
    };
    let object = match object_type.as_str() {
        "EVENT" => NotifiedObject::Event(Box::new(event_from(object_value, &object_path)?)),
        "PROGRAM" => NotifiedObject::Program(Box::new(program_from(object_value, &object_path)?)),
        "REPORT" => NotifiedObject::Report(Box::new(report_from(object_value, &object_path)?)),
        _ => NotifiedObject::Other(object_value.clone()),
    };
    Ok(Notification {
        object_type,
        operation,
        object,
        targets: o.list("targets", target_from)?,
    })
}
