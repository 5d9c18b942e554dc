//! The control loop: wake at the next event-book change, telemetry tick or submission; measure,
//! trim, re-plan, dispatch.

use super::gateway::{DRIFT_TOLERANCE_W, Gateway, State};
use crate::ledger::{LedgerError, NewRecord, RecordKind};
use chrono::Duration as ChronoDuration;
use serde_json::json;
use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// How much meter history is kept in memory for baselines (the ledger keeps all of it).
const HISTORY_KEEP_S: i64 = 6 * 3600;

impl Gateway {
    /// Run until `shutdown` resolves.
    pub async fn control_loop(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let interval = ChronoDuration::seconds(self.config.gateway.telemetry_interval_s as i64);
        let mut next_tick = self.clock.now();
        loop {
            let now = self.clock.now();
            if now >= next_tick {
                if let Err(e) = self.tick(true).await {
                    tracing::error!("control tick failed: {e}");
                }
                next_tick = now + interval;
            }
            let wake_at = {
                let state = self.state.lock().await;
                state
                    .book
                    .next_wakeup(self.clock.now())
                    .map_or(next_tick, |w| w.min(next_tick))
            };
            tokio::select! {
                () = tokio::time::sleep_until(self.clock.instant_of(wake_at)) => {
                    if self.clock.now() < next_tick
                        && let Err(e) = self.tick(false).await
                    {
                        tracing::error!("control tick failed: {e}");
                    }
                }
                () = self.wake.notified() => {
                    if let Err(e) = self.tick(false).await {
                        tracing::error!("control tick failed: {e}");
                    }
                }
                () = &mut shutdown => break,
            }
        }
    }

    /// One pass: optionally measure (and refresh inventory), trim, then plan and dispatch.
    pub async fn tick(&self, measure: bool) -> Result<(), LedgerError> {
        let mut state = self.state.lock().await;
        let mut reason = "event book";
        if measure {
            if self.measure(&mut state).await? {
                reason = "job set changed";
            }
            if self.trim(&mut state).await? {
                reason = "closed-loop trim";
            }
        }
        let unconfirmed = state.caps.values().any(|c| !c.confirmed);
        let ceiling_now = state.effective_ceiling(self.clock.now()).map(|c| c.ceiling_kw);
        if state.replan && reason == "event book" {
            reason = "unconfirmed caps confirmed again";
        }
        let changed =
            ceiling_now != state.planned_ceiling || unconfirmed || reason != "event book" || state.plan.is_none();
        if changed {
            state.replan = false;
            self.plan_and_dispatch(&mut state, reason).await?;
            for transition in state.announce.drain(..) {
                let _ = self.transitions.send(transition);
            }
        }
        Ok(())
    }

    /// Read telemetry and inventory; record a measurement. Returns true when the job set changed.
    async fn measure(&self, state: &mut State) -> Result<bool, LedgerError> {
        let now = self.clock.now();
        let mut jobs_changed = false;
        match self.backend.inventory().await {
            Ok(jobs) => {
                let before: Vec<_> = state.jobs.iter().map(|j| j.spec.id.clone()).collect();
                let after: Vec<_> = jobs.iter().map(|j| j.spec.id.clone()).collect();
                if before != after {
                    jobs_changed = true;
                    let (before_set, after_set): (HashSet<&Arc<str>>, HashSet<&Arc<str>>) =
                        (before.iter().collect(), after.iter().collect());
                    let ended: Vec<_> = before.iter().filter(|id| !after_set.contains(id)).cloned().collect();
                    let started: Vec<_> = after.iter().filter(|id| !before_set.contains(id)).cloned().collect();
                    for id in &ended {
                        state.caps.remove(id);
                        state.pre_event_caps_changed |= state.pre_event_caps.remove(id).is_some();
                    }
                    // A job that starts mid-event runs at its own (uncapped) pre-event cap.
                    if state.curtailment_started.is_some() {
                        let started: HashSet<&Arc<str>> = started.iter().collect();
                        for job in jobs.iter().filter(|j| started.contains(&j.spec.id)) {
                            state.pre_event_caps.insert(job.spec.id.clone(), job.applied_cap);
                            state.pre_event_caps_changed = true;
                        }
                    }
                    self.ledger
                        .append(NewRecord {
                            kind: RecordKind::Measurement,
                            event: None,
                            dedup_key: None,
                            body: json!({"at": now, "jobs_started": started, "jobs_ended": ended}),
                        })
                        .await?;
                }
                // A suspended job that ended (cancelled by its owner) needs no resume.
                let running: HashSet<&str> = jobs.iter().map(|j| &*j.spec.id).collect();
                state.suspended.retain(|id| running.contains(&**id));
                self.detect_drift(state, &jobs).await?;
                self.record_elasticity_changes(state, &jobs).await?;
                state.jobs = jobs;
            }
            Err(e) => tracing::warn!("inventory failed: {e}"),
        }
        match self.backend.telemetry().await {
            Ok(t) => {
                let ceiling = state.effective_ceiling(now);
                state.meter_history.push_back((now, t.meter_kw.value()));
                let keep_from = now - ChronoDuration::seconds(HISTORY_KEEP_S);
                while state.meter_history.front().is_some_and(|(at, _)| *at < keep_from) {
                    state.meter_history.pop_front();
                }
                self.ledger
                    .append(NewRecord {
                        kind: RecordKind::Measurement,
                        event: ceiling.as_ref().map(|c| c.binding_event.clone()),
                        dedup_key: None,
                        body: json!({
                            "at": now,
                            "meter_kw": t.meter_kw.value(),
                            "gpu_board_w": t.gpu_board_power.value(),
                            "ceiling_kw": ceiling.as_ref().map(|c| c.ceiling_kw),
                            "events": ceiling.as_ref().map(|c| c.events.clone()).unwrap_or_default(),
                            "gpu_budget_w": state.plan.as_ref().map(|p| p.gpu_budget_w),
                            "trim_w": state.trim_w,
                        }),
                    })
                    .await?;
                // A capped job the backend could not measure (its node stopped answering) is no
                // longer known to hold its cap: count it at its measured draw from now on and
                // re-plan the rest around it (BACKENDS.md §7), at this tick, not at the trim's.
                let measured: HashSet<&str> = t.jobs.iter().map(|m| &*m.job).collect();
                let lost: Vec<Arc<str>> = state
                    .caps
                    .iter()
                    .filter(|(job, cap)| cap.confirmed && !measured.contains(&***job))
                    .map(|(job, _)| job.clone())
                    .collect();
                for job in &lost {
                    tracing::warn!(job = %job, "capped job not measured (node unreachable?); counting it at its measured draw");
                    if let Some(cap) = state.caps.get_mut(job) {
                        cap.confirmed = false;
                    }
                }
                if !lost.is_empty() {
                    self.ledger
                        .append(NewRecord {
                            kind: RecordKind::Confirmation,
                            event: ceiling.as_ref().map(|c| c.binding_event.clone()),
                            dedup_key: None,
                            body: json!({"at": now, "unmeasured_capped_jobs": lost}),
                        })
                        .await?;
                }
                state.telemetry = Some(t);
            }
            Err(e) => tracing::warn!("telemetry missing: {e}; keeping the last reading"),
        }
        Ok(jobs_changed)
    }

    /// Reconcile: a confirmed cap the cluster no longer shows (a GPU reset, a driver reload, an
    /// agent restarted without its state, someone raising the limit by hand) is drift. The job
    /// is no longer known to hold its cap, so it counts at its measured draw from now on, the
    /// rest is re-planned around it and its cap is re-sent (BACKENDS.md §7). Only drift
    /// *upwards* matters: a limit lower than wanted (an out-of-band cap) only draws less, and the
    /// planner already counts what is measured.
    async fn detect_drift(&self, state: &mut State, jobs: &[crate::cluster::JobState]) -> Result<(), LedgerError> {
        let mut drifted = Vec::new();
        for job in jobs {
            if state.suspended.contains(&job.spec.id) {
                continue;
            }
            let Some(cap) = state.caps.get_mut(&job.spec.id) else {
                continue;
            };
            if cap.confirmed && job.applied_cap.value() > cap.cap.value() + DRIFT_TOLERANCE_W {
                cap.confirmed = false;
                tracing::warn!(job = %job.spec.id, wanted_w = cap.cap.value(), applied_w = job.applied_cap.value(),
                    "cap drift: the job's GPUs are above the cap the gateway set; counting it at its measured draw and re-sending the cap");
                drifted.push(json!({"job": job.spec.id, "wanted_w_per_gpu": cap.cap.value(),
                                    "applied_w_per_gpu": job.applied_cap.value(), "generation": cap.generation}));
            }
        }
        if drifted.is_empty() {
            return Ok(());
        }
        self.counters.drifts.fetch_add(drifted.len() as u64, Ordering::Relaxed);
        let event = state.plan.as_ref().map(|p| p.binding_event.clone());
        self.ledger
            .append(NewRecord {
                kind: RecordKind::Confirmation,
                event,
                dedup_key: None,
                body: json!({"at": self.clock.now(), "action": "drift", "drifted": drifted}),
            })
            .await?;
        Ok(())
    }

    /// Record what the planner knows of each job's elasticity whenever it changes (a job
    /// starts, its PFI becomes predicted from telemetry, a tag changes), instead of in every
    /// plan: plans come at every event revision and must stay fast, knowledge changes rarely.
    /// Plans are explained by the latest such record before them.
    async fn record_elasticity_changes(
        &self,
        state: &mut State,
        jobs: &[crate::cluster::JobState],
    ) -> Result<(), LedgerError> {
        let mut changed = serde_json::Map::new();
        for job in jobs {
            let known = super::gateway::elasticity_known(&job.spec.elasticity);
            if state.elasticity_known.get(&job.spec.id) != Some(&known) {
                changed.insert(job.spec.id.to_string(), json!(known));
                state.elasticity_known.insert(job.spec.id.clone(), known);
            }
        }
        let running: HashSet<&str> = jobs.iter().map(|j| &*j.spec.id).collect();
        state.elasticity_known.retain(|id, _| running.contains(&**id));
        if changed.is_empty() {
            return Ok(());
        }
        self.ledger
            .append(NewRecord {
                kind: RecordKind::Measurement,
                event: None,
                dedup_key: None,
                body: json!({"at": self.clock.now(), "elasticity_known": changed}),
            })
            .await?;
        Ok(())
    }

    /// Closed loop, both ways, after the settle time since the last dispatch:
    /// - meter above the ceiling at all: lower the GPU budget by `gain` × the excess (1 W of GPU
    ///   per W of meter: overheads only make the real drop larger);
    /// - meter below the ceiling by more than the margin (meter error + noise + deadband): give
    ///   back `gain` × the headroom beyond the margin, converted to GPU watts with the largest
    ///   plausible overhead multiplier, so a credit never overshoots. The conservative open-loop
    ///   budget over-delivers by design (FACILITY_AND_GRID.md §1.4: ≈ 35 %); this recovers it.
    ///
    /// The trim is bounded: at most `max_trim_fraction` of the budget down, and never more credit
    /// than would lift the budget above the jobs' uncapped draw. Every change is recorded with
    /// its reason. Returns true when the trim changed.
    async fn trim(&self, state: &mut State) -> Result<bool, LedgerError> {
        let now = self.clock.now();
        let (Some(plan), Some(t)) = (&state.plan, &state.telemetry) else {
            return Ok(false);
        };
        let settled = state
            .last_dispatch
            .is_none_or(|at| now - at >= ChronoDuration::seconds(self.config.control.settle_s as i64));
        if !settled {
            return Ok(false);
        }
        let c = &self.config.control;
        let p = self.facility.params();
        let margin_kw = c.deadband_kw + p.meter_err_kw + p.noise_kw;
        let worst_multiplier = (1.0 + p.k_cool.hi) / (p.eta_psu.average.lo * p.eta_dist.average.lo);
        let excess_kw = t.meter_kw.value() - plan.ceiling_kw;
        let base_budget = plan.base_budget_w;
        let max_trim = c.max_trim_fraction * base_budget;
        let max_credit = (plan.plan.uncapped_power.value() - base_budget).max(0.0);
        let old = state.trim_w;
        let new = if excess_kw > 0.0 {
            (old + c.gain * excess_kw * 1000.0).min(max_trim)
        } else if -excess_kw > margin_kw {
            (old - c.gain * (-excess_kw - margin_kw) * 1000.0 / worst_multiplier).max(-max_credit)
        } else {
            old
        };
        if (new - old).abs() < 1.0 {
            return Ok(false);
        }
        state.trim_w = new;
        self.counters.trims.fetch_add(1, Ordering::Relaxed);
        let why = if new > old {
            format!(
                "measured meter {:.1} kW stays {excess_kw:.1} kW above the ceiling {:.1} kW after the settle time: lowering the GPU budget",
                t.meter_kw.value(),
                plan.ceiling_kw
            )
        } else {
            format!(
                "measured meter {:.1} kW is {:.1} kW under the ceiling {:.1} kW, beyond the {margin_kw:.1} kW margin: raising the GPU budget",
                t.meter_kw.value(),
                -excess_kw,
                plan.ceiling_kw
            )
        };
        tracing::info!("{why}; trim {old:.0} W → {new:.0} W");
        self.ledger
            .append(NewRecord {
                kind: RecordKind::Operator,
                event: Some(plan.binding_event.clone()),
                dedup_key: None,
                body: json!({"at": now, "action": "closed_loop_trim", "trim_w_before": old, "trim_w": new,
                             "reason": why, "max_trim_w": max_trim, "max_credit_w": max_credit}),
            })
            .await?;
        Ok(true)
    }
}
