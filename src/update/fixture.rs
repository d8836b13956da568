//! A tinybox OS image's tree as the kernel and systemd lay it out, written below a
//! folder: what the tests read instead of a machine (`image_root` in the agent's
//! configuration, `--root` of `tinyperf image`). Partitions are folders under
//! `sys/devices/…/block/<disk>/` linked from `sys/class/block/`, the verity device is
//! `sys/devices/virtual/block/dm-0` linked from `sys/block/`, as on a real system.

use std::path::{Path, PathBuf};

/// The disk the image's partitions are on, and its device folder below `sys/`.
const DISK: &str = "vda";
const DISK_DIR: &str = "sys/devices/pci0000:00/0000:00:04.0/virtio2/block/vda";
/// The block major of virtio disks, and of device-mapper.
const VIRTIO_MAJOR: u32 = 254;
const DM_MAJOR: u32 = 253;

/// One slot's contents: a version installed in it, or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotContent<'a> {
    /// Partitions named for this version.
    Version(&'a str),
    /// Both partitions named `_empty`.
    Empty,
}

/// A whole image: which slot holds what, which one is booted, and how.
#[derive(Debug, Clone, Copy)]
pub struct ImageLayout<'a> {
    /// Slot A (partitions 2, hash, and 3, root).
    pub a: SlotContent<'a>,
    /// Slot B (partitions 4 and 5).
    pub b: SlotContent<'a>,
    /// The booted slot, `'a'` or `'b'`; its version is the running one.
    pub booted: char,
    /// Whether the root is the dm-verity device `root` (else `/` is the root partition
    /// itself, read-write ext4, and no roothash= is passed).
    pub verity: bool,
}

/// Writes `text` to `root/relative`, making its folders.
pub fn write(root: &Path, relative: &str, text: impl AsRef<[u8]>) {
    let path = root.join(relative);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("the fixture's folders can be made");
    }
    std::fs::write(&path, text).expect("the fixture's files can be written");
}

fn link(target: &str, at: &Path) {
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent).expect("the fixture's folders can be made");
    }
    let _ = std::fs::remove_file(at);
    std::os::unix::fs::symlink(target, at).expect("the fixture's links can be made");
}

/// `os-release` in `usr/lib`, with `IMAGE_ID` and `IMAGE_VERSION`.
pub fn os_release(root: &Path, image_id: &str, version: &str) {
    write(
        root,
        "usr/lib/os-release",
        format!(
            "PRETTY_NAME=\"tinybox OS {version}\"\nNAME=\"tinybox OS\"\nID=debian\n\
             IMAGE_ID={image_id}\nIMAGE_VERSION={version}\n"
        ),
    );
}

/// Partition `number` of the disk `vda`, GPT name `label`, as sysfs shows it.
pub fn partition(root: &Path, number: u32, label: &str) -> String {
    let name = format!("{DISK}{number}");
    write(
        root,
        &format!("{DISK_DIR}/{name}/uevent"),
        format!(
            "MAJOR={VIRTIO_MAJOR}\nMINOR={number}\nDEVNAME={name}\nDEVTYPE=partition\nDISKSEQ=9\n\
             PARTN={number}\nPARTNAME={label}\n"
        ),
    );
    write(
        root,
        &format!("{DISK_DIR}/{name}/dev"),
        format!("{VIRTIO_MAJOR}:{number}\n"),
    );
    link(
        &format!("../../{}/{name}", DISK_DIR.trim_start_matches("sys/")),
        &root.join("sys/class/block").join(&name),
    );
    name
}

/// The disk `vda` itself (`DEVTYPE=disk`), which the partition scan passes over.
pub fn disk(root: &Path) {
    write(
        root,
        &format!("{DISK_DIR}/uevent"),
        format!("MAJOR={VIRTIO_MAJOR}\nMINOR=0\nDEVNAME={DISK}\nDEVTYPE=disk\nDISKSEQ=9\n"),
    );
    link(
        &format!("../../{}", DISK_DIR.trim_start_matches("sys/")),
        &root.join("sys/class/block").join(DISK),
    );
}

/// The device-mapper device `dm-0` named `name` with uuid `uuid` over `slaves`.
pub fn dm_device(root: &Path, name: &str, uuid: &str, slaves: &[&str]) {
    let dir = "sys/devices/virtual/block/dm-0";
    write(root, &format!("{dir}/dm/name"), format!("{name}\n"));
    write(root, &format!("{dir}/dm/uuid"), format!("{uuid}\n"));
    write(root, &format!("{dir}/dev"), format!("{DM_MAJOR}:0\n"));
    write(
        root,
        &format!("{dir}/uevent"),
        format!("MAJOR={DM_MAJOR}\nMINOR=0\nDEVNAME=dm-0\nDEVTYPE=disk\nDISKSEQ=12\n"),
    );
    std::fs::create_dir_all(root.join(dir).join("slaves")).unwrap();
    for slave in slaves {
        link(
            &format!(
                "../../../../{}/{slave}",
                DISK_DIR.trim_start_matches("sys/devices/")
            ),
            &root.join(dir).join("slaves").join(slave),
        );
    }
    link(
        "../devices/virtual/block/dm-0",
        &root.join("sys/block/dm-0"),
    );
    link(
        "../../devices/virtual/block/dm-0",
        &root.join("sys/class/block/dm-0"),
    );
}

/// `proc/self/mountinfo` with `/` mounted from `source` (device `dev`) as `fstype`,
/// read-only or not, and `/var` on the state partition.
pub fn mountinfo(root: &Path, dev: &str, source: &str, fstype: &str, read_only: bool) {
    let mode = if read_only { "ro" } else { "rw" };
    write(
        root,
        "proc/self/mountinfo",
        format!(
            "24 1 {dev} / / {mode},relatime shared:1 - {fstype} {source} {mode}\n\
             25 24 0:6 / /dev rw,nosuid shared:2 - devtmpfs devtmpfs rw,size=4096k\n\
             26 24 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n\
             40 24 {VIRTIO_MAJOR}:6 / /var rw,relatime shared:20 - ext4 /dev/vda6 rw\n"
        ),
    );
}

/// systemd-boot's EFI variable `name` holding `text`, as efivarfs shows it.
pub fn efi_variable(root: &Path, name: &str, text: &str) {
    let mut bytes = vec![0x06, 0, 0, 0];
    for unit in text.encode_utf16().chain([0]) {
        bytes.extend(unit.to_le_bytes());
    }
    let path = super::reset::efi_variable_path(root, name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// The root hash every fixture passes on its command line.
pub const ROOT_HASH: &str = "5c0a2b1f9e0d4c7b8a6f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b";

/// Writes a whole image below `root` as `layout` says; returns the running version.
/// The boot loader's `LoaderEntrySelected` names the booted version's UKI with profile
/// 0, and `root/var` exists for the state partition's size.
pub fn image(root: &Path, layout: ImageLayout<'_>) -> String {
    let running = match (layout.booted, layout.a, layout.b) {
        ('a', SlotContent::Version(v), _) | ('b', _, SlotContent::Version(v)) => v.to_string(),
        _ => panic!("the booted slot must hold a version"),
    };
    os_release(root, super::status::IMAGE_ID, &running);
    disk(root);
    partition(root, 1, "esp");
    for (first, content) in [(2, layout.a), (4, layout.b)] {
        match content {
            SlotContent::Version(v) => {
                partition(root, first, &format!("tinybox_{v}_v"));
                partition(root, first + 1, &format!("tinybox_{v}_r"));
            }
            SlotContent::Empty => {
                partition(root, first, "_empty");
                partition(root, first + 1, "_empty");
            }
        }
    }
    partition(root, 6, "var");
    std::fs::create_dir_all(root.join("var")).unwrap();
    let (hash, data) = if layout.booted == 'a' {
        ("vda2", "vda3")
    } else {
        ("vda4", "vda5")
    };
    if layout.verity {
        dm_device(
            root,
            "root",
            "CRYPT-VERITY-5c0a2b1f9e0d4c7b8a6f3e2d1c0b9a8f-root",
            &[hash, data],
        );
        mountinfo(
            root,
            &format!("{DM_MAJOR}:0"),
            "/dev/mapper/root",
            "erofs",
            true,
        );
        write(
            root,
            "proc/cmdline",
            format!("initrd=\\tinybox.img roothash={ROOT_HASH} quiet\n"),
        );
    } else {
        let minor = data.trim_start_matches(DISK);
        mountinfo(
            root,
            &format!("{VIRTIO_MAJOR}:{minor}"),
            &format!("/dev/{data}"),
            "ext4",
            false,
        );
        write(root, "proc/cmdline", format!("root=/dev/{data} rw quiet\n"));
    }
    efi_variable(
        root,
        "LoaderEntrySelected",
        &format!("tinybox_{running}.efi@0"),
    );
    running
}

/// A machine that is not an image: Debian's os-release and nothing else.
pub fn debian(root: &Path) -> PathBuf {
    write(
        root,
        "etc/os-release",
        "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\nID=debian\nVERSION_ID=\"13\"\n",
    );
    root.to_path_buf()
}
