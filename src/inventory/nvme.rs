//! NVMe controllers (`sys/class/nvme/nvme*`) and the PCIe links they sit on.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::Serialize;

use super::pci::{self, PathLink, PciAddress, PciDevice};
use super::read::{self, Findings, Presence};

/// One NVMe controller (`/sys/class/nvme/nvme*`).
#[derive(Debug, Clone, Serialize)]
pub struct NvmeController {
    /// `nvme0`.
    pub name: String,
    /// The PCI function behind it; `None` for fabrics controllers (NVMe over TCP/RDMA).
    pub address: Option<PciAddress>,
    /// `pcie`, `tcp`, `rdma`, `fc` or `loop`, as the kernel names it.
    pub transport: Option<String>,
    /// The drive's model.
    pub model: Option<String>,
    /// The drive's serial number.
    pub serial: Option<String>,
    /// The drive's firmware revision.
    pub firmware: Option<String>,
    /// The slowest link between the controller and its root port.
    pub link: Option<PathLink>,
}

impl NvmeController {
    /// Local PCIe drives, the ones a SKU counts.
    pub fn is_pcie(&self) -> bool {
        self.address.is_some()
    }
}

pub fn find_controllers(
    root: &Path,
    devices: &BTreeMap<PciAddress, PciDevice>,
    findings: &mut Findings,
) -> Vec<NvmeController> {
    let class_dir = root.join("sys/class/nvme");
    let entries = match fs::read_dir(&class_dir) {
        Ok(entries) => entries,
        // No NVMe driver loaded: nothing to list, nothing wrong.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            findings.push(format!(
                "{}: cannot list NVMe controllers: {e}",
                class_dir.display()
            ));
            return Vec::new();
        }
    };
    let mut controllers: Vec<NvmeController> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| is_controller_name(name))
        .map(|name| read_controller(&class_dir, name, devices, findings))
        .collect();
    controllers.sort_by_key(|c| controller_number(&c.name));
    controllers
}

/// `nvme0` and `nvme12` are controllers; `nvme-subsys0` is not.
fn is_controller_name(name: &str) -> bool {
    name.strip_prefix("nvme")
        .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

fn controller_number(name: &str) -> u32 {
    name.trim_start_matches("nvme").parse().unwrap_or(u32::MAX)
}

fn read_controller(
    class_dir: &Path,
    name: String,
    devices: &BTreeMap<PciAddress, PciDevice>,
    findings: &mut Findings,
) -> NvmeController {
    let dir = class_dir.join(&name);
    let device_link = dir.join("device");
    let address = match fs::canonicalize(&device_link) {
        Ok(target) => target
            .file_name()
            .and_then(|n| PciAddress::parse(&n.to_string_lossy())),
        Err(_) if fs::symlink_metadata(&device_link).is_ok() => {
            findings.push(format!("{}: dangling symlink", device_link.display()));
            None
        }
        Err(_) => None,
    };
    let field = |file: &str, findings: &mut Findings| {
        read::text(&dir.join(file), Presence::Optional, findings).filter(|v| !v.is_empty())
    };
    let link = match address {
        Some(address) => match devices.get(&address) {
            Some(device) => Some(pci::path_link(device, devices)),
            None => {
                findings.push(format!(
                    "{name}: PCI device {address} is not under sys/bus/pci/devices"
                ));
                None
            }
        },
        None => None,
    };
    NvmeController {
        transport: field("transport", findings),
        model: field("model", findings),
        serial: field("serial", findings),
        firmware: field("firmware_rev", findings),
        name,
        address,
        link,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_numbered_controllers_count() {
        assert!(is_controller_name("nvme0"));
        assert!(is_controller_name("nvme12"));
        assert!(!is_controller_name("nvme-subsys0"));
        assert!(!is_controller_name("nvme"));
        assert!(!is_controller_name("nvme0n1"));
        assert!(controller_number("nvme2") < controller_number("nvme10"));
    }
}
