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
/// times in ten), the GPUs expected busy and how many of them run jobs not known yet. Hours are
/// clock hours (UTC, on the hour; the first and last only partly covered by the 48 hours), and
/// an hour's figure is its least quarter-hour: what holds for the whole hour.
///
/// With --declare: a declaration for a day-ahead offer, one row per hour: the kW available at
/// the chosen confidence (90: the P10; 50: the median) within the ceiling, as Markdown, CSV or
/// JSON.
///
/// With --declare --record: the declaration is recorded on the gateway (POST /v1/declarations,
/// the `declared` ledger entry the audit and the settlement report set each event against),
/// under --operator's name; --override replaces an hour's figure with the operator's own and a
/// reason (the clock hour's start, as the export lists it). Needs the API token (FLEXGATE_API_TOKEN).
///
/// Examples:
///   flexgate forecast --gateway 127.0.0.1:8080
///   flexgate forecast --gateway 127.0.0.1:8080 --declare --format csv -o offer.csv
///   flexgate forecast --gateway 127.0.0.1:8080 --declare --confidence 50 --format json
///   FLEXGATE_API_TOKEN=… flexgate forecast --declare --record --operator ana \
///       --override "2026-12-06T02:00:00Z=40:chiller maintenance"
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
    /// With --declare: record the declaration on the gateway (needs --operator and the token).
    #[arg(long, requires = "declare", requires = "operator")]
    record: bool,
    /// With --record: who declares (recorded).
    #[arg(long, value_name = "NAME")]
    operator: Option<String>,
    /// With --record: declare an hour at the operator's own figure, with a reason:
    /// `START=KW:REASON` (START as the export lists the hour). Repeatable.
    #[arg(long = "override", value_name = "START=KW:REASON", requires = "record")]
    overrides: Vec<String>,
    /// Bearer token for --record (prefer the environment variable: command lines are visible to
    /// other users).
    #[arg(long, env = "FLEXGATE_API_TOKEN", value_name = "TOKEN", hide_env_values = true)]
    api_token: Option<String>,
}

/// `START=KW:REASON` as the body of an override.
fn parse_override(text: &str) -> Result<serde_json::Value> {
    let (start, rest) = text
        .split_once('=')
        .with_context(|| format!("--override {text:?}: expected START=KW:REASON"))?;
    let (kw, reason) = rest
        .split_once(':')
        .with_context(|| format!("--override {text:?}: expected START=KW:REASON (no reason given)"))?;
    let start = chrono::DateTime::parse_from_rfc3339(start.trim())
        .with_context(|| format!("--override {text:?}: START must be an RFC 3339 time, e.g. 2026-12-06T02:15:00Z"))?;
    let kw: f64 = kw
        .trim()
        .parse()
        .ok()
        .filter(|k: &f64| k.is_finite() && *k >= 0.0)
        .with_context(|| format!("--override {text:?}: KW must be a number ≥ 0"))?;
    Ok(serde_json::json!({"start": start.to_rfc3339(), "available_w": kw * 1000.0, "reason": reason.trim()}))
}

/// Record the declaration on the gateway; its answer (the hours as recorded).
fn record(args: &ForecastArgs) -> Result<Value> {
    let token = args
        .api_token
        .as_deref()
        .context("--record needs the gateway's API token: set FLEXGATE_API_TOKEN")?;
    let overrides = args
        .overrides
        .iter()
        .map(|o| parse_override(o))
        .collect::<Result<Vec<_>>>()?;
    let body = serde_json::json!({
        "operator": args.operator,
        "confidence": args.confidence.percent(),
        "overrides": overrides,
    });
    let body = serde_json::to_vec(&body)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let addr = args.gateway;
    let response = runtime
        .block_on(crate::http_client::request(
            addr,
            "POST",
            "/v1/declarations",
            Some(token),
            Some(&body),
        ))
        .with_context(|| format!("cannot reach the gateway at {addr}"))?;
    if response.status != 201 {
        anyhow::bail!(
            "the gateway at {addr} did not record the declaration ({}): {}",
            response.status,
            response.text().trim()
        );
    }
    response
        .json()
        .with_context(|| format!("the gateway at {addr} did not answer JSON"))
}

/// The recorded declaration in `format`.
fn recorded_text(recorded: &Value, format: Format) -> Result<String> {
    let hours = recorded["hours"].as_array().context("the answer has no hours")?;
    let field = |h: &Value, k: &str| h[k].as_str().unwrap_or_default().to_string();
    let num = |h: &Value, k: &str| h[k].as_f64().unwrap_or(f64::NAN);
    Ok(match format {
        Format::Json => serde_json::to_string_pretty(recorded)? + "\n",
        Format::Csv => {
            let mut out = String::from("hour_start,hour_end,available_kw,forecast_kw,from,reason\n");
            for h in hours {
                let reason = field(h, "reason").replace('"', "\"\"");
                let _ = writeln!(
                    out,
                    "{},{},{:.3},{:.3},{},\"{reason}\"",
                    field(h, "start"),
                    field(h, "end"),
                    num(h, "available_w") / 1000.0,
                    num(h, "forecast_w") / 1000.0,
                    field(h, "from")
                );
            }
            out
        }
        Format::Md => {
            let first = hours.first();
            let mut out = format!(
                "Declaration recorded at {} by {} ({} % confidence).\n\n| hour (UTC) | declared kW | forecast kW | from | reason |\n|---|---|---|---|---|\n",
                first.map(|h| field(h, "declared_at")).unwrap_or_default(),
                first.map(|h| field(h, "operator")).unwrap_or_default(),
                first.and_then(|h| h["confidence"].as_u64()).unwrap_or(0),
            );
            for h in hours {
                let _ = writeln!(
                    out,
                    "| {} | {:.1} | {:.1} | {} | {} |",
                    field(h, "start"),
                    num(h, "available_w") / 1000.0,
                    num(h, "forecast_w") / 1000.0,
                    field(h, "from"),
                    field(h, "reason")
                );
            }
            out
        }
    })
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

/// One clock hour of the forecast: its start and end, and its least quarter-hour's figures, W.
struct Hour {
    start: String,
    end: String,
    p10: f64,
    p50: f64,
    p90: f64,
    gpus: f64,
    unknown: f64,
}

/// The forecast's quarter-hours gathered into clock hours (UTC, on the hour: what a day-ahead
/// offer is made in), an hour's figure its least step (the gateway's declarations use the same
/// hours: `flexgate_policies::forecast::declare::clock_hours`).
fn hours(forecast: &Value) -> Result<Vec<Hour>> {
    use chrono::{DateTime, Utc};
    use flexgate_policies::forecast::Band;
    let steps = forecast["steps"].as_array().context("the forecast has no steps")?;
    /// One step as read.
    struct Step {
        start: DateTime<Utc>,
        end: DateTime<Utc>,
        band: Band,
        gpus: f64,
        unknown: f64,
    }
    let mut parsed: Vec<Step> = Vec::with_capacity(steps.len());
    for (i, s) in steps.iter().enumerate() {
        let figure = |p: &str| {
            s["available_w"][p]
                .as_f64()
                .filter(|v| v.is_finite())
                .with_context(|| format!("step {i}: no {p}"))
        };
        let time = |k: &str| {
            s[k].as_str()
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&Utc))
                .with_context(|| format!("step {i}: no {k} time"))
        };
        parsed.push(Step {
            start: time("start")?,
            end: time("end")?,
            band: Band {
                p10: figure("p10")?,
                p50: figure("p50")?,
                p90: figure("p90")?,
            },
            gpus: s["gpus_expected"].as_f64().unwrap_or(0.0),
            unknown: s["gpus_unknown"].as_f64().unwrap_or(0.0),
        });
    }
    let bands = flexgate_policies::forecast::declare::clock_hours(parsed.iter().map(|p| (p.start, p.end, p.band)));
    Ok(bands
        .into_iter()
        .map(|(start, end, band)| {
            let within = parsed.iter().filter(|p| p.start < end && p.end > start);
            let (gpus, unknown) = within.fold((0.0f64, 0.0f64), |(g, u), p| (g.max(p.gpus), u.max(p.unknown)));
            Hour {
                start: start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                end: end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                p10: band.p10,
                p50: band.p50,
                p90: band.p90,
                gpus,
                unknown,
            }
        })
        .collect())
}

/// Run the command.
pub fn run(args: &ForecastArgs) -> Result<()> {
    if args.record {
        let text = recorded_text(&record(args)?, args.format)?;
        return emit(args, &text);
    }
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
    emit(args, &text)
}

/// Write `text` to `--output`, or print it.
fn emit(args: &ForecastArgs, text: &str) -> Result<()> {
    match &args.output {
        Some(path) => super::write_output(path, text),
        None => {
            crate::out!("{text}");
            Ok(())
        }
    }
}
