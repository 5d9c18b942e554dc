//! What the HTTP API shows: plain serialisable views of the controller's published snapshot.
//!
//! Views are built from a [`Snapshot`] and the time of the read, never from the controller
//! itself, so a read never waits for a decision, a disk flush or a cluster call.

use crate::cluster::JobState;
use chrono::{DateTime, Utc};
use flexgate_policies::control::{AppliedCap, PlanInForce, Snapshot};
use flexgate_policies::event::BookEntry;
use flexgate_policies::units::{TokensPerSec, WattsPerGpu};
use serde::Serialize;
use std::sync::Arc;

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct StatusView {
    /// Now, on the gateway's clock.
    pub at: DateTime<Utc>,
    /// Events ramping, active or recovering.
    pub active_events: Vec<String>,
    /// Meter ceiling in force.
    pub meter_ceiling_kw: Option<f64>,
    /// Phase of the binding event.
    pub phase: Option<String>,
    /// GPU-board budget of the plan in force (after trim and fixed load).
    pub gpu_budget_w: Option<f64>,
    /// Closed-loop trim subtracted from the budget.
    pub trim_w: f64,
    /// The last meter figure when it is the meter's own reading; `None` when the figure is a
    /// model's (see `meter_kw` and `meter_quality`): an estimate is never shown as measured.
    pub measured_meter_kw: Option<f64>,
    /// The last meter figure the gateway acted on, measured or not.
    pub meter_kw: Option<f64>,
    /// Where `meter_kw` comes from: `measured`, `model` (no meter source: the facility model's
    /// estimate), `stale` or `missing` (a meter source failed: the model's upper estimate).
    pub meter_quality: Option<flexgate_policies::meter::Quality>,
    /// Last measured fleet GPU-board power.
    pub measured_gpu_w: Option<f64>,
    /// Running jobs.
    pub jobs: usize,
    /// Jobs whose last cap was not confirmed.
    pub unconfirmed_jobs: usize,
    /// Jobs the gateway suspended.
    pub suspended_jobs: usize,
    /// Latest ledger hash (the checkpoint echoed in acks).
    pub log_checkpoint: String,
    /// How far the site could lower its meter power now, kW (every job at its floor; the
    /// facility model's upper meter estimate, so never an over-promise). `None` without
    /// telemetry.
    pub flex_available_kw: Option<f64>,
    /// Probe steps in flight outside events (`[probe]`): job, cap W per GPU, lease end.
    pub probes_in_flight: Vec<ProbeView>,
}

/// One probe step in flight in `GET /v1/status`.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeView {
    /// The job.
    pub job: String,
    /// Its cap, W per GPU.
    pub cap_w_per_gpu: f64,
    /// The step's lease end: the cap never holds past it.
    pub until: DateTime<Utc>,
}

impl StatusView {
    pub(crate) fn build(snapshot: &Snapshot, now: DateTime<Utc>, checkpoint: &str) -> Self {
        let ceiling = snapshot.book.effective_ceiling(now);
        Self {
            at: now,
            active_events: ceiling.as_ref().map(|c| c.events.clone()).unwrap_or_default(),
            meter_ceiling_kw: ceiling.as_ref().map(|c| c.ceiling_kw),
            phase: ceiling.as_ref().map(|c| c.phase.as_str().to_string()),
            gpu_budget_w: snapshot.plan.as_ref().map(|p| p.gpu_budget_w),
            trim_w: snapshot.trim_w,
            measured_meter_kw: snapshot
                .telemetry
                .as_ref()
                .filter(|t| t.meter_quality.is_measured())
                .map(|t| t.meter_kw.value()),
            meter_kw: snapshot.telemetry.as_ref().map(|t| t.meter_kw.value()),
            meter_quality: snapshot.telemetry.as_ref().map(|t| t.meter_quality),
            measured_gpu_w: snapshot.telemetry.as_ref().map(|t| t.gpu_board_power.value()),
            jobs: snapshot.jobs.len(),
            unconfirmed_jobs: snapshot.caps.values().filter(|c| !c.confirmed).count(),
            suspended_jobs: snapshot.suspended,
            log_checkpoint: checkpoint.to_string(),
            flex_available_kw: snapshot.flex_available_kw,
            probes_in_flight: snapshot
                .probes
                .iter()
                .map(|(job, p)| ProbeView {
                    job: job.to_string(),
                    cap_w_per_gpu: p.cap_w,
                    until: p.until,
                })
                .collect(),
        }
    }
}

/// One event in `GET /v1/events`.
#[derive(Debug, Clone, Serialize)]
pub struct EventView {
    /// Event id.
    pub id: String,
    /// Revision held.
    pub revision: u64,
    /// Lifecycle state: pending, ramping, active, recovering, completed, cancelled, opted_out.
    pub state: String,
    /// Test events are recorded and acknowledged, never acted on.
    pub test: bool,
    /// This event's own meter ceiling in force now (before overlap resolution), kW; `None` when
    /// it constrains nothing now (pending, over, opted out, or no target in this interval).
    pub ceiling_kw: Option<f64>,
    /// The tightest ceiling of any of its intervals, kW.
    pub lowest_ceiling_kw: Option<f64>,
    /// Window start (after any randomisation).
    pub start: DateTime<Utc>,
}

impl EventView {
    pub(crate) fn build(entry: &BookEntry, now: DateTime<Utc>) -> Self {
        Self {
            id: entry.event.id.clone(),
            revision: entry.revision(),
            state: entry.phase_at(now).as_str().to_string(),
            test: entry.event.test,
            ceiling_kw: entry.ceiling_at(now),
            lowest_ceiling_kw: entry.ceilings.iter().flatten().map(|c| c.ceiling_kw).reduce(f64::min),
            start: entry.effective_start,
        }
    }
}

/// One job in `GET /v1/jobs`.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// Job id.
    pub id: String,
    /// GPUs.
    pub gpus: u32,
    /// Nodes it runs on.
    pub nodes: Vec<String>,
    /// Cap in force (per GPU).
    pub cap_w: f64,
    /// Whether the backend confirmed the last cap sent.
    pub confirmed: bool,
    /// Generation of the last cap sent.
    pub generation: u64,
    /// Measured power.
    pub measured_power_w: f64,
    /// Throughput the job reports (mean of the top 10 % of its training samples in the agent's
    /// window); `null` when it reports nothing: unknown, never 0.
    pub measured_tokens_per_s: Option<f64>,
    /// `measured` when the job reports its throughput, `unknown` when it does not.
    pub throughput: &'static str,
    /// Uncapped power and throughput (P_max, T_max).
    pub uncapped_power_w: f64,
    /// The planner's uncapped throughput figure (T_max). With simulated jobs, the job's own;
    /// with node agents, the job's GPU count (the planner weighs agent jobs by GPUs), not a
    /// rate: see `measured_tokens_per_s` for what the job reports.
    pub uncapped_tokens_per_s: f64,
    /// What is known about its elasticity.
    pub elasticity: String,
    /// Where that knowledge comes from when the gateway learned it: the measured points
    /// (`pfi 1.84 from 2 measured points, 550–700 W`, `measured curve: 4 points, 250–700 W`) or
    /// the fleet's (`fleet prior: pfi 1.85±0.40 from 46 measured jobs`); `null` when it is what
    /// the cluster said (a tag, the predictor) or nothing.
    pub knowledge_evidence: Option<String>,
}

impl JobView {
    pub(crate) fn build(job: &JobState, applied: Option<&AppliedCap>, evidence: Option<&String>) -> Self {
        use flexgate_policies::alloc::Elasticity;
        let elasticity = match &job.spec.elasticity {
            Elasticity::Measured { .. } => "measured sweep".to_string(),
            Elasticity::Pfi { value, .. } => format!("PFI {value:.2}"),
            Elasticity::PredictedPfi { mean, sd, .. } => format!("predicted PFI {mean:.2} ± {sd:.2}"),
            Elasticity::Unknown => "unknown".to_string(),
        };
        Self {
            id: job.spec.id.to_string(),
            gpus: job.spec.gpus,
            nodes: job.nodes.clone(),
            cap_w: applied.map_or(job.applied_cap.value(), |a| a.cap.value()),
            confirmed: applied.is_none_or(|a| a.confirmed),
            generation: applied.map_or(job.generation, |a| a.generation),
            measured_power_w: job.measured_power.value(),
            measured_tokens_per_s: job.measured_tokens.map(TokensPerSec::value),
            throughput: if job.measured_tokens.is_some() {
                "measured"
            } else {
                "unknown"
            },
            uncapped_power_w: job.spec.uncapped_power.value(),
            uncapped_tokens_per_s: job.spec.uncapped_tokens.value(),
            elasticity,
            knowledge_evidence: evidence.cloned(),
        }
    }
}

/// One job's line in `GET /v1/plan`.
#[derive(Debug, Clone, Serialize)]
pub struct PlanEntryView {
    /// Job id.
    pub job: Arc<str>,
    /// Per-GPU cap sent (W per GPU).
    pub cap: WattsPerGpu,
    /// Expected draw under it, W.
    pub expected_power_w: f64,
    /// Expected throughput under it, tokens/s (the planner's estimate, not a measurement).
    pub expected_tokens_per_s: f64,
    /// The lowest power the planner would plan for the job, W.
    pub floor_w: f64,
    /// What set the floor (`cap_min`, `tier`).
    pub floor_kind: String,
    /// Why this cap.
    pub reason: String,
    /// What the planner knew of the job, hence the curve it planned on (`measured curve (4
    /// points)`, `predicted pfi 1.52±0.24`, `unknown`); `null` in plans recorded before notes.
    pub knowledge: Option<String>,
    /// The weight the objective gave it: GPUs × its `priority=` tag (1 without one).
    pub weight: Option<f64>,
    /// Its expected share of its own uncapped throughput under the cap (planner's estimate).
    pub expected_share: Option<f64>,
}

/// `GET /v1/plan`.
#[derive(Debug, Clone, Serialize)]
pub struct PlanView {
    /// The generation its caps were sent with.
    pub generation: u64,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// Policy.
    pub policy: String,
    /// Meter ceiling it serves.
    pub ceiling_kw: f64,
    /// The event whose ceiling binds.
    pub binding_event: String,
    /// GPU budget after trim.
    pub gpu_budget_w: f64,
    /// Closed-loop trim.
    pub trim_w: f64,
    /// Planned total draw.
    pub planned_power_w: f64,
    /// Shortfall the policy could not cut.
    pub shortfall_w: f64,
    /// Jobs capped through the unknown-elasticity fallback.
    pub fallbacks: Vec<String>,
    /// What the plan maximised: `progress` (GPU-weighted share of each job's own throughput)
    /// or `tokens` (Σ tokens/s).
    pub objective: Option<String>,
    /// What the plan expects to keep on both objectives, by the planner's curves (estimates,
    /// not measurements: measured throughput is in `/v1/jobs`).
    pub expected: Option<flexgate_policies::control::entry::ExpectedOutcome>,
    /// Per-job caps.
    pub entries: Vec<PlanEntryView>,
}

impl PlanView {
    pub(crate) fn build(p: &PlanInForce) -> Self {
        let a = &p.allocation;
        Self {
            generation: p.generation,
            at: p.at,
            policy: a.policy.clone(),
            ceiling_kw: p.ceiling_kw,
            binding_event: p.binding_event.clone(),
            gpu_budget_w: p.gpu_budget_w,
            trim_w: p.trim_w,
            planned_power_w: a.planned_power,
            shortfall_w: a.shortfall,
            fallbacks: a.fallbacks.iter().map(ToString::to_string).collect(),
            objective: a.objective.clone(),
            expected: a.expected.as_deref().copied(),
            entries: a
                .rows
                .iter()
                .enumerate()
                .map(|(i, r)| PlanEntryView {
                    job: r.0.clone(),
                    cap: WattsPerGpu(r.1),
                    expected_power_w: r.2,
                    expected_tokens_per_s: r.3,
                    floor_w: r.4,
                    floor_kind: r.5.clone(),
                    reason: r.6.clone(),
                    knowledge: a.notes.get(i).map(|n| n.2.clone()),
                    weight: a.notes.get(i).map(|n| f64::from(n.0) * n.1),
                    expected_share: a.notes.get(i).map(|n| n.3),
                })
                .collect(),
        }
    }
}
