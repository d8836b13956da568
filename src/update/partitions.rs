//! The disk's partitions as sysfs shows them (`sys/class/block/<name>/uevent`), and what
//! the image's GPT partition names say they are.
//!
//! The image names its partitions `esp`, `<image>_<version>_v` (a slot's verity hash
//! partition), `<image>_<version>_r` (a slot's root), `_empty` (either partition of an
//! empty slot) and `var` (the state partition).

use std::path::Path;

/// One partition, from its `uevent` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    /// The kernel's name for it (`DEVNAME`, else the folder's name): `vda3`, `nvme0n1p3`.
    pub name: String,
    /// Its number in the partition table (`PARTN`).
    pub number: u32,
    /// Its GPT name (`PARTNAME`), empty when it has none.
    pub label: String,
    /// `MAJOR:MINOR`, when both are given.
    pub dev: Option<String>,
}

impl Partition {
    /// The disk the partition is on, from its name: `vda3` → `vda`, `nvme0n1p3` →
    /// `nvme0n1`, `mmcblk0p2` → `mmcblk0`.
    pub fn disk(&self) -> &str {
        let stem = self.name.trim_end_matches(|c: char| c.is_ascii_digit());
        match stem.strip_suffix('p') {
            Some(disk) if disk.ends_with(|c: char| c.is_ascii_digit()) => disk,
            _ => stem,
        }
    }

    /// What the image's naming makes of the partition.
    pub fn role(&self, image_id: &str) -> Role {
        match self.label.as_str() {
            "esp" => return Role::Esp,
            "var" => return Role::State,
            "_empty" => return Role::Empty,
            _ => {}
        }
        let versioned = self
            .label
            .strip_prefix(image_id)
            .and_then(|rest| rest.strip_prefix('_'));
        if let Some(rest) = versioned {
            if let Some(version) = rest.strip_suffix("_r").filter(|v| !v.is_empty()) {
                return Role::Root(version.to_string());
            }
            if let Some(version) = rest.strip_suffix("_v").filter(|v| !v.is_empty()) {
                return Role::Hash(version.to_string());
            }
        }
        Role::Other
    }
}

/// What a partition is to the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// The EFI system partition.
    Esp,
    /// A slot's root of this version.
    Root(String),
    /// A slot's verity hash partition of this version.
    Hash(String),
    /// A partition of an empty slot (root or hash: the name does not say).
    Empty,
    /// The state partition.
    State,
    /// Anything else.
    Other,
}

/// What reading the partitions found, and what could not be read.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Every partition read, in no particular order.
    pub partitions: Vec<Partition>,
    /// What was skipped, in words.
    pub notes: Vec<String>,
}

/// Reads every `sys/class/block/*/uevent` under `root` that describes a partition
/// (`DEVTYPE=partition`). A file that cannot be read or lacks `PARTN` is noted and
/// skipped.
pub fn scan(root: &Path) -> Scan {
    let mut out = Scan::default();
    let dir = root.join("sys/class/block");
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) => {
            out.notes.push(format!(
                "cannot list the block devices in {}: {e}",
                dir.display()
            ));
            return out;
        }
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in names {
        let path = dir.join(&name).join("uevent");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) => {
                out.notes
                    .push(format!("cannot read {}: {e}", path.display()));
                continue;
            }
        };
        match parse_uevent(&name, &text) {
            Ok(Some(mut partition)) => {
                if partition.label.is_empty() {
                    partition.label = udev_partition_name(root, partition.dev.as_deref());
                }
                out.partitions.push(partition)
            }
            Ok(None) => {}
            Err(why) => out.notes.push(format!("{}: {why}", path.display())),
        }
    }
    out
}

/// The GPT name udev read for device `MAJOR:MINOR` (`E:ID_PART_ENTRY_NAME=` in
/// `run/udev/data/bMAJOR:MINOR`), or `""`. A partition systemd-repart added to a
/// running system (the state partition at first boot) has no `PARTNAME` in its
/// `uevent` until the next boot reads the table, but udev names it at once.
pub fn udev_partition_name(root: &Path, dev: Option<&str>) -> String {
    let Some(dev) = dev else {
        return String::new();
    };
    std::fs::read_to_string(root.join("run/udev/data").join(format!("b{dev}")))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|line| line.strip_prefix("E:ID_PART_ENTRY_NAME="))
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// A partition from the lines of its `uevent` file (`KEY=value`); `None` for a device
/// that is not a partition, an error when a partition's lines do not add up.
pub fn parse_uevent(folder: &str, text: &str) -> Result<Option<Partition>, String> {
    let mut devtype = None;
    let mut devname = None;
    let mut partn = None;
    let mut partname = None;
    let mut major = None;
    let mut minor = None;
    for line in text.lines() {
        let Some((key, value)) = line.trim().split_once('=') else {
            continue;
        };
        match key {
            "DEVTYPE" => devtype = Some(value),
            "DEVNAME" => devname = Some(value),
            "PARTN" => partn = Some(value),
            "PARTNAME" => partname = Some(value),
            "MAJOR" => major = Some(value),
            "MINOR" => minor = Some(value),
            _ => {}
        }
    }
    if devtype != Some("partition") {
        return Ok(None);
    }
    let number = match partn.map(str::parse::<u32>) {
        Some(Ok(n)) => n,
        Some(Err(_)) => return Err(format!("PARTN={:?} is not a number", partn.unwrap_or(""))),
        None => return Err("a partition without PARTN".into()),
    };
    let name = devname
        .map(|n| n.trim_start_matches("/dev/"))
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .unwrap_or(folder)
        .to_string();
    let dev = match (major, minor) {
        (Some(a), Some(b)) => Some(format!("{a}:{b}")),
        _ => None,
    };
    Ok(Some(Partition {
        name,
        number,
        label: partname.unwrap_or_default().to_string(),
        dev,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(name: &str, label: &str) -> Partition {
        Partition {
            name: name.into(),
            number: 1,
            label: label.into(),
            dev: None,
        }
    }

    #[test]
    fn uevent_lines_make_a_partition() {
        let text = "MAJOR=254\nMINOR=3\nDEVNAME=vda3\nDEVTYPE=partition\nDISKSEQ=9\nPARTN=3\n\
                    PARTNAME=tinybox_20261205.1130_r\n";
        let p = parse_uevent("vda3", text).unwrap().unwrap();
        assert_eq!(p.name, "vda3");
        assert_eq!(p.number, 3);
        assert_eq!(p.dev.as_deref(), Some("254:3"));
        assert_eq!(p.role("tinybox"), Role::Root("20261205.1130".into()));
        let disk = "MAJOR=254\nMINOR=0\nDEVNAME=vda\nDEVTYPE=disk\n";
        assert_eq!(parse_uevent("vda", disk).unwrap(), None);
        assert!(parse_uevent("vda9", "DEVTYPE=partition\nPARTN=x\n").is_err());
        assert!(parse_uevent("vda9", "DEVTYPE=partition\n").is_err());
        let unnamed = parse_uevent("sdb1", "DEVTYPE=partition\nPARTN=1\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            (unnamed.name.as_str(), unnamed.label.as_str()),
            ("sdb1", "")
        );
    }

    #[test]
    fn a_partition_added_while_running_is_named_by_udev() {
        let root = tempfile::tempdir().unwrap();
        let block = root.path().join("sys/class/block/vda6");
        std::fs::create_dir_all(&block).unwrap();
        std::fs::write(
            block.join("uevent"),
            "MAJOR=254\nMINOR=6\nDEVNAME=vda6\nDEVTYPE=partition\nPARTN=6\n",
        )
        .unwrap();
        let scan = scan(root.path());
        assert_eq!(
            scan.partitions[0].label, "",
            "no name without udev's record"
        );
        let udev = root.path().join("run/udev/data");
        std::fs::create_dir_all(&udev).unwrap();
        std::fs::write(
            udev.join("b254:6"),
            "S:disk/by-partlabel/var\nE:ID_PART_ENTRY_TYPE=4d21b016-b534-45c2-a9fb-5c16e091fd2d\nE:ID_PART_ENTRY_NAME=var\n",
        )
        .unwrap();
        let scan = super::scan(root.path());
        assert_eq!(scan.partitions[0].label, "var");
        assert_eq!(scan.partitions[0].name, "vda6");
    }

    #[test]
    fn names_say_the_role_and_the_disk() {
        assert_eq!(part("vda1", "esp").role("tinybox"), Role::Esp);
        assert_eq!(part("vda6", "var").role("tinybox"), Role::State);
        assert_eq!(part("vda4", "_empty").role("tinybox"), Role::Empty);
        assert_eq!(
            part("vda2", "tinybox_1.2_v").role("tinybox"),
            Role::Hash("1.2".into())
        );
        for other in ["tinybox__r", "other_1_r", "tinybox_1_x", "data"] {
            assert_eq!(part("vda9", other).role("tinybox"), Role::Other, "{other}");
        }
        assert_eq!(part("vda13", "").disk(), "vda");
        assert_eq!(part("nvme0n1p3", "").disk(), "nvme0n1");
        assert_eq!(part("mmcblk0p2", "").disk(), "mmcblk0");
        assert_eq!(part("sda2", "").disk(), "sda");
    }
}
