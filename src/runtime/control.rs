//! The control loop: wake at the next event-book change, telemetry tick or submission; read the
//! cluster, let the controller decide, record, then act.
//!
//! Every pass has the same shape: cluster reads with no lock held, a short decision under the
//! controller's lock (records queued in order), the flush, then the actions the decision asked
//! for (cap commands, suspensions), whose results are fed back the same way.

use super::driver::Driver;
use crate::ledger::LedgerError;
use chrono::Duration as ChronoDuration;
use flexgate_policies::control::entry::{SuspendOutcome, SuspendResult};
use flexgate_policies::control::{Effect, Input};
use std::collections::VecDeque;
use std::future::Future;
use std::sync::Arc;

impl Driver {
    /// Run until `shutdown` resolves.
    pub async fn control_loop(self: Arc<Self>, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let interval = ChronoDuration::seconds(i64::try_from(self.config.gateway.telemetry_interval_s).unwrap_or(5));
        let mut next_tick = self.clock.now();
        loop {
            let now = self.clock.now();
            if now >= next_tick {
                self.start_queue_read_if_due();
                if let Err(e) = self.tick(true).await {
                    tracing::error!("control tick failed: {e}");
                }
                next_tick = now + interval;
            }
            let wake_at = {
                let book = &self.published().snapshot.book;
                book.next_wakeup(self.clock.now())
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

    /// One pass: optionally measure (inventory and telemetry), then trim, plan and dispatch.
    pub async fn tick(&self, measure: bool) -> Result<(), LedgerError> {
        let _pass = self.control_pass.lock().await;
        if measure {
            match self.backend.inventory().await {
                Ok(jobs) => self.feed(Input::Inventory(jobs)).await?,
                Err(e) => tracing::warn!("inventory failed: {e}"),
            }
            match self.backend.telemetry().await {
                Ok(t) => {
                    let t = self.with_site_meter(t);
                    self.feed(Input::Telemetry(t)).await?;
                }
                Err(e) => tracing::warn!("telemetry missing: {e}; keeping the last reading"),
            }
        }
        if let Some(queue) = self.take_scheduler_answer() {
            self.feed(queue).await?;
        }
        self.feed(Input::Tick { measured: measure }).await
    }

    /// With `[meter]` sources, the site meter replaces the backend's figure: the feeds' sum
    /// when every feed is fresh, otherwise the facility model's upper estimate (the larger of
    /// it on the measured GPU power and the backend's own estimate, which counts unmeasured
    /// GPUs at their maximum), with the quality saying which. The arithmetic is the core's
    /// (`flexgate_policies::meter::model_meter`); here, only the feeds' state is read.
    fn with_site_meter(
        &self,
        mut t: flexgate_policies::control::cluster::Telemetry,
    ) -> flexgate_policies::control::cluster::Telemetry {
        let Some(meter) = &self.meter else {
            return t;
        };
        let model = flexgate_policies::meter::model_meter(
            &self.facility,
            self.config.site.facility_max_kw,
            self.config.facility.gpu_max_kw_per_node,
            t.gpu_board_power,
            t.nodes,
            t.meter_kw.value(),
            t.meter_quality.is_measured(),
        );
        meter.set_facility_max_kw(model.facility_max_kw);
        // The sources log their own failures; the quality goes to the status, the metrics and
        // every meter_sample.
        let site = meter.site_meter(self.clock.now(), model.nominal_kw, model.upper_kw);
        t.meter_kw = flexgate_policies::units::Kilowatts(site.kw);
        t.meter_quality = site.quality;
        t
    }

    /// Feed one input, record what it decided, and carry out the actions, feeding their
    /// results back until nothing is left to do. Called with `control_pass` held.
    pub(crate) async fn feed(&self, input: Input) -> Result<(), LedgerError> {
        let now = self.clock.now();
        let ((), mut decided) = self.decide(|core| ((), core.handle(input, now))).await?;
        self.flushed(&mut decided).await?;
        let mut todo: VecDeque<Effect> = decided.actions.into();
        while let Some(effect) = todo.pop_front() {
            let next = match effect {
                Effect::Record(_) => None,
                // A leader whose term may have lapsed since it decided sends nothing.
                Effect::Dispatch { .. } | Effect::Suspend { .. } | Effect::Resume { .. } if !self.may_act() => {
                    tracing::warn!("the term may have lapsed: not sending what was decided");
                    return Err(LedgerError::NotLeader);
                }
                Effect::Dispatch { purpose, commands } => {
                    let results = if commands.is_empty() {
                        Vec::new()
                    } else {
                        let sent = std::time::Instant::now();
                        let results = self.backend.apply(&commands).await;
                        self.metrics.observe_dispatch(sent.elapsed());
                        results
                    };
                    Some(Input::CapResults {
                        purpose,
                        commands,
                        results,
                    })
                }
                Effect::Suspend { jobs, shortfall_w } => {
                    let mut outcomes = Vec::with_capacity(jobs.len());
                    for (job, expected_w) in jobs {
                        let outcome = self.backend.suspend(&job).await;
                        outcomes.push(SuspendOutcome {
                            job,
                            expected_w: Some(expected_w),
                            outcome: SuspendResult::of_suspend(outcome.is_ok()),
                            reason: outcome.err().map(|e| e.to_string()),
                        });
                    }
                    tracing::warn!(shortfall_w, "caps alone cannot meet the target: suspending jobs");
                    Some(Input::Suspended { outcomes, shortfall_w })
                }
                Effect::Resume { jobs } => {
                    let mut outcomes = Vec::with_capacity(jobs.len());
                    for job in jobs {
                        let outcome = self.backend.resume(&job).await;
                        if let Err(e) = &outcome {
                            tracing::error!(job = %job, "could not resume a suspended job: {e}");
                        }
                        outcomes.push(SuspendOutcome {
                            job,
                            expected_w: None,
                            outcome: SuspendResult::of_resume(outcome.is_ok()),
                            reason: outcome.err().map(|e| e.to_string()),
                        });
                    }
                    Some(Input::Resumed { outcomes })
                }
                Effect::Announce(transition) => {
                    let _ = self.transitions.send(transition);
                    None
                }
                Effect::OptOutNotice { event_id, reason } => {
                    let _ = self.opt_outs.send((event_id, reason));
                    None
                }
                Effect::Warn(message) => {
                    tracing::warn!("{message}");
                    None
                }
                Effect::Wake => {
                    self.wake.notify_one();
                    None
                }
            };
            if let Some(input) = next {
                let now = self.clock.now();
                let ((), mut decided) = self.decide(|core| ((), core.handle(input, now))).await?;
                self.flushed(&mut decided).await?;
                // What a result leads to comes before what was already waiting.
                for action in decided.actions.into_iter().rev() {
                    todo.push_front(action);
                }
            }
        }
        Ok(())
    }
}
