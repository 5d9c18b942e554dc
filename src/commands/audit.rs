//! `flexgate audit`: the per-event report an energy manager, a utility or an auditor reads.

use super::write_output;
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Report on one event, rebuilt from the ledger alone.
///
/// The raw event, its interpretation (target → ceiling → GPU budget with every multiplier),
/// every plan and confirmation, per interval the ceiling against measured meter power, the
/// baseline (highest 4 of the previous 5 days when the ledger holds them, else meter
/// before/after), delivered reduction, shortfall and over-delivery, the fallbacks used, and a
/// chart of meter power against the ceiling.
///
/// Reads a stopped gateway's data directory (or a copy; sled allows one process at a time).
///
/// Examples:
///   flexgate audit --event ev-2026-0142
///   flexgate audit --event ev-2026-0142 --format json --plot ev.svg
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct AuditArgs {
    /// Event id.
    #[arg(long, value_name = "ID")]
    event: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Md)]
    format: Format,
    /// Also draw meter power against the ceiling as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Data directory of the gateway.
    #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
    data: PathBuf,
    /// Seconds of meter history before and after the event used for the baseline.
    #[arg(long, default_value_t = 900, value_name = "S")]
    baseline_window_s: u64,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Md,
    Json,
}

/// All records of a ledger directory, in order.
pub fn read_records(data: &std::path::Path) -> Result<Vec<crate::ledger::Record>> {
    let dir = data.join("ledger");
    if !dir.exists() {
        bail!(
            "no ledger at {} (is --data the gateway's data directory?)",
            dir.display()
        );
    }
    let mut buffer = Vec::new();
    crate::ledger::export(&dir, crate::ledger::ExportFormat::Jsonl, None, &mut buffer)?;
    buffer
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).context("unreadable ledger record"))
        .collect()
}

/// Run the command.
pub fn run(args: &AuditArgs) -> Result<()> {
    let records = read_records(&args.data)?;
    let report = crate::reports::audit::build(&records, &args.event, args.baseline_window_s)?
        .with_context(|| format!("no event {:?} in the ledger at {}", args.event, args.data.display()))?;
    match args.format {
        Format::Md => crate::out!("{}", report.to_markdown()),
        Format::Json => crate::outln!("{}", serde_json::to_string_pretty(&report)?),
    }
    if let Some(path) = &args.plot {
        write_output(path, &report.chart())?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
