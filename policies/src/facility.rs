//! Facility power model: what a GPU-board power level means at the utility meter, and the two
//! conservative inversions from a meter commitment back to a GPU-board budget
//! (`flexgate facility params` prints the parameters and their defaults).
//!
//! # Forward model
//!
//! For `N` nodes drawing `G` kW of GPU-board power in total:
//!
//! ```text
//! P_IT   = (G + N·H) / η_psu + P_fab                       (1)+(2)  H = host + fans per node
//! Q      = P_dist = P_IT / η_dist                            (3)     heat load
//! C(t)   = C0 + k_c · (h ∗ Q)(t)                             (4)     cooling plant
//! M(t)   = S + Q + C(t)                                      (5)     meter
//! ```
//!
//! - **Distribution losses.** Equation (3) (`L0 + l1·P + l2·P²/P_rated`) is folded into an
//!   *average* efficiency `η_dist = P_IT / P_dist` with explicit bounds; the bounds must cover the
//!   operating range, which matters at low load where the fixed loss `L0` dominates.
//! - **Heat load `Q`.** The cooling term acts on `Q = P_dist`: the IT load plus the UPS, PDU and
//!   transformer losses, i.e. everything that is dissipated inside the cooled envelope. Counting
//!   the distribution losses (some of which may sit outdoors) over-states `Q`, which is the
//!   conservative side for a ceiling.
//! - **Absolute vs incremental.** Absolute levels ([`FacilityModel::forward`], the ceiling
//!   inversion) use the *average* PSU and distribution efficiencies; changes
//!   ([`FacilityModel::forward_reduction`], the reduction inversion) use the *marginal* ones
//!   (`ΔM = μ·ΔG·(1 + k_c·s(t))`, `μ = 1/(η'_psu·η'_dist)`), because the PSU curve is not linear
//!   and neither figure bounds both. PUE is never used as a multiplier.
//! - **Bounds.** Every uncertain parameter is a [`Bounded`] (`lo ≤ nominal ≤ hi`). The meter is
//!   monotone in each parameter, so its bounds over the whole parameter box are reached at the
//!   corners: the upper bound takes every load at `hi` and every efficiency at `lo`, the lower
//!   bound the opposite.
//!
//! # Cooling dynamics in the forward direction
//!
//! The kernel `h` is a dead time `θ_c` followed by a first-order lag `τ_c`, so after a step of
//! the GPU power at `t = 0` the cooling moves a fraction
//! `s(t) = 0` for `t < θ_c`, `1 − exp(−(t − θ_c)/τ_c)` after, of the way from its pre-event
//! value `C_pre` to its new steady state `C_post = C0 + k_c·Q_post`:
//! `C(t) = C_post + (1 − s(t))·(C_pre − C_post)`.
//! [`CoolingState::Settled`] means `s = 1`. [`CoolingState::AfterStep`] uses the nominal `θ_c`,
//! `τ_c` for the nominal estimate; for the bounds it takes whichever of the slowest lag
//! (`θ_c,hi`, `τ_c,hi`) and the fastest (`θ_c,lo`, `τ_c,lo`) gives the larger (upper bound) or
//! smaller (lower bound) cooling — `C(t)` is linear in `s`, so an endpoint is extreme. The
//! forward model describes the physics only; it does **not** apply the `cool_credit_after_s`
//! rule, which is a commitment policy and belongs to the inversions.
//!
//! The pre-event cooling `C_pre` comes from [`PreEvent`]: a cooling-plant measurement (±
//! [`FacilityParams::cooling_meter_err_kw`]), the settled cooling at a known pre-event GPU
//! power, or, when nothing is known, anything between zero GPU power and every node at
//! [`FacilityParams::gpu_max_kw_per_node`] (the nominal estimate then assumes no step).
//!
//! # Conservative inversions
//!
//! **(a) Reduction commitment** `R` kW against a baseline:
//! `ΔG_req = (R + meter_err + noise) / (μ_lo · (1 + k_c,lo · s_lo(t)))`, with
//! `μ_lo = 1/(η'_psu,hi · η'_dist,hi)` (1.00 by default), and `s_lo(t) = 0` before
//! `cool_credit_after_s`, after that the slowest lag `s(t; θ_c,hi, τ_c,hi)`.
//!
//! **(b) Ceiling commitment** `M ≤ FSL`:
//! `ΣG ≤ η_psu,lo·(η_dist,lo·(FSL − meter_err − S_hi − C_hi(t)) − P_fab,hi) − N·H_hi`, where
//! `C_hi(t)` is the upper-bound cooling *at the budget's own heat load* `Q`:
//!
//! - before `cool_credit_after_s`: `C_hi = max(C_pre,hi, C0,hi + k_c,hi·Q)` — no cooling credit
//!   at all (the design's "pre-event cooling kW until the lag has elapsed"; the `max` keeps it
//!   conservative when the load rises instead of falling);
//! - after it: `C_hi = C_post,hi + (1 − s_lo(t))·max(0, C_pre,hi − C_post,hi)` with
//!   `C_post,hi = C0,hi + k_c,hi·Q`. This equals the design's `C0,hi + k_c,hi·Q` once the slowest
//!   lag has settled (`s_lo → 1`), and stays conservative against the forward model when
//!   `cool_credit_after_s` is shorter than the slowest settling time — symmetric with (a);
//! - [`CoolingState::Settled`]: `C_hi = C0,hi + k_c,hi·Q`, exactly the design's formula.
//!
//! `Q = FSL − meter_err − S_hi − C_hi(Q)` has a closed-form solution: `C_hi(Q)` is the maximum
//! of two affine, increasing functions of `Q`, so the meter is within the ceiling exactly when
//! `Q ≤ min(Q₁, Q₂)` with `Q₁ = (A − C0)/(1 + k)` (cooling at its new steady state) and
//! `Q₂ = (A − s·C0 − (1 − s)·C_pre)/(1 + s·k)` (cooling still lagging), `A = FSL − meter_err −
//! S_hi`. No iteration is needed. When even zero GPU power does not fit, the budget is zero and
//! [`CeilingBudget::infeasible_by`] says by how many meter kW the ceiling is missed.
//!
//! Every result carries the chain of quantities, multipliers and bounds it used
//! ([`ChainStep`]), for the event log, and the fingerprint of the parameter set.

use crate::units::{Fraction, Kilowatts, Watts};
use serde::{Deserialize, Serialize};

// ------------------------------------------------------------------------------------------------
// Parameters
// ------------------------------------------------------------------------------------------------

/// An uncertain parameter: its nominal value and the bounds of its plausible range
/// (`lo ≤ nominal ≤ hi`). A parameter known exactly has all three equal ([`Bounded::exact`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bounded {
    /// Best estimate, used for nominal predictions.
    pub nominal: f64,
    /// Lower bound of the plausible range.
    pub lo: f64,
    /// Upper bound of the plausible range.
    pub hi: f64,
}

impl Bounded {
    /// A range given as `lo`, `nominal`, `hi` (in that reading order).
    #[must_use]
    pub const fn new(lo: f64, nominal: f64, hi: f64) -> Self {
        Self { nominal, lo, hi }
    }

    /// A parameter without uncertainty.
    #[must_use]
    pub const fn exact(value: f64) -> Self {
        Self::new(value, value, value)
    }

    fn pick(self, bound: Bound) -> f64 {
        match bound {
            Bound::Lo => self.lo,
            Bound::Hi => self.hi,
            Bound::Nominal | Bound::Exact | Bound::Derived => self.nominal,
        }
    }
}

/// Conversion efficiency of one layer (server PSUs, or UPS + PDU + transformers), in `(0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Efficiency {
    /// Marginal efficiency `η' = ∂P_out/∂P_in`, used for changes (reduction commitments).
    /// `hi` is the bound a reduction relies on (1.00: assume no loss saving at all).
    pub marginal: Bounded,
    /// Average efficiency `P_out/P_in` over the operating range, used for absolute levels
    /// (ceiling commitments). `lo` is the bound a ceiling relies on.
    pub average: Bounded,
}

/// Every parameter of the facility model, with defaults.
///
/// Defaults are the design's nominal values and conservative bounds where it gives them, and
/// placeholders sized for the worked example (≈1,000 HGX nodes, ≈10 MW at the meter) for the
/// site-measured ones (static load, fabric, fixed cooling, meter error, noise), which every site
/// must replace with its own commissioning values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FacilityParams {
    /// `S`: static site load behind the meter that does not follow IT load (lighting, offices,
    /// security), kW. Default 20 kW (10–50). Basis: site-measured \[J\]; placeholder default.
    pub static_site_kw: Bounded,
    /// `H + F`: host (CPUs, DRAM, NVSwitch, NICs, NVMe, BMC) plus server fans, DC side, per
    /// 8-GPU node, kW. Roughly constant under GPU caps. Default 2.1 kW (1.5–2.8).
    /// Basis: derived from DGX H100 measurements \[1\]\[2\].
    pub host_fixed_kw_per_node: Bounded,
    /// Server PSU efficiency. Marginal: 0.97 nominal, 0.86 low (∂P_in/∂P_out up to 1.16 at
    /// 50–100 % load), 1.00 high (used for reductions). Average: 0.95 nominal (worked example),
    /// 0.94 low (used for ceilings; use 0.90 if PSU load < 20 % or the certification is
    /// unknown), 0.97 high. Basis: 80 PLUS Titanium/Platinum curves \[4\].
    pub eta_psu: Efficiency,
    /// UPS + PDU + transformer efficiency. Marginal: 0.97 nominal, 0.96 low, 1.00 high (used
    /// for reductions). Average: 0.95 nominal, 0.94 low (used for ceilings), 0.99 high (eco
    /// mode). Basis: \[5\]\[6\]\[7\].
    pub eta_dist: Efficiency,
    /// `P_fab`: fabric, storage and management power (≈3–6 % of IT, constant), kW.
    /// Default 400 kW (300–500). Basis: worked example \[J\]; placeholder default.
    pub fabric_kw: Bounded,
    /// `C0`: cooling power that does not follow heat load (constant-flow pumps, CDUs,
    /// thermal-storage-fed plant), kW. Default 300 kW (200–400). Basis: \[J\]; placeholder.
    pub cool_fixed_kw: Bounded,
    /// `k_c`: marginal cooling kW per kW of heat load, dimensionless. Default 0.15
    /// (0.02–0.30). Chilled-water air 0.15–0.30; economizer hours 0.02–0.10; DLC warm water
    /// 0.03–0.10. Basis: plant 0.55–0.75 kW/ton \[9\], \[10\]\[J\]; re-fit each season.
    pub k_cool: Bounded,
    /// `θ_c`: dead time before cooling power starts to follow a heat-load step, s.
    /// Default 120 s (60–300). Basis: \[J\]; measure.
    pub cool_dead_time_s: Bounded,
    /// `τ_c`: first-order time constant of the cooling response after the dead time, s.
    /// Default 600 s (300–1800). Basis: \[J\]; measure.
    pub cool_tau_s: Bounded,
    /// Earliest time after a GPU power step at which any cooling change is counted by the
    /// inversions, s. Default 900 s, or the measured 95th percentile of settling time. \[J\]
    pub cool_credit_after_s: f64,
    /// Revenue-meter accuracy, kW; always kept as margin. Default 100 kW. Site-measured \[J\].
    pub meter_err_kw: f64,
    /// P95 swing of uncontrolled load over one settlement interval, kW; kept as margin on
    /// reduction commitments. Default 100 kW. Site-measured \[J\].
    pub noise_kw: f64,
    /// Pre-event cooling handling: the most GPU-board power one node can draw, kW, used for
    /// the pre-event state when nothing is known about it ([`PreEvent::Unknown`]).
    /// Default 5.6 kW (8 × 700 W H100/H200 SXM TDP \[3\]).
    pub gpu_max_kw_per_node: f64,
    /// Pre-event cooling handling: accuracy of the cooling-plant sub-meter, kW, added to (upper
    /// bound) or taken from (lower bound) a measured pre-event cooling power
    /// ([`PreEvent::MeasuredCooling`]). Default 25 kW; placeholder, site-measured.
    pub cooling_meter_err_kw: f64,
}

impl Default for FacilityParams {
    fn default() -> Self {
        Self {
            static_site_kw: Bounded::new(10.0, 20.0, 50.0),
            host_fixed_kw_per_node: Bounded::new(1.5, 2.1, 2.8),
            eta_psu: Efficiency {
                marginal: Bounded::new(0.86, 0.97, 1.0),
                average: Bounded::new(0.94, 0.95, 0.97),
            },
            eta_dist: Efficiency {
                marginal: Bounded::new(0.96, 0.97, 1.0),
                average: Bounded::new(0.94, 0.95, 0.99),
            },
            fabric_kw: Bounded::new(300.0, 400.0, 500.0),
            cool_fixed_kw: Bounded::new(200.0, 300.0, 400.0),
            k_cool: Bounded::new(0.02, 0.15, 0.30),
            cool_dead_time_s: Bounded::new(60.0, 120.0, 300.0),
            cool_tau_s: Bounded::new(300.0, 600.0, 1800.0),
            cool_credit_after_s: 900.0,
            meter_err_kw: 100.0,
            noise_kw: 100.0,
            gpu_max_kw_per_node: 5.6,
            cooling_meter_err_kw: 25.0,
        }
    }
}

/// A facility parameter or a model input that makes no physical sense.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FacilityError {
    /// A parameter value outside its domain (NaN, infinite, negative load, efficiency ∉ (0, 1]).
    #[error("facility parameter `{field}` is {value}: expected {expected}")]
    OutOfDomain {
        /// Dotted path of the parameter, e.g. `eta_psu.average.lo`.
        field: String,
        /// The offending value.
        value: f64,
        /// What the parameter must be.
        expected: &'static str,
    },
    /// A [`Bounded`] parameter whose bounds are not ordered `lo ≤ nominal ≤ hi`.
    #[error("facility parameter `{field}` is not ordered: lo {lo} ≤ nominal {nominal} ≤ hi {hi} fails")]
    Unordered {
        /// Dotted path of the parameter.
        field: String,
        /// Its lower bound.
        lo: f64,
        /// Its nominal value.
        nominal: f64,
        /// Its upper bound.
        hi: f64,
    },
    /// A model input outside its domain.
    #[error("input `{field}` is {value}: expected {expected}")]
    BadInput {
        /// Name of the input.
        field: &'static str,
        /// The offending value.
        value: f64,
        /// What the input must be.
        expected: &'static str,
    },
}

#[derive(Clone, Copy)]
enum Domain {
    NonNegative,
    Efficiency,
}

impl Domain {
    fn holds(self, v: f64) -> bool {
        match self {
            Self::NonNegative => v.is_finite() && v >= 0.0,
            Self::Efficiency => v.is_finite() && v > 0.0 && v <= 1.0,
        }
    }

    fn expected(self) -> &'static str {
        match self {
            Self::NonNegative => "a finite number ≥ 0",
            Self::Efficiency => "a finite efficiency in (0, 1]",
        }
    }
}

fn check_scalar(field: &str, value: f64, domain: Domain) -> Result<(), FacilityError> {
    if domain.holds(value) {
        Ok(())
    } else {
        Err(FacilityError::OutOfDomain {
            field: field.to_owned(),
            value,
            expected: domain.expected(),
        })
    }
}

fn check_bounded(field: &str, b: Bounded, domain: Domain) -> Result<(), FacilityError> {
    check_scalar(&format!("{field}.lo"), b.lo, domain)?;
    check_scalar(&format!("{field}.nominal"), b.nominal, domain)?;
    check_scalar(&format!("{field}.hi"), b.hi, domain)?;
    if b.lo <= b.nominal && b.nominal <= b.hi {
        Ok(())
    } else {
        Err(FacilityError::Unordered {
            field: field.to_owned(),
            lo: b.lo,
            nominal: b.nominal,
            hi: b.hi,
        })
    }
}

impl FacilityParams {
    /// The defaults scaled to a site of `nodes` 8-GPU nodes: the defaults describe a
    /// 1,000-node site, so the site-level fixed loads (static load, fabric and storage, fixed
    /// cooling) and the meter's error and noise are scaled to the node count; per-node and
    /// per-kW terms are unchanged.
    #[must_use]
    pub fn for_nodes(nodes: u32) -> Self {
        let mut p = FacilityParams::default();
        let scale = f64::from(nodes.max(1)) / 1000.0;
        for b in [&mut p.static_site_kw, &mut p.fabric_kw, &mut p.cool_fixed_kw] {
            b.lo *= scale;
            b.nominal *= scale;
            b.hi *= scale;
        }
        p.meter_err_kw *= scale;
        p.noise_kw *= scale;
        p.cooling_meter_err_kw *= scale;
        p
    }

    /// Check every parameter: finite, loads and times `≥ 0`, efficiencies in `(0, 1]`, and
    /// `lo ≤ nominal ≤ hi`. The error names the first offending field.
    pub fn validate(&self) -> Result<(), FacilityError> {
        use Domain::{Efficiency as Eff, NonNegative as NonNeg};
        check_bounded("static_site_kw", self.static_site_kw, NonNeg)?;
        check_bounded("host_fixed_kw_per_node", self.host_fixed_kw_per_node, NonNeg)?;
        check_bounded("eta_psu.marginal", self.eta_psu.marginal, Eff)?;
        check_bounded("eta_psu.average", self.eta_psu.average, Eff)?;
        check_bounded("eta_dist.marginal", self.eta_dist.marginal, Eff)?;
        check_bounded("eta_dist.average", self.eta_dist.average, Eff)?;
        check_bounded("fabric_kw", self.fabric_kw, NonNeg)?;
        check_bounded("cool_fixed_kw", self.cool_fixed_kw, NonNeg)?;
        check_bounded("k_cool", self.k_cool, NonNeg)?;
        check_bounded("cool_dead_time_s", self.cool_dead_time_s, NonNeg)?;
        check_bounded("cool_tau_s", self.cool_tau_s, NonNeg)?;
        check_scalar("cool_credit_after_s", self.cool_credit_after_s, NonNeg)?;
        check_scalar("meter_err_kw", self.meter_err_kw, NonNeg)?;
        check_scalar("noise_kw", self.noise_kw, NonNeg)?;
        check_scalar("gpu_max_kw_per_node", self.gpu_max_kw_per_node, NonNeg)?;
        check_scalar("cooling_meter_err_kw", self.cooling_meter_err_kw, NonNeg)?;
        Ok(())
    }

    /// Stable 64-bit fingerprint of the parameter set: FNV-1a over its canonical JSON (fields in
    /// declaration order, floats in shortest round-trip form). Every dispatch record references
    /// it. Changing any value, or the schema, changes it.
    #[must_use]
    pub fn fingerprint(&self) -> u64 {
        let canonical = serde_json::to_string(self).unwrap_or_else(|e| format!("{self:?}|{e}"));
        fnv1a64(canonical.as_bytes())
    }

    /// [`Self::fingerprint`] as text, `fnv1a64:` followed by 16 hex digits.
    #[must_use]
    pub fn fingerprint_hex(&self) -> String {
        format!("fnv1a64:{:016x}", self.fingerprint())
    }

    /// The nominal realisation of every parameter.
    #[must_use]
    pub fn nominal_point(&self) -> FacilityPoint {
        self.corner(Side::Nominal)
    }

    /// The realisation giving the upper (`Side::Upper`) or lower (`Side::Lower`) meter bound:
    /// loads at one end, efficiencies at the other. The lag parameters are set to the nominal
    /// ones; the bounds choose the lag extreme separately.
    fn corner(&self, side: Side) -> FacilityPoint {
        let (load, eff) = side.bounds();
        FacilityPoint {
            static_site_kw: self.static_site_kw.pick(load),
            host_fixed_kw_per_node: self.host_fixed_kw_per_node.pick(load),
            eta_psu_avg: self.eta_psu.average.pick(eff),
            eta_dist_avg: self.eta_dist.average.pick(eff),
            eta_psu_marginal: self.eta_psu.marginal.pick(eff),
            eta_dist_marginal: self.eta_dist.marginal.pick(eff),
            fabric_kw: self.fabric_kw.pick(load),
            cool_fixed_kw: self.cool_fixed_kw.pick(load),
            k_cool: self.k_cool.pick(load),
            cool_dead_time_s: self.cool_dead_time_s.nominal,
            cool_tau_s: self.cool_tau_s.nominal,
        }
    }
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// Which end of the meter range an evaluation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Nominal,
    Upper,
    Lower,
}

impl Side {
    /// (bound for loads and cooling slope, bound for efficiencies).
    fn bounds(self) -> (Bound, Bound) {
        match self {
            Self::Nominal => (Bound::Nominal, Bound::Nominal),
            Self::Upper => (Bound::Hi, Bound::Lo),
            Self::Lower => (Bound::Lo, Bound::Hi),
        }
    }

    fn tag(self) -> Bound {
        match self {
            Self::Nominal => Bound::Nominal,
            Self::Upper => Bound::Hi,
            Self::Lower => Bound::Lo,
        }
    }
}

// ------------------------------------------------------------------------------------------------
// One concrete realisation of the parameters
// ------------------------------------------------------------------------------------------------

/// One concrete value of every uncertain parameter: a point of the parameter box, for the
/// fleet simulator and for checking the bounds. Not validated; NaN in, NaN out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FacilityPoint {
    /// `S`, kW.
    pub static_site_kw: f64,
    /// `H + F` per node, kW.
    pub host_fixed_kw_per_node: f64,
    /// Average PSU efficiency.
    pub eta_psu_avg: f64,
    /// Average distribution efficiency.
    pub eta_dist_avg: f64,
    /// Marginal PSU efficiency.
    pub eta_psu_marginal: f64,
    /// Marginal distribution efficiency.
    pub eta_dist_marginal: f64,
    /// `P_fab`, kW.
    pub fabric_kw: f64,
    /// `C0`, kW.
    pub cool_fixed_kw: f64,
    /// `k_c`.
    pub k_cool: f64,
    /// `θ_c`, s.
    pub cool_dead_time_s: f64,
    /// `τ_c`, s.
    pub cool_tau_s: f64,
}

impl FacilityPoint {
    fn it_kw(&self, gpu_kw: f64, nodes: u32) -> f64 {
        (gpu_kw + f64::from(nodes) * self.host_fixed_kw_per_node) / self.eta_psu_avg + self.fabric_kw
    }

    fn heat_kw(&self, gpu_kw: f64, nodes: u32) -> f64 {
        self.it_kw(gpu_kw, nodes) / self.eta_dist_avg
    }

    fn cooling_settled_kw(&self, gpu_kw: f64, nodes: u32) -> f64 {
        self.cool_fixed_kw + self.k_cool * self.heat_kw(gpu_kw, nodes)
    }

    /// IT power `P_IT` (equations 1–2).
    #[must_use]
    pub fn it_power(&self, gpu: Watts, nodes: u32) -> Kilowatts {
        Kilowatts(self.it_kw(gpu.to_kilowatts().value(), nodes))
    }

    /// Heat load `Q = P_dist` (equation 3).
    #[must_use]
    pub fn heat_load(&self, gpu: Watts, nodes: u32) -> Kilowatts {
        Kilowatts(self.heat_kw(gpu.to_kilowatts().value(), nodes))
    }

    /// Fraction `s(t)` of a cooling step completed `seconds` after it (0 during the dead time).
    #[must_use]
    pub fn lag_fraction(&self, seconds: f64) -> f64 {
        lag_fraction(seconds, self.cool_dead_time_s, self.cool_tau_s)
    }

    /// Settled meter power (equation 5 with `s = 1`).
    #[must_use]
    pub fn meter_settled(&self, gpu: Watts, nodes: u32) -> Kilowatts {
        let g = gpu.to_kilowatts().value();
        Kilowatts(self.static_site_kw + self.heat_kw(g, nodes) + self.cooling_settled_kw(g, nodes))
    }

    /// Meter power `seconds` after a step of the GPU-board power from a settled `gpu_before`
    /// to `gpu` on the same nodes.
    #[must_use]
    pub fn meter_after_step(&self, gpu_before: Watts, gpu: Watts, nodes: u32, seconds: f64) -> Kilowatts {
        let g = gpu.to_kilowatts().value();
        let c_pre = self.cooling_settled_kw(gpu_before.to_kilowatts().value(), nodes);
        let c_post = self.cooling_settled_kw(g, nodes);
        let s = self.lag_fraction(seconds);
        Kilowatts(self.static_site_kw + self.heat_kw(g, nodes) + c_post + (1.0 - s) * (c_pre - c_post))
    }

    /// Meter reduction from shedding `shed` of GPU-board power, incremental form with the
    /// marginal efficiencies: `μ·ΔG·(1 + k_c·s(t))`.
    #[must_use]
    pub fn reduction(&self, shed: Watts, timing: Timing) -> Kilowatts {
        let s = match timing {
            Timing::Settled => 1.0,
            Timing::After { seconds } => self.lag_fraction(seconds),
        };
        let mu = 1.0 / (self.eta_psu_marginal * self.eta_dist_marginal);
        Kilowatts(shed.to_kilowatts().value() * mu * (1.0 + self.k_cool * s))
    }
}

/// `s(t)` for dead time `dead` and time constant `tau`; `tau = 0` is an instant step.
fn lag_fraction(t: f64, dead: f64, tau: f64) -> f64 {
    if t.is_nan() || t < dead {
        0.0
    } else if tau <= 0.0 {
        1.0
    } else {
        (1.0 - (-(t - dead) / tau).exp()).clamp(0.0, 1.0)
    }
}

// ------------------------------------------------------------------------------------------------
// Inputs
// ------------------------------------------------------------------------------------------------

/// When, relative to a GPU power change, a meter figure is wanted.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Timing {
    /// Long after the change: the cooling plant has settled (`s = 1`).
    Settled,
    /// This many seconds after the change (finite, `≥ 0`).
    After {
        /// Seconds since the GPU power step.
        seconds: f64,
    },
}

/// What is known about the cooling just before the GPU power step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum PreEvent {
    /// Cooling-plant power measured just before the event (± `cooling_meter_err_kw`).
    MeasuredCooling {
        /// The measured cooling-plant power.
        cooling: Kilowatts,
    },
    /// The fleet GPU-board power before the event, with cooling settled to it.
    GpuPower {
        /// Pre-event GPU-board power of the same nodes.
        gpu: Watts,
    },
    /// Nothing known: anywhere between zero and every node at `gpu_max_kw_per_node`.
    Unknown,
}

/// The state of the cooling plant for an absolute meter figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CoolingState {
    /// Cooling has settled to the current heat load.
    Settled,
    /// `seconds` after a step of the GPU power away from a pre-event state.
    AfterStep {
        /// Seconds since the step (finite, `≥ 0`).
        seconds: f64,
        /// The pre-event state.
        pre_event: PreEvent,
    },
}

fn check_input(field: &'static str, value: f64) -> Result<f64, FacilityError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(FacilityError::BadInput {
            field,
            value,
            expected: "a finite number ≥ 0",
        })
    }
}

fn check_cooling_state(state: &CoolingState) -> Result<(), FacilityError> {
    if let CoolingState::AfterStep { seconds, pre_event } = state {
        check_input("seconds", *seconds)?;
        match pre_event {
            PreEvent::MeasuredCooling { cooling } => {
                check_input("pre_event.cooling", cooling.value())?;
            }
            PreEvent::GpuPower { gpu } => {
                check_input("pre_event.gpu", gpu.value())?;
            }
            PreEvent::Unknown => {}
        }
    }
    Ok(())
}

fn check_timing(timing: Timing) -> Result<(), FacilityError> {
    match timing {
        Timing::Settled => Ok(()),
        Timing::After { seconds } => check_input("seconds", seconds).map(|_| ()),
    }
}

// ------------------------------------------------------------------------------------------------
// Chain of quantities, for the log
// ------------------------------------------------------------------------------------------------

/// Which value of a parameter a step used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The nominal value.
    Nominal,
    /// The lower bound.
    Lo,
    /// The upper bound.
    Hi,
    /// A caller input or a single-valued parameter (margin, rule time).
    Exact,
    /// A value computed from the steps before it.
    Derived,
}

impl Bound {
    fn suffix(self) -> &'static str {
        match self {
            Self::Nominal => "_nom",
            Self::Lo => "_lo",
            Self::Hi => "_hi",
            Self::Exact | Self::Derived => "",
        }
    }
}

/// How a step combines with the running value of its chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Starts a running computation with this value.
    Start,
    /// Adds this value.
    Plus,
    /// Subtracts this value.
    Minus,
    /// Multiplies by this value.
    Times,
    /// Divides by this value.
    DividedBy,
    /// Names the running value at this point.
    Equals,
    /// A value used or derived on the side (an input to a term, a rule in force).
    Note,
}

/// One step of the computation behind a result: the quantity, its value and unit, which bound
/// of it was used, and how it entered the computation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChainStep {
    /// How it entered the computation.
    pub op: Op,
    /// Name of the quantity (a parameter name where it is one).
    pub quantity: &'static str,
    /// Its value.
    pub value: f64,
    /// Its unit (`kW`, `s`, `nodes`, `1` for dimensionless).
    pub unit: &'static str,
    /// Which bound was used.
    pub bound: Bound,
}

/// Terse appends to a chain.
trait ChainExt {
    fn with_unit(&mut self, op: Op, quantity: &'static str, value: f64, unit: &'static str, bound: Bound);
    fn kw(&mut self, op: Op, quantity: &'static str, value: f64, bound: Bound) {
        self.with_unit(op, quantity, value, "kW", bound);
    }
    fn num(&mut self, op: Op, quantity: &'static str, value: f64, bound: Bound) {
        self.with_unit(op, quantity, value, "1", bound);
    }
}

impl ChainExt for Vec<ChainStep> {
    fn with_unit(&mut self, op: Op, quantity: &'static str, value: f64, unit: &'static str, bound: Bound) {
        self.push(ChainStep {
            op,
            quantity,
            value,
            unit,
            bound,
        });
    }
}

/// Render a chain as one line for the log, e.g.
/// `fsl 9000 kW − meter_err_kw 100 kW − static_site_kw_hi 50 kW − … → gpu_budget 4100 kW`.
#[must_use]
pub fn render_chain(chain: &[ChainStep]) -> String {
    let mut out = String::new();
    let mut previous: Option<Op> = None;
    for s in chain {
        let v = if s.unit == "kW" {
            format!("{:.1}", s.value)
        } else {
            format!("{:.4}", s.value)
        };
        let v = if v.contains('.') {
            v.trim_end_matches('0').trim_end_matches('.').to_owned()
        } else {
            v
        };
        let name = format!("{}{}", s.quantity, s.bound.suffix());
        // Dimensionless quantities carry the unit "1"; printing it only adds noise.
        let unit = if s.unit == "1" { "" } else { s.unit };
        let piece = match s.op {
            Op::Start => format!("{name} {v} {}", unit),
            Op::Plus => format!(" + {name} {v} {}", unit),
            Op::Minus => format!(" − {name} {v} {}", unit),
            Op::Times => format!(" × {name} {v}"),
            Op::DividedBy => format!(" ÷ {name} {v}"),
            Op::Equals => format!(" → {name} {v} {}", unit),
            Op::Note if unit.is_empty() => format!("[{name} = {v}] "),
            Op::Note => format!("[{name} = {v} {}] ", unit),
        };
        // A new chain starts after an `Equals` (forward estimates carry three: nominal, hi, lo).
        let new_chain = matches!(s.op, Op::Start | Op::Note) && previous == Some(Op::Equals);
        if new_chain || (s.op == Op::Start && !out.is_empty() && !out.ends_with(' ')) {
            out.push_str("; ");
        }
        previous = Some(s.op);
        out.push_str(&piece);
    }
    out.trim_end().to_owned()
}

// ------------------------------------------------------------------------------------------------
// Results
// ------------------------------------------------------------------------------------------------

/// An absolute meter estimate with its bounds over the parameter box.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeterEstimate {
    /// Nominal meter power.
    pub nominal: Kilowatts,
    /// Lower bound.
    pub lo: Kilowatts,
    /// Upper bound.
    pub hi: Kilowatts,
    /// Fingerprint of the parameter set used.
    pub params_fingerprint: String,
    /// The computation, nominal then upper then lower bound.
    pub chain: Vec<ChainStep>,
}

/// A meter change (reduction) estimate with its bounds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeterChange {
    /// Nominal meter reduction.
    pub nominal: Kilowatts,
    /// Lower bound (what a reduction commitment may rely on).
    pub lo: Kilowatts,
    /// Upper bound (worst-case over-delivery).
    pub hi: Kilowatts,
    /// Fingerprint of the parameter set used.
    pub params_fingerprint: String,
    /// The computation.
    pub chain: Vec<ChainStep>,
}

/// GPU-board shed needed to meet a reduction commitment (inversion (a)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReductionRequirement {
    /// The committed meter reduction `R`.
    pub target: Kilowatts,
    /// `R + meter_err + noise`: what the lower-bound model must deliver.
    pub required_meter_reduction: Kilowatts,
    /// `ΔG_req`: GPU-board power to remove, measured against actual draw.
    pub gpu_shed: Watts,
    /// The lower-bound multiplier `μ_lo·(1 + k_c,lo·s_lo(t))` from GPU to meter kW.
    pub multiplier: f64,
    /// Cooling credit `s_lo(t)` counted (0 before `cool_credit_after_s`).
    pub cooling_credit: Fraction,
    /// Fingerprint of the parameter set used.
    pub params_fingerprint: String,
    /// The computation.
    pub chain: Vec<ChainStep>,
}

/// Fleet GPU-board budget that keeps the meter under a ceiling (inversion (b)).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CeilingBudget {
    /// The ceiling (firm service level).
    pub fsl: Kilowatts,
    /// Total GPU-board power allowed; never negative (zero when infeasible).
    pub gpu_budget: Watts,
    /// Whether the ceiling can be met at all (at zero GPU power, under the upper-bound model).
    pub feasible: bool,
    /// Upper-bound meter kW above `FSL − meter_err` with every GPU at zero; zero if feasible.
    pub infeasible_by: Kilowatts,
    /// Upper-bound heat load `Q` at the returned budget.
    pub heat_load: Kilowatts,
    /// Upper-bound cooling `C_hi(t)` at the returned budget.
    pub cooling: Kilowatts,
    /// Cooling credit `s` counted (0 before `cool_credit_after_s`, 1 when settled).
    pub cooling_credit: Fraction,
    /// Fingerprint of the parameter set used.
    pub params_fingerprint: String,
    /// The computation.
    pub chain: Vec<ChainStep>,
}

// ------------------------------------------------------------------------------------------------
// The model
// ------------------------------------------------------------------------------------------------

/// The facility model over a validated parameter set.
#[derive(Debug, Clone, PartialEq)]
pub struct FacilityModel {
    params: FacilityParams,
    fingerprint: String,
}

impl FacilityModel {
    /// Validate `params` and build the model.
    pub fn new(params: FacilityParams) -> Result<Self, FacilityError> {
        params.validate()?;
        let fingerprint = params.fingerprint_hex();
        Ok(Self { params, fingerprint })
    }

    /// The parameter set.
    #[must_use]
    pub fn params(&self) -> &FacilityParams {
        &self.params
    }

    /// The parameter set's fingerprint, as in [`FacilityParams::fingerprint_hex`].
    #[must_use]
    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// Slowest plausible lag fraction at `t` (lower bound of the cooling response).
    fn s_slow(&self, t: f64) -> f64 {
        let p = &self.params;
        lag_fraction(t, p.cool_dead_time_s.hi, p.cool_tau_s.hi)
    }

    /// Fastest plausible lag fraction at `t`.
    fn s_fast(&self, t: f64) -> f64 {
        let p = &self.params;
        lag_fraction(t, p.cool_dead_time_s.lo, p.cool_tau_s.lo)
    }

    fn s_nominal(&self, t: f64) -> f64 {
        let p = &self.params;
        lag_fraction(t, p.cool_dead_time_s.nominal, p.cool_tau_s.nominal)
    }

    /// Cooling credit the inversions may count at `t`: none before `cool_credit_after_s`, then
    /// the slowest plausible lag.
    fn s_credit(&self, timing: Timing) -> f64 {
        match timing {
            Timing::Settled => 1.0,
            Timing::After { seconds } if seconds < self.params.cool_credit_after_s => 0.0,
            Timing::After { seconds } => self.s_slow(seconds),
        }
    }

    /// Pre-event cooling at one side of the range, kW.
    fn pre_event_cooling_kw(&self, pre: PreEvent, side: Side, nodes: u32, gpu_now_kw: f64) -> f64 {
        let p = &self.params;
        let corner = p.corner(side);
        match pre {
            PreEvent::MeasuredCooling { cooling } => match side {
                Side::Nominal => cooling.value(),
                Side::Upper => cooling.value() + p.cooling_meter_err_kw,
                Side::Lower => (cooling.value() - p.cooling_meter_err_kw).max(0.0),
            },
            PreEvent::GpuPower { gpu } => corner.cooling_settled_kw(gpu.to_kilowatts().value(), nodes),
            PreEvent::Unknown => {
                let g = match side {
                    Side::Nominal => gpu_now_kw,
                    Side::Upper => f64::from(nodes) * p.gpu_max_kw_per_node,
                    Side::Lower => 0.0,
                };
                corner.cooling_settled_kw(g, nodes)
            }
        }
    }

    fn forward_side(
        &self,
        side: Side,
        gpu_kw: f64,
        nodes: u32,
        cooling_state: &CoolingState,
        chain: &mut Vec<ChainStep>,
    ) -> f64 {
        let p = &self.params;
        let (load, eff) = side.bounds();
        let tag = side.tag();
        let pt = p.corner(side);
        let host_total = f64::from(nodes) * pt.host_fixed_kw_per_node;
        let it = pt.it_kw(gpu_kw, nodes);
        let q = it / pt.eta_dist_avg;
        let c_post = pt.cool_fixed_kw + pt.k_cool * q;

        chain.with_unit(Op::Note, "nodes", f64::from(nodes), "nodes", Bound::Exact);
        chain.kw(Op::Note, "host_fixed_kw_per_node", pt.host_fixed_kw_per_node, load);
        chain.kw(Op::Note, "cool_fixed_kw", pt.cool_fixed_kw, load);
        chain.num(Op::Note, "k_cool", pt.k_cool, load);
        chain.kw(Op::Note, "settled_cooling_kw", c_post, tag);
        let cooling = match cooling_state {
            CoolingState::Settled => {
                chain.num(Op::Note, "cooling_lag_fraction", 1.0, Bound::Exact);
                c_post
            }
            CoolingState::AfterStep { seconds, pre_event } => {
                let c_pre = self.pre_event_cooling_kw(*pre_event, side, nodes, gpu_kw);
                let d = c_pre - c_post;
                chain.with_unit(Op::Note, "seconds_since_step", *seconds, "s", Bound::Exact);
                chain.kw(Op::Note, "pre_event_cooling_kw", c_pre, tag);
                let (s, extra) = match side {
                    Side::Nominal => {
                        let s = self.s_nominal(*seconds);
                        (s, (1.0 - s) * d)
                    }
                    Side::Upper | Side::Lower => {
                        let (slow, fast) = (self.s_slow(*seconds), self.s_fast(*seconds));
                        let (a, b) = ((1.0 - slow) * d, (1.0 - fast) * d);
                        let pick_slow = if side == Side::Upper { a >= b } else { a <= b };
                        if pick_slow { (slow, a) } else { (fast, b) }
                    }
                };
                chain.num(Op::Note, "cooling_lag_fraction", s, Bound::Derived);
                c_post + extra
            }
        };

        chain.kw(Op::Start, "gpu_board_kw", gpu_kw, Bound::Exact);
        chain.kw(Op::Plus, "host_fixed_kw_total", host_total, load);
        chain.num(Op::DividedBy, "eta_psu_avg", pt.eta_psu_avg, eff);
        chain.kw(Op::Plus, "fabric_kw", pt.fabric_kw, load);
        chain.kw(Op::Equals, "it_power_kw", it, tag);
        chain.num(Op::DividedBy, "eta_dist_avg", pt.eta_dist_avg, eff);
        chain.kw(Op::Equals, "heat_load_kw", q, tag);
        chain.kw(Op::Plus, "cooling_kw", cooling, tag);
        chain.kw(Op::Plus, "static_site_kw", pt.static_site_kw, load);
        let meter = pt.static_site_kw + q + cooling;
        chain.kw(Op::Equals, "meter_kw", meter, tag);
        meter
    }

    /// Forward model: meter power at `gpu` total GPU-board power on `nodes` nodes, with nominal,
    /// lower and upper bounds over the parameter box (and the cooling-lag range, after a step).
    pub fn forward(&self, gpu: Watts, nodes: u32, cooling: &CoolingState) -> Result<MeterEstimate, FacilityError> {
        let g = check_input("gpu", gpu.to_kilowatts().value())?;
        check_cooling_state(cooling)?;
        let mut chain = Vec::with_capacity(60);
        let nominal = self.forward_side(Side::Nominal, g, nodes, cooling, &mut chain);
        let hi = self.forward_side(Side::Upper, g, nodes, cooling, &mut chain);
        let lo = self.forward_side(Side::Lower, g, nodes, cooling, &mut chain);
        Ok(MeterEstimate {
            nominal: Kilowatts(nominal),
            lo: Kilowatts(lo),
            hi: Kilowatts(hi),
            params_fingerprint: self.fingerprint.clone(),
            chain,
        })
    }

    /// Forward model, incremental form: meter reduction from removing `shed` of GPU-board power,
    /// `timing` after the removal, `μ·ΔG·(1 + k_c·s(t))` with marginal efficiencies. The lower
    /// bound uses the highest marginal efficiencies, the lowest `k_c` and the slowest lag; it is
    /// physics only (the `cool_credit_after_s` rule is applied by the inversion).
    pub fn forward_reduction(&self, shed: Watts, timing: Timing) -> Result<MeterChange, FacilityError> {
        let g = check_input("shed", shed.to_kilowatts().value())?;
        check_timing(timing)?;
        let mut chain = Vec::with_capacity(24);
        let side_value = |side: Side, chain: &mut Vec<ChainStep>| {
            let (load, eff) = side.bounds();
            let tag = side.tag();
            let pt = self.params.corner(side);
            let s = match (timing, side) {
                (Timing::Settled, _) => 1.0,
                (Timing::After { seconds }, Side::Nominal) => self.s_nominal(seconds),
                (Timing::After { seconds }, Side::Upper) => self.s_fast(seconds),
                (Timing::After { seconds }, Side::Lower) => self.s_slow(seconds),
            };
            let mu = 1.0 / (pt.eta_psu_marginal * pt.eta_dist_marginal);
            let cool = 1.0 + pt.k_cool * s;
            chain.num(Op::Note, "eta_psu_marginal", pt.eta_psu_marginal, eff);
            chain.num(Op::Note, "eta_dist_marginal", pt.eta_dist_marginal, eff);
            chain.num(Op::Note, "k_cool", pt.k_cool, load);
            chain.num(Op::Note, "cooling_lag_fraction", s, tag);
            chain.kw(Op::Start, "gpu_shed_kw", g, Bound::Exact);
            chain.num(Op::Times, "mu", mu, tag);
            chain.num(Op::Times, "cooling_factor", cool, tag);
            let v = g * mu * cool;
            chain.kw(Op::Equals, "meter_reduction_kw", v, tag);
            v
        };
        let nominal = side_value(Side::Nominal, &mut chain);
        let hi = side_value(Side::Upper, &mut chain);
        let lo = side_value(Side::Lower, &mut chain);
        Ok(MeterChange {
            nominal: Kilowatts(nominal),
            lo: Kilowatts(lo),
            hi: Kilowatts(hi),
            params_fingerprint: self.fingerprint.clone(),
            chain,
        })
    }

    /// Inversion (a): GPU-board power to shed so that the meter falls by at least `target`
    /// against the baseline, `timing` after the shed, with the meter-error and noise margins.
    pub fn reduction_requirement(
        &self,
        target: Kilowatts,
        timing: Timing,
    ) -> Result<ReductionRequirement, FacilityError> {
        let p = &self.params;
        let r = check_input("target", target.value())?;
        check_timing(timing)?;
        let need = r + p.meter_err_kw + p.noise_kw;
        let eta_psu = p.eta_psu.marginal.hi;
        let eta_dist = p.eta_dist.marginal.hi;
        let mu_lo = 1.0 / (eta_psu * eta_dist);
        let s = self.s_credit(timing);
        let k = p.k_cool.lo;
        let cool = 1.0 + k * s;
        let multiplier = mu_lo * cool;
        let shed = need / multiplier;

        let mut chain = Vec::with_capacity(16);
        let c = &mut chain;
        c.num(Op::Note, "eta_psu_marginal", eta_psu, Bound::Hi);
        c.num(Op::Note, "eta_dist_marginal", eta_dist, Bound::Hi);
        c.num(Op::Note, "k_cool", k, Bound::Lo);
        if let Timing::After { seconds } = timing {
            c.with_unit(Op::Note, "seconds_since_shed", seconds, "s", Bound::Exact);
        }
        c.with_unit(
            Op::Note,
            "cool_credit_after_s",
            p.cool_credit_after_s,
            "s",
            Bound::Exact,
        );
        c.num(Op::Note, "cooling_credit", s, Bound::Lo);
        c.kw(Op::Start, "target_kw", r, Bound::Exact);
        c.kw(Op::Plus, "meter_err_kw", p.meter_err_kw, Bound::Exact);
        c.kw(Op::Plus, "noise_kw", p.noise_kw, Bound::Exact);
        c.kw(Op::Equals, "required_meter_reduction_kw", need, Bound::Derived);
        c.num(Op::DividedBy, "mu", mu_lo, Bound::Lo);
        c.num(Op::DividedBy, "cooling_factor", cool, Bound::Lo);
        c.kw(Op::Equals, "gpu_shed_kw", shed, Bound::Derived);

        Ok(ReductionRequirement {
            target,
            required_meter_reduction: Kilowatts(need),
            gpu_shed: Kilowatts(shed).to_watts(),
            multiplier,
            cooling_credit: Fraction::new(s).unwrap_or(Fraction::ZERO),
            params_fingerprint: self.fingerprint.clone(),
            chain,
        })
    }

    /// Inversion (b): the largest total GPU-board power on `nodes` nodes whose upper-bound meter
    /// estimate, plus the meter error, stays at or below `fsl`, in the given cooling state.
    pub fn ceiling_budget(
        &self,
        fsl: Kilowatts,
        nodes: u32,
        cooling: &CoolingState,
    ) -> Result<CeilingBudget, FacilityError> {
        let p = &self.params;
        let f = fsl.value();
        if !f.is_finite() {
            return Err(FacilityError::BadInput {
                field: "fsl",
                value: f,
                expected: "a finite number",
            });
        }
        check_cooling_state(cooling)?;
        let n = f64::from(nodes);
        let hi = p.corner(Side::Upper);
        let (c0, k) = (hi.cool_fixed_kw, hi.k_cool);
        let host_total = n * hi.host_fixed_kw_per_node;

        // Cooling credit s and the pre-event cooling that has not yet gone away.
        let (timing, c_pre) = match cooling {
            CoolingState::Settled => (Timing::Settled, None),
            CoolingState::AfterStep { seconds, pre_event } => (
                Timing::After { seconds: *seconds },
                Some(self.pre_event_cooling_kw(*pre_event, Side::Upper, nodes, 0.0)),
            ),
        };
        let s = self.s_credit(timing);
        // Upper-bound cooling at heat load q under the rule.
        let cooling_at = |q: f64| {
            let post = c0 + k * q;
            match c_pre {
                None => post,
                Some(pre) => post + (1.0 - s) * (pre - post).max(0.0),
            }
        };

        let a = f - p.meter_err_kw - hi.static_site_kw;
        let q_settled = (a - c0) / (1.0 + k);
        let q_star = match c_pre {
            None => q_settled,
            Some(pre) => q_settled.min((a - s * c0 - (1.0 - s) * pre) / (1.0 + s * k)),
        };
        let it_budget = hi.eta_dist_avg * q_star - hi.fabric_kw;
        let raw = hi.eta_psu_avg * it_budget - host_total;
        let feasible = raw >= 0.0;

        let mut chain = Vec::with_capacity(24);
        let ch = &mut chain;
        ch.with_unit(Op::Note, "nodes", n, "nodes", Bound::Exact);
        ch.kw(Op::Note, "host_fixed_kw_per_node", hi.host_fixed_kw_per_node, Bound::Hi);
        ch.kw(Op::Note, "cool_fixed_kw", c0, Bound::Hi);
        ch.num(Op::Note, "k_cool", k, Bound::Hi);
        if let CoolingState::AfterStep { seconds, .. } = cooling {
            ch.with_unit(Op::Note, "seconds_since_step", *seconds, "s", Bound::Exact);
            ch.with_unit(
                Op::Note,
                "cool_credit_after_s",
                p.cool_credit_after_s,
                "s",
                Bound::Exact,
            );
        }
        if let Some(pre) = c_pre {
            ch.kw(Op::Note, "pre_event_cooling_kw", pre, Bound::Hi);
        }
        ch.num(Op::Note, "cooling_credit", s, Bound::Lo);
        ch.kw(Op::Start, "fsl_kw", f, Bound::Exact);
        ch.kw(Op::Minus, "meter_err_kw", p.meter_err_kw, Bound::Exact);
        ch.kw(Op::Minus, "static_site_kw", hi.static_site_kw, Bound::Hi);
        ch.kw(Op::Minus, "cooling_kw", cooling_at(q_star), Bound::Hi);
        ch.kw(Op::Equals, "heat_load_budget_kw", q_star, Bound::Derived);
        ch.num(Op::Times, "eta_dist_avg", hi.eta_dist_avg, Bound::Lo);
        ch.kw(Op::Minus, "fabric_kw", hi.fabric_kw, Bound::Hi);
        ch.kw(Op::Equals, "it_power_budget_kw", it_budget, Bound::Derived);
        ch.num(Op::Times, "eta_psu_avg", hi.eta_psu_avg, Bound::Lo);
        ch.kw(Op::Minus, "host_fixed_kw_total", host_total, Bound::Hi);
        ch.kw(Op::Equals, "gpu_budget_raw_kw", raw, Bound::Derived);

        let (budget_kw, heat, cool_kw, infeasible_by) = if feasible {
            (raw, q_star, cooling_at(q_star), 0.0)
        } else {
            let q0 = hi.heat_kw(0.0, nodes);
            let c_zero = cooling_at(q0);
            let m0 = hi.static_site_kw + q0 + c_zero;
            let by = (m0 + p.meter_err_kw - f).max(0.0);
            ch.kw(Op::Note, "meter_at_zero_gpu_kw", m0, Bound::Hi);
            ch.kw(Op::Note, "infeasible_by_kw", by, Bound::Derived);
            (0.0, q0, c_zero, by)
        };
        ch.kw(Op::Equals, "gpu_budget_kw", budget_kw, Bound::Derived);

        Ok(CeilingBudget {
            fsl,
            gpu_budget: Kilowatts(budget_kw).to_watts(),
            feasible,
            infeasible_by: Kilowatts(infeasible_by),
            heat_load: Kilowatts(heat),
            cooling: Kilowatts(cool_kw),
            cooling_credit: Fraction::new(s).unwrap_or(Fraction::ZERO),
            params_fingerprint: self.fingerprint.clone(),
            chain,
        })
    }
}

// ------------------------------------------------------------------------------------------------
// Tests
// ------------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A worked example: η_psu = η_dist = 0.95 average, H+F = 2.1 kW, fabric 0.4 MW,
    /// marginal efficiencies 0.97 nominal / 1.00 for reductions, 0.1 MW meter error and noise.
    fn worked_example() -> FacilityParams {
        FacilityParams {
            static_site_kw: Bounded::exact(20.0),
            host_fixed_kw_per_node: Bounded::exact(2.1),
            eta_psu: Efficiency {
                marginal: Bounded::new(0.97, 0.97, 1.0),
                average: Bounded::exact(0.95),
            },
            eta_dist: Efficiency {
                marginal: Bounded::new(0.97, 0.97, 1.0),
                average: Bounded::exact(0.95),
            },
            fabric_kw: Bounded::exact(400.0),
            cool_fixed_kw: Bounded::exact(300.0),
            k_cool: Bounded::new(0.02, 0.15, 0.30),
            meter_err_kw: 100.0,
            noise_kw: 100.0,
            ..FacilityParams::default()
        }
    }

    fn model(p: FacilityParams) -> FacilityModel {
        FacilityModel::new(p).unwrap()
    }

    fn find<'a>(chain: &'a [ChainStep], q: &str) -> &'a ChainStep {
        chain.iter().find(|s| s.quantity == q).unwrap()
    }

    #[test]
    fn defaults_are_valid_and_match_the_design() {
        let p = FacilityParams::default();
        p.validate().unwrap();
        assert_eq!(p.host_fixed_kw_per_node.nominal, 2.1);
        assert_eq!(p.host_fixed_kw_per_node.hi, 2.8);
        assert_eq!(p.eta_psu.marginal.nominal, 0.97);
        assert_eq!(p.eta_psu.marginal.hi, 1.0);
        assert_eq!(p.eta_psu.average.lo, 0.94);
        assert_eq!(p.eta_dist.marginal.hi, 1.0);
        assert_eq!(p.eta_dist.average.lo, 0.94);
        assert_eq!(p.cool_credit_after_s, 900.0);
    }

    #[test]
    fn worked_example_forward_it_and_meter() {
        let m = model(worked_example());
        let est = m
            .forward(Kilowatts(5200.0).to_watts(), 1000, &CoolingState::Settled)
            .unwrap();
        // IT 8.1 MW (first `it_power_kw` is the nominal evaluation).
        let it = find(&est.chain, "it_power_kw");
        assert_eq!(it.bound, Bound::Nominal);
        assert!((it.value - 8084.2).abs() < 0.1, "IT {}", it.value);
        // PUE ≈ 1.25 → meter ≈ 10.1 MW.
        assert!((est.nominal.value() - 10_100.0).abs() < 50.0, "{}", est.nominal);
        assert!((est.nominal.value() / it.value - 1.25).abs() < 0.01);
        assert!(est.lo <= est.nominal && est.nominal <= est.hi);
    }

    #[test]
    fn worked_example_reduction_requirement() {
        let m = model(worked_example());
        // R = 2.0 MW within 10 min: no cooling credit yet, μ_lo = 1.
        let req = m
            .reduction_requirement(Kilowatts(2000.0), Timing::After { seconds: 600.0 })
            .unwrap();
        assert!((req.gpu_shed.to_kilowatts().value() - 2200.0).abs() < 1e-9);
        assert_eq!(req.required_meter_reduction, Kilowatts(2200.0));
        assert_eq!(req.cooling_credit, Fraction::ZERO);
        assert_eq!(req.multiplier, 1.0);
        // Fleet GPU 5.2 → 3.0 MW, ≈375 W/GPU over 8,000 GPUs.
        let after = Kilowatts(5200.0).to_watts() - req.gpu_shed;
        assert!((after.to_kilowatts().value() - 3000.0).abs() < 1e-6);
        assert!((after.per_gpu(8000).value() - 375.0).abs() < 1e-6);
        // Nominal delivery once cooling settles ≈ 2.2 × 1.06 × 1.15 ≈ 2.7 MW.
        let delivered = m.forward_reduction(req.gpu_shed, Timing::Settled).unwrap();
        assert!(
            (delivered.nominal.value() - 2689.0).abs() < 5.0,
            "{}",
            delivered.nominal
        );
        assert!(delivered.lo.value() >= 2200.0 - 1e-9);
    }

    #[test]
    fn reduction_chain_names_every_multiplier() {
        let m = model(worked_example());
        let req = m
            .reduction_requirement(Kilowatts(2000.0), Timing::After { seconds: 600.0 })
            .unwrap();
        let names: Vec<_> = req.chain.iter().map(|s| s.quantity).collect();
        for q in [
            "target_kw",
            "meter_err_kw",
            "noise_kw",
            "mu",
            "cooling_factor",
            "gpu_shed_kw",
            "cooling_credit",
            "eta_psu_marginal",
        ] {
            assert!(names.contains(&q), "{q} missing from {names:?}");
        }
        assert_eq!(find(&req.chain, "mu").bound, Bound::Lo);
        assert_eq!(find(&req.chain, "eta_psu_marginal").bound, Bound::Hi);
        assert_eq!(find(&req.chain, "k_cool").bound, Bound::Lo);
        let text = render_chain(&req.chain);
        assert!(
            text.contains("target_kw 2000 kW + meter_err_kw 100 kW + noise_kw 100 kW"),
            "{text}"
        );
        assert!(text.contains("→ gpu_shed_kw 2200 kW"), "{text}");
        // Serialisable for the ledger.
        let json = serde_json::to_value(&req).unwrap();
        assert_eq!(json["chain"][0]["op"], "note");
        assert!(json["params_fingerprint"].as_str().unwrap().starts_with("fnv1a64:"));
    }

    #[test]
    fn reduction_counts_cooling_only_after_credit_time() {
        let m = model(FacilityParams::default());
        let before = m
            .reduction_requirement(Kilowatts(1000.0), Timing::After { seconds: 899.0 })
            .unwrap();
        let after = m
            .reduction_requirement(Kilowatts(1000.0), Timing::After { seconds: 3600.0 })
            .unwrap();
        let settled = m.reduction_requirement(Kilowatts(1000.0), Timing::Settled).unwrap();
        assert_eq!(before.cooling_credit, Fraction::ZERO);
        assert!(after.cooling_credit.value() > 0.0);
        assert!(after.gpu_shed < before.gpu_shed);
        assert!(settled.gpu_shed <= after.gpu_shed);
        // Settled: 1200 / (1 · 1.02).
        assert!((settled.gpu_shed.to_kilowatts().value() - 1200.0 / 1.02).abs() < 1e-9);
    }

    #[test]
    fn ceiling_settled_matches_the_design_formula() {
        let p = FacilityParams::default();
        let m = model(p.clone());
        let fsl = 9000.0;
        let b = m.ceiling_budget(Kilowatts(fsl), 1000, &CoolingState::Settled).unwrap();
        // Hand solve: Q = (FSL − err − S_hi − C0_hi)/(1 + k_hi).
        let q = (fsl - 100.0 - 50.0 - 400.0) / 1.3;
        let c_hi = 400.0 + 0.3 * q;
        let by_formula = 0.94 * (0.94 * (fsl - 100.0 - 50.0 - c_hi) - 500.0) - 1000.0 * 2.8;
        assert!((b.gpu_budget.to_kilowatts().value() - by_formula).abs() < 1e-6);
        assert!(b.feasible);
        assert_eq!(b.infeasible_by, Kilowatts::ZERO);
        assert!((b.cooling.value() - c_hi).abs() < 1e-9);
        // Forward upper bound at the budget lands exactly on FSL − meter_err.
        let est = m.forward(b.gpu_budget, 1000, &CoolingState::Settled).unwrap();
        assert!((est.hi.value() - (fsl - 100.0)).abs() < 1e-6);
    }

    #[test]
    fn ceiling_chain_reads_like_the_ledger() {
        let m = model(FacilityParams::default());
        let b = m
            .ceiling_budget(Kilowatts(9000.0), 1000, &CoolingState::Settled)
            .unwrap();
        let ops: Vec<_> = b
            .chain
            .iter()
            .filter(|s| s.op != Op::Note)
            .map(|s| (s.op, s.quantity, s.bound))
            .collect();
        assert_eq!(
            ops,
            vec![
                (Op::Start, "fsl_kw", Bound::Exact),
                (Op::Minus, "meter_err_kw", Bound::Exact),
                (Op::Minus, "static_site_kw", Bound::Hi),
                (Op::Minus, "cooling_kw", Bound::Hi),
                (Op::Equals, "heat_load_budget_kw", Bound::Derived),
                (Op::Times, "eta_dist_avg", Bound::Lo),
                (Op::Minus, "fabric_kw", Bound::Hi),
                (Op::Equals, "it_power_budget_kw", Bound::Derived),
                (Op::Times, "eta_psu_avg", Bound::Lo),
                (Op::Minus, "host_fixed_kw_total", Bound::Hi),
                (Op::Equals, "gpu_budget_raw_kw", Bound::Derived),
                (Op::Equals, "gpu_budget_kw", Bound::Derived),
            ]
        );
        let text = render_chain(&b.chain);
        assert!(
            text.contains("fsl_kw 9000 kW − meter_err_kw 100 kW − static_site_kw_hi 50 kW − cooling_kw_hi"),
            "{text}"
        );
        // The chain's arithmetic reproduces the budget.
        let mut running = 0.0;
        for s in b.chain.iter().filter(|s| s.op != Op::Note) {
            match s.op {
                Op::Start => running = s.value,
                Op::Plus => running += s.value,
                Op::Minus => running -= s.value,
                Op::Times => running *= s.value,
                Op::DividedBy => running /= s.value,
                Op::Equals => assert!(
                    (running.max(0.0) - s.value).abs() < 1e-6 || (running - s.value).abs() < 1e-6,
                    "{} {} vs {}",
                    s.quantity,
                    s.value,
                    running
                ),
                Op::Note => {}
            }
        }
        assert!((running - b.gpu_budget.to_kilowatts().value()).abs() < 1e-6);
    }

    #[test]
    fn forward_chain_covers_three_sides() {
        let m = model(FacilityParams::default());
        let est = m
            .forward(Kilowatts(4000.0).to_watts(), 1000, &CoolingState::Settled)
            .unwrap();
        let meters: Vec<_> = est
            .chain
            .iter()
            .filter(|s| s.quantity == "meter_kw")
            .map(|s| (s.bound, s.value))
            .collect();
        assert_eq!(
            meters,
            vec![
                (Bound::Nominal, est.nominal.value()),
                (Bound::Hi, est.hi.value()),
                (Bound::Lo, est.lo.value()),
            ]
        );
        // The upper bound uses the low efficiencies.
        let eff: Vec<_> = est
            .chain
            .iter()
            .filter(|s| s.quantity == "eta_psu_avg")
            .map(|s| (s.bound, s.value))
            .collect();
        assert_eq!(eff[1], (Bound::Lo, 0.94));
        assert_eq!(eff[2], (Bound::Hi, 0.97));
    }

    #[test]
    fn cooling_lag_rule_shrinks_the_ceiling_budget_before_credit_time() {
        let m = model(FacilityParams::default());
        // Pre-event: fleet at full power, cooling well above the post-event level.
        let pre = PreEvent::GpuPower {
            gpu: Kilowatts(5600.0).to_watts(),
        };
        let at = |seconds: f64| {
            m.ceiling_budget(
                Kilowatts(8000.0),
                1000,
                &CoolingState::AfterStep {
                    seconds,
                    pre_event: pre,
                },
            )
            .unwrap()
        };
        let early = at(600.0);
        let just_before = at(899.0);
        let after = at(900.0);
        let later = at(3.0 * 3600.0);
        let settled = m
            .ceiling_budget(Kilowatts(8000.0), 1000, &CoolingState::Settled)
            .unwrap();
        assert_eq!(early.gpu_budget, just_before.gpu_budget);
        assert_eq!(early.cooling_credit, Fraction::ZERO);
        assert!(early.gpu_budget < after.gpu_budget, "{early:?} {after:?}");
        assert!(after.gpu_budget < later.gpu_budget);
        assert!(later.gpu_budget <= settled.gpu_budget);
        // Before credit time the cooling at the budget is the full pre-event cooling.
        let pre_hi = find(&early.chain, "pre_event_cooling_kw").value;
        assert!((early.cooling.value() - pre_hi).abs() < 1e-9);
        // The same rule with a fast plant: after credit time the budget is (nearly) the settled one.
        let fast = model(FacilityParams {
            cool_dead_time_s: Bounded::new(30.0, 45.0, 60.0),
            cool_tau_s: Bounded::new(60.0, 90.0, 120.0),
            ..FacilityParams::default()
        });
        let fast_after = fast
            .ceiling_budget(
                Kilowatts(8000.0),
                1000,
                &CoolingState::AfterStep {
                    seconds: 900.0,
                    pre_event: pre,
                },
            )
            .unwrap();
        let fast_settled = fast
            .ceiling_budget(Kilowatts(8000.0), 1000, &CoolingState::Settled)
            .unwrap();
        assert!(
            (fast_after.gpu_budget.value() - fast_settled.gpu_budget.value()).abs()
                < 0.001 * fast_settled.gpu_budget.value()
        );
    }

    #[test]
    fn rising_load_is_not_credited_with_low_pre_event_cooling() {
        let m = model(FacilityParams::default());
        let low = PreEvent::MeasuredCooling {
            cooling: Kilowatts(0.0),
        };
        let b = m
            .ceiling_budget(
                Kilowatts(9000.0),
                1000,
                &CoolingState::AfterStep {
                    seconds: 10.0,
                    pre_event: low,
                },
            )
            .unwrap();
        let settled = m
            .ceiling_budget(Kilowatts(9000.0), 1000, &CoolingState::Settled)
            .unwrap();
        assert!((b.gpu_budget.value() - settled.gpu_budget.value()).abs() < 1e-6);
    }

    #[test]
    fn unreachable_ceiling_gives_zero_budget_and_shortfall() {
        let m = model(FacilityParams::default());
        let b = m
            .ceiling_budget(Kilowatts(1000.0), 1000, &CoolingState::Settled)
            .unwrap();
        assert!(!b.feasible);
        assert_eq!(b.gpu_budget, Watts::ZERO);
        let zero = m.forward(Watts::ZERO, 1000, &CoolingState::Settled).unwrap();
        let expect = zero.hi.value() + 100.0 - 1000.0;
        assert!((b.infeasible_by.value() - expect).abs() < 1e-6);
        assert!(find(&b.chain, "gpu_budget_raw_kw").value < 0.0);
        assert_eq!(find(&b.chain, "infeasible_by_kw").value, b.infeasible_by.value());
        assert_eq!(b.chain.last().unwrap().value, 0.0);
        // Negative FSL is just very infeasible, not an error.
        let neg = m.ceiling_budget(Kilowatts(-10.0), 10, &CoolingState::Settled).unwrap();
        assert_eq!(neg.gpu_budget, Watts::ZERO);
        assert!(neg.infeasible_by.value() > 0.0);
    }

    #[test]
    fn validation_names_the_field() {
        let bad = |f: fn(&mut FacilityParams)| {
            let mut p = FacilityParams::default();
            f(&mut p);
            p.validate().unwrap_err()
        };
        let field = |e: FacilityError| match e {
            FacilityError::OutOfDomain { field, .. } | FacilityError::Unordered { field, .. } => field,
            FacilityError::BadInput { field, .. } => field.to_owned(),
        };
        assert_eq!(field(bad(|p| p.eta_psu.average.lo = 0.0)), "eta_psu.average.lo");
        assert_eq!(field(bad(|p| p.eta_dist.marginal.hi = 1.01)), "eta_dist.marginal.hi");
        assert_eq!(field(bad(|p| p.static_site_kw.lo = -1.0)), "static_site_kw.lo");
        assert_eq!(field(bad(|p| p.k_cool.nominal = f64::NAN)), "k_cool.nominal");
        assert_eq!(field(bad(|p| p.meter_err_kw = f64::INFINITY)), "meter_err_kw");
        assert_eq!(field(bad(|p| p.noise_kw = -5.0)), "noise_kw");
        let e = bad(|p| p.host_fixed_kw_per_node = Bounded::new(2.8, 2.1, 1.5));
        assert!(matches!(e, FacilityError::Unordered { .. }));
        assert_eq!(field(e.clone()), "host_fixed_kw_per_node");
        assert!(e.to_string().contains("host_fixed_kw_per_node"));
        assert!(
            FacilityModel::new(FacilityParams {
                cool_tau_s: Bounded::new(10.0, 5.0, 20.0),
                ..FacilityParams::default()
            })
            .is_err()
        );
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let m = model(FacilityParams::default());
        assert!(m.forward(Watts(f64::NAN), 1, &CoolingState::Settled).is_err());
        assert!(m.forward(Watts(-1.0), 1, &CoolingState::Settled).is_err());
        let bad_t = CoolingState::AfterStep {
            seconds: -1.0,
            pre_event: PreEvent::Unknown,
        };
        assert!(m.forward(Watts(1.0), 1, &bad_t).is_err());
        assert!(
            m.ceiling_budget(Kilowatts(f64::NAN), 1, &CoolingState::Settled)
                .is_err()
        );
        assert!(m.reduction_requirement(Kilowatts(-1.0), Timing::Settled).is_err());
        assert!(
            m.reduction_requirement(Kilowatts(1.0), Timing::After { seconds: f64::NAN })
                .is_err()
        );
        assert!(m.forward_reduction(Watts(f64::INFINITY), Timing::Settled).is_err());
    }

    #[test]
    fn params_serde_defaults_unknown_fields_and_fingerprint() {
        let p: FacilityParams = serde_json::from_str(r#"{"meter_err_kw": 50}"#).unwrap();
        assert_eq!(p.meter_err_kw, 50.0);
        assert_eq!(p.noise_kw, FacilityParams::default().noise_kw);
        assert!(serde_json::from_str::<FacilityParams>(r#"{"meter_error": 50}"#).is_err());
        assert!(
            serde_json::from_str::<FacilityParams>(r#"{"k_cool": {"nominal": 0.1, "lo": 0.0, "hi": 0.2, "mid": 1}}"#)
                .is_err()
        );
        let d = FacilityParams::default();
        let round: FacilityParams = serde_json::from_str(&serde_json::to_string(&d).unwrap()).unwrap();
        assert_eq!(round, d);
        assert_eq!(round.fingerprint(), d.fingerprint());
        assert_ne!(p.fingerprint(), d.fingerprint());
        assert_eq!(d.fingerprint_hex().len(), "fnv1a64:".len() + 16);
        // FNV-1a 64 reference vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn lag_fraction_shape() {
        assert_eq!(lag_fraction(0.0, 60.0, 300.0), 0.0);
        assert_eq!(lag_fraction(59.9, 60.0, 300.0), 0.0);
        assert!((lag_fraction(360.0, 60.0, 300.0) - (1.0 - (-1.0f64).exp())).abs() < 1e-12);
        assert_eq!(lag_fraction(61.0, 60.0, 0.0), 1.0);
        assert_eq!(lag_fraction(f64::NAN, 60.0, 300.0), 0.0);
    }

    #[test]
    fn forward_after_step_moves_from_pre_to_post() {
        let m = model(worked_example());
        let pre = PreEvent::GpuPower {
            gpu: Kilowatts(5200.0).to_watts(),
        };
        let now = Kilowatts(3000.0).to_watts();
        let at = |seconds| {
            m.forward(
                now,
                1000,
                &CoolingState::AfterStep {
                    seconds,
                    pre_event: pre,
                },
            )
            .unwrap()
        };
        let settled = m.forward(now, 1000, &CoolingState::Settled).unwrap();
        let early = at(0.0);
        let late = at(1.0e6);
        assert!(early.nominal > settled.nominal);
        assert!((late.nominal.value() - settled.nominal.value()).abs() < 1e-6);
        // Nominal point agrees with the nominal estimate.
        let pt = m.params().nominal_point();
        let direct = pt.meter_after_step(Kilowatts(5200.0).to_watts(), now, 1000, 700.0);
        assert!((at(700.0).nominal.value() - direct.value()).abs() < 1e-9);
    }
}
