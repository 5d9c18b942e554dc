//! `flexgate simulate --forecast`: the day-ahead forecast's backtest (`flexgate_lab::
//! forecast_backtest`) on seeds 1 to N, two at a time, as one table.

use anyhow::{Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;

/// `simulate --forecast`: the backtest on seeds 1..=N, two at a time.
pub(super) fn run(forecast_seeds: u64, cost_ceiling: f64, spread: f64, json: bool, quiet: bool) -> Result<()> {
    use flexgate_lab::forecast_backtest::{BacktestConfig, BacktestReport, HORIZONS_H, TUNING_SEEDS, run_backtest};
    if !(cost_ceiling.is_finite() && cost_ceiling > 0.0 && cost_ceiling <= 1.0) {
        bail!("--cost-ceiling must be a share in (0, 1], got {}", cost_ceiling);
    }
    if !(spread.is_finite() && spread > 0.0) {
        bail!("--spread must be a positive factor, got {}", spread);
    }
    let seeds: Vec<u64> = (1..=forecast_seeds).collect();
    let bar = (!quiet && !json).then(|| {
        let bar = ProgressBar::new(seeds.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("backtest {bar:30} {pos}/{len} seeds ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar
    });
    let next = std::sync::atomic::AtomicUsize::new(0);
    let reports = std::sync::Mutex::new(Vec::<BacktestReport>::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&seed) = seeds.get(i) else { break };
                    let mut config = BacktestConfig {
                        seed,
                        ..BacktestConfig::default()
                    };
                    config.params.cost_ceiling = cost_ceiling;
                    config.params.spread = spread;
                    let report = run_backtest(&config);
                    if let Ok(mut all) = reports.lock() {
                        all.push(report);
                    }
                    if let Some(bar) = &bar {
                        bar.inc(1);
                    }
                }
            });
        }
    });
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let mut reports = reports.into_inner().unwrap_or_default();
    reports.sort_by_key(|r| r.seed);
    if json {
        crate::outln!("{}", serde_json::to_string_pretty(&reports)?);
        return Ok(());
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Forecast backtest: 512 GPUs, 24 days, forecasts every 3 h from day 4; cost ceiling {:.0} % of GPU-weighted progress.\n\
         Tuned on seeds {:?}; held out: {}. Coverage: the truth inside P10–P90 (80 % is calibrated); error: mean |P50 − truth| ÷ mean truth;\n\
         naive: the fleet now persists; shortfall: the truth below P10 (a declaration at 90 % confidence short).\n",
        cost_ceiling * 100.0,
        (
            TUNING_SEEDS.first().copied().unwrap_or(0),
            TUNING_SEEDS.last().copied().unwrap_or(0)
        ),
        if forecast_seeds > TUNING_SEEDS.len() as u64 {
            format!("{}–{forecast_seeds}", TUNING_SEEDS.len() + 1)
        } else {
            "none in this run".to_string()
        }
    );
    let _ = writeln!(
        out,
        "| seeds | horizon | forecasts | coverage P10–P90 (min–max per seed) | P50 error | naive error | shortfall at P10 |\n|---|---|---|---|---|---|---|"
    );
    for (label, tuning) in [("held out", false), ("tuning", true)] {
        let chosen: Vec<&BacktestReport> = reports.iter().filter(|r| r.tuning_seed == tuning).collect();
        if chosen.is_empty() {
            continue;
        }
        for (h, horizon) in HORIZONS_H.iter().enumerate() {
            let rows: Vec<_> = chosen.iter().filter_map(|r| r.horizons.get(h)).collect();
            let n: usize = rows.iter().map(|r| r.forecasts).sum();
            let weighted = |f: fn(&flexgate_lab::forecast_backtest::HorizonScore) -> f64| {
                rows.iter().map(|r| f(r) * r.forecasts as f64).sum::<f64>() / n.max(1) as f64
            };
            let (lo, hi) = rows
                .iter()
                .map(|r| r.coverage)
                .fold((f64::MAX, f64::MIN), |(a, b), c| (a.min(c), b.max(c)));
            let _ = writeln!(
                out,
                "| {label} | {horizon} h | {n} | {:.1} % ({:.0}–{:.0} %) | {:.1} % | {:.1} % | {:.1} % |",
                weighted(|r| r.coverage) * 100.0,
                lo * 100.0,
                hi * 100.0,
                weighted(|r| r.p50_error) * 100.0,
                weighted(|r| r.naive_error) * 100.0,
                weighted(|r| r.shortfall_rate) * 100.0,
            );
        }
    }
    crate::outln!("{out}");
    Ok(())
}
