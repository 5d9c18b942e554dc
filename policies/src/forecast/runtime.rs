//! When jobs end and start: the scheduler's figures, corrected by what the site has seen.
//!
//! A job's time limit overstates its runtime (users ask for more than they need; the scheduler
//! kills a job at its limit, never after). The correction is the distribution of
//! `runtime ÷ time limit` over jobs that ended ([`RuntimeModel::observe`]); until enough have
//! ended, a prior: the shares used by batch jobs are spread across the limit, with a mass at the
//! limit itself (jobs killed by it). A job without a limit is given a heavy tail: having run
//! for `e`, it is still running `h` later with probability `e / (e + h)` (the Lindy law of a
//! Pareto tail with index 1), never less than an hour's worth of `e`.
//!
//! A queued job starts at the scheduler's expected start, late or early by a spread that grows
//! with how far ahead that start is ([`RuntimeModel::start_spread`]); without one, after a wait
//! drawn from the site's mean queue wait (exponential).

use serde::{Deserialize, Serialize};

/// Shares `runtime ÷ limit` kept at most (the most recent).
pub const MAX_SAMPLES: usize = 2_000;

/// Ended jobs needed before the observed shares replace the prior.
pub const MIN_SAMPLES: usize = 30;

/// The prior's shares of the limit used (deciles of a spread with a mass at 1: a fifth of
/// jobs run to their limit).
const PRIOR_SHARES: [f64; 20] = [
    0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0, 1.0, 1.0, 1.0,
];

/// The correction of the scheduler's times.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuntimeModel {
    /// Observed `runtime ÷ limit` of ended jobs, most recent last, each in `(0, 1]`.
    pub shares: Vec<f64>,
    /// The site's mean queue wait, s, for queued jobs without an expected start.
    pub mean_wait_s: f64,
    /// How late or early a queued job starts against the scheduler's expected start, as a
    /// share of how far ahead that start was (the spread of a uniform error).
    pub start_spread: f64,
}

impl Default for RuntimeModel {
    fn default() -> Self {
        Self {
            shares: Vec::new(),
            mean_wait_s: 6.0 * 3600.0,
            start_spread: 0.5,
        }
    }
}

impl RuntimeModel {
    /// Learn from a job that ended after `runtime_s` of a `limit_s` limit. Absurd figures
    /// (non-positive or non-finite) are ignored.
    pub fn observe(&mut self, runtime_s: f64, limit_s: f64) {
        if !(runtime_s.is_finite() && limit_s.is_finite() && runtime_s > 0.0 && limit_s > 0.0) {
            return;
        }
        self.shares.push((runtime_s / limit_s).clamp(1e-6, 1.0));
        if self.shares.len() > MAX_SAMPLES {
            let excess = self.shares.len() - MAX_SAMPLES;
            self.shares.drain(..excess);
        }
    }

    /// Whether the observed shares are used (else the prior).
    #[must_use]
    pub fn learned(&self) -> bool {
        self.shares.len() >= MIN_SAMPLES
    }

    pub(crate) fn samples(&self) -> &[f64] {
        if self.learned() { &self.shares } else { &PRIOR_SHARES }
    }

    /// The share of jobs that use more than `x` of their limit.
    fn exceed(&self, x: f64) -> f64 {
        let samples = self.samples();
        samples.iter().filter(|&&s| s > x).count() as f64 / samples.len() as f64
    }

    /// Probability that a job with a `limit_s` limit, running for `elapsed_s`, still runs
    /// `ahead_s` later. Zero at and past its limit.
    #[must_use]
    pub fn survival(&self, elapsed_s: f64, limit_s: Option<f64>, ahead_s: f64) -> f64 {
        let ahead_s = ahead_s.max(0.0);
        let elapsed_s = elapsed_s.max(0.0);
        match limit_s.filter(|l| l.is_finite() && *l > 0.0) {
            Some(limit) => {
                if elapsed_s + ahead_s >= limit {
                    return 0.0;
                }
                let now = self.exceed(elapsed_s / limit);
                if now <= 0.0 {
                    // Longer than every job seen: it runs to its limit at worst.
                    return 1.0;
                }
                (self.exceed((elapsed_s + ahead_s) / limit) / now).clamp(0.0, 1.0)
            }
            None => {
                let e = elapsed_s.max(3600.0);
                e / (e + ahead_s)
            }
        }
    }

    /// Probability that a queued job expected to start `expected_in_s` from now (`None`: the
    /// scheduler did not say) has started `ahead_s` from now.
    #[must_use]
    pub fn started_by(&self, expected_in_s: Option<f64>, ahead_s: f64) -> f64 {
        let ahead_s = ahead_s.max(0.0);
        match expected_in_s.filter(|e| e.is_finite()) {
            Some(expected) => {
                let expected = expected.max(0.0);
                // A uniform error around the expected start, of half-width spread × lead
                // (at least 15 minutes).
                let half = (self.start_spread * expected).max(900.0);
                ((ahead_s - (expected - half)) / (2.0 * half)).clamp(0.0, 1.0)
            }
            None => 1.0 - (-ahead_s / self.mean_wait_s.max(60.0)).exp(),
        }
    }

    /// When a queued job is expected to start, from now, s (the scheduler's figure, else the
    /// mean wait).
    #[must_use]
    pub fn expected_start_in(&self, expected_in_s: Option<f64>) -> f64 {
        expected_in_s
            .filter(|e| e.is_finite())
            .map_or(self.mean_wait_s, |e| e.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn survival_is_zero_past_the_limit_and_falls_with_time() {
        let m = RuntimeModel::default();
        let limit = Some(10.0 * 3600.0);
        assert_eq!(m.survival(9.0 * 3600.0, limit, 3600.0), 0.0);
        let mut last = 1.0;
        for h in 0..10 {
            let s = m.survival(3600.0, limit, f64::from(h) * 3600.0);
            assert!(s <= last + 1e-12 && (0.0..=1.0).contains(&s));
            last = s;
        }
        // No limit: heavy-tailed, never zero.
        assert!(m.survival(7200.0, None, 48.0 * 3600.0) > 0.0);
    }

    #[test]
    fn observed_shares_replace_the_prior_once_enough_jobs_ended() {
        let mut m = RuntimeModel::default();
        for _ in 0..MIN_SAMPLES {
            m.observe(1800.0, 3600.0);
        }
        m.observe(f64::NAN, 1.0);
        m.observe(-1.0, 1.0);
        assert!(m.learned());
        assert_eq!(m.shares.len(), MIN_SAMPLES);
        // Every job seen ended at half its limit: one past it runs to its limit.
        assert_eq!(m.survival(0.6 * 3600.0, Some(3600.0), 60.0), 1.0);
        assert_eq!(m.survival(0.0, Some(3600.0), 0.6 * 3600.0), 0.0);
    }

    #[test]
    fn a_queued_job_starts_around_its_expected_start() {
        let m = RuntimeModel::default();
        assert_eq!(m.started_by(Some(4.0 * 3600.0), 0.0), 0.0);
        assert!((m.started_by(Some(4.0 * 3600.0), 4.0 * 3600.0) - 0.5).abs() < 1e-9);
        assert_eq!(m.started_by(Some(4.0 * 3600.0), 7.0 * 3600.0), 1.0);
        assert!(m.started_by(None, 6.0 * 3600.0) > 0.6);
    }
}
