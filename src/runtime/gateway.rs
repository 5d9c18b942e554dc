//! The gateway: the pure [`Controller`] behind a short critical section, the ledger, the
//! cluster backend, and the published snapshot every read is served from.
//!
//! Locking, and why it is shaped so:
//!
//! - `core` (the controller) is held only to decide and to queue the decision's records on the
//!   ledger's channel, so that the chain keeps the order of decisions. It is never held across a
//!   disk flush or a cluster call: those happen after it is released.
//! - `published` is replaced after every decision; reads (`/v1/status`, `/metrics`, the views,
//!   MQTT status, OpenADR reports) take a copy of the `Arc` and never wait for a decision, the
//!   disk or an agent.
//! - `control_pass` serialises control passes (a tick and the dispatches it leads to): only one
//!   task talks to the cluster at a time, so results come back in the order they were asked
//!   for. Submissions, operator actions and reads never take it, so a node that does not answer
//!   delays the next control pass, never an acknowledgment.

use super::views::{EventView, JobView, PlanView, StatusView};
use crate::clock::Clock;
use crate::cluster::ClusterBackend;
use crate::config::Config;
use crate::ledger::{Appended, Ledger, LedgerError, NewRecord, Queued};
pub use flexgate_policies::control::OperatorError as OperatorRefusal;
use flexgate_policies::control::entry::Received;
pub use flexgate_policies::control::entry::Transport;
pub use flexgate_policies::control::entry::WireRef;
use flexgate_policies::control::{Controller, Effect, IntakeDecision, Settings, Snapshot};
use flexgate_policies::event::{Ack, EventError, GridEvent, IntervalDelivery, Phase, Transition, interval_delivery};
use std::sync::{Arc, PoisonError, RwLock};
use tokio::sync::{Mutex, Notify};

/// What the grid side hands the driver: an event it has read, with what it was read from, or
/// the reason a document could not be read. The transports parse; the driver decides.
#[derive(Debug, Clone)]
pub enum Submission {
    /// A `dr.event/1` document (HTTP, MQTT), parsed, and the text it was parsed from (recorded
    /// verbatim; lossy only for invalid UTF-8).
    Document {
        /// The event.
        event: Box<GridEvent>,
        /// The document as received.
        raw: String,
    },
    /// An event an adapter translated from its protocol's message (OpenADR), which the adapter
    /// recorded; `wire` says which object of it.
    Translated {
        /// The event.
        event: Box<GridEvent>,
        /// The protocol object it came from.
        wire: WireRef,
    },
    /// A document that could not be read as an event: counted as refused, nothing recorded.
    Invalid(EventError),
}

/// Why a submission was not accepted. Nothing in the event book changed.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    /// The document is not a valid `dr.event/1`.
    #[error("{0}")]
    Invalid(EventError),
    /// Valid, but not something this gateway can act on (wrong site, unmappable target); the
    /// refusal is recorded and acknowledged with `opt: out`.
    #[error("{reason}")]
    Refused {
        /// Why.
        reason: String,
        /// The opt-out acknowledgment that was recorded.
        ack: Box<Ack>,
    },
    /// A lower revision than the one held.
    #[error("revision {revision} of {event_id} is older than the revision {held} already held")]
    Stale {
        /// Event id.
        event_id: String,
        /// Revision submitted.
        revision: u64,
        /// Revision held.
        held: u64,
        /// The recorded acknowledgment.
        ack: Box<Ack>,
    },
    /// The ledger could not record it: not acknowledged, the sender must retry.
    #[error("the ledger could not record the event: {0}")]
    Ledger(#[from] LedgerError),
}

/// An accepted (or repeated) submission.
#[derive(Debug, Clone)]
pub struct SubmitOutcome {
    /// The acknowledgment, recorded in the ledger before it is returned.
    pub ack: Ack,
    /// True when this exact revision had been received before (the stored ack is returned).
    pub repeated: bool,
    /// True when it came with a different body than the first time: the new body was ignored
    /// (the ack's reason says so, with both digests).
    pub differs: bool,
}

/// Why an operator action was refused.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// Refused by the controller: unknown event, or an invalid field. Nothing changed.
    #[error(transparent)]
    Refused(#[from] OperatorRefusal),
    /// The ledger could not record it: the opt-out is not acknowledged.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Error while building the gateway.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The facility parameters are invalid.
    #[error("facility parameters: {0}")]
    Facility(String),
    /// A meter source cannot be set up.
    #[error("{0}")]
    Meter(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The ledger holds something this version cannot replay.
    #[error(transparent)]
    Schema(#[from] crate::ledger::NotAnEntry),
    /// The backend failed.
    #[error("cluster backend {0}")]
    Backend(String),
    /// The ledger's hash chain does not verify: a record was altered, removed or inserted. The
    /// state the gateway would rebuild from it cannot be trusted, so it does not start.
    #[error(
        "the ledger in {dir}/ledger fails verification at record {seq}: {reason}. The gateway does not act on a \
         ledger it cannot trust (the state rebuilt from it may have been altered). Keep this directory as \
         evidence; see `flexgate log verify --data {dir}` and `flexgate log export --data {dir}`, then \
         restore the ledger from a backup or start on a new data directory"
    )]
    ChainBroken {
        /// The data directory holding the ledger.
        dir: String,
        /// The first record that fails.
        seq: u64,
        /// What is wrong with it.
        reason: String,
    },
}

/// An event's delivery, for reports: see [`Gateway::event_delivery`].
#[derive(Debug, Clone)]
pub struct EventDelivery {
    /// The revision in force (a cancellation counts).
    pub revision: u64,
    /// Test events are recorded, never acted on.
    pub test: bool,
    /// The phase now.
    pub phase: Phase,
    /// Per interval with a ceiling, measured so far.
    pub intervals: Vec<IntervalDelivery>,
}

/// What reads are served from.
pub(crate) struct Published {
    pub snapshot: Snapshot,
    /// When the plan in force was recorded and flushed (monotonic; for latency measurements).
    pub plan_recorded_at: Option<std::time::Instant>,
}

/// Records queued under the lock, and what to do once they are flushed.
pub(crate) struct Decided {
    pub queued: Queued,
    pub actions: Vec<Effect>,
    /// A plan record is among them.
    pub planned: bool,
    /// Index among the queued records of the last acknowledgement (the one the caller answers
    /// with): its hash, once flushed, is the ack's anchor ([`Ack::log_checkpoint`]).
    pub acked: Option<usize>,
}

/// The running gateway.
pub struct Gateway {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) ledger: Ledger,
    pub(crate) backend: Arc<dyn ClusterBackend>,
    pub(crate) core: Mutex<Controller>,
    pub(crate) control_pass: Mutex<()>,
    pub(crate) published: RwLock<Arc<Published>>,
    pub(crate) wake: Notify,
    /// Operator opt-outs, for the adapters that must tell the event's sender (OpenADR
    /// oadrCreateOpt): (event id, reason).
    pub(crate) opt_outs: tokio::sync::broadcast::Sender<(String, String)>,
    /// Event phase changes once recorded, for the adapters that report on events (MQTT
    /// `reports/{event_id}` when an event ends).
    pub(crate) transitions: tokio::sync::broadcast::Sender<Transition>,
    /// The `[meter]` sources, when configured: the site meter the control loop acts on.
    pub(crate) meter: Option<Arc<crate::meter::MeterSources>>,
    /// The facility model, for the upper estimate that stands in for a stale or missing meter.
    pub(crate) facility: flexgate_policies::facility::FacilityModel,
    /// Latency histograms and the ledger's flush failures (`GET /metrics`).
    pub(crate) metrics: Arc<super::metrics::GatewayMetrics>,
    /// Set when the server begins to stop: long-lived answers (`GET /v1/stream`) end at once
    /// instead of holding the shutdown for the HTTP server's grace period.
    pub(crate) stopping: std::sync::atomic::AtomicBool,
    /// The HTTP API's connection counts (open now, refused at a limit), kept by the server
    /// that serves this gateway ([`Gateway::http_connections`]), read for `/metrics`.
    pub(crate) http_connections: Arc<flexgate_httpserve::Counters>,
}

impl Gateway {
    /// Build a gateway over an open ledger and a backend: rebuild the state from the ledger,
    /// read the cluster, and re-apply the caps of the plan in force.
    pub async fn start(
        config: Config,
        clock: Clock,
        ledger: Ledger,
        backend: Arc<dyn ClusterBackend>,
    ) -> Result<Arc<Self>, StartError> {
        let settings = Settings {
            site_id: config.gateway.site.clone(),
            site: config.site.clone(),
            control: config.control.clone(),
            policy: config.gateway.policy,
            objective: config.gateway.objective,
            hedge_tolerance: config.gateway.hedge.then(|| {
                config.gateway.hedge_tolerance.unwrap_or_else(|| {
                    flexgate_policies::alloc::curve_aware::default_tolerance(config.gateway.objective)
                })
            }),
            facility: config.facility.clone(),
            probe: config.probe.clone(),
        };
        let controller = Controller::new(settings).map_err(|e| StartError::Facility(e.to_string()))?;
        let facility = flexgate_policies::facility::FacilityModel::new(config.facility.clone())
            .map_err(|e| StartError::Facility(e.to_string()))?;
        let meter = match &config.meter {
            Some(m) => Some(crate::meter::MeterSources::start(m, clock).map_err(StartError::Meter)?),
            None => None,
        };
        let published = RwLock::new(Arc::new(Published {
            snapshot: controller.snapshot(),
            plan_recorded_at: None,
        }));
        let metrics = Arc::new(super::metrics::GatewayMetrics::new());
        {
            let metrics = metrics.clone();
            ledger.observe_flushes(Box::new(move |elapsed, ok| metrics.observe_ledger_flush(elapsed, ok)));
        }
        let gateway = Arc::new(Self {
            config,
            clock,
            ledger,
            backend,
            core: Mutex::new(controller),
            control_pass: Mutex::new(()),
            published,
            wake: Notify::new(),
            opt_outs: tokio::sync::broadcast::channel(64).0,
            transitions: tokio::sync::broadcast::channel(1024).0,
            meter,
            facility,
            metrics,
            stopping: std::sync::atomic::AtomicBool::new(false),
            http_connections: Arc::default(),
        });
        gateway.recover().await?;
        Ok(gateway)
    }

    /// The clock everything runs on.
    #[must_use]
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The ledger handle.
    #[must_use]
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Give up the gateway and close its ledger (flush, unlock the directory).
    pub async fn close(self) -> Result<(), LedgerError> {
        self.ledger.close().await
    }

    /// Record what a protocol adapter received, sent or decided by itself (its wire messages,
    /// its own opt-outs). These entries change nothing the controller decides on; they are what
    /// an auditor needs to see beside the gateway's own decisions. Resolves once flushed.
    pub async fn record(&self, recorded: crate::ledger::Recorded) -> Result<crate::ledger::Appended, LedgerError> {
        self.ledger.append(NewRecord::from(recorded)).await
    }

    /// Count an event a protocol adapter refused by itself (an MQTT payload over the size limit,
    /// a bad signature, the screen; an OpenADR 2.0b event the VEN opted out of), after its
    /// refusal is recorded, so `flexgate_events_refused_total` counts every refusal whatever
    /// the transport. A refusal recorded before (a retained MQTT copy) is not counted again.
    pub async fn count_adapter_refusal(&self) -> Result<(), LedgerError> {
        self.decide(|core| {
            core.count_refused();
            ((), Vec::new())
        })
        .await
        .map(|_| ())
    }

    /// Tell long-lived readers that the gateway is stopping.
    pub fn begin_shutdown(&self) {
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Whether [`Gateway::begin_shutdown`] was called.
    #[must_use]
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The published snapshot, for readers that watch it change (`GET /v1/stream`).
    pub(crate) fn published_snapshot(&self) -> Arc<Published> {
        self.published()
    }

    /// The meter's recent history (`GET /v1/meter/history`): the last `seconds` of readings the
    /// gateway keeps, with the ceiling in force at each and where each figure came from.
    pub async fn meter_history(&self, seconds: u64) -> super::views::MeterHistoryView {
        let published = self.published();
        let snapshot = &published.snapshot;
        let since = self.clock.now() - chrono::Duration::seconds(i64::try_from(seconds).unwrap_or(21_600));
        let points = snapshot
            .meter_history
            .iter()
            .filter(|(at, _, _)| *at >= since)
            .map(|(at, kw, quality)| super::views::MeterPoint {
                at: *at,
                meter_w: kw * 1000.0,
                quality: quality.as_str(),
                ceiling_w: snapshot.book.effective_ceiling(*at).map(|c| c.ceiling_kw * 1000.0),
            })
            .collect();
        super::views::MeterHistoryView {
            time_zone: self.config.site.time_zone.clone(),
            points,
        }
    }

    /// The audit of `event_id` from the live ledger (`GET /v1/events/{id}/audit`): `Ok(None)`
    /// when the ledger holds nothing of it.
    pub async fn audit(&self, event_id: &str) -> Result<Option<crate::reports::audit::AuditReport>, String> {
        let ledger = self.ledger.clone();
        let id = event_id.to_string();
        let window_s = self.config.site.baseline_window_s;
        let tz: chrono_tz::Tz = self.config.site.time_zone.parse().unwrap_or(chrono_tz::Tz::UTC);
        tokio::task::spawn_blocking(move || {
            let records = ledger
                .iter_from(1)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("reading the ledger: {e}"))?;
            crate::reports::audit::build(&records, &id, window_s, tz).map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| format!("the audit did not complete: {e}"))?
    }

    /// The snapshot reads are served from.
    pub(crate) fn published(&self) -> Arc<Published> {
        self.published.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Decide under the lock: run `decide` on the controller, queue the records it produced in
    /// that order, publish the new snapshot, release the lock. The caller waits for the flush
    /// and carries out the actions after that.
    pub(crate) async fn decide<R>(
        &self,
        decide: impl FnOnce(&mut Controller) -> (R, Vec<Effect>),
    ) -> Result<(R, Decided), LedgerError> {
        let mut core = self.core.lock().await;
        let deciding = std::time::Instant::now();
        let (answer, effects) = decide(&mut core);
        let decided_in = deciding.elapsed();
        let mut records = Vec::new();
        let mut actions = Vec::new();
        let mut planned = false;
        let mut acked = None;
        for effect in effects {
            match effect {
                Effect::Record(recorded) => {
                    planned |= matches!(recorded.entry, crate::ledger::Entry::Plan(_));
                    if matches!(recorded.entry, crate::ledger::Entry::EventAcked(_)) {
                        acked = Some(records.len());
                    }
                    records.push(NewRecord::from(*recorded));
                }
                other => actions.push(other),
            }
        }
        if planned {
            self.metrics.observe_plan(decided_in);
        }
        let queued = self.ledger.enqueue_all(records).await?;
        let snapshot = core.snapshot();
        drop(core);
        let previous = self.published();
        let plan_recorded_at = if snapshot.plan.is_none() {
            None
        } else {
            previous.plan_recorded_at
        };
        *self.published.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(Published {
            snapshot,
            plan_recorded_at,
        });
        Ok((
            answer,
            Decided {
                queued,
                actions,
                planned,
                acked,
            },
        ))
    }

    /// Wait for a decision's records, then note when a plan became durable. Returns where each
    /// record landed in the chain, in the order decided.
    pub(crate) async fn flushed(&self, decided: &mut Decided) -> Result<Vec<Appended>, LedgerError> {
        let queued = std::mem::replace(&mut decided.queued, Queued::empty());
        let appended = queued.flushed().await?;
        if decided.planned {
            let mut published = self.published.write().unwrap_or_else(PoisonError::into_inner);
            let mut next = Published {
                snapshot: published.snapshot.clone(),
                plan_recorded_at: Some(std::time::Instant::now()),
            };
            if next.snapshot.plan.is_none() {
                next.plan_recorded_at = None;
            }
            *published = Arc::new(next);
        }
        Ok(appended)
    }

    /// The anchor of a decision's acknowledgement: where its record landed.
    fn anchor(decided: &Decided, appended: &[Appended], ack: &mut Ack) {
        if let Some(record) = decided.acked.and_then(|i| appended.get(i)) {
            ack.log_checkpoint = Some(record.hash.clone());
            ack.log_seq = Some(record.seq);
        }
    }

    /// The anchor of an ack given again for a repeat: the record of the first answer, found by
    /// its key (acks of earlier versions carried a different anchor, which is replaced).
    fn anchor_repeat(&self, ack: &mut Ack) -> Result<(), LedgerError> {
        let key = flexgate_policies::control::entry::dedup_key::ack(&ack.event_id, ack.revision);
        if let Some(seq) = self.ledger.find_dedup(&key)?
            && let Some(record) = self.ledger.get(seq)?
        {
            ack.log_checkpoint = Some(record.hash);
            ack.log_seq = Some(record.seq);
        }
        Ok(())
    }

    /// Take one submission from the grid side: the intake rules for an event (every record of
    /// the decision flushed before the ack is returned), or the count of a refused document.
    /// The same rules for every source (`POST /v1/events`, MQTT, OpenADR), so every source gets
    /// identical de-duplication, staleness, site and expiry handling. The driver parses
    /// nothing: the grid side hands it the event it read ([`Submission`]).
    pub async fn submit(&self, submission: Submission, transport: Transport) -> Result<SubmitOutcome, SubmitError> {
        let (event, received) = match submission {
            Submission::Document { event, raw } => (*event, Received::Bytes(raw)),
            Submission::Translated { event, wire } => ((*event).clone(), Received::Translated { event, wire }),
            Submission::Invalid(e) => {
                self.decide(|core| {
                    core.count_refused();
                    ((), Vec::new())
                })
                .await?;
                return Err(SubmitError::Invalid(e));
            }
        };
        self.intake(event, transport, received).await
    }

    async fn intake(
        &self,
        event: GridEvent,
        transport: Transport,
        received: Received,
    ) -> Result<SubmitOutcome, SubmitError> {
        let arrived = std::time::Instant::now();
        let now = self.clock.now();
        let (decision, mut decided) = self
            .decide(|core| {
                let intake = core.submit(event, transport, received, now);
                (intake.decision, intake.effects)
            })
            .await?;
        let appended = self.flushed(&mut decided).await?;
        let mut decision = decision;
        match &mut decision {
            IntakeDecision::Repeated { ack, .. } => {
                // The first copy's records may still be on their way to the disk.
                self.ledger.flush().await?;
                self.anchor_repeat(ack)?;
            }
            IntakeDecision::Accepted { ack }
            | IntakeDecision::Refused { ack, .. }
            | IntakeDecision::Stale { ack, .. } => Self::anchor(&decided, &appended, ack),
            IntakeDecision::Invalid(_) => {}
        }
        if !matches!(decision, IntakeDecision::Invalid(_)) {
            self.metrics.observe_ack(arrived.elapsed());
        }
        for action in decided.actions {
            if matches!(action, Effect::Wake) {
                self.wake.notify_one();
            }
        }
        match decision {
            IntakeDecision::Accepted { ack } => Ok(SubmitOutcome {
                ack,
                repeated: false,
                differs: false,
            }),
            IntakeDecision::Repeated { ack, differs } => Ok(SubmitOutcome {
                ack,
                repeated: true,
                differs,
            }),
            IntakeDecision::Refused { reason, ack } => Err(SubmitError::Refused {
                reason,
                ack: Box::new(ack),
            }),
            IntakeDecision::Stale { held, ack } => Err(SubmitError::Stale {
                event_id: ack.event_id.clone(),
                revision: ack.revision,
                held,
                ack: Box::new(ack),
            }),
            IntakeDecision::Invalid(e) => Err(SubmitError::Invalid(e)),
        }
    }

    /// An operator opts the site out of an event (e.g. a must-run emergency): its ceiling stops
    /// counting, the event ends as opted out, and the opt-out is recorded with the operator's
    /// name and reason, with an opt-out acknowledgment for the counterparty. The bearer token
    /// authenticates the call; the operator name is what the caller declares, recorded verbatim.
    pub async fn operator_opt_out(&self, event_id: &str, operator: &str, reason: &str) -> Result<Ack, OperatorError> {
        let now = self.clock.now();
        let (result, mut decided) = self
            .decide(|core| match core.operator_opt_out(event_id, operator, reason, now) {
                Ok((ack, effects)) => (Ok(ack), effects),
                Err(e) => (Err(e), Vec::new()),
            })
            .await?;
        let mut ack = result?;
        let appended = self.flushed(&mut decided).await?;
        Self::anchor(&decided, &appended, &mut ack);
        for action in decided.actions {
            match action {
                Effect::OptOutNotice { event_id, reason } => {
                    // Nobody listening (no adapter for this source) is fine.
                    let _ = self.opt_outs.send((event_id, reason));
                }
                Effect::Wake => self.wake.notify_one(),
                _ => {}
            }
        }
        Ok(ack)
    }

    /// Event phase changes (pending → ramping → active → recovering → completed, cancelled or
    /// opted out), each sent once its ledger record is flushed. A subscriber that lags more
    /// than 1,024 changes behind misses the oldest (and is told so by the receiver).
    pub fn subscribe_transitions(&self) -> tokio::sync::broadcast::Receiver<Transition> {
        self.transitions.subscribe()
    }

    /// Operator opt-outs as they happen, so an adapter can tell the event's sender.
    pub fn subscribe_opt_outs(&self) -> tokio::sync::broadcast::Receiver<(String, String)> {
        self.opt_outs.subscribe()
    }

    /// What event `event_id` delivered so far, interval by interval, measured by the meter
    /// readings the gateway keeps (six hours): a model's figures are left out and counted in
    /// each interval's `modelled_samples`; `None` for an unknown event.
    pub async fn event_delivery(&self, event_id: &str) -> Option<EventDelivery> {
        let published = self.published();
        let snapshot = &published.snapshot;
        let entry = snapshot.book.get(event_id)?;
        let now = self.clock.now();
        let meter: Vec<(chrono::DateTime<chrono::Utc>, f64)> = snapshot
            .meter_history
            .iter()
            .filter(|(_, _, quality)| quality.is_measured())
            .map(|(at, kw, _)| (*at, *kw))
            .collect();
        let modelled: Vec<chrono::DateTime<chrono::Utc>> = snapshot
            .meter_history
            .iter()
            .filter(|(_, _, quality)| !quality.is_measured())
            .map(|(at, _, _)| *at)
            .collect();
        Some(EventDelivery {
            revision: entry.revision(),
            test: entry.event.test,
            phase: entry.phase_at(now),
            intervals: interval_delivery(entry, &meter, &modelled, now),
        })
    }

    /// Status for `GET /v1/status`.
    pub async fn status(&self) -> StatusView {
        StatusView::build(
            &self.published().snapshot,
            self.clock.now(),
            &self.ledger.head().1,
            &self.config.gateway.site,
            &self.config.site.time_zone,
        )
    }

    /// The phase of the binding event now (`None`: nothing constrains the site).
    #[must_use]
    pub fn phase(&self) -> Option<Phase> {
        let published = self.published();
        published
            .snapshot
            .book
            .effective_ceiling(self.clock.now())
            .map(|c| c.phase)
    }

    /// Events for `GET /v1/events`.
    pub async fn events(&self) -> Vec<EventView> {
        let published = self.published();
        let now = self.clock.now();
        published
            .snapshot
            .book
            .events()
            .map(|e| EventView::build(e, now))
            .collect()
    }

    /// One event for `GET /v1/events/{id}`, with its full record.
    pub async fn event(&self, id: &str) -> Option<serde_json::Value> {
        self.event_view(id).await.and_then(|v| serde_json::to_value(v).ok())
    }

    /// [`Gateway::event`] as its typed view.
    pub async fn event_view(&self, id: &str) -> Option<super::views::EventDetailView> {
        let published = self.published();
        let entry = published.snapshot.book.get(id)?;
        Some(super::views::EventDetailView {
            summary: EventView::build(entry, self.clock.now()),
            detail: serde_json::to_value(entry).unwrap_or(serde_json::Value::Null),
        })
    }

    /// Jobs for `GET /v1/jobs`.
    pub async fn jobs(&self) -> Vec<JobView> {
        let published = self.published();
        let s = &published.snapshot;
        s.jobs
            .iter()
            .map(|j| JobView::build(j, s.caps.get(&j.spec.id), s.knowledge.get(&j.spec.id)))
            .collect()
    }

    /// When the plan in force was computed and its record flushed (monotonic clock).
    pub async fn plan_recorded_at(&self) -> Option<std::time::Instant> {
        self.published().plan_recorded_at
    }

    /// The plan in force, if any.
    pub async fn plan(&self) -> Option<PlanView> {
        self.published().snapshot.plan.as_deref().map(PlanView::build)
    }

    /// `GET /v1/plan`: the plan in force, or an empty plan (`in_force: false`) when none is.
    pub async fn plan_view(&self) -> PlanView {
        self.plan().await.unwrap_or_else(PlanView::none)
    }

    /// The site's flexibility curve now (`GET /v1/flexibility`); `None` before the first
    /// telemetry, or when the policy is a proportional rule (it has no curves to cost it on).
    pub async fn flexibility(&self) -> Option<Arc<flexgate_policies::control::flexibility::SiteFlexibility>> {
        self.published().snapshot.flexibility.clone()
    }

    /// The counters the HTTP server serving this gateway keeps its connection counts in.
    #[must_use]
    pub fn http_connections(&self) -> Arc<flexgate_httpserve::Counters> {
        self.http_connections.clone()
    }

    /// The exposition for `GET /metrics` (OpenMetrics text, base units, no NaN).
    pub async fn metrics(&self) -> String {
        let status = self.status().await;
        let c = self.published().snapshot.counters;
        let scrape = super::metrics::Scrape {
            events_accepted: c.events_accepted,
            events_refused: c.events_refused,
            plans: c.plans,
            dispatch_failures: c.dispatch_failures,
            cap_drifts: c.drifts,
            cap_retries: c.cap_retries,
            trims: c.trims,
            http_connections_open: self.http_connections.open(),
            http_connections_refused: self.http_connections.refused(),
            active_events: status.active_events.len() as u64,
            jobs: status.jobs as u64,
            caps_unconfirmed: status.unconfirmed_jobs as u64,
            jobs_suspended: status.suspended_jobs as u64,
            meter_ceiling_watts: status.meter_ceiling_w,
            gpu_budget_watts: status.gpu_budget_w,
            meter: status.meter_w.zip(status.meter_quality),
            gpu_power_watts: status.measured_gpu_w,
            trim_watts: status.trim_w,
            flex_available_watts: status.flex_available_w,
            ledger_records: self.ledger.head().0,
            ledger_writer_failed: self.ledger.writer_failed(),
            meter_sources: self.meter.as_ref().map(|m| m.counts()).unwrap_or_default(),
            agents: self.backend.agents_answering(),
        };
        self.metrics.render(&scrape)
    }
}
