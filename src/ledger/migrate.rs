//! `flexgate log migrate`: a ledger of schema 1 (free-form JSON bodies, before typed entries)
//! rewritten as typed entries into a new ledger, so that this version can replay it.
//!
//! The old chain is verified first and left untouched (keep it as evidence). The new ledger
//! starts with a `ledger_migrated` entry holding the old ledger's record count and head hash,
//! which anchors the new chain to the old one; then every old record follows in order, with
//! its event and de-duplication key, its body converted to the entry it described (a restore
//! dispatch is preceded by the `curtailment_ended` that schema 1 left implicit). A record
//! whose body has no schema-1 shape this version knows stops the migration with its seq: no
//! record is silently dropped or guessed.

use super::{Entry, Ledger, LedgerError, NewRecord, Record, RecordKind, Recorded};
use flexgate_policies::control::entry::{
    CurtailmentEnded, DispatchPurpose, EventAcked, EventReceived, LedgerMigrated, OperatorOptOut, PeerAnswer, Received,
    Transport, Trimmed, Upserted, WireContent, WireProtocol, WireReceived, WireSent,
};
use flexgate_policies::control::trim::TrimDirection;
use flexgate_policies::event::{Ack, EventSource, MeterRangeKw, Participation};
use flexgate_policies::ids::EventId;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::path::Path;

/// The schema this module reads.
pub const OLD_SCHEMA: u32 = 1;

/// What a migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationReport {
    /// Records read from the old ledger.
    pub records: u64,
    /// The old ledger's head hash (recorded in the new ledger's first entry).
    pub old_head: String,
    /// The new ledger's head hash.
    pub new_head: String,
}

/// Why a migration stopped. The old ledger is unchanged; the new directory may hold a partial
/// copy, to be deleted before trying again.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The old chain does not verify: migrating would launder a tampered ledger.
    #[error("the ledger at {dir} does not verify ({failure}); it is not migrated")]
    Unverified {
        /// The old directory.
        dir: String,
        /// The verification failure.
        failure: super::VerifyFailure,
    },
    /// The target exists and is not empty.
    #[error("{0} exists and is not empty: migrate into a new directory")]
    TargetNotEmpty(String),
    /// A record has no shape this version knows.
    #[error("record {seq} ({kind:?}) has no schema-1 shape this version knows: {reason}")]
    Unknown {
        /// The record.
        seq: u64,
        /// Its kind.
        kind: RecordKind,
        /// What did not fit.
        reason: String,
    },
    /// The ledgers failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// Reading the old records failed.
    #[error("cannot read the old ledger: {0}")]
    Read(String),
}

/// Migrate the schema-1 ledger in `from` into a new ledger in `to`.
pub async fn migrate(from: &Path, to: &Path) -> Result<MigrationReport, MigrateError> {
    let verified = super::verify(from).map_err(|failure| MigrateError::Unverified {
        dir: from.display().to_string(),
        failure,
    })?;
    if to.exists() && std::fs::read_dir(to).map_err(LedgerError::Output)?.next().is_some() {
        return Err(MigrateError::TargetNotEmpty(to.display().to_string()));
    }
    let mut buffer = Vec::new();
    super::export(from, super::ExportFormat::Jsonl, None, &mut buffer)?;
    let records: Vec<Record> = buffer
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).map_err(|e| MigrateError::Read(e.to_string())))
        .collect::<Result<_, _>>()?;
    let mut converted = Vec::with_capacity(records.len() + 1);
    let first_at = records.first().map_or_else(crate::clock::wall_now, |r| r.time);
    converted.push(NewRecord::from(Recorded::new(
        Entry::LedgerMigrated(LedgerMigrated {
            at: crate::clock::wall_now(),
            from_schema: OLD_SCHEMA,
            records: verified.records,
            head_hash: verified.head_hash.clone(),
            first_record_at: first_at,
        }),
        None,
    )));
    for record in &records {
        let entry = convert(record).map_err(|reason| MigrateError::Unknown {
            seq: record.seq,
            kind: record.kind,
            reason,
        })?;
        // Schema 1 ended a curtailment with its restore dispatch alone; typed entries say so
        // first, so that the replay clears the plan as live operation does.
        if let Entry::CapsDispatched(d) = &entry
            && d.purpose == DispatchPurpose::Restore
        {
            converted.push(NewRecord::from(Recorded::new(
                Entry::CurtailmentEnded(CurtailmentEnded { at: d.at }),
                record.event.as_deref().map(EventId::from),
            )));
        }
        let mut new = NewRecord::from(Recorded::new(entry, record.event.as_deref().map(EventId::from)));
        new.dedup_key = record.dedup_key.clone();
        converted.push(new);
    }
    let ledger = Ledger::open(to).await?;
    for chunk in converted.chunks(super::MAX_BATCH) {
        ledger.append_all(chunk.to_vec()).await?;
    }
    let new_head = ledger.head().1;
    ledger.close().await?;
    Ok(MigrationReport {
        records: verified.records,
        old_head: verified.head_hash,
        new_head,
    })
}

/// Read `body` as the entry `tag` names.
fn as_entry(body: &Value, tag: &str) -> Result<Entry, String> {
    let mut body = body.clone();
    if let Some(map) = body.as_object_mut() {
        map.remove("action");
        map.insert("entry".into(), json!(tag));
    }
    serde_json::from_value(body).map_err(|e| format!("as {tag}: {e}"))
}

fn field<T: DeserializeOwned>(body: &Value, name: &str) -> Result<T, String> {
    serde_json::from_value(body[name].clone()).map_err(|e| format!("{name}: {e}"))
}

fn protocol(name: &str) -> Result<WireProtocol, String> {
    match name {
        "openadr2b" => Ok(WireProtocol::OpenAdr2b),
        "openadr3" => Ok(WireProtocol::OpenAdr3),
        "mqtt" => Ok(WireProtocol::Mqtt),
        other => Err(format!("unknown transport {other:?}")),
    }
}

/// One schema-1 record as the entry it described.
fn convert(record: &Record) -> Result<Entry, String> {
    let b = &record.body;
    if b.get("entry").is_some() {
        return record.entry().map_err(|e| e.to_string());
    }
    match record.kind {
        RecordKind::RawInput => {
            if b["transport"].is_object() {
                // A grid event as received; adapters' extras (the wire object's id) are kept
                // as the recorded text.
                let transport: Transport = field(b, "transport")?;
                let source: EventSource = serde_json::from_value(b["source"].clone()).unwrap_or(transport.source());
                let received = match b["bytes"].as_str() {
                    Some(bytes) => Received::Bytes(bytes.to_string()),
                    None => {
                        let mut extras = b.clone();
                        if let Some(map) = extras.as_object_mut() {
                            for k in ["received_at", "transport", "source"] {
                                map.remove(k);
                            }
                        }
                        Received::Bytes(extras.to_string())
                    }
                };
                Ok(Entry::EventReceived(EventReceived {
                    received_at: field(b, "received_at")?,
                    transport,
                    source,
                    received,
                }))
            } else {
                // A wire message an adapter recorded.
                let protocol = protocol(b["transport"].as_str().unwrap_or(""))?;
                let (message, content) = if let Some(bytes) = b["bytes"].as_str() {
                    (
                        b["message"].as_str().unwrap_or("message").to_string(),
                        WireContent::Text(bytes.to_string()),
                    )
                } else {
                    (
                        format!("event ({})", b["change"].as_str().unwrap_or("seen")),
                        WireContent::Json(b["object"].clone()),
                    )
                };
                Ok(Entry::WireReceived(WireReceived {
                    at: record.time,
                    protocol,
                    peer: b["vtn"].as_str().unwrap_or("").to_string(),
                    message,
                    content,
                }))
            }
        }
        RecordKind::Outbound => {
            let protocol = protocol(b["transport"].as_str().unwrap_or(""))?;
            let (peer, message, content) = match protocol {
                WireProtocol::OpenAdr2b => (
                    b["vtn"].as_str().unwrap_or("").to_string(),
                    b["message"].as_str().unwrap_or("message").to_string(),
                    WireContent::Text(b["bytes"].as_str().unwrap_or("").to_string()),
                ),
                WireProtocol::OpenAdr3 => (
                    b["vtn"].as_str().unwrap_or("").to_string(),
                    "report".to_string(),
                    WireContent::Json(b["report"].clone()),
                ),
                WireProtocol::Mqtt => (
                    b["topic"].as_str().unwrap_or("").to_string(),
                    "dr.report/1".to_string(),
                    WireContent::Json(b["report"].clone()),
                ),
            };
            Ok(Entry::WireSent(WireSent {
                at: record.time,
                protocol,
                peer,
                message,
                content,
                // Schema 1 recorded only what the peer accepted (or what was published).
                answer: if protocol == WireProtocol::Mqtt {
                    PeerAnswer::Published
                } else {
                    PeerAnswer::Accepted
                },
            }))
        }
        RecordKind::Interpretation => {
            let mut body = b.clone();
            let outcome = match b["outcome"].as_str().unwrap_or("") {
                s if s.starts_with("Accepted { new: true") => Upserted::New,
                s if s.starts_with("Accepted") => Upserted::Revised,
                s if s.starts_with("Cancelled") => Upserted::Cancelled,
                s if s.starts_with("TestOnly") => Upserted::Test,
                s if s.starts_with("Duplicate") => Upserted::Duplicate,
                other => return Err(format!("interpretation outcome {other:?}")),
            };
            body["outcome"] = serde_json::to_value(outcome).map_err(|e| e.to_string())?;
            if !b["facility_fingerprint"].is_string() {
                body["facility_fingerprint"] = json!("");
            }
            as_entry(&body, "event_interpreted")
        }
        RecordKind::Ack => {
            // Schema 1 stored the dr.ack/1 document itself; schema 2 records the decision.
            let doc: flexgate_dr::AckPayload = serde_json::from_value(b.clone()).map_err(|e| format!("ack: {e}"))?;
            Ok(Entry::EventAcked(EventAcked {
                ack: ack_decision(doc),
                keyed: record.dedup_key.is_some(),
                input_sha256: None,
            }))
        }
        RecordKind::EventState => as_entry(b, "event_phase"),
        RecordKind::Plan => convert_plan(record),
        RecordKind::Dispatch | RecordKind::Restore => match b["action"].as_str() {
            Some("suspend") => as_entry(b, "jobs_suspended"),
            Some("resume") => as_entry(b, "jobs_resumed"),
            _ => as_entry(b, "caps_dispatched"),
        },
        RecordKind::Confirmation => {
            if b["action"] == "drift" {
                let mut body = b.clone();
                body["action"] = json!("drift");
                let mut map = body.as_object().cloned().unwrap_or_default();
                map.insert("entry".into(), json!("caps_drifted"));
                serde_json::from_value(Value::Object(map)).map_err(|e| format!("drift: {e}"))
            } else {
                as_entry(b, "caps_lost")
            }
        }
        RecordKind::Measurement => {
            if b.get("meter_kw").is_some() {
                as_entry(b, "meter_sample")
            } else if b.get("jobs_started").is_some() {
                as_entry(b, "jobs_changed")
            } else {
                as_entry(b, "elasticity_known")
            }
        }
        RecordKind::Operator => match b["action"].as_str() {
            Some("opt_out") => Ok(Entry::OperatorOptOut(OperatorOptOut {
                at: field(b, "at")?,
                event_id: record.event.clone().ok_or("an opt-out without its event")?,
                revision: field(b, "revision")?,
                operator: field(b, "operator")?,
                reason: field(b, "reason")?,
            })),
            Some("closed_loop_trim") => {
                let before: f64 = field(b, "trim_w_before")?;
                let after: f64 = field(b, "trim_w")?;
                Ok(Entry::Trimmed(Trimmed {
                    at: field(b, "at")?,
                    direction: if after > before {
                        TrimDirection::Lower
                    } else {
                        TrimDirection::Raise
                    },
                    trim_w_before: before,
                    trim_w: after,
                    meter_kw: None,
                    ceiling_kw: None,
                    reason: field(b, "reason")?,
                    max_trim_w: field(b, "max_trim_w")?,
                    max_credit_w: -field::<f64>(b, "max_credit_w")?.abs(),
                }))
            }
            other => Err(format!("operator action {other:?}")),
        },
        RecordKind::Startup => as_entry(b, "started"),
        RecordKind::Trim | RecordKind::Checkpoint | RecordKind::Forecast => Err("no such record in schema 1".into()),
    }
}

/// A schema-1 plan: the same fields, except the reason in words, the curtailment start as a
/// pair, the pre-event caps (dropped: restores now go to the uncapped limit) and no
/// generation (it was the record's seq).
fn convert_plan(record: &Record) -> Result<Entry, String> {
    let b = &record.body;
    let mut body = b.clone();
    let map = body.as_object_mut().ok_or("a plan that is not an object")?;
    let reason = match b["reason"].as_str().unwrap_or("") {
        "job set changed" => "jobs_changed",
        "closed-loop trim" => "trim",
        "unconfirmed caps confirmed again" => "reconfirmed",
        _ => "ceiling",
    };
    map.insert("reason".into(), json!(reason));
    map.insert("at".into(), json!(record.time));
    map.insert("generation".into(), json!(record.seq));
    let started = &b["curtailment_started"];
    map.insert(
        "curtailment_started".into(),
        json!({"at": started[0].clone(), "gpu_w": started[1].as_f64().unwrap_or(0.0),
               "meter_kw": b["pre_event_meter_kw"].clone()}),
    );
    map.remove("pre_event_caps");
    map.remove("pre_event_meter_kw");
    map.insert("until".into(), Value::Null);
    as_entry(&body, "plan")
}

/// The acknowledgement decision a schema-1 `dr.ack/1` record carried.
fn ack_decision(doc: flexgate_dr::AckPayload) -> Ack {
    Ack {
        event_id: doc.event_id.into(),
        revision: doc.revision,
        received_at: doc.received_at,
        opt: match doc.opt {
            flexgate_dr::Opt::In => Participation::In,
            flexgate_dr::Opt::Out => Participation::Out,
        },
        reason: doc.reason,
        accepted_target_kw: doc.accepted_target_kw,
        expected_meter_kw: doc.expected_meter_kw.map(|r| MeterRangeKw { lo: r.lo, hi: r.hi }),
        log_checkpoint: Some(doc.log_checkpoint),
        log_seq: None,
    }
}
