//! The scheduler's queue as bad input (issue 33): a scheduler that never answers, one that
//! fails, and one that answers a hundred thousand jobs with absurd times. Each time the control
//! loop goes on (an event is planned and capped as if nothing happened), and the forecast is
//! made on what could be believed, saying why the rest was not.
//!
//! The cluster is the simulated one, wrapped so that its queue answers as each test needs; the
//! gateway runs its real control loop and queue reader.
#![allow(clippy::disallowed_methods, reason = "test events run on the wall clock")]

mod common;

use chrono::{Duration as ChronoDuration, SecondsFormat, Utc};
use common::agent::wait_for;
use flexgate::cluster::sim::{SimCluster, SimConfig};
use flexgate::cluster::{BackendError, CapCommand, CapResult, ClusterBackend, JobState, QueuedJob, Telemetry};
use flexgate::config::{Config, facility_for_nodes};
use flexgate::ledger::Ledger;
use flexgate::runtime::{Clock, Gateway, Transport};
use flexgate_policies::event::EventSource;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the wrapped scheduler answers for its queue.
#[derive(Debug, Clone, Copy)]
enum Queue {
    /// Never (a hung slurmctld).
    Hangs,
    /// With an error.
    Fails,
    /// 100 000 jobs, a third expected to have started yesterday, a third with limits of years,
    /// a third ending before they start.
    Absurd,
}

/// The simulated cluster, with a queue that answers as told.
struct OddScheduler {
    sim: Arc<SimCluster>,
    queue: Queue,
}

#[async_trait::async_trait]
impl ClusterBackend for OddScheduler {
    async fn inventory(&self) -> Result<Vec<JobState>, BackendError> {
        self.sim.inventory().await
    }
    async fn apply(&self, commands: &[CapCommand]) -> Vec<CapResult> {
        self.sim.apply(commands).await
    }
    async fn telemetry(&self) -> Result<Telemetry, BackendError> {
        self.sim.telemetry().await
    }
    fn name(&self) -> &str {
        "odd-scheduler"
    }
    async fn queue(&self) -> Option<Result<Vec<QueuedJob>, BackendError>> {
        match self.queue {
            Queue::Hangs => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Some(Ok(Vec::new()))
            }
            Queue::Fails => Some(Err(BackendError::Unreachable("slurmctld: connection refused".into()))),
            Queue::Absurd => {
                let now = Utc::now();
                Some(Ok((0..100_000u32)
                    .map(|i| QueuedJob {
                        id: format!("q{i}").into(),
                        gpus: 8,
                        signature: Some(format!("cfg-{}", i % 50).into()),
                        pfi: None,
                        max_slowdown: None,
                        priority: 1.0,
                        expected_start: Some(match i % 3 {
                            0 => now - ChronoDuration::days(1),
                            _ => now + ChronoDuration::minutes(i64::from(i % 2880)),
                        }),
                        time_limit_s: Some(match i % 3 {
                            1 => 5.0 * 365.0 * 86_400.0,
                            2 => -3600.0,
                            _ => 4.0 * 3600.0,
                        }),
                    })
                    .collect()))
            }
        }
    }
}

async fn start(dir: &std::path::Path, queue: Queue) -> (Arc<Gateway>, tokio::sync::oneshot::Sender<()>) {
    let nodes = 16;
    let sim = SimCluster::new(SimConfig {
        nodes,
        seed: 5,
        settle_ms: 0,
        facility: facility_for_nodes(nodes),
        ..SimConfig::default()
    })
    .expect("sim");
    let mut config = Config::default();
    config.gateway.data_dir = dir.to_path_buf();
    config.gateway.site = "site-1".into();
    config.gateway.telemetry_interval_s = 1;
    config.facility = facility_for_nodes(nodes);
    config.forecast.queue_poll_s = 1;
    config.forecast.queue_deadline_s = 2;
    config.forecast.min_refresh_s = 1;
    let ledger = Ledger::open(&dir.join("ledger")).await.expect("ledger");
    let backend: Arc<dyn ClusterBackend> = Arc::new(OddScheduler { sim, queue });
    let gw = Gateway::start(config, Clock::real(), ledger, backend)
        .await
        .expect("gateway");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(gw.driver().clone().control_loop(async {
        let _ = stopped.await;
    }));
    (gw, stop)
}

/// The forecast's basis once it mentions `needle`.
async fn basis_saying(gw: &Gateway, needle: &str) -> Vec<String> {
    wait_for(
        &format!("a forecast saying {needle:?}"),
        Duration::from_secs(30),
        || async {
            let f = gw.read().forecast().await.ok_or("no forecast")?;
            if f.basis.iter().any(|b| b.contains(needle)) {
                Ok(f.basis.clone())
            } else {
                Err(format!("{:?}", f.basis))
            }
        },
    )
    .await
}

/// An event 5 kW under the meter now, starting now, through the same intake as HTTP's.
async fn submit_event(gw: &Gateway) {
    let meter_kw = wait_for("a meter reading", Duration::from_secs(10), || async {
        gw.read()
            .status()
            .await
            .meter_kw()
            .ok_or_else(|| "no reading".to_string())
    })
    .await;
    let start = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let doc = json!({
        "schema": "dr.event/1", "event_id": "ev-1", "revision": 1, "site": "site-1",
        "target": {"form": "ceiling", "point": "meter", "kw": meter_kw - 5.0},
        "window": {"start": start, "ramp_s": 0, "duration_s": 600, "recovery_s": 0}
    });
    gw.driver()
        .submit(
            flexgate::grid::dr_event::submission(&serde_json::to_vec(&doc).expect("JSON"), EventSource::Http),
            Transport::Http { peer: None },
        )
        .await
        .expect("accepted");
}

async fn a_plan_within(gw: &Gateway, limit: Duration) {
    wait_for("a plan for the event", limit, || async {
        gw.read()
            .plan()
            .await
            .filter(|p| !p.entries.is_empty())
            .map(|_| ())
            .ok_or_else(|| "no plan".to_string())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_that_never_answers_delays_no_cap_and_the_forecast_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, stop) = start(dir.path(), Queue::Hangs).await;
    // The queue's read hangs; the control loop plans and caps the event all the same.
    let t = Instant::now();
    submit_event(&gw).await;
    a_plan_within(&gw, Duration::from_secs(5)).await;
    println!(
        "event planned {:.2} s after it was submitted, the queue's read hanging",
        t.elapsed().as_secs_f64()
    );
    let basis = basis_saying(&gw, "did not answer within 2 s").await;
    assert!(
        basis.iter().any(|b| b.contains("no queue from the scheduler")),
        "it stands on the running jobs and the usual load: {basis:?}"
    );
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_scheduler_is_said_and_the_band_stays_ordered() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, stop) = start(dir.path(), Queue::Fails).await;
    let basis = basis_saying(&gw, "connection refused").await;
    assert!(
        basis.iter().any(|b| b.contains("no queue from the scheduler")),
        "{basis:?}"
    );
    let f = gw.read().forecast().await.expect("forecast");
    assert!(
        f.steps
            .iter()
            .all(|s| s.available_w.p10 <= s.available_w.p50 && s.available_w.p50 <= s.available_w.p90)
    );
    let _ = stop.send(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_100k_jobs_with_absurd_times_is_screened_and_said_and_the_loop_goes_on() {
    let dir = tempfile::tempdir().expect("dir");
    let (gw, stop) = start(dir.path(), Queue::Absurd).await;
    let basis = basis_saying(&gw, "100000 jobs").await;
    let all = basis.join("\n");
    for needle in [
        "the forecast takes the 10000 expected to start soonest",
        "expected to have started in the past",
        "time limits longer than 31 days",
        "would end before they start",
    ] {
        assert!(all.contains(needle), "{needle:?} in {all}");
    }
    let f = gw.read().forecast().await.expect("forecast");
    assert_eq!(f.steps.len(), 192);
    assert!(
        f.steps
            .iter()
            .all(|s| s.available_w.p10 <= s.available_w.p50 && s.available_w.p50 <= s.available_w.p90)
    );
    // The record follows the snapshot by one flush.
    wait_for(
        "the forecast recorded with the jobs it counted",
        Duration::from_secs(10),
        || async {
            let counted: Vec<Value> = gw
                .ledger()
                .iter_from(1)
                .filter_map(Result::ok)
                .filter(|r| r.body["entry"] == "forecast")
                .map(|r| r.body["queued_jobs"].clone())
                .collect();
            if counted.iter().any(|c| c == 10_000) {
                Ok(())
            } else {
                Err(format!("{counted:?}"))
            }
        },
    )
    .await;
    // The queue answered again every second meanwhile; an event is planned at once all the same.
    let t = Instant::now();
    submit_event(&gw).await;
    a_plan_within(&gw, Duration::from_secs(10)).await;
    println!(
        "event planned {:.2} s after it was submitted, 100k queued jobs read every second",
        t.elapsed().as_secs_f64()
    );
    let _ = stop.send(());
}
