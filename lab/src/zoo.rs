//! The curve zoo: truth families built to be hard for the estimator, and the table that runs
//! every policy on all of them (`flexgate simulate --zoo`).
//!
//! The built-in families ([`TruthFamily`]) are the ones the estimator was developed on. A site's
//! own jobs will not follow them, so the zoo adds families that break one assumption each. Every
//! family keeps the 25 published groups' sizes, draws and grids; each group's truth is
//! calibrated so that its PFI on its own grid is the published value where the family can reach
//! it (otherwise the nearest it can, and the prediction is centred on the truth's real PFI):
//!
//! | family | truth `τ(x)` at relative power `x` | what it breaks |
//! |---|---|---|
//! | `knee_deep` | `1 − k·max(0, 0.6 − x)` | no loss until 60 % of the draw, then a cliff |
//! | `knee_varied` | `1 − k·max(0, c − x)`, `c` ∈ [0.55, 0.95] per group | one PFI, knees at any depth |
//! | `roofline` | `min(1, x / r)` | throughput proportional to power below a roofline |
//! | `saturating` | `(1 − e^(−x/s)) / (1 − e^(−1/s))` | strongly curved everywhere |
//! | `noisy_sweep` | physical × (1 + 4 % noise) per 25 W | non-concave truth; a sweep with its own 4 % noise is known |
//! | `equal_tpj` | `mixed` shapes, tokens per joule equal ± 2 % | energy intensity carries no information |
//! | `biased` | physical; predictions ± 0.6 off (fine-tuning +, pretraining −) | a predictor 2.5 sd wrong that claims its usual sd |
//! | `missing` | physical; every other group has no prediction | half the fleet unknown |
//! | `mixed` | per group one of physical, knee 0.85, knee 0.6, power law, roofline, saturating | a fleet of many shapes |
//! | `smooth_knee` | `1 − k·w·(sp((0.75 − x)/w) − sp(−0.25/w))`, `sp` the softplus, `w = 0.06` | a knee between the hedge's hinges, rounded (held out) |
//! | `two_slope` | `1 − a·max(0, 0.9 − x) − 3a·max(0, 0.5 − x)` | loss from the top that steepens deep down (held out) |
//!
//! **Held out.** The estimator was not changed for the zoo: its constants predate it. The
//! hedge's (tolerance, plausible PFI range, knee depths) were chosen looking at seed 1 (30
//! workloads) of the first twelve families; the reported table is seed 7. `smooth_knee` and
//! `two_slope` were added only after every constant of the policy was fixed (issue 14's third
//! step) and were never run before that: they test the hedge on shapes it was not chosen on.

use super::experiment::{ExperimentConfig, ExperimentError, ExperimentReport, KnowledgeLevel, run_experiment};
use super::groups::Group;
use super::knowledge_bound::{BoundError, BoundFamily, KnowledgeBound, knowledge_bound};
use super::rng::SplitMix64;
use super::truth::{
    JobTemplate, Known, SweepPlan, TemplateError, TruthFamily, estimated_tokens_max, grid_pfi, group_template,
    shaped_curve, synthetic_templates, truth_caps, truth_curve, uncapped_draw,
};
use flexgate_policies::alloc::Objective;
use flexgate_policies::curve::{ConcaveHull, CurvePoint, PowerCurve};
use flexgate_policies::estimate::CurveFamily;
use flexgate_policies::physics::{CalibrationError, calibrate_scanning};
use flexgate_policies::units::{Fraction, TokensPerSec, WattsPerGpu};
use serde::Serialize;

/// A family of the zoo, or a built-in one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ZooFamily {
    /// A built-in truth family (physical, knee at 0.85, power law 1.5).
    Builtin(TruthFamily),
    /// Knee at 60 % of the draw.
    KneeDeep,
    /// A knee per group between 55 % and 95 %.
    KneeVaried,
    /// Throughput proportional to power below a roofline.
    Roofline,
    /// An exponentially saturating curve.
    Saturating,
    /// A non-concave noisy truth, with a noisy measured sweep known.
    NoisySweep,
    /// Mixed shapes with (nearly) equal tokens per joule.
    EqualTpj,
    /// Physical truth, predictions biased by ± 0.6.
    Biased,
    /// Physical truth, half the groups without a prediction.
    Missing,
    /// One of six shapes per group.
    Mixed,
    /// A knee at 75 % rounded over ±6 % of the draw (held out: added after the policy was fixed).
    SmoothKnee,
    /// A gentle slope below 90 % that steepens fourfold below 50 % (held out, likewise).
    TwoSlope,
    /// Physical truths, each measured afresh per workload at 4–6 caps with 0.5–2 % noise.
    SweepPhysical,
    /// The `mixed` family's six shapes, measured the same way.
    SweepMixed,
    /// The `mixed` family's shapes measured exactly at the same caps (the sweeps' noise-free
    /// control).
    SweepExact,
    /// `two_slope` truths measured as `sweep_physical` (held out of every choice of the
    /// measured curves' estimator and hedge).
    SweepTwoSlope,
}

impl ZooFamily {
    /// Every family, built-in ones first.
    pub const ALL: [ZooFamily; 18] = [
        ZooFamily::Builtin(TruthFamily::Physical),
        ZooFamily::Builtin(TruthFamily::Knee),
        ZooFamily::Builtin(TruthFamily::Powerlaw),
        ZooFamily::KneeDeep,
        ZooFamily::KneeVaried,
        ZooFamily::Roofline,
        ZooFamily::Saturating,
        ZooFamily::NoisySweep,
        ZooFamily::EqualTpj,
        ZooFamily::Biased,
        ZooFamily::Missing,
        ZooFamily::Mixed,
        ZooFamily::SmoothKnee,
        ZooFamily::TwoSlope,
        ZooFamily::SweepPhysical,
        ZooFamily::SweepMixed,
        ZooFamily::SweepExact,
        ZooFamily::SweepTwoSlope,
    ];

    /// The name used on the command line and in tables.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Builtin(TruthFamily::Physical) => "physical",
            Self::Builtin(TruthFamily::Knee) => "knee",
            Self::Builtin(TruthFamily::Powerlaw) => "powerlaw",
            Self::KneeDeep => "knee_deep",
            Self::KneeVaried => "knee_varied",
            Self::Roofline => "roofline",
            Self::Saturating => "saturating",
            Self::NoisySweep => "noisy_sweep",
            Self::EqualTpj => "equal_tpj",
            Self::Biased => "biased",
            Self::Missing => "missing",
            Self::Mixed => "mixed",
            Self::SmoothKnee => "smooth_knee",
            Self::TwoSlope => "two_slope",
            Self::SweepPhysical => "sweep_physical",
            Self::SweepMixed => "sweep_mixed",
            Self::SweepExact => "sweep_exact",
            Self::SweepTwoSlope => "sweep_two_slope",
        }
    }

    /// The family called `name`, if any.
    #[must_use]
    pub fn by_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    /// What the policies are told: a noisy measured sweep for `noisy_sweep`, a predicted PFI
    /// (with the paper's error) everywhere else.
    #[must_use]
    pub fn knowledge(self) -> KnowledgeLevel {
        match self {
            Self::NoisySweep | Self::SweepPhysical | Self::SweepMixed | Self::SweepExact | Self::SweepTwoSlope => {
                KnowledgeLevel::AsGiven
            }
            _ => KnowledgeLevel::Predicted,
        }
    }

    /// Whether `t`'s true curve lies in the plausible set that what a policy is told of it
    /// implies (what `flexgate`'s hedge guards against the equal cut), up to [`SET_SLACK`] of
    /// relative throughput:
    ///
    /// - every truth is **concave** on its cap range (the hedge's scenarios are concave curves,
    ///   and so is every curve the planner estimates): a truth noisy in itself is outside;
    /// - a **predicted PFI** must err as stated (no systematic bias), and the truth must keep
    ///   `τ(x) ≥ min(x, φ(x))` at every measured relative power `x`, `φ` the estimator family's
    ///   member of the truth's own PFI: no fewer tokens per joule under a cap than uncapped,
    ///   the bound the plausible set is built on
    ///   ([`flexgate_policies::estimate::CurveFamily::plausible_shapes`]), except as far as the
    ///   physical model itself dips below it (it does at the deepest caps of compute-bound
    ///   jobs, and its member is in the set);
    /// - a job without a prediction is planned at the equal cut whatever its truth;
    /// - a **measured sweep** is read as it was measured: a concave truth is all it assumes.
    #[must_use]
    pub fn truth_in_plausible_set(self, t: &JobTemplate, estimator: &CurveFamily) -> bool {
        let top = t.truth.uncapped();
        let (p_top, t_top) = (top.power.value(), top.tokens.value());
        let relative: Vec<(f64, f64)> = t
            .truth
            .points()
            .iter()
            .map(|p| (p.power.value() / p_top, p.tokens.value() / t_top))
            .collect();
        let hull = ConcaveHull::from_points(relative.iter().copied());
        if relative.iter().any(|&(x, tau)| hull.tokens_at(x) - tau > SET_SLACK) {
            return false;
        }
        if self.knowledge() == KnowledgeLevel::AsGiven || !t.predicted {
            return true;
        }
        if t.prediction_bias != 0.0 {
            return false;
        }
        let (Some(pfi), Some(grid)) = (t.true_pfi, &t.true_pfi_grid) else {
            return false;
        };
        let member = estimator.shape(pfi, grid, top.power.per_gpu(t.gpus));
        relative
            .iter()
            .all(|&(x, tau)| tau >= x.min(member.tau_at(x)) - SET_SLACK)
    }

    /// One template per published group.
    pub fn templates(self, groups: &[Group]) -> Result<Vec<JobTemplate>, TemplateError> {
        if let Self::Builtin(family) = self {
            return synthetic_templates(groups, family);
        }
        groups
            .iter()
            .enumerate()
            .map(|(position, g)| {
                self.template(g, position)
                    .map_err(|source| TemplateError { group: g.id, source })
            })
            .collect()
    }

    fn template(self, g: &Group, position: usize) -> Result<JobTemplate, CalibrationError> {
        let mut truth = match self {
            Self::Builtin(family) => truth_curve(g, family)?,
            Self::KneeDeep => knee(g, 0.6)?,
            Self::KneeVaried => knee(g, 0.55 + 0.40 * golden(g.id))?,
            Self::Roofline => roofline(g)?,
            Self::Saturating => saturating(g)?,
            Self::NoisySweep => noisy(&truth_curve(g, TruthFamily::Physical)?, g.id, 0, &truth_caps())?,
            Self::EqualTpj | Self::Mixed => mixed_shape(g, position)?,
            Self::SmoothKnee => smooth_knee(g)?,
            Self::TwoSlope => two_slope(g)?,
            Self::Biased | Self::Missing | Self::SweepPhysical => truth_curve(g, TruthFamily::Physical)?,
            Self::SweepMixed | Self::SweepExact => mixed_shape(g, position)?,
            Self::SweepTwoSlope => two_slope(g)?,
        };
        if self == Self::EqualTpj {
            truth = equal_tokens_per_joule(&truth, g.id)?;
        }
        // The calibration hits the published PFI to within its bisection's rounding; a group
        // that reaches it is told exactly the published value, as the built-in families are, so
        // that families whose truths reach every PFI give a policy the very same input (what the
        // knowledge bound's coupling rests on).
        let measured = grid_pfi(&truth, &g.grid)?;
        let true_pfi = if (measured - g.pfi).abs() < 1e-6 {
            g.pfi
        } else {
            measured
        };
        let sweep = match self {
            Self::NoisySweep => Some(noisy(&truth, g.id, 1, g.grid.caps())?),
            _ => None,
        };
        // The noisy sweep is told its noise: NOISE of each capped point's reading.
        let sweep_tokens_sd = sweep.as_ref().map_or_else(Vec::new, |s| {
            let top = s.uncapped().power;
            s.points()
                .iter()
                .map(|p| if p.power < top { NOISE * p.tokens.value() } else { 0.0 })
                .collect()
        });
        let sweep_plan = match self {
            Self::SweepPhysical | Self::SweepMixed | Self::SweepTwoSlope => Some(sweep_plan(g, true)),
            Self::SweepExact => Some(sweep_plan(g, false)),
            _ => None,
        };
        let prediction_bias = match self {
            Self::Biased if g.regime.is_fine_tuning() => BIAS,
            Self::Biased => -BIAS,
            _ => 0.0,
        };
        Ok(JobTemplate {
            predicted: !(self == Self::Missing && position % 2 == 1),
            prediction_bias,
            ..group_template(
                g,
                truth,
                true_pfi,
                Known {
                    pfi: Some(true_pfi),
                    pfi_grid: Some(g.grid.clone()),
                    sweep,
                    sweep_tokens_sd,
                    sweep_plan,
                    ..Known::default()
                },
            )
        })
    }
}

/// How far (relative throughput) a truth may depart from the plausible set's rules and still
/// count as inside it ([`ZooFamily::truth_in_plausible_set`]): the estimator family's own misfit
/// to the physical truths reaches 0.011 at their deepest caps.
pub const SET_SLACK: f64 = 0.02;

/// The `biased` family's prediction error (2.5 × the paper's 0.241).
const BIAS: f64 = 0.6;
/// Relative noise of the `noisy_sweep` truth and of its measured sweep.
const NOISE: f64 = 0.04;

/// A number in [0, 1) that spreads group ids evenly (the golden-ratio sequence).
fn golden(id: u32) -> f64 {
    (f64::from(id) * 0.618_033_988_749_895).fract()
}

fn draw_and_tokens(g: &Group) -> (f64, TokensPerSec) {
    (uncapped_draw(g.regime), TokensPerSec(estimated_tokens_max(g)))
}

/// A shape `τ(x; θ)` calibrated on θ ∈ [lo, hi] so that its PFI on the group's grid is the
/// published one; a PFI the shape cannot reach gives the parameter whose PFI is nearest.
///
/// PFI is not monotone in θ for every shape (see [`calibrate_scanning`]); until issue 14's third
/// step a bisection across a jump gave two `knee_deep` groups PFI 2.68 instead of 1.22 and 1.27,
/// with a slope of 20 that dropped them to 2 % throughput below the knee. The gentlest member
/// with the PFI is taken.
fn calibrated(g: &Group, lo: f64, hi: f64, tau: impl Fn(f64, f64) -> f64) -> Result<PowerCurve, CalibrationError> {
    let (draw, t_max) = draw_and_tokens(g);
    let caps = truth_caps();
    let build = |theta: f64| shaped_curve(g.gpus, draw, t_max, &caps, |x| tau(theta, x));
    let pfi_of = |theta: f64| grid_pfi(&build(theta)?, &g.grid);
    let theta = calibrate_scanning(g.pfi, lo, hi, pfi_of);
    Ok(build(theta)?)
}

fn knee(g: &Group, at: f64) -> Result<PowerCurve, CalibrationError> {
    calibrated(g, 0.05, 20.0, |slope, x| 1.0 - slope * (at - x).max(0.0))
}

/// A hinge at 0.75 whose corner is a softplus of width 0.06: `1 − k·w·(sp((c − x)/w) −
/// sp((c − 1)/w))`, `sp(z) = ln(1 + e^z)`, so `τ(1) = 1`; concave everywhere.
fn smooth_knee(g: &Group) -> Result<PowerCurve, CalibrationError> {
    const C: f64 = 0.75;
    const W: f64 = 0.06;
    let softplus = |z: f64| z.max(0.0) + (-z.abs()).exp().ln_1p();
    calibrated(g, 0.05, 20.0, |k, x| {
        1.0 - k * W * (softplus((C - x) / W) - softplus((C - 1.0) / W))
    })
}

/// `1 − a·max(0, 0.9 − x) − 3a·max(0, 0.5 − x)`: a gentle loss from 90 % of the draw, four times
/// as steep below half of it.
fn two_slope(g: &Group) -> Result<PowerCurve, CalibrationError> {
    calibrated(g, 0.02, 10.0, |a, x| {
        1.0 - a * (0.9 - x).max(0.0) - 3.0 * a * (0.5 - x).max(0.0)
    })
}

fn roofline(g: &Group) -> Result<PowerCurve, CalibrationError> {
    let draw = uncapped_draw(g.regime);
    let lowest = g.grid.caps().first().map_or(0.3, |c| c.value() / draw);
    calibrated(g, (lowest + 0.02).min(0.99), 1.0, |r, x| (x / r).min(1.0))
}

fn saturating(g: &Group) -> Result<PowerCurve, CalibrationError> {
    calibrated(g, 0.03, 20.0, |s, x| (1.0 - (-x / s).exp()) / (1.0 - (-1.0 / s).exp()))
}

/// One of six shapes, in turn by the group's position.
fn mixed_shape(g: &Group, position: usize) -> Result<PowerCurve, CalibrationError> {
    match position % 6 {
        0 => truth_curve(g, TruthFamily::Physical),
        1 => truth_curve(g, TruthFamily::Knee),
        2 => knee(g, 0.6),
        3 => truth_curve(g, TruthFamily::Powerlaw),
        4 => roofline(g),
        _ => saturating(g),
    }
}

/// `curve` with its throughput scaled so that its uncapped tokens per joule is the same for
/// every group, ± 2 %.
fn equal_tokens_per_joule(curve: &PowerCurve, id: u32) -> Result<PowerCurve, CalibrationError> {
    let top = curve.uncapped();
    let target = top.power.value() * TOKENS_PER_JOULE * (1.0 + 0.02 * (2.0 * golden(id + 7) - 1.0));
    let factor = target / top.tokens.value();
    let points = curve
        .points()
        .iter()
        .map(|p| CurvePoint {
            tokens: p.tokens * factor,
            ..*p
        })
        .collect();
    Ok(PowerCurve::new(curve.gpus(), points)?)
}

/// Tokens per joule of every `equal_tpj` job (the level does not matter, only that it is shared).
const TOKENS_PER_JOULE: f64 = 2.0;

/// `curve`'s points at `caps` (interpolated), each throughput off by `NOISE` relative noise,
/// drawn from a stream of its own per group and `stream`; the uncapped point stays exact (it is
/// what production always knows).
fn noisy(curve: &PowerCurve, id: u32, stream: u64, caps: &[WattsPerGpu]) -> Result<PowerCurve, CalibrationError> {
    let mut rng = SplitMix64::derive(0x5eed_0000 + u64::from(id), stream);
    let top = caps.iter().map(|c| c.value()).fold(f64::NEG_INFINITY, f64::max);
    let points = caps
        .iter()
        .map(|&cap| {
            let noise = if cap.value() >= top { 0.0 } else { NOISE * rng.normal() };
            CurvePoint {
                cap,
                power: curve.power_at_cap(cap),
                tokens: curve.tokens_at_cap(cap) * (1.0 + noise).max(0.05),
            }
        })
        .collect();
    Ok(PowerCurve::new(curve.gpus(), points)?)
}

/// How the `sweep_*` families are measured: 4, 5 or 6 capped points (by group) evenly spaced from
/// the range minimum to 40 W below the group's draw, each the mean of [`SWEEP_READINGS`]
/// readings, its mean off by 0.5–2 % (spread over the groups); with `noisy` false, exactly.
fn sweep_plan(g: &Group, noisy: bool) -> SweepPlan {
    let draw = uncapped_draw(g.regime);
    let count = 4 + (g.id % 3) as usize;
    let (lo, hi) = (200.0, draw - 40.0);
    let caps = (0..count)
        .map(|k| WattsPerGpu((lo + (hi - lo) * k as f64 / (count - 1) as f64).round()))
        .collect();
    SweepPlan {
        caps,
        readings: SWEEP_READINGS,
        noise: if noisy { 0.005 + 0.015 * golden(g.id + 11) } else { 0.0 },
    }
}

/// Readings each point of a `sweep_*` family's sweep averages.
const SWEEP_READINGS: u32 = 4;

/// The zoo's table: every family, both objectives, the given cuts.
#[derive(Debug, Clone, Serialize)]
pub struct ZooReport {
    /// Workloads per family and objective.
    pub workloads: usize,
    /// Jobs per workload.
    pub jobs: usize,
    /// Seed.
    pub seed: u64,
    /// Whether `flexgate` hedged (and the unhedged plan was run alongside).
    pub hedging: bool,
    /// One row per family, objective and cut.
    pub rows: Vec<ZooRow>,
    /// What any plan could do where families share their knowledge (module
    /// [`super::knowledge_bound`]): per objective and cut, one bound over those families' rows.
    pub bounds: Vec<ZooBound>,
}

/// The best any policy could do on the rows of the families that share their knowledge, at one
/// objective and cut.
#[derive(Debug, Clone, Serialize)]
pub struct ZooBound {
    /// Objective.
    pub objective: Objective,
    /// Cut.
    pub cut: f64,
    /// Whether the physical family was held to the paper reproduction's target as well (at least
    /// [`PAPER_REPRODUCTION_TARGET`] of its gap, at [`PAPER_REPRODUCTION_CUT`] under `tokens`)
    /// instead of its zoo row's.
    pub with_paper_target: bool,
    /// Whether only the families whose truths lie in the plausible set were held to their
    /// targets (the question whether the paper reproduction and the hedge's guarantee can hold
    /// together), rather than every family that shares the knowledge.
    pub in_set_only: bool,
    /// The bound.
    #[serde(flatten)]
    pub bound: KnowledgeBound,
}

/// The target for the paper's own setting: `flexgate` closes at least this share of the
/// equal → oracle gap on the physical truth at a 30 % cut (production mix, predicted PFI).
pub const PAPER_REPRODUCTION_TARGET: f64 = 0.85;
/// The cut of that target.
pub const PAPER_REPRODUCTION_CUT: f64 = 0.3;

/// One family at one cut under one objective.
#[derive(Debug, Clone, Serialize)]
pub struct ZooRow {
    /// Family name.
    pub family: &'static str,
    /// Objective.
    pub objective: Objective,
    /// Cut.
    pub cut: f64,
    /// Mean objective value per plan of the equal cut, the paper's rule, flexgate unhedged,
    /// flexgate and the oracle (tokens/s per job, or GPU-weighted progress).
    pub equal: f64,
    /// The paper's rule.
    pub pfi_paper: f64,
    /// `flexgate` without the hedge (the expected-value plan).
    pub unhedged: f64,
    /// `flexgate` as configured (hedged when the zoo runs with the hedge on).
    pub flexgate: f64,
    /// The oracle.
    pub oracle: f64,
    /// `flexgate ≥ equal − 0.5 % of equal`.
    pub never_worse_than_equal: bool,
    /// Where the paper's rule beats equal: `flexgate ≥ pfi_paper` (reported, not asked: issue
    /// 29 restated the zoo's acceptance without it).
    pub at_least_the_paper: bool,
    /// Whether every job's true curve lies in the plausible set its knowledge implies
    /// ([`ZooFamily::truth_in_plausible_set`]).
    pub in_plausible_set: bool,
    /// What the row is judged against.
    pub judged_by: Bar,
    /// The value `flexgate` must reach (objective units).
    pub bar: f64,
}

/// What a zoo row is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bar {
    /// The equal cut less [`ROW_SLACK`] of it: a truth in the plausible set, where the hedge's
    /// guarantee holds (or a truth outside it whose knowledge no other family shares, so that
    /// no bound says less is all any policy could do).
    EqualCut,
    /// The knowledge bound's attainable worst margin less [`ROW_SLACK`]: a truth outside the
    /// plausible set that gives a policy the same knowledge as other families, so that one plan
    /// must serve them all ([`super::knowledge_bound`]).
    KnowledgeBound,
}

/// How far below its bar a row may fall, as a share of its equal cut's value.
pub const ROW_SLACK: f64 = 0.005;

impl ZooRow {
    /// Gap closure `(x − equal) / (oracle − equal)`, `None` where there is no gap.
    #[must_use]
    pub fn closure(&self, value: f64) -> Option<f64> {
        let gap = self.oracle - self.equal;
        (gap.abs() > 1e-9 * self.oracle.abs().max(1e-12)).then(|| (value - self.equal) / gap)
    }

    /// Whether `flexgate` reached the row's bar.
    #[must_use]
    pub fn passes(&self) -> bool {
        self.flexgate >= self.bar - 1e-9 * self.equal.abs()
    }
}

/// Run every family in `families` for both objectives at `cuts`, `workloads` × `jobs`, calling
/// `progress(done, total)` after each experiment. With `base.hedging` the unhedged plan is run
/// alongside, for comparison.
pub fn run_zoo(
    families: &[ZooFamily],
    groups: &[Group],
    base: &ExperimentConfig,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<ZooReport, ZooError> {
    let objectives = [Objective::Tokens, Objective::Progress];
    let (rows, all_templates) = zoo_experiments(families, groups, base, &objectives, base.hedging, progress)?;
    judge(families, &all_templates, base, rows)
}

/// The zoo's rows for `objectives` only, each family's flexgate plan as `base` configures it and
/// nothing beside it: no unhedged plan (its column repeats the plan's) and no knowledge bound
/// (every row is held to its own bar, none to the bound). What `simulate --zoo --frontier` needs
/// once per tolerance, in a third of the time the whole table takes.
pub fn run_zoo_rows(
    families: &[ZooFamily],
    groups: &[Group],
    base: &ExperimentConfig,
    objectives: &[Objective],
    progress: &mut dyn FnMut(usize, usize),
) -> Result<Vec<ZooRow>, ZooError> {
    Ok(zoo_experiments(families, groups, base, objectives, false, progress)?.0)
}

/// Every family's experiments under `objectives` (and the unhedged plan's beside them when
/// `with_unhedged` and `base` hedges), as rows, with each family's templates.
fn zoo_experiments(
    families: &[ZooFamily],
    groups: &[Group],
    base: &ExperimentConfig,
    objectives: &[Objective],
    with_unhedged: bool,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<(Vec<ZooRow>, Vec<Vec<JobTemplate>>), ZooError> {
    let total = families.len() * objectives.len();
    let mut rows = Vec::new();
    let mut done = 0;
    let mut all_templates = Vec::with_capacity(families.len());
    let estimator = CurveFamily::h200_generic();
    for &family in families {
        let templates = family.templates(groups)?;
        let in_set = templates.iter().all(|t| family.truth_in_plausible_set(t, &estimator));
        all_templates.push(templates.clone());
        for &objective in objectives {
            let config = ExperimentConfig {
                knowledge: family.knowledge(),
                objective,
                hedging: base.hedging,
                ..base.clone()
            };
            let hedged = run_experiment(&config, &templates, family.name(), &mut |_| {})?;
            let unhedged = if config.hedging && with_unhedged {
                run_experiment(
                    &ExperimentConfig {
                        hedging: false,
                        ..config.clone()
                    },
                    &templates,
                    family.name(),
                    &mut |_| {},
                )?
            } else {
                hedged.clone()
            };
            rows.extend(zoo_rows(family, in_set, objective, &hedged, &unhedged));
            done += 1;
            progress(done, total);
        }
    }
    Ok((rows, all_templates))
}

/// The knowledge bound over `families`, and every row outside the plausible set held to it.
fn judge(
    families: &[ZooFamily],
    all_templates: &[Vec<JobTemplate>],
    base: &ExperimentConfig,
    mut rows: Vec<ZooRow>,
) -> Result<ZooReport, ZooError> {
    let bounds = zoo_bounds(families, all_templates, base, &rows)?;
    // A truth outside the plausible set, told what other families are told, is judged against
    // what one plan for all of them can reach.
    for row in rows.iter_mut().filter(|r| !r.in_plausible_set) {
        let bound = bounds.iter().find(|b| {
            !b.in_set_only
                && b.objective == row.objective
                && (b.cut - row.cut).abs() < 1e-9
                && b.bound.families.contains(&row.family)
        });
        if let Some(b) = bound {
            // The attainable plan reaches the row's target plus its worst margin; the row may
            // fall ROW_SLACK below that where the margin is negative (no plan meets every
            // target), and is held to its target where it is not.
            row.judged_by = Bar::KnowledgeBound;
            let margin = b.bound.margin_lower;
            row.bar = if margin < 0.0 {
                row.equal * (1.0 - ROW_SLACK + margin - ROW_SLACK)
            } else {
                row.equal * (1.0 - ROW_SLACK)
            };
        }
    }
    Ok(ZooReport {
        workloads: base.workloads,
        jobs: base.jobs,
        seed: base.seed,
        hedging: base.hedging,
        rows,
        bounds,
    })
}

/// Whether a policy is told the same about both templates' jobs (and they draw and deliver the
/// same uncapped): then it plans them the same, whatever their truths.
fn same_knowledge(a: &JobTemplate, b: &JobTemplate) -> bool {
    let (ta, tb) = (a.truth.uncapped(), b.truth.uncapped());
    a.gpus == b.gpus
        && a.cap_range == b.cap_range
        && ta.power == tb.power
        // A shape's value at x = 1 may round to 1 − 1e-16.
        && (ta.tokens.value() - tb.tokens.value()).abs() <= 1e-12 * ta.tokens.value().abs()
        && a.true_pfi == b.true_pfi
        && a.true_pfi_grid == b.true_pfi_grid
        && a.predicted == b.predicted
        && a.prediction_bias == b.prediction_bias
        && a.max_slowdown == b.max_slowdown
        && a.known.sweep.is_none()
        && b.known.sweep.is_none()
        && a.known.sweep_plan.is_none()
        && b.known.sweep_plan.is_none()
}

/// The families of `families` (indices) that share their knowledge, in classes of two or more.
fn knowledge_classes(families: &[ZooFamily], templates: &[Vec<JobTemplate>]) -> Vec<Vec<usize>> {
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for (f, family) in families.iter().enumerate() {
        let shares = |g: usize| {
            families[g].knowledge() == family.knowledge()
                && templates[g].len() == templates[f].len()
                && templates[g]
                    .iter()
                    .zip(&templates[f])
                    .all(|(a, b)| same_knowledge(a, b))
        };
        match classes.iter_mut().find(|c| shares(c[0])) {
            Some(class) => class.push(f),
            None => classes.push(vec![f]),
        }
    }
    classes.retain(|c| c.len() > 1);
    classes
}

/// One bound per knowledge class, objective and cut: the best worst margin over the rows'
/// targets (each family's equal cut less [`ROW_SLACK`] of it, a share of that equal cut) that one
/// plan per workload reaches on every family of the class; under `tokens` at the paper's cut the
/// physical family is held to the paper reproduction's target as well (the one gain the zoo's
/// acceptance asks for, and what forces a plan away from the equal cut).
fn zoo_bounds(
    families: &[ZooFamily],
    templates: &[Vec<JobTemplate>],
    base: &ExperimentConfig,
    rows: &[ZooRow],
) -> Result<Vec<ZooBound>, ZooError> {
    let mut bounds = Vec::new();
    for class in knowledge_classes(families, templates) {
        for objective in [Objective::Tokens, Objective::Progress] {
            let config = ExperimentConfig {
                objective,
                tiers: super::experiment::TierMix::None,
                ..base.clone()
            };
            for cut in &base.cuts {
                let row_of = |f: usize| {
                    rows.iter().find(|r| {
                        r.family == families[f].name() && r.objective == objective && (r.cut - cut.value()).abs() < 1e-9
                    })
                };
                let with_paper_target = objective == Objective::Tokens
                    && (cut.value() - PAPER_REPRODUCTION_CUT).abs() < 1e-9
                    && class
                        .iter()
                        .any(|&f| families[f] == ZooFamily::Builtin(TruthFamily::Physical));
                for in_set_only in [false, true] {
                    if in_set_only && !with_paper_target {
                        continue;
                    }
                    let members: Vec<BoundFamily<'_>> = class
                        .iter()
                        .filter_map(|&f| {
                            let row = row_of(f)?;
                            if in_set_only && !row.in_plausible_set {
                                return None;
                            }
                            let mut target = row.equal - ROW_SLACK * row.equal.abs();
                            if with_paper_target && families[f] == ZooFamily::Builtin(TruthFamily::Physical) {
                                target = target.max(row.equal + PAPER_REPRODUCTION_TARGET * (row.oracle - row.equal));
                            }
                            Some(BoundFamily {
                                name: families[f].name(),
                                templates: &templates[f],
                                target,
                                unit: row.equal.abs(),
                            })
                        })
                        .collect();
                    if members.len() < 2 {
                        continue;
                    }
                    let mut bound = knowledge_bound(&config, *cut, &members)?;
                    if !with_paper_target {
                        // The equal cut is a plan too, and it reaches every target with ROW_SLACK
                        // to spare: the search's own plan may read worse on the truths.
                        bound.margin_lower = bound.margin_lower.max(ROW_SLACK);
                        bound.margin_upper = bound.margin_upper.max(bound.margin_lower);
                    }
                    bounds.push(ZooBound {
                        objective,
                        cut: cut.value(),
                        with_paper_target,
                        in_set_only,
                        bound,
                    });
                }
            }
        }
    }
    Ok(bounds)
}

fn zoo_rows(
    family: ZooFamily,
    in_plausible_set: bool,
    objective: Objective,
    hedged: &ExperimentReport,
    unhedged: &ExperimentReport,
) -> Vec<ZooRow> {
    let value = |r: &ExperimentReport, cut: f64, name: &str| {
        r.at_cut(cut)
            .and_then(|c| c.strategies.get(name))
            .map_or(f64::NAN, |s| match objective {
                Objective::Tokens => s.tokens_per_s_per_job,
                Objective::Progress => s.progress,
            })
    };
    hedged
        .results
        .iter()
        .map(|c| {
            let equal = value(hedged, c.cut, "equal");
            let pfi_paper = value(hedged, c.cut, "pfi_paper");
            let flexgate = value(hedged, c.cut, "flexgate");
            // A relative margin of 1e-9 keeps ties (no cut at all) from failing on rounding.
            let slack = 1e-9 * equal.abs();
            ZooRow {
                family: family.name(),
                objective,
                cut: c.cut,
                equal,
                pfi_paper,
                unhedged: value(unhedged, c.cut, "flexgate"),
                flexgate,
                oracle: value(hedged, c.cut, "oracle"),
                never_worse_than_equal: flexgate >= equal - ROW_SLACK * equal.abs() - slack,
                at_least_the_paper: pfi_paper <= equal + slack || flexgate >= pfi_paper - slack,
                in_plausible_set,
                judged_by: Bar::EqualCut,
                bar: equal - ROW_SLACK * equal.abs(),
            }
        })
        .collect()
}

/// Why the zoo could not run.
#[derive(Debug, thiserror::Error)]
pub enum ZooError {
    /// A family's templates could not be built.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// An experiment could not run.
    #[error(transparent)]
    Experiment(#[from] ExperimentError),
    /// A knowledge bound could not be computed.
    #[error(transparent)]
    Bound(#[from] BoundError),
}

/// The default cuts of the zoo table: 10, 20, 30 and 40 %.
#[must_use]
pub fn zoo_cuts() -> Vec<Fraction> {
    [0.1, 0.2, 0.3, 0.4]
        .into_iter()
        .filter_map(|c| Fraction::new(c).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::published_groups;

    #[test]
    fn every_family_builds_a_template_per_group_at_its_pfi_where_reachable() {
        let groups = published_groups().expect("groups");
        for family in ZooFamily::ALL {
            let templates = family.templates(&groups).expect("templates");
            assert_eq!(templates.len(), groups.len(), "{}", family.name());
            assert!(
                templates
                    .iter()
                    .all(|t| t.true_pfi.is_some_and(|p| p.is_finite() && p > 0.0))
            );
            let missed: Vec<u32> = templates
                .iter()
                .zip(&groups)
                .filter(|(t, g)| (t.true_pfi.unwrap_or(0.0) - g.pfi).abs() > 1e-6)
                .map(|(_, g)| g.id)
                .collect();
            // 4 % noise on points that lose little moves every noisy truth's PFI (its own PFI is
            // what its predictions are centred on). Group 5's varied knee (0.586 of a 690 W
            // draw) sits 0.6 % above its 400 W grid cap: a slope gentle enough to leave that
            // cap under ε gives PFI ≥ 1.84, a steeper one counts the cap at PFI ≈ 27, so 1.17 is
            // out of reach. Every other group of every family hits its published PFI exactly
            // (until issue 14's third step a bisection across such a jump missed two
            // `knee_deep` groups by 1.4).
            let allowed: &[u32] = if family == ZooFamily::KneeVaried { &[5] } else { &[] };
            if family != ZooFamily::NoisySweep {
                assert_eq!(missed, allowed, "{}: groups off their published PFI", family.name());
            }
            assert_eq!(ZooFamily::by_name(family.name()), Some(family));
        }
    }

    #[test]
    fn equal_tpj_jobs_share_their_tokens_per_joule_and_missing_drops_half_the_predictions() {
        let groups = published_groups().expect("groups");
        let t = ZooFamily::EqualTpj.templates(&groups).expect("templates");
        let tpj: Vec<f64> = t
            .iter()
            .map(|t| t.truth.uncapped().tokens.value() / t.truth.uncapped().power.value())
            .collect();
        let (lo, hi) = tpj
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), &v| (l.min(v), h.max(v)));
        assert!(hi / lo < 1.05, "tokens per joule {lo}–{hi}");
        let missing = ZooFamily::Missing.templates(&groups).expect("templates");
        assert_eq!(missing.iter().filter(|t| !t.predicted).count(), 12);
        let biased = ZooFamily::Biased.templates(&groups).expect("templates");
        assert!(biased.iter().all(|t| t.prediction_bias.abs() == BIAS));
        let noisy = ZooFamily::NoisySweep.templates(&groups).expect("templates");
        assert!(noisy.iter().all(|t| t.known.sweep.is_some()));
    }
}
