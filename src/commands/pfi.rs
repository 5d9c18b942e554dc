//! `flexgate pfi`: compute a job's Power Flexibility Index from its cap sweep.

use super::read_input;
use anyhow::{Context, Result, bail};
use clap::Args;
use flexgate_policies::curve::{CurvePoint, PowerCurve};
use flexgate_policies::pfi::{DEFAULT_EPSILON, RunSample, aggregate_run, pfi};
use flexgate_policies::units::{TokensPerSec, Watts, WattsPerGpu};
use serde::Deserialize;
use std::path::PathBuf;

/// Compute a job's PFI from a sweep of static power caps.
///
/// PFI = mean over the capped runs of (1 − P/P_max) / (1 − T/T_max), where (P_max, T_max) is
/// the run at the highest cap (uncapped). PFI > 1: throughput falls slower than power, a good
/// job to cut. Runs whose throughput loss is below EPSILON (the cap did not bind) are dropped
/// and listed. The value is only comparable with PFIs measured on the same cap grid.
///
/// SWEEP is JSON, either aggregated points:
///   {"gpus": 8, "points": [{"cap_w": 700, "power_w": 5200, "tokens_per_s": 12000}, ...]}
/// or raw telemetry per run, aggregated as the paper does (each metric the mean of the top 10 %
/// of training-phase samples; phases: training, warmup, evaluation, checkpoint):
///   {"gpus": 8, "runs": [{"cap_w": 700, "samples": [
///       {"power_w": 5210, "tokens_per_s": 12050, "phase": "training"}, ...]}, ...]}
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct PfiArgs {
    /// The sweep (JSON).
    #[arg(value_name = "SWEEP.json")]
    sweep: PathBuf,
    /// Smallest throughput loss for a run to count (the ε rule).
    #[arg(long, default_value_t = DEFAULT_EPSILON)]
    epsilon: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sweep {
    gpus: u32,
    #[serde(default)]
    points: Vec<Point>,
    #[serde(default)]
    runs: Vec<Run>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Point {
    cap_w: f64,
    power_w: f64,
    tokens_per_s: f64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Run {
    cap_w: f64,
    samples: Vec<RunSample>,
}

/// Run the command.
pub fn run(args: &PfiArgs) -> Result<()> {
    let text = read_input(&args.sweep)?;
    let sweep: Sweep =
        serde_json::from_str(&text).with_context(|| format!("{} is not a sweep", args.sweep.display()))?;
    let points: Vec<CurvePoint> = match (sweep.points.is_empty(), sweep.runs.is_empty()) {
        (false, true) => sweep
            .points
            .iter()
            .map(|p| CurvePoint {
                cap: WattsPerGpu(p.cap_w),
                power: Watts(p.power_w),
                tokens: TokensPerSec(p.tokens_per_s),
            })
            .collect(),
        (true, false) => sweep
            .runs
            .iter()
            .map(|run| {
                let (power, tokens) =
                    aggregate_run(&run.samples).with_context(|| format!("run at cap {} W", run.cap_w))?;
                Ok(CurvePoint {
                    cap: WattsPerGpu(run.cap_w),
                    power,
                    tokens,
                })
            })
            .collect::<Result<_>>()?,
        _ => bail!("give either \"points\" or \"runs\", not both or neither"),
    };
    let curve = PowerCurve::new(sweep.gpus, points).context("invalid sweep")?;
    let value = pfi(&curve, args.epsilon)?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    let reference = curve.uncapped();
    crate::outln!(
        "PFI {:.3} on caps {:?} W (reference {} W: {:.0} W, {:.0} tok/s)",
        value.value,
        value.grid.caps().iter().map(|c| c.value()).collect::<Vec<_>>(),
        reference.cap.value(),
        reference.power.value(),
        reference.tokens.value()
    );
    crate::outln!(
        "{:>8} {:>12} {:>14} {:>8}",
        "cap W",
        "power cut",
        "throughput loss",
        "PFI_i"
    );
    for p in &value.points {
        let ratio = p
            .ratio
            .map_or_else(|| format!("dropped (loss < {})", value.epsilon), |r| format!("{r:.3}"));
        crate::outln!(
            "{:>8} {:>11.1}% {:>14.1}% {:>8}",
            p.cap.value(),
            p.power_reduction * 100.0,
            p.throughput_loss * 100.0,
            ratio
        );
    }
    Ok(())
}
