//! The gateway's controller: every decision between a grid event and a GPU cap, as a pure
//! state machine.
//!
//! The controller holds the gateway's state (the event book, the caps in force and what became
//! of them, the plan, the curtailment's starting point, the closed-loop trim, suspended jobs,
//! the meter history baselines are computed from) and takes inputs: a submitted event, an
//! operator action, the cluster's inventory and telemetry, the results of cap commands and
//! suspensions, and ticks. It answers with [`Effect`]s for a driver to carry out: ledger
//! records, cap dispatches, suspend and resume requests, announcements. It does no I/O and reads
//! no clock (time is an input), so a day of operation replays in milliseconds and property tests
//! can drive it through any sequence.
//!
//! # Event sourcing
//!
//! Every decision is expressed as ledger [`entry::Entry`]s, and the durable state is changed
//! only by [`Controller::apply`]ing them, live and at recovery alike: what the gateway knows
//! after a restart is exactly the fold of what it recorded. What is *observed* rather than
//! decided (the running jobs, the latest telemetry) is not part of that state; the driver feeds
//! it again after a restart.
//!
//! # Invariants (property-tested in `tests/controller_props.rs`)
//!
//! - a plan's expected draw never exceeds its budget plus its declared shortfall;
//! - when no event is in force and the restore is confirmed, every job runs at its uncapped
//!   limit: the end of a curtailment restores the limits the cluster reports as the jobs'
//!   maximum, never a snapshot that may itself have been curtailed;
//! - folding the recorded entries gives the same durable state as live operation;
//! - an acknowledgment is returned only after the effects that record its decision.

pub mod budget;
pub mod cluster;
pub mod config;
pub mod entry;
pub mod evidence;
pub mod flexibility;
mod intake;
pub mod job_cost;
mod outlook;
mod planner;
pub mod probe;
mod reconcile;
pub mod trim;

pub use intake::{Intake, IntakeDecision, OperatorError};
pub use outlook::ForecastSettings;

use crate::alloc::bounds::FloorModel;
use crate::alloc::curve_aware::FlexibilityCurve;
use crate::alloc::{CapPlan, JobSpec, Objective};
use crate::estimate::CurveFamily;
use crate::event::{EffectiveCeiling, EventBook, Transition};
use crate::facility::{CoolingState, FacilityModel, FacilityParams};
use crate::ids::EventId;
use crate::ids::JobId;
use crate::units::{Watts, WattsPerGpu};
use budget::OperatingPoint;
use chrono::{DateTime, Utc};
use cluster::{CapCommand, CapOutcome, CapResult, JobState, Telemetry, Unconfirmed};
use config::{ControlConfig, PolicyKind, SiteConfig};
use entry::{
    CapsDispatched, CurtailmentEnded, DISPATCH_COLUMNS, DispatchPurpose, DispatchRow, Entry, ExpectedOutcome,
    MeterSample, PLAN_COLUMNS, PLAN_NOTE_COLUMNS, PlanGuarantee, PlanNote, PlanReason, PlanRecorded, PlanRow, Recorded,
    RecordedAllocation, Started, SuspendOutcome, Trimmed,
};
use planner::Planner;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// How much meter history is kept in memory for baselines and reports (the ledger keeps all).
pub const HISTORY_KEEP_S: i64 = 6 * 3600;

/// A plan's shortfall above this is acted on (suspension) rather than left to rounding, W.
const SHORTFALL_TOLERANCE_W: f64 = 1.0;

/// A job's GPUs reported above its confirmed cap by more than this are drift, W per GPU
/// (NVML sets limits in mW and agents round; a real reset moves the limit by hundreds of W).
pub const DRIFT_TOLERANCE_W: f64 = 2.0;

/// A planned cap that differs from the one in force by less than this is not re-sent, W/GPU.
const CAP_RESEND_W: f64 = 0.5;

/// What the controller is configured with.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The site this gateway serves: events for another are refused.
    pub site_id: String,
    /// Rules for turning targets into ceilings.
    pub site: SiteConfig,
    /// The closed loop.
    pub control: ControlConfig,
    /// The allocation policy.
    pub policy: PolicyKind,
    /// What the policy maximises: GPU-weighted progress (the gateway's default) or Σ tokens/s.
    pub objective: Objective,
    /// Hedge curve-aware plans against the equal cut, and how much they may lose against it in
    /// their worst plausible case (a share of its value); `None`: no hedge.
    pub hedge_tolerance: Option<f64>,
    /// The facility model's parameters.
    pub facility: FacilityParams,
    /// Probing outside events (off by default).
    pub probe: probe::ProbeConfig,
    /// The baseline methods of the programs the site is settled in (`[settlement]`): probe
    /// steps keep out of each one's pre-event window before an announced event
    /// ([`crate::baseline::Method::event_day_window`]), besides `site.baseline_window_s`.
    pub settlement_methods: Vec<crate::baseline::Method>,
    /// How the site forecasts its flexibility (`[forecast]`).
    pub forecast: ForecastSettings,
}

/// Why the controller could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ControllerError {
    /// The facility parameters are invalid.
    #[error("facility parameters: {0}")]
    Facility(String),
}

/// A cap the gateway has sent and what became of it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AppliedCap {
    /// The cap (as applied, after clamping, when confirmed), W per GPU.
    pub cap: WattsPerGpu,
    /// The generation it was sent with.
    pub generation: u64,
    /// Whether the cluster confirmed it.
    pub confirmed: bool,
    /// Why not, when it is not confirmed and the cause is known (`/v1/jobs` shows it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unconfirmed: Option<Unconfirmed>,
}

/// The plan in force, with what it was derived from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanInForce {
    /// The generation its caps were sent with.
    pub generation: u64,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// The ceiling it serves, kW.
    pub ceiling_kw: f64,
    /// The event whose ceiling binds.
    pub binding_event: EventId,
    /// The events contributing a ceiling.
    pub events: Vec<String>,
    /// The budget the policy split, W.
    pub gpu_budget_w: f64,
    /// The open-loop budget before trim and fixed load, W.
    pub base_budget_w: f64,
    /// The trim, W.
    pub trim_w: f64,
    /// The allocation, as recorded.
    pub allocation: RecordedAllocation,
    /// When the caps end at the latest.
    pub until: Option<DateTime<Utc>>,
}

impl PlanInForce {
    fn from_record(p: &PlanRecorded) -> Self {
        PlanInForce {
            generation: p.generation,
            at: p.at,
            ceiling_kw: p.ceiling.ceiling_kw,
            binding_event: p.ceiling.binding_event.clone(),
            events: p.ceiling.events.clone(),
            gpu_budget_w: p.gpu_budget_w,
            base_budget_w: p.base_budget_w,
            trim_w: p.trim_w,
            allocation: p.plan.clone(),
            until: p.until,
        }
    }

    /// Expected draw of `job` under this plan, W (0 when it is not in the plan).
    #[must_use]
    pub fn expected_power(&self, job: &str) -> f64 {
        self.allocation
            .rows
            .iter()
            .find(|r| &**r.job() == job)
            .map_or(0.0, PlanRow::expected_power_w)
    }
}

/// Counters for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Events acknowledged with opt in.
    pub events_accepted: u64,
    /// Events refused (invalid, wrong site, unmappable).
    pub events_refused: u64,
    /// Plans computed and recorded.
    pub plans: u64,
    /// Cap commands not confirmed.
    pub dispatch_failures: u64,
    /// Closed-loop trim changes.
    pub trims: u64,
    /// Confirmed caps later found not in force.
    pub drifts: u64,
    /// Unconfirmed caps re-sent to jobs whose nodes answer again.
    pub cap_retries: u64,
}

/// Something for the driver to carry out, in order. Records come before the actions they
/// justify: a driver flushes the records of one batch of effects before acting on the rest.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Append to the ledger.
    Record(Box<Recorded>),
    /// Send cap commands; feed the results back with [`Input::CapResults`].
    Dispatch {
        /// Why.
        purpose: DispatchPurpose,
        /// The commands.
        commands: Vec<CapCommand>,
    },
    /// Suspend these jobs; feed the outcomes back with [`Input::Suspended`].
    Suspend {
        /// Jobs with their expected draw under the plan, W.
        jobs: Vec<(JobId, f64)>,
        /// The shortfall that calls for it, W.
        shortfall_w: f64,
    },
    /// Resume these jobs; feed the outcomes back with [`Input::Resumed`].
    Resume {
        /// The jobs.
        jobs: Vec<JobId>,
    },
    /// An event changed phase (once its record is flushed, tell the adapters).
    Announce(Transition),
    /// An operator opted out of an event (tell its sender, where the protocol allows).
    OptOutNotice {
        /// The event.
        event_id: String,
        /// The operator's reason.
        reason: String,
    },
    /// Something an operator should read in the log.
    Warn(String),
    /// Run a tick soon (the book or the job set changed).
    Wake,
}

/// What the driver feeds the controller, besides submissions and operator actions.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The cluster's jobs, as it reports them now.
    Inventory(Vec<JobState>),
    /// The latest measurements.
    Telemetry(Telemetry),
    /// Plan if anything calls for it; `measured` when fresh measurements came just before (the
    /// closed loop trims only then).
    Tick {
        /// Whether telemetry was just read.
        measured: bool,
    },
    /// What became of a [`Effect::Dispatch`].
    CapResults {
        /// Its purpose.
        purpose: DispatchPurpose,
        /// Its commands.
        commands: Vec<CapCommand>,
        /// One result per command, in order.
        results: Vec<CapResult>,
    },
    /// What became of a [`Effect::Suspend`].
    Suspended {
        /// Per job.
        outcomes: Vec<SuspendOutcome>,
        /// The shortfall it was for, W.
        shortfall_w: f64,
    },
    /// What became of a [`Effect::Resume`].
    Resumed {
        /// Per job.
        outcomes: Vec<SuspendOutcome>,
    },
    /// The scheduler's queue, read off the control path (or why it could not be).
    Scheduler(cluster::SchedulerView),
}

/// A consistent, cheap copy of what the read side shows (status, events, jobs, plan, metrics).
/// The large parts are shared, copy-on-write, with the controller.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The event book.
    pub book: Arc<EventBook>,
    /// Running jobs as last reported.
    pub jobs: Arc<Vec<JobState>>,
    /// Caps in force.
    pub caps: Arc<HashMap<JobId, AppliedCap>>,
    /// The plan in force.
    pub plan: Option<Arc<PlanInForce>>,
    /// The latest telemetry.
    pub telemetry: Option<Arc<Telemetry>>,
    /// Meter history (six hours): each figure with its quality (a reading, or the model's
    /// figure standing in: no source configured, a stale or a missing feed).
    pub meter_history: imbl::Vector<(DateTime<Utc>, f64, crate::meter::Quality)>,
    /// The trim, W.
    pub trim_w: f64,
    /// Jobs suspended by the gateway.
    pub suspended: usize,
    /// How far the site could lower its meter power now (every job at its floor), kW.
    pub flex_available_kw: Option<f64>,
    /// What shedding each amount would cost now (the curve-aware planner only).
    pub flexibility: Option<Arc<flexibility::SiteFlexibility>>,
    /// What the site expects it can shed in the hours ahead (with the curve).
    pub forecast: Option<Arc<crate::forecast::Forecast>>,
    /// The declared hours in force (the latest declaration's figure for each hour), with the
    /// declaration each comes from.
    pub declared: Arc<
        Vec<(
            Arc<crate::forecast::declare::Declaration>,
            crate::forecast::declare::DeclaredHour,
        )>,
    >,
    /// Counters.
    pub counters: Counters,
    /// Probe steps in flight.
    pub probes: Arc<std::collections::BTreeMap<JobId, probe::ActiveProbe>>,
    /// The evidence behind each job's learned knowledge (`elasticity_known`'s note), by job.
    pub knowledge: Arc<HashMap<JobId, String>>,
}

/// The controller. See the module docs.
pub struct Controller {
    settings: Settings,
    facility: FacilityModel,
    floors: FloorModel,
    planner: Planner,
    // Durable: the fold of the recorded entries.
    book: Arc<EventBook>,
    acks: HashMap<(EventId, u64), crate::event::Ack>,
    /// SHA-256 of the document each keyed ack answered (where one was received as bytes), so
    /// that a resend of the same revision with a different body is told apart from a repeat.
    ack_inputs: HashMap<(EventId, u64), String>,
    caps: Arc<HashMap<JobId, AppliedCap>>,
    suspended: BTreeSet<JobId>,
    plan: Option<Arc<PlanInForce>>,
    curtailment: Option<OperatingPoint>,
    trim_w: f64,
    last_dispatch: Option<DateTime<Utc>>,
    elasticity_known: HashMap<JobId, String>,
    throughput_known: HashMap<JobId, String>,
    /// What was measured of each running job's curve (`throughput_point` records).
    evidence: HashMap<Arc<str>, evidence::JobEvidence>,
    /// Floors raised because a job was measured slower than its tier (until the curtailment ends).
    tier_floors: HashMap<JobId, f64>,
    /// Probe steps in flight, by job (`probe_step` records not yet ended).
    probes: std::collections::BTreeMap<JobId, probe::ActiveProbe>,
    /// Profiles not to probe again before the time given (after a step timed out or failed).
    probe_retry: HashMap<Arc<str>, DateTime<Utc>>,
    /// Observed: the evidence behind each job's learned elasticity, for `elasticity_known`.
    knowledge_notes: Arc<HashMap<JobId, String>>,
    /// Observed: each job's learned knowledge, recomputed only when its evidence changed.
    learned_cache: evidence::LearnedCache,
    /// Persistent: a snapshot shares it instead of copying six hours of samples.
    meter_history: imbl::Vector<(DateTime<Utc>, f64, crate::meter::Quality)>,
    next_generation: u64,
    // Observed: fed again after a restart.
    jobs: Arc<Vec<JobState>>,
    telemetry: Option<Arc<Telemetry>>,
    // Why the next tick must plan, if it must.
    pending: Option<PlanReason>,
    // Recomputed when jobs or telemetry change, not at every publish.
    flex_available_kw: Option<f64>,
    flexibility: Option<Arc<flexibility::SiteFlexibility>>,
    // The planner's curve `flexibility` was converted from: the same `Arc` means the same curve.
    flexibility_source: Option<Arc<FlexibilityCurve>>,
    // The forecast, made again when the curve changes and every `forecast::REFRESH_S`.
    forecast: Option<Arc<crate::forecast::Forecast>>,
    // What the forecast needs besides the jobs: the queue, runtimes, the usual load.
    outlook: outlook::Outlook,
    counters: Counters,
    /// Observed: each running job's agent re-application counter as last seen, so that only
    /// increases are recorded (`caps_reapplied`).
    reapplied_seen: HashMap<JobId, u64>,
}

impl Controller {
    /// A controller with nothing recorded yet.
    pub fn new(settings: Settings) -> Result<Self, ControllerError> {
        let facility =
            FacilityModel::new(settings.facility.clone()).map_err(|e| ControllerError::Facility(e.to_string()))?;
        let family = Arc::new(CurveFamily::h200_generic());
        Ok(Controller {
            floors: FloorModel::new(family.clone()),
            planner: Planner::new(settings.policy, settings.objective, settings.hedge_tolerance, family),
            settings,
            facility,
            book: Arc::default(),
            acks: HashMap::new(),
            ack_inputs: HashMap::new(),
            caps: Arc::default(),
            suspended: BTreeSet::new(),
            plan: None,
            curtailment: None,
            trim_w: 0.0,
            last_dispatch: None,
            elasticity_known: HashMap::new(),
            throughput_known: HashMap::new(),
            evidence: HashMap::new(),
            tier_floors: HashMap::new(),
            probes: std::collections::BTreeMap::new(),
            probe_retry: HashMap::new(),
            knowledge_notes: Arc::default(),
            learned_cache: HashMap::new(),
            meter_history: imbl::Vector::new(),
            reapplied_seen: HashMap::new(),
            next_generation: 1,
            jobs: Arc::default(),
            telemetry: None,
            pending: None,
            flex_available_kw: None,
            flexibility: None,
            flexibility_source: None,
            forecast: None,
            outlook: outlook::Outlook::default(),
            counters: Counters::default(),
        })
    }

    /// Count a submission refused before it reached the controller: a document that does not
    /// parse, or an event a protocol adapter refused by itself.
    pub fn count_refused(&mut self) {
        self.counters.events_refused += 1;
    }

    /// The settings it runs with.
    #[must_use]
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The facility model.
    #[must_use]
    pub fn facility(&self) -> &FacilityModel {
        &self.facility
    }

    /// The event book.
    #[must_use]
    pub fn book(&self) -> &EventBook {
        &self.book
    }

    /// The caps the gateway sent and what became of them.
    #[must_use]
    pub fn caps(&self) -> &HashMap<JobId, AppliedCap> {
        &self.caps
    }

    /// The plan in force.
    #[must_use]
    pub fn plan(&self) -> Option<&PlanInForce> {
        self.plan.as_deref()
    }

    /// Probe steps in flight, by job.
    #[must_use]
    pub fn probes(&self) -> &std::collections::BTreeMap<JobId, probe::ActiveProbe> {
        &self.probes
    }

    /// Jobs suspended by the gateway.
    #[must_use]
    pub fn suspended(&self) -> &BTreeSet<JobId> {
        &self.suspended
    }

    /// Running jobs as last reported.
    #[must_use]
    pub fn jobs(&self) -> &[JobState] {
        &self.jobs
    }

    /// The next generation a command will carry.
    #[must_use]
    pub fn next_generation(&self) -> u64 {
        self.next_generation
    }

    /// Generations must keep rising across restarts and versions (a backend refuses a lower one
    /// as stale): never number a command at or below `floor`.
    pub fn raise_generation_floor(&mut self, floor: u64) {
        self.next_generation = self.next_generation.max(floor.saturating_add(1));
    }

    /// When the book next changes a phase or a ceiling, for the driver's sleep.
    #[must_use]
    pub fn next_wakeup(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.book.next_wakeup(now)
    }

    /// The ceiling in force at `now`.
    #[must_use]
    pub fn effective_ceiling(&self, now: DateTime<Utc>) -> Option<EffectiveCeiling> {
        self.book.effective_ceiling(now)
    }

    /// The durable state, for comparing a live controller with one rebuilt from its ledger.
    #[must_use]
    pub fn durable_state(&self) -> serde_json::Value {
        let mut caps: Vec<_> = self.caps.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        caps.sort_by(|a, b| a.0.cmp(&b.0));
        let mut acks: Vec<_> = self.acks.iter().collect();
        acks.sort_by(|a, b| a.0.cmp(b.0));
        let mut known: Vec<_> = self.elasticity_known.iter().map(|(k, v)| (k.to_string(), v)).collect();
        known.sort();
        let mut throughput: Vec<_> = self.throughput_known.iter().map(|(k, v)| (k.to_string(), v)).collect();
        throughput.sort();
        let evidence: std::collections::BTreeMap<String, &evidence::JobEvidence> =
            self.evidence.iter().map(|(k, v)| (k.to_string(), v)).collect();
        let floors: std::collections::BTreeMap<String, f64> =
            self.tier_floors.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        let probe_retry: std::collections::BTreeMap<String, DateTime<Utc>> =
            self.probe_retry.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        serde_json::json!({
            "book": &*self.book,
            "acks": acks,
            "caps": caps,
            "suspended": self.suspended,
            "plan": self.plan,
            "curtailment": self.curtailment,
            "trim_w": self.trim_w,
            "last_dispatch": self.last_dispatch,
            "elasticity_known": known,
            "throughput_known": throughput,
            "evidence": evidence,
            "tier_floors": floors,
            "probes": self.probes,
            "probe_retry": probe_retry,
            "meter_history": &self.meter_history,
            "next_generation": self.next_generation,
        })
    }

    /// Apply `entry`'s effect on the durable state and hand it to the driver to record.
    fn record(&mut self, effects: &mut Vec<Effect>, recorded: Recorded) {
        self.apply(&recorded.entry);
        effects.push(Effect::Record(Box::new(recorded)));
    }

    /// Fold one recorded entry into the state: the only way the durable state changes, live
    /// (right after deciding) and at recovery (reading the ledger back).
    pub fn apply(&mut self, entry: &Entry) {
        match entry {
            // What protocol adapters record changes nothing the controller decides on.
            Entry::EventReceived(_)
            | Entry::Started(_)
            | Entry::WireReceived(_)
            | Entry::WireSent(_)
            | Entry::AdapterOptedOut(_)
            | Entry::AdapterRegistration(_)
            | Entry::LedgerMigrated(_) => {}
            // The agents' own corrections: reported, not decided on (the caps stay as they were);
            // imported meter data: for settlement, kept in the interval store.
            Entry::CapsReapplied(_) | Entry::MeterImported(_) => {}
            // A forecast is what was promised; the next one is made afresh.
            Entry::Forecast(_) => {}
            Entry::Declared(d) => self.outlook.declared(d),
            Entry::EventInterpreted(e) => {
                let _ = Arc::make_mut(&mut self.book).upsert(
                    e.event.clone(),
                    e.ceilings.clone(),
                    e.pre_event_meter_kw,
                    e.received_at,
                );
            }
            Entry::EventAcked(a) => {
                if a.keyed {
                    let key = (a.ack.event_id.clone(), a.ack.revision);
                    if let Some(digest) = &a.input_sha256 {
                        self.ack_inputs.insert(key.clone(), digest.clone());
                    }
                    self.acks.insert(key, a.ack.clone());
                }
            }
            Entry::EventPhase(t) => {
                // Live, `step` has already advanced the book and this changes nothing; the
                // lookup keeps it from costing a walk of the whole book per transition.
                let moves = self
                    .book
                    .get(&t.event_id)
                    .is_some_and(|e| t.to > e.phase && !e.phase.is_terminal());
                if moves {
                    Arc::make_mut(&mut self.book).apply_transition(t);
                }
            }
            Entry::OperatorOptOut(o) => {
                Arc::make_mut(&mut self.book).opt_out(&o.event_id, o.at);
            }
            Entry::Plan(p) => {
                self.plan = Some(Arc::new(PlanInForce::from_record(p)));
                self.trim_w = p.trim_w;
                self.curtailment = Some(p.curtailment_started);
                self.next_generation = self.next_generation.max(p.generation.saturating_add(1));
            }
            Entry::CapsDispatched(d) => self.apply_dispatch(d),
            Entry::CapsDrifted(d) => {
                let why = if d.action == entry::UNRELIABLE_ACTION {
                    Unconfirmed::Unreliable
                } else {
                    Unconfirmed::RaisedOutOfBand
                };
                let caps = Arc::make_mut(&mut self.caps);
                for drift in &d.drifted {
                    if let Some(cap) = caps.get_mut(&drift.job) {
                        cap.confirmed = false;
                        cap.unconfirmed = Some(why);
                    }
                }
            }
            Entry::CapsLost(l) => {
                let caps = Arc::make_mut(&mut self.caps);
                for job in &l.unmeasured_capped_jobs {
                    if let Some(cap) = caps.get_mut(job) {
                        cap.confirmed = false;
                        cap.unconfirmed = Some(Unconfirmed::NotMeasured);
                    }
                }
            }
            Entry::JobsSuspended(s) => {
                for o in s.jobs.iter().filter(|o| o.outcome == entry::SuspendResult::Suspended) {
                    self.suspended.insert(o.job.clone());
                }
            }
            Entry::JobsResumed(r) => {
                for o in &r.jobs {
                    self.suspended.remove(&o.job);
                }
            }
            Entry::JobsChanged(c) => {
                for r in &c.runtimes {
                    self.outlook.runtime.observe(r.runtime_s, r.limit_s);
                }
                let caps = Arc::make_mut(&mut self.caps);
                for job in &c.jobs_ended {
                    caps.remove(job);
                    self.suspended.remove(job);
                    self.elasticity_known.remove(job);
                    self.throughput_known.remove(job);
                    // Kept under a signature, a profile outlives its job; under a job id, not.
                    self.evidence.remove(job.as_str());
                    self.tier_floors.remove(job);
                }
            }
            Entry::ThroughputPoint(p) => {
                let key = p.profile_key();
                if !self.evidence.contains_key(key) && self.evidence.len() >= evidence::MAX_PROFILES {
                    self.forget_oldest_profile();
                }
                self.evidence.entry(Arc::from(key)).or_default().add(p);
            }
            Entry::ProbeStep(s) => self.apply_probe_step(s),
            Entry::ProbeEnded(e) => self.apply_probe_ended(e),
            Entry::TierBackedOff(b) => {
                let floor = self.tier_floors.entry(JobId::from(b.job.as_str())).or_insert(0.0);
                *floor = floor.max(b.floor_w_per_gpu);
            }
            Entry::ThroughputKnown(k) => {
                for (job, known) in &k.throughput {
                    self.throughput_known.insert(JobId::from(job.as_str()), known.clone());
                }
            }
            Entry::ElasticityKnown(k) => {
                for (job, known) in &k.elasticity_known {
                    self.elasticity_known.insert(JobId::from(job.as_str()), known.clone());
                }
            }
            Entry::MeterSample(m) => {
                let history = &mut self.meter_history;
                // Whether the figure was a reading: a baseline and a delivery report are worked
                // out on readings, and say so when only a model's figures were there. Samples
                // recorded before the quality was were readings.
                let quality = m.meter_quality.unwrap_or(crate::meter::Quality::Measured);
                history.push_back((m.at, m.meter_kw, quality));
                let keep_from = m.at - chrono::Duration::seconds(HISTORY_KEEP_S);
                while history.front().is_some_and(|(at, _, _)| *at < keep_from) {
                    history.pop_front();
                }
            }
            Entry::Trimmed(t) => self.trim_w = t.trim_w,
            Entry::CurtailmentEnded(_) => {
                self.plan = None;
                self.curtailment = None;
                self.trim_w = 0.0;
                self.tier_floors.clear();
            }
        }
    }

    fn apply_dispatch(&mut self, d: &CapsDispatched) {
        self.last_dispatch = Some(d.at);
        let caps = Arc::make_mut(&mut self.caps);
        for row in &d.rows {
            self.next_generation = self.next_generation.max(row.generation().saturating_add(1));
            let confirmed = row.confirmed();
            if d.purpose == DispatchPurpose::Restore {
                // Back at the uncapped limit, or gone: nothing of ours is in force any more. A
                // failed restore stays, unconfirmed, and is sent again at the next tick.
                if confirmed || row.unknown_job() {
                    caps.remove(row.job());
                } else {
                    caps.insert(
                        row.job().clone(),
                        AppliedCap {
                            cap: WattsPerGpu(row.cap_w()),
                            generation: row.generation(),
                            confirmed: false,
                            unconfirmed: d.unconfirmed.get(row.job()).copied(),
                        },
                    );
                }
                continue;
            }
            caps.insert(
                row.job().clone(),
                AppliedCap {
                    cap: WattsPerGpu(row.applied_w().filter(|_| confirmed).unwrap_or(row.cap_w())),
                    generation: row.generation(),
                    confirmed,
                    unconfirmed: if confirmed {
                        None
                    } else {
                        d.unconfirmed.get(row.job()).copied()
                    },
                },
            );
        }
    }

    /// Feed an observation or a result; returns what to do.
    pub fn handle(&mut self, input: Input, now: DateTime<Utc>) -> Vec<Effect> {
        let mut effects = Vec::new();
        match input {
            Input::Inventory(jobs) => self.observe_inventory(jobs, now, &mut effects),
            Input::Telemetry(t) => self.observe_telemetry(t, now, &mut effects),
            Input::Tick { measured } => {
                if measured {
                    self.trim(now, &mut effects);
                }
                self.step(now, &mut effects);
            }
            Input::CapResults {
                purpose,
                commands,
                results,
            } => self.dispatched(purpose, &commands, &results, now, &mut effects),
            Input::Suspended { outcomes, shortfall_w } => {
                self.record(
                    &mut effects,
                    Recorded::new(
                        Entry::JobsSuspended(entry::JobsSuspended {
                            at: now,
                            reason: format!("caps at every job's floor leave {shortfall_w:.0} W over the GPU budget"),
                            shortfall_w,
                            jobs: outcomes,
                        }),
                        self.binding_event(),
                    ),
                );
                // Re-plan with the suspended jobs as fixed load.
                self.pending = Some(PlanReason::Suspended);
                effects.push(Effect::Wake);
            }
            Input::Resumed { outcomes } => {
                self.record(
                    &mut effects,
                    Recorded::new(
                        Entry::JobsResumed(entry::JobsResumed {
                            at: now,
                            jobs: outcomes,
                        }),
                        None,
                    ),
                );
            }
            Input::Scheduler(view) => {
                self.observe_scheduler(view);
                let (plannable, _) = self.plannable();
                self.refresh_forecast(&plannable, now, &mut effects);
            }
        }
        effects
    }

    fn binding_event(&self) -> Option<EventId> {
        self.plan.as_ref().map(|p| p.binding_event.clone())
    }

    /// The caps of the last plan, for the running jobs, re-sent at start with their original
    /// generation (idempotent at the backend), after a restart rebuilt the state.
    pub fn reapply_at_start(&mut self) -> Vec<Effect> {
        let Some(plan) = &self.plan else {
            return Vec::new();
        };
        let running: HashSet<&str> = self.jobs.iter().map(|j| &*j.spec.id).collect();
        let commands: Vec<CapCommand> = plan
            .allocation
            .rows
            .iter()
            .filter(|r| running.contains(&**r.job()))
            .map(|r| CapCommand {
                job: r.job().clone(),
                cap: WattsPerGpu(r.cap_w()),
                generation: plan.generation,
                until: plan.until,
            })
            .collect();
        if commands.is_empty() {
            return Vec::new();
        }
        vec![Effect::Dispatch {
            purpose: DispatchPurpose::ReapplyAtStart,
            commands,
        }]
    }

    /// The startup record.
    pub fn started(
        &mut self,
        events_replayed: usize,
        caps_reapplied: usize,
        backend: &str,
        now: DateTime<Utc>,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        self.record(
            &mut effects,
            Recorded::new(
                Entry::Started(Started {
                    at: now,
                    events_replayed,
                    caps_reapplied,
                    backend: backend.to_string(),
                    policy: self.settings.policy,
                }),
                None,
            ),
        );
        effects
    }

    fn observe_telemetry(&mut self, t: Telemetry, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let plausible = |v: f64| v.is_finite() && v >= 0.0;
        if !plausible(t.meter_kw.value()) || !plausible(t.gpu_board_power.value()) {
            effects.push(Effect::Warn(format!(
                "telemetry refused: meter {} kW, GPU-board {} W are not plausible readings; keeping the last sample",
                t.meter_kw.value(),
                t.gpu_board_power.value()
            )));
            return;
        }
        let ceiling = self.book.effective_ceiling(now);
        self.record(
            effects,
            Recorded::new(
                Entry::MeterSample(MeterSample {
                    at: now,
                    meter_kw: t.meter_kw.value(),
                    meter_quality: Some(t.meter_quality),
                    gpu_board_w: t.gpu_board_power.value(),
                    ceiling_kw: ceiling.as_ref().map(|c| c.ceiling_kw),
                    events: ceiling.as_ref().map(|c| c.events.clone()).unwrap_or_default(),
                    gpu_budget_w: self.plan.as_ref().map(|p| p.gpu_budget_w),
                    trim_w: self.trim_w,
                }),
                ceiling.as_ref().map(|c| c.binding_event.clone()),
            ),
        );
        self.reconcile_lost(&t, now, effects);
        self.record_throughput(&t, now, effects);
        self.learn_from(&t, now, effects);
        self.telemetry = Some(Arc::new(t));
        self.flex_available_kw = self.flex_available_kw();
        self.refresh_flexibility(now, effects);
    }

    /// The flexibility curve for the jobs as now reported, at the meter. The planner keeps its
    /// curve until the jobs or what is known of them change, and the meter conversion is redone
    /// only for a new curve, so most ticks cost one comparison; an unchanged curve keeps the
    /// time it was computed at.
    ///
    /// While an event's plan is in force the curve is how much more the site can shed from the
    /// caps in force (issue 33: the curve from uncapped would offer again the watts already
    /// shed), made again when the planner's curve changes or the caps move; outside events it
    /// is the planner's curve from uncapped. The status's flexibility-now figure follows it.
    fn refresh_flexibility(&mut self, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let (plannable, _) = self.plannable();
        match self.planner.flexibility(&plannable, flexibility::FLEXIBILITY_LEVELS) {
            Ok(Some(curve)) => {
                let draws = self.plan.is_some().then(|| self.draws_under_caps(&plannable));
                let same_curve = self.flexibility_source.as_ref().is_some_and(|c| Arc::ptr_eq(c, &curve));
                let same_start = self.flexibility.as_ref().is_some_and(|f| match &draws {
                    None => f.from == flexibility::FlexFrom::Uncapped,
                    Some(d) => f.from == flexibility::FlexFrom::CurrentCaps && f.from_draws_w == *d,
                });
                if !(same_curve && same_start) {
                    let site = match draws {
                        None => Some(flexibility::at_the_meter(&curve, &self.facility, now)),
                        Some(draws) => match self.planner.shed_profiles(&plannable) {
                            Ok(Some(profiles)) => Some(flexibility::more_from_caps(
                                &plannable,
                                &profiles,
                                &draws,
                                self.planner.objective(),
                                flexibility::FLEXIBILITY_LEVELS,
                                &self.facility,
                                now,
                            )),
                            Ok(None) => None,
                            Err(e) => {
                                effects.push(Effect::Warn(format!("flexibility curve not computed: {e}")));
                                None
                            }
                        },
                    };
                    self.flexibility = site.map(Arc::new);
                    self.flexibility_source = self.flexibility.as_ref().map(|_| curve);
                }
            }
            Ok(None) => (self.flexibility, self.flexibility_source) = (None, None),
            Err(e) => {
                effects.push(Effect::Warn(format!("flexibility curve not computed: {e}")));
                (self.flexibility, self.flexibility_source) = (None, None);
            }
        }
        self.flex_available_kw = self.flex_available_kw();
        self.refresh_forecast(&plannable, now, effects);
    }

    /// Each of `jobs`' draw under the cap in force, W, by the planner's figure (cap × GPUs, at
    /// most its uncapped draw); its uncapped draw where no cap of ours holds it.
    fn draws_under_caps(&self, jobs: &[JobSpec]) -> Vec<f64> {
        jobs.iter()
            .map(|j| {
                let uncapped = j.uncapped_power.value();
                self.caps
                    .get(&j.id)
                    .map_or(uncapped, |c| (c.cap.value() * f64::from(j.gpus)).min(uncapped))
            })
            .collect()
    }

    /// Closed loop: once the last dispatch has settled, move the trim on the measured meter.
    /// Never on a model's figure: trimming the model's estimate against itself would give back
    /// the conservative budget's margin on no evidence.
    fn trim(&mut self, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let (Some(plan), Some(t)) = (&self.plan, &self.telemetry) else {
            return;
        };
        if !t.meter_quality.is_measured() {
            return;
        }
        let settle =
            chrono::Duration::seconds(i64::try_from(self.settings.control.settle_s).unwrap_or(i64::MAX / 2_000));
        if self.last_dispatch.is_some_and(|at| now - at < settle) {
            return;
        }
        let input = trim::TrimInput {
            meter_kw: t.meter_kw.value(),
            ceiling_kw: plan.ceiling_kw,
            base_budget_w: plan.base_budget_w,
            uncapped_w: plan.allocation.uncapped_power,
            trim_w: self.trim_w,
        };
        let Some(change) = trim::next_trim(&input, &self.settings.control, self.facility.params()) else {
            return;
        };
        let reason = match change.direction {
            trim::TrimDirection::Lower => format!(
                "measured meter {:.1} kW stays {:.1} kW above the ceiling {:.1} kW after the settle time: lowering the GPU budget",
                input.meter_kw, change.excess_kw, input.ceiling_kw
            ),
            trim::TrimDirection::Raise => format!(
                "measured meter {:.1} kW is {:.1} kW under the ceiling {:.1} kW, beyond the {:.1} kW margin: raising the GPU budget",
                input.meter_kw, -change.excess_kw, input.ceiling_kw, change.margin_kw
            ),
        };
        let event = Some(plan.binding_event.clone());
        self.counters.trims += 1;
        self.record(
            effects,
            Recorded::new(
                Entry::Trimmed(Trimmed {
                    at: now,
                    direction: change.direction,
                    trim_w_before: input.trim_w,
                    trim_w: change.trim_w,
                    meter_kw: Some(input.meter_kw),
                    ceiling_kw: Some(input.ceiling_kw),
                    reason,
                    max_trim_w: change.max_trim_w,
                    max_credit_w: change.max_credit_w,
                }),
                event,
            ),
        );
        self.pending = Some(PlanReason::Trim);
    }

    /// One planning step: record phase changes; restore when nothing constrains the site any
    /// more; otherwise plan when the ceiling, the jobs, the trim or a confirmation calls for it.
    fn step(&mut self, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let transitions = Arc::make_mut(&mut self.book).advance(now);
        for t in transitions {
            let event = Some(t.event_id.clone());
            self.record(effects, Recorded::new(Entry::EventPhase(t.clone()), event));
            effects.push(Effect::Announce(t));
        }
        let Some(ceiling) = self.book.effective_ceiling(now) else {
            self.probe(now, effects);
            self.restore(now, effects);
            return;
        };
        if !self.probes.is_empty() {
            self.end_probes_for_event(&ceiling.binding_event, now, effects);
        }
        let unconfirmed = self.caps.values().any(|c| !c.confirmed);
        let reason = match self.pending {
            Some(reason) => Some(reason),
            None if self.plan.is_none() => Some(PlanReason::Ceiling),
            None if self.plan.as_ref().is_some_and(|p| p.ceiling_kw != ceiling.ceiling_kw) => Some(PlanReason::Ceiling),
            None if unconfirmed => Some(PlanReason::Unconfirmed),
            None => None,
        };
        if let Some(reason) = reason {
            self.pending = None;
            self.plan_for(&ceiling, reason, now, effects);
        }
    }

    /// The jobs the planner can count on, and the draw of the others (fixed load), W.
    fn plannable(&self) -> (Vec<JobSpec>, f64) {
        let mut plannable = Vec::with_capacity(self.jobs.len());
        let mut fixed_w = 0.0;
        for job in self.jobs.iter() {
            let counts =
                !self.suspended.contains(&job.spec.id) && self.caps.get(&job.spec.id).is_none_or(|c| c.confirmed);
            let unreliable = self
                .caps
                .get(&job.spec.id)
                .is_some_and(|c| !c.confirmed && c.unconfirmed == Some(Unconfirmed::Unreliable));
            if counts {
                let mut spec = job.spec.clone();
                // A job measured slower than its tier allows is held at the floor found for it.
                if let Some(floor) = self.tier_floors.get(&job.spec.id) {
                    let range = &mut spec.cap_range;
                    range.min = WattsPerGpu(floor.clamp(range.min.value(), range.max.value()));
                }
                plannable.push(spec);
            } else if unreliable {
                // Its cap holds now but keeps being undone: between re-applications the job may
                // draw uncapped, so it counts at what it draws uncapped, not at what it draws now.
                fixed_w += job.measured_power.value().max(job.spec.uncapped_power.value());
            } else {
                fixed_w += job.measured_power.value();
            }
        }
        (plannable, fixed_w)
    }

    fn plan_for(
        &mut self,
        ceiling: &EffectiveCeiling,
        reason: PlanReason,
        now: DateTime<Utc>,
        effects: &mut Vec<Effect>,
    ) {
        let start = self.curtailment.unwrap_or_else(|| OperatingPoint {
            at: now,
            gpu_w: self.jobs.iter().map(|j| j.measured_power.value()).sum(),
            meter_kw: self.telemetry.as_ref().map(|t| t.meter_kw.value()),
        });
        let open_loop = match budget::open_loop_budget(&self.facility, ceiling.ceiling_kw, self.nodes(), &start, now) {
            Ok(b) => b,
            Err(e) => {
                effects.push(Effect::Warn(format!("facility model refused the ceiling: {e}")));
                return;
            }
        };
        let (plannable, fixed_w) = self.plannable();
        let trim_w = match &self.plan {
            Some(previous) => trim::carry_trim(
                self.trim_w,
                previous.ceiling_kw == ceiling.ceiling_kw && previous.binding_event == ceiling.binding_event,
                previous.base_budget_w,
                open_loop.base_budget_w,
            ),
            None => self.trim_w,
        };
        let gpu_budget = budget::plannable_budget(open_loop.base_budget_w, trim_w, fixed_w);
        let (plan, hedge) = match self.planner.plan(&plannable, Watts(gpu_budget)) {
            Ok(found) => found,
            Err(e) => {
                effects.push(Effect::Warn(format!("planning failed: {e}")));
                return;
            }
        };
        let generation = self.next_generation;
        let until = caps_until(&self.book, &ceiling.events);
        let record = PlanRecorded {
            at: now,
            reason,
            generation,
            ceiling: ceiling.clone(),
            facility: serde_json::to_value(&open_loop.facility).unwrap_or_default(),
            measured_reduction: open_loop
                .measured_reduction
                .as_ref()
                .and_then(|m| serde_json::to_value(m).ok()),
            base_budget_w: open_loop.base_budget_w,
            trim_w,
            unconfirmed_fixed_w: fixed_w,
            suspended: self.suspended.clone(),
            gpu_budget_w: gpu_budget,
            plan: RecordedAllocation {
                guarantee: self.guarantee(&plan, hedge.as_ref()),
                ..recorded_allocation(&plan, &plannable, self.settings.policy, self.planner.objective())
            },
            promised: self
                .curtailment
                .is_none()
                .then(|| {
                    // The ask is the binding event's deepest ceiling, not the first ramp step.
                    let deepest = self
                        .book
                        .get(&ceiling.binding_event)?
                        .ceilings
                        .iter()
                        .flatten()
                        .map(|c| c.ceiling_kw)
                        .reduce(f64::min)?;
                    self.flexibility
                        .as_ref()?
                        .promise_for(start.meter_kw? - deepest)
                        .map(Box::new)
                })
                .flatten(),
            curtailment_started: start,
            until,
        };
        // The caps sent are the caps recorded (rounded to 0.1 W), so that the ledger says
        // exactly what the cluster was asked for.
        let commands: Vec<CapCommand> = record
            .plan
            .rows
            .iter()
            .filter(|r| {
                self.caps
                    .get(r.job())
                    .is_none_or(|c| (c.cap.value() - r.cap_w()).abs() > CAP_RESEND_W || !c.confirmed)
            })
            .map(|r| CapCommand {
                job: r.job().clone(),
                cap: WattsPerGpu(r.cap_w()),
                generation,
                until,
            })
            .collect();
        self.counters.plans += 1;
        self.record(
            effects,
            Recorded::new(Entry::Plan(record), Some(ceiling.binding_event.clone())),
        );
        // Always dispatched (possibly with no command), so that the results step retries
        // unconfirmed caps and acts on the shortfall.
        effects.push(Effect::Dispatch {
            purpose: DispatchPurpose::Plan,
            commands,
        });
    }

    /// Results of a dispatch: record them, then retry unconfirmed caps (after a plan) or plan
    /// again (when a retry was confirmed), and suspend when caps alone cannot meet the budget.
    fn dispatched(
        &mut self,
        purpose: DispatchPurpose,
        commands: &[CapCommand],
        results: &[CapResult],
        now: DateTime<Utc>,
        effects: &mut Vec<Effect>,
    ) {
        if !commands.is_empty() {
            let rows: Vec<DispatchRow> = commands
                .iter()
                .zip(results)
                .map(|(c, r)| DispatchRow::new(c, r))
                .collect();
            let confirmed = rows.iter().filter(|r| r.confirmed()).count();
            let failed = rows.len() - confirmed;
            let unconfirmed = commands
                .iter()
                .zip(results)
                .filter_map(|(c, r)| match &r.outcome {
                    CapOutcome::Failed { why: Some(why), .. } => Some((c.job.clone(), *why)),
                    _ => None,
                })
                .collect();
            if purpose != DispatchPurpose::Restore {
                self.counters.dispatch_failures += failed as u64;
            }
            let event = self.binding_event();
            self.record(
                effects,
                Recorded::new(
                    Entry::CapsDispatched(CapsDispatched {
                        at: now,
                        purpose,
                        columns: DISPATCH_COLUMNS.iter().map(ToString::to_string).collect(),
                        rows,
                        confirmed,
                        failed,
                        unconfirmed,
                    }),
                    event,
                ),
            );
        }
        match purpose {
            DispatchPurpose::Plan => {
                if let Some(retry) = self.retry_unconfirmed() {
                    self.counters.cap_retries += retry.len() as u64;
                    effects.push(Effect::Dispatch {
                        purpose: DispatchPurpose::RetryUnconfirmed,
                        commands: retry,
                    });
                }
                self.act_on_shortfall(effects);
            }
            DispatchPurpose::RetryUnconfirmed => {
                let reconfirmed = commands
                    .iter()
                    .any(|c| self.caps.get(&c.job).is_some_and(|a| a.confirmed));
                if reconfirmed {
                    // Confirmed again: plan these jobs as flexible instead of as fixed load.
                    self.pending = Some(PlanReason::Reconfirmed);
                    effects.push(Effect::Wake);
                }
            }
            DispatchPurpose::Probe => {
                for (command, result) in commands.iter().zip(results) {
                    if result.outcome.applied().is_none() {
                        self.end_probe(
                            &command.job,
                            entry::ProbeOutcome::CapFailed,
                            format!(
                                "the cluster did not apply {:.0} W/GPU ({})",
                                command.cap.value(),
                                result.outcome.describe()
                            ),
                            now,
                            effects,
                        );
                    }
                }
            }
            DispatchPurpose::ReapplyAtStart | DispatchPurpose::Restore => {}
        }
    }

    /// Caps alone leave a shortfall: suspend jobs whose flex tier allows it, largest expected
    /// draw first, the fewest that cover it. The next plan counts them as fixed load and
    /// suspends more if it must. When nothing may be suspended the shortfall stays in the plan
    /// record, and is logged and reported: never silent.
    fn act_on_shortfall(&mut self, effects: &mut Vec<Effect>) {
        let Some(plan) = &self.plan else { return };
        let shortfall_w = plan.allocation.shortfall;
        if shortfall_w <= SHORTFALL_TOLERANCE_W {
            return;
        }
        let candidates: Vec<(JobId, f64)> = self
            .jobs
            .iter()
            .filter(|j| j.suspendable && !self.suspended.contains(&j.spec.id))
            .map(|j| (j.spec.id.clone(), plan.expected_power(&j.spec.id)))
            .collect();
        let jobs = reconcile::select_suspensions(candidates, shortfall_w);
        if jobs.is_empty() {
            effects.push(Effect::Warn(format!(
                "caps alone cannot meet the target of {} and no job may be suspended; a shortfall of {shortfall_w:.0} W stands",
                plan.binding_event
            )));
            return;
        }
        effects.push(Effect::Suspend { jobs, shortfall_w });
    }

    /// No event constrains the site: end the curtailment and send every job the gateway capped
    /// back to its uncapped limit (the maximum the cluster reports for its GPUs; an agent then
    /// restores the limit it found before the first lease, out-of-band limits included), and
    /// resume suspended jobs. Failed restores stay and are sent again at the next tick.
    fn restore(&mut self, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        if self.plan.is_some() {
            let event = self.binding_event();
            self.record(
                effects,
                Recorded::new(Entry::CurtailmentEnded(CurtailmentEnded { at: now }), event),
            );
        }
        // A probe step in flight keeps its cap until it ends; then it is restored like any other.
        if self.caps.keys().any(|job| !self.probes.contains_key(job)) {
            let generation = self.next_generation;
            let mut commands: Vec<CapCommand> = self
                .caps
                .keys()
                .filter(|job| !self.probes.contains_key(*job))
                .map(|job| CapCommand {
                    job: job.clone(),
                    cap: self.uncapped_limit(job),
                    generation,
                    until: None,
                })
                .collect();
            commands.sort_by(|a, b| a.job.cmp(&b.job));
            effects.push(Effect::Dispatch {
                purpose: DispatchPurpose::Restore,
                commands,
            });
        }
        if !self.suspended.is_empty() {
            effects.push(Effect::Resume {
                jobs: self.suspended.iter().cloned().collect(),
            });
        }
    }

    /// The limit a job runs at without any curtailment: its GPUs' maximum as the cluster
    /// reports it (for a job no longer reported, the largest limit any GPU may take, which a
    /// backend clamps to its GPUs' maximum).
    fn uncapped_limit(&self, job: &str) -> WattsPerGpu {
        self.jobs
            .iter()
            .find(|j| &*j.spec.id == job)
            .map_or(WattsPerGpu(f64::MAX), |j| j.spec.cap_range.max)
    }

    /// How far the site could lower its meter power now, kW, if every running job went to its
    /// floor (cap minimum, or the flex tier's slowdown limit): the metered power now minus the
    /// facility model's *upper* estimate of the meter with the GPUs at those floors, so the
    /// figure does not promise more than the site can deliver. `None` without telemetry.
    ///
    /// While an event's caps are in force, how much more the site can shed from them: the
    /// deepest level of the flexibility curve from the caps (every plannable job from its cap
    /// to its floor, the facility model's lower bound of that reduction). The figure above
    /// would carry the model's whole error on the meter's level, larger than what a deeper cut
    /// has left, and read 0 while the GPUs stand well above their floors (issue 33). Without a
    /// curve (a proportional policy) the same room is converted here.
    pub(crate) fn flex_available_kw(&self) -> Option<f64> {
        let telemetry = self.telemetry.as_ref()?;
        if self.plan.is_some() {
            if let Some(curve) = self
                .flexibility
                .as_ref()
                .filter(|c| c.from == flexibility::FlexFrom::CurrentCaps)
            {
                return Some(curve.most_meter_shed_kw());
            }
            let (plannable, _) = self.plannable();
            let room: f64 = plannable
                .iter()
                .zip(self.draws_under_caps(&plannable))
                .map(|(j, draw)| (draw - self.floors.floor(j).0.value()).max(0.0))
                .sum();
            return self
                .facility
                .forward_reduction(Watts(room), crate::facility::Timing::Settled)
                .ok()
                .map(|m| m.lo.value().max(0.0));
        }
        let at_floors: f64 = self
            .jobs
            .iter()
            .map(|j| self.floors.floor(&j.spec).0.value().min(j.measured_power.value()))
            .sum();
        let gpu_now: f64 = self.jobs.iter().map(|j| j.measured_power.value()).sum();
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

    /// What the read side shows, as of now.
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            book: self.book.clone(),
            jobs: self.jobs.clone(),
            caps: self.caps.clone(),
            plan: self.plan.clone(),
            telemetry: self.telemetry.clone(),
            meter_history: self.meter_history.clone(),
            trim_w: self.trim_w,
            suspended: self.suspended.len(),
            flex_available_kw: self.flex_available_kw,
            flexibility: self.flexibility.clone(),
            forecast: self.forecast.clone(),
            declared: self.outlook.declared_view.clone(),
            counters: self.counters,
            probes: Arc::new(self.probes.clone()),
            knowledge: self.knowledge_notes.clone(),
        }
    }
}

impl Controller {
    /// What `plan` guarantees against the equal cut of its budget: the hedge's finding, or the
    /// trivial guarantee of the equal cut itself; `None` where nothing judged it.
    fn guarantee(
        &self,
        plan: &CapPlan,
        hedge: Option<&crate::alloc::curve_aware::Hedge>,
    ) -> Option<Box<PlanGuarantee>> {
        let objective = self.planner.objective();
        if self.planner.is_equal_cut() {
            return Some(Box::new(PlanGuarantee {
                objective,
                worst_gain_vs_equal: 0.0,
                tolerance: 0.0,
                noise: 0.0,
                kept: 0.0,
                blend: 0.0,
                worst_case: "none: the plan is the equal cut".to_string(),
                measured: true,
            }));
        }
        let hedge = hedge?;
        let unit = hedge.equal_value.abs();
        if unit.is_nan() || unit <= 0.0 || plan.shortfall.value() > 0.0 {
            return None;
        }
        let share = |v: f64| (v / unit * 1e6).round() / 1e6;
        Some(Box::new(PlanGuarantee {
            objective,
            worst_gain_vs_equal: share(hedge.bound),
            tolerance: self.planner.hedge_tolerance().unwrap_or(0.0),
            noise: share(hedge.noise),
            kept: (hedge.shrink * 1e4).round() / 1e4,
            blend: hedge.blend,
            worst_case: crate::alloc::curve_aware::scenario_name(hedge.worst_scenario),
            measured: hedge.bound_measured,
        }))
    }
}

/// A plan as recorded: the totals, and one row per job.
fn recorded_allocation(
    plan: &CapPlan,
    jobs: &[JobSpec],
    policy: PolicyKind,
    objective: Objective,
) -> RecordedAllocation {
    let (mut tokens, mut tokens_max, mut progress, mut weight) = (0.0, 0.0, 0.0, 0.0);
    let mut notes = Vec::with_capacity(plan.entries.len());
    for (e, job) in plan.entries.iter().zip(jobs) {
        let share = if job.uncapped_tokens.value() > 0.0 {
            (e.expected_tokens / job.uncapped_tokens).clamp(0.0, 1.0)
        } else {
            1.0
        };
        tokens += e.expected_tokens.value();
        tokens_max += job.uncapped_tokens.value();
        let w = f64::from(job.gpus) * job.priority;
        progress += w * share;
        weight += w;
        notes.push(PlanNote(
            job.gpus,
            job.priority,
            knowledge_note(&job.elasticity),
            (share * 1e4).round() / 1e4,
        ));
    }
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 1.0 };
    RecordedAllocation {
        objective: Some(objective),
        expected: Some(Box::new(ExpectedOutcome {
            tokens_kept_share: ratio(tokens, tokens_max),
            progress_kept_share: ratio(progress, weight),
        })),
        note_columns: PLAN_NOTE_COLUMNS.iter().map(ToString::to_string).collect(),
        notes,
        guarantee: None,
        policy,
        budget: plan.budget.value(),
        uncapped_power: plan.uncapped_power.value(),
        planned_power: plan.planned_power.value(),
        shortfall: plan.shortfall.value(),
        fallbacks: plan.fallbacks.clone(),
        columns: PLAN_COLUMNS.iter().map(ToString::to_string).collect(),
        rows: plan
            .entries
            .iter()
            .map(|e| {
                PlanRow(
                    e.job.clone(),
                    round_cap(e.cap.value()),
                    e.expected_power.value().round(),
                    e.expected_tokens.value().round(),
                    e.floor.value().round(),
                    e.floor_kind,
                    e.reason,
                )
            })
            .collect(),
    }
}

/// What the planner knew of a job, hence the curve it planned on (see [`PlanNote`]).
fn knowledge_note(elasticity: &crate::alloc::Elasticity) -> String {
    use crate::alloc::Elasticity;
    match elasticity {
        Elasticity::Measured { curve, tokens_sd } if tokens_sd.is_empty() => {
            format!("measured curve ({} points)", curve.points().len())
        }
        Elasticity::Measured { curve, tokens_sd } => {
            // The largest standard error of a capped point, as a share of the uncapped figure.
            let top = curve.uncapped().tokens.value();
            let worst = tokens_sd.iter().copied().fold(0.0, f64::max) / top.max(f64::MIN_POSITIVE);
            format!(
                "measured curve ({} points, ±{:.1} % at most)",
                curve.points().len(),
                100.0 * worst
            )
        }
        Elasticity::Pfi { value, .. } => format!("pfi {value:.2} on grid"),
        Elasticity::PredictedPfi { mean, sd, .. } => format!("predicted pfi {mean:.2}±{sd:.2}"),
        Elasticity::Unknown => "unknown".to_string(),
    }
}

/// A cap as sent and recorded: 0.1 W per GPU (NVML takes milliwatts; finer is noise).
fn round_cap(w: f64) -> f64 {
    (w * 10.0).round() / 10.0
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
