//! PCI devices as sysfs shows them under `sys/bus/pci/devices`.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};

use super::config_space::{self, RebarEntry};
use super::read::{self, Findings, Presence};

/// A PCI function's address, `domain:bus:device.function`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// The PCI segment (`0000` on most machines).
    pub domain: u32,
    /// The bus number.
    pub bus: u8,
    /// The device number on that bus (0–31).
    pub device: u8,
    /// The function number of that device (0–7).
    pub function: u8,
}

impl PciAddress {
    /// Parses `0000:01:00.0`; also the eight-digit domains NVML writes (`00000000:01:00.0`)
    /// and upper-case hex.
    pub fn parse(s: &str) -> Option<PciAddress> {
        let (domain, rest) = s.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        let all_hex = |part: &str| !part.is_empty() && part.chars().all(|c| c.is_ascii_hexdigit());
        if !(all_hex(domain) && all_hex(bus) && all_hex(device) && all_hex(function)) {
            return None;
        }
        let address = PciAddress {
            domain: u32::from_str_radix(domain, 16).ok()?,
            bus: u8::from_str_radix(bus, 16).ok()?,
            device: u8::from_str_radix(device, 16).ok()?,
            function: u8::from_str_radix(function, 16).ok()?,
        };
        (address.device < 32 && address.function < 8).then_some(address)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl Serialize for PciAddress {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A vendor or device id, written as sysfs writes it (`0x1002`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciId(pub u16);

impl fmt::Display for PciId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:04x}", self.0)
    }
}

impl Serialize for PciId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Class, subclass and programming interface (`0x030000` is a VGA controller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassCode(pub u32);

impl ClassCode {
    /// Class and subclass without the programming interface (`0x0300`).
    pub fn base_and_sub(self) -> u16 {
        (self.0 >> 8) as u16
    }
}

impl fmt::Display for ClassCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:06x}", self.0)
    }
}

impl Serialize for ClassCode {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A PCIe link speed, kept in megatransfers per second so that speeds compare exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LinkSpeed {
    /// Megatransfers per second per lane (16 GT/s is 16000).
    pub mts: u32,
}

impl LinkSpeed {
    /// A speed given in tenths of GT/s: `gts(160)` is 16.0 GT/s.
    pub const fn gts(gigatransfers_tenths: u32) -> LinkSpeed {
        LinkSpeed {
            mts: gigatransfers_tenths * 100,
        }
    }

    /// The slowest speed a PCIe link runs at, where GPUs park their links when idle.
    pub const GEN1: LinkSpeed = LinkSpeed::gts(25);

    /// Parses sysfs's `16.0 GT/s PCIe` (older kernels: `8 GT/s`). `Some(None)` for
    /// `Unknown` (a link that is down); `None` for anything else.
    pub fn parse_sysfs(s: &str) -> Option<Option<LinkSpeed>> {
        if s.starts_with("Unknown") {
            return Some(None);
        }
        let mut words = s.split_whitespace();
        let number: f64 = words.next()?.parse().ok()?;
        if words.next()? != "GT/s" || !(number > 0.0 && number < 1000.0) {
            return None;
        }
        Some(Some(LinkSpeed {
            mts: (number * 1000.0).round() as u32,
        }))
    }
}

impl fmt::Display for LinkSpeed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{} GT/s", self.mts / 1000, (self.mts % 1000) / 100)
    }
}

impl Serialize for LinkSpeed {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(f64::from(self.mts) / 1000.0)
    }
}

/// A device's PCIe link as the device itself reports it. Every field is absent on
/// conventional PCI devices and host bridges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PciLink {
    /// The speed the link trained to.
    pub current_speed_gts: Option<LinkSpeed>,
    /// The lanes the link trained to.
    pub current_width: Option<u32>,
    /// The fastest speed the device supports.
    pub max_speed_gts: Option<LinkSpeed>,
    /// The most lanes the device supports.
    pub max_width: Option<u32>,
}

impl PciLink {
    /// Whether sysfs gave the link's current speed or width.
    pub fn is_known(&self) -> bool {
        self.current_speed_gts.is_some() || self.current_width.is_some()
    }
}

/// Formats a speed and width as `16.0 GT/s x16`, with `?` for what is unknown.
pub fn describe_link(speed: Option<LinkSpeed>, width: Option<u32>) -> String {
    let speed = speed.map_or_else(|| "? GT/s".to_string(), |s| s.to_string());
    let width = width.map_or_else(|| "x?".to_string(), |w| format!("x{w}"));
    format!("{speed} {width}")
}

/// What kind of address space a BAR maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BarSpace {
    Memory,
    Io,
}

/// One base address register with an assigned range, from the `resource` file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Bar {
    pub index: u8,
    pub start: u64,
    pub size_bytes: u64,
    pub space: BarSpace,
    pub prefetchable: bool,
    pub is_64bit: bool,
}

// The kernel's IORESOURCE_* flag bits as printed in the third column of `resource`.
const IORESOURCE_IO: u64 = 0x100;
const IORESOURCE_MEM: u64 = 0x200;
const IORESOURCE_PREFETCH: u64 = 0x2000;
const IORESOURCE_MEM_64: u64 = 0x0010_0000;
/// `resource` lines 0–5 are the standard BARs; later lines are the ROM, SR-IOV BARs
/// and bridge windows.
const STANDARD_BARS: usize = 6;

/// Parses the `resource` file: one `start end flags` line per resource, in hex.
pub fn parse_resource(text: &str) -> Option<Vec<Bar>> {
    let mut bars = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let fields: Vec<u64> = line
            .split_whitespace()
            .map(hex_u64)
            .collect::<Option<_>>()?;
        let [start, end, flags] = fields[..] else {
            return None;
        };
        if index >= STANDARD_BARS || end == 0 || end < start {
            continue;
        }
        let space = if flags & IORESOURCE_MEM != 0 {
            BarSpace::Memory
        } else if flags & IORESOURCE_IO != 0 {
            BarSpace::Io
        } else {
            continue;
        };
        bars.push(Bar {
            index: index as u8,
            start,
            size_bytes: end - start + 1,
            space,
            prefetchable: flags & IORESOURCE_PREFETCH != 0,
            is_64bit: flags & IORESOURCE_MEM_64 != 0,
        });
    }
    Some(bars)
}

fn hex_u64(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// One PCI function and what sysfs says about it.
#[derive(Debug, Clone, Serialize)]
pub struct PciDevice {
    /// Where it is on the bus.
    pub address: PciAddress,
    /// The vendor id (`1002` for AMD), when sysfs has it.
    pub vendor: Option<PciId>,
    /// The device id (`744c`), when sysfs has it.
    pub device: Option<PciId>,
    /// The revision (written as hex), which tells apart models that share a device id.
    #[serde(serialize_with = "revision_as_hex")]
    pub revision: Option<u8>,
    /// The class code (display controller, bridge, mass storage, …).
    pub class: Option<ClassCode>,
    /// The board maker's vendor id.
    pub subsystem_vendor: Option<PciId>,
    /// The board maker's device id.
    pub subsystem_device: Option<PciId>,
    /// The bound driver (`driver` symlink's target), `None` when unbound.
    pub driver: Option<String>,
    /// `None` when the platform has no NUMA information (sysfs says `-1`).
    pub numa_node: Option<u32>,
    /// The device's own PCIe link.
    pub link: PciLink,
    /// The base address registers it decodes, from `resource`.
    pub bars: Vec<Bar>,
    /// The Resizable BAR capability from config space, when the device has one.
    pub resizable_bar: Option<Vec<RebarEntry>>,
    /// Bridges between the root complex and this device, nearest the root first.
    pub upstream: Vec<PciAddress>,
    /// The device's folder in sysfs, for reading more of it later.
    #[serde(skip)]
    pub sysfs_dir: PathBuf,
}

impl PciDevice {
    /// `1002:744c`, as lspci writes the pair.
    pub fn id_pair(&self) -> String {
        let id =
            |i: Option<PciId>| i.map_or_else(|| "????".to_string(), |i| format!("{:04x}", i.0));
        format!("{}:{}", id(self.vendor), id(self.device))
    }

    fn read(
        address: PciAddress,
        dir: PathBuf,
        upstream: Vec<PciAddress>,
        findings: &mut Findings,
    ) -> PciDevice {
        let file = |name: &str| dir.join(name);
        let id = |path: &Path, findings: &mut Findings| {
            read::parsed(path, "PCI id", Presence::Required, findings, |s| {
                read::hex_u32(s)
                    .and_then(|v| u16::try_from(v).ok())
                    .map(PciId)
            })
        };
        let optional_id = |path: &Path, findings: &mut Findings| {
            read::parsed(path, "PCI id", Presence::Optional, findings, |s| {
                read::hex_u32(s)
                    .and_then(|v| u16::try_from(v).ok())
                    .map(PciId)
            })
        };
        let vendor = id(&file("vendor"), findings);
        let device = id(&file("device"), findings);
        let class = read::parsed(
            &file("class"),
            "class code",
            Presence::Required,
            findings,
            |s| read::hex_u32(s).filter(|v| *v <= 0xff_ffff).map(ClassCode),
        );
        let revision = read::parsed(
            &file("revision"),
            "revision",
            Presence::Optional,
            findings,
            |s| read::hex_u32(s).and_then(|v| u8::try_from(v).ok()),
        );
        let subsystem_vendor = optional_id(&file("subsystem_vendor"), findings);
        let subsystem_device = optional_id(&file("subsystem_device"), findings);
        let driver = read::link_name(&file("driver"), findings);
        let numa_node = read::parsed(
            &file("numa_node"),
            "NUMA node",
            Presence::Optional,
            findings,
            |s| s.parse::<i64>().ok(),
        )
        .and_then(|n| u32::try_from(n).ok());
        let link = read_link(&dir, findings);
        let bars = read::parsed(
            &file("resource"),
            "resource table",
            Presence::Optional,
            findings,
            parse_resource,
        )
        .unwrap_or_default();
        let resizable_bar = read::bytes_or_note(&file("config"), Presence::Optional, findings)
            .and_then(|config| match config_space::resizable_bars(&config) {
                Ok(entries) => entries,
                Err(e) => {
                    findings.push(format!("{}: {e}", file("config").display()));
                    None
                }
            });
        PciDevice {
            address,
            vendor,
            device,
            revision,
            class,
            subsystem_vendor,
            subsystem_device,
            driver,
            numa_node,
            link,
            bars,
            resizable_bar,
            upstream,
            sysfs_dir: dir,
        }
    }
}

/// Revisions read as sysfs writes them (`0xc8`), like the ids.
fn revision_as_hex<S: Serializer>(revision: &Option<u8>, serializer: S) -> Result<S::Ok, S::Error> {
    match revision {
        Some(r) => serializer.collect_str(&format_args!("0x{r:02x}")),
        None => serializer.serialize_none(),
    }
}

fn read_link(dir: &Path, findings: &mut Findings) -> PciLink {
    let speed = |name: &str, findings: &mut Findings| {
        read::parsed(
            &dir.join(name),
            "link speed",
            Presence::Optional,
            findings,
            LinkSpeed::parse_sysfs,
        )
        .flatten()
    };
    let width = |name: &str, findings: &mut Findings| {
        read::parsed(
            &dir.join(name),
            "link width",
            Presence::Optional,
            findings,
            |s| s.trim_start_matches('x').parse::<u32>().ok(),
        )
    };
    PciLink {
        current_speed_gts: speed("current_link_speed", findings),
        current_width: width("current_link_width", findings),
        max_speed_gts: speed("max_link_speed", findings),
        max_width: width("max_link_width", findings),
    }
}

/// Every PCI function under `root/sys/bus/pci/devices`, keyed by address.
pub fn enumerate(root: &Path, findings: &mut Findings) -> BTreeMap<PciAddress, PciDevice> {
    let bus_dir = root.join("sys/bus/pci/devices");
    let mut devices = BTreeMap::new();
    let entries = match fs::read_dir(&bus_dir) {
        Ok(entries) => entries,
        Err(e) => {
            findings.push(format!(
                "{}: cannot list PCI devices: {e}",
                bus_dir.display()
            ));
            return devices;
        }
    };
    let real_root = fs::canonicalize(root).ok();
    let mut entries: Vec<fs::DirEntry> = entries.filter_map(Result::ok).collect();
    entries.sort_by_key(fs::DirEntry::file_name);
    for entry in entries {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(address) = PciAddress::parse(&name) else {
            findings.push(format!("{}: not a PCI address", entry.path().display()));
            continue;
        };
        let dir = match fs::canonicalize(entry.path()) {
            Ok(dir) if dir.is_dir() => under_given_root(root, real_root.as_deref(), dir),
            Ok(_) | Err(_) => {
                findings.push(format!(
                    "{}: device directory is missing (dangling symlink)",
                    entry.path().display()
                ));
                continue;
            }
        };
        let upstream = upstream_bridges(dir.strip_prefix(root).unwrap_or(&dir), address);
        devices.insert(address, PciDevice::read(address, dir, upstream, findings));
    }
    devices
}

/// A resolved device path spelled from the root the caller gave, so that findings
/// name paths the way the caller knows them.
fn under_given_root(root: &Path, real_root: Option<&Path>, resolved: PathBuf) -> PathBuf {
    match real_root.and_then(|r| resolved.strip_prefix(r).ok()) {
        Some(relative) => root.join(relative),
        None => resolved,
    }
}

/// The bridges above a device: the PCI addresses in its real sysfs path
/// (`sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0`), without the device itself.
fn upstream_bridges(path: &Path, own: PciAddress) -> Vec<PciAddress> {
    path.components()
        .filter_map(|c| PciAddress::parse(&c.as_os_str().to_string_lossy()))
        .filter(|a| *a != own)
        .collect()
}

/// The slowest link between a device and its root port: PCIe links in series run no
/// faster than the slowest. A card with its own switch (the 7900 XTX has one) reports
/// its internal link on the GPU function, while the slot's link shows on the switch's
/// upstream port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PathLink {
    /// The speed of the slowest link on the path, as trained.
    pub speed_gts: Option<LinkSpeed>,
    /// The width of the slowest link on the path, as trained.
    pub width: Option<u32>,
    /// The slowest link any part of the path can train to (its `max_link_speed`).
    pub capable_speed_gts: Option<LinkSpeed>,
    /// The upstream device whose link is the bottleneck, when it is not the device itself.
    pub limited_at: Option<PciAddress>,
}

impl PathLink {
    /// `16.0 GT/s x16`, with `?` for what is unknown.
    pub fn describe(&self) -> String {
        describe_link(self.speed_gts, self.width)
    }
}

/// The bottleneck link of `device`. The device's own link must be known; links of
/// upstream bridges that report nothing are skipped.
pub fn path_link(device: &PciDevice, devices: &BTreeMap<PciAddress, PciDevice>) -> PathLink {
    let own = device.link;
    let mut path = PathLink {
        speed_gts: own.current_speed_gts,
        width: own.current_width,
        capable_speed_gts: own.max_speed_gts,
        limited_at: None,
    };
    if !own.is_known() {
        return path;
    }
    for address in device.upstream.iter().rev() {
        let Some(bridge) = devices.get(address) else {
            continue;
        };
        let link = bridge.link;
        let slower_speed =
            matches!((link.current_speed_gts, path.speed_gts), (Some(b), Some(p)) if b < p);
        let narrower = matches!((link.current_width, path.width), (Some(b), Some(p)) if b < p);
        if slower_speed {
            path.speed_gts = link.current_speed_gts;
        }
        if narrower {
            path.width = link.current_width;
        }
        if slower_speed || narrower {
            path.limited_at = Some(*address);
        }
        if let (Some(b), Some(p)) = (link.max_speed_gts, path.capable_speed_gts) {
            path.capable_speed_gts = Some(b.min(p));
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_and_normalise() {
        let a = PciAddress::parse("0000:c1:00.0").unwrap();
        assert_eq!(a.to_string(), "0000:c1:00.0");
        assert_eq!(PciAddress::parse("00000000:C1:00.0"), Some(a));
        assert_eq!(PciAddress::parse("pci0000:00"), None);
        assert_eq!(PciAddress::parse("0000:01:00.8"), None);
        assert_eq!(PciAddress::parse("0000:01:00"), None);
    }

    #[test]
    fn link_speeds_parse_in_kernel_formats() {
        assert_eq!(
            LinkSpeed::parse_sysfs("16.0 GT/s PCIe"),
            Some(Some(LinkSpeed::gts(160)))
        );
        assert_eq!(
            LinkSpeed::parse_sysfs("2.5 GT/s PCIe"),
            Some(Some(LinkSpeed::GEN1))
        );
        assert_eq!(
            LinkSpeed::parse_sysfs("8 GT/s"),
            Some(Some(LinkSpeed::gts(80)))
        );
        assert_eq!(LinkSpeed::parse_sysfs("Unknown"), Some(None));
        assert_eq!(LinkSpeed::parse_sysfs("fast"), None);
        assert_eq!(LinkSpeed::gts(25).to_string(), "2.5 GT/s");
        assert_eq!(LinkSpeed::gts(320).to_string(), "32.0 GT/s");
    }

    #[test]
    fn resource_lines_become_sized_bars() {
        let text = "\
0x00000000f0000000 0x00000000f0ffffff 0x0000000000040200
0x0000020000000000 0x00000207ffffffff 0x000000000014220c
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000002000 0x000000000000207f 0x0000000000040101
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x0000000000000000 0x0000000000000000 0x0000000000000000
0x00000000f1000000 0x00000000f107ffff 0x0000000000046200
";
        let bars = parse_resource(text).unwrap();
        assert_eq!(bars.len(), 3, "the ROM line is not a BAR: {bars:?}");
        assert_eq!(bars[0].size_bytes, 16 << 20);
        assert!(!bars[0].prefetchable);
        assert_eq!(bars[1].index, 1);
        assert_eq!(bars[1].size_bytes, 32 << 30);
        assert!(bars[1].prefetchable && bars[1].is_64bit);
        assert_eq!(bars[2].space, BarSpace::Io);
        assert_eq!(bars[2].size_bytes, 128);
        assert_eq!(parse_resource("0x0 0x1\n"), None);
        assert_eq!(parse_resource("zz zz zz\n"), None);
    }

    fn device(address: &str, upstream: &[&str], speed: u32, width: u32, max: u32) -> PciDevice {
        PciDevice {
            address: PciAddress::parse(address).unwrap(),
            vendor: None,
            device: None,
            revision: None,
            class: None,
            subsystem_vendor: None,
            subsystem_device: None,
            driver: None,
            numa_node: None,
            link: PciLink {
                current_speed_gts: Some(LinkSpeed::gts(speed)),
                current_width: Some(width),
                max_speed_gts: Some(LinkSpeed::gts(max)),
                max_width: Some(16),
            },
            bars: Vec::new(),
            resizable_bar: None,
            upstream: upstream
                .iter()
                .map(|a| PciAddress::parse(a).unwrap())
                .collect(),
            sysfs_dir: PathBuf::new(),
        }
    }

    #[test]
    fn path_link_finds_the_bottleneck_upstream() {
        let root_port = device("0000:40:01.1", &[], 160, 8, 160);
        let switch_up = device("0000:41:00.0", &["0000:40:01.1"], 160, 8, 160);
        let switch_down = device(
            "0000:42:00.0",
            &["0000:40:01.1", "0000:41:00.0"],
            160,
            16,
            160,
        );
        let gpu = device(
            "0000:43:00.0",
            &["0000:40:01.1", "0000:41:00.0", "0000:42:00.0"],
            160,
            16,
            160,
        );
        let devices: BTreeMap<_, _> = [root_port, switch_up, switch_down, gpu.clone()]
            .into_iter()
            .map(|d| (d.address, d))
            .collect();
        let path = path_link(&gpu, &devices);
        assert_eq!(path.width, Some(8));
        assert_eq!(path.speed_gts, Some(LinkSpeed::gts(160)));
        assert_eq!(path.limited_at, PciAddress::parse("0000:41:00.0"));
        assert_eq!(path.describe(), "16.0 GT/s x8");
    }

    #[test]
    fn path_link_takes_the_slowest_capability() {
        let root_port = device("0000:00:01.1", &[], 25, 16, 80);
        let gpu = device("0000:01:00.0", &["0000:00:01.1"], 25, 16, 160);
        let devices: BTreeMap<_, _> = [root_port, gpu.clone()]
            .into_iter()
            .map(|d| (d.address, d))
            .collect();
        let path = path_link(&gpu, &devices);
        assert_eq!(path.capable_speed_gts, Some(LinkSpeed::gts(80)));
        assert_eq!(path.limited_at, None);
    }
}
