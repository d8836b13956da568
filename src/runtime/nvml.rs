//! NVIDIA's management library (nvml-wrapper, loaded at run time).

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::{guard, join_findings, normalise_pci_address, RuntimeDevice, RuntimeStatus, NO_DEVICE};

pub(super) const LIBRARY_NOT_FOUND: &str = "NVML library not found";

pub(super) fn probe() -> RuntimeStatus {
    guard::catch(query).unwrap_or_else(|panic| RuntimeStatus {
        // Loading the library cannot panic; only a call through it can.
        loaded: true,
        finding: Some(format!("the NVML library failed: {panic}")),
        ..RuntimeStatus::default()
    })
}

fn query() -> RuntimeStatus {
    let nvml = match Nvml::init() {
        Ok(nvml) => nvml,
        Err(NvmlError::LibloadingError(_)) => return RuntimeStatus::absent(LIBRARY_NOT_FOUND),
        Err(error) => return RuntimeStatus::loaded_with_finding(describe("nvmlInit", &error)),
    };
    let driver_version = nvml.sys_driver_version().ok();
    let count = match nvml.device_count() {
        Ok(count) => count,
        Err(error) => {
            return RuntimeStatus {
                driver_version,
                ..RuntimeStatus::loaded_with_finding(describe("nvmlDeviceGetCount", &error))
            }
        }
    };
    if count == 0 {
        return RuntimeStatus {
            driver_version,
            ..RuntimeStatus::loaded_with_finding(NO_DEVICE)
        };
    }

    let mut devices = Vec::new();
    let mut findings = Vec::new();
    for index in 0..count {
        match nvml.device_by_index(index) {
            Ok(handle) => match device(index, &handle) {
                Ok(device) => devices.push(device),
                Err(error) => findings.push(format!("device {index}: {error}")),
            },
            Err(error) => findings.push(format!(
                "device {index}: {}",
                describe("nvmlDeviceGetHandleByIndex", &error)
            )),
        }
    }
    RuntimeStatus {
        loaded: true,
        driver_version,
        devices,
        finding: join_findings(findings),
    }
}

fn device(index: u32, handle: &Device<'_>) -> Result<RuntimeDevice, String> {
    let name = handle
        .name()
        .map_err(|e| describe("nvmlDeviceGetName", &e))?;
    Ok(RuntimeDevice {
        index,
        name,
        pci_address: handle
            .pci_info()
            .ok()
            .and_then(|pci| normalise_pci_address(&pci.bus_id)),
        memory_bytes: handle.memory_info().ok().map(|memory| memory.total),
        arch: handle
            .cuda_compute_capability()
            .ok()
            .map(|cc| format!("{}.{}", cc.major, cc.minor)),
    })
}

fn describe(call: &str, error: &NvmlError) -> String {
    match error {
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_string(),
        _ => format!("{call} failed: {error}"),
    }
}

/// What `read` says of each NVIDIA GPU, by PCI address in sysfs spelling; GPUs it says
/// nothing of are left out, and without NVML, a GPU or a call that panics, nothing is.
pub(crate) fn by_address<T>(
    read: impl Fn(&Device) -> Option<T>,
) -> std::collections::BTreeMap<String, T> {
    guard::catch(|| {
        let mut found = std::collections::BTreeMap::new();
        let Ok(nvml) = Nvml::init() else {
            return found;
        };
        for index in 0..nvml.device_count().unwrap_or(0) {
            let Ok(device) = nvml.device_by_index(index) else {
                continue;
            };
            let address = device
                .pci_info()
                .ok()
                .and_then(|pci| normalise_pci_address(&pci.bus_id));
            if let (Some(address), Some(value)) = (address, read(&device)) {
                found.insert(address, value);
            }
        }
        found
    })
    .unwrap_or_default()
}

/// Each NVIDIA GPU's PCIe replay counter (link-level retransmissions since the driver
/// loaded), by PCI address in sysfs spelling; empty without NVML or a GPU.
pub fn pcie_replay_counters() -> std::collections::BTreeMap<String, u64> {
    by_address(|device| device.pcie_replay_counter().ok().map(u64::from))
}
