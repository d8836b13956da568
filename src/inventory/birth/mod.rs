//! The box's birth record: the parts it was accepted with, kept by its baseboard serial
//! under `STATE/box/<serial>.json`, and what has changed since.
//!
//! The record is written when a box is first seen and again after each passed burn-in;
//! every later start compares the box with it, so that a swapped GPU, a missing DIMM or
//! a flashed BIOS is named in words an operator can act on rather than found by a
//! slower benchmark weeks later.

mod diff;
mod store;
mod take;

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use diff::{diff, Change, Part};
pub use store::{file_name_for, load, record_path, save, BirthError};
pub use take::{parse_os_release, read_bmc, take};

use super::smbios::{
    BaseboardInfo, BiosInfo, ChassisInfo, MemoryDevice, ProcessorInfo, SystemInfo,
};

/// The version of the record's JSON shape: a change that removes or renames a field
/// bumps it.
pub const BIRTH_RECORD_SCHEMA_VERSION: u32 = 1;

/// The folder under the state folder that holds the records.
pub const BOX_DIR: &str = "box";

/// Everything a box is identified by, at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BirthRecord {
    /// [`BIRTH_RECORD_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// When the parts were read.
    pub recorded_at: DateTime<Utc>,
    /// The tinyperf that read them.
    pub tinyperf_version: String,
    /// The baseboard's serial number, by which the record is kept.
    pub baseboard_serial: Option<String>,
    /// Firmware, system, board, processors and memory, from SMBIOS.
    pub firmware: Firmware,
    /// Every PCI function, with its link as trained.
    pub pci_devices: Vec<PciEntry>,
    /// Every GPU, with what its driver tells of its identity.
    pub gpus: Vec<GpuEntry>,
    /// Every NVMe controller.
    pub nvme: Vec<NvmeEntry>,
    /// The BMC's identity (firmware, device id), when it was read.
    pub bmc: Option<Value>,
    /// The OS image the box runs.
    pub os: Option<OsImage>,
    /// What could not be read, one line each.
    pub notes: Vec<String>,
}

impl BirthRecord {
    /// The name of the file the record is kept in (`M80-F4012300561.json`).
    pub fn file_name(&self) -> String {
        file_name_for(self.baseboard_serial.as_deref())
    }
}

/// Where the firmware identity was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FirmwareSource {
    /// The SMBIOS tables, whole.
    Smbios,
    /// Only `sys/class/dmi/id` (the tables were not readable): no memory devices and
    /// no processors.
    Sysfs,
}

/// Firmware, system, board, processors and memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Firmware {
    /// Where these came from.
    pub source: FirmwareSource,
    /// The SMBIOS version, when the tables were read.
    pub smbios_version: Option<String>,
    /// The firmware.
    pub bios: BiosInfo,
    /// The system.
    pub system: SystemInfo,
    /// The mainboard.
    pub baseboard: BaseboardInfo,
    /// The enclosure.
    pub chassis: Option<ChassisInfo>,
    /// The processor sockets.
    pub processors: Vec<ProcessorInfo>,
    /// Every memory slot, empty ones included; `None` when the tables were not read.
    pub dimms: Option<Vec<MemoryDevice>>,
}

/// One PCI function.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PciEntry {
    /// `0000:41:00.0`.
    pub address: String,
    /// `10de:2684`.
    pub id: String,
    /// The board maker's ids, `10de:167c`.
    pub subsystem: Option<String>,
    /// The class code, `0x030000`.
    pub class: Option<String>,
    /// The revision, `0xa1`.
    pub revision: Option<String>,
    /// What it is, for people: `NVIDIA GeForce RTX 4090 [10de:2684]`.
    pub name: String,
    /// Its own PCIe link; `None` for functions without one.
    pub link: Option<LinkEntry>,
    /// The bridge it sits behind, `None` on the root bus.
    #[serde(default)]
    pub parent: Option<String>,
}

/// A PCIe link as a device reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkEntry {
    /// The speed it trained to, `16.0 GT/s`.
    pub speed: Option<String>,
    /// The lanes it trained to.
    pub width: Option<u32>,
    /// The fastest speed the device supports.
    pub max_speed: Option<String>,
    /// The most lanes the device supports.
    pub max_width: Option<u32>,
}

impl LinkEntry {
    /// `16.0 GT/s x16`, with `?` for what is unknown.
    pub fn describe(&self) -> String {
        format!(
            "{} x{}",
            self.speed.as_deref().unwrap_or("? GT/s"),
            self.width
                .map_or_else(|| "?".to_string(), |w| w.to_string())
        )
    }
}

/// One GPU's identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuEntry {
    /// `0000:41:00.0`.
    pub address: String,
    /// `NVIDIA GeForce RTX 4090`.
    pub model: String,
    /// The video BIOS version.
    pub vbios: Option<String>,
    /// The board's serial number.
    pub serial: Option<String>,
    /// The GPU's unique id (`GPU-…` on NVIDIA, the chip's id on AMD).
    pub uuid: Option<String>,
}

/// One NVMe controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NvmeEntry {
    /// `nvme0`; the kernel may number drives differently on another boot.
    pub name: String,
    /// Its PCI address, by which it is compared.
    pub address: Option<String>,
    /// The drive's model.
    pub model: Option<String>,
    /// The drive's serial number.
    pub serial: Option<String>,
    /// The drive's firmware revision.
    pub firmware: Option<String>,
}

/// The OS image, from `os-release`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OsImage {
    /// `ID`.
    pub id: Option<String>,
    /// `PRETTY_NAME`.
    pub pretty_name: Option<String>,
    /// `VERSION_ID`.
    pub version_id: Option<String>,
    /// `IMAGE_ID`.
    pub image_id: Option<String>,
    /// `IMAGE_VERSION`.
    pub image_version: Option<String>,
}

/// The stored record, what the box is made of now, and the difference.
#[derive(Debug, Clone, Serialize)]
pub struct BoxView {
    /// The record kept for this box's serial; `None` before one is written.
    pub record: Option<BirthRecord>,
    /// What changed since the record (empty without one).
    pub changes: Vec<Change>,
    /// The box as it is now.
    pub current: BirthRecord,
    /// The record's file.
    #[serde(skip)]
    pub path: PathBuf,
}

/// Reads the box under `root` and the record kept for its serial under `state_dir`, and
/// compares them. `bmc` is the BMC's identity, when it was read.
pub fn compare(
    root: &Path,
    state_dir: &Path,
    bmc: Result<Value, String>,
) -> Result<BoxView, BirthError> {
    let current = take(root, bmc);
    let path = record_path(state_dir, current.baseboard_serial.as_deref());
    let record = load(&path)?;
    let changes = record
        .as_ref()
        .map(|r| diff(r, &current))
        .unwrap_or_default();
    Ok(BoxView {
        record,
        changes,
        current,
        path,
    })
}
