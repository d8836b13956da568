//! Reading the box's parts for its record.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::Utc;
use serde_json::Value;

use super::{
    BirthRecord, Firmware, FirmwareSource, GpuEntry, LinkEntry, NvmeEntry, OsImage, PciEntry,
    BIRTH_RECORD_SCHEMA_VERSION,
};
use crate::inventory::gpu::{self, GpuVendor};
use crate::inventory::nvme;
use crate::inventory::pci::{self, PciAddress, PciDevice, PciLink};
use crate::inventory::read::{self, Findings, Presence};
use crate::inventory::smbios::{self, BaseboardInfo, BiosInfo, SystemInfo};

/// os-release is a few hundred bytes; a larger file is not one.
const OS_RELEASE_LIMIT: usize = 64 * 1024;

/// Reads the box under `root` as it is now. `bmc` is the BMC's identity, or why it was
/// not read. Nothing fails: what cannot be read is a note in the record.
pub fn take(root: &Path, bmc: Result<Value, String>) -> BirthRecord {
    let mut findings = Findings::default();
    let firmware = firmware(root, &mut findings);
    let devices = pci::enumerate(root, &mut findings);
    let gpus = gpus(root, &devices, &mut findings);
    let pci_devices = devices
        .values()
        .map(|d| pci_entry(d, gpus.iter().find(|g| g.address == d.address.to_string())))
        .collect();
    let nvme = nvme::find_controllers(root, &devices, &mut findings)
        .into_iter()
        .map(|c| NvmeEntry {
            name: c.name,
            address: c.address.map(|a| a.to_string()),
            model: c.model,
            serial: c.serial,
            firmware: c.firmware,
        })
        .collect();
    let os = os_image(root, &mut findings);
    let bmc = match bmc {
        Ok(value) => Some(value),
        Err(why) => {
            findings.push(why);
            None
        }
    };
    BirthRecord {
        schema_version: BIRTH_RECORD_SCHEMA_VERSION,
        recorded_at: Utc::now(),
        tinyperf_version: env!("CARGO_PKG_VERSION").to_string(),
        baseboard_serial: firmware.baseboard.serial.clone(),
        firmware,
        pci_devices,
        gpus,
        nvme,
        bmc,
        os,
        notes: findings.into_vec(),
    }
}

/// The BMC's identity as JSON, or why it was not read (no `ipmitool`, no BMC answering).
/// Asking a BMC takes seconds; callers read it once and hand it to [`take`].
pub fn read_bmc() -> Result<Value, String> {
    let ipmitool = crate::runtime::power::ipmi::find_ipmitool()
        .ok_or_else(|| "BMC identity not read: ipmitool not found".to_string())?;
    let identity = crate::runtime::bmc::identity::read(&ipmitool)
        .map_err(|e| format!("BMC identity not read: {e}"))?;
    serde_json::to_value(identity).map_err(|e| format!("BMC identity not read: {e}"))
}

/// The SMBIOS tables; where they cannot be read (they are root's alone on most
/// systems), what `sys/class/dmi/id` shows to everyone.
fn firmware(root: &Path, findings: &mut Findings) -> Firmware {
    match smbios::read(root) {
        Ok(tables) => Firmware {
            source: FirmwareSource::Smbios,
            smbios_version: Some(tables.version),
            bios: tables.bios.unwrap_or_default(),
            system: tables.system.unwrap_or_default(),
            baseboard: tables.baseboard.unwrap_or_default(),
            chassis: tables.chassis,
            processors: tables.processors,
            dimms: Some(tables.memory_devices),
        },
        Err(e) => {
            findings.push(format!(
                "SMBIOS tables not read ({e}); firmware identity from sys/class/dmi/id, \
                 without memory devices"
            ));
            let dir = root.join("sys/class/dmi/id");
            let mut field = |name: &str| {
                read::text(&dir.join(name), Presence::Optional, findings).filter(|v| !v.is_empty())
            };
            Firmware {
                source: FirmwareSource::Sysfs,
                smbios_version: None,
                bios: BiosInfo {
                    vendor: field("bios_vendor"),
                    version: field("bios_version"),
                    release_date: field("bios_date"),
                },
                system: SystemInfo {
                    manufacturer: field("sys_vendor"),
                    product: field("product_name"),
                    version: field("product_version"),
                    serial: field("product_serial"),
                    uuid: field("product_uuid").map(|u| u.to_ascii_uppercase()),
                },
                baseboard: BaseboardInfo {
                    manufacturer: field("board_vendor"),
                    product: field("board_name"),
                    version: field("board_version"),
                    serial: field("board_serial"),
                },
                chassis: None,
                processors: Vec::new(),
                dimms: None,
            }
        }
    }
}

fn gpus(
    root: &Path,
    devices: &BTreeMap<PciAddress, PciDevice>,
    findings: &mut Findings,
) -> Vec<GpuEntry> {
    devices
        .values()
        .filter_map(|d| Some((d, gpu::gpu_vendor(d)?)))
        .map(|(device, vendor)| {
            let text = |path: &Path, findings: &mut Findings| {
                read::text(path, Presence::Optional, findings).filter(|v| !v.is_empty())
            };
            let (vbios, serial, uuid) = match vendor {
                GpuVendor::Amd => {
                    let dir = &device.sysfs_dir;
                    (
                        text(&dir.join("vbios_version"), findings),
                        text(&dir.join("serial_number"), findings),
                        text(&dir.join("unique_id"), findings),
                    )
                }
                GpuVendor::Nvidia => {
                    let info = root
                        .join("proc/driver/nvidia/gpus")
                        .join(device.address.to_string())
                        .join("information");
                    let info = text(&info, findings).unwrap_or_default();
                    let field = |key: &str| {
                        info.lines().find_map(|line| {
                            let (k, v) = line.split_once(':')?;
                            let v = v.trim();
                            (k.trim() == key && !v.is_empty()).then(|| v.to_string())
                        })
                    };
                    (field("Video BIOS"), None, field("GPU UUID"))
                }
            };
            GpuEntry {
                address: device.address.to_string(),
                model: gpu_model(device),
                vbios,
                serial,
                uuid,
            }
        })
        .collect()
}

fn gpu_model(device: &PciDevice) -> String {
    let (Some(vendor), Some(id)) = (device.vendor, device.device) else {
        return device.id_pair();
    };
    let maker = vendor_name(vendor.0).unwrap_or("unknown vendor");
    match gpu::model_name(vendor.0, id.0, device.revision) {
        Some(model) => format!("{maker} {model}"),
        None => format!("{maker} GPU {}", device.id_pair()),
    }
}

fn pci_entry(device: &PciDevice, gpu: Option<&GpuEntry>) -> PciEntry {
    let name = match gpu {
        Some(g) => format!("{} [{}]", g.model, device.id_pair()),
        None => {
            let maker = device.vendor.and_then(|v| vendor_name(v.0));
            let kind = device.class.map(|c| class_name(c.0));
            let words: Vec<&str> = [maker, kind].into_iter().flatten().collect();
            if words.is_empty() {
                format!("[{}]", device.id_pair())
            } else {
                format!("{} [{}]", words.join(" "), device.id_pair())
            }
        }
    };
    let subsystem = match (device.subsystem_vendor, device.subsystem_device) {
        (Some(v), Some(d)) => Some(format!("{:04x}:{:04x}", v.0, d.0)),
        _ => None,
    };
    PciEntry {
        address: device.address.to_string(),
        id: device.id_pair(),
        subsystem,
        class: device.class.map(|c| c.to_string()),
        revision: device.revision.map(|r| format!("0x{r:02x}")),
        name,
        link: link_entry(&device.link),
        parent: device.upstream.last().map(|a| a.to_string()),
    }
}

fn link_entry(link: &PciLink) -> Option<LinkEntry> {
    let entry = LinkEntry {
        speed: link.current_speed_gts.map(|s| s.to_string()),
        width: link.current_width,
        max_speed: link.max_speed_gts.map(|s| s.to_string()),
        max_width: link.max_width,
    };
    (link.is_known() || entry.max_speed.is_some() || entry.max_width.is_some()).then_some(entry)
}

/// The makers found in GPU boxes; others are named by their id alone.
fn vendor_name(vendor: u16) -> Option<&'static str> {
    Some(match vendor {
        0x1002 | 0x1022 => "AMD",
        0x10de => "NVIDIA",
        0x8086 => "Intel",
        0x144d => "Samsung",
        0x1a03 => "ASPEED",
        0x15b3 => "Mellanox",
        0x14e4 => "Broadcom",
        0x1000 => "Broadcom / LSI",
        0x10b5 => "Broadcom / PLX",
        0x1344 => "Micron",
        0x15b7 => "Western Digital",
        0x1e0f => "KIOXIA",
        0x1c5c => "SK hynix",
        0x1987 => "Phison",
        0x1d0f => "Amazon",
        0x1af4 => "Red Hat (virtio)",
        _ => return None,
    })
}

/// A few words for the class code, as lspci's classes read.
fn class_name(class: u32) -> &'static str {
    match class >> 8 {
        0x0108 => "NVMe controller",
        0x0106 => "SATA controller",
        0x0104 => "RAID controller",
        0x0107 => "SAS controller",
        0x0200 => "Ethernet controller",
        0x0207 => "InfiniBand controller",
        0x0300 => "VGA controller",
        0x0302 => "3D controller",
        0x0380 => "display controller",
        0x0403 => "audio device",
        0x0500 => "RAM memory",
        0x0600 => "host bridge",
        0x0601 => "ISA bridge",
        0x0604 => "PCI bridge",
        0x0800 => "PIC",
        0x0806 => "IOMMU",
        0x0880 => "system peripheral",
        0x0c03 => "USB controller",
        0x0c05 => "SMBus controller",
        0x1080 => "encryption controller",
        0x1300 => "non-essential instrumentation",
        _ => "device",
    }
}

/// The OS image from `etc/os-release`, else `usr/lib/os-release`.
fn os_image(root: &Path, findings: &mut Findings) -> Option<OsImage> {
    for rel in ["etc/os-release", "usr/lib/os-release"] {
        let path = root.join(rel);
        match read::bytes(&path) {
            Ok(Some(bytes)) if bytes.len() <= OS_RELEASE_LIMIT => {
                return Some(parse_os_release(&String::from_utf8_lossy(&bytes)));
            }
            Ok(Some(_)) => {
                findings.push(format!(
                    "{}: larger than {OS_RELEASE_LIMIT} bytes, not read",
                    path.display()
                ));
                return None;
            }
            Ok(None) => continue,
            Err(e) => {
                findings.record(e);
                return None;
            }
        }
    }
    findings.push("os-release not found (etc/os-release, usr/lib/os-release)");
    None
}

/// Parses os-release: `KEY=value` lines, values optionally quoted in shell style.
pub fn parse_os_release(text: &str) -> OsImage {
    let mut fields = crate::inventory::os_release::parse(text);
    let mut get = |key: &str| fields.remove(key).filter(|v| !v.is_empty());
    OsImage {
        id: get("ID"),
        pretty_name: get("PRETTY_NAME"),
        version_id: get("VERSION_ID"),
        image_id: get("IMAGE_ID"),
        image_version: get("IMAGE_VERSION"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_values_lose_their_quotes() {
        let os = parse_os_release(
            "# comment\nPRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\n\
             VERSION_ID='13'\nIMAGE_ID=tinybox\nIMAGE_VERSION=\"1.4.\\\"2\\\"\"\nJUNK\n",
        );
        assert_eq!(
            os.pretty_name.as_deref(),
            Some("Debian GNU/Linux 13 (trixie)")
        );
        assert_eq!(os.id.as_deref(), Some("debian"));
        assert_eq!(os.version_id.as_deref(), Some("13"));
        assert_eq!(os.image_id.as_deref(), Some("tinybox"));
        assert_eq!(os.image_version.as_deref(), Some("1.4.\"2\""));
        assert_eq!(
            parse_os_release("ID=\"\n"),
            OsImage {
                id: Some("\"".into()),
                ..OsImage::default()
            }
        );
    }
}
