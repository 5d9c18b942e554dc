//! What a scheduler says of its jobs' times, read as evidence, not as truth.
//!
//! A forecast made on nonsense would be promised to a utility, so every time the scheduler
//! gives is screened before use: a queued job expected to have started well in the past, a job
//! that would end before it starts (a non-positive limit), a running job that started in the
//! future, a time limit of years, a queue of a hundred thousand jobs. None of these stops the
//! forecast: the figure in doubt is taken as *unknown* (the runtime model's wider guess stands
//! in for it), so the band widens, and the forecast's basis says why, in counts with an example,
//! never one line per job.

use super::JobTiming;
use crate::control::cluster::{QueuedJob, SchedulerView};
use chrono::{DateTime, Utc};
use std::collections::HashSet;

/// Queued jobs the forecast takes at most: those expected soonest (a queue beyond this is
/// mostly jobs that cannot start within 48 hours anyway, and each one costs the forecast time).
pub const MAX_QUEUED_JOBS: usize = 10_000;

/// The longest time limit taken as meant, s (31 days): Slurm sites rarely allow more than a
/// week or two; a limit of years is a typo or a placeholder for "unlimited", and is read as
/// unlimited (the heavy-tailed guess).
pub const MAX_TIME_LIMIT_S: f64 = 31.0 * 86_400.0;

/// How far in the past a queued job's expected start may lie and still be read as "now", s: a
/// scheduler's estimates are refreshed every few minutes, so a slightly stale one is normal.
pub const START_GRACE_S: f64 = 900.0;

/// How far in the future a running job's start may lie before it is taken as unknown, s (clock
/// skew between the scheduler and the gateway).
pub const CLOCK_SKEW_S: f64 = 300.0;

/// The most GPUs one job may ask for and still be counted.
pub const MAX_JOB_GPUS: u32 = 65_536;

/// A queue answer older than this is not used, s: its expected starts have moved since.
pub const QUEUE_STALE_S: i64 = 900;

/// The queue as the forecast takes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScreenedQueue {
    /// The jobs kept, each with the timing the forecast uses, soonest expected first.
    pub jobs: Vec<(QueuedJob, JobTiming)>,
    /// What the scheduler said that was not taken as said, and why the band is wider for it.
    pub notes: Vec<String>,
    /// Whether the queue is known (the scheduler answered, recently); when not, the forecast
    /// stands on the running jobs and the site's usual load alone.
    pub known: bool,
}

/// Counts of one kind of doubtful figure, with the first job it was seen on.
#[derive(Debug, Default)]
struct Tally {
    count: usize,
    example: Option<String>,
}

impl Tally {
    fn add(&mut self, id: &str) {
        self.count += 1;
        if self.example.is_none() {
            self.example = Some(id.to_string());
        }
    }

    fn note(&self, what: &str, taken_as: &str, notes: &mut Vec<String>) {
        if let Some(example) = &self.example {
            notes.push(format!("{} {what} (e.g. job {example}): {taken_as}", self.count));
        }
    }
}

fn limit_tally(limit_s: Option<f64>, id: &str, years: &mut Tally, before_start: &mut Tally) -> Option<f64> {
    match limit_s {
        Some(l) if l.is_finite() && l > 0.0 && l <= MAX_TIME_LIMIT_S => Some(l),
        Some(l) if l.is_finite() && l > MAX_TIME_LIMIT_S => {
            years.add(id);
            None
        }
        Some(_) => {
            before_start.add(id);
            None
        }
        None => None,
    }
}

/// The running jobs' timings, in their order, and what was doubtful in them. Each job is given
/// as its id, its start and its time limit in seconds, as the scheduler said them.
#[must_use]
pub fn running<'j>(
    jobs: impl IntoIterator<Item = (&'j str, Option<DateTime<Utc>>, Option<f64>)>,
    now: DateTime<Utc>,
) -> (Vec<JobTiming>, Vec<String>) {
    let (mut future, mut years, mut before_start, mut past_limit) =
        (Tally::default(), Tally::default(), Tally::default(), Tally::default());
    let timings = jobs
        .into_iter()
        .map(|(id, started_at, time_limit_s)| {
            let elapsed_s = match started_at {
                Some(at) => {
                    let s = (now - at).num_milliseconds() as f64 / 1000.0;
                    if s < -CLOCK_SKEW_S {
                        future.add(id);
                        0.0
                    } else {
                        s.max(0.0)
                    }
                }
                None => 0.0,
            };
            let limit_s = limit_tally(time_limit_s, id, &mut years, &mut before_start);
            if limit_s.is_some_and(|l| elapsed_s >= l) {
                past_limit.add(id);
            }
            JobTiming::Running { elapsed_s, limit_s }
        })
        .collect();
    let mut notes = Vec::new();
    future.note(
        "running jobs started in the future by the scheduler's clock",
        "taken as just started",
        &mut notes,
    );
    years.note(
        "time limits longer than 31 days",
        "read as no limit (a heavy-tailed guess of when they end)",
        &mut notes,
    );
    before_start.note(
        "time limits that end before the job starts (zero or negative)",
        "read as no limit",
        &mut notes,
    );
    past_limit.note(
        "running jobs past their time limit",
        "counted as ending now (the scheduler ends a job at its limit)",
        &mut notes,
    );
    (timings, notes)
}

/// The queue as the forecast takes it from `view` (the scheduler's last answer, if any).
#[must_use]
pub fn queue(view: Option<&SchedulerView>, now: DateTime<Utc>) -> ScreenedQueue {
    let Some(view) = view else {
        return ScreenedQueue {
            notes: vec!["the scheduler's queue has not been read yet".into()],
            ..ScreenedQueue::default()
        };
    };
    let said = match &view.queue {
        Err(why) => {
            return ScreenedQueue {
                notes: vec![format!("no queue from the scheduler: {why}")],
                ..ScreenedQueue::default()
            };
        }
        Ok(jobs) => jobs,
    };
    let age_s = (now - view.at).num_seconds();
    if age_s > QUEUE_STALE_S {
        return ScreenedQueue {
            notes: vec![format!(
                "the scheduler's queue was last read {} minutes ago, too long for its expected starts to hold",
                age_s / 60
            )],
            ..ScreenedQueue::default()
        };
    }
    let (mut past, mut years, mut before_start, mut no_gpus, mut huge, mut duplicate) = (
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
        Tally::default(),
    );
    let mut seen = HashSet::with_capacity(said.len().min(4 * MAX_QUEUED_JOBS));
    let mut kept: Vec<(f64, &QueuedJob, JobTiming)> = Vec::with_capacity(said.len().min(4 * MAX_QUEUED_JOBS));
    for job in said {
        let id = job.id.as_str();
        if job.gpus == 0 {
            no_gpus.add(id);
            continue;
        }
        if job.gpus > MAX_JOB_GPUS {
            huge.add(id);
            continue;
        }
        if !seen.insert(id) {
            duplicate.add(id);
            continue;
        }
        let start_in_s = job.expected_start.and_then(|at| {
            let s = (at - now).num_milliseconds() as f64 / 1000.0;
            if s < -START_GRACE_S {
                past.add(id);
                None
            } else {
                Some(s.max(0.0))
            }
        });
        let limit_s = limit_tally(job.time_limit_s, id, &mut years, &mut before_start);
        kept.push((
            start_in_s.unwrap_or(f64::INFINITY),
            job,
            JobTiming::Queued {
                expected_start_in_s: start_in_s,
                limit_s,
            },
        ));
    }
    let mut notes = Vec::new();
    past.note(
        "queued jobs expected to have started in the past",
        "their start is taken as unknown (the site's usual queue wait)",
        &mut notes,
    );
    years.note("time limits longer than 31 days", "read as no limit", &mut notes);
    before_start.note(
        "queued jobs that would end before they start (a zero or negative limit)",
        "read as no limit",
        &mut notes,
    );
    no_gpus.note("queued jobs ask for no GPU", "not counted", &mut notes);
    huge.note(
        &format!("queued jobs ask for more than {MAX_JOB_GPUS} GPUs"),
        "not counted",
        &mut notes,
    );
    duplicate.note("queued jobs listed twice", "counted once", &mut notes);
    if kept.len() > MAX_QUEUED_JOBS {
        // The soonest first; ties (and unknown starts) by the scheduler's order.
        kept.select_nth_unstable_by(MAX_QUEUED_JOBS, |a, b| a.0.total_cmp(&b.0));
        kept.truncate(MAX_QUEUED_JOBS);
        notes.push(format!(
            "the queue holds {} jobs: the forecast takes the {MAX_QUEUED_JOBS} expected to start soonest",
            said.len()
        ));
    }
    kept.sort_by(|a, b| a.0.total_cmp(&b.0));
    ScreenedQueue {
        jobs: kept.into_iter().map(|(_, job, timing)| (job.clone(), timing)).collect(),
        notes,
        known: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::JobId;
    use chrono::Duration;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("valid")
    }

    fn queued(id: &str, start_in_s: Option<i64>, limit_s: Option<f64>) -> QueuedJob {
        QueuedJob {
            id: JobId::from(id),
            gpus: 8,
            signature: None,
            pfi: None,
            max_slowdown: None,
            priority: 1.0,
            expected_start: start_in_s.map(|s| now() + Duration::seconds(s)),
            time_limit_s: limit_s,
        }
    }

    fn view(jobs: Vec<QueuedJob>) -> SchedulerView {
        SchedulerView {
            at: now(),
            queue: Ok(jobs),
        }
    }

    #[test]
    fn absurd_times_are_read_as_unknown_and_said() {
        let v = view(vec![
            queued("ok", Some(3600), Some(7200.0)),
            queued("past", Some(-86_400), Some(7200.0)),
            queued("stale-by-a-minute", Some(-60), Some(7200.0)),
            queued("years", Some(600), Some(3.0 * 365.0 * 86_400.0)),
            queued("backwards", Some(600), Some(-3600.0)),
            queued("nan", Some(600), Some(f64::NAN)),
        ]);
        let q = queue(Some(&v), now());
        assert!(q.known);
        let timing = |id: &str| q.jobs.iter().find(|(j, _)| j.id.as_str() == id).expect(id).1;
        assert_eq!(
            timing("ok"),
            JobTiming::Queued {
                expected_start_in_s: Some(3600.0),
                limit_s: Some(7200.0)
            }
        );
        assert_eq!(
            timing("past"),
            JobTiming::Queued {
                expected_start_in_s: None,
                limit_s: Some(7200.0)
            }
        );
        assert_eq!(
            timing("stale-by-a-minute"),
            JobTiming::Queued {
                expected_start_in_s: Some(0.0),
                limit_s: Some(7200.0)
            }
        );
        for id in ["years", "backwards", "nan"] {
            assert!(matches!(timing(id), JobTiming::Queued { limit_s: None, .. }), "{id}");
        }
        let notes = q.notes.join("\n");
        assert!(
            notes.contains("1 queued jobs expected to have started in the past (e.g. job past)"),
            "{notes}"
        );
        assert!(notes.contains("longer than 31 days (e.g. job years)"), "{notes}");
        assert!(
            notes.contains("2 queued jobs that would end before they start"),
            "{notes}"
        );
    }

    #[test]
    fn running_jobs_from_the_future_past_their_limit_or_with_absurd_limits_are_said() {
        let (t, notes) = running(
            [
                ("ok", Some(now() - Duration::hours(2)), Some(4.0 * 3600.0)),
                ("future", Some(now() + Duration::hours(3)), Some(3600.0)),
                ("over", Some(now() - Duration::hours(5)), Some(3600.0)),
                ("years", Some(now() - Duration::hours(1)), Some(1e9)),
                ("unsaid", None, None),
            ],
            now(),
        );
        assert_eq!(
            t[0],
            JobTiming::Running {
                elapsed_s: 7200.0,
                limit_s: Some(14_400.0)
            }
        );
        assert_eq!(
            t[1],
            JobTiming::Running {
                elapsed_s: 0.0,
                limit_s: Some(3600.0)
            }
        );
        assert!(matches!(t[3], JobTiming::Running { limit_s: None, .. }));
        assert_eq!(
            t[4],
            JobTiming::Running {
                elapsed_s: 0.0,
                limit_s: None
            }
        );
        let notes = notes.join("\n");
        assert!(notes.contains("by the scheduler's clock (e.g. job future)"), "{notes}");
        assert!(notes.contains("past their time limit (e.g. job over)"), "{notes}");
        assert!(notes.contains("longer than 31 days (e.g. job years)"), "{notes}");
    }

    #[test]
    fn a_huge_queue_is_cut_to_the_soonest_and_said() {
        let jobs: Vec<QueuedJob> = (0..100_000)
            .map(|i| queued(&format!("j{i}"), Some(100_000 - i64::from(i)), Some(3600.0)))
            .collect();
        let q = queue(Some(&view(jobs)), now());
        assert_eq!(q.jobs.len(), MAX_QUEUED_JOBS);
        let starts: Vec<f64> = q
            .jobs
            .iter()
            .map(|(_, t)| match t {
                JobTiming::Queued {
                    expected_start_in_s: Some(s),
                    ..
                } => *s,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(starts.windows(2).all(|w| w[0] <= w[1]), "soonest first");
        assert!(
            starts.last().is_some_and(|&s| s <= f64::from(MAX_QUEUED_JOBS as u32)),
            "the soonest kept"
        );
        assert!(q.notes.iter().any(|n| n.contains("100000 jobs")), "{:?}", q.notes);
    }

    #[test]
    fn no_answer_a_stale_one_and_none_yet_are_unknown_queues_with_a_reason() {
        let failed = SchedulerView {
            at: now(),
            queue: Err("squeue timed out after 10 s".into()),
        };
        let q = queue(Some(&failed), now());
        assert!(!q.known && q.jobs.is_empty());
        assert!(q.notes[0].contains("squeue timed out"), "{:?}", q.notes);
        let stale = SchedulerView {
            at: now() - Duration::hours(2),
            queue: Ok(vec![queued("a", Some(60), None)]),
        };
        let q = queue(Some(&stale), now());
        assert!(!q.known && q.notes[0].contains("120 minutes ago"), "{:?}", q.notes);
        let q = queue(None, now());
        assert!(!q.known && q.notes[0].contains("not been read yet"));
    }

    #[test]
    fn jobs_without_gpus_too_many_or_twice_are_not_counted_twice() {
        let mut zero = queued("zero", Some(60), None);
        zero.gpus = 0;
        let mut huge = queued("huge", Some(60), None);
        huge.gpus = u32::MAX;
        let q = queue(
            Some(&view(vec![
                zero,
                huge,
                queued("a", Some(60), None),
                queued("a", Some(90), None),
            ])),
            now(),
        );
        assert_eq!(q.jobs.len(), 1);
        assert_eq!(q.notes.len(), 3, "{:?}", q.notes);
    }
}
