//! The one clock every timer of the gateway goes through.
//!
//! Wall-clock instants (event windows, ledger timestamps) are derived from tokio's monotonic
//! clock, so a test that pauses tokio time (`tokio::time::pause`) runs hours of event time in
//! milliseconds, and the demo can run event time faster than real time with `speed`.

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use std::time::Duration;
use tokio::time::Instant;

/// The machine's UTC wall clock, the only place the gateway reads it (clippy's
/// `disallowed-methods` refuses `Utc::now` anywhere else). Decisions use a [`Clock`]; this is
/// for what must be on the wall clock whatever the event clock says: lease expiries that agents
/// check against their own clocks, the time a ledger record was written, unique file names.
#[must_use]
#[allow(clippy::disallowed_methods, reason = "the one place the wall clock is read")]
pub fn wall_now() -> DateTime<Utc> {
    Utc::now()
}

/// Maps tokio's monotonic time to UTC, optionally accelerated.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin_wall: DateTime<Utc>,
    origin: Instant,
    speed: f64,
}

impl Clock {
    /// Real time: UTC now, advancing at the pace of tokio's clock.
    #[must_use]
    pub fn real() -> Self {
        Self::starting_at(wall_now(), 1.0)
    }

    /// A clock that reads UTC now and runs `speed` times faster than tokio's clock (the demo).
    #[must_use]
    pub fn accelerated(speed: f64) -> Self {
        Self::starting_at(wall_now(), speed)
    }

    /// A clock that reads `wall` now and runs `speed` times faster than tokio's clock.
    #[must_use]
    pub fn starting_at(wall: DateTime<Utc>, speed: f64) -> Self {
        Self {
            origin_wall: wall,
            origin: Instant::now(),
            speed: if speed.is_finite() && speed > 0.0 { speed } else { 1.0 },
        }
    }

    /// How many event seconds pass per real second.
    #[must_use]
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// The current instant.
    #[must_use]
    pub fn now(&self) -> DateTime<Utc> {
        let elapsed = Instant::now().saturating_duration_since(self.origin).as_secs_f64() * self.speed;
        self.origin_wall + ChronoDuration::nanoseconds((elapsed * 1e9) as i64)
    }

    /// The tokio instant at which this clock reads `at` (now, if `at` is past).
    #[must_use]
    ///
    /// A moment ahead, however short, is rounded *up* to a wait, never down to none: a caller
    /// that loops until `at` (the control loop, until the event book's next change) would
    /// otherwise spin on an instant that is not yet due, and on tokio's paused clock, where time
    /// only advances while every task waits, spin forever (a test hung on an event change 0.3 µs
    /// ahead, which a microsecond rounding made "now").
    pub fn instant_of(&self, at: DateTime<Utc>) -> Instant {
        let ahead_ns = (at - self.now()).num_nanoseconds().unwrap_or(i64::MAX).max(0) as f64;
        Instant::now() + Duration::from_nanos((ahead_ns / self.speed).ceil() as u64)
    }

    /// Real duration for `event_seconds` of event time.
    #[must_use]
    pub fn real_duration(&self, event_seconds: f64) -> Duration {
        Duration::from_secs_f64((event_seconds / self.speed).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn paused_time_drives_the_wall_clock() {
        let start = wall_now();
        let clock = Clock::starting_at(start, 1.0);
        tokio::time::sleep(Duration::from_secs(3600)).await;
        let elapsed = clock.now() - start;
        assert_eq!(elapsed.num_seconds(), 3600);
    }

    #[tokio::test(start_paused = true)]
    async fn an_instant_a_fraction_of_a_microsecond_ahead_is_still_waited_for() {
        let clock = Clock::starting_at(wall_now(), 1.0);
        for speed_clock in [clock, Clock::starting_at(wall_now(), 2000.0)] {
            let target = speed_clock.now() + ChronoDuration::nanoseconds(300);
            let at = speed_clock.instant_of(target);
            assert!(at > Instant::now(), "a wait, not now");
            tokio::time::sleep_until(at).await;
            assert!(speed_clock.now() >= target, "due once waited for");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn accelerated_clock_and_instants_agree() {
        let start = wall_now();
        let clock = Clock::starting_at(start, 60.0);
        let target = start + ChronoDuration::minutes(30);
        tokio::time::sleep_until(clock.instant_of(target)).await;
        let drift = (clock.now() - target).num_milliseconds().abs();
        assert!(drift <= 1, "drift {drift} ms");
        assert_eq!(clock.real_duration(120.0), Duration::from_secs(2));
    }
}
