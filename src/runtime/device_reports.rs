//! What a GPU's driver reports about its power limit and its memory's errors, apart from
//! the load a check puts on it: amdgpu through sysfs (hwmon `power1_cap` and
//! `power1_cap_default`, RAS `umc_err_count` and `gpu_vram_bad_pages` on GPUs with RAS),
//! NVIDIA through NVML (enforced and default power limits, ECC mode, aggregate corrected
//! and uncorrected ECC errors, retired pages and pages pending retirement).

use std::collections::BTreeMap;
use std::path::Path;

use nvml_wrapper::enum_wrappers::device::{EccCounter, MemoryError, RetirementCause};
use serde::Serialize;

use super::nvml;
use super::telemetry::hwmon;

/// A GPU's power limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PowerLimit {
    /// The limit it is held to now, watts.
    pub cap_w: f64,
    /// The limit it ships with, watts.
    pub default_w: f64,
}

impl PowerLimit {
    /// Whether it is held below its default by more than a watt (someone capped it).
    pub fn is_capped(&self) -> bool {
        self.cap_w < self.default_w - 1.0
    }
}

/// What a GPU says of its memory's errors; `None` where it says nothing.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MemoryErrors {
    /// Whether error correction is on (`None`: the GPU has no such mode, or did not say).
    pub ecc_enabled: Option<bool>,
    /// Errors corrected, over the GPU's life (NVML aggregate) or since the driver loaded.
    pub corrected: Option<u64>,
    /// Errors not corrected.
    pub uncorrected: Option<u64>,
    /// Memory pages retired (NVIDIA) or recorded bad (amdgpu).
    pub retired_pages: Option<u64>,
    /// Pages waiting for a reset to be retired.
    pub pending_retirement: Option<bool>,
    /// Where it was read: `nvml` or `amdgpu ras`.
    pub source: &'static str,
}

/// Every GPU's power limit that its driver reports, by PCI address in sysfs spelling.
/// NVML is asked only for the machine itself (`root` is `/`).
pub fn power_limits(root: &Path) -> BTreeMap<String, PowerLimit> {
    let mut limits = BTreeMap::new();
    for gpu in hwmon::amd_gpus(root) {
        let watts = |name: &str| {
            std::fs::read_to_string(gpu.hwmon_dir().join(name))
                .ok()?
                .trim()
                .parse::<f64>()
                .ok()
                .map(|uw| uw / 1e6)
        };
        if let (Some(cap_w), Some(default_w)) = (watts("power1_cap"), watts("power1_cap_default")) {
            limits.insert(gpu.address().to_string(), PowerLimit { cap_w, default_w });
        }
    }
    if root == Path::new("/") {
        limits.extend(nvml_power_limits());
    }
    limits
}

/// Every GPU's memory errors that its driver reports, by PCI address. NVML is asked only
/// for the machine itself (`root` is `/`).
pub fn memory_errors(root: &Path) -> BTreeMap<String, MemoryErrors> {
    let mut errors = BTreeMap::new();
    for gpu in hwmon::amd_gpus(root) {
        if let Some(found) = amdgpu_ras(gpu.device_dir()) {
            errors.insert(gpu.address().to_string(), found);
        }
    }
    if root == Path::new("/") {
        errors.extend(nvml_memory_errors());
    }
    errors
}

/// amdgpu's RAS counts: `ras/umc_err_count` (`ue: N` and `ce: N` lines, the memory
/// controller's) and `ras/gpu_vram_bad_pages` (a line per page); `None` without RAS (the
/// consumer cards have none).
fn amdgpu_ras(device_dir: &Path) -> Option<MemoryErrors> {
    let counts = std::fs::read_to_string(device_dir.join("ras/umc_err_count")).ok()?;
    let count = |key: &str| {
        counts.lines().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            (name.trim() == key).then(|| value.trim().parse::<u64>().ok())?
        })
    };
    let bad_pages = std::fs::read_to_string(device_dir.join("ras/gpu_vram_bad_pages"))
        .ok()
        .map(|t| t.lines().filter(|l| l.contains(':')).count() as u64);
    Some(MemoryErrors {
        // A GPU with RAS counts has its memory's errors corrected and counted.
        ecc_enabled: Some(true),
        corrected: count("ce"),
        uncorrected: count("ue"),
        retired_pages: bad_pages,
        pending_retirement: None,
        source: "amdgpu ras",
    })
}

fn nvml_power_limits() -> BTreeMap<String, PowerLimit> {
    nvml::by_address(|device| {
        let cap = device.enforced_power_limit().ok()?;
        let default = device.power_management_limit_default().ok()?;
        Some(PowerLimit {
            cap_w: f64::from(cap) / 1000.0,
            default_w: f64::from(default) / 1000.0,
        })
    })
}

fn nvml_memory_errors() -> BTreeMap<String, MemoryErrors> {
    nvml::by_address(|device| {
        let ecc_enabled = device.is_ecc_enabled().ok().map(|m| m.currently_enabled);
        let on = ecc_enabled == Some(true);
        let total = |kind| {
            on.then(|| device.total_ecc_errors(kind, EccCounter::Aggregate).ok())
                .flatten()
        };
        let retired = [
            RetirementCause::MultipleSingleBitEccErrors,
            RetirementCause::DoubleBitEccError,
        ]
        .into_iter()
        .map(|cause| device.retired_pages(cause).ok().map(|p| p.len() as u64))
        .try_fold(0, |sum, n| n.map(|n| sum + n));
        Some(MemoryErrors {
            ecc_enabled,
            corrected: total(MemoryError::Corrected),
            uncorrected: total(MemoryError::Uncorrected),
            retired_pages: retired,
            pending_retirement: device.are_pages_pending_retired().ok(),
            source: "nvml",
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amdgpu_ras_counts_are_read_in_the_drivers_format() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("ras")).unwrap();
        std::fs::write(dir.path().join("ras/umc_err_count"), "ue: 2\nce: 15\n").unwrap();
        std::fs::write(
            dir.path().join("ras/gpu_vram_bad_pages"),
            "0x00000001 : 0x00001000 : R\n0x00000002 : 0x00001000 : P\n",
        )
        .unwrap();
        let found = amdgpu_ras(dir.path()).unwrap();
        assert_eq!(
            (found.uncorrected, found.corrected, found.retired_pages),
            (Some(2), Some(15), Some(2))
        );
        assert!(amdgpu_ras(&dir.path().join("none")).is_none());
    }
}
