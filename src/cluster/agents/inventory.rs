//! Inventory: every agent's GPUs, jobs mapped onto them (by Slurm, or one job per node), and
//! each job's state for the planner (cap range, uncapped draw, elasticity, applied cap).
//!
//! Separate from dispatch and telemetry because it is where what agents cannot know is decided
//! conservatively: unanswered nodes keep their jobs with unknown GPUs, unknown draw counts at
//! the GPUs' maximum, and elasticity is a tag, a prediction or unknown.

use super::client::Verb;
use super::{AgentsBackend, Known, MappedJob, all_failed};
use crate::cluster::{BackendError, JobState};
use flexgate_agent::api::{GpuStatus, gpus_path};
use flexgate_policies::alloc::{CapRange, Elasticity, JobSpec};
use flexgate_policies::control::evidence::cap_moved;
use flexgate_policies::ids::{JobId, NodeId};
use flexgate_policies::pfi::CapGrid;
use flexgate_policies::units::{Fraction, TokensPerSec, Watts, WattsPerGpu};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

impl AgentsBackend {
    /// [`ClusterBackend::inventory`](crate::cluster::ClusterBackend::inventory): polls the
    /// agents, maps the jobs, releases the leases of jobs that ended and builds each job's state.
    pub(super) async fn read_inventory(&self) -> Result<Vec<JobState>, BackendError> {
        let (gpus, none_answered) = self.poll_gpus().await;
        if let Some(why) = none_answered {
            return Err(BackendError::Unreachable(why));
        }
        let jobs = self.map_jobs(&gpus).await?;
        let running: std::collections::HashSet<&str> = jobs.iter().map(|j| &*j.id).collect();
        let ended: Vec<(JobId, usize)> = {
            let mut known = self.known();
            let ended: Vec<(JobId, usize)> = known
                .leases
                .keys()
                .filter(|(job, _)| !running.contains(&**job))
                .cloned()
                .collect();
            for key in &ended {
                known.leases.remove(key);
                known.generations.remove(&key.0);
                known.uncapped_seen.remove(&key.0);
            }
            ended
        };
        // A job that ended mid-event gives its GPUs back at once (the Slurm epilog does the
        // same on the node; whichever comes first, the other is a no-op).
        self.release_leases(&ended).await;
        let mut known = self.known();
        // Forget what was learned about jobs that are gone (ids are not reused meaningfully).
        known.uncapped_seen.retain(|id, _| running.contains(&**id));
        known.uncapped_runs.retain(|id, _| running.contains(&**id));
        known.suspended.retain(|id| running.contains(&**id));
        known.throughput.retain(|id, _| running.contains(&**id));
        known.cap_changed.retain(|id, _| running.contains(&**id));
        known.cap_seen.retain(|id, _| running.contains(&**id));
        let capped_jobs = known.capped_jobs();
        let states = jobs
            .iter()
            .map(|j| self.job_state(j, &gpus, &mut known, &capped_jobs))
            .collect();
        known.job_index = jobs.iter().enumerate().map(|(i, j)| (j.id.clone(), i)).collect();
        known.jobs = jobs.into();
        known.store_gpus(gpus);
        Ok(states)
    }

    /// Reads every agent's GPUs at once; a node that does not answer keeps `None`.
    /// Also returns, when no agent answered, why (the first few errors), so that a refused
    /// token reads as such instead of as a network problem.
    async fn poll_gpus(&self) -> (Vec<Option<Vec<GpuStatus>>>, Option<String>) {
        let deadline = Instant::now() + self.caller.policy.timeout;
        let path = gpus_path();
        let calls = (0..self.agents.len()).map(|i| {
            let path = path.clone();
            async move {
                self.agent_call::<(), Vec<GpuStatus>>(i, Verb::Get, &path, None, deadline)
                    .await
                    .map_err(|e| {
                        tracing::warn!("agent GPU poll: {e}");
                        e.to_string()
                    })
            }
        });
        let results = futures_util::future::join_all(calls).await;
        self.known().answered = results.iter().map(Result::is_ok).collect();
        let none_answered = all_failed("no agent answered", &results);
        (results.into_iter().map(Result::ok).collect(), none_answered)
    }

    /// Jobs → GPUs, from Slurm or one job per node.
    async fn map_jobs(&self, gpus: &[Option<Vec<GpuStatus>>]) -> Result<Vec<MappedJob>, BackendError> {
        let node_index: HashMap<&str, usize> = self
            .agents
            .iter()
            .enumerate()
            .map(|(i, a)| (a.node.as_str(), i))
            .collect();
        let Some((inventory, gres)) = &self.slurm else {
            let previous = self.known().jobs.clone();
            return Ok(gpus
                .iter()
                .enumerate()
                .filter_map(|(i, g)| {
                    let id = format!("node:{}", self.agents[i].node);
                    match g {
                        Some(g) => Some(MappedJob {
                            id: JobId::from(id),
                            slurm_id: None,
                            suspendable: false,
                            gpus: g.iter().map(|s| (i, s.uuid.clone())).collect(),
                            pfi: None,
                            max_slowdown: None,
                            priority: 1.0,
                            signature: None,
                            tier: None,
                            started_at: None,
                            time_limit_s: None,
                        }),
                        // A node that did not answer keeps its job, with its GPUs unknown, as
                        // under Slurm: its draw counts at the maximum and its caps stay wanted,
                        // instead of the job vanishing from the plan while its GPUs still draw.
                        None => previous.iter().find(|j| *j.id == *id).cloned(),
                    }
                })
                .collect());
        };
        let snapshot = inventory
            .running_jobs()
            .await
            .map_err(|e| BackendError::Unreachable(format!("Slurm: {e}")))?;
        if let Some(why) = &snapshot.rest_error {
            tracing::warn!("slurmrestd failed, squeue answered: {why}");
        }
        let mut jobs = Vec::new();
        for job in &snapshot.jobs {
            let (job_gpus, errors) = gres.job_gpus(job);
            for e in errors {
                tracing::warn!(job = %job.id, "GPU mapping: {e}");
            }
            let mut mapped = Vec::new();
            for g in job_gpus {
                let Some(&node) = node_index.get(g.node.as_str()) else {
                    tracing::warn!(job = %job.id, node = %g.node, "job runs on a node without a configured agent");
                    continue;
                };
                // A node that did not answer keeps its GPUs unknown: the job is still listed
                // (with what is known) so that the planner counts it conservatively.
                let uuid = gpus[node]
                    .as_ref()
                    .and_then(|list| list.iter().find(|s| s.minor == g.minor))
                    .map_or_else(|| format!("{}:minor{}", g.node, g.minor), |s| s.uuid.clone());
                mapped.push((node, uuid));
            }
            if mapped.is_empty() {
                continue;
            }
            let profile = signature(&job.name, mapped.len(), job.flex.profile.as_deref());
            jobs.push(MappedJob {
                id: JobId::from(job.id.to_string()),
                slurm_id: Some(job.id),
                suspendable: inventory.may_suspend(job),
                gpus: mapped,
                pfi: job.flex.pfi.filter(|p| p.is_finite() && *p > 0.0),
                max_slowdown: job.flex.max_slowdown,
                priority: job.flex.priority.unwrap_or(1.0),
                signature: Some(profile),
                tier: job.flex.tier.as_deref().map(Arc::from),
                started_at: job.start_time,
                time_limit_s: job.time_limit_minutes.map(|m| m as f64 * 60.0),
            });
        }
        // MIG: jobs on instances of one GPU share its one power limit; plan them as one unit.
        Ok(super::shared::merge_shared_gpus(jobs))
    }

    fn job_state(
        &self,
        job: &MappedJob,
        gpus: &[Option<Vec<GpuStatus>>],
        known: &mut Known,
        capped_jobs: &std::collections::HashSet<JobId>,
    ) -> JobState {
        let statuses: Vec<Option<&GpuStatus>> = job
            .gpus
            .iter()
            .map(|(node, uuid)| gpus[*node].as_ref().and_then(|l| l.iter().find(|s| &s.uuid == uuid)))
            .collect();
        let (mut lo, mut hi) = (0.0f64, f64::INFINITY);
        let mut measured = 0.0;
        let mut applied = 0.0f64;
        for s in statuses.iter().flatten() {
            lo = lo.max(s.min_w);
            hi = hi.min(s.max_w);
            // Unknown draw counts at the GPU's maximum: never assume less than might be drawn.
            measured += s.power_w.unwrap_or(s.max_w);
            applied = applied.max(s.enforced_w.or(s.limit_w).unwrap_or(s.max_w));
        }
        let unknown = statuses.iter().filter(|s| s.is_none()).count();
        if !hi.is_finite() || lo <= 0.0 || lo > hi {
            (lo, hi) = (200.0, 700.0);
        }
        measured += unknown as f64 * hi;
        if applied <= 0.0 {
            applied = hi;
        }
        let n = job.gpus.len();
        // Capped by this gateway, or found capped: by the previous term's leader of a replicated
        // site, or by this gateway before it restarted in the middle of an event. Its draw now
        // is not its uncapped draw.
        let capped = capped_jobs.contains(&job.id) || applied < hi - 0.5;
        let seen = known.uncapped_seen.entry(job.id.clone()).or_insert(0.0);
        if !capped {
            *seen = seen.max(measured);
        }
        // A job only ever seen capped: its uncapped draw is unknown, so it counts at its GPUs'
        // maximum (never less than releasing its cap might draw). Taken as its capped draw, a new
        // leader planned the job as if its cap cost nothing and released it mid-event.
        let uncapped = if *seen > 0.0 {
            seen.max(n as f64 * lo)
        } else {
            n as f64 * hi
        }
        .max(1.0);
        let predicted = self.predictor.as_ref().and_then(|(model, min_readings)| {
            known
                .uncapped_runs
                .get(&job.id)
                .and_then(|run| run.predict(model, *min_readings))
                .filter(|p| p.mean.is_finite() && p.mean > 0.0 && p.sd.is_finite())
        });
        let elasticity = match (job.pfi, predicted) {
            (Some(value), _) => Elasticity::Pfi {
                value,
                grid: CapGrid::fine_h200(),
            },
            (None, Some(p)) => Elasticity::PredictedPfi {
                mean: p.mean,
                sd: p.sd,
                grid: None,
            },
            (None, None) => Elasticity::Unknown,
        };
        let applied = applied.min(hi);
        // Settling starts again only when the cap left the neighbourhood of the one it began
        // at (`cap_seen` keeps that one), not at every trim's few watts.
        let anchor = known.cap_seen.get(&job.id).copied();
        if anchor.is_none_or(|a| cap_moved(a, applied)) {
            known.cap_seen.insert(job.id.clone(), applied);
            known.cap_changed.insert(job.id.clone(), crate::clock::wall_now());
        }
        JobState {
            spec: JobSpec {
                id: job.id.clone(),
                gpus: u32::try_from(n).unwrap_or(u32::MAX),
                cap_range: CapRange {
                    min: WattsPerGpu(lo),
                    max: WattsPerGpu(hi),
                },
                uncapped_power: Watts(uncapped),
                // Not a throughput: the planner weighs agent jobs by their GPUs (each job's
                // progress counts per GPU), so that a job that reports tokens/s is not ranked
                // against one that does not on incomparable figures. Its measured throughput
                // is `measured_tokens`.
                uncapped_tokens: TokensPerSec(n as f64),
                elasticity,
                max_slowdown: job.max_slowdown.and_then(|f| Fraction::new(f).ok()),
                priority: job.priority,
            },
            nodes: {
                let mut nodes: Vec<String> = job.gpus.iter().map(|(i, _)| self.agents[*i].node.clone()).collect();
                nodes.dedup();
                nodes.into_iter().map(NodeId::from).collect()
            },
            applied_cap: WattsPerGpu(applied),
            generation: known.generations.get(&job.id).copied().unwrap_or(0),
            measured_power: Watts(measured),
            measured_tokens: known.throughput.get(&job.id).map(|t| t.tokens),
            suspendable: job.suspendable,
            signature: job.signature.clone(),
            tier: job.tier.clone(),
            cap_unreliable: statuses.iter().flatten().any(|s| s.cap_unreliable),
            cap_reapplied: statuses.iter().flatten().map(|s| s.drift_corrections).sum(),
            started_at: job.started_at,
            time_limit_s: job.time_limit_s,
        }
    }
}

/// Slurm's pending jobs as the forecast needs them: the GPUs each asked for, its profile key
/// (formed as a running job's, so a re-run finds what was measured), its tags, Slurm's expected
/// start (`squeue --start`, once the backfill scheduler has estimated one) and its limit.
pub(super) async fn queued_jobs(
    inventory: &flexgate_slurm::SlurmInventory,
) -> Result<Vec<flexgate_policies::control::cluster::QueuedJob>, BackendError> {
    let snapshot = inventory
        .all_jobs()
        .await
        .map_err(|e| BackendError::Unreachable(format!("Slurm: {e}")))?;
    Ok(snapshot
        .jobs
        .iter()
        .filter(|j| j.state == flexgate_slurm::JobState::Pending)
        .map(|job| {
            let gpus = job.gpus_requested.unwrap_or(0);
            flexgate_policies::control::cluster::QueuedJob {
                id: JobId::from(job.id.to_string()),
                gpus,
                signature: Some(signature(&job.name, gpus as usize, job.flex.profile.as_deref())),
                pfi: job.flex.pfi.filter(|p| p.is_finite() && *p > 0.0),
                max_slowdown: job.flex.max_slowdown,
                priority: job.flex.priority.unwrap_or(1.0),
                expected_start: job.start_time,
                time_limit_s: job.time_limit_minutes.map(|m| m as f64 * 60.0),
            }
        })
        .collect())
}

/// A Slurm job's profile key: `name/Ngpu`, and `/profile` when its flex tags name one. A
/// re-run of the same configuration (same name, size and tag) finds what was measured before.
fn signature(name: &str, gpus: usize, profile: Option<&str>) -> Arc<str> {
    match profile {
        Some(p) => format!("{name}/{gpus}gpu/{p}").into(),
        None => format!("{name}/{gpus}gpu").into(),
    }
}
