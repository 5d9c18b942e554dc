//! GPU power control behind one small trait, with two implementations: [`nvml::NvmlGpus`] (real
//! GPUs through the NVIDIA driver) and [`sim::SimGpus`] (simulated GPUs running a synthetic
//! training load).
//!
//! The trait is synchronous because NVML is: the HTTP layer calls it from
//! `tokio::task::spawn_blocking`. It works in NVML's units (mW, mJ) and by NVML index; the
//! lease logic maps UUIDs to indices through [`GpuControl::gpus`].

pub mod deadline;
pub mod nvml;
pub mod sim;

use crate::api::{CapStatus, GpuBackend};

/// What does not change while the agent runs: identity and the settable range, read from the
/// driver once at start (ranges differ between PCIe/SXM/NVL variants and OEM VBIOSes, so they
/// are never hard-coded).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuInfo {
    /// NVML UUID (`GPU-…`).
    pub uuid: String,
    /// NVML index.
    pub index: u32,
    /// Device minor number (`/dev/nvidiaN`).
    pub minor: u32,
    /// PCI bus id.
    pub pci: String,
    /// Product name.
    pub name: String,
    /// Lowest settable power limit, mW.
    pub min_mw: u32,
    /// Default power limit, mW.
    pub default_mw: u32,
    /// Highest settable power limit, mW.
    pub max_mw: u32,
}

/// The two limits a GPU reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The software limit last set (`nvidia-smi power.limit`), mW: what the agent writes and
    /// what it saves as the pre-event limit.
    pub requested_mw: u32,
    /// The limit in force, the minimum over every limiter including out-of-band ones
    /// (`enforced.power.limit`), mW.
    pub enforced_mw: u32,
}

/// Measurements for telemetry.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Readings {
    /// Power draw, mW.
    pub power_mw: u32,
    /// Energy since driver load, mJ; `None` where the counter cannot be read (readings
    /// degrade field by field: a missing counter does not hide the power reading).
    pub energy_mj: Option<u64>,
    /// Fraction of cycles the DRAM interface is active, 0–1 (`DCGM_FI_PROF_DRAM_ACTIVE`);
    /// a DCGM profiling metric that plain NVML does not offer, hence optional.
    pub dram_active: Option<f64>,
    /// Memory-copy utilisation, % (`DCGM_FI_DEV_MEM_COPY_UTIL`, NVML's memory utilisation).
    pub mem_copy_util_pct: Option<f64>,
}

/// A driver call that failed, classified by what the gateway must do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// The agent lacks root or `CAP_SYS_ADMIN`.
    #[error("no permission to change the GPU power limit; run the agent as root or with CAP_SYS_ADMIN")]
    NoPermission,
    /// The GPU does not support this call.
    #[error("not supported by this GPU")]
    NotSupported,
    /// The GPU fell off the bus or needs a reset.
    #[error("GPU lost (fell off the bus or needs a reset)")]
    GpuLost,
    /// A value the driver refused (out of range).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// No GPU with this index.
    #[error("no GPU with index {0}")]
    NoSuchGpu(u32),
    /// Any other driver error.
    #[error("driver error: {0}")]
    Driver(String),
    /// The driver did not answer within the deadline (a hung call), or an earlier call on this
    /// GPU is still hung: the GPU is unresponsive until that call returns.
    #[error("the driver did not answer {call} within {deadline_ms} ms: the GPU is unresponsive")]
    Unresponsive {
        /// The call that hung (or the one still hung).
        call: &'static str,
        /// The deadline, ms.
        deadline_ms: u64,
    },
}

impl GpuError {
    /// The per-GPU status the protocol reports for this error.
    #[must_use]
    pub fn status(&self) -> CapStatus {
        match self {
            GpuError::NoPermission => CapStatus::NoPermission,
            GpuError::NotSupported => CapStatus::NotSupported,
            GpuError::GpuLost => CapStatus::GpuLost,
            GpuError::NoSuchGpu(_) => CapStatus::UnknownGpu,
            GpuError::InvalidArgument(_) | GpuError::Driver(_) => CapStatus::Failed,
            GpuError::Unresponsive { .. } => CapStatus::Unresponsive,
        }
    }
}

/// Read and set GPU power limits.
///
/// Implementations do their own locking (`&self` everywhere) because the HTTP handlers, the
/// watchdog and `/metrics` call them concurrently.
pub trait GpuControl: Send + Sync {
    /// Which backend this is, for `/v1/health`.
    fn backend(&self) -> GpuBackend;

    /// Every GPU, in index order, as read at start.
    fn gpus(&self) -> &[GpuInfo];

    /// The requested and enforced limits now.
    fn limits(&self, index: u32) -> Result<Limits, GpuError>;

    /// Set the requested limit, mW. Callers clamp into `[min_mw, max_mw]` first.
    fn set_limit(&self, index: u32, limit_mw: u32) -> Result<(), GpuError>;

    /// Power, energy and memory activity now.
    fn readings(&self, index: u32) -> Result<Readings, GpuError>;

    /// Whether the driver keeps GPU `index` initialised between jobs (NVML persistence mode);
    /// `None` where the backend cannot tell.
    fn persistence(&self, _index: u32) -> Result<Option<bool>, GpuError> {
        Ok(None)
    }

    /// GPUs listed by the driver that this backend serves without (lost or unreadable at
    /// start), with why.
    fn unavailable(&self) -> Vec<crate::api::UnavailableGpu> {
        Vec::new()
    }
}

/// What an operator should fix though caps work: each GPU whose persistence mode is off.
/// The agent never changes persistence mode itself (it is the site's driver policy).
pub fn warnings(gpus: &dyn GpuControl) -> Vec<String> {
    gpus.gpus()
        .iter()
        .filter(|g| matches!(gpus.persistence(g.index), Ok(Some(false))))
        .map(|g| {
            format!(
                "GPU {} ({}): persistence mode is off, so the driver may unload between jobs and reset every power \
                 limit to its default; the agent re-applies caps a reset wipes out, but enable it with \
                 `nvidia-smi -pm 1` or the nvidia-persistenced service",
                g.index, g.uuid
            )
        })
        .collect()
}

/// Check that limits can be written, by writing each GPU's current requested limit back
/// (harmless: nothing changes). A failure (typically `NoPermission`) means caps would not work,
/// so the agent reports itself not ready (`ready: false` and the reason in `GET /v1/health`).
pub fn self_test(gpus: &dyn GpuControl) -> Result<(), String> {
    let mut failures = Vec::new();
    for gpu in gpus.gpus() {
        let result = gpus
            .limits(gpu.index)
            .and_then(|l| gpus.set_limit(gpu.index, l.requested_mw));
        match result {
            // One GPU lost or hung is that GPU's state (`unavailable_gpus`), not the node's:
            // the agent stays ready for the others.
            Err(GpuError::GpuLost | GpuError::Unresponsive { .. }) | Ok(()) => {}
            Err(e) => failures.push(format!("GPU {} ({}): {e}", gpu.index, gpu.uuid)),
        }
    }
    if gpus.gpus().is_empty() {
        return Err("no GPUs found".to_owned());
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("power-limit self-test failed: {}", failures.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_protocol_statuses() {
        assert_eq!(GpuError::NoPermission.status(), CapStatus::NoPermission);
        assert_eq!(GpuError::NotSupported.status(), CapStatus::NotSupported);
        assert_eq!(GpuError::GpuLost.status(), CapStatus::GpuLost);
        assert_eq!(GpuError::NoSuchGpu(3).status(), CapStatus::UnknownGpu);
        assert_eq!(GpuError::Driver("x".into()).status(), CapStatus::Failed);
    }
}
