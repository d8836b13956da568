//! The verified root: the device-mapper device named `root` (`sys/block/dm-N/dm`), the
//! partitions below it, and whether it is what `/` is mounted from
//! (`proc/self/mountinfo`).

use std::path::Path;

/// The device-mapper name the initrd gives the verified root.
pub const ROOT_NAME: &str = "root";
/// How a dm-verity device's uuid begins, as systemd-veritysetup makes it.
pub const VERITY_UUID_PREFIX: &str = "CRYPT-VERITY-";

/// The device-mapper device named [`ROOT_NAME`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootDevice {
    /// Its kernel name, `dm-0`.
    pub name: String,
    /// Its uuid (`dm/uuid`).
    pub uuid: String,
    /// `MAJOR:MINOR` (`dev`), when readable.
    pub dev: Option<String>,
    /// The devices below it (`slaves/`): the root partition and its hash partition.
    pub slaves: Vec<String>,
}

impl RootDevice {
    /// Whether it is a dm-verity device.
    pub fn is_verity(&self) -> bool {
        self.uuid.starts_with(VERITY_UUID_PREFIX)
    }
}

/// Finds the device-mapper device named `root` under `root_dir/sys/block`.
pub fn root_device(root_dir: &Path) -> Option<RootDevice> {
    let block = root_dir.join("sys/block");
    let mut names: Vec<String> = std::fs::read_dir(&block)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("dm-"))
        .collect();
    names.sort();
    names.into_iter().find_map(|name| {
        let dir = block.join(&name);
        let dm_name = read_trimmed(&dir.join("dm/name"))?;
        if dm_name != ROOT_NAME {
            return None;
        }
        let mut slaves: Vec<String> = std::fs::read_dir(dir.join("slaves"))
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        slaves.sort();
        Some(RootDevice {
            uuid: read_trimmed(&dir.join("dm/uuid")).unwrap_or_default(),
            dev: read_trimmed(&dir.join("dev")),
            slaves,
            name,
        })
    })
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// The mount of `/` as `mountinfo` lists it (the last one, on top of any under it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootMount {
    /// `MAJOR:MINOR` of the mounted device.
    pub dev: String,
    /// The filesystem type.
    pub fstype: String,
    /// The mount source (`/dev/mapper/root`).
    pub source: String,
    /// Whether it is mounted read-only.
    pub read_only: bool,
}

/// The mount of `/` in mountinfo text, or `None` when no line mounts it.
pub fn root_mount(mountinfo: &str) -> Option<RootMount> {
    mountinfo
        .lines()
        .filter_map(parse_mountinfo_line)
        .filter(|(point, _)| point == "/")
        .map(|(_, m)| m)
        .next_back()
}

/// One mountinfo line: `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE
/// SOURCE SUPER_OPTIONS`; gives the mount point and what is mounted there.
fn parse_mountinfo_line(line: &str) -> Option<(String, RootMount)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let dash = fields.iter().position(|f| *f == "-")?;
    if dash < 6 || fields.len() < dash + 3 {
        return None;
    }
    let read_only = fields[5].split(',').any(|o| o == "ro");
    Some((
        unescape(fields[4]),
        RootMount {
            dev: fields[2].to_string(),
            fstype: fields[dash + 1].to_string(),
            source: unescape(fields[dash + 2]),
            read_only,
        },
    ))
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|d| u8::from_str_radix(d, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

impl RootMount {
    /// Whether this mount is the device `device`, read-only, with an image's
    /// filesystem; `Err` says what differs.
    pub fn is_backed_by(&self, device: &RootDevice) -> Result<(), String> {
        let by_source = self.source == format!("/dev/mapper/{ROOT_NAME}")
            || self.source == format!("/dev/{}", device.name);
        let by_dev = device.dev.as_deref() == Some(self.dev.as_str());
        if !by_source && !by_dev {
            return Err(format!(
                "/ is mounted from {} ({}), not from the verity device {}",
                self.source, self.dev, device.name
            ));
        }
        if !matches!(self.fstype.as_str(), "erofs" | "squashfs") {
            return Err(format!(
                "/ is a {} filesystem, not erofs or squashfs",
                self.fstype
            ));
        }
        if !self.read_only {
            return Err("/ is mounted read-write".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 254:3 / / rw,relatime - ext4 /dev/vda3 rw
30 1 253:0 / / ro,relatime shared:1 - erofs /dev/mapper/root ro,user_xattr
31 30 0:5 / /dev rw,nosuid shared:2 - devtmpfs devtmpfs rw
40 30 254:6 / /var rw,relatime shared:9 - ext4 /dev/vda6 rw
41 30 0:40 / /my\\040dir rw - tmpfs none rw
";

    #[test]
    fn the_top_mount_of_slash_is_read() {
        let mount = root_mount(MOUNTINFO).unwrap();
        assert_eq!(mount.dev, "253:0");
        assert_eq!(mount.fstype, "erofs");
        assert_eq!(mount.source, "/dev/mapper/root");
        assert!(mount.read_only);
        assert!(root_mount("garbage\n1 2 3\n").is_none());
        let spaced = MOUNTINFO
            .lines()
            .filter_map(parse_mountinfo_line)
            .next_back()
            .unwrap();
        assert_eq!(spaced.0, "/my dir");
    }

    #[test]
    fn the_mount_must_be_the_device_read_only_and_an_image_filesystem() {
        let device = RootDevice {
            name: "dm-0".into(),
            uuid: "CRYPT-VERITY-abc-root".into(),
            dev: Some("253:0".into()),
            slaves: vec!["vda2".into(), "vda3".into()],
        };
        assert!(device.is_verity());
        let mount = root_mount(MOUNTINFO).unwrap();
        assert_eq!(mount.is_backed_by(&device), Ok(()));
        let by_dm_name = RootMount {
            source: "/dev/dm-0".into(),
            dev: "0:0".into(),
            ..mount.clone()
        };
        assert_eq!(by_dm_name.is_backed_by(&device), Ok(()));
        let other = RootMount {
            source: "/dev/vda3".into(),
            dev: "254:3".into(),
            ..mount.clone()
        };
        assert!(other
            .is_backed_by(&device)
            .unwrap_err()
            .contains("not from"));
        let ext4 = RootMount {
            fstype: "ext4".into(),
            ..mount.clone()
        };
        assert!(ext4.is_backed_by(&device).unwrap_err().contains("ext4"));
        let rw = RootMount {
            read_only: false,
            ..mount
        };
        assert!(rw.is_backed_by(&device).unwrap_err().contains("read-write"));
    }
}
