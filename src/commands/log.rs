//! `flexgate log`: verify and export the tamper-evident ledger.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use std::path::PathBuf;

/// Verify or export the ledger (a stopped gateway's data directory, or a copy of it).
///
/// Every record carries SHA-256(previous hash ‖ canonical JSON of the record); `verify` walks the
/// chain and names the first record that was altered, removed or reordered.
///
/// Examples:
///   flexgate log verify --data ./flexgate-data
///   flexgate log export --format csv --event ev-2026-0142 > ev.csv
///   flexgate log migrate --data ./old-data --to ./new-data/ledger
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct LogArgs {
    /// Data directory of the gateway.
    #[arg(
        long,
        global = true,
        env = "FLEXGATE_DATA",
        default_value = "./flexgate-data",
        value_name = "DIR"
    )]
    data: PathBuf,
    #[command(subcommand)]
    what: LogCommand,
}

#[derive(Debug, Subcommand)]
enum LogCommand {
    /// Check the hash chain; exit 1 naming the first bad record.
    Verify,
    /// Write records as JSON lines or CSV to stdout (or --out).
    Export {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Jsonl)]
        format: Format,
        /// Only records of this event.
        #[arg(long, value_name = "ID")]
        event: Option<String>,
        /// Write to this file instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Rewrite a ledger of schema 1 (written before typed entries) as typed entries in a new
    /// ledger directory, which this version replays. The old chain must verify; it is left
    /// untouched (keep it as evidence). The new ledger's first record holds the old record
    /// count and head hash; every old record follows in order.
    Migrate {
        /// The new ledger directory (it must not exist or be empty), e.g. NEW_DATA/ledger.
        #[arg(long, value_name = "DIR")]
        to: PathBuf,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Jsonl,
    Csv,
}

/// Run the command.
pub fn run(args: &LogArgs) -> Result<()> {
    if let LogCommand::Migrate { to } = &args.what {
        let from = args.data.join("ledger");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the runtime")?;
        let report = runtime.block_on(crate::ledger::migrate::migrate(&from, to))?;
        crate::outln!(
            "migrated {} records from {} (head {}) into {} (head {}); keep the old directory as evidence",
            report.records,
            from.display(),
            report.old_head,
            to.display(),
            report.new_head
        );
        return Ok(());
    }
    let dir = args.data.join("ledger");
    if !dir.exists() {
        bail!(
            "no ledger at {} (is --data the gateway's data directory?)",
            dir.display()
        );
    }
    match &args.what {
        LogCommand::Verify => match crate::ledger::verify(&dir) {
            Ok(report) => {
                crate::outln!(
                    "ok: {} records, chain intact, head {}",
                    report.records,
                    report.head_hash
                );
                Ok(())
            }
            Err(failure) => bail!(
                "ledger verification FAILED at record {}: {}",
                failure.seq,
                failure.reason
            ),
        },
        LogCommand::Migrate { .. } => Ok(()),
        LogCommand::Export { format, event, out } => {
            let format = match format {
                Format::Jsonl => crate::ledger::ExportFormat::Jsonl,
                Format::Csv => crate::ledger::ExportFormat::Csv,
            };
            let mut sink: Box<dyn std::io::Write> = match out {
                Some(path) => Box::new(std::io::BufWriter::new(
                    std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?,
                )),
                None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
            };
            let n = crate::ledger::export(&dir, format, event.as_deref(), &mut sink)?;
            sink.flush()?;
            eprintln!("exported {n} records");
            Ok(())
        }
    }
}
