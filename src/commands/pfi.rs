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
/// or a profile the gateway measured, as `flexgate profiles export` writes it (one profile in
/// the document, or the one named by --profile).
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
    /// With an exported profile document holding several profiles: the one to use.
    #[arg(long, value_name = "KEY")]
    profile: Option<String>,
}

/// The sweep in an exported profile document, if `text` is one.
fn sweep_of_profile(text: &str, wanted: Option<&str>) -> Result<Option<Sweep>> {
    let is_profile = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .is_some_and(|v| v["schema"] == super::profiles::PROFILE_SCHEMA);
    if !is_profile {
        return Ok(None);
    }
    let document = super::profiles::parse_document(text)?;
    let profile = match wanted {
        Some(key) => document
            .profiles
            .iter()
            .find(|p| p.profile == key)
            .with_context(|| format!("no profile {key:?} in the document"))?,
        None => match document.profiles.as_slice() {
            [one] => one,
            [] => bail!("the profile document holds no profile"),
            many => bail!(
                "the document holds {} profiles; choose one with --profile ({})",
                many.len(),
                many.iter()
                    .map(|p| p.profile.as_str())
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    };
    let gpus = profile.gpus.with_context(|| {
        format!(
            "profile {} does not say its GPU count (points recorded before it was)",
            profile.profile
        )
    })?;
    if !profile.points.iter().any(|p| p.uncapped) {
        bail!(
            "profile {} has no uncapped point: the PFI needs the job's uncapped throughput",
            profile.profile
        );
    }
    Ok(Some(Sweep {
        gpus,
        points: profile
            .points
            .iter()
            .map(|p| Point {
                cap_w: p.cap_w,
                power_w: p.power_w,
                tokens_per_s: p.tokens_per_s,
            })
            .collect(),
        runs: Vec::new(),
        measured: true,
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sweep {
    gpus: u32,
    #[serde(default)]
    points: Vec<Point>,
    #[serde(default)]
    runs: Vec<Run>,
    /// Readings the gateway measured (an exported profile), read as the gateway learned them: a
    /// cap that did not bind reads its power give or take the meter's noise, which a sweep file
    /// may not, but a measurement does (`curve::settle_measured_power`).
    #[serde(skip)]
    measured: bool,
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
    let sweep: Sweep = match sweep_of_profile(&text, args.profile.as_deref())? {
        Some(sweep) => sweep,
        None => serde_json::from_str(&text).with_context(|| format!("{} is not a sweep", args.sweep.display()))?,
    };
    let mut points: Vec<CurvePoint> = match (sweep.points.is_empty(), sweep.runs.is_empty()) {
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
    if sweep.measured {
        flexgate_policies::curve::settle_measured_power(sweep.gpus, &mut points);
    }
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
