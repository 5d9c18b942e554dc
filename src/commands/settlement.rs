//! `flexgate settlement`: a season's settlement from a data directory and the site's
//! `[settlement]` programs.

use crate::ledger::{Ledger, LedgerError};
use crate::reports::settlement::{build, parse_time};
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use std::path::PathBuf;

/// A season's settlement: every event of a period, settled as its program settles it.
///
/// For each event starting in [--from, --to): the program that settles it (`[settlement]` in
/// the configuration: by the program the event names, else the default one), its baseline by
/// that program's method on the utility's imported interval data where there is (the
/// gateway's own readings elsewhere), the reduction committed and delivered, the performance
/// factor (delivered ÷ committed), an estimated payment or penalty, and the intervals it stands
/// on by quality (measured, estimated, missing) and source (imported, gateway). Then the totals.
/// Events whose program is not configured are measured by the meter before and after them.
///
/// Examples:
///   flexgate settlement --data /var/lib/flexgate --config /etc/flexgate/flexgate.toml \
///       --from 2026-06-01 --to 2026-09-01
///   flexgate settlement --data ./audit --config site.toml --from 2026-07-01 --to 2026-08-01 --format csv -o july.csv
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SettlementArgs {
    /// Data directory (a gateway's, or one `flexgate meter import` made).
    #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
    data: PathBuf,
    /// The gateway's configuration, for `[settlement]` and `[site] time_zone` (default: none:
    /// no program, UTC).
    #[arg(long, short, env = "FLEXGATE_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// First day (UTC midnight) or time (RFC 3339).
    #[arg(long, value_name = "DATE")]
    from: String,
    /// Day (UTC midnight) or time the period ends, exclusive.
    #[arg(long, value_name = "DATE")]
    to: String,
    /// The site's zone, over the configuration's.
    #[arg(long, value_name = "ZONE")]
    time_zone: Option<String>,
    /// What to print.
    #[arg(long, value_enum, default_value = "md")]
    format: Format,
    /// Where to write (default: stdout).
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// Markdown: a table per event and the totals.
    Md,
    /// JSON: everything, with each event's baseline report and performance per interval.
    Json,
    /// CSV: one row per event.
    Csv,
    /// A printable HTML page with its chart (no script, no outside resource).
    Html,
    /// That page as PDF, printed by a headless Chromium (`chromium` on the PATH, or
    /// FLEXGATE_CHROMIUM); needs --output.
    Pdf,
}

/// Run the command.
pub fn run(args: &SettlementArgs) -> Result<()> {
    let (from, to) = (
        parse_time(&args.from).map_err(anyhow::Error::msg)?,
        parse_time(&args.to).map_err(anyhow::Error::msg)?,
    );
    if to <= from {
        bail!("--to must be after --from");
    }
    if to - from > chrono::Duration::days(400) {
        bail!("a settlement period is at most 400 days");
    }
    let config = crate::config::Config::load(args.config.as_deref())?;
    let zone = args.time_zone.clone().unwrap_or_else(|| config.site.time_zone.clone());
    let time_zone: chrono_tz::Tz = zone
        .parse()
        .map_err(|_| anyhow::anyhow!("unknown time zone {zone:?} (an IANA name)"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let (store, head) = runtime.block_on(async {
        if !args.data.join("ledger").join("db").is_file() {
            bail!("no ledger in {} (give the gateway's --data)", args.data.display());
        }
        let ledger = match Ledger::open(&args.data.join("ledger")).await {
            Ok(l) => l,
            Err(LedgerError::Locked { .. }) => bail!(
                "the ledger in {} is open in a running gateway: ask it (GET /v1/settlement) or stop it",
                args.data.display()
            ),
            Err(e) => return Err(e).context("opening the ledger"),
        };
        let store = crate::intervals::IntervalStore::open(&args.data, true)?;
        store.catch_up(&ledger.reader())?;
        let head = ledger.head();
        ledger.close().await.context("closing the ledger")?;
        Ok((store, head))
    })?;
    let report = build(
        &store,
        &config.settlement,
        from,
        to,
        time_zone,
        head,
        crate::clock::wall_now(),
    )?
    .signed(&crate::ledger::site_key::SiteKey::load_or_create(&args.data)?);
    let text = match args.format {
        Format::Md => report.to_markdown(time_zone),
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
        Format::Csv => report.to_csv(),
        Format::Html => report.to_html(time_zone),
        Format::Pdf => {
            let Some(path) = &args.output else {
                bail!("--format pdf writes a file: give --output FILE.pdf");
            };
            print_pdf(&report.to_html(time_zone), path)?;
            eprintln!(
                "wrote the settlement of {} events to {}",
                report.events.len(),
                path.display()
            );
            return Ok(());
        }
    };
    match &args.output {
        Some(path) => {
            std::fs::write(path, &text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "wrote the settlement of {} events to {}",
                report.events.len(),
                path.display()
            );
        }
        None => crate::out!("{text}"),
    }
    Ok(())
}

/// Print `html` to `pdf` with a headless Chromium: the browser's own print path, so the PDF is
/// the page as it shows.
fn print_pdf(html: &str, pdf: &std::path::Path) -> Result<()> {
    let chromium = std::env::var_os("FLEXGATE_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| {
            [
                "/usr/bin/chromium",
                "/usr/bin/chromium-browser",
                "/usr/bin/google-chrome",
            ]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
        })
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no Chromium to print with: install chromium, or set FLEXGATE_CHROMIUM; --format html writes the page"
            )
        })?;
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let page = dir.path().join("settlement.html");
    std::fs::write(&page, html).context("writing the page")?;
    let target = if pdf.is_absolute() {
        pdf.to_path_buf()
    } else {
        std::env::current_dir().context("the current directory")?.join(pdf)
    };
    let out = std::process::Command::new(&chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-pdf-header-footer",
        ])
        .arg(format!("--user-data-dir={}", dir.path().join("profile").display()))
        .arg(format!("--print-to-pdf={}", target.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .with_context(|| format!("running {}", chromium.display()))?;
    if !out.status.success() || !target.is_file() {
        bail!(
            "{} did not print the PDF: {}",
            chromium.display(),
            String::from_utf8_lossy(&out.stderr).lines().last().unwrap_or("")
        );
    }
    Ok(())
}
