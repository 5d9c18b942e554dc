//! MQTT wiring: `dr.event/1` events from `{prefix}/{site}/events/+` into the gateway, and acks,
//! retained status, telemetry out. Each `dr.telemetry/1` sample carries the flexibility curve
//! now and the 48-hour forecast by the hour (`telemetry_forecast` says why every sample).
//!
//! The protocol work (topics, payloads, signatures, the persistent session with manual acks)
//! lives in `flexgate-mqtt`; this task only connects it to the gateway, keeping the one rule
//! that matters: the broker gets its PUBACK only after the gateway's ledger has flushed the
//! event and its acknowledgment, so a crash in between means redelivery, never loss, and the
//! ledger's de-duplication makes the redelivery harmless.
//!
//! What the bridge refuses itself (a payload over the `dr.event/1` size limit, which the link
//! hands over without its bytes; a signature that does not verify for the topic; what the
//! screen or the strict parse refuses) is recorded as `wire_received` (the bytes, when kept)
//! and `adapter_opted_out` (code and reason), then acknowledged to the broker and answered
//! with an opt-out `dr.ack/1` on `acks/{event_id}`, so that no message is delivered forever.

use crate::config::{Config, MqttConfig};
use crate::grid::dr_event::ack_payload;
use crate::ledger::{Entry, Recorded};
use crate::runtime::{EventView, Gateway, SubmitError, Transport};
use flexgate_mqtt::{
    AckPayload, ForecastHour, GatewayState, IncomingEvent, KwBand, MqttLink, MqttSettings, Opt, Refusal,
    ReportInterval, ReportPayload, Screen, Secret, SignaturePolicy, StatusPayload, TelemetryForecast, TelemetryPayload,
    TlsFiles, Topics, TrustedKeys,
};
use flexgate_policies::control::entry::{
    AdapterOptedOut, PeerAnswer, WireContent, WireProtocol, WireReceived, WireSent,
};
use flexgate_policies::event::Phase;
use flexgate_policies::forecast::Forecast;
use flexgate_policies::ids::EventId;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Why MQTT could not start.
#[derive(Debug, thiserror::Error)]
pub enum MqttStartError {
    /// A setting is unusable.
    #[error("MQTT: {0}")]
    Settings(String),
    /// The password file.
    #[error("MQTT: cannot read password_file {path}: {source}")]
    Password {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// Events processed at once. Their ledger records share group commits, which is what makes a
/// burst fast; acks still leave in arrival order.
const MAX_IN_FLIGHT: usize = 1024;

/// The MQTT task.
pub struct MqttBridge {
    link: MqttLink,
    incoming: flexgate_mqtt::Incoming,
    site: String,
    intake: Arc<Intake>,
    telemetry_every: Duration,
}

/// What an event's processing needs, shared by the tasks that process events concurrently.
struct Intake {
    gateway: Arc<Gateway>,
    keys: TrustedKeys,
    policy: SignaturePolicy,
    screen: Screen,
}

/// What to tell the broker and the sender once an event is processed.
enum Decision {
    /// Recorded and flushed: PUBACK, then publish this ack (opt in or out).
    Answer(AckPayload),
    /// Not recorded (the ledger failed): no PUBACK, so the broker redelivers it later.
    Redeliver,
}

/// An event being processed; acked when it reaches the front of the pipeline.
struct InFlight {
    event_id: String,
    handle: flexgate_mqtt::AckHandle,
    task: tokio::task::JoinHandle<Decision>,
}

impl MqttBridge {
    /// Connects (the connection itself is made, and re-made, in the background).
    pub fn connect(gateway: Arc<Gateway>, config: &Config, cfg: &MqttConfig) -> Result<Self, MqttStartError> {
        let bad = |e: &dyn std::fmt::Display| MqttStartError::Settings(e.to_string());
        let site = config.gateway.site.clone();
        let topics = Topics::new(&cfg.prefix, &site).map_err(|e| bad(&e))?;
        let client_id = cfg.client_id.clone().unwrap_or_else(|| format!("flexgate-{site}"));
        let mut settings = MqttSettings::new(&cfg.url, client_id, topics).map_err(|e| bad(&e))?;
        settings.username = cfg.username.clone();
        if let Some(path) = &cfg.password_file {
            let password = std::fs::read_to_string(path).map_err(|source| MqttStartError::Password {
                path: path.display().to_string(),
                source,
            })?;
            settings.password = Some(Secret::new(password.trim().to_string()));
        }
        if cfg.ca_file.is_some() || cfg.cert_file.is_some() || cfg.key_file.is_some() {
            settings.tls = Some(TlsFiles {
                ca_file: cfg.ca_file.clone(),
                cert_file: cfg.cert_file.clone(),
                key_file: cfg.key_file.clone(),
            });
        }
        let policy = cfg.signatures;
        let keys = TrustedKeys::parse(&cfg.trusted_keys).map_err(|e| bad(&e))?;
        let (link, incoming) = MqttLink::connect(settings).map_err(|e| bad(&e))?;
        Ok(MqttBridge {
            link,
            incoming,
            site,
            intake: Arc::new(Intake {
                gateway,
                keys,
                policy,
                screen: Screen::default(),
            }),
            telemetry_every: Duration::from_secs(cfg.telemetry_interval_s),
        })
    }

    /// Runs until `stop` turns true, then finishes the events in flight and says goodbye
    /// (retained offline status, no Will).
    ///
    /// Up to 1,024 events are processed concurrently, so that their ledger records
    /// share group commits; they are acknowledged strictly in arrival order (MQTT 3.1.1 §4.6
    /// asks for PUBACKs in the order of the PUBLISHes). Two revisions of one event are never
    /// processed at the same time: the second waits until the first is answered.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        self.publish_status().await;
        let mut tick = tokio::time::interval(self.telemetry_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut pipeline: VecDeque<InFlight> = VecDeque::new();
        let mut ids_in_flight: HashSet<String> = HashSet::new();
        let mut transitions = self.intake.gateway.driver().subscribe_transitions();
        let mut reported = Reported::seeded(&self.intake.gateway.read().events().await);
        loop {
            tokio::select! {
                () = async { let _ = stop.wait_for(|s| *s).await; } => break,
                transition = transitions.recv() => match transition {
                    Ok(t) if t.to.is_terminal() => {
                        if let Some(revision) = self.publish_report(&t.event_id).await {
                            reported.insert(&t.event_id, revision);
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!("MQTT: {missed} event phase changes missed while busy; catching their reports up from the book");
                        self.catch_up_reports(&mut reported).await;
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {}
                },
                event = self.incoming.recv(), if pipeline.len() < MAX_IN_FLIGHT => match event {
                    Some(event) => {
                        while ids_in_flight.contains(&event.event_id) {
                            if let Some(done) = pipeline.pop_front() {
                                self.finish(done, &mut ids_in_flight).await;
                            }
                        }
                        ids_in_flight.insert(event.event_id.clone());
                        pipeline.push_back(self.start(event));
                    }
                    None => break,
                },
                decision = front_finished(&mut pipeline), if !pipeline.is_empty() => {
                    if let Some(done) = pipeline.pop_front() {
                        ids_in_flight.remove(&done.event_id);
                        self.answer(&done.event_id, done.handle, decision).await;
                    }
                }
                _ = tick.tick() => {
                    self.publish_telemetry().await;
                    self.publish_status().await;
                }
            }
        }
        while let Some(done) = pipeline.pop_front() {
            self.finish(done, &mut ids_in_flight).await;
        }
        if let Err(e) = self.link.close(Duration::from_secs(5)).await {
            tracing::warn!("MQTT: closing: {e}");
        }
    }

    fn start(&self, event: IncomingEvent) -> InFlight {
        let IncomingEvent {
            topic,
            event_id,
            payload,
            retained,
            dup,
            refused,
            ack: handle,
        } = event;
        let intake = self.intake.clone();
        let id = event_id.clone();
        let task = tokio::spawn(async move {
            let transport = Transport::Mqtt { topic, retained, dup };
            intake.decide(&id, &payload, refused, transport).await
        });
        InFlight { event_id, handle, task }
    }

    /// PUBACK (the record is flushed) and the answer to the sender, or nothing at all when
    /// the event is left for redelivery.
    async fn finish(&self, done: InFlight, ids_in_flight: &mut HashSet<String>) {
        let InFlight { event_id, handle, task } = done;
        ids_in_flight.remove(&event_id);
        self.answer(&event_id, handle, task.await).await;
    }

    async fn answer(
        &self,
        event_id: &str,
        handle: flexgate_mqtt::AckHandle,
        decision: Result<Decision, tokio::task::JoinError>,
    ) {
        let ack = match decision {
            Ok(Decision::Answer(ack)) => ack,
            Ok(Decision::Redeliver) => return,
            Err(e) => {
                tracing::error!(event = %event_id, "MQTT event processing failed ({e}); left for redelivery");
                return;
            }
        };
        if let Err(e) = handle.ack().await {
            tracing::warn!(event = %event_id, "MQTT PUBACK: {e}");
        }
        if let Err(e) = self.link.publish_ack(&ack).await {
            tracing::warn!(event = %event_id, "MQTT ack publish: {e}");
        }
    }

    /// `dr.report/1` on `reports/{event_id}` once an event has ended (completed or
    /// cancelled), recorded in the ledger as an outbound message. Test events get none: they
    /// were never acted on.
    /// Publishes and records the `dr.report/1` of an event that has ended. Returns the revision
    /// it reported on (or that needs none: a test event), `None` when it could not.
    async fn publish_report(&self, event_id: &str) -> Option<u64> {
        let gateway = &self.intake.gateway;
        let delivery = gateway.read().event_delivery(event_id).await?;
        if delivery.test {
            return Some(delivery.revision);
        }
        let intervals = delivery
            .intervals
            .iter()
            .map(|d| ReportInterval {
                modelled_samples: u64::try_from(d.modelled_samples).unwrap_or(u64::MAX),
                ..ReportInterval::measured(d.start, d.end, d.ceiling_kw, Some(d.baseline_kw), d.mean_meter_kw)
            })
            .collect();
        let report = ReportPayload::new(
            &self.site,
            event_id,
            delivery.revision,
            intervals,
            gateway.ledger().head().1,
        );
        if let Err(e) = self.link.publish_report(&report).await {
            tracing::warn!(event = %event_id, "MQTT report publish: {e}");
            return None;
        }
        let entry = Entry::WireSent(WireSent {
            at: gateway.clock().now(),
            protocol: WireProtocol::Mqtt,
            peer: self.link.topics().report(event_id).unwrap_or_default(),
            message: "dr.report/1".into(),
            content: WireContent::Json(serde_json::to_value(&report).unwrap_or_default()),
            answer: PeerAnswer::Published,
        });
        let recorded = gateway
            .driver()
            .record(Recorded::new(entry, Some(EventId::from(event_id))))
            .await;
        if let Err(e) = recorded {
            tracing::warn!(event = %event_id, "MQTT report published but not recorded: {e}");
        }
        Some(delivery.revision)
    }

    /// After the phase-change channel lagged: publish the report of every event the book shows
    /// as ended that has not had one, so a burst cannot make a report go missing.
    async fn catch_up_reports(&self, reported: &mut Reported) {
        let views = self.intake.gateway.read().events().await;
        for (event_id, _) in reported.owed(&views) {
            if let Some(revision) = self.publish_report(&event_id).await {
                reported.insert(&event_id, revision);
            }
        }
        reported.retain_in(&views);
    }

    async fn publish_status(&self) {
        let status = self.intake.gateway.read().status().await;
        let mut payload = StatusPayload::new(&self.site, GatewayState::Online, status.at);
        payload.active_event = status.active_events.first().cloned();
        payload.meter_kw = status.measured_meter_kw();
        payload.meter_quality = status.meter_quality.map(|q| q.as_str().to_string());
        payload.gpu_board_kw = status.measured_gpu_w.map(|w| w / 1000.0);
        payload.log_checkpoint = Some(status.log_checkpoint.clone());
        payload.phase = Some(match self.intake.gateway.read().phase() {
            Some(Phase::Ramping) => flexgate_mqtt::Phase::RampingDown,
            Some(Phase::Active) => flexgate_mqtt::Phase::Holding,
            Some(Phase::Recovering) => flexgate_mqtt::Phase::RampingUp,
            _ => flexgate_mqtt::Phase::Idle,
        });
        if let Err(e) = self.link.publish_status(&payload).await {
            tracing::warn!("MQTT status publish: {e}");
        }
    }

    async fn publish_telemetry(&self) {
        let status = self.intake.gateway.read().status().await;
        let mut sample = TelemetryPayload::new(
            &self.site,
            status.at,
            status.measured_meter_kw(),
            status.measured_gpu_w.map(|w| w / 1000.0),
            status.flex_available_kw(),
        );
        sample.meter_quality = status.meter_quality.map(|q| q.as_str().to_string());
        sample.flexibility = self.intake.gateway.read().flexibility().await.map(|curve| {
            curve
                .points
                .iter()
                .map(|p| flexgate_mqtt::FlexOffer {
                    meter_shed_kw: p.meter_shed_kw,
                    progress_lost: p.progress_lost,
                    tokens_lost_per_s: p.tokens_lost_per_s,
                    jobs_capped: p.jobs_capped as u64,
                })
                .collect()
        });
        let read = self.intake.gateway.read();
        sample.forecast = read
            .forecast()
            .await
            .and_then(|f| telemetry_forecast(&f, read.config.gateway.objective.as_str()));
        if let Err(e) = self.link.publish_telemetry(&sample) {
            tracing::debug!("MQTT telemetry skipped: {e}");
        }
    }
}

/// The forecast as `dr.telemetry/1` carries it (`forecast`): the hours of the 48 (the
/// forecast's steps on the hour, as the ledger keeps them, `Forecast::hourly`), each with the
/// meter kW the site can shed within the cost ceiling at P10/P50/P90.
///
/// It goes out with **every** sample, not only when the forecast is remade: telemetry is neither
/// retained nor replayed, so a subscriber that connects, or misses a sample, would otherwise
/// wait up to 15 minutes for the next forecast, and a sample's `forecast: null` would mean both
/// "none" and "unchanged". Hourly, in kW to the watt (48 hours, about 6 KB of JSON), rather than
/// the 192 quarter-hours with their curves (over 250 KB) keeps that cheap: a sample stays well
/// under the 64 KiB a broker is advised to allow. An hour whose figures are not finite, negative
/// or out of order (the forecast makes none: it is property-tested) is left out rather than
/// sent, and a forecast without any hour left is `null`.
fn telemetry_forecast(f: &Forecast, objective: &str) -> Option<TelemetryForecast> {
    let hourly: Vec<ForecastHour> = f
        .hourly()
        .into_iter()
        .filter(|(_, b)| [b.p10, b.p50, b.p90].iter().all(|w| w.is_finite() && *w >= 0.0))
        .filter(|(_, b)| b.p10 <= b.p50 && b.p50 <= b.p90)
        .map(|(start, b)| ForecastHour {
            start,
            end: start + chrono::Duration::hours(1),
            available_kw: KwBand {
                p10: b.p10.round() / 1000.0,
                p50: b.p50.round() / 1000.0,
                p90: b.p90.round() / 1000.0,
            },
        })
        .collect();
    (!hourly.is_empty() && f.cost_ceiling.is_finite()).then(|| TelemetryForecast {
        generated_at: f.generated_at,
        cost_ceiling: f.cost_ceiling,
        objective: Some(objective.to_string()),
        hourly,
    })
}

/// The oldest event in flight's decision, once it is made. Cancel-safe: a `JoinHandle` keeps
/// its output until awaited to the end.
async fn front_finished(pipeline: &mut VecDeque<InFlight>) -> Result<Decision, tokio::task::JoinError> {
    match pipeline.front_mut() {
        Some(front) => (&mut front.task).await,
        None => std::future::pending().await,
    }
}

impl Intake {
    async fn decide(&self, event_id: &str, payload: &[u8], refused: Option<String>, transport: Transport) -> Decision {
        let topic = match &transport {
            Transport::Mqtt { topic, .. } => topic.clone(),
            _ => String::new(),
        };
        if let Some(reason) = refused {
            return self
                .refusal(&topic, event_id, payload, reason, CODE_TOO_LARGE, Counted::Here)
                .await;
        }
        let now = self.gateway.clock().now();
        // Transport-level checks first: the signature for this topic, topic/document
        // agreement, staleness.
        if let Err(why) = self
            .screen
            .admit(&topic, event_id, payload, &self.keys, self.policy, now)
        {
            let code = refusal_code(&why);
            let counted = if code == CODE_REPEAT {
                Counted::NotARefusal
            } else {
                Counted::Here
            };
            return self
                .refusal(&topic, event_id, payload, why.to_string(), code, counted)
                .await;
        }
        tracing::debug!(event = %event_id, "MQTT event: submitting");
        pause_point("mqtt_received", event_id).await;
        let submission = crate::grid::dr_event::submission(payload, transport.source());
        match self.gateway.driver().submit(submission, transport).await {
            Ok(outcome) => Decision::Answer(ack_payload(&outcome.ack)),
            Err(SubmitError::Refused { ack, .. } | SubmitError::Stale { ack, .. }) => {
                Decision::Answer(ack_payload(&ack))
            }
            Err(SubmitError::Invalid(e)) => {
                // `submit` counted it when its parse refused it.
                self.refusal(
                    &topic,
                    event_id,
                    payload,
                    e.to_string(),
                    CODE_INVALID,
                    Counted::ByIntake,
                )
                .await
            }
            Err(e @ SubmitError::Ledger(_)) => {
                tracing::error!(event = %event_id, "MQTT event not recorded, left for redelivery: {e}");
                Decision::Redeliver
            }
        }
    }

    /// A document that is not an event we can take: record it (the payload as received, when
    /// the link kept it, and the refusal with its reason), then answer with an opt-out and let
    /// the broker forget it (redelivering it would not make it valid). The ack's
    /// `log_checkpoint` and `log_seq` are the refusal's own record.
    ///
    /// A retained refusal comes back at every subscription; the records are keyed on what was
    /// refused (topic, bytes, reason), so each distinct refusal is written once. If the ledger
    /// cannot write, nothing is acknowledged and the broker redelivers, as for an event.
    async fn refusal(
        &self,
        topic: &str,
        event_id: &str,
        payload: &[u8],
        reason: String,
        code: u16,
        counted: Counted,
    ) -> Decision {
        let now = self.gateway.clock().now();
        let revision = serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .and_then(|v| v.get("revision").and_then(serde_json::Value::as_u64))
            .unwrap_or(0);
        let reason: String = reason.chars().take(1000).collect();
        let key = refusal_key(topic, payload, &reason);
        let mut records = Vec::with_capacity(2);
        if !payload.is_empty() {
            let received = Entry::WireReceived(WireReceived {
                at: now,
                protocol: WireProtocol::Mqtt,
                peer: topic.to_owned(),
                message: "dr.event/1".into(),
                content: WireContent::Text(String::from_utf8_lossy(payload).into_owned()),
            });
            records.push(Recorded::new(received, Some(EventId::from(event_id))).keyed(format!("{key}:received")));
        }
        let opted_out = Entry::AdapterOptedOut(AdapterOptedOut {
            at: now,
            protocol: WireProtocol::Mqtt,
            event_id: event_id.to_owned(),
            revision,
            code,
            reason: reason.clone(),
        });
        records.push(Recorded::new(opted_out, Some(EventId::from(event_id))).keyed(format!("{key}:opted_out")));
        let appended = self
            .gateway
            .ledger()
            .append_all(records.into_iter().map(Into::into).collect())
            .await;
        // The anchor is the refusal's own record (for a refusal recorded before, the first
        // record of it), as an event's ack is anchored on the record that holds it.
        let (checkpoint, seq) = match appended {
            Ok(appended) => match appended.last() {
                Some(last) => {
                    if !last.duplicate
                        && counted == Counted::Here
                        && let Err(e) = self.gateway.driver().count_adapter_refusal().await
                    {
                        tracing::warn!(event = %event_id, "MQTT refusal recorded but not counted: {e}");
                    }
                    (last.hash.clone(), Some(last.seq))
                }
                None => (self.gateway.ledger().head().1, None),
            },
            Err(e) => {
                tracing::error!(event = %event_id, "MQTT refusal not recorded, left for redelivery: {e}");
                return Decision::Redeliver;
            }
        };
        let shown: String = topic.chars().filter(|c| !c.is_control()).take(200).collect();
        tracing::info!(event = %event_id, topic = %shown, code, "MQTT event refused: {reason}");
        let mut ack = AckPayload::new(event_id, revision, now, Opt::Out, checkpoint);
        ack.log_seq = seq;
        ack.reason = Some(reason);
        Decision::Answer(ack)
    }
}

/// The ended events (id, revision) whose `dr.report/1` has gone out, so that reports missed
/// while the phase-change channel lagged can be found in the book and caught up.
#[derive(Debug, Default)]
struct Reported(HashSet<(String, u64)>);

impl Reported {
    /// At start, every event already over was reported by the run before (or ended before any
    /// report was owed): only what ends from now on is owed.
    fn seeded(views: &[EventView]) -> Self {
        Self(
            views
                .iter()
                .filter(|v| is_over(v))
                .map(|v| (v.id.clone(), v.revision))
                .collect(),
        )
    }

    fn insert(&mut self, event_id: &str, revision: u64) {
        self.0.insert((event_id.to_owned(), revision));
    }

    /// The ended events of `views` without a report for the revision held, in book order.
    fn owed(&self, views: &[EventView]) -> Vec<(String, u64)> {
        views
            .iter()
            .filter(|v| is_over(v) && !self.0.contains(&(v.id.clone(), v.revision)))
            .map(|v| (v.id.clone(), v.revision))
            .collect()
    }

    /// Forget events the book no longer holds, so the set stays as small as the book.
    fn retain_in(&mut self, views: &[EventView]) {
        let held: HashSet<(&str, u64)> = views.iter().map(|v| (v.id.as_str(), v.revision)).collect();
        self.0.retain(|(id, revision)| held.contains(&(id.as_str(), *revision)));
    }
}

/// Whether the event has reached an end that calls for its report.
fn is_over(view: &EventView) -> bool {
    [Phase::Completed, Phase::Cancelled, Phase::OptedOut]
        .iter()
        .any(|p| p.as_str() == view.state)
}

/// Who counts a refusal in `flexgate_events_refused_total`, so that each is counted once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counted {
    /// The bridge refused it by itself: it counts it once the refusal is recorded.
    Here,
    /// The intake's parse refused it and counted it.
    ByIntake,
    /// A stale repeat, which the HTTP API does not count as a refusal either.
    NotARefusal,
}

/// `adapter_opted_out.code` of an MQTT refusal. MQTT 3.1.1's PUBACK carries no code, so the
/// gateway records the HTTP status `POST /v1/events` answers for the same kind of refusal: one
/// filter then finds a kind of refusal whatever the transport.
const CODE_TOO_LARGE: u16 = 413;
/// Not a readable `dr.event/1` (not strict JSON, a header field malformed, the model refused it).
const CODE_INVALID: u16 = 400;
/// The signature is missing, does not verify for the topic, or cannot be checked.
const CODE_SIGNATURE: u16 = 401;
/// An equal or newer revision is held.
const CODE_REPEAT: u16 = 409;
/// Readable and authentic, but not acceptable here (another event's topic, stale, expired).
const CODE_UNACCEPTABLE: u16 = 422;

fn refusal_code(why: &Refusal) -> u16 {
    match why {
        _ if why.is_malformed() => CODE_INVALID,
        Refusal::Signature(_) => CODE_SIGNATURE,
        Refusal::Screen(r) if r.is_repeat() => CODE_REPEAT,
        Refusal::Screen(_) => CODE_UNACCEPTABLE,
    }
}

/// The de-duplication key of a refusal's records: a digest of the topic, the bytes and the
/// reason, so that the same refusal (a retained copy at every subscription) is recorded once.
fn refusal_key(topic: &str, payload: &[u8], reason: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [topic.as_bytes(), payload, reason.as_bytes()] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    format!("mqtt-refusal:{}", hex::encode(hash.finalize()))
}

/// Crash drills (debug builds only): with `FLEXGATE_PAUSE_AT=mqtt_received:{event_id}` the
/// event's processing stops forever right after receipt, before anything is recorded, and
/// says so on stderr, so that a test can SIGKILL the process exactly between receipt and
/// flush. Release builds compile this to nothing.
async fn pause_point(point: &str, event_id: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("FLEXGATE_PAUSE_AT").is_ok_and(|v| v == format!("{point}:{event_id}")) {
        eprintln!("flexgate: paused at {point} for {event_id}");
        std::future::pending::<()>().await;
    }
    let _ = (point, event_id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexgate_mqtt::{Rejection, SignatureError};

    fn view(id: &str, revision: u64, phase: Phase) -> EventView {
        EventView {
            id: id.into(),
            revision,
            state: phase.as_str().into(),
            test: false,
            ceiling_w: None,
            lowest_ceiling_w: None,
            start: chrono::DateTime::UNIX_EPOCH,
            pre_event_meter_w: 0.0,
            phases: Vec::new(),
        }
    }

    #[test]
    fn reports_missed_in_a_lag_are_found_in_the_book_once() {
        let at_start = [
            view("done-before", 1, Phase::Completed),
            view("running", 1, Phase::Active),
        ];
        let mut reported = Reported::seeded(&at_start);
        assert!(
            reported.owed(&at_start).is_empty(),
            "what ended before this run is not owed again"
        );

        // A burst: "running" completed, "late" was cancelled, "pending" has not ended.
        let book = [
            view("done-before", 1, Phase::Completed),
            view("running", 1, Phase::Completed),
            view("late", 3, Phase::Cancelled),
            view("pending", 1, Phase::Pending),
        ];
        assert_eq!(
            reported.owed(&book),
            vec![("running".to_string(), 1), ("late".to_string(), 3)]
        );
        reported.insert("running", 1);
        reported.insert("late", 3);
        assert!(reported.owed(&book).is_empty());

        // A new revision of an ended event ends again: owed again.
        let revived = [view("running", 2, Phase::OptedOut)];
        assert_eq!(reported.owed(&revived), vec![("running".to_string(), 2)]);
        // The set shrinks with the book.
        reported.retain_in(&revived);
        assert!(reported.0.is_empty());
    }

    #[test]
    fn refusals_are_coded_as_the_http_api_answers_them() {
        let malformed = Refusal::Signature(SignatureError::Json("duplicate key".into()));
        assert_eq!(refusal_code(&malformed), 400);
        assert_eq!(refusal_code(&Refusal::Signature(SignatureError::Missing)), 401);
        let mismatch = Refusal::Screen(Rejection::TopicMismatch {
            in_topic: "a".into(),
            in_document: "b".into(),
        });
        assert_eq!(refusal_code(&mismatch), 422);
        let repeat = Refusal::Screen(Rejection::Duplicate {
            event_id: "a".into(),
            revision: 1,
        });
        assert_eq!(refusal_code(&repeat), 409);
    }

    use crate::grid::test_forecast::forecast;

    #[test]
    fn the_forecast_goes_out_by_the_hour_in_kw() {
        let f = forecast(|k| 1_000_000.0 - 1000.0 * k as f64);
        let t = telemetry_forecast(&f, "progress").expect("a forecast");
        assert_eq!((t.generated_at, t.cost_ceiling), (f.generated_at, 0.1));
        assert_eq!(t.objective.as_deref(), Some("progress"));
        assert_eq!(t.hourly.len(), 48);
        for (h, hour) in t.hourly.iter().enumerate() {
            assert_eq!(hour.start, f.steps[4 * h].start);
            assert_eq!(hour.end - hour.start, chrono::Duration::hours(1));
            let b = hour.available_kw;
            assert!((b.p10 - (1000.0 - 4.0 * h as f64)).abs() < 1e-9, "{b:?}");
            assert!(b.p10 <= b.p50 && b.p50 <= b.p90, "{b:?}");
        }
        // Cheap enough for every sample: a few KB, where the quarter-hours with their curves
        // would be a hundred times that.
        let sent = flexgate_mqtt::payloads::to_json(&t).unwrap().len();
        let whole = serde_json::to_vec(&f).unwrap().len();
        assert!(sent < 8 * 1024, "{sent} bytes");
        assert!(whole > 20 * sent, "{whole} bytes against {sent}");
    }

    #[test]
    fn a_forecast_figure_that_json_cannot_carry_leaves_its_hour_out() {
        let f = forecast(|k| match k {
            4 => f64::NAN,
            8 => f64::INFINITY,
            12 => -5.0,
            _ => 500_000.0,
        });
        let t = telemetry_forecast(&f, "tokens").expect("the other hours");
        assert_eq!(t.hourly.len(), 45);
        assert!(
            !t.hourly
                .iter()
                .any(|h| [f.steps[4].start, f.steps[8].start, f.steps[12].start].contains(&h.start))
        );
        let mut sample = TelemetryPayload::new("s", f.generated_at, None, None, None);
        sample.forecast = Some(t);
        flexgate_mqtt::payloads::to_json(&sample).expect("serialises");
        // Out of order: left out too.
        let mut f = forecast(|_| 500_000.0);
        f.steps[0].available_w.p50 = 400_000.0;
        assert_eq!(telemetry_forecast(&f, "progress").unwrap().hourly.len(), 47);
        // Nothing left, or no steps at all: no forecast.
        let f = forecast(|_| f64::NAN);
        assert!(telemetry_forecast(&f, "progress").is_none());
        let mut f = forecast(|_| 1.0);
        f.steps.clear();
        assert!(telemetry_forecast(&f, "progress").is_none());
    }

    #[test]
    fn refusal_keys_separate_their_parts() {
        assert_ne!(refusal_key("ab", b"c", "r"), refusal_key("a", b"bc", "r"));
        assert_eq!(refusal_key("a", b"b", "r"), refusal_key("a", b"b", "r"));
    }
}
