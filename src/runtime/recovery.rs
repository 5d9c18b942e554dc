//! Crash recovery: rebuild the event book and the caps in force from the ledger, then re-apply
//! the last plan's caps with their original generation (idempotent at the backend).

use super::gateway::Gateway;
use crate::cluster::CapCommand;
use crate::ledger::{LedgerError, NewRecord, RecordKind};
use chrono::{DateTime, Utc};
use flexgate_policies::event::{CeilingTarget, GridEvent};
use flexgate_policies::units::WattsPerGpu;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;

impl Gateway {
    /// Replay the ledger into the gateway's state. Called once, before serving.
    pub(crate) async fn recover(&self) -> Result<(), LedgerError> {
        let mut state = self.state.lock().await;
        let mut last_plan: Option<(u64, Option<String>, Value)> = None;
        // Plan records carry `pre_event_caps` only when it changed: keep the latest copy.
        let mut pre_event_caps: Option<Value> = None;
        let mut events = 0usize;
        for record in self.ledger.iter_from(0) {
            let record = record?;
            match record.kind {
                RecordKind::Interpretation => {
                    let body = &record.body;
                    let parsed = (
                        serde_json::from_value::<GridEvent>(body["event"].clone()),
                        serde_json::from_value::<Vec<Option<CeilingTarget>>>(body["ceilings"].clone()),
                        body["pre_event_meter_kw"].as_f64(),
                        serde_json::from_value::<DateTime<Utc>>(body["received_at"].clone()),
                    );
                    if let (Ok(event), Ok(ceilings), Some(pre), Ok(at)) = parsed {
                        Gateway::reupsert(&mut state, event, ceilings, pre, at);
                        events += 1;
                    } else {
                        tracing::warn!(seq = record.seq, "interpretation record could not be replayed");
                    }
                }
                RecordKind::Plan => {
                    if !record.body["pre_event_caps"].is_null() {
                        pre_event_caps = Some(record.body["pre_event_caps"].clone());
                    }
                    last_plan = Some((record.seq, record.event.clone(), record.body));
                }
                // Jobs the gateway suspended stay suspended across its restart, and are resumed
                // when the curtailment ends.
                RecordKind::Dispatch if record.body["action"] == "suspend" => {
                    for job in record.body["jobs"].as_array().into_iter().flatten() {
                        if let (Some(id), "suspended") = (job["job"].as_str(), job["outcome"].as_str().unwrap_or("")) {
                            state.suspended.insert(Arc::from(id));
                        }
                    }
                }
                RecordKind::Restore if record.body["action"] == "resume" => {
                    for job in record.body["jobs"].as_array().into_iter().flatten() {
                        if let Some(id) = job["job"].as_str() {
                            state.suspended.remove(id);
                        }
                    }
                }
                RecordKind::Restore => {
                    last_plan = None;
                    pre_event_caps = None;
                }
                RecordKind::Operator if record.body["action"] == "opt_out" => {
                    if let Some(id) = record.event.clone() {
                        state.opted_out.insert(id);
                    }
                }
                RecordKind::Measurement => {
                    if let (Some(kw), Ok(at)) = (
                        record.body["meter_kw"].as_f64(),
                        serde_json::from_value::<DateTime<Utc>>(record.body["at"].clone()),
                    ) {
                        state.meter_history.push_back((at, kw));
                        if state.meter_history.len() > 20_000 {
                            state.meter_history.pop_front();
                        }
                    }
                }
                _ => {}
            }
        }

        let mut reapplied = 0usize;
        if let Some((seq, event, body)) = last_plan {
            let pre: HashMap<Arc<str>, WattsPerGpu> =
                serde_json::from_value::<HashMap<String, WattsPerGpu>>(pre_event_caps.unwrap_or(Value::Null))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (Arc::from(k.as_str()), v))
                    .collect();
            state.pre_event_caps = pre;
            state.pre_event_meter_kw = body["pre_event_meter_kw"].as_f64();
            state.curtailment_started = serde_json::from_value(body["curtailment_started"].clone())
                .ok()
                .flatten();
            let running: std::collections::HashSet<Arc<str>> = state.jobs.iter().map(|j| j.spec.id.clone()).collect();
            let commands: Vec<CapCommand> = body["plan"]["rows"]
                .as_array()
                .map(|rows| {
                    rows.iter()
                        .filter_map(|row| {
                            let job: Arc<str> = Arc::from(row[0].as_str()?);
                            let cap = row[1].as_f64()?;
                            // The plan's own end is not recorded with it; the next planning step
                            // re-sends its caps with the end of the events then in force.
                            running.contains(&job).then_some(CapCommand {
                                job,
                                cap: WattsPerGpu(cap),
                                generation: seq,
                                until: None,
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            reapplied = commands.len();
            self.dispatch(&mut state, commands, RecordKind::Dispatch, event, "reapply_at_start")
                .await?;
        }
        let now = self.clock.now();
        self.ledger
            .append(NewRecord {
                kind: RecordKind::Startup,
                event: None,
                dedup_key: None,
                body: json!({"at": now, "events_replayed": events, "caps_reapplied": reapplied,
                             "backend": self.backend.name(), "policy": self.config.gateway.policy}),
            })
            .await?;
        tracing::info!(events, reapplied, "state recovered from the ledger");
        Ok(())
    }
}
