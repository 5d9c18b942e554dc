//! `flexgate simulate --zoo --frontier`: what the hedge's tolerance costs, tolerance by tolerance.
//!
//! Under `tokens` the hedged plan of a small fleet is the best plan its plausible set allows at
//! the tolerance (the hedge's "Mixture", exact to 0.001 % of the equal cut's value), so running
//! the same families at several tolerances traces the set's own trade between betting on the
//! estimate and guarding its worst cases: for the zoo's `physical` and `roofline` families, which
//! give a policy the same knowledge and so get the same plan, the paper's fleet against the
//! fleet that punishes its bet. An operator choosing `hedge_tolerance` reads it off this table.

use anyhow::Result;
use flexgate_lab::ExperimentConfig;
use flexgate_lab::zoo::{ZooFamily, ZooRow, run_zoo_rows};
use flexgate_policies::alloc::Objective;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::fmt::Write as _;

/// The tolerances the frontier is traced at (shares of the equal cut's value); the last is the
/// default under `tokens`.
pub(super) const FRONTIER_TOLERANCES: [f64; 5] = [0.005, 0.01, 0.015, 0.02, 0.025];

/// The families traced when `--curves` names none: the paper's fleet and the one that shares its
/// knowledge and punishes its bet.
pub(super) fn default_families() -> Vec<ZooFamily> {
    ["physical", "roofline"]
        .iter()
        .filter_map(|name| ZooFamily::by_name(name))
        .collect()
}

/// The zoo's `tokens` rows at one tolerance.
#[derive(Debug, Serialize)]
struct FrontierPoint {
    tolerance: f64,
    rows: Vec<ZooRow>,
}

/// Run `families` at every tolerance of [`FRONTIER_TOLERANCES`] and print their `tokens` rows as
/// one table (or JSON). A report, not a verdict: it exits 0 whatever the rows' bars.
pub(super) fn run(
    families: &[ZooFamily],
    base: &ExperimentConfig,
    groups: &[flexgate_lab::groups::Group],
    json: bool,
    quiet: bool,
) -> Result<()> {
    let steps = FRONTIER_TOLERANCES.len() * families.len();
    let bar = if quiet || json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(steps as u64)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} tolerance frontier {bar:40} {pos}/{len} tolerance × family ({eta} left)",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut points = Vec::with_capacity(FRONTIER_TOLERANCES.len());
    for (k, &tolerance) in FRONTIER_TOLERANCES.iter().enumerate() {
        let config = ExperimentConfig {
            hedging: true,
            hedge_tolerance: Some(tolerance),
            ..base.clone()
        };
        let offset = k * families.len();
        let rows = run_zoo_rows(families, groups, &config, &[Objective::Tokens], &mut |done, _| {
            bar.set_position((offset + done) as u64)
        })?;
        points.push(FrontierPoint { tolerance, rows });
    }
    bar.finish_and_clear();
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&points)?);
    } else {
        crate::out!("{}", render(&points, base));
    }
    Ok(())
}

/// The frontier as a Markdown table: one line per tolerance, one column per family and cut.
fn render(points: &[FrontierPoint], base: &ExperimentConfig) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flexgate simulate --zoo --frontier: {} workloads × {} jobs, seed {}, tokens, flexgate hedged at each tolerance\n\
         Each cell: the share of the equal → oracle gap flexgate closes (— where there is no gap), and its value against \
         the equal cut's. At each tolerance the plan of a fleet of up to 256 jobs is the best its plausible set allows, \
         so this is the set's trade between betting on the estimate and guarding its worst cases, not the hedge's. The \
         paper reproduction asks 85 % of the gap at 30 % on `physical`; a family in the set is held to 0.5 % below the \
         equal cut.\n",
        base.workloads, base.jobs, base.seed
    );
    let Some(first) = points.first() else { return out };
    let header: Vec<String> = first
        .rows
        .iter()
        .map(|r| format!("{} {:.0} %", r.family, r.cut * 100.0))
        .collect();
    let _ = writeln!(out, "| tolerance | {} |", header.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(header.len()));
    for point in points {
        let cells: Vec<String> = point
            .rows
            .iter()
            .map(|r| {
                let closure = r
                    .closure(r.flexgate)
                    .map_or_else(|| "—".to_string(), |g| format!("{:.0} %", g * 100.0));
                format!("{closure} ({:+.2} %)", (r.flexgate / r.equal - 1.0) * 100.0)
            })
            .collect();
        let _ = writeln!(out, "| {:.1} % | {} |", point.tolerance * 100.0, cells.join(" | "));
    }
    out
}
