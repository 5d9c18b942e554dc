//! The scheduler's queue, read off the control path.
//!
//! A scheduler can hang (slurmctld busy, slurmrestd behind a slow proxy) or answer with a
//! hundred thousand jobs; neither may delay a cap. So the control loop only *starts* a read,
//! at most every `forecast.queue_poll_s` and never while one is in flight, as a task of its
//! own, given up after `forecast.queue_deadline_s`; what it got (or why it got nothing) waits
//! in a slot that the next control pass takes and feeds to the controller as
//! [`Input::Scheduler`]. The control loop never awaits the scheduler. (Reads are started from
//! the loop rather than by a free-running timer, so that a test on tokio's paused clock does
//! not see time race ahead while it waits for a disk.)

use super::driver::Driver;
use flexgate_policies::control::Input;
use flexgate_policies::control::cluster::SchedulerView;
use std::sync::Arc;
use std::time::Duration;

/// A fingerprint of a queue answer: its jobs and their times, or its error.
fn answer_print(queue: &Result<Vec<flexgate_policies::control::cluster::QueuedJob>, String>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match queue {
        Err(why) => why.hash(&mut h),
        Ok(jobs) => {
            for j in jobs {
                j.id.as_str().hash(&mut h);
                j.gpus.hash(&mut h);
                j.expected_start.map(|t| t.timestamp()).hash(&mut h);
                j.time_limit_s.map(f64::to_bits).hash(&mut h);
            }
        }
    }
    // 0 is "nothing read yet".
    h.finish().max(1)
}

impl Driver {
    /// Start a read of the queue if one is due (`forecast.queue_poll_s` since the last began)
    /// and none is in flight, as a task of its own; returns at once.
    pub(crate) fn start_queue_read_if_due(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        let every = std::time::Duration::from_secs(self.config.forecast.queue_poll_s.max(1));
        {
            let mut last = self
                .queue_read_started
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if self.queue_unavailable.load(Ordering::Relaxed)
                || last.is_some_and(|t| t.elapsed() < every)
                || self.queue_read_in_flight.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *last = Some(tokio::time::Instant::now());
        }
        let driver = self.clone();
        tokio::spawn(async move {
            if !driver.read_queue().await {
                driver.queue_unavailable.store(true, Ordering::Relaxed);
            }
            driver.queue_read_in_flight.store(false, Ordering::Release);
        });
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
        // A changed answer wakes the control loop; an unchanged one waits for its next pass
        // (a queue polled every minute must not make a control pass every minute).
        let print = answer_print(&queue);
        let changed = self.scheduler_print.swap(print, std::sync::atomic::Ordering::Relaxed) != print;
        *self
            .scheduler_answer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(SchedulerView { at, queue });
        if changed {
            self.wake.notify_one();
        }
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
