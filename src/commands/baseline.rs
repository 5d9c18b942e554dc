//! `flexgate baseline`: a program's customer baseline for any window, on a data directory's
//! interval data (imported first), as an auditor checks a settlement.

use crate::ledger::{Ledger, LedgerError};
use crate::reports::baseline::{BaselineRequest, baseline, holiday_set, method_of};
use anyhow::{Context, Result, bail};
use chrono::{DateTime, NaiveDate, Utc};
use clap::Args;
use flexgate_policies::baseline::{BaselineReport, HolidayCalendar, HolidaySet, MethodId};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// A program's customer baseline for a window, interval by interval.
///
/// Computed on the data directory's interval data: the utility's imported intervals first
/// (`flexgate meter import`), the gateway's own elsewhere. Days are matched by local clock time
/// in the site's zone (across DST), each interval of the window gets its own baseline, and the
/// report lists the days used and passed over with the reason, the adjustment (its window,
/// factor or offset, and whether its cap bound), and the method's id and version.
///
/// Methods: pjm_economic, caiso_10in10, ercot_middle_8of10, ercot_matching_day_pair,
/// nyiso_cbl, firm_service_level (give --level-kw), meter_before_after.
///
/// The event days default to the days the ledger shows the site curtailing on; --event-day
/// states them instead (repeatable), for imported data alone. The holidays default to the
/// method's program's list (NERC for PJM, California TOU for CAISO, US federal for ERCOT and
/// NYISO); --holidays names others, --holiday adds a day.
///
/// Examples:
///   flexgate baseline --data /var/lib/flexgate --method caiso_10in10 \
///       --start 2026-07-15T21:00:00Z --end 2026-07-15T23:00:00Z --time-zone America/Los_Angeles
///   flexgate baseline --data ./audit --method nyiso_cbl --start ... --end ... \
///       --event-day 2026-07-08 --event-day 2026-07-09 --json
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct BaselineArgs {
    /// Data directory (a gateway's, or one `flexgate meter import` made).
    #[arg(long, env = "FLEXGATE_DATA", default_value = "./flexgate-data", value_name = "DIR")]
    data: PathBuf,
    /// The method's id.
    #[arg(long, value_name = "METHOD")]
    method: MethodId,
    /// The window's start (RFC 3339).
    #[arg(long, value_name = "TIME")]
    start: DateTime<Utc>,
    /// Its end (RFC 3339).
    #[arg(long, value_name = "TIME")]
    end: DateTime<Utc>,
    /// The site's IANA time zone (its `[site] time_zone`).
    #[arg(long, env = "FLEXGATE_TIME_ZONE", default_value = "UTC", value_name = "ZONE")]
    time_zone: String,
    /// An event day to pass over (repeatable; default: the ledger's).
    #[arg(long = "event-day", value_name = "DATE")]
    event_day: Vec<NaiveDate>,
    /// Holiday lists (nerc, us_federal, california_tou; repeatable; default: the program's).
    #[arg(long, value_name = "SET")]
    holidays: Vec<String>,
    /// A holiday to add (repeatable).
    #[arg(long = "holiday", value_name = "DATE")]
    holiday: Vec<NaiveDate>,
    /// firm_service_level: the level, kW.
    #[arg(long, value_name = "KW")]
    level_kw: Option<f64>,
    /// nyiso_cbl: without the weather-sensitive adjustment.
    #[arg(long)]
    no_weather_adjustment: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Run the command.
pub fn run(args: &BaselineArgs) -> Result<()> {
    if args.end <= args.start {
        bail!("--end must be after --start");
    }
    let time_zone: chrono_tz::Tz = args.time_zone.parse().map_err(|_| {
        anyhow::anyhow!(
            "unknown time zone {:?} (an IANA name, e.g. America/New_York)",
            args.time_zone
        )
    })?;
    let method = method_of(args.method, args.level_kw, !args.no_weather_adjustment).map_err(anyhow::Error::msg)?;
    let holidays = if args.holidays.is_empty() && args.holiday.is_empty() {
        None
    } else {
        let sets: Vec<HolidaySet> = if args.holidays.is_empty() {
            crate::reports::baseline::default_holidays(args.method).sets
        } else {
            args.holidays
                .iter()
                .map(|s| holiday_set(s))
                .collect::<Result<_, String>>()
                .map_err(anyhow::Error::msg)?
        };
        let mut calendar = HolidayCalendar::of(&sets);
        for day in &args.holiday {
            calendar = calendar.with_day(*day);
        }
        Some(calendar)
    };
    let request = BaselineRequest {
        method,
        start: args.start,
        end: args.end,
        time_zone,
        event_days: (!args.event_day.is_empty()).then(|| args.event_day.iter().copied().collect::<BTreeSet<_>>()),
        holidays,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let store = runtime.block_on(async {
        if !args.data.join("ledger").join("db").is_file() {
            bail!(
                "no ledger in {} (give the gateway's --data, or import meter data there first)",
                args.data.display()
            );
        }
        let ledger = match Ledger::open(&args.data.join("ledger")).await {
            Ok(l) => l,
            Err(LedgerError::Locked { .. }) => bail!(
                "the ledger in {} is open in a running gateway: ask it (GET /v1/baseline) or stop it",
                args.data.display()
            ),
            Err(e) => return Err(e).context("opening the ledger"),
        };
        let store = crate::intervals::IntervalStore::open(&args.data, true)?;
        store.catch_up(&ledger.reader())?;
        ledger.close().await.context("closing the ledger")?;
        Ok(store)
    })?;
    let report = baseline(&store, &request, crate::clock::wall_now())?;
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out!("{}", render(&report, time_zone));
    }
    Ok(())
}

/// The report for people: the rule, the days, the adjustment, one line per interval.
#[must_use]
pub fn render(report: &BaselineReport, tz: chrono_tz::Tz) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} (version {}): {}\nwindow {} to {} ({}), {} s intervals",
        report.method,
        report.version,
        report.rule,
        report.start.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z"),
        report.end.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z"),
        report.time_zone,
        report.interval_s
    );
    if !report.days_used.is_empty() {
        let _ = writeln!(out, "\ndays used:");
        for d in &report.days_used {
            let _ = writeln!(
                out,
                "  {}  {:.1} kW{}",
                d.date,
                d.mean_kw,
                if d.counted { "" } else { "  (not counted)" }
            );
        }
    }
    if !report.days_excluded.is_empty() {
        let _ = writeln!(out, "\ndays passed over:");
        for d in &report.days_excluded {
            let reason = serde_json::to_value(d.reason).ok();
            let reason = reason
                .as_ref()
                .and_then(|v| v.as_str().map(str::to_string).or_else(|| Some(v.to_string())))
                .unwrap_or_default();
            let _ = writeln!(out, "  {}  {}", d.date, reason.replace('_', " "));
        }
    }
    if let Some(a) = &report.adjustment {
        let _ = writeln!(out, "\nadjustment: {}", serde_json::to_string(a).unwrap_or_default());
    }
    for note in &report.notes {
        let _ = writeln!(out, "note: {note}");
    }
    let _ = writeln!(
        out,
        "\n| interval end ({}) | baseline kW | adjusted kW |\n|---|---|---|",
        report.time_zone
    );
    for i in &report.intervals {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            i.end.with_timezone(&tz).format("%Y-%m-%d %H:%M"),
            i.baseline_kw.map_or_else(|| "—".to_string(), |kw| format!("{kw:.1}")),
            i.adjusted_baseline_kw
                .map_or_else(|| "—".to_string(), |kw| format!("{kw:.1}"))
        );
    }
    out
}
