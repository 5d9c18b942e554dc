//! `flexgate audit`: the per-event report an energy manager, a utility or an auditor reads.

use super::write_output;
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// Report on one event, rebuilt from the ledger alone.
///
/// The raw event, its interpretation (target → ceiling → GPU budget with every multiplier),
/// every plan and confirmation, per interval the ceiling against measured meter power, the
/// baseline (PJM's Economic CBL: high 4 of the 5 previous eligible weekdays, or high 2 of 3
/// weekend days and holidays, event days and low-usage days passed over, on the site's local
/// days, with the same-day adjustment; and the meter before and after, which stands in when
/// the ledger holds too little history), delivered reduction, shortfall and over-delivery, the
/// fallbacks used, and a chart of meter power against the ceiling and the baseline in the
/// site's local time.
///
/// Reads a stopped gateway's data directory (or a copy; sled allows one process at a time).
///
/// Examples:
///   flexgate audit --event ev-2026-0142
///   flexgate audit --event ev-2026-0142 --format json --plot ev.svg
///   flexgate audit --event ev-2026-0142 --time-zone America/New_York
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
    /// Seconds of meter history before and after the event for the meter-before/after baseline.
    #[arg(long, default_value_t = 900, value_name = "S")]
    baseline_window_s: u64,
    /// The site's IANA time zone (its `[site] time_zone`): local days for the CBL, local clock
    /// time on the chart.
    #[arg(long, env = "FLEXGATE_TIME_ZONE", default_value = "UTC", value_name = "ZONE")]
    time_zone: String,
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
    let time_zone: chrono_tz::Tz = args.time_zone.parse().map_err(|_| {
        anyhow::anyhow!(
            "--time-zone {:?} is not an IANA time zone name (e.g. America/New_York, Europe/Berlin, UTC)",
            args.time_zone
        )
    })?;
    let records = read_records(&args.data)?;
    let report = crate::reports::audit::build(&records, &args.event, args.baseline_window_s, time_zone)?
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
