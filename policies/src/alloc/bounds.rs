//! Floors: the lowest power a policy may plan for a job, shared by every policy.
//!
//! A job's floor is the larger of
//! - its **cap floor**: `gpus × min cap` (a cap is an upper bound on draw, and no GPU accepts a
//!   lower cap), or its uncapped draw if that is already lower;
//! - its **tier floor**: the lowest power at which its throughput loss stays within its QoS tier,
//!   read off a deliberately *pessimistic* view of its curve, because a tier is a promise to a
//!   job owner and an estimate is not a measurement:
//!   - measured sweep: the measured points, linearly interpolated (for a concave true curve the
//!     chord lies below it, so this is already conservative);
//!   - PFI with grid: the estimator family at `PFI − z·0.10` (the 0.10 covers shape error: a PFI
//!     fixes the mean ratio on a grid, not the curve between and below the grid points);
//!   - predicted PFI: the family at `mean − z·sd`;
//!   - unknown: a straight line with PFI 0.9, below every published H200 group (1.10–2.67).
//!
//! `z = 2.5` (≈ 99.4 % one-sided under a normal error), and for estimated curves only 90 % of
//! the tier's slowdown allowance is planned ([`ESTIMATED_TIER_USE`]).

use super::types::{Elasticity, FloorKind, JobSpec};
use crate::curve::PowerCurve;
use crate::estimate::CurveFamily;
use crate::pfi::CapGrid;
use crate::units::{Fraction, Watts};
use std::sync::Arc;

/// One-sided z-score for pessimistic PFI when protecting a QoS tier.
pub const TIER_CONFIDENCE_Z: f64 = 2.5;
/// Share of a tier's slowdown allowance that planning may use when the curve is estimated
/// (not measured): a PFI pins the curve's mean ratio on a grid, not its shape below the grid,
/// and deep cuts are exactly where estimated shapes err most.
pub const ESTIMATED_TIER_USE: f64 = 0.9;
/// Shape uncertainty (in PFI units) assumed for a measured PFI value when only the value and its
/// grid are known.
pub const MEASURED_PFI_SHAPE_SD: f64 = 0.10;
/// PFI assumed for a job whose elasticity is unknown, when its tier must be protected.
pub const UNKNOWN_ELASTICITY_PFI: f64 = 0.9;

/// Computes conservative floors; holds the estimator family so every policy uses the same one.
#[derive(Debug, Clone)]
pub struct FloorModel {
    family: Arc<CurveFamily>,
}

impl FloorModel {
    /// Floors computed with `family` as the shape prior.
    #[must_use]
    pub fn new(family: Arc<CurveFamily>) -> Self {
        Self { family }
    }

    /// The estimator family in use.
    #[must_use]
    pub fn family(&self) -> &Arc<CurveFamily> {
        &self.family
    }

    /// Floor for `job` and what set it. Never above the job's uncapped draw.
    #[must_use]
    pub fn floor(&self, job: &JobSpec) -> (Watts, FloorKind) {
        let cap_floor = cap_floor(job);
        match job.max_slowdown {
            Some(slowdown) => {
                let tier = self.tier_floor(job, slowdown).min(job.uncapped_power);
                if tier > cap_floor {
                    (tier, FloorKind::Tier)
                } else {
                    (cap_floor, FloorKind::CapMin)
                }
            }
            None => (cap_floor, FloorKind::CapMin),
        }
    }

    fn tier_floor(&self, job: &JobSpec, slowdown: Fraction) -> Watts {
        let keep = slowdown.complement().value();
        let keep_estimated = 1.0 - ESTIMATED_TIER_USE * slowdown.value();
        let p_max = job.uncapped_power;
        let per_gpu = p_max.per_gpu(job.gpus);
        let family_floor =
            |pfi: f64, grid: &CapGrid| p_max * self.family.shape(pfi, grid, per_gpu).power_for_tau(keep_estimated);
        match &job.elasticity {
            Elasticity::Measured { curve, tokens_sd } => {
                let target = job.uncapped_tokens.value() * keep;
                match pessimistic(curve, tokens_sd) {
                    Some(lowered) => min_power_keeping(&lowered, target),
                    None => min_power_keeping(curve, target),
                }
            }
            Elasticity::Pfi { value, grid } => family_floor(value - TIER_CONFIDENCE_Z * MEASURED_PFI_SHAPE_SD, grid),
            Elasticity::PredictedPfi { mean, sd, grid } => {
                let grid = grid.clone().unwrap_or_else(|| CapGrid::paper_default_for(job.gpus));
                family_floor(mean - TIER_CONFIDENCE_Z * sd, &grid)
            }
            Elasticity::Unknown => p_max * (1.0 - slowdown.value() * UNKNOWN_ELASTICITY_PFI).max(0.0),
        }
    }
}

/// A noisy measured curve with every capped point's throughput lowered by
/// [`TIER_CONFIDENCE_Z`] standard errors: the tier's floor is found on what the job keeps at
/// least, not on what it was read to keep. `None` for an exact curve (nothing to lower).
fn pessimistic(curve: &PowerCurve, tokens_sd: &[f64]) -> Option<PowerCurve> {
    if tokens_sd.is_empty() {
        return None;
    }
    let top = curve.uncapped().power;
    let points = curve
        .points()
        .iter()
        .zip(tokens_sd)
        .map(|(p, sd)| crate::curve::CurvePoint {
            tokens: if p.power < top {
                crate::units::TokensPerSec((p.tokens.value() - TIER_CONFIDENCE_Z * sd).max(f64::MIN_POSITIVE))
            } else {
                p.tokens
            },
            ..*p
        })
        .collect();
    PowerCurve::new(curve.gpus(), points).ok()
}

/// `gpus × min cap`, or the uncapped draw if that is lower.
#[must_use]
pub fn cap_floor(job: &JobSpec) -> Watts {
    job.cap_range.min.times_gpus(job.gpus).min(job.uncapped_power)
}

/// Lowest power on the measured curve (linear interpolation) from which throughput stays at or
/// above `tokens` all the way up to the uncapped point.
fn min_power_keeping(curve: &PowerCurve, tokens: f64) -> Watts {
    let pts = curve.points();
    let mut floor = pts[pts.len() - 1].power;
    for pair in pts.windows(2).rev() {
        let (lo, hi) = (pair[0], pair[1]);
        if lo.tokens.value() >= tokens {
            floor = lo.power;
            continue;
        }
        if hi.tokens.value() > lo.tokens.value() {
            let t = (tokens - lo.tokens.value()) / (hi.tokens.value() - lo.tokens.value());
            floor = lo.power + (hi.power - lo.power) * t.clamp(0.0, 1.0);
        }
        break;
    }
    floor
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::types::CapRange;
    use crate::curve::CurvePoint;
    use crate::units::{TokensPerSec, WattsPerGpu};

    fn job(elasticity: Elasticity, slowdown: Option<f64>) -> JobSpec {
        JobSpec {
            id: "j".into(),
            gpus: 8,
            cap_range: CapRange::H200,
            uncapped_power: Watts(5200.0),
            uncapped_tokens: TokensPerSec(1000.0),
            elasticity,
            max_slowdown: slowdown.map(|s| Fraction::new(s).expect("fraction")),
            priority: 1.0,
        }
    }

    fn measured() -> Elasticity {
        let pt = |c: f64, p: f64, t: f64| CurvePoint {
            cap: WattsPerGpu(c),
            power: Watts(p),
            tokens: TokensPerSec(t),
        };
        Elasticity::exact(
            PowerCurve::new(
                8,
                vec![
                    pt(700.0, 5200.0, 1000.0),
                    pt(500.0, 4000.0, 900.0),
                    pt(300.0, 2400.0, 600.0),
                ],
            )
            .expect("curve"),
        )
    }

    #[test]
    fn cap_floor_without_a_tier() {
        let model = FloorModel::new(Arc::new(CurveFamily::h200_generic()));
        assert_eq!(
            model.floor(&job(Elasticity::Unknown, None)),
            (Watts(1600.0), FloorKind::CapMin)
        );
    }

    #[test]
    fn measured_tier_floor_interpolates_the_chord() {
        let model = FloorModel::new(Arc::new(CurveFamily::h200_generic()));
        // keep 75 % = 750 tok/s: between 2400 W (600) and 4000 W (900) → 2400 + 1600·0.5 = 3200 W
        assert_eq!(
            model.floor(&job(measured(), Some(0.25))),
            (Watts(3200.0), FloorKind::Tier)
        );
        // tier 0 → stays at the uncapped point
        assert_eq!(model.floor(&job(measured(), Some(0.0))).0, Watts(5200.0));
    }

    #[test]
    fn uncertain_knowledge_gives_higher_floors() {
        let model = FloorModel::new(Arc::new(CurveFamily::h200_generic()));
        let exact = model
            .floor(&job(
                Elasticity::Pfi {
                    value: 1.6,
                    grid: CapGrid::fine_h200(),
                },
                Some(0.1),
            ))
            .0;
        let predicted = model
            .floor(&job(
                Elasticity::PredictedPfi {
                    mean: 1.6,
                    sd: 0.24,
                    grid: None,
                },
                Some(0.1),
            ))
            .0;
        let unknown = model.floor(&job(Elasticity::Unknown, Some(0.1))).0;
        assert!(predicted > exact, "{predicted} vs {exact}");
        assert!(unknown > exact);
        assert!(unknown <= Watts(5200.0));
    }
}
