//! `flexgate simulate`: the paper's fleet experiment, reproduced and beaten.

use super::{read_input, write_output};
use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use flexgate_lab::experiment::{PAPER_PREDICTOR_RMSE, PRODUCTION_FINE_TUNING_SHARE, STRATEGIES};
use flexgate_lab::zoo::{Bar, ZooFamily, ZooReport, run_zoo, zoo_cuts};
use flexgate_lab::{
    ExperimentConfig, ExperimentReport, JobTemplate, KnowledgeLevel, Mix, TierMix, TruthFamily, parse_fleet,
    published_groups, run_experiment,
};
use flexgate_plot::{AxisFormat, Chart, LineStyle, Series};
use flexgate_policies::alloc::Objective;
use flexgate_policies::units::Fraction;
use indicatif::{ProgressBar, ProgressStyle};
use std::fmt::Write as _;
use std::path::PathBuf;

/// Compare allocation policies under cluster-wide GPU power cuts.
///
/// Draws WORKLOADS random workloads of JOBS training jobs, cuts their total GPU power by each
/// CUT, lets every policy choose per-job caps, and reads each job's real throughput off its
/// true power curve. Policies: `equal` (same fraction from every job: the paper's baseline),
/// `pfi_paper` (the paper's rule: cut ∝ P_max/T_max × PFI), `efficiency` (cut ∝ P_max/T_max),
/// `flexgate` (ours: curve-aware, from predicted PFI with its uncertainty) and `oracle`
/// (knows every true curve). `gap_closure` = (policy − equal) / (oracle − equal).
///
/// By default the jobs are synthetic, one per published H200 group (25 groups, PFI 1.10–2.67),
/// calibrated so that each group's PFI on its own cap grid is exactly the published value.
///
/// Examples:
///   flexgate simulate                              # production mix, cuts 0–40 %, table
///   flexgate simulate --mix random --cut 0.3 --json
///   flexgate simulate --curves knee --plot knee.svg --csv knee.csv
///   flexgate simulate --fleet my_jobs.json         # your own measured curves
///   flexgate simulate --season 20 --plot season.svg # 20 events, learning from each
///   flexgate simulate --zoo                        # every curve family, both objectives
///   flexgate simulate --zoo --curves sweep-mixed   # one family of the zoo (repeatable)
///   flexgate simulate --zoo --frontier             # what each hedge tolerance costs
///   flexgate simulate --objective progress         # GPU-weighted progress instead of tokens/s
///   flexgate simulate --season 20 --objective progress  # the gateway's default objective
///   flexgate simulate --forecast                   # backtest the day-ahead flexibility forecast
///
/// Objectives: `tokens` (the paper's: Σ tokens/s) or `progress` (each job's share of its own
/// uncapped throughput, weighted by its GPUs). Gap closure is computed on the one chosen; the
/// table reports both. `flexgate` hedges against the equal cut in every scenario its knowledge
/// cannot rule out, as the gateway does by default (its tolerance: 2.5 % of the equal cut's value
/// under tokens, 0.5 % under progress); --no-hedge shows the bare estimate's plan.
///
/// With --zoo: every curve family (the three built-in ones; those hard for the estimator: deep
/// and varied knees, rooflines, saturating curves, a noisy truth, equal tokens per joule,
/// biased and missing predictions, a mixed fleet; measured sweeps at 4–6 caps with 0.5–2 %
/// reading noise, of physical and of mixed truths, and the same exactly; and held out of the
/// choice of the policy's constants: a rounded knee, a loss that steepens deep down, and that
/// loss measured by noisy sweeps) at 10/20/30/40 % cuts, under both objectives, 100 workloads
/// unless --workloads says otherwise (--curves, repeatable, runs only the families named).
/// Each row says whether the family's truths lie in the plausible set their knowledge implies
/// and holds flexgate to a bar: 0.5 % below the equal cut for a truth in the set (the hedge's
/// guarantee), and for one outside it whose knowledge other families share, 0.5 % below what
/// one plan for all of them can reach (the unhedged plan is shown next to it unless
/// --no-hedge). Then, per objective and cut, that knowledge bound: the best worst margin one
/// shared plan reaches on the families' true curves, with a proof where no plan can meet them
/// all. It exits with status 1 when a row misses its bar.
///
/// With --season N: one fleet of JOBS jobs lives through N events (cuts cycling 20, 30, 40,
/// 25, 35 %, or the --cut values in order) under --objective; half the jobs start unknown, the
/// rest with a predicted PFI; after each event every job is measured at the cap it ran at
/// (throughput off by --noise-sd), and the next plan uses what was measured (the measured
/// points with their errors, the estimator's family below the lowest). The same season without
/// learning is run alongside.
///
/// With --forecast: the day-ahead forecast's backtest. A cluster of 512 GPUs over 24 days:
/// jobs arrive (more by day), queue first come first served with backfill, run for heavy-tailed
/// times (log-normal, median 4 h) under time limits 1.2–4 times their runtime (one in ten killed
/// at its limit), on 1–64 GPUs (powers of two), 40 % re-running a known configuration. Every 3
/// hours after 4 days the forecast is made from what the gateway would know (running jobs'
/// limits, the queue's expected starts as Slurm computes them, the runtimes seen) and scored
/// against the flexibility that then existed: P10–P90 coverage, the P50's error against the
/// naive forecast (the fleet now persists), and the shortfall of a declaration at its P10.
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct SimulateArgs {
    /// Number of random workloads [default: 500; 100 with --zoo].
    #[arg(long, value_name = "N")]
    workloads: Option<usize>,
    /// Jobs per workload.
    #[arg(long, default_value_t = 100, value_name = "N")]
    jobs: usize,
    /// Job mix: `production` = 80 % fine-tuning jobs (small ones favoured), 20 % pretraining
    /// (large ones favoured); `random` = uniform over job groups [default: production]. Not
    /// with --fleet (fleet files are sampled uniformly) nor --season (its fleet is drawn from
    /// the production mix).
    #[arg(long, value_enum, conflicts_with = "fleet")]
    mix: Option<MixArg>,
    /// A cut to evaluate, as a fraction of the jobs' total uncapped GPU power (repeatable).
    #[arg(long = "cut", value_name = "FRACTION", value_parser = parse_fraction)]
    cut: Vec<f64>,
    /// A range of cuts `START:END:STEP`, inclusive (default 0:0.4:0.05 when no --cut is given).
    #[arg(long, value_name = "START:END:STEP", value_parser = parse_cut_range)]
    cuts: Option<CutRange>,
    /// Seed of every random draw; the same seed gives the same numbers.
    #[arg(long, default_value_t = 7)]
    seed: u64,
    /// Family of the synthetic ground-truth curves (not with --fleet) [default: physical].
    /// `physical`: clock and voltage model; `knee`: flat then linear below 85 %; `powerlaw`:
    /// loss ∝ power-cut^1.5; and the zoo's (README, BENCHMARKS.md). With --zoo, repeatable: the
    /// families to run.
    #[arg(long, value_enum, conflicts_with = "fleet")]
    curves: Vec<CurvesArg>,
    /// What the policies maximise: `tokens` (Σ tokens/s, the paper's) or `progress` (Σ GPUs ×
    /// share of the job's own uncapped throughput) [default: tokens]. Not with --zoo, which
    /// runs both.
    #[arg(long, value_enum)]
    objective: Option<ObjectiveArg>,
    /// Do not hedge flexgate's plan against the equal cut: plan on the estimated curves alone
    /// (the gateway's `hedge = false`). By default it is hedged, as the gateway's is.
    #[arg(long)]
    no_hedge: bool,
    /// How far below the equal cut the hedged plan may fall in its worst scenario, as a share
    /// of the equal cut's value (0.02 = 2 %); smaller hedges more [default: 0.025 under
    /// tokens, 0.005 under progress].
    #[arg(long, value_name = "SHARE", value_parser = parse_tolerance, conflicts_with = "no_hedge")]
    hedge_tolerance: Option<f64>,
    /// Run the curve zoo: every family, both objectives, cuts 10–40 % (see above).
    #[arg(long, conflicts_with_all = ["fleet", "season"])]
    zoo: bool,
    /// With --zoo: trace what the hedge's tolerance costs instead. The families named by
    /// --curves (default: `physical` and `roofline`, which give a policy the same knowledge) at
    /// tolerances 0.5, 1, 1.5, 2 and 2.5 % under tokens, one line per tolerance: the share of
    /// the gap closed and the value against the equal cut, cut by cut. Each plan is the best the
    /// plausible set allows at its tolerance, so the table is the set's trade, to choose
    /// `hedge_tolerance` by. A report: exits 0.
    #[arg(long, requires = "zoo", conflicts_with_all = ["hedge_tolerance", "no_hedge"])]
    frontier: bool,
    /// QoS tiers: `none` (the paper's setup) or `field` (max slowdown 0/10/25/50 % with
    /// probabilities 0.1/0.3/0.4/0.2, as in the field demonstrations) [default: none]. Not with
    /// --season.
    #[arg(long, value_enum)]
    tiers: Option<TiersArg>,
    /// What the policies are told about each job: `predicted` PFI (paper's setting, with the
    /// predictor error), the measured `pfi`, the full `sweep`, `unknown`, or `as-given` in the
    /// fleet file (the default with --fleet).
    #[arg(long, value_enum)]
    knowledge: Option<KnowledgeArg>,
    /// Standard deviation of the PFI prediction error (the paper's leave-one-out RMSE).
    #[arg(long, default_value_t = PAPER_PREDICTOR_RMSE, value_name = "SD")]
    predictor_sd: f64,
    /// Draw jobs from this fleet file instead of the synthetic groups (format in the README).
    #[arg(long, value_name = "FILE.json")]
    fleet: Option<PathBuf>,
    /// Print the report as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Also write the results as CSV (one row per cut and policy).
    #[arg(long, value_name = "FILE.csv")]
    csv: Option<PathBuf>,
    /// Also draw throughput per job versus cut, one line per policy, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Run a season of N events over one fleet, learning from each (see above).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=10_000))]
    season: Option<u64>,
    /// With --season: the share of jobs that start with nothing known.
    #[arg(long, default_value_t = 0.5, value_name = "SHARE", requires = "season")]
    unknown_share: f64,
    /// With --season: relative error (sd) of a measured throughput figure.
    #[arg(long, default_value_t = 0.02, value_name = "SD", requires = "season")]
    noise_sd: f64,
    /// With --season: the share of jobs in a probed flex tier. They are probed before the
    /// first event (the gateway's `[probe]`: the paper's cap sweep, run between events).
    #[arg(long, default_value_t = 0.0, value_name = "SHARE", requires = "season")]
    probe_share: f64,
    /// With --probe-share: the most the probes in flight may cost together, as a share of the
    /// fleet's uncapped throughput (`[probe] max_fleet_share`).
    #[arg(long, default_value_t = 0.05, value_name = "SHARE", requires = "season")]
    probe_budget: f64,
    /// Backtest the day-ahead flexibility forecast (see above): a cluster whose jobs arrive,
    /// queue, run and end, forecast every 3 hours, scored at 1, 6, 24 and 48 hours ahead.
    #[arg(long, conflicts_with_all = ["fleet", "season", "zoo"])]
    forecast: bool,
    /// With --forecast: seeds 1 to N (1–30 are the ones the forecast was tuned on; 31 and on
    /// are held out).
    #[arg(long, default_value_t = 50, value_name = "N", requires = "forecast",
          value_parser = clap::value_parser!(u64).range(1..=100))]
    forecast_seeds: u64,
    /// With --forecast: the cost ceiling (the share of GPU-weighted progress the site accepts to
    /// lose) the sheddable watts are counted within.
    #[arg(long, default_value_t = 0.10, value_name = "SHARE", requires = "forecast")]
    cost_ceiling: f64,
    /// With --forecast: the calibration factor on the band's spread (the default is the one
    /// tuned on seeds 1–30; BENCHMARKS.md shows how).
    #[arg(long, default_value_t = flexgate_policies::forecast::DEFAULT_SPREAD, value_name = "FACTOR", requires = "forecast")]
    spread: f64,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum MixArg {
    Production,
    Random,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CurvesArg {
    Physical,
    Knee,
    Powerlaw,
    KneeDeep,
    KneeVaried,
    Roofline,
    Saturating,
    NoisySweep,
    EqualTpj,
    Biased,
    Missing,
    Mixed,
    SmoothKnee,
    TwoSlope,
    SweepPhysical,
    SweepMixed,
    SweepExact,
    SweepTwoSlope,
}

impl CurvesArg {
    fn family(self) -> ZooFamily {
        match self {
            Self::Physical => ZooFamily::Builtin(TruthFamily::Physical),
            Self::Knee => ZooFamily::Builtin(TruthFamily::Knee),
            Self::Powerlaw => ZooFamily::Builtin(TruthFamily::Powerlaw),
            Self::KneeDeep => ZooFamily::KneeDeep,
            Self::KneeVaried => ZooFamily::KneeVaried,
            Self::Roofline => ZooFamily::Roofline,
            Self::Saturating => ZooFamily::Saturating,
            Self::NoisySweep => ZooFamily::NoisySweep,
            Self::EqualTpj => ZooFamily::EqualTpj,
            Self::Biased => ZooFamily::Biased,
            Self::Missing => ZooFamily::Missing,
            Self::Mixed => ZooFamily::Mixed,
            Self::SmoothKnee => ZooFamily::SmoothKnee,
            Self::TwoSlope => ZooFamily::TwoSlope,
            Self::SweepPhysical => ZooFamily::SweepPhysical,
            Self::SweepMixed => ZooFamily::SweepMixed,
            Self::SweepExact => ZooFamily::SweepExact,
            Self::SweepTwoSlope => ZooFamily::SweepTwoSlope,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ObjectiveArg {
    Tokens,
    Progress,
}

impl ObjectiveArg {
    fn objective(self) -> Objective {
        match self {
            Self::Tokens => Objective::Tokens,
            Self::Progress => Objective::Progress,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum TiersArg {
    None,
    Field,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum KnowledgeArg {
    Predicted,
    Pfi,
    Sweep,
    Unknown,
    AsGiven,
}

#[derive(Debug, Clone, Copy)]
struct CutRange {
    start: f64,
    end: f64,
    step: f64,
}

fn parse_fraction(text: &str) -> Result<f64, String> {
    let value: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !(0.0..1.0).contains(&value) {
        return Err(format!("a cut must be in [0, 1) (0.3 means 30 %), got {value}"));
    }
    Ok(value)
}

fn parse_tolerance(text: &str) -> Result<f64, String> {
    let value: f64 = text.trim().parse().map_err(|_| format!("{text:?} is not a number"))?;
    if !(0.0..=1.0).contains(&value) {
        return Err(format!(
            "a tolerance is a share in [0, 1] (0.02 means 2 %), got {value}"
        ));
    }
    Ok(value)
}

fn parse_cut_range(text: &str) -> Result<CutRange, String> {
    let parts: Vec<&str> = text.split(':').collect();
    let [start, end, step] = parts[..] else {
        return Err(format!("expected START:END:STEP such as 0:0.4:0.05, got {text:?}"));
    };
    let (start, end) = (parse_fraction(start)?, parse_fraction(end)?);
    let step: f64 = step
        .trim()
        .parse()
        .map_err(|_| format!("step {step:?} is not a number"))?;
    if !(step.is_finite() && step > 0.0) || end < start {
        return Err("need START ≤ END and a positive STEP".to_string());
    }
    if (end - start) / step > 1000.0 {
        return Err("at most 1000 cut levels".to_string());
    }
    Ok(CutRange { start, end, step })
}

impl CutRange {
    fn values(self) -> Vec<f64> {
        let count = ((self.end - self.start) / self.step + 1e-9).floor() as usize;
        (0..=count).map(|i| self.start + self.step * i as f64).collect()
    }
}

/// The cut levels asked for: --cut values and the --cuts range, sorted and de-duplicated.
fn cut_levels(args: &SimulateArgs) -> Result<Vec<Fraction>> {
    let mut cuts = args.cut.clone();
    match args.cuts {
        Some(range) => cuts.extend(range.values()),
        None if cuts.is_empty() => cuts.extend(
            CutRange {
                start: 0.0,
                end: 0.4,
                step: 0.05,
            }
            .values(),
        ),
        None => {}
    }
    // Round to 1e-9 so 0.30000000000000004 and 0.3 are one level.
    let mut cuts: Vec<f64> = cuts.into_iter().map(|c| (c * 1e9).round() / 1e9).collect();
    cuts.sort_by(f64::total_cmp);
    cuts.dedup();
    cuts.into_iter()
        .map(|c| Fraction::new(c).with_context(|| format!("cut {c}")))
        .collect()
}

fn load_templates(args: &SimulateArgs) -> Result<(Vec<JobTemplate>, String)> {
    match &args.fleet {
        Some(path) => {
            let text = read_input(path)?;
            let templates = parse_fleet(&text).with_context(|| format!("invalid fleet file {}", path.display()))?;
            Ok((templates, format!("fleet:{}", path.display())))
        }
        None => {
            let groups = published_groups().context("the embedded PFI group table is corrupt")?;
            let family = curves_family(args)?;
            let templates = family
                .templates(&groups)
                .context("calibrating the synthetic job curves")?;
            Ok((templates, format!("synthetic:{}", family.name())))
        }
    }
}

/// Refuse a flag given for a run it does not change: a flag silently ignored misleads (until
/// issue 29 `--season 20 --objective progress` printed the tokens season).
fn refuse_inapplicable(args: &SimulateArgs) -> Result<()> {
    let given = |present: bool, flag: &str, mode: &str, why: &str| {
        if present {
            bail!("{flag} does not apply with {mode}: {why}");
        }
        Ok(())
    };
    if args.zoo {
        given(
            args.objective.is_some(),
            "--objective",
            "--zoo",
            "the zoo runs both objectives",
        )?;
        given(
            args.knowledge.is_some(),
            "--knowledge",
            "--zoo",
            "each family is told what its definition says (README, the curve zoo)",
        )?;
        given(
            args.plot.is_some(),
            "--plot",
            "--zoo",
            "the zoo is a table (--csv writes it as CSV)",
        )?;
    }
    if args.forecast {
        for (present, flag) in [
            (args.objective.is_some(), "--objective"),
            (args.mix.is_some(), "--mix"),
            (args.tiers.is_some(), "--tiers"),
            (args.knowledge.is_some(), "--knowledge"),
            (args.workloads.is_some(), "--workloads"),
            (args.plot.is_some(), "--plot"),
            (args.csv.is_some(), "--csv"),
            (!args.cut.is_empty(), "--cut"),
        ] {
            given(
                present,
                flag,
                "--forecast",
                "the backtest's cluster and jobs are its own (--forecast-seeds, --cost-ceiling)",
            )?;
        }
    }
    if args.season.is_some() {
        given(
            args.workloads.is_some(),
            "--workloads",
            "--season",
            "a season is one fleet (--jobs sets its size)",
        )?;
        given(
            args.mix.is_some(),
            "--mix",
            "--season",
            "the season's fleet is drawn from the production mix",
        )?;
        given(
            args.tiers.is_some(),
            "--tiers",
            "--season",
            "the season's jobs have no tiers",
        )?;
        given(
            args.knowledge.is_some(),
            "--knowledge",
            "--season",
            "what the gateway knows is what it measured (--unknown-share sets where it starts)",
        )?;
    }
    Ok(())
}

/// Run the command.
pub fn run(args: &SimulateArgs) -> Result<()> {
    refuse_inapplicable(args)?;
    if !(args.predictor_sd.is_finite() && args.predictor_sd >= 0.0) {
        bail!(
            "--predictor-sd must be a non-negative number, got {}",
            args.predictor_sd
        );
    }
    if args.zoo {
        return run_zoo_table(args);
    }
    if args.forecast {
        return super::simulate_forecast::run(
            args.forecast_seeds,
            args.cost_ceiling,
            args.spread,
            args.json,
            args.quiet,
        );
    }
    let (templates, source) = load_templates(args)?;
    if let Some(events) = args.season {
        if args.cuts.is_some() {
            bail!("--season cycles through --cut values in order; --cuts ranges are for the fleet experiment");
        }
        let request = super::season::SeasonRequest {
            events: usize::try_from(events).context("--season")?,
            jobs: args.jobs,
            seed: args.seed,
            cuts: args.cut.clone(),
            unknown_share: args.unknown_share,
            predictor_sd: args.predictor_sd,
            noise_sd: args.noise_sd,
            probe_share: args.probe_share,
            probe_budget: args.probe_budget,
            objective: args.objective.map_or(Objective::Tokens, ObjectiveArg::objective),
            hedging: !args.no_hedge,
            hedge_tolerance: args.hedge_tolerance,
            json: args.json,
            csv: args.csv.clone(),
            plot: args.plot.clone(),
            quiet: args.quiet,
            source,
        };
        return super::season::run(&request, &templates);
    }
    let knowledge = match (args.knowledge, args.fleet.is_some()) {
        (None, false) => curves_family(args)?.knowledge(),
        (Some(KnowledgeArg::Predicted), _) => KnowledgeLevel::Predicted,
        (Some(KnowledgeArg::Pfi), _) => KnowledgeLevel::Pfi,
        (Some(KnowledgeArg::Sweep), _) => KnowledgeLevel::Sweep,
        (Some(KnowledgeArg::Unknown), _) => KnowledgeLevel::Unknown,
        (Some(KnowledgeArg::AsGiven), _) | (None, true) => KnowledgeLevel::AsGiven,
    };
    let mix = match (args.mix, args.fleet.is_some()) {
        (_, true) => Mix::Random,
        (Some(MixArg::Production) | None, false) => Mix::Production,
        (Some(MixArg::Random), false) => Mix::Random,
    };
    let config = ExperimentConfig {
        mix,
        workloads: args.workloads.unwrap_or(500),
        jobs: args.jobs,
        seed: args.seed,
        cuts: cut_levels(args)?,
        tiers: match args.tiers {
            Some(TiersArg::None) | None => TierMix::None,
            Some(TiersArg::Field) => TierMix::Field,
        },
        knowledge,
        predictor_sd: args.predictor_sd,
        objective: args.objective.map_or(Objective::Tokens, ObjectiveArg::objective),
        hedging: !args.no_hedge,
        hedge_tolerance: args.hedge_tolerance,
    };

    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(config.workloads as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} simulating {bar:40} {pos}/{len} workloads ({eta} left)")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = run_experiment(&config, &templates, &source, &mut |done| bar.set_position(done as u64))?;
    bar.finish_and_clear();

    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out!("{}", render_table(&report));
    }
    if let Some(path) = &args.csv {
        write_output(path, &render_csv(&report))?;
        if !args.json {
            crate::outln!("wrote {}", path.display());
        }
    }
    if let Some(path) = &args.plot {
        write_output(path, &render_plot(&report))?;
        if !args.json {
            crate::outln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// The one truth family of an experiment or a season (`--curves`, physical by default).
fn curves_family(args: &SimulateArgs) -> Result<ZooFamily> {
    match args.curves.as_slice() {
        [] => Ok(ZooFamily::Builtin(TruthFamily::Physical)),
        [one] => Ok(one.family()),
        _ => bail!("--curves names one family, except with --zoo, which runs each family named"),
    }
}

/// `--zoo`: every family, both objectives, the zoo's cuts (or the ones asked for).
fn run_zoo_table(args: &SimulateArgs) -> Result<()> {
    let groups = published_groups().context("the embedded PFI group table is corrupt")?;
    let cuts = if args.cut.is_empty() && args.cuts.is_none() {
        zoo_cuts()
    } else {
        cut_levels(args)?
    };
    let base = ExperimentConfig {
        mix: match args.mix {
            Some(MixArg::Production) | None => Mix::Production,
            Some(MixArg::Random) => Mix::Random,
        },
        workloads: args.workloads.unwrap_or(100),
        jobs: args.jobs,
        seed: args.seed,
        cuts,
        tiers: match args.tiers {
            Some(TiersArg::None) | None => TierMix::None,
            Some(TiersArg::Field) => TierMix::Field,
        },
        predictor_sd: args.predictor_sd,
        hedging: !args.no_hedge,
        hedge_tolerance: args.hedge_tolerance,
        ..ExperimentConfig::default()
    };
    let families: Vec<ZooFamily> = if !args.curves.is_empty() {
        args.curves.iter().map(|c| c.family()).collect()
    } else if args.frontier {
        super::simulate_frontier::default_families()
    } else {
        ZooFamily::ALL.to_vec()
    };
    if args.frontier {
        return super::simulate_frontier::run(&families, &base, &groups, args.json, args.quiet);
    }
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new((families.len() * 2) as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} curve zoo {bar:40} {pos}/{len} family × objective ({eta} left)")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = run_zoo(&families, &groups, &base, &mut |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    if args.json {
        crate::outln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::out!("{}", render_zoo(&report));
    }
    if let Some(path) = &args.csv {
        write_output(path, &render_zoo_csv(&report))?;
        if !args.json {
            crate::outln!("wrote {}", path.display());
        }
    }
    let failed = report.rows.iter().filter(|r| !r.passes()).count();
    if failed > 0 {
        bail!(
            "{failed} of {} rows miss an acceptance condition (marked ✗ above)",
            report.rows.len()
        );
    }
    Ok(())
}

/// The zoo as a Markdown table: gap closure per family, objective and cut.
fn render_zoo(report: &ZooReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "flexgate simulate --zoo: {} workloads × {} jobs per family and objective, seed {}, production mix\n\
         gap closure = (policy − equal) / (oracle − equal) on the objective; set: whether every truth of the family \
         lies in the plausible set its knowledge implies (in) or not (out); bar: what flexgate must reach, as a \
         share of the equal cut: 0.5 % below it for a truth in the set (the hedge's guarantee), and for one outside \
         it whose knowledge other families share, 0.5 % below what one plan for all of them can reach (the \
         knowledge bound, below); ✓ = flexgate ≥ bar; flexgate {}\n",
        report.workloads,
        report.jobs,
        report.seed,
        if report.hedging {
            "hedged (the unhedged plan next to it)"
        } else {
            "unhedged (--no-hedge)"
        }
    );
    let _ = writeln!(
        out,
        "| family | set | objective | cut | equal | pfi_paper | flexgate unhedged | flexgate | flexgate − equal | bar | ok |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    let pct = |v: Option<f64>| v.map_or_else(|| "—".to_string(), |g| format!("{:.0} %", g * 100.0));
    for r in &report.rows {
        let equal = match r.objective {
            Objective::Tokens => thousands(r.equal),
            Objective::Progress => format!("{:.1} %", r.equal * 100.0),
        };
        let unhedged = if report.hedging {
            pct(r.closure(r.unhedged))
        } else {
            "(same)".to_string()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} % | {equal} | {} | {unhedged} | {} | {:+.2} % | {:+.2} %{} | {} |",
            r.family,
            if r.in_plausible_set { "in" } else { "out" },
            r.objective.as_str(),
            r.cut * 100.0,
            pct(r.closure(r.pfi_paper)),
            pct(r.closure(r.flexgate)),
            (r.flexgate / r.equal - 1.0) * 100.0,
            (r.bar / r.equal - 1.0) * 100.0,
            match r.judged_by {
                Bar::EqualCut => "",
                Bar::KnowledgeBound => " (bound)",
            },
            if r.passes() { "✓" } else { "✗" }
        );
    }
    let passed = report.rows.iter().filter(|r| r.passes()).count();
    let _ = writeln!(out, "\n{passed} of {} rows pass.", report.rows.len());
    render_zoo_bounds(&mut out, report);
    out
}

/// The knowledge bound per objective and cut: what any policy could do on the rows of the
/// families that are told the same.
fn render_zoo_bounds(out: &mut String, report: &ZooReport) {
    let Some(first) = report.bounds.first() else { return };
    let _ = writeln!(
        out,
        "\nWhat any policy could do. These families give a policy the same knowledge ({}), so any policy plans \
         them alike: one plan per workload must serve all their rows. Each row's target is its equal cut less \
         0.5 % of it, and under tokens at 30 % the physical family's is also the paper reproduction's (85 % of its \
         gap). The best such plans (module knowledge_bound, on the true curves of all of them at once) reach a \
         worst margin over these targets (a share of each family's equal cut) of at least the first figure, a \
         plan that reaches it read on the true curves (never below the equal cut's own, where no gain is asked), \
         and at most the second. A second figure below 0 proves that no policy can meet every target; a first \
         at or above 0 that some plan does. Rows of these families outside the plausible set are judged \
         against the first figure.\n",
        first.bound.families.join(", ")
    );
    let _ = writeln!(
        out,
        "| objective | cut | targets | best worst margin: at least … at most | verdict | families that bind |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for b in &report.bounds {
        let bind: Vec<String> = b
            .bound
            .families
            .iter()
            .zip(&b.bound.weights)
            .filter(|(_, w)| **w >= 0.01)
            .map(|(f, w)| format!("{f} {w:.2}"))
            .collect();
        let verdict = if b.bound.unattainable() {
            "no policy can pass them all"
        } else if b.bound.attainable() {
            "attainable"
        } else {
            "undecided"
        };
        let _ = writeln!(
            out,
            "| {} | {:.0} % | {} | {:+.3} % … {:+.3} % | {verdict} | {} |",
            b.objective.as_str(),
            b.cut * 100.0,
            match (b.with_paper_target, b.in_set_only) {
                (true, true) => "equal − 0.5 %, physical ≥ 85 % of its gap; the families in the plausible set only",
                (true, false) => "equal − 0.5 %, physical ≥ 85 % of its gap",
                _ => "equal − 0.5 %",
            },
            b.bound.margin_lower * 100.0,
            b.bound.margin_upper * 100.0,
            bind.join(", ")
        );
    }
}

fn render_zoo_csv(report: &ZooReport) -> String {
    let mut out = String::from(
        "family,objective,cut,equal,pfi_paper,flexgate_unhedged,flexgate,oracle,never_worse_than_equal,at_least_the_paper\n",
    );
    for r in &report.rows {
        let _ = writeln!(
            out,
            "{},{},{},{:.6},{:.6},{:.6},{:.6},{:.6},{},{}",
            r.family,
            r.objective.as_str(),
            r.cut,
            r.equal,
            r.pfi_paper,
            r.unhedged,
            r.flexgate,
            r.oracle,
            r.never_worse_than_equal,
            r.at_least_the_paper
        );
    }
    out
}

fn render_table(report: &ExperimentReport) -> String {
    let mut out = String::new();
    let mix = match report.mix {
        Mix::Production => format!(
            "production mix ({:.0} % fine-tuning jobs, {:.0} % pretraining)",
            PRODUCTION_FINE_TUNING_SHARE * 100.0,
            (1.0 - PRODUCTION_FINE_TUNING_SHARE) * 100.0
        ),
        Mix::Random => "random mix".to_string(),
    };
    let _ = writeln!(
        out,
        "flexgate simulate: {mix}, {} workloads × {} jobs, seed {}, jobs from {}, tiers {}, knowledge {} (sd {})",
        report.workloads,
        report.jobs,
        report.seed,
        report.source,
        report.tiers.as_str(),
        report.knowledge.as_str(),
        report.predictor_sd
    );
    let _ = writeln!(
        out,
        "tokens/s per job (gap closure: share of the equal → oracle gap recovered, on the {} objective{})\n",
        report.objective.as_str(),
        if report.hedging { "; flexgate hedged" } else { "" }
    );
    let _ = write!(out, "{:>5}", "cut");
    for name in STRATEGIES {
        let _ = write!(out, " {name:>19}");
    }
    let _ = writeln!(out, " {:>11}", "violations");
    for cut in &report.results {
        let _ = write!(out, "{:>4.0}%", cut.cut * 100.0);
        for name in STRATEGIES {
            let cell = cut.strategies.get(name).map_or_else(String::new, |s| {
                let closure = s
                    .gap_closure
                    .map_or_else(|| "    —".to_string(), |g| format!("{:>4.0}%", g * 100.0));
                format!("{:>12} {closure:>6}", thousands(s.tokens_per_s_per_job))
            });
            let _ = write!(out, " {cell:>19}");
        }
        let _ = writeln!(out, " {:>5}/{:<5}", cut.budget_violations, cut.tier_violations);
    }
    let _ = writeln!(
        out,
        "\nGPU-weighted progress kept (Σ GPUs × share of each job's own uncapped throughput ÷ Σ GPUs)\n"
    );
    let _ = write!(out, "{:>5}", "cut");
    for name in STRATEGIES {
        let _ = write!(out, " {name:>10}");
    }
    let _ = writeln!(out);
    for cut in &report.results {
        let _ = write!(out, "{:>4.0}%", cut.cut * 100.0);
        for name in STRATEGIES {
            let cell = cut
                .strategies
                .get(name)
                .map_or_else(String::new, |s| format!("{:.2}%", s.progress * 100.0));
            let _ = write!(out, " {cell:>10}");
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(
        out,
        "\nviolations = budget/tier, summed over policies: a budget violation is a plan whose real draw \
         exceeded its budget plus the shortfall it declared; a tier violation is a job slowed more than its tier allows."
    );
    let infeasible: Vec<String> = report
        .results
        .iter()
        .filter_map(|c| {
            let n = c.strategies.get("flexgate").map_or(0, |s| s.infeasible_plans);
            (n > 0).then(|| format!("{:.0} %: {n}", c.cut * 100.0))
        })
        .collect();
    if !infeasible.is_empty() {
        let _ = writeln!(
            out,
            "flexgate plans that could not meet the cut with every job at its floor (shortfall reported): {}",
            infeasible.join(", ")
        );
    }
    out
}

/// 61650.4 → "61,650".
fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut grouped = String::new();
    for (i, ch) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(ch);
    }
    if rounded < 0.0 { format!("-{grouped}") } else { grouped }
}

fn render_csv(report: &ExperimentReport) -> String {
    let mut out = String::from(
        "cut,strategy,tokens_per_s_per_job,progress,gap_closure,budget_violations,tier_violations,infeasible_plans,\
         mean_shortfall_w,mean_power_over_budget,fallback_jobs\n",
    );
    for cut in &report.results {
        for (name, s) in &cut.strategies.0 {
            let _ = writeln!(
                out,
                "{},{name},{:.3},{:.6},{},{},{},{},{:.3},{:.6},{}",
                cut.cut,
                s.tokens_per_s_per_job,
                s.progress,
                s.gap_closure.map_or_else(String::new, |g| format!("{g:.6}")),
                s.budget_violations,
                s.tier_violations,
                s.infeasible_plans,
                s.mean_shortfall_w,
                s.mean_power_over_budget,
                s.fallback_jobs
            );
        }
    }
    out
}

fn render_plot(report: &ExperimentReport) -> String {
    let title = format!(
        "Throughput under a GPU power cut — {:?} mix, {} × {} jobs, {}",
        report.mix, report.workloads, report.jobs, report.source
    );
    let mut chart = Chart::new(title, "cut of total uncapped GPU power", "tokens/s per job (mean)")
        .x_format(AxisFormat::Percent)
        // From zero: a y axis starting at 52 k tokens/s made a few percent look like halves.
        .y_from_zero(true);
    for name in STRATEGIES {
        let points: Vec<(f64, f64)> = report
            .results
            .iter()
            .filter_map(|c| c.strategies.get(name).map(|s| (c.cut, s.tokens_per_s_per_job)))
            .collect();
        let style = if name == "oracle" {
            LineStyle::Dashed
        } else {
            LineStyle::Solid
        };
        chart = chart.series(Series::new(name, points).style(style));
    }
    chart.to_svg()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_ranges_parse_inclusively_and_reject_nonsense() {
        let r = parse_cut_range("0:0.4:0.05").expect("valid range");
        assert_eq!(r.values().len(), 9);
        assert!(parse_cut_range("0.4:0:0.05").is_err());
        assert!(parse_cut_range("0:1.5:0.1").is_err());
        assert!(parse_cut_range("0:0.4:0").is_err());
        assert!(parse_cut_range("0:0.4").is_err());
        assert!(parse_cut_range("0:0.9:0.00001").is_err());
        assert!(parse_fraction("NaN").is_err());
        assert!(parse_fraction("-0.1").is_err());
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(61650.4), "61,650");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-1234.0), "-1,234");
    }
}
