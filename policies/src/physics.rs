//! A physical model of how a capped GPU trades power for throughput (after the
//! PFI paper's physical curve model: a compute-bound share that slows with the clock and a
//! memory-bound share that does not), used to synthesise job curves for the fleet experiment and as the shape prior of
//! the `flexgate` curve estimator.
//!
//! Per GPU, with the SM clock `f` normalised to 1 when uncapped and `φ` the clock-sensitive
//! (compute-bound) share of step time:
//!
//! ```text
//! τ(f) = T/T_max = 1 / (φ/f + 1 − φ)
//! P(f) = P_s + P_m·(1 − m + m·τ(f)) + P_d·f^α,    P_d = P_u − P_s − P_m
//! ```
//!
//! A cap `c < P_u` makes the firmware lower the clock until `P(f) = c` (bisection on
//! `[f_min, 1]`); the realized draw is `P(f)`. Memory-bound jobs (small φ) keep most of their
//! throughput as the clock falls, compute-bound ones (φ ≈ 1) lose it in proportion.

use crate::curve::{CurveError, CurvePoint, PowerCurve};
use crate::pfi::{CapGrid, PfiError, pfi_on_grid};
use crate::units::{TokensPerSec, WattsPerGpu};
use serde::Serialize;

/// Parameters of the per-GPU physical model. All powers are per GPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PhysicalModel {
    /// `P_u`: uncapped per-GPU draw of this job (W). Jobs differ: 560–700 W on H200.
    pub uncapped_w: f64,
    /// `P_s`: static/leakage power that no clock change removes (W), ≈ 90 W on H200.
    pub static_w: f64,
    /// `P_m`: memory-subsystem power at full activity (W).
    pub memory_w: f64,
    /// `m`: share of memory power that scales with throughput (activity), ≈ 0.5.
    pub memory_coupling: f64,
    /// `α`: exponent of dynamic power in clock (voltage scales with clock), 2–2.5.
    pub alpha: f64,
    /// `φ`: compute-bound share of step time (0 = purely memory-bound, 1 = purely compute-bound).
    pub compute_share: f64,
    /// `f_min`: lowest clock the firmware will run at (normalised), ≈ 0.12.
    pub min_clock: f64,
}

impl PhysicalModel {
    /// Rough H200 defaults (700 W board limit, the published measurements' range) with a given uncapped draw and compute share.
    #[must_use]
    pub fn h200(uncapped_w: f64, compute_share: f64) -> Self {
        Self {
            uncapped_w,
            static_w: 90.0,
            memory_w: 130.0,
            memory_coupling: 0.5,
            alpha: 2.3,
            compute_share,
            min_clock: 0.12,
        }
    }

    /// Relative throughput at normalised clock `f`.
    #[must_use]
    pub fn throughput_ratio(&self, f: f64) -> f64 {
        let phi = self.compute_share;
        1.0 / (phi / f + 1.0 - phi)
    }

    /// Per-GPU power at normalised clock `f`.
    #[must_use]
    pub fn power_at_clock(&self, f: f64) -> f64 {
        let dynamic = self.uncapped_w - self.static_w - self.memory_w;
        let m = self.memory_coupling;
        self.static_w + self.memory_w * (1.0 - m + m * self.throughput_ratio(f)) + dynamic * f.powf(self.alpha)
    }

    /// Realized per-GPU power and relative throughput under a per-GPU cap.
    ///
    /// A cap the GPU cannot reach even at `f_min` leaves it at `f_min` (realized power above the
    /// cap): real firmware behaves like that, and the curve validation will flag such sweeps.
    #[must_use]
    pub fn operating_point(&self, cap_w: f64) -> (f64, f64) {
        if cap_w >= self.uncapped_w {
            return (self.uncapped_w, 1.0);
        }
        let (mut lo, mut hi) = (self.min_clock, 1.0);
        if self.power_at_clock(lo) >= cap_w {
            return (self.power_at_clock(lo), self.throughput_ratio(lo));
        }
        for _ in 0..60 {
            let mid = 0.5 * (lo + hi);
            if self.power_at_clock(mid) > cap_w {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        (self.power_at_clock(lo), self.throughput_ratio(lo))
    }

    /// A sweep of this job at the given per-GPU caps: one curve point per cap.
    pub fn sweep(&self, gpus: u32, caps: &[WattsPerGpu], tokens_max: TokensPerSec) -> Result<PowerCurve, CurveError> {
        let points = caps
            .iter()
            .map(|&cap| {
                let (power_w, ratio) = self.operating_point(cap.value());
                CurvePoint {
                    cap,
                    power: WattsPerGpu(power_w).times_gpus(gpus),
                    tokens: tokens_max * ratio,
                }
            })
            .collect();
        PowerCurve::new(gpus, points)
    }
}

/// Why a synthetic curve could not be made to match a target PFI.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalibrationError {
    /// The target lies outside what the family can express on that grid.
    #[error("PFI {target} on this grid is outside the family's reach [{lowest:.3}, {highest:.3}]")]
    OutOfReach {
        /// The requested PFI.
        target: f64,
        /// Lowest PFI the family reaches.
        lowest: f64,
        /// Highest PFI the family reaches.
        highest: f64,
    },
    /// A curve could not be built.
    #[error(transparent)]
    Curve(#[from] CurveError),
    /// PFI could not be computed.
    #[error(transparent)]
    Pfi(#[from] PfiError),
}

/// Find the one free parameter of a curve family so that its PFI on `grid` equals `target`.
///
/// `pfi_of(θ)` must be monotone in θ on `[lo, hi]` (either direction); the answer is found by
/// bisection to 1e-9 in PFI or 80 halvings.
pub fn calibrate_monotone(
    target: f64,
    mut lo: f64,
    mut hi: f64,
    mut pfi_of: impl FnMut(f64) -> Result<f64, CalibrationError>,
) -> Result<f64, CalibrationError> {
    let (at_lo, at_hi) = (pfi_of(lo)?, pfi_of(hi)?);
    let (lowest, highest) = (at_lo.min(at_hi), at_lo.max(at_hi));
    if !(target >= lowest - 1e-9 && target <= highest + 1e-9) {
        return Err(CalibrationError::OutOfReach {
            target,
            lowest,
            highest,
        });
    }
    let increasing = at_hi > at_lo;
    for _ in 0..80 {
        let mid = 0.5 * (lo + hi);
        let value = pfi_of(mid)?;
        if (value - target).abs() < 1e-9 {
            return Ok(mid);
        }
        if (value < target) == increasing {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(0.5 * (lo + hi))
}

/// Points of the scan in [`calibrate_scanning`].
const CALIBRATION_SCAN: usize = 400;

/// The smallest θ in `[lo, hi]` (0 < lo < hi) with `pfi_of(θ) = target`, for shapes whose PFI
/// is not monotone in θ: the first bracket of a geometric scan whose ends straddle the target is
/// bisected, and kept if the PFI there is the target (a bracket around a jump is not); without
/// one, the scanned θ whose PFI is nearest. θ where the PFI is undefined (no grid point loses ε)
/// are skipped.
///
/// Why scan: the ε rule drops a grid point whose loss is below 1 %, so a shape whose loss starts
/// just above a grid cap makes the PFI jump when that point's tiny loss crosses ε. A knee at 85 %
/// of a 590 W draw has the 500 W cap 0.3 % below it: the PFI falls as 1.5/slope while that cap is
/// dropped, then jumps when it counts. Bisecting [`calibrate_monotone`] over the whole range can
/// land on the far side of the jump, on a member with the same PFI and another shape entirely (it
/// did: until issue 14's third step the built-in knee family's four MoE fine-tuning groups, PFI
/// 1.79–2.67, were cliffs that fell to 2 % throughput at 76 % of their draw, instead of slopes of
/// 0.6–0.9). Where θ orders the shapes from gentle to steep, the first root is the gentlest
/// member with that PFI.
pub fn calibrate_scanning(
    target: f64,
    lo: f64,
    hi: f64,
    mut pfi_of: impl FnMut(f64) -> Result<f64, CalibrationError>,
) -> f64 {
    let ratio = (hi / lo).powf(1.0 / (CALIBRATION_SCAN as f64 - 1.0));
    let thetas: Vec<f64> = (0..CALIBRATION_SCAN).map(|i| lo * ratio.powi(i as i32)).collect();
    let values: Vec<Option<f64>> = thetas
        .iter()
        .map(|&t| pfi_of(t).ok().filter(|v| v.is_finite()))
        .collect();
    for k in 1..thetas.len() {
        let (Some(a), Some(b)) = (values[k - 1], values[k]) else {
            continue;
        };
        if (a - target) * (b - target) > 0.0 {
            continue;
        }
        if let Ok(theta) = calibrate_monotone(target, thetas[k - 1], thetas[k], &mut pfi_of)
            && pfi_of(theta).is_ok_and(|v| (v - target).abs() < 1e-6)
        {
            return theta;
        }
    }
    thetas
        .iter()
        .zip(&values)
        .filter_map(|(&t, v)| v.map(|v| ((v - target).abs(), t)))
        .min_by(|a, b| a.0.total_cmp(&b.0))
        .map_or(lo, |(_, t)| t)
}

/// Lowest compute share the calibration tries: below it a 200 W cap is unreachable at `f_min`
/// and PFI exceeds 2.5 on both H200 grids already, above every published value.
pub const MIN_COMPUTE_SHARE: f64 = 0.15;

/// Lowest dynamic-power exponent the calibration tries (α = 1.5 reaches PFI ≈ 0.92–1.0 for a
/// compute-bound job, below the lowest published value).
pub const MIN_ALPHA: f64 = 1.5;

/// Calibrate the compute share φ (and, if φ alone cannot reach, the dynamic exponent α) of a
/// physical model so that its PFI on `grid` equals `target`.
///
/// Smaller φ means more memory-bound, hence more flexible (higher PFI). Very low published PFIs
/// (≈ 1.1 on a coarse grid) are below what φ = 1 gives at α = 2.3; for those α is lowered, which
/// is the physically sensible knob (less voltage headroom: power falls more slowly with clock).
pub fn calibrate_physical(base: PhysicalModel, grid: &CapGrid, target: f64) -> Result<PhysicalModel, CalibrationError> {
    let pfi_for = |model: PhysicalModel| -> Result<f64, CalibrationError> {
        let curve = model.sweep(1, grid.caps(), TokensPerSec(1.0))?;
        Ok(pfi_on_grid(&curve, grid, crate::pfi::DEFAULT_EPSILON)?.value)
    };
    let with_phi = |phi: f64| PhysicalModel {
        compute_share: phi,
        ..base
    };
    let compute_bound = pfi_for(with_phi(1.0))?;
    if target >= compute_bound {
        let phi = calibrate_monotone(target, MIN_COMPUTE_SHARE, 1.0, |phi| pfi_for(with_phi(phi)))?;
        return Ok(with_phi(phi));
    }
    let with_alpha = |alpha: f64| PhysicalModel {
        compute_share: 1.0,
        alpha,
        ..base
    };
    let alpha = calibrate_monotone(target, MIN_ALPHA, base.alpha, |alpha| pfi_for(with_alpha(alpha)))?;
    Ok(with_alpha(alpha))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_and_throughput_fall_with_the_cap() {
        let m = PhysicalModel::h200(680.0, 0.9);
        let caps: Vec<f64> = vec![200.0, 300.0, 400.0, 500.0, 600.0, 700.0];
        let ops: Vec<(f64, f64)> = caps.iter().map(|&c| m.operating_point(c)).collect();
        for (op, &cap) in ops.iter().zip(&caps) {
            assert!(op.0 <= cap.min(680.0) + 1e-6, "power {} above cap {cap}", op.0);
        }
        assert!(ops.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
        assert_eq!(m.operating_point(700.0), (680.0, 1.0));
    }

    #[test]
    fn memory_bound_jobs_are_more_flexible() {
        let grid = CapGrid::fine_h200();
        let pfi = |phi| {
            let c = PhysicalModel::h200(650.0, phi)
                .sweep(8, grid.caps(), TokensPerSec(1000.0))
                .expect("curve");
            pfi_on_grid(&c, &grid, 0.01).expect("pfi").value
        };
        assert!(pfi(0.5) > pfi(0.8));
        assert!(pfi(0.8) > pfi(1.0));
    }

    #[test]
    fn calibration_hits_every_published_value() {
        for (target, grid) in [
            (1.10, CapGrid::coarse_h200()),
            (1.27, CapGrid::fine_h200()),
            (2.67, CapGrid::fine_h200()),
        ] {
            let model = calibrate_physical(PhysicalModel::h200(640.0, 1.0), &grid, target).expect("calibrates");
            let c = model.sweep(8, grid.caps(), TokensPerSec(1000.0)).expect("curve");
            let got = pfi_on_grid(&c, &grid, 0.01).expect("pfi").value;
            assert!((got - target).abs() < 1e-6, "target {target} got {got} ({model:?})");
        }
    }

    #[test]
    fn calibration_finds_the_gentlest_member_across_a_jump_of_the_pfi() {
        // A knee at 0.6 of a 670 W draw on the fine grid: PFI = 2.98/k while the 400 W cap (x =
        // 0.597) loses under ε, then jumps to ≈ 47/k; 1.22 is at k ≈ 2.44, on the first branch.
        let draw = 670.0;
        let xs: Vec<f64> = [200.0, 300.0, 400.0, 500.0, 600.0].iter().map(|c| c / draw).collect();
        let pfi = |k: f64| -> Result<f64, CalibrationError> {
            let kept: Vec<f64> = xs
                .iter()
                .filter_map(|&x| {
                    let loss = 1.0 - (1.0 - k * (0.6 - x).max(0.0)).clamp(0.02, 1.0);
                    (loss >= crate::pfi::DEFAULT_EPSILON).then(|| (1.0 - x) / loss)
                })
                .collect();
            Ok(kept.iter().sum::<f64>() / kept.len().max(1) as f64)
        };
        let k = calibrate_scanning(1.22, 0.05, 20.0, pfi);
        assert!((k - 2.44).abs() < 0.01, "slope {k}");
        assert!((pfi(k).expect("pfi") - 1.22).abs() < 1e-6);
        // Out of reach: the nearest PFI the scan saw.
        let far = calibrate_scanning(0.1, 0.05, 20.0, pfi);
        assert!(pfi(far).expect("pfi") < 0.9);
    }
}
