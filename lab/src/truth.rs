//! Ground-truth job curves for the fleet experiment.
//!
//! The paper published one PFI per group, not the curves. We synthesise one job per group whose
//! curve, evaluated on that group's cap grid, has exactly the published PFI, in one of three
//! *structurally different* families, so that an allocator cannot pass by fitting one family:
//!
//! - `physical` — the clock/voltage model of [`flexgate_policies::physics`] with regime-specific draw,
//!   calibrated on the compute share φ (or α for the least flexible groups);
//! - `knee` — throughput flat down to 85 % of the uncapped draw, then falling linearly: a
//!   memory-bound job that loses nothing until the clock limit bites, calibrated on the slope;
//! - `powerlaw` — throughput loss `c·y^1.5` for a power reduction `y`, calibrated on `c`.
//!
//! Each truth curve is sampled every 25 W from 200 W to 700 W per GPU (the grid caps are among
//! those points, so the PFI on the grid is exact). T_max is not published; we use
//! `tokens/s/GPU ≈ MFU × 989 TFLOPS / (k × active parameters)` with k = 6 for pretraining and 4
//! for (LoRA) fine-tuning, MFU 0.40 dense / 0.20 MoE, × 0.9 for fine-tuning and × 0.9 without
//! `torch.compile`. This makes tokens per joule differ ~10× between dense 70B and 3B-active MoE
//! models, as it does in practice, which is what the paper's P_max/T_max factor exploits.

use super::groups::{Group, Regime};
use super::rng::SplitMix64;
use flexgate_policies::alloc::CapRange;
use flexgate_policies::alloc::Elasticity;
use flexgate_policies::control::evidence::point_standard_error;
use flexgate_policies::curve::{CurveError, CurvePoint, PowerCurve};
use flexgate_policies::pfi::{CapGrid, DEFAULT_EPSILON, pfi_on_grid};
use flexgate_policies::physics::{CalibrationError, PhysicalModel, calibrate_physical, calibrate_scanning};
use flexgate_policies::units::{TokensPerSec, Watts, WattsPerGpu};
use serde::Serialize;

/// Which family the ground-truth curves come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TruthFamily {
    /// Clock/voltage physical model.
    Physical,
    /// Flat, then linear below a knee.
    Knee,
    /// Power-law throughput loss.
    Powerlaw,
}

/// What a fleet file or the synthetic set says is known about a job (all optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Known {
    /// A measured PFI.
    pub pfi: Option<f64>,
    /// The grid of that PFI.
    pub pfi_grid: Option<CapGrid>,
    /// A telemetry-predicted PFI.
    pub pfi_predicted: Option<f64>,
    /// Its standard deviation.
    pub pfi_predicted_sd: Option<f64>,
    /// A measured sweep (as known to policies; may differ from the truth).
    pub sweep: Option<PowerCurve>,
    /// The standard error of each of the sweep's points' throughput (tokens/s), as its
    /// readings' spread and count give it; empty: the sweep is taken as exact.
    pub sweep_tokens_sd: Vec<f64>,
    /// A sweep measured afresh for every workload: its caps and noise; the experiment reads the
    /// truth there with the noise drawn per workload (the curve zoo's `sweep_*` families).
    pub sweep_plan: Option<SweepPlan>,
}

/// How a noisy sweep of a job is measured: at which caps, how many readings a point averages,
/// and how far off one point's mean is (its standard deviation, relative to the reading).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPlan {
    /// Capped points, W per GPU (the uncapped point is the range maximum, taken exactly: it is
    /// the job's own T_max).
    pub caps: Vec<WattsPerGpu>,
    /// Readings a point averages.
    pub readings: u32,
    /// Relative standard deviation of a point's mean (that of one reading over √readings).
    pub noise: f64,
}

/// A job type the simulator draws workloads from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobTemplate {
    /// Name (group label or the fleet file's id).
    pub name: String,
    /// Paper group number, for synthetic jobs.
    pub group: Option<u32>,
    /// Regime, for synthetic jobs (drives the production mix).
    pub regime: Option<Regime>,
    /// GPUs per job.
    pub gpus: u32,
    /// Cap range.
    pub cap_range: CapRange,
    /// Ground truth: only the oracle and the accounting see it.
    pub truth: PowerCurve,
    /// The true PFI on `true_pfi_grid` (the published value for synthetic jobs).
    pub true_pfi: Option<f64>,
    /// The grid of `true_pfi`.
    pub true_pfi_grid: Option<CapGrid>,
    /// What policies may know.
    pub known: Known,
    /// QoS limit, if the job has one of its own.
    pub max_slowdown: Option<flexgate_policies::units::Fraction>,
    /// Whether the telemetry predictor gives this job a PFI at all (the curve zoo's "missing
    /// predictions" family says no for half the groups).
    pub predicted: bool,
    /// A systematic error of the predictor for this job, added to every prediction (the zoo's
    /// "biased predictions"); 0 elsewhere.
    pub prediction_bias: f64,
}

/// Why a synthetic template could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("group {group}: {source}")]
pub struct TemplateError {
    /// Group number.
    pub group: u32,
    /// Cause.
    #[source]
    pub source: CalibrationError,
}

/// Uncapped per-GPU draw by regime (W): pretraining runs hottest, LoRA fine-tuning of MoE models
/// coolest, within the 560–700 W range the published H200 measurements span.
#[must_use]
pub fn uncapped_draw(regime: Regime) -> f64 {
    match regime {
        Regime::DensePt => 690.0,
        Regime::DenseFt => 670.0,
        Regime::MoePt => 630.0,
        Regime::MoeFt => 590.0,
    }
}

/// Estimated uncapped throughput of a job of this group (tokens/s, whole job).
#[must_use]
pub fn estimated_tokens_max(group: &Group) -> f64 {
    let active_params = match group.model.as_str() {
        "Llama-3.1-70B" => 70.6e9,
        "Qwen3-32B" => 32.8e9,
        "gpt-oss-20b" => 3.6e9,
        "Qwen3-30B-A3B" => 3.3e9,
        _ => 10e9,
    };
    let moe = matches!(group.regime, Regime::MoeFt | Regime::MoePt);
    let mut mfu = if moe { 0.20 } else { 0.40 };
    if group.regime.is_fine_tuning() {
        mfu *= 0.9;
    }
    if group.config.contains("no-compile") {
        mfu *= 0.9;
    }
    let k = if group.regime.is_fine_tuning() { 4.0 } else { 6.0 };
    mfu * 989e12 / (k * active_params) * f64::from(group.gpus)
}

/// Caps at which truth curves are sampled: 200, 225, …, 700 W.
pub(crate) fn truth_caps() -> Vec<WattsPerGpu> {
    (0..=20).map(|i| WattsPerGpu(200.0 + 25.0 * f64::from(i))).collect()
}

/// One synthetic template per published group, in the given truth family.
pub fn synthetic_templates(groups: &[Group], family: TruthFamily) -> Result<Vec<JobTemplate>, TemplateError> {
    groups
        .iter()
        .map(|g| {
            let truth = truth_curve(g, family).map_err(|source| TemplateError { group: g.id, source })?;
            Ok(group_template(
                g,
                truth,
                g.pfi,
                Known {
                    pfi: Some(g.pfi),
                    pfi_grid: Some(g.grid.clone()),
                    ..Known::default()
                },
            ))
        })
        .collect()
}

/// The template of published group `g` with ground truth `truth` whose PFI on the group's grid
/// is `true_pfi`, told `known`; predicted, without bias (the zoo changes both where it must).
pub(crate) fn group_template(g: &Group, truth: PowerCurve, true_pfi: f64, known: Known) -> JobTemplate {
    JobTemplate {
        name: format!("g{:02} {} {} {}x{}", g.id, g.model, g.config, g.gpus, "H200"),
        group: Some(g.id),
        regime: Some(g.regime),
        gpus: g.gpus,
        cap_range: CapRange::H200,
        truth,
        true_pfi: Some(true_pfi),
        true_pfi_grid: Some(g.grid.clone()),
        known,
        max_slowdown: None,
        predicted: true,
        prediction_bias: 0.0,
    }
}

pub(crate) fn truth_curve(g: &Group, family: TruthFamily) -> Result<PowerCurve, CalibrationError> {
    let draw = uncapped_draw(g.regime);
    let t_max = TokensPerSec(estimated_tokens_max(g));
    let caps = truth_caps();
    match family {
        TruthFamily::Physical => {
            let model = calibrate_physical(PhysicalModel::h200(draw, 1.0), &g.grid, g.pfi)?;
            Ok(model.sweep(g.gpus, &caps, t_max)?)
        }
        TruthFamily::Knee => {
            let build = |slope: f64| shaped_curve(g.gpus, draw, t_max, &caps, |x| 1.0 - slope * (KNEE_X - x).max(0.0));
            // The gentlest slope with the PFI (see `calibrate_scanning`: PFI is not monotone in
            // the slope where a grid cap sits just below the knee).
            let slope = calibrate_scanning(g.pfi, 0.05, 20.0, |s| grid_pfi(&build(s)?, &g.grid));
            Ok(build(slope)?)
        }
        TruthFamily::Powerlaw => {
            let build = |c: f64| {
                shaped_curve(g.gpus, draw, t_max, &caps, |x| {
                    1.0 - c * (1.0 - x).powf(POWERLAW_EXPONENT)
                })
            };
            let c = calibrate_scanning(g.pfi, 0.1, 20.0, |c| grid_pfi(&build(c)?, &g.grid));
            Ok(build(c)?)
        }
    }
}

/// Relative power below which the knee family starts losing throughput.
const KNEE_X: f64 = 0.85;
/// Exponent of the power-law family.
const POWERLAW_EXPONENT: f64 = 1.5;
/// Smallest relative throughput a synthetic curve may reach (a job never stops entirely).
const MIN_RELATIVE_THROUGHPUT: f64 = 0.02;

pub(crate) fn grid_pfi(curve: &PowerCurve, grid: &CapGrid) -> Result<f64, CalibrationError> {
    Ok(pfi_on_grid(curve, grid, DEFAULT_EPSILON)?.value)
}

/// A curve whose realized power is `min(cap, draw)` per GPU and whose relative throughput is
/// `tau(x)` at relative power `x`.
pub(crate) fn shaped_curve(
    gpus: u32,
    draw: f64,
    t_max: TokensPerSec,
    caps: &[WattsPerGpu],
    tau: impl Fn(f64) -> f64,
) -> Result<PowerCurve, CurveError> {
    let points = caps
        .iter()
        .map(|&cap| {
            let per_gpu = cap.value().min(draw);
            let x = per_gpu / draw;
            CurvePoint {
                cap,
                power: WattsPerGpu(per_gpu).times_gpus(gpus),
                tokens: t_max * tau(x).clamp(MIN_RELATIVE_THROUGHPUT, 1.0),
            }
        })
        .collect();
    PowerCurve::new(gpus, points)
}

impl SweepPlan {
    /// Measure `truth` as planned: at each cap `readings` readings, each off by a relative error
    /// of `noise·√readings`, averaged; the standard error each point is given is what the
    /// gateway would state from the same readings ([`point_standard_error`]: their spread and
    /// count). The uncapped point is exact.
    #[must_use]
    pub fn measure(&self, truth: &PowerCurve, cap_max: WattsPerGpu, rng: &mut SplitMix64) -> Option<Elasticity> {
        let per_reading = self.noise * f64::from(self.readings.max(1)).sqrt();
        // An exact sweep draws nothing, so that it reads the truth exactly.
        let count = if self.noise > 0.0 { self.readings.max(1) } else { 1 };
        let mut points = Vec::with_capacity(self.caps.len() + 1);
        let mut sds = Vec::with_capacity(self.caps.len() + 1);
        for &cap in &self.caps {
            let expected = truth.tokens_at_cap(cap).value();
            let readings: Vec<f64> = (0..count)
                .map(|_| {
                    if per_reading > 0.0 {
                        expected * (1.0 + per_reading * rng.normal()).max(0.05)
                    } else {
                        expected
                    }
                })
                .collect();
            let n = readings.len() as f64;
            let mean = readings.iter().sum::<f64>() / n;
            let m2 = readings.iter().map(|r| (r - mean).powi(2)).sum::<f64>();
            points.push(CurvePoint {
                cap,
                power: truth.power_at_cap(cap),
                tokens: TokensPerSec(mean),
            });
            sds.push(point_standard_error(mean, m2, count));
        }
        let top = truth.uncapped();
        points.push(CurvePoint { cap: cap_max, ..top });
        sds.push(0.0);
        let curve = PowerCurve::new(truth.gpus(), points).ok()?;
        Some(if self.noise > 0.0 {
            Elasticity::measured(curve, sds)
        } else {
            Elasticity::exact(curve)
        })
    }
}

/// Total uncapped power of a set of templates (handy for reports).
#[must_use]
pub fn total_uncapped(templates: &[&JobTemplate]) -> Watts {
    templates.iter().map(|t| t.truth.uncapped().power).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::groups::published_groups;

    #[test]
    fn every_family_matches_every_published_pfi_on_its_grid() {
        let groups = published_groups().expect("groups");
        for family in [TruthFamily::Physical, TruthFamily::Knee, TruthFamily::Powerlaw] {
            let templates = synthetic_templates(&groups, family).expect("templates");
            for (t, g) in templates.iter().zip(&groups) {
                let got = pfi_on_grid(&t.truth, &g.grid, DEFAULT_EPSILON).expect("pfi").value;
                assert!(
                    (got - g.pfi).abs() < 1e-6,
                    "{family:?} group {}: {got} vs {}",
                    g.id,
                    g.pfi
                );
                let hull = t.truth.concave_hull();
                assert!(hull.vertices().len() >= 2);
            }
        }
    }

    #[test]
    fn tokens_per_joule_differ_between_dense_and_moe() {
        let groups = published_groups().expect("groups");
        let per_gpu = |id: u32| {
            let g = groups.iter().find(|g| g.id == id).expect("group");
            estimated_tokens_max(g) / f64::from(g.gpus)
        };
        // Llama-70B pretraining vs gpt-oss-20b pretraining.
        assert!(per_gpu(21) > 5.0 * per_gpu(5));
    }
}
