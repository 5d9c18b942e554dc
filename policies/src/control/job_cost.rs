//! What a curtailment cost the jobs, from their measured throughput (`throughput_point`
//! records), folded one point at a time.
//!
//! The per-event audit sees every point of an event at once; the season's settlement reads the
//! interval store, which folds the ledger once, record by record, and cannot keep a season of
//! points. Both use this fold so that the two reports give one figure for one event.
//!
//! Per job: its **uncapped** throughput is the last uncapped point at or before the
//! curtailment started; its **capped** throughput is the time-weighted mean of its capped
//! points inside `[started, ended]`, each held until the job's next point or the end; its
//! slowdown is `1 − capped ÷ uncapped`, only when both were measured (nothing is modelled: a
//! job that reported nothing is `unmeasured`). Minutes over the tier count the time held at a
//! slowdown beyond the job's tier plus [`TIER_TOLERANCE`](super::evidence::TIER_TOLERANCE),
//! the tier being the latest the job reported up to the end.

use super::entry::ThroughputPoint;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One job's fold over one curtailment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobCostFold {
    /// Its uncapped tokens/s, the last before the start.
    pub uncapped: Option<f64>,
    /// Its tier, the latest up to the end.
    pub tier: Option<f64>,
    /// The capped point being held `(at, tokens/s)`, until the job's next point or the end.
    pub pending: Option<(DateTime<Utc>, f64)>,
    /// Σ tokens/s × seconds held under caps inside the window.
    pub weighted: f64,
    /// Σ seconds held.
    pub seconds: f64,
    /// Σ seconds held beyond the tier.
    pub over_s: f64,
}

/// What a curtailment cost one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobCost {
    /// The job.
    pub job: String,
    /// Its tier: the largest slowdown its owner accepts (absent: no tier).
    pub tier: Option<f64>,
    /// Its measured uncapped throughput, the last before the event (tokens/s).
    pub uncapped_tokens_per_s: Option<f64>,
    /// Its measured throughput under caps during the event, time-weighted (tokens/s).
    pub capped_tokens_per_s: Option<f64>,
    /// 1 − capped / uncapped, both measured.
    pub measured_slowdown: Option<f64>,
    /// Minutes during the event measured slower than the tier allows (with its tolerance).
    pub minutes_over_tier: Option<f64>,
    /// `measured` when both figures were measured, else `unmeasured` (nothing is modelled here:
    /// a slowdown the job did not report is not estimated for the auditor).
    pub throughput: &'static str,
}

/// The share of their uncapped throughput the jobs measured both ways kept.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MeasuredKept {
    /// How many jobs the figures are over.
    pub jobs: usize,
    /// Σ capped tokens/s ÷ Σ uncapped tokens/s.
    pub tokens_kept_share: f64,
    /// Mean of each job's capped ÷ uncapped, weighted by GPUs × priority as the plan weighed it
    /// (1 per job for plans recorded before notes).
    pub progress_kept_share: f64,
}

fn held_s(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds().max(0) as f64 / 1000.0
}

impl JobCostFold {
    /// Fold the job's next point (points in time order) for a curtailment from `started` to
    /// `ended` (either unknown: unbounded on that side).
    pub fn offer(&mut self, p: &ThroughputPoint, started: Option<DateTime<Utc>>, ended: Option<DateTime<Utc>>) {
        self.close(p.at, ended);
        if ended.is_none_or(|e| p.at <= e)
            && let Some(t) = p.max_slowdown
        {
            self.tier = Some(t);
        }
        if p.uncapped && started.is_none_or(|s| p.at <= s) {
            self.uncapped = Some(p.tokens_per_s);
        }
        let inside = started.is_none_or(|s| p.at >= s) && ended.is_none_or(|e| p.at <= e);
        self.pending = (!p.uncapped && inside).then_some((p.at, p.tokens_per_s));
    }

    /// Close the point held at `until` (bounded by `ended`).
    pub fn close(&mut self, until: DateTime<Utc>, ended: Option<DateTime<Utc>>) {
        let Some((at, tokens)) = self.pending.take() else {
            return;
        };
        let until = ended.map_or(until, |e| until.min(e));
        let held = held_s(at, until);
        self.weighted += tokens * held;
        self.seconds += held;
        if let (Some(t), Some(u)) = (self.tier, self.uncapped)
            && u > 0.0
            && 1.0 - tokens / u > t + super::evidence::TIER_TOLERANCE
        {
            self.over_s += held;
        }
    }

    /// The job's cost (a point still held counts up to `ended` when the curtailment ended).
    #[must_use]
    pub fn cost(&self, job: &str, ended: Option<DateTime<Utc>>) -> JobCost {
        let mut fold = self.clone();
        if let Some(e) = ended {
            fold.close(e, ended);
        }
        let capped = (fold.seconds > 0.0).then(|| fold.weighted / fold.seconds);
        let slowdown = match (capped, fold.uncapped) {
            (Some(c), Some(u)) if u > 0.0 => Some(1.0 - c / u),
            _ => None,
        };
        JobCost {
            job: job.to_string(),
            tier: fold.tier,
            uncapped_tokens_per_s: fold.uncapped,
            capped_tokens_per_s: capped,
            measured_slowdown: slowdown,
            minutes_over_tier: (fold.tier.is_some() && slowdown.is_some()).then_some(fold.over_s / 60.0),
            throughput: if slowdown.is_some() { "measured" } else { "unmeasured" },
        }
    }
}

/// [`MeasuredKept`] over the jobs measured both ways, each weighted by `weights` (default 1).
#[must_use]
pub fn measured_kept(jobs: &[JobCost], weights: &BTreeMap<String, f64>) -> Option<MeasuredKept> {
    let (mut n, mut capped, mut uncapped, mut progress, mut weight) = (0, 0.0, 0.0, 0.0, 0.0);
    for j in jobs {
        let (Some(u), Some(c)) = (j.uncapped_tokens_per_s, j.capped_tokens_per_s) else {
            continue;
        };
        if u <= 0.0 {
            continue;
        }
        let w = weights.get(&j.job).copied().unwrap_or(1.0);
        n += 1;
        capped += c;
        uncapped += u;
        progress += w * (c / u);
        weight += w;
    }
    (n > 0 && weight > 0.0).then(|| MeasuredKept {
        jobs: n,
        tokens_kept_share: capped / uncapped,
        progress_kept_share: progress / weight,
    })
}

/// One curtailment's fold over every job that reported, as the ledger goes by: what the
/// settlement's interval store keeps per event.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EventCostFold {
    /// When the site began curtailing for the event.
    pub started: Option<DateTime<Utc>>,
    /// When the event ended (`None`: still in force).
    pub ended: Option<DateTime<Utc>>,
    /// Jobs in the event's plans, with their objective weight (GPUs × priority) as the latest
    /// plan recorded it.
    pub planned: BTreeMap<String, f64>,
    /// Per job that reported during the curtailment.
    pub jobs: BTreeMap<String, JobCostFold>,
    /// What the flexibility curve promised for the ask (the first plan's).
    pub promised: Option<super::flexibility::FlexPromise>,
}

/// What an event cost the jobs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventCost {
    /// Jobs in the event's plans.
    pub jobs_planned: usize,
    /// Per planned job.
    pub jobs: Vec<JobCost>,
    /// The share the measured jobs kept (`None` when none was measured both ways).
    pub measured_kept: Option<MeasuredKept>,
    /// What the flexibility curve promised before the event.
    pub promised: Option<super::flexibility::FlexPromise>,
}

impl EventCostFold {
    /// A curtailment that started at `at`.
    #[must_use]
    pub fn starting(at: DateTime<Utc>) -> Self {
        Self {
            started: Some(at),
            ..Self::default()
        }
    }

    /// Still folding points.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.ended.is_none()
    }

    /// Fold a point; `before` is the job's last uncapped point before this one (the fold needs
    /// it for a job it has not seen yet).
    pub fn offer(&mut self, p: &ThroughputPoint, before: Option<(DateTime<Utc>, f64, Option<f64>)>) {
        let (started, ended) = (self.started, self.ended);
        let job = self.jobs.entry(p.job.clone()).or_insert_with(|| JobCostFold {
            uncapped: before
                .filter(|(at, _, _)| started.is_none_or(|s| *at <= s))
                .map(|(_, tokens, _)| tokens),
            tier: before.and_then(|(_, _, tier)| tier),
            ..JobCostFold::default()
        });
        job.offer(p, started, ended);
    }

    /// The curtailment ended at `at`: every point held closes there.
    pub fn end(&mut self, at: DateTime<Utc>) {
        self.ended = Some(at);
        for job in self.jobs.values_mut() {
            job.close(at, Some(at));
        }
    }

    /// The curtailment resumed (a later revision): folding goes on.
    pub fn resume(&mut self) {
        self.ended = None;
    }

    /// A plan made for the event.
    pub fn plan(&mut self, plan: &super::entry::PlanRecorded) {
        for (row, note) in plan.plan.rows.iter().zip(&plan.plan.notes) {
            self.planned.insert(row.job().to_string(), f64::from(note.0) * note.1);
        }
        for row in plan.plan.rows.iter().skip(plan.plan.notes.len()) {
            self.planned.entry(row.job().to_string()).or_insert(1.0);
        }
        if self.promised.is_none() {
            self.promised = plan.promised.as_deref().copied();
        }
    }

    /// What the event cost its planned jobs so far.
    #[must_use]
    pub fn cost(&self) -> EventCost {
        let jobs: Vec<JobCost> = self
            .planned
            .keys()
            .map(|job| {
                self.jobs.get(job).map_or_else(
                    || JobCostFold::default().cost(job, self.ended),
                    |f| f.cost(job, self.ended),
                )
            })
            .collect();
        EventCost {
            jobs_planned: jobs.len(),
            measured_kept: measured_kept(&jobs, &self.planned),
            jobs,
            promised: self.promised,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(s: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_700_000_000 + s, 0).single().expect("time")
    }

    fn point(s: i64, tokens: f64, uncapped: bool) -> ThroughputPoint {
        ThroughputPoint {
            at: at(s),
            job: "j".into(),
            cap_w_per_gpu: if uncapped { 700.0 } else { 450.0 },
            power_w: 4000.0,
            tokens_per_s: tokens,
            uncapped,
            max_slowdown: Some(0.1),
            profile: None,
            gpus: Some(8),
        }
    }

    #[test]
    fn capped_points_are_time_weighted_and_the_uncapped_one_is_the_last_before() {
        let points = [
            point(-60, 900.0, true),
            point(-30, 1000.0, true),
            point(0, 800.0, false),
            point(100, 900.0, false),
            point(400, 1000.0, true),
        ];
        let mut fold = JobCostFold::default();
        for p in &points {
            fold.offer(p, Some(at(0)), Some(at(300)));
        }
        let cost = fold.cost("j", Some(at(300)));
        assert_eq!(cost.uncapped_tokens_per_s, Some(1000.0));
        // 800 for 100 s, 900 for 200 s (the end bounds it).
        let capped = cost.capped_tokens_per_s.expect("measured");
        assert!((capped - (800.0 * 100.0 + 900.0 * 200.0) / 300.0).abs() < 1e-9);
        // 20 % slowdown beyond 10 % + 2 %: 100 s over the tier; 10 % is within.
        assert!((cost.minutes_over_tier.expect("tier") - 100.0 / 60.0).abs() < 1e-9);
        assert_eq!(cost.throughput, "measured");
    }

    #[test]
    fn the_event_fold_seeds_a_new_job_from_its_last_uncapped_point_and_closes_at_the_end() {
        let mut event = EventCostFold::starting(at(0));
        event.offer(&point(10, 500.0, false), Some((at(-5), 1000.0, Some(0.6))));
        event.end(at(70));
        event.planned.insert("j".into(), 8.0);
        let cost = event.cost();
        let job = &cost.jobs[0];
        assert_eq!(job.uncapped_tokens_per_s, Some(1000.0));
        assert_eq!(job.capped_tokens_per_s, Some(500.0));
        assert_eq!(job.measured_slowdown, Some(0.5));
        let kept = cost.measured_kept.expect("kept");
        assert!((kept.tokens_kept_share - 0.5).abs() < 1e-12);
        // An uncapped point after the start is not the job's uncapped figure.
        let mut late = EventCostFold::starting(at(0));
        late.offer(&point(10, 1000.0, true), None);
        late.planned.insert("j".into(), 1.0);
        assert_eq!(late.cost().jobs[0].throughput, "unmeasured");
    }
}
