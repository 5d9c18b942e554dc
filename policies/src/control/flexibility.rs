//! The site's flexibility curve at the meter: what shedding each amount would cost the running
//! jobs now, by the plan the gateway would make for it.
//!
//! A flexible-compute contract should promise what the jobs running now can shed, not what
//! the installed megawatts suggest. The allocator's own curve (GPU-board watts shed against the
//! objective's expected loss, [`crate::alloc::curve_aware::FlexibilityCurve`]) is converted to
//! the meter with the facility model's **lower** bound of the reduction (what a commitment may
//! rely on), settled cooling. Every cost on it is the planner's estimate, and says so.
//!
//! Outside events the levels are measured from the jobs' uncapped draw ([`FlexFrom::Uncapped`],
//! [`at_the_meter`]). While an event's caps are in force that curve would offer again the watts
//! already shed, so the curve is then how much **more** the site can shed from where it stands
//! ([`FlexFrom::CurrentCaps`], [`more_from_caps`]): each job's room between its draw under its
//! cap and its floor, costed by the same estimates the plans use (each job's
//! [`ShedProfile`], the watts beyond those already shed), cheapest watts first, and converted
//! at the meter the same way. What a utility asking for a deeper cut needs.

use crate::alloc::curve_aware::FlexibilityCurve;
use crate::alloc::{JobSpec, Objective, ShedProfile};
use crate::facility::{FacilityModel, Timing};
use crate::units::Watts;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Shed levels of the published curve: none to the most, in steps of 5 %.
pub const FLEXIBILITY_LEVELS: usize = 21;

/// Where a curve's levels are measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FlexFrom {
    /// From the jobs' uncapped draw: no event's caps are in force.
    Uncapped,
    /// From the caps in force (an event's plan): how much more the site can shed.
    CurrentCaps,
}

impl FlexFrom {
    /// As the API writes it: `uncapped` or `current_caps`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            FlexFrom::Uncapped => "uncapped",
            FlexFrom::CurrentCaps => "current_caps",
        }
    }
}

/// The curve as published (API, telemetry).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteFlexibility {
    /// When it was computed (the telemetry it is based on).
    pub at: DateTime<Utc>,
    /// The objective its costs are in.
    pub objective: Objective,
    /// Always `planner_estimate`: the costs are the planner's curves, not measurements.
    pub source: &'static str,
    /// Where the levels are measured from: the jobs' uncapped draw, or (while an event's caps
    /// are in force) the caps in force, each level then being shed *beyond* them.
    pub from: FlexFrom,
    /// The plannable jobs' uncapped draw, W.
    pub uncapped_power_w: f64,
    /// The plannable jobs' value uncapped under the objective (Σ T_max, or Σ GPUs × priority):
    /// what each level's `value_lost` is a share of.
    pub uncapped_value: f64,
    /// The plannable jobs' draw the levels start from, W: `uncapped_power_w` from uncapped,
    /// their draw under the caps in force (the planner's figure: cap × GPUs, at most the
    /// uncapped draw) from the caps.
    pub from_power_w: f64,
    /// What the starting point already costs, in the objective's units (0 from uncapped; the
    /// caps in force's expected loss, by the same estimates): each level's `value_lost` comes
    /// on top of it.
    pub from_value_lost: f64,
    /// From no shed (at the starting point) to every plannable job at its floor.
    pub points: Vec<SiteFlexPoint>,
    /// Each plannable job's draw the curve started from, W (empty from uncapped): the curve is
    /// made again when the caps move.
    #[serde(skip)]
    pub(crate) from_draws_w: Vec<f64>,
}

impl SiteFlexibility {
    /// The most the curve says the site can shed at the meter (its deepest level's lower
    /// bound), kW: the single figure a protocol without room for the curve carries.
    #[must_use]
    pub fn most_meter_shed_kw(&self) -> f64 {
        self.points.iter().map(|p| p.meter_shed_kw).fold(0.0, f64::max)
    }
}

/// One shed level (from the curve's starting point: see [`SiteFlexibility::from`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteFlexPoint {
    /// GPU-board power shed, W.
    pub gpu_shed_w: f64,
    /// The meter reduction it gives at least (facility model, lower bound, cooling settled), kW.
    pub meter_shed_kw: f64,
    /// The nominal meter reduction, kW.
    pub meter_shed_kw_nominal: f64,
    /// Expected GPU-weighted progress lost (0 = none, 1 = every job stopped).
    pub progress_lost: f64,
    /// Expected tokens/s lost, summed over the jobs.
    pub tokens_lost_per_s: f64,
    /// Expected loss in the objective's units.
    pub value_lost: f64,
    /// Range of the objective's loss over the plausible curve shapes, when the planner hedges
    /// (absent from the caps in force: no scenarios are costed for a deeper cut).
    pub value_lost_range: Option<(f64, f64)>,
    /// Jobs the plan would cap (from the caps in force: whose caps it would lower further).
    pub jobs_capped: usize,
    /// The QoS tiers (largest slowdowns) of the capped jobs, ascending.
    pub tiers_touched: Vec<f64>,
}

/// `curve` at the meter. A level the facility model refuses (it never refuses a finite
/// non-negative shed) is left out rather than published with a made-up figure.
#[must_use]
pub fn at_the_meter(curve: &FlexibilityCurve, facility: &FacilityModel, at: DateTime<Utc>) -> SiteFlexibility {
    let points = curve
        .points
        .iter()
        .filter_map(|p| {
            let meter = facility.forward_reduction(p.shed, Timing::Settled).ok()?;
            Some(SiteFlexPoint {
                gpu_shed_w: p.shed.value(),
                meter_shed_kw: meter.lo.value(),
                meter_shed_kw_nominal: meter.nominal.value(),
                progress_lost: p.progress_lost,
                tokens_lost_per_s: p.tokens_lost.value(),
                value_lost: p.value_lost,
                value_lost_range: p.value_lost_range,
                jobs_capped: p.jobs_capped,
                tiers_touched: p.tiers_touched.clone(),
            })
        })
        .collect();
    SiteFlexibility {
        at,
        objective: curve.objective,
        source: "planner_estimate",
        from: FlexFrom::Uncapped,
        uncapped_power_w: curve.uncapped_power.value(),
        uncapped_value: curve.uncapped_value,
        from_power_w: curve.uncapped_power.value(),
        from_value_lost: 0.0,
        points,
        from_draws_w: Vec::new(),
    }
}

/// How much more the site can shed from where it stands: `jobs` (the plannable jobs, in plan
/// order) with their [`ShedProfile`]s (the same preparation the plans use) and each one's draw
/// under the cap in force, W (`draws_w`; its uncapped draw where no cap holds it), at `levels`
/// evenly spaced shed levels (at least 2) from none to every job at its floor, at the meter.
///
/// Each job's profile is walked past the watts it has already shed (what they cost is
/// `from_value_lost`); the watts left, down to its floor, are shed cheapest first across the
/// jobs, as the plans shed them. The levels' costs are what the deeper cut adds: `value_lost`
/// in the objective's units and, from it, the tokens/s and the GPU-weighted progress lost
/// (a job's loss in its own tokens is its value lost over its value per token/s). A draw that
/// is not a finite figure counts as uncapped; one outside `[0, uncapped]` is clamped there.
#[must_use]
pub fn more_from_caps(
    jobs: &[JobSpec],
    profiles: &[ShedProfile],
    draws_w: &[f64],
    objective: Objective,
    levels: usize,
    facility: &FacilityModel,
    at: DateTime<Utc>,
) -> SiteFlexibility {
    let levels = levels.clamp(2, crate::alloc::curve_aware::MAX_LEVELS);
    let n = jobs.len().min(profiles.len()).min(draws_w.len());
    let (jobs, profiles) = (&jobs[..n], &profiles[..n]);
    let total_weight: f64 = jobs.iter().map(|j| f64::from(j.gpus) * j.priority).sum();
    // The watts left to shed, each `(width W, value lost per W, job)`.
    let mut left: Vec<(f64, f64, usize)> = Vec::new();
    let mut draws = Vec::with_capacity(n);
    let (mut uncapped_power, mut uncapped_value, mut from_power, mut from_value_lost) = (0.0, 0.0, 0.0, 0.0);
    for (i, (job, profile)) in jobs.iter().zip(profiles).enumerate() {
        let uncapped = job.uncapped_power.value();
        let draw = if draws_w[i].is_finite() {
            draws_w[i].clamp(0.0, uncapped)
        } else {
            uncapped
        };
        draws.push(draw);
        uncapped_power += uncapped;
        uncapped_value += profile.value;
        from_power += draw;
        let mut shed = uncapped - draw;
        for &(width, cost) in &profile.segments {
            if !(width.is_finite() && width > 0.0 && cost.is_finite()) {
                continue;
            }
            let past = shed.min(width);
            shed -= past;
            from_value_lost += past * cost.max(0.0);
            if width - past > 0.0 {
                left.push((width - past, cost.max(0.0), i));
            }
        }
    }
    // Cheapest first; a stable sort keeps each job's own stretches in their (rising) order.
    left.sort_by(|a, b| a.1.total_cmp(&b.1));
    let room: f64 = left.iter().map(|s| s.0).sum();

    // Per job: its value per token/s (tokens lost = value lost / this) and its weight.
    let per_token: Vec<f64> = jobs
        .iter()
        .zip(profiles)
        .map(|(j, p)| p.value / j.uncapped_tokens.value())
        .collect();
    let mut touched = vec![false; n];
    let (mut capped, mut tiers) = (0usize, Vec::<f64>::new());
    let (mut value, mut tokens, mut progress, mut taken) = (0.0, 0.0, 0.0, 0.0);
    let (mut next, mut used) = (0usize, 0.0);
    let mut points = Vec::with_capacity(levels);
    for k in 0..levels {
        let level = if k + 1 == levels {
            room
        } else {
            room * k as f64 / (levels - 1) as f64
        };
        while taken < level && next < left.len() {
            let (width, cost, i) = left[next];
            let take = (width - used).min(level - taken);
            if take > 0.0 {
                let lost = take * cost;
                value += lost;
                if per_token[i].is_finite() && per_token[i] > 0.0 {
                    let job = &jobs[i];
                    tokens += lost / per_token[i];
                    progress += f64::from(job.gpus) * job.priority * lost / profiles[i].value;
                }
                if !touched[i] {
                    touched[i] = true;
                    capped += 1;
                    if let Some(tier) = jobs[i].max_slowdown {
                        let at = tiers.partition_point(|t| *t < tier.value());
                        if tiers.get(at) != Some(&tier.value()) {
                            tiers.insert(at, tier.value());
                        }
                    }
                }
                used += take;
                taken += take;
            }
            if take <= 0.0 || used >= width {
                next += 1;
                used = 0.0;
            }
        }
        let Ok(meter) = facility.forward_reduction(Watts(level), Timing::Settled) else {
            continue;
        };
        points.push(SiteFlexPoint {
            gpu_shed_w: level,
            meter_shed_kw: meter.lo.value(),
            meter_shed_kw_nominal: meter.nominal.value(),
            progress_lost: if total_weight > 0.0 {
                progress / total_weight
            } else {
                0.0
            },
            tokens_lost_per_s: tokens,
            value_lost: value,
            value_lost_range: None,
            jobs_capped: capped,
            tiers_touched: tiers.clone(),
        });
    }
    SiteFlexibility {
        at,
        objective,
        source: "planner_estimate",
        from: FlexFrom::CurrentCaps,
        uncapped_power_w: uncapped_power,
        uncapped_value,
        from_power_w: from_power,
        from_value_lost,
        points,
        from_draws_w: draws,
    }
}

impl SiteFlexibility {
    /// The expected GPU-weighted progress lost to shed `meter_kw` at the meter, interpolated
    /// between levels; `None` beyond the curve's end (more than the site can shed).
    #[must_use]
    pub fn progress_lost_for(&self, meter_kw: f64) -> Option<f64> {
        self.promise_for(meter_kw).map(|p| p.progress_lost)
    }

    /// What the curve promises for shedding `meter_kw` at the meter (interpolated between
    /// levels); `None` beyond the curve's end or for a shed that is not a finite amount.
    #[must_use]
    pub fn promise_for(&self, meter_kw: f64) -> Option<FlexPromise> {
        if !meter_kw.is_finite() {
            return None;
        }
        let first = self.points.first()?;
        let promise = |progress_lost, tokens_lost_per_s| FlexPromise {
            curve_at: self.at,
            meter_shed_kw: meter_kw.max(0.0),
            progress_lost,
            tokens_lost_per_s,
        };
        if meter_kw <= first.meter_shed_kw {
            return Some(promise(first.progress_lost, first.tokens_lost_per_s));
        }
        self.points.windows(2).find_map(|w| {
            let (a, b) = (&w[0], &w[1]);
            (meter_kw <= b.meter_shed_kw && b.meter_shed_kw > a.meter_shed_kw).then(|| {
                let t = (meter_kw - a.meter_shed_kw) / (b.meter_shed_kw - a.meter_shed_kw);
                promise(
                    a.progress_lost + t * (b.progress_lost - a.progress_lost),
                    a.tokens_lost_per_s + t * (b.tokens_lost_per_s - a.tokens_lost_per_s),
                )
            })
        })
    }
}

/// What the flexibility curve in force promised for an event's ask, recorded with the event's
/// first plan so that the audit can set it against what the jobs measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, serde::Deserialize)]
pub struct FlexPromise {
    /// When the curve was computed.
    pub curve_at: DateTime<Utc>,
    /// The meter reduction asked: the metered power before the curtailment less the ceiling, kW.
    pub meter_shed_kw: f64,
    /// Expected GPU-weighted progress lost (planner's estimate).
    pub progress_lost: f64,
    /// Expected tokens/s lost (planner's estimate).
    pub tokens_lost_per_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::{CapRange, CurveAware, Elasticity, JobSpec};
    use crate::estimate::CurveFamily;
    use crate::facility::FacilityParams;
    use crate::units::{TokensPerSec, Watts};
    use std::sync::Arc;

    fn jobs() -> Vec<JobSpec> {
        (0..6)
            .map(|i| JobSpec {
                id: format!("j{i}").into(),
                gpus: 8,
                cap_range: CapRange::H200,
                uncapped_power: Watts(8.0 * 660.0),
                uncapped_tokens: TokensPerSec(10_000.0 * f64::from(i + 1)),
                elasticity: Elasticity::PredictedPfi {
                    mean: 1.2 + 0.2 * f64::from(i),
                    sd: 0.241,
                    grid: None,
                },
                max_slowdown: None,
                priority: 1.0,
            })
            .collect()
    }

    #[test]
    fn the_meter_curve_rises_with_the_shed_and_never_promises_more_than_the_lower_bound() {
        let prepared = CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()))
            .prepare_owned(jobs())
            .expect("prepared");
        let curve = prepared.flexibility_curve(FLEXIBILITY_LEVELS);
        let facility = FacilityModel::new(FacilityParams::for_nodes(6)).expect("facility");
        let at = DateTime::from_timestamp(1_800_000_000, 0).expect("valid");
        let site = at_the_meter(&curve, &facility, at);
        assert_eq!(site.points.len(), FLEXIBILITY_LEVELS);
        assert_eq!(site.source, "planner_estimate");
        assert_eq!(site.points[0].meter_shed_kw, 0.0);
        for w in site.points.windows(2) {
            assert!(w[1].meter_shed_kw > w[0].meter_shed_kw, "{w:?}");
            assert!(w[1].progress_lost >= w[0].progress_lost - 1e-12, "{w:?}");
        }
        for p in &site.points {
            assert!(p.meter_shed_kw <= p.meter_shed_kw_nominal + 1e-9, "{p:?}");
            // More than the GPU boards themselves: PSU, distribution and cooling losses go too.
            assert!(p.meter_shed_kw * 1000.0 >= p.gpu_shed_w - 1e-6, "{p:?}");
        }
        let last = site.points.last().expect("points");
        assert_eq!(site.progress_lost_for(0.0), Some(0.0));
        assert_eq!(site.progress_lost_for(last.meter_shed_kw + 1.0), None);
        let mid = site
            .progress_lost_for(last.meter_shed_kw / 2.0)
            .expect("within the curve");
        assert!(mid > 0.0 && mid < last.progress_lost, "{mid}");
    }

    fn facility() -> FacilityModel {
        FacilityModel::new(FacilityParams::for_nodes(6)).expect("facility")
    }

    fn at() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).expect("valid")
    }

    /// Issue 33: the caps of an event's plan in force, the curve from them starts at no shed
    /// with nothing more lost, at the plan's own expected loss, and sheds the room the plan
    /// leaves above the floors, no more; from uncapped it is the planner's curve.
    #[test]
    fn from_the_caps_of_a_plan_the_curve_starts_at_the_plans_value_and_sheds_the_room_left() {
        let prepared = CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()))
            .prepare_owned(jobs())
            .expect("prepared");
        let profiles = prepared.shed_profiles();
        let uncapped: f64 = jobs().iter().map(|j| j.uncapped_power.value()).sum();
        let room: f64 = profiles.iter().map(ShedProfile::room_w).sum();
        let plan = prepared.allocate(crate::alloc::Budget::Absolute(Watts(uncapped - 0.4 * room)));
        let draws: Vec<f64> = plan.entries.iter().map(|e| e.expected_power.value()).collect();
        let site = more_from_caps(
            &jobs(),
            &profiles,
            &draws,
            Objective::Tokens,
            FLEXIBILITY_LEVELS,
            &facility(),
            at(),
        );
        assert_eq!(site.from, FlexFrom::CurrentCaps);
        assert_eq!(site.points.len(), FLEXIBILITY_LEVELS);
        let first = &site.points[0];
        assert_eq!(
            (first.gpu_shed_w, first.meter_shed_kw, first.value_lost),
            (0.0, 0.0, 0.0)
        );
        assert_eq!((first.jobs_capped, first.progress_lost), (0, 0.0));
        // Where it starts: the plan's draw, and the plan's expected loss (tokens/s).
        assert!(
            (site.from_power_w - plan.planned_power.value()).abs() < 1e-6,
            "{}",
            site.from_power_w
        );
        let plan_lost: f64 = jobs()
            .iter()
            .zip(&plan.entries)
            .map(|(j, e)| j.uncapped_tokens.value() - e.expected_tokens.value())
            .sum();
        assert!(
            (site.from_value_lost - plan_lost).abs() <= 1e-6 * plan_lost.max(1.0),
            "{} vs the plan's {plan_lost}",
            site.from_value_lost
        );
        // How far it goes: the room the plan leaves above the floors, some 60 % of the whole.
        let floors: f64 = jobs()
            .iter()
            .zip(&profiles)
            .map(|(j, p)| j.uncapped_power.value() - p.room_w())
            .sum();
        let deepest = site.points.last().expect("levels");
        let left = plan.planned_power.value() - floors;
        assert!(
            (deepest.gpu_shed_w - left).abs() < 1e-6 * left,
            "{} vs {left}",
            deepest.gpu_shed_w
        );
        assert!((0.55..0.65).contains(&(left / room)), "{left} of {room}");
        // At the floors the cost is the planner's, whichever way the site got there.
        let planners = prepared.flexibility_curve(FLEXIBILITY_LEVELS);
        let at_floors = planners.points.last().expect("levels").value_lost;
        assert!(
            (site.from_value_lost + deepest.value_lost - at_floors).abs() <= 1e-6 * at_floors,
            "{} + {} vs {at_floors}",
            site.from_value_lost,
            deepest.value_lost
        );
        // From uncapped draws it is the planner's curve (the plans shed cheapest first).
        let whole = more_from_caps(
            &jobs(),
            &profiles,
            &[f64::INFINITY; 6],
            Objective::Tokens,
            FLEXIBILITY_LEVELS,
            &facility(),
            at(),
        );
        assert_eq!(whole.from_value_lost, 0.0);
        for (ours, theirs) in whole.points.iter().zip(&planners.points) {
            assert!(
                (ours.gpu_shed_w - theirs.shed.value()).abs() < 1e-6,
                "{ours:?} {theirs:?}"
            );
            assert!(
                (ours.value_lost - theirs.value_lost).abs() <= 1e-6 * theirs.value_lost.max(1.0),
                "{ours:?} {theirs:?}"
            );
            assert_eq!(ours.jobs_capped, theirs.jobs_capped, "{ours:?} {theirs:?}");
        }
    }

    #[test]
    fn with_every_job_at_its_floor_there_is_nothing_more_and_an_empty_fleet_is_none() {
        let prepared = CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()))
            .prepare_owned(jobs())
            .expect("prepared");
        let profiles = prepared.shed_profiles();
        let floors: Vec<f64> = jobs()
            .iter()
            .zip(&profiles)
            .map(|(j, p)| j.uncapped_power.value() - p.room_w())
            .collect();
        let site = more_from_caps(&jobs(), &profiles, &floors, Objective::Tokens, 21, &facility(), at());
        assert_eq!(site.points.len(), 21);
        assert!(site.points.iter().all(|p| p.gpu_shed_w == 0.0 && p.value_lost == 0.0));
        assert_eq!(site.most_meter_shed_kw(), 0.0);
        let none = more_from_caps(&[], &[], &[], Objective::Tokens, 21, &facility(), at());
        assert_eq!((none.points.len(), none.most_meter_shed_kw()), (21, 0.0));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// For any fleet (known and unknown elasticities, tiers, priorities) and any caps in
        /// force, the curve from the caps starts at nothing, rises, never sheds more than the
        /// room above the floors (nor less), is never empty while a job is above its floor, and
        /// at the floors costs what the planner's own curve does.
        #[test]
        fn the_curve_from_any_caps_is_bounded_by_the_room_above_the_floors(
            fleet in proptest::collection::vec(
                (1u32..=8, 0.6f64..4.0, proptest::bool::ANY, proptest::option::of(0.05f64..0.5), 0.5f64..3.0, 0.0f64..=1.0),
                1..12,
            ),
            progress in proptest::bool::ANY,
        ) {
            let objective = if progress { Objective::Progress } else { Objective::Tokens };
            let specs: Vec<JobSpec> = fleet
                .iter()
                .enumerate()
                .map(|(i, &(gpus, pfi, known, tier, priority, _))| JobSpec {
                    id: format!("j{i}").into(),
                    gpus,
                    cap_range: CapRange::H200,
                    uncapped_power: Watts(f64::from(gpus) * 650.0),
                    uncapped_tokens: TokensPerSec(1_000.0 * f64::from(gpus) * (1.0 + pfi)),
                    elasticity: if known {
                        Elasticity::PredictedPfi { mean: pfi, sd: 0.241, grid: None }
                    } else {
                        Elasticity::Unknown
                    },
                    max_slowdown: tier.map(|t| crate::units::Fraction::new(t).expect("a fraction")),
                    priority,
                })
                .collect();
            let prepared = CurveAware::flexgate(Arc::new(CurveFamily::h200_generic()))
                .with_objective(objective)
                .prepare_owned(specs.clone())
                .expect("prepared");
            let profiles = prepared.shed_profiles();
            let floors: Vec<f64> = specs
                .iter()
                .zip(&profiles)
                .map(|(j, p)| j.uncapped_power.value() - p.room_w())
                .collect();
            // Each job's cap somewhere between its floor and its uncapped draw.
            let draws: Vec<f64> = specs
                .iter()
                .zip(&floors)
                .zip(&fleet)
                .map(|((j, f), x)| f + x.5 * (j.uncapped_power.value() - f))
                .collect();
            let room: f64 = draws.iter().zip(&floors).map(|(d, f)| (d - f).max(0.0)).sum();
            let site = more_from_caps(&specs, &profiles, &draws, objective, FLEXIBILITY_LEVELS, &facility(), at());
            proptest::prop_assert_eq!(site.from, FlexFrom::CurrentCaps);
            proptest::prop_assert_eq!(site.points.len(), FLEXIBILITY_LEVELS);
            let first = &site.points[0];
            proptest::prop_assert!(first.gpu_shed_w == 0.0 && first.value_lost == 0.0 && first.jobs_capped == 0);
            proptest::prop_assert!((site.from_power_w - draws.iter().sum::<f64>()).abs() < 1e-6);
            for w in site.points.windows(2) {
                proptest::prop_assert!(w[1].gpu_shed_w >= w[0].gpu_shed_w, "{:?}", w);
                proptest::prop_assert!(w[1].value_lost >= w[0].value_lost - 1e-9, "{:?}", w);
                proptest::prop_assert!(w[1].progress_lost >= w[0].progress_lost - 1e-12, "{:?}", w);
                proptest::prop_assert!(w[1].jobs_capped >= w[0].jobs_capped, "{:?}", w);
            }
            let deepest = site.points.last().expect("levels");
            proptest::prop_assert!(deepest.gpu_shed_w <= room + 1e-6, "{} > {}", deepest.gpu_shed_w, room);
            proptest::prop_assert!(deepest.gpu_shed_w >= room - 1e-6, "{} < {}", deepest.gpu_shed_w, room);
            if room > 1e-6 {
                proptest::prop_assert!(site.most_meter_shed_kw() > 0.0, "{:?}", site);
            }
            proptest::prop_assert!(deepest.progress_lost <= 1.0 + 1e-9);
            let whole = prepared.flexibility_curve(FLEXIBILITY_LEVELS);
            let at_floors = whole.points.last().expect("levels").value_lost;
            proptest::prop_assert!(
                (site.from_value_lost + deepest.value_lost - at_floors).abs() <= 1e-6 * at_floors.max(1.0),
                "{} + {} vs {}", site.from_value_lost, deepest.value_lost, at_floors
            );
            proptest::prop_assert!((site.uncapped_value - whole.uncapped_value).abs() <= 1e-9 * whole.uncapped_value.max(1.0));
        }
    }
}
