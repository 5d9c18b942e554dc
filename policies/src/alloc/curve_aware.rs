//! Curve-aware allocation: the oracle and `flexgate`.
//!
//! Both maximise the site's [`Objective`] (total tokens/s, or GPU-weighted progress) subject to
//! the budget and every floor, by greedy water-filling on concave hulls (module `select`), which
//! is exact for concave curves. They differ only in which curves they optimise on:
//!
//! - **oracle**: every job's *true* measured curve (its upper concave hull). It is the yardstick
//!   of the fleet experiment, exact when the curves are concave on `[floor, P_max]` (all three
//!   synthetic families are). On a non-concave curve the hull optimum is an upper bound; greedy
//!   leaves at most the threshold job inside a hull segment that bridges a dent, and that job is
//!   repaired by rounding it to the segment's measured end points (see
//!   `Prepared::repair_bridged_split`): near-optimal, not guaranteed optimal.
//! - **flexgate**: curves *estimated* from what is known ([`crate::estimate`]): a measured sweep
//!   is used as is; a PFI with its grid selects a member of the estimator family; a predicted
//!   PFI uses the family's *expected* curve over the prediction's uncertainty (maximising expected
//!   throughput). Optionally ([`CurveAware::with_hedging`]: off in the library, on by default
//!   in the gateway and the fleet experiment) the plan is then **hedged** (module `hedge`): it must not lose more than a set share
//!   against the equal cut in any scenario consistent with what is known, or it moves toward
//!   the equal cut until it does not.
//!
//! Jobs of unknown elasticity get exactly the cut the equal rule would give them (and are listed
//! as fallbacks): nothing known justifies cutting them deeper, or sparing them at the others'
//! expense. Only if the budget still cannot be met are they cut further, down to their floors.
//! (Until issue 14 they were left uncapped while any known job had room: with half the fleet
//! unknown, deep cuts then fell on the known jobs alone and lost to the equal cut.)
//!
//! Planning is split in two so the expensive part can be cached per job: [`CurveAware::prepare`]
//! estimates curves and floors once (when jobs start or knowledge changes), and
//! [`Prepared::allocate`] plans any budget in expected O(n).

mod flexibility;
mod hedge;
mod memo;

use super::AllocationPolicy;
use super::bounds::FloorModel;
use super::proportional::{ProportionalSplit, proportional_cuts};
use super::select::{Segment, SlopeOrder, shed_cheapest};
use super::types::{Budget, CapPlan, Elasticity, FloorKind, JobSpec, Objective, PlanEntry, PlanError, Reason};
use crate::curve::{ConcaveHull, PowerCurve};
use crate::estimate::measured::NoisyPoint;
use crate::estimate::{CurveFamily, PLAUSIBLE_KNOTS, PlausibleShape, plausible_knot_x};
use crate::pfi::CapGrid;
use crate::units::{TokensPerSec, Watts};
pub use flexibility::{FlexPoint, FlexibilityCurve, MAX_LEVELS};
use hedge::PlausibleSet;
pub use hedge::{
    Hedge, NOISE_Z, PLAUSIBLE_PFI_SDS, PROGRESS_REGRET_TOLERANCE, REGRET_TOLERANCE, SEARCH_SAMPLE, default_tolerance,
    scenario_name,
};
use memo::{Estimate, EstimateMemo, MeasuredNoise};
use std::borrow::Cow;
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Flexgate,
    Oracle,
}

/// The oracle or the `flexgate` policy (see the module docs).
#[derive(Debug, Clone)]
pub struct CurveAware {
    mode: Mode,
    floors: FloorModel,
    objective: Objective,
    hedging: bool,
    /// `None`: the objective's default ([`hedge::default_tolerance`]).
    hedge_tolerance: Option<f64>,
}

impl CurveAware {
    /// `flexgate`: optimise on curves estimated from what is known.
    #[must_use]
    pub fn flexgate(family: Arc<CurveFamily>) -> Self {
        Self {
            mode: Mode::Flexgate,
            floors: FloorModel::new(family),
            objective: Objective::Tokens,
            hedging: false,
            hedge_tolerance: None,
        }
    }

    /// The oracle: optimise on the true curves. Jobs must carry [`Elasticity::Measured`] with
    /// their true curve; any other job is treated as inflexible (and, if needed, as a fallback).
    #[must_use]
    pub fn oracle(family: Arc<CurveFamily>) -> Self {
        Self {
            mode: Mode::Oracle,
            floors: FloorModel::new(family),
            objective: Objective::Tokens,
            hedging: false,
            hedge_tolerance: None,
        }
    }

    /// The same policy maximising `objective` (the default is [`Objective::Tokens`]).
    #[must_use]
    pub fn with_objective(mut self, objective: Objective) -> Self {
        self.objective = objective;
        self
    }

    /// Turn hedging against the equal cut on or off (the oracle knows the true curves and
    /// never hedges). Off in this constructor; the gateway (`[gateway] hedge`) and `simulate`
    /// (`--no-hedge` to turn it off) hedge by default. On the curve zoo it does not yet meet its
    /// whole aim (BENCHMARKS.md has the table and what fails).
    #[must_use]
    pub fn with_hedging(mut self, hedging: bool) -> Self {
        self.hedging = hedging && self.mode == Mode::Flexgate;
        self
    }

    /// How far below the equal cut the plan's worst scenario may fall, as a share of the equal
    /// cut's expected value (by default the objective's, [`default_tolerance`]: 2.5 % under
    /// `tokens`, 0.5 % under `progress`; a negative or non-finite value is taken as 0: never
    /// below the equal cut in any scenario).
    #[must_use]
    pub fn with_hedge_tolerance(mut self, tolerance: f64) -> Self {
        self.hedge_tolerance = Some(if tolerance.is_finite() { tolerance.max(0.0) } else { 0.0 });
        self
    }

    /// [`Self::with_hedge_tolerance`] when `tolerance` is given; the objective's default when not.
    #[must_use]
    pub fn with_hedge_tolerance_or_default(self, tolerance: Option<f64>) -> Self {
        match tolerance {
            Some(t) => self.with_hedge_tolerance(t),
            None => Self {
                hedge_tolerance: None,
                ..self
            },
        }
    }

    /// The hedge's tolerance in force: the one set, or the objective's default.
    #[must_use]
    pub fn hedge_tolerance(&self) -> f64 {
        self.hedge_tolerance
            .unwrap_or_else(|| default_tolerance(self.objective))
    }

    /// Whether plans are hedged against the equal cut.
    #[must_use]
    pub fn hedging(&self) -> bool {
        self.hedging
    }

    /// The objective this policy maximises.
    #[must_use]
    pub fn objective(&self) -> Objective {
        self.objective
    }

    fn empty_preparation(&self, jobs: usize, vertices: usize, segments: usize) -> Prepared<'static> {
        Prepared {
            policy: self.name(),
            objective: self.objective,
            hedging: self.hedging,
            hedge_tolerance: self.hedge_tolerance(),
            jobs: Cow::Borrowed(&[]),
            uncapped_power: Watts::ZERO,
            floors: Vec::with_capacity(jobs),
            scale: Vec::with_capacity(jobs),
            vertices: Vec::with_capacity(vertices),
            offsets: {
                let mut offsets = Vec::with_capacity(jobs + 1);
                offsets.push(0);
                offsets
            },
            segments: Vec::with_capacity(segments),
            slope_order: SlopeOrder::default(),
            unknown: Vec::new(),
            measured: Vec::new(),
            hedged: hedge::HedgeJobs::default(),
            hedge_sample: hedge::HedgeJobs::default(),
            plausible: PlausibleSet::with_capacity(jobs),
            noise: Vec::with_capacity(jobs),
            noise_groups: hedge::NoiseGroups::default(),
            equal_split: ProportionalSplit::default(),
        }
    }

    /// Estimate one job: its floor, hull and plausible shapes go into `prepared`; what its
    /// knowledge yields comes from `memo` when another job of the preparation knew the same.
    fn prepare_job(
        &self,
        prepared: &mut Prepared<'_>,
        index: usize,
        job: &JobSpec,
        memo: &mut EstimateMemo,
    ) -> Result<(), PlanError> {
        job.validate()?;
        let (floor, kind) = self.floors.floor(job);
        prepared.floors.push((floor, kind));
        let scale = self.objective.value_per_token(job);
        prepared.scale.push(scale);
        let estimate = memo.get_or_estimate(
            &job.elasticity,
            job.uncapped_power.per_gpu(job.gpus),
            || CapGrid::paper_default_for(job.gpus),
            || self.estimate(job),
        );
        let scaled;
        let hull = match (&estimate.measured_hull, &estimate.shape) {
            (Some(hull), _) => Some(hull),
            (None, Some(shape)) => {
                scaled = shape.to_hull(job.uncapped_power, job.uncapped_tokens, floor);
                Some(&scaled)
            }
            (None, None) => None,
        };
        match hull {
            Some(hull) => prepared.push_hull(index, job, floor, hull, scale),
            None => prepared.unknown.push(index),
        }
        prepared.offsets.push(prepared.vertices.len() as u32);
        prepared.noise.push(estimate.noise.clone());
        if self.hedging {
            // The estimate at the plausible knots, for the hedge's passes.
            let p_max = job.uncapped_power.value();
            let t_max = job.uncapped_tokens.value();
            let at_knots: PlausibleShape = std::array::from_fn(|k| {
                let tokens = prepared.hull_tokens(index, plausible_knot_x(k) * p_max).unwrap_or(0.0);
                if t_max > 0.0 { tokens / t_max } else { 0.0 }
            });
            let interval = estimate.measured_hull.is_none();
            prepared.plausible.push(&estimate.plausible, &at_knots, interval);
        } else {
            prepared.plausible.push(&[], &[0.0; PLAUSIBLE_KNOTS], false);
        }
        Ok(())
    }

    /// What `job`'s knowledge yields before it is scaled to the job: a measured curve's hull; or
    /// the family's expected curve for a PFI (for a prediction, averaged over its uncertainty)
    /// and, when hedging, the shapes the hedge guards against: none for a measured curve (it is
    /// what it is) or an unknown job (it gets the equal cut); for a PFI, the plausible shapes at
    /// that PFI; for a prediction, at its mean ± [`PLAUSIBLE_PFI_SDS`] standard deviations. The
    /// oracle uses measured curves only.
    fn estimate(&self, job: &JobSpec) -> Estimate {
        let family = self.floors.family();
        let per_gpu = job.uncapped_power.per_gpu(job.gpus);
        let (value, sd, pfi_lo, pfi_hi, grid) = match (&job.elasticity, self.mode) {
            (Elasticity::Measured { curve, tokens_sd }, Mode::Flexgate) => {
                return measured_estimate(family, curve, tokens_sd, self.hedging);
            }
            (Elasticity::Measured { curve, .. }, _) => {
                return Estimate {
                    measured_hull: Some(curve.concave_hull()),
                    ..Estimate::default()
                };
            }
            (_, Mode::Oracle) | (Elasticity::Unknown, _) => return Estimate::default(),
            (Elasticity::Pfi { value, grid }, Mode::Flexgate) => (*value, 0.0, *value, *value, Cow::Borrowed(grid)),
            (Elasticity::PredictedPfi { mean, sd, grid }, Mode::Flexgate) => {
                let grid = grid
                    .as_ref()
                    .map_or_else(|| Cow::Owned(CapGrid::paper_default_for(job.gpus)), Cow::Borrowed);
                let spread = PLAUSIBLE_PFI_SDS * sd.max(0.0);
                (*mean, *sd, mean - spread, mean + spread, grid)
            }
        };
        Estimate {
            measured_hull: None,
            shape: Some(family.expected_shape(value, sd, &grid, per_gpu)),
            plausible: if self.hedging {
                family.plausible_shapes(pfi_lo, pfi_hi, &grid, per_gpu)
            } else {
                Vec::new()
            },
            noise: None,
        }
    }

    /// Estimate every job's curve and floor once; the result plans any budget quickly.
    pub fn prepare<'a>(&self, jobs: &'a [JobSpec]) -> Result<Prepared<'a>, PlanError> {
        self.prepare_cow(Cow::Borrowed(jobs))
    }

    /// Like [`Self::prepare`], but the result owns the jobs, so a long-running service can keep
    /// it between grid events and only re-estimate when its jobs change.
    pub fn prepare_owned(&self, jobs: Vec<JobSpec>) -> Result<Prepared<'static>, PlanError> {
        self.prepare_cow(Cow::Owned(jobs))
    }

    /// Like [`Self::prepare_owned`], re-estimating only the jobs that differ from `previous`'s
    /// (matched by id): a job whose knowledge changed, or that started. Estimating a curve costs
    /// a microsecond or two a job, so a controller whose learning upgrades one job at a time
    /// would otherwise pay the whole fleet's estimation (≈ 16 ms at 10,000 jobs, BENCHMARKS.md)
    /// for each upgrade; a reused job costs a copy of its few vertices. The result equals a
    /// fresh preparation.
    pub fn prepare_updating(
        &self,
        jobs: Vec<JobSpec>,
        previous: &Prepared<'_>,
    ) -> Result<Prepared<'static>, PlanError> {
        if previous.policy != self.name() {
            return self.prepare_owned(jobs);
        }
        // Segments are pushed job by job in index order: their ranges follow from the counts.
        let mut segment_start = vec![0usize; previous.jobs.len() + 1];
        for s in &previous.segments {
            segment_start[s.job as usize + 1] += 1;
        }
        for i in 1..segment_start.len() {
            segment_start[i] += segment_start[i - 1];
        }
        let mut unknown_before = vec![false; previous.jobs.len()];
        for &i in &previous.unknown {
            unknown_before[i] = true;
        }
        let by_id: std::collections::HashMap<&str, usize> =
            previous.jobs.iter().enumerate().map(|(i, j)| (&*j.id, i)).collect();
        let mut prepared = self.empty_preparation(jobs.len(), previous.vertices.len(), previous.segments.len());
        let mut memo = EstimateMemo::default();
        for (index, job) in jobs.iter().enumerate() {
            let same = by_id.get(&*job.id).copied().filter(|&k| previous.jobs[k] == *job);
            match same {
                Some(k) if previous.objective == self.objective && previous.hedging == self.hedging => {
                    prepared.floors.push(previous.floors[k]);
                    prepared.scale.push(previous.scale[k]);
                    let (from, to) = (previous.offsets[k] as usize, previous.offsets[k + 1] as usize);
                    prepared.vertices.extend_from_slice(&previous.vertices[from..to]);
                    let job_index = u32::try_from(index).unwrap_or(u32::MAX);
                    prepared.segments.extend(
                        previous.segments[segment_start[k]..segment_start[k + 1]]
                            .iter()
                            .map(|s| Segment { job: job_index, ..*s }),
                    );
                    if unknown_before[k] {
                        prepared.unknown.push(index);
                    }
                    prepared.offsets.push(prepared.vertices.len() as u32);
                    prepared.noise.push(previous.noise[k].clone());
                    prepared.plausible.push_from(&previous.plausible, k);
                }
                _ => self.prepare_job(&mut prepared, index, job, &mut memo)?,
            }
        }
        prepared.jobs = Cow::Owned(jobs);
        Ok(prepared.finished())
    }

    fn prepare_cow<'a>(&self, jobs: Cow<'a, [JobSpec]>) -> Result<Prepared<'a>, PlanError> {
        self.prepare_with(jobs, EstimateMemo::default())
    }

    fn prepare_with<'a>(&self, jobs: Cow<'a, [JobSpec]>, mut memo: EstimateMemo) -> Result<Prepared<'a>, PlanError> {
        let mut prepared: Prepared<'a> = self.empty_preparation(jobs.len(), jobs.len() * 9, jobs.len() * 8);
        for (index, job) in jobs.iter().enumerate() {
            self.prepare_job(&mut prepared, index, job, &mut memo)?;
        }
        prepared.jobs = jobs;
        Ok(prepared.finished())
    }
}

impl AllocationPolicy for CurveAware {
    fn name(&self) -> &'static str {
        match self.mode {
            Mode::Flexgate => "flexgate",
            Mode::Oracle => "oracle",
        }
    }

    fn plan(&self, jobs: &[JobSpec], budget: Budget) -> Result<CapPlan, PlanError> {
        Ok(self.prepare(jobs)?.allocate(budget))
    }
}

/// Jobs with their curves and floors estimated, ready to plan any budget.
#[derive(Debug, Clone)]
pub struct Prepared<'a> {
    policy: &'static str,
    objective: Objective,
    hedging: bool,
    hedge_tolerance: f64,
    jobs: Cow<'a, [JobSpec]>,
    /// The jobs' uncapped draw, summed.
    uncapped_power: Watts,
    floors: Vec<(Watts, FloorKind)>,
    /// What one token/s of each job is worth under the objective (segment slopes are in value
    /// per watt; vertices stay in tokens/s).
    scale: Vec<f64>,
    /// All jobs' hull vertices `(power, tokens)` between floor and P_max, concatenated.
    vertices: Vec<(f64, f64)>,
    /// `vertices[offsets[i]..offsets[i+1]]` belong to job i (empty for inflexible jobs).
    offsets: Vec<u32>,
    /// Sheddable hull segments of all flexible jobs, job by job.
    segments: Vec<Segment>,
    /// `segments` by slope, sorted once for every plan of this preparation.
    slope_order: SlopeOrder,
    /// Jobs whose elasticity is unknown (to this policy).
    unknown: Vec<usize>,
    /// Jobs planned on a measured curve: the only ones whose hull can bridge a non-concave
    /// stretch, so the only ones [`Prepared::repair_bridged_split`] looks at (scanning every
    /// job for them cost a tenth of a 100 k-job plan).
    measured: Vec<usize>,
    /// Jobs planned on a hull (every job but the unknown ones): the hedge's jobs.
    hedged: hedge::HedgeJobs,
    /// The jobs the hedge searches its shrink on: `hedged` itself up to
    /// [`hedge::SEARCH_SAMPLE`] of them, else that many stratified by value per watt.
    hedge_sample: hedge::HedgeJobs,
    /// Each job's plausible shapes, for the hedge (empty when hedging is off).
    plausible: PlausibleSet,
    /// The error of each job's estimate where it is a noisy measured curve (module
    /// [`crate::estimate::measured`]), which the hedge guards.
    noise: Vec<Option<Arc<MeasuredNoise>>>,
    /// The noisy measured curves' errors, one group per curve, for the hedge.
    noise_groups: hedge::NoiseGroups,
    /// The equal rule's split over these jobs and floors, sorted once: every plan needs the
    /// equal cut's shares (unknown jobs take them, the hedge measures against them).
    equal_split: ProportionalSplit,
}

/// What one job can shed and what each watt of it costs, by the same estimate the plans use:
/// the forecast's building block (`crate::forecast`).
#[derive(Debug, Clone, PartialEq)]
pub struct ShedProfile {
    /// The job's value uncapped under the objective (what its losses are a share of).
    pub value: f64,
    /// Its sheddable watts, cheapest first: `(width W, value lost per W)`, the cost rising
    /// (its hull's segments from the top down; one segment in proportion to power for a job
    /// whose elasticity is unknown).
    pub segments: Vec<(f64, f64)>,
}

impl ShedProfile {
    /// The watts the job can shed, all segments.
    #[must_use]
    pub fn room_w(&self) -> f64 {
        self.segments.iter().map(|s| s.0).sum()
    }
}

impl Prepared<'_> {
    /// The jobs this preparation is for, in plan order.
    #[must_use]
    pub fn jobs(&self) -> &[JobSpec] {
        &self.jobs
    }

    /// Each job's [`ShedProfile`], in plan order.
    #[must_use]
    pub fn shed_profiles(&self) -> Vec<ShedProfile> {
        let mut out: Vec<ShedProfile> = self
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| {
                let value = self.scale[i] * job.uncapped_tokens.value();
                let segments = if self.has_hull(i) {
                    Vec::new()
                } else {
                    // Unknown: in proportion to power, as the equal rule assumes.
                    let room = (job.uncapped_power - self.floors[i].0).value().max(0.0);
                    let per_w = value / job.uncapped_power.value().max(1e-9);
                    if room > 0.0 { vec![(room, per_w)] } else { Vec::new() }
                };
                ShedProfile { value, segments }
            })
            .collect();
        // Hull segments are stored job by job in ascending power: shedding takes the top first.
        for segment in self.segments.iter().rev() {
            out[segment.job as usize]
                .segments
                .push((segment.width, segment.slope.max(0.0)));
        }
        out
    }

    /// Restrict `hull` to `[floor, P_max]`, store its vertices and its sheddable segments.
    ///
    /// Below a sweep's lowest point the hull falls in proportion to power (see
    /// [`ConcaveHull::tokens_at`]); that extension can make the curve non-concave at the lowest
    /// point, so the hull is taken again over the floor point and the interior vertices. Greedy
    /// shedding needs every job's segments to get steeper as power falls.
    fn push_hull(&mut self, index: usize, job: &JobSpec, floor: Watts, hull: &ConcaveHull, scale: f64) {
        let p_max = job.uncapped_power.value();
        let floor = floor.value().min(p_max);
        let interior = hull.vertices().iter().copied().filter(|&(p, _)| p > floor && p < p_max);
        let restricted = ConcaveHull::from_points(std::iter::once((floor, hull.tokens_at(floor))).chain(interior));
        let start = self.vertices.len();
        self.vertices.extend_from_slice(restricted.vertices());
        let last_power = self.vertices.last().map_or(f64::NEG_INFINITY, |v| v.0);
        if p_max > last_power {
            // At P_max the job delivers T_max; if the hull ends earlier (a noisy sweep whose top
            // point is not its best), the watts above the hull's end are free to shed.
            let top_tokens = hull.tokens_at(p_max).min(job.uncapped_tokens.value()).max(0.0);
            self.vertices.push((p_max, top_tokens));
        }
        for w in self.vertices[start..].windows(2) {
            let width = w[1].0 - w[0].0;
            if width > 0.0 {
                self.segments.push(Segment {
                    slope: scale * (w[1].1 - w[0].1) / width,
                    width,
                    job: index as u32,
                });
            }
        }
    }

    /// Throughput job `index` really delivers at `power`: on its measured curve when it has one
    /// (hull points between measured points may not be reachable), else on its estimated hull.
    fn delivered_tokens(&self, index: usize, power: f64) -> f64 {
        match &self.jobs[index].elasticity {
            Elasticity::Measured { curve, .. } if self.policy == "oracle" => {
                curve.tokens_at_cap(curve.cap_for_power(Watts(power))).value()
            }
            _ => self.hull_tokens(index, power).unwrap_or(0.0),
        }
    }

    /// The objective's value of a plan, each job at what it really delivers (unknown jobs in
    /// proportion to power, as the plan expects).
    fn total_delivered(&self, shed: &[f64]) -> f64 {
        shed.iter()
            .enumerate()
            .map(|(i, s)| {
                let job = &self.jobs[i];
                let power = job.uncapped_power.value() - s;
                let tokens = if self.has_hull(i) {
                    self.delivered_tokens(i, power)
                } else {
                    job.uncapped_tokens.value() * power / job.uncapped_power.value()
                };
                self.scale[i] * tokens
            })
            .sum()
    }

    fn has_hull(&self, index: usize) -> bool {
        self.offsets[index + 1] > self.offsets[index]
    }

    /// Repair the greedy solution where it split a job inside a hull segment that bridges a
    /// non-concave stretch of its measured curve (the hull promises throughput the curve cannot
    /// deliver there). Greedy splits at most the threshold job(s); each such job is tried at the
    /// segment's lower and upper vertex (real measured points), the rest re-planned around it,
    /// and the best of the three kept. Exact for concave curves (nothing to repair); for others a
    /// standard rounding of the single fractional item of a knapsack relaxation.
    fn repair_bridged_split(&self, base: &[f64], need: f64, shed: &mut Vec<f64>) {
        const MAX_REPAIRS: usize = 4;
        let bridged = |shed: &[f64], i: usize| {
            let power = self.jobs[i].uncapped_power.value() - shed[i];
            shed[i] > 0.0
                && self
                    .hull_tokens(i, power)
                    .is_some_and(|h| h > self.delivered_tokens(i, power) * (1.0 + 1e-9) + 1e-12)
        };
        let candidates: Vec<usize> = self
            .measured
            .iter()
            .copied()
            .filter(|&i| bridged(shed, i))
            .take(MAX_REPAIRS)
            .collect();
        for j in candidates {
            if !bridged(shed, j) {
                continue;
            }
            let p_max = self.jobs[j].uncapped_power.value();
            let power = p_max - shed[j];
            let v = &self.vertices[self.offsets[j] as usize..self.offsets[j + 1] as usize];
            let upper = v.partition_point(|x| x.0 < power);
            let (Some(&(below, _)), Some(&(above, _))) = (upper.checked_sub(1).and_then(|k| v.get(k)), v.get(upper))
            else {
                continue;
            };
            let mut best = (self.total_delivered(shed), shed.clone());
            for target in [below, above] {
                let mut trial = base.to_vec();
                trial[j] = p_max - target;
                let others: Vec<Segment> = self.segments.iter().filter(|s| s.job as usize != j).copied().collect();
                let unmet = shed_cheapest(&others, (need - trial[j]).max(0.0), &mut trial);
                if unmet > 1e-9 * need.max(1.0) {
                    continue;
                }
                let value = self.total_delivered(&trial);
                if value > best.0 {
                    best = (value, trial);
                }
            }
            *shed = best.1;
        }
    }

    fn hull_tokens(&self, index: usize, power: f64) -> Option<f64> {
        let v = &self.vertices[self.offsets[index] as usize..self.offsets[index + 1] as usize];
        let (&first, &last) = (v.first()?, v.last()?);
        if power <= first.0 {
            return Some(first.1);
        }
        if power >= last.0 {
            return Some(last.1);
        }
        let upper = v.partition_point(|x| x.0 < power);
        let (a, b) = (v[upper - 1], v[upper]);
        Some(a.1 + (power - a.0) / (b.0 - a.0) * (b.1 - a.1))
    }

    /// Plan `budget`: unknown jobs take the equal rule's cut, the others shed the cheapest watts
    /// on their hulls, the result is hedged against the equal cut, and only if the budget is
    /// still not met are unknown jobs cut further.
    #[must_use]
    pub fn allocate(&self, budget: Budget) -> CapPlan {
        self.allocate_explained(budget).0
    }

    /// [`Self::allocate`], with what the hedge found and did.
    #[must_use]
    pub fn allocate_explained(&self, budget: Budget) -> (CapPlan, Hedge) {
        let jobs = &self.jobs[..];
        let uncapped = self.uncapped_power;
        let budget_w = budget.resolve(uncapped);
        let need = self.need_for(budget_w);
        let Shed {
            shed,
            fallback,
            unmet,
            hedge,
        } = self.shed_for(need);

        let mut entries = Vec::with_capacity(jobs.len());
        let mut planned = Watts::ZERO;
        let mut fallbacks = Vec::new();
        for (i, job) in jobs.iter().enumerate() {
            let (floor, floor_kind) = self.floors[i];
            let power = self.planned_power(i, shed[i]);
            planned += power;
            let at_floor = power.value() <= floor.value() + 1e-6;
            let hull_tokens = self.hull_tokens(i, power.value());
            let reason = match (hull_tokens, shed[i] > 1e-9) {
                (None, false) => Reason::InflexibleUnknown,
                (None, true) => Reason::FallbackUniform,
                (Some(_), false) => Reason::Uncapped,
                (Some(_), true) if at_floor && floor_kind == FloorKind::Tier => Reason::AtTierFloor,
                (Some(_), true) if at_floor => Reason::AtCapFloor,
                (Some(_), true) => Reason::Curtailed,
            };
            if fallback[i] {
                fallbacks.push(job.id.clone());
            }
            let cap = if shed[i] <= 1e-9 {
                job.cap_range.max
            } else {
                match &job.elasticity {
                    Elasticity::Measured { curve, .. } => cap_on_curve(curve, power),
                    _ => power.per_gpu(job.gpus),
                }
                .clamp_to(job.cap_range.min, job.cap_range.max)
            };
            entries.push(PlanEntry {
                job: job.id.clone(),
                cap,
                expected_power: power,
                expected_tokens: TokensPerSec(self.expected_tokens(i, power, hull_tokens)),
                floor,
                floor_kind,
                reason,
            });
        }
        let plan = CapPlan {
            policy: self.policy,
            budget: budget_w,
            uncapped_power: uncapped,
            planned_power: planned,
            shortfall: Watts(unmet),
            entries,
            fallbacks,
        };
        (plan, hedge)
    }

    /// The watts a budget of `budget_w` asks the jobs to shed. Every path from a budget to a
    /// plan goes through here, so that the flexibility curve's levels are exactly the plans
    /// events asking for those budgets get: the hedge's column generation stops within a
    /// tolerance, so two needs a rounding apart may end on plans a rounding's worth of value
    /// apart.
    pub(super) fn need_for(&self, budget_w: Watts) -> f64 {
        (self.uncapped_power - budget_w).value().max(0.0)
    }

    /// The power job `i` is planned at when `shed` watts are taken from it (never below its
    /// floor).
    fn planned_power(&self, i: usize, shed: f64) -> Watts {
        let p_max = self.jobs[i].uncapped_power.value();
        Watts((p_max - shed).max(self.floors[i].0.value().min(p_max)))
    }

    /// What job `i` is expected to deliver at `power` (`hull_tokens`: its hull there, `None`
    /// for a job of unknown elasticity): on its measured curve when it has one, on its hull
    /// otherwise, and in proportion to power when nothing is known.
    fn expected_tokens(&self, i: usize, power: Watts, hull_tokens: Option<f64>) -> f64 {
        let job = &self.jobs[i];
        match (&job.elasticity, hull_tokens) {
            (Elasticity::Measured { .. }, Some(_)) => self.delivered_tokens(i, power.value()),
            (_, Some(hull)) => hull,
            (_, None) => job.uncapped_tokens.value() * (power / job.uncapped_power),
        }
    }

    /// The watts to shed from each job for `need` in all: unknown jobs take the equal rule's
    /// cut, the others shed the cheapest watts on their hulls (repaired where a hull bridges a
    /// non-concave measured stretch), the result is hedged against the equal cut, and only if
    /// `need` is still not met are unknown jobs cut further. Everything a plan is, but its
    /// entries: the flexibility curve runs this at every level and needs no caps or ids.
    fn shed_for(&self, need: f64) -> Shed {
        let jobs = &self.jobs[..];
        let equal = self.equal_shed(need);
        let mut base = vec![0.0; jobs.len()];
        for &i in &self.unknown {
            base[i] = equal[i];
        }
        let need_known = (need - self.unknown.iter().map(|&i| equal[i]).sum::<f64>()).max(0.0);
        let mut shed = base.clone();
        let mut unmet = self.slope_order.shed(need_known, &mut shed);
        let mut hedge = Hedge::not_needed();
        if unmet <= 0.0 {
            self.repair_bridged_split(&base, need_known, &mut shed);
            if self.hedging {
                hedge = self.hedge(&equal, &mut shed);
            }
        }

        let mut fallback = vec![false; jobs.len()];
        for &i in &self.unknown {
            fallback[i] = shed[i] > 0.0;
        }
        if unmet > 0.0 && !self.unknown.is_empty() {
            let weights: Vec<f64> = self.unknown.iter().map(|&i| jobs[i].uncapped_power.value()).collect();
            let room: Vec<f64> = self
                .unknown
                .iter()
                .map(|&i| (jobs[i].uncapped_power - self.floors[i].0).value() - shed[i])
                .map(|r| r.max(0.0))
                .collect();
            let (cuts, still_unmet) = proportional_cuts(&weights, &room, unmet);
            for (&i, cut) in self.unknown.iter().zip(cuts) {
                shed[i] += cut;
                fallback[i] = shed[i] > 0.0;
            }
            unmet = still_unmet;
        }
        Shed {
            shed,
            fallback,
            unmet,
            hedge,
        }
    }

    /// What the equal rule sheds from each job for `need` watts (same floors).
    fn equal_shed(&self, need: f64) -> Vec<f64> {
        self.equal_split.cuts(need).0
    }

    /// `self` with what every plan of it shares prepared once: the equal rule's split over its
    /// jobs and floors, its segments in slope order, and the hedge's jobs and sample.
    fn finished(mut self) -> Self {
        let weights: Vec<f64> = self.jobs.iter().map(|j| j.uncapped_power.value()).collect();
        let room: Vec<f64> = self
            .jobs
            .iter()
            .zip(&self.floors)
            .map(|(j, f)| (j.uncapped_power - f.0).value().max(0.0))
            .collect();
        self.equal_split = ProportionalSplit::new(weights, room);
        self.uncapped_power = self.jobs.iter().map(|j| j.uncapped_power).sum();
        self.slope_order = SlopeOrder::new(&self.segments);
        // Only the oracle plans on measured points as they are (the true curves); `flexgate`
        // plans on its estimate of them, a concave curve like any other.
        if self.policy == "oracle" {
            self.measured = (0..self.jobs.len())
                .filter(|&i| self.has_hull(i) && matches!(self.jobs[i].elasticity, Elasticity::Measured { .. }))
                .collect();
        }
        // One noise group per measured curve (jobs measured as one share their error).
        let mut noise_groups = hedge::NoiseGroups::default();
        let mut group_of: std::collections::HashMap<Vec<u64>, u32> = std::collections::HashMap::new();
        let mut hedged = hedge::HedgeJobs::default();
        for (i, job) in self.jobs.iter().enumerate() {
            if self.has_hull(i) {
                let value = self.scale[i] * job.uncapped_tokens.value();
                let group = match (&self.noise[i], &job.elasticity) {
                    (Some(noise), Elasticity::Measured { curve, tokens_sd }) => Some(
                        *group_of
                            .entry(memo::measured_key(curve, tokens_sd).collect())
                            .or_insert_with(|| noise_groups.push(&noise.xs, &noise.sd)),
                    ),
                    _ => None,
                };
                hedged.push(i, job.uncapped_power.value(), value, self.plausible.place(i), group);
            }
        }
        self.noise_groups = noise_groups;
        // Stratified by value per watt, what the expected-value plan ranks jobs by.
        let density =
            |i: usize| self.scale[i] * self.jobs[i].uncapped_tokens.value() / self.jobs[i].uncapped_power.value();
        self.hedge_sample = hedged.stratified(hedge::SEARCH_SAMPLE, density);
        if hedged.len() > self.hedge_sample.len() {
            hedged.sum_rows(&self.plausible);
        }
        self.hedged = hedged;
        self
    }
}

/// The estimate of a measured curve whose points carry standard errors: its points denoised in
/// relative units against the family ([`CurveFamily::denoise`]), back in the curve's own units
/// for the hull, and the error left at each point for the hedge.
fn measured_estimate(family: &CurveFamily, curve: &PowerCurve, tokens_sd: &[f64], hedging: bool) -> Estimate {
    let top = curve.uncapped();
    let (p_top, t_top) = (top.power.value(), top.tokens.value());
    if !(p_top > 0.0 && t_top > 0.0) {
        return Estimate {
            measured_hull: Some(curve.concave_hull()),
            ..Estimate::default()
        };
    }
    let points: Vec<NoisyPoint> = curve
        .points()
        .iter()
        .zip(tokens_sd.iter().chain(std::iter::repeat(&0.0)))
        .filter(|(p, _)| p.power.value() < p_top)
        .map(|(p, sd)| NoisyPoint {
            x: p.power.value() / p_top,
            tau: p.tokens.value() / t_top,
            sd: sd / t_top,
        })
        .collect();
    let denoised = family.denoise(&points);
    // The hedge's scenarios: the first half of them (the low end of a PFI interval, for the
    // jobs known by one) with every measured curve at the least concavity allows between its
    // points, the second half at the most.
    let plausible = if hedging {
        let [low, high] = denoised.band;
        (0..crate::estimate::PLAUSIBLE_SHAPES)
            .map(|s| {
                if s < crate::estimate::PLAUSIBLE_PER_PFI {
                    low
                } else {
                    high
                }
            })
            .collect()
    } else {
        Vec::new()
    };
    Estimate {
        plausible,
        measured_hull: Some(ConcaveHull::from_points(
            denoised.curve.iter().map(|&(x, tau)| (x * p_top, tau * t_top)),
        )),
        noise: (denoised.sd.iter().any(|s| *s > 0.0)).then(|| {
            Arc::new(MeasuredNoise {
                xs: denoised.noise.iter().map(|p| p.0).collect(),
                sd: denoised.noise.iter().map(|p| p.1).collect(),
            })
        }),
        ..Estimate::default()
    }
}

/// What [`Prepared::shed_for`] decided.
struct Shed {
    /// Watts shed from each job (a job's planned power is its draw less this, never below its
    /// floor).
    shed: Vec<f64>,
    /// Jobs of unknown elasticity that were cut.
    fallback: Vec<bool>,
    /// What could not be shed.
    unmet: f64,
    /// What the hedge found.
    hedge: Hedge,
}

fn cap_on_curve(curve: &PowerCurve, power: Watts) -> crate::units::WattsPerGpu {
    curve.cap_for_power(power)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::CapRange;
    use crate::curve::CurvePoint;
    use crate::units::{Fraction, WattsPerGpu};

    /// A fleet where knowledge repeats (as in the fleet experiment) and then, past the memo's
    /// capacity, never does (as in a gateway): every path of the memo is taken.
    fn fleet() -> Vec<JobSpec> {
        let point = |cap: f64, tokens: f64| CurvePoint {
            cap: WattsPerGpu(cap),
            power: Watts(cap * 8.0 * 0.95),
            tokens: TokensPerSec(tokens),
        };
        let measured = PowerCurve::new(8, vec![point(200.0, 540.0), point(450.0, 900.0), point(700.0, 1000.0)])
            .map(Elasticity::exact)
            .unwrap_or(Elasticity::Unknown);
        let knowledge = |i: usize| match i {
            0..300 => match i % 5 {
                0 => Elasticity::PredictedPfi {
                    mean: 1.4,
                    sd: 0.241,
                    grid: None,
                },
                1 => Elasticity::PredictedPfi {
                    mean: 2.1,
                    sd: 0.241,
                    grid: None,
                },
                2 => Elasticity::Pfi {
                    value: 1.8,
                    grid: CapGrid::fine_h200(),
                },
                3 => measured.clone(),
                _ => Elasticity::Unknown,
            },
            _ => Elasticity::PredictedPfi {
                mean: 1.0 + i as f64 * 1e-3,
                sd: 0.241,
                grid: None,
            },
        };
        (0..900)
            .map(|i| JobSpec {
                id: format!("job-{i}").into(),
                gpus: 8,
                cap_range: CapRange::H200,
                uncapped_power: Watts(5000.0 + (i % 7) as f64 * 50.0),
                uncapped_tokens: TokensPerSec(1000.0 + (i % 3) as f64 * 100.0),
                elasticity: knowledge(i),
                max_slowdown: (i % 4 == 0).then(|| Fraction::new(0.25).ok()).flatten(),
                priority: 1.0,
            })
            .collect()
    }

    #[test]
    fn sharing_estimates_between_jobs_changes_no_plan() {
        let jobs = fleet();
        let family = Arc::new(CurveFamily::h200_generic());
        for policy in [
            CurveAware::flexgate(family.clone())
                .with_hedging(true)
                .with_objective(Objective::Progress),
            CurveAware::flexgate(family.clone()),
            CurveAware::oracle(family.clone()),
        ] {
            let shared = policy.prepare(&jobs).expect("valid jobs");
            let unshared = policy
                .prepare_with(Cow::Borrowed(&jobs), EstimateMemo::unshared())
                .expect("valid jobs");
            for cut in [0.05, 0.2, 0.35, 0.6] {
                let budget = Budget::Cut(Fraction::new(cut).expect("a fraction"));
                assert_eq!(
                    shared.allocate(budget),
                    unshared.allocate(budget),
                    "{} at {cut}",
                    policy.name()
                );
            }
        }
    }
}
