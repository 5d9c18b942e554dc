//! The site's flexibility curve at the meter: what shedding each amount would cost the running
//! jobs now, by the plan the gateway would make for it.
//!
//! A flexible-compute contract should promise what the jobs running now can shed, not what
//! the installed megawatts suggest. The allocator's own curve (GPU-board watts shed against the
//! objective's expected loss, [`crate::alloc::curve_aware::FlexibilityCurve`]) is converted to
//! the meter with the facility model's **lower** bound of the reduction (what a commitment may
//! rely on), settled cooling. Every cost on it is the planner's estimate, and says so.

use crate::alloc::Objective;
use crate::alloc::curve_aware::FlexibilityCurve;
use crate::facility::{FacilityModel, Timing};
use chrono::{DateTime, Utc};
use serde::Serialize;

/// Shed levels of the published curve: none to the most, in steps of 5 %.
pub const FLEXIBILITY_LEVELS: usize = 21;

/// The curve as published (API, telemetry).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SiteFlexibility {
    /// When it was computed (the telemetry it is based on).
    pub at: DateTime<Utc>,
    /// The objective its costs are in.
    pub objective: Objective,
    /// Always `planner_estimate`: the costs are the planner's curves, not measurements.
    pub source: &'static str,
    /// The plannable jobs' uncapped draw, W.
    pub uncapped_power_w: f64,
    /// The plannable jobs' value uncapped under the objective (Σ T_max, or Σ GPUs × priority):
    /// what each level's `value_lost` is a share of.
    pub uncapped_value: f64,
    /// From no shed to every plannable job at its floor.
    pub points: Vec<SiteFlexPoint>,
}

impl SiteFlexibility {
    /// The most the curve says the site can shed at the meter (its deepest level's lower
    /// bound), kW: the single figure a protocol without room for the curve carries.
    #[must_use]
    pub fn most_meter_shed_kw(&self) -> f64 {
        self.points.iter().map(|p| p.meter_shed_kw).fold(0.0, f64::max)
    }
}

/// One shed level.
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
    /// Range of the objective's loss over the plausible curve shapes, when the planner hedges.
    pub value_lost_range: Option<(f64, f64)>,
    /// Jobs the plan would cap.
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
        uncapped_power_w: curve.uncapped_power.value(),
        uncapped_value: curve.uncapped_value,
        points,
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
}
