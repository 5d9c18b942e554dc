//! Cap dispatch and leases: one job's cap applied on every node holding its GPUs (or
//! released when it reaches their maximum), the renewal round that keeps wanted leases alive
//! and re-sends lost ones, and the release of ended jobs' leases.
//!
//! Separate because this is the only code that changes GPU limits; every cap it sets is a lease
//! that expires by itself, so a gateway that dies leaves nothing capped for long.

use super::client::{CallError, Verb, unconfirmed_of};
use super::{AgentsBackend, WantedLease};
use crate::cluster::{CapCommand, CapOutcome};
use chrono::{DateTime, Utc};
use flexgate_agent::api::{
    CapStatus, GpuCap, LeaseRequest, LeaseResponse, ReleaseResponse, RenewRequest, RestorePolicy, lease_path,
    renew_path,
};
use flexgate_policies::control::cluster::Unconfirmed;
use flexgate_policies::ids::JobId;
use flexgate_policies::units::WattsPerGpu;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

impl AgentsBackend {
    /// The lease TTL: three renew periods, so that a renewal or two can fail without the cap
    /// lapsing, while the caps of a gateway that died still end soon.
    fn ttl(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.renew_every * 3).unwrap_or(chrono::Duration::seconds(30))
    }

    fn expiry(&self, until: Option<DateTime<Utc>>) -> DateTime<Utc> {
        // Agents check expiries against their own (wall) clocks.
        let by_ttl = crate::clock::wall_now() + self.ttl();
        until.map_or(by_ttl, |u| u.min(by_ttl))
    }

    /// Keeps every wanted lease alive; re-creates it where the agent lost it (restart without
    /// state, or expiry while unreachable). Runs until the backend is dropped.
    pub fn spawn_renewal(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = self.renew_every;
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(backend) = weak.upgrade() else { return };
                backend.renew_all().await;
            }
        })
    }

    /// One renewal round (also the reconcile: a lease the agent no longer holds is re-sent).
    pub async fn renew_all(&self) {
        if !self.active.load(std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        let now = crate::clock::wall_now();
        let wanted: Vec<((JobId, usize), WantedLease)> = {
            let mut known = self.known();
            // A lease past the event's end is not renewed; the agent's expiry restores it.
            known.leases.retain(|_, l| l.until.is_none_or(|u| u > now));
            known.leases.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
        };
        let deadline = Instant::now() + self.renew_every;
        let calls = wanted.into_iter().map(|((job, node), lease)| async move {
            let id = lease_id(&job);
            let body = RenewRequest {
                expires_at: self.expiry(lease.until),
            };
            match self
                .agent_call::<_, serde_json::Value>(node, Verb::Post, &renew_path(&id), Some(&body), deadline)
                .await
            {
                Ok(_) => {}
                Err(CallError::Refused { status: 404, .. }) => {
                    tracing::warn!(job = %job, node = %self.agents[node].node, "agent lost the lease; re-sending it");
                    let _ = self.put_lease(node, &job, &lease, deadline).await;
                }
                Err(e) => tracing::warn!(job = %job, "lease renewal: {e}"),
            }
        });
        futures_util::future::join_all(calls).await;
    }

    async fn put_lease(
        &self,
        node: usize,
        job: &str,
        lease: &WantedLease,
        deadline: Instant,
    ) -> Result<LeaseResponse, CallError> {
        let body = LeaseRequest {
            generation: lease.generation,
            expires_at: self.expiry(lease.until),
            gpus: lease
                .uuids
                .iter()
                .map(|u| GpuCap {
                    uuid: u.clone(),
                    cap_w: lease.cap_w,
                })
                .collect(),
            restore: RestorePolicy::PreEvent,
            new_job_cap_w: None,
        };
        self.agent_call(node, Verb::Put, &lease_path(&lease_id(job)), Some(&body), deadline)
            .await
    }

    /// The GPUs of `node` whose agent reports their cap unreliable (re-applied again and again),
    /// as of the last poll.
    fn unreliable_gpus(&self, node: usize) -> std::collections::HashSet<String> {
        self.known().gpus[node]
            .as_ref()
            .map(|l| l.iter().filter(|s| s.cap_unreliable).map(|s| s.uuid.clone()).collect())
            .unwrap_or_default()
    }

    /// Applies one job's command on every node holding its GPUs.
    pub(super) async fn apply_one(&self, command: &CapCommand, deadline: Instant) -> CapOutcome {
        let (job, latest) = {
            let known = self.known();
            let job = known.job_index.get(&command.job).map(|&i| known.jobs[i].clone());
            (job, known.generations.get(&command.job).copied().unwrap_or(0))
        };
        let Some(job) = job else {
            return CapOutcome::UnknownJob;
        };
        if command.generation < latest {
            return CapOutcome::Stale { latest };
        }
        let mut per_node: HashMap<usize, Vec<String>> = HashMap::new();
        for (node, uuid) in &job.gpus {
            per_node.entry(*node).or_default().push(uuid.clone());
        }
        let max_w = {
            let known = self.known();
            job.gpus
                .iter()
                .filter_map(|(n, u)| {
                    known.gpus[*n]
                        .as_ref()
                        .and_then(|l| l.iter().find(|s| &s.uuid == u))
                        .map(|s| s.max_w)
                })
                .fold(f64::INFINITY, f64::min)
        };
        // A cap at (or above) the GPUs' maximum is the end of the curtailment: release.
        let release = max_w.is_finite() && command.cap.value() >= max_w - 0.5;
        let calls = per_node.into_iter().map(|(node, uuids)| {
            let job = &job;
            async move {
                let lease = WantedLease {
                    generation: command.generation,
                    cap_w: command.cap.value(),
                    uuids,
                    until: command.until,
                };
                let result = if release {
                    self.agent_call::<(), ReleaseResponse>(
                        node,
                        Verb::Delete,
                        &lease_path(&lease_id(&job.id)),
                        None,
                        deadline,
                    )
                    .await
                    .map(|_| (max_w, false))
                } else {
                    self.put_lease(node, &job.id, &lease, deadline).await.and_then(|r| {
                        let mut worst = 0.0f64;
                        let mut clamped = false;
                        let unreliable = self.unreliable_gpus(node);
                        for a in &r.applied {
                            // Confirmed only as the agent read it back; and a cap the agent
                            // keeps re-applying is not counted on even while it holds.
                            let why = if a.status.is_applied() {
                                unreliable.contains(&a.uuid).then_some(Unconfirmed::Unreliable)
                            } else {
                                Some(unconfirmed_of(a.status))
                            };
                            if let Some(why) = why {
                                return Err(CallError::NotInForce {
                                    node: self.agents[node].node.clone(),
                                    gpu: a.uuid.clone(),
                                    why,
                                });
                            }
                            clamped |= a.status == CapStatus::Clamped;
                            worst = worst.max(a.enforced_w.or(a.applied_w).unwrap_or(a.requested_w));
                        }
                        Ok((worst, clamped))
                    })
                };
                (node, lease, result)
            }
        });
        let results = futures_util::future::join_all(calls).await;
        let mut known = self.known();
        known.generations.insert(job.id.clone(), command.generation);
        let mut applied = 0.0f64;
        let mut clamped = false;
        let mut failures = Vec::new();
        let mut why = None;
        for (node, lease, result) in results {
            if let Err(e) = &result {
                why = why.or(Some(e.unconfirmed()));
            }
            match result {
                Ok((w, c)) => {
                    applied = applied.max(w);
                    clamped |= c;
                    if release {
                        known.leases.remove(&(job.id.clone(), node));
                    } else {
                        known.leases.insert((job.id.clone(), node), lease);
                    }
                }
                // The agent holds this generation with other caps (the job's GPUs changed between
                // the first PUT and a re-send): nothing was applied, and it is not a newer plan.
                // Stop renewing a lease whose caps we never asked for; the next plan replaces it
                // under a higher generation.
                Err(CallError::Refused {
                    status: 409,
                    kind: Some(flexgate_agent::api::ErrorKind::GenerationConflict),
                    detail,
                    node: agent,
                    ..
                }) => {
                    known.leases.remove(&(job.id.clone(), node));
                    failures.push(format!(
                        "{agent}: generation {} is held with other caps; not applied: {detail}",
                        command.generation
                    ));
                }
                // Fenced: the agent has seen a later gateway epoch, so this gateway no longer
                // leads. Nothing was applied; stop wanting the lease (the leader holds its own).
                Err(CallError::Refused {
                    status: 409,
                    kind: Some(flexgate_agent::api::ErrorKind::Fenced),
                    detail,
                    node: agent,
                    ..
                }) => {
                    known.leases.remove(&(job.id.clone(), node));
                    failures.push(format!("{agent}: refused as from a deposed leader: {detail}"));
                }
                Err(CallError::Refused {
                    status: 409,
                    held_generation: Some(held),
                    ..
                }) => return CapOutcome::Stale { latest: held },
                Err(e) => {
                    // Keep wanting the lease: the renewal round re-sends it when the node is back.
                    if !release {
                        known.leases.insert((job.id.clone(), node), lease);
                    }
                    failures.push(e.to_string());
                }
            }
        }
        if failures.is_empty() {
            CapOutcome::Applied {
                applied: WattsPerGpu(applied),
                clamped,
            }
        } else {
            CapOutcome::Failed {
                reason: failures.join("; "),
                why,
            }
        }
    }

    /// Deletes the leases of jobs that are gone, restoring their GPUs' pre-event limits.
    pub(super) async fn release_leases(&self, leases: &[(JobId, usize)]) {
        let deadline = Instant::now() + self.deadline;
        let calls = leases.iter().map(|(job, node)| async move {
            tracing::info!(job = %job, node = %self.agents[*node].node, "job ended: releasing its GPUs");
            if let Err(e) = self
                .agent_call::<(), ReleaseResponse>(*node, Verb::Delete, &lease_path(&lease_id(job)), None, deadline)
                .await
            {
                tracing::warn!(job = %job, "releasing the GPUs of an ended job: {e}; the lease expires by itself");
            }
        });
        futures_util::future::join_all(calls).await;
    }
}

/// The lease id of a job's caps (the same on every node of the job).
fn lease_id(job: &str) -> String {
    let clean: String = job
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_:+".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    format!("flexgate-{clean}")
}
