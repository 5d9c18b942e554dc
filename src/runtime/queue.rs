//! The scheduler's queue, read off the control path.
//!
//! A scheduler can hang (slurmctld busy, slurmrestd behind a slow proxy) or answer with a
//! hundred thousand jobs; neither may delay a cap. So the queue is read by its own task, every
//! `forecast.queue_poll_s`, each read given up after `forecast.queue_deadline_s`; what it got
//! (or why it got nothing) waits in a slot that the next control pass takes and feeds to the
//! controller as [`Input::Scheduler`]. The control loop never awaits the scheduler.

use super::driver::Driver;
use flexgate_policies::control::Input;
use flexgate_policies::control::cluster::SchedulerView;
use std::sync::Arc;
use std::time::Duration;

/// Aborts a spawned task when dropped: the reader lives exactly as long as the control loop
/// that owns it, however that loop ends (a shutdown, or its task aborted by a kill).
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Driver {
    /// Read the queue forever (until the returned guard's owner drops it).
    pub(crate) fn spawn_queue_reader(self: &Arc<Self>) -> AbortOnDrop {
        AbortOnDrop(tokio::spawn(self.clone().read_queue_forever()))
    }

    async fn read_queue_forever(self: Arc<Self>) {
        let every = Duration::from_secs(self.config.forecast.queue_poll_s.max(1));
        while self.read_queue().await {
            tokio::time::sleep(every).await;
        }
    }

    /// Read the scheduler's queue once, within `forecast.queue_deadline_s`, and leave what it
    /// said (or why it said nothing) for the next control pass, which is woken. Returns whether
    /// it is worth reading again: a backend without a queue says so once.
    pub async fn read_queue(&self) -> bool {
        let deadline_s = self.config.forecast.queue_deadline_s.max(1);
        let at = self.clock.now();
        let answer = tokio::time::timeout(Duration::from_secs(deadline_s), self.backend.queue()).await;
        let (queue, again) = match answer {
            Err(_) => (Err(format!("the scheduler did not answer within {deadline_s} s")), true),
            Ok(None) => (
                Err(format!("the {} backend has no scheduler queue", self.backend.name())),
                false,
            ),
            Ok(Some(Ok(jobs))) => (Ok(jobs), true),
            Ok(Some(Err(e))) => {
                tracing::warn!("reading the scheduler's queue failed: {e}");
                (Err(e.to_string()), true)
            }
        };
        *self
            .scheduler_answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(SchedulerView { at, queue });
        self.wake.notify_one();
        again
    }

    /// The queue's latest answer not yet fed, if any.
    pub(crate) fn take_scheduler_answer(&self) -> Option<Input> {
        self.scheduler_answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
            .map(Input::Scheduler)
    }
}
