//! `flexgate simulate --season N`: a season of events over one fleet, with and without learning
//! from what each event measured (the experiment is `flexgate_lab::season`).

use super::write_output;
use anyhow::{Context, Result, bail};
use flexgate_lab::JobTemplate;
use flexgate_lab::season::{SeasonConfig, SeasonReport, run_season};
use flexgate_plot::{Chart, Series};
use flexgate_policies::alloc::Objective;
use flexgate_policies::units::Fraction;
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;
use std::path::PathBuf;

/// What `simulate` passes on for a season.
#[derive(Debug)]
pub struct SeasonRequest {
    /// Events.
    pub events: usize,
    /// Jobs in the fleet.
    pub jobs: usize,
    /// Seed.
    pub seed: u64,
    /// Cuts to cycle through (empty: the default cycle).
    pub cuts: Vec<f64>,
    /// Share of jobs starting unknown.
    pub unknown_share: f64,
    /// PFI prediction error sd.
    pub predictor_sd: f64,
    /// Relative error of measured throughput.
    pub noise_sd: f64,
    /// Share of jobs probed before the first event.
    pub probe_share: f64,
    /// The probes' budget, share of fleet throughput.
    pub probe_budget: f64,
    /// What the plans maximise (and the kept shares and gap closure are computed on).
    pub objective: Objective,
    /// Whether flexgate hedges.
    pub hedging: bool,
    /// The hedge's tolerance (`None`: the objective's default).
    pub hedge_tolerance: Option<f64>,
    /// JSON on stdout.
    pub json: bool,
    /// CSV file.
    pub csv: Option<PathBuf>,
    /// SVG file.
    pub plot: Option<PathBuf>,
    /// No progress bar.
    pub quiet: bool,
    /// Where the templates came from, for the header.
    pub source: String,
}

/// Run a season with learning and the same season without it, and report both.
pub fn run(request: &SeasonRequest, templates: &[JobTemplate]) -> Result<()> {
    if !(0.0..=1.0).contains(&request.unknown_share) {
        bail!("--unknown-share must be in [0, 1], got {}", request.unknown_share);
    }
    if !(request.noise_sd.is_finite() && (0.0..1.0).contains(&request.noise_sd)) {
        bail!("--noise-sd must be a number in [0, 1), got {}", request.noise_sd);
    }
    if !(0.0..=1.0).contains(&request.probe_share) {
        bail!("--probe-share must be in [0, 1], got {}", request.probe_share);
    }
    if !(request.probe_budget > 0.0 && request.probe_budget <= 0.5) {
        bail!("--probe-budget must be in (0, 0.5], got {}", request.probe_budget);
    }
    let mut config = SeasonConfig {
        events: request.events,
        jobs: request.jobs,
        seed: request.seed,
        unknown_share: request.unknown_share,
        predictor_sd: request.predictor_sd,
        noise_sd: request.noise_sd,
        probe_share: request.probe_share,
        probe_budget: request.probe_budget,
        objective: request.objective,
        hedging: request.hedging,
        hedge_tolerance: request.hedge_tolerance,
        ..SeasonConfig::default()
    };
    if !request.cuts.is_empty() {
        config.cuts = request
            .cuts
            .iter()
            .map(|&c| Fraction::new(c).with_context(|| format!("cut {c}")))
            .collect::<Result<_>>()?;
    }
    let bar = if request.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(2 * config.events as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} season {bar:40} {pos}/{len} events ({eta} left)")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let learned = run_season(&config, templates, &mut |done| bar.set_position(done as u64))?;
    let frozen_config = SeasonConfig {
        learning: false,
        ..config.clone()
    };
    let events = config.events as u64;
    let frozen = run_season(&frozen_config, templates, &mut |done| {
        bar.set_position(events + done as u64)
    })?;
    bar.finish_and_clear();
    if request.json {
        crate::outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({"learning": learned, "without_learning": frozen}))?
        );
    } else {
        crate::out!("{}", render_table(&learned, &frozen, &request.source));
    }
    if let Some(path) = &request.csv {
        write_output(path, &render_csv(&learned, &frozen))?;
        if !request.json {
            crate::outln!("wrote {}", path.display());
        }
    }
    if let Some(path) = &request.plot {
        write_output(path, &render_plot(&learned, &frozen))?;
        if !request.json {
            crate::outln!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), |g| format!("{:.1} %", g * 100.0))
}

fn render_table(learned: &SeasonReport, frozen: &SeasonReport, source: &str) -> String {
    let c = &learned.config;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flexgate simulate --season: {} events over one fleet of {} jobs (production mix, jobs from {source}), seed {}; \
         {:.0} % of jobs start unknown, the rest with a predicted PFI (sd {}); measured throughput off by N(0, {}²); \
         objective {}, flexgate {}",
        c.events,
        c.jobs,
        c.seed,
        c.unknown_share * 100.0,
        c.predictor_sd,
        c.noise_sd,
        c.objective.as_str(),
        if c.hedging {
            format!(
                "hedged (tolerance {})",
                c.hedge_tolerance
                    .unwrap_or_else(|| flexgate_policies::alloc::curve_aware::default_tolerance(c.objective))
            )
        } else {
            "unhedged".to_string()
        }
    );
    let _ = writeln!(
        out,
        "{} kept (share of uncapped) and gap closure (equal → oracle); knowledge at the plan: unknown/predicted/fleet prior/partial/full\n",
        match c.objective {
            Objective::Tokens => "fleet throughput",
            Objective::Progress => "GPU-weighted progress",
        }
    );
    if let Some(p) = &learned.probing {
        let _ = writeln!(
            out,
            "probing before event 1: {} of {} jobs in the probed tier have a measured curve, after {} steps in {} rounds \
             (at most {} steps in flight, within {:.0} % of fleet throughput; a round is one step: the cap settles, then \
             one throughput window)\n",
            p.measured,
            p.eligible,
            p.steps,
            p.rounds,
            p.most_in_flight,
            c.probe_budget * 100.0
        );
    }
    let _ = writeln!(
        out,
        "{:>5} {:>5} {:>8} {:>8} {:>8} {:>12} {:>18} {:>19}",
        "event", "cut", "equal", "oracle", "flexgate", "gap closure", "knowledge", "without learning"
    );
    for (e, f) in learned.events.iter().zip(&frozen.events) {
        let k = e.knowledge;
        let _ = writeln!(
            out,
            "{:>5} {:>4.0}% {:>7.1}% {:>7.1}% {:>7.1}% {:>12} {:>18} {:>19}",
            e.event,
            e.cut * 100.0,
            e.equal_kept * 100.0,
            e.oracle_kept * 100.0,
            e.flexgate_kept * 100.0,
            pct(e.gap_closure),
            format!(
                "{}/{}/{}/{}/{}",
                k.unknown, k.predicted, k.fleet_prior, k.partial, k.full
            ),
            pct(f.gap_closure),
        );
    }
    if let (Some(last), Some(first)) = (learned.events.last(), learned.events.first()) {
        let _ = writeln!(
            out,
            "\nlearning: gap closure {} at event 1 → {} at event {} ({} without learning); the oracle is 100 %",
            pct(first.gap_closure),
            pct(last.gap_closure),
            last.event,
            pct(frozen.events.last().and_then(|e| e.gap_closure)),
        );
    }
    out
}

fn render_csv(learned: &SeasonReport, frozen: &SeasonReport) -> String {
    let mut out = String::from(
        "event,cut,equal_kept,oracle_kept,flexgate_kept,gap_closure,unknown,predicted,fleet_prior,partial,full,gap_closure_without_learning\n",
    );
    let cell = |v: Option<f64>| v.map_or_else(String::new, |x| format!("{x:.6}"));
    for (e, f) in learned.events.iter().zip(&frozen.events) {
        let k = e.knowledge;
        let _ = writeln!(
            out,
            "{},{},{:.6},{:.6},{:.6},{},{},{},{},{},{},{}",
            e.event,
            e.cut,
            e.equal_kept,
            e.oracle_kept,
            e.flexgate_kept,
            cell(e.gap_closure),
            k.unknown,
            k.predicted,
            k.fleet_prior,
            k.partial,
            k.full,
            cell(f.gap_closure)
        );
    }
    out
}

fn render_plot(learned: &SeasonReport, frozen: &SeasonReport) -> String {
    let series = |r: &SeasonReport| -> Vec<(f64, f64)> {
        r.events
            .iter()
            .filter_map(|e| Some((e.event as f64, e.gap_closure? * 100.0)))
            .collect()
    };
    Chart::new(
        "A season of events: gap closure as the gateway learns",
        "event",
        "gap closure, % of equal → oracle",
    )
    .series(Series::new("flexgate, learning", series(learned)))
    .series(Series::new("flexgate, without learning", series(frozen)))
    .series(Series::new(
        "oracle",
        learned.events.iter().map(|e| (e.event as f64, 100.0)),
    ))
    .to_svg()
}
