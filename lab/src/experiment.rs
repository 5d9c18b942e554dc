//! The paper's fleet experiment, reproduced and extended.
//!
//! `workloads` random workloads of `jobs` jobs each are drawn from job templates (the 25
//! published groups, or a fleet file). For every workload and every cut r, each policy plans a
//! GPU-power budget of `(1 − r)·Σ P_max`; the plan's caps are then applied to the *true* curves:
//! realized power and throughput are read off each job's truth curve at its cap (linear
//! interpolation). We report mean tokens/s per job, the gap closure
//! `(policy − equal) / (oracle − equal)`, and every budget or QoS-tier violation.
//!
//! **Mixes.** `random`: uniform over templates. `production`: 80 % of jobs from fine-tuning
//! groups, 20 % from pretraining groups (by job count); within fine-tuning, 8-GPU groups are 3×
//! as likely as 16-GPU ones; within pretraining, 16/32-GPU groups are 2× as likely as 8-GPU ones.
//! Why: published cluster traces (Philly, Helios, Acme, Meta RSC) agree that most jobs are small
//! and short (fine-tuning, evaluation, ablations) while a few large pretraining jobs hold the
//! long, wide allocations; "mostly small fine-tuning jobs, few large pretraining jobs" is the
//! paper's own description. The exact ratio is unpublished, so it is a flag-free constant here,
//! stated in the report.
//!
//! **Predicted PFI.** Each workload draws, per job group, a prediction error from N(0, 0.241²)
//! (the paper's leave-one-out RMSE), so all jobs of one group share one prediction (they share
//! telemetry), and the error is independent across workloads. Predictions are clamped to
//! [0.5, 5]. Policies see the prediction; `flexgate` also sees its standard deviation.
//!
//! **Tiers.** `none` (the paper's setup) or `field`: each job draws a maximum slowdown of 0, 10,
//! 25 or 50 % with probabilities 0.1, 0.3, 0.4, 0.2 (the field demonstrations' flex tiers).

use super::rng::SplitMix64;
use super::truth::JobTemplate;
use flexgate_policies::alloc::{
    AllocationPolicy, Budget, CapPlan, CurveAware, Elasticity, JobSpec, Objective, Proportional, Weighting,
};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::units::{Fraction, Watts};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::sync::Arc;

/// The paper's leave-one-out RMSE of the telemetry PFI predictor (defined in the core, which
/// uses it as the least spread of the fleet prior).
pub use flexgate_policies::predictor::PAPER_PREDICTOR_RMSE;

/// Share of fine-tuning jobs (by count) in the production mix.
pub const PRODUCTION_FINE_TUNING_SHARE: f64 = 0.8;

/// The strategies, in report order.
pub const STRATEGIES: [&str; 5] = ["equal", "pfi_paper", "efficiency", "flexgate", "oracle"];

/// How jobs are drawn from the templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mix {
    /// Uniform over templates.
    Random,
    /// Mostly small fine-tuning jobs, few large pretraining jobs (see module docs).
    Production,
}

/// QoS tiers given to jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TierMix {
    /// No tiers (the paper's experiment); fleet-file `max_slowdown` still applies.
    None,
    /// Field-demonstration tiers: 0 / 10 / 25 / 50 % with probabilities 0.1 / 0.3 / 0.4 / 0.2.
    Field,
}

impl TierMix {
    /// The name `flexgate simulate --tiers` takes and its reports print.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            TierMix::None => "none",
            TierMix::Field => "field",
        }
    }
}

/// What policies are told about each job's elasticity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KnowledgeLevel {
    /// Telemetry-predicted PFI with the paper's error (the paper's setting).
    Predicted,
    /// The measured PFI with its grid.
    Pfi,
    /// The whole measured curve.
    Sweep,
    /// Nothing but the uncapped point.
    Unknown,
    /// Whatever each template's `known` says (fleet files).
    AsGiven,
}

impl KnowledgeLevel {
    /// The name `flexgate simulate --knowledge` takes and its reports print.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            KnowledgeLevel::Predicted => "predicted",
            KnowledgeLevel::Pfi => "pfi",
            KnowledgeLevel::Sweep => "sweep",
            KnowledgeLevel::Unknown => "unknown",
            KnowledgeLevel::AsGiven => "as-given",
        }
    }
}

/// Everything that defines one experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentConfig {
    /// Job mix.
    pub mix: Mix,
    /// Number of random workloads.
    pub workloads: usize,
    /// Jobs per workload.
    pub jobs: usize,
    /// Seed of every random draw.
    pub seed: u64,
    /// Cuts of Σ P_max to plan for.
    pub cuts: Vec<Fraction>,
    /// Tiers.
    pub tiers: TierMix,
    /// Knowledge given to policies.
    pub knowledge: KnowledgeLevel,
    /// Standard deviation of the PFI prediction error.
    pub predictor_sd: f64,
    /// What the policies maximise, and what the gap closure is computed on.
    pub objective: Objective,
    /// Whether `flexgate` hedges against the equal cut (off by default, as in the gateway:
    /// see [`CurveAware::with_hedging`]).
    pub hedging: bool,
    /// The hedge's tolerance (see [`flexgate_policies::alloc::curve_aware::REGRET_TOLERANCE`]).
    pub hedge_tolerance: Option<f64>,
}

impl Default for ExperimentConfig {
    fn default() -> Self {
        Self {
            mix: Mix::Production,
            workloads: 500,
            jobs: 100,
            seed: 7,
            cuts: (0..=8)
                .filter_map(|i| Fraction::new(f64::from(i) * 0.05).ok())
                .collect(),
            tiers: TierMix::None,
            knowledge: KnowledgeLevel::Predicted,
            predictor_sd: PAPER_PREDICTOR_RMSE,
            objective: Objective::Tokens,
            hedging: true,
            hedge_tolerance: None,
        }
    }
}

/// Results of one strategy at one cut.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StrategyResult {
    /// Mean realized throughput per job (tokens/s), over all workloads.
    pub tokens_per_s_per_job: f64,
    /// GPU-weighted progress: Σ gpus × (tokens/s ÷ uncapped tokens/s) ÷ Σ gpus, over all
    /// workloads (1 = nothing lost).
    pub progress: f64,
    /// `(policy − equal) / (oracle − equal)` on the objective in use; `null` where oracle and
    /// equal coincide (no cut).
    pub gap_closure: Option<f64>,
    /// Plans whose realized power exceeded budget + declared shortfall.
    pub budget_violations: u64,
    /// Jobs whose realized slowdown exceeded their tier.
    pub tier_violations: u64,
    /// Plans that could not meet the budget (shortfall declared).
    pub infeasible_plans: u64,
    /// Mean declared shortfall per plan (W).
    pub mean_shortfall_w: f64,
    /// Mean realized fleet power as a fraction of the budget.
    pub mean_power_over_budget: f64,
    /// Jobs capped through the unknown-elasticity fallback.
    pub fallback_jobs: u64,
}

/// Results at one cut, strategies in report order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CutResult {
    /// The cut r.
    pub cut: f64,
    /// Budget violations summed over all strategies.
    pub budget_violations: u64,
    /// Tier violations summed over all strategies.
    pub tier_violations: u64,
    /// Per strategy.
    pub strategies: Strategies,
}

/// Strategy results, serialised as a JSON object in [`STRATEGIES`] order.
#[derive(Debug, Clone, PartialEq)]
pub struct Strategies(pub Vec<(&'static str, StrategyResult)>);

impl Strategies {
    /// Result of one strategy by name.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&StrategyResult> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, r)| r)
    }
}

impl Serialize for Strategies {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, result) in &self.0 {
            map.serialize_entry(name, result)?;
        }
        map.end()
    }
}

/// The whole experiment's report (the `--json` output).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentReport {
    /// Mix.
    pub mix: Mix,
    /// Workloads.
    pub workloads: usize,
    /// Jobs per workload.
    pub jobs: usize,
    /// Seed.
    pub seed: u64,
    /// Where the jobs came from (`synthetic:physical`, `fleet:FILE`, …).
    pub source: String,
    /// Tiers.
    pub tiers: TierMix,
    /// Knowledge level.
    pub knowledge: KnowledgeLevel,
    /// Prediction error sd.
    pub predictor_sd: f64,
    /// The objective the gap closure is computed on.
    pub objective: Objective,
    /// Whether `flexgate` hedged.
    pub hedging: bool,
    /// Per cut.
    pub results: Vec<CutResult>,
}

impl ExperimentReport {
    /// The result at the cut closest to `cut`.
    #[must_use]
    pub fn at_cut(&self, cut: f64) -> Option<&CutResult> {
        self.results
            .iter()
            .min_by(|a, b| (a.cut - cut).abs().total_cmp(&(b.cut - cut).abs()))
    }
}

/// A configuration that cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ExperimentError {
    /// Zero workloads or jobs, no cuts, no templates, or a bad sd.
    #[error("invalid experiment: {0}")]
    Invalid(String),
    /// A job failed validation (cannot happen with validated templates; reported, not panicked).
    #[error(transparent)]
    Plan(#[from] flexgate_policies::alloc::PlanError),
}

#[derive(Default, Clone)]
struct Accumulator {
    tokens: f64,
    /// Σ gpus × priority × relative throughput.
    progress: f64,
    /// Σ gpus × priority.
    progress_weight: f64,
    budget_violations: u64,
    tier_violations: u64,
    infeasible: u64,
    shortfall: f64,
    power_over_budget: f64,
    fallback_jobs: u64,
}

impl Accumulator {
    fn add(&mut self, other: &Self) {
        self.tokens += other.tokens;
        self.progress += other.progress;
        self.progress_weight += other.progress_weight;
        self.budget_violations += other.budget_violations;
        self.tier_violations += other.tier_violations;
        self.infeasible += other.infeasible;
        self.shortfall += other.shortfall;
        self.power_over_budget += other.power_over_budget;
        self.fallback_jobs += other.fallback_jobs;
    }
}

/// Run the experiment over `templates` on every core the machine offers (see
/// [`run_experiment_on`]), calling `progress(done)` as workloads finish.
pub fn run_experiment(
    config: &ExperimentConfig,
    templates: &[JobTemplate],
    source: &str,
    progress: &mut dyn FnMut(usize),
) -> Result<ExperimentReport, ExperimentError> {
    let threads = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    run_experiment_on(threads, config, templates, source, progress)
}

/// Run the experiment over `templates` with at most `threads` threads (0 is taken as 1),
/// calling `progress(done)` with the number of workloads done as each one finishes.
///
/// Workloads are independent (each draws from its own stream, [`SplitMix64::derive`]), so they
/// are planned in parallel; each one's sums are kept apart and added in workload order, so the
/// report is the same, bit for bit, whatever the number of threads.
pub fn run_experiment_on(
    threads: usize,
    config: &ExperimentConfig,
    templates: &[JobTemplate],
    source: &str,
    progress: &mut dyn FnMut(usize),
) -> Result<ExperimentReport, ExperimentError> {
    validate(config, templates)?;
    let family = Arc::new(CurveFamily::h200_generic());
    let policies = Policies {
        proportional: [Weighting::Equal, Weighting::PfiPaper, Weighting::Efficiency]
            .into_iter()
            .map(|w| Proportional::new(w, family.clone()).with_objective(config.objective))
            .collect(),
        flexgate: CurveAware::flexgate(family.clone())
            .with_objective(config.objective)
            .with_hedging(config.hedging)
            .with_hedge_tolerance_or_default(config.hedge_tolerance),
        oracle: CurveAware::oracle(family).with_objective(config.objective),
        weights: mix_weights(config.mix, templates),
    };
    let mut acc = vec![vec![Accumulator::default(); STRATEGIES.len()]; config.cuts.len()];
    in_parallel(
        threads,
        config.workloads,
        progress,
        |w| policies.workload(config, templates, w),
        |workload| {
            for (row, workload_row) in acc.iter_mut().zip(&workload) {
                for (a, b) in row.iter_mut().zip(workload_row) {
                    a.add(b);
                }
            }
        },
    )?;

    let per_job = (config.workloads * config.jobs) as f64;
    let plans = config.workloads as f64;
    let results = config
        .cuts
        .iter()
        .zip(acc)
        .map(|(cut, row)| {
            let progress = |a: &Accumulator| {
                if a.progress_weight > 0.0 {
                    a.progress / a.progress_weight
                } else {
                    0.0
                }
            };
            let mean = |a: &Accumulator| match config.objective {
                Objective::Tokens => a.tokens / per_job,
                Objective::Progress => progress(a),
            };
            let (equal, oracle) = (mean(&row[0]), mean(&row[4]));
            let gap = oracle - equal;
            let strategies: Vec<(&'static str, StrategyResult)> = STRATEGIES
                .iter()
                .zip(&row)
                .map(|(&name, a)| {
                    let value = mean(a);
                    let closure = (gap.abs() > 1e-9 * oracle.abs().max(1.0)).then(|| (value - equal) / gap);
                    (
                        name,
                        StrategyResult {
                            tokens_per_s_per_job: a.tokens / per_job,
                            progress: progress(a),
                            gap_closure: closure,
                            budget_violations: a.budget_violations,
                            tier_violations: a.tier_violations,
                            infeasible_plans: a.infeasible,
                            mean_shortfall_w: a.shortfall / plans,
                            mean_power_over_budget: a.power_over_budget / plans,
                            fallback_jobs: a.fallback_jobs,
                        },
                    )
                })
                .collect();
            CutResult {
                cut: cut.value(),
                budget_violations: row.iter().map(|a| a.budget_violations).sum(),
                tier_violations: row.iter().map(|a| a.tier_violations).sum(),
                strategies: Strategies(strategies),
            }
        })
        .collect();
    Ok(ExperimentReport {
        mix: config.mix,
        workloads: config.workloads,
        jobs: config.jobs,
        seed: config.seed,
        source: source.to_string(),
        tiers: config.tiers,
        knowledge: config.knowledge,
        predictor_sd: config.predictor_sd,
        objective: config.objective,
        hedging: config.hedging,
        results,
    })
}

/// The policies an experiment compares, and the job mix's weights.
struct Policies {
    proportional: Vec<Proportional>,
    flexgate: CurveAware,
    oracle: CurveAware,
    weights: Vec<f64>,
}

impl Policies {
    /// Draw workload `w`, plan it at every cut with every policy, and sum what happened:
    /// `[cut][strategy]`.
    fn workload(
        &self,
        config: &ExperimentConfig,
        templates: &[JobTemplate],
        w: usize,
    ) -> Result<Vec<Vec<Accumulator>>, ExperimentError> {
        let mut rng = SplitMix64::derive(config.seed, w as u64);
        let workload = draw_workload(config, templates, &self.weights, &mut rng);
        let policy_jobs: Vec<JobSpec> = workload
            .iter()
            .map(|d| policy_view(config, &templates[d.template], d))
            .collect();
        let oracle_jobs: Vec<JobSpec> = policy_jobs
            .iter()
            .zip(&workload)
            .map(|(job, d)| JobSpec {
                elasticity: Elasticity::exact(templates[d.template].truth.clone()),
                ..job.clone()
            })
            .collect();
        let flexgate_prepared = self.flexgate.prepare(&policy_jobs)?;
        let oracle_prepared = self.oracle.prepare(&oracle_jobs)?;
        let mut acc = vec![vec![Accumulator::default(); STRATEGIES.len()]; config.cuts.len()];
        for (row, &cut) in acc.iter_mut().zip(&config.cuts) {
            let budget = Budget::Cut(cut);
            for (slot, policy) in row.iter_mut().zip(&self.proportional) {
                account(
                    &policy.plan(&policy_jobs, budget)?,
                    &policy_jobs,
                    &workload,
                    templates,
                    slot,
                );
            }
            account(
                &flexgate_prepared.allocate(budget),
                &policy_jobs,
                &workload,
                templates,
                &mut row[3],
            );
            account(
                &oracle_prepared.allocate(budget),
                &oracle_jobs,
                &workload,
                templates,
                &mut row[4],
            );
        }
        Ok(acc)
    }
}

/// `run(0..count)` on up to `threads` scoped threads, each result handed to `consume` in index
/// order as soon as every earlier one has been; `progress(done)` is called on this thread as
/// each one finishes. Only results that finish ahead of an earlier one are held (workloads cost
/// about the same, so a few), not all of them: an experiment may have 10⁸ workloads. At the
/// first error in index order no new index is started, and that error is returned.
fn in_parallel<T: Send, E: Send>(
    threads: usize,
    count: usize,
    progress: &mut dyn FnMut(usize),
    run: impl Fn(usize) -> Result<T, E> + Sync,
    mut consume: impl FnMut(T),
) -> Result<(), E> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = threads.clamp(1, count.max(1));
    let next = AtomicUsize::new(0);
    let mut ahead: std::collections::BTreeMap<usize, Result<T, E>> = std::collections::BTreeMap::new();
    let (mut in_order, mut done) = (0usize, 0usize);
    let mut failure = None;
    std::thread::scope(|scope| {
        let (sender, receiver) = std::sync::mpsc::channel();
        for _ in 0..threads {
            let sender = sender.clone();
            let (next, run) = (&next, &run);
            scope.spawn(move || {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    // A closed receiver means the caller is gone: stop quietly.
                    if index >= count || sender.send((index, run(index))).is_err() {
                        break;
                    }
                }
            });
        }
        drop(sender);
        for (index, result) in receiver {
            done += 1;
            progress(done);
            if failure.is_some() {
                continue;
            }
            ahead.insert(index, result);
            while let Some(result) = ahead.remove(&in_order) {
                in_order += 1;
                match result {
                    Ok(value) => consume(value),
                    Err(error) => {
                        failure = Some(error);
                        // No thread starts another index; what is running finishes.
                        next.store(count, Ordering::Relaxed);
                        ahead.clear();
                        break;
                    }
                }
            }
        }
    });
    failure.map_or(Ok(()), Err)
}

fn validate(config: &ExperimentConfig, templates: &[JobTemplate]) -> Result<(), ExperimentError> {
    let bad = |m: &str| Err(ExperimentError::Invalid(m.to_string()));
    if config.workloads == 0 || config.jobs == 0 {
        return bad("workloads and jobs must both be at least 1");
    }
    if config.workloads.saturating_mul(config.jobs) > 100_000_000 {
        return bad("workloads × jobs must not exceed 100 million");
    }
    if config.cuts.is_empty() {
        return bad("at least one cut is needed");
    }
    if templates.is_empty() {
        return bad("no job templates to draw from");
    }
    if !(config.predictor_sd.is_finite() && config.predictor_sd >= 0.0) {
        return bad("the predictor sd must be a non-negative number");
    }
    Ok(())
}

/// Probability weight of each template under a mix.
#[must_use]
pub fn mix_weights(mix: Mix, templates: &[JobTemplate]) -> Vec<f64> {
    let has_regimes = templates.iter().all(|t| t.regime.is_some());
    if mix == Mix::Random || !has_regimes {
        return vec![1.0; templates.len()];
    }
    let raw: Vec<(bool, f64)> = templates
        .iter()
        .map(|t| {
            let fine_tuning = t.regime.is_some_and(|r| r.is_fine_tuning());
            let w = match (fine_tuning, t.gpus <= 8) {
                (true, true) => 3.0,
                (true, false) => 1.0,
                (false, true) => 1.0,
                (false, false) => 2.0,
            };
            (fine_tuning, w)
        })
        .collect();
    let class_total = |ft: bool| raw.iter().filter(|(f, _)| *f == ft).map(|(_, w)| w).sum::<f64>();
    let (ft_total, pt_total) = (class_total(true), class_total(false));
    raw.iter()
        .map(|&(ft, w)| {
            let (share, total) = if ft {
                (PRODUCTION_FINE_TUNING_SHARE, ft_total)
            } else {
                (1.0 - PRODUCTION_FINE_TUNING_SHARE, pt_total)
            };
            if total > 0.0 { share * w / total } else { 0.0 }
        })
        .collect()
}

/// One job of a drawn workload: which template, and what the policies are told of it.
pub(crate) struct Drawn {
    /// Index of the job's template.
    pub(crate) template: usize,
    predicted_pfi: Option<f64>,
    /// The sweep this workload measured of the job's template, where the template is measured
    /// afresh per workload ([`crate::truth::SweepPlan`]).
    sweep: Option<Elasticity>,
    max_slowdown: Option<Fraction>,
    index: usize,
}

/// The jobs of one workload (see the module docs: one prediction error per template, then per
/// job its template and tier), drawn from `rng`. Whatever else reads the experiment's workloads
/// (the zoo's knowledge bound) draws them here, so it sees the very same jobs.
pub(crate) fn draw_workload(
    config: &ExperimentConfig,
    templates: &[JobTemplate],
    weights: &[f64],
    rng: &mut SplitMix64,
) -> Vec<Drawn> {
    // One prediction error per template (group) per workload.
    let errors: Vec<f64> = templates.iter().map(|_| rng.normal() * config.predictor_sd).collect();
    // One sweep per template (profile) per workload, from a stream of its own, for templates
    // measured afresh (the others draw nothing more, so their workloads are as before).
    let sweeps: Vec<Option<Elasticity>> = if templates.iter().any(|t| t.known.sweep_plan.is_some()) {
        let mut sweep_rng = SplitMix64::new(rng.next_u64());
        templates
            .iter()
            .map(|t| {
                t.known
                    .sweep_plan
                    .as_ref()
                    .and_then(|plan| plan.measure(&t.truth, t.cap_range.max, &mut sweep_rng))
            })
            .collect()
    } else {
        vec![None; templates.len()]
    };
    (0..config.jobs)
        .map(|index| {
            let template = rng.weighted_index(weights);
            let t = &templates[template];
            let predicted_pfi = t
                .true_pfi
                .filter(|_| t.predicted)
                .map(|p| (p + t.prediction_bias + errors[template]).clamp(0.5, 5.0));
            let tier_draw = rng.next_f64();
            let max_slowdown = match config.tiers {
                TierMix::None => t.max_slowdown,
                TierMix::Field => {
                    let s = match tier_draw {
                        x if x < 0.1 => 0.0,
                        x if x < 0.4 => 0.10,
                        x if x < 0.8 => 0.25,
                        _ => 0.50,
                    };
                    Fraction::new(s).ok()
                }
            };
            Drawn {
                template,
                predicted_pfi,
                sweep: sweeps[template].clone(),
                max_slowdown,
                index,
            }
        })
        .collect()
}

fn policy_view(config: &ExperimentConfig, t: &JobTemplate, d: &Drawn) -> JobSpec {
    let uncapped = t.truth.uncapped();
    let elasticity = match config.knowledge {
        KnowledgeLevel::Predicted => match d.predicted_pfi {
            Some(mean) => Elasticity::PredictedPfi {
                mean,
                sd: config.predictor_sd,
                grid: None,
            },
            None => Elasticity::Unknown,
        },
        KnowledgeLevel::Pfi => match (t.true_pfi, &t.true_pfi_grid) {
            (Some(value), Some(grid)) => Elasticity::Pfi {
                value,
                grid: grid.clone(),
            },
            _ => Elasticity::Unknown,
        },
        KnowledgeLevel::Sweep => Elasticity::exact(t.truth.clone()),
        KnowledgeLevel::Unknown => Elasticity::Unknown,
        KnowledgeLevel::AsGiven => d.sweep.clone().unwrap_or_else(|| as_given(t)),
    };
    JobSpec {
        id: format!("w-{}-{}", d.index, t.name).into(),
        gpus: t.gpus,
        cap_range: t.cap_range,
        uncapped_power: uncapped.power,
        uncapped_tokens: uncapped.tokens,
        elasticity,
        max_slowdown: d.max_slowdown,
        priority: 1.0,
    }
}

fn as_given(t: &JobTemplate) -> Elasticity {
    let k = &t.known;
    if let Some(curve) = &k.sweep {
        return Elasticity::measured(curve.clone(), k.sweep_tokens_sd.clone());
    }
    if let Some(value) = k.pfi {
        let grid = k
            .pfi_grid
            .clone()
            .unwrap_or_else(|| flexgate_policies::pfi::CapGrid::paper_default_for(t.gpus));
        return Elasticity::Pfi { value, grid };
    }
    if let Some(mean) = k.pfi_predicted {
        return Elasticity::PredictedPfi {
            mean,
            sd: k.pfi_predicted_sd.unwrap_or(PAPER_PREDICTOR_RMSE),
            grid: None,
        };
    }
    Elasticity::Unknown
}

/// Apply a plan's caps to the true curves and add what happened to `acc`.
fn account(plan: &CapPlan, jobs: &[JobSpec], workload: &[Drawn], templates: &[JobTemplate], acc: &mut Accumulator) {
    let mut realized = Watts::ZERO;
    for ((entry, job), d) in plan.entries.iter().zip(jobs).zip(workload) {
        let truth = &templates[d.template].truth;
        realized += truth.power_at_cap(entry.cap);
        let tokens = truth.tokens_at_cap(entry.cap);
        acc.tokens += tokens.value();
        let weight = f64::from(job.gpus) * job.priority;
        acc.progress += weight * (tokens / job.uncapped_tokens);
        acc.progress_weight += weight;
        if let Some(limit) = job.max_slowdown {
            let slowdown = 1.0 - tokens / job.uncapped_tokens;
            if slowdown > limit.value() + 1e-9 {
                acc.tier_violations += 1;
            }
        }
    }
    let allowed = plan.budget + plan.shortfall;
    if realized.value() > allowed.value() * (1.0 + 1e-9) + 1e-6 {
        acc.budget_violations += 1;
    }
    if plan.shortfall.value() > 1e-6 {
        acc.infeasible += 1;
    }
    acc.shortfall += plan.shortfall.value();
    if plan.budget.value() > 0.0 {
        acc.power_over_budget += realized / plan.budget;
    }
    acc.fallback_jobs += plan.fallbacks.len() as u64;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TruthFamily, published_groups, synthetic_templates};

    fn small() -> (ExperimentConfig, Vec<JobTemplate>) {
        let groups = published_groups().expect("the published groups load");
        let templates = synthetic_templates(&groups, TruthFamily::Physical).expect("templates calibrate");
        let config = ExperimentConfig {
            workloads: 7,
            jobs: 30,
            tiers: TierMix::Field,
            ..ExperimentConfig::default()
        };
        (config, templates)
    }

    #[test]
    fn the_report_is_the_same_bit_for_bit_on_any_number_of_threads() {
        let (config, templates) = small();
        let run = |threads| run_experiment_on(threads, &config, &templates, "test", &mut |_| {});
        let one = run(1).expect("runs on one thread");
        for threads in [0, 2, 3, 64] {
            assert_eq!(run(threads).expect("runs"), one, "{threads} threads");
        }
    }

    #[test]
    fn progress_counts_every_workload_once_up_to_the_total() {
        let (config, templates) = small();
        let mut seen = Vec::new();
        run_experiment_on(3, &config, &templates, "test", &mut |done| seen.push(done)).expect("runs");
        assert_eq!(seen, (1..=config.workloads).collect::<Vec<_>>());
    }

    #[test]
    fn results_are_consumed_in_index_order_and_the_first_failure_in_that_order_is_reported() {
        let mut progress = |_| {};
        for threads in [1, 2, 3, 8] {
            let mut consumed = Vec::new();
            let all = in_parallel(threads, 50, &mut progress, Ok::<usize, ()>, |i| consumed.push(i));
            assert_eq!(all, Ok(()));
            assert_eq!(consumed, (0..50).collect::<Vec<_>>(), "{threads} threads");

            let mut consumed = Vec::new();
            let failing = |i: usize| if i % 4 == 3 { Err(i) } else { Ok(i) };
            let result = in_parallel(threads, 50, &mut progress, failing, |i| consumed.push(i));
            assert_eq!(result, Err(3), "{threads} threads");
            assert_eq!(consumed, vec![0, 1, 2], "nothing after the failure is consumed");
        }
    }
}
