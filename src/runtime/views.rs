//! What the HTTP API shows: plain serialisable views of the controller's published snapshot.
//!
//! Views are built from a [`Snapshot`] and the time of the read, never from the controller
//! itself, so a read never waits for a decision, a disk flush or a cluster call.
//!
//! Every figure is in base units and says so in its name (`_w` watts, `_w_per_gpu`, `_s`),
//! whatever unit the controller or the ledger keeps it in (the ledger records meter figures
//! in kW, as the grid's documents give them); shares are fractions 0–1. Each type derives its
//! schema for the generated OpenAPI document (`GET /openapi.json`).

use crate::cluster::JobState;
use chrono::{DateTime, Utc};
use flexgate_policies::control::cluster::Unconfirmed;
use flexgate_policies::control::{AppliedCap, PlanInForce, Snapshot};
use flexgate_policies::event::BookEntry;
use flexgate_policies::units::TokensPerSec;
use serde::Serialize;
use utoipa::ToSchema;

/// `GET /v1/status`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StatusView {
    /// Now, on the gateway's clock.
    pub at: DateTime<Utc>,
    /// The site this gateway serves (events for another site are refused).
    pub site: String,
    /// The site's IANA time zone (`[site] time_zone`), for local clock times.
    pub time_zone: String,
    /// Events ramping, active or recovering.
    pub active_events: Vec<String>,
    /// Meter ceiling in force, W; `null` when no event constrains the site.
    pub meter_ceiling_w: Option<f64>,
    /// Phase of the binding event (`ramping`, `active`, `recovering`).
    pub phase: Option<String>,
    /// GPU-board budget of the plan in force (after trim and fixed load), W.
    pub gpu_budget_w: Option<f64>,
    /// Closed-loop trim subtracted from the budget, W.
    pub trim_w: f64,
    /// The last meter figure when it is the meter's own reading, W; `null` when the figure is
    /// a model's (see `meter_w` and `meter_quality`): an estimate is never shown as measured.
    pub measured_meter_w: Option<f64>,
    /// The last meter figure the gateway acted on, measured or not, W.
    pub meter_w: Option<f64>,
    /// Where `meter_w` comes from: `measured`, `model` (no meter source: the facility model's
    /// estimate), `stale` or `missing` (a meter source failed: the model's upper estimate).
    #[schema(value_type = Option<String>, example = "measured")]
    pub meter_quality: Option<flexgate_policies::meter::Quality>,
    /// Last measured fleet GPU-board power, W.
    pub measured_gpu_w: Option<f64>,
    /// Running jobs.
    pub jobs: usize,
    /// Jobs whose last cap was not confirmed.
    pub unconfirmed_jobs: usize,
    /// Jobs the gateway suspended.
    pub suspended_jobs: usize,
    /// Latest ledger hash (the checkpoint echoed in acks).
    pub log_checkpoint: String,
    /// How far the site could lower its meter power now, W (every job at its floor; the
    /// facility model's lower bound of the reduction, so never an over-promise). While an
    /// event's caps are in force (`gpu_budget_w` set), how much *more* it could lower it from
    /// the caps in force: the deepest level of `GET /v1/flexibility` (`from: current_caps`).
    /// `null` without telemetry.
    pub flex_available_w: Option<f64>,
    /// Probe steps in flight outside events (`[probe]`): job, cap W per GPU, lease end.
    pub probes_in_flight: Vec<ProbeView>,
    /// High availability: `role` is `single` (no `[ha]`: this gateway runs alone), `leader`
    /// or `standby`; on a replica, also the term (`epoch`), who leads, and how far behind each
    /// replica is.
    pub ha: ReplicationView,
    /// The same as `ha` on a replica, absent on a single gateway (the field's first name,
    /// kept for the clients that read it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replication: Option<ReplicationView>,
    /// The meter figures as the controller keeps them (kW, exactly), for the grid's
    /// documents, which speak kW: not part of the API's answer.
    #[serde(skip)]
    in_kw: MeterKw,
}

/// [`StatusView`]'s meter figures in kW, unconverted.
#[derive(Debug, Clone, Copy, Default)]
struct MeterKw {
    measured_meter: Option<f64>,
    meter: Option<f64>,
    meter_ceiling: Option<f64>,
    flex_available: Option<f64>,
}

/// A replica's view of its site's replicas (`replication` in `GET /v1/status`, and
/// `flexgate ha status`).
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ReplicationView {
    /// This replica's name (empty on a single gateway).
    pub replica: String,
    /// `single`, `leader` or `standby`.
    pub role: String,
    /// The term this replica leads (leader), or the leader's (standby, when known).
    pub epoch: Option<u64>,
    /// The leading replica, when known.
    pub leader: Option<String>,
    /// Its API URL, where writes go.
    pub leader_url: Option<String>,
    /// Why nobody is known to lead (an election under way, etcd unreachable or without quorum).
    pub reason: Option<String>,
    /// The last record committed in etcd (the chain's head), when etcd answered.
    pub committed_seq: Option<u64>,
    /// Every registered replica with the record it has taken in.
    pub replicas: Vec<ReplicaView>,
    /// When this was last read from etcd.
    pub updated_at: Option<DateTime<Utc>>,
}

impl ReplicationView {
    /// A gateway without `[ha]`.
    #[must_use]
    pub fn single() -> Self {
        Self {
            replica: String::new(),
            role: "single".into(),
            epoch: None,
            leader: None,
            leader_url: None,
            reason: None,
            committed_seq: None,
            replicas: Vec::new(),
            updated_at: None,
        }
    }
}

/// One replica in [`ReplicationView`].
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ReplicaView {
    /// Its name.
    pub name: String,
    /// Its API URL.
    pub url: Option<String>,
    /// The last record in its ledger.
    pub applied_seq: u64,
    /// Records committed that it has not taken in yet.
    pub lag_records: u64,
}

/// One probe step in flight in `GET /v1/status`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProbeView {
    /// The job.
    pub job: String,
    /// Its cap, W per GPU.
    pub cap_w_per_gpu: f64,
    /// The step's lease end: the cap never holds past it.
    pub until: DateTime<Utc>,
}

impl StatusView {
    pub(crate) fn build(
        snapshot: &Snapshot,
        now: DateTime<Utc>,
        checkpoint: &str,
        site: &str,
        time_zone: &str,
    ) -> Self {
        let ceiling = snapshot.book.effective_ceiling(now);
        let in_kw = MeterKw {
            measured_meter: snapshot
                .telemetry
                .as_ref()
                .filter(|t| t.meter_quality.is_measured())
                .map(|t| t.meter_kw.value()),
            meter: snapshot.telemetry.as_ref().map(|t| t.meter_kw.value()),
            meter_ceiling: ceiling.as_ref().map(|c| c.ceiling_kw),
            flex_available: snapshot.flex_available_kw,
        };
        Self {
            at: now,
            site: site.to_string(),
            time_zone: time_zone.to_string(),
            in_kw,
            active_events: ceiling.as_ref().map(|c| c.events.clone()).unwrap_or_default(),
            meter_ceiling_w: ceiling.as_ref().map(|c| kw_to_w(c.ceiling_kw)),
            phase: ceiling.as_ref().map(|c| c.phase.as_str().to_string()),
            gpu_budget_w: snapshot.plan.as_ref().map(|p| p.gpu_budget_w),
            trim_w: snapshot.trim_w,
            measured_meter_w: snapshot
                .telemetry
                .as_ref()
                .filter(|t| t.meter_quality.is_measured())
                .map(|t| kw_to_w(t.meter_kw.value())),
            meter_w: snapshot.telemetry.as_ref().map(|t| kw_to_w(t.meter_kw.value())),
            meter_quality: snapshot.telemetry.as_ref().map(|t| t.meter_quality),
            measured_gpu_w: snapshot.telemetry.as_ref().map(|t| t.gpu_board_power.value()),
            jobs: snapshot.jobs.len(),
            unconfirmed_jobs: snapshot.caps.values().filter(|c| !c.confirmed).count(),
            suspended_jobs: snapshot.suspended,
            log_checkpoint: checkpoint.to_string(),
            flex_available_w: snapshot.flex_available_kw.map(kw_to_w),
            probes_in_flight: snapshot
                .probes
                .iter()
                .map(|(job, p)| ProbeView {
                    job: job.to_string(),
                    cap_w_per_gpu: p.cap_w,
                    until: p.until,
                })
                .collect(),
            ha: ReplicationView::single(),
            replication: None,
        }
    }
}

/// The same figures in kW, for the grid's documents (`dr.status/1`, OpenADR reports), which
/// speak kW.
impl StatusView {
    /// [`StatusView::measured_meter_w`] in kW.
    #[must_use]
    pub fn measured_meter_kw(&self) -> Option<f64> {
        self.in_kw.measured_meter
    }

    /// [`StatusView::meter_w`] in kW.
    #[must_use]
    pub fn meter_kw(&self) -> Option<f64> {
        self.in_kw.meter
    }

    /// [`StatusView::meter_ceiling_w`] in kW.
    #[must_use]
    pub fn meter_ceiling_kw(&self) -> Option<f64> {
        self.in_kw.meter_ceiling
    }

    /// [`StatusView::flex_available_w`] in kW.
    #[must_use]
    pub fn flex_available_kw(&self) -> Option<f64> {
        self.in_kw.flex_available
    }
}

/// kW (the controller's and the grid's unit for the meter) to the API's watts.
fn kw_to_w(kw: f64) -> f64 {
    kw * 1000.0
}

/// One event in `GET /v1/events`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventView {
    /// Event id.
    pub id: String,
    /// Revision held.
    pub revision: u64,
    /// Lifecycle state: pending, ramping, active, recovering, completed, cancelled, opted_out.
    pub state: String,
    /// Test events are recorded and acknowledged, never acted on.
    pub test: bool,
    /// This event's own meter ceiling in force now (before overlap resolution), W; `null`
    /// when it constrains nothing now (pending, over, opted out, or no target in this interval).
    pub ceiling_w: Option<f64>,
    /// The tightest ceiling of any of its intervals, W.
    pub lowest_ceiling_w: Option<f64>,
    /// Window start (after any randomisation).
    pub start: DateTime<Utc>,
    /// The meter reading before the event, W: where the ramp starts and the recovery returns
    /// (the gateway's meter-before baseline; the audit adds the program's CBL).
    pub pre_event_meter_w: f64,
    /// When each phase begins, by the schedule (the ramp, the hold, the recovery, the end).
    pub phases: Vec<PhaseAt>,
}

/// A phase and when it begins.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PhaseAt {
    /// `ramping`, `active`, `recovering`, `completed`, `cancelled`, `opted_out`.
    pub phase: String,
    /// When.
    pub at: DateTime<Utc>,
}

impl EventView {
    pub(crate) fn build(entry: &BookEntry, now: DateTime<Utc>) -> Self {
        Self {
            id: entry.event.id.to_string(),
            revision: entry.revision(),
            state: entry.phase_at(now).as_str().to_string(),
            test: entry.event.test,
            ceiling_w: entry.ceiling_at(now).map(kw_to_w),
            lowest_ceiling_w: entry
                .ceilings
                .iter()
                .flatten()
                .map(|c| c.ceiling_kw)
                .reduce(f64::min)
                .map(kw_to_w),
            start: entry.effective_start,
            pre_event_meter_w: kw_to_w(entry.pre_event_meter_kw),
            phases: entry
                .phase_points()
                .into_iter()
                .map(|(at, phase)| PhaseAt {
                    phase: phase.as_str().to_string(),
                    at,
                })
                .collect(),
        }
    }
}

/// One job in `GET /v1/jobs`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct JobView {
    /// Job id.
    pub id: String,
    /// GPUs.
    pub gpus: u32,
    /// Nodes it runs on.
    pub nodes: Vec<String>,
    /// Cap in force, W per GPU.
    pub cap_w_per_gpu: f64,
    /// Whether the backend confirmed the last cap sent.
    pub confirmed: bool,
    /// Why the cap is not confirmed, when it is not and the cause is known: `unreachable`,
    /// `refused`, `not_applied` (the driver accepted the set, the limit read back is another),
    /// `raised_out_of_band` (found raised after it was set), `unreliable` (the agent keeps
    /// re-applying it), `no_permission`, `gpu_lost`, `unresponsive`, `not_supported`,
    /// `driver_error`, `not_measured`. The job then counts at its measured draw (`unreliable`:
    /// at its uncapped draw) and the shortfall is planned on the other jobs.
    #[schema(value_type = Option<String>, example = "not_applied")]
    pub unconfirmed: Option<&'static str>,
    /// The node agents have reported the cap on this job's GPUs as undone again and again
    /// (re-applied 3 times within 15 minutes).
    pub cap_unreliable: bool,
    /// Times the node agents re-applied a cap on this job's GPUs after its limit moved, since
    /// they started.
    pub cap_reapplied: u64,
    /// When the job started, as the scheduler says (`null`: not said).
    pub started_at: Option<DateTime<Utc>>,
    /// Its time limit as the scheduler says, s (`null`: unlimited or not said); the forecast
    /// counts it as ended by then at the latest.
    pub time_limit_s: Option<f64>,
    /// Generation of the last cap sent.
    pub generation: u64,
    /// Measured power.
    pub measured_power_w: f64,
    /// Throughput the job reports (mean of the top 10 % of its training samples in the agent's
    /// window); `null` when it reports nothing: unknown, never 0.
    pub measured_tokens_per_s: Option<f64>,
    /// `measured` when the job reports its throughput, `unknown` when it does not.
    #[schema(value_type = String, example = "measured")]
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
    /// (`partial curve: 2 measured points, 550–700 W, pfi 1.84`, `measured curve: 4 points, 250–700 W`) or
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
            nodes: job.nodes.iter().map(ToString::to_string).collect(),
            cap_w_per_gpu: applied.map_or(job.applied_cap.value(), |a| a.cap.value()),
            confirmed: applied.is_none_or(|a| a.confirmed),
            unconfirmed: applied
                .filter(|a| !a.confirmed)
                .and_then(|a| a.unconfirmed)
                .map(Unconfirmed::as_str),
            cap_unreliable: job.cap_unreliable,
            cap_reapplied: job.cap_reapplied,
            started_at: job.started_at,
            time_limit_s: job.time_limit_s,
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
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlanEntryView {
    /// Job id.
    pub job: String,
    /// Cap sent, W per GPU.
    pub cap_w_per_gpu: f64,
    /// Expected draw under it, W (the planner's estimate).
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

/// What a plan expects to keep, on both objectives.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct ExpectedView {
    /// Σ expected tokens/s ÷ Σ uncapped tokens/s, 0–1.
    pub tokens_kept_share: f64,
    /// GPU- and priority-weighted mean of each job's expected share of its own uncapped
    /// throughput, 0–1.
    pub progress_kept_share: f64,
    /// Always `planner_estimate`: read off the planner's curves; what the jobs measured is in
    /// `GET /v1/jobs` (`measured_tokens_per_s`) and the audit.
    #[schema(value_type = String, example = "planner_estimate")]
    pub source: &'static str,
}

/// What a plan guarantees against the equal cut of the same budget (the hedge's contract): on
/// every curve its plausible set holds (what was measured, predicted or assumed of each job), it
/// keeps at least the equal cut's value plus `worst_gain_vs_equal` of it, on `objective`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct GuaranteeView {
    /// The objective the plan was judged on (`progress` or `tokens`).
    pub objective: String,
    /// The plan's worst gain over the equal cut on its plausible set, as a share of the equal
    /// cut's value (negative: the most it may lose, e.g. -0.004 = 0.4 %).
    pub worst_gain_vs_equal: f64,
    /// The most it was allowed to lose, a share (`[gateway] hedge_tolerance`).
    pub tolerance: f64,
    /// Of `worst_gain_vs_equal`, what the measured curves' noise takes, a share (two standard
    /// deviations of the plan's gain over the errors of what was measured).
    pub noise: f64,
    /// How much of the way from the equal cut to the plan the estimates alone would make was
    /// kept, 0–1; with a `blend`, of the way to the best mixture of plans that meets the bound.
    pub kept: f64,
    /// How much of the worst cases' curves were weighed into the estimates for the plans that
    /// mixture mixes, 0–1 (0: none; the planner mixes under `tokens` when it beats the plain
    /// shrink).
    pub blend: f64,
    /// The worst case, in words.
    pub worst_case: String,
    /// Whether the bound was measured on every job (false: it is the least a correction after a
    /// sampled search allows).
    pub measured: bool,
}

/// `GET /v1/plan`: the plan in force, or an empty plan (`in_force: false`, no entries) when no
/// event constrains the site.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PlanView {
    /// Whether a plan is in force.
    pub in_force: bool,
    /// The generation its caps were sent with.
    pub generation: Option<u64>,
    /// When it was made.
    pub at: Option<DateTime<Utc>>,
    /// Policy.
    pub policy: Option<String>,
    /// Meter ceiling it serves, W.
    pub ceiling_w: Option<f64>,
    /// The event whose ceiling binds.
    pub binding_event: Option<String>,
    /// GPU budget after trim, W.
    pub gpu_budget_w: Option<f64>,
    /// Closed-loop trim, W.
    pub trim_w: f64,
    /// Planned total draw, W (the planner's estimate).
    pub planned_power_w: Option<f64>,
    /// Shortfall the policy could not cut, W.
    pub shortfall_w: f64,
    /// Jobs capped through the unknown-elasticity fallback.
    pub fallbacks: Vec<String>,
    /// What the plan maximised: `progress` (GPU-weighted share of each job's own throughput)
    /// or `tokens` (Σ tokens/s).
    pub objective: Option<String>,
    /// What the plan expects to keep on both objectives, by the planner's curves.
    pub expected: Option<ExpectedView>,
    /// What the plan guarantees against the equal cut (absent where no hedge judged it: a
    /// proportional rule other than the equal cut, `hedge = false`, a shortfall, or a plan
    /// recorded before the gateway stated it).
    pub guarantee: Option<GuaranteeView>,
    /// Per-job caps.
    pub entries: Vec<PlanEntryView>,
}

impl PlanView {
    /// No plan in force.
    pub(crate) fn none() -> Self {
        Self {
            in_force: false,
            generation: None,
            at: None,
            policy: None,
            ceiling_w: None,
            binding_event: None,
            gpu_budget_w: None,
            trim_w: 0.0,
            planned_power_w: None,
            shortfall_w: 0.0,
            fallbacks: Vec::new(),
            objective: None,
            expected: None,
            guarantee: None,
            entries: Vec::new(),
        }
    }

    pub(crate) fn build(p: &PlanInForce) -> Self {
        let a = &p.allocation;
        Self {
            in_force: true,
            generation: Some(p.generation),
            at: Some(p.at),
            policy: Some(a.policy.as_str().to_string()),
            ceiling_w: Some(kw_to_w(p.ceiling_kw)),
            binding_event: Some(p.binding_event.to_string()),
            gpu_budget_w: Some(p.gpu_budget_w),
            trim_w: p.trim_w,
            planned_power_w: Some(a.planned_power),
            shortfall_w: a.shortfall,
            fallbacks: a.fallbacks.iter().map(ToString::to_string).collect(),
            objective: a.objective.map(|o| o.as_str().to_string()),
            expected: a.expected.as_deref().map(|e| ExpectedView {
                tokens_kept_share: e.tokens_kept_share,
                progress_kept_share: e.progress_kept_share,
                source: "planner_estimate",
            }),
            guarantee: a.guarantee.as_deref().map(|g| GuaranteeView {
                objective: g.objective.as_str().to_string(),
                worst_gain_vs_equal: g.worst_gain_vs_equal,
                tolerance: g.tolerance,
                noise: g.noise,
                kept: g.kept,
                blend: g.blend,
                worst_case: g.worst_case.clone(),
                measured: g.measured,
            }),
            entries: a
                .rows
                .iter()
                .enumerate()
                .map(|(i, r)| PlanEntryView {
                    job: r.job().to_string(),
                    cap_w_per_gpu: r.cap_w(),
                    expected_power_w: r.expected_power_w(),
                    expected_tokens_per_s: r.expected_tokens_per_s(),
                    floor_w: r.floor_w(),
                    floor_kind: r.floor_kind().as_str().to_string(),
                    reason: r.reason().as_str().to_string(),
                    knowledge: a.notes.get(i).map(|n| n.2.clone()),
                    weight: a.notes.get(i).map(|n| f64::from(n.0) * n.1),
                    expected_share: a.notes.get(i).map(|n| n.3),
                })
                .collect(),
        }
    }
}

/// `GET /v1/flexibility`: the site's flexibility curve now.
///
/// Outside events (`from: uncapped`) each level is shed from the jobs' uncapped draw. While an
/// event's caps are in force (`from: current_caps`) each level is how much **more** the site
/// can shed from where it stands, the caps in force: what a utility asking for a deeper cut
/// needs; its costs are what the deeper cut adds to what the caps already cost
/// (`from_value_lost`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FlexibilityView {
    /// When it was computed (the telemetry it is based on).
    pub at: DateTime<Utc>,
    /// The objective its costs are in (`progress` or `tokens`).
    pub objective: String,
    /// Always `planner_estimate`: the costs are the planner's curves, not measurements.
    #[schema(value_type = String, example = "planner_estimate")]
    pub source: &'static str,
    /// Where the levels are measured from: `uncapped` (no event's caps in force: the jobs'
    /// uncapped draw) or `current_caps` (an event's caps in force: each level is shed beyond
    /// them).
    #[schema(value_type = String, example = "current_caps")]
    pub from: &'static str,
    /// The plannable jobs' uncapped draw, W.
    pub uncapped_power_w: f64,
    /// The plannable jobs' value uncapped under the objective (Σ tokens/s, or Σ GPUs ×
    /// priority): what each level's `value_lost` and `value_lost_range` are a share of.
    pub uncapped_value: f64,
    /// The plannable jobs' draw the levels start from, W: `uncapped_power_w` from uncapped;
    /// from the caps, their draw under the caps in force (cap × GPUs, the planner's figure).
    pub from_power_w: f64,
    /// What the starting point already costs, in the objective's units: 0 from uncapped; from
    /// the caps, the caps in force's expected loss. Each level's `value_lost` comes on top.
    pub from_value_lost: f64,
    /// From no shed (at the starting point) to every plannable job at its floor (21 levels,
    /// 5 % steps of the room there is; every level 0 when no job stands above its floor).
    pub points: Vec<FlexibilityPointView>,
}

/// One shed level of the flexibility curve, from the curve's starting point (`from`).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FlexibilityPointView {
    /// GPU-board power shed, W.
    pub gpu_shed_w: f64,
    /// The meter reduction it gives at least (facility model, lower bound, cooling settled), W.
    pub meter_shed_w: f64,
    /// The nominal meter reduction, W.
    pub meter_shed_w_nominal: f64,
    /// Expected GPU-weighted progress lost, 0–1 (0 = none, 1 = every job stopped).
    pub progress_lost: f64,
    /// Expected tokens/s lost, summed over the jobs.
    pub tokens_lost_per_s: f64,
    /// Expected loss in the objective's units (tokens/s, or GPUs × priority × share). Under a
    /// hedging planner a level can cost less than a shallower one (each level's plan is guarded
    /// against the equal cut of its own depth, which loses more the deeper it is).
    pub value_lost: f64,
    /// `[low, high]` of the objective's loss over the plausible curve shapes, when the
    /// planner hedges (`null` from the caps in force).
    pub value_lost_range: Option<[f64; 2]>,
    /// Jobs the plan would cap (from the caps in force: whose caps it would lower further).
    pub jobs_capped: usize,
    /// The QoS tiers (largest slowdowns, fractions) of the capped jobs, ascending.
    pub tiers_touched: Vec<f64>,
}

impl FlexibilityView {
    pub(crate) fn build(curve: &flexgate_policies::control::flexibility::SiteFlexibility) -> Self {
        Self {
            at: curve.at,
            objective: curve.objective.as_str().to_string(),
            source: curve.source,
            from: curve.from.as_str(),
            uncapped_power_w: curve.uncapped_power_w,
            uncapped_value: curve.uncapped_value,
            from_power_w: curve.from_power_w,
            from_value_lost: curve.from_value_lost,
            points: curve
                .points
                .iter()
                .map(|p| FlexibilityPointView {
                    gpu_shed_w: p.gpu_shed_w,
                    meter_shed_w: kw_to_w(p.meter_shed_kw),
                    meter_shed_w_nominal: kw_to_w(p.meter_shed_kw_nominal),
                    progress_lost: p.progress_lost,
                    tokens_lost_per_s: p.tokens_lost_per_s,
                    value_lost: p.value_lost,
                    value_lost_range: p.value_lost_range.map(|(lo, hi)| [lo, hi]),
                    jobs_capped: p.jobs_capped,
                    tiers_touched: p.tiers_touched.clone(),
                })
                .collect(),
        }
    }
}

/// `GET /v1/forecast`: what the site expects it can shed in the next 48 hours.
///
/// Percentiles, as statisticians write them: `p10` is the 10th percentile (the figure the site
/// can shed or more nine times in ten: what the energy trade calls the "P90" or 90 %-exceedance
/// value), `p50` the median, `p90` the 90th percentile. Declare at `p10` for 90 % confidence.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ForecastView {
    /// When it was made.
    pub generated_at: DateTime<Utc>,
    /// The cost ceiling in use: `available_w` is the most the site can shed at the meter while
    /// losing at most this share of the objective's value (e.g. 0.1: 10 % of GPU-weighted
    /// progress).
    pub cost_ceiling: f64,
    /// The objective the ceiling is a share of (`progress` or `tokens`).
    pub objective: String,
    /// What it stands on, and why it is as wide as it is, in words.
    pub basis: Vec<String>,
    /// Quarter-hours from now, 192 of them.
    pub steps: Vec<ForecastStepView>,
}

/// One step of the forecast.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ForecastStepView {
    /// Its start.
    pub start: DateTime<Utc>,
    /// Its end.
    pub end: DateTime<Utc>,
    /// The most the site can shed at the meter within the cost ceiling, W (10th, 50th, 90th
    /// percentiles).
    pub available_w: BandView,
    /// Known jobs (running or queued now) expected to run, summed as probabilities: a job past
    /// its time limit counts 0.
    pub jobs_expected: f64,
    /// GPUs expected busy.
    pub gpus_expected: f64,
    /// Of those, GPUs held by jobs not known yet.
    pub gpus_unknown: f64,
    /// The step's expected curve (21 levels): meter watts shed against the share of the
    /// objective's value lost.
    pub levels: Vec<ForecastLevelView>,
}

/// A distribution's 10th, 50th and 90th percentiles.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct BandView {
    /// 10th percentile (exceeded nine times in ten: the trade's "P90").
    pub p10: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
}

/// One level of a step's expected curve.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
pub struct ForecastLevelView {
    /// Meter watts shed (expected).
    pub shed_w: f64,
    /// The share of the objective's value it costs (expected), 0–1.
    pub cost: f64,
}

impl ForecastView {
    pub(crate) fn build(f: &flexgate_policies::forecast::Forecast, objective: &str) -> Self {
        Self {
            generated_at: f.generated_at,
            cost_ceiling: f.cost_ceiling,
            objective: objective.to_string(),
            basis: f.basis.clone(),
            steps: f
                .steps
                .iter()
                .map(|s| ForecastStepView {
                    start: s.start,
                    end: s.end,
                    available_w: BandView {
                        p10: s.available_w.p10,
                        p50: s.available_w.p50,
                        p90: s.available_w.p90,
                    },
                    jobs_expected: s.jobs_expected,
                    gpus_expected: s.gpus_expected,
                    gpus_unknown: s.gpus_unknown,
                    levels: s
                        .levels
                        .iter()
                        .map(|l| ForecastLevelView {
                            shed_w: l.shed_w,
                            cost: l.cost,
                        })
                        .collect(),
                })
                .collect(),
        }
    }
}

/// `GET /v1/events/{id}`: the summary, and the event as the event book holds it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EventDetailView {
    /// The same summary as in `GET /v1/events`.
    pub summary: EventView,
    /// The book's record of the event (its revisions, intervals and ceilings), in the
    /// ledger's form: ceilings in kW as the grid's documents give them.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

/// One point of the meter's recent history.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MeterPoint {
    /// When it was read.
    pub at: chrono::DateTime<chrono::Utc>,
    /// The meter figure, W.
    pub meter_w: f64,
    /// `measured` (the meter's own reading), or the facility model's figure standing in:
    /// `model` (no meter source configured), `stale` (a feed's last reading too old),
    /// `missing` (a feed with no usable reading).
    pub quality: &'static str,
    /// The ceiling in force then, W (`null`: none).
    pub ceiling_w: Option<f64>,
}

/// `GET /v1/meter/history`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct MeterHistoryView {
    /// The site's time zone, for local clock labels.
    pub time_zone: String,
    /// Oldest first, up to six hours.
    pub points: Vec<MeterPoint>,
}
