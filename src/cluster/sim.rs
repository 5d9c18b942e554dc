//! An in-process simulated cluster, for `flexgate demo` and for tests.
//!
//! The gateway's whole loop (plan, dispatch, confirm, measure, trim) has to be exercised without
//! GPUs, Slurm or agents, and deterministically, so that a demo is repeatable and a failing test
//! reproduces. The simulation therefore:
//!
//! - fills `nodes` nodes with jobs drawn, by seed, from the 25 synthetic job templates of the
//!   fleet simulator (`flexgate_lab`), each with a *true* power–throughput curve;
//! - tells the gateway only what production would know: the uncapped point, and for most jobs a
//!   telemetry-predicted PFI with the predictor's error, for the rest nothing
//!   ([`Elasticity::Unknown`]);
//! - realizes the true curve at the applied cap, reached along a linear ramp over `settle_ms` of
//!   `tokio` time, so tests with `tokio::time::pause()` see power move without waiting;
//! - computes the meter with the facility model's nominal point;
//! - injects faults on demand: failed cap writes, unreachable nodes and telemetry gaps, the ones
//!   the gateway must survive with real agents.

use super::{BackendError, CapCommand, CapOutcome, CapResult, ClusterBackend, JobState, JobTelemetry, Telemetry};
use chrono::{DateTime, TimeDelta, Utc};
use flexgate_agent::throughput::{JobWindows, Phase, ThroughputReport};
use flexgate_lab::experiment::PAPER_PREDICTOR_RMSE;
use flexgate_lab::rng::SplitMix64;
use flexgate_lab::{JobTemplate, TruthFamily, published_groups, synthetic_templates};
use flexgate_policies::alloc::{Elasticity, JobSpec};
use flexgate_policies::control::cluster::{MeasuredThroughput, Unconfirmed};
use flexgate_policies::curve::PowerCurve;
use flexgate_policies::facility::{FacilityParams, FacilityPoint};
use flexgate_policies::ids::{JobId, NodeId};
use flexgate_policies::units::{Kilowatts, TokensPerSec, Watts, WattsPerGpu};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

/// Standard deviation of the PFI prediction told to the gateway: the paper's leave-one-out
/// RMSE, so the simulated predictor is as good (and as bad) as the published one.
pub const PREDICTED_PFI_SD: f64 = PAPER_PREDICTOR_RMSE;

/// Range a predicted PFI is clamped to: a predictor never reports a job as anti-elastic or
/// absurdly elastic, and the planner's inputs stay valid.
pub const PREDICTED_PFI_RANGE: (f64, f64) = (0.5, 5.0);

/// In a telemetry gap, every this-many-th sample (counted since the simulation started) is lost.
pub const TELEMETRY_GAP_PERIOD: u64 = 3;

// Stream salts, so that each kind of random draw has its own stream and adding draws of one
// kind never shifts another (a fleet stays the same when, say, the fault share changes).
const PICK_STREAM: u64 = 0x5049_434B; // "PICK"
const UNKNOWN_STREAM: u64 = 0x554E_4B4E; // "UNKN"
const NOISE_STREAM: u64 = 0x4E4F_4953; // "NOIS"
const FAULT_STREAM: u64 = 0x4641_554C; // "FAUL"
const METER_STREAM: u64 = 0x4D45_5452; // "METR"
const CLOCK_STREAM: u64 = 0x434C_4F43; // "CLOC"
const QUEUE_STREAM: u64 = 0x5155_4555; // "QUEU"

/// Time limits the simulated scheduler gives its jobs, hours (users ask for round figures).
const LIMITS_H: [f64; 4] = [24.0, 48.0, 72.0, 96.0];

/// A queued job whose expected start has come but finds no room starts this much later by the
/// scheduler's new estimate, s (as Slurm's backfill slides a start when a job overruns).
const START_SLIDE_S: i64 = 900;

/// The first number of the simulated scheduler's queued jobs (`job-901-…`).
const QUEUE_NUMBERS_FROM: u64 = 901;

/// Configuration of the simulated cluster (the `[cluster.sim]` table of the gateway's TOML).
///
/// Every field has a default, so an empty table gives a 16-node, 128-GPU cluster of H200 jobs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Nodes behind the meter. Default 16. Jobs are packed onto them at start.
    pub nodes: u32,
    /// GPUs per node. Default 8 (an HGX H200 node). A job occupies whole nodes.
    pub gpus_per_node: u32,
    /// Seed of every random draw (job mix, predicted-PFI noise, faults, meter noise): the same
    /// seed gives the same cluster, so demos and failures reproduce.
    pub seed: u64,
    /// Share of jobs whose elasticity the gateway is told nothing about, in `[0, 1]`.
    /// Default 0.2, so the conservative fallback path is always exercised.
    pub unknown_elasticity_share: f64,
    /// Time for a job's power and throughput to reach a new cap's values, ms (linear ramp).
    /// Default 1000: NVML's 1 s power averaging makes a cap show after about that long.
    pub settle_ms: u64,
    /// Standard deviation of deterministic Gaussian noise added to the meter reading, kW.
    /// Default 0 (exact meter), so tests can compare against the facility model.
    pub meter_noise_kw: f64,
    /// Window of each job's throughput aggregate, ms (default 30 000, the agent's default): the
    /// figure a job reports is the mean of the top 10 % of its samples in the window, so a cap
    /// shows fully in it one window after it was applied. The demo shortens it with its
    /// speed-up, as it shortens the event.
    pub throughput_window_ms: u64,
    /// Faults to inject (none by default).
    pub faults: SimFaults,
    /// Facility model parameters; the meter reads their nominal point.
    pub facility: FacilityParams,
    /// The flex tier of every job at start (none by default), e.g. `"batch"` to try
    /// `[probe] tiers = ["batch"]` on the simulated site.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Jobs waiting in the simulated scheduler's queue at start (default 6, at most 1000), so
    /// that the forecast has a queue to read. The jobs filled at start have time limits of a day
    /// or more and ran for some hours before; a job reaching its limit ends (as Slurm ends it),
    /// and the queue's head starts on the nodes it frees.
    pub queued_jobs: u32,
    /// Whether the jobs filled at start have time limits and end at them (default true). Off,
    /// they run until a test or the demo ends them, and there is no queue: for tests that run
    /// hours of simulated time and count on the same jobs throughout.
    pub time_limits: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            nodes: 16,
            gpus_per_node: 8,
            seed: 0,
            unknown_elasticity_share: 0.2,
            settle_ms: 1000,
            meter_noise_kw: 0.0,
            throughput_window_ms: 30_000,
            faults: SimFaults::default(),
            facility: FacilityParams::default(),
            tier: None,
            queued_jobs: 6,
            time_limits: true,
        }
    }
}

/// Faults the simulation injects, so the gateway's fault handling (re-planning around failed
/// caps, unreachable nodes and telemetry gaps) can be tested and demonstrated. Replaceable at run time with [`SimCluster::set_faults`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimFaults {
    /// Share of cap commands answered [`CapOutcome::Failed`] at random (seeded), in `[0, 1]`;
    /// the cap stays as it was, as when a GPU refuses a write.
    pub fail_apply_share: f64,
    /// Nodes whose agents cannot be reached (names as in the inventory, e.g. `node-003`): cap
    /// commands for jobs on them fail, and their jobs are missing from telemetry, while the
    /// meter still sees their power. The inventory (the scheduler's view, which does not go
    /// through the agents) still lists them with their current draw.
    pub unreachable_nodes: Vec<String>,
    /// Lose every [`TELEMETRY_GAP_PERIOD`]-th telemetry sample
    /// ([`BackendError::TelemetryGap`]), as when a collection round times out.
    pub telemetry_gaps: bool,
}

/// Why the simulated cluster refused a configuration or a mutation. Each message says what to
/// change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// A configuration field is out of its domain.
    #[error("cluster simulation: `{field}` {problem}")]
    InvalidConfig {
        /// Dotted name of the field.
        field: &'static str,
        /// What is wrong and what is expected.
        problem: String,
    },
    /// The built-in job templates could not be built (a bug in the embedded data).
    #[error("cluster simulation: the built-in job templates failed to build: {0}; please report this bug")]
    Templates(String),
    /// `start_job` named a template that does not exist.
    #[error("no job template {index}: there are {count} (0..{count})")]
    UnknownTemplate {
        /// The index asked for.
        index: usize,
        /// How many templates exist.
        count: usize,
    },
    /// Not enough free nodes for the job.
    #[error("no room for a {gpus}-GPU job: it needs {needed} free nodes, {free} are free; end a job first")]
    NoRoom {
        /// GPUs of the job.
        gpus: u32,
        /// Nodes it needs.
        needed: u32,
        /// Nodes free.
        free: u32,
    },
    /// A job with this id is already running.
    #[error("a job named {0:?} is already running; pick another id")]
    DuplicateJob(String),
    /// No running job has this id.
    #[error("no running job named {0:?}")]
    UnknownJob(String),
    /// A custom job's spec or truth curve is unusable.
    #[error("invalid job: {0}")]
    InvalidJob(String),
}

impl SimConfig {
    /// Check every field; the error names the first offending one.
    pub fn validate(&self) -> Result<(), SimError> {
        let invalid = |field: &'static str, problem: String| Err(SimError::InvalidConfig { field, problem });
        if self.nodes == 0 {
            return invalid("nodes", "must be at least 1".into());
        }
        if self.gpus_per_node == 0 {
            return invalid("gpus_per_node", "must be at least 1".into());
        }
        if !is_share(self.unknown_elasticity_share) {
            return invalid(
                "unknown_elasticity_share",
                format!("must be a number in [0, 1], got {}", self.unknown_elasticity_share),
            );
        }
        if !(self.meter_noise_kw.is_finite() && self.meter_noise_kw >= 0.0) {
            return invalid(
                "meter_noise_kw",
                format!("must be a finite number ≥ 0, got {}", self.meter_noise_kw),
            );
        }
        if !(1..=600_000).contains(&self.throughput_window_ms) {
            return invalid(
                "throughput_window_ms",
                format!("must be 1 to 600000 ms, got {}", self.throughput_window_ms),
            );
        }
        validate_faults(&self.faults, self.nodes)?;
        if self.queued_jobs > 1000 {
            return invalid("queued_jobs", format!("must be at most 1000, got {}", self.queued_jobs));
        }
        self.facility.validate().map_err(|e| SimError::InvalidConfig {
            field: "facility",
            problem: e.to_string(),
        })
    }

    /// Nodes a job of `gpus` GPUs occupies: whole nodes, at least one.
    #[must_use]
    pub fn nodes_for(&self, gpus: u32) -> u32 {
        gpus.div_ceil(self.gpus_per_node.max(1)).max(1)
    }
}

fn is_share(x: f64) -> bool {
    x.is_finite() && (0.0..=1.0).contains(&x)
}

fn validate_faults(faults: &SimFaults, nodes: u32) -> Result<(), SimError> {
    if !is_share(faults.fail_apply_share) {
        return Err(SimError::InvalidConfig {
            field: "faults.fail_apply_share",
            problem: format!("must be a number in [0, 1], got {}", faults.fail_apply_share),
        });
    }
    if let Some(bad) = faults.unreachable_nodes.iter().find(|n| node_index(n, nodes).is_none()) {
        return Err(SimError::InvalidConfig {
            field: "faults.unreachable_nodes",
            problem: format!(
                "names {bad:?}, which is not a node of the simulated cluster ({} … {})",
                node_name(0),
                node_name(nodes - 1)
            ),
        });
    }
    Ok(())
}

/// Name of node `index` (`node-000`, `node-001`, …).
fn node_name(index: u32) -> String {
    format!("node-{index:03}")
}

/// The index of a node named by [`node_name`], if it exists in a cluster of `nodes` nodes.
fn node_index(name: &str, nodes: u32) -> Option<u32> {
    let index: u32 = name.strip_prefix("node-")?.parse().ok()?;
    (index < nodes && node_name(index) == name).then_some(index)
}

/// Short model name for job ids (`llama70b`, `qwen32b`, `gptoss20b`, `qwen30b-a3b`).
fn model_slug(model: &str) -> String {
    match model {
        "Llama-3.1-70B" => "llama70b".into(),
        "Qwen3-32B" => "qwen32b".into(),
        "gpt-oss-20b" => "gptoss20b".into(),
        "Qwen3-30B-A3B" => "qwen30b-a3b".into(),
        other => other
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect(),
    }
}

/// A job template with the part of its id that names the workload.
#[derive(Debug, Clone)]
struct Template {
    template: JobTemplate,
    /// `llama70b-ft`, `gptoss20b-pt`, …
    label: String,
}

/// Power and throughput moving linearly from one operating point to another.
#[derive(Debug, Clone, Copy)]
struct Ramp {
    from: (Watts, TokensPerSec),
    to: (Watts, TokensPerSec),
    since: Instant,
}

impl Ramp {
    /// Already at `point`.
    fn settled(point: (Watts, TokensPerSec), now: Instant) -> Self {
        Self {
            from: point,
            to: point,
            since: now,
        }
    }

    /// The operating point at `now`.
    fn at(&self, now: Instant, settle: Duration) -> (Watts, TokensPerSec) {
        let elapsed = now.saturating_duration_since(self.since);
        let f = if settle.is_zero() || elapsed >= settle {
            1.0
        } else {
            elapsed.as_secs_f64() / settle.as_secs_f64()
        };
        (
            self.from.0 + (self.to.0 - self.from.0) * f,
            self.from.1 + (self.to.1 - self.from.1) * f,
        )
    }
}

/// One running simulated job.
#[derive(Debug, Clone)]
struct SimJob {
    /// What the gateway is told.
    spec: JobSpec,
    /// What the job really does.
    truth: PowerCurve,
    /// Node indices it occupies.
    nodes: Vec<u32>,
    /// Cap in force.
    cap: WattsPerGpu,
    /// Latest applied generation.
    generation: u64,
    /// The outcome reported for `generation`, replayed when it is re-sent.
    last_outcome: Option<CapOutcome>,
    /// Where its power is heading.
    ramp: Ramp,
    /// When its throughput began to settle, and at which cap per GPU: reset only when the cap
    /// moves beyond [`flexgate_policies::control::evidence::STEADY_CAP_TOLERANCE_W`] of that
    /// one, or the job is suspended or resumed (a trim's few watts read the same point).
    settling: (Instant, f64),
    /// Its flex tier allows suspension (see [`SimCluster::set_suspendable`]).
    suspendable: bool,
    /// Suspended by the gateway: its GPUs draw [`SUSPENDED_W_PER_GPU`] and it makes no progress.
    suspended: bool,
    /// Its profile key: the template's workload label and GPU count, shared by every job of
    /// that template (they run the same configuration); `None` for a custom job.
    signature: Option<Arc<str>>,
    /// Its flex tier (see [`SimCluster::set_tier`]); [`SimConfig::tier`] at start.
    tier: Option<Arc<str>>,
    /// When it started (wall clock), and its time limit, s (`None`: unlimited; the jobs a test
    /// or the demo starts run until ended).
    started_at: DateTime<Utc>,
    time_limit_s: Option<f64>,
}

/// A job in the simulated scheduler's queue.
#[derive(Debug, Clone)]
struct SimQueued {
    /// The template it will run.
    template: usize,
    /// The job number it will take.
    number: u64,
    /// The scheduler's expected start.
    expected_start: DateTime<Utc>,
    /// Its time limit, s.
    limit_s: f64,
}

/// Draw of a suspended job's GPU (memory held, no compute), W.
pub const SUSPENDED_W_PER_GPU: f64 = 75.0;

impl SimJob {
    fn target(&self, cap: WattsPerGpu) -> (Watts, TokensPerSec) {
        (self.truth.power_at_cap(cap), self.truth.tokens_at_cap(cap))
    }
}

/// Mutable state behind the lock.
#[derive(Debug)]
struct State {
    /// Running jobs, in start order (the inventory's order).
    jobs: Vec<SimJob>,
    /// Which nodes are occupied.
    busy: Vec<bool>,
    /// Number of the next job started (job ids are numbered from 1).
    next_job: u64,
    /// Faults in force.
    faults: SimFaults,
    /// Draws for `fail_apply_share`.
    fault_rng: SplitMix64,
    /// Telemetry samples taken (including lost ones).
    samples: u64,
    /// Each job's throughput as it reports it, aggregated by the agent's own code (the mean of
    /// the top 10 % of its training samples in a window), so that simulated and real jobs'
    /// figures mean the same thing.
    throughput: JobWindows,
    /// The latest aggregate per job, for the inventory between telemetry samples.
    throughput_now: std::collections::HashMap<JobId, MeasuredThroughput>,
    /// The scheduler's queue, soonest first.
    queue: Vec<SimQueued>,
}

impl State {
    /// The next unused job number; skips numbers a custom job's id already uses, so that
    /// generated ids stay unique.
    fn take_job_number(&mut self) -> u64 {
        loop {
            let number = self.next_job;
            self.next_job += 1;
            let prefix = format!("job-{number:03}-");
            if !self.jobs.iter().any(|j| j.spec.id.starts_with(&prefix))
                && !self.queue.iter().any(|q| q.number == number)
            {
                return number;
            }
        }
    }

    fn free_nodes(&self) -> u32 {
        u32::try_from(self.busy.iter().filter(|b| !**b).count()).unwrap_or(u32::MAX)
    }

    /// Occupy the `count` lowest free nodes.
    fn take_nodes(&mut self, count: u32) -> Vec<u32> {
        let mut taken = Vec::new();
        for (index, busy) in (0u32..).zip(self.busy.iter_mut()) {
            if taken.len() as u64 == u64::from(count) {
                break;
            }
            if !*busy {
                *busy = true;
                taken.push(index);
            }
        }
        taken
    }

    fn unreachable_node(&self, job: &SimJob) -> Option<String> {
        job.nodes
            .iter()
            .map(|&n| node_name(n))
            .find(|name| self.faults.unreachable_nodes.contains(name))
    }
}

/// The simulated cluster: a [`ClusterBackend`] plus mutations for tests and the demo.
#[derive(Debug)]
pub struct SimCluster {
    config: SimConfig,
    templates: Vec<Template>,
    meter: FacilityPoint,
    /// Wall-clock and `tokio` time at creation: telemetry timestamps advance with `tokio` time,
    /// so a paused-time test sees consistent clocks.
    epoch: (DateTime<Utc>, Instant),
    state: Mutex<State>,
}

impl SimCluster {
    /// Validate `config`, build the job templates and fill the nodes with jobs, all caps at the
    /// GPUs' maximum (uncapped) and settled.
    pub fn new(config: SimConfig) -> Result<Arc<Self>, SimError> {
        config.validate()?;
        let groups = published_groups().map_err(|e| SimError::Templates(e.to_string()))?;
        let templates = synthetic_templates(&groups, TruthFamily::Physical)
            .map_err(|e| SimError::Templates(e.to_string()))?
            .into_iter()
            .zip(&groups)
            .map(|(template, group)| {
                let stage = if group.regime.is_fine_tuning() { "ft" } else { "pt" };
                Template {
                    label: format!("{}-{stage}", model_slug(&group.model)),
                    template,
                }
            })
            .collect();
        let now = Instant::now();
        let sim = Self {
            meter: config.facility.nominal_point(),
            epoch: (crate::clock::wall_now(), now),
            state: Mutex::new(State {
                jobs: Vec::new(),
                busy: vec![false; config.nodes as usize],
                next_job: 1,
                faults: config.faults.clone(),
                fault_rng: SplitMix64::derive(config.seed, FAULT_STREAM),
                samples: 0,
                // The whole cluster's jobs in one set of windows (a job takes at least a node),
                // not one node's 256.
                throughput: JobWindows::with_max_jobs(
                    TimeDelta::milliseconds(i64::try_from(config.throughput_window_ms).unwrap_or(i64::MAX)),
                    usize::try_from(config.nodes).unwrap_or(usize::MAX),
                ),
                throughput_now: std::collections::HashMap::new(),
                queue: Vec::new(),
            }),
            templates,
            config,
        };
        sim.fill(now);
        sim.schedule();
        Ok(Arc::new(sim))
    }

    /// Pack the nodes with jobs drawn from the templates that still fit, then tell the gateway
    /// nothing about exactly `round(share × jobs)` of them (chosen by seed), so that even a
    /// small demo cluster has its share of unknown jobs.
    fn fill(&self, now: Instant) {
        let mut state = self.lock();
        let mut pick = SplitMix64::derive(self.config.seed, PICK_STREAM);
        loop {
            let free = state.free_nodes();
            let fitting: Vec<usize> = (0..self.templates.len())
                .filter(|&i| self.config.nodes_for(self.templates[i].template.gpus) <= free)
                .collect();
            if fitting.is_empty() {
                break;
            }
            // `next_f64() < 1`, so the index is in range.
            let choice = fitting[(pick.next_f64() * fitting.len() as f64) as usize];
            let number = state.take_job_number();
            let job = self.template_job(&mut state, choice, number, false, now);
            state.jobs.push(job);
        }
        let unknown = (self.config.unknown_elasticity_share * state.jobs.len() as f64).round() as usize;
        let mut order: Vec<usize> = (0..state.jobs.len()).collect();
        let mut shuffle = SplitMix64::derive(self.config.seed, UNKNOWN_STREAM);
        for i in (1..order.len()).rev() {
            let j = (shuffle.next_f64() * (i + 1) as f64) as usize;
            order.swap(i, j.min(i));
        }
        for &i in order.iter().take(unknown) {
            state.jobs[i].spec.elasticity = Elasticity::Unknown;
        }
    }

    /// A job from template `index`, numbered `number`, on the lowest free nodes (the caller has
    /// checked that they suffice).
    fn template_job(&self, state: &mut State, index: usize, number: u64, unknown: bool, now: Instant) -> SimJob {
        let Template { template, label } = &self.templates[index];
        let id: JobId = format!("job-{number:03}-{label}").into();
        let elasticity = match template.true_pfi {
            Some(pfi) if !unknown => {
                let mut noise = SplitMix64::derive(self.config.seed ^ NOISE_STREAM, number);
                let (lo, hi) = PREDICTED_PFI_RANGE;
                Elasticity::PredictedPfi {
                    mean: (pfi + PREDICTED_PFI_SD * noise.normal()).clamp(lo, hi),
                    sd: PREDICTED_PFI_SD,
                    grid: None,
                }
            }
            _ => Elasticity::Unknown,
        };
        let uncapped = template.truth.uncapped();
        let spec = JobSpec {
            id,
            gpus: template.gpus,
            cap_range: template.cap_range,
            uncapped_power: uncapped.power,
            uncapped_tokens: uncapped.tokens,
            elasticity,
            max_slowdown: template.max_slowdown,
            priority: 1.0,
        };
        let nodes = state.take_nodes(self.config.nodes_for(template.gpus));
        let mut job = Self::new_job(spec, template.truth.clone(), nodes, now);
        job.signature = Some(format!("{label}/{}gpu", template.gpus).into());
        job.tier = self.config.tier.as_deref().map(Arc::from);
        job
    }

    /// Give the jobs filled at start a past and a limit, and queue `queued_jobs` more, each
    /// expected to start when a running job's limit frees its nodes (the scheduler's estimate).
    fn schedule(&self) {
        if !self.config.time_limits {
            return;
        }
        let wall = self.epoch.0;
        let mut state = self.lock();
        let mut draw = SplitMix64::derive(self.config.seed, CLOCK_STREAM);
        for job in &mut state.jobs {
            let ran_h = 1.0 + 19.0 * draw.next_f64();
            let limit_h = LIMITS_H.iter().copied().find(|l| *l >= ran_h + 6.0).unwrap_or(96.0);
            job.started_at = wall - TimeDelta::seconds((ran_h * 3600.0) as i64);
            job.time_limit_s = Some(limit_h * 3600.0);
        }
        let mut ends: Vec<(DateTime<Utc>, u32)> = state
            .jobs
            .iter()
            .filter_map(|j| {
                let limit = TimeDelta::seconds(j.time_limit_s? as i64);
                Some((j.started_at + limit, j.spec.gpus))
            })
            .collect();
        ends.sort();
        let mut pick = SplitMix64::derive(self.config.seed, QUEUE_STREAM);
        for i in 0..self.config.queued_jobs as usize {
            let free_at = ends.get(i % ends.len().max(1)).map_or(wall, |e| e.0)
                + TimeDelta::hours(24 * (i / ends.len().max(1)) as i64);
            // A job that fits on what the one ending frees (same size or smaller).
            let room = ends
                .get(i % ends.len().max(1))
                .map_or(self.config.gpus_per_node, |e| e.1);
            let fitting: Vec<usize> = (0..self.templates.len())
                .filter(|&t| self.config.nodes_for(self.templates[t].template.gpus) <= self.config.nodes_for(room))
                .collect();
            if fitting.is_empty() {
                break;
            }
            let template = fitting[(pick.next_f64() * fitting.len() as f64) as usize];
            // Queued jobs are numbered apart (from 901), so that the jobs a test or the demo
            // starts keep the numbers they always had.
            let number = QUEUE_NUMBERS_FROM + i as u64;
            let limit_h = LIMITS_H[(pick.next_f64() * 2.0) as usize];
            state.queue.push(SimQueued {
                template,
                number,
                expected_start: free_at,
                limit_s: limit_h * 3600.0,
            });
        }
        state.queue.sort_by_key(|q| q.expected_start);
    }

    /// The scheduler at `wall`: jobs past their limit end; the queue's head starts when its
    /// time has come and its nodes are free, and its expected start slides when they are not.
    fn run_scheduler(&self, state: &mut State, now: Instant) {
        let wall = self.wall_clock(now);
        let over: Vec<JobId> = state
            .jobs
            .iter()
            .filter(|j| {
                j.time_limit_s
                    .is_some_and(|l| j.started_at + TimeDelta::seconds(l as i64) <= wall)
            })
            .map(|j| j.spec.id.clone())
            .collect();
        for id in over {
            Self::remove_job(state, &id);
        }
        while let Some(head) = state.queue.first().cloned() {
            if head.expected_start > wall {
                break;
            }
            let gpus = self.templates[head.template].template.gpus;
            if self.config.nodes_for(gpus) > state.free_nodes() {
                state.queue[0].expected_start = wall + TimeDelta::seconds(START_SLIDE_S);
                state.queue.sort_by_key(|q| q.expected_start);
                break;
            }
            state.queue.remove(0);
            let unknown = SplitMix64::derive(self.config.seed ^ UNKNOWN_STREAM, head.number).next_f64()
                < self.config.unknown_elasticity_share;
            let mut job = self.template_job(state, head.template, head.number, unknown, now);
            job.started_at = wall;
            job.time_limit_s = Some(head.limit_s);
            state.jobs.push(job);
        }
    }

    /// Take a job out: it leaves the inventory and telemetry, and its nodes are free.
    fn remove_job(state: &mut State, job: &str) -> bool {
        let Some(index) = state.jobs.iter().position(|j| &*j.spec.id == job) else {
            return false;
        };
        let ended = state.jobs.remove(index);
        state.throughput.forget(&ended.spec.id);
        state.throughput_now.remove(&ended.spec.id);
        for n in ended.nodes {
            state.busy[n as usize] = false;
        }
        true
    }

    fn new_job(spec: JobSpec, truth: PowerCurve, nodes: Vec<u32>, now: Instant) -> SimJob {
        let cap = spec.cap_range.max;
        let point = (truth.power_at_cap(cap), truth.tokens_at_cap(cap));
        SimJob {
            spec,
            truth,
            nodes,
            cap,
            generation: 0,
            last_outcome: None,
            ramp: Ramp::settled(point, now),
            settling: (now, cap.value()),
            suspendable: false,
            suspended: false,
            signature: None,
            tier: None,
            started_at: crate::clock::wall_now(),
            time_limit_s: None,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock with the state half-updated, so a
        // poisoned lock still guards consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn settle(&self) -> Duration {
        Duration::from_millis(self.config.settle_ms)
    }

    /// The configuration the cluster was built from (its `faults` are the initial ones; see
    /// [`Self::faults`] for those in force).
    #[must_use]
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// The job templates `start_job` draws from (the 25 published H200 groups, physical truth
    /// family), so that tests and the demo can pick one by index.
    pub fn templates(&self) -> impl ExactSizeIterator<Item = &JobTemplate> {
        self.templates.iter().map(|t| &t.template)
    }

    /// Start a job from template `template` on the lowest free nodes, uncapped. Its elasticity
    /// is unknown with probability `unknown_elasticity_share` (seeded per job number), otherwise
    /// a noisy predicted PFI, as for the initial fleet. Returns its id.
    pub fn start_job(&self, template: usize) -> Result<JobId, SimError> {
        let count = self.templates.len();
        let gpus = self
            .templates
            .get(template)
            .ok_or(SimError::UnknownTemplate { index: template, count })?
            .template
            .gpus;
        let mut state = self.lock();
        self.check_room(&state, gpus)?;
        let number = state.take_job_number();
        let unknown = SplitMix64::derive(self.config.seed ^ UNKNOWN_STREAM, number).next_f64()
            < self.config.unknown_elasticity_share;
        let job = self.template_job(&mut state, template, number, unknown, Instant::now());
        let id = job.spec.id.clone();
        state.jobs.push(job);
        Ok(id)
    }

    /// Start a job described by the caller: `spec` is exactly what the gateway will be told
    /// (id, elasticity, uncapped point may even be wrong on purpose), `truth` is what the job
    /// really does. Runs uncapped on the lowest free nodes. Returns its id.
    pub fn start_custom_job(&self, spec: JobSpec, truth: PowerCurve) -> Result<JobId, SimError> {
        spec.validate().map_err(|e| SimError::InvalidJob(e.to_string()))?;
        if truth.gpus() != spec.gpus {
            return Err(SimError::InvalidJob(format!(
                "job {}: the spec says {} GPUs but the truth curve is for {}",
                spec.id,
                spec.gpus,
                truth.gpus()
            )));
        }
        let mut state = self.lock();
        if state.jobs.iter().any(|j| j.spec.id == spec.id) {
            return Err(SimError::DuplicateJob(spec.id.to_string()));
        }
        self.check_room(&state, spec.gpus)?;
        let nodes = state.take_nodes(self.config.nodes_for(spec.gpus));
        let id = spec.id.clone();
        let job = Self::new_job(spec, truth, nodes, Instant::now());
        state.jobs.push(job);
        Ok(id)
    }

    fn check_room(&self, state: &State, gpus: u32) -> Result<(), SimError> {
        let (needed, free) = (self.config.nodes_for(gpus), state.free_nodes());
        if needed > free {
            return Err(SimError::NoRoom { gpus, needed, free });
        }
        Ok(())
    }

    /// End a job: it leaves the inventory and telemetry at once and its nodes become free
    /// (their GPUs are counted idle at 0 W).
    pub fn end_job(&self, job: &str) -> Result<(), SimError> {
        if Self::remove_job(&mut self.lock(), job) {
            Ok(())
        } else {
            Err(SimError::UnknownJob(job.to_string()))
        }
    }

    /// A GPU reset or driver reload under `job`: its GPUs fall back to their maximum limit
    /// behind the gateway's back, while the backend still remembers the generation it applied.
    /// This is the drift the gateway's reconcile must notice (and cap again).
    pub fn revert_cap(&self, job: &str) -> Result<(), SimError> {
        let now = Instant::now();
        let settle = self.settle();
        let mut state = self.lock();
        let sim_job = state
            .jobs
            .iter_mut()
            .find(|j| &*j.spec.id == job)
            .ok_or_else(|| SimError::UnknownJob(job.to_string()))?;
        let max = sim_job.spec.cap_range.max;
        let current = sim_job.ramp.at(now, settle);
        if !sim_job.suspended {
            sim_job.ramp = Ramp {
                from: current,
                to: sim_job.target(max),
                since: now,
            };
        }
        sim_job.settling = (now, max.value());
        sim_job.cap = max;
        Ok(())
    }

    /// Replace the faults in force (validated like the configuration's).
    pub fn set_faults(&self, faults: SimFaults) -> Result<(), SimError> {
        validate_faults(&faults, self.config.nodes)?;
        self.lock().faults = faults;
        Ok(())
    }

    /// The faults in force.
    #[must_use]
    pub fn faults(&self) -> SimFaults {
        self.lock().faults.clone()
    }

    /// The per-GPU cap in force for `job`, if it runs: lets tests check what a command did
    /// without going through the inventory.
    #[must_use]
    pub fn cap_of(&self, job: &str) -> Option<WattsPerGpu> {
        self.lock().jobs.iter().find(|j| &*j.spec.id == job).map(|j| j.cap)
    }

    /// The true power–throughput curve of `job`, which the gateway never sees: for the demo's
    /// and tests' accounting of what a plan really cost.
    #[must_use]
    pub fn truth_of(&self, job: &str) -> Option<PowerCurve> {
        self.lock()
            .jobs
            .iter()
            .find(|j| &*j.spec.id == job)
            .map(|j| j.truth.clone())
    }

    /// Nodes not occupied by any job.
    #[must_use]
    pub fn free_nodes(&self) -> u32 {
        self.lock().free_nodes()
    }

    /// Applies `cmd` to the job at `index` of `state.jobs`.
    fn apply_one(&self, state: &mut State, index: usize, cmd: &CapCommand, now: Instant) -> CapOutcome {
        let fail_share = state.faults.fail_apply_share;
        let job = &state.jobs[index];
        if cmd.generation < job.generation {
            return CapOutcome::Stale { latest: job.generation };
        }
        if cmd.generation == job.generation
            && let Some(previous) = &job.last_outcome
        {
            return previous.clone();
        }
        if !cmd.cap.is_finite() {
            return CapOutcome::Failed {
                reason: format!("cap {} is not a finite number", cmd.cap.value()),
                why: Some(Unconfirmed::Refused),
            };
        }
        if let Some(node) = state.unreachable_node(job) {
            return CapOutcome::Failed {
                reason: format!("node {node} unreachable (simulated): cap not applied"),
                why: Some(Unconfirmed::Unreachable),
            };
        }
        if fail_share > 0.0 && state.fault_rng.next_f64() < fail_share {
            return CapOutcome::Failed {
                reason: "simulated GPU error: cap write refused".into(),
                why: Some(Unconfirmed::DriverError),
            };
        }
        let job = &mut state.jobs[index];
        let range = job.spec.cap_range;
        let applied = cmd.cap.clamp_to(range.min, range.max);
        let outcome = CapOutcome::Applied {
            applied,
            clamped: applied != cmd.cap,
        };
        let current = job.ramp.at(now, self.settle());
        // A suspended job takes the cap (for when it resumes) but stays idle.
        let to = if job.suspended {
            (Watts(SUSPENDED_W_PER_GPU * f64::from(job.spec.gpus)), TokensPerSec(0.0))
        } else {
            job.target(applied)
        };
        job.ramp = Ramp {
            from: current,
            to,
            since: now,
        };
        if flexgate_policies::control::evidence::cap_moved(job.settling.1, applied.value()) {
            job.settling = (now, applied.value());
        }
        job.cap = applied;
        job.generation = cmd.generation;
        job.last_outcome = Some(outcome.clone());
        outcome
    }

    /// Wall-clock time of `tokio` instant `now`.
    fn wall_clock(&self, now: Instant) -> DateTime<Utc> {
        let (utc, start) = self.epoch;
        let elapsed = TimeDelta::from_std(now.saturating_duration_since(start)).unwrap_or(TimeDelta::MAX);
        utc.checked_add_signed(elapsed).unwrap_or(DateTime::<Utc>::MAX_UTC)
    }
}

#[async_trait::async_trait]
impl ClusterBackend for SimCluster {
    async fn inventory(&self) -> Result<Vec<JobState>, BackendError> {
        let now = Instant::now();
        let settle = self.settle();
        let mut state = self.lock();
        self.run_scheduler(&mut state, now);
        Ok(state
            .jobs
            .iter()
            .map(|j| {
                let (power, _) = j.ramp.at(now, settle);
                JobState {
                    spec: j.spec.clone(),
                    nodes: j.nodes.iter().map(|&n| NodeId::from(node_name(n))).collect(),
                    applied_cap: j.cap,
                    generation: j.generation,
                    measured_power: power,
                    measured_tokens: state.throughput_now.get(&j.spec.id).map(|t| t.tokens),
                    suspendable: j.suspendable,
                    signature: j.signature.clone(),
                    tier: j.tier.clone(),
                    cap_unreliable: false,
                    cap_reapplied: 0,
                    started_at: Some(j.started_at),
                    time_limit_s: j.time_limit_s,
                }
            })
            .collect())
    }

    async fn queue(&self) -> Option<Result<Vec<super::QueuedJob>, BackendError>> {
        let state = self.lock();
        Some(Ok(state
            .queue
            .iter()
            .map(|q| {
                let Template { template, label } = &self.templates[q.template];
                super::QueuedJob {
                    id: format!("job-{:03}-{label}", q.number).into(),
                    gpus: template.gpus,
                    signature: Some(format!("{label}/{}gpu", template.gpus).into()),
                    pfi: None,
                    max_slowdown: template.max_slowdown.map(|f| f.value()),
                    priority: 1.0,
                    expected_start: Some(q.expected_start),
                    time_limit_s: Some(q.limit_s),
                }
            })
            .collect()))
    }

    async fn apply(&self, commands: &[CapCommand]) -> Vec<CapResult> {
        let now = Instant::now();
        let mut state = self.lock();
        // One lookup per command, not a scan of every job (dispatches carry ~1 command per job).
        let index: std::collections::HashMap<JobId, usize> = state
            .jobs
            .iter()
            .enumerate()
            .map(|(i, j)| (j.spec.id.clone(), i))
            .collect();
        commands
            .iter()
            .map(|cmd| CapResult {
                job: cmd.job.clone(),
                generation: cmd.generation,
                outcome: match index.get(&cmd.job) {
                    Some(&i) => self.apply_one(&mut state, i, cmd, now),
                    None => CapOutcome::UnknownJob,
                },
            })
            .collect()
    }

    async fn telemetry(&self) -> Result<Telemetry, BackendError> {
        let now = Instant::now();
        let settle = self.settle();
        let mut state = self.lock();
        state.samples += 1;
        let sample = state.samples;
        if state.faults.telemetry_gaps && sample.is_multiple_of(TELEMETRY_GAP_PERIOD) {
            return Err(BackendError::TelemetryGap(format!(
                "simulated gap: sample {sample} lost"
            )));
        }
        let mut jobs = Vec::with_capacity(state.jobs.len());
        let mut true_total = Watts::ZERO;
        let at = self.wall_clock(now);
        let state = &mut *state;
        for j in &state.jobs {
            let (power, tokens) = j.ramp.at(now, settle);
            true_total += power;
            if state.unreachable_node(j).is_none() {
                // The job reports its rate as a real one does, through the same screen and
                // aggregation; a simulated rate is always plausible, so nothing is refused.
                let report = ThroughputReport {
                    tokens_per_s: tokens.value(),
                    samples_per_s: None,
                    step: None,
                    phase: Phase::Train,
                };
                if let Err(e) = state.throughput.record(&j.spec.id, &report, at) {
                    tracing::warn!(job = %j.spec.id, "simulated throughput refused: {e}");
                }
                jobs.push(JobTelemetry {
                    job: j.spec.id.clone(),
                    power,
                    tokens: None,
                });
            }
        }
        // A job's samples are steady once its last cap change has settled.
        let settled_from: std::collections::HashMap<&str, DateTime<Utc>> = state
            .jobs
            .iter()
            .map(|j| (&*j.spec.id, self.wall_clock(j.settling.0 + settle)))
            .collect();
        let throughput_now = state
            .throughput
            .summaries(at)
            .into_iter()
            .map(|t| {
                let reading = MeasuredThroughput {
                    tokens: TokensPerSec(t.tokens_per_s),
                    since: t.window_start,
                    samples: u32::try_from(t.training_samples).unwrap_or(u32::MAX),
                    steady: settled_from
                        .get(t.job_id.as_str())
                        .is_some_and(|from| t.window_start >= *from),
                };
                (JobId::from(t.job_id), reading)
            })
            .collect();
        state.throughput_now = throughput_now;
        for j in &mut jobs {
            j.tokens = state.throughput_now.get(&j.job).copied();
        }
        let noise = if self.config.meter_noise_kw > 0.0 {
            self.config.meter_noise_kw * SplitMix64::derive(self.config.seed ^ METER_STREAM, sample).normal()
        } else {
            0.0
        };
        let meter_kw = self.meter.meter_settled(true_total, self.config.nodes) + Kilowatts(noise);
        Ok(Telemetry {
            at,
            gpu_board_power: jobs.iter().map(|j| j.power).sum(),
            jobs,
            meter_kw,
            // The simulated site's own meter: in simulation this is the measurement.
            meter_quality: flexgate_policies::meter::Quality::Measured,
            nodes: self.config.nodes,
        })
    }

    fn name(&self) -> &str {
        "sim"
    }

    async fn suspend(&self, job: &str) -> Result<(), BackendError> {
        self.set_suspended(job, true)
    }

    async fn resume(&self, job: &str) -> Result<(), BackendError> {
        self.set_suspended(job, false)
    }
}

impl SimCluster {
    /// Let (or stop letting) the gateway suspend `job`, as its flex tier would.
    pub fn set_suspendable(&self, job: &str, suspendable: bool) -> Result<(), SimError> {
        self.with_job(job, |j| j.suspendable = suspendable)
    }

    /// Put `job` in flex tier `tier` (or none), as its scheduler tags would.
    pub fn set_tier(&self, job: &str, tier: Option<&str>) -> Result<(), SimError> {
        self.with_job(job, |j| j.tier = tier.map(Arc::from))
    }

    /// Change running job `job` with `change`.
    fn with_job(&self, job: &str, change: impl FnOnce(&mut SimJob)) -> Result<(), SimError> {
        let mut state = self.lock();
        let j = state
            .jobs
            .iter_mut()
            .find(|j| &*j.spec.id == job)
            .ok_or_else(|| SimError::UnknownJob(job.to_string()))?;
        change(j);
        Ok(())
    }

    /// Whether `job` is suspended now.
    #[must_use]
    pub fn is_suspended(&self, job: &str) -> Option<bool> {
        self.lock()
            .jobs
            .iter()
            .find(|j| &*j.spec.id == job)
            .map(|j| j.suspended)
    }

    fn set_suspended(&self, job: &str, suspended: bool) -> Result<(), BackendError> {
        let now = Instant::now();
        let settle = self.settle();
        let mut state = self.lock();
        let j = state
            .jobs
            .iter_mut()
            .find(|j| &*j.spec.id == job)
            .ok_or_else(|| BackendError::Protocol(format!("no running job {job}")))?;
        if suspended && !j.suspendable {
            return Err(BackendError::Protocol(format!(
                "job {job}: its flex tier does not allow suspension"
            )));
        }
        j.suspended = suspended;
        let to = if suspended {
            (Watts(SUSPENDED_W_PER_GPU * f64::from(j.spec.gpus)), TokensPerSec(0.0))
        } else {
            j.target(j.cap)
        };
        j.ramp = Ramp {
            from: j.ramp.at(now, settle),
            to,
            since: now,
        };
        j.settling = (now, j.cap.value());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flexgate_policies::alloc::CapRange;
    use flexgate_policies::curve::CurvePoint;

    fn sim(config: SimConfig) -> Arc<SimCluster> {
        SimCluster::new(config).expect("valid config")
    }

    fn cmd(job: &JobId, cap: f64, generation: u64) -> CapCommand {
        CapCommand {
            job: job.clone(),
            cap: WattsPerGpu(cap),
            generation,
            until: None,
        }
    }

    async fn first_job(sim: &SimCluster) -> JobState {
        sim.inventory().await.expect("inventory").remove(0)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    #[tokio::test(start_paused = true)]
    async fn jobs_end_at_their_limit_and_the_queue_head_starts_where_one_ended() {
        let sim = sim(SimConfig::default());
        let queue = sim.queue().await.expect("a queue").expect("an answer");
        assert_eq!(queue.len(), 6);
        assert!(
            queue.windows(2).all(|w| w[0].expected_start <= w[1].expected_start),
            "soonest first"
        );
        let jobs = sim.inventory().await.expect("inventory");
        let end_of =
            |j: &JobState| j.started_at.expect("a start") + TimeDelta::seconds(j.time_limit_s.expect("a limit") as i64);
        let now = sim.wall_clock(Instant::now());
        assert!(
            jobs.iter().all(|j| j.started_at.is_some_and(|s| s < now)),
            "they ran before"
        );
        let first = jobs.iter().min_by_key(|j| end_of(j)).expect("a job");
        let head = &queue[0];
        assert_eq!(
            head.expected_start,
            Some(end_of(first)),
            "expected when the first limit frees nodes"
        );
        assert!(head.id.starts_with("job-901-"), "{}", head.id);
        let wait = (end_of(first) - now).to_std().expect("in the future") + Duration::from_secs(1);
        tokio::time::advance(wait).await;
        let after = sim.inventory().await.expect("inventory");
        assert!(after.iter().all(|j| j.spec.id != first.spec.id), "ended at its limit");
        let started = after.iter().find(|j| j.spec.id == head.id).expect("the head started");
        assert_eq!(started.time_limit_s, head.time_limit_s);
        assert_eq!(sim.queue().await.expect("a queue").expect("an answer").len(), 5);
    }

    #[tokio::test]
    async fn the_fleet_is_deterministic_for_a_seed_and_differs_between_seeds() {
        let seeded = |seed| {
            sim(SimConfig {
                seed,
                ..SimConfig::default()
            })
        };
        // Start times are relative to the simulation's own start, which differs by microseconds.
        let fleet = |jobs: Vec<JobState>| -> Vec<JobState> {
            jobs.into_iter()
                .map(|mut j| {
                    j.started_at = None;
                    j
                })
                .collect()
        };
        let a = fleet(seeded(7).inventory().await.expect("inventory"));
        let b = fleet(seeded(7).inventory().await.expect("inventory"));
        assert_eq!(a, b);
        let mut different = false;
        for seed in 8..12 {
            different |= fleet(seeded(seed).inventory().await.expect("inventory")) != a;
        }
        assert!(different, "other seeds should give other fleets");
    }

    #[tokio::test]
    async fn jobs_occupy_whole_nodes_until_the_nodes_run_out() {
        for seed in 0..20 {
            let sim = sim(SimConfig {
                seed,
                ..SimConfig::default()
            });
            let jobs = sim.inventory().await.expect("inventory");
            assert_eq!(sim.free_nodes(), 0, "seed {seed}: every node is used");
            let mut nodes: Vec<&NodeId> = jobs.iter().flat_map(|j| &j.nodes).collect();
            assert_eq!(nodes.len(), 16);
            nodes.sort();
            nodes.dedup();
            assert_eq!(nodes.len(), 16, "seed {seed}: no node is shared");
            for (i, j) in jobs.iter().enumerate() {
                assert_eq!(j.nodes.len() as u32, j.spec.gpus / 8, "{}", j.spec.id);
                assert!(j.spec.id.starts_with(&format!("job-{:03}-", i + 1)), "{}", j.spec.id);
                assert!(
                    j.spec.id.ends_with("-ft") || j.spec.id.ends_with("-pt"),
                    "{}",
                    j.spec.id
                );
                assert_eq!(j.applied_cap, j.spec.cap_range.max);
                assert_eq!(j.generation, 0);
                assert_eq!(j.measured_power, j.spec.uncapped_power);
                assert_eq!(
                    j.measured_tokens, None,
                    "no job has reported before the first telemetry"
                );
                j.spec.validate().expect("valid spec");
            }
        }
        // Job names follow the published model and regime.
        let names: Vec<String> = (0..10)
            .flat_map(|seed| {
                let s = sim(SimConfig {
                    seed,
                    ..SimConfig::default()
                });
                let ids: Vec<String> = s.lock().jobs.iter().map(|j| j.spec.id.to_string()).collect();
                ids
            })
            .collect();
        assert!(
            names
                .iter()
                .any(|n| n.ends_with("-llama70b-ft") || n.ends_with("-llama70b-pt"))
        );
        assert!(names.iter().any(|n| n.ends_with("-gptoss20b-pt")));
    }

    #[tokio::test]
    async fn gpus_per_node_decides_how_many_nodes_a_job_takes() {
        let sim = sim(SimConfig {
            nodes: 12,
            gpus_per_node: 4,
            ..SimConfig::default()
        });
        for j in sim.inventory().await.expect("inventory") {
            assert_eq!(j.nodes.len() as u32, j.spec.gpus / 4);
        }
        assert_eq!(sim.free_nodes(), 0);
    }

    #[tokio::test]
    async fn the_configured_share_of_jobs_has_unknown_elasticity() {
        for (nodes, seed) in [(16, 0), (16, 3), (400, 1)] {
            let sim = sim(SimConfig {
                nodes,
                seed,
                ..SimConfig::default()
            });
            let jobs = sim.inventory().await.expect("inventory");
            let unknown = jobs.iter().filter(|j| j.spec.elasticity == Elasticity::Unknown).count();
            assert_eq!(unknown, (0.2 * jobs.len() as f64).round() as usize, "{nodes} nodes");
            let mut errors = Vec::new();
            for j in &jobs {
                match &j.spec.elasticity {
                    Elasticity::Unknown => {}
                    Elasticity::PredictedPfi { mean, sd, grid } => {
                        assert!((0.5..=5.0).contains(mean));
                        assert_eq!(*sd, 0.241);
                        assert!(grid.is_none());
                        let curve = sim.truth_of(&j.spec.id).expect("truth");
                        let truth = sim
                            .templates()
                            .find(|t| t.truth == curve)
                            .and_then(|t| t.true_pfi)
                            .expect("a template with this truth");
                        errors.push(mean - truth);
                    }
                    other => panic!("unexpected elasticity {other:?}"),
                }
            }
            if nodes == 400 {
                let n = errors.len() as f64;
                let bias = errors.iter().sum::<f64>() / n;
                let rmse = (errors.iter().map(|e| e * e).sum::<f64>() / n).sqrt();
                assert!(bias.abs() < 0.1, "bias {bias}");
                assert!((rmse - 0.241).abs() < 0.06, "rmse {rmse}");
            }
        }
        let none = sim(SimConfig {
            unknown_elasticity_share: 0.0,
            ..SimConfig::default()
        });
        let all_known = none.inventory().await.expect("inventory");
        assert!(all_known.iter().all(|j| j.spec.elasticity != Elasticity::Unknown));
    }

    #[tokio::test]
    async fn apply_clamps_out_of_range_caps_and_reports_them() {
        let sim = sim(SimConfig::default());
        let job = first_job(&sim).await.spec.id;
        let results = sim
            .apply(&[cmd(&job, 100.0, 1), cmd(&job, 900.0, 2), cmd(&job, 450.0, 3)])
            .await;
        let outcomes: Vec<CapOutcome> = results.iter().map(|r| r.outcome.clone()).collect();
        assert_eq!(
            outcomes,
            vec![
                CapOutcome::Applied {
                    applied: WattsPerGpu(200.0),
                    clamped: true
                },
                CapOutcome::Applied {
                    applied: WattsPerGpu(700.0),
                    clamped: true
                },
                CapOutcome::Applied {
                    applied: WattsPerGpu(450.0),
                    clamped: false
                },
            ]
        );
        assert_eq!(results[1].generation, 2);
        assert_eq!(&*results[1].job, &*job);
        assert_eq!(sim.cap_of(&job), Some(WattsPerGpu(450.0)));
        let nan = sim.apply(&[cmd(&job, f64::NAN, 4)]).await;
        assert!(matches!(nan[0].outcome, CapOutcome::Failed { .. }));
        assert_eq!(sim.cap_of(&job), Some(WattsPerGpu(450.0)));
    }

    #[tokio::test]
    async fn a_repeated_generation_changes_nothing_and_a_lower_one_is_stale() {
        let sim = sim(SimConfig::default());
        let job = first_job(&sim).await.spec.id;
        let first = sim.apply(&[cmd(&job, 150.0, 5)]).await;
        // Same generation, other cap: nothing changes, same answer.
        let again = sim.apply(&[cmd(&job, 600.0, 5)]).await;
        assert_eq!(first, again);
        assert_eq!(sim.cap_of(&job), Some(WattsPerGpu(200.0)));
        let stale = sim.apply(&[cmd(&job, 600.0, 4)]).await;
        assert_eq!(stale[0].outcome, CapOutcome::Stale { latest: 5 });
        assert_eq!(stale[0].generation, 4);
        assert_eq!(sim.cap_of(&job), Some(WattsPerGpu(200.0)));
        let newer = sim.apply(&[cmd(&job, 600.0, 6)]).await;
        assert_eq!(newer[0].outcome.applied(), Some(WattsPerGpu(600.0)));
        let state = first_job(&sim).await;
        assert_eq!((state.generation, state.applied_cap), (6, WattsPerGpu(600.0)));
        let unknown = sim.apply(&[cmd(&JobId::from("job-999-nope"), 400.0, 1)]).await;
        assert_eq!(unknown[0].outcome, CapOutcome::UnknownJob);
    }

    #[tokio::test(start_paused = true)]
    async fn realized_power_ramps_to_the_truth_curve_within_settle_ms() {
        let sim = sim(SimConfig::default());
        let state = first_job(&sim).await;
        let job = state.spec.id.clone();
        let truth = sim.truth_of(&job).expect("truth");
        let cap = WattsPerGpu(400.0);
        let (p0, t0) = (state.measured_power, state.spec.uncapped_tokens);
        let (p1, t1) = (truth.power_at_cap(cap), truth.tokens_at_cap(cap));
        assert!(p1 < p0 && t1 < t0, "a 400 W cap binds");
        sim.apply(&[cmd(&job, cap.value(), 1)]).await;
        assert_eq!(first_job(&sim).await.measured_power, p0, "nothing moves at once");
        tokio::time::advance(Duration::from_millis(250)).await;
        let quarter = first_job(&sim).await;
        assert!(p1 < quarter.measured_power && quarter.measured_power < p0);
        assert!(close(quarter.measured_power.value(), (p0 + (p1 - p0) * 0.25).value()));
        tokio::time::advance(Duration::from_millis(750)).await;
        let settled = first_job(&sim).await;
        assert!(close(settled.measured_power.value(), p1.value()));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(close(first_job(&sim).await.measured_power.value(), p1.value()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_cap_mid_ramp_starts_from_where_power_is() {
        let sim = sim(SimConfig::default());
        let job = first_job(&sim).await.spec.id;
        let truth = sim.truth_of(&job).expect("truth");
        sim.apply(&[cmd(&job, 300.0, 1)]).await;
        tokio::time::advance(Duration::from_millis(500)).await;
        let midway = first_job(&sim).await.measured_power;
        sim.apply(&[cmd(&job, 700.0, 2)]).await;
        assert!(close(first_job(&sim).await.measured_power.value(), midway.value()));
        tokio::time::advance(Duration::from_millis(1000)).await;
        let back = first_job(&sim).await.measured_power;
        assert!(close(back.value(), truth.power_at_cap(WattsPerGpu(700.0)).value()));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_settle_time_moves_power_at_once() {
        let sim = sim(SimConfig {
            settle_ms: 0,
            ..SimConfig::default()
        });
        let job = first_job(&sim).await.spec.id;
        let truth = sim.truth_of(&job).expect("truth");
        sim.apply(&[cmd(&job, 300.0, 1)]).await;
        assert_eq!(
            first_job(&sim).await.measured_power,
            truth.power_at_cap(WattsPerGpu(300.0))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn telemetry_sums_the_jobs_and_the_meter_follows_the_facility_model() {
        let sim = sim(SimConfig::default());
        let jobs = sim.inventory().await.expect("inventory");
        let first = sim.telemetry().await.expect("telemetry");
        assert_eq!(first.nodes, 16);
        assert_eq!(first.jobs.len(), jobs.len());
        let sum: Watts = first.jobs.iter().map(|j| j.power).sum();
        assert_eq!(first.gpu_board_power, sum);
        let expected: Watts = jobs.iter().map(|j| j.measured_power).sum();
        assert!(close(sum.value(), expected.value()));
        let point = FacilityParams::default().nominal_point();
        assert!(close(first.meter_kw.value(), point.meter_settled(sum, 16).value()));
        // Cap everything: board power falls and the meter with it, by the model.
        let commands: Vec<CapCommand> = jobs.iter().map(|j| cmd(&j.spec.id, 300.0, 1)).collect();
        sim.apply(&commands).await;
        tokio::time::advance(Duration::from_secs(2)).await;
        let capped = sim.telemetry().await.expect("telemetry");
        assert!(capped.gpu_board_power < first.gpu_board_power);
        assert!(capped.meter_kw < first.meter_kw);
        assert!(close(
            capped.meter_kw.value(),
            point.meter_settled(capped.gpu_board_power, 16).value()
        ));
        let reported = |t: &Telemetry, job: &str| {
            t.jobs
                .iter()
                .find(|j| &*j.job == job)
                .and_then(|j| j.tokens)
                .expect("every simulated job reports its throughput")
        };
        for j in &capped.jobs {
            let truth = sim.truth_of(&j.job).expect("truth");
            assert!(close(j.power.value(), truth.power_at_cap(WattsPerGpu(300.0)).value()));
            // The throughput is the agent's aggregate, the top decile of the window: the
            // uncapped sample of 2 s ago still leads it, and its window says so.
            let now = reported(&capped, &j.job);
            assert_eq!(now.tokens, reported(&first, &j.job).tokens);
            assert_eq!((now.since, now.samples), (first.at, 2));
        }
        assert_eq!((capped.at - first.at).num_seconds(), 2, "timestamps follow tokio time");
        // Once the cap has held for a whole window, every sample counted was taken under it.
        tokio::time::advance(Duration::from_secs(31)).await;
        let settled = sim.telemetry().await.expect("telemetry");
        for j in &settled.jobs {
            let truth = sim.truth_of(&j.job).expect("truth");
            let now = reported(&settled, &j.job);
            assert!(close(
                now.tokens.value(),
                truth.tokens_at_cap(WattsPerGpu(300.0)).value()
            ));
            assert_eq!((now.since, now.samples), (settled.at, 1));
        }
        let inventory = sim.inventory().await.expect("inventory");
        assert!(
            inventory
                .iter()
                .all(|j| j.measured_tokens == Some(reported(&settled, &j.spec.id).tokens))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn every_job_of_a_large_cluster_reports_its_throughput() {
        // More jobs than one agent keeps (256): the simulated cluster holds them all.
        let sim = sim(SimConfig {
            nodes: 600,
            ..SimConfig::default()
        });
        let jobs = sim.inventory().await.expect("inventory").len();
        assert!(jobs > flexgate_agent::throughput::MAX_JOBS, "{jobs} jobs");
        let t = sim.telemetry().await.expect("telemetry");
        assert_eq!(t.jobs.iter().filter(|j| j.tokens.is_some()).count(), jobs);
    }

    #[tokio::test]
    async fn meter_noise_is_deterministic_and_of_the_configured_size() {
        let config = SimConfig {
            meter_noise_kw: 5.0,
            seed: 11,
            ..SimConfig::default()
        };
        let (a, b) = (sim(config.clone()), sim(config));
        let mut deviations = Vec::new();
        for _ in 0..200 {
            let (x, y) = (a.telemetry().await.expect("a"), b.telemetry().await.expect("b"));
            assert_eq!(x.meter_kw, y.meter_kw);
            let exact = a.meter.meter_settled(x.gpu_board_power, 16);
            deviations.push((x.meter_kw - exact).value());
        }
        let sd = (deviations.iter().map(|d| d * d).sum::<f64>() / 200.0).sqrt();
        assert!((3.5..6.5).contains(&sd), "noise sd {sd}");
    }

    #[tokio::test]
    async fn failed_applies_leave_caps_unchanged() {
        let sim = sim(SimConfig {
            faults: SimFaults {
                fail_apply_share: 1.0,
                ..SimFaults::default()
            },
            ..SimConfig::default()
        });
        let jobs = sim.inventory().await.expect("inventory");
        let commands: Vec<CapCommand> = jobs.iter().map(|j| cmd(&j.spec.id, 300.0, 1)).collect();
        for r in sim.apply(&commands).await {
            assert!(matches!(r.outcome, CapOutcome::Failed { .. }), "{r:?}");
            assert_eq!(sim.cap_of(&r.job), Some(WattsPerGpu(700.0)));
        }
        // A failed generation is not recorded: the retry succeeds once the fault clears.
        sim.set_faults(SimFaults::default()).expect("valid faults");
        for r in sim.apply(&commands).await {
            assert_eq!(r.outcome.applied(), Some(WattsPerGpu(300.0)));
        }
    }

    #[tokio::test]
    async fn a_failed_apply_share_fails_about_that_share() {
        let sim = sim(SimConfig {
            faults: SimFaults {
                fail_apply_share: 0.3,
                ..SimFaults::default()
            },
            ..SimConfig::default()
        });
        let job = first_job(&sim).await.spec.id;
        let commands: Vec<CapCommand> = (1..=1000).map(|g| cmd(&job, 400.0, g)).collect();
        let failed = sim
            .apply(&commands)
            .await
            .iter()
            .filter(|r| matches!(r.outcome, CapOutcome::Failed { .. }))
            .count();
        assert!((250..350).contains(&failed), "{failed} of 1000 failed");
    }

    #[tokio::test(start_paused = true)]
    async fn unreachable_nodes_fail_their_jobs_and_drop_out_of_telemetry() {
        let sim = sim(SimConfig::default());
        let jobs = sim.inventory().await.expect("inventory");
        let victim = &jobs[1];
        sim.set_faults(SimFaults {
            unreachable_nodes: vec![victim.nodes[0].to_string()],
            ..SimFaults::default()
        })
        .expect("valid faults");
        let commands: Vec<CapCommand> = jobs.iter().map(|j| cmd(&j.spec.id, 300.0, 1)).collect();
        for r in sim.apply(&commands).await {
            if r.job == victim.spec.id {
                let CapOutcome::Failed { reason, .. } = &r.outcome else {
                    panic!("expected a failure, got {r:?}");
                };
                assert!(reason.contains(victim.nodes[0].as_str()), "{reason}");
                assert_eq!(sim.cap_of(&r.job), Some(WattsPerGpu(700.0)));
            } else {
                assert_eq!(r.outcome.applied(), Some(WattsPerGpu(300.0)), "{r:?}");
            }
        }
        let t = sim.telemetry().await.expect("telemetry");
        assert_eq!(t.jobs.len(), jobs.len() - 1);
        assert!(t.jobs.iter().all(|j| j.job != victim.spec.id));
        // The meter still sees the unmeasured job.
        let all: Watts = sim
            .inventory()
            .await
            .expect("inventory")
            .iter()
            .map(|j| j.measured_power)
            .sum();
        assert!(close(t.meter_kw.value(), sim.meter.meter_settled(all, 16).value()));
        assert!(t.gpu_board_power < all);
    }

    #[tokio::test]
    async fn telemetry_gaps_lose_every_third_sample() {
        let sim = sim(SimConfig {
            faults: SimFaults {
                telemetry_gaps: true,
                ..SimFaults::default()
            },
            ..SimConfig::default()
        });
        let mut lost = Vec::new();
        for _ in 0..6 {
            lost.push(matches!(sim.telemetry().await, Err(BackendError::TelemetryGap(_))));
        }
        assert_eq!(lost, [false, false, true, false, false, true]);
    }

    #[tokio::test]
    async fn ending_a_job_frees_its_nodes_for_a_new_one() {
        let sim = sim(SimConfig::default());
        let jobs = sim.inventory().await.expect("inventory");
        let ended = jobs.iter().find(|j| j.spec.gpus == 8).expect("an 8-GPU job");
        assert!(matches!(sim.start_job(0), Err(SimError::NoRoom { .. })));
        sim.end_job(&ended.spec.id).expect("running");
        assert_eq!(sim.free_nodes(), 1);
        let inventory = sim.inventory().await.expect("inventory");
        assert_eq!(inventory.len(), jobs.len() - 1);
        assert!(inventory.iter().all(|j| j.spec.id != ended.spec.id));
        assert_eq!(sim.cap_of(&ended.spec.id), None);
        let telemetry = sim.telemetry().await.expect("telemetry");
        assert!(telemetry.jobs.iter().all(|j| j.job != ended.spec.id));
        let unknown = sim.apply(&[cmd(&ended.spec.id, 300.0, 1)]).await;
        assert_eq!(unknown[0].outcome, CapOutcome::UnknownJob);
        assert_eq!(
            sim.end_job(&ended.spec.id),
            Err(SimError::UnknownJob(ended.spec.id.to_string()))
        );
        // Template 1 (group 2) is an 8-GPU job: it fits on the freed node.
        let id = sim.start_job(1).expect("room for 8 GPUs");
        assert!(
            id.starts_with(&format!("job-{:03}-llama70b-ft", jobs.len() + 1)),
            "{id}"
        );
        let started = sim.inventory().await.expect("inventory");
        let last = started.last().expect("a job");
        assert_eq!(last.spec.id, id);
        assert_eq!(last.nodes, ended.nodes);
        assert_eq!(sim.free_nodes(), 0);
        assert!(matches!(
            sim.start_job(99),
            Err(SimError::UnknownTemplate { index: 99, count: 25 })
        ));
    }

    #[tokio::test]
    async fn a_custom_job_is_told_exactly_its_spec() {
        let sim = sim(SimConfig {
            nodes: 2,
            ..SimConfig::default()
        });
        for j in sim.inventory().await.expect("inventory") {
            sim.end_job(&j.spec.id).expect("running");
        }
        let truth = PowerCurve::new(
            8,
            vec![
                CurvePoint {
                    cap: WattsPerGpu(200.0),
                    power: Watts(1600.0),
                    tokens: TokensPerSec(500.0),
                },
                CurvePoint {
                    cap: WattsPerGpu(700.0),
                    power: Watts(5000.0),
                    tokens: TokensPerSec(1000.0),
                },
            ],
        )
        .expect("valid curve");
        let spec = JobSpec {
            id: "custom".into(),
            gpus: 8,
            cap_range: CapRange::H200,
            uncapped_power: Watts(5000.0),
            uncapped_tokens: TokensPerSec(1000.0),
            elasticity: Elasticity::Unknown,
            max_slowdown: None,
            priority: 1.0,
        };
        let id = sim.start_custom_job(spec.clone(), truth.clone()).expect("room");
        assert_eq!(&*id, "custom");
        assert!(matches!(
            sim.start_custom_job(spec.clone(), truth.clone()),
            Err(SimError::DuplicateJob(_))
        ));
        let wrong = JobSpec {
            id: "other".into(),
            gpus: 16,
            ..spec.clone()
        };
        assert!(matches!(
            sim.start_custom_job(wrong, truth),
            Err(SimError::InvalidJob(_))
        ));
        let state = first_job(&sim).await;
        assert_eq!(state.spec, spec);
        assert_eq!(state.measured_power, Watts(5000.0));
    }

    #[tokio::test]
    async fn generated_ids_skip_numbers_a_custom_job_took() {
        let sim = sim(SimConfig {
            nodes: 2,
            ..SimConfig::default()
        });
        let initial = sim.inventory().await.expect("inventory");
        for j in &initial {
            sim.end_job(&j.spec.id).expect("running");
        }
        let template = sim.templates().nth(1).expect("template 1").clone();
        let uncapped = template.truth.uncapped();
        let taken = format!("job-{:03}-mine", initial.len() + 1);
        let spec = JobSpec {
            id: taken.as_str().into(),
            gpus: template.gpus,
            cap_range: template.cap_range,
            uncapped_power: uncapped.power,
            uncapped_tokens: uncapped.tokens,
            elasticity: Elasticity::Unknown,
            max_slowdown: None,
            priority: 1.0,
        };
        sim.start_custom_job(spec, template.truth).expect("room");
        let id = sim.start_job(1).expect("room");
        assert!(id.starts_with(&format!("job-{:03}-", initial.len() + 2)), "{id}");
    }

    #[test]
    fn config_reads_from_toml_with_defaults_and_rejects_unknown_fields() {
        let config: SimConfig = toml::from_str(
            "nodes = 4\nseed = 9\n[faults]\nunreachable_nodes = [\"node-002\"]\n[facility]\nfabric_kw = { lo = 1.0, nominal = 2.0, hi = 3.0 }\n",
        )
        .expect("valid toml");
        assert_eq!(config.nodes, 4);
        assert_eq!(config.gpus_per_node, 8);
        assert_eq!(config.settle_ms, 1000);
        assert_eq!(config.unknown_elasticity_share, 0.2);
        assert_eq!(config.faults.unreachable_nodes, vec!["node-002".to_string()]);
        assert_eq!(config.facility.fabric_kw.nominal, 2.0);
        config.validate().expect("valid");
        assert!(toml::from_str::<SimConfig>("nodez = 4").is_err());
        assert!(toml::from_str::<SimConfig>("[faults]\nfail_share = 0.1").is_err());
        let empty: SimConfig = toml::from_str("").expect("all defaults");
        assert_eq!(empty, SimConfig::default());
        let round: SimConfig =
            toml::from_str(&toml::to_string(&SimConfig::default()).expect("serializes")).expect("parses back");
        assert_eq!(round, SimConfig::default());
    }

    #[test]
    fn invalid_configs_name_the_field() {
        let field_of = |config: SimConfig| match SimCluster::new(config) {
            Err(SimError::InvalidConfig { field, .. }) => field,
            other => panic!("expected an invalid config, got {other:?}"),
        };
        assert_eq!(
            field_of(SimConfig {
                nodes: 0,
                ..SimConfig::default()
            }),
            "nodes"
        );
        assert_eq!(
            field_of(SimConfig {
                gpus_per_node: 0,
                ..SimConfig::default()
            }),
            "gpus_per_node"
        );
        assert_eq!(
            field_of(SimConfig {
                unknown_elasticity_share: 1.5,
                ..SimConfig::default()
            }),
            "unknown_elasticity_share"
        );
        assert_eq!(
            field_of(SimConfig {
                meter_noise_kw: f64::NAN,
                ..SimConfig::default()
            }),
            "meter_noise_kw"
        );
        let faults = |faults| SimConfig {
            faults,
            ..SimConfig::default()
        };
        assert_eq!(
            field_of(faults(SimFaults {
                fail_apply_share: -0.1,
                ..SimFaults::default()
            })),
            "faults.fail_apply_share"
        );
        assert_eq!(
            field_of(faults(SimFaults {
                unreachable_nodes: vec!["node-016".into()],
                ..SimFaults::default()
            })),
            "faults.unreachable_nodes"
        );
        let mut facility = FacilityParams::default();
        facility.k_cool.lo = 1.0;
        assert_eq!(
            field_of(SimConfig {
                facility,
                ..SimConfig::default()
            }),
            "facility"
        );
    }

    #[test]
    fn node_names_parse_back_and_reject_strangers() {
        assert_eq!(node_index("node-003", 16), Some(3));
        assert_eq!(node_index("node-016", 16), None);
        assert_eq!(node_index("node-3", 16), None);
        assert_eq!(node_index("gpu-003", 16), None);
        assert_eq!(model_slug("Some Model-7B"), "somemodel7b");
    }

    #[tokio::test]
    async fn the_sim_is_a_backend_and_its_answers_serialize() {
        let backend: Arc<dyn ClusterBackend> = sim(SimConfig::default());
        assert_eq!(backend.name(), "sim");
        let job = backend.inventory().await.expect("inventory").remove(0);
        let json = serde_json::to_value(&job).expect("serializes");
        assert!(json["spec"]["elasticity"]["kind"].as_str().is_some());
        let results = backend.apply(&[cmd(&job.spec.id, 100.0, 1)]).await;
        let json = serde_json::to_value(&results[0]).expect("serializes");
        assert_eq!(json["outcome"]["status"], "applied");
        assert_eq!(json["outcome"]["applied"], 200.0);
        assert_eq!(json["outcome"]["clamped"], true);
        let back: CapResult = serde_json::from_value(json).expect("parses back");
        assert_eq!(back, results[0]);
        let telemetry = backend.telemetry().await.expect("telemetry");
        let json = serde_json::to_value(&telemetry).expect("serializes");
        let back: Telemetry = serde_json::from_value(json.clone()).expect("parses back");
        assert_eq!(serde_json::to_value(&back).expect("serializes"), json);
        assert_eq!(back.jobs.len(), telemetry.jobs.len());
        let err = serde_json::to_value(BackendError::Unreachable("x".into())).expect("serializes");
        assert_eq!(err["kind"], "unreachable");
    }
}
