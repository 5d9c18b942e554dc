//! Hedging: a plan that never loses materially to the equal cut on a plausible curve.
//!
//! The expected-value plan bets on the estimated shapes: it cuts deepest where the estimate says
//! a watt is cheapest. When the estimate's shape is wrong (a knee where it assumed a smooth
//! curve, jobs whose tokens per joule are too alike for energy intensity to rank them) the bet
//! can lose to the equal cut, which bets on nothing. A site must never do worse than the naive
//! cut because it trusted a guess, so the plan is checked against the equal cut on the curves
//! that the knowledge cannot rule out.
//!
//! **Regret against the equal cut.** Each job that is not measured has
//! [`PLAUSIBLE_SHAPES`] plausible shapes ([`crate::estimate::CurveFamily::plausible_shapes`]):
//! hinges at every depth, the deepest and the shallowest roofline of the PFI and the physical
//! member, at both ends of its PFI interval, always in the
//! same order. Scenario `s` gives every job its shape `s` at once: a fleet whose curves all share
//! one shape the estimate did not expect, or whose predictions are all too high (the systematic
//! errors that do not average out over many jobs, unlike a prediction's random error, which the
//! expected curve already averages over). Under scenario `s` the plan gains
//! `R_s = Σ_j V_j·(τ_js(p_j/P_j) − τ_js(e_j/P_j))` over the equal cut (`e_j` the job's
//! equal-cut power, `V_j` its uncapped value under the objective; a measured job counts its own
//! hull in every scenario; an unknown job is held at `e_j` and counts nothing).
//!
//! **Adverse ends.** A scenario that moves *every* job to the low end of its PFI interval is
//! harsh on the jobs the plan cuts deeper than the equal cut and kind through the jobs it
//! spares (a less flexible job gains more from the watts it keeps), so until issue 29's last step
//! a wider prediction error could make the hedge *bolder*: at a 30 % cut the paper's fleet closed
//! 96 % of its gap with an error of 0.1, 93 % with 0.241 and 96 % again with 0.5. So for each kind
//! of shape the set also holds the scenario in which every job known by a PFI takes whichever
//! end of its interval the plan fares worse at (a measured curve's band is not such an interval:
//! it stays at its low edge, the chords, as in the low-end scenarios),
//! `A_k = Σ_j V_j·min_end(τ_jk,end(p_j/P_j) − τ_jk,end(e_j/P_j))`: the worst case over the two
//! ends, job by job, for that kind. A wider interval can only lower it, and it is concave in the
//! plan (a sum of minima of concave curves), so the line, the bisection and the mixture below
//! treat it as one more scenario (the mixture prices it with each job's curve the minimum of its
//! two ends' gains, read at the knots). Worst-casing the ends job by job is the adversary that
//! knows the plan; the kinds stay fleet-wide (a fleet of knees, of rooflines), as the
//! misjudgements that do not average out are. Measured (BENCHMARKS.md): the paper's fleet at
//! 30 % closes 96 / 92 / 93 / 93 % of its gap at errors 0.1 / 0.241 / 0.3 / 0.5 (40 %: 91 / 79 /
//! 78 / 79 %), and every zoo row under `progress` passes (`knee_deep` at 40 %, −0.93 % before).
//!
//! **The hedge.** The expected-value plan stands if `min_s R_s ≥ −REGRET_TOLERANCE × V_equal`
//! (the equal cut's expected value; [`REGRET_TOLERANCE`] by default). Otherwise it is moved
//! toward the equal cut: the plan `e + α·(p − e)` keeps the budget and every floor for any
//! α ∈ [0, 1], each `R_s` is concave along that line (a sum of concave curves) and 0 at α = 0,
//! so the largest α that meets the bound is found by bisection, and it always exists (α = 0 is
//! the equal cut). Where the knowledge pins the curves (measured sweeps, tokens per joule that
//! differ ten-fold) the bound allows the expected plan and nothing changes; where it does not,
//! the plan moves toward the equal cut as far as the spread of plausible curves asks, and no
//! further.
//!
//! **Mixture.** The line to the equal cut gives up the estimate's bet everywhere at once, though
//! the bound is usually broken by one or two scenarios (under tokens, a fleet of straight-line
//! losses or of knees: the estimate cuts the jobs of low tokens per joule deep, and such a fleet
//! would punish that). So, under `tokens`, when the line gave something up and every job was
//! searched (up to [`SEARCH_SAMPLE`] planned jobs), the hedge solves the problem the bound
//! states: the plan of the best expected value whose gain in *every* scenario stays above
//! −tolerance. Every `R_s` and the expected value are concave in the plan, so this is a concave
//! program, solved by column generation on its Lagrangian: for multipliers `λ_s ≥ 0` the best
//! plan for `E + Σ λ_s·R_s` is one greedy shed on curves that weigh each job's estimate by 1 and
//! its shape `s` by `λ_s` (a mixture of concave curves, so the greedy is exact for it); a small
//! linear program (`microlp`) picks the best mixture `Σ α_k·p_k` of the plans found so far that
//! meets every scenario (a plan: budgets and floors are linear, and the gains of a mixture are
//! at least the mixture of the gains), and its dual picks the next `λ`. It stops when the
//! mixture's expected gain is within [`MIXTURE_GAP`] of the Lagrangian's least value seen, which
//! no plan meeting the bound can beat: the kept plan is then the best the plausible set allows
//! at this tolerance, to 0.001 % of the equal cut's value (a handful of rounds, at most
//! [`MIXTURE_ROUNDS`]). It replaced the blend of issue 14 (plans for the estimate blended with
//! the one binding scenario at eight fixed weights, each shrunk along its own line), which came
//! within a point of it: the zoo (seeds 1 and 7) passes and fails the same rows with either,
//! each row within 0.3 % of the equal cut's value. The mixture is kept only if it is expected to
//! deliver [`MIXTURE_MIN_GAIN`] more than the line's plan. Under `progress` it is off: there the
//! best plan gains a few tenths of a percent and a plan off the line, a new direction away from
//! the equal cut, lost more than that on curves outside the set (with the blend, 16 of the
//! zoo's progress rows missed their bar, 3 without; with the mixture, seeds 1 and 7, the rows in
//! the set gained up to 0.5 % of progress, but `smooth_knee` at 20 % fell to −1.34 / −1.16 %,
//! missing its bar, and `biased` went below the equal cut at 20–40 %).
//!
//! Because the mixture is the best plan the set allows for the estimate, it also answers what a
//! tolerance costs:
//! `flexgate simulate --zoo --frontier` gives the exact trade between the paper's fleet and the
//! roofline fleet (the same knowledge, so the same plan) at each tolerance (BENCHMARKS.md).
//!
//! Until issue 14's third step the hedge first tried Lagrangian steps (weighing the violated
//! scenarios into every job's curve, up to four scenarios and eleven multipliers each) and only
//! then shrank. On the curve zoo the steps bought nothing (57 rows passing with them, 59 without,
//! seed 7) and cost a few dozen whole-fleet plans per plan: 470 ms at 100,000 jobs.
//!
//! **Cost.** The gains of a plan in all scenarios are one pass over the jobs; each job's shapes
//! (and its estimate, so the same pass sums the plan's expected value) are stored knot-major in
//! units of 1/65535, 306 bytes a job, so that the pass reads two adjacent rows per job in job
//! order. A bisection takes [`SHRINK_STEPS`] such passes. Up to [`SEARCH_SAMPLE`] planned jobs it
//! runs on all of them, exactly (the fleet experiment and the zoo are planned this way). Beyond,
//! it runs on a sample of that many, stratified by value per watt (the gains are whole-fleet
//! sums, which a sample estimates), searched for [`SAMPLE_MARGIN`] of its share of the tolerance;
//! the equal cut's gains and value for every job come from row sums prepared once (every job an
//! equal cut does not clip sits at one common fraction of its draw); and the kept plan is then
//! checked on every job in one pass, which reads each job's rows at both powers (the adverse
//! ends take a job's gain, not the fleet's sums; the bisection on the sample does the same).
//! Should the sample have misjudged it, the plan moves further
//! toward the equal cut: a gain `R < 0` at the plan is at least `β·R` at `β` of the way
//! (concavity), so `β = tolerance / −R` restores the bound for every job, not for the sample,
//! and [`Hedge::bound`] says so. At 100,000 jobs the gateway's default plan (progress, hedged)
//! costs about 1.6× an unhedged one, about what the equal cut costs (BENCHMARKS.md).

use super::Prepared;
use crate::alloc::select::{Segment, shed_cheapest};
use crate::curve::ConcaveHull;
use crate::estimate::plausible_knot_x;
use crate::estimate::{
    KnotPosition, PLAUSIBLE_KNOTS, PLAUSIBLE_PER_PFI, PLAUSIBLE_SHAPES, PlausibleShape, plausible_position,
};
use serde::Serialize;

/// The default under `tokens` of how far the plan's gain over the equal cut may fall below zero
/// in its worst scenario, as a share of the equal cut's expected value.
///
/// This is the knob between betting and hedging, and no value serves every fleet: on the curve
/// zoo (BENCHMARKS.md) at 0.25 % the paper's reproduction closes only half its gap (a fleet of
/// rooflines with the same PFIs would punish its plan, and a PFI cannot tell the two apart),
/// while at 2 % it kept most of it and the hedge still cut the worst losses of the roofline
/// and equal-tokens-per-joule fleets. It was 2 % until issue 29 gave the plausible set both
/// rooflines of each PFI, calibrated as the PFI is defined: a larger set has a deeper worst
/// case, and at 2 % the paper's fleet at a 30 % cut fell to 84 % of its gap (the paper
/// reproduction asks 85 %; zoo seed 1 and `paper_targets.rs`), at 2.5 % it closes 93 %, with the
/// zoo's `roofline` rows where they were (−1.1 to −1.7 % of the equal cut at 10–30 %, missing
/// their 0.5 % bar as before). `flexgate simulate --hedge-tolerance` sets it.
pub const REGRET_TOLERANCE: f64 = 0.025;

/// The default under `progress` (the gateway's default objective): 0.5 %. Under `progress` the
/// best plan gains 0.2–5 % of the equal cut's value (a tenth of what it gains in tokens/s,
/// where tokens per joule differ ten-fold), so a plan allowed to lose 2 % could lose more than
/// the best one would ever gain; at 0.5 % every zoo row whose truth is in the plausible set
/// stays within 0.5 % of the equal cut (BENCHMARKS.md).
pub const PROGRESS_REGRET_TOLERANCE: f64 = 0.005;

/// The default tolerance under `objective`: [`REGRET_TOLERANCE`] or
/// [`PROGRESS_REGRET_TOLERANCE`].
#[must_use]
pub fn default_tolerance(objective: crate::alloc::Objective) -> f64 {
    match objective {
        crate::alloc::Objective::Tokens => REGRET_TOLERANCE,
        crate::alloc::Objective::Progress => PROGRESS_REGRET_TOLERANCE,
    }
}

/// How far a predicted PFI's plausible range reaches each side of its mean, in standard
/// deviations (≈ 95 % two-sided under a normal error).
pub const PLAUSIBLE_PFI_SDS: f64 = 2.0;

/// Planned jobs beyond which the hedge's bisection runs on a sample of this many (see the module
/// docs).
pub const SEARCH_SAMPLE: usize = 256;

/// The share of its tolerance a sample is searched for (see [`Prepared::hedge`]).
const SAMPLE_MARGIN: f64 = 0.9;

/// Jobs a pass locates before it sums their rows
/// ([`Prepared::scenario_values`]).
const LOOK_AHEAD: usize = 32;

/// Bisection steps on the shrink factor: 2⁻¹² of the way between the plans.
const SHRINK_STEPS: usize = 12;

/// How much more the mixture must be expected to keep than the plan on the line from the
/// expected-value plan, as a share of the equal cut's value, to be preferred. A plan off that
/// line leaves it in a direction of its own, which is a bet of its own on curves outside the
/// plausible set: on the curve zoo (seed 7, with the blend the mixture replaced) `equal_tpj` at a
/// 10 % cut went from −0.11 % of the equal cut's value to −0.56 % when any gain was enough,
/// −0.51 % at 0.25 %, −0.18 % at this; the plans that gain this much are the ones worth having
/// (the physical fleet at 30 %: 92 → 96 % of its gap at all three). Seed 1 confirmed it.
///
/// The kept plan jumps where the mixture's gain crosses this share, so under `tokens` a fleet of
/// up to 256 planned jobs can lose more at one shed than at a larger one (three measured jobs,
/// one losing nothing down to its floor: 960 tokens/s lost at a 3.1 kW shed with the line's plan
/// kept, the mixture 0.36 % better, and 7 at 3.9 kW with the mixture kept). That is not the
/// threshold's alone: the line's plan on the same fleet loses 1,594 at 4.2 kW and 11 at 4.8 kW,
/// and the mixture kept at any gain dips too (8.5 at 3.6 kW, 6.0 at 3.8 kW), because the bound
/// is against the equal cut of each depth and that cut loses more the deeper it is. Any gain
/// kept (a zero share) passes the same zoo rows (132 of 144, seeds 7 and 1) with `equal_tpj` at
/// 10 % at −0.29 / −0.33 % of the equal cut instead of −0.11 / −0.12 %, and moves no other row by
/// more than 0.05 %: measured 2026-12-06, not adopted.
const MIXTURE_MIN_GAIN: f64 = 0.005;

/// What the hedge found for one plan (recorded with it, so a reader sees why a plan is closer to
/// the equal cut than its estimates alone would make it).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Hedge {
    /// How much of the way from the equal cut to the expected-value plan was kept: 1 when that
    /// plan met the bound, 0 when only the equal cut did.
    pub shrink: f64,
    /// The expected-value plan's worst scenario gain over the equal cut, in objective units.
    pub expected_plan_bound: f64,
    /// The kept plan's worst scenario gain over the equal cut: measured on every job, or after a
    /// sample's step back (module docs, [`Hedge::bound_measured`] false) the least it can be by
    /// concavity, −tolerance.
    pub bound: f64,
    /// Whether `bound` was measured on the kept plan (false only after a step back).
    pub bound_measured: bool,
    /// Which scenario is the worst for the kept plan (index into the plausible shapes: knees
    /// at 1.0, 0.9, …, 0.6, the deepest and the shallowest roofline and the physical member, at
    /// the low end of each job's PFI interval, then the same at its high end; then, from
    /// [`PLAUSIBLE_SHAPES`] on, the same kinds with each job at whichever end the plan fares
    /// worse at, "Adverse ends" in the module docs). [`scenario_name`] says it in words.
    pub worst_scenario: usize,
    /// The part of `bound` the noisy measured curves' error takes: [`NOISE_Z`] standard
    /// deviations of the kept plan's gain (0 without noisy measured curves).
    pub noise: f64,
    /// The share of the way from the equal cut kept for the measured curves' noise alone (the
    /// best worst gain over their error; 1 without noisy measured curves); `shrink` includes it.
    pub noise_shrink: f64,
    /// The equal cut's expected value (the tolerance is a share of it).
    pub equal_value: f64,
    /// Jobs the shrink factor was searched on: every planned job, or [`SEARCH_SAMPLE`] of them.
    pub searched_jobs: usize,
    /// Whether a hedge was computed at all (false with hedging off, or when the budget could
    /// not be met with every job at its floor).
    pub computed: bool,
    /// The expected-value plan's worst scenario (index as [`Hedge::worst_scenario`]).
    pub expected_scenario: usize,
    /// How much of the scenarios' curves was weighed into the estimate for the plans the kept one
    /// mixes ("Mixture" in the module docs: the scenarios' share of the weights of the last
    /// curves planned on): 0 for the expected-value plan and the line's.
    pub blend: f64,
}

/// The worst case of scenario `s` in words (see [`Hedge::worst_scenario`]).
#[must_use]
pub fn scenario_name(s: usize) -> String {
    let per_pfi = crate::estimate::PLAUSIBLE_PER_PFI;
    let (end, band) = if s >= PLAUSIBLE_SHAPES {
        (
            "whichever end of each predicted PFI's range this plan fares worse at",
            "at their chords between points",
        )
    } else if s < per_pfi {
        (
            "the low end of each predicted PFI's range",
            "at their chords between points",
        )
    } else {
        (
            "the high end of each predicted PFI's range",
            "at the most concavity allows between points",
        )
    };
    let shape = match crate::estimate::PLAUSIBLE_KNEES.get(s % per_pfi) {
        Some(&knee) if knee >= 1.0 => "a straight-line loss from the top".to_string(),
        Some(&knee) => format!("a knee at {:.0} % of the draw", knee * 100.0),
        None if s % per_pfi == crate::estimate::PLAUSIBLE_KNEES.len() => {
            "its deepest roofline (throughput in proportion to power below a knee)".to_string()
        }
        None if s % per_pfi == crate::estimate::PLAUSIBLE_KNEES.len() + 1 => {
            "its shallowest roofline (throughput in proportion to power below a knee)".to_string()
        }
        None => "the physical model's curve".to_string(),
    };
    format!(
        "every job known by a PFI on {shape} at {end}; measured curves {band}, less two standard deviations of their noise"
    )
}

impl Hedge {
    /// No hedge was computed (hedging off, or the budget cannot be met anyway).
    pub(super) fn not_needed() -> Self {
        Self {
            computed: false,
            shrink: 1.0,
            expected_plan_bound: 0.0,
            bound: 0.0,
            bound_measured: true,
            worst_scenario: 0,
            noise: 0.0,
            noise_shrink: 1.0,
            equal_value: 0.0,
            searched_jobs: 0,
            expected_scenario: 0,
            blend: 0.0,
        }
    }

    /// Whether the plan was moved from the expected-value plan: toward the equal cut, or to a
    /// blend.
    #[must_use]
    pub fn moved(&self) -> bool {
        self.shrink < 1.0 || self.blend > 0.0
    }
}

/// One job's plausible shapes, knot-major (`[k][s]`: scenario `s` at plausible knot `k`, so that
/// every scenario at one power reads two adjacent rows), each relative throughput in units of
/// 1/65535. A pass over 100,000 jobs reads what it needs of 25 MB in job order, which the CPU
/// streams and its cache holds: stored as `f64`, the same shapes weighed 100 MB, every pass ran
/// from memory, and the hedge spent most of its time waiting for it. The rounding (at most
/// 7.6·10⁻⁶ of a job's uncapped value, unbiased) is far below anything a shape is known to, and
/// below any tolerance a plan is held to.
pub(super) type ShapeGrid = [[u16; COLUMNS]; PLAUSIBLE_KNOTS];

/// Columns of a [`ShapeGrid`]: the plausible shapes, then the estimate itself ([`ESTIMATE`]), so
/// that the pass which sums every scenario's value of a plan sums its expected value too.
pub(super) const COLUMNS: usize = PLAUSIBLE_SHAPES + 1;
/// The estimate's column.
const ESTIMATE: usize = PLAUSIBLE_SHAPES;

/// What one unit of a [`ShapeGrid`] entry is in relative throughput.
const TAU_UNIT: f64 = 1.0 / 65535.0;

/// Every job's plausible shapes (none for a measured or unknown job).
#[derive(Debug, Clone)]
pub(super) struct PlausibleSet {
    grids: Vec<ShapeGrid>,
    /// `interval[g]`: whether grid `g`'s two halves are the ends of a PFI interval (a job known
    /// by a PFI) rather than the edges of a measured curve's band, which the adverse-end
    /// scenarios leave at their low-end edge ("Adverse ends" in the module docs).
    interval: Vec<bool>,
    /// `index[i]`: job i's place in `grids`; [`NONE`] when it has no shapes.
    index: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl PlausibleSet {
    pub(super) fn with_capacity(jobs: usize) -> Self {
        Self {
            grids: Vec::new(),
            interval: Vec::new(),
            index: Vec::with_capacity(jobs),
        }
    }

    /// Add the next job's shapes: [`PLAUSIBLE_SHAPES`] of them, or none, and its estimate's
    /// relative throughput at the same knots; `interval` when the shapes' halves are the two
    /// ends of a PFI interval (not a measured curve's band).
    pub(super) fn push(&mut self, shapes: &[PlausibleShape], estimate: &PlausibleShape, interval: bool) {
        if shapes.len() != PLAUSIBLE_SHAPES {
            self.index.push(NONE);
            return;
        }
        let grid: ShapeGrid = std::array::from_fn(|k| {
            std::array::from_fn(|s| {
                let tau = if s == ESTIMATE { estimate[k] } else { shapes[s][k] };
                // In [0, 65535] by the clamp, so the cast neither wraps nor truncates.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let units = (tau.clamp(0.0, 1.0) / TAU_UNIT).round() as u16;
                units
            })
        });
        self.push_grid(Some((&grid, interval)));
    }

    /// Add the next job's shapes as `other` holds job `job`'s.
    pub(super) fn push_from(&mut self, other: &Self, job: usize) {
        self.push_grid(other.place(job).map(|g| (&other.grids[g], other.interval[g])));
    }

    fn push_grid(&mut self, grid: Option<(&ShapeGrid, bool)>) {
        match grid {
            Some((grid, interval)) => {
                self.index.push(u32::try_from(self.grids.len()).unwrap_or(NONE));
                self.grids.push(*grid);
                self.interval.push(interval);
            }
            None => self.index.push(NONE),
        }
    }

    pub(super) fn place(&self, job: usize) -> Option<usize> {
        let g = *self.index.get(job)?;
        (g != NONE).then_some(g as usize)
    }

    /// Add `value` × every scenario's relative throughput for job `job` at `position` to
    /// `sums` (the estimate's in its last column); false, adding nothing, when the job has no
    /// plausible shapes. The flexibility curve sums a whole level's plan this way.
    pub(super) fn add_values(&self, job: usize, position: KnotPosition, value: f64, sums: &mut ScenarioValues) -> bool {
        let Some(g) = self.place(job) else {
            return false;
        };
        self.accumulate(g, position, value, sums);
        true
    }

    /// Add `value` × every scenario's relative throughput at `position` of the job at place `g`
    /// to `sums`: the inner loop of every pass, two rows and two coefficients, which vectorises.
    #[inline]
    fn accumulate(&self, g: usize, position: KnotPosition, value: f64, sums: &mut ScenarioValues) {
        let (k, low, high) = interval(position, value * TAU_UNIT);
        self.accumulate_at(g, k, low, high, sums);
    }

    /// [`Self::accumulate`] between knots `k` and `k + 1`, with the rows' weights in units.
    #[inline]
    fn accumulate_at(&self, g: usize, k: usize, low: f64, high: f64, sums: &mut ScenarioValues) {
        let grid = &self.grids[g];
        let (a, b) = (&grid[k], &grid[k + 1]);
        for s in 0..COLUMNS {
            sums[s] += low * f64::from(a[s]) + high * f64::from(b[s]);
        }
    }
}

/// Go over `jobs` items [`LOOK_AHEAD`] at a time: `locate` each of a batch first, then `read`
/// them, so that the reads `locate` prepares (each job's rows, mostly out of the cache at
/// 100,000 jobs) are in flight together (see [`Prepared::scenario_values`]).
#[inline]
fn in_batches<T: Copy>(jobs: usize, empty: T, mut locate: impl FnMut(usize) -> T, mut read: impl FnMut(T)) {
    let mut batch = [empty; LOOK_AHEAD];
    let mut start = 0;
    while start < jobs {
        let end = (start + LOOK_AHEAD).min(jobs);
        for (slot, k) in batch.iter_mut().zip(start..end) {
            *slot = locate(k);
        }
        for &item in &batch[..end - start] {
            read(item);
        }
        start = end;
    }
}

/// The knot interval of `position` and the weights of its lower and upper knot, times `value`.
fn interval(position: KnotPosition, value: f64) -> (usize, f64, f64) {
    match position {
        KnotPosition::Below(factor) => (0, value * factor, 0.0),
        KnotPosition::Between(k, w) => (k, value * (1.0 - w), value * w),
        KnotPosition::Top => (PLAUSIBLE_KNOTS - 2, 0.0, value),
    }
}

/// Jobs a pass of the hedge goes over, as it reads them: a pass reads these arrays and the
/// shapes in order, and nothing of the jobs' specs (one more cache line a job, which at 100,000
/// jobs cost a third of a pass).
#[derive(Debug, Clone, Default)]
pub(super) struct HedgeJobs {
    job: Vec<u32>,
    /// `1 / P_max`: a job's relative power is `1 − shed / P_max`.
    inv_p_max: Vec<f64>,
    /// Uncapped value under the objective.
    value: Vec<f64>,
    /// Place in the plausible rows; [`NONE`] for a measured job, counted by its own hull.
    place: Vec<u32>,
    /// The noise group of a noisy measured job ([`NoiseGroups`]); [`NONE`] for any other.
    noise: Vec<u32>,
    /// `Σ value × row` over these jobs' shapes, knot by knot ([`HedgeJobs::sum_rows`]): every
    /// job whose equal-cut power is the common fraction of its draw (all but the few an equal
    /// cut clips at their floors) is then summed at once.
    row_sums: Option<Box<[[f64; COLUMNS]; PLAUSIBLE_KNOTS]>>,
}

impl HedgeJobs {
    pub(super) fn push(&mut self, job: usize, p_max: f64, value: f64, place: Option<usize>, noise: Option<u32>) {
        self.job.push(u32::try_from(job).unwrap_or(NONE));
        self.inv_p_max.push(1.0 / p_max);
        self.value.push(value);
        self.place
            .push(place.and_then(|g| u32::try_from(g).ok()).unwrap_or(NONE));
        self.noise.push(noise.unwrap_or(NONE));
    }

    /// `count` of these jobs (all of them when there are no more), stratified by `key`: the
    /// middle job of each of `count` equal slices of the jobs ordered by `key`, kept in their
    /// original order. With the key the plan is most driven by (value per watt), the sample
    /// spans the fleet's range of it evenly, and its estimate of a whole-fleet sum varies much
    /// less than an evenly spaced pick's (at 100,000 jobs the shrink found on 256 of them was
    /// 0.708 against the exact 0.719 at a 20 % cut; an evenly spaced pick found 0.646).
    pub(super) fn stratified(&self, count: usize, key: impl Fn(usize) -> f64) -> Self {
        let n = self.job.len();
        if n <= count {
            return self.clone();
        }
        let keys: Vec<f64> = self.job.iter().map(|&i| key(i as usize)).collect();
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
        let mut picked: Vec<usize> = (0..count).map(|k| order[(2 * k + 1) * n / (2 * count)]).collect();
        picked.sort_unstable();
        Self {
            job: picked.iter().map(|&k| self.job[k]).collect(),
            inv_p_max: picked.iter().map(|&k| self.inv_p_max[k]).collect(),
            value: picked.iter().map(|&k| self.value[k]).collect(),
            place: picked.iter().map(|&k| self.place[k]).collect(),
            noise: picked.iter().map(|&k| self.noise[k]).collect(),
            row_sums: None,
        }
    }

    /// Sum these jobs' rows of `set`, weighted by their values (once per preparation).
    pub(super) fn sum_rows(&mut self, set: &PlausibleSet) {
        let mut sums = Box::new([[0.0; COLUMNS]; PLAUSIBLE_KNOTS]);
        for (&g, &value) in self.place.iter().zip(&self.value) {
            if g == NONE {
                continue;
            }
            for (sum, row) in sums.iter_mut().zip(&set.grids[g as usize]) {
                for (total, &units) in sum.iter_mut().zip(row) {
                    *total += value * TAU_UNIT * f64::from(units);
                }
            }
        }
        self.row_sums = Some(sums);
    }

    pub(super) fn len(&self) -> usize {
        self.job.len()
    }
}

/// How many standard deviations of the measured curves' error the hedge guards: the plausible
/// set of a fleet's noisy measured curves is the ellipsoid of their errors of this radius, on
/// which a plan's worst gain over the equal cut is its expected gain less this many standard
/// deviations of it (about a 2.5 % chance of doing worse, the errors being normal).
pub const NOISE_Z: f64 = 2.0;

/// The errors of the fleet's noisy measured curves, one group per curve: jobs measured as one
/// (the same points and errors, as the jobs of one profile are) share one error, so their gains
/// add before they are squared; different curves' errors are independent.
#[derive(Debug, Clone, Default)]
pub(super) struct NoiseGroups {
    /// `xs[offsets[g]..offsets[g + 1]]`: group g's points (relative power, increasing, the
    /// uncapped one last), and `sd[..]` the standard error of its relative throughput at each.
    offsets: Vec<u32>,
    xs: Vec<f64>,
    sd: Vec<f64>,
}

impl NoiseGroups {
    /// Add a group; its index.
    pub(super) fn push(&mut self, xs: &[f64], sd: &[f64]) -> u32 {
        if self.offsets.is_empty() {
            self.offsets.push(0);
        }
        self.xs.extend_from_slice(xs);
        self.sd.extend(sd.iter().take(xs.len()).copied());
        self.sd.resize(self.xs.len(), 0.0);
        self.offsets.push(u32::try_from(self.xs.len()).unwrap_or(u32::MAX));
        u32::try_from(self.offsets.len() - 2).unwrap_or(NONE)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.xs.is_empty()
    }

    fn range(&self, g: u32) -> std::ops::Range<usize> {
        let g = g as usize;
        self.offsets[g] as usize..self.offsets[g + 1] as usize
    }
}

/// Add `value` × the weights of linear interpolation at `x` on the points `xs` (clamped to the
/// first and last) into `into`.
fn add_interpolation(xs: &[f64], x: f64, value: f64, into: &mut [f64]) {
    let upper = xs.partition_point(|&p| p < x);
    match upper.checked_sub(1) {
        None => into[0] += value,
        Some(k) if upper >= xs.len() => into[k] += value,
        Some(k) => {
            let width = xs[upper] - xs[k];
            let w = if width > 0.0 { (x - xs[k]) / width } else { 1.0 };
            into[k] += value * (1.0 - w);
            into[upper] += value * w;
        }
    }
}

/// Every scenario's value of a plan, in objective units, and in the last column
/// ([`ESTIMATE`]) its expected value.
pub(super) type ScenarioValues = [f64; COLUMNS];

/// The worst gain of `values` over `at_equal`, and in which scenario.
fn worst_gain(values: &ScenarioValues, at_equal: &ScenarioValues) -> (f64, usize) {
    values[..PLAUSIBLE_SHAPES]
        .iter()
        .zip(at_equal)
        .map(|(v, e)| v - e)
        .enumerate()
        .fold(
            (f64::INFINITY, 0),
            |(w, at), (s, g)| if g < w { (g, s) } else { (w, at) },
        )
}

/// Rows of the mixture's master problem: the common scenarios, the expected value
/// ([`ESTIMATE`]), then the adverse ends of each kind of shape.
const MIX_ROWS: usize = COLUMNS + PLAUSIBLE_PER_PFI;

/// A plan's column in the mixture's master problem (rows as [`MIX_ROWS`]).
type MixColumn = [f64; MIX_ROWS];

/// Per kind of plausible shape, the plan's gain over the equal cut when every job takes the end
/// of its PFI interval that the plan fares worse at ([`Prepared::gains`]).
pub(super) type AdverseGains = [f64; PLAUSIBLE_PER_PFI];

/// The worst adverse-end gain and its scenario index (after the [`PLAUSIBLE_SHAPES`] common
/// scenarios, see [`Hedge::worst_scenario`]).
fn worst_adverse(adverse: &AdverseGains) -> (f64, usize) {
    adverse
        .iter()
        .enumerate()
        .fold((f64::INFINITY, 0), |(w, at), (kind, &g)| {
            if g < w { (g, PLAUSIBLE_SHAPES + kind) } else { (w, at) }
        })
}

/// The worse of two (gain, scenario) pairs.
fn worse(a: (f64, usize), b: (f64, usize)) -> (f64, usize) {
    if b.0 < a.0 { b } else { a }
}

/// Move `shed` `alpha` of the way from `equal` to where it is: `e + α·(p − e)`, which keeps the
/// budget and every floor for any α ∈ [0, 1].
fn along(shed: &mut [f64], equal: &[f64], alpha: f64) {
    for (s, &e) in shed.iter_mut().zip(equal) {
        *s = e + alpha * (*s - e);
    }
}

impl Prepared<'_> {
    /// The standard deviation, in objective units, of the error of `shed`'s gain over `equal`
    /// on `jobs` that the noisy measured curves' errors make: each job's gain is its value
    /// times the difference of its curve at the two powers, linear in its curve's errors at its
    /// points, and the groups' errors are independent. 0 without noisy measured curves.
    fn noise_sd(&self, jobs: &HedgeJobs, equal: &[f64], shed: &[f64]) -> f64 {
        let groups = &self.noise_groups;
        if groups.is_empty() {
            return 0.0;
        }
        let mut weights = vec![0.0; groups.xs.len()];
        for k in 0..jobs.len() {
            let g = jobs.noise[k];
            if g == NONE {
                continue;
            }
            let i = jobs.job[k] as usize;
            let range = groups.range(g);
            let (xs, into) = (&groups.xs[range.clone()], &mut weights[range]);
            let (inv, value) = (jobs.inv_p_max[k], jobs.value[k]);
            add_interpolation(xs, 1.0 - shed[i] * inv, value, into);
            add_interpolation(xs, 1.0 - equal[i] * inv, -value, into);
        }
        weights
            .iter()
            .zip(&groups.sd)
            .map(|(w, s)| (w * s).powi(2))
            .sum::<f64>()
            .sqrt()
    }

    /// Every scenario's value of `shed` over `jobs`, in objective units (a measured job counts
    /// its own curve in every scenario).
    ///
    /// The pass goes [`LOOK_AHEAD`] jobs at a time: it first locates each job of a batch on its
    /// knots, then sums the batch's rows. At 100,000 jobs each job's shapes are mostly out of the
    /// cache; with the rows' addresses known for a whole batch, and no arithmetic of a job's
    /// position between one read and the next, the processor has many of those reads in flight
    /// at once (a hedged 100,000-job plan: 6.4 → 5.1 ms). Reading a unit of each row in the
    /// first loop, to start the reads even earlier, cost more than it saved (6.2 ms), and so did
    /// storing each pair of adjacent rows in a cache line of its own (7.9 ms, twice the memory).
    fn scenario_values(&self, jobs: &HedgeJobs, shed: &[f64]) -> ScenarioValues {
        let mut values = [0.0; COLUMNS];
        let mut common = 0.0;
        in_batches(
            jobs.len(),
            (NONE, 0usize, 0.0, 0.0),
            |k| {
                let i = jobs.job[k] as usize;
                match jobs.place[k] {
                    NONE => {
                        common += self.scale[i] * self.hull_tokens(i, self.power_of(i, shed)).unwrap_or(0.0);
                        (NONE, 0, 0.0, 0.0)
                    }
                    g => {
                        let position = plausible_position(1.0 - shed[i] * jobs.inv_p_max[k]);
                        let (knot, low, high) = interval(position, jobs.value[k] * TAU_UNIT);
                        (g, knot, low, high)
                    }
                }
            },
            |(g, knot, low, high)| {
                if g != NONE {
                    self.plausible.accumulate_at(g as usize, knot, low, high, &mut values);
                }
            },
        );
        values.map(|v| v + common)
    }

    /// Every scenario's value of the equal cut over `jobs`: from their row sums, at the equal
    /// cut's common fraction, corrected for the jobs it clips; by a pass when there are no sums.
    fn scenario_values_at_equal(&self, jobs: &HedgeJobs, equal: &[f64]) -> ScenarioValues {
        let Some(sums) = &jobs.row_sums else {
            return self.scenario_values(jobs, equal);
        };
        // The common fraction: that of any job the equal cut did not clip (nor leave uncut for
        // lack of room). Jobs at another fraction are moved from it to their own.
        let unclipped = (0..jobs.len()).find(|&k| {
            let i = jobs.job[k] as usize;
            let room = (self.jobs[i].uncapped_power - self.floors[i].0).value();
            jobs.place[k] != NONE && room > 0.0 && equal[i] < room * (1.0 - 1e-9)
        });
        let Some(reference) = unclipped else {
            return self.scenario_values(jobs, equal);
        };
        let common = equal[jobs.job[reference] as usize] * jobs.inv_p_max[reference];
        let position = plausible_position(1.0 - common);
        let mut values: ScenarioValues = [0.0; COLUMNS];
        let (k, low, high) = interval(position, 1.0);
        for s in 0..COLUMNS {
            values[s] = low * sums[k][s] + high * sums[k + 1][s];
        }
        let mut measured = 0.0;
        for k in 0..jobs.len() {
            let i = jobs.job[k] as usize;
            match jobs.place[k] {
                NONE => measured += self.scale[i] * self.hull_tokens(i, self.power_of(i, equal)).unwrap_or(0.0),
                g => {
                    let fraction = equal[i] * jobs.inv_p_max[k];
                    if (fraction - common).abs() > 1e-12 {
                        let (g, value) = (g as usize, jobs.value[k]);
                        self.plausible
                            .accumulate(g, plausible_position(1.0 - fraction), value, &mut values);
                        self.plausible.accumulate(g, position, -value, &mut values);
                    }
                }
            }
        }
        values.map(|v| v + measured)
    }

    /// The plan's gain over the equal cut on `jobs` in every scenario ([`ScenarioValues`]: the
    /// expected gain in its last column) and, per kind of shape, when each job known by a PFI
    /// takes the end of its interval that it loses more at, or gains less at, under this plan (a
    /// measured curve at its band's low edge; "Adverse ends" in the module docs): one pass, each
    /// job's rows read at both powers.
    fn gains(&self, jobs: &HedgeJobs, equal: &[f64], shed: &[f64]) -> (ScenarioValues, AdverseGains) {
        let (mut common, mut adverse) = ([0.0; COLUMNS], [0.0; PLAUSIBLE_PER_PFI]);
        let mut shared = 0.0;
        in_batches(
            jobs.len(),
            (NONE, (0usize, 0.0, 0.0), (0usize, 0.0, 0.0)),
            |k| {
                let i = jobs.job[k] as usize;
                match jobs.place[k] {
                    NONE => {
                        shared += self.scale[i]
                            * (self.hull_tokens(i, self.power_of(i, shed)).unwrap_or(0.0)
                                - self.hull_tokens(i, self.power_of(i, equal)).unwrap_or(0.0));
                        (NONE, (0, 0.0, 0.0), (0, 0.0, 0.0))
                    }
                    g => {
                        let (value, inv) = (jobs.value[k] * TAU_UNIT, jobs.inv_p_max[k]);
                        (
                            g,
                            interval(plausible_position(1.0 - shed[i] * inv), value),
                            interval(plausible_position(1.0 - equal[i] * inv), value),
                        )
                    }
                }
            },
            |(g, (kp, lp, hp), (ke, le, he))| {
                if g == NONE {
                    return;
                }
                let grid = &self.plausible.grids[g as usize];
                let (ap, bp, ae, be) = (&grid[kp], &grid[kp + 1], &grid[ke], &grid[ke + 1]);
                let gain = |s: usize| {
                    lp * f64::from(ap[s]) + hp * f64::from(bp[s]) - le * f64::from(ae[s]) - he * f64::from(be[s])
                };
                let job: ScenarioValues = std::array::from_fn(gain);
                for (c, j) in common.iter_mut().zip(&job) {
                    *c += j;
                }
                if self.plausible.interval[g as usize] {
                    for (kind, a) in adverse.iter_mut().enumerate() {
                        *a += job[kind].min(job[kind + PLAUSIBLE_PER_PFI]);
                    }
                } else {
                    for (a, j) in adverse.iter_mut().zip(&job) {
                        *a += j;
                    }
                }
            },
        );
        (common.map(|c| c + shared), adverse.map(|a| a + shared))
    }

    /// The worst gain of `shed` over `equal` on `jobs` in any scenario of the set, common or
    /// adverse-end, and which ([`Hedge::worst_scenario`]): one pass ([`Self::gains`]).
    fn worst_in_set(&self, jobs: &HedgeJobs, equal: &[f64], shed: &[f64]) -> (f64, usize) {
        let (common, adverse) = self.gains(jobs, equal, shed);
        worse(worst_gain(&common, &[0.0; COLUMNS]), worst_adverse(&adverse))
    }

    /// Expected value of the jobs of unknown elasticity at `shed` (in proportion to power, as
    /// [`Prepared::total_delivered`] counts them).
    fn unknown_value(&self, shed: &[f64]) -> f64 {
        self.unknown
            .iter()
            .map(|&i| {
                let job = &self.jobs[i];
                let power = job.uncapped_power.value() - shed[i];
                self.scale[i] * job.uncapped_tokens.value() * power / job.uncapped_power.value()
            })
            .sum()
    }

    /// Job `i`'s power when `shed` watts are taken from it.
    fn power_of(&self, i: usize, shed: &[f64]) -> f64 {
        self.jobs[i].uncapped_power.value() - shed[i]
    }

    /// The share `α` of the way from the equal cut to `shed` whose plan has the best worst
    /// gain over the measured curves' error on the `search` jobs: the expected gain over the
    /// equal cut less `noise_at` (that many standard deviations of its error). Both are 0 at
    /// the equal cut; the expected gain is concave along the line and the deviation grows about
    /// in proportion, so the best is found by golden-section search ([`SHRINK_STEPS`] + 8 trials,
    /// written into `shed` at the searched jobs only and put back after).
    fn noise_maximin(
        &self,
        search: &HedgeJobs,
        equal: &[f64],
        shed: &mut [f64],
        equal_expected: f64,
        noise_at: &dyn Fn(&[f64]) -> f64,
    ) -> f64 {
        let expected: Vec<f64> = search.job.iter().map(|&i| shed[i as usize]).collect();
        let score = |alpha: f64, shed: &mut [f64]| {
            for (&i, &p) in search.job.iter().zip(&expected) {
                let i = i as usize;
                shed[i] = equal[i] + alpha * (p - equal[i]);
            }
            self.scenario_values(search, shed)[ESTIMATE] - equal_expected - noise_at(shed)
        };
        const GOLDEN: f64 = 0.618_033_988_749_895;
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        let (mut a, mut b) = (hi - GOLDEN * (hi - lo), lo + GOLDEN * (hi - lo));
        let (mut fa, mut fb) = (score(a, shed), score(b, shed));
        for _ in 0..SHRINK_STEPS + 8 {
            if fa < fb {
                (lo, a, fa) = (a, b, fb);
                b = lo + GOLDEN * (hi - lo);
                fb = score(b, shed);
            } else {
                (hi, b, fb) = (b, a, fa);
                a = hi - GOLDEN * (hi - lo);
                fa = score(a, shed);
            }
        }
        let (best, at_best) = if fa > fb { (a, fa) } else { (b, fb) };
        let at_one = score(1.0, shed);
        for (&i, &p) in search.job.iter().zip(&expected) {
            shed[i as usize] = p;
        }
        if at_one >= at_best { 1.0 } else { best }
    }

    /// Hedge the expected-value plan `shed` against the equal cut `equal` (see the module docs):
    /// along the line to the equal cut, and, where that line gives up part of the expected
    /// value and every job was searched, the best mixture of plans that meets the bound
    /// ("Mixture"), kept if it is expected to deliver [`MIXTURE_MIN_GAIN`] more.
    pub(super) fn hedge(&self, equal: &[f64], shed: &mut [f64]) -> Hedge {
        let mixable = self.objective == crate::alloc::Objective::Tokens
            && self.hedged.len() <= self.hedge_sample.len()
            && !self.plausible.grids.is_empty();
        let expected = mixable.then(|| shed.to_vec());
        let hedge = self.hedge_line(equal, shed);
        let Some(expected) = expected else {
            return hedge;
        };
        if !hedge.moved() {
            return hedge;
        }
        let need: f64 = self.hedged.job.iter().map(|&i| expected[i as usize]).sum();
        let line_value = self.scenario_values(&self.hedged, shed)[ESTIMATE];
        let mut candidate = vec![0.0; shed.len()];
        let Some(blend) = self.mixture_shed(equal, [&expected, shed], need, &mut candidate) else {
            return hedge;
        };
        // The mixture meets the bound on the scenarios' knots; measured on them as every kept
        // plan is (and moved toward the equal cut should rounding have it a hair outside).
        let found = self.hedge_line(equal, &mut candidate);
        let value = self.scenario_values(&self.hedged, &candidate)[ESTIMATE];
        if value > line_value + MIXTURE_MIN_GAIN * hedge.equal_value.abs() {
            shed.copy_from_slice(&candidate);
            return Hedge {
                blend,
                expected_scenario: hedge.expected_scenario,
                expected_plan_bound: hedge.expected_plan_bound,
                ..found
            };
        }
        hedge
    }

    /// The plan of the best expected value among mixtures of plans that meets the bound in
    /// every scenario, by column generation ("Mixture" in the module docs), written into `out`;
    /// the scenarios' share of the weights of the last curves planned on, or `None` when the
    /// master problem failed. `start` are plans to begin with besides the equal cut (the
    /// expected-value plan and the line's plan).
    fn mixture_shed(&self, equal: &[f64], start: [&[f64]; 2], need: f64, out: &mut [f64]) -> Option<f64> {
        let jobs = &self.hedged;
        let unit = self.total_delivered(equal).abs().max(f64::MIN_POSITIVE);
        let tolerance = self.hedge_tolerance;
        // A plan's column: its expected gain over the equal cut and, per scenario (the common
        // ones, then the adverse ends'), how far its gain stays above −tolerance, all as shares
        // of the equal cut's value.
        // Without a job known by a PFI interval the adverse ends are the low-end scenarios
        // themselves; their rows are then left out, so that the master problem has no twin rows.
        let any_interval = self.plausible.interval.iter().any(|&i| i);
        let rows = if any_interval { MIX_ROWS } else { COLUMNS };
        let column = |shed: &[f64]| -> MixColumn {
            let (common, adverse) = self.gains(jobs, equal, shed);
            std::array::from_fn(|s| match s {
                ESTIMATE => common[s] / unit,
                s if s < COLUMNS => common[s] / unit + tolerance,
                s => adverse[s - COLUMNS] / unit + tolerance,
            })
        };
        let mut plans: Vec<Vec<f64>> = vec![equal.to_vec(), start[0].to_vec(), start[1].to_vec()];
        let mut columns: Vec<MixColumn> = plans.iter().map(|p| column(p)).collect();
        let mut lowest_dual = f64::INFINITY;
        let mut mixture = (vec![1.0, 0.0, 0.0], 0.0);
        let mut blend = 0.0;
        let mut weights = [0.0; MIX_ROWS];
        for _ in 0..MIXTURE_ROUNDS {
            mixture = mixture_primal(&columns, rows)?;
            let lambda = mixture_dual(&columns, rows)?;
            let total = 1.0 + lambda.iter().sum::<f64>();
            for (s, w) in weights.iter_mut().enumerate() {
                *w = if s == ESTIMATE { 1.0 / total } else { lambda[s] / total };
            }
            blend = 1.0 - weights[ESTIMATE];
            let mut plan = vec![0.0; equal.len()];
            self.weighted_shed(equal, need, &weights, &mut plan);
            let next = column(&plan);
            // The Lagrangian at λ: no plan meeting the bound expects more (up to the greedy's
            // exactness on the knots), so the gap to the mixture's value bounds what is left.
            let dual = next[ESTIMATE] + lambda.iter().zip(&next).map(|(l, h)| l * h).sum::<f64>();
            lowest_dual = lowest_dual.min(dual);
            plans.push(plan);
            columns.push(next);
            if lowest_dual - mixture.1 < MIXTURE_GAP {
                break;
            }
        }
        let (alpha, _) = mixture;
        out.fill(0.0);
        for (a, plan) in alpha.iter().zip(&plans).filter(|(a, _)| **a > 0.0) {
            for (o, p) in out.iter_mut().zip(plan) {
                *o += a * p;
            }
        }
        Some(blend)
    }

    /// Shed `need` watts from the planned jobs at least cost on curves that weigh every column
    /// of their plausible rows by `weights`, and each kind's adverse ends (the rows after
    /// [`COLUMNS`]) by the job's worse end's gain over its equal cut (the weights summing to 1:
    /// a mixture of concave curves, so greedy shedding stays optimal for it, on the knots), its
    /// own hull for any other job; the jobs of unknown elasticity at their equal cut. Written
    /// into `shed`.
    fn weighted_shed(&self, equal: &[f64], need: f64, weights: &[f64; MIX_ROWS], shed: &mut [f64]) {
        let adverse_weights = &weights[COLUMNS..];
        let any_adverse = adverse_weights.iter().any(|&w| w > 0.0);
        let mut segments: Vec<Segment> = self
            .segments
            .iter()
            .filter(|s| self.plausible.place(s.job as usize).is_none())
            .copied()
            .collect();
        let knots: [f64; PLAUSIBLE_KNOTS] = std::array::from_fn(plausible_knot_x);
        let mut points = Vec::with_capacity(PLAUSIBLE_KNOTS + 1);
        for k in 0..self.hedged.len() {
            let g = self.hedged.place[k];
            if g == NONE {
                continue;
            }
            let i = self.hedged.job[k] as usize;
            let grid = &self.plausible.grids[g as usize];
            let interval = self.plausible.interval[g as usize];
            let p_max = self.jobs[i].uncapped_power.value();
            // The adverse ends' terms: per kind, the worse end's gain over the job's value at
            // its equal cut (a minimum of concave curves, so concave; read at the knots).
            let at_equal: ScenarioValues = if any_adverse {
                let position = plausible_position(1.0 - equal[i] / p_max);
                std::array::from_fn(|s| position.interpolate(|k| f64::from(grid[k][s])))
            } else {
                [0.0; COLUMNS]
            };
            let tau = |k: usize| {
                let common = grid[k]
                    .iter()
                    .zip(weights)
                    .map(|(&units, &w)| w * f64::from(units))
                    .sum::<f64>();
                if !any_adverse {
                    return common;
                }
                let row = &grid[k];
                let adverse = adverse_weights
                    .iter()
                    .enumerate()
                    .map(|(kind, &w)| {
                        let (low, high) = (kind, kind + PLAUSIBLE_PER_PFI);
                        let at_low = f64::from(row[low]) - at_equal[low];
                        w * if interval {
                            at_low.min(f64::from(row[high]) - at_equal[high])
                        } else {
                            at_low
                        }
                    })
                    .sum::<f64>();
                common + adverse
            };
            let floor = (self.floors[i].0.value() / p_max).clamp(0.0, 1.0);
            points.clear();
            points.push((floor, plausible_position(floor).interpolate(tau)));
            points.extend(
                knots
                    .iter()
                    .enumerate()
                    .filter(|&(_, &x)| x > floor)
                    .map(|(k, &x)| (x, tau(k))),
            );
            let hull = ConcaveHull::from_points(points.iter().copied());
            let unit = self.hedged.value[k] * TAU_UNIT / p_max;
            for w in hull.vertices().windows(2) {
                let width = (w[1].0 - w[0].0) * p_max;
                if width > 0.0 {
                    segments.push(Segment {
                        slope: unit * (w[1].1 - w[0].1) / (w[1].0 - w[0].0),
                        width,
                        job: self.hedged.job[k],
                    });
                }
            }
        }
        shed.fill(0.0);
        for &i in &self.unknown {
            shed[i] = equal[i];
        }
        shed_cheapest(&segments, need, shed);
    }

    /// Hedge `shed` along the line to the equal cut `equal` (see the module docs).
    fn hedge_line(&self, equal: &[f64], shed: &mut [f64]) -> Hedge {
        let sampled = self.hedged.len() > self.hedge_sample.len();
        let search = &self.hedge_sample;
        // Every job's gains are measured against the equal cut's; for a sample those of every
        // job come from the row sums, and so does the equal cut's expected value, read on the
        // estimate's knots instead of its hull (a pass over every job's hull cost a tenth of a
        // 100,000-job plan).
        let at_equal = sampled.then(|| self.scenario_values_at_equal(&self.hedged, equal));
        let equal_value = match &at_equal {
            Some(at_equal) => at_equal[ESTIMATE] + self.unknown_value(equal),
            None => self.total_delivered(equal),
        };
        let tolerance = self.hedge_tolerance * equal_value.abs();
        let search_at_equal = self.scenario_values(search, equal);
        // The searched jobs' share of the tolerance: all of it, or the sample's share of the
        // planned jobs' value at the equal cut (the unknown jobs' part is theirs alone).
        let share = match &at_equal {
            Some(at_equal) => {
                (search_at_equal[ESTIMATE] / at_equal[ESTIMATE].max(f64::MIN_POSITIVE)).clamp(f64::MIN_POSITIVE, 1.0)
            }
            None => 1.0,
        };
        // A sample's estimate of the fleet's gains errs both ways; searching it for a little less
        // than its share keeps the step back (below) rare.
        let search_tolerance = tolerance * share * if sampled { SAMPLE_MARGIN } else { 1.0 };
        // The measured curves' error on the searched jobs, scaled as the fleet's would be: its
        // variance grows with the jobs it sums over, so a sample holding `share` of the fleet
        // stands for a fleet whose deviation is its own over √share, and the bound
        // `E/share − z·σ/√share ≥ −tolerance` is `E − z·σ·√share ≥ −share·tolerance`.
        let noise_scale = NOISE_Z * share.sqrt();
        let noise_at = |shed: &[f64]| noise_scale * self.noise_sd(search, equal, shed);
        let (expected_gain, expected_scenario) = self.worst_in_set(search, equal, shed);
        let binding_scenario = expected_scenario;
        let expected_noise = noise_at(shed);
        let expected_plan_bound = (expected_gain - expected_noise) / share;
        // Where measured curves carry noise, first the point of the line from the equal cut
        // whose worst gain over their error is the best (module docs, "Noise"): the plan does
        // not gamble on differences its measurements cannot tell from their noise.
        let noise_shrink = if self.noise_groups.is_empty() {
            1.0
        } else {
            self.noise_maximin(search, equal, shed, search_at_equal[ESTIMATE], &noise_at)
        };
        let (expected_gain, expected_scenario, expected_noise) = if noise_shrink < 1.0 {
            along(shed, equal, noise_shrink);
            let (gain, scenario) = self.worst_in_set(search, equal, shed);
            (gain, scenario, noise_at(shed))
        } else {
            (expected_gain, expected_scenario, expected_noise)
        };
        let expected_bound = expected_gain - expected_noise;
        let mut hedge = Hedge {
            computed: true,
            shrink: noise_shrink,
            noise_shrink,
            expected_plan_bound,
            bound: expected_bound,
            bound_measured: true,
            worst_scenario: expected_scenario,
            noise: expected_noise,
            equal_value,
            searched_jobs: search.len(),
            expected_scenario: binding_scenario,
            blend: 0.0,
        };
        if expected_bound < -search_tolerance {
            // The largest α whose plan meets the bound on the searched jobs: every gain is
            // concave along the line and 0 at the equal cut.
            // The trials are written into `shed` itself, at the searched jobs only (a pass reads
            // nothing else), and their expected values put back after.
            let expected: Vec<f64> = search.job.iter().map(|&i| shed[i as usize]).collect();
            let (mut feasible, mut infeasible) = (0.0, 1.0);
            for _ in 0..SHRINK_STEPS {
                let alpha = 0.5 * (feasible + infeasible);
                for (&i, &p) in search.job.iter().zip(&expected) {
                    let i = i as usize;
                    shed[i] = equal[i] + alpha * (p - equal[i]);
                }
                let (gain, _) = self.worst_in_set(search, equal, shed);
                if gain - noise_at(shed) >= -search_tolerance {
                    feasible = alpha;
                } else {
                    infeasible = alpha;
                }
            }
            for (&i, &p) in search.job.iter().zip(&expected) {
                shed[i as usize] = p;
            }
            along(shed, equal, feasible);
            hedge.shrink = noise_shrink * feasible;
        } else if !sampled {
            // Every job was searched and the expected-value plan stands.
            return hedge;
        }
        // The kept plan on every job: for a sample, the first time the whole fleet is looked at.
        let measure = |shed: &[f64]| {
            let (gain, scenario) = self.worst_in_set(&self.hedged, equal, shed);
            let noise = NOISE_Z * self.noise_sd(&self.hedged, equal, shed);
            (gain - noise, scenario, noise)
        };
        let (mut bound, mut scenario, mut noise) = measure(shed);
        if bound < -tolerance {
            // Only a sample can misjudge the whole fleet: one exact step back along the line,
            // whose scenario gains are then at least β times those measured (concavity), so
            // that they alone meet −tolerance.
            let beta = (tolerance / -bound).clamp(0.0, 1.0);
            along(shed, equal, beta);
            hedge.shrink *= beta;
            if self.noise_groups.is_empty() {
                bound *= beta;
                noise = 0.0;
                hedge.bound_measured = false;
            } else {
                // The measured curves' error need not shrink in proportion along the line (a
                // job may cross one of its points): measure the plan kept.
                (bound, scenario, noise) = measure(shed);
            }
        }
        hedge.bound = bound;
        hedge.worst_scenario = scenario;
        hedge.noise = noise;
        hedge
    }
}

/// Rounds of column generation at most ([`Prepared::mixture_shed`]).
const MIXTURE_ROUNDS: usize = 24;
/// Gap between the mixture's value and the Lagrangian bound at which the search stops (share of
/// the equal cut's value).
const MIXTURE_GAP: f64 = 1e-5;
/// The largest multiplier of a scenario in the dual master (shares of value per share of value).
const MIXTURE_MAX_MULTIPLIER: f64 = 1e3;

/// The restricted master: the mixture `α` of the plans with columns `columns` of the best
/// expected gain whose every scenario stays above −tolerance; its weights and expected gain.
fn mixture_primal(columns: &[MixColumn], rows: usize) -> Option<(Vec<f64>, f64)> {
    use microlp::{ComparisonOp, OptimizationDirection, Problem};
    let mut lp = Problem::new(OptimizationDirection::Maximize);
    let alpha: Vec<_> = columns.iter().map(|c| lp.add_var(c[ESTIMATE], (0.0, 1.0))).collect();
    for s in (0..rows).filter(|&s| s != ESTIMATE) {
        let row: Vec<_> = alpha.iter().zip(columns).map(|(&a, c)| (a, c[s])).collect();
        lp.add_constraint(&row, ComparisonOp::Ge, 0.0);
    }
    let simplex: Vec<_> = alpha.iter().map(|&a| (a, 1.0)).collect();
    lp.add_constraint(&simplex, ComparisonOp::Eq, 1.0);
    let solution = lp.solve().ok()?.into_solution().ok()?;
    let weights = alpha.iter().map(|&a| solution.var_value(a).max(0.0)).collect();
    Some((weights, solution.objective()))
}

/// The dual master: the scenarios' multipliers `λ ≥ 0` that minimise the Lagrangian's model
/// `max_k gain_k + λ·h_k` over the plans found.
fn mixture_dual(columns: &[MixColumn], rows: usize) -> Option<[f64; MIX_ROWS]> {
    use microlp::{ComparisonOp, OptimizationDirection, Problem};
    let mut lp = Problem::new(OptimizationDirection::Minimize);
    let t = lp.add_var(1.0, (f64::NEG_INFINITY, f64::INFINITY));
    // One multiplier per constraint row (the first `rows` but the estimate's).
    let lambda: Vec<_> = (0..rows)
        .filter(|&s| s != ESTIMATE)
        .map(|s| (s, lp.add_var(0.0, (0.0, MIXTURE_MAX_MULTIPLIER))))
        .collect();
    for c in columns {
        let mut row = vec![(t, 1.0)];
        row.extend(lambda.iter().map(|&(s, l)| (l, -c[s])));
        lp.add_constraint(&row, ComparisonOp::Ge, c[ESTIMATE]);
    }
    let solution = lp.solve().ok()?.into_solution().ok()?;
    let mut multipliers = [0.0; MIX_ROWS];
    for &(s, l) in &lambda {
        multipliers[s] = solution.var_value(l).max(0.0);
    }
    Some(multipliers)
}

#[cfg(test)]
mod tests {
    use crate::alloc::{Budget, CapRange, CurveAware, Elasticity, JobSpec};
    use crate::estimate::CurveFamily;
    use crate::units::{Fraction, TokensPerSec, Watts};
    use std::sync::Arc;

    /// Jobs whose tokens per joule differ ten-fold, all with predicted PFIs: the expected-value
    /// plan cuts the low-efficiency jobs deep, which a fleet of rooflines would punish.
    fn fleet() -> Vec<JobSpec> {
        (0..12)
            .map(|i| {
                let gpus = if i % 3 == 0 { 16 } else { 8 };
                let draw = [690.0, 670.0, 630.0, 590.0][i % 4];
                let tokens_per_gpu = [450.0, 900.0, 3_000.0, 4_500.0][i % 4];
                JobSpec {
                    id: format!("j{i}").into(),
                    gpus,
                    cap_range: CapRange::H200,
                    uncapped_power: Watts(draw * f64::from(gpus)),
                    uncapped_tokens: TokensPerSec(tokens_per_gpu * f64::from(gpus)),
                    elasticity: Elasticity::PredictedPfi {
                        mean: [1.2, 1.3, 1.5, 2.2][i % 4],
                        sd: 0.241,
                        grid: None,
                    },
                    max_slowdown: None,
                    priority: 1.0,
                }
            })
            .collect()
    }

    #[test]
    fn a_hedged_plan_meets_its_bound_in_every_scenario_and_a_loose_one_is_the_expected_plan() {
        let family = Arc::new(CurveFamily::h200_generic());
        let jobs = fleet();
        let budget = Budget::Cut(Fraction::new(0.3).expect("fraction"));
        let expected = CurveAware::flexgate(family.clone())
            .prepare(&jobs)
            .expect("prepare")
            .allocate(budget);
        for tolerance in [0.0, 0.0025, 0.02] {
            let policy = CurveAware::flexgate(family.clone())
                .with_hedging(true)
                .with_hedge_tolerance(tolerance);
            let (plan, hedge) = policy.prepare(&jobs).expect("prepare").allocate_explained(budget);
            let allowed = tolerance * hedge.equal_value;
            assert!(
                hedge.bound >= -allowed - 1e-6 * hedge.equal_value,
                "{tolerance}: {hedge:?}"
            );
            assert!(
                (plan.planned_power - plan.budget).value().abs() <= 1e-6 * plan.budget.value(),
                "the budget is met exactly"
            );
            assert!(
                plan.entries
                    .iter()
                    .all(|e| e.expected_power.value() >= e.floor.value() - 1e-6)
            );
            if hedge.expected_plan_bound < -allowed {
                assert!(hedge.moved(), "{tolerance}: a violating plan is hedged");
            }
        }
        // At 0 the expected plan's worst scenario loses to the equal cut here, so it moves.
        let (_, strict) = CurveAware::flexgate(family.clone())
            .with_hedging(true)
            .with_hedge_tolerance(0.0)
            .prepare(&jobs)
            .expect("prepare")
            .allocate_explained(budget);
        assert!(strict.expected_plan_bound < 0.0 && strict.moved(), "{strict:?}");
        // A tolerance nothing violates leaves the expected-value plan as it was.
        let loose = CurveAware::flexgate(family)
            .with_hedging(true)
            .with_hedge_tolerance(1.0)
            .prepare(&jobs)
            .expect("prepare")
            .allocate(budget);
        assert_eq!(loose, expected);
    }

    /// Under tokens, where the line to the equal cut gives much up, the best mixture meets the
    /// same bound in every scenario and keeps more than the line, and more than any plan for the
    /// estimates blended with one scenario (the method it replaced) shrunk along its own line;
    /// under progress the hedge stays on the line.
    #[test]
    fn under_tokens_the_best_mixture_meets_the_bound_everywhere_and_keeps_more_than_the_line_or_any_blend() {
        use super::{ESTIMATE, worst_gain};
        let family = Arc::new(CurveFamily::h200_generic());
        let jobs = fleet();
        let budget = Budget::Cut(Fraction::new(0.3).expect("fraction"));
        let tolerance = 0.005;
        let policy = CurveAware::flexgate(family.clone())
            .with_hedging(true)
            .with_hedge_tolerance(tolerance);
        let prepared = policy.prepare(&jobs).expect("prepare");
        let (plan, hedge) = prepared.allocate_explained(budget);
        assert!(hedge.blend > 0.0 && hedge.moved(), "{hedge:?}");
        assert!(
            hedge.bound >= -tolerance * hedge.equal_value - 1e-9 * hedge.equal_value,
            "{hedge:?}"
        );
        // The kept plan, recomputed from its entries, in every scenario.
        let shed_of = |plan: &crate::alloc::CapPlan| -> Vec<f64> {
            plan.entries
                .iter()
                .zip(&jobs)
                .map(|(e, j)| (j.uncapped_power - e.expected_power).value())
                .collect()
        };
        let kept = shed_of(&plan);
        let need = (prepared.uncapped_power - budget.resolve(prepared.uncapped_power)).value();
        let equal = prepared.equal_shed(need);
        let at_equal = prepared.scenario_values(&prepared.hedged, &equal);
        let at_kept = prepared.scenario_values(&prepared.hedged, &kept);
        assert!(
            worst_gain(&at_kept, &at_equal).0 >= -tolerance * hedge.equal_value * (1.0 + 1e-6),
            "every scenario"
        );
        let (_, adverse) = prepared.gains(&prepared.hedged, &equal, &kept);
        assert!(
            adverse
                .iter()
                .all(|&a| a >= -tolerance * hedge.equal_value * (1.0 + 1e-6)),
            "every kind of shape at each job's adverse end: {adverse:?}"
        );
        // The line alone, from the expected-value plan.
        let mut line = vec![0.0; jobs.len()];
        prepared.slope_order.shed(need, &mut line);
        let alone = prepared.hedge_line(&equal, &mut line);
        assert!(alone.shrink < 1.0, "{alone:?}");
        let line_value = prepared.scenario_values(&prepared.hedged, &line)[ESTIMATE];
        assert!(
            at_kept[ESTIMATE] >= line_value + super::MIXTURE_MIN_GAIN * hedge.equal_value,
            "mixture {} against the line's {line_value}",
            at_kept[ESTIMATE]
        );
        // No plan for a blend of the estimate with one scenario, moved along its line until it
        // meets the bound, expects more (up to the mixture's stopping gap).
        let mut blends = 0;
        for scenario in 0..crate::estimate::PLAUSIBLE_SHAPES {
            for weight in [0.25, 0.5, 0.75, 1.0] {
                let mut weights = [0.0; super::MIX_ROWS];
                weights[ESTIMATE] = 1.0 - weight;
                weights[scenario] += weight;
                let mut blended = vec![0.0; jobs.len()];
                prepared.weighted_shed(&equal, need, &weights, &mut blended);
                let found = prepared.hedge_line(&equal, &mut blended);
                assert!(
                    found.bound >= -tolerance * hedge.equal_value * (1.0 + 1e-6),
                    "{found:?}"
                );
                let value = prepared.scenario_values(&prepared.hedged, &blended)[ESTIMATE];
                assert!(
                    value <= at_kept[ESTIMATE] + 2.0 * super::MIXTURE_GAP * hedge.equal_value,
                    "scenario {scenario} at {weight}: {value} above the mixture's {}",
                    at_kept[ESTIMATE]
                );
                blends += 1;
            }
        }
        assert_eq!(blends, 4 * crate::estimate::PLAUSIBLE_SHAPES);
        let (_, progress) = CurveAware::flexgate(family)
            .with_objective(crate::alloc::Objective::Progress)
            .with_hedging(true)
            .with_hedge_tolerance(tolerance)
            .prepare(&jobs)
            .expect("prepare")
            .allocate_explained(budget);
        assert!(progress.blend == 0.0, "{progress:?}");
    }

    /// Two kinds of jobs whose curves differ a little, each measured by a sweep at four caps
    /// whose readings err in a fixed pattern of `noise` (the same for every job of a kind, as
    /// jobs of one profile share their points).
    fn measured_fleet(noise: f64) -> Vec<JobSpec> {
        use crate::curve::{CurvePoint, PowerCurve};
        use crate::pfi::CapGrid;
        use crate::units::WattsPerGpu;
        let family = CurveFamily::h200_generic();
        (0..40)
            .map(|i| {
                let pfi = if i % 2 == 0 { 1.2 } else { 2.4 };
                let shape = family.shape(pfi, &CapGrid::fine_h200(), WattsPerGpu(650.0));
                let pattern = [1.0, -1.0, 1.0, -1.0];
                let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
                let mut points: Vec<CurvePoint> = [250.0, 370.0, 490.0, 610.0]
                    .iter()
                    .zip(pattern)
                    .map(|(&cap, e)| CurvePoint {
                        cap: WattsPerGpu(cap),
                        power: Watts(cap * 8.0),
                        tokens: TokensPerSec(8000.0 * shape.tau_at(cap / 650.0) * (1.0 + sign * e * noise)),
                    })
                    .collect();
                points.push(CurvePoint {
                    cap: WattsPerGpu(700.0),
                    power: Watts(5200.0),
                    tokens: TokensPerSec(8000.0),
                });
                let sds = points
                    .iter()
                    .map(|p| {
                        if p.cap.value() < 700.0 {
                            noise * p.tokens.value()
                        } else {
                            0.0
                        }
                    })
                    .collect();
                JobSpec {
                    id: format!("m{i}").into(),
                    gpus: 8,
                    cap_range: CapRange::H200,
                    uncapped_power: Watts(5200.0),
                    uncapped_tokens: TokensPerSec(8000.0),
                    elasticity: Elasticity::measured(PowerCurve::new(8, points).expect("a sweep"), sds),
                    max_slowdown: None,
                    priority: 1.0,
                }
            })
            .collect()
    }

    #[test]
    fn where_the_noise_hides_the_difference_the_plan_stays_near_the_equal_cut() {
        let family = Arc::new(CurveFamily::h200_generic());
        let budget = Budget::Cut(Fraction::new(0.3).expect("fraction"));
        let hedge_of = |noise: f64| {
            CurveAware::flexgate(family.clone())
                .with_objective(crate::alloc::Objective::Progress)
                .with_hedging(true)
                .prepare(&measured_fleet(noise))
                .expect("prepare")
                .allocate_explained(budget)
                .1
        };
        let (precise, noisy) = (hedge_of(0.0005), hedge_of(0.12));
        // Readings a twentieth of a percent off tell the two kinds apart, and the plan acts on
        // it, its noise priced (two standard deviations of its gain, part of its bound; the
        // expected gain is flat at its best, so even a little noise moves the plan a little);
        // readings 12 % off do not, and it keeps much closer to cutting them alike.
        assert!(precise.noise_shrink > 0.5 && precise.noise > 0.0, "{precise:?}");
        assert!(
            noisy.noise_shrink < 0.5 * precise.noise_shrink,
            "{noisy:?} vs {precise:?}"
        );
        for hedge in [precise, noisy] {
            assert!(hedge.bound >= -0.005 * hedge.equal_value - 1e-9, "{hedge:?}");
        }
    }
}
