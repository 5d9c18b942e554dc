//! Real GPUs through NVML (`nvml-wrapper` 0.13).
//!
//! `nvml-wrapper` loads `libnvidia-ml.so.1` at run time, so this module builds on machines
//! without a driver; [`NvmlGpus::open`] then fails with [`NvmlOpenError::DriverNotFound`] and the
//! binary tells the operator to use `--simulate`. Opening only reads: identity, the settable
//! range (per GPU, never hard-coded) and the default limit. Writing is left to the lease logic
//! and to [`super::self_test`].

use super::{DriverInventory, GpuControl, GpuError, GpuInfo, Limits, Readings};
use crate::api::GpuBackend;
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

/// Why NVML could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum NvmlOpenError {
    /// `libnvidia-ml.so.1` is not there: no driver on this machine.
    #[error("no NVIDIA driver found (libnvidia-ml.so.1 could not be loaded): {0}; use --simulate for simulated GPUs")]
    DriverNotFound(String),
    /// The library loaded but the kernel driver is not running.
    #[error(
        "the NVIDIA driver is not loaded (libnvidia-ml.so.1 found, kernel module missing): {0}; load the driver, or use --simulate for simulated GPUs"
    )]
    DriverNotLoaded(String),
    /// Any other initialisation failure.
    #[error("NVML initialisation failed: {0}")]
    Init(String),
    /// A GPU could not be described at start.
    #[error("reading GPU {index} failed ({call}): {source}")]
    Device {
        /// NVML index of the GPU.
        index: u32,
        /// The NVML call that failed.
        call: &'static str,
        /// The classified error.
        source: GpuError,
    },
}

/// Map an NVML error to the protocol's classes (the per-GPU statuses listed under "Protocol" in
/// `adapters/agent/README.md`).
#[must_use]
pub fn classify(e: &NvmlError) -> GpuError {
    match e {
        NvmlError::NoPermission => GpuError::NoPermission,
        NvmlError::NotSupported => GpuError::NotSupported,
        NvmlError::GpuLost | NvmlError::ResetRequired => GpuError::GpuLost,
        NvmlError::InvalidArg => GpuError::InvalidArgument(e.to_string()),
        NvmlError::NotFound => GpuError::Driver("GPU not found".to_owned()),
        other => GpuError::Driver(other.to_string()),
    }
}

/// Map an error of `Nvml::init` to why the agent cannot start.
#[must_use]
pub fn classify_init(e: &NvmlError) -> NvmlOpenError {
    match e {
        NvmlError::LibloadingError(_) | NvmlError::LibraryNotFound | NvmlError::FailedToLoadSymbol(_) => {
            NvmlOpenError::DriverNotFound(e.to_string())
        }
        NvmlError::DriverNotLoaded => NvmlOpenError::DriverNotLoaded(e.to_string()),
        other => NvmlOpenError::Init(other.to_string()),
    }
}

/// The node's GPUs through NVML. NVML stays initialised while this lives, so limits are not
/// lost to driver unload between calls.
pub struct NvmlGpus {
    nvml: Nvml,
    gpus: Vec<GpuInfo>,
    unavailable: Vec<crate::api::UnavailableGpu>,
}

impl std::fmt::Debug for NvmlGpus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlGpus")
            .field("gpus", &self.gpus)
            .finish_non_exhaustive()
    }
}

impl NvmlGpus {
    /// Load NVML and describe every GPU (read-only).
    ///
    /// A GPU that cannot be described (lost, unreadable) is left out and reported
    /// ([`GpuControl::unavailable`]); the others are served: one lost GPU must not stop the
    /// agent, or the caps left on the other GPUs could never be restored by its dead-man switch.
    pub fn open() -> Result<Self, NvmlOpenError> {
        let nvml = Nvml::init().map_err(|e| classify_init(&e))?;
        let count = nvml.device_count().map_err(|e| NvmlOpenError::Init(e.to_string()))?;
        let mut gpus = Vec::new();
        let mut unavailable = Vec::new();
        for index in 0..count {
            match describe(&nvml, index) {
                Ok(gpu) => gpus.push(gpu),
                Err(e) => {
                    tracing::error!(gpu = index, "left out: {e}; serving the other GPUs");
                    unavailable.push(crate::api::UnavailableGpu {
                        index,
                        reason: e.to_string(),
                    });
                }
            }
        }
        Ok(Self {
            nvml,
            gpus,
            unavailable,
        })
    }

    fn info(&self, index: u32) -> Result<&GpuInfo, GpuError> {
        self.gpus
            .iter()
            .find(|g| g.index == index)
            .ok_or(GpuError::NoSuchGpu(index))
    }

    /// The GPU the agent knows as `index`, found by its UUID, never by NVML's index: when a GPU
    /// falls off the bus or a driver reload lists the GPUs anew, NVML's indices shift, and
    /// index `i` would then be another GPU, which would take this GPU's cap. A GPU the driver
    /// no longer lists is [`GpuError::NotListed`].
    fn device(&self, index: u32) -> Result<nvml_wrapper::Device<'_>, GpuError> {
        let uuid = self.info(index)?.uuid.as_str();
        self.nvml.device_by_uuid(uuid).map_err(|e| match e {
            NvmlError::NotFound => GpuError::NotListed,
            other => classify(&other),
        })
    }
}

fn describe(nvml: &Nvml, index: u32) -> Result<GpuInfo, NvmlOpenError> {
    let err = |call: &'static str| {
        move |e: NvmlError| NvmlOpenError::Device {
            index,
            call,
            source: classify(&e),
        }
    };
    let dev = nvml.device_by_index(index).map_err(err("device_by_index"))?;
    let constraints = dev
        .power_management_limit_constraints()
        .map_err(err("power_management_limit_constraints"))?;
    let default_mw = dev
        .power_management_limit_default()
        .map_err(err("power_management_limit_default"))?;
    // A range that cannot be right would clamp every cap wrongly: the GPU is refused.
    super::check_constraints(constraints.min_limit, default_mw, constraints.max_limit).map_err(|source| {
        NvmlOpenError::Device {
            index,
            call: "power_management_limit_constraints",
            source,
        }
    })?;
    Ok(GpuInfo {
        uuid: dev.uuid().map_err(err("uuid"))?,
        index,
        minor: dev.minor_number().map_err(err("minor_number"))?,
        pci: dev.pci_info().map(|p| p.bus_id).unwrap_or_default(),
        name: dev.name().unwrap_or_else(|_| "NVIDIA GPU".to_owned()),
        min_mw: constraints.min_limit,
        default_mw,
        max_mw: constraints.max_limit,
    })
}

/// Most MIG devices counted on one GPU: NVML's maximum is 7 today; the bound keeps a driver
/// answering nonsense from costing thousands of calls.
const MAX_MIG_DEVICES: u32 = 16;

/// The MIG instances of `dev`: `None` when MIG mode is off or not supported, else the number
/// of MIG devices that exist (NVML answers a handle for each, and NOT_FOUND for a free slot).
fn mig_instances(dev: &nvml_wrapper::Device<'_>) -> Result<Option<u32>, GpuError> {
    match dev.mig_mode() {
        // NVML_DEVICE_MIG_ENABLE is 1, DISABLE 0.
        Ok(mode) if mode.current != 0 => {}
        Ok(_) | Err(NvmlError::NotSupported) => return Ok(None),
        Err(e) => return Err(classify(&e)),
    }
    let slots = match dev.mig_device_count() {
        Ok(n) => n.min(MAX_MIG_DEVICES),
        Err(NvmlError::NotSupported) => return Ok(None),
        Err(e) => return Err(classify(&e)),
    };
    let mut instances = 0;
    for slot in 0..slots {
        match dev.mig_device_by_index(slot) {
            Ok(_) => instances += 1,
            Err(NvmlError::NotFound | NvmlError::InvalidArg) => {}
            Err(e) => return Err(classify(&e)),
        }
    }
    Ok(Some(instances))
}

/// What `flexgate-agent device-check` prints: the driver and every GPU as NVML describes them,
/// read-only. A site runs it on a GPU node before enabling the agent.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceReport {
    /// The driver's version.
    pub driver_version: Option<String>,
    /// NVML's version.
    pub nvml_version: Option<String>,
    /// Whether this process could set power limits (CAP_SYS_ADMIN, which root has), and why.
    pub can_set_limits: String,
    /// One per GPU the driver lists.
    pub gpus: Vec<GpuReport>,
}

/// One GPU in a [`DeviceReport`]; a field the driver would not give is `null`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GpuReport {
    /// NVML index.
    pub index: u32,
    /// What NVML describes (`null` with `error` when it could not).
    pub gpu: Option<GpuInfo>,
    /// Requested power limit, W.
    pub limit_w: Option<f64>,
    /// Enforced power limit (all limiters), W.
    pub enforced_w: Option<f64>,
    /// Power draw, W.
    pub power_w: Option<f64>,
    /// Persistence mode.
    pub persistence: Option<bool>,
    /// MIG mode (current).
    pub mig: Option<bool>,
    /// MIG instances, when MIG mode is on (one power limit serves them all).
    pub mig_instances: Option<u32>,
    /// Why the GPU could not be described.
    pub error: Option<String>,
}

/// Read the driver and every GPU, changing nothing.
pub fn device_report() -> Result<DeviceReport, NvmlOpenError> {
    let nvml = Nvml::init().map_err(|e| classify_init(&e))?;
    let count = nvml.device_count().map_err(|e| NvmlOpenError::Init(e.to_string()))?;
    let w = |mw: u32| f64::from(mw) / 1000.0;
    let gpus = (0..count)
        .map(|index| {
            let described = describe(&nvml, index);
            let dev = nvml.device_by_index(index).ok();
            GpuReport {
                index,
                limit_w: dev.as_ref().and_then(|d| d.power_management_limit().ok()).map(w),
                enforced_w: dev.as_ref().and_then(|d| d.enforced_power_limit().ok()).map(w),
                power_w: dev.as_ref().and_then(|d| d.power_usage().ok()).map(w),
                persistence: dev.as_ref().and_then(|d| d.is_in_persistent_mode().ok()),
                mig: dev.as_ref().and_then(|d| d.mig_mode().ok()).map(|m| m.current != 0), // NVML_DEVICE_MIG_ENABLE is 1, DISABLE 0
                mig_instances: dev.as_ref().and_then(|d| mig_instances(d).ok().flatten()),
                error: described.as_ref().err().map(ToString::to_string),
                gpu: described.ok(),
            }
        })
        .collect();
    Ok(DeviceReport {
        driver_version: nvml.sys_driver_version().ok(),
        nvml_version: nvml.sys_nvml_version().ok(),
        can_set_limits: can_set_limits(),
        gpus,
    })
}

/// Whether this process holds CAP_SYS_ADMIN (bit 21 of `CapEff` in /proc/self/status), which
/// setting a power limit needs.
fn can_set_limits() -> String {
    const CAP_SYS_ADMIN: u32 = 21;
    let effective = std::fs::read_to_string("/proc/self/status").ok().and_then(|status| {
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    });
    match effective {
        Some(caps) if caps & (1 << CAP_SYS_ADMIN) != 0 => "yes: this process holds CAP_SYS_ADMIN".into(),
        Some(_) => "no: this process lacks CAP_SYS_ADMIN (run the agent as root or grant it the capability)".into(),
        None => "unknown: /proc/self/status has no CapEff line".into(),
    }
}

impl GpuControl for NvmlGpus {
    fn backend(&self) -> GpuBackend {
        GpuBackend::Nvml
    }

    fn gpus(&self) -> &[GpuInfo] {
        &self.gpus
    }

    fn unavailable(&self) -> Vec<crate::api::UnavailableGpu> {
        self.unavailable.clone()
    }

    fn persistence(&self, index: u32) -> Result<Option<bool>, GpuError> {
        let dev = self.device(index)?;
        match dev.is_in_persistent_mode() {
            Ok(on) => Ok(Some(on)),
            Err(NvmlError::NotSupported) => Ok(None),
            Err(e) => Err(classify(&e)),
        }
    }

    /// Checked against the GPU's own constraints ([`super::check_limits`]): a limit no GPU of
    /// this range can hold is refused, so it is never saved as a pre-event limit nor taken as
    /// a confirmed cap.
    fn limits(&self, index: u32) -> Result<Limits, GpuError> {
        let dev = self.device(index)?;
        let limits = Limits {
            requested_mw: dev.power_management_limit().map_err(|e| classify(&e))?,
            enforced_mw: dev.enforced_power_limit().map_err(|e| classify(&e))?,
        };
        super::check_limits(self.info(index)?, limits)
    }

    fn mig_instances(&self, index: u32) -> Result<Option<u32>, GpuError> {
        mig_instances(&self.device(index)?)
    }

    fn inventory(&self) -> Result<Option<DriverInventory>, GpuError> {
        let count = self.nvml.device_count().map_err(|e| classify(&e))?;
        let uuids = (0..count)
            .filter_map(|i| self.nvml.device_by_index(i).and_then(|d| d.uuid()).ok())
            .collect();
        Ok(Some(DriverInventory { count, uuids }))
    }

    fn set_limit(&self, index: u32, limit_mw: u32) -> Result<(), GpuError> {
        let mut dev = self.device(index)?;
        dev.set_power_management_limit(limit_mw).map_err(|e| classify(&e))
    }

    /// Power is required; the other fields degrade one by one (a counter the GPU does not
    /// offer, or that fails, is left out, not the whole reading). A power reading no GPU can
    /// draw (0, or over twice its maximum limit) is refused as the driver's error.
    fn readings(&self, index: u32) -> Result<Readings, GpuError> {
        let dev = self.device(index)?;
        let power_mw = dev.power_usage().map_err(|e| classify(&e))?;
        let max_mw = self
            .gpus
            .iter()
            .find(|g| g.index == index)
            .map_or(u32::MAX, |g| g.max_mw);
        if power_mw == 0 || u64::from(power_mw) > 2 * u64::from(max_mw) {
            return Err(GpuError::Implausible(format!(
                "power reading {power_mw} mW, which no GPU with a maximum limit of {max_mw} mW draws"
            )));
        }
        Ok(Readings {
            power_mw,
            energy_mj: dev.total_energy_consumption().ok(),
            dram_active: None,
            mem_copy_util_pct: dev.utilization_rates().ok().map(|u| f64::from(u.memory)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nvml_errors_are_classified() {
        assert_eq!(classify(&NvmlError::NoPermission), GpuError::NoPermission);
        assert_eq!(classify(&NvmlError::NotSupported), GpuError::NotSupported);
        assert_eq!(classify(&NvmlError::GpuLost), GpuError::GpuLost);
        assert_eq!(classify(&NvmlError::ResetRequired), GpuError::GpuLost);
        assert!(matches!(classify(&NvmlError::InvalidArg), GpuError::InvalidArgument(_)));
        assert!(matches!(classify(&NvmlError::Unknown), GpuError::Driver(_)));
        assert!(matches!(
            classify_init(&NvmlError::LibraryNotFound),
            NvmlOpenError::DriverNotFound(_)
        ));
        assert!(matches!(
            classify_init(&NvmlError::DriverNotLoaded),
            NvmlOpenError::DriverNotLoaded(_)
        ));
    }

    /// Read-only: on a machine without a driver, opening fails with the message the binary
    /// prints; on a machine with GPUs, every GPU is described with a sane range. Nothing is
    /// written either way.
    #[test]
    fn open_fails_cleanly_without_a_driver_or_reads_sane_ranges() {
        match NvmlGpus::open() {
            Err(NvmlOpenError::DriverNotFound(detail)) => {
                let msg = NvmlOpenError::DriverNotFound(detail).to_string();
                assert!(msg.contains("libnvidia-ml.so.1"), "{msg}");
                assert!(msg.contains("--simulate"), "{msg}");
            }
            Err(other) => {
                let msg = other.to_string();
                assert!(msg.contains("--simulate") || msg.contains("NVML"), "{msg}");
            }
            Ok(gpus) => {
                assert!(!gpus.gpus().is_empty());
                for g in gpus.gpus() {
                    assert!(g.uuid.starts_with("GPU-"), "{g:?}");
                    assert!(
                        g.min_mw > 0 && g.min_mw <= g.default_mw && g.default_mw <= g.max_mw,
                        "{g:?}"
                    );
                    let l = gpus.limits(g.index).expect("limits readable");
                    assert!(l.enforced_mw <= l.requested_mw.max(g.max_mw), "{l:?}");
                    let r = gpus.readings(g.index).expect("readings");
                    assert!(r.power_mw > 0, "{r:?}");
                }
            }
        }
    }
}
