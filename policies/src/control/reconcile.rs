//! Reconcile: what the cluster shows against what the gateway confirmed.
//!
//! - **Job set.** Jobs that end take their caps with them; jobs that start are planned at the
//!   next step.
//! - **Drift.** A confirmed cap the cluster no longer shows (a GPU reset, a driver reload, an
//!   agent restarted without its state, a limit raised by hand) means the job is no longer known
//!   to hold it: it counts at its measured draw from now on, the rest is re-planned around it,
//!   and its cap is re-sent. Only drift *upwards* matters: a limit lower than
//!   wanted (an out-of-band cap) only draws less, and the planner counts what is measured.
//! - **Lost.** A capped job the backend stopped measuring (its node does not answer) is treated
//!   the same way, at once, rather than when a later dispatch happens to fail.
//! - **Retry.** Once a lost job is measured again, its cap is re-sent under a fresh generation;
//!   until that is confirmed it stays fixed load, so a retry can only over-deliver.

use super::cluster::{CapCommand, JobState, Telemetry};
use super::entry::{
    self, CapsDrifted, CapsLost, Drifted, ElasticityKnown, Entry, JobsChanged, PlanReason, Recorded, ThroughputKnown,
};
use super::{Controller, DRIFT_TOLERANCE_W, Effect};
use crate::alloc::Elasticity;
use crate::ids::JobId;
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

/// What is known of a job's elasticity, in a few words for the ledger: `sweep`, `pfi 2.10`,
/// `predicted 1.85±0.24` (telemetry-predicted, with its standard error) or `unknown`. An auditor
/// reading why a job was cut as deep as it was needs this next to the plan.
#[must_use]
pub fn elasticity_known(elasticity: &Elasticity) -> String {
    match elasticity {
        Elasticity::Measured { .. } => "sweep".to_string(),
        Elasticity::Pfi { value, .. } => format!("pfi {value:.2}"),
        Elasticity::PredictedPfi { mean, sd, .. } => format!("predicted {mean:.2}±{sd:.2}"),
        Elasticity::Unknown => "unknown".to_string(),
    }
}

/// What `describe` says of each job where it differs from what `known` last recorded: the
/// changes an `elasticity_known` or `throughput_known` record holds.
fn changed(
    jobs: &[JobState],
    known: &std::collections::HashMap<JobId, String>,
    describe: impl Fn(&JobState) -> String,
) -> BTreeMap<String, String> {
    jobs.iter()
        .filter_map(|job| {
            let now = describe(job);
            (known.get(&job.spec.id) != Some(&now)).then(|| (job.spec.id.to_string(), now))
        })
        .collect()
}

/// The fewest suspendable jobs, largest expected draw first, whose draw covers `shortfall_w`.
#[must_use]
pub fn select_suspensions(mut candidates: Vec<(JobId, f64)>, shortfall_w: f64) -> Vec<(JobId, f64)> {
    candidates.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut covered = 0.0;
    let mut chosen = Vec::new();
    for (job, draw) in candidates {
        if covered >= shortfall_w {
            break;
        }
        covered += draw.max(0.0);
        chosen.push((job, draw));
    }
    chosen
}

impl Controller {
    pub(crate) fn observe_inventory(&mut self, jobs: Vec<JobState>, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let jobs = self.with_learned_elasticity(jobs);
        let before: HashSet<&JobId> = self.jobs.iter().map(|j| &j.spec.id).collect();
        let after: HashSet<&JobId> = jobs.iter().map(|j| &j.spec.id).collect();
        let ended: Vec<JobId> = self
            .jobs
            .iter()
            .map(|j| &j.spec.id)
            .filter(|id| !after.contains(id))
            .cloned()
            .collect();
        let started: Vec<JobId> = jobs
            .iter()
            .map(|j| &j.spec.id)
            .filter(|id| !before.contains(id))
            .cloned()
            .collect();
        // Caps or suspensions recorded for jobs the cluster no longer runs (ended while the
        // gateway was down) end too.
        let mut ended_all = ended;
        for id in self.caps.keys().chain(self.suspended.iter()) {
            if !after.contains(id) && !ended_all.contains(id) {
                ended_all.push(id.clone());
            }
        }
        let order_changed =
            self.jobs.len() == jobs.len() && self.jobs.iter().zip(&jobs).any(|(a, b)| a.spec.id != b.spec.id);
        let runtimes = {
            let gone: Vec<&JobState> = self.jobs.iter().filter(|j| !after.contains(&j.spec.id)).collect();
            Self::ended_runtimes(&gone, now)
        };
        if !started.is_empty() || !ended_all.is_empty() {
            self.record(
                effects,
                Recorded::new(
                    Entry::JobsChanged(JobsChanged {
                        at: now,
                        jobs_started: started.clone(),
                        jobs_ended: ended_all,
                        runtimes,
                    }),
                    None,
                ),
            );
        }
        if !started.is_empty() || order_changed || self.jobs.len() != jobs.len() {
            self.pending = Some(PlanReason::JobsChanged);
        }
        self.detect_drift(&jobs, now, effects);
        self.record_reapplied(&jobs, now, effects);
        self.record_elasticity(&jobs, now, effects);
        self.observe_busy(&jobs, now);
        self.jobs = Arc::new(jobs);
        self.flex_available_kw = self.flex_available_kw();
    }

    fn detect_drift(&mut self, jobs: &[JobState], now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let found = |unreliable: bool| -> Vec<Drifted> {
            jobs.iter()
                .filter(|job| !self.suspended.contains(&job.spec.id))
                .filter_map(|job| {
                    let cap = self.caps.get(&job.spec.id)?;
                    let raised = job.applied_cap.value() > cap.cap.value() + DRIFT_TOLERANCE_W;
                    // A raised cap is drift whatever the agent says; an unreliable one that holds
                    // now is recorded as such.
                    let this_kind = if unreliable {
                        job.cap_unreliable && !raised
                    } else {
                        raised
                    };
                    (cap.confirmed && this_kind).then(|| Drifted {
                        job: job.spec.id.clone(),
                        wanted_w_per_gpu: cap.cap.value(),
                        applied_w_per_gpu: job.applied_cap.value(),
                        generation: cap.generation,
                    })
                })
                .collect()
        };
        let raised = found(false);
        let unreliable = found(true);
        for d in &raised {
            effects.push(Effect::Warn(format!(
                "cap drift: job {}'s GPUs are at {:.0} W, above the {:.0} W the gateway set; counting it at its measured draw and re-sending the cap",
                d.job, d.applied_w_per_gpu, d.wanted_w_per_gpu
            )));
        }
        for d in &unreliable {
            effects.push(Effect::Warn(format!(
                "unreliable cap: the node agent keeps re-applying job {}'s {:.0} W cap (its limit is undone again and again); counting the job at its uncapped draw until it holds",
                d.job, d.wanted_w_per_gpu
            )));
        }
        let event = self.binding_event();
        for (action, drifted) in [("drift", raised), (entry::UNRELIABLE_ACTION, unreliable)] {
            if drifted.is_empty() {
                continue;
            }
            self.counters.drifts += drifted.len() as u64;
            self.record(
                effects,
                Recorded::new(
                    Entry::CapsDrifted(CapsDrifted {
                        at: now,
                        action: action.to_string(),
                        drifted,
                    }),
                    event.clone(),
                ),
            );
            self.pending = Some(PlanReason::Unconfirmed);
        }
    }

    /// Record the caps the node agents re-applied by themselves since the last inventory (each
    /// increase of a job's counter). The first sight of a job only sets where its counter
    /// stands: what happened before this gateway saw it is in the agent's log and metrics. A
    /// counter that went down belongs to a restarted agent and counts from zero.
    fn record_reapplied(&mut self, jobs: &[JobState], now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let mut reapplied = BTreeMap::new();
        for job in jobs {
            let now_count = job.cap_reapplied;
            match self.reapplied_seen.insert(job.spec.id.clone(), now_count) {
                Some(seen) if now_count > seen => {
                    reapplied.insert(job.spec.id.clone(), now_count - seen);
                }
                Some(seen) if now_count < seen && now_count > 0 => {
                    reapplied.insert(job.spec.id.clone(), now_count);
                }
                _ => {}
            }
        }
        let running: HashSet<&JobId> = jobs.iter().map(|j| &j.spec.id).collect();
        self.reapplied_seen.retain(|id, _| running.contains(id));
        if reapplied.is_empty() {
            return;
        }
        effects.push(Effect::Warn(format!(
            "node agents re-applied caps whose limits had moved (driver reload or reset, another tool): {}",
            reapplied
                .iter()
                .map(|(job, n)| format!("{job} ×{n}"))
                .collect::<Vec<_>>()
                .join(", ")
        )));
        let event = self.binding_event();
        self.record(
            effects,
            Recorded::new(Entry::CapsReapplied(entry::CapsReapplied { at: now, reapplied }), event),
        );
    }

    /// Record what the planner knows of each job's elasticity whenever it changes (a job
    /// starts, its PFI becomes predicted from telemetry, a tag changes), instead of in every
    /// plan: plans come at every event revision and must stay fast, knowledge changes rarely.
    fn record_elasticity(&mut self, jobs: &[JobState], now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let changed = changed(jobs, &self.elasticity_known, |job| {
            self.knowledge_notes
                .get(&job.spec.id)
                .cloned()
                .unwrap_or_else(|| elasticity_known(&job.spec.elasticity))
        });
        if changed.is_empty() {
            return;
        }
        self.record(
            effects,
            Recorded::new(
                Entry::ElasticityKnown(ElasticityKnown {
                    at: now,
                    elasticity_known: changed,
                }),
                None,
            ),
        );
    }

    /// Record which running jobs report their throughput whenever that changes (see
    /// [`ThroughputKnown`]); a job left out of the telemetry is `unknown` for the time being.
    pub(crate) fn record_throughput(&mut self, t: &Telemetry, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let reporting: HashSet<&str> = t.jobs.iter().filter(|j| j.tokens.is_some()).map(|j| &*j.job).collect();
        let changed = changed(&self.jobs, &self.throughput_known, |job| {
            if reporting.contains(&*job.spec.id) {
                "measured"
            } else {
                "unknown"
            }
            .to_string()
        });
        if changed.is_empty() {
            return;
        }
        self.record(
            effects,
            Recorded::new(
                Entry::ThroughputKnown(ThroughputKnown {
                    at: now,
                    throughput: changed,
                }),
                None,
            ),
        );
    }

    pub(crate) fn reconcile_lost(&mut self, t: &Telemetry, now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let measured: HashSet<&str> = t.jobs.iter().map(|m| &*m.job).collect();
        let mut lost: Vec<JobId> = self
            .caps
            .iter()
            .filter(|(job, cap)| cap.confirmed && !measured.contains(&***job) && !self.suspended.contains(*job))
            .map(|(job, _)| job.clone())
            .collect();
        if lost.is_empty() {
            return;
        }
        lost.sort();
        effects.push(Effect::Warn(format!(
            "capped jobs not measured (node unreachable?): {}; counting them at their measured draw",
            lost.join(", ")
        )));
        let event = self.binding_event();
        self.record(
            effects,
            Recorded::new(
                Entry::CapsLost(CapsLost {
                    at: now,
                    unmeasured_capped_jobs: lost,
                }),
                event,
            ),
        );
        self.pending = Some(PlanReason::Unconfirmed);
    }

    /// The unconfirmed caps to re-send after a plan: jobs still running, not suspended, measured
    /// again (their node answers), with a generation older than the plan's. Jobs on nodes that
    /// do not answer are not retried: that would hold every tick for the call timeout; the
    /// backend keeps their leases wanted and re-sends them when the node is back.
    pub(crate) fn retry_unconfirmed(&mut self) -> Option<Vec<CapCommand>> {
        let plan = self.plan.as_ref()?;
        if self.caps.values().all(|c| c.confirmed) {
            return None;
        }
        let measured: HashSet<&str> = self
            .telemetry
            .as_ref()
            .map(|t| t.jobs.iter().map(|m| &*m.job).collect())
            .unwrap_or_default();
        let running: HashSet<&str> = self.jobs.iter().map(|j| &*j.spec.id).collect();
        let mut retries: Vec<CapCommand> = self
            .caps
            .iter()
            .filter(|(job, cap)| {
                !cap.confirmed
                    && cap.generation < plan.generation
                    && !self.suspended.contains(*job)
                    && running.contains(&***job)
                    && measured.contains(&***job)
            })
            .map(|(job, cap)| CapCommand {
                job: job.clone(),
                cap: cap.cap,
                generation: plan.generation,
                until: plan.until,
            })
            .collect();
        retries.sort_by(|a, b| a.job.cmp(&b.job));
        (!retries.is_empty()).then_some(retries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspensions_take_the_largest_draws_until_the_shortfall_is_covered() {
        let jobs = vec![
            (JobId::from("a"), 100.0),
            (JobId::from("b"), 300.0),
            (JobId::from("c"), 200.0),
        ];
        let chosen = select_suspensions(jobs.clone(), 250.0);
        assert_eq!(chosen.iter().map(|(j, _)| &**j).collect::<Vec<_>>(), ["b"]);
        let chosen = select_suspensions(jobs.clone(), 450.0);
        assert_eq!(chosen.iter().map(|(j, _)| &**j).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(select_suspensions(jobs, 10_000.0).len(), 3);
        assert!(select_suspensions(Vec::new(), 10.0).is_empty());
    }

    #[test]
    fn elasticity_is_described_in_a_few_words() {
        assert_eq!(elasticity_known(&Elasticity::Unknown), "unknown");
        assert_eq!(
            elasticity_known(&Elasticity::PredictedPfi {
                mean: 1.854,
                sd: 0.241,
                grid: None
            }),
            "predicted 1.85±0.24"
        );
    }
}
