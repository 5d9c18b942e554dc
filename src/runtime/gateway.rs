//! The gateway's state and its one planning step.

use super::clock::Clock;
use super::views::{EventView, JobView, PlanView, StatusView};
use crate::cluster::{CapCommand, CapOutcome, ClusterBackend, JobState, Telemetry};
use crate::config::Config;
use crate::ledger::{Ledger, LedgerError, NewRecord, RecordKind};
use chrono::{DateTime, Utc};
use flexgate_policies::alloc::bounds::FloorModel;
use flexgate_policies::alloc::{
    AllocationPolicy, Budget, CapPlan, CurveAware, JobSpec, Prepared, Proportional, Weighting,
};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::event::{
    BaselineEstimate, CeilingTarget, DrAck, EventBook, EventError, EventSource, GridEvent, IntervalDelivery, Opt,
    Phase, SiteContext, Transition, UpsertOutcome, interval_delivery, parse_dr_event, to_ceiling,
};
use flexgate_policies::facility::{CoolingState, FacilityModel, PreEvent};
use flexgate_policies::units::{Kilowatts, Watts, WattsPerGpu};
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{Mutex, Notify};

/// Where a submission came from (recorded verbatim with the raw bytes).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum Transport {
    /// `POST /v1/events`.
    Http {
        /// Peer address, if known.
        peer: Option<String>,
    },
    /// An OpenADR 2.0b `oadrDistributeEvent`, pulled from or pushed by a VTN.
    #[serde(rename = "openadr2b")]
    OpenAdr2b {
        /// The VTN's base URL.
        vtn: String,
        /// Ledger seq of the record holding the message's bytes.
        message_seq: u64,
    },
    /// An MQTT publish on `{prefix}/{site}/events/{event_id}`.
    Mqtt {
        /// The topic it arrived on.
        topic: String,
        /// A retained copy (delivered at subscription) rather than a live publish.
        retained: bool,
        /// A redelivery the broker flagged as a duplicate.
        dup: bool,
    },
    /// An OpenADR 3.x event object, polled from a VTN.
    #[serde(rename = "openadr3")]
    OpenAdr3 {
        /// The VTN's base URL.
        vtn: String,
        /// Ledger seq of the record holding the response body.
        message_seq: u64,
    },
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
        ack: Box<DrAck>,
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
        ack: Box<DrAck>,
    },
    /// The ledger could not record it: not acknowledged, the sender must retry.
    #[error("the ledger could not record the event: {0}")]
    Ledger(#[from] LedgerError),
}

/// An accepted (or repeated) submission.
#[derive(Debug, Clone)]
pub struct SubmitOutcome {
    /// The acknowledgment, recorded in the ledger before it is returned.
    pub ack: DrAck,
    /// True when this exact revision had been received before (the stored ack is returned).
    pub repeated: bool,
}

/// The allocation policy in force.
enum Planner {
    Curve {
        policy: CurveAware,
        /// Estimated curves for the current job set (re-estimated only when jobs change).
        cache: Option<Prepared<'static>>,
    },
    Proportional(Proportional),
}

impl Planner {
    fn plan(&mut self, jobs: &[JobSpec], budget: Watts) -> Result<CapPlan, flexgate_policies::alloc::PlanError> {
        match self {
            Planner::Proportional(p) => p.plan(jobs, Budget::Absolute(budget)),
            Planner::Curve { policy, cache } => {
                let fresh = cache
                    .as_ref()
                    .is_none_or(|c| c.jobs().len() != jobs.len() || c.jobs().iter().zip(jobs).any(|(a, b)| a != b));
                if fresh {
                    *cache = Some(policy.prepare_owned(jobs.to_vec())?);
                }
                match cache {
                    Some(prepared) => Ok(prepared.allocate(Budget::Absolute(budget))),
                    None => policy.plan(jobs, Budget::Absolute(budget)),
                }
            }
        }
    }
}

/// A cap the gateway has sent and what became of it.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct AppliedCap {
    pub cap: WattsPerGpu,
    pub generation: u64,
    pub confirmed: bool,
}

/// The plan in force, with what it was derived from.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct PlanInForce {
    pub seq: u64,
    pub at: DateTime<Utc>,
    pub ceiling_kw: f64,
    pub binding_event: String,
    pub gpu_budget_w: f64,
    /// The facility model's open-loop budget before trim and fixed load.
    pub base_budget_w: f64,
    /// When the plan's record was flushed (monotonic; for latency measurements).
    #[serde(skip)]
    pub recorded_at: std::time::Instant,
    pub trim_w: f64,
    pub plan: CapPlan,
}

/// Mutable state behind one lock: decisions are serialised, which keeps the ledger's story in
/// the same order as what happened.
pub(crate) struct State {
    pub book: EventBook,
    pub jobs: Vec<JobState>,
    pub caps: HashMap<Arc<str>, AppliedCap>,
    pub pre_event_caps: HashMap<Arc<str>, WattsPerGpu>,
    /// `pre_event_caps` changed since the last plan record: the next one carries it (recovery
    /// takes the latest recorded copy). Recording it only on change keeps a 1,000-entry map out
    /// of every plan record on the event path.
    pub pre_event_caps_changed: bool,
    pub curtailment_started: Option<(DateTime<Utc>, f64)>,
    /// Metered power when the curtailment started (the measured baseline for the budget).
    pub pre_event_meter_kw: Option<f64>,
    /// Events an operator opted the site out of (recorded with the operator's name).
    pub opted_out: std::collections::HashSet<String>,
    pub plan: Option<PlanInForce>,
    pub telemetry: Option<Telemetry>,
    pub meter_history: VecDeque<(DateTime<Utc>, f64)>,
    /// Phase changes recorded by the last planning step, to broadcast once it succeeded.
    pub announce: Vec<Transition>,
    /// Jobs the gateway suspended because caps alone could not meet the target; resumed when
    /// the curtailment ends.
    pub suspended: std::collections::BTreeSet<Arc<str>>,
    pub trim_w: f64,
    pub last_dispatch: Option<DateTime<Utc>>,
    pub planned_ceiling: Option<f64>,
    /// A job came back (its re-sent cap was confirmed): plan again at the next pass even if
    /// nothing else changed, so that it is flexible again instead of fixed load.
    pub replan: bool,
    /// What the planner knows of each job's elasticity, as last recorded (see
    /// [`elasticity_known`]); a change is recorded, so that every plan can be explained.
    pub elasticity_known: HashMap<Arc<str>, String>,
    planner: Planner,
}

impl State {
    /// The ceiling in force: the most restrictive of the events the site has not opted out of.
    pub(crate) fn effective_ceiling(&self, now: DateTime<Utc>) -> Option<flexgate_policies::event::EffectiveCeiling> {
        if self.opted_out.is_empty() {
            self.book.effective_ceiling(now)
        } else {
            self.book
                .effective_ceiling_where(now, |id| !self.opted_out.contains(id))
        }
    }
}

/// Why an operator action was refused.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// No such event.
    #[error("no event {0:?}")]
    UnknownEvent(String),
    /// A field is missing or invalid.
    #[error("{field}: {message}")]
    Invalid {
        /// Field.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The ledger could not record it: nothing changed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub events_accepted: AtomicU64,
    pub events_refused: AtomicU64,
    pub plans: AtomicU64,
    pub dispatch_failures: AtomicU64,
    pub trims: AtomicU64,
    /// Confirmed caps later found not in force (reconcile).
    pub drifts: AtomicU64,
    /// Unconfirmed caps re-sent to jobs whose nodes answer again.
    pub cap_retries: AtomicU64,
}

/// The running gateway.
pub struct Gateway {
    pub(crate) config: Config,
    pub(crate) clock: Clock,
    pub(crate) ledger: Ledger,
    pub(crate) backend: Arc<dyn ClusterBackend>,
    pub(crate) facility: FacilityModel,
    /// The floors the planner respects (cap minimum or the flex tier's slowdown limit), for the
    /// flexibility the site advertises.
    pub(crate) floors: FloorModel,
    pub(crate) state: Mutex<State>,
    pub(crate) wake: Notify,
    pub(crate) counters: Counters,
    /// Operator opt-outs, for the adapters that must tell the event's sender (OpenADR
    /// oadrCreateOpt): (event id, reason).
    pub(crate) opt_outs: tokio::sync::broadcast::Sender<(String, String)>,
    /// Event phase changes once recorded, for the adapters that report on events (MQTT
    /// `reports/{event_id}` when an event ends).
    pub(crate) transitions: tokio::sync::broadcast::Sender<Transition>,
}

/// A plan's shortfall above this is acted on (suspension) rather than left to rounding, W.
const SHORTFALL_TOLERANCE_W: f64 = 1.0;

/// A job's GPUs reported above its confirmed cap by more than this are drift, W per GPU
/// (NVML sets limits in mW and agents round; a real reset moves the limit by hundreds of W).
pub(crate) const DRIFT_TOLERANCE_W: f64 = 2.0;

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

/// Error while building the gateway.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The facility parameters are invalid.
    #[error("facility parameters: {0}")]
    Facility(String),
    /// The ledger failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The backend failed.
    #[error("cluster backend {0}")]
    Backend(String),
}

impl Gateway {
    /// Build a gateway over an open ledger and a backend, rebuilding state from the ledger.
    pub async fn start(
        config: Config,
        clock: Clock,
        ledger: Ledger,
        backend: Arc<dyn ClusterBackend>,
    ) -> Result<Arc<Self>, StartError> {
        let facility = FacilityModel::new(config.facility.clone()).map_err(|e| StartError::Facility(e.to_string()))?;
        let family = Arc::new(CurveFamily::h200_generic());
        let floors = FloorModel::new(family.clone());
        let planner = match config.gateway.policy.as_str() {
            "equal" => Planner::Proportional(Proportional::new(Weighting::Equal, family)),
            "pfi_paper" => Planner::Proportional(Proportional::new(Weighting::PfiPaper, family)),
            "efficiency" => Planner::Proportional(Proportional::new(Weighting::Efficiency, family)),
            _ => Planner::Curve {
                policy: CurveAware::flexgate(family),
                cache: None,
            },
        };
        let jobs = backend
            .inventory()
            .await
            .map_err(|e| StartError::Backend(e.to_string()))?;
        let state = State {
            book: EventBook::default(),
            jobs,
            caps: HashMap::new(),
            pre_event_caps: HashMap::new(),
            pre_event_caps_changed: false,
            curtailment_started: None,
            pre_event_meter_kw: None,
            opted_out: std::collections::HashSet::new(),
            plan: None,
            telemetry: None,
            meter_history: VecDeque::new(),
            announce: Vec::new(),
            suspended: std::collections::BTreeSet::new(),
            trim_w: 0.0,
            last_dispatch: None,
            planned_ceiling: None,
            replan: false,
            elasticity_known: HashMap::new(),
            planner,
        };
        let gateway = Arc::new(Self {
            config,
            clock,
            ledger,
            backend,
            facility,
            floors,
            state: Mutex::new(state),
            wake: Notify::new(),
            counters: Counters::default(),
            opt_outs: tokio::sync::broadcast::channel(64).0,
            transitions: tokio::sync::broadcast::channel(1024).0,
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

    /// Site context for target conversion.
    fn site_context(&self, jobs: &[JobState], nodes: u32) -> SiteContext {
        let mut site = SiteContext::default();
        site.facility_max_kw = if self.config.site.facility_max_kw > 0.0 {
            self.config.site.facility_max_kw
        } else {
            let uncapped: Watts = jobs.iter().map(|j| j.spec.uncapped_power).sum();
            self.facility
                .forward(uncapped, nodes, &CoolingState::Settled)
                .map_or(0.0, |m| m.hi.value())
        };
        for (rule, fraction) in site.level_table.iter_mut().zip(self.config.site.level_shed_fraction) {
            if let Ok(shed) = flexgate_policies::units::Fraction::new(fraction) {
                rule.shed = shed;
            }
        }
        site.price_table = self
            .config
            .site
            .price_table
            .iter()
            .filter_map(|row| {
                flexgate_policies::units::Fraction::new(row.shed_fraction)
                    .ok()
                    .map(|shed| flexgate_policies::event::PriceRule {
                        min_per_mwh: row.min_per_mwh,
                        shed,
                    })
            })
            .collect();
        site
    }

    /// Meter-before baseline: the mean metered power over the configured window before `now`.
    fn baseline(&self, state: &State, now: DateTime<Utc>) -> Option<BaselineEstimate> {
        let window = self.config.site.baseline_window_s;
        let from = now - chrono::Duration::seconds(window as i64);
        let samples: Vec<f64> = state
            .meter_history
            .iter()
            .filter(|(t, _)| *t >= from)
            .map(|(_, kw)| *kw)
            .collect();
        (!samples.is_empty()).then(|| BaselineEstimate {
            kw: samples.iter().sum::<f64>() / samples.len() as f64,
            method: "meter_before".to_string(),
            window_s: window,
        })
    }

    /// Accept a `dr.event/1` document: parse, record raw bytes, interpret, update the book,
    /// record and return the acknowledgment. Every step's record is flushed before the ack.
    pub async fn submit_event(&self, body: &[u8], transport: Transport) -> Result<SubmitOutcome, SubmitError> {
        let event = parse_dr_event(body, EventSource::Http).map_err(|e| {
            self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
            SubmitError::Invalid(e)
        })?;
        let raw = json!({ "bytes": String::from_utf8_lossy(body) });
        self.submit_grid_event(event, transport, raw).await
    }

    /// Accept an event an adapter has already translated (OpenADR, MQTT): validate it, record
    /// it with `raw` (what the adapter received, or a pointer to the ledger record holding the
    /// wire bytes), interpret it, update the book, and record and return the acknowledgment.
    ///
    /// The same path as `POST /v1/events`, so every source gets identical de-duplication,
    /// staleness, site and expiry rules.
    pub async fn submit_grid_event(
        &self,
        event: GridEvent,
        transport: Transport,
        raw: serde_json::Value,
    ) -> Result<SubmitOutcome, SubmitError> {
        event.validate().map_err(|e| {
            self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
            SubmitError::Invalid(e)
        })?;
        let received_at = self.clock.now();
        let opt_out = |reason: String| DrAck {
            schema: "dr.ack/1".to_string(),
            event_id: event.id.clone(),
            revision: event.revision,
            received_at,
            opt: Opt::Out,
            reason: Some(reason),
            accepted_target_kw: None,
            expected_meter_kw: None,
            log_checkpoint: String::new(),
        };
        let mut raw_body = json!({
            "received_at": received_at,
            "transport": transport,
            "source": event.source,
        });
        if let (Some(into), serde_json::Value::Object(from)) = (raw_body.as_object_mut(), raw) {
            into.extend(from);
        }
        // An event for another site, or whose window is already over, is recorded and answered
        // (opt out), but takes no de-duplication key: it must not shadow the same id and
        // revision sent later, corrected.
        let wrong_site = event
            .site
            .as_ref()
            .filter(|site| **site != self.config.gateway.site)
            .map(|site| {
                format!(
                    "event is for site {site:?}; this gateway serves {:?}",
                    self.config.gateway.site
                )
            });
        let expired = (!event.cancel)
            .then(|| event.window.nominal_end())
            .flatten()
            .filter(|end| *end <= received_at)
            .map(|end| format!("the event's window ended at {end}, before it was received"));
        if let Some(reason) = wrong_site.or(expired) {
            self.ledger
                .append(NewRecord {
                    kind: RecordKind::RawInput,
                    event: Some(event.id.clone()),
                    dedup_key: None,
                    body: raw_body,
                })
                .await?;
            let ack = self.record_ack(opt_out(reason.clone()), false).await?;
            self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
            return Err(SubmitError::Refused {
                reason,
                ack: Box::new(ack),
            });
        }
        // Repeats (at-least-once delivery) get the recorded answer again. The raw input, its
        // interpretation and the ack are written in one group commit below, so a stored ack
        // means the whole decision is recorded; the barrier covers a copy still being flushed.
        let raw_key = format!("event:{}:{}", event.id, event.revision);
        if self.ledger.find_dedup(&raw_key).ok().flatten().is_some()
            && let Some(ack) = self.stored_ack(&event.id, event.revision)
        {
            self.ledger.flush().await?;
            return Ok(SubmitOutcome { ack, repeated: true });
        }
        let raw_record = NewRecord {
            kind: RecordKind::RawInput,
            event: Some(event.id.clone()),
            dedup_key: Some(raw_key),
            body: raw_body,
        };

        let mut state = self.state.lock().await;
        let nodes = state.telemetry.as_ref().map_or(0, |t| t.nodes);
        let site = self.site_context(&state.jobs, nodes);
        let baseline = self.baseline(&state, received_at);
        let mut ceilings: Vec<Option<CeilingTarget>> = Vec::with_capacity(event.intervals.len());
        for (i, interval) in event.intervals.iter().enumerate() {
            match to_ceiling(&interval.target, &site, baseline.as_ref()) {
                Ok(c) => ceilings.push(c),
                Err(e) => {
                    let reason = format!("intervals[{i}]: {e}");
                    let ack = self.checkpointed(opt_out(reason.clone()));
                    let queued = self
                        .ledger
                        .enqueue_all(vec![raw_record, ack_record(&ack, true)])
                        .await?;
                    drop(state);
                    queued.flushed().await?;
                    self.counters.events_refused.fetch_add(1, Ordering::Relaxed);
                    return Err(SubmitError::Refused {
                        reason,
                        ack: Box::new(ack),
                    });
                }
            }
        }
        let pre_event_meter = baseline
            .as_ref()
            .map(|b| b.kw)
            .or_else(|| state.telemetry.as_ref().map(|t| t.meter_kw.value()))
            .unwrap_or(site.facility_max_kw);
        let held = state.book.get(&event.id).map(|e| e.event.revision);
        let outcome = state
            .book
            .upsert(event.clone(), ceilings.clone(), pre_event_meter, received_at);
        if let UpsertOutcome::IgnoredStale { held_revision } = outcome {
            let held = held.unwrap_or(held_revision);
            let ack = self.checkpointed(opt_out(format!("stale revision: {held} is held")));
            let queued = self
                .ledger
                .enqueue_all(vec![raw_record, ack_record(&ack, false)])
                .await?;
            drop(state);
            queued.flushed().await?;
            return Err(SubmitError::Stale {
                event_id: event.id.clone(),
                revision: event.revision,
                held,
                ack: Box::new(ack),
            });
        }

        // The interpretation: every target → ceiling, the baseline used, the GPU budget chain.
        let first_ceiling = ceilings.iter().flatten().map(|c| c.ceiling_kw).reduce(f64::min);
        let budget = first_ceiling.and_then(|kw| {
            self.facility
                .ceiling_budget(Kilowatts(kw), nodes.max(1), &CoolingState::Settled)
                .ok()
        });
        let interpretation = NewRecord {
            kind: RecordKind::Interpretation,
            event: Some(event.id.clone()),
            dedup_key: Some(format!("interpretation:{}:{}", event.id, event.revision)),
            body: json!({
                "event": event,
                "ceilings": ceilings,
                "baseline": baseline,
                "pre_event_meter_kw": pre_event_meter,
                "received_at": received_at,
                "outcome": format!("{outcome:?}"),
                "settled_budget": budget,
                "facility_fingerprint": self.facility.fingerprint(),
            }),
        };

        let expected = budget.as_ref().map(|b| {
            let lo = self
                .facility
                .forward(b.gpu_budget, nodes.max(1), &CoolingState::Settled)
                .map_or(0.0, |m| m.lo.value());
            json!({"lo": lo, "hi": b.fsl.value()})
        });
        let mut ack = DrAck {
            schema: "dr.ack/1".to_string(),
            event_id: event.id.clone(),
            revision: event.revision,
            received_at,
            opt: Opt::In,
            reason: match (&outcome, event.test) {
                (_, true) => Some("test event: recorded, not acted on".to_string()),
                (UpsertOutcome::Duplicate, _) => Some("revision already held".to_string()),
                (UpsertOutcome::Cancelled { .. }, _) => Some("cancelled".to_string()),
                _ if first_ceiling.is_none() => Some("price signal recorded; no price table maps it".to_string()),
                _ => None,
            },
            accepted_target_kw: first_ceiling,
            expected_meter_kw: None,
            log_checkpoint: String::new(),
        };
        if let Some(expected) = expected {
            ack.expected_meter_kw = serde_json::from_value(expected).ok();
        }
        // The raw input, the interpretation and the ack go out in one group commit; the ack's
        // checkpoint is the ledger head before them (what the counterparty can already verify).
        ack.log_checkpoint = self.ledger.head().1;
        let ack_rec = ack_record(&ack, true);
        // Queued under the lock (the chain keeps the book's order of updates), flushed after it
        // (concurrent submissions share the flush instead of waiting in line for the lock).
        let queued = self
            .ledger
            .enqueue_all(vec![raw_record, interpretation, ack_rec])
            .await?;
        drop(state);
        let appended = queued.flushed().await?;
        // A copy that arrived while the first was queued: the ledger kept the first's records
        // (same keys), so answer with the first's ack.
        if appended.first().is_some_and(|raw| raw.duplicate)
            && let Some(stored) = self.stored_ack(&event.id, event.revision)
        {
            return Ok(SubmitOutcome {
                ack: stored,
                repeated: true,
            });
        }
        self.counters.events_accepted.fetch_add(1, Ordering::Relaxed);
        // A test event or a repeat cannot change any ceiling: no re-plan (a burst of them would
        // otherwise cost one pass over the whole book each).
        if !matches!(outcome, UpsertOutcome::TestOnly { .. } | UpsertOutcome::Duplicate) {
            self.wake.notify_one();
        }
        Ok(SubmitOutcome { ack, repeated: false })
    }

    /// `ack` with the ledger head as its checkpoint.
    fn checkpointed(&self, mut ack: DrAck) -> DrAck {
        ack.log_checkpoint = self.ledger.head().1;
        ack
    }

    /// Record an ack (with the ledger head as its checkpoint) and return it as recorded.
    async fn record_ack(&self, ack: DrAck, keyed: bool) -> Result<DrAck, LedgerError> {
        let ack = self.checkpointed(ack);
        self.ledger.append(ack_record(&ack, keyed)).await?;
        Ok(ack)
    }

    /// The ack recorded for (event, revision), if any.
    fn stored_ack(&self, event_id: &str, revision: u64) -> Option<DrAck> {
        let seq = self
            .ledger
            .find_dedup(&format!("ack:{event_id}:{revision}"))
            .ok()
            .flatten()?;
        let record = self.ledger.get(seq).ok().flatten()?;
        serde_json::from_value(record.body).ok()
    }

    /// One planning step under the state lock: advance the book, and if the ceiling, the jobs,
    /// the trim or a failed confirmation calls for it, re-plan and dispatch; restore pre-event
    /// caps when no event constrains the site any more.
    pub(crate) async fn plan_and_dispatch(&self, state: &mut State, reason: &str) -> Result<(), LedgerError> {
        let now = self.clock.now();
        // Transitions are recorded together with the plan they lead to (one flush).
        let transitions = state.book.advance(now);
        state.announce.extend(transitions.iter().cloned());
        let mut pending: Vec<NewRecord> = transitions
            .into_iter()
            .map(|t| NewRecord {
                kind: RecordKind::EventState,
                event: Some(t.event_id.clone()),
                dedup_key: None,
                body: serde_json::to_value(&t).unwrap_or_default(),
            })
            .collect();
        let ceiling = state.effective_ceiling(now);
        let Some(ceiling) = ceiling else {
            if !pending.is_empty() {
                self.ledger.append_all(pending).await?;
            }
            return self.restore(state, now).await;
        };
        let nodes = state.telemetry.as_ref().map_or(1, |t| t.nodes.max(1));
        if state.curtailment_started.is_none() {
            let gpu_now: f64 = state.jobs.iter().map(|j| j.measured_power.value()).sum();
            state.curtailment_started = Some((now, gpu_now));
            state.pre_event_meter_kw = state.telemetry.as_ref().map(|t| t.meter_kw.value());
            state.pre_event_caps = state.jobs.iter().map(|j| (j.spec.id.clone(), j.applied_cap)).collect();
            state.pre_event_caps_changed = true;
        }
        let (started, pre_gpu) = state.curtailment_started.unwrap_or((now, 0.0));
        let cooling = CoolingState::AfterStep {
            seconds: (now - started).num_milliseconds().max(0) as f64 / 1000.0,
            pre_event: PreEvent::GpuPower { gpu: Watts(pre_gpu) },
        };
        let budget = match self
            .facility
            .ceiling_budget(Kilowatts(ceiling.ceiling_kw), nodes, &cooling)
        {
            Ok(b) => b,
            Err(e) => {
                tracing::error!("facility model refused the ceiling: {e}");
                self.ledger.append_all(pending).await?;
                return Ok(());
            }
        };

        // A second, measured bound: shed from the pre-event operating point as a reduction
        // commitment (lower-bound multiplier μ = 1, meter error and noise added, cooling credited
        // only after its lag). With the rest of the site's load steady, the meter then ends at or
        // under the ceiling whatever the true overheads, and this is usually far less
        // conservative than the ceiling inversion alone. The larger of the two budgets is used.
        let measured_budget = state.pre_event_meter_kw.and_then(|pre_meter| {
            let excess = (pre_meter - ceiling.ceiling_kw).max(0.0);
            let timing = flexgate_policies::facility::Timing::After {
                seconds: (now - started).num_milliseconds().max(0) as f64 / 1000.0,
            };
            let shed = self.facility.reduction_requirement(Kilowatts(excess), timing).ok()?;
            Some(((pre_gpu - shed.gpu_shed.value()).max(0.0), shed))
        });

        // Jobs whose last cap was not confirmed, and suspended jobs, are fixed load at their
        // measured power.
        let (mut plannable, mut fixed_w) = (Vec::with_capacity(state.jobs.len()), 0.0);
        for job in &state.jobs {
            match state.caps.get(&job.spec.id) {
                _ if state.suspended.contains(&job.spec.id) => fixed_w += job.measured_power.value(),
                Some(applied) if !applied.confirmed => fixed_w += job.measured_power.value(),
                _ => plannable.push(job.spec.clone()),
            }
        }
        // The open-loop budget moves as the cooling lag passes; under the same ceiling the closed
        // loop owns the budget, so the trim absorbs that move instead of letting it add to what
        // the loop already learned (no wind-up, no jump).
        let base_w = budget
            .gpu_budget
            .value()
            .max(measured_budget.as_ref().map_or(0.0, |(w, _)| *w));
        if let Some(previous) = &state.plan {
            if previous.ceiling_kw == ceiling.ceiling_kw && previous.binding_event == ceiling.binding_event {
                state.trim_w += base_w - previous.base_budget_w;
            } else if state.trim_w < 0.0 {
                // A credit was learned against the old ceiling; under a new one it could overshoot
                // (a rising recovery step would exceed its ceiling). Drop it; the loop relearns.
                state.trim_w = 0.0;
            }
        }
        let gpu_budget = (base_w - state.trim_w - fixed_w).max(0.0);
        let plan = match state.planner.plan(&plannable, Watts(gpu_budget)) {
            Ok(plan) => plan,
            Err(e) => {
                tracing::error!("planning failed: {e}");
                self.ledger.append_all(pending).await?;
                return Ok(());
            }
        };
        pending.push(NewRecord {
            kind: RecordKind::Plan,
            event: Some(ceiling.binding_event.clone()),
            dedup_key: None,
            body: json!({
                "reason": reason,
                "ceiling": ceiling,
                "facility": budget,
                "measured_reduction": measured_budget.as_ref().map(|(w, shed)| json!({
                    "pre_event_meter_kw": state.pre_event_meter_kw,
                    "pre_event_gpu_w": pre_gpu,
                    "gpu_budget_w": w,
                    "requirement": shed,
                })),
                "base_budget_w": base_w,
                "trim_w": state.trim_w,
                "unconfirmed_fixed_w": fixed_w,
                "suspended": state.suspended,
                "gpu_budget_w": gpu_budget,
                "plan": compact_plan(&plan),
                "pre_event_caps": state.pre_event_caps_changed.then_some(&state.pre_event_caps),
                "curtailment_started": state.curtailment_started,
                "pre_event_meter_kw": state.pre_event_meter_kw,
            }),
        });
        let appended = self.ledger.append_all(pending).await?;
        let Some(record) = appended.last().cloned() else {
            return Ok(());
        };
        state.pre_event_caps_changed = false;
        self.counters.plans.fetch_add(1, Ordering::Relaxed);
        let until = caps_until(&state.book, &ceiling.events);
        let commands: Vec<CapCommand> = plan
            .entries
            .iter()
            .filter(|e| {
                state
                    .caps
                    .get(&e.job)
                    .is_none_or(|c| (c.cap - e.cap).value().abs() > 0.5 || !c.confirmed)
            })
            .map(|e| CapCommand {
                job: e.job.clone(),
                cap: e.cap,
                generation: record.seq,
                until,
            })
            .collect();
        state.plan = Some(PlanInForce {
            seq: record.seq,
            at: now,
            ceiling_kw: ceiling.ceiling_kw,
            binding_event: ceiling.binding_event.clone(),
            gpu_budget_w: gpu_budget,
            base_budget_w: base_w,
            recorded_at: std::time::Instant::now(),
            trim_w: state.trim_w,
            plan,
        });
        state.planned_ceiling = Some(ceiling.ceiling_kw);
        let shortfall_w = state.plan.as_ref().map_or(0.0, |p| p.plan.shortfall.value());
        self.dispatch(
            state,
            commands,
            RecordKind::Dispatch,
            Some(ceiling.binding_event.clone()),
            "plan",
        )
        .await?;
        self.retry_unconfirmed(state, record.seq, until, &ceiling.binding_event)
            .await?;
        if shortfall_w > SHORTFALL_TOLERANCE_W {
            self.suspend_for_shortfall(state, shortfall_w, &ceiling.binding_event)
                .await?;
        }
        Ok(())
    }

    /// Caps alone leave `shortfall_w` unmet: suspend jobs whose flex tier allows it, largest
    /// expected draw first, until their draw covers the shortfall; the next planning step
    /// counts them at their measured (idle) draw and re-plans the rest, suspending more if it
    /// must. When nothing may be suspended the shortfall stays in the plan record, and is
    /// logged and reported in the event's delivery reports: never silent.
    async fn suspend_for_shortfall(&self, state: &mut State, shortfall_w: f64, event: &str) -> Result<(), LedgerError> {
        let expected = |job: &str| {
            state
                .plan
                .as_ref()
                .and_then(|p| p.plan.entries.iter().find(|e| &*e.job == job))
                .map_or(0.0, |e| e.expected_power.value())
        };
        let mut candidates: Vec<(Arc<str>, f64)> = state
            .jobs
            .iter()
            .filter(|j| j.suspendable && !state.suspended.contains(&j.spec.id))
            .map(|j| (j.spec.id.clone(), expected(&j.spec.id)))
            .collect();
        candidates.sort_by(|a, b| b.1.total_cmp(&a.1));
        let mut covered = 0.0;
        let mut done = Vec::new();
        for (job, draw) in candidates {
            if covered >= shortfall_w {
                break;
            }
            match self.backend.suspend(&job).await {
                Ok(()) => {
                    covered += draw;
                    state.suspended.insert(job.clone());
                    done.push(json!({"job": job, "expected_w": draw, "outcome": "suspended"}));
                }
                Err(e) => {
                    done.push(json!({"job": job, "expected_w": draw, "outcome": "failed", "reason": e.to_string()}))
                }
            }
        }
        if done.is_empty() {
            tracing::warn!(
                event,
                shortfall_w,
                "caps alone cannot meet the target and no job may be suspended; the shortfall stands"
            );
            return Ok(());
        }
        tracing::warn!(
            event,
            shortfall_w,
            covered,
            "caps alone cannot meet the target: suspended jobs"
        );
        self.ledger
            .append(NewRecord {
                kind: RecordKind::Dispatch,
                event: Some(event.to_string()),
                dedup_key: None,
                body: json!({
                    "action": "suspend",
                    "at": self.clock.now(),
                    "reason": format!("caps at every job's floor leave {shortfall_w:.0} W over the GPU budget"),
                    "shortfall_w": shortfall_w,
                    "jobs": done,
                }),
            })
            .await?;
        // Re-plan with the suspended jobs as fixed load.
        self.wake.notify_one();
        Ok(())
    }

    /// Resume every job the gateway suspended (the curtailment is over).
    async fn resume_suspended(&self, state: &mut State, event: Option<String>) -> Result<(), LedgerError> {
        if state.suspended.is_empty() {
            return Ok(());
        }
        let mut done = Vec::new();
        for job in std::mem::take(&mut state.suspended) {
            let outcome = match self.backend.resume(&job).await {
                Ok(()) => json!({"job": job, "outcome": "resumed"}),
                Err(e) => {
                    tracing::error!(job = %job, "could not resume a suspended job: {e}");
                    json!({"job": job, "outcome": "failed", "reason": e.to_string()})
                }
            };
            done.push(outcome);
        }
        self.ledger
            .append(NewRecord {
                kind: RecordKind::Restore,
                event,
                dedup_key: None,
                body: json!({"action": "resume", "at": self.clock.now(), "jobs": done}),
            })
            .await?;
        Ok(())
    }

    /// Re-send the caps that were not confirmed to jobs whose nodes answer again (they are
    /// measured in the latest telemetry), under a fresh generation so that an agent re-applies
    /// them even where it kept the old one. Until confirmed these jobs stay fixed load at their
    /// measured draw, so a retry can only over-deliver; once one is confirmed the planner is
    /// woken to plan the job again. Jobs on nodes that do not answer are not retried here: that
    /// would hold every tick for the call timeout; the backend keeps their leases wanted and
    /// re-sends them when the node is back.
    async fn retry_unconfirmed(
        &self,
        state: &mut State,
        generation: u64,
        until: Option<DateTime<Utc>>,
        event: &str,
    ) -> Result<(), LedgerError> {
        if state.caps.values().all(|c| c.confirmed) {
            return Ok(());
        }
        let measured: std::collections::HashSet<&str> = state
            .telemetry
            .as_ref()
            .map(|t| t.jobs.iter().map(|m| &*m.job).collect())
            .unwrap_or_default();
        let running: std::collections::HashSet<&str> = state.jobs.iter().map(|j| &*j.spec.id).collect();
        let retries: Vec<CapCommand> = state
            .caps
            .iter()
            .filter(|(job, cap)| {
                !cap.confirmed
                    && cap.generation < generation
                    && !state.suspended.contains(*job)
                    && running.contains(&***job)
                    && measured.contains(&***job)
            })
            .map(|(job, cap)| CapCommand {
                job: job.clone(),
                cap: cap.cap,
                generation,
                until,
            })
            .collect();
        if retries.is_empty() {
            return Ok(());
        }
        self.counters
            .cap_retries
            .fetch_add(retries.len() as u64, Ordering::Relaxed);
        let jobs: Vec<Arc<str>> = retries.iter().map(|c| c.job.clone()).collect();
        tracing::info!(jobs = ?jobs, "re-sending unconfirmed caps to jobs whose nodes answer again");
        self.dispatch(
            state,
            retries,
            RecordKind::Dispatch,
            Some(event.to_string()),
            "retry_unconfirmed",
        )
        .await?;
        if jobs.iter().any(|j| state.caps.get(j).is_some_and(|c| c.confirmed)) {
            // Confirmed again: plan these jobs as flexible instead of as fixed load.
            state.replan = true;
            self.wake.notify_one();
        }
        Ok(())
    }

    /// Send commands, record the confirmations, and remember what each job's cap is now.
    /// `purpose` says in the record why these commands went out ("plan", "restore", "retry…").
    pub(crate) async fn dispatch(
        &self,
        state: &mut State,
        commands: Vec<CapCommand>,
        kind: RecordKind,
        event: Option<String>,
        purpose: &str,
    ) -> Result<(), LedgerError> {
        if commands.is_empty() {
            return Ok(());
        }
        let results = self.backend.apply(&commands).await;
        let now = self.clock.now();
        state.last_dispatch = Some(now);
        for (command, result) in commands.iter().zip(&results) {
            let entry = AppliedCap {
                cap: command.cap,
                generation: command.generation,
                confirmed: false,
            };
            let applied = match &result.outcome {
                CapOutcome::Applied { applied, .. } => AppliedCap {
                    cap: *applied,
                    confirmed: true,
                    ..entry
                },
                CapOutcome::Stale { .. } => AppliedCap {
                    confirmed: true,
                    ..entry
                },
                _ => {
                    self.counters.dispatch_failures.fetch_add(1, Ordering::Relaxed);
                    entry
                }
            };
            state.caps.insert(command.job.clone(), applied);
        }
        self.ledger
            .append(NewRecord {
                kind,
                event,
                dedup_key: None,
                body: dispatch_record(now, &commands, &results, purpose),
            })
            .await?;
        Ok(())
    }

    /// No event constrains the site: put every curtailed job back at its pre-event cap.
    async fn restore(&self, state: &mut State, now: DateTime<Utc>) -> Result<(), LedgerError> {
        if state.plan.is_none() && state.caps.is_empty() && state.suspended.is_empty() {
            return Ok(());
        }
        let generation = self.ledger.head().0 + 1;
        let commands: Vec<CapCommand> = state
            .caps
            .keys()
            .map(|job| CapCommand {
                job: job.clone(),
                cap: state.pre_event_caps.get(job).copied().unwrap_or_else(|| {
                    state
                        .jobs
                        .iter()
                        .find(|j| &j.spec.id == job)
                        .map_or(WattsPerGpu(f64::MAX), |j| j.spec.cap_range.max)
                }),
                generation,
                until: None,
            })
            .collect();
        let event = state.plan.as_ref().map(|p| p.binding_event.clone());
        self.dispatch(state, commands, RecordKind::Restore, event.clone(), "restore")
            .await?;
        self.resume_suspended(state, event).await?;
        state.caps.clear();
        state.pre_event_caps.clear();
        state.plan = None;
        state.planned_ceiling = None;
        state.curtailment_started = None;
        state.pre_event_meter_kw = None;
        state.trim_w = 0.0;
        tracing::info!(at = %now, "pre-event caps restored");
        Ok(())
    }

    /// An operator opts the site out of an event (e.g. a must-run emergency): its ceiling stops
    /// counting, the opt-out is recorded with the operator's name and reason, and an opt-out
    /// acknowledgment is recorded for the counterparty. The bearer token authenticates the call;
    /// the operator name is what the caller declares, recorded verbatim.
    /// Event phase changes (pending → ramping → active → recovering → completed/cancelled), each
    /// sent once its ledger record is flushed. A subscriber that lags more than 1,024 changes
    /// behind misses the oldest (and is told so by the receiver).
    pub fn subscribe_transitions(&self) -> tokio::sync::broadcast::Receiver<Transition> {
        self.transitions.subscribe()
    }

    /// What event `event_id` delivered so far, interval by interval, measured by the meter
    /// samples the gateway keeps (six hours); `None` for an unknown event.
    pub async fn event_delivery(&self, event_id: &str) -> Option<EventDelivery> {
        let state = self.state.lock().await;
        let entry = state.book.get(event_id)?;
        let meter: Vec<(DateTime<Utc>, f64)> = state.meter_history.iter().copied().collect();
        Some(EventDelivery {
            revision: entry.revision(),
            test: entry.event.test,
            phase: entry.phase_at(self.clock.now()),
            intervals: interval_delivery(entry, &meter, self.clock.now()),
        })
    }

    /// Operator opt-outs as they happen, so an adapter can tell the event's sender.
    pub fn subscribe_opt_outs(&self) -> tokio::sync::broadcast::Receiver<(String, String)> {
        self.opt_outs.subscribe()
    }

    pub async fn operator_opt_out(&self, event_id: &str, operator: &str, reason: &str) -> Result<DrAck, OperatorError> {
        let invalid = |field, message: &str| OperatorError::Invalid {
            field,
            message: message.to_string(),
        };
        if operator.trim().is_empty() || operator.len() > 128 {
            return Err(invalid("operator", "give the operator's name (1–128 characters)"));
        }
        if reason.trim().is_empty() || reason.len() > 1024 {
            return Err(invalid("reason", "give a reason (1–1024 characters)"));
        }
        let mut state = self.state.lock().await;
        let revision = state
            .book
            .get(event_id)
            .map(|e| e.event.revision)
            .ok_or_else(|| OperatorError::UnknownEvent(event_id.to_string()))?;
        let now = self.clock.now();
        let ack = DrAck {
            schema: "dr.ack/1".to_string(),
            event_id: event_id.to_string(),
            revision,
            received_at: now,
            opt: Opt::Out,
            reason: Some(format!("operator opt-out: {reason}")),
            accepted_target_kw: None,
            expected_meter_kw: None,
            log_checkpoint: self.ledger.head().1,
        };
        self.ledger
            .append_all(vec![
                NewRecord {
                    kind: RecordKind::Operator,
                    event: Some(event_id.to_string()),
                    dedup_key: None,
                    body: json!({"at": now, "action": "opt_out", "operator": operator, "reason": reason, "revision": revision}),
                },
                NewRecord {
                    kind: RecordKind::Ack,
                    event: Some(event_id.to_string()),
                    dedup_key: None,
                    body: serde_json::to_value(&ack).unwrap_or_default(),
                },
            ])
            .await?;
        state.opted_out.insert(event_id.to_string());
        drop(state);
        self.wake.notify_one();
        // Nobody listening (no adapter for this source) is fine.
        let _ = self.opt_outs.send((event_id.to_string(), reason.to_string()));
        Ok(ack)
    }

    /// Status for `GET /v1/status`.
    pub async fn status(&self) -> StatusView {
        let state = self.state.lock().await;
        let mut view = StatusView::build(&state, self.clock.now(), &self.ledger.head().1);
        view.flex_available_kw = self.flex_available_kw(&state);
        view
    }

    /// How far the site could lower its meter power now, kW, if every running job went to its
    /// floor (cap minimum, or the flex tier's slowdown limit): the metered power now minus the
    /// facility model's *upper* estimate of the meter with the GPUs at those floors, so the
    /// figure does not promise more than the site can deliver. `None` without telemetry.
    fn flex_available_kw(&self, state: &State) -> Option<f64> {
        let telemetry = state.telemetry.as_ref()?;
        let at_floors: f64 = state
            .jobs
            .iter()
            .map(|j| self.floors.floor(&j.spec).0.value().min(j.measured_power.value()))
            .sum();
        let gpu_now: f64 = state.jobs.iter().map(|j| j.measured_power.value()).sum();
        // GPUs outside any job (idle, or not in the inventory) stay as they are.
        let others = (telemetry.gpu_board_power.value() - gpu_now).max(0.0);
        let floor_meter = self
            .facility
            .forward(
                Watts(at_floors + others),
                telemetry.nodes.max(1),
                &CoolingState::Settled,
            )
            .ok()?;
        Some((telemetry.meter_kw.value() - floor_meter.hi.value()).max(0.0))
    }

    /// Events for `GET /v1/events`.
    pub async fn events(&self) -> Vec<EventView> {
        let state = self.state.lock().await;
        let now = self.clock.now();
        state
            .book
            .events()
            .map(|e| EventView::build(e, &state.book, now))
            .collect()
    }

    /// One event for `GET /v1/events/{id}`, with its full record.
    pub async fn event(&self, id: &str) -> Option<serde_json::Value> {
        let state = self.state.lock().await;
        let entry = state.book.get(id)?;
        let view = EventView::build(entry, &state.book, self.clock.now());
        Some(json!({"summary": view, "detail": entry}))
    }

    /// Jobs for `GET /v1/jobs`.
    pub async fn jobs(&self) -> Vec<JobView> {
        let state = self.state.lock().await;
        state
            .jobs
            .iter()
            .map(|j| JobView::build(j, state.caps.get(&j.spec.id)))
            .collect()
    }

    /// When the plan in force was computed and its record flushed (monotonic clock).
    pub async fn plan_recorded_at(&self) -> Option<std::time::Instant> {
        self.state.lock().await.plan.as_ref().map(|p| p.recorded_at)
    }

    /// The plan in force for `GET /v1/plan`.
    pub async fn plan(&self) -> Option<PlanView> {
        let state = self.state.lock().await;
        state.plan.as_ref().map(PlanView::build)
    }

    /// Prometheus text for `GET /metrics`.
    pub async fn metrics(&self) -> String {
        let status = self.status().await;
        let c = &self.counters;
        let counted = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
        let metrics = [
            (
                "flexgate_events_accepted_total",
                "counter",
                "Events acknowledged with opt in.",
                counted(&c.events_accepted),
            ),
            (
                "flexgate_events_refused_total",
                "counter",
                "Events refused (invalid, wrong site, unmappable).",
                counted(&c.events_refused),
            ),
            (
                "flexgate_plans_total",
                "counter",
                "Plans computed and recorded.",
                counted(&c.plans),
            ),
            (
                "flexgate_dispatch_failures_total",
                "counter",
                "Cap commands not confirmed by the backend.",
                counted(&c.dispatch_failures),
            ),
            (
                "flexgate_cap_drifts_total",
                "counter",
                "Confirmed caps the reconcile later found not in force (GPU reset, limit raised by hand).",
                counted(&c.drifts),
            ),
            (
                "flexgate_cap_retries_total",
                "counter",
                "Unconfirmed caps re-sent to jobs whose nodes answer again.",
                counted(&c.cap_retries),
            ),
            (
                "flexgate_trims_total",
                "counter",
                "Closed-loop trim adjustments.",
                counted(&c.trims),
            ),
            (
                "flexgate_active_events",
                "gauge",
                "Events ramping, active or recovering.",
                status.active_events.len() as f64,
            ),
            (
                "flexgate_meter_ceiling_kw",
                "gauge",
                "Meter ceiling in force (NaN when none).",
                status.meter_ceiling_kw.unwrap_or(f64::NAN),
            ),
            (
                "flexgate_gpu_budget_w",
                "gauge",
                "GPU-board budget in force (NaN when none).",
                status.gpu_budget_w.unwrap_or(f64::NAN),
            ),
            (
                "flexgate_measured_meter_kw",
                "gauge",
                "Last measured meter power.",
                status.measured_meter_kw.unwrap_or(f64::NAN),
            ),
            (
                "flexgate_measured_gpu_w",
                "gauge",
                "Last measured fleet GPU-board power.",
                status.measured_gpu_w.unwrap_or(f64::NAN),
            ),
            (
                "flexgate_trim_w",
                "gauge",
                "Closed-loop trim subtracted from the GPU budget.",
                status.trim_w,
            ),
            (
                "flexgate_ledger_records",
                "gauge",
                "Records in the ledger.",
                self.ledger.head().0 as f64,
            ),
        ];
        let mut out = String::new();
        for (name, kind, help, value) in metrics {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"));
        }
        out
    }

    /// Phase names for views.
    pub(crate) fn phase_name(phase: Phase) -> &'static str {
        match phase {
            Phase::Pending => "pending",
            Phase::Ramping => "ramping",
            Phase::Active => "active",
            Phase::Recovering => "recovering",
            Phase::Completed => "completed",
            Phase::Cancelled => "cancelled",
        }
    }

    /// Make the event accessible for recovery replays.
    pub(crate) fn reupsert(
        state: &mut State,
        event: GridEvent,
        ceilings: Vec<Option<CeilingTarget>>,
        pre_event_meter: f64,
        at: DateTime<Utc>,
    ) {
        let _ = state.book.upsert(event, ceilings, pre_event_meter, at);
    }
}

/// A plan as recorded: the totals, and one row per job in the column order of `columns` (a
/// 10,000-job plan is recorded, hashed and flushed on the event path, so rows are arrays).
fn compact_plan(plan: &CapPlan) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = plan
        .entries
        .iter()
        .map(|e| {
            // Values built directly: this runs for every job at every plan, on the event path,
            // and going through serde for the enums and the shared strings costs more than the
            // planning itself.
            serde_json::Value::Array(vec![
                serde_json::Value::String(e.job.to_string()),
                json!((e.cap.value() * 10.0).round() / 10.0),
                json!(e.expected_power.value().round()),
                json!(e.expected_tokens.value().round()),
                json!(e.floor.value().round()),
                serde_json::Value::String(e.floor_kind.as_str().to_string()),
                serde_json::Value::String(e.reason.as_str().to_string()),
            ])
        })
        .collect();
    json!({
        "policy": plan.policy,
        "budget": plan.budget.value(),
        "uncapped_power": plan.uncapped_power.value(),
        "planned_power": plan.planned_power.value(),
        "shortfall": plan.shortfall.value(),
        "fallbacks": plan.fallbacks,
        "columns": ["job", "cap_w", "expected_power_w", "expected_tokens_per_s", "floor_w", "floor_kind", "reason"],
        "rows": rows,
    })
}

/// What is known of a job's elasticity, in a few words for the ledger: `sweep`, `pfi 2.10`,
/// `predicted 1.85±0.24` (telemetry-predicted, with its standard error) or `unknown`. An auditor
/// reading why a job was cut as deep as it was needs this next to the plan.
pub(crate) fn elasticity_known(elasticity: &flexgate_policies::alloc::Elasticity) -> String {
    use flexgate_policies::alloc::Elasticity;
    match elasticity {
        Elasticity::Measured { .. } => "sweep".to_string(),
        Elasticity::Pfi { value, .. } => format!("pfi {value:.2}"),
        Elasticity::PredictedPfi { mean, sd, .. } => format!("predicted {mean:.2}±{sd:.2}"),
        Elasticity::Unknown => "unknown".to_string(),
    }
}

/// A dispatch as recorded: one row per command with its outcome, and the counts.
fn dispatch_record(
    at: DateTime<Utc>,
    commands: &[CapCommand],
    results: &[crate::cluster::CapResult],
    purpose: &str,
) -> serde_json::Value {
    let mut confirmed = 0usize;
    let rows: Vec<serde_json::Value> = commands
        .iter()
        .zip(results)
        .map(|(c, r)| {
            let (status, applied, detail) = match &r.outcome {
                CapOutcome::Applied { applied, clamped } => {
                    confirmed += 1;
                    (
                        "applied",
                        Some(applied.value()),
                        clamped.then_some("clamped".to_string()),
                    )
                }
                CapOutcome::Stale { latest } => {
                    confirmed += 1;
                    ("stale", None, Some(format!("latest generation {latest}")))
                }
                CapOutcome::UnknownJob => ("unknown_job", None, None),
                CapOutcome::Failed { reason } => ("failed", None, Some(reason.clone())),
            };
            json!([
                c.job,
                (c.cap.value() * 10.0).round() / 10.0,
                c.generation,
                status,
                applied,
                detail
            ])
        })
        .collect();
    json!({
        "at": at,
        "purpose": purpose,
        "columns": ["job", "cap_w", "generation", "status", "applied_w", "detail"],
        "rows": rows,
        "confirmed": confirmed,
        "failed": commands.len() - confirmed,
    })
}

/// The ledger record of an ack. The ack of an (event, revision) that was taken keeps a key, so
/// that a repeat gets the same ack.
fn ack_record(ack: &DrAck, keyed: bool) -> NewRecord {
    NewRecord {
        kind: RecordKind::Ack,
        event: Some(ack.event_id.clone()),
        dedup_key: keyed.then(|| format!("ack:{}:{}", ack.event_id, ack.revision)),
        body: serde_json::to_value(ack).unwrap_or_default(),
    }
}

/// When the caps of a plan must end at the latest: the last moment any of the events in force
/// still constrains the site (its recovery included). `None` when one of them is open-ended.
fn caps_until(book: &EventBook, events: &[String]) -> Option<DateTime<Utc>> {
    let mut until: Option<DateTime<Utc>> = None;
    for id in events {
        let entry = book.get(id)?;
        let (end, phase) = entry.phase_points().last().copied()?;
        if !phase.is_terminal() {
            return None;
        }
        until = Some(until.map_or(end, |u| u.max(end)));
    }
    until
}
