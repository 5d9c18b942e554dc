//! Telemetry: each node's Prometheus page (the agent's `/metrics` or a dcgm-exporter), per-job
//! GPU power, the meter estimate, and the memory activity of uncapped runs for the PFI
//! predictor.
//!
//! Separate because it reads pages the agents' token may never be sent to, and because its rule
//! is the opposite of optimism: a GPU without a plausible reading counts at its maximum.

use super::client::Verb;
use super::{AgentsBackend, Known, all_failed};
use crate::cluster::{BackendError, JobTelemetry, Telemetry};
use flexgate_agent::api::{JOB_THROUGHPUT_PATH, JobThroughput};
use flexgate_agent::metrics::GpuSample;
use flexgate_policies::control::cluster::MeasuredThroughput;
use flexgate_policies::facility::CoolingState;
use flexgate_policies::ids::JobId;
use flexgate_policies::units::{Kilowatts, TokensPerSec, Watts};
use std::collections::HashMap;
use tokio::time::Instant;

/// Largest plausible board power of one GPU, W: a reading above it (or negative, or NaN) is
/// a broken exporter, and the GPU counts as unmeasured instead.
const MAX_PLAUSIBLE_GPU_W: f64 = 5_000.0;

/// Seconds after a job's cap changed before its throughput samples count as taken at the new
/// cap: NVML averages power over about 1 s, and the gateway's and agents' clocks may differ by
/// a second or two.
const CAP_SETTLE_S: i64 = 3;

/// One node's GPU readings from its metrics page, by UUID.
type MetricsPage = HashMap<String, GpuSample>;

impl AgentsBackend {
    /// [`ClusterBackend::telemetry`](crate::cluster::ClusterBackend::telemetry): per-job GPU
    /// power from the metrics pages, and the meter estimated from all GPUs' power.
    pub(super) async fn read_telemetry(&self) -> Result<Telemetry, BackendError> {
        let ((pages, none_answered), reported) = tokio::join!(self.scrape_metrics(), self.read_throughput());
        if let Some(why) = none_answered {
            return Err(BackendError::TelemetryGap(why));
        }
        let reading = |node: usize, uuid: &str| pages[node].as_ref().and_then(|p| p.get(uuid));
        let jobs = self.known().jobs.clone();
        let mut per_job = Vec::new();
        // Each job's GPU-mean memory activity now, for the predictor (only if every GPU said).
        let mut activity: Vec<(JobId, f64, f64)> = Vec::new();
        for job in jobs.iter() {
            // A job with any GPU unmeasured is left out: the gateway counts it conservatively.
            let mut power = 0.0;
            let mut complete = true;
            let (mut dram, mut copy, mut with_activity) = (0.0, 0.0, 0usize);
            for (node, uuid) in &job.gpus {
                let gpu = reading(*node, uuid);
                match gpu.and_then(|g| g.power_w) {
                    Some(w) => power += w,
                    None => complete = false,
                }
                if let Some((d, c)) = gpu.and_then(|g| g.dram_active.zip(g.mem_copy_util_pct)) {
                    dram += d;
                    copy += c;
                    with_activity += 1;
                }
            }
            if complete {
                per_job.push(JobTelemetry {
                    job: job.id.clone(),
                    power: Watts(power),
                    // Set below, once it is known whether the figure is steady.
                    tokens: None,
                });
            }
            if with_activity == job.gpus.len() && with_activity > 0 {
                let n = with_activity as f64;
                activity.push((job.id.clone(), dram / n, copy / n));
            }
        }
        let measured: f64 = pages
            .iter()
            .flatten()
            .flat_map(|p| p.values())
            .filter_map(|g| g.power_w)
            .sum();
        let mut known = self.known();
        // The meter sees every GPU, measured or not: a job's GPU that did not report (its node
        // unreachable) counts at its maximum, so that losing an agent never
        // lowers the estimate and the closed loop never gives budget back for it.
        let unmeasured: f64 = jobs
            .iter()
            .flat_map(|j| &j.gpus)
            .filter(|(node, uuid)| reading(*node, uuid).and_then(|g| g.power_w).is_none())
            .map(|(_, uuid)| known.gpu_max.get(uuid).copied().unwrap_or(700.0))
            .sum();
        self.observe_uncapped_runs(&mut known, &activity);
        // Steady: every sample counted arrived after the job's cap last changed plus NVML's
        // averaging time, compared on the agents' clock with a margin for clock skew.
        let settled_from = |job: &JobId| {
            known
                .cap_changed
                .get(job)
                .map(|at| *at + chrono::TimeDelta::seconds(CAP_SETTLE_S))
        };
        let throughput: HashMap<JobId, MeasuredThroughput> = jobs
            .iter()
            .filter_map(|j| {
                let mut t = *reported.get(&*j.id)?;
                t.steady = settled_from(&j.id).is_none_or(|from| t.since >= from);
                Some((j.id.clone(), t))
            })
            .collect();
        for job in &mut per_job {
            job.tokens = throughput.get(&job.job).copied();
        }
        known.throughput = throughput;
        drop(known);
        let estimated = measured + unmeasured;
        let nodes = u32::try_from(self.agents.len()).unwrap_or(u32::MAX);
        let meter = self
            .facility
            .forward(Watts(estimated), nodes, &CoolingState::Settled)
            .map(|m| m.nominal)
            .unwrap_or(Kilowatts(estimated / 1000.0));
        Ok(Telemetry {
            at: crate::clock::wall_now(),
            gpu_board_power: per_job.iter().map(|j| j.power).sum(),
            jobs: per_job,
            meter_kw: meter,
            // Not a meter reading: the facility model's estimate from the GPUs' draw.
            meter_quality: flexgate_policies::meter::Quality::Model,
            nodes,
        })
    }

    /// Reads every agent's job throughput at once: per job id, the reading with the latest
    /// sample (a job on several nodes reports from one rank; if more do, the freshest wins).
    /// An agent that does not answer, or predates the endpoint, contributes nothing: its jobs'
    /// throughput is unknown, which changes no decision about power.
    async fn read_throughput(&self) -> HashMap<String, MeasuredThroughput> {
        let deadline = Instant::now() + self.caller.policy.timeout;
        let calls = (0..self.agents.len()).map(|i| async move {
            self.agent_call::<(), Vec<JobThroughput>>(i, Verb::Get, JOB_THROUGHPUT_PATH, None, deadline)
                .await
                .map_err(|e| tracing::debug!("job throughput: {e}"))
                .unwrap_or_default()
        });
        let mut best: HashMap<String, (chrono::DateTime<chrono::Utc>, MeasuredThroughput)> = HashMap::new();
        for reading in futures_util::future::join_all(calls).await.into_iter().flatten() {
            // The agent screened every sample; a figure that is not a finite rate is a broken
            // agent, and is left out rather than planned on.
            if !(reading.tokens_per_s.is_finite() && reading.tokens_per_s >= 0.0) {
                tracing::warn!(job = %reading.job_id, "job throughput {} refused: not a rate", reading.tokens_per_s);
                continue;
            }
            let measured = MeasuredThroughput {
                tokens: TokensPerSec(reading.tokens_per_s),
                since: reading.window_start,
                samples: u32::try_from(reading.training_samples).unwrap_or(u32::MAX),
                // Decided once the job is known (its cap's last change), below.
                steady: false,
            };
            let newer = best
                .get(&reading.job_id)
                .is_none_or(|(end, _)| reading.window_end > *end);
            if newer {
                best.insert(reading.job_id, (reading.window_end, measured));
            }
        }
        best.into_iter().map(|(job, (_, m))| (job, m)).collect()
    }

    /// Reads every node's metrics page at once (the agent's `/metrics`, or the node's
    /// `metrics_url`); a node that does not answer, or whose page does not parse, is `None`.
    /// Also says why when no node answered.
    async fn scrape_metrics(&self) -> (Vec<Option<MetricsPage>>, Option<String>) {
        let deadline = Instant::now() + self.caller.policy.timeout;
        let calls = self.metrics.iter().enumerate().map(|(i, (url, own))| async move {
            let node = &self.agents[i].node;
            let _permit = self
                .limit
                .acquire()
                .await
                .map_err(|_| format!("{node}: backend closed"))?;
            let text = self
                .caller
                .scrape(node, url, *own, deadline)
                .await
                .map_err(|e| e.to_string())?;
            let samples = flexgate_agent::metrics::parse(&text).map_err(|e| format!("{node}: {url}: {e}"))?;
            Ok::<MetricsPage, String>(
                flexgate_agent::metrics::gpu_samples(&samples)
                    .into_iter()
                    .map(|mut g| {
                        g.power_w = g.power_w.filter(|w| (0.0..=MAX_PLAUSIBLE_GPU_W).contains(w));
                        (g.uuid.clone(), g)
                    })
                    .collect(),
            )
        });
        let results = futures_util::future::join_all(calls).await;
        for e in results.iter().filter_map(|r| r.as_ref().err()) {
            tracing::warn!("GPU telemetry: {e}");
        }
        let none_answered = all_failed("no node's GPU telemetry could be read", &results);
        (results.into_iter().map(Result::ok).collect(), none_answered)
    }

    /// Adds this round's memory activity to the uncapped runs of jobs that are neither capped
    /// nor suspended, and says when a job's PFI prediction becomes available.
    fn observe_uncapped_runs(&self, known: &mut Known, activity: &[(JobId, f64, f64)]) {
        let Some((model, min_readings)) = &self.predictor else {
            return;
        };
        let capped_jobs = known.capped_jobs();
        for (job, dram, copy) in activity {
            let capped = capped_jobs.contains(job);
            if capped || known.suspended.contains(job) {
                continue;
            }
            let run = known.uncapped_runs.entry(job.clone()).or_default();
            if let Err(e) = run.observe(*dram, *copy) {
                tracing::warn!(job = %job, "memory telemetry refused for PFI prediction: {e}");
                continue;
            }
            if run.samples() == *min_readings
                && let Some(p) = run.predict(model, *min_readings)
            {
                let (lo, hi) = p.interval(0.9);
                tracing::info!(job = %job, dram_active = dram, mem_copy_util_pct = copy,
                    "PFI predicted from the uncapped run: {:.2} (90 % interval {lo:.2}–{hi:.2})", p.mean);
            }
        }
    }
}
