//! GPU, link and slot trouble in the kernel's log, in the drivers' own words: NVIDIA Xids
//! and GPUs fallen off the bus, GPUs that never came up (NVIDIA and amdgpu), amdgpu ring
//! timeouts, ring and GPU resets, firmware that failed to load, SMU and MES firmware
//! hangs, and PCIe AER errors of every severity. Each message has its class: serious (a
//! lost or broken GPU, link or slot), application (usually a program's fault), correctable
//! (the hardware repaired it) or informational. A message that names no device is given
//! the GPU its driver's neighbouring messages name, or reported for a GPU not identified;
//! it is never dropped.

mod amdgpu;
mod lines;
mod nvidia;
mod pcie_aer;
mod records;

use serde::Serialize;

pub use pcie_aer::AerSeverity;
pub use records::{parse_pasted, parse_records, read_records, Record};

use super::pci::PciAddress;
use super::xid::XidClass;

/// How much a message says about the hardware.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageClass {
    /// A lost or broken GPU, link or slot: the check fails.
    Serious,
    /// Usually a program's fault (a bad address, a killed channel): worth a warning.
    Application,
    /// The hardware repaired it (a corrected link error): worth a warning.
    Correctable,
    /// Nothing wrong.
    Informational,
}

impl MessageClass {
    /// The class's name: `serious`.
    pub fn as_str(self) -> &'static str {
        match self {
            MessageClass::Serious => "serious",
            MessageClass::Application => "application",
            MessageClass::Correctable => "correctable",
            MessageClass::Informational => "informational",
        }
    }
}

/// What a message says happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KernelEventKind {
    /// An NVIDIA Xid: the driver's error code for a GPU fault.
    Xid {
        /// The Xid number (79 is "fallen off the bus").
        code: u32,
        /// NVIDIA's name for it.
        name: &'static str,
        /// Whose fault it usually is.
        xid_class: XidClass,
        /// For Xid 45 (a channel cleaned up after an earlier error): the Xid before it on
        /// the same GPU, its cause.
        caused_by: Option<u32>,
    },
    /// The GPU stopped answering on PCIe ("has fallen off the bus"), with no Xid.
    FallenOffTheBus,
    /// The GPU never came up: the driver's initialisation or probe failed.
    InitFailure {
        /// The driver's words for what failed.
        cause: String,
    },
    /// Firmware the GPU needs could not be loaded into it.
    FirmwareLoad {
        /// The driver's words for what failed.
        cause: String,
    },
    /// An amdgpu ring (a GPU command queue) timed out.
    RingTimeout {
        /// The ring's name (`gfx_0.0.0`, `sdma0`), where the message gives it.
        ring: Option<String>,
    },
    /// One ring was reset and the GPU recovered: still a ring that hung.
    RingReset {
        /// The ring's name, where the message gives it.
        ring: Option<String>,
    },
    /// amdgpu reset the whole GPU.
    GpuReset,
    /// The SMU (power management firmware) stopped answering.
    SmuHang,
    /// The MES (queue scheduling firmware) stopped answering.
    MesHang,
    /// A PCIe Advanced Error Reporting message.
    Aer {
        /// Correctable, non-fatal or fatal.
        severity: AerSeverity,
        /// The layer the kernel names (`Physical Layer`, `Transaction Layer`).
        layer: Option<String>,
        /// The error bits the kernel names (`RxErr`, `SDES`, `CmpltTO`).
        errors: Vec<String>,
        /// The root port (or switch port) that reported it, when not the device itself.
        reported_by: Option<PciAddress>,
        /// The kernel said it could not recover the device.
        recovery_failed: bool,
    },
}

impl KernelEventKind {
    fn class(&self) -> MessageClass {
        match self {
            KernelEventKind::Xid { xid_class, .. } => match xid_class {
                XidClass::Application => MessageClass::Application,
                XidClass::Correctable | XidClass::Contained => MessageClass::Correctable,
                XidClass::Lost | XidClass::Hardware | XidClass::MemoryRepair => {
                    MessageClass::Serious
                }
            },
            KernelEventKind::Aer { severity, .. } => match severity {
                AerSeverity::Correctable => MessageClass::Correctable,
                AerSeverity::NonFatal | AerSeverity::Fatal => MessageClass::Serious,
            },
            _ => MessageClass::Serious,
        }
    }

    /// The name of the kind, as the record's `kind` field spells it.
    pub fn name(&self) -> &'static str {
        match self {
            KernelEventKind::Xid { .. } => "xid",
            KernelEventKind::FallenOffTheBus => "fallen_off_the_bus",
            KernelEventKind::InitFailure { .. } => "init_failure",
            KernelEventKind::FirmwareLoad { .. } => "firmware_load",
            KernelEventKind::RingTimeout { .. } => "ring_timeout",
            KernelEventKind::RingReset { .. } => "ring_reset",
            KernelEventKind::GpuReset => "gpu_reset",
            KernelEventKind::SmuHang => "smu_hang",
            KernelEventKind::MesHang => "mes_hang",
            KernelEventKind::Aer { .. } => "aer",
        }
    }

    /// The kind as a noun: `Xid 79`, `a ring timeout`, `a PCIe fatal error`.
    pub fn summary(&self) -> String {
        match self {
            KernelEventKind::Xid { code, .. } => format!("Xid {code}"),
            KernelEventKind::FallenOffTheBus => "a fall off the bus".into(),
            KernelEventKind::InitFailure { .. } => "a failed GPU initialisation".into(),
            KernelEventKind::FirmwareLoad { .. } => "a failed firmware load".into(),
            KernelEventKind::RingTimeout { .. } => "a ring timeout".into(),
            KernelEventKind::RingReset { .. } => "a ring reset".into(),
            KernelEventKind::GpuReset => "a GPU reset".into(),
            KernelEventKind::SmuHang => "an SMU hang".into(),
            KernelEventKind::MesHang => "an MES hang".into(),
            KernelEventKind::Aer { severity, .. } => {
                format!("a PCIe {} error", severity.as_str())
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            KernelEventKind::Xid {
                code,
                name,
                caused_by,
                ..
            } => match caused_by {
                Some(cause) => format!("Xid {code} ({name}) caused by previous Xid {cause}"),
                None => format!("Xid {code} ({name})"),
            },
            KernelEventKind::FallenOffTheBus => "fell off the bus".into(),
            KernelEventKind::InitFailure { cause } => format!("failed to come up ({cause})"),
            KernelEventKind::FirmwareLoad { cause } => format!("firmware failed to load ({cause})"),
            KernelEventKind::RingTimeout { ring } => match ring {
                Some(ring) => format!("ring {ring} timed out"),
                None => "a ring timed out".into(),
            },
            KernelEventKind::RingReset { ring } => match ring {
                Some(ring) => format!("ring {ring} hung and was reset"),
                None => "a ring hung and was reset".into(),
            },
            KernelEventKind::GpuReset => "was reset by the driver".into(),
            KernelEventKind::SmuHang => "its SMU firmware stopped answering".into(),
            KernelEventKind::MesHang => "its MES firmware stopped answering".into(),
            KernelEventKind::Aer {
                severity,
                layer,
                errors,
                reported_by,
                recovery_failed,
            } => {
                let mut text = format!("PCIe AER {} error", severity.as_str());
                if let Some(layer) = layer {
                    text.push_str(&format!(" ({layer}"));
                    if !errors.is_empty() {
                        text.push_str(&format!(": {}", errors.join(", ")));
                    }
                    text.push(')');
                } else if !errors.is_empty() {
                    text.push_str(&format!(" ({})", errors.join(", ")));
                }
                if let Some(port) = reported_by {
                    text.push_str(&format!(", reported by {port}"));
                }
                if *recovery_failed {
                    text.push_str(", and the kernel could not recover it");
                }
                text
            }
        }
    }
}

/// One message about a GPU, a link or a slot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelEvent {
    /// The record's sequence number (a pasted log's line number).
    pub seq: u64,
    /// Seconds from boot to the message, where the log says.
    pub seconds_since_boot: Option<f64>,
    /// The wall-clock time as the log printed it, where it does.
    pub logged_at: Option<String>,
    /// The device: as the message names it, or as its driver's neighbouring messages do
    /// (`attributed`); `None` when nothing names it.
    pub address: Option<PciAddress>,
    /// Whether the address came from neighbouring messages rather than this one.
    pub attributed: bool,
    /// Whether that address is a GPU of this box.
    pub known_gpu: bool,
    /// What happened.
    #[serde(flatten)]
    pub kind: KernelEventKind,
    /// How much it says about the hardware.
    pub class: MessageClass,
    /// Whether it points at a lost or broken GPU, link or slot ([`MessageClass::Serious`]).
    pub serious: bool,
    /// The record's text, at most 300 characters.
    pub message: String,
}

impl KernelEvent {
    /// The device as words: its address, or that no message named it.
    pub fn subject(&self) -> String {
        match self.address {
            Some(address) => address.to_string(),
            None => NOT_IDENTIFIED.to_string(),
        }
    }

    /// Whether the message is about `device` (an Xid names a device without its function).
    pub fn concerns(&self, device: PciAddress) -> bool {
        self.address.is_some_and(|a| same_device(device, a))
    }

    /// The finding in words: the device, what happened, when, and the message.
    pub fn describe(&self) -> String {
        let is_link = matches!(self.kind, KernelEventKind::Aer { .. });
        let subject = match self.address {
            Some(address) if self.known_gpu => format!("GPU {address}"),
            // Any PCIe device logs AER errors: a root port, a switch, an NVMe drive.
            Some(address) if is_link => format!("{address}"),
            Some(address) => format!("GPU {address} (no GPU at that address in this box)"),
            None => NOT_IDENTIFIED.to_string(),
        };
        let named = if self.attributed {
            " (named by its neighbouring messages)"
        } else {
            ""
        };
        let when = match (self.seconds_since_boot, &self.logged_at) {
            (Some(seconds), _) => format!(" at {seconds:.1} s after boot"),
            (None, Some(wall)) => format!(" at {wall}"),
            (None, None) => String::new(),
        };
        format!(
            "{subject}{named}: {}{when}: {}",
            self.kind.describe(),
            self.message
        )
    }
}

/// How a message that names no device, and whose neighbours name none, is reported.
pub const NOT_IDENTIFIED: &str = "a GPU, not identified";

/// A message one of the drivers' scanners recognised.
#[derive(Debug)]
struct Found {
    /// The record it is in.
    index: usize,
    /// The device, where the message names one.
    address: Option<PciAddress>,
    kind: KernelEventKind,
    /// The driver whose neighbouring messages can name the device when this one does not.
    driver: Driver,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Driver {
    Nvidia,
    Amdgpu,
    Pcie,
}

/// How many records around a message its neighbours are looked for in.
const NEIGHBOURHOOD: usize = 8;

/// The events in `records`; `gpus` are the box's GPUs, to tell which exist.
pub fn gpu_events(records: &[Record], gpus: &[PciAddress]) -> Vec<KernelEvent> {
    let mut found = nvidia::scan(records);
    found.extend(amdgpu::scan(records));
    found.extend(pcie_aer::scan(records));
    found.sort_by_key(|f| f.index);
    let mut attributed = vec![false; found.len()];
    for (i, f) in found.iter_mut().enumerate() {
        if f.address.is_none() {
            f.address = neighbour_address(records, f.index, f.driver);
            attributed[i] = f.address.is_some();
        }
    }
    let mut events: Vec<KernelEvent> = Vec::new();
    for (i, f) in found.into_iter().enumerate() {
        let mut kind = f.kind;
        if let KernelEventKind::Xid {
            code: 45,
            caused_by: caused_by @ None,
            ..
        } = &mut kind
        {
            *caused_by = events.iter().rev().find_map(|e| match e.kind {
                KernelEventKind::Xid { code, .. } if code != 45 && e.address == f.address => {
                    Some(code)
                }
                _ => None,
            });
        }
        let record = &records[f.index];
        let class = kind.class();
        events.push(KernelEvent {
            seq: record.seq,
            seconds_since_boot: record.usec.map(|u| u as f64 / 1e6),
            logged_at: record.wall_time.clone(),
            address: f.address,
            attributed: attributed[i],
            known_gpu: f
                .address
                .is_some_and(|a| gpus.iter().any(|g| same_device(*g, a))),
            kind,
            class,
            serious: class == MessageClass::Serious,
            message: record.text.chars().take(300).collect(),
        });
    }
    events
}

/// The device the nearest message of the same driver names, within [`NEIGHBOURHOOD`]
/// records either side; the following ones first at equal distance, since a driver names
/// the GPU it resets or gives up on right after the message that says why.
fn neighbour_address(records: &[Record], index: usize, driver: Driver) -> Option<PciAddress> {
    (1..=NEIGHBOURHOOD).find_map(|distance| {
        let after = records
            .get(index + distance)
            .and_then(|r| names_device(&r.text, driver));
        let before = index
            .checked_sub(distance)
            .and_then(|i| names_device(&records[i].text, driver));
        after.or(before)
    })
}

/// The device a message of `driver` names.
fn names_device(text: &str, driver: Driver) -> Option<PciAddress> {
    match driver {
        Driver::Nvidia => nvidia::names_device(text),
        Driver::Amdgpu => amdgpu::names_device(text),
        Driver::Pcie => lines::device_prefix(text).map(|(_, a, _)| a),
    }
}

/// An Xid names bus and device: it matches the GPU's function 0.
pub fn same_device(gpu: PciAddress, logged: PciAddress) -> bool {
    gpu.domain == logged.domain && gpu.bus == logged.bus && gpu.device == logged.device
}

#[cfg(test)]
mod tests;
