//! A stable, prefix-independent JSON view of a decoded [`Message`].

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use serde_json::{Value, json};

use super::{
    EiResponse, Event, ItemBase, Message, ReportData, ReportMetadata, ReportRequest, ReportValue, Signal, Targets,
};

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
        // An event the decoder found unusable has no meaningful duration: never show one.
        "duration_s": if e.invalid.is_empty() { opt_secs(e.duration) } else { Value::Null },
        "invalid": e.invalid,
        "start_after_s": opt_secs(e.start_after),
        "notification_s": opt_secs(e.notification),
        "ramp_up_s": opt_secs(e.ramp_up),
        "recovery_s": opt_secs(e.recovery),
        "response_required": e.response_required.map(|r| r.as_str()),
        "signals": e.signals.iter().map(|s| signal(e, s)).collect::<Vec<_>>(),
        "targets": targets(&e.targets),
    })
}

fn opt_ts(t: Option<DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, ts)
}

fn report_request(r: &ReportRequest) -> Value {
    json!({
        "report_request_id": r.report_request_id,
        "report_specifier_id": r.report_specifier_id,
        "granularity_s": opt_secs(r.granularity),
        "report_back_duration_s": opt_secs(r.report_back_duration),
        "start": opt_ts(r.start),
        "duration_s": opt_secs(r.duration),
        "r_ids": r.r_ids,
    })
}

fn item(b: Option<&ItemBase>) -> Value {
    b.map_or(
        Value::Null,
        |b| json!({"item": b.kind, "description": b.description, "units": b.units, "scale": b.scale}),
    )
}

fn report_metadata(r: &ReportMetadata) -> Value {
    let descriptions: Vec<Value> = r
        .descriptions
        .iter()
        .map(|d| {
            json!({
                "r_id": d.r_id,
                "data_source": d.data_source.as_ref().map(targets),
                "report_type": d.report_type,
                "item_base": item(d.item_base.as_ref()),
                "reading_type": d.reading_type,
                "market_context": d.market_context,
                "sampling_rate": d.sampling_rate.as_ref().map(|s| json!({
                    "min_period_s": secs(s.min_period), "max_period_s": secs(s.max_period), "on_change": s.on_change,
                })),
            })
        })
        .collect();
    json!({
        "report_id": r.report_id,
        "report_request_id": r.report_request_id,
        "report_specifier_id": r.report_specifier_id,
        "report_name": r.report_name,
        "created": opt_ts(r.created),
        "duration_s": opt_secs(r.duration),
        "descriptions": descriptions,
    })
}

fn report_data(r: &ReportData) -> Value {
    let intervals: Vec<Value> = r
        .intervals
        .iter()
        .map(|i| {
            let points: Vec<Value> = i
                .points
                .iter()
                .map(|p| {
                    let mut v = json!({
                        "r_id": p.r_id, "value": null, "status": null, "confidence": p.confidence,
                        "accuracy": p.accuracy, "data_quality": p.data_quality,
                    });
                    match &p.value {
                        ReportValue::Float(f) => v["value"] = json!(f),
                        ReportValue::ResourceStatus(st) => {
                            let lc = st.load_control.clone().unwrap_or_default();
                            v["status"] = json!({
                                "online": st.online, "manual_override": st.manual_override,
                                "capacity": lc.capacity, "level_offset": lc.level_offset,
                                "percent_offset": lc.percent_offset, "set_point": lc.set_point,
                            });
                        }
                    }
                    v
                })
                .collect();
            json!({"uid": i.uid, "start": opt_ts(i.start), "duration_s": opt_secs(i.duration), "points": points})
        })
        .collect();
    json!({
        "report_id": r.report_id,
        "report_request_id": r.report_request_id,
        "report_specifier_id": r.report_specifier_id,
        "report_name": r.report_name,
        "created": opt_ts(r.created),
        "start": opt_ts(r.start),
        "duration_s": opt_secs(r.duration),
        "intervals": intervals,
    })
}

fn acknowledgement(r: &EiResponse, ven_id: Option<&String>) -> Value {
    json!({"ven_id": ven_id, "request_id": r.request_id, "response": response(r)})
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Value::Object(a), Value::Object(b)) = (&mut a, b) {
        a.extend(b);
    }
    a
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
            "reports": r.reports.iter().map(report_metadata).collect::<Vec<_>>(),
        }),
        Message::RegisteredReport(r) => json!({
            "ven_id": r.ven_id, "request_id": r.response.request_id, "response": response(&r.response),
            "report_request_ids": r.report_request_ids,
            "report_requests": r.report_requests.iter().map(report_request).collect::<Vec<_>>(),
        }),
        Message::CreateReport(r) => json!({
            "ven_id": r.ven_id, "request_id": r.request_id, "report_request_ids": r.report_request_ids,
            "report_requests": r.report_requests.iter().map(report_request).collect::<Vec<_>>(),
        }),
        Message::CancelReport(r) => json!({
            "ven_id": r.ven_id, "request_id": r.request_id, "report_request_ids": r.report_request_ids,
            "report_to_follow": r.report_to_follow,
        }),
        Message::CanceledPartyRegistration(c) => merge(
            acknowledgement(&c.response, c.ven_id.as_ref()),
            json!({"registration_id": c.registration_id}),
        ),
        Message::UpdatedReport(u) => merge(
            acknowledgement(&u.response, u.ven_id.as_ref()),
            json!({"cancel_report": u.cancel_report.as_ref().map(|c| json!({
                "request_id": c.request_id, "report_request_ids": c.report_request_ids,
                "report_to_follow": c.report_to_follow, "ven_id": c.ven_id,
            }))}),
        ),
        Message::CreatedOpt(c) => merge(acknowledgement(&c.response, None), json!({"opt_id": c.opt_id})),
        Message::CanceledOpt(c) => merge(acknowledgement(&c.response, None), json!({"opt_id": c.opt_id})),
        Message::CancelOpt(c) => json!({"ven_id": c.ven_id, "request_id": c.request_id, "opt_id": c.opt_id}),
        Message::CreatedReport(c) => merge(
            acknowledgement(&c.response, c.ven_id.as_ref()),
            json!({"pending_report_request_ids": c.pending_report_request_ids}),
        ),
        Message::CanceledReport(c) => merge(
            acknowledgement(&c.response, c.ven_id.as_ref()),
            json!({"pending_report_request_ids": c.pending_report_request_ids}),
        ),
        Message::CreatedEvent(c) => merge(
            acknowledgement(&c.response, Some(&c.ven_id)),
            json!({"event_responses": c.event_responses.iter().map(|e| json!({
                "code": e.code, "description": e.description, "request_id": e.request_id,
                "event_id": e.event_id, "modification": e.modification_number, "opt": e.opt.as_str(),
            })).collect::<Vec<_>>()}),
        ),
        Message::Poll(p) => json!({"ven_id": p.ven_id}),
        Message::QueryRegistration(q) => json!({"request_id": q.request_id}),
        Message::CreatePartyRegistration(c) => json!({
            "request_id": c.request_id, "registration_id": c.registration_id, "ven_id": c.ven_id,
            "profile": c.profile_name, "transport": c.transport_name, "transport_address": c.transport_address,
            "report_only": c.report_only, "xml_signature": c.xml_signature, "ven_name": c.ven_name,
            "http_pull": c.http_pull_model,
        }),
        Message::RequestEvent(r) => {
            json!({"request_id": r.request_id, "ven_id": r.ven_id, "reply_limit": r.reply_limit})
        }
        Message::UpdateReport(u) => json!({
            "request_id": u.request_id, "ven_id": u.ven_id,
            "reports": u.reports.iter().map(report_data).collect::<Vec<_>>(),
        }),
        Message::CreateOpt(c) => json!({
            "request_id": c.request_id, "ven_id": c.ven_id, "opt_id": c.opt_id, "opt": c.opt.as_str(),
            "reason": c.reason, "market_context": c.market_context, "created": opt_ts(c.created),
            "event_id": c.event_id, "modification": c.modification_number,
            "availability": c.availability.iter().map(|a| json!({"start": ts(a.start), "duration_s": secs(a.duration)}))
                .collect::<Vec<_>>(),
            "targets": targets(&c.targets),
        }),
        Message::Other { .. } => json!({}),
    };
    if let (Value::Object(base), Value::Object(extra)) = (&mut v, extra) {
        base.extend(extra);
        base.entry("warnings").or_insert_with(|| json!([]));
    }
    v
}
