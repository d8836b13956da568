//! GPU runtimes opened at run time: CUDA (cudarc), HIP (rocmrc), NVML.
//! (Placeholder: the probe is not implemented yet; the types are the interface.)

use serde::Serialize;

/// One device a runtime reported.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RuntimeDevice {
    pub index: u32,
    pub name: String,
    /// PCI address as sysfs spells it (`0000:01:00.0`), when the runtime tells it.
    pub pci_address: Option<String>,
    pub memory_bytes: Option<u64>,
    /// Compute capability (`8.9`) or gfx target (`gfx1100`).
    pub arch: Option<String>,
}

/// What one runtime library said.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuntimeStatus {
    /// The library was found and loaded.
    pub loaded: bool,
    pub driver_version: Option<String>,
    pub devices: Vec<RuntimeDevice>,
    /// Why there are no devices: `CUDA driver library not found`, `no device`, …
    pub finding: Option<String>,
}

/// The three runtimes, side by side.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct RuntimeReport {
    pub cuda: RuntimeStatus,
    pub hip: RuntimeStatus,
    pub nvml: RuntimeStatus,
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
    let not_implemented = RuntimeStatus {
        finding: Some("runtime probe not implemented".into()),
        ..RuntimeStatus::default()
    };
    RuntimeReport {
        cuda: not_implemented.clone(),
        hip: not_implemented.clone(),
        nvml: not_implemented,
    }
}
