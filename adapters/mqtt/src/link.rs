//! The connection to the broker: one rumqttc event loop in a tokio task, with a persistent
//! session, manual acknowledgements, a Last Will, resubscription on every ConnAck and
//! reconnection with capped exponential backoff.
//!
//! # Ack after flush
//!
//! Events arrive as [`IncomingEvent`]s, each with an [`AckHandle`]. The PUBACK goes to the
//! broker only when the application calls [`AckHandle::ack`], which it does after the event is
//! durably recorded. Until then the broker keeps the message in the client's session (clean
//! session is off), so a crash or a disconnect before the ack means redelivery, never loss:
//!
//! - dropping an `AckHandle` without acking sends nothing; the broker redelivers the message
//!   after the next reconnect (MQTT 3.1.1 §4.4);
//! - a handle from before a reconnect acks nothing ([`AckOutcome::Stale`]): the broker
//!   redelivers that message on the new connection, where it gets a new handle. The
//!   application's de-duplication then recognizes it and acks the new copy;
//! - acks are sent in the order the application calls `ack`; handling events in arrival order
//!   keeps the order MQTT asks for.
//!
//! # Back-pressure, and why the event loop never waits for the application
//!
//! rumqttc's event loop does everything: it reads publishes *and* sends the application's
//! PUBACKs, ack publishes and pings. If it waited for room in the application's queue while
//! the application waited for room in the request queue (to send the PUBACKs that would let
//! the broker stop sending), both would stall for good: each poll can read a batch of
//! publishes but sends one request, so under a burst the requests fall behind. So the event
//! loop only ever *hands over*:
//!
//! - QoS 1 and 2 events always go into the application's queue. That queue is bounded by the
//!   protocol, not by a setting: the broker sends no more unacknowledged messages than its
//!   in-flight window (Mosquitto's `max_inflight_messages`, 20 by default), and never more than
//!   the 65,535 packet ids a session has, and the application acks only after recording;
//! - QoS 0 events (at-most-once: losing one is allowed) are dropped and counted once
//!   [`MqttSettings::channel_capacity`] events (default 32) are waiting.

//! # What the link refuses by itself
//!
//! A publish whose topic is not `{prefix}/{site}/events/{event_id}` with a valid id, or with an
//! empty payload (MQTT's way to clear a retained message: cancelling an event takes a revision
//! with `cancel: true`), is acknowledged (so that it does not come back forever), logged and
//! counted in [`LinkStats`], and not passed on. A payload over [`MqttSettings::max_payload`]
//! is passed on without its bytes and with [`IncomingEvent::refused`] set, so the application
//! can answer the sender and then ack it.
//!
//! # No message can stop the link
//!
//! The link reads every packet MQTT 3.1.1 can carry: its incoming limit is the protocol's
//! largest remaining length, [`MAX_PACKET_REMAINING_LENGTH`] (268,435,455 bytes, §2.2.3), the
//! most a broker can send. This is deliberate. rumqttc refuses a packet above its limit by
//! dropping the connection, before the packet id is read; the broker keeps the unacknowledged
//! message in the persistent session (or, retained, sends it again on the next subscription),
//! delivers it again on reconnection, and the link would fail again, forever: one publish
//! stopped all intake (the link's limit was once 1 MiB). MQTT 3.1.1 gives a client no other
//! way out (MQTT 5's Maximum Packet Size makes the broker drop such a message for the client,
//! but then no one hears why; rumqttc's MQTT 5 client is another API, and not every broker the
//! gateway meets speaks 5). So the link takes any packet, measures it, frees its bytes at once
//! and lets the application refuse it with a PUBACK, which ends the redeliveries.
//!
//! Nothing is beyond that limit: the remaining length is a variable-length integer of at most
//! four bytes, and a longer one is a malformed packet, which only a broken broker sends (the
//! connection then fails and is retried with backoff like any other failure). What a huge
//! message costs is memory while it is read, one at a time: bound it at the broker, whose
//! `message_size_limit` (Mosquitto; `max_packet_size` for MQTT 5 clients) drops an oversized
//! publish before any subscriber sees it.

use bytes::Bytes;
use chrono::Utc;
use rumqttc::{
    AsyncClient, ClientError, ConnectReturnCode, ConnectionError, Event, EventLoop, LastWill, MqttOptions,
    NetworkOptions, Outgoing, Packet, Publish, QoS, StateError, SubscribeReasonCode, TlsConfiguration, Transport,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::payloads::{
    AckPayload, GatewayState, PayloadError, ReportPayload, StatusPayload, TelemetryPayload, to_json,
};
use crate::settings::{Backoff, MqttSettings, SettingsError};
use crate::tls::{TlsError, client_config, handshake_hint};
use crate::topics::{TopicError, Topics};

/// Requests (publishes, acks, subscriptions) queued for the event loop.
const REQUEST_QUEUE: usize = 1024;

/// The largest remaining length an MQTT 3.1.1 packet can declare (four 7-bit groups, §2.2.3),
/// and the link's incoming limit (see the module docs: a smaller one lets one message stop the
/// link).
pub const MAX_PACKET_REMAINING_LENGTH: usize = 268_435_455;

/// Why a link could not start or a request could not be queued.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// A setting is unusable.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The TLS files are unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A topic could not be built (an event id that is not a valid topic level).
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// A payload could not be serialized.
    #[error(transparent)]
    Payload(#[from] PayloadError),
    /// The link was closed; nothing more can be sent.
    #[error("the MQTT link is closed")]
    Closed,
    /// The outgoing queue is full (the broker is unreachable or slow); the message was not
    /// queued. Only the non-blocking publisher ([`MqttLink::publish_telemetry`]) returns this.
    #[error("the MQTT outgoing queue is full (is the broker reachable?); the message was not queued")]
    Busy,
}

impl From<ClientError> for LinkError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::TryRequest(_) => LinkError::Busy,
            ClientError::Request(_) => LinkError::Closed,
        }
    }
}

/// The connection as the application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionState {
    /// The first connection attempt has not finished.
    Connecting,
    /// Connected. `session_present` says whether the broker still had the persistent
    /// session; false after a broker restart without persistence, when messages published
    /// while the gateway was away are lost at the broker (retained events still come back).
    Connected {
        /// From the ConnAck.
        session_present: bool,
        /// Whether the broker has acknowledged the event subscription on this connection
        /// (until then, live events published now may not reach the gateway).
        subscribed: bool,
    },
    /// Not connected; the reason is worded for an operator, and another attempt follows.
    Disconnected {
        /// What went wrong (bad credentials, not authorized, connection refused, TLS, …).
        reason: String,
        /// Which consecutive failure this is (1-based).
        attempt: u32,
    },
    /// [`MqttLink::close`] or [`MqttLink::abort`] was called.
    Closed,
}

/// Counters of what the link did, for metrics and tests.
#[derive(Debug, Default)]
pub struct LinkStats {
    /// Event publishes passed to the application.
    pub delivered: AtomicU64,
    /// Publishes acknowledged and dropped by the link (bad topic, empty payload), and QoS 0
    /// publishes dropped because the application's queue was full. (An oversized payload is
    /// not dropped: it is delivered, refused, for the application to answer.)
    pub dropped: AtomicU64,
    /// ConnAcks received (the first connection included).
    pub connects: AtomicU64,
    /// Subscriptions the broker refused (SubAck failure: usually an ACL).
    pub refused_subscriptions: AtomicU64,
}

/// Result of [`AckHandle::ack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The PUBACK is queued on the connection that delivered the message (or the message was
    /// QoS 0 and needs none).
    Sent,
    /// The connection that delivered the message is gone: nothing was sent, and the broker
    /// will redeliver the message (with a new handle).
    Stale,
}

/// The right to acknowledge one received publish. See the module docs for the contract.
#[must_use = "an event that is never acked is redelivered after every reconnect"]
#[derive(Debug)]
pub struct AckHandle {
    client: AsyncClient,
    publish: Publish,
    generation: u64,
    current: Arc<AtomicU64>,
}

impl AckHandle {
    /// Sends the PUBACK. Call it only after the event's record is flushed.
    ///
    /// It returns once the PUBACK is queued for the connection (waiting while the request
    /// queue is full). If that connection fails before the PUBACK is written, the broker
    /// redelivers the message: a duplicate for the application to recognize, never a loss.
    pub async fn ack(self) -> Result<AckOutcome, LinkError> {
        if self.current.load(Ordering::SeqCst) != self.generation {
            return Ok(AckOutcome::Stale);
        }
        self.client.ack(&self.publish).await.map_err(LinkError::from)?;
        Ok(AckOutcome::Sent)
    }

    /// The MQTT packet id (0 for QoS 0).
    #[must_use]
    pub fn packet_id(&self) -> u16 {
        self.publish.pkid
    }
}

/// One received event publish.
#[derive(Debug)]
pub struct IncomingEvent {
    /// The full topic.
    pub topic: String,
    /// The event id taken from the topic (checked against the topic rules).
    pub event_id: String,
    /// The raw document, for signature verification and parsing.
    pub payload: Bytes,
    /// Whether this is the broker's retained copy (sent on subscribe) rather than a live
    /// publish.
    pub retained: bool,
    /// The MQTT DUP flag: the broker may have sent this message before.
    pub dup: bool,
    /// Set when the link already knows this publish cannot be an event (its payload is over
    /// [`MqttSettings::max_payload`]): `payload` is then empty, and the application should
    /// answer with a refusal carrying this reason, then ack.
    pub refused: Option<String>,
    /// Acknowledge after the ledger flush.
    pub ack: AckHandle,
}

/// The receiving side of a link.
#[derive(Debug)]
pub struct Incoming {
    rx: mpsc::UnboundedReceiver<IncomingEvent>,
    waiting: Arc<AtomicUsize>,
}

impl Incoming {
    /// The next event; `None` once the link is closed or dropped.
    pub async fn recv(&mut self) -> Option<IncomingEvent> {
        let event = self.rx.recv().await;
        if event.is_some() {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
        event
    }

    /// Events received and not yet taken by [`Incoming::recv`].
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Aborts the event loop task when the last [`MqttLink`] clone goes away.
#[derive(Debug)]
struct TaskGuard(Mutex<Option<JoinHandle<()>>>);

impl TaskGuard {
    fn take(&self) -> Option<JoinHandle<()>> {
        lock(&self.0).take()
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        if let Some(task) = self.take() {
            task.abort();
        }
    }
}

#[derive(Debug)]
struct Shared {
    client: AsyncClient,
    topics: Topics,
    /// The latest status the application published; republished on every ConnAck.
    status: Arc<Mutex<Option<StatusPayload>>>,
    state: watch::Receiver<ConnectionState>,
    state_tx: Arc<watch::Sender<ConnectionState>>,
    stats: Arc<LinkStats>,
    task: TaskGuard,
}

/// A connection to the broker. Cheap to clone; the connection ends at [`MqttLink::close`]
/// (orderly: the status turns `offline`, no Will) or when the last clone is dropped or
/// [`MqttLink::abort`] is called (abrupt: the broker publishes the Last Will, a retained
/// `offline` status).
#[derive(Debug, Clone)]
pub struct MqttLink {
    shared: Arc<Shared>,
}

impl MqttLink {
    /// Checks the settings, builds the TLS configuration, and starts the event loop task,
    /// which connects, and keeps reconnecting, in the background. Must be called within a
    /// tokio runtime. Errors here are configuration errors; connection failures show in
    /// [`MqttLink::state`] and in the log.
    pub fn connect(settings: MqttSettings) -> Result<(MqttLink, Incoming), LinkError> {
        settings.check()?;
        let options = options(&settings)?;
        let (client, mut eventloop) = AsyncClient::new(options, REQUEST_QUEUE);
        eventloop.set_network_options(network_options(&settings));
        let (tx, rx) = mpsc::unbounded_channel();
        let waiting = Arc::new(AtomicUsize::new(0));
        let (state_tx, state_rx) = watch::channel(ConnectionState::Connecting);
        let state_tx = Arc::new(state_tx);
        let stats = Arc::new(LinkStats::default());
        let status = Arc::new(Mutex::new(None));
        let runner = Runner {
            client: client.clone(),
            topics: settings.topics.clone(),
            max_payload: settings.max_payload,
            backoff: settings.backoff,
            broker: settings.broker.to_string(),
            tls: settings.broker.tls,
            tx,
            waiting: waiting.clone(),
            qos0_capacity: settings.channel_capacity,
            state: state_tx.clone(),
            stats: stats.clone(),
            generation: Arc::new(AtomicU64::new(0)),
            status: status.clone(),
        };
        let task = tokio::spawn(runner.run(eventloop));
        let link = MqttLink {
            shared: Arc::new(Shared {
                client,
                topics: settings.topics,
                status,
                state: state_rx,
                state_tx,
                stats,
                task: TaskGuard(Mutex::new(Some(task))),
            }),
        };
        Ok((link, Incoming { rx, waiting }))
    }

    /// The topic tree this link serves.
    #[must_use]
    pub fn topics(&self) -> &Topics {
        &self.shared.topics
    }

    /// The connection state, to watch (e.g. to report `degraded` or to wait for a connection).
    #[must_use]
    pub fn state(&self) -> watch::Receiver<ConnectionState> {
        self.shared.state.clone()
    }

    /// Counters of received publishes and connections.
    #[must_use]
    pub fn stats(&self) -> &LinkStats {
        &self.shared.stats
    }

    /// Waits, at most `timeout`, until the link is connected and the broker has acknowledged
    /// the event subscription; returns the ConnAck's `session_present`, or `None` on timeout
    /// (e.g. the broker refuses the subscription) or when the link is closed.
    pub async fn wait_connected(&self, timeout: Duration) -> Option<bool> {
        let mut state = self.state();
        let wait = state.wait_for(|s| {
            matches!(
                s,
                ConnectionState::Connected { subscribed: true, .. } | ConnectionState::Closed
            )
        });
        match tokio::time::timeout(timeout, wait).await {
            Ok(Ok(s)) => match &*s {
                ConnectionState::Connected { session_present, .. } => Some(*session_present),
                _ => None,
            },
            _ => None,
        }
    }

    /// Publishes a `dr.ack/1` on `acks/{event_id}` (QoS 1, not retained). Waits while the
    /// outgoing queue is full.
    pub async fn publish_ack(&self, ack: &AckPayload) -> Result<(), LinkError> {
        let topic = self.shared.topics.ack(&ack.event_id)?;
        self.publish(topic, to_json(ack)?, false).await
    }

    /// Publishes the retained `dr.status/1` (QoS 1) and remembers it: the link republishes the
    /// latest status (with a fresh `ts`) after every reconnect, replacing the Last Will's
    /// `offline`. A status goes out only once the broker has acknowledged the event
    /// subscription (until then it is kept and sent at the SubAck), so a utility that sees the
    /// gateway online can publish an event and know it will be received.
    pub async fn publish_status(&self, status: &StatusPayload) -> Result<(), LinkError> {
        let bytes = to_json(status)?;
        *lock(&self.shared.status) = Some(status.clone());
        if !matches!(
            *self.state().borrow(),
            ConnectionState::Connected { subscribed: true, .. }
        ) {
            return Ok(());
        }
        self.publish(self.shared.topics.status(), bytes, true).await
    }

    /// Publishes a `dr.telemetry/1` sample (QoS 1, not retained) without waiting: when the
    /// outgoing queue is full (broker unreachable), the sample is refused with
    /// [`LinkError::Busy`] rather than stalling the caller's sampling loop.
    pub fn publish_telemetry(&self, sample: &TelemetryPayload) -> Result<(), LinkError> {
        let bytes = to_json(sample)?;
        self.shared
            .client
            .try_publish(self.shared.topics.telemetry(), QoS::AtLeastOnce, false, bytes)
            .map_err(LinkError::from)
    }

    /// Publishes a `dr.report/1` on `reports/{event_id}` (QoS 1, not retained).
    pub async fn publish_report(&self, report: &ReportPayload) -> Result<(), LinkError> {
        let topic = self.shared.topics.report(&report.event_id)?;
        self.publish(topic, to_json(report)?, false).await
    }

    async fn publish(&self, topic: String, bytes: Vec<u8>, retain: bool) -> Result<(), LinkError> {
        self.shared
            .client
            .publish(topic, QoS::AtLeastOnce, retain, bytes)
            .await
            .map_err(LinkError::from)
    }

    /// Orderly shutdown: publishes the retained `offline` status (based on the latest status),
    /// disconnects (so the broker does not publish the Will; the session stays, and unacked
    /// events are redelivered at the next start) and waits up to `timeout` for the event loop
    /// to finish.
    pub async fn close(&self, timeout: Duration) -> Result<(), LinkError> {
        let mut offline = lock(&self.shared.status)
            .clone()
            .unwrap_or_else(|| StatusPayload::offline(self.shared.topics.site(), Utc::now()));
        offline.state = GatewayState::Offline;
        offline.ts = Utc::now();
        offline.phase = None;
        *lock(&self.shared.status) = Some(offline.clone());
        let sent = async {
            self.publish(self.shared.topics.status(), to_json(&offline)?, true)
                .await?;
            self.shared.client.disconnect().await.map_err(LinkError::from)
        };
        let result = tokio::time::timeout(timeout, sent)
            .await
            .unwrap_or(Err(LinkError::Busy));
        if let Some(task) = self.shared.task.take() {
            let abort = task.abort_handle();
            if tokio::time::timeout(timeout, task).await.is_err() {
                abort.abort();
            }
        }
        self.shared.state_tx.send_replace(ConnectionState::Closed);
        result
    }

    /// Abrupt end, as in a crash: stops the event loop without a DISCONNECT, so the broker
    /// publishes the Last Will. For crash drills and tests; [`MqttLink::close`] is the orderly
    /// way.
    pub fn abort(&self) {
        if let Some(task) = self.shared.task.take() {
            task.abort();
        }
        self.shared.state_tx.send_replace(ConnectionState::Closed);
    }
}

/// The rumqttc options: persistent session, manual acks, Last Will, credentials, TLS.
fn options(settings: &MqttSettings) -> Result<MqttOptions, LinkError> {
    let broker = &settings.broker;
    let mut options = MqttOptions::new(settings.client_id.clone(), broker.host.clone(), broker.port);
    options
        .set_keep_alive(settings.keep_alive)
        .set_clean_session(false)
        .set_manual_acks(true)
        .set_request_channel_capacity(REQUEST_QUEUE)
        .set_max_packet_size(MAX_PACKET_REMAINING_LENGTH, outgoing_limit(settings.max_payload))
        .set_last_will(will(&settings.topics));
    if let Some(user) = &settings.username {
        let password = settings
            .password
            .as_ref()
            .map(|p| p.expose().to_owned())
            .unwrap_or_default();
        options.set_credentials(user.clone(), password);
    }
    if broker.tls {
        let config = client_config(&settings.tls.clone().unwrap_or_default())?;
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(Arc::new(config))));
    }
    Ok(options)
}

/// TCP and timeout options. Nagle's algorithm is off: a PUBACK or an ack is a few dozen bytes
/// that must leave at once (with it on, a small write waiting behind an unacknowledged one
/// can sit out the peer's delayed-ACK timer, 40 ms on Linux). The connect timeout also bounds
/// how long a write may block.
fn network_options(settings: &MqttSettings) -> NetworkOptions {
    let mut network = NetworkOptions::new();
    network.set_tcp_nodelay(true);
    network.set_connection_timeout(settings.connect_timeout_s);
    network
}

/// Largest packet the link writes: its own documents (acks, status, telemetry, reports) are
/// far smaller; the limit only keeps a runaway report from being sent at all.
fn outgoing_limit(max_payload: usize) -> usize {
    max_payload.saturating_mul(4).max(1 << 20)
}

/// The Last Will: the retained `offline` status, stamped with the time of the connection that
/// registers it.
fn will(topics: &Topics) -> LastWill {
    let offline = StatusPayload::offline(topics.site(), Utc::now());
    // Serializing a status without numbers cannot fail; an empty Will would still clear the
    // retained status, which is the next best signal.
    let bytes = to_json(&offline).unwrap_or_default();
    LastWill::new(topics.status(), bytes, QoS::AtLeastOnce, true)
}

/// Words a connection failure for an operator.
pub fn explain_connection_error(e: &ConnectionError, broker: &str, tls: bool) -> String {
    let text = match e {
        ConnectionError::ConnectionRefused(code) => match code {
            ConnectReturnCode::BadUserNamePassword => {
                format!("{broker} refused the connection: bad user name or password (check username and password)")
            }
            ConnectReturnCode::NotAuthorized => format!(
                "{broker} refused the connection: not authorized (the broker does not allow this client id or user)"
            ),
            ConnectReturnCode::BadClientId => {
                format!("{broker} refused the client id (some brokers accept only 1-23 characters [0-9a-zA-Z])")
            }
            ConnectReturnCode::ServiceUnavailable => format!("{broker} refused the connection: service unavailable"),
            ConnectReturnCode::RefusedProtocolVersion => {
                format!("{broker} refused the connection: it does not accept MQTT 3.1.1")
            }
            ConnectReturnCode::Success => format!("{broker}: unexpected refusal with code Success"),
        },
        ConnectionError::Io(io) => explain_io(io, broker),
        ConnectionError::MqttState(StateError::Io(io)) => explain_io(io, broker),
        ConnectionError::MqttState(StateError::ConnectionAborted) => format!(
            "{broker} closed the connection (another client with the same client id may have taken over the \
             session, or the broker refused a packet)"
        ),
        ConnectionError::MqttState(StateError::AwaitPingResp) => {
            format!("{broker} stopped answering pings; the connection is presumed dead")
        }
        ConnectionError::NetworkTimeout => format!("{broker} did not complete the connection in time"),
        ConnectionError::Tls(t) => format!("TLS with {broker} failed: {t}"),
        ConnectionError::NotConnAck(p) => {
            format!("{broker} answered CONNECT with {p:?} instead of CONNACK (is this an MQTT port?)")
        }
        other => format!("{broker}: {other}"),
    };
    let hint = if tls { handshake_hint(&text) } else { "" };
    let plain_to_tls = if !tls && matches!(e, ConnectionError::MqttState(StateError::Deserialization(_))) {
        " (the broker's answer is not MQTT: if the port expects TLS, use mqtts://)"
    } else {
        ""
    };
    format!("{text}{hint}{plain_to_tls}")
}

fn explain_io(io: &std::io::Error, broker: &str) -> String {
    use std::io::ErrorKind;
    match io.kind() {
        ErrorKind::ConnectionRefused => {
            format!("connection refused: nothing listens at {broker} (is the broker running, and is the port right?)")
        }
        ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof | ErrorKind::ConnectionAborted => format!(
            "{broker} closed the connection ({io}); another client with the same client id may have taken over \
             the session"
        ),
        _ => {
            // rustls errors come wrapped in io::Error.
            let inner = io.get_ref().map(ToString::to_string).unwrap_or_else(|| io.to_string());
            format!("{broker}: {inner}")
        }
    }
}

/// The event loop task's state.
struct Runner {
    client: AsyncClient,
    topics: Topics,
    max_payload: usize,
    backoff: Backoff,
    broker: String,
    tls: bool,
    tx: mpsc::UnboundedSender<IncomingEvent>,
    /// Events handed over and not yet received by the application.
    waiting: Arc<AtomicUsize>,
    /// QoS 0 events are dropped once this many are waiting.
    qos0_capacity: usize,
    state: Arc<watch::Sender<ConnectionState>>,
    stats: Arc<LinkStats>,
    /// Incremented on every ConnAck; an AckHandle from an older generation acks nothing.
    generation: Arc<AtomicU64>,
    status: Arc<Mutex<Option<StatusPayload>>>,
}

impl Runner {
    async fn run(self, mut eventloop: EventLoop) {
        let mut failures: u32 = 0;
        let mut connected = false;
        loop {
            if !connected {
                // A fresh `ts` in the Will of each new connection.
                eventloop.mqtt_options.set_last_will(will(&self.topics));
            }
            match eventloop.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                    connected = true;
                    failures = 0;
                    self.generation.fetch_add(1, Ordering::SeqCst);
                    self.stats.connects.fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        broker = %self.broker,
                        session_present = ack.session_present,
                        "MQTT connected; subscribing to {}",
                        self.topics.events_filter()
                    );
                    self.state.send_replace(ConnectionState::Connected {
                        session_present: ack.session_present,
                        subscribed: false,
                    });
                    self.after_connack();
                }
                Ok(Event::Incoming(Packet::Publish(publish))) => self.deliver(publish),
                Ok(Event::Incoming(Packet::SubAck(suback))) => {
                    if suback
                        .return_codes
                        .iter()
                        .all(|c| matches!(c, SubscribeReasonCode::Success(_)))
                    {
                        self.state.send_modify(|s| {
                            if let ConnectionState::Connected { subscribed, .. } = s {
                                *subscribed = true;
                            }
                        });
                        // Online only now: an event published after this status is received.
                        self.republish_status();
                    }
                    if suback.return_codes.contains(&SubscribeReasonCode::Failure) {
                        self.stats.refused_subscriptions.fetch_add(1, Ordering::Relaxed);
                        tracing::error!(
                            broker = %self.broker,
                            "the broker refused the subscription to {} (check the broker's ACL for this user); \
                             no events will arrive",
                            self.topics.events_filter()
                        );
                    }
                }
                Ok(Event::Outgoing(Outgoing::Disconnect)) => {
                    tracing::info!(broker = %self.broker, "MQTT disconnected on request");
                    self.state.send_replace(ConnectionState::Closed);
                    return;
                }
                Ok(_) => {}
                Err(e) => {
                    connected = false;
                    failures = failures.saturating_add(1);
                    let reason = explain_connection_error(&e, &self.broker, self.tls);
                    let delay = self.backoff.delay(failures - 1, jitter_seed());
                    if failures == 1 || failures.is_power_of_two() {
                        tracing::warn!(attempt = failures, retry_in = ?delay, "MQTT link down: {reason}");
                    } else {
                        tracing::debug!(attempt = failures, retry_in = ?delay, "MQTT link down: {reason}");
                    }
                    self.state.send_replace(ConnectionState::Disconnected {
                        reason,
                        attempt: failures,
                    });
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// On every ConnAck: subscribe again (brokers and rumqttc do not reliably restore
    /// subscriptions: rumqtt#250). The status follows at the SubAck.
    fn after_connack(&self) {
        let filter = self.topics.events_filter();
        if self.client.try_subscribe(filter.clone(), QoS::AtLeastOnce).is_err() {
            let client = self.client.clone();
            tokio::spawn(async move {
                let _ = client.subscribe(filter, QoS::AtLeastOnce).await;
            });
        }
    }

    /// Once subscribed: republish the latest status over the Will's `offline`.
    fn republish_status(&self) {
        let status = {
            let mut guard = lock(&self.status);
            match guard.as_mut() {
                Some(s) => {
                    s.ts = Utc::now();
                    s.clone()
                }
                None => StatusPayload::new(self.topics.site(), GatewayState::Online, Utc::now()),
            }
        };
        let Ok(bytes) = to_json(&status) else {
            return;
        };
        let topic = self.topics.status();
        if self
            .client
            .try_publish(topic.clone(), QoS::AtLeastOnce, true, bytes.clone())
            .is_err()
        {
            let client = self.client.clone();
            tokio::spawn(async move {
                let _ = client.publish(topic, QoS::AtLeastOnce, true, bytes).await;
            });
        }
    }

    /// Passes an event publish to the application, or acks and drops what can never become
    /// one.
    fn deliver(&self, publish: Publish) {
        let event_id = match self.topics.event_id_from_topic(&publish.topic) {
            Ok(id) => id.to_owned(),
            Err(e) => return self.drop_acked(&publish, &e.to_string()),
        };
        if publish.payload.is_empty() {
            return self.drop_acked(
                &publish,
                "empty payload (clears the retained event at the broker; to cancel, publish a revision with \
                 \"cancel\": true)",
            );
        }
        // An oversized event still has an id the sender is waiting on: hand it over (without
        // its bytes, which are freed here: the ack needs only the packet id) so that the
        // application can refuse it with a reason and ack it.
        let mut publish = publish;
        let refused = (publish.payload.len() > self.max_payload).then(|| {
            format!(
                "payload of {} bytes exceeds the {}-byte limit of a dr.event/1 document",
                publish.payload.len(),
                self.max_payload
            )
        });
        let payload = if refused.is_some() {
            publish.payload = Bytes::new();
            Bytes::new()
        } else {
            publish.payload.clone()
        };
        let qos = publish.qos;
        let event = IncomingEvent {
            topic: publish.topic.clone(),
            event_id,
            payload,
            retained: publish.retain,
            dup: publish.dup,
            refused,
            ack: AckHandle {
                client: self.client.clone(),
                publish,
                generation: self.generation.load(Ordering::SeqCst),
                current: self.generation.clone(),
            },
        };
        // Never wait here: see the module docs on back-pressure.
        if qos == QoS::AtMostOnce && self.waiting.load(Ordering::Relaxed) >= self.qos0_capacity {
            tracing::warn!(topic = %event.topic, "application queue full; QoS 0 event dropped");
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.waiting.fetch_add(1, Ordering::Relaxed);
        if self.tx.send(event).is_ok() {
            self.stats.delivered.fetch_add(1, Ordering::Relaxed);
        } else {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn drop_acked(&self, publish: &Publish, why: &str) {
        let shown: String = publish.topic.chars().filter(|c| !c.is_control()).take(200).collect();
        tracing::warn!(topic = %shown, "MQTT publish acknowledged and dropped: {why}");
        self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        if self.client.try_ack(publish).is_err() {
            let client = self.client.clone();
            let publish = publish.clone();
            tokio::spawn(async move {
                let _ = client.ack(&publish).await;
            });
        }
    }
}

/// A few bits of entropy for backoff jitter (no RNG dependency needed for that).
fn jitter_seed() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0)
}
