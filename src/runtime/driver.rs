//! The write side: the one place where the gateway decides and acts. The [`Driver`] owns the
//! pure [`Controller`] behind a short critical section, the ledger writer and the cluster
//! backend; it takes the grid side's typed submissions, operator actions and the control loop's
//! inputs, and publishes a snapshot after each decision for the read side
//! ([`super::read_side::ReadSide`]).
//!
//! Locking, and why it is shaped so:
//!
//! - `core` (the controller) is held only to decide and to queue the decision's records on the
//!   ledger's channel, so that the chain keeps the order of decisions. It is never held across a
//!   disk flush or a cluster call: those happen after it is released.
//! - the board is replaced after every decision; reads (`/v1/status`, `/metrics`, the views,
//!   MQTT status, OpenADR reports) take a copy of the `Arc` and never wait for a decision, the
//!   disk or an agent.
//! - `control_pass` serialises control passes (a tick and the dispatches it leads to): only one
//!   task talks to the cluster at a time, so results come back in the order they were asked
//!   for. Submissions, operator actions and reads never take it, so a node that does not answer
//!   delays the next control pass, never an acknowledgment.

use super::read_side::{Board, Published};
use crate::clock::Clock;
use crate::cluster::ClusterBackend;
use crate::config::Config;
use crate::ledger::{Appended, Ledger, LedgerError, NewRecord, Queued};
pub use flexgate_policies::control::OperatorError as OperatorRefusal;
use flexgate_policies::control::entry::Received;
pub use flexgate_policies::control::entry::Transport;
pub use flexgate_policies::control::entry::WireRef;
use flexgate_policies::control::{Controller, Effect, IntakeDecision};
use flexgate_policies::event::{Ack, EventError, GridEvent, Transition};
use std::sync::Arc;
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

/// Why a declaration was not recorded.
#[derive(Debug, thiserror::Error)]
pub enum DeclareFailure {
    /// Refused: no forecast, or a field out of range. Nothing was recorded.
    #[error(transparent)]
    Refused(#[from] flexgate_policies::forecast::declare::DeclareError),
    /// The ledger could not record it: it was not made.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
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

/// The write side of a running gateway.
pub struct Driver {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) ledger: Ledger,
    pub(crate) backend: Arc<dyn ClusterBackend>,
    pub(crate) core: Mutex<Controller>,
    pub(crate) control_pass: Mutex<()>,
    /// Where each decision's snapshot is published for the read side.
    pub(crate) board: Arc<Board>,
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
    /// Latency histograms, shared with the read side that renders them.
    pub(crate) metrics: Arc<super::metrics::GatewayMetrics>,
    /// What the controller was built from, to build it again ([`Driver::rebuild`]).
    pub(crate) settings: flexgate_policies::control::Settings,
    /// The last ledger seq folded into the controller.
    pub(crate) applied: std::sync::atomic::AtomicU64,
    /// Events interpreted in what was folded (for the start record).
    pub(crate) events_seen: std::sync::atomic::AtomicUsize,
    /// Whether this gateway may decide now: always when single, only while leading as a
    /// replica ([`super::Role`]).
    pub(crate) role: tokio::sync::watch::Receiver<super::Role>,
    /// While leading as a replica: the instant its term may have lapsed by (set by the
    /// supervisor at each renewal). Nothing is decided or sent after it, even before the
    /// supervisor notices: a process paused past its term (SIGSTOP, a frozen VM) wakes up here.
    pub(crate) term_deadline: std::sync::Mutex<Option<std::time::Instant>>,
    /// The scheduler's latest answer, waiting for the next control pass (see `queue.rs`).
    pub(crate) scheduler_answer: std::sync::Mutex<Option<flexgate_policies::control::cluster::SchedulerView>>,
    /// The fingerprint of the last answer read (0: none yet), so that only a change wakes the loop.
    pub(crate) scheduler_print: std::sync::atomic::AtomicU64,
    /// When the last read of the queue began, whether one is in flight, and whether the
    /// backend said it has no queue (then none is read again).
    pub(crate) queue_read_started: std::sync::Mutex<Option<tokio::time::Instant>>,
    pub(crate) queue_read_in_flight: std::sync::atomic::AtomicBool,
    pub(crate) queue_unavailable: std::sync::atomic::AtomicBool,
}

impl Driver {
    /// Whether this gateway may decide and act now: its role allows it, and a replica's term
    /// provably holds.
    pub(crate) fn may_act(&self) -> bool {
        if !self.role.borrow().may_decide() {
            return false;
        }
        let deadline = *self
            .term_deadline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        deadline.is_none_or(|d| std::time::Instant::now() < d)
    }

    /// Set (or clear) the instant this replica's term may have lapsed by.
    pub fn set_term_deadline(&self, deadline: Option<std::time::Instant>) {
        *self
            .term_deadline
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = deadline;
    }

    /// The cluster backend (the replica's supervisor sets its term on it).
    #[must_use]
    pub fn backend(&self) -> &Arc<dyn ClusterBackend> {
        &self.backend
    }

    /// Record what a protocol adapter received, sent or decided by itself (its wire messages,
    /// its own opt-outs). These entries change nothing the controller decides on; they are what
    /// an auditor needs to see beside the gateway's own decisions. Resolves once flushed.
    pub async fn record(&self, recorded: crate::ledger::Recorded) -> Result<crate::ledger::Appended, LedgerError> {
        self.ledger.append(NewRecord::from(recorded)).await
    }

    /// Record several entries together (an import's parts): appended as one batch, in order,
    /// resolving once all are flushed, or failing with none acknowledged.
    pub async fn record_all(
        &self,
        recorded: Vec<crate::ledger::Recorded>,
    ) -> Result<Vec<crate::ledger::Appended>, LedgerError> {
        if !self.may_act() {
            return Err(LedgerError::NotLeader);
        }
        self.ledger
            .append_all(recorded.into_iter().map(NewRecord::from).collect())
            .await
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

    /// The snapshot reads are served from.
    pub(crate) fn published(&self) -> Arc<Published> {
        self.board.get()
    }

    /// Decide under the lock: run `decide` on the controller, queue the records it produced in
    /// that order, publish the new snapshot, release the lock. The caller waits for the flush
    /// and carries out the actions after that.
    pub(crate) async fn decide<R>(
        &self,
        decide: impl FnOnce(&mut Controller) -> (R, Vec<Effect>),
    ) -> Result<(R, Decided), LedgerError> {
        // A standby decides nothing: its controller only folds what its leader recorded; nor does
        // a leader whose term may have lapsed.
        if !self.may_act() {
            return Err(LedgerError::NotLeader);
        }
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
        self.board.publish(|previous| Published {
            plan_recorded_at: snapshot.plan.as_ref().and(previous.plan_recorded_at),
            snapshot,
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
            let flushed_at = std::time::Instant::now();
            self.board.publish(|previous| Published {
                snapshot: previous.snapshot.clone(),
                plan_recorded_at: previous.snapshot.plan.as_ref().map(|_| flushed_at),
            });
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
                event_id: ack.event_id.to_string(),
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

    /// An operator declares the site's availability for the forecast's hours (day-ahead), at
    /// `confidence` (90: each hour's P10; 50: its median), overriding the hours they name with
    /// their own figure and reason. Returned once recorded (`declared`).
    pub async fn declare(
        &self,
        operator: &str,
        confidence: u8,
        overrides: &[flexgate_policies::forecast::declare::Override],
    ) -> Result<flexgate_policies::forecast::declare::Declaration, DeclareFailure> {
        let now = self.clock.now();
        let (result, mut decided) = self
            .decide(|core| match core.declare(operator, confidence, overrides, now) {
                Ok((d, effects)) => (Ok(d), effects),
                Err(e) => (Err(e), Vec::new()),
            })
            .await?;
        let declaration = result?;
        self.flushed(&mut decided).await?;
        Ok(declaration)
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
}
