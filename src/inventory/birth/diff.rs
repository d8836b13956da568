//! What changed between a box's record and the box now, in words an operator acts on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{BirthRecord, FirmwareSource, GpuEntry, LinkEntry, NvmeEntry, PciEntry};
use crate::inventory::smbios::{MemoryDevice, ProcessorInfo};
use crate::inventory::units::format_bytes;

/// Which part of the box a change is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The firmware (version, vendor, date).
    Bios,
    /// The system's identity.
    System,
    /// The mainboard.
    Baseboard,
    /// The enclosure.
    Chassis,
    /// A processor.
    Processor,
    /// A memory module or slot.
    Dimm,
    /// A PCI function that came or went or is another device now.
    PciDevice,
    /// A PCIe link that trained differently.
    Link,
    /// A GPU.
    Gpu,
    /// An NVMe drive.
    Nvme,
    /// The BMC.
    Bmc,
    /// The OS image.
    Os,
}

/// One difference between the record and the box now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    /// Which part.
    pub part: Part,
    /// Which one of them: `GPU 0000:41:00.0`, `DIMM P0-DIMMB1`, `BIOS`.
    pub subject: String,
    /// What it was, when the change is of one value.
    pub was: Option<String>,
    /// What it is now, when the change is of one value.
    pub now: Option<String>,
    /// The change in one line: `GPU 0000:41:00.0 serial 123 → 456`.
    pub message: String,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// What changed from `record` to `current`. Parts that either side could not read are
/// not compared: a table that could not be read is no missing DIMM.
pub fn diff(record: &BirthRecord, current: &BirthRecord) -> Vec<Change> {
    let mut out = Changes::default();
    firmware(&mut out, record, current);
    let gone_or_new = gpus(&mut out, &record.gpus, &current.gpus);
    let drives = nvme(&mut out, &record.nvme, &current.nvme);
    pci(
        &mut out,
        &record.pci_devices,
        &current.pci_devices,
        &gone_or_new.union(&drives).cloned().collect(),
    );
    bmc(&mut out, record.bmc.as_ref(), current.bmc.as_ref());
    if let (Some(was), Some(now)) = (&record.os, &current.os) {
        out.field(Part::Os, "OS", "image", &was.image_id, &now.image_id);
        out.field(
            Part::Os,
            "OS",
            "image version",
            &was.image_version,
            &now.image_version,
        );
        out.field(Part::Os, "OS", "version", &was.version_id, &now.version_id);
    }
    out.0
}

#[derive(Default)]
struct Changes(Vec<Change>);

impl Changes {
    /// A change of one value, `{subject} {label} {was} → {now}`, when they differ.
    fn field(
        &mut self,
        part: Part,
        subject: &str,
        label: &str,
        was: &Option<String>,
        now: &Option<String>,
    ) {
        if was != now {
            let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".to_string());
            self.0.push(Change {
                part,
                subject: subject.to_string(),
                message: format!("{subject} {label} {} → {}", show(was), show(now)),
                was: was.clone(),
                now: now.clone(),
            });
        }
    }

    /// A change told whole (`DIMM A1 missing (was …)`).
    fn event(&mut self, part: Part, subject: &str, message: String) {
        self.0.push(Change {
            part,
            subject: subject.to_string(),
            was: None,
            now: None,
            message,
        });
    }
}

fn firmware(out: &mut Changes, record: &BirthRecord, current: &BirthRecord) {
    let (was, now) = (&record.firmware, &current.firmware);
    out.field(
        Part::Bios,
        "BIOS",
        "vendor",
        &was.bios.vendor,
        &now.bios.vendor,
    );
    out.field(
        Part::Bios,
        "BIOS",
        "version",
        &was.bios.version,
        &now.bios.version,
    );
    out.field(
        Part::Bios,
        "BIOS",
        "release date",
        &was.bios.release_date,
        &now.bios.release_date,
    );
    let (a, b) = (&was.system, &now.system);
    out.field(
        Part::System,
        "system",
        "manufacturer",
        &a.manufacturer,
        &b.manufacturer,
    );
    out.field(Part::System, "system", "product", &a.product, &b.product);
    out.field(Part::System, "system", "serial", &a.serial, &b.serial);
    out.field(Part::System, "system", "UUID", &a.uuid, &b.uuid);
    let (a, b) = (&was.baseboard, &now.baseboard);
    out.field(
        Part::Baseboard,
        "baseboard",
        "manufacturer",
        &a.manufacturer,
        &b.manufacturer,
    );
    out.field(
        Part::Baseboard,
        "baseboard",
        "product",
        &a.product,
        &b.product,
    );
    out.field(
        Part::Baseboard,
        "baseboard",
        "version",
        &a.version,
        &b.version,
    );
    out.field(Part::Baseboard, "baseboard", "serial", &a.serial, &b.serial);
    if let (Some(a), Some(b)) = (&was.chassis, &now.chassis) {
        out.field(Part::Chassis, "chassis", "serial", &a.serial, &b.serial);
    }
    if was.source == FirmwareSource::Smbios && now.source == FirmwareSource::Smbios {
        processors(out, &was.processors, &now.processors);
    }
    if let (Some(a), Some(b)) = (&was.dimms, &now.dimms) {
        dimms(out, a, b);
    }
}

fn processors(out: &mut Changes, was: &[ProcessorInfo], now: &[ProcessorInfo]) {
    for i in 0..was.len().max(now.len()) {
        let subject = |p: &ProcessorInfo| match &p.socket {
            Some(socket) => format!("CPU {socket}"),
            None => format!("CPU {}", i + 1),
        };
        let name = |p: &ProcessorInfo| {
            p.populated
                .then(|| p.version.clone())
                .flatten()
                .unwrap_or_else(|| "empty".to_string())
        };
        match (was.get(i), now.get(i)) {
            (Some(a), Some(b)) => {
                let s = subject(b);
                out.field(Part::Processor, &s, "model", &Some(name(a)), &Some(name(b)));
                let count = |v: Option<u16>| v.map(|n| n.to_string());
                out.field(
                    Part::Processor,
                    &s,
                    "cores",
                    &count(a.cores),
                    &count(b.cores),
                );
            }
            (Some(a), None) => out.event(
                Part::Processor,
                &subject(a),
                format!("{} missing (was {})", subject(a), name(a)),
            ),
            (None, Some(b)) => out.event(
                Part::Processor,
                &subject(b),
                format!("new {} ({})", subject(b), name(b)),
            ),
            (None, None) => {}
        }
    }
}

/// DIMM slots by locator and bank: two banks may name their slots alike.
fn dimms(out: &mut Changes, was: &[MemoryDevice], now: &[MemoryDevice]) {
    let key = |d: &MemoryDevice| (d.locator.clone(), d.bank.clone());
    let by_slot = |list: &[MemoryDevice]| -> BTreeMap<_, MemoryDevice> {
        list.iter().map(|d| (key(d), d.clone())).collect()
    };
    let (was_slots, now_slots) = (by_slot(was), by_slot(now));
    let mut keys: Vec<_> = was.iter().chain(now).map(key).collect();
    let mut seen = BTreeSet::new();
    keys.retain(|k| seen.insert(k.clone()));
    let names: Vec<Option<String>> = was.iter().chain(now).map(|d| d.locator.clone()).collect();
    for k in keys {
        let (locator, bank) = &k;
        let subject = match (locator, bank) {
            // The bank tells slots apart only where the locator does not.
            (Some(l), Some(b)) if names.iter().filter(|n| n.as_ref() == Some(l)).count() > 2 => {
                format!("DIMM {l} ({b})")
            }
            (Some(l), _) => format!("DIMM {l}"),
            (None, Some(b)) => format!("DIMM in {b}"),
            (None, None) => "DIMM without a locator".to_string(),
        };
        let installed =
            |slots: &BTreeMap<_, MemoryDevice>| slots.get(&k).filter(|d| d.installed).cloned();
        match (installed(&was_slots), installed(&now_slots)) {
            (Some(a), None) => out.event(
                Part::Dimm,
                &subject,
                format!("{subject} missing (was {})", describe_dimm(&a)),
            ),
            (None, Some(b)) => out.event(
                Part::Dimm,
                &subject,
                format!("{subject} added ({})", describe_dimm(&b)),
            ),
            (Some(a), Some(b)) => {
                out.field(
                    Part::Dimm,
                    &subject,
                    "manufacturer",
                    &a.manufacturer,
                    &b.manufacturer,
                );
                out.field(
                    Part::Dimm,
                    &subject,
                    "part number",
                    &a.part_number,
                    &b.part_number,
                );
                out.field(Part::Dimm, &subject, "serial", &a.serial, &b.serial);
                let size = |d: &MemoryDevice| d.size_bytes.map(format_bytes);
                out.field(Part::Dimm, &subject, "size", &size(&a), &size(&b));
                let mts = |v: Option<u32>| v.map(|v| format!("{v} MT/s"));
                out.field(
                    Part::Dimm,
                    &subject,
                    "speed",
                    &mts(a.speed_mts),
                    &mts(b.speed_mts),
                );
                out.field(
                    Part::Dimm,
                    &subject,
                    "configured speed",
                    &mts(a.configured_speed_mts),
                    &mts(b.configured_speed_mts),
                );
            }
            (None, None) => {}
        }
    }
}

/// `Samsung M393A4K40EB3-CWE 32 GiB`.
fn describe_dimm(d: &MemoryDevice) -> String {
    let words: Vec<String> = [
        d.manufacturer.clone(),
        d.part_number.clone(),
        d.size_bytes.map(format_bytes),
    ]
    .into_iter()
    .flatten()
    .collect();
    if words.is_empty() {
        "a module".to_string()
    } else {
        words.join(" ")
    }
}

/// GPUs that came or went; returns their slots (`0000:41:00`), whose other functions
/// need no message of their own.
fn gpus(out: &mut Changes, was: &[GpuEntry], now: &[GpuEntry]) -> BTreeSet<String> {
    let mut slots = BTreeSet::new();
    let by_address = |list: &[GpuEntry]| -> BTreeMap<String, GpuEntry> {
        list.iter()
            .map(|g| (g.address.clone(), g.clone()))
            .collect()
    };
    let (a_map, b_map) = (by_address(was), by_address(now));
    let describe = |g: &GpuEntry| match &g.serial {
        Some(serial) => format!("{}, serial {serial}", g.model),
        None => g.model.clone(),
    };
    for (address, a) in &a_map {
        let subject = format!("GPU {address}");
        match b_map.get(address) {
            None => {
                slots.insert(slot_of(address));
                out.event(
                    Part::Gpu,
                    &subject,
                    format!("{subject} missing (was {})", describe(a)),
                );
            }
            Some(b) => {
                out.field(
                    Part::Gpu,
                    &subject,
                    "model",
                    &Some(a.model.clone()),
                    &Some(b.model.clone()),
                );
                out.field(Part::Gpu, &subject, "serial", &a.serial, &b.serial);
                out.field(Part::Gpu, &subject, "UUID", &a.uuid, &b.uuid);
                out.field(Part::Gpu, &subject, "VBIOS", &a.vbios, &b.vbios);
            }
        }
    }
    for (address, b) in &b_map {
        if !a_map.contains_key(address) {
            slots.insert(slot_of(address));
            let subject = format!("GPU {address}");
            out.event(
                Part::Gpu,
                &subject,
                format!("new {subject} ({})", describe(b)),
            );
        }
    }
    slots
}

/// NVMe drives by PCI address (the kernel's numbering may differ from boot to boot);
/// returns the slots of drives that came or went.
fn nvme(out: &mut Changes, was: &[NvmeEntry], now: &[NvmeEntry]) -> BTreeSet<String> {
    let mut slots = BTreeSet::new();
    let key = |d: &NvmeEntry| d.address.clone().unwrap_or_else(|| d.name.clone());
    let by_key = |list: &[NvmeEntry]| -> BTreeMap<String, NvmeEntry> {
        list.iter().map(|d| (key(d), d.clone())).collect()
    };
    let (a_map, b_map) = (by_key(was), by_key(now));
    let describe = |d: &NvmeEntry| {
        let mut words = vec![d.model.clone().unwrap_or_else(|| "drive".to_string())];
        if let Some(serial) = &d.serial {
            words.push(format!("serial {serial}"));
        }
        words.join(", ")
    };
    for (k, a) in &a_map {
        let subject = format!("NVMe {k}");
        match b_map.get(k) {
            None => {
                slots.insert(slot_of(k));
                out.event(
                    Part::Nvme,
                    &subject,
                    format!("{subject} missing (was {})", describe(a)),
                );
            }
            Some(b) => {
                out.field(Part::Nvme, &subject, "model", &a.model, &b.model);
                out.field(Part::Nvme, &subject, "serial", &a.serial, &b.serial);
                out.field(Part::Nvme, &subject, "firmware", &a.firmware, &b.firmware);
            }
        }
    }
    for (k, b) in &b_map {
        if !a_map.contains_key(k) {
            slots.insert(slot_of(k));
            let subject = format!("NVMe {k}");
            out.event(
                Part::Nvme,
                &subject,
                format!("new {subject} ({})", describe(b)),
            );
        }
    }
    slots
}

/// `0000:41:00` of `0000:41:00.0`: the functions of one card.
fn slot_of(address: &str) -> String {
    address
        .rsplit_once('.')
        .map_or(address, |(slot, _)| slot)
        .to_string()
}

fn pci(out: &mut Changes, was: &[PciEntry], now: &[PciEntry], told: &BTreeSet<String>) {
    let by_address = |list: &[PciEntry]| -> BTreeMap<String, PciEntry> {
        list.iter()
            .map(|d| (d.address.clone(), d.clone()))
            .collect()
    };
    let (a_map, b_map) = (by_address(was), by_address(now));
    let mut links = BTreeMap::new();
    for (address, a) in &a_map {
        let subject = format!("PCI device {address}");
        match b_map.get(address) {
            None if !told.contains(&slot_of(address)) => out.event(
                Part::PciDevice,
                &subject,
                format!("{subject} missing (was {})", a.name),
            ),
            None => {}
            Some(b) if a.id != b.id || a.subsystem != b.subsystem => out.event(
                Part::PciDevice,
                &subject,
                format!("{subject} is now {} (was {})", b.name, a.name),
            ),
            Some(b) => {
                if let Some(change) = link(a.link.as_ref(), b.link.as_ref()) {
                    links.insert(address.clone(), (change, b.parent.clone()));
                }
            }
        }
    }
    // Both ends of a link, and every function of a card, report the same change: it is
    // told once, for the device furthest from the root (the GPU rather than its port)
    // and its first function.
    let said_below: BTreeSet<(String, (String, String))> = links
        .values()
        .filter_map(|(change, parent)| Some((parent.clone()?, change.clone())))
        .collect();
    for (address, (change, _)) in &links {
        let first_function = format!("{}.0", slot_of(address));
        let told_by_first = first_function != *address
            && links.get(&first_function).is_some_and(|(c, _)| c == change);
        if told_by_first || said_below.contains(&(address.clone(), change.clone())) {
            continue;
        }
        let subject = format!("link of {address}");
        out.0.push(Change {
            part: Part::Link,
            message: format!("{subject} trained {} → {}", change.0, change.1),
            subject,
            was: Some(change.0.clone()),
            now: Some(change.1.clone()),
        });
    }
    for (address, b) in &b_map {
        if !a_map.contains_key(address) && !told.contains(&slot_of(address)) {
            let subject = format!("PCI device {address}");
            out.event(
                Part::PciDevice,
                &subject,
                format!("new PCI device {address} ({})", b.name),
            );
        }
    }
}

/// A link that trained narrower or slower, as (was, now). GPUs drop an idle link to
/// 2.5 GT/s and raise it under load, so a link at 2.5 GT/s that can go faster tells
/// nothing of its speed.
fn link(was: Option<&LinkEntry>, now: Option<&LinkEntry>) -> Option<(String, String)> {
    let (a, b) = (was?, now?);
    const PARKED: &str = "2.5 GT/s";
    let speed = |l: &LinkEntry| {
        l.speed
            .clone()
            .filter(|s| !(s == PARKED && l.max_speed.as_deref().is_some_and(|m| m != PARKED)))
    };
    let speed_changed = matches!((speed(a), speed(b)), (Some(x), Some(y)) if x != y)
        || a.speed.is_some() != b.speed.is_some();
    (speed_changed || a.width != b.width).then(|| (a.describe(), b.describe()))
}

/// The BMC's fields, one by one where both are objects.
fn bmc(out: &mut Changes, was: Option<&Value>, now: Option<&Value>) {
    let (Some(a), Some(b)) = (was, now) else {
        return;
    };
    let text = |v: Option<&Value>| {
        v.filter(|v| !v.is_null()).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    match (a.as_object(), b.as_object()) {
        (Some(a), Some(b)) => {
            // A field either side could not read, or why it could not, is no change.
            let keys: BTreeSet<&String> = a
                .keys()
                .filter(|k| !k.ends_with("_unreadable"))
                .filter(|k| text(a.get(*k)).is_some() && text(b.get(*k)).is_some())
                .collect();
            for k in keys {
                let label = k.replace('_', " ");
                out.field(Part::Bmc, "BMC", &label, &text(a.get(k)), &text(b.get(k)));
            }
        }
        _ => out.field(Part::Bmc, "BMC", "identity", &text(Some(a)), &text(Some(b))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Firmware, OsImage};
    use super::*;
    use crate::inventory::smbios::{BaseboardInfo, BiosInfo, SystemInfo};

    fn dimm(locator: &str, serial: &str) -> MemoryDevice {
        MemoryDevice {
            locator: Some(locator.into()),
            bank: Some(format!("BANK {locator}")),
            installed: true,
            size_bytes: Some(32 << 30),
            memory_type: Some("DDR4".into()),
            speed_mts: Some(3200),
            configured_speed_mts: Some(3200),
            manufacturer: Some("Samsung".into()),
            serial: Some(serial.into()),
            part_number: Some("M393A4K40EB3-CWE".into()),
        }
    }

    fn link(speed: &str, width: u32) -> Option<LinkEntry> {
        Some(LinkEntry {
            speed: Some(speed.into()),
            width: Some(width),
            max_speed: Some("16.0 GT/s".into()),
            max_width: Some(16),
        })
    }

    fn record() -> BirthRecord {
        BirthRecord {
            schema_version: 1,
            recorded_at: chrono::Utc::now(),
            tinyperf_version: "0.1.0".into(),
            baseboard_serial: Some("M80".into()),
            firmware: Firmware {
                source: FirmwareSource::Smbios,
                smbios_version: Some("3.3".into()),
                bios: BiosInfo {
                    vendor: Some("AMI".into()),
                    version: Some("P3.30".into()),
                    release_date: Some("01/02/2023".into()),
                },
                system: SystemInfo::default(),
                baseboard: BaseboardInfo {
                    serial: Some("M80".into()),
                    ..BaseboardInfo::default()
                },
                chassis: None,
                processors: Vec::new(),
                dimms: Some(vec![dimm("P0-DIMMA1", "1"), dimm("P0-DIMMB1", "2")]),
            },
            pci_devices: vec![
                PciEntry {
                    address: "0000:40:01.1".into(),
                    id: "1022:1483".into(),
                    subsystem: None,
                    class: Some("0x060400".into()),
                    revision: None,
                    name: "AMD PCI bridge [1022:1483]".into(),
                    link: link("16.0 GT/s", 16),
                    parent: None,
                },
                PciEntry {
                    address: "0000:41:00.0".into(),
                    id: "10de:2684".into(),
                    subsystem: None,
                    class: Some("0x030000".into()),
                    revision: None,
                    name: "NVIDIA GeForce RTX 4090 [10de:2684]".into(),
                    link: link("16.0 GT/s", 16),
                    parent: Some("0000:40:01.1".into()),
                },
                PciEntry {
                    address: "0000:41:00.1".into(),
                    id: "10de:22ba".into(),
                    subsystem: None,
                    class: None,
                    revision: None,
                    name: "NVIDIA audio device [10de:22ba]".into(),
                    link: link("16.0 GT/s", 16),
                    parent: Some("0000:40:01.1".into()),
                },
            ],
            gpus: vec![GpuEntry {
                address: "0000:41:00.0".into(),
                model: "NVIDIA GeForce RTX 4090".into(),
                vbios: Some("95.02".into()),
                serial: Some("123".into()),
                uuid: None,
            }],
            nvme: Vec::new(),
            bmc: None,
            os: Some(OsImage {
                image_version: Some("1.2".into()),
                ..OsImage::default()
            }),
            notes: Vec::new(),
        }
    }

    fn messages(a: &BirthRecord, b: &BirthRecord) -> Vec<String> {
        diff(a, b).into_iter().map(|c| c.message).collect()
    }

    #[test]
    fn the_same_box_has_no_changes() {
        let a = record();
        let mut b = a.clone();
        b.recorded_at = chrono::Utc::now();
        b.notes.push("something unreadable".into());
        assert_eq!(messages(&a, &b), Vec::<String>::new());
    }

    #[test]
    fn changes_read_as_an_operator_would_say_them() {
        let a = record();
        let mut b = a.clone();
        b.gpus[0].serial = Some("456".into());
        b.firmware.bios.version = Some("P3.50".into());
        let dimms = b.firmware.dimms.as_mut().unwrap();
        dimms[1] = MemoryDevice {
            installed: false,
            size_bytes: None,
            manufacturer: None,
            part_number: None,
            serial: None,
            ..dimms[1].clone()
        };
        b.pci_devices[1].link = link("8.0 GT/s", 16);
        b.pci_devices.push(PciEntry {
            address: "0000:c1:00.0".into(),
            name: "Mellanox Ethernet controller [15b3:1017]".into(),
            ..b.pci_devices[2].clone()
        });
        b.os.as_mut().unwrap().image_version = Some("1.3".into());
        assert_eq!(
            messages(&a, &b),
            [
                "BIOS version P3.30 → P3.50",
                "DIMM P0-DIMMB1 missing (was Samsung M393A4K40EB3-CWE 32 GiB)",
                "GPU 0000:41:00.0 serial 123 → 456",
                "link of 0000:41:00.0 trained 16.0 GT/s x16 → 8.0 GT/s x16",
                "new PCI device 0000:c1:00.0 (Mellanox Ethernet controller [15b3:1017])",
                "OS image version 1.2 → 1.3",
            ]
        );
        let change = &diff(&a, &b)[2];
        assert_eq!(change.part, Part::Gpu);
        assert_eq!(
            (change.was.as_deref(), change.now.as_deref()),
            (Some("123"), Some("456"))
        );
    }

    #[test]
    fn a_gpu_gone_is_one_change_for_its_card() {
        let a = record();
        let mut b = a.clone();
        b.gpus.clear();
        b.pci_devices.truncate(1);
        assert_eq!(
            messages(&a, &b),
            ["GPU 0000:41:00.0 missing (was NVIDIA GeForce RTX 4090, serial 123)"]
        );
        assert_eq!(
            messages(&b, &a),
            ["new GPU 0000:41:00.0 (NVIDIA GeForce RTX 4090, serial 123)"]
        );
    }

    #[test]
    fn an_idle_link_is_no_change_but_a_narrower_one_is() {
        let a = record();
        let mut b = a.clone();
        b.pci_devices[1].link = link("2.5 GT/s", 16);
        assert!(messages(&a, &b).is_empty());
        b.pci_devices[1].link = link("2.5 GT/s", 8);
        assert_eq!(
            messages(&a, &b),
            ["link of 0000:41:00.0 trained 16.0 GT/s x16 → 2.5 GT/s x8"]
        );
    }

    #[test]
    fn a_link_is_told_once_for_the_device_furthest_from_the_root() {
        let a = record();
        let mut b = a.clone();
        for device in &mut b.pci_devices {
            device.link = link("16.0 GT/s", 8);
        }
        assert_eq!(
            messages(&a, &b),
            ["link of 0000:41:00.0 trained 16.0 GT/s x16 → 16.0 GT/s x8"]
        );
    }

    #[test]
    fn what_could_not_be_read_is_not_compared() {
        let a = record();
        let mut b = a.clone();
        b.firmware.dimms = None;
        b.os = None;
        assert!(messages(&a, &b).is_empty());
    }

    #[test]
    fn bmc_fields_are_compared_one_by_one() {
        let mut a = record();
        a.bmc = Some(serde_json::json!({"firmware_version": "1.10", "manufacturer_id": 10876}));
        let mut b = a.clone();
        b.bmc = Some(serde_json::json!({"firmware_version": "1.12", "manufacturer_id": 10876}));
        assert_eq!(messages(&a, &b), ["BMC firmware version 1.10 → 1.12"]);
    }
}
