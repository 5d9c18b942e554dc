//! A stable JSON view of a decoded [`Document`], in the same shape as
//! [`crate::oadr2b::normalized_json`] so one consumer reads both versions.
//!
//! 2.0b concepts with no 3.x equivalent are `null` (`modification`, `status`,
//! `response_required`, `scale`) or `false` (`test`); `market_context` is the `programID`. A
//! signal is one payload type: its intervals are the event intervals that carry that type.
//! Timing is rendered without a clock: an interval whose start depends on "now" (the
//! `0001-01-01` sentinel, or following such an interval) has `"start": null`, and the event says
//! `"starts_now": true`.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::decode::Document;
use super::model::{Event, NotifiedObject, Program, Report, Target};
use super::time::{format_timestamp, is_now_sentinel};
use super::timing::{resolve, zero_window};

fn ts(t: Option<DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, |t| Value::String(format_timestamp(&t)))
}

/// 3.0 valuesMap targets map onto the 2.0b kinds (`VEN_NAME` → ven_id, `GROUP` → group_id,
/// `RESOURCE_NAME` → resource_id); 3.1 strings, and 3.0 types with no 2.0b kind (as
/// `TYPE:value`), go to `raw_targets`.
fn targets(list: Option<&[Target]>) -> (Value, Vec<String>) {
    let (mut ven, mut group, mut resource, party): (Vec<String>, Vec<String>, Vec<String>, Vec<String>) =
        Default::default();
    let mut raw = Vec::new();
    for t in list.unwrap_or_default() {
        match t {
            Target::Name(s) => raw.push(s.clone()),
            Target::Map { kind, values } => {
                let texts = values.iter().map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                });
                match kind.as_str() {
                    "VEN_NAME" => ven.extend(texts),
                    "GROUP" => group.extend(texts),
                    "RESOURCE_NAME" => resource.extend(texts),
                    _ => raw.extend(texts.map(|v| format!("{kind}:{v}"))),
                }
            }
        }
    }
    (
        json!({"ven_id": ven, "group_id": group, "resource_id": resource, "party_id": party}),
        raw,
    )
}

fn event(e: &Event) -> Value {
    let mut warnings = Vec::new();
    let slots = match resolve(e, None, &mut warnings) {
        Ok(s) => s,
        Err(err) => {
            warnings.push(err.to_string());
            Vec::new()
        }
    };
    // One signal per payload type, in order of first appearance.
    let mut types: Vec<&str> = Vec::new();
    for iv in &e.intervals {
        for p in &iv.payloads {
            if !types.contains(&p.kind.as_str()) {
                types.push(&p.kind);
            }
        }
    }
    let signals: Vec<Value> = types
        .iter()
        .map(|&kind| {
            let intervals: Vec<Value> = slots
                .iter()
                .filter_map(|slot| {
                    let iv = &e.intervals[slot.index];
                    let p = iv.payloads.iter().find(|p| p.kind == kind)?;
                    Some(json!({
                        "id": slot.id,
                        "start": ts(slot.start),
                        "duration_s": slot.duration_s(),
                        "duration": slot.duration.map(|d| d.to_string()),
                        "values": p.values.iter().map(|v| v.to_json()).collect::<Vec<_>>(),
                    }))
                })
                .collect();
            let d = e.payload_descriptor(kind);
            json!({
                "name": kind,
                "type": kind,
                "units": d.and_then(|d| d.units.clone()),
                "currency": d.and_then(|d| d.currency.clone()),
                "scale": null,
                "intervals": intervals,
            })
        })
        .collect();
    let start = slots.first().and_then(|s| s.start);
    let starts_now = e.intervals.first().is_some_and(|_| {
        let ev_start = e.interval_period.as_ref().and_then(|p| p.start);
        let own = e.intervals[0].interval_period.as_ref().and_then(|p| p.start);
        match (own, ev_start) {
            (Some(o), _) if !is_now_sentinel(&o) => false,
            (_, Some(s)) => is_now_sentinel(&s),
            (Some(o), None) => is_now_sentinel(&o),
            (None, None) => false,
        }
    });
    let duration_s = match e.duration {
        Some(d) if d.is_forever() => Value::Null,
        Some(d) => match (d.as_fixed(), start) {
            (Some(f), _) => json!(super::timing::round_secs(f)),
            (None, Some(s)) => json!(d.span_from(s).map(super::timing::round_secs)),
            (None, None) => Value::Null,
        },
        None => {
            // The intervals' extent, when every end is known.
            let end = slots.iter().try_fold(start, |acc, s| match (acc, s.end) {
                (Some(a), super::timing::End::At(t)) => Some(Some(a.max(t))),
                _ => None,
            });
            match (start, end.flatten()) {
                (Some(s), Some(en)) => json!(super::timing::round_secs(en - s)),
                _ => Value::Null,
            }
        }
    };
    let (tgt, raw) = targets(e.targets.as_deref());
    json!({
        "id": e.id,
        "modification": null,
        "modification_date_time": ts(e.modification_date_time),
        "created": ts(e.created_date_time),
        "priority": e.priority,
        "status": null,
        "cancelled": zero_window(e).is_some(),
        "test": false,
        "market_context": e.program_id,
        "program_id": e.program_id,
        "event_name": e.event_name,
        "start": ts(start),
        "starts_now": starts_now,
        "duration_s": duration_s,
        "duration": e.duration.map(|d| d.to_string()),
        "randomize_start": e.interval_period.as_ref().and_then(|p| p.randomize_start).map(|d| d.to_string()),
        "response_required": null,
        "signals": signals,
        "targets": tgt,
        "raw_targets": raw,
        "report_descriptors": e.report_descriptors.as_deref().unwrap_or_default().iter()
            .map(|r| r.payload_type.clone()).collect::<Vec<_>>(),
        "warnings": warnings,
    })
}

fn program(p: &Program) -> Value {
    let (tgt, raw) = targets(p.targets.as_deref());
    json!({
        "id": p.id,
        "name": p.program_name,
        "long_name": p.program_long_name,
        "created": ts(p.created_date_time),
        "modification_date_time": ts(p.modification_date_time),
        "targets": tgt,
        "raw_targets": raw,
    })
}

fn report(r: &Report) -> Value {
    json!({
        "id": r.id,
        "event_id": r.event_id,
        "program_id": r.program_id,
        "client_name": r.client_name,
        "report_name": r.report_name,
        "created": ts(r.created_date_time),
        "resources": r.resources.iter().map(|res| json!({
            "name": res.resource_name,
            "intervals": res.intervals.iter().map(|iv| json!({
                "id": iv.id,
                "payloads": iv.payloads.iter().map(|p| json!({
                    "type": p.kind,
                    "values": p.values.iter().map(|v| v.to_json()).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// Renders `doc` as JSON. Every document has `format` (`"oadr3"`), `message`
/// ([`Document::name`]), `vtn_id`, `ven_id`, `request_id` (all `null`: 3.x has no such envelope),
/// `events` (possibly empty) and `warnings`; programs, reports and notifications add
/// `programs`, `reports` and `operation`/`object_type`.
///
/// Each event: `{"id", "modification": null, "modification_date_time", "created", "priority",
/// "status": null, "cancelled", "test": false, "market_context", "program_id", "event_name",
/// "start", "starts_now", "duration_s", "duration", "randomize_start", "response_required": null,
/// "signals": [{"name", "type", "units", "currency", "scale": null, "intervals": [{"id", "start",
/// "duration_s", "duration", "values"}]}], "targets": {"ven_id", "group_id", "resource_id",
/// "party_id"}, "raw_targets", "report_descriptors", "warnings"}`.
pub fn normalized_json(doc: &Document) -> Value {
    let events: Vec<Value> = doc.events().into_iter().map(event).collect();
    let warnings: Vec<Value> = events
        .iter()
        .enumerate()
        .flat_map(|(i, e)| {
            e["warnings"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |w| json!(format!("events[{i}]: {}", w.as_str().unwrap_or_default())))
        })
        .collect();
    let mut v = json!({
        "format": "oadr3",
        "message": doc.name(),
        "vtn_id": null,
        "ven_id": null,
        "request_id": null,
        "events": events,
        "warnings": warnings,
    });
    let extra = match doc {
        Document::Program(p) => json!({"programs": [program(p)]}),
        Document::Programs(ps) => json!({"programs": ps.iter().map(program).collect::<Vec<_>>()}),
        Document::Report(r) => json!({"reports": [report(r)]}),
        Document::Reports(rs) => json!({"reports": rs.iter().map(report).collect::<Vec<_>>()}),
        Document::Notification(n) => {
            let mut extra = json!({"operation": n.operation.as_str(), "object_type": n.object_type});
            match &n.object {
                NotifiedObject::Program(p) => extra["programs"] = json!([program(p)]),
                NotifiedObject::Report(r) => extra["reports"] = json!([report(r)]),
                _ => {}
            }
            extra
        }
        Document::Event(_) | Document::Events(_) => json!({}),
    };
    if let (Value::Object(base), Value::Object(extra)) = (&mut v, extra) {
        base.extend(extra);
    }
    v
}
