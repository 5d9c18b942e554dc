//! The Power Flexibility Index (PFI), exactly as Colangelo et al. define it.
//!
//! For every capped point i of a sweep (the uncapped reference is excluded, its denominator is 0):
//!
//! ```text
//! PFI_i = (1 − P_i / P_max) / (1 − T_i / T_max)        PFI = mean of PFI_i
//! ```
//!
//! Two rules the paper states only in words are explicit here:
//! - **ε rule.** A point whose throughput loss `1 − T_i/T_max` is below [`DEFAULT_EPSILON`] (the
//!   cap did not bind, or binds so lightly that noise dominates) makes the ratio meaningless; it
//!   is dropped and reported in [`Pfi::points`], never silently.
//! - **Grid.** Absolute PFI depends on the cap grid (a coarse grid reads ≈ 10 % higher), so every
//!   value carries the caps it was computed on and values are only compared within one grid.

use crate::curve::PowerCurve;
use crate::units::{TokensPerSec, Watts, WattsPerGpu};
use serde::{Deserialize, Serialize};

/// Throughput-loss threshold below which a capped point is dropped from the mean (1 %).
///
/// One percent is above the run-to-run noise of a top-10 % throughput mean on a steady training
/// job, and well below the loss of any cap that binds in the paper's grids (≥ 100 W under TDP).
pub const DEFAULT_EPSILON: f64 = 0.01;

/// A cap grid: the per-GPU caps of a sweep, ascending, including the uncapped reference.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CapGrid(pub Vec<WattsPerGpu>);

impl CapGrid {
    /// The paper's fine grid for 8-GPU jobs: 200, 300, 400, 500, 600 W and the 700 W reference.
    #[must_use]
    pub fn fine_h200() -> Self {
        Self([200.0, 300.0, 400.0, 500.0, 600.0, 700.0].map(WattsPerGpu).to_vec())
    }

    /// The paper's coarse grid for 16/32-GPU jobs: 200, 500, 600 W and the 700 W reference.
    #[must_use]
    pub fn coarse_h200() -> Self {
        Self([200.0, 500.0, 600.0, 700.0].map(WattsPerGpu).to_vec())
    }

    /// The grid the paper used for a job of this size, for PFI values that do not state theirs.
    #[must_use]
    pub fn paper_default_for(gpus: u32) -> Self {
        if gpus <= 8 {
            Self::fine_h200()
        } else {
            Self::coarse_h200()
        }
    }

    /// Caps of the grid, ascending.
    #[must_use]
    pub fn caps(&self) -> &[WattsPerGpu] {
        &self.0
    }
}

/// What happened to one capped point in the PFI mean.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PfiPoint {
    /// The per-GPU cap of the point.
    pub cap: WattsPerGpu,
    /// `1 − P_i/P_max`.
    pub power_reduction: f64,
    /// `1 − T_i/T_max`.
    pub throughput_loss: f64,
    /// `PFI_i`, or `None` when the point was dropped by the ε rule.
    pub ratio: Option<f64>,
}

/// A PFI value together with everything needed to interpret and audit it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pfi {
    /// Mean of the kept per-point ratios.
    pub value: f64,
    /// The caps the sweep used, including the uncapped reference.
    pub grid: CapGrid,
    /// The ε used to drop non-binding points.
    pub epsilon: f64,
    /// Every capped point, kept or dropped.
    pub points: Vec<PfiPoint>,
}

/// Why no PFI can be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PfiError {
    /// The sweep has only the uncapped reference.
    #[error("PFI needs at least one capped point besides the uncapped reference")]
    NoCappedPoints,
    /// Every capped point lost less throughput than ε.
    #[error(
        "no cap in the sweep reduced throughput by at least {epsilon}: the caps never bound, \
         so PFI is undefined for this grid"
    )]
    NoBindingCap {
        /// The ε in force.
        epsilon: f64,
    },
    /// ε outside (0, 1).
    #[error("epsilon must be in (0, 1), got {0}")]
    BadEpsilon(f64),
}

/// PFI of a measured curve over all its points, with the ε rule.
pub fn pfi(curve: &PowerCurve, epsilon: f64) -> Result<Pfi, PfiError> {
    let pts = curve.points();
    let reference = curve.uncapped();
    let capped: Vec<(WattsPerGpu, Watts, TokensPerSec)> = pts[..pts.len() - 1]
        .iter()
        .map(|p| (p.cap, p.power, p.tokens))
        .collect();
    let grid = CapGrid(pts.iter().map(|p| p.cap).collect());
    pfi_from_points((reference.power, reference.tokens), &capped, grid, epsilon)
}

/// PFI of a curve evaluated on another grid (interpolating the curve at the grid's caps).
///
/// This is how a synthetic or estimated curve is compared with a published value: on the grid
/// that value was measured on. The grid's highest cap is the reference.
pub fn pfi_on_grid(curve: &PowerCurve, grid: &CapGrid, epsilon: f64) -> Result<Pfi, PfiError> {
    let caps = grid.caps();
    let Some((&reference_cap, capped_caps)) = caps.split_last() else {
        return Err(PfiError::NoCappedPoints);
    };
    let reference = (curve.power_at_cap(reference_cap), curve.tokens_at_cap(reference_cap));
    let capped: Vec<_> = capped_caps
        .iter()
        .map(|&c| (c, curve.power_at_cap(c), curve.tokens_at_cap(c)))
        .collect();
    pfi_from_points(reference, &capped, grid.clone(), epsilon)
}

/// The formula itself, on a reference point and capped points.
pub fn pfi_from_points(
    reference: (Watts, TokensPerSec),
    capped: &[(WattsPerGpu, Watts, TokensPerSec)],
    grid: CapGrid,
    epsilon: f64,
) -> Result<Pfi, PfiError> {
    if !(epsilon > 0.0 && epsilon < 1.0) {
        return Err(PfiError::BadEpsilon(epsilon));
    }
    if capped.is_empty() {
        return Err(PfiError::NoCappedPoints);
    }
    let (p_max, t_max) = reference;
    let mut points = Vec::with_capacity(capped.len());
    let (mut sum, mut kept) = (0.0, 0usize);
    for &(cap, power, tokens) in capped {
        let power_reduction = 1.0 - power / p_max;
        let throughput_loss = 1.0 - tokens / t_max;
        let ratio = (throughput_loss >= epsilon).then(|| power_reduction / throughput_loss);
        if let Some(r) = ratio {
            sum += r;
            kept += 1;
        }
        points.push(PfiPoint {
            cap,
            power_reduction,
            throughput_loss,
            ratio,
        });
    }
    if kept == 0 {
        return Err(PfiError::NoBindingCap { epsilon });
    }
    Ok(Pfi {
        value: sum / kept as f64,
        grid,
        epsilon,
        points,
    })
}

/// Phase of a training run a telemetry sample was taken in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunPhase {
    /// Steady training steps: the only phase that counts.
    Training,
    /// Warm-up, compilation, data loading before the first steps.
    Warmup,
    /// Evaluation passes.
    Evaluation,
    /// Checkpoint writes.
    Checkpoint,
}

/// One telemetry sample of a sweep run (DCGM every ~5 s in the paper).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSample {
    /// Job aggregate GPU power at the sample (`power_w` on the wire).
    #[serde(rename = "power_w")]
    pub power: Watts,
    /// Job throughput at the sample (`tokens_per_s` on the wire).
    #[serde(rename = "tokens_per_s")]
    pub tokens: TokensPerSec,
    /// Phase the sample belongs to.
    pub phase: RunPhase,
}

/// Why a run's samples cannot be aggregated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AggregateError {
    /// No training-phase samples.
    #[error("the run has no training-phase samples to aggregate")]
    NoTrainingSamples,
    /// A NaN or infinite sample.
    #[error("sample {0} has a non-finite power or throughput")]
    NotFinite(usize),
}

/// The paper's aggregation of a sweep run into one (power, tokens/s) point: each metric is the
/// mean of the top 10 % (at least one) of its training-phase samples.
///
/// Taking the top decile drops evaluation and checkpoint dips that the phase labels miss; each
/// metric is ranked on its own, as the paper does, because a dip in one need not show in the
/// other.
pub fn aggregate_run(samples: &[RunSample]) -> Result<(Watts, TokensPerSec), AggregateError> {
    if let Some(i) = samples
        .iter()
        .position(|s| !s.power.is_finite() || !s.tokens.is_finite())
    {
        return Err(AggregateError::NotFinite(i));
    }
    let training: Vec<&RunSample> = samples.iter().filter(|s| s.phase == RunPhase::Training).collect();
    if training.is_empty() {
        return Err(AggregateError::NoTrainingSamples);
    }
    let top_mean = |mut values: Vec<f64>| {
        values.sort_by(|a, b| b.total_cmp(a));
        let keep = values.len().div_ceil(10).max(1);
        values[..keep].iter().sum::<f64>() / keep as f64
    };
    let power = top_mean(training.iter().map(|s| s.power.value()).collect());
    let tokens = top_mean(training.iter().map(|s| s.tokens.value()).collect());
    Ok((Watts(power), TokensPerSec(tokens)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::curve::CurvePoint;

    fn curve(points: &[(f64, f64, f64)]) -> PowerCurve {
        PowerCurve::new(
            8,
            points
                .iter()
                .map(|&(c, p, t)| CurvePoint {
                    cap: WattsPerGpu(c),
                    power: Watts(p),
                    tokens: TokensPerSec(t),
                })
                .collect(),
        )
        .expect("valid curve")
    }

    #[test]
    fn hand_computed_pfi() {
        // P_max 5600 W, T_max 10000 tok/s.
        // cap 500: P 4000 → 1−P/Pmax = 0.285714; T 9000 → loss 0.1 → ratio 2.857143
        // cap 300: P 2400 → 0.571429; T 6000 → loss 0.4 → ratio 1.428571
        // mean = 2.142857
        let c = curve(&[
            (700.0, 5600.0, 10000.0),
            (500.0, 4000.0, 9000.0),
            (300.0, 2400.0, 6000.0),
        ]);
        let v = pfi(&c, DEFAULT_EPSILON).expect("pfi");
        assert!((v.value - 15.0 / 7.0).abs() < 1e-12, "{}", v.value);
        assert_eq!(
            v.grid.caps(),
            &[WattsPerGpu(300.0), WattsPerGpu(500.0), WattsPerGpu(700.0)]
        );
        assert_eq!(v.points.len(), 2);
    }

    #[test]
    fn epsilon_drops_non_binding_points_and_says_so() {
        // cap 600 does not bind (job draws 560 W/GPU): T unchanged → dropped.
        let c = curve(&[(700.0, 4480.0, 1000.0), (600.0, 4480.0, 1000.0), (400.0, 3200.0, 800.0)]);
        let v = pfi(&c, DEFAULT_EPSILON).expect("pfi");
        // only cap 400 counts: (1 − 3200/4480) / (1 − 0.8) = 0.285714/0.2 = 1.428571
        assert!((v.value - (1.0 - 3200.0 / 4480.0) / 0.2).abs() < 1e-12);
        let dropped: Vec<_> = v.points.iter().filter(|p| p.ratio.is_none()).map(|p| p.cap).collect();
        assert_eq!(dropped, vec![WattsPerGpu(600.0)]);
    }

    #[test]
    fn errors_are_explicit() {
        let only_ref = curve(&[(700.0, 5600.0, 10000.0)]);
        assert_eq!(pfi(&only_ref, 0.01), Err(PfiError::NoCappedPoints));
        let never_binds = curve(&[(700.0, 4000.0, 10000.0), (600.0, 4000.0, 10000.0)]);
        assert_eq!(pfi(&never_binds, 0.01), Err(PfiError::NoBindingCap { epsilon: 0.01 }));
        assert_eq!(pfi(&never_binds, 0.0), Err(PfiError::BadEpsilon(0.0)));
    }

    #[test]
    fn pfi_on_another_grid_interpolates() {
        let c = curve(&[
            (700.0, 5600.0, 10000.0),
            (500.0, 4000.0, 9000.0),
            (300.0, 2400.0, 6000.0),
        ]);
        let coarse = CapGrid([300.0, 700.0].map(WattsPerGpu).to_vec());
        let v = pfi_on_grid(&c, &coarse, DEFAULT_EPSILON).expect("pfi");
        assert!((v.value - (1.0 - 2400.0 / 5600.0) / 0.4).abs() < 1e-12);
    }

    #[test]
    fn top_decile_aggregation_ignores_dips_and_other_phases() {
        let mut samples: Vec<RunSample> = (0..20)
            .map(|i| RunSample {
                power: Watts(4000.0 + f64::from(i)),
                tokens: TokensPerSec(900.0 + f64::from(i)),
                phase: RunPhase::Training,
            })
            .collect();
        samples.push(RunSample {
            power: Watts(9000.0),
            tokens: TokensPerSec(5000.0),
            phase: RunPhase::Evaluation,
        });
        // top 10 % of 20 = 2 samples: power (4019 + 4018)/2, tokens (919 + 918)/2
        let (p, t) = aggregate_run(&samples).expect("aggregate");
        assert_eq!(p, Watts(4018.5));
        assert_eq!(t, TokensPerSec(918.5));
        assert_eq!(aggregate_run(&samples[20..]), Err(AggregateError::NoTrainingSamples));
        let bad = [RunSample {
            power: Watts(f64::NAN),
            tokens: TokensPerSec(1.0),
            phase: RunPhase::Training,
        }];
        assert_eq!(aggregate_run(&bad), Err(AggregateError::NotFinite(0)));
    }
}
