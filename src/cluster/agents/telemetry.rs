//! Telemetry: each node's Prometheus page (the agent's `/metrics` or a dcgm-exporter), per-job
//! GPU power, the meter estimate, and the memory activity of uncapped runs for the PFI
//! predictor.
//!
//! Separate because it reads pages the agents' token may never be sent to, and because its rule
//! is the opposite of optimism: a GPU without a plausible reading counts at its maximum.

use super::{AgentsBackend, Known, all_failed};
use crate::cluster::{BackendError, JobTelemetry, Telemetry};
use flexgate_agent::metrics::GpuSample;
use flexgate_policies::facility::CoolingState;
use flexgate_policies::units::{Kilowatts, TokensPerSec, Watts};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::time::Instant;

/// Largest plausible board power of one GPU, W: a reading above it (or negative, or NaN) is
/// a broken exporter, and the GPU counts as unmeasured instead.
const MAX_PLAUSIBLE_GPU_W: f64 = 5_000.0;

/// One node's GPU readings from its metrics page, by UUID.
type MetricsPage = HashMap<String, GpuSample>;

impl AgentsBackend {
    /// [`ClusterBackend::telemetry`](crate::cluster::ClusterBackend::telemetry): per-job GPU
    /// power from the metrics pages, and the meter estimated from all GPUs' power.
    pub(super) async fn read_telemetry(&self) -> Result<Telemetry, BackendError> {
        let (pages, none_answered) = self.scrape_metrics().await;
        if let Some(why) = none_answered {
            return Err(BackendError::TelemetryGap(why));
        }
        let reading = |node: usize, uuid: &str| pages[node].as_ref().and_then(|p| p.get(uuid));
        let jobs = self.known().jobs.clone();
        let mut per_job = Vec::new();
        // Each job's GPU-mean memory activity now, for the predictor (only if every GPU said).
        let mut activity: Vec<(Arc<str>, f64, f64)> = Vec::new();
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
                    tokens: TokensPerSec(0.0),
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
        drop(known);
        let estimated = measured + unmeasured;
        let nodes = u32::try_from(self.agents.len()).unwrap_or(u32::MAX);
        let meter = self
            .facility
            .forward(Watts(estimated), nodes, &CoolingState::Settled)
            .map(|m| m.nominal)
            .unwrap_or(Kilowatts(estimated / 1000.0));
        Ok(Telemetry {
            at: crate::runtime::clock::wall_now(),
            gpu_board_power: per_job.iter().map(|j| j.power).sum(),
            jobs: per_job,
            meter_kw: meter,
            // Not a meter reading: the facility model's estimate from the GPUs' draw.
            meter_quality: flexgate_policies::meter::Quality::Model,
            nodes,
        })
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
    fn observe_uncapped_runs(&self, known: &mut Known, activity: &[(Arc<str>, f64, f64)]) {
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
