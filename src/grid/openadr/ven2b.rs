//! Runs the OpenADR 2.0b VEN against a VTN over HTTP and connects it to the gateway.
//!
//! The state machine (`flexgate_openadr::oadr2b::ven`) decides what to send and when; this task
//! executes its actions: HTTP exchanges, persisting the registration, recording every
//! non-trivial message in the ledger (both directions), turning event changes into
//! `GridEvent`s for the book, and answering with the gateway's opt decisions.
//!
//! **No forecast in 2.0b (issue 33).** The gateway's 48-hour forecast goes out in
//! `dr.telemetry/1` and in OpenADR 3 reports (reading type `FORECAST`, see `ven3.rs`), not here:
//! 2.0b has the means for a forecast point (reading type `Projected`, "reading is in the future,
//! and has not yet been measured"; `ei:confidence` per payload) but no report it fits honestly.
//!
//! - Report names: 2.0b defines `TELEMETRY_USAGE`, `TELEMETRY_STATUS`, `HISTORY_USAGE` and
//!   `HISTORY_GREENBUTTON` (with their `METADATA_` forms): the present and the past. A telemetry
//!   report's intervals are its sampling slots, so future intervals in one would misread. A
//!   private `x-` report name is schema-valid, but a VTN requests only the reports it knows:
//!   openleadr 0.5.36 skips any other in oadrRegisterReport ("not yet supported. Skipping report")
//!   and has no way to send oadrCreateReport for it, so it would be registered and never asked
//!   for.
//! - Report types: the only "capacity available" ones are `upRegulationCapacityAvailable` and
//!   `downRegulationCapacityAvailable`: capacity for regulation, an ancillary service that follows
//!   a dispatch signal both ways within seconds, not a shed held for hours within a cost ceiling.
//!   For a load, shedding is *up* regulation, so `downRegulationCapacityAvailable` would even
//!   offer the opposite (consuming more). `deltaDemand` with `Projected` would read as a change
//!   the site plans to make against its baseline: a commitment, not what it could shed.
//!
//! So 2.0b keeps its one flexibility figure: the TELEMETRY_STATUS point's
//! `oadrLoadControlState/oadrCapacity/oadrCurrent`, the most the flexibility curve can shed at the
//! meter now. A VTN that needs the forecast reads it over MQTT or OpenADR 3.

use super::map::{Labels, MapPolicy, Timing, cancellation, grid_event};
use crate::config::{Config, OpenAdr2bConfig};
use crate::ledger::{Entry, LedgerError, Recorded};
use crate::runtime::{Gateway, Submission, SubmitError, Transport, WireRef};
use chrono::{DateTime, TimeDelta, Utc};
use flexgate_openadr::http::oadr2b::Oadr2bHttp;
use flexgate_openadr::http::oadr2b::TransportError;
use flexgate_openadr::oadr2b::outgoing::{OptType, Outgoing};
use flexgate_openadr::oadr2b::signal::SignalMeaning;
use flexgate_openadr::oadr2b::ven::{
    Action, DistributeOutcome, EventChange, EventState, EventUpdate, OptDecision, Registration, Resumed,
    TelemetrySample, Ven, VenConfig,
};
use flexgate_openadr::oadr2b::{Message, Response};
use flexgate_policies::control::entry::{
    AdapterOptedOut, PeerAnswer, WireContent, WireProtocol, WireReceived, WireSent,
};
use flexgate_policies::event::{EventSource, Participation};
use flexgate_policies::ids::EventId;
use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// How long after leaving an event unanswered (it could not be recorded) the VEN asks the VTN
/// for every event again.
const RESYNC_AFTER: TimeDelta = TimeDelta::seconds(5);

/// File (in the data directory) holding the registration the VTN gave us.
pub const REGISTRATION_FILE: &str = "openadr2b-registration.json";

/// A message a VTN pushed to us (push mode), with a channel for the answer.
pub struct Pushed {
    /// The decoded message.
    pub message: Message,
    /// The raw bytes, for the ledger.
    pub raw: Vec<u8>,
}

/// Why the VEN could not start.
#[derive(Debug, thiserror::Error)]
pub enum VenStartError {
    /// Transport configuration (URL, TLS files).
    #[error("OpenADR 2.0b: {0}")]
    Transport(#[from] flexgate_openadr::http::oadr2b::TransportError),
    /// VEN configuration.
    #[error("OpenADR 2.0b: {0}")]
    Ven(#[from] flexgate_openadr::oadr2b::ven::VenError),
}

/// The 2.0b VEN task's state.
pub struct Ven2b {
    gateway: Arc<Gateway>,
    ven: Ven,
    http: Oadr2bHttp,
    registration_path: PathBuf,
    policy: MapPolicy,
    /// 2.0b eventID → the gateway event ids it became and the highest revision submitted.
    submitted: HashMap<String, (Vec<String>, u64)>,
    /// Ledger seq of the last recorded inbound message (the source of the next changes).
    last_inbound_seq: u64,
}

impl Ven2b {
    /// Builds the VEN from the configuration and any registration saved by an earlier run.
    pub fn new(gateway: Arc<Gateway>, config: &Config, cfg: &OpenAdr2bConfig) -> Result<Self, VenStartError> {
        let http = Oadr2bHttp::new(&cfg.url, cfg.tls.as_ref(), Duration::from_secs(cfg.timeout_s))?;
        let registration_path = config.gateway.data_dir.join(REGISTRATION_FILE);
        // The registration as the ledger last recorded it (a replica that begins to lead holds
        // its predecessor's), else the file an earlier run saved.
        let saved: Option<Registration> = match recorded_registration(&gateway) {
            Some(recorded) => recorded,
            None => std::fs::read(&registration_path)
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok()),
        };
        let mut ven_cfg = VenConfig::new(cfg.ven_name.clone());
        ven_cfg.ven_id = cfg.ven_id.clone();
        ven_cfg.expected_vtn_id = cfg.vtn_id.clone();
        ven_cfg.market_contexts = cfg.market_contexts.clone();
        ven_cfg.group_ids = cfg.group_ids.clone();
        ven_cfg.resource_ids = cfg.resource_ids.clone();
        ven_cfg.party_ids = cfg.party_ids.clone();
        ven_cfg.poll_override = cfg.poll_s.and_then(|s| TimeDelta::try_seconds(s as i64));
        ven_cfg.reports.resource_id = config.gateway.site.clone();
        if let Some(push_url) = &cfg.push_url {
            ven_cfg.http_pull = false;
            ven_cfg.transport_address = Some(push_url.clone());
        }
        let ven = Ven::new(ven_cfg, saved)?;
        Ok(Ven2b {
            gateway,
            ven,
            http,
            registration_path,
            policy: MapPolicy {
                level_offset_percent_per_step: config.site.level_offset_percent_per_step,
            },
            submitted: HashMap::new(),
            last_inbound_seq: 0,
        })
    }

    /// Runs until `stop` turns true. Pushed messages (push mode) arrive on `pushed`.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>, mut pushed: mpsc::Receiver<Pushed>) {
        let clock = self.gateway.clock();
        let mut opt_outs = self.gateway.driver().subscribe_opt_outs();
        self.resume().await;
        let mut queue: VecDeque<Action> = self.ven.start(clock.now()).into();
        tracing::info!(vtn = %self.http.base(), "OpenADR 2.0b VEN started");
        loop {
            while let Some(action) = queue.pop_front() {
                let more = self.execute(action).await;
                queue.extend(more);
                if *stop.borrow() {
                    return;
                }
            }
            self.sample().await;
            let wake = clock.instant_of(self.ven.next_wakeup());
            tokio::select! {
                () = async { let _ = stop.wait_for(|s| *s).await; } => return,
                _ = tokio::time::sleep_until(wake) => {
                    queue.extend(self.ven.tick(clock.now()));
                }
                Ok((event_id, reason)) = opt_outs.recv() => {
                    queue.extend(self.opt_out_actions(&event_id, &reason));
                }
                Some(msg) = pushed.recv() => {
                    self.record_inbound(&msg.raw, msg.message.name()).await;
                    queue.extend(self.ven.handle(clock.now(), None, msg.message));
                }
            }
        }
    }

    /// Carry on where an earlier run of this VEN stopped (this process before a restart, or
    /// the replica that led before this one): its event book and answers from the ledger's
    /// wire records, so that the VTN sees one answer per event version, and the gateway
    /// events each OpenADR event became, so that a later modification or cancellation reaches
    /// them.
    async fn resume(&mut self) {
        let reader = self.gateway.ledger().reader();
        let vtn = self.http.base().to_string();
        let history = tokio::task::spawn_blocking(move || recorded_exchanges(&reader, &vtn))
            .await
            .unwrap_or_default();
        if history.is_empty() {
            return;
        }
        let exchanges = history.len();
        self.ven.resume(self.gateway.clock().now(), history);
        let submitted = self.gateway.read().events_from(EventSource::OpenAdr2b);
        for known in self.ven.events() {
            if !matches!(known.state, EventState::Accepted) {
                continue;
            }
            let oadr_id = known.event.id.as_str();
            let parts: Vec<&(String, u64)> = submitted
                .iter()
                .filter(|(id, _)| id == oadr_id || id.strip_prefix(oadr_id).is_some_and(|rest| rest.starts_with('#')))
                .collect();
            if let Some(revision) = parts.iter().map(|(_, r)| *r).max() {
                self.submitted.insert(
                    oadr_id.to_string(),
                    (parts.iter().map(|(id, _)| id.clone()).collect(), revision),
                );
            }
        }
        tracing::info!(
            exchanges,
            events = self.submitted.len(),
            "OpenADR 2.0b: resumed the event book an earlier run of this VEN left in the ledger"
        );
    }

    async fn execute(&mut self, action: Action) -> Vec<Action> {
        let now = self.gateway.clock().now();
        match action {
            Action::Send(out) => {
                let exchange = self.http.send(&out).await;
                let now = self.gateway.clock().now();
                match exchange {
                    Ok(exchange) => {
                        if !matches!(out, Outgoing::Poll { .. }) {
                            self.record_outbound(&out, exchange.sent.clone(), PeerAnswer::Accepted)
                                .await;
                        }
                        match exchange.reply {
                            Ok(Some(reply)) => {
                                if !is_plain_ok(&reply) {
                                    self.record_inbound(&exchange.raw, reply.name()).await;
                                }
                                self.ven.handle(now, Some(&out), reply)
                            }
                            Ok(None) => Vec::new(),
                            Err(e) => {
                                self.record_inbound(&exchange.raw, "undecodable").await;
                                self.ven.request_failed(now, &out, format!("undecodable answer: {e}"))
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!("OpenADR 2.0b {}: {e}", out.name());
                        if !matches!(out, Outgoing::Poll { .. }) {
                            let answer = match &e {
                                TransportError::Status { status, body, .. } => PeerAnswer::Refused {
                                    status: Some(*status),
                                    detail: body.clone(),
                                },
                                other => PeerAnswer::Unanswered {
                                    detail: other.to_string(),
                                },
                            };
                            self.record_outbound(&out, flexgate_openadr::oadr2b::encode(&out), answer)
                                .await;
                        }
                        self.ven.request_failed(now, &out, e)
                    }
                }
            }
            Action::Persist(registration) => {
                // The ledger's copy first (what every replica, and this gateway after losing
                // its files, carries on from), then the local file: a file on disk means the
                // registration is in the ledger too.
                self.record_registration(registration.as_ref()).await;
                self.persist(registration.as_ref());
                Vec::new()
            }
            Action::Events(outcome) => self.apply(now, outcome).await,
            Action::Warn(w) => {
                tracing::warn!("OpenADR 2.0b: {w}");
                Vec::new()
            }
            Action::Abandoned { out, attempts, error } => {
                let answer = PeerAnswer::Abandoned {
                    attempts,
                    detail: error,
                };
                self.record_outbound(&out, flexgate_openadr::oadr2b::encode(&out), answer)
                    .await;
                Vec::new()
            }
        }
    }

    /// Record the registration in the ledger, so that every replica holds it.
    async fn record_registration(&self, registration: Option<&Registration>) {
        let entry = Entry::AdapterRegistration(flexgate_policies::control::entry::AdapterRegistration {
            at: self.gateway.clock().now(),
            protocol: WireProtocol::OpenAdr2b,
            registration: registration.and_then(|r| serde_json::to_value(r).ok()),
        });
        if let Err(e) = self.gateway.driver().record(Recorded::new(entry, None)).await {
            tracing::warn!("the OpenADR registration could not be recorded in the ledger: {e}");
        }
    }

    fn persist(&self, registration: Option<&Registration>) {
        let result = match registration {
            Some(r) => serde_json::to_vec_pretty(r)
                .map_err(std::io::Error::other)
                .and_then(|bytes| {
                    let tmp = self.registration_path.with_extension("json.tmp");
                    std::fs::write(&tmp, bytes)?;
                    std::fs::rename(&tmp, &self.registration_path)
                }),
            None => match std::fs::remove_file(&self.registration_path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        };
        if let Err(e) = result {
            tracing::error!(path = %self.registration_path.display(), "cannot save the OpenADR registration: {e}");
        }
    }

    /// The latest measurements, for TELEMETRY_USAGE / TELEMETRY_STATUS reports.
    ///
    /// 2.0b has one place for flexibility, the status point's `oadrLoadControlState/oadrCapacity`
    /// (a single figure, no costs): it carries the most the site's flexibility curve says it can
    /// shed at the meter now (the facility model's lower bound), left out while there is no
    /// curve. The whole curve with its costs goes where a protocol has room for it (OpenADR 3
    /// reports, `dr.telemetry/1`).
    async fn sample(&mut self) {
        let status = self.gateway.read().status().await;
        let Some(meter_kw) = status.measured_meter_kw() else {
            return;
        };
        let flexible_kw = self.gateway.read().flexibility().await.map(|c| c.most_meter_shed_kw());
        let sample = TelemetrySample {
            meter_kw,
            gpu_board_kw: status.measured_gpu_w.map(|w| w / 1000.0),
            flexible_kw,
            online: true,
            manual_override: false,
        };
        if let Err(e) = self.ven.record_sample(status.at, sample) {
            tracing::warn!("OpenADR 2.0b telemetry sample refused: {e}");
        }
    }

    async fn record_inbound(&mut self, raw: &[u8], message: &str) {
        let entry = Entry::WireReceived(WireReceived {
            at: self.gateway.clock().now(),
            protocol: WireProtocol::OpenAdr2b,
            peer: self.http.base().to_string(),
            message: message.to_string(),
            content: WireContent::Text(String::from_utf8_lossy(raw).into_owned()),
        });
        match self.gateway.driver().record(Recorded::new(entry, None)).await {
            Ok(appended) => self.last_inbound_seq = appended.seq,
            Err(e) => tracing::error!("ledger: cannot record an OpenADR message: {e}"),
        }
    }

    /// Records what was sent and what the VTN answered (an HTTP error or no answer included:
    /// a refused report is evidence too).
    async fn record_outbound(&self, out: &Outgoing, sent: String, answer: PeerAnswer) {
        let entry = Entry::WireSent(WireSent {
            at: self.gateway.clock().now(),
            protocol: WireProtocol::OpenAdr2b,
            peer: self.http.url_for(out),
            message: out.name().to_string(),
            content: WireContent::Text(sent),
            answer,
        });
        if let Err(e) = self.gateway.driver().record(Recorded::new(entry, None)).await {
            tracing::error!("ledger: cannot record an OpenADR message: {e}");
        }
    }

    /// Applies event changes to the gateway's book and answers with its decisions.
    async fn apply(&mut self, now: DateTime<Utc>, outcome: DistributeOutcome) -> Vec<Action> {
        let mut decisions = Vec::new();
        let mut withheld = Vec::new();
        for change in outcome.changes {
            match change {
                EventChange::Upsert(update) => {
                    let event_id = update.event_id.clone();
                    match self.upsert(*update).await {
                        Some(decision) => decisions.push(decision),
                        None => withheld.push(event_id),
                    }
                }
                EventChange::Cancel {
                    event_id,
                    modification_number,
                    ..
                } => self.cancel(now, &event_id, u64::from(modification_number)).await,
                EventChange::Refused {
                    event_id,
                    modification_number,
                    code,
                    reason,
                } => {
                    // The VEN answered this version by itself: record its decision and why,
                    // beside the oadrCreatedEvent bytes that carry it.
                    let entry = Entry::AdapterOptedOut(AdapterOptedOut {
                        at: now,
                        protocol: WireProtocol::OpenAdr2b,
                        event_id: event_id.clone(),
                        revision: u64::from(modification_number),
                        code,
                        reason: reason.clone(),
                    });
                    match self
                        .gateway
                        .driver()
                        .record(Recorded::new(entry, Some(EventId::from(event_id.as_str()))))
                        .await
                    {
                        Ok(_) => {
                            if let Err(e) = self.gateway.driver().count_adapter_refusal().await {
                                tracing::warn!("the VEN's opt-out of {event_id} is recorded but not counted: {e}");
                            }
                        }
                        Err(e) => tracing::error!("ledger: cannot record the VEN's opt-out of {event_id}: {e}"),
                    }
                    tracing::info!(%event_id, code, "OpenADR 2.0b event opted out by the VEN: {reason}");
                    self.cancel(now, &event_id, u64::from(modification_number)).await;
                }
            }
        }
        for event_id in &withheld {
            // Not answered: the VTN keeps the event for us. This VEN asks for every event again
            // shortly (a VTN re-sends a distribute only when asked), and so does the next
            // leader's if this term ends first (a record not durable halts the writer).
            self.ven.forget_event(event_id);
        }
        if !withheld.is_empty() {
            self.ven.request_events_at(now + RESYNC_AFTER);
        }
        match outcome.pending {
            Some(mut pending) => {
                for event_id in &withheld {
                    pending.withhold(event_id);
                }
                let wanted: Vec<String> = pending.needs_decision().into_iter().map(str::to_string).collect();
                decisions.retain(|d| wanted.contains(&d.event_id));
                self.ven.answer_distribute(pending, decisions)
            }
            None => Vec::new(),
        }
    }

    /// Submits each acted-on signal of an event version as a gateway event; the opt is in only
    /// when every part was accepted. `None` when a part could not be recorded for a reason that
    /// passes (no quorum for the ledger, or this replica no longer leads): the event is then
    /// left unanswered rather than opted out of.
    async fn upsert(&mut self, update: EventUpdate) -> Option<OptDecision> {
        let actionable: Vec<_> = update
            .signals
            .iter()
            .filter(|s| matches!(s.meaning, SignalMeaning::Load(_) | SignalMeaning::Price(_)))
            .filter(|s| !s.meaning.intervals().is_empty())
            .collect();
        let ids: Vec<String> = match actionable.len() {
            1 => vec![update.event_id.clone()],
            _ => actionable
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    format!(
                        "{}#{}",
                        update.event_id,
                        if s.id.is_empty() { i.to_string() } else { s.id.clone() }
                    )
                })
                .collect(),
        };
        let revision = u64::from(update.modification_number);
        // Parts of an older version that this one no longer has are cancelled.
        if let Some((old_ids, _)) = self.submitted.get(&update.event_id).cloned() {
            for gone in old_ids.iter().filter(|id| !ids.contains(id)) {
                self.submit_cancel(gone, revision + 1).await;
            }
        }
        let schedule = &update.schedule;
        let ramp = schedule.ramp_up.unwrap_or_default().num_seconds().max(0);
        // 2.0b wants the target met AT dtstart and lets the ramp start x-eiRampUp earlier; the
        // gateway's window ramps after its start, so the window opens `ramp` seconds early.
        let window_start = schedule.start - TimeDelta::seconds(ramp);
        let timing = Timing {
            start: window_start,
            duration_s: schedule
                .end
                .map(|end| u64::try_from((end - window_start).num_seconds()).unwrap_or(0)),
            ramp_s: ramp as u64,
            recovery_s: schedule.recovery.map_or(0, |r| r.num_seconds().max(0) as u64),
            randomize_start_s: schedule.start_after.map_or(0, |r| r.num_seconds().max(0) as u64),
        };
        let mut refusals = Vec::new();
        let mut later = None;
        for (id, signal) in ids.iter().zip(&actionable) {
            let event = grid_event(
                Labels {
                    id: id.clone(),
                    revision,
                    source: EventSource::OpenAdr2b,
                    program: update.market_context.clone(),
                    issued_at: update.event.created,
                    priority: update.priority.filter(|p| *p > 0),
                    test: update.test,
                },
                timing.clone(),
                signal.meaning.intervals(),
                self.policy,
            );
            let wire = WireRef {
                id: update.event_id.clone(),
                revision: u64::from(update.modification_number),
                signal: Some(format!("{}/{}/{}", signal.name, signal.signal_type, signal.id)),
            };
            match self.submit(event, wire).await {
                Taken::In => {}
                Taken::Out(reason) => refusals.push(reason),
                Taken::Later(reason) => later = Some(reason),
            }
        }
        self.submitted.insert(update.event_id.clone(), (ids, revision));
        if let Some(reason) = later {
            tracing::warn!(
                event = %update.event_id,
                "OpenADR 2.0b event left unanswered, to be taken when the VTN sends it again: {reason}"
            );
            return None;
        }
        Some(if refusals.is_empty() {
            OptDecision::opt_in(update.event_id)
        } else {
            OptDecision::opt_out(update.event_id, refusals.join("; "))
        })
    }

    /// Submits one event: taken, refused (why), or to be taken later.
    async fn submit(&self, event: flexgate_policies::event::GridEvent, wire: WireRef) -> Taken {
        let transport = Transport::OpenAdr2b {
            vtn: self.http.base().to_string(),
            message_seq: self.last_inbound_seq,
        };
        let submission = Submission::Translated {
            event: Box::new(event),
            wire,
        };
        match self.gateway.driver().submit(submission, transport).await {
            Ok(outcome) => match outcome.ack.opt {
                Participation::In => Taken::In,
                Participation::Out => Taken::Out(outcome.ack.reason.unwrap_or_else(|| "opted out".into())),
            },
            Err(SubmitError::Stale { .. }) => Taken::In,
            Err(SubmitError::Ledger(e @ (LedgerError::NotDurable { .. } | LedgerError::NotLeader))) => {
                Taken::Later(e.to_string())
            }
            Err(e @ SubmitError::Ledger(_)) => {
                tracing::error!("OpenADR 2.0b event not recorded: {e}");
                Taken::Out("the gateway could not record the event".into())
            }
            Err(e) => Taken::Out(e.to_string()),
        }
    }

    async fn cancel(&mut self, now: DateTime<Utc>, event_id: &str, modification: u64) {
        let Some((ids, held)) = self.submitted.remove(event_id) else {
            return;
        };
        let revision = modification.max(held + 1);
        for id in ids {
            self.submit_cancel(&id, revision).await;
        }
        tracing::info!(%event_id, at = %now, "OpenADR 2.0b event cancelled");
    }

    async fn submit_cancel(&self, id: &str, revision: u64) {
        let now = self.gateway.clock().now();
        let event = cancellation(id, revision, EventSource::OpenAdr2b, now);
        let wire = WireRef {
            id: id.to_string(),
            revision,
            signal: None,
        };
        match self.submit(event, wire).await {
            Taken::In => {}
            Taken::Out(reason) | Taken::Later(reason) => {
                tracing::warn!(event = %id, "cancellation not taken: {reason}");
            }
        }
    }

    /// An operator opted the site out of a gateway event: if it came from this VTN, say so
    /// with oadrCreateOpt (optOut) for the OpenADR event it was part of.
    fn opt_out_actions(&mut self, gateway_event_id: &str, reason: &str) -> Vec<Action> {
        let Some(oadr_id) = self
            .submitted
            .iter()
            .find(|(_, (ids, _))| ids.iter().any(|id| id == gateway_event_id))
            .map(|(oadr_id, _)| oadr_id.clone())
        else {
            return Vec::new();
        };
        let now = self.gateway.clock().now();
        self.ven.create_opt(now, &oadr_id, OptType::OptOut, reason)
    }
}

/// What became of one submission to the gateway.
enum Taken {
    /// Accepted (opted in), or already held at a newer revision.
    In,
    /// Refused, with why (an opt-out).
    Out(String),
    /// Not recorded for a reason that passes: to be taken when the VTN sends it again.
    Later(String),
}

/// An `oadrResponse` 200 to a poll: nothing pending, nothing worth a ledger record.
fn is_plain_ok(msg: &Message) -> bool {
    matches!(msg, Message::Response(Response { response, .. }) if response.code == "200")
}

/// What this VEN received from `vtn` (oadrDistributeEvent) and answered to it with the VTN's
/// acceptance (oadrCreatedEvent), in ledger order, from the wire records: the history
/// [`Ven::resume`] rebuilds its book from.
fn recorded_exchanges(ledger: &crate::ledger::LedgerReader, vtn: &str) -> Vec<Resumed> {
    use crate::ledger::RecordKind;
    let mut history = Vec::new();
    for record in ledger.iter_from(1).flatten() {
        if !matches!(record.kind, RecordKind::RawInput | RecordKind::Outbound) {
            continue;
        }
        match record.entry() {
            Ok(Entry::WireReceived(w))
                if w.protocol == WireProtocol::OpenAdr2b && w.message == "oadrDistributeEvent" && w.peer == vtn =>
            {
                if let WireContent::Text(text) = &w.content
                    && let Ok(Message::DistributeEvent(d)) = flexgate_openadr::oadr2b::decode(text.as_bytes())
                {
                    history.push(Resumed::Received(d));
                }
            }
            Ok(Entry::WireSent(w))
                if w.protocol == WireProtocol::OpenAdr2b
                    && w.message == "oadrCreatedEvent"
                    && w.peer.starts_with(vtn)
                    && matches!(w.answer, PeerAnswer::Accepted) =>
            {
                if let WireContent::Text(text) = &w.content
                    && let Ok(Message::CreatedEvent(c)) = flexgate_openadr::oadr2b::decode(text.as_bytes())
                {
                    history.push(Resumed::Answered(c));
                }
            }
            _ => {}
        }
    }
    history
}

/// The OpenADR 2.0b registration the ledger last recorded: `Some(None)` when the last record
/// says there is none (cancelled), `None` when the ledger holds no registration record.
fn recorded_registration(gateway: &Gateway) -> Option<Option<Registration>> {
    let ledger = gateway.ledger();
    let mut last = None;
    for record in ledger.iter_from(1).flatten() {
        if record.kind != crate::ledger::RecordKind::Checkpoint {
            continue;
        }
        if let Ok(Entry::AdapterRegistration(r)) = record.entry()
            && r.protocol == WireProtocol::OpenAdr2b
        {
            last = Some(r.registration.and_then(|v| serde_json::from_value(v).ok()));
        }
    }
    last
}
