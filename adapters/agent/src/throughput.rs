//! Each job's training throughput as the job itself reports it, screened and aggregated as the
//! PFI paper does: training-phase samples only, the mean of the top 10 % in a sliding window.
//!
//! Pure: no clock, no I/O. The agent feeds it reports with the time they arrived
//! (`POST /v1/jobs/{job_id}/throughput`) and reads summaries (`GET /v1/jobs/throughput`); the
//! gateway's simulated cluster feeds its simulated jobs' steps through the same [`JobWindows`],
//! so the demo's throughput is aggregated by the code that aggregates a real job's.
//!
//! **Why the top decile of a window.** A training loop's instantaneous rate dips at evaluation,
//! checkpointing and data-loader stalls that its phase labels do not always catch. The paper's
//! aggregation (mean of the top 10 % of training samples) drops those dips; a sliding window
//! lets the figure follow a cap change: once a cap has held for one window, every sample in it
//! was taken under that cap, and [`JobThroughput::window_start`] lets the gateway tell.
//!
//! **What is refused, and why it is not an error of the job.** A rate that is not finite,
//! negative, beyond [`MAX_TOKENS_PER_S`], or more than [`HISTORY_FACTOR`] times the job's own
//! figure in the window is refused with its reason and counted; nothing of it reaches a
//! summary. A job whose rate really jumps that far (a warm-up far slower than training) is
//! accepted again once its old samples have aged out of the window.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

/// Default sliding window: long enough for a few dozen steps, short enough that a cap change
/// shows within one control period or two.
pub const DEFAULT_WINDOW: TimeDelta = TimeDelta::seconds(30);

/// Most samples kept per job: a job reporting every step at 100 steps/s for 30 s is sampled
/// down by eviction of the oldest, which only shortens its window.
pub const MAX_SAMPLES_PER_JOB: usize = 2048;

/// Most jobs tracked at once per agent (a node runs a handful): beyond, reports of a new job are
/// refused until a job's window empties.
pub const MAX_JOBS: usize = 256;

/// A report more than this many times the job's figure in the window is refused.
pub const HISTORY_FACTOR: f64 = 100.0;

/// Largest rate accepted from any job, tokens/s: 10⁹ is a thousand times the fastest H200
/// training jobs measured; more is a unit mistake or a lie.
pub const MAX_TOKENS_PER_S: f64 = 1e9;

/// Which part of training a sample was taken in; only `train` samples are aggregated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward/backward/optimizer steps: the throughput a cap slows.
    #[default]
    Train,
    /// Evaluation passes.
    Eval,
    /// Checkpoint writes.
    Checkpoint,
    /// Start-up: compilation, data-loader warm-up.
    Warmup,
}

/// Body of `POST /v1/jobs/{job_id}/throughput`: one reading of the job's rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ThroughputReport {
    /// Training tokens per second of the whole job (all its GPUs), over the last step or steps.
    pub tokens_per_s: f64,
    /// Samples (sequences) per second, if the job counts them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_s: Option<f64>,
    /// The optimizer step the reading ends at, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The phase the reading was taken in (default `train`).
    #[serde(default)]
    pub phase: Phase,
}

/// Why a report was refused; `code()` is the stable name used in metrics and errors.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// NaN or infinite (JSON cannot carry them, but a simulated or in-process caller can).
    #[error("{field} is not a finite number")]
    NotFinite {
        /// The field at fault.
        field: &'static str,
    },
    /// Below zero.
    #[error("{field} is negative ({value})")]
    Negative {
        /// The field at fault.
        field: &'static str,
        /// The value sent.
        value: f64,
    },
    /// Beyond what any job can do.
    #[error("tokens_per_s {value} is beyond the largest plausible rate {MAX_TOKENS_PER_S}")]
    Absurd {
        /// The value sent.
        value: f64,
    },
    /// Far above the job's own recent figure.
    #[error(
        "tokens_per_s {value} is more than {HISTORY_FACTOR}× the job's figure in its window ({history}); accepted again once the window has aged out"
    )]
    BeyondHistory {
        /// The value sent.
        value: f64,
        /// The job's top-decile figure in the window.
        history: f64,
    },
    /// The agent already tracks as many jobs as it keeps ([`MAX_JOBS`] on a node).
    #[error("the agent already tracks {max} jobs' throughput; try again when one has stopped reporting")]
    TooManyJobs {
        /// How many it keeps.
        max: usize,
    },
}

impl Refusal {
    /// Stable snake-case name (metrics label, error detail).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::NotFinite { .. } => "not_finite",
            Self::Negative { .. } => "negative",
            Self::Absurd { .. } => "absurd",
            Self::BeyondHistory { .. } => "beyond_history",
            Self::TooManyJobs { .. } => "too_many_jobs",
        }
    }

    /// Every code, for metrics that list each even at zero.
    pub const CODES: [&'static str; 5] = ["not_finite", "negative", "absurd", "beyond_history", "too_many_jobs"];
}

/// One job's throughput as `GET /v1/jobs/throughput` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobThroughput {
    /// The job id the reports were posted under (the Slurm job id under Slurm).
    pub job_id: String,
    /// Mean of the top 10 % (at least one) of the training-phase rates in the window, tokens/s.
    pub tokens_per_s: f64,
    /// The same aggregation of `samples_per_s`, over the training samples that carried it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_per_s: Option<f64>,
    /// The latest step reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Training-phase samples in the window (the aggregate's support).
    pub training_samples: usize,
    /// When the oldest training sample in the window arrived: every sample counted is at least
    /// this recent, so a cap applied before it was in force for all of them.
    pub window_start: DateTime<Utc>,
    /// When the latest training sample arrived.
    pub window_end: DateTime<Utc>,
    /// Reports of this job refused so far (any reason).
    pub refused: u64,
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    at: DateTime<Utc>,
    tokens: f64,
    samples: Option<f64>,
}

#[derive(Debug, Default)]
struct Window {
    training: VecDeque<Sample>,
    step: Option<u64>,
    last_report: Option<DateTime<Utc>>,
    refused: u64,
}

impl Window {
    fn prune(&mut self, now: DateTime<Utc>, window: TimeDelta) {
        while self.training.front().is_some_and(|s| now - s.at > window) {
            self.training.pop_front();
        }
    }

    fn tokens_figure(&self) -> Option<f64> {
        top_decile_mean(self.training.iter().map(|s| s.tokens).collect())
    }
}

/// The mean of the top 10 % (at least one) of `values`, `None` when empty.
fn top_decile_mean(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(|a, b| b.total_cmp(a));
    let keep = values.len().div_ceil(10).max(1);
    Some(values[..keep].iter().sum::<f64>() / keep as f64)
}

/// Every job's window on one node.
#[derive(Debug)]
pub struct JobWindows {
    window: TimeDelta,
    max_jobs: usize,
    jobs: BTreeMap<String, Window>,
    refusals: BTreeMap<&'static str, u64>,
}

impl Default for JobWindows {
    fn default() -> Self {
        Self::new(DEFAULT_WINDOW)
    }
}

/// Check one optional rate field.
fn check_rate(field: &'static str, value: f64) -> Result<(), Refusal> {
    if !value.is_finite() {
        return Err(Refusal::NotFinite { field });
    }
    if value < 0.0 {
        return Err(Refusal::Negative { field, value });
    }
    Ok(())
}

impl JobWindows {
    /// Windows of length `window` (at least a millisecond; the agent's configuration allows
    /// 1 to 600 s, the gateway's accelerated demo less).
    #[must_use]
    pub fn new(window: TimeDelta) -> Self {
        Self::with_max_jobs(window, MAX_JOBS)
    }

    /// Windows for at most `max_jobs` jobs at once ([`MAX_JOBS`] on one node; a simulated
    /// cluster holds every job of the cluster).
    #[must_use]
    pub fn with_max_jobs(window: TimeDelta, max_jobs: usize) -> Self {
        Self {
            max_jobs: max_jobs.max(1),
            window: window.max(TimeDelta::milliseconds(1)),
            jobs: BTreeMap::new(),
            refusals: BTreeMap::new(),
        }
    }

    /// The window's length.
    #[must_use]
    pub fn window(&self) -> TimeDelta {
        self.window
    }

    /// Screen and keep one report of `job` that arrived at `now`.
    pub fn record(&mut self, job: &str, report: &ThroughputReport, now: DateTime<Utc>) -> Result<(), Refusal> {
        let verdict = self.screen(job, report, now);
        match &verdict {
            Ok(()) => {
                let entry = self.jobs.entry(job.to_owned()).or_default();
                entry.last_report = Some(now);
                if let Some(step) = report.step {
                    entry.step = Some(step);
                }
                if report.phase == Phase::Train {
                    if entry.training.len() >= MAX_SAMPLES_PER_JOB {
                        entry.training.pop_front();
                    }
                    entry.training.push_back(Sample {
                        at: now,
                        tokens: report.tokens_per_s,
                        samples: report.samples_per_s,
                    });
                }
            }
            Err(refusal) => {
                *self.refusals.entry(refusal.code()).or_default() += 1;
                if let Some(entry) = self.jobs.get_mut(job) {
                    entry.refused += 1;
                }
            }
        }
        verdict
    }

    fn screen(&mut self, job: &str, report: &ThroughputReport, now: DateTime<Utc>) -> Result<(), Refusal> {
        check_rate("tokens_per_s", report.tokens_per_s)?;
        if let Some(s) = report.samples_per_s {
            check_rate("samples_per_s", s)?;
        }
        if report.tokens_per_s > MAX_TOKENS_PER_S {
            return Err(Refusal::Absurd {
                value: report.tokens_per_s,
            });
        }
        match self.jobs.get_mut(job) {
            Some(window) => {
                window.prune(now, self.window);
                if let Some(history) = window.tokens_figure()
                    && history > 0.0
                    && report.tokens_per_s > HISTORY_FACTOR * history
                {
                    return Err(Refusal::BeyondHistory {
                        value: report.tokens_per_s,
                        history,
                    });
                }
            }
            None => {
                if self.jobs.len() >= self.max_jobs {
                    self.forget_silent(now);
                }
                if self.jobs.len() >= self.max_jobs {
                    return Err(Refusal::TooManyJobs { max: self.max_jobs });
                }
            }
        }
        Ok(())
    }

    /// Drop jobs that sent nothing for a whole window.
    fn forget_silent(&mut self, now: DateTime<Utc>) {
        let window = self.window;
        self.jobs
            .retain(|_, w| w.last_report.is_some_and(|at| now - at <= window));
    }

    /// Forget a job (its end hook ran).
    pub fn forget(&mut self, job: &str) {
        self.jobs.remove(job);
    }

    /// The summary of every job with training samples in the window at `now`, in job order;
    /// jobs silent for a whole window are forgotten.
    pub fn summaries(&mut self, now: DateTime<Utc>) -> Vec<JobThroughput> {
        self.forget_silent(now);
        let window = self.window;
        self.jobs
            .iter_mut()
            .filter_map(|(id, w)| {
                w.prune(now, window);
                let tokens = w.tokens_figure()?;
                let first = w.training.front()?.at;
                let last = w.training.back()?.at;
                Some(JobThroughput {
                    job_id: id.clone(),
                    tokens_per_s: tokens,
                    samples_per_s: top_decile_mean(w.training.iter().filter_map(|s| s.samples).collect()),
                    step: w.step,
                    training_samples: w.training.len(),
                    window_start: first,
                    window_end: last,
                    refused: w.refused,
                })
            })
            .collect()
    }

    /// Reports refused so far, by [`Refusal::code`].
    #[must_use]
    pub fn refusals(&self) -> &BTreeMap<&'static str, u64> {
        &self.refusals
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("valid")
    }

    fn train(tokens: f64) -> ThroughputReport {
        ThroughputReport {
            tokens_per_s: tokens,
            samples_per_s: None,
            step: None,
            phase: Phase::Train,
        }
    }

    #[test]
    fn the_figure_is_the_top_decile_of_training_samples_in_the_window() {
        let mut w = JobWindows::new(TimeDelta::seconds(30));
        for i in 0..20 {
            w.record("7", &train(1000.0 + f64::from(i)), t0() + TimeDelta::seconds(i.into()))
                .expect("accepted");
        }
        // An evaluation pass at a rate far above training counts nowhere but the step.
        let eval = ThroughputReport {
            tokens_per_s: 50_000.0,
            step: Some(99),
            phase: Phase::Eval,
            ..train(0.0)
        };
        w.record("7", &eval, t0() + TimeDelta::seconds(20)).expect("accepted");
        let s = w.summaries(t0() + TimeDelta::seconds(20));
        assert_eq!(s.len(), 1);
        // top 10 % of 20 = 2 samples: (1019 + 1018) / 2
        assert_eq!(s[0].tokens_per_s, 1018.5);
        assert_eq!(s[0].training_samples, 20);
        assert_eq!(s[0].step, Some(99));
        assert_eq!(s[0].window_start, t0());
        // 35 s later the first 15 samples (0–5 s … 14 s) have aged out of the 30 s window.
        let later = w.summaries(t0() + TimeDelta::seconds(35));
        assert_eq!(later[0].training_samples, 15);
        assert_eq!(later[0].window_start, t0() + TimeDelta::seconds(5));
    }

    #[test]
    fn impossible_rates_are_refused_with_a_reason_and_counted() {
        let mut w = JobWindows::default();
        w.record("j", &train(1000.0), t0()).expect("accepted");
        let cases = [
            (train(f64::NAN), "not_finite"),
            (train(-1.0), "negative"),
            (train(2e9), "absurd"),
            (train(100_001.0), "beyond_history"),
            (
                ThroughputReport {
                    samples_per_s: Some(f64::INFINITY),
                    ..train(1.0)
                },
                "not_finite",
            ),
        ];
        for (report, code) in cases {
            let refusal = w.record("j", &report, t0()).expect_err("refused");
            assert_eq!(refusal.code(), code, "{refusal}");
        }
        // 100× exactly is still accepted; nothing refused reached the figure.
        w.record("j", &train(100_000.0), t0()).expect("accepted");
        let s = w.summaries(t0());
        assert_eq!(s[0].tokens_per_s, 100_000.0);
        assert_eq!(s[0].training_samples, 2);
        assert_eq!(s[0].refused, 5);
        assert_eq!(w.refusals().values().sum::<u64>(), 5);
    }

    #[test]
    fn a_jump_is_accepted_once_the_old_samples_have_aged_out() {
        let mut w = JobWindows::new(TimeDelta::seconds(10));
        w.record("j", &train(10.0), t0()).expect("accepted");
        assert!(w.record("j", &train(5000.0), t0() + TimeDelta::seconds(5)).is_err());
        w.record("j", &train(5000.0), t0() + TimeDelta::seconds(11))
            .expect("the warm-up sample has aged out");
    }

    #[test]
    fn silent_jobs_are_forgotten_and_the_job_count_is_bounded() {
        let mut w = JobWindows::new(TimeDelta::seconds(10));
        for j in 0..MAX_JOBS {
            w.record(&j.to_string(), &train(1.0), t0()).expect("accepted");
        }
        assert_eq!(
            w.record("new", &train(1.0), t0()),
            Err(Refusal::TooManyJobs { max: MAX_JOBS })
        );
        // Once the others have been silent for a window, the new job gets a place.
        w.record("new", &train(1.0), t0() + TimeDelta::seconds(11))
            .expect("accepted");
        assert_eq!(w.summaries(t0() + TimeDelta::seconds(11)).len(), 1);
    }

    #[test]
    fn a_job_with_only_non_training_samples_has_no_figure() {
        let mut w = JobWindows::default();
        let warm = ThroughputReport {
            phase: Phase::Warmup,
            ..train(5.0)
        };
        w.record("j", &warm, t0()).expect("accepted");
        assert!(w.summaries(t0()).is_empty());
    }
}
