//! `flexgate facility`: meter kW ⇄ GPU-board power with the conservative facility model.

use super::read_input;
use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use flexgate_policies::facility::{CoolingState, FacilityModel, FacilityParams, PreEvent, Timing, render_chain};
use flexgate_policies::units::{Kilowatts, Watts};
use std::path::PathBuf;

/// Convert meter kW to GPU-board power and back with the conservative facility model.
///
/// Shows every multiplier and bound used: the same chain the gateway records for each event.
///
/// Examples:
///   flexgate facility ceiling --fsl-kw 9000 --nodes 1000
///   flexgate facility ceiling --fsl-kw 9000 --nodes 1000 --after-s 300 --pre-gpu-kw 5200
///   flexgate facility reduction --kw 2000 --after-s 600
///   flexgate facility forward --gpu-kw 5200 --nodes 1000
///   flexgate facility params > site.json     # defaults, to edit and pass with --params
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct FacilityArgs {
    /// Site parameters (JSON, as printed by `flexgate facility params`); defaults otherwise.
    #[arg(long, global = true, value_name = "FILE.json")]
    params: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    what: FacilityCommand,
}

#[derive(Debug, Subcommand)]
enum FacilityCommand {
    /// GPU-board budget that keeps the meter under a ceiling (firm service level).
    Ceiling {
        /// Meter ceiling in kW.
        #[arg(long, value_name = "KW")]
        fsl_kw: f64,
        /// Number of GPU nodes behind the meter.
        #[arg(long)]
        nodes: u32,
        /// Seconds since the GPU power changed (omit for a settled cooling plant).
        #[arg(long, value_name = "S")]
        after_s: Option<f64>,
        /// Pre-event total GPU-board power in kW (with --after-s), if known.
        #[arg(long, value_name = "KW", requires = "after_s")]
        pre_gpu_kw: Option<f64>,
    },
    /// GPU-board power to shed for a committed meter reduction against a baseline.
    Reduction {
        /// Committed meter reduction in kW.
        #[arg(long, value_name = "KW")]
        kw: f64,
        /// Seconds since the shed (omit for a settled cooling plant).
        #[arg(long, value_name = "S")]
        after_s: Option<f64>,
    },
    /// Meter estimate (nominal and bounds) for a total GPU-board power.
    Forward {
        /// Total GPU-board power in kW.
        #[arg(long, value_name = "KW")]
        gpu_kw: f64,
        /// Number of GPU nodes.
        #[arg(long)]
        nodes: u32,
    },
    /// Print the parameters in use (defaults, or --params) as JSON.
    Params,
}

fn timing(after_s: Option<f64>) -> Timing {
    after_s.map_or(Timing::Settled, |seconds| Timing::After { seconds })
}

/// Run the command.
pub fn run(args: &FacilityArgs) -> Result<()> {
    let params = match &args.params {
        Some(path) => serde_json::from_str::<FacilityParams>(&read_input(path)?)
            .with_context(|| format!("invalid facility parameters in {}", path.display()))?,
        None => FacilityParams::default(),
    };
    let model = FacilityModel::new(params).context("invalid facility parameters")?;
    let (value, chain, headline) = match &args.what {
        FacilityCommand::Params => {
            crate::outln!("{}", serde_json::to_string_pretty(model.params())?);
            return Ok(());
        }
        FacilityCommand::Ceiling {
            fsl_kw,
            nodes,
            after_s,
            pre_gpu_kw,
        } => {
            let cooling = match after_s {
                None => CoolingState::Settled,
                Some(seconds) => CoolingState::AfterStep {
                    seconds: *seconds,
                    pre_event: pre_gpu_kw.map_or(PreEvent::Unknown, |kw| PreEvent::GpuPower {
                        gpu: Kilowatts(kw).to_watts(),
                    }),
                },
            };
            let b = model.ceiling_budget(Kilowatts(*fsl_kw), *nodes, &cooling)?;
            let headline = if b.feasible {
                format!(
                    "GPU-board budget {:.1} kW keeps the meter under {fsl_kw} kW",
                    b.gpu_budget.to_kilowatts().value()
                )
            } else {
                format!(
                    "infeasible: even at zero GPU power the meter exceeds {fsl_kw} kW by {:.1} kW",
                    b.infeasible_by.value()
                )
            };
            (serde_json::to_value(&b)?, b.chain, headline)
        }
        FacilityCommand::Reduction { kw, after_s } => {
            let r = model.reduction_requirement(Kilowatts(*kw), timing(*after_s))?;
            let headline = format!(
                "shed {:.1} kW of GPU-board power to cut the meter by at least {kw} kW",
                r.gpu_shed.to_kilowatts().value()
            );
            (serde_json::to_value(&r)?, r.chain, headline)
        }
        FacilityCommand::Forward { gpu_kw, nodes } => {
            let m = model.forward(Watts(gpu_kw * 1000.0), *nodes, &CoolingState::Settled)?;
            let headline = format!(
                "meter ≈ {:.1} kW (bounds {:.1}–{:.1} kW)",
                m.nominal.value(),
                m.lo.value(),
                m.hi.value()
            );
            (serde_json::to_value(&m)?, m.chain, headline)
        }
    };
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        crate::outln!("{headline}");
        crate::outln!("chain: {}", render_chain(&chain));
        crate::outln!("parameters: {}", model.fingerprint());
    }
    Ok(())
}
