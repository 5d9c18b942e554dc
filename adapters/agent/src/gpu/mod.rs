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
    /// The driver answered with a value no GPU can have (a limit outside the GPU's own
    /// constraints, impossible constraints, an impossible power reading): refused, never
    /// passed on or confirmed.
    #[error("implausible answer from the driver, refused: {0}")]
    Implausible(String),
    /// The driver no longer lists this GPU (it fell off the bus, or the driver was reloaded
    /// without it): calls cannot reach it, and the agent never addresses another GPU in its
    /// place.
    #[error(
        "the driver no longer lists this GPU (fallen off the bus, or the driver reloaded without it); restart the agent once it is back"
    )]
    NotListed,
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
            GpuError::GpuLost | GpuError::NotListed => CapStatus::GpuLost,
            GpuError::Implausible(_) => CapStatus::ImplausibleReading,
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

    /// How many MIG instances GPU `index` is split into: `None` when MIG mode is off or the
    /// backend cannot tell. One power limit serves them all.
    fn mig_instances(&self, _index: u32) -> Result<Option<u32>, GpuError> {
        Ok(None)
    }

    /// What the driver lists now (count and the UUIDs it can read), so the agent notices a GPU
    /// count that changes under it; `None` where the backend's GPUs cannot change.
    fn inventory(&self) -> Result<Option<DriverInventory>, GpuError> {
        Ok(None)
    }
}

/// The driver's listing of GPUs at one moment ([`GpuControl::inventory`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverInventory {
    /// The GPU count the driver answers.
    pub count: u32,
    /// The UUIDs of the listed GPUs that could be read (a lost one cannot).
    pub uuids: Vec<String>,
}

/// What changed in the driver's listing since the agent started: GPUs it served that are no
/// longer listed, and warnings for people.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InventoryCheck {
    /// GPUs the agent took charge of at start that the driver no longer lists (by their index
    /// at start): reported unavailable, and every call on them fails, so no cap on them is
    /// ever confirmed.
    pub vanished: Vec<crate::api::UnavailableGpu>,
    /// What an operator should know: GPUs that vanished, GPUs that appeared (never adopted
    /// while running: the lease book and the gateway's plan were made for the GPUs at start,
    /// and an index or UUID mix-up would cap the wrong GPU), a count that changed.
    pub warnings: Vec<String>,
}

/// Compare the driver's listing `now` with the GPUs the agent started with (`served`, and
/// `count_at_start` GPUs listed then, served or not). Pure.
#[must_use]
pub fn check_inventory(served: &[GpuInfo], count_at_start: u32, now: &DriverInventory) -> InventoryCheck {
    let mut check = InventoryCheck::default();
    let complete = u32::try_from(now.uuids.len()).is_ok_and(|n| n == now.count);
    for g in served {
        if now.uuids.contains(&g.uuid) {
            continue;
        }
        // Only a listing read in full says for certain that a GPU is gone; a listed GPU that
        // could not be read may be this one, lost (its own calls say so).
        if !complete {
            continue;
        }
        check.vanished.push(crate::api::UnavailableGpu {
            index: g.index,
            reason: format!(
                "no longer listed by the driver ({count_at_start} GPUs at start, {} now): reported lost; restart the agent once it is back",
                now.count
            ),
        });
        check.warnings.push(format!(
            "GPU {} ({}) is no longer listed by the driver ({count_at_start} GPUs at start, {} now): it is reported lost and no cap on it is confirmed; restart the agent once the GPU is back",
            g.index, g.uuid, now.count
        ));
    }
    let appeared: Vec<&str> = now
        .uuids
        .iter()
        .filter(|u| served.iter().all(|g| &g.uuid != *u))
        .map(String::as_str)
        .collect();
    if !appeared.is_empty() {
        check.warnings.push(format!(
            "the driver now lists GPU(s) {} that the agent did not take charge of at start ({count_at_start} GPUs at start, {} now); the agent never adopts GPUs while running: restart it to take charge of them",
            appeared.join(", "),
            now.count
        ));
    } else if now.count != count_at_start && check.vanished.is_empty() {
        check.warnings.push(format!(
            "the driver lists {} GPUs, {count_at_start} at start; the agent serves the GPUs it started with: restart it to take charge of a changed set",
            now.count
        ));
    }
    check
}

/// Check a GPU's power-limit constraints as the driver reports them at start: a minimum of 0,
/// a minimum above the maximum, or a default outside them cannot be right, and a GPU whose
/// range is wrong would be capped by a wrong clamp, so it is refused (left unavailable).
pub fn check_constraints(min_mw: u32, default_mw: u32, max_mw: u32) -> Result<(), GpuError> {
    if min_mw == 0 || min_mw > max_mw {
        return Err(GpuError::Implausible(format!(
            "power-limit constraints [{min_mw}, {max_mw}] mW cannot be right"
        )));
    }
    if !(min_mw..=max_mw).contains(&default_mw) {
        return Err(GpuError::Implausible(format!(
            "default power limit {default_mw} mW is outside the constraints [{min_mw}, {max_mw}] mW"
        )));
    }
    Ok(())
}

/// Check limits read from GPU `info` against its own constraints: a requested limit outside
/// `[min, max]` or an enforced limit of 0 or above the maximum is no limit the GPU can hold, so
/// it is refused rather than saved as a pre-event limit or taken as a confirmed cap.
pub fn check_limits(info: &GpuInfo, limits: Limits) -> Result<Limits, GpuError> {
    if !(info.min_mw..=info.max_mw).contains(&limits.requested_mw) {
        return Err(GpuError::Implausible(format!(
            "power limit {} mW read back, outside the GPU's constraints [{}, {}] mW",
            limits.requested_mw, info.min_mw, info.max_mw
        )));
    }
    if limits.enforced_mw == 0 || limits.enforced_mw > info.max_mw {
        return Err(GpuError::Implausible(format!(
            "enforced power limit {} mW read back, outside (0, {}] mW",
            limits.enforced_mw, info.max_mw
        )));
    }
    Ok(limits)
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
            Err(GpuError::GpuLost | GpuError::NotListed | GpuError::Unresponsive { .. } | GpuError::Implausible(_))
            | Ok(()) => {}
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
pub(crate) mod tests {
    use super::*;

    #[test]
    fn errors_map_to_protocol_statuses() {
        assert_eq!(GpuError::NoPermission.status(), CapStatus::NoPermission);
        assert_eq!(GpuError::NotSupported.status(), CapStatus::NotSupported);
        assert_eq!(GpuError::GpuLost.status(), CapStatus::GpuLost);
        assert_eq!(GpuError::NoSuchGpu(3).status(), CapStatus::UnknownGpu);
        assert_eq!(GpuError::Driver("x".into()).status(), CapStatus::Failed);
        assert_eq!(GpuError::NotListed.status(), CapStatus::GpuLost);
        assert_eq!(
            GpuError::Implausible("x".into()).status(),
            CapStatus::ImplausibleReading
        );
    }

    /// A GPU of H100 SXM's range for the unit tests of this module and its children.
    pub(crate) fn info(index: u32) -> GpuInfo {
        GpuInfo {
            uuid: format!("GPU-{index}"),
            index,
            minor: index,
            pci: String::new(),
            name: "test".into(),
            min_mw: 200_000,
            default_mw: 700_000,
            max_mw: 700_000,
        }
    }

    #[test]
    fn limits_outside_the_gpus_own_constraints_are_refused() {
        let g = info(0);
        let l = |requested_mw, enforced_mw| Limits {
            requested_mw,
            enforced_mw,
        };
        assert!(check_limits(&g, l(400_000, 400_000)).is_ok());
        assert!(
            check_limits(&g, l(200_000, 150_000)).is_ok(),
            "an out-of-band limiter may hold it lower"
        );
        for bad in [
            l(0, 0),
            l(199_999, 199_999),
            l(700_001, 700_000),
            l(5_000_000, 5_000_000),
            l(400_000, 0),
            l(400_000, 900_000),
        ] {
            assert!(
                matches!(check_limits(&g, bad), Err(GpuError::Implausible(_))),
                "{bad:?} accepted"
            );
        }
        assert!(check_constraints(200_000, 700_000, 700_000).is_ok());
        assert!(check_constraints(0, 700_000, 700_000).is_err(), "a minimum of 0");
        assert!(check_constraints(800_000, 700_000, 700_000).is_err(), "min > max");
        assert!(
            check_constraints(200_000, 900_000, 700_000).is_err(),
            "default above max"
        );
    }

    #[test]
    fn a_changed_listing_reports_vanished_gpus_and_never_adopts_new_ones() {
        let served = [info(0), info(1), info(2)];
        let inv = |count, uuids: &[&str]| DriverInventory {
            count,
            uuids: uuids.iter().map(|u| (*u).to_owned()).collect(),
        };
        assert_eq!(
            check_inventory(&served, 3, &inv(3, &["GPU-0", "GPU-1", "GPU-2"])),
            InventoryCheck::default()
        );
        // GPU 1 fell off: the count drops and the later GPU's index shifts; by UUID, only GPU 1
        // is gone.
        let c = check_inventory(&served, 3, &inv(2, &["GPU-0", "GPU-2"]));
        assert_eq!(c.vanished.iter().map(|u| u.index).collect::<Vec<_>>(), vec![1]);
        assert!(c.warnings[0].contains("no longer listed"), "{c:?}");
        // A listed GPU that cannot be read may be the missing one: nothing is declared gone.
        let c = check_inventory(&served, 3, &inv(3, &["GPU-0", "GPU-2"]));
        assert!(c.vanished.is_empty(), "{c:?}");
        // A new GPU is reported, never adopted.
        let c = check_inventory(&served, 3, &inv(4, &["GPU-0", "GPU-1", "GPU-2", "GPU-9"]));
        assert!(c.vanished.is_empty());
        assert!(
            c.warnings[0].contains("GPU-9") && c.warnings[0].contains("restart"),
            "{c:?}"
        );
        // A count that changed among GPUs the agent never served (unreadable at start).
        let c = check_inventory(&served, 4, &inv(3, &["GPU-0", "GPU-1", "GPU-2"]));
        assert!(c.vanished.is_empty());
        assert_eq!(c.warnings.len(), 1, "{c:?}");
    }
}
