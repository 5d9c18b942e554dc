//! The controller's look ahead: the forecast of the site's flexibility, from the jobs running
//! now, the scheduler's queue, what is known of each job, and what the site has seen of how long
//! jobs run and how busy it keeps its GPUs.
//!
//! The arithmetic is [`crate::forecast`]'s; this module gathers its inputs from the controller's
//! state, decides when a forecast is due, and records it. The queue arrives as
//! [`Input::Scheduler`](super::Input::Scheduler), read by the driver off the control path with a
//! deadline: a scheduler that hangs delays the next forecast, never a cap.

use super::Controller;
use super::cluster::{JobState, QueuedJob, SchedulerView};
use super::entry::{self, Entry, Recorded};
use super::{Effect, evidence};
use crate::alloc::{Elasticity, JobSpec, ShedProfile};
use crate::forecast::declare::{Declaration, DeclareError, DeclaredHour, Override};
use crate::forecast::runtime::RuntimeModel;
use crate::forecast::{Fill, ForecastInput, ForecastParams, JobTiming, REFRESH_S, available_within, screen};
use crate::ids::JobId;
use crate::pfi::CapGrid;
use crate::units::{Fraction, TokensPerSec, Watts, WattsPerGpu};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// How the gateway forecasts (`[forecast]` in the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ForecastSettings {
    /// The cost ceiling: the largest share of the objective's value the site accepts to lose
    /// for a shed (0.1: 10 % of GPU-weighted progress).
    pub cost_ceiling: f64,
    /// A change of the queue makes a new forecast at most this often, s (each one is recorded).
    pub min_refresh_s: i64,
}

impl Default for ForecastSettings {
    fn default() -> Self {
        Self {
            cost_ceiling: crate::forecast::DEFAULT_COST_CEILING,
            min_refresh_s: 60,
        }
    }
}

/// The time constant of the usual busy GPUs' running mean, s (a day: the site's usual load, not
/// this hour's).
const USUAL_BUSY_TAU_S: f64 = 86_400.0;

/// An expected start that moves by less than this is not a change of the queue, s.
const START_MOVE_S: i64 = 900;

/// What the controller keeps for its forecasts.
#[derive(Debug, Default)]
pub(crate) struct Outlook {
    /// The scheduler's last answer.
    scheduler: Option<SchedulerView>,
    /// The queue's shape when the last forecast was made (ids, GPUs, starts to 15 minutes).
    queue_fingerprint: Option<u64>,
    /// How long jobs run against their limits, learned from the jobs that ended (`jobs_changed`
    /// records, so a restart keeps it).
    pub(crate) runtime: RuntimeModel,
    /// The GPUs the site usually keeps busy: a running mean over a day, and when it was updated.
    usual_busy: Option<(DateTime<Utc>, f64)>,
    /// The queued jobs' profiles, for the specs they were made for.
    queued_profiles: Option<(Vec<JobSpec>, Arc<Vec<ShedProfile>>)>,
    /// The prior of jobs nothing is known of, from the jobs measured (as the planner uses it).
    pub(crate) fleet_prior: Option<Elasticity>,
    /// The declarations whose hours have not all passed (two days back), oldest first.
    declarations: std::collections::VecDeque<Arc<Declaration>>,
    /// The declared hours in force, made again at each declaration (see [`Outlook::declared_hours`]).
    pub(crate) declared_view: Arc<Vec<(Arc<Declaration>, DeclaredHour)>>,
}

/// Declarations kept in memory at most (the ledger keeps them all).
const DECLARATIONS_KEPT: usize = 200;

/// One fingerprint of a queue: what a forecast depends on, with starts to the quarter-hour.
fn fingerprint(view: &SchedulerView) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    match &view.queue {
        Err(_) => 0u8.hash(&mut h),
        Ok(jobs) => {
            1u8.hash(&mut h);
            for j in jobs {
                j.id.as_str().hash(&mut h);
                j.gpus.hash(&mut h);
                j.expected_start.map(|s| s.timestamp() / START_MOVE_S).hash(&mut h);
                j.time_limit_s.map(f64::to_bits).hash(&mut h);
            }
        }
    }
    h.finish()
}

impl Outlook {
    /// A declaration recorded: kept while its hours can still be asked about.
    pub(crate) fn declared(&mut self, d: &Declaration) {
        let horizon = d.at - chrono::Duration::days(2);
        self.declarations
            .retain(|old| old.hours.last().is_some_and(|h| h.end > horizon));
        self.declarations.push_back(Arc::new(d.clone()));
        while self.declarations.len() > DECLARATIONS_KEPT {
            self.declarations.pop_front();
        }
        self.declared_view = Arc::new(self.declared_hours());
    }

    /// The declared hours in force: for each hour, the latest declaration's figure, with that
    /// declaration (hours that have ended more than two days ago are dropped).
    #[must_use]
    fn declared_hours(&self) -> Vec<(Arc<Declaration>, DeclaredHour)> {
        let mut by_hour: std::collections::BTreeMap<DateTime<Utc>, (Arc<Declaration>, DeclaredHour)> =
            std::collections::BTreeMap::new();
        for d in &self.declarations {
            for h in &d.hours {
                by_hour.insert(h.start, (d.clone(), h.clone()));
            }
        }
        by_hour.into_values().collect()
    }

    /// The running mean of busy GPUs, moved to `busy` now.
    fn observe_busy(&mut self, busy: f64, now: DateTime<Utc>) {
        self.usual_busy = Some(match self.usual_busy {
            None => (now, busy),
            Some((at, mean)) => {
                let dt = (now - at).num_milliseconds().max(0) as f64 / 1000.0;
                let w = 1.0 - (-dt / USUAL_BUSY_TAU_S).exp();
                (now, mean + w * (busy - mean))
            }
        });
    }
}

/// What a queued job is taken to be: the GPUs it asked for, the site's typical per-GPU draw,
/// range and throughput, and the best knowledge of its configuration there is: what was measured
/// of a run with its signature, else the PFI it was tagged with, else the fleet prior.
fn queued_spec(
    job: &QueuedJob,
    typical: &JobSpec,
    evidence: &std::collections::HashMap<Arc<str>, evidence::JobEvidence>,
    prior: Option<&Elasticity>,
) -> JobSpec {
    let per_gpu = |v: f64| v / f64::from(typical.gpus.max(1));
    let g = f64::from(job.gpus);
    let mut spec = JobSpec {
        id: job.id.clone(),
        gpus: job.gpus,
        cap_range: typical.cap_range,
        uncapped_power: Watts(per_gpu(typical.uncapped_power.value()) * g),
        uncapped_tokens: TokensPerSec(per_gpu(typical.uncapped_tokens.value()) * g),
        elasticity: Elasticity::Unknown,
        max_slowdown: job.max_slowdown.and_then(|s| Fraction::new(s).ok()),
        priority: if job.priority.is_finite() && job.priority > 0.0 {
            job.priority
        } else {
            1.0
        },
    };
    let measured = job
        .signature
        .as_ref()
        .and_then(|s| evidence.get(s))
        .and_then(|e| e.learned(&spec));
    spec.elasticity = match (measured, job.pfi.filter(|p| p.is_finite() && *p > 0.0)) {
        (Some(learned), _) => learned.elasticity,
        (None, Some(value)) => Elasticity::Pfi {
            value,
            grid: CapGrid::fine_h200(),
        },
        (None, None) => prior.cloned().unwrap_or(Elasticity::Unknown),
    };
    spec
}

/// The running jobs' typical job, per GPU: the median draw and throughput per GPU, and the
/// widest common cap range. `None` without running jobs.
fn typical_job(plannable: &[JobSpec]) -> Option<JobSpec> {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied()
    };
    let per_gpu = |f: fn(&JobSpec) -> f64| median(plannable.iter().map(|j| f(j) / f64::from(j.gpus.max(1))).collect());
    let first = plannable.first()?;
    Some(JobSpec {
        id: JobId::from("typical"),
        gpus: 1,
        cap_range: crate::alloc::CapRange {
            min: WattsPerGpu(median(plannable.iter().map(|j| j.cap_range.min.value()).collect())?),
            max: WattsPerGpu(median(plannable.iter().map(|j| j.cap_range.max.value()).collect())?),
        },
        uncapped_power: Watts(per_gpu(|j| j.uncapped_power.value())?),
        uncapped_tokens: TokensPerSec(per_gpu(|j| j.uncapped_tokens.value())?),
        elasticity: Elasticity::Unknown,
        max_slowdown: None,
        priority: first.priority,
    })
}

impl Controller {
    /// An operator declares the site's availability for the forecast's hours, at `confidence`,
    /// with `overrides` of their own: checked, then recorded (`declared`). Refused, nothing is
    /// recorded.
    pub fn declare(
        &mut self,
        operator: &str,
        confidence: u8,
        overrides: &[Override],
        now: DateTime<Utc>,
    ) -> Result<(Declaration, Vec<Effect>), DeclareError> {
        let max_kw = Some(self.settings.site.facility_max_kw).filter(|m| *m > 0.0);
        let declaration =
            crate::forecast::declare::declare(self.forecast.as_deref(), operator, confidence, overrides, max_kw, now)?;
        let mut effects = Vec::new();
        self.record(&mut effects, Recorded::new(Entry::Declared(declaration.clone()), None));
        Ok((declaration, effects))
    }

    /// The scheduler's answer: kept for the next forecast, which is due at once when the queue
    /// changed (no more often than `forecast.min_refresh_s`).
    pub(crate) fn observe_scheduler(&mut self, view: SchedulerView) {
        self.outlook.scheduler = Some(view);
    }

    /// Learn from the running jobs: the usual busy GPUs.
    pub(crate) fn observe_busy(&mut self, jobs: &[JobState], now: DateTime<Utc>) {
        let busy: f64 = jobs.iter().map(|j| f64::from(j.spec.gpus)).sum();
        self.outlook.observe_busy(busy, now);
    }

    /// How long the jobs that ended ran against their limits, for the `jobs_changed` record.
    pub(crate) fn ended_runtimes(ended: &[&JobState], now: DateTime<Utc>) -> Vec<entry::EndedRuntime> {
        ended
            .iter()
            .filter_map(|job| {
                let started = job.started_at?;
                let limit_s = job
                    .time_limit_s
                    .filter(|l| l.is_finite() && *l > 0.0 && *l <= screen::MAX_TIME_LIMIT_S)?;
                let runtime_s = (now - started).num_milliseconds() as f64 / 1000.0;
                (runtime_s > 0.0).then(|| entry::EndedRuntime {
                    job: job.spec.id.clone(),
                    runtime_s: runtime_s.min(limit_s),
                    limit_s,
                })
            })
            .collect()
    }

    /// The forecast of the hours ahead, made again when the flexibility curve changed, when the
    /// queue changed, and at least every [`REFRESH_S`], and recorded.
    pub(crate) fn refresh_forecast(&mut self, plannable: &[JobSpec], now: DateTime<Utc>, effects: &mut Vec<Effect>) {
        let Some(curve) = self.flexibility.clone() else {
            self.forecast = None;
            return;
        };
        let settings = self.settings.forecast;
        let queue_print = self.outlook.scheduler.as_ref().map(fingerprint);
        // A new curve or queue makes a new forecast, no more often than `min_refresh_s` (during
        // an event the curve moves with every trim; each forecast is a ledger record).
        let due = self.forecast.as_ref().is_none_or(|f| {
            let age = (now - f.generated_at).num_seconds();
            age >= REFRESH_S
                || (age >= settings.min_refresh_s
                    && (f.generated_at < curve.at || queue_print != self.outlook.queue_fingerprint))
        });
        if !due {
            return;
        }
        let profiles = match self.planner.shed_profiles(plannable) {
            Ok(Some(p)) => p,
            Ok(None) | Err(_) => {
                self.forecast = None;
                return;
            }
        };
        self.outlook.queue_fingerprint = queue_print;
        // The forecast counts from the jobs' uncapped draw (what the site can offer in the hours
        // ahead); while an event's caps are in force the curve served says how much *more* it
        // can shed, so hour 0 is set to the planner's curve from uncapped instead.
        let during_event = curve.from == super::flexibility::FlexFrom::CurrentCaps;
        let curve_uncapped = if during_event {
            match &self.flexibility_source {
                Some(source) => Arc::new(super::flexibility::at_the_meter(source, &self.facility, now)),
                None => curve.clone(),
            }
        } else {
            curve.clone()
        };

        // The running jobs, in plan order, with their clocks screened.
        let by_id: std::collections::HashMap<&JobId, &JobState> = self.jobs.iter().map(|j| (&j.spec.id, j)).collect();
        let (mut timing, mut doubts) = screen::running(
            plannable.iter().map(|s| {
                let job = by_id.get(&s.id);
                (
                    s.id.as_str(),
                    job.and_then(|j| j.started_at),
                    job.and_then(|j| j.time_limit_s),
                )
            }),
            now,
        );
        let limits_known = timing
            .iter()
            .filter(|t| matches!(t, JobTiming::Running { limit_s: Some(_), .. }))
            .count();

        // The queue, screened, each job costed by the best knowledge of it.
        let queue = screen::queue(self.outlook.scheduler.as_ref(), now);
        doubts.extend(queue.notes.iter().cloned());
        let mut gpus: Vec<u32> = plannable.iter().map(|j| j.gpus).collect();
        let mut all_profiles = profiles.clone();
        let queued_count = queue.jobs.len();
        if let Some(typical) = typical_job(plannable)
            && !queue.jobs.is_empty()
        {
            let specs: Vec<JobSpec> = queue
                .jobs
                .iter()
                .map(|(job, _)| queued_spec(job, &typical, &self.evidence, self.outlook.fleet_prior.as_ref()))
                .collect();
            let cached = self
                .outlook
                .queued_profiles
                .as_ref()
                .filter(|(for_specs, _)| *for_specs == specs)
                .map(|(_, p)| p.clone());
            let queued_profiles = match cached {
                Some(p) => Some(p),
                None => match self.planner.shed_profiles_apart(&specs) {
                    Ok(Some(p)) => {
                        let p = Arc::new(p);
                        self.outlook.queued_profiles = Some((specs, p.clone()));
                        Some(p)
                    }
                    Ok(None) => None,
                    Err(e) => {
                        doubts.push(format!("the queued jobs could not be costed ({e}): left out"));
                        None
                    }
                },
            };
            if let Some(p) = queued_profiles {
                all_profiles.extend(p.iter().cloned());
                gpus.extend(queue.jobs.iter().map(|(j, _)| j.gpus));
                timing.extend(queue.jobs.iter().map(|(_, t)| *t));
            }
        }

        let busy_now: f64 = plannable.iter().map(|j| f64::from(j.gpus)).sum();
        let usual = self.outlook.usual_busy.map_or(busy_now, |(_, m)| m);
        let fill = Fill::from_mix(profiles.iter().zip(plannable.iter().map(|j| j.gpus)), usual, 0.5);
        let meter_per_gpu_w = self
            .facility
            .forward_reduction(Watts(1000.0), crate::facility::Timing::Settled)
            .map_or(1.0, |m| m.lo.value());
        let params = ForecastParams {
            cost_ceiling: settings.cost_ceiling,
            ..ForecastParams::default()
        };
        let mut made = crate::forecast::forecast(&ForecastInput {
            now,
            profiles: &all_profiles,
            gpus: &gpus,
            timing: &timing,
            runtime: &self.outlook.runtime,
            fill: fill.as_ref(),
            meter_per_gpu_w,
            now_available_w: Some(available_within(&curve_uncapped, settings.cost_ceiling)),
            params,
        });
        made.basis = self.basis(plannable.len(), busy_now, limits_known, &queue, queued_count, usual);
        if during_event {
            made.basis.insert(
                1,
                "an event's caps are in force: the forecast counts from the jobs' uncapped draw (what the site can offer once \
                 it ends); GET /v1/flexibility says how much more it can shed now"
                    .into(),
            );
        }
        made.basis.extend(doubts);
        let event = self.binding_event();
        self.record(
            effects,
            Recorded::new(
                Entry::Forecast(entry::ForecastRecorded {
                    at: now,
                    objective: self.planner.objective(),
                    cost_ceiling: made.cost_ceiling,
                    basis: made.basis.clone(),
                    hourly: made.hourly(),
                    queued_jobs: Some(queued_count),
                }),
                event,
            ),
        );
        self.forecast = Some(Arc::new(made));
    }

    /// What a forecast stands on, in words.
    fn basis(
        &self,
        running: usize,
        busy_now: f64,
        limits_known: usize,
        queue: &screen::ScreenedQueue,
        queued: usize,
        usual: f64,
    ) -> Vec<String> {
        let runtime = &self.outlook.runtime;
        let mut basis = vec![format!(
            "the {running} jobs running now ({busy_now:.0} GPUs, {limits_known} with a time limit), each costed by the plans' own estimate; hour 0 is the flexibility curve now"
        )];
        basis.push(if runtime.learned() {
            format!(
                "jobs end before their limits as the {} jobs that ended here did",
                runtime.shares.len()
            )
        } else {
            format!(
                "jobs end before their limits as batch jobs usually do (a prior: {} of {} jobs needed have ended here)",
                runtime.shares.len(),
                crate::forecast::runtime::MIN_SAMPLES
            )
        });
        if queue.known {
            basis.push(if queued == 0 {
                "the scheduler's queue is empty: GPUs freed are filled by jobs not known yet, so the band widens with the horizon".into()
            } else {
                format!(
                    "{queued} queued jobs, starting around the scheduler's expected starts, each costed by a run of its configuration measured here, else its tagged PFI, else the fleet prior"
                )
            });
        } else {
            basis.push(
                "no queue from the scheduler: when each job ends is a guess from its limit, and the GPUs they free are assumed kept as busy as usual by jobs not known yet: the band widens with the horizon for that"
                    .into(),
            );
        }
        basis.push(format!(
            "the site usually keeps {usual:.0} GPUs busy (a running mean over a day)"
        ));
        basis
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::CapRange;

    fn spec(id: &str, gpus: u32, w_per_gpu: f64) -> JobSpec {
        JobSpec {
            id: JobId::from(id),
            gpus,
            cap_range: CapRange {
                min: WattsPerGpu(200.0),
                max: WattsPerGpu(700.0),
            },
            uncapped_power: Watts(w_per_gpu * f64::from(gpus)),
            uncapped_tokens: TokensPerSec(1000.0 * f64::from(gpus)),
            elasticity: Elasticity::Unknown,
            max_slowdown: None,
            priority: 1.0,
        }
    }

    fn queued(pfi: Option<f64>, signature: Option<&str>) -> QueuedJob {
        QueuedJob {
            id: JobId::from("q1"),
            gpus: 16,
            signature: signature.map(Arc::from),
            pfi,
            max_slowdown: Some(0.25),
            priority: f64::NAN,
            expected_start: None,
            time_limit_s: None,
        }
    }

    #[test]
    fn a_queued_job_is_sized_from_the_typical_running_job_and_takes_the_best_knowledge() {
        let typical = typical_job(&[spec("a", 8, 600.0), spec("b", 4, 640.0), spec("c", 8, 680.0)]).expect("typical");
        let prior = Elasticity::PredictedPfi {
            mean: 1.8,
            sd: 0.3,
            grid: None,
        };
        let none = std::collections::HashMap::new();
        let s = queued_spec(&queued(None, None), &typical, &none, Some(&prior));
        assert_eq!(s.gpus, 16);
        assert!(
            (s.uncapped_power.value() - 16.0 * 640.0).abs() < 1e-9,
            "{:?}",
            s.uncapped_power
        );
        assert_eq!(s.elasticity, prior, "nothing known: the fleet prior");
        assert_eq!(s.priority, 1.0, "a NaN priority is read as 1");
        assert_eq!(s.max_slowdown, Fraction::new(0.25).ok());
        let tagged = queued_spec(&queued(Some(2.4), Some("never-seen")), &typical, &none, Some(&prior));
        assert!(matches!(tagged.elasticity, Elasticity::Pfi { value, .. } if value == 2.4));
        let unknown = queued_spec(&queued(None, None), &typical, &none, None);
        assert_eq!(unknown.elasticity, Elasticity::Unknown);
    }

    #[test]
    fn the_usual_busy_gpus_move_slowly_toward_now() {
        let mut o = Outlook::default();
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("valid");
        o.observe_busy(100.0, t0);
        o.observe_busy(0.0, t0 + chrono::Duration::hours(1));
        let (_, m) = o.usual_busy.expect("set");
        assert!(m > 90.0 && m < 100.0, "an hour of idle moves a day's mean by ~4 %: {m}");
    }
}
