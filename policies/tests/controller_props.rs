//! Property tests of the gateway's controller over random input sequences: events with
//! revisions, cancellations and operator opt-outs, back-to-back and overlapping events, jobs
//! starting and ending, cap commands failing, nodes going silent, and restarts as a fold of the
//! ledger recorded so far.
//!
//! The cluster is a small deterministic model driven through the same effects a real driver
//! carries out (records appended to an in-memory ledger, cap commands applied or failed,
//! suspensions), so every invariant is checked on the controller's own decisions:
//!
//! 1. a plan's expected draw never exceeds its budget plus its declared shortfall;
//! 2. once no event is in force and the restore went through, every job runs at its uncapped
//!    limit and the controller holds no cap;
//! 3. folding the recorded entries gives the same durable state as live operation;
//! 4. every acknowledgment returned is among the records of its decision (or, for a repeat,
//!    was recorded before).

use chrono::{DateTime, Duration, Utc};
use flexgate_policies::alloc::{CapRange, Elasticity, JobSpec};
use flexgate_policies::control::cluster::{
    CapCommand, CapOutcome, CapResult, JobState, JobTelemetry, MeasuredThroughput, Telemetry, Unconfirmed,
};
use flexgate_policies::control::config::{ControlConfig, PolicyKind, SiteConfig};
use flexgate_policies::control::entry::{Entry, ProbeOutcome, Received, SuspendOutcome, SuspendResult, Transport};
use flexgate_policies::control::{Controller, Effect, Input, IntakeDecision, Settings};
use flexgate_policies::event::{Ack, EventSource, GridEvent, Interval, Target, Window};
use flexgate_policies::facility::FacilityParams;
use flexgate_policies::ids::JobId;
use flexgate_policies::units::{Kilowatts, TokensPerSec, Watts, WattsPerGpu};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

const GPUS: u32 = 8;
const MAX_W: f64 = 700.0;

/// One job of the model cluster.
#[derive(Debug, Clone)]
struct ModelJob {
    id: JobId,
    uncapped_per_gpu: f64,
    cap: f64,
    generation: u64,
    suspended: bool,
    suspendable: bool,
    /// When its cap last changed: its throughput is steady 15 s after.
    cap_since: DateTime<Utc>,
}

impl ModelJob {
    /// Tokens/s: concave in the draw (PFI about 2), 10,000 uncapped.
    fn tokens(&self) -> f64 {
        if self.suspended {
            return 0.0;
        }
        10_000.0 * (self.cap.min(self.uncapped_per_gpu) / self.uncapped_per_gpu).sqrt()
    }

    fn draw(&self) -> f64 {
        if self.suspended {
            60.0 * f64::from(GPUS)
        } else {
            self.cap.min(self.uncapped_per_gpu) * f64::from(GPUS)
        }
    }
}

/// A cluster that applies caps, fails the ones it is told to, and can lose a node.
#[derive(Debug, Clone, Default)]
struct ModelCluster {
    jobs: Vec<ModelJob>,
    /// Jobs whose node does not answer: commands fail, telemetry omits them.
    silent: Vec<JobId>,
    /// Whether the meter figure is a reading (`false`: the facility model's estimate).
    model_meter: bool,
    /// Fail every command while set.
    failing: bool,
    /// Jobs are in the probed tier and report their throughput.
    probing: bool,
    /// Throughput is never steady (a job whose figure never settles).
    unsteady: bool,
    /// Telemetry reports each job's uncapped draw, as steady, whatever its cap: readings taken
    /// before a cap took effect, delivered late by a busy node.
    stale_power: bool,
    /// Jobs whose agent reports their cap undone again and again: the inventory says so, and a
    /// command answers `unreliable` as the agents backend does.
    unreliable: Vec<JobId>,
    /// Jobs whose GPUs do not take a cap: the driver answers success and nothing changes
    /// (`not_applied`).
    not_applied: Vec<JobId>,
    /// Per job, the agents' re-application counter.
    reapplied: BTreeMap<JobId, u64>,
    next_job: u32,
}

impl ModelCluster {
    fn start_job(&mut self, uncapped_per_gpu: f64, suspendable: bool) {
        self.next_job += 1;
        self.jobs.push(ModelJob {
            id: JobId::from(format!("job-{}", self.next_job)),
            uncapped_per_gpu,
            cap: MAX_W,
            generation: 0,
            suspended: false,
            suspendable,
            cap_since: DateTime::<Utc>::UNIX_EPOCH,
        });
    }

    fn inventory(&self) -> Vec<JobState> {
        self.jobs
            .iter()
            .enumerate()
            .map(|(i, j)| JobState {
                spec: JobSpec {
                    id: j.id.clone(),
                    gpus: GPUS,
                    cap_range: CapRange::H200,
                    uncapped_power: Watts(j.uncapped_per_gpu * f64::from(GPUS)),
                    uncapped_tokens: TokensPerSec(10_000.0),
                    elasticity: if i % 3 == 0 {
                        Elasticity::Unknown
                    } else {
                        Elasticity::PredictedPfi {
                            mean: 1.2 + 0.3 * (i % 4) as f64,
                            sd: 0.241,
                            grid: None,
                        }
                    },
                    max_slowdown: None,
                    // Every other job counts double under the progress objective.
                    priority: 1.0 + (i % 2) as f64,
                },
                nodes: vec![format!("node-{i}").into()],
                applied_cap: WattsPerGpu(j.cap),
                generation: j.generation,
                measured_power: Watts(j.draw()),
                measured_tokens: self.probing.then(|| TokensPerSec(j.tokens())),
                suspendable: j.suspendable,
                signature: None,
                tier: self.probing.then(|| Arc::from("batch")),
                cap_unreliable: self.unreliable.contains(&j.id),
                cap_reapplied: self.reapplied.get(&j.id).copied().unwrap_or(0),
                started_at: None,
                time_limit_s: None,
            })
            .collect()
    }

    fn telemetry(&self, at: DateTime<Utc>) -> Telemetry {
        let jobs: Vec<JobTelemetry> = self
            .jobs
            .iter()
            .filter(|j| !self.silent.contains(&j.id))
            .map(|j| JobTelemetry {
                job: j.id.clone(),
                power: Watts(if self.stale_power {
                    j.uncapped_per_gpu * f64::from(GPUS)
                } else {
                    j.draw()
                }),
                tokens: self.probing.then(|| MeasuredThroughput {
                    tokens: TokensPerSec(j.tokens()),
                    since: at - Duration::seconds(30),
                    samples: 30,
                    steady: !self.unsteady && at - j.cap_since >= Duration::seconds(15),
                }),
            })
            .collect();
        let gpu: f64 = self.jobs.iter().map(ModelJob::draw).sum();
        Telemetry {
            at,
            gpu_board_power: Watts(jobs.iter().map(|j| j.power.value()).sum()),
            jobs,
            meter_kw: Kilowatts(20.0 + gpu * 1.35 / 1000.0),
            meter_quality: if self.model_meter {
                flexgate_policies::meter::Quality::Model
            } else {
                flexgate_policies::meter::Quality::Measured
            },
            nodes: u32::try_from(self.jobs.len()).unwrap_or(1).max(1),
        }
    }

    fn apply(&mut self, commands: &[CapCommand], now: DateTime<Utc>) -> Vec<CapResult> {
        commands
            .iter()
            .map(|c| {
                let outcome = match self.jobs.iter_mut().find(|j| j.id == c.job) {
                    None => CapOutcome::UnknownJob,
                    Some(_) if self.failing || self.silent.contains(&c.job) => CapOutcome::Failed {
                        reason: "model: node does not answer".into(),
                        why: Some(Unconfirmed::Unreachable),
                    },
                    Some(_) if self.not_applied.contains(&c.job) => CapOutcome::Failed {
                        reason: "model: the driver accepted the set and kept its limit".into(),
                        why: Some(Unconfirmed::NotApplied),
                    },
                    Some(j) if self.unreliable.contains(&c.job) && c.generation >= j.generation => {
                        j.cap = c.cap.value().clamp(200.0, MAX_W);
                        j.generation = c.generation;
                        CapOutcome::Failed {
                            reason: "model: the cap keeps being undone".into(),
                            why: Some(Unconfirmed::Unreliable),
                        }
                    }
                    Some(j) if c.generation < j.generation => CapOutcome::Stale { latest: j.generation },
                    Some(j) => {
                        let applied = c.cap.value().clamp(200.0, MAX_W);
                        if (j.cap - applied).abs() > 1e-9 {
                            j.cap_since = now;
                        }
                        j.cap = applied;
                        j.generation = c.generation;
                        CapOutcome::Applied {
                            applied: WattsPerGpu(applied),
                            clamped: (applied - c.cap.value()).abs() > 1e-9,
                        }
                    }
                };
                CapResult {
                    job: c.job.clone(),
                    generation: c.generation,
                    outcome,
                }
            })
            .collect()
    }
}

/// What the test drives the controller with.
#[derive(Debug, Clone)]
enum Op {
    /// Submit (event index, revision, ceiling as a share of the uncapped meter, start offset s,
    /// duration s, cancel, test).
    Submit(u8, u64, f64, i64, Option<u64>, bool, bool),
    OptOut(u8),
    /// Advance time and run a measured tick.
    Advance(i64),
    /// Advance time and run an unmeasured tick (the book moved, nothing measured).
    Wake(i64),
    JobStarts(f64, bool),
    JobEnds(usize),
    NodeSilent(usize),
    NodesBack,
    Failing(bool),
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 1u64..4, 0.3f64..1.1, -120i64..900, prop::option::weighted(0.85, 60u64..1800), prop::bool::weighted(0.1), prop::bool::weighted(0.1))
            .prop_map(|(i, r, f, s, d, c, t)| Op::Submit(i, r, f, s, d, c, t)),
        1 => (0u8..3).prop_map(Op::OptOut),
        8 => (5i64..400).prop_map(Op::Advance),
        2 => (1i64..120).prop_map(Op::Wake),
        1 => (300.0f64..700.0, any::<bool>()).prop_map(|(w, s)| Op::JobStarts(w, s)),
        1 => (0usize..8).prop_map(Op::JobEnds),
        1 => (0usize..8).prop_map(Op::NodeSilent),
        1 => Just(Op::NodesBack),
        1 => any::<bool>().prop_map(Op::Failing),
        1 => Just(Op::Restart),
    ]
}

/// With `probing`, the `batch` tier is probed within a fifth of the fleet's throughput (a deep
/// step on one of these few jobs costs half of one job's throughput).
fn settings_probing(probing: bool) -> Settings {
    // A small site: the default parameters describe 1,000 nodes.
    let facility = FacilityParams::for_nodes(8);
    Settings {
        site_id: "site-1".into(),
        site: SiteConfig::default(),
        control: ControlConfig::default(),
        policy: PolicyKind::Flexgate,
        objective: flexgate_policies::alloc::Objective::Progress,
        hedge_tolerance: Some(flexgate_policies::alloc::curve_aware::REGRET_TOLERANCE),
        facility,
        probe: flexgate_policies::control::probe::ProbeConfig {
            enabled: probing,
            tiers: vec!["batch".into()],
            max_fleet_share: 0.2,
            step_s: 120,
            retry_after_s: 600,
            ..Default::default()
        },
        // A program settled on CAISO's 10-in-10: its day-of adjustment reads 4 h to 1 h before
        // an event, which probes must leave alone.
        forecast: flexgate_policies::control::ForecastSettings::default(),
        settlement_methods: if probing {
            vec![flexgate_policies::baseline::Method::Caiso10In10]
        } else {
            Vec::new()
        },
    }
}

fn event(
    index: u8,
    revision: u64,
    kw: f64,
    start: DateTime<Utc>,
    duration_s: Option<u64>,
    cancel: bool,
    test: bool,
) -> GridEvent {
    GridEvent {
        id: format!("ev-{index}").into(),
        revision,
        source: EventSource::Http,
        site: Some("site-1".into()),
        program: None,
        issued_at: None,
        mandatory: false,
        test,
        cancel,
        priority: None,
        window: Window {
            start,
            ramp_s: 120,
            duration_s,
            recovery_s: 120,
            randomize_start_s: 0,
        },
        intervals: vec![Interval {
            offset_s: 0,
            duration_s: None,
            target: Target::MeterCeiling { kw },
        }],
    }
}

/// The harness: a controller, the model cluster, the ledger so far, and the clock.
struct Harness {
    controller: Controller,
    cluster: ModelCluster,
    ledger: Vec<Entry>,
    now: DateTime<Utc>,
    acks_seen: Vec<Ack>,
    probing: bool,
}

impl Harness {
    fn new() -> Self {
        Self::with(false)
    }

    /// With `probing`, its jobs are in the probed tier and report their throughput.
    fn with(probing: bool) -> Self {
        Self::with_settings(probing, settings_probing(probing))
    }

    /// As [`Harness::with`], on these settings.
    fn with_settings(probing: bool, settings: Settings) -> Self {
        let mut cluster = ModelCluster {
            probing,
            ..ModelCluster::default()
        };
        for w in [690.0, 650.0, 600.0, 560.0] {
            cluster.start_job(w, w < 620.0);
        }
        let mut h = Harness {
            controller: Controller::new(settings).expect("valid settings"),
            cluster,
            ledger: Vec::new(),
            now: DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default(),
            acks_seen: Vec::new(),
            probing,
        };
        h.measure_and_tick();
        h
    }

    fn uncapped_meter_kw(&self) -> f64 {
        20.0 + self.cluster.jobs.iter().map(|j| j.uncapped_per_gpu * 8.0).sum::<f64>() * 1.35 / 1000.0
    }

    /// Carry out effects like the real driver: record, then act and feed results back.
    fn run(&mut self, effects: Vec<Effect>) {
        let mut todo: std::collections::VecDeque<Effect> = effects.into();
        while let Some(effect) = todo.pop_front() {
            let input = match effect {
                Effect::Record(r) => {
                    check_plan(&r.entry);
                    self.check_probe(&r.entry);
                    check_point(&r.entry);
                    self.ledger.push(r.entry);
                    None
                }
                Effect::Dispatch { purpose, commands } => {
                    let results = self.cluster.apply(&commands, self.now);
                    Some(Input::CapResults {
                        purpose,
                        commands,
                        results,
                    })
                }
                Effect::Suspend { jobs, shortfall_w } => {
                    let outcomes = jobs
                        .into_iter()
                        .map(|(job, expected)| {
                            let found = self.cluster.jobs.iter_mut().find(|j| j.id == job);
                            let ok = found.is_some_and(|j| {
                                j.suspended = true;
                                true
                            });
                            SuspendOutcome {
                                job,
                                expected_w: Some(expected),
                                outcome: SuspendResult::of_suspend(ok),
                                reason: (!ok).then(|| "gone".to_string()),
                            }
                        })
                        .collect();
                    Some(Input::Suspended { outcomes, shortfall_w })
                }
                Effect::Resume { jobs } => {
                    let outcomes = jobs
                        .into_iter()
                        .map(|job| {
                            if let Some(j) = self.cluster.jobs.iter_mut().find(|j| j.id == job) {
                                j.suspended = false;
                            }
                            SuspendOutcome {
                                job,
                                expected_w: None,
                                outcome: SuspendResult::Resumed,
                                reason: None,
                            }
                        })
                        .collect();
                    Some(Input::Resumed { outcomes })
                }
                Effect::Announce(_) | Effect::OptOutNotice { .. } | Effect::Warn(_) | Effect::Wake => None,
            };
            if let Some(input) = input {
                let more = self.controller.handle(input, self.now);
                for e in more.into_iter().rev() {
                    todo.push_front(e);
                }
            }
        }
    }

    /// Invariant 5: probe steps start only outside events, within the site budget, inside the
    /// cap range; no plan is made while one is in flight.
    fn check_probe(&self, entry: &Entry) {
        match entry {
            Entry::ProbeStep(p) => {
                assert!(self.probing, "a probe while probing is off");
                assert!(
                    self.controller.effective_ceiling(p.at).is_none(),
                    "a probe step during an event: {p:?}"
                );
                assert!(
                    p.fleet_share_in_flight <= p.fleet_share_budget + 1e-9,
                    "probes over the site budget: {p:?}"
                );
                assert!((200.0..MAX_W).contains(&p.cap_w_per_gpu), "{p:?}");
                let settings = self.controller.settings();
                let step_end = p.at + Duration::seconds(i64::try_from(settings.probe.step_s).unwrap_or(0));
                let meter_window = Duration::seconds(i64::try_from(settings.site.baseline_window_s).unwrap_or(0));
                // The meter before an event and every settlement method's pre-event window.
                let protected_from = |start: DateTime<Utc>| {
                    settings
                        .settlement_methods
                        .iter()
                        .filter_map(|m| m.event_day_window(start).map(|(from, _)| from))
                        .fold(start - meter_window, std::cmp::min)
                };
                assert!(
                    !self.controller.book().events().any(|e| !e.phase.is_terminal()
                        && !e.event.test
                        && protected_from(e.event.window.start) <= step_end),
                    "a probe step that could overlap a window an announced event's baseline reads: {p:?}"
                );
                assert!(p.until > p.at);
            }
            Entry::Plan(_) => {
                assert!(self.controller.probes().is_empty(), "a plan with probes in flight");
            }
            _ => {}
        }
    }

    /// Submit `event` over HTTP now and carry out what the controller decided.
    fn submit(&mut self, event: GridEvent) {
        let intake = self.controller.submit(
            event,
            Transport::Http { peer: None },
            Received::Bytes("{}".into()),
            self.now,
        );
        self.run(intake.effects);
    }

    /// `ticks` measured ticks 10 s apart; whether any job was capped meanwhile.
    fn run_for(&mut self, ticks: usize) -> bool {
        let mut capped = false;
        for _ in 0..ticks {
            self.now += Duration::seconds(10);
            self.measure_and_tick();
            capped |= self.cluster.jobs.iter().any(|j| j.cap < MAX_W);
        }
        capped
    }

    fn measure_and_tick(&mut self) {
        let inv = self
            .controller
            .handle(Input::Inventory(self.cluster.inventory()), self.now);
        self.run(inv);
        let t = self
            .controller
            .handle(Input::Telemetry(self.cluster.telemetry(self.now)), self.now);
        self.run(t);
        let tick = self.controller.handle(Input::Tick { measured: true }, self.now);
        self.run(tick);
    }

    fn step(&mut self, op: &Op) {
        match *op {
            Op::Submit(index, revision, share, start_s, duration_s, cancel, test) => {
                let kw = share * self.uncapped_meter_kw();
                let e = event(
                    index,
                    revision,
                    kw,
                    self.now + Duration::seconds(start_s),
                    duration_s,
                    cancel,
                    test,
                );
                let recorded_before = self.ledger.len();
                let intake = self.controller.submit(
                    e,
                    Transport::Http { peer: None },
                    Received::Bytes("{}".into()),
                    self.now,
                );
                let acks_in_effects: Vec<Ack> = intake
                    .effects
                    .iter()
                    .filter_map(|e| match e {
                        Effect::Record(r) => match &r.entry {
                            Entry::EventAcked(a) => Some(a.ack.clone()),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect();
                self.run(intake.effects);
                match intake.decision {
                    IntakeDecision::Accepted { ack }
                    | IntakeDecision::Refused { ack, .. }
                    | IntakeDecision::Stale { ack, .. } => {
                        assert!(acks_in_effects.contains(&ack), "the ack is recorded with its decision");
                        self.acks_seen.push(ack);
                    }
                    IntakeDecision::Repeated { ack, .. } => {
                        let recorded = self.ledger[..recorded_before]
                            .iter()
                            .any(|e| matches!(e, Entry::EventAcked(a) if a.ack == ack));
                        assert!(recorded, "a repeated ack was recorded before");
                    }
                    IntakeDecision::Invalid(_) => {
                        assert!(acks_in_effects.is_empty(), "nothing recorded for invalid input");
                    }
                }
            }
            Op::OptOut(index) => {
                if let Ok((ack, effects)) =
                    self.controller
                        .operator_opt_out(&format!("ev-{index}"), "alice", "must run", self.now)
                {
                    let recorded = effects.iter().any(
                        |e| matches!(e, Effect::Record(r) if matches!(&r.entry, Entry::EventAcked(a) if a.ack == ack)),
                    );
                    assert!(recorded, "the opt-out ack is recorded with its decision");
                    self.run(effects);
                }
            }
            Op::Advance(s) => {
                self.now += Duration::seconds(s);
                self.measure_and_tick();
            }
            Op::Wake(s) => {
                self.now += Duration::seconds(s);
                let tick = self.controller.handle(Input::Tick { measured: false }, self.now);
                self.run(tick);
            }
            Op::JobStarts(w, suspendable) => {
                if self.cluster.jobs.len() < 8 {
                    self.cluster.start_job(w, suspendable);
                }
            }
            Op::JobEnds(i) => {
                if !self.cluster.jobs.is_empty() {
                    let i = i % self.cluster.jobs.len();
                    self.cluster.jobs.remove(i);
                }
            }
            Op::NodeSilent(i) => {
                if let Some(j) = self.cluster.jobs.get(i % self.cluster.jobs.len().max(1)) {
                    self.cluster.silent.push(j.id.clone());
                }
            }
            Op::NodesBack => self.cluster.silent.clear(),
            Op::Failing(on) => self.cluster.failing = on,
            Op::Restart => {
                let rebuilt = fold(&self.ledger, self.probing);
                assert_eq!(
                    rebuilt.durable_state(),
                    self.controller.durable_state(),
                    "the fold of the ledger is the live state"
                );
                self.controller = rebuilt;
                let inv = self
                    .controller
                    .handle(Input::Inventory(self.cluster.inventory()), self.now);
                self.run(inv);
                let reapply = self.controller.reapply_at_start();
                self.run(reapply);
                let started = self.controller.started(0, 0, "model", self.now);
                self.run(started);
            }
        }
    }
}

fn fold(ledger: &[Entry], probing: bool) -> Controller {
    let mut c = Controller::new(settings_probing(probing)).expect("valid settings");
    for e in ledger {
        c.apply(e);
    }
    c
}

/// Invariant 1, on every plan recorded.
fn check_plan(entry: &Entry) {
    if let Entry::Plan(p) = entry {
        let a = &p.plan;
        assert!(
            a.planned_power <= a.budget + a.shortfall + 1.0,
            "planned {} W > budget {} W + shortfall {} W",
            a.planned_power,
            a.budget,
            a.shortfall
        );
        assert!(p.gpu_budget_w.is_finite() && p.gpu_budget_w >= 0.0);
        // Every plan says what it maximised, what it expects to keep on both objectives, and
        // per job what was known and how it was weighed; the expected progress is the
        // weighted mean of the jobs' expected shares.
        assert_eq!(a.objective, Some(flexgate_policies::alloc::Objective::Progress));
        assert_eq!(a.notes.len(), a.rows.len());
        let expected = *a.expected.as_deref().expect("expected outcome recorded");
        for share in [expected.tokens_kept_share, expected.progress_kept_share] {
            assert!((0.0..=1.0 + 1e-9).contains(&share), "share {share}");
        }
        let weight: f64 = a.notes.iter().map(|n| f64::from(n.0) * n.1).sum();
        if weight > 0.0 {
            let mean = a.notes.iter().map(|n| f64::from(n.0) * n.1 * n.3).sum::<f64>() / weight;
            assert!(
                (mean - expected.progress_kept_share).abs() < 1e-3,
                "{mean} vs {expected:?}"
            );
        }
        for note in &a.notes {
            assert!(
                !note.2.is_empty() && note.1 > 0.0 && (0.0..=1.0).contains(&note.3),
                "{note:?}"
            );
        }
        for row in &a.rows {
            assert!(
                (200.0 - 1e-6..=MAX_W + 1e-6).contains(&row.1),
                "cap {} W/GPU out of range",
                row.1
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, .. ProptestConfig::default() })]

    #[test]
    fn the_controller_keeps_its_invariants(ops in prop::collection::vec(op(), 1..60)) {
        check_invariants(Harness::new(), &ops)?;
    }

    #[test]
    fn the_controller_keeps_its_invariants_while_probing(ops in prop::collection::vec(op(), 1..60)) {
        check_invariants(Harness::with(true), &ops)?;
    }
}

fn check_invariants(mut h: Harness, ops: &[Op]) -> Result<(), TestCaseError> {
    {
        for op in ops {
            h.step(op);
        }
        // Invariant 3 at the end.
        prop_assert_eq!(fold(&h.ledger, h.probing).durable_state(), h.controller.durable_state());
        // Invariant 2: let every event end (the longest is 900 s + 1,800 s + ramps), with the
        // cluster healthy, then check that nothing of ours is left in force.
        h.cluster.failing = false;
        h.cluster.silent.clear();
        for _ in 0..3 {
            h.now += Duration::hours(2);
            h.measure_and_tick();
        }
        // Open-ended events (no duration) stay in force until cancelled: cancel them.
        let open: Vec<(flexgate_policies::ids::EventId, u64)> = h
            .controller
            .book()
            .events()
            .filter(|e| !e.phase.is_terminal() && !e.event.test)
            .map(|e| (e.event.id.clone(), e.revision()))
            .collect();
        for (id, revision) in open {
            let mut cancel = event(0, revision + 1, 1.0, h.now, Some(60), true, false);
            cancel.id = id;
            let intake = h.controller.submit(
                cancel,
                Transport::Http { peer: None },
                Received::Bytes("{}".into()),
                h.now,
            );
            h.run(intake.effects);
        }
        for _ in 0..3 {
            h.now += Duration::hours(1);
            h.measure_and_tick();
        }
        prop_assert!(h.controller.effective_ceiling(h.now).is_none());
        prop_assert!(h.controller.plan().is_none());
        // Outside events the only caps are probe steps in flight (none when probing is off).
        let probes = h.controller.probes();
        prop_assert!(
            h.controller.caps().keys().all(|job| probes.contains_key(job)),
            "caps left: {:?}, probes {:?}",
            h.controller.caps(),
            probes
        );
        prop_assert!(h.controller.suspended().is_empty());
        let caps: BTreeMap<String, f64> = h.cluster.jobs.iter().map(|j| (j.id.to_string(), j.cap)).collect();
        prop_assert!(
            h.cluster
                .jobs
                .iter()
                .all(|j| j.cap == MAX_W || probes.get(&j.id).is_some_and(|p| p.cap_w == j.cap)),
            "jobs left capped: {:?}",
            caps
        );
        prop_assert!(h.cluster.jobs.iter().all(|j| !j.suspended), "jobs left suspended");
        prop_assert_eq!(fold(&h.ledger, h.probing).durable_state(), h.controller.durable_state());
    }
    Ok(())
}

/// The deterministic back-to-back case: event B is submitted and planned at the very instant
/// A's restore went out, before any inventory shows the restored caps. B's end must restore
/// every job to its uncapped limit, never to A's caps.
#[test]
fn back_to_back_events_restore_the_uncapped_limits() {
    let mut h = Harness::new();
    let kw = 0.7 * h.uncapped_meter_kw();
    h.submit(event(1, 1, kw, h.now, Some(600), false, false));
    // Through A: 120 s ramp, 600 s window, 120 s recovery.
    assert!(h.run_for(85), "A capped jobs");
    assert!(h.controller.plan().is_none(), "A is over");
    // B is submitted and planned at the instant of A's restore, before any new inventory.
    h.submit(event(
        2,
        1,
        0.75 * h.uncapped_meter_kw(),
        h.now,
        Some(300),
        false,
        false,
    ));
    let tick = h.controller.handle(Input::Tick { measured: false }, h.now);
    h.run(tick);
    assert!(h.run_for(60), "B capped jobs");
    assert!(h.controller.plan().is_none(), "B is over");
    assert!(h.cluster.jobs.iter().all(|j| j.cap == MAX_W), "{:?}", h.cluster.jobs);
}

/// A restore that fails (the node does not answer) is sent again until it is confirmed.
#[test]
fn a_failed_restore_is_retried_until_confirmed() {
    let mut h = Harness::new();
    let kw = 0.7 * h.uncapped_meter_kw();
    h.submit(event(1, 1, kw, h.now, Some(300), false, false));
    assert!(h.run_for(20), "A capped someone");
    h.cluster.failing = true;
    h.run_for(40);
    assert!(h.controller.plan().is_none(), "A is over");
    assert!(!h.controller.caps().is_empty(), "the failed restores are still owed");
    h.cluster.failing = false;
    h.now += Duration::seconds(10);
    h.measure_and_tick();
    assert!(h.controller.caps().is_empty());
    assert!(h.cluster.jobs.iter().all(|j| j.cap == MAX_W));
}

/// A cap the driver does not apply, one that keeps being undone, and the agents' own
/// re-applications: each is recorded with its kind, the job is not counted on (an unreliable
/// one at its uncapped draw), and the rest of the fleet is planned around it.
#[test]
fn caps_that_do_not_hold_are_recorded_with_their_kind_and_planned_around() {
    let mut h = Harness::new();
    let kw = 0.7 * h.uncapped_meter_kw();
    h.submit(event(1, 1, kw, h.now, Some(1800), false, false));
    assert!(h.run_for(20), "the event capped jobs");
    let planned_before = h
        .ledger
        .iter()
        .rev()
        .find_map(|e| match e {
            Entry::Plan(p) => Some(p.unconfirmed_fixed_w),
            _ => None,
        })
        .expect("a plan");
    let suspended_w: f64 = h.cluster.jobs.iter().filter(|j| j.suspended).map(ModelJob::draw).sum();
    assert!(
        (planned_before - suspended_w).abs() < 1e-6,
        "every cap confirmed at first: {planned_before} W fixed, {suspended_w} W suspended"
    );

    // Job 1's driver stops applying caps; job 2's cap keeps being undone; the agent of job 3
    // re-applied its cap twice.
    let ids: Vec<JobId> = h
        .cluster
        .jobs
        .iter()
        .filter(|j| !j.suspended)
        .map(|j| j.id.clone())
        .collect();
    assert!(ids.len() >= 2, "{:?}", h.cluster.jobs);
    let (a, b, c) = (ids[0].clone(), ids[1].clone(), ids[ids.len() - 1].clone());
    h.cluster.not_applied.push(a.clone());
    h.cluster.unreliable.push(b.clone());
    h.cluster.reapplied.insert(c.clone(), 2);
    // A deeper ceiling makes the next plan send new caps to everyone.
    h.submit(event(
        1,
        2,
        0.65 * h.uncapped_meter_kw(),
        h.now,
        Some(1800),
        false,
        false,
    ));
    h.run_for(3);

    let caps = h.controller.caps();
    let cap_a = caps.get(&a).expect("job 1 has a cap");
    assert!(!cap_a.confirmed);
    assert_eq!(cap_a.unconfirmed, Some(Unconfirmed::NotApplied));
    let cap_b = caps.get(&b).expect("job 2 has a cap");
    assert!(!cap_b.confirmed);
    assert_eq!(cap_b.unconfirmed, Some(Unconfirmed::Unreliable));
    // The ledger says which and why.
    let unreliable_recorded = h.ledger.iter().any(|e| {
        matches!(e, Entry::CapsDrifted(d) if d.action == "unreliable" && d.drifted.iter().any(|x| x.job == b))
            || matches!(e, Entry::CapsDispatched(d) if d.unconfirmed.get(&b) == Some(&Unconfirmed::Unreliable))
    });
    assert!(unreliable_recorded, "the unreliable cap is in the ledger");
    assert!(
        h.ledger
            .iter()
            .any(|e| matches!(e, Entry::CapsDispatched(d) if d.unconfirmed.get(&a) == Some(&Unconfirmed::NotApplied)))
    );
    let reapplied: u64 = h
        .ledger
        .iter()
        .filter_map(|e| match e {
            Entry::CapsReapplied(r) => r.reapplied.get(&c).copied(),
            _ => None,
        })
        .sum();
    assert_eq!(reapplied, 2, "each re-application recorded once");
    // The last plan counts job 2 at its uncapped draw and job 1 at what it draws, as fixed
    // load, and plans the budget on the others.
    let last = h
        .ledger
        .iter()
        .rev()
        .find_map(|e| match e {
            Entry::Plan(p) => Some(p.clone()),
            _ => None,
        })
        .expect("a plan");
    let job = |id: &JobId| h.cluster.jobs.iter().find(|j| &j.id == id).expect("job");
    let suspended_w: f64 = h.cluster.jobs.iter().filter(|j| j.suspended).map(ModelJob::draw).sum();
    let expected_fixed = job(&b).uncapped_per_gpu * f64::from(GPUS) + job(&a).draw() + suspended_w;
    assert!(
        (last.unconfirmed_fixed_w - expected_fixed).abs() < 1.0,
        "fixed load {} W, expected {expected_fixed} W",
        last.unconfirmed_fixed_w
    );
    assert!(
        last.plan.rows.iter().all(|r| r.job() != &a && r.job() != &b),
        "planned around them"
    );
}

/// The closed loop trims on the meter's own reading only: with the same site and event, a
/// measured meter moves the trim, a model's figure never does.
#[test]
fn the_closed_loop_trims_on_a_measured_meter_never_on_a_model() {
    let trims = |model_meter: bool| {
        let mut h = Harness::new();
        h.cluster.model_meter = model_meter;
        let kw = 0.7 * h.uncapped_meter_kw();
        h.submit(event(1, 1, kw, h.now, Some(600), false, false));
        assert!(h.run_for(40), "the event capped jobs");
        h.ledger.iter().filter(|e| matches!(e, Entry::Trimmed(_))).count()
    };
    assert!(trims(false) > 0, "a measured meter off the ceiling is trimmed on");
    assert_eq!(trims(true), 0, "a model's figure is never trimmed on");
}

/// Probing, outside events: every job of the probed tier is stepped through its sweep, a few at
/// a time within the site budget, until its curve is measured; an event ends the steps in
/// flight before its first plan, and after it the sweeps go on.
#[test]
fn probing_measures_every_eligible_job_outside_events_within_the_budget() {
    let mut h = Harness::with(true);
    h.run_for(60);
    let steps: Vec<_> = h
        .ledger
        .iter()
        .filter_map(|e| match e {
            Entry::ProbeStep(p) => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert!(!steps.is_empty(), "probes started");
    let waited = h.ledger.iter().any(
        |e| matches!(e, Entry::ProbeEnded(p) if p.outcome == ProbeOutcome::Measured && p.detail.contains("waits for the site budget")),
    );
    assert!(waited, "the budget held a step back (all four at once would cost more)");
    // Every job's curve is measured: three capped points down to the lowest quarter.
    let known: BTreeMap<String, String> = h
        .ledger
        .iter()
        .filter_map(|e| match e {
            Entry::ElasticityKnown(k) => Some(k.elasticity_known.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    for job in &h.cluster.jobs {
        let note = known.get(&*job.id).map_or("", String::as_str);
        assert!(note.contains("measured curve"), "{}: {note}", job.id);
        let caps: Vec<f64> = steps
            .iter()
            .filter(|p| *p.job == *job.id)
            .map(|p| p.cap_w_per_gpu)
            .collect();
        assert_eq!(caps, vec![550.0, 425.0, 300.0], "{}'s sweep", job.id);
    }
    assert!(h.controller.probes().is_empty(), "nothing left to probe");
    assert!(h.cluster.jobs.iter().all(|j| j.cap == MAX_W), "every job restored");
    // A new job is probed too; an event ends its step before the plan.
    h.cluster.start_job(640.0, false);
    h.run_for(2);
    assert_eq!(h.controller.probes().len(), 1, "the new job is being probed");
    let kw = 0.8 * h.uncapped_meter_kw();
    h.submit(event(1, 1, kw, h.now, Some(300), false, false));
    h.run_for(1);
    let ended = h
        .ledger
        .iter()
        .position(|e| matches!(e, Entry::ProbeEnded(p) if p.outcome == ProbeOutcome::Event));
    let plan = h.ledger.iter().position(|e| matches!(e, Entry::Plan(_)));
    assert!(ended.is_some() && ended < plan, "the step ends before the plan");
    assert!(h.controller.probes().is_empty());
}

/// An event announced 3 h ahead: the meter-before window (15 min) is far off, but CAISO's
/// day-of adjustment reads the load from 4 h before the start, so with the site settled on it
/// no probe step starts; without a settlement method the same probes go on.
#[test]
fn probes_keep_out_of_the_settlement_methods_pre_event_window() {
    let probes_started = |settled: bool| {
        let mut settings = settings_probing(true);
        if !settled {
            settings.settlement_methods.clear();
        }
        let mut h = Harness::with_settings(true, settings);
        let later = h.now + Duration::hours(3);
        h.submit(event(1, 1, 0.8 * h.uncapped_meter_kw(), later, Some(600), false, false));
        let from = h.ledger.len();
        h.run_for(30);
        h.ledger[from..]
            .iter()
            .filter(|e| matches!(e, Entry::ProbeStep(_)))
            .count()
    };
    assert_eq!(
        probes_started(true),
        0,
        "a step could lower the CAISO adjustment window's load"
    );
    assert!(
        probes_started(false) > 0,
        "outside any method's window, probing goes on"
    );
}

/// Invariant: a recorded point of a job's curve draws no more than its cap allows (2 % for
/// sampling noise), so every profile learned is a valid sweep (`PowerCurve::new`).
fn check_point(entry: &Entry) {
    if let Entry::ThroughputPoint(p) = entry
        && !p.uncapped
    {
        let allowed = p.cap_w_per_gpu * f64::from(p.gpus.unwrap_or(GPUS)) * 1.02;
        assert!(p.power_w <= allowed, "a point above its cap: {p:?}");
    }
}

/// Readings that draw more than their cap allows (taken before the cap took effect, delivered
/// late) are not points of the job's curve: none is recorded while they arrive, and the sweep
/// goes on once the readings are right again.
#[test]
fn readings_above_their_cap_are_not_taken_as_points_of_the_curve() {
    let mut h = Harness::with(true);
    h.run_for(2);
    assert!(!h.controller.probes().is_empty(), "steps started");
    let capped_points = |h: &Harness| {
        h.ledger
            .iter()
            .filter(|e| matches!(e, Entry::ThroughputPoint(p) if !p.uncapped))
            .count()
    };
    let before = capped_points(&h);
    h.cluster.stale_power = true;
    h.run_for(6);
    assert_eq!(capped_points(&h), before, "no capped point from readings above the cap");
    h.cluster.stale_power = false;
    h.run_for(30);
    assert!(
        capped_points(&h) > before,
        "points are taken again once readings are right"
    );
}

/// A job whose throughput never settles is not held capped: its step times out, it goes back
/// to its uncapped limit, and it is not probed again before `retry_after_s`.
#[test]
fn a_step_that_measures_nothing_times_out_and_waits_before_a_retry() {
    let mut h = Harness::with(true);
    h.cluster.unsteady = true;
    h.run_for(1);
    // Only the uncapped point can be measured while unsteady... so nothing is probed yet.
    h.cluster.unsteady = false;
    h.run_for(1);
    assert!(!h.controller.probes().is_empty(), "steps started");
    h.cluster.unsteady = true;
    h.run_for(14); // 140 s: past the 120 s step.
    let timeouts: Vec<_> = h
        .ledger
        .iter()
        .filter_map(|e| match e {
            Entry::ProbeEnded(p) if p.outcome == ProbeOutcome::Timeout => Some(p.clone()),
            _ => None,
        })
        .collect();
    assert!(!timeouts.is_empty(), "the steps timed out");
    assert!(timeouts.iter().all(|t| t.retry_after.is_some()));
    let timed_out: Vec<JobId> = timeouts.iter().map(|t| JobId::from(t.job.as_str())).collect();
    for job in &timed_out {
        assert!(!h.controller.probes().contains_key(job));
        let cap = h.cluster.jobs.iter().find(|j| j.id == *job).map(|j| j.cap);
        assert_eq!(cap, Some(MAX_W), "{job} restored after its timeout");
    }
    let steps_for = |h: &Harness| {
        h.ledger
            .iter()
            .filter(|e| matches!(e, Entry::ProbeStep(p) if timed_out.iter().any(|j| **j == *p.job)))
            .count()
    };
    let before = steps_for(&h);
    h.cluster.unsteady = false;
    h.run_for(30); // 300 s: inside the 600 s wait.
    assert_eq!(steps_for(&h), before, "no retry before retry_after_s");
    h.run_for(40);
    assert!(steps_for(&h) > before, "retried after the wait");
}
