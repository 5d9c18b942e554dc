//! `flexgate forecast`: what a running gateway expects the site can shed in the hours ahead,
//! and the day-ahead declaration made from it.

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::PathBuf;

/// What the site can promise in the next 48 hours (from a running gateway's GET /v1/forecast).
///
/// For each hour: the most the site can shed at the meter within the gateway's cost ceiling
/// (a share of its objective: 10 % of GPU-weighted progress by default), as the 10th, 50th and
/// 90th percentiles of its distribution (P10 is what the energy trade calls "P90": shed nine
/// times in ten), the GPUs expected busy and how many of them run jobs not known yet. An hour's
/// figure is its least quarter-hour: what holds for the whole hour.
///
/// With --declare: a declaration for a day-ahead offer, one row per hour: the kW available at
/// the chosen confidence (90: the P10; 50: the median) within the ceiling, as Markdown, CSV or
/// JSON.
///
/// Examples:
///   flexgate forecast --gateway 127.0.0.1:8080
///   flexgate forecast --gateway 127.0.0.1:8080 --declare --format csv -o offer.csv
///   flexgate forecast --gateway 127.0.0.1:8080 --declare --confidence 50 --format json
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ForecastArgs {
    /// The running gateway's API address.
    #[arg(long, env = "FLEXGATE_LISTEN", default_value = "127.0.0.1:8080", value_name = "ADDR")]
    gateway: std::net::SocketAddr,
    /// Write a declaration (hour, kW available at --confidence) instead of the forecast.
    #[arg(long)]
    declare: bool,
    /// With --declare: the confidence, in percent, that the site sheds at least the declared
    /// kW: 90 (declares the P10) or 50 (the median).
    #[arg(long, value_enum, default_value = "90", requires = "declare")]
    confidence: Confidence,
    /// What to print.
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// Where to write (default: stdout).
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Confidence {
    /// 90 %: the P10.
    #[value(name = "90")]
    Ninety,
    /// 50 %: the median.
    #[value(name = "50")]
    Fifty,
}

impl Confidence {
    fn percent(self) -> u8 {
        match self {
            Confidence::Ninety => 90,
            Confidence::Fifty => 50,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// A table.
    Md,
    /// One row per hour.
    Csv,
    /// The gateway's document (or, with --declare, the declaration).
    Json,
}

/// One hour of the forecast: its start and end, and its least quarter-hour's figures, W.
struct Hour {
    start: String,
    end: String,
    p10: f64,
    p50: f64,
    p90: f64,
    gpus: f64,
    unknown: f64,
}

/// The forecast's quarter-hours gathered into hours (an hour's figure is its least step).
fn hours(forecast: &Value) -> Result<Vec<Hour>> {
    let steps = forecast["steps"].as_array().context("the forecast has no steps")?;
    let mut out: Vec<Hour> = Vec::new();
    for (i, chunk) in steps.chunks(4).enumerate() {
        let figure = |s: &Value, p: &str| {
            s["available_w"][p]
                .as_f64()
                .filter(|v| v.is_finite())
                .with_context(|| format!("step {i}: no {p}"))
        };
        let (mut p10, mut p50, mut p90) = (f64::INFINITY, f64::INFINITY, f64::INFINITY);
        let (mut gpus, mut unknown) = (0.0f64, 0.0f64);
        for s in chunk {
            p10 = p10.min(figure(s, "p10")?);
            p50 = p50.min(figure(s, "p50")?);
            p90 = p90.min(figure(s, "p90")?);
            gpus = gpus.max(s["gpus_expected"].as_f64().unwrap_or(0.0));
            unknown = unknown.max(s["gpus_unknown"].as_f64().unwrap_or(0.0));
        }
        let (Some(first), Some(last)) = (chunk.first(), chunk.last()) else {
            continue;
        };
        out.push(Hour {
            start: first["start"].as_str().unwrap_or_default().to_string(),
            end: last["end"].as_str().unwrap_or_default().to_string(),
            p10,
            p50,
            p90,
            gpus,
            unknown,
        });
    }
    Ok(out)
}

/// Run the command.
pub fn run(args: &ForecastArgs) -> Result<()> {
    let forecast = super::gateway_json(args.gateway, "/v1/forecast")?;
    let hours = hours(&forecast)?;
    let ceiling = forecast["cost_ceiling"].as_f64().unwrap_or(f64::NAN);
    let objective = forecast["objective"].as_str().unwrap_or("?");
    let generated = forecast["generated_at"].as_str().unwrap_or("?");
    let kw = |w: f64| w / 1000.0;
    let text = match (args.declare, args.format) {
        (false, Format::Json) => serde_json::to_string_pretty(&forecast)? + "\n",
        (false, Format::Csv) => {
            let mut out = String::from("hour_start,hour_end,p10_kw,p50_kw,p90_kw,gpus_expected,gpus_unknown\n");
            for h in &hours {
                let _ = writeln!(
                    out,
                    "{},{},{:.3},{:.3},{:.3},{:.1},{:.1}",
                    h.start,
                    h.end,
                    kw(h.p10),
                    kw(h.p50),
                    kw(h.p90),
                    h.gpus,
                    h.unknown
                );
            }
            out
        }
        (false, Format::Md) => {
            let mut out = format!(
                "Forecast made {generated}: the most the site can shed at the meter within {:.0} % of its {objective} \
                 (kW; P10 is shed nine times in ten, the trade's \"P90\").\n\n",
                ceiling * 100.0
            );
            for basis in forecast["basis"].as_array().into_iter().flatten() {
                let _ = writeln!(out, "- {}", basis.as_str().unwrap_or_default());
            }
            let _ = writeln!(
                out,
                "\n| hour (UTC) | P10 kW | P50 kW | P90 kW | GPUs busy | of them unknown |\n|---|---|---|---|---|---|"
            );
            for h in &hours {
                let _ = writeln!(
                    out,
                    "| {} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} |",
                    h.start,
                    kw(h.p10),
                    kw(h.p50),
                    kw(h.p90),
                    h.gpus,
                    h.unknown
                );
            }
            out
        }
        (true, format) => {
            let pick = |h: &Hour| {
                if args.confidence == Confidence::Ninety {
                    h.p10
                } else {
                    h.p50
                }
            };
            match format {
                Format::Json => {
                    let doc = serde_json::json!({
                        "schema": "flexgate.declaration/1",
                        "forecast_generated_at": generated,
                        "objective": objective,
                        "cost_ceiling": ceiling,
                        "confidence": f64::from(args.confidence.percent()) / 100.0,
                        "hours": hours.iter().map(|h| serde_json::json!({
                            "start": h.start, "end": h.end, "available_kw": kw(pick(h)),
                        })).collect::<Vec<_>>(),
                    });
                    serde_json::to_string_pretty(&doc)? + "\n"
                }
                Format::Csv => {
                    let mut out = String::from("hour_start,hour_end,available_kw,confidence,cost_ceiling,objective\n");
                    for h in &hours {
                        let _ = writeln!(
                            out,
                            "{},{},{:.3},{:.2},{},{objective}",
                            h.start,
                            h.end,
                            kw(pick(h)),
                            f64::from(args.confidence.percent()) / 100.0,
                            ceiling
                        );
                    }
                    out
                }
                Format::Md => {
                    let mut out = format!(
                        "Declaration at {} % confidence within {:.0} % of the {objective} (forecast {generated}).\n\n\
                         | hour (UTC) | available kW |\n|---|---|\n",
                        args.confidence.percent(),
                        ceiling * 100.0
                    );
                    for h in &hours {
                        let _ = writeln!(out, "| {} | {:.1} |", h.start, kw(pick(h)));
                    }
                    out
                }
            }
        }
    };
    match &args.output {
        Some(path) => super::write_output(path, &text),
        None => {
            crate::out!("{text}");
            Ok(())
        }
    }
}
