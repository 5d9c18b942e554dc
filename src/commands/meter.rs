//! `flexgate meter`: the site meter as interval data, offline (on a stopped gateway's data
//! directory, or on a new one for an auditor without a gateway): import the utility's Green
//! Button or CSV data, export intervals, and check the utility's data against the gateway's own.

use crate::intervals::IntervalStore;
use crate::intervals::import::{ImportMeta, interval_of, reading_of, records};
use crate::ledger::{Ledger, LedgerError, NewRecord};
use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand, ValueEnum};
use flexgate_policies::intervals::Interval;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::{Path, PathBuf};

/// Interval meter data: the utility's (imported) and the gateway's own.
///
/// Settlement is computed on the utility's revenue-meter interval data. `import` adds a Green
/// Button (NAESB ESPI XML) or CSV file to a data directory: every interval is checked first (one
/// length, in order, none overlapping, plausible figures, a usable ReadingType) and a bad file
/// imports nothing, with an error naming the element or row and the line. What is imported is
/// recorded in the ledger with the file's SHA-256 and its intervals, and takes precedence over
/// the gateway's own figures for settlement. The gateway's own 5-minute intervals are derived
/// from the ledger's meter samples. `check` compares the two (a meter-integrity check the
/// utility asks about). The gateway must be stopped (a running one: `POST /v1/meter/import`).
///
/// CSV: a header, then one row per interval:
///   interval_end,interval_minutes,kwh,quality
///   2026-07-01T14:15:00-04:00,15,312.5,measured
/// (`kw` instead of `kwh` for mean demand; quality measured, estimated or missing; see
/// adapters/greenbutton/README.md).
///
/// Examples:
///   flexgate meter import utility-2026-07.xml --data /var/lib/flexgate
///   flexgate meter import readings.csv --data ./audit --source "utility CSV, July"
///   flexgate meter export --data /var/lib/flexgate --from 2026-07-01T00:00:00Z --to 2026-08-01T00:00:00Z -o july.xml
///   flexgate meter check --data /var/lib/flexgate --from 2026-07-01T00:00:00Z --to 2026-08-01T00:00:00Z
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct MeterArgs {
    #[command(subcommand)]
    command: MeterCommand,
}

/// A file format of interval data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Green Button: NAESB ESPI XML (an Atom feed).
    GreenButton,
    /// The documented CSV.
    Csv,
}

impl Format {
    /// The format of `path` by its extension (`.xml` Green Button, `.csv` CSV).
    fn of(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()?.to_ascii_lowercase().as_str() {
            "xml" | "espi" => Some(Format::GreenButton),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::GreenButton => "green_button",
            Format::Csv => "csv",
        }
    }
}

/// Which intervals an export writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Which {
    /// What settlement uses: imported where there is, the gateway's own elsewhere.
    Settlement,
    /// The imported intervals only.
    Imported,
    /// The gateway's own only.
    Gateway,
}

#[derive(Debug, Subcommand)]
enum MeterCommand {
    /// Import a Green Button or CSV file of interval data (gateway stopped; the directory is
    /// created if absent).
    Import {
        /// The file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// Data directory of the gateway (or a new one).
        #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
        data: PathBuf,
        /// The file's format (default: by its extension, .xml or .csv).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// The label its intervals carry (default: the file's name).
        #[arg(long, value_name = "LABEL")]
        source: Option<String>,
        /// Print what was imported as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write intervals as Green Button XML or CSV.
    Export {
        /// Data directory of the gateway.
        #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
        data: PathBuf,
        /// From (RFC 3339).
        #[arg(long, value_name = "TIME")]
        from: DateTime<Utc>,
        /// To (RFC 3339, exclusive).
        #[arg(long, value_name = "TIME")]
        to: DateTime<Utc>,
        /// Which intervals.
        #[arg(long, value_enum, default_value = "settlement")]
        which: Which,
        /// The format (default: by the output's extension, else Green Button).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Where to write (default: stdout).
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Compare the imported intervals with the gateway's own measured ones over the same times.
    Check {
        /// Data directory of the gateway.
        #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
        data: PathBuf,
        /// From (RFC 3339).
        #[arg(long, value_name = "TIME")]
        from: DateTime<Utc>,
        /// To (RFC 3339, exclusive).
        #[arg(long, value_name = "TIME")]
        to: DateTime<Utc>,
        /// Largest disagreement tolerated, as a share of the imported figure.
        #[arg(long, default_value_t = 0.02, value_name = "SHARE")]
        tolerance: f64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Run the command.
pub fn run(args: &MeterArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    match &args.command {
        MeterCommand::Import {
            file,
            data,
            format,
            source,
            json,
        } => {
            let format = match format.or_else(|| Format::of(file)) {
                Some(f) => f,
                None => bail!(
                    "cannot tell the format of {} from its name: give --format green-button or --format csv",
                    file.display()
                ),
            };
            let label = source.clone().unwrap_or_else(|| {
                file.file_name()
                    .map_or_else(|| "import".to_string(), |n| n.to_string_lossy().into_owned())
            });
            let (intervals, meta) = read_file(file, format, &label)?;
            let summary = runtime.block_on(import_offline(data, &intervals, &meta))?;
            if *json {
                crate::outln!("{}", serde_json::to_string_pretty(&summary)?);
            } else {
                crate::outln!(
                    "imported {} intervals of {} s from {} ({}; sha256 {}) into {}: {} to {}, {} measured, {} estimated, {} missing{}",
                    summary.intervals,
                    summary.length_s,
                    file.display(),
                    meta.format,
                    meta.sha256,
                    data.display(),
                    summary.from.map_or_else(|| "—".into(), |t| t.to_rfc3339()),
                    summary.to.map_or_else(|| "—".into(), |t| t.to_rfc3339()),
                    summary.measured,
                    summary.estimated,
                    summary.missing,
                    if summary.replaced > 0 {
                        format!("; replaced {} intervals imported before", summary.replaced)
                    } else {
                        String::new()
                    }
                );
            }
            Ok(())
        }
        MeterCommand::Export {
            data,
            from,
            to,
            which,
            format,
            output,
        } => {
            if to <= from {
                bail!("--to must be after --from");
            }
            let store = runtime.block_on(caught_up(data))?;
            let intervals: Vec<Interval> = match which {
                Which::Settlement => store.settlement_series(*from, *to)?.into_inner(),
                Which::Imported => store.imported(*from, *to)?,
                Which::Gateway => store.gateway(*from, *to)?,
            };
            let format = format
                .or_else(|| output.as_deref().and_then(Format::of))
                .unwrap_or(Format::GreenButton);
            let readings: Vec<flexgate_greenbutton::Reading> = intervals.iter().map(reading_of).collect();
            let mut bytes = Vec::new();
            match format {
                Format::GreenButton => {
                    let meta = flexgate_greenbutton::EspiMeta::new(
                        format!("urn:flexgate:meter:{}:{}", from.timestamp(), to.timestamp()),
                        format!("flexgate interval data ({which:?}), {from} to {to}"),
                        crate::clock::wall_now(),
                    );
                    flexgate_greenbutton::write_espi(&mut bytes, &readings, &meta)?;
                }
                Format::Csv => flexgate_greenbutton::write_csv(&mut bytes, &readings)?,
            }
            match output {
                Some(path) => {
                    std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))?;
                    eprintln!("wrote {} intervals to {}", intervals.len(), path.display());
                }
                None => {
                    use std::io::Write as _;
                    std::io::stdout().lock().write_all(&bytes)?;
                }
            }
            Ok(())
        }
        MeterCommand::Check {
            data,
            from,
            to,
            tolerance,
            json,
        } => {
            if !(tolerance.is_finite() && *tolerance >= 0.0) {
                bail!("--tolerance must be a share of at least 0 (0.02 is 2 %)");
            }
            let store = runtime.block_on(caught_up(data))?;
            let check = store.compare(*from, *to, *tolerance)?;
            if *json {
                crate::outln!("{}", serde_json::to_string_pretty(&check)?);
            } else {
                crate::outln!(
                    "{} imported intervals compared with the gateway's measured readings; {} beyond ±{:.1} %{}",
                    check.compared,
                    check.disagreements.len(),
                    tolerance * 100.0,
                    check
                        .mean_share
                        .map_or_else(String::new, |m| format!("; mean difference {:+.2} %", m * 100.0))
                );
                for d in &check.disagreements {
                    crate::outln!(
                        "  {}: imported {:.1} kW, gateway {:.1} kW ({:+.1} %)",
                        d.end.to_rfc3339(),
                        d.imported_kw,
                        d.gateway_kw,
                        d.share * 100.0
                    );
                }
            }
            Ok(())
        }
    }
}

/// Read and check a file of interval data, with its digest; nothing is stored. The meters of a
/// Green Button file that were not imported (a gas meter, the energy a site with generation sent
/// to the grid) are said on stderr: the delivered channel alone overstates a net-metered site's
/// load.
pub fn read_file(path: &Path, format: Format, label: &str) -> Result<(Vec<Interval>, ImportMeta)> {
    let limits = flexgate_greenbutton::Limits::default();
    let readings = match format {
        Format::GreenButton => {
            let import = flexgate_greenbutton::import_espi_file(path, &limits)?;
            for skipped in &import.skipped {
                eprintln!(
                    "not imported: the meter reading at line {}{}: {}",
                    skipped.line,
                    skipped
                        .meter_reading
                        .as_deref()
                        .map_or_else(String::new, |m| format!(" ({m})")),
                    skipped.reason
                );
            }
            import.readings
        }
        Format::Csv => flexgate_greenbutton::import_csv_file(path, &limits)?.readings,
    };
    let (sha256, bytes) = digest(path)?;
    let intervals = readings.iter().map(|r| interval_of(r, label)).collect();
    Ok((
        intervals,
        ImportMeta {
            source: label.to_string(),
            format: format.name(),
            sha256,
            bytes,
            at: crate::clock::wall_now(),
        },
    ))
}

/// SHA-256 of the file and its size, read in blocks.
fn digest(path: &Path) -> Result<(String, u64)> {
    let mut file = std::fs::File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((hex::encode(hasher.finalize()), total))
}

/// The ledger of `data`, opened for the command; a running gateway's is refused with the way
/// round it.
async fn open_ledger(data: &Path) -> Result<Ledger> {
    let dir = data.join("ledger");
    match Ledger::open(&dir).await {
        Ok(l) => Ok(l),
        Err(LedgerError::Locked { .. }) => bail!(
            "the ledger at {} is open in a running gateway: stop it, or use the gateway's API (POST /v1/meter/import)",
            dir.display()
        ),
        Err(e) => Err(e).context("opening the ledger"),
    }
}

/// Check `intervals`, record them in the ledger of `data` and fold them into its store.
async fn import_offline(
    data: &Path,
    intervals: &[Interval],
    meta: &ImportMeta,
) -> Result<crate::intervals::ImportSummary> {
    crate::ledger::private::create_private_dir(data)
        .with_context(|| format!("creating the data directory {}", data.display()))?;
    let ledger = open_ledger(data).await?;
    let store = IntervalStore::open(data, true)?;
    // The store is brought up to date first, so the check sees every earlier import.
    store.catch_up(&ledger.reader())?;
    let summary = store.check_import(intervals).context("nothing was imported")?;
    let recorded: Vec<NewRecord> = records(intervals, &summary, meta)
        .into_iter()
        .map(NewRecord::from)
        .collect();
    ledger.append_all(recorded).await.context("recording the import")?;
    store.catch_up(&ledger.reader())?;
    ledger.close().await.context("closing the ledger")?;
    Ok(summary)
}

/// The store of `data`, brought up to date with its ledger.
async fn caught_up(data: &Path) -> Result<IntervalStore> {
    if !data.join("ledger").join("db").is_file() {
        bail!("no ledger in {} (give the gateway's --data)", data.display());
    }
    let ledger = open_ledger(data).await?;
    let store = IntervalStore::open(data, true)?;
    store.catch_up(&ledger.reader())?;
    ledger.close().await.context("closing the ledger")?;
    Ok(store)
}
