//! Wall-clock time behind a trait, so that lease expiry and the simulated GPUs' power settling
//! can be tested with explicit time instead of sleeps.
//!
//! Leases carry absolute RFC 3339 deadlines (`expires_at`) chosen by the gateway, so the agent
//! compares them against wall-clock UTC, not a monotonic clock. A [`ManualClock`] lets tests and
//! benchmarks move that time by hand.

use chrono::{DateTime, TimeDelta, Utc};
use std::sync::Mutex;

/// A source of the current UTC time.
///
/// Everything in the agent that depends on time (expiry, the watchdog, simulated power) reads it
/// here, so one clock can be swapped for another.
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The system's wall clock: what the binary uses.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to: for deterministic tests and benchmarks.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<DateTime<Utc>>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    #[must_use]
    pub fn new(start: DateTime<Utc>) -> Self {
        Self { now: Mutex::new(start) }
    }

    /// Move the clock forward (or backward, with a negative delta).
    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
    }

    /// Set the clock to `to`.
    pub fn set(&self, to: DateTime<Utc>) {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        *self.now.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
            .expect("valid")
            .to_utc();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(TimeDelta::milliseconds(1500));
        assert_eq!(clock.now(), start + TimeDelta::milliseconds(1500));
        clock.set(start);
        assert_eq!(clock.now(), start);
    }
}
