//! GPU runtimes opened at run time: CUDA (cudarc), HIP (ROCm 5 and 6, see [`rocm`]), NVML; the
//! telemetry sampled from NVML and hwmon while a run goes; and the box's BMC ([`bmc`]).
//!
//! Every library is optional. A missing library, a driver without a device or a library
//! without a symbol we need is a finding in the report, never a panic: each runtime is
//! checked for presence before its first call, its symbols are checked before they are
//! resolved, and every call runs under `catch_unwind` because the bindings panic on a
//! symbol they cannot resolve.

pub mod bmc;
mod cuda;
pub mod device_reports;
mod gpu_probe;
pub(crate) mod guard;
mod hip;
pub mod libraries;
pub mod library_path;
mod nvml;

pub use nvml::pcie_replay_counters;
mod pci;
pub mod power;
pub mod private_libraries;
pub mod rocm;
pub mod telemetry;

use serde::Serialize;

pub use pci::normalise_pci_address;

/// One device a runtime reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeDevice {
    /// The runtime's ordinal for the device.
    pub index: u32,
    /// The device's name as the runtime gives it (`NVIDIA GeForce RTX 4090`).
    pub name: String,
    /// PCI address as sysfs spells it (`0000:01:00.0`), when the runtime tells it.
    pub pci_address: Option<String>,
    /// Device memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Compute capability (`8.9`) or gfx target (`gfx1100`).
    pub arch: Option<String>,
}

/// What one runtime library said.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuntimeStatus {
    /// The library was found and loaded.
    pub loaded: bool,
    /// The driver's version as the library reports it.
    pub driver_version: Option<String>,
    /// The devices it sees, in its own order.
    pub devices: Vec<RuntimeDevice>,
    /// Why there are no devices: `CUDA driver library not found`, `no device`, …
    pub finding: Option<String>,
}

impl RuntimeStatus {
    /// The library is not on this machine.
    fn absent(finding: &str) -> RuntimeStatus {
        RuntimeStatus {
            finding: Some(finding.to_string()),
            ..RuntimeStatus::default()
        }
    }

    /// The library loaded but could not be used.
    fn loaded_with_finding(finding: impl Into<String>) -> RuntimeStatus {
        RuntimeStatus {
            loaded: true,
            finding: Some(finding.into()),
            ..RuntimeStatus::default()
        }
    }
}

/// The finding when a runtime loads and answers that it sees no device.
pub const NO_DEVICE: &str = "no device";

/// The three runtimes, side by side.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuntimeReport {
    /// CUDA's driver API (`libcuda`).
    pub cuda: RuntimeStatus,
    /// The HIP runtime (`libamdhip64`).
    pub hip: RuntimeStatus,
    /// NVML (`libnvidia-ml`).
    pub nvml: RuntimeStatus,
    /// Every GPU library, found or not, with its version.
    pub libraries: Vec<libraries::LibraryStatus>,
}

impl RuntimeReport {
    /// Every runtime's finding, prefixed with the runtime's name.
    pub fn findings(&self) -> Vec<String> {
        [
            ("CUDA", &self.cuda),
            ("HIP", &self.hip),
            ("NVML", &self.nvml),
        ]
        .into_iter()
        .filter_map(|(name, s)| s.finding.as_ref().map(|f| format!("{name}: {f}")))
        .collect()
    }

    /// Every device any runtime reported.
    pub fn devices(&self) -> impl Iterator<Item = &RuntimeDevice> {
        self.cuda
            .devices
            .iter()
            .chain(&self.hip.devices)
            .chain(&self.nvml.devices)
    }
}

/// Loads each runtime and asks it for its devices. Never panics.
pub fn probe() -> RuntimeReport {
    private_libraries::preload();
    RuntimeReport {
        cuda: cuda::probe(),
        hip: hip::probe(),
        nvml: nvml::probe(),
        libraries: libraries::libraries(),
    }
}

/// The text of a NUL-terminated C string written into `buffer`; the whole buffer when
/// the library left no terminator.
pub(crate) fn string_from_c_buffer(buffer: &[std::ffi::c_char]) -> String {
    let bytes: Vec<u8> = buffer
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).trim().to_string()
}

/// Joins per-device problems into the one finding a runtime carries.
fn join_findings(findings: Vec<String>) -> Option<String> {
    if findings.is_empty() {
        None
    } else {
        Some(findings.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_terminated_c_buffer() {
        let buffer: Vec<std::ffi::c_char> = b"RTX 4090\0junk"
            .iter()
            .map(|b| *b as std::ffi::c_char)
            .collect();
        assert_eq!(string_from_c_buffer(&buffer), "RTX 4090");
    }

    #[test]
    fn reads_an_unterminated_c_buffer_whole() {
        let buffer: Vec<std::ffi::c_char> =
            b"gfx1100".iter().map(|b| *b as std::ffi::c_char).collect();
        assert_eq!(string_from_c_buffer(&buffer), "gfx1100");
    }

    #[test]
    fn findings_carry_the_runtime_name() {
        let report = RuntimeReport {
            cuda: RuntimeStatus::absent("CUDA driver library not found"),
            hip: RuntimeStatus::loaded_with_finding(NO_DEVICE),
            nvml: RuntimeStatus {
                loaded: true,
                ..RuntimeStatus::default()
            },
            libraries: Vec::new(),
        };
        assert_eq!(
            report.findings(),
            vec![
                "CUDA: CUDA driver library not found".to_string(),
                "HIP: no device".to_string()
            ]
        );
        assert!(!report.cuda.loaded);
        assert!(report.hip.loaded);
    }
}
