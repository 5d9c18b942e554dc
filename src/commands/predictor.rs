//! `flexgate predictor`: fit and validate the telemetry PFI predictor on your own samples.

use super::read_input;
use anyhow::{Context, Result, bail};
use clap::Args;
use flexgate_policies::predictor::{PfiPredictor, TelemetrySample, evaluate};
use std::path::PathBuf;

/// Fit and validate the telemetry PFI predictor; predict a new job's PFI.
///
/// Fits PFI ≈ a + b·(DRAM activity × memory-copy utilization) on measured jobs, reports how
/// well it generalises, and optionally predicts a new job's PFI with a prediction interval.
///
/// SAMPLES is a JSON array of measured jobs:
///   [{"pfi": 1.43, "dram_active": 0.41, "mem_copy_util_pct": 37.0, "cluster": "moe_pt"}, ...]
/// `dram_active` is DCGM_FI_PROF_DRAM_ACTIVE (0–1), `mem_copy_util_pct` DCGM_FI_DEV_MEM_COPY_UTIL
/// (%), both averaged over the uncapped run; `cluster` groups similar jobs (architecture × task)
/// for the leave-one-cluster-out score, the honest one for a job type never seen before.
///
/// Example:
///   flexgate predictor samples.json --dram-active 0.35 --mem-copy-util 30
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct PredictorArgs {
    /// Measured samples (JSON array).
    #[arg(value_name = "SAMPLES.json")]
    samples: PathBuf,
    /// DRAM activity (0–1) of a new job to predict.
    #[arg(long, requires = "mem_copy_util", value_name = "FRACTION")]
    dram_active: Option<f64>,
    /// Memory-copy utilization (%) of the new job.
    #[arg(long, requires = "dram_active", value_name = "PERCENT")]
    mem_copy_util: Option<f64>,
    /// Coverage of the prediction interval.
    #[arg(long, default_value_t = 0.9, value_name = "LEVEL")]
    level: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Run the command.
pub fn run(args: &PredictorArgs) -> Result<()> {
    if !(args.level > 0.0 && args.level < 1.0) {
        bail!("--level must be in (0, 1), got {}", args.level);
    }
    let text = read_input(&args.samples)?;
    let samples: Vec<TelemetrySample> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON array of samples", args.samples.display()))?;
    let report = evaluate(&samples)?;
    let prediction = match (args.dram_active, args.mem_copy_util) {
        (Some(dram), Some(copy)) => Some(PfiPredictor::fit(&samples)?.predict(dram, copy)?),
        _ => None,
    };
    if args.json {
        let interval = prediction.as_ref().map(|p| p.interval(args.level));
        let out =
            serde_json::json!({"report": report, "prediction": prediction, "interval": interval, "level": args.level});
        crate::outln!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    let show = |v: Option<f64>| v.map_or_else(|| "undefined".to_string(), |x| format!("{x:.3}"));
    crate::outln!(
        "PFI ≈ {:.3} + {:.5} · (dram_active × mem_copy_util_pct)   on {} samples, {} clusters",
        report.intercept,
        report.slope,
        report.n,
        report.clusters.len()
    );
    crate::outln!("  in-sample R²                 {:.3}", report.in_sample_r2);
    crate::outln!(
        "  leave-one-out R² (RMSE)      {:.3} ({:.3})",
        report.loo_r2,
        report.loo_rmse
    );
    crate::outln!("  leave-one-cluster-out R²     {}", show(report.loco_r2));
    crate::outln!("  Spearman ρ (LOO vs measured) {}", show(report.spearman_rho));
    crate::outln!("  (the paper, 25 H200 groups: 0.675, 0.524 (0.241), 0.246)");
    if let Some(p) = prediction {
        let (lo, hi) = p.interval(args.level);
        crate::outln!(
            "new job: PFI {:.2} ± {:.2} (sd); {:.0} % interval [{lo:.2}, {hi:.2}]",
            p.mean,
            p.sd,
            args.level * 100.0
        );
    }
    Ok(())
}
