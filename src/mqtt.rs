//! MQTT wiring: `dr.event/1` events from `{prefix}/{site}/events/+` into the gateway, and acks,
//! retained status, telemetry out.
//!
//! The protocol work (topics, payloads, signatures, the persistent session with manual acks)
//! lives in `flexgate-mqtt`; this task only connects it to the gateway, keeping the one rule
//! that matters: the broker gets its PUBACK only after the gateway's ledger has flushed the
//! event and its acknowledgment, so a crash in between means redelivery, never loss, and the
//! ledger's de-duplication makes the redelivery harmless.

use crate::config::{Config, MqttConfig};
use crate::runtime::{Gateway, SubmitError, Transport};
use chrono::Utc;
use flexgate_mqtt::{
    AckPayload, GatewayState, IncomingEvent, KwRange, MqttLink, MqttSettings, Opt, Screen, Secret, SignaturePolicy,
    StatusPayload, TelemetryPayload, TlsFiles, Topics, TrustedKeys,
};
use flexgate_policies::event::{DrAck, Opt as DrOpt};
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

/// The MQTT task.
pub struct MqttBridge {
    gateway: Arc<Gateway>,
    link: MqttLink,
    incoming: flexgate_mqtt::Incoming,
    site: String,
    keys: TrustedKeys,
    policy: SignaturePolicy,
    screen: Screen,
    telemetry_every: Duration,
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
        let policy = match cfg.signatures.as_str() {
            "required" => SignaturePolicy::Required,
            "off" => SignaturePolicy::Off,
            _ => SignaturePolicy::Optional,
        };
        let keys = TrustedKeys::parse(&cfg.trusted_keys).map_err(|e| bad(&e))?;
        let (link, incoming) = MqttLink::connect(settings).map_err(|e| bad(&e))?;
        Ok(MqttBridge {
            gateway,
            link,
            incoming,
            site,
            keys,
            policy,
            screen: Screen::default(),
            telemetry_every: Duration::from_secs(cfg.telemetry_interval_s),
        })
    }

    /// Runs until `stop` turns true, then says goodbye (retained offline status, no Will).
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        self.publish_status().await;
        let mut tick = tokio::time::interval(self.telemetry_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tokio::select! {
                () = async { let _ = stop.wait_for(|s| *s).await; } => break,
                event = self.incoming.recv() => match event {
                    Some(event) => self.handle(event).await,
                    None => break,
                },
                _ = tick.tick() => {
                    self.publish_telemetry().await;
                    self.publish_status().await;
                }
            }
        }
        if let Err(e) = self.link.close(Duration::from_secs(5)).await {
            tracing::warn!("MQTT: closing: {e}");
        }
    }

    async fn handle(&mut self, event: IncomingEvent) {
        let IncomingEvent {
            topic,
            event_id,
            payload,
            retained,
            dup,
            refused,
            ack: handle,
        } = event;
        if let Some(reason) = refused {
            self.refuse(&event_id, &payload, handle, reason).await;
            return;
        }
        let now = self.gateway.clock().now();
        // Transport-level checks first: signature, topic/document agreement, staleness.
        let screened = flexgate_mqtt::signature::verify(&payload, &self.keys, self.policy)
            .map_err(|e| format!("signature: {e}"))
            .and_then(|_| self.screen.check(&event_id, &payload, now).map_err(|e| e.to_string()));
        if let Err(reason) = screened {
            self.refuse(&event_id, &payload, handle, reason).await;
            return;
        }
        let transport = Transport::Mqtt { topic, retained, dup };
        tracing::debug!(event = %event_id, "MQTT event: submitting");
        let ack = match self.gateway.submit_event(&payload, transport).await {
            Ok(outcome) => outcome.ack,
            Err(SubmitError::Refused { ack, .. } | SubmitError::Stale { ack, .. }) => *ack,
            Err(SubmitError::Invalid(e)) => {
                self.refuse(&event_id, &payload, handle, e.to_string()).await;
                return;
            }
            Err(e @ SubmitError::Ledger(_)) => {
                // Not recorded: no PUBACK, so the broker redelivers it later.
                tracing::error!(event = %event_id, "MQTT event not recorded, left for redelivery: {e}");
                drop(handle);
                return;
            }
        };
        // Recorded and flushed: now the broker may forget it.
        tracing::debug!(event = %event_id, "MQTT event: recorded, acking");
        if let Err(e) = handle.ack().await {
            tracing::warn!(event = %event_id, "MQTT PUBACK: {e}");
        }
        if let Err(e) = self.link.publish_ack(&ack_payload(&ack)).await {
            tracing::warn!(event = %event_id, "MQTT ack publish: {e}");
        }
    }

    /// A document that is not an event we can take: answer with an opt-out and let the broker
    /// forget it (redelivering it would not make it valid).
    async fn refuse(&self, event_id: &str, payload: &[u8], handle: flexgate_mqtt::AckHandle, reason: String) {
        let revision = serde_json::from_slice::<serde_json::Value>(payload)
            .ok()
            .and_then(|v| v.get("revision").and_then(serde_json::Value::as_u64))
            .unwrap_or(0);
        let mut ack = AckPayload::new(event_id, revision, Utc::now(), Opt::Out, self.gateway.ledger().head().1);
        ack.reason = Some(reason.chars().take(1000).collect());
        if let Err(e) = handle.ack().await {
            tracing::warn!(event = %event_id, "MQTT PUBACK: {e}");
        }
        if let Err(e) = self.link.publish_ack(&ack).await {
            tracing::warn!(event = %event_id, "MQTT refusal publish: {e}");
        }
    }

    async fn publish_status(&self) {
        let status = self.gateway.status().await;
        let mut payload = StatusPayload::new(&self.site, GatewayState::Online, status.at);
        payload.active_event = status.active_events.first().cloned();
        payload.meter_kw = status.measured_meter_kw;
        payload.gpu_board_kw = status.measured_gpu_w.map(|w| w / 1000.0);
        payload.log_checkpoint = Some(status.log_checkpoint.clone());
        payload.phase = Some(match status.phase.as_deref() {
            Some("ramping") => flexgate_mqtt::Phase::RampingDown,
            Some("active") => flexgate_mqtt::Phase::Holding,
            Some("recovering") => flexgate_mqtt::Phase::RampingUp,
            _ => flexgate_mqtt::Phase::Idle,
        });
        if let Err(e) = self.link.publish_status(&payload).await {
            tracing::warn!("MQTT status publish: {e}");
        }
    }

    async fn publish_telemetry(&self) {
        let status = self.gateway.status().await;
        let sample = TelemetryPayload::new(
            &self.site,
            status.at,
            status.measured_meter_kw,
            status.measured_gpu_w.map(|w| w / 1000.0),
            None,
        );
        if let Err(e) = self.link.publish_telemetry(&sample) {
            tracing::debug!("MQTT telemetry skipped: {e}");
        }
    }
}

/// The gateway's recorded `dr.ack/1` as the MQTT payload type (same schema).
fn ack_payload(ack: &DrAck) -> AckPayload {
    let opt = match ack.opt {
        DrOpt::In => Opt::In,
        DrOpt::Out => Opt::Out,
    };
    let mut payload = AckPayload::new(
        &ack.event_id,
        ack.revision,
        ack.received_at,
        opt,
        ack.log_checkpoint.clone(),
    );
    payload.reason = ack.reason.clone();
    payload.accepted_target_kw = ack.accepted_target_kw;
    payload.expected_meter_kw = ack.expected_meter_kw.as_ref().map(|r| KwRange { lo: r.lo, hi: r.hi });
    payload
}
