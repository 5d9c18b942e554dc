//! Simulated GPUs, each running a synthetic training job: the agent, the gateway and their
//! tests can exercise capping end to end on a machine without GPUs.
//!
//! The model, per GPU:
//! - **Uncapped draw** is 86–97 % of the maximum limit (602–679 W on an H200), different per GPU
//!   and stable per host and index, with a ±1.5 % wobble of period 6 s (training steps).
//! - **Capped draw** follows the enforced limit with first-order settling, time constant
//!   [`SimOptions::tau_s`] (0.3 s: within 4 % of the step after 1 s, as NVML's 1 s power
//!   averaging would show it): `draw(t) = min(uncapped(t), f(t))` with
//!   `f(t) = to + (from − to)·exp(−(t − t0)/τ)`, where a limit change at `t0` starts `f` at the
//!   draw of that moment. The formula is closed-form, so reading at any explicit time is exact.
//! - **Enforced limit** = min(requested, out-of-band limit): a BMC limit can be configured per GPU
//!   ([`SimOptions::oob_limit_w`]) and changed at run time ([`SimGpus::set_oob_limit`]).
//! - **Memory activity** (DRAM active ratio, memory-copy utilisation) scales with
//!   `(draw/uncapped)^0.8`: when the cap throttles the clocks, the job issues fewer memory
//!   requests per second.
//! - **Energy** integrates the draw (trapezoids of at most 50 ms, bounded in count).
//!
//! Time comes from a [`Clock`], so tests step it by hand.

use super::{GpuControl, GpuError, GpuInfo, Limits, Readings};
use crate::api::GpuBackend;
use crate::clock::Clock;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

/// How the simulated GPUs look. Defaults model an H200 SXM: 200–700 W, default 700 W.
#[derive(Debug, Clone, PartialEq)]
pub struct SimOptions {
    /// Host name, part of each UUID (`GPU-sim-<host>-<i>`) so UUIDs differ between agents.
    pub host: String,
    /// Number of GPUs.
    pub gpus: u32,
    /// Product name.
    pub name: String,
    /// Lowest settable limit, W.
    pub min_w: f64,
    /// Default limit, W.
    pub default_w: f64,
    /// Highest settable limit, W.
    pub max_w: f64,
    /// Out-of-band limits by GPU index, W: `enforced = min(requested, oob)`.
    pub oob_limit_w: BTreeMap<u32, f64>,
    /// Requested limit at start by GPU index, W (default: `default_w`), to model a node whose
    /// limits were not at default before an event.
    pub initial_limit_w: BTreeMap<u32, f64>,
    /// Settling time constant, s.
    pub tau_s: f64,
    /// DRAM activity (0–1) of every GPU when uncapped; `None`: 0.35–0.55 per GPU, seeded by host
    /// and index. Lets a test or demo give a node a memory-bound (flexible) or compute-bound job,
    /// which is what the gateway's telemetry PFI predictor reads.
    pub dram_active: Option<f64>,
    /// Memory-copy utilisation (%) of every GPU when uncapped; `None`: 25–40 % per GPU, seeded.
    pub mem_copy_util_pct: Option<f64>,
}

impl SimOptions {
    /// H200 defaults for `gpus` GPUs on `host`.
    #[must_use]
    pub fn h200(host: &str, gpus: u32) -> Self {
        Self {
            host: host.to_owned(),
            gpus,
            name: "NVIDIA H200".to_owned(),
            min_w: 200.0,
            default_w: 700.0,
            max_w: 700.0,
            oob_limit_w: BTreeMap::new(),
            initial_limit_w: BTreeMap::new(),
            tau_s: 0.3,
            dram_active: None,
            mem_copy_util_pct: None,
        }
    }
}

/// Why simulated GPUs could not be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("invalid simulated GPU options: {0}")]
pub struct SimError(pub String);

/// Most simulated GPUs per agent.
pub const MAX_SIM_GPUS: u32 = 64;

#[derive(Debug)]
struct SimGpu {
    requested_mw: u32,
    oob_mw: Option<u32>,
    uncapped_base_w: f64,
    wobble_w: f64,
    phase: f64,
    dram_base: f64,
    copy_base_pct: f64,
    filt_from_w: f64,
    filt_to_w: f64,
    filt_t0: DateTime<Utc>,
    energy_mj: f64,
    energy_t: DateTime<Utc>,
    fault: Option<GpuError>,
}

struct Inner {
    gpus: Vec<GpuInfo>,
    state: Mutex<Vec<SimGpu>>,
    clock: Arc<dyn Clock>,
    start: DateTime<Utc>,
    tau_s: f64,
}

/// A handle to a set of simulated GPUs; clones share the same GPUs, so a test can keep one
/// handle while the agent owns another.
#[derive(Clone)]
pub struct SimGpus {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SimGpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimGpus")
            .field("gpus", &self.inner.gpus.len())
            .finish_non_exhaustive()
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A deterministic number in [0, 1) from a seed and a salt.
fn unit(seed: u64, salt: u64) -> f64 {
    let mut x = seed ^ salt.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    // 53 random bits into a double in [0, 1); the shift keeps the value below 2^53 (exact).
    #[allow(clippy::cast_precision_loss)]
    let v = (x >> 11) as f64 / (1u64 << 53) as f64;
    v
}

fn w_to_mw(w: f64) -> u32 {
    // Callers pass validated, finite, non-negative values far below u32::MAX mW.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let mw = (w * 1000.0).round().clamp(0.0, f64::from(u32::MAX)) as u32;
    mw
}

fn secs(d: chrono::TimeDelta) -> f64 {
    // Microsecond resolution; a span too large for i64 µs (292,000 years) saturates.
    #[allow(clippy::cast_precision_loss)]
    let s = d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6;
    s
}

impl SimGpus {
    /// Build `options.gpus` GPUs with limits at their initial values, reading time from `clock`.
    pub fn new(options: &SimOptions, clock: Arc<dyn Clock>) -> Result<Self, SimError> {
        let o = options;
        if o.gpus == 0 || o.gpus > MAX_SIM_GPUS {
            return Err(SimError(format!("gpus must be 1 to {MAX_SIM_GPUS}, got {}", o.gpus)));
        }
        let finite = [o.min_w, o.default_w, o.max_w, o.tau_s].iter().all(|v| v.is_finite());
        if !finite || o.min_w <= 0.0 || o.min_w > o.default_w || o.default_w > o.max_w || o.max_w > 10_000.0 {
            return Err(SimError(format!(
                "need 0 < min_w <= default_w <= max_w <= 10000 W, got {} / {} / {}",
                o.min_w, o.default_w, o.max_w
            )));
        }
        if o.tau_s <= 0.0 || o.tau_s > 60.0 {
            return Err(SimError(format!("tau_s must be in (0, 60] s, got {}", o.tau_s)));
        }
        for (what, map) in [("oob_limit_w", &o.oob_limit_w), ("initial_limit_w", &o.initial_limit_w)] {
            for (&i, &w) in map {
                if i >= o.gpus {
                    return Err(SimError(format!(
                        "{what} names GPU {i}, but there are only {} GPUs",
                        o.gpus
                    )));
                }
                if !w.is_finite() || w <= 0.0 || w > o.max_w * 2.0 {
                    return Err(SimError(format!("{what} for GPU {i} = {w} W is not a plausible limit")));
                }
            }
        }
        if let Some(d) = o.dram_active
            && !(0.0..=1.0).contains(&d)
        {
            return Err(SimError(format!("dram_active must be in [0, 1], got {d}")));
        }
        if let Some(c) = o.mem_copy_util_pct
            && !(0.0..=100.0).contains(&c)
        {
            return Err(SimError(format!("mem_copy_util_pct must be in [0, 100] %, got {c}")));
        }
        for (&i, &w) in &o.initial_limit_w {
            if w < o.min_w || w > o.max_w {
                return Err(SimError(format!(
                    "initial_limit_w for GPU {i} = {w} W is outside [{}, {}] W",
                    o.min_w, o.max_w
                )));
            }
        }
        let host: String = o
            .host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .take(64)
            .collect();
        let now = clock.now();
        let mut infos = Vec::new();
        let mut state = Vec::new();
        for i in 0..o.gpus {
            let seed = fnv1a(format!("{host}/{i}").as_bytes());
            let requested_mw = w_to_mw(o.initial_limit_w.get(&i).copied().unwrap_or(o.default_w));
            let oob_mw = o.oob_limit_w.get(&i).map(|&w| w_to_mw(w));
            infos.push(GpuInfo {
                uuid: format!("GPU-sim-{host}-{i}"),
                index: i,
                minor: i,
                pci: format!("00000000:{:02X}:00.0", 0x18 + i),
                name: o.name.clone(),
                min_mw: w_to_mw(o.min_w),
                default_mw: w_to_mw(o.default_w),
                max_mw: w_to_mw(o.max_w),
            });
            let enforced_w = f64::from(requested_mw.min(oob_mw.unwrap_or(u32::MAX))) / 1000.0;
            let uncapped_base_w = o.max_w * (0.86 + 0.11 * unit(seed, 1));
            let start_draw = uncapped_base_w.min(enforced_w);
            state.push(SimGpu {
                requested_mw,
                oob_mw,
                uncapped_base_w,
                wobble_w: 0.015 * o.max_w,
                phase: std::f64::consts::TAU * unit(seed, 2),
                dram_base: o.dram_active.unwrap_or_else(|| 0.35 + 0.2 * unit(seed, 3)),
                copy_base_pct: o.mem_copy_util_pct.unwrap_or_else(|| 25.0 + 15.0 * unit(seed, 4)),
                filt_from_w: start_draw,
                filt_to_w: enforced_w,
                filt_t0: now,
                // Energy since a (fictitious) driver load some hours ago, so counters differ.
                energy_mj: 1.0e9 * (1.0 + unit(seed, 5)),
                energy_t: now,
                fault: None,
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                gpus: infos,
                state: Mutex::new(state),
                clock,
                start: now,
                tau_s: o.tau_s,
            }),
        })
    }

    fn uncapped_w(&self, g: &SimGpu, t: DateTime<Utc>) -> f64 {
        let s = secs(t - self.inner.start);
        g.uncapped_base_w + g.wobble_w * (std::f64::consts::TAU * s / 6.0 + g.phase).sin()
    }

    fn draw_w(&self, g: &SimGpu, t: DateTime<Utc>) -> f64 {
        let dt = secs(t - g.filt_t0).max(0.0);
        let f = g.filt_to_w + (g.filt_from_w - g.filt_to_w) * (-dt / self.inner.tau_s).exp();
        self.uncapped_w(g, t).min(f)
    }

    /// Advance the energy counter to `t` (trapezoids of at most 50 ms, at most 2,000 of them).
    fn integrate(&self, g: &mut SimGpu, t: DateTime<Utc>) {
        let total = secs(t - g.energy_t);
        if total <= 0.0 {
            return;
        }
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let n = (total / 0.05).ceil().clamp(1.0, 2000.0) as u32;
        let step = (t - g.energy_t) / i32::try_from(n).unwrap_or(1);
        let mut a = g.energy_t;
        let mut pa = self.draw_w(g, a);
        let mut joules = 0.0;
        for k in 1..=n {
            let b = if k == n { t } else { a + step };
            let pb = self.draw_w(g, b);
            joules += 0.5 * (pa + pb) * secs(b - a);
            a = b;
            pa = pb;
        }
        g.energy_mj += joules * 1000.0;
        g.energy_t = t;
    }

    fn enforced_mw(g: &SimGpu) -> u32 {
        g.requested_mw.min(g.oob_mw.unwrap_or(u32::MAX))
    }

    /// Restart the settling filter at `t` towards the current enforced limit.
    fn retarget(&self, g: &mut SimGpu, t: DateTime<Utc>) {
        self.integrate(g, t);
        g.filt_from_w = self.draw_w(g, t);
        g.filt_to_w = f64::from(Self::enforced_mw(g)) / 1000.0;
        g.filt_t0 = t;
    }

    fn with_gpu<T>(&self, index: u32, f: impl FnOnce(&mut SimGpu) -> Result<T, GpuError>) -> Result<T, GpuError> {
        let mut state = self.inner.state.lock().unwrap_or_else(PoisonError::into_inner);
        let g = state.get_mut(index as usize).ok_or(GpuError::NoSuchGpu(index))?;
        f(g)
    }

    /// Set or clear an out-of-band (BMC) limit on a GPU, W, as a site operator might.
    pub fn set_oob_limit(&self, index: u32, limit_w: Option<f64>) -> Result<(), GpuError> {
        let now = self.inner.clock.now();
        self.with_gpu(index, |g| {
            g.oob_mw = limit_w.map(w_to_mw);
            self.retarget(g, now);
            Ok(())
        })
    }

    /// Make a GPU fail: `NoPermission`/`NotSupported`/`InvalidArgument` fail writes only (as on
    /// real GPUs, reads still work); `GpuLost`/`Driver` fail every call. `None` heals it.
    /// A testing aid for the error paths.
    pub fn set_fault(&self, index: u32, fault: Option<GpuError>) -> Result<(), GpuError> {
        self.with_gpu(index, |g| {
            g.fault = fault;
            Ok(())
        })
    }

    /// Reset a GPU's requested limit to its default without going through the agent, as a GPU
    /// reset or driver reload would: a testing aid for drift correction.
    pub fn reset_to_default(&self, index: u32) -> Result<(), GpuError> {
        let now = self.inner.clock.now();
        let default_mw = self
            .inner
            .gpus
            .get(index as usize)
            .ok_or(GpuError::NoSuchGpu(index))?
            .default_mw;
        self.with_gpu(index, |g| {
            g.requested_mw = default_mw;
            self.retarget(g, now);
            Ok(())
        })
    }
}

fn read_fault(g: &SimGpu) -> Result<(), GpuError> {
    match &g.fault {
        Some(e @ (GpuError::GpuLost | GpuError::Driver(_) | GpuError::NoSuchGpu(_))) => Err(e.clone()),
        _ => Ok(()),
    }
}

impl GpuControl for SimGpus {
    fn backend(&self) -> GpuBackend {
        GpuBackend::Simulated
    }

    fn gpus(&self) -> &[GpuInfo] {
        &self.inner.gpus
    }

    fn limits(&self, index: u32) -> Result<Limits, GpuError> {
        self.with_gpu(index, |g| {
            read_fault(g)?;
            Ok(Limits {
                requested_mw: g.requested_mw,
                enforced_mw: Self::enforced_mw(g),
            })
        })
    }

    fn set_limit(&self, index: u32, limit_mw: u32) -> Result<(), GpuError> {
        let now = self.inner.clock.now();
        let info = self.inner.gpus.get(index as usize).ok_or(GpuError::NoSuchGpu(index))?;
        if limit_mw < info.min_mw || limit_mw > info.max_mw {
            return Err(GpuError::InvalidArgument(format!(
                "{limit_mw} mW is outside [{}, {}] mW",
                info.min_mw, info.max_mw
            )));
        }
        self.with_gpu(index, |g| {
            if let Some(e) = &g.fault {
                return Err(e.clone());
            }
            if g.requested_mw != limit_mw {
                g.requested_mw = limit_mw;
                self.retarget(g, now);
            }
            Ok(())
        })
    }

    fn readings(&self, index: u32) -> Result<Readings, GpuError> {
        let now = self.inner.clock.now();
        self.with_gpu(index, |g| {
            read_fault(g)?;
            self.integrate(g, now);
            let draw = self.draw_w(g, now);
            let activity = (draw / self.uncapped_w(g, now)).clamp(0.0, 1.0).powf(0.8);
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let energy_mj = g.energy_mj.max(0.0) as u64;
            Ok(Readings {
                power_mw: w_to_mw(draw),
                energy_mj: Some(energy_mj),
                dram_active: Some(g.dram_base * activity),
                mem_copy_util_pct: Some((g.copy_base_pct * activity).round()),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use chrono::TimeDelta;

    #[test]
    fn memory_activity_can_be_set_for_every_gpu_and_is_range_checked() {
        let clock = Arc::new(ManualClock::new(Utc::now()));
        let mut o = SimOptions::h200("mem", 2);
        o.dram_active = Some(0.5);
        o.mem_copy_util_pct = Some(40.0);
        let gpus = SimGpus::new(&o, clock.clone()).expect("valid");
        for i in 0..2 {
            let r = gpus.readings(i).expect("readings");
            let dram = r.dram_active.expect("dram");
            // Uncapped: activity ≈ 1, so the readings are the configured values (± wobble).
            assert!((dram - 0.5).abs() < 0.03, "{dram}");
            assert!((r.mem_copy_util_pct.expect("copy") - 40.0).abs() <= 2.0);
        }
        for (dram, copy) in [
            (Some(1.5), None),
            (Some(-0.1), None),
            (None, Some(101.0)),
            (Some(f64::NAN), None),
        ] {
            let mut bad = SimOptions::h200("mem", 1);
            bad.dram_active = dram;
            bad.mem_copy_util_pct = copy;
            assert!(SimGpus::new(&bad, clock.clone()).is_err(), "{dram:?} {copy:?}");
        }
    }

    fn setup(opts: SimOptions) -> (SimGpus, Arc<ManualClock>) {
        let start = DateTime::parse_from_rfc3339("2026-06-01T12:00:00Z")
            .expect("valid")
            .to_utc();
        let clock = Arc::new(ManualClock::new(start));
        let sim = SimGpus::new(&opts, clock.clone()).expect("valid options");
        (sim, clock)
    }

    fn power_w(sim: &SimGpus, i: u32) -> f64 {
        f64::from(sim.readings(i).expect("readable").power_mw) / 1000.0
    }

    #[test]
    fn uncapped_draw_varies_per_gpu_within_600_to_700_w() {
        let (sim, _clock) = setup(SimOptions::h200("node-a", 8));
        let draws: Vec<f64> = (0..8).map(|i| power_w(&sim, i)).collect();
        for d in &draws {
            assert!((590.0..=700.0).contains(d), "{draws:?}");
        }
        let spread = draws.iter().copied().fold(f64::MIN, f64::max) - draws.iter().copied().fold(f64::MAX, f64::min);
        assert!(spread > 10.0, "GPUs should differ: {draws:?}");
        assert_eq!(sim.gpus()[3].uuid, "GPU-sim-node-a-3");
        assert_eq!(sim.gpus()[3].minor, 3);
    }

    #[test]
    fn power_settles_to_the_cap_within_about_a_second() {
        let (sim, clock) = setup(SimOptions::h200("n", 2));
        let before = power_w(&sim, 0);
        assert!(before > 590.0);
        sim.set_limit(0, 300_000).expect("in range");
        // Right after the write the draw has barely moved (first-order, not a step).
        assert!(power_w(&sim, 0) > 590.0);
        clock.advance(TimeDelta::milliseconds(300));
        let at_tau = power_w(&sim, 0);
        assert!(
            at_tau > 300.0 + 0.3 * (before - 300.0) && at_tau < 300.0 + 0.45 * (before - 300.0),
            "{at_tau}"
        );
        clock.advance(TimeDelta::milliseconds(700));
        let at_1s = power_w(&sim, 0);
        assert!((at_1s - 300.0).abs() < 0.05 * 300.0, "after 1 s: {at_1s}");
        clock.advance(TimeDelta::seconds(1));
        assert!((power_w(&sim, 0) - 300.0).abs() < 1.0);
        // GPU 1 was not touched.
        assert!(power_w(&sim, 1) > 590.0);
        // Raising the cap lets the draw climb back to the uncapped level.
        sim.set_limit(0, 700_000).expect("in range");
        clock.advance(TimeDelta::seconds(3));
        assert!(power_w(&sim, 0) > 590.0);
    }

    #[test]
    fn out_of_band_limit_bounds_the_enforced_limit() {
        let mut opts = SimOptions::h200("n", 2);
        opts.oob_limit_w.insert(0, 450.0);
        let (sim, clock) = setup(opts);
        let l = sim.limits(0).expect("readable");
        assert_eq!(
            l,
            Limits {
                requested_mw: 700_000,
                enforced_mw: 450_000
            }
        );
        clock.advance(TimeDelta::seconds(2));
        assert!(power_w(&sim, 0) <= 450.5);
        sim.set_limit(0, 300_000).expect("in range");
        assert_eq!(sim.limits(0).expect("readable").enforced_mw, 300_000);
        sim.set_oob_limit(0, None).expect("gpu exists");
        assert_eq!(sim.limits(0).expect("readable").enforced_mw, 300_000);
    }

    #[test]
    fn memory_activity_falls_with_the_cap_and_energy_accumulates() {
        let (sim, clock) = setup(SimOptions::h200("n", 1));
        let r0 = sim.readings(0).expect("readable");
        clock.advance(TimeDelta::seconds(10));
        let r1 = sim.readings(0).expect("readable");
        let joules = (r1.energy_mj.expect("sim energy") - r0.energy_mj.expect("sim energy")) as f64 / 1000.0;
        let avg_w = joules / 10.0;
        assert!((590.0..=700.0).contains(&avg_w), "average {avg_w} W");
        sim.set_limit(0, 250_000).expect("in range");
        clock.advance(TimeDelta::seconds(3));
        let r2 = sim.readings(0).expect("readable");
        let (d1, d2) = (r1.dram_active.expect("sim has it"), r2.dram_active.expect("sim has it"));
        assert!(d2 < d1 && d2 > 0.0 && d1 <= 1.0, "{d1} -> {d2}");
        assert!(r2.mem_copy_util_pct < r1.mem_copy_util_pct);
    }

    #[test]
    fn out_of_range_writes_and_faults_fail_like_nvml() {
        let (sim, _clock) = setup(SimOptions::h200("n", 2));
        assert!(matches!(sim.set_limit(0, 100_000), Err(GpuError::InvalidArgument(_))));
        assert!(matches!(sim.set_limit(0, 800_000), Err(GpuError::InvalidArgument(_))));
        assert_eq!(sim.set_limit(9, 300_000), Err(GpuError::NoSuchGpu(9)));
        sim.set_fault(1, Some(GpuError::NoPermission)).expect("gpu exists");
        assert_eq!(sim.set_limit(1, 300_000), Err(GpuError::NoPermission));
        assert!(sim.limits(1).is_ok(), "reads still work without permission");
        sim.set_fault(1, Some(GpuError::GpuLost)).expect("gpu exists");
        assert_eq!(sim.limits(1), Err(GpuError::GpuLost));
        sim.set_fault(1, None).expect("gpu exists");
        assert!(sim.set_limit(1, 300_000).is_ok());
    }

    #[test]
    fn bad_options_are_refused() {
        let clock: Arc<dyn Clock> = Arc::new(crate::clock::SystemClock);
        let mut o = SimOptions::h200("n", 0);
        assert!(SimGpus::new(&o, clock.clone()).is_err());
        o.gpus = 2;
        o.oob_limit_w.insert(5, 400.0);
        assert!(SimGpus::new(&o, clock.clone()).is_err());
        let mut o = SimOptions::h200("n", 2);
        o.initial_limit_w.insert(0, 100.0);
        assert!(SimGpus::new(&o, clock.clone()).is_err());
        let mut o = SimOptions::h200("n", 2);
        o.min_w = f64::NAN;
        assert!(SimGpus::new(&o, clock).is_err());
    }
}
