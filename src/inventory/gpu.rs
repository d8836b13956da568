//! GPUs among the PCI devices: which model each is, its VRAM, driver and Resizable
//! BAR state.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::config_space::RebarEntry;
use super::pci::{self, PathLink, PciAddress, PciDevice, PciLink};
use super::read::{self, Findings, Presence};
use super::units::{format_bytes, MIB};
use crate::runtime::RuntimeReport;

pub const VENDOR_AMD: u16 = 0x1002;
pub const VENDOR_NVIDIA: u16 = 0x10de;

/// Display classes a GPU shows as: VGA (0x0300), 3D controller (0x0302, NVIDIA's
/// data-centre parts), display "other" (0x0380, AMD Instinct) and processing
/// accelerator (0x1200). The vendor check keeps a BMC's VGA (ASPEED) out.
const GPU_CLASSES: [u16; 4] = [0x0300, 0x0302, 0x0380, 0x1200];

/// A model name for a device id; `revision` tells apart cards that share one
/// (Navi 31 is the 7900 XTX at c8, the 7900 XT at cc and the 7900 GRE at ce).
struct ModelEntry {
    vendor: u16,
    device: u16,
    revision: Option<u8>,
    name: &'static str,
}

const fn model(vendor: u16, device: u16, revision: Option<u8>, name: &'static str) -> ModelEntry {
    ModelEntry {
        vendor,
        device,
        revision,
        name,
    }
}

static MODELS: &[ModelEntry] = &[
    model(VENDOR_AMD, 0x744c, Some(0xc8), "Radeon RX 7900 XTX"),
    model(VENDOR_AMD, 0x744c, Some(0xcc), "Radeon RX 7900 XT"),
    model(VENDOR_AMD, 0x744c, Some(0xce), "Radeon RX 7900 GRE"),
    model(VENDOR_AMD, 0x744c, None, "Radeon RX 7900 series (Navi 31)"),
    // Navi 48 (gfx1201): libdrm's amdgpu.ids names revision c0 the 9070 XT, c2 the 9070
    // GRE and c3 the 9070.
    model(VENDOR_AMD, 0x7550, Some(0xc0), "Radeon RX 9070 XT"),
    model(VENDOR_AMD, 0x7550, Some(0xc2), "Radeon RX 9070 GRE"),
    model(VENDOR_AMD, 0x7550, Some(0xc3), "Radeon RX 9070"),
    model(VENDOR_AMD, 0x7550, None, "Radeon RX 9070 series (Navi 48)"),
    model(VENDOR_AMD, 0x7448, None, "Radeon Pro W7900"),
    model(
        VENDOR_AMD,
        0x73bf,
        None,
        "Radeon RX 6800/6900 series (Navi 21)",
    ),
    model(VENDOR_AMD, 0x738c, None, "Instinct MI100"),
    model(VENDOR_AMD, 0x740f, None, "Instinct MI210"),
    model(VENDOR_AMD, 0x740c, None, "Instinct MI250X/MI250"),
    model(VENDOR_AMD, 0x74a1, None, "Instinct MI300X"),
    model(VENDOR_NVIDIA, 0x2204, None, "GeForce RTX 3090"),
    model(VENDOR_NVIDIA, 0x2684, None, "GeForce RTX 4090"),
    model(VENDOR_NVIDIA, 0x2685, None, "GeForce RTX 4090 D"),
    model(VENDOR_NVIDIA, 0x2704, None, "GeForce RTX 4080"),
    model(VENDOR_NVIDIA, 0x2b85, None, "GeForce RTX 5090"),
    model(VENDOR_NVIDIA, 0x2230, None, "RTX A6000"),
    model(VENDOR_NVIDIA, 0x26b1, None, "RTX 6000 Ada Generation"),
    model(VENDOR_NVIDIA, 0x26b5, None, "L40"),
    model(VENDOR_NVIDIA, 0x26b9, None, "L40S"),
    model(VENDOR_NVIDIA, 0x27b8, None, "L4"),
    model(VENDOR_NVIDIA, 0x20b0, None, "A100-SXM4-40GB"),
    model(VENDOR_NVIDIA, 0x20b2, None, "A100-SXM4-80GB"),
    model(VENDOR_NVIDIA, 0x20b5, None, "A100 80GB PCIe"),
    model(VENDOR_NVIDIA, 0x20f1, None, "A100 PCIe 40GB"),
    model(VENDOR_NVIDIA, 0x2330, None, "H100 SXM5 80GB"),
    model(VENDOR_NVIDIA, 0x2331, None, "H100 PCIe"),
    model(VENDOR_NVIDIA, 0x2335, None, "H200"),
    model(VENDOR_NVIDIA, 0x2901, None, "B200"),
];

/// The model name for a device, or `None` for ids not in the table.
pub fn model_name(vendor: u16, device: u16, revision: Option<u8>) -> Option<&'static str> {
    let candidates = || {
        MODELS
            .iter()
            .filter(|m| m.vendor == vendor && m.device == device)
    };
    candidates()
        .find(|m| m.revision.is_some() && m.revision == revision)
        .or_else(|| candidates().find(|m| m.revision.is_none()))
        .map(|m| m.name)
}

/// Who made a GPU; only these two are recognised as GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuVendor {
    /// AMD (PCI vendor `1002`).
    Amd,
    /// NVIDIA (PCI vendor `10de`).
    Nvidia,
}

impl GpuVendor {
    /// The vendor as people write it: `AMD`, `NVIDIA`.
    pub fn name(self) -> &'static str {
        match self {
            GpuVendor::Amd => "AMD",
            GpuVendor::Nvidia => "NVIDIA",
        }
    }
}

/// Whether a PCI function is a GPU, and whose.
pub fn gpu_vendor(device: &PciDevice) -> Option<GpuVendor> {
    let class = device.class?.base_and_sub();
    if !GPU_CLASSES.contains(&class) {
        return None;
    }
    match device.vendor?.0 {
        VENDOR_AMD => Some(GpuVendor::Amd),
        VENDOR_NVIDIA => Some(GpuVendor::Nvidia),
        _ => None,
    }
}

/// Where a GPU's memory size came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum VramSource {
    /// amdgpu's `mem_info_vram_total`.
    Amdgpu,
    /// A GPU runtime (CUDA, HIP or NVML) reporting the device's memory.
    Runtime,
}

/// Whether the CPU can map all of a GPU's memory (see [`RebarStatus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RebarState {
    /// It can: Resizable BAR is on, or the BAR covers the memory anyway.
    On,
    /// It cannot: only the legacy aperture is mapped.
    Off,
    /// Nothing the kernel exposes tells.
    Unknown,
}

/// Resizable BAR as it matters in practice: can the CPU map all of VRAM? The verdict
/// is, in order of preference:
/// 1. with VRAM known, whether the largest memory BAR (from `resource`) covers it;
/// 2. otherwise whether the VRAM BAR in the Resizable BAR capability is set larger
///    than 256 MiB, the aperture every GPU exposes when Resizable BAR is off;
/// 3. otherwise whether the largest memory BAR is larger than 256 MiB.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RebarStatus {
    /// The verdict.
    pub state: RebarState,
    /// How the state was decided, in words.
    pub basis: String,
}

const LEGACY_APERTURE: u64 = 256 * MIB;

pub fn judge_rebar(device: &PciDevice, vram_bytes: Option<u64>) -> RebarStatus {
    let vram_bar = vram_aperture(device);
    let on_or_off = |on: bool| if on { RebarState::On } else { RebarState::Off };
    if let (Some(vram), Some(bar)) = (vram_bytes, vram_bar) {
        let covers = bar.size_bytes >= vram;
        return RebarStatus {
            state: on_or_off(covers),
            basis: format!(
                "BAR{} is {}, {} {} of VRAM",
                bar.index,
                format_bytes(bar.size_bytes),
                if covers { "covering" } else { "smaller than" },
                format_bytes(vram)
            ),
        };
    }
    if let Some(entry) = resizable_vram_entry(device) {
        return RebarStatus {
            state: on_or_off(entry.current_size_bytes > LEGACY_APERTURE),
            basis: format!(
                "Resizable BAR capability sets BAR{} to {} of at most {}",
                entry.bar,
                format_bytes(entry.current_size_bytes),
                format_bytes(entry.largest_supported())
            ),
        };
    }
    if let Some(bar) = vram_bar {
        return RebarStatus {
            state: on_or_off(bar.size_bytes > LEGACY_APERTURE),
            basis: format!(
                "BAR{} is {}; VRAM size unknown",
                bar.index,
                format_bytes(bar.size_bytes)
            ),
        };
    }
    RebarStatus {
        state: RebarState::Unknown,
        basis: "no BAR sizes and no Resizable BAR capability readable".into(),
    }
}

/// The capability entry of the BAR that maps VRAM: the one that can grow largest.
fn resizable_vram_entry(device: &PciDevice) -> Option<&RebarEntry> {
    device
        .resizable_bar
        .as_ref()?
        .iter()
        .max_by_key(|e| e.largest_supported())
}

/// The BAR that maps VRAM: the one the Resizable BAR capability names, otherwise the
/// largest memory BAR (the lowest-numbered of equals: with Resizable BAR off, a
/// Radeon's BAR0 and BAR2 are both 256 MiB and BAR0 is the VRAM window).
fn vram_aperture(device: &PciDevice) -> Option<&pci::Bar> {
    let memory = || {
        device
            .bars
            .iter()
            .filter(|b| b.space == pci::BarSpace::Memory)
    };
    resizable_vram_entry(device)
        .and_then(|entry| memory().find(|b| b.index == entry.bar))
        .or_else(|| {
            memory().max_by(|a, b| a.size_bytes.cmp(&b.size_bytes).then(b.index.cmp(&a.index)))
        })
}

/// One GPU.
#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    /// The GPU function's PCI address.
    pub address: PciAddress,
    /// Who made it.
    pub vendor: GpuVendor,
    /// `1002:744c`.
    pub pci_id: String,
    /// The marketing name (`Radeon RX 7900 XTX`), from the model table by id and revision.
    pub model: String,
    /// Whether the model is in the table (otherwise `model` names vendor and id).
    pub known_model: bool,
    /// The kernel driver bound to it (`amdgpu`, `nvidia`), if any.
    pub driver: Option<String>,
    /// That driver's version, where the system tells it.
    pub driver_version: Option<String>,
    /// Device memory, in bytes, when known.
    pub vram_bytes: Option<u64>,
    /// Where `vram_bytes` came from.
    pub vram_source: Option<VramSource>,
    /// The GPU function's own link.
    pub link: PciLink,
    /// The slowest link on the way to the root port.
    pub path_link: PathLink,
    /// Whether the CPU can map all of its memory.
    pub resizable_bar: RebarStatus,
    /// The NUMA node the device hangs off, where the platform reports one.
    pub numa_node: Option<u32>,
}

/// Driver versions found on the system, read once.
#[derive(Debug, Default)]
pub struct DriverVersions {
    pub amdgpu: Option<String>,
    pub nvidia: Option<String>,
    /// Which of NVIDIA's two kernel modules is loaded, when procfs tells.
    pub nvidia_module: Option<NvidiaModule>,
    pub kernel: Option<String>,
}

/// NVIDIA ships its kernel driver twice, built from different sources: Blackwell's
/// GeForce cards only work with the open one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvidiaModule {
    /// The open kernel modules (`… Open Kernel Module for x86_64 …`).
    Open,
    /// The closed, proprietary module (`… x86_64 Kernel Module …`).
    Proprietary,
}

impl NvidiaModule {
    fn describe(self) -> &'static str {
        match self {
            NvidiaModule::Open => "the open kernel modules",
            NvidiaModule::Proprietary => "the proprietary kernel module",
        }
    }
}

impl DriverVersions {
    pub fn read(root: &Path, kernel: Option<String>, findings: &mut Findings) -> DriverVersions {
        let amdgpu = read::text(
            &root.join("sys/module/amdgpu/version"),
            Presence::Optional,
            findings,
        );
        let nvidia = read::parsed(
            &root.join("proc/driver/nvidia/version"),
            "NVIDIA driver version",
            Presence::Optional,
            findings,
            |text| Some((parse_nvidia_version(text)?, parse_nvidia_module(text))),
        );
        DriverVersions {
            amdgpu,
            nvidia_module: nvidia.as_ref().and_then(|(_, module)| *module),
            nvidia: nvidia.map(|(version, _)| version),
            kernel,
        }
    }

    fn for_driver(&self, driver: &str) -> Option<String> {
        match driver {
            "amdgpu" => self.amdgpu.clone().or_else(|| {
                self.kernel
                    .as_ref()
                    .map(|kernel| format!("in-tree (kernel {kernel})"))
            }),
            "nvidia" => self.nvidia.clone(),
            _ => None,
        }
    }
}

/// What a model needs of the NVIDIA driver.
struct NvidiaRequirement {
    model: &'static str,
    /// The oldest driver branch that drives it.
    branch: u32,
    /// Whether only the open kernel modules drive it.
    open_modules: bool,
    /// The requirement in words, for findings.
    needs: &'static str,
}

/// Blackwell's GeForce cards are only driven by 570 and later, and only by the open
/// kernel modules (NVIDIA's 570 release notes; CUDA 12.8).
const NVIDIA_MINIMUM_DRIVER: &[NvidiaRequirement] = &[
    NvidiaRequirement {
        model: "GeForce RTX 5090",
        branch: 570,
        open_modules: true,
        needs: "570 or later, with the open kernel modules (CUDA 12.8)",
    },
    NvidiaRequirement {
        model: "GeForce RTX 4090",
        branch: 525,
        open_modules: false,
        needs: "525 or later (CUDA 12.0)",
    },
];

/// Why the NVIDIA driver `version`, built as `module` where that is known, cannot drive
/// `model`: too old a branch, or the proprietary module for a card that needs the open
/// one. Names the driver the model needs and the one the system has.
pub fn driver_cannot_drive(
    model: &str,
    version: &str,
    module: Option<NvidiaModule>,
) -> Option<String> {
    let needs = NVIDIA_MINIMUM_DRIVER.iter().find(|r| r.model == model)?;
    let branch: u32 = version.split('.').next()?.parse().ok()?;
    let too_old = branch < needs.branch;
    let wrong_module = needs.open_modules && module == Some(NvidiaModule::Proprietary);
    if !too_old && !wrong_module {
        return None;
    }
    let has = match module {
        Some(module) => format!("driver {version} with {}", module.describe()),
        None => format!("driver {version}"),
    };
    Some(format!(
        "{model} needs NVIDIA driver {}; this system has {has}",
        needs.needs
    ))
}

/// Which kernel module wrote `/proc/driver/nvidia/version`: the open one names itself
/// `Open Kernel Module`, the proprietary one says only `Kernel Module`.
pub fn parse_nvidia_module(text: &str) -> Option<NvidiaModule> {
    let first = text.lines().next()?.strip_prefix("NVRM version:")?;
    if !first.contains("Kernel Module") {
        return None;
    }
    Some(if first.contains("Open Kernel Module") {
        NvidiaModule::Open
    } else {
        NvidiaModule::Proprietary
    })
}

/// The version in `NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.120  Fri …`
/// (the open module writes `… Open Kernel Module for x86_64  570.124.04  Release Build …`).
pub fn parse_nvidia_version(text: &str) -> Option<String> {
    let first = text.lines().next()?;
    first.strip_prefix("NVRM version:")?;
    first
        .split_whitespace()
        .find(|word| {
            let parts: Vec<&str> = word.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

/// Every GPU among `devices`, with VRAM from amdgpu's sysfs or else from `runtime`.
pub fn find_gpus(
    devices: &BTreeMap<PciAddress, PciDevice>,
    drivers: &DriverVersions,
    runtime: Option<&RuntimeReport>,
    findings: &mut Findings,
) -> Vec<Gpu> {
    let mut gpus = Vec::new();
    for device in devices.values() {
        let Some(vendor) = gpu_vendor(device) else {
            continue;
        };
        let name = device
            .vendor
            .zip(device.device)
            .and_then(|(v, d)| model_name(v.0, d.0, device.revision));
        let model = name.map_or_else(
            || format!("{} device {}", vendor.name(), device.id_pair()),
            str::to_string,
        );
        let (vram_bytes, vram_source) = match read_amdgpu_vram(device, findings) {
            Some(bytes) => (Some(bytes), Some(VramSource::Amdgpu)),
            None => match runtime_vram(runtime, device.address) {
                Some(bytes) => (Some(bytes), Some(VramSource::Runtime)),
                None => (None, None),
            },
        };
        if device.driver.is_none() {
            findings.push(format!("GPU {}: no driver bound", device.address));
        }
        if let (Some(model), Some(version)) = (name, drivers.nvidia.as_deref()) {
            if let Some(finding) = driver_cannot_drive(model, version, drivers.nvidia_module) {
                findings.push(format!("GPU {}: {finding}", device.address));
            }
        }
        gpus.push(Gpu {
            address: device.address,
            vendor,
            pci_id: device.id_pair(),
            model,
            known_model: name.is_some(),
            driver: device.driver.clone(),
            driver_version: device.driver.as_deref().and_then(|d| drivers.for_driver(d)),
            vram_bytes,
            vram_source,
            link: device.link,
            path_link: pci::path_link(device, devices),
            resizable_bar: judge_rebar(device, vram_bytes),
            numa_node: device.numa_node,
        });
    }
    gpus
}

fn read_amdgpu_vram(device: &PciDevice, findings: &mut Findings) -> Option<u64> {
    read::parsed(
        &device.sysfs_dir.join("mem_info_vram_total"),
        "byte count",
        Presence::Optional,
        findings,
        |s| s.parse::<u64>().ok(),
    )
}

fn runtime_vram(runtime: Option<&RuntimeReport>, address: PciAddress) -> Option<u64> {
    runtime?
        .devices()
        .filter(|d| d.pci_address.as_deref().and_then(PciAddress::parse) == Some(address))
        .find_map(|d| d.memory_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::pci::{Bar, BarSpace, ClassCode, PciId};
    use crate::inventory::units::GIB;

    #[test]
    fn revision_tells_navi31_cards_apart() {
        assert_eq!(
            model_name(0x1002, 0x744c, Some(0xc8)),
            Some("Radeon RX 7900 XTX")
        );
        assert_eq!(
            model_name(0x1002, 0x744c, Some(0xcc)),
            Some("Radeon RX 7900 XT")
        );
        assert_eq!(
            model_name(0x1002, 0x744c, Some(0x01)),
            Some("Radeon RX 7900 series (Navi 31)")
        );
        assert_eq!(
            model_name(0x10de, 0x2684, Some(0xa1)),
            Some("GeForce RTX 4090")
        );
        assert_eq!(model_name(0x10de, 0x2b85, None), Some("GeForce RTX 5090"));
    }

    #[test]
    fn a_driver_older_than_the_model_needs_names_both_versions() {
        let finding = driver_cannot_drive("GeForce RTX 5090", "550.163.01", None).unwrap();
        assert!(finding.contains("570 or later"), "{finding}");
        assert!(finding.contains("550.163.01"), "{finding}");
        assert_eq!(
            driver_cannot_drive("GeForce RTX 5090", "570.124.04", None),
            None
        );
        assert_eq!(
            driver_cannot_drive("GeForce RTX 4090", "550.163.01", None),
            None
        );
        assert_eq!(driver_cannot_drive("Radeon RX 7900 XTX", "1.0", None), None);
        assert_eq!(model_name(0x10de, 0x2335, None), Some("H200"));
        assert_eq!(model_name(0x10de, 0xffff, None), None);
    }

    fn device(vendor: u16, class: u32) -> PciDevice {
        PciDevice {
            address: PciAddress::parse("0000:01:00.0").unwrap(),
            vendor: Some(PciId(vendor)),
            device: Some(PciId(0x2000)),
            revision: None,
            class: Some(ClassCode(class)),
            subsystem_vendor: None,
            subsystem_device: None,
            driver: None,
            numa_node: None,
            link: PciLink::default(),
            bars: Vec::new(),
            resizable_bar: None,
            upstream: Vec::new(),
            sysfs_dir: std::path::PathBuf::new(),
        }
    }

    #[test]
    fn bmc_vga_and_gpu_audio_are_not_gpus() {
        assert_eq!(gpu_vendor(&device(0x1a03, 0x030000)), None);
        assert_eq!(gpu_vendor(&device(0x10de, 0x040300)), None);
        assert_eq!(
            gpu_vendor(&device(0x10de, 0x030000)),
            Some(GpuVendor::Nvidia)
        );
        assert_eq!(
            gpu_vendor(&device(0x10de, 0x030200)),
            Some(GpuVendor::Nvidia)
        );
        assert_eq!(gpu_vendor(&device(0x1002, 0x038000)), Some(GpuVendor::Amd));
    }

    fn bar(index: u8, size: u64) -> Bar {
        Bar {
            index,
            start: 0,
            size_bytes: size,
            space: BarSpace::Memory,
            prefetchable: true,
            is_64bit: true,
        }
    }

    #[test]
    fn rebar_prefers_bar_covering_vram() {
        let mut gpu = device(0x1002, 0x030000);
        gpu.bars = vec![bar(0, 32 * GIB), bar(2, 256 * MIB)];
        let status = judge_rebar(&gpu, Some(25_753_026_560));
        assert_eq!(status.state, RebarState::On);
        assert_eq!(status.basis, "BAR0 is 32 GiB, covering 24.0 GiB of VRAM");
        gpu.bars = vec![bar(0, 256 * MIB), bar(2, 256 * MIB)];
        let status = judge_rebar(&gpu, Some(25_753_026_560));
        assert_eq!(status.state, RebarState::Off);
        assert_eq!(
            status.basis,
            "BAR0 is 256 MiB, smaller than 24.0 GiB of VRAM"
        );
    }

    #[test]
    fn rebar_without_vram_uses_the_capability() {
        let mut gpu = device(0x10de, 0x030000);
        gpu.bars = vec![bar(1, 32 * GIB)];
        gpu.resizable_bar = Some(vec![
            RebarEntry {
                bar: 0,
                current_size_bytes: 16 * MIB,
                supported_sizes_bytes: vec![16 * MIB],
            },
            RebarEntry {
                bar: 1,
                current_size_bytes: 256 * MIB,
                supported_sizes_bytes: vec![256 * MIB, 32 * GIB],
            },
        ]);
        assert_eq!(judge_rebar(&gpu, None).state, RebarState::Off);
        gpu.resizable_bar = None;
        assert_eq!(judge_rebar(&gpu, None).state, RebarState::On);
        gpu.bars.clear();
        assert_eq!(judge_rebar(&gpu, None).state, RebarState::Unknown);
    }

    fn runtime_with(address: &str, memory: u64) -> RuntimeReport {
        let mut runtime = RuntimeReport::default();
        runtime.cuda.loaded = true;
        runtime.cuda.devices.push(crate::runtime::RuntimeDevice {
            index: 0,
            name: "NVIDIA GeForce RTX 4090".into(),
            pci_address: Some(address.into()),
            memory_bytes: Some(memory),
            arch: Some("8.9".into()),
        });
        runtime
    }

    #[test]
    fn vram_comes_from_the_runtime_device_at_the_same_address() {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinybox-green");
        let mut findings = Findings::default();
        let devices = pci::enumerate(&root, &mut findings);
        let drivers = DriverVersions::default();
        // NVML spells the domain with eight digits.
        let runtime = runtime_with("00000000:21:00.0", 25_757_220_864);
        let gpus = find_gpus(&devices, &drivers, Some(&runtime), &mut findings);
        assert_eq!(gpus.len(), 6);
        let with_vram: Vec<_> = gpus.iter().filter(|g| g.vram_bytes.is_some()).collect();
        assert_eq!(with_vram.len(), 1);
        assert_eq!(with_vram[0].address.to_string(), "0000:21:00.0");
        assert_eq!(with_vram[0].vram_source, Some(VramSource::Runtime));
        assert_eq!(
            with_vram[0].resizable_bar.basis,
            "BAR1 is 32 GiB, covering 24.0 GiB of VRAM"
        );
        assert!(findings.into_vec().is_empty());
    }

    #[test]
    fn in_tree_amdgpu_reports_the_kernel() {
        let drivers = DriverVersions {
            kernel: Some("6.8.0-48-generic".into()),
            ..DriverVersions::default()
        };
        assert_eq!(
            drivers.for_driver("amdgpu").as_deref(),
            Some("in-tree (kernel 6.8.0-48-generic)")
        );
        assert_eq!(drivers.for_driver("nvidia"), None);
    }

    #[test]
    fn nvidia_versions_parse_from_both_modules() {
        assert_eq!(
            parse_nvidia_version(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.120  Fri Sep 13 10:10:01 UTC 2024\n"
            )
            .as_deref(),
            Some("550.120")
        );
        assert_eq!(
            parse_nvidia_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.04  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 27 18:37:40 UTC 2025\nGCC version:  gcc version 13.3.0\n"
            )
            .as_deref(),
            Some("570.124.04")
        );
        assert_eq!(parse_nvidia_version("garbage"), None);
    }

    #[test]
    fn a_5090_on_the_proprietary_module_is_a_finding_even_at_570() {
        let finding = driver_cannot_drive(
            "GeForce RTX 5090",
            "570.124.04",
            Some(NvidiaModule::Proprietary),
        )
        .unwrap();
        assert_eq!(
            finding,
            "GeForce RTX 5090 needs NVIDIA driver 570 or later, with the open kernel modules \
             (CUDA 12.8); this system has driver 570.124.04 with the proprietary kernel module"
        );
        let old = driver_cannot_drive(
            "GeForce RTX 5090",
            "550.120",
            Some(NvidiaModule::Proprietary),
        )
        .unwrap();
        assert!(
            old.ends_with("this system has driver 550.120 with the proprietary kernel module"),
            "{old}"
        );
        assert_eq!(
            driver_cannot_drive("GeForce RTX 5090", "570.124.04", Some(NvidiaModule::Open)),
            None
        );
        // The 4090 runs on either module.
        assert_eq!(
            driver_cannot_drive(
                "GeForce RTX 4090",
                "550.120",
                Some(NvidiaModule::Proprietary)
            ),
            None
        );
    }

    #[test]
    fn the_module_is_read_from_the_first_line() {
        assert_eq!(
            parse_nvidia_module(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.124.04  Release Build  (dvs-builder@U16-I3-B03-4-3)  Thu Feb 27 18:37:40 UTC 2025\n"
            ),
            Some(NvidiaModule::Open)
        );
        assert_eq!(
            parse_nvidia_module(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.120  Fri Sep 13 10:10:01 UTC 2024\n"
            ),
            Some(NvidiaModule::Proprietary)
        );
        assert_eq!(parse_nvidia_module("GCC version: 12\n"), None);
    }

    #[test]
    fn navi48_cards_are_told_apart_by_revision() {
        assert_eq!(
            model_name(0x1002, 0x7550, Some(0xc0)),
            Some("Radeon RX 9070 XT")
        );
        assert_eq!(
            model_name(0x1002, 0x7550, Some(0xc3)),
            Some("Radeon RX 9070")
        );
        assert_eq!(
            model_name(0x1002, 0x7550, Some(0x01)),
            Some("Radeon RX 9070 series (Navi 48)")
        );
    }
}
