//! A stable, prefix-independent JSON view of a decoded [`Message`].

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde_json::{Value, json};

use super::{EiResponse, Event, Message, Signal, Targets};

fn ts(t: DateTime<Utc>) -> Value {
    Value::String(t.to_rfc3339_opts(SecondsFormat::AutoSi, true))
}

/// Seconds as an integer when whole, else as a float.
fn secs(d: TimeDelta) -> Value {
    if d.subsec_nanos() == 0 {
        json!(d.num_seconds())
    } else {
        json!(d.as_seconds_f64())
    }
}

fn opt_secs(d: Option<TimeDelta>) -> Value {
    d.map_or(Value::Null, secs)
}

fn targets(t: &Targets) -> Value {
    json!({"ven_id": t.ven_id, "group_id": t.group_id, "resource_id": t.resource_id, "party_id": t.party_id})
}

fn response(r: &EiResponse) -> Value {
    json!({"code": r.code, "description": r.description, "request_id": r.request_id})
}

fn signal(e: &Event, s: &Signal) -> Value {
    let starts = e.interval_starts(s);
    let intervals: Vec<Value> = s
        .intervals
        .iter()
        .zip(starts)
        .map(|(i, start)| {
            json!({
                "uid": i.uid,
                "start": ts(start),
                "duration_s": opt_secs(i.duration.or(if s.intervals.len() == 1 { e.duration } else { None })),
                "values": i.values,
            })
        })
        .collect();
    let ib = s.item_base.as_ref();
    json!({
        "name": s.name,
        "type": s.signal_type,
        "id": s.id,
        "item": ib.map(|b| b.kind.clone()),
        "description": ib.and_then(|b| b.description.clone()),
        "units": ib.and_then(|b| b.units.clone()),
        "scale": ib.and_then(|b| b.scale.clone()),
        "current_value": s.current_value,
        "intervals": intervals,
        "targets": s.targets.as_ref().map(targets),
    })
}

fn event(e: &Event) -> Value {
    json!({
        "id": e.id,
        "modification": e.modification_number,
        "priority": e.priority,
        "status": e.status.as_str(),
        "test": e.test,
        "market_context": e.market_context,
        "created": e.created.map(ts),
        "start": ts(e.dtstart),
        "duration_s": opt_secs(e.duration),
        "start_after_s": opt_secs(e.start_after),
        "notification_s": opt_secs(e.notification),
        "ramp_up_s": opt_secs(e.ramp_up),
        "recovery_s": opt_secs(e.recovery),
        "response_required": e.response_required.map(|r| r.as_str()),
        "signals": e.signals.iter().map(|s| signal(e, s)).collect::<Vec<_>>(),
        "targets": targets(&e.targets),
    })
}

/// Renders `msg` as JSON. Every message has `format`, `message`, `vtn_id`, `ven_id`,
/// `request_id` and `warnings`; `oadrDistributeEvent` adds `events` (see the crate docs for
/// the shape), other messages add their own fields.
pub fn normalized_json(msg: &Message) -> Value {
    let mut v = json!({
        "format": "oadr2b",
        "message": msg.name(),
        "vtn_id": null,
        "ven_id": null,
        "request_id": null,
    });
    let extra = match msg {
        Message::DistributeEvent(d) => json!({
            "vtn_id": d.vtn_id,
            "request_id": d.request_id,
            "response": d.response.as_ref().map(response),
            "events": d.events.iter().map(event).collect::<Vec<_>>(),
            "warnings": d.warnings.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
        }),
        Message::CreatedPartyRegistration(c) => json!({
            "vtn_id": c.vtn_id, "ven_id": c.ven_id, "request_id": c.response.request_id,
            "response": response(&c.response), "registration_id": c.registration_id,
            "profiles": c.profiles, "poll_freq_s": opt_secs(c.poll_freq),
        }),
        Message::RequestReregistration(r) => json!({"ven_id": r.ven_id}),
        Message::CancelPartyRegistration(c) => json!({
            "ven_id": c.ven_id, "request_id": c.request_id, "registration_id": c.registration_id,
        }),
        Message::Response(r) => json!({
            "ven_id": r.ven_id, "request_id": r.response.request_id, "response": response(&r.response),
        }),
        Message::RegisterReport(r) => json!({
            "ven_id": r.ven_id, "request_id": r.request_id, "report_request_ids": r.report_request_ids,
            "report_specifier_ids": r.report_specifier_ids,
        }),
        Message::RegisteredReport(r) => json!({
            "ven_id": r.ven_id, "request_id": r.response.request_id, "response": response(&r.response),
            "report_request_ids": r.report_request_ids,
        }),
        Message::CreateReport(r) => json!({
            "ven_id": r.ven_id, "request_id": r.request_id, "report_request_ids": r.report_request_ids,
        }),
        Message::CancelReport(r) => json!({
            "ven_id": r.ven_id, "request_id": r.request_id, "report_request_ids": r.report_request_ids,
            "report_to_follow": r.report_to_follow,
        }),
        Message::Other { .. } => json!({}),
    };
    if let (Value::Object(base), Value::Object(extra)) = (&mut v, extra) {
        base.extend(extra);
        base.entry("warnings").or_insert_with(|| json!([]));
    }
    v
}
