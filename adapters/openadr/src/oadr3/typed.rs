//! Builds each model type straight from the [`Reader`], member by member, in the order the
//! members are written. The rules are the decoder's since its first version:
//!
//! - a known member that is `null` counts as absent; a required one that is absent or `null` is
//!   [`DecodeError::Missing`];
//! - a member of the wrong type, a bad timestamp, a negative or malformed duration is
//!   [`DecodeError::Invalid`], naming its path;
//! - members the model does not know are kept in the object's `extra` where it has one, and
//!   otherwise read and dropped (so that they are still checked);
//! - a key that appears twice in one object is [`DecodeError::Duplicate`]: for the known
//!   members a bit per member says whether it was seen, for the others the `extra` map does.

use serde_json::{Map, Value};

use super::decode::DecodeError;
use super::kind::{object_kind, skim};
use super::model::{
    Event, EventPayloadDescriptor, Interval, IntervalPeriod, Notification, NotifiedObject, Operation, PayloadValue,
    Program, Report, ReportDescriptor, ReportPayloadDescriptor, ReportResource, Target, ValuesMap,
};
use super::reader::Reader;
use super::time::{IsoDuration, parse_timestamp};

/// Which known members of one object have been read, one bit each.
#[derive(Default)]
struct Seen(u32);

impl Seen {
    /// Notes member number `bit`; refuses it if it was already read.
    #[inline]
    fn first(&mut self, r: &Reader<'_>, bit: u32) -> Result<(), DecodeError> {
        let mask = 1u32 << bit;
        if self.0 & mask != 0 {
            return Err(r.duplicate());
        }
        self.0 |= mask;
        Ok(())
    }
}

/// A timestamp member ([`parse_timestamp`]'s rules); `null` is `None`.
fn timestamp(r: &mut Reader<'_>) -> Result<Option<chrono::DateTime<chrono::Utc>>, DecodeError> {
    match r.opt_str()? {
        None => Ok(None),
        Some(s) => parse_timestamp(&s)
            .map(Some)
            .map_err(|e| r.invalid(format!("{e}: {s:?}"))),
    }
}

/// A duration member ([`IsoDuration::parse`]); `null` is `None`.
fn duration(r: &mut Reader<'_>) -> Result<Option<IsoDuration>, DecodeError> {
    match r.opt_str()? {
        None => Ok(None),
        Some(s) => IsoDuration::parse(&s)
            .map(Some)
            .map_err(|e| r.invalid(format!("{e}: {s:?}"))),
    }
}

/// An object member read with `read`; `null` is `None`.
fn opt<'a, T>(
    r: &mut Reader<'a>,
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    if r.at_null() {
        r.ignore()?;
        return Ok(None);
    }
    read(r).map(Some)
}

fn interval_period(r: &mut Reader<'_>) -> Result<IntervalPeriod, DecodeError> {
    let mut p = IntervalPeriod::default();
    let mut seen = Seen::default();
    let mut others = Map::new();
    r.members(|r, key| {
        match key {
            "start" => {
                seen.first(r, 0)?;
                p.start = timestamp(r)?;
            }
            "duration" => {
                seen.first(r, 1)?;
                p.duration = duration(r)?;
            }
            "randomizeStart" => {
                seen.first(r, 2)?;
                p.randomize_start = duration(r)?;
            }
            _ => r.member_into(&mut others, key)?,
        }
        Ok(())
    })?;
    Ok(p)
}

fn payload_value(r: &mut Reader<'_>) -> Result<PayloadValue, DecodeError> {
    Ok(match r.value()? {
        Value::Number(n) => PayloadValue::Number(n),
        Value::String(s) => PayloadValue::Text(s),
        Value::Bool(b) => PayloadValue::Bool(b),
        Value::Object(m) => match (m.get("x").and_then(Value::as_f64), m.get("y").and_then(Value::as_f64)) {
            (Some(x), Some(y)) if m.len() == 2 => PayloadValue::Point { x, y },
            _ => PayloadValue::Other(Value::Object(m)),
        },
        Value::Null => return Err(r.invalid("null is not a payload value")),
        other @ Value::Array(_) => PayloadValue::Other(other),
    })
}

fn values_map(r: &mut Reader<'_>) -> Result<ValuesMap, DecodeError> {
    let mut kind = None;
    let mut values = None;
    let mut seen = Seen::default();
    let mut others = Map::new();
    r.members(|r, key| {
        match key {
            "type" => {
                seen.first(r, 0)?;
                kind = r.opt_string()?;
            }
            "values" => {
                seen.first(r, 1)?;
                values = r.list(payload_value)?;
            }
            _ => r.member_into(&mut others, key)?,
        }
        Ok(())
    })?;
    Ok(ValuesMap {
        kind: kind.ok_or_else(|| r.missing("type"))?,
        values: values.unwrap_or_default(),
    })
}

fn target(r: &mut Reader<'_>) -> Result<Target, DecodeError> {
    match r.peek() {
        Some(b'"') => Ok(Target::Name(r.opt_string()?.unwrap_or_default())),
        Some(b'{') => {
            let mut kind = None;
            let mut values = None;
            let mut seen = Seen::default();
            let mut others = Map::new();
            r.members(|r, key| {
                match key {
                    "type" => {
                        seen.first(r, 0)?;
                        kind = r.opt_string()?;
                    }
                    "values" => {
                        seen.first(r, 1)?;
                        values = r.serde_values()?;
                    }
                    _ => r.member_into(&mut others, key)?,
                }
                Ok(())
            })?;
            Ok(Target::Map {
                kind: kind.ok_or_else(|| r.missing("type"))?,
                values: values.unwrap_or_default(),
            })
        }
        _ => Err(r.wrong(|kind| format!("a target is a string (3.1) or a valuesMap (3.0), not a {kind}"))),
    }
}

fn interval(r: &mut Reader<'_>) -> Result<Interval, DecodeError> {
    let mut id = None;
    let mut interval_period = None;
    let mut payloads = None;
    let mut seen = Seen::default();
    let mut others = Map::new();
    r.members(|r, key| {
        match key {
            "id" => {
                seen.first(r, 0)?;
                id = r.opt_integer()?;
            }
            "intervalPeriod" => {
                seen.first(r, 1)?;
                interval_period = opt(r, self::interval_period)?;
            }
            "payloads" => {
                seen.first(r, 2)?;
                payloads = r.list(values_map)?;
            }
            _ => r.member_into(&mut others, key)?,
        }
        Ok(())
    })?;
    Ok(Interval {
        id: id.ok_or_else(|| r.missing("id"))?,
        interval_period,
        payloads: payloads.unwrap_or_default(),
    })
}

fn event_payload_descriptor(r: &mut Reader<'_>) -> Result<EventPayloadDescriptor, DecodeError> {
    let mut d = EventPayloadDescriptor::default();
    let mut payload_type = None;
    let mut seen = Seen::default();
    r.members(|r, key| {
        match key {
            "objectType" => {
                seen.first(r, 0)?;
                d.object_type = r.opt_string()?;
            }
            "payloadType" => {
                seen.first(r, 1)?;
                payload_type = r.serde_string()?;
            }
            "units" => {
                seen.first(r, 2)?;
                d.units = r.opt_string()?;
            }
            "currency" => {
                seen.first(r, 3)?;
                d.currency = r.opt_string()?;
            }
            _ => r.member_into(&mut d.extra, key)?,
        }
        Ok(())
    })?;
    d.payload_type = payload_type.ok_or_else(|| r.missing("payloadType"))?;
    Ok(d)
}

fn report_descriptor(r: &mut Reader<'_>) -> Result<ReportDescriptor, DecodeError> {
    let mut d = ReportDescriptor::default();
    let mut payload_type = None;
    let mut seen = Seen::default();
    r.members(|r, key| {
        match key {
            "payloadType" => {
                seen.first(r, 0)?;
                payload_type = r.serde_string()?;
            }
            "readingType" => {
                seen.first(r, 1)?;
                d.reading_type = r.opt_string()?;
            }
            "units" => {
                seen.first(r, 2)?;
                d.units = r.opt_string()?;
            }
            "aggregate" => {
                seen.first(r, 3)?;
                d.aggregate = r.serde_bool()?;
            }
            "startInterval" => {
                seen.first(r, 4)?;
                d.start_interval = r.opt_integer()?;
            }
            "numIntervals" => {
                seen.first(r, 5)?;
                d.num_intervals = r.opt_integer()?;
            }
            "historical" => {
                seen.first(r, 6)?;
                d.historical = r.serde_bool()?;
            }
            "frequency" => {
                seen.first(r, 7)?;
                d.frequency = r.opt_integer()?;
            }
            "repeat" => {
                seen.first(r, 8)?;
                d.repeat = r.opt_integer()?;
            }
            _ => r.member_into(&mut d.extra, key)?,
        }
        Ok(())
    })?;
    d.payload_type = payload_type.ok_or_else(|| r.missing("payloadType"))?;
    Ok(d)
}

/// One event, from the object at the reader.
pub(crate) fn event(r: &mut Reader<'_>) -> Result<Event, DecodeError> {
    let mut e = Event::default();
    let mut seen = Seen::default();
    r.members(|r, key| {
        match key {
            "id" => {
                seen.first(r, 0)?;
                e.id = r.opt_string()?;
            }
            "createdDateTime" => {
                seen.first(r, 1)?;
                e.created_date_time = timestamp(r)?;
            }
            "modificationDateTime" => {
                seen.first(r, 2)?;
                e.modification_date_time = timestamp(r)?;
            }
            "objectType" => {
                seen.first(r, 3)?;
                e.object_type = r.opt_string()?;
            }
            "programID" => {
                seen.first(r, 4)?;
                e.program_id = r.opt_string()?.unwrap_or_default();
            }
            "eventName" => {
                seen.first(r, 5)?;
                e.event_name = r.opt_string()?;
            }
            "priority" => {
                seen.first(r, 6)?;
                e.priority = match r.opt_integer()? {
                    None => None,
                    Some(p) => Some(
                        u32::try_from(p)
                            .map_err(|_| r.invalid(format!("priority must be a non-negative integer, found {p}")))?,
                    ),
                };
            }
            "targets" => {
                seen.first(r, 7)?;
                e.targets = r.list(target)?;
            }
            "reportDescriptors" => {
                seen.first(r, 8)?;
                e.report_descriptors = r.list(report_descriptor)?;
            }
            "payloadDescriptors" => {
                seen.first(r, 9)?;
                e.payload_descriptors = r.list(event_payload_descriptor)?;
            }
            "intervalPeriod" => {
                seen.first(r, 10)?;
                e.interval_period = opt(r, interval_period)?;
            }
            "intervals" => {
                seen.first(r, 11)?;
                e.intervals = r.list(interval)?.unwrap_or_default();
            }
            "duration" => {
                seen.first(r, 12)?;
                e.duration = duration(r)?;
            }
            _ => r.member_into(&mut e.extra, key)?,
        }
        Ok(())
    })?;
    Ok(e)
}

/// One program, from the object at the reader.
pub(crate) fn program(r: &mut Reader<'_>) -> Result<Program, DecodeError> {
    let mut p = Program::default();
    let mut seen = Seen::default();
    r.members(|r, key| {
        match key {
            "id" => {
                seen.first(r, 0)?;
                p.id = r.opt_string()?;
            }
            "createdDateTime" => {
                seen.first(r, 1)?;
                p.created_date_time = timestamp(r)?;
            }
            "modificationDateTime" => {
                seen.first(r, 2)?;
                p.modification_date_time = timestamp(r)?;
            }
            "objectType" => {
                seen.first(r, 3)?;
                p.object_type = r.opt_string()?;
            }
            "programName" => {
                seen.first(r, 4)?;
                p.program_name = r.opt_string()?.unwrap_or_default();
            }
            "programLongName" => {
                seen.first(r, 5)?;
                p.program_long_name = r.opt_string()?;
            }
            "intervalPeriod" => {
                seen.first(r, 6)?;
                p.interval_period = opt(r, interval_period)?;
            }
            "payloadDescriptors" => {
                seen.first(r, 7)?;
                p.payload_descriptors = r.serde_values()?;
            }
            "targets" => {
                seen.first(r, 8)?;
                p.targets = r.list(target)?;
            }
            _ => r.member_into(&mut p.extra, key)?,
        }
        Ok(())
    })?;
    Ok(p)
}

fn report_payload_descriptor(r: &mut Reader<'_>) -> Result<ReportPayloadDescriptor, DecodeError> {
    let mut d = ReportPayloadDescriptor::default();
    let mut payload_type = None;
    let mut seen = Seen::default();
    r.members(|r, key| {
        match key {
            "objectType" => {
                seen.first(r, 0)?;
                d.object_type = r.opt_string()?;
            }
            "payloadType" => {
                seen.first(r, 1)?;
                payload_type = r.serde_string()?;
            }
            "readingType" => {
                seen.first(r, 2)?;
                d.reading_type = r.opt_string()?;
            }
            "units" => {
                seen.first(r, 3)?;
                d.units = r.opt_string()?;
            }
            _ => r.member_into(&mut d.extra, key)?,
        }
        Ok(())
    })?;
    d.payload_type = payload_type.ok_or_else(|| r.missing("payloadType"))?;
    Ok(d)
}

fn report_resource(r: &mut Reader<'_>) -> Result<ReportResource, DecodeError> {
    let mut res = ReportResource::default();
    let mut seen = Seen::default();
    let mut others = Map::new();
    r.members(|r, key| {
        match key {
            "resourceName" => {
                seen.first(r, 0)?;
                res.resource_name = r.opt_string()?.unwrap_or_default();
            }
            "intervalPeriod" => {
                seen.first(r, 1)?;
                res.interval_period = opt(r, interval_period)?;
            }
            "intervals" => {
                seen.first(r, 2)?;
                res.intervals = r.list(interval)?.unwrap_or_default();
            }
            _ => r.member_into(&mut others, key)?,
        }
        Ok(())
    })?;
    Ok(res)
}

/// One report, from the object at the reader.
pub(crate) fn report(r: &mut Reader<'_>) -> Result<Report, DecodeError> {
    let mut rep = Report::default();
    let mut seen = Seen::default();
    r.members(|r, key| {
        match key {
            "id" => {
                seen.first(r, 0)?;
                rep.id = r.opt_string()?;
            }
            "createdDateTime" => {
                seen.first(r, 1)?;
                rep.created_date_time = timestamp(r)?;
            }
            "modificationDateTime" => {
                seen.first(r, 2)?;
                rep.modification_date_time = timestamp(r)?;
            }
            "objectType" => {
                seen.first(r, 3)?;
                rep.object_type = r.opt_string()?;
            }
            "programID" => {
                seen.first(r, 4)?;
                rep.program_id = r.opt_string()?;
            }
            "eventID" => {
                seen.first(r, 5)?;
                rep.event_id = r.opt_string()?.unwrap_or_default();
            }
            "clientName" => {
                seen.first(r, 6)?;
                rep.client_name = r.opt_string()?.unwrap_or_default();
            }
            "reportName" => {
                seen.first(r, 7)?;
                rep.report_name = r.opt_string()?;
            }
            "payloadDescriptors" => {
                seen.first(r, 8)?;
                rep.payload_descriptors = r.list(report_payload_descriptor)?;
            }
            "resources" => {
                seen.first(r, 9)?;
                rep.resources = r.list(report_resource)?.unwrap_or_default();
            }
            _ => r.member_into(&mut rep.extra, key)?,
        }
        Ok(())
    })?;
    Ok(rep)
}

/// A notification, from the object at the reader. Its `object` is read last, once the
/// notification's `objectType` (which may come after it) says what it is.
pub(crate) fn notification(r: &mut Reader<'_>, text: &str) -> Result<Notification, DecodeError> {
    let mut object_type = None;
    let mut operation = None;
    let mut object_at = None;
    let mut targets = None;
    let mut seen = Seen::default();
    let mut others = Map::new();
    r.members(|r, key| {
        match key {
            "objectType" => {
                seen.first(r, 0)?;
                object_type = r.opt_string()?;
            }
            "operation" => {
                seen.first(r, 1)?;
                operation = r.serde_string()?;
            }
            "object" => {
                seen.first(r, 2)?;
                if !r.at_null() {
                    object_at = Some(r.position());
                }
                r.skip()?;
            }
            "targets" => {
                seen.first(r, 3)?;
                targets = r.list(target)?;
            }
            _ => r.member_into(&mut others, key)?,
        }
        Ok(())
    })?;
    let op_text = operation.ok_or_else(|| r.missing("operation"))?;
    let operation = Operation::parse(&op_text).ok_or_else(|| DecodeError::Invalid {
        path: r.here_key("operation"),
        message: format!("unknown operation {op_text:?} (expected CREATE/READ/UPDATE/DELETE or 3.0's POST/GET/PUT)"),
    })?;
    let object_at = object_at.ok_or_else(|| r.missing("object"))?;
    let end = r.position();
    r.seek(object_at);
    let object_type = match object_type {
        Some(t) => t,
        None if r.peek() == Some(b'{') => {
            let hints = r.at_key("object", skim)?;
            r.seek(object_at);
            object_kind(&hints, text).unwrap_or("UNKNOWN").to_string()
        }
        None => "UNKNOWN".to_string(),
    };
    let object = r.at_key("object", |r| {
        Ok(match object_type.as_str() {
            "EVENT" => NotifiedObject::Event(Box::new(event(r)?)),
            "PROGRAM" => NotifiedObject::Program(Box::new(program(r)?)),
            "REPORT" => NotifiedObject::Report(Box::new(report(r)?)),
            _ => NotifiedObject::Other(r.value()?),
        })
    })?;
    r.seek(end);
    Ok(Notification {
        object_type,
        operation,
        object,
        targets,
    })
}
