//! The boxes tinyperf knows, what each should contain, and how a scanned box
//! measures up. The table is data: a new box is a new row.

use std::collections::BTreeMap;
use std::fmt;

use super::gpu::{Gpu, RebarState};
use super::host::Host;
use super::nvme::NvmeController;
use super::pci::{LinkSpeed, PathLink};
use super::read::Findings;
use super::units::{format_bytes, GIB};
use crate::record::{Check, Verdict};

/// A PCIe link a device should train to, at least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkExpectation {
    pub speed: LinkSpeed,
    pub width: u32,
}

impl fmt::Display for LinkExpectation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} x{}", self.speed, self.width)
    }
}

/// What one kind of box should be.
#[derive(Debug, Clone, PartialEq)]
pub struct SkuSpec {
    /// The SKU's name in configuration and APIs (`tinybox-green`).
    pub name: &'static str,
    /// Other names configuration accepts for it: names it had before, so that existing
    /// configuration files keep working.
    pub aliases: &'static [&'static str],
    /// What the page and the CLI call it.
    pub title: &'static str,
    /// Every GPU is this model (a name from the GPU model table).
    pub gpu_model: &'static str,
    /// How many GPUs the box has.
    pub gpu_count: usize,
    /// The link every GPU's path should train to, at least.
    pub gpu_link: LinkExpectation,
    /// Whether every GPU should have Resizable BAR on.
    pub resizable_bar: bool,
    /// Installed memory; `MemTotal` reads a little less (see `MEMORY_RESERVED_FRACTION`).
    pub memory_gib: u64,
    /// Physical CPU cores.
    pub cpu_cores: u32,
    /// Local PCIe NVMe drives.
    pub nvme_count: usize,
    /// The link every NVMe drive should train to, at least.
    pub nvme_link: LinkExpectation,
    /// What the factory line's burn-in holds the box to.
    pub burn_in: BurnInLimits,
}

/// The limits of a box's burn-in: how long its full training run may take and how hot
/// its CPU and GPUs may get at any moment of the run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurnInLimits {
    /// The training run's time limit in seconds, before the tolerance; `None` where the
    /// factory has published none for the box.
    pub time_limit_s: Option<f64>,
    /// How far past the time limit still passes, as a fraction (0.05: 5 %).
    pub time_tolerance: f64,
    /// The hottest the CPU package may read, in °C.
    pub cpu_temp_limit_c: f64,
    /// The hottest any GPU sensor (edge, junction, memory) may read, in °C.
    pub gpu_temp_limit_c: f64,
}

impl BurnInLimits {
    /// The time a training run may take with the tolerance, in seconds.
    pub fn allowed_time_s(&self) -> Option<f64> {
        self.time_limit_s
            .map(|limit| limit * (1.0 + self.time_tolerance))
    }
}

/// tinycorp's line: the full training run within its limit plus 5 %, the CPU at or
/// below 90 °C and every GPU at or below 95 °C for the whole run.
pub const DEFAULT_BURN_IN: BurnInLimits = BurnInLimits {
    time_limit_s: None,
    time_tolerance: 0.05,
    cpu_temp_limit_c: 90.0,
    gpu_temp_limit_c: 95.0,
};

const GEN4_X16: LinkExpectation = LinkExpectation {
    speed: LinkSpeed::gts(160),
    width: 16,
};
const GEN5_X16: LinkExpectation = LinkExpectation {
    speed: LinkSpeed::gts(320),
    width: 16,
};
const GEN4_X4: LinkExpectation = LinkExpectation {
    speed: LinkSpeed::gts(160),
    width: 4,
};

/// The tinybox platform as the green ships it: the red and the 5090 box share its board,
/// memory, CPU and drives and differ only in what their specs name.
const TINYBOX_GREEN: SkuSpec = SkuSpec {
    name: "tinybox-green",
    aliases: &[],
    title: "tinybox green: 6× GeForce RTX 4090",
    gpu_model: "GeForce RTX 4090",
    gpu_count: 6,
    gpu_link: GEN4_X16,
    resizable_bar: true,
    memory_gib: 128,
    cpu_cores: 32,
    nvme_count: 4,
    nvme_link: GEN4_X4,
    burn_in: BurnInLimits {
        time_limit_s: Some(11_500.0),
        ..DEFAULT_BURN_IN
    },
};

/// Every known kind of box.
pub static SKUS: &[SkuSpec] = &[
    TINYBOX_GREEN,
    SkuSpec {
        name: "tinybox-red",
        title: "tinybox red: 6× Radeon RX 7900 XTX",
        gpu_model: "Radeon RX 7900 XTX",
        burn_in: BurnInLimits {
            time_limit_s: Some(12_500.0),
            ..DEFAULT_BURN_IN
        },
        ..TINYBOX_GREEN
    },
    // Known as tinybox-5090 before tinycorp named it; that name stays an alias.
    SkuSpec {
        name: "tinybox-green-v2",
        aliases: &["tinybox-5090"],
        title: "tinybox green v2: 4× GeForce RTX 5090",
        gpu_model: "GeForce RTX 5090",
        gpu_count: 4,
        gpu_link: GEN5_X16,
        memory_gib: 192,
        burn_in: DEFAULT_BURN_IN,
        ..TINYBOX_GREEN
    },
    // Four 9070 XTs, as summaries of tinygrad.org's spec give it (4× RX 9070 XT, 64 GB of
    // GPU memory). No published platform was found for it, so the red's is assumed:
    // ROMED8-2T, 32 cores, 128 GB, four drives; the GPUs held to the red's PCIe 4.0 x16,
    // which a PCIe 5.0 platform passes too. A real box confirms the rest.
    SkuSpec {
        name: "tinybox-red-v2",
        title: "tinybox red v2: 4× Radeon RX 9070 XT",
        gpu_model: "Radeon RX 9070 XT",
        gpu_count: 4,
        burn_in: DEFAULT_BURN_IN,
        ..TINYBOX_GREEN
    },
    // tinycorp sells it as the tinybox pro v2 (the first pro had 4090s): a rack box with
    // 8× RTX 5090 on a dual-socket Genoa board (GENOA2D24G-2L+), two 32-core EPYCs and
    // 384 GB. Its drive count is not published; the tinybox's four are assumed.
    SkuSpec {
        name: "tinybox-pro",
        aliases: &["tinybox-pro-v2"],
        title: "tinybox pro v2: 8× GeForce RTX 5090",
        gpu_model: "GeForce RTX 5090",
        gpu_count: 8,
        gpu_link: GEN5_X16,
        memory_gib: 384,
        cpu_cores: 64,
        burn_in: DEFAULT_BURN_IN,
        ..TINYBOX_GREEN
    },
];

/// `MemTotal` leaves out firmware-reserved ranges, the kernel image and the crash
/// kernel: 1–3 % of installed memory on these boxes. Up to this much missing passes.
pub const MEMORY_RESERVED_FRACTION: f64 = 0.05;

/// The SKU named `name` in configuration and APIs, by its name or one of its aliases.
pub fn find(name: &str) -> Option<&'static SkuSpec> {
    SKUS.iter()
        .find(|s| s.name == name || s.aliases.contains(&name))
}

/// Recognises a box by the GPU model most of its GPUs are and, where several SKUs have
/// that model, by the GPU count nearest the box's (a pro with a GPU missing is still a
/// pro, and fails its count). `None` for a box without GPUs, with an unknown majority
/// model, or with a tie of models or of counts; the note says why.
pub fn recognise(gpus: &[Gpu]) -> (Option<&'static SkuSpec>, Option<String>) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for gpu in gpus {
        *counts.entry(gpu.model.as_str()).or_default() += 1;
    }
    let Some(most) = counts.values().copied().max() else {
        return (None, None);
    };
    let leaders: Vec<&str> = counts
        .iter()
        .filter(|(_, n)| **n == most)
        .map(|(model, _)| *model)
        .collect();
    if leaders.len() > 1 {
        return (
            None,
            Some(format!(
                "no SKU recognised: as many GPUs of each of {}",
                leaders.join(", ")
            )),
        );
    }
    let model = leaders[0];
    let distance = |spec: &SkuSpec| spec.gpu_count.abs_diff(gpus.len());
    let Some(nearest) = SKUS
        .iter()
        .filter(|s| s.gpu_model == model)
        .map(distance)
        .min()
    else {
        return (None, Some(format!("no SKU has {model} GPUs")));
    };
    let closest: Vec<&'static SkuSpec> = SKUS
        .iter()
        .filter(|s| s.gpu_model == model && distance(s) == nearest)
        .collect();
    if let [spec] = closest[..] {
        return (Some(spec), None);
    }
    let named: Vec<String> = closest
        .iter()
        .map(|s| format!("{} ({})", s.name, s.gpu_count))
        .collect();
    (
        None,
        Some(format!(
            "no SKU recognised: {} {model} GPUs are as near to each of {}",
            gpus.len(),
            named.join(", ")
        )),
    )
}

fn check(
    name: &str,
    subject: Option<String>,
    expected: String,
    found: String,
    pass: bool,
) -> Check {
    Check {
        name: name.to_string(),
        subject,
        expected,
        found,
        verdict: Verdict::pass_if(pass),
    }
}

/// Every expectation of `spec` against what was found.
pub fn judge(
    spec: &SkuSpec,
    gpus: &[Gpu],
    host: &Host,
    nvme: &[NvmeController],
    findings: &mut Findings,
) -> Vec<Check> {
    let mut checks = vec![check(
        "gpu_count",
        None,
        spec.gpu_count.to_string(),
        gpus.len().to_string(),
        gpus.len() == spec.gpu_count,
    )];
    for gpu in gpus {
        let subject = Some(gpu.address.to_string());
        checks.push(check(
            "gpu_model",
            subject.clone(),
            spec.gpu_model.to_string(),
            gpu.model.clone(),
            gpu.model == spec.gpu_model,
        ));
        let (pass, found) = judge_gpu_link(gpu, spec.gpu_link, findings);
        checks.push(check(
            "gpu_link",
            subject.clone(),
            spec.gpu_link.to_string(),
            found,
            pass,
        ));
        let rebar = &gpu.resizable_bar;
        let state = match rebar.state {
            RebarState::On => "on",
            RebarState::Off => "off",
            RebarState::Unknown => "unknown",
        };
        let wanted = if spec.resizable_bar {
            RebarState::On
        } else {
            RebarState::Off
        };
        checks.push(check(
            "gpu_resizable_bar",
            subject,
            if spec.resizable_bar { "on" } else { "off" }.to_string(),
            format!("{state} ({})", rebar.basis),
            rebar.state == wanted,
        ));
    }
    checks.push(judge_memory(spec, host));
    checks.push(check(
        "cpu_cores",
        None,
        spec.cpu_cores.to_string(),
        host.cpu_cores
            .map_or_else(|| "unknown".to_string(), |c| c.to_string()),
        host.cpu_cores == Some(spec.cpu_cores),
    ));
    let drives: Vec<&NvmeController> = nvme.iter().filter(|c| c.is_pcie()).collect();
    checks.push(check(
        "nvme_count",
        None,
        spec.nvme_count.to_string(),
        drives.len().to_string(),
        drives.len() == spec.nvme_count,
    ));
    for drive in drives {
        let subject = drive.address.map(|a| a.to_string());
        let (pass, found) = match &drive.link {
            Some(link) => judge_link(link, spec.nvme_link),
            None => (false, "unknown".to_string()),
        };
        checks.push(check(
            "nvme_link",
            subject,
            spec.nvme_link.to_string(),
            format!("{found} ({})", drive.name),
            pass,
        ));
    }
    checks
}

/// A link passes when it is at least as fast and as wide as expected.
fn judge_link(link: &PathLink, expected: LinkExpectation) -> (bool, String) {
    let mut found = link.describe();
    if let Some(at) = link.limited_at {
        found.push_str(&format!(", limited at {at}"));
    }
    let pass = matches!((link.speed_gts, link.width),
        (Some(speed), Some(width)) if speed >= expected.speed && width >= expected.width);
    (pass, found)
}

/// GPUs park their links at 2.5 GT/s when idle and retrain to full speed under load,
/// so an idle GPU reads 2.5 GT/s on a healthy link. A link at 2.5 GT/s whose every
/// part can run the expected speed passes, with a finding; a link at any speed in
/// between, or too narrow, fails.
fn judge_gpu_link(gpu: &Gpu, expected: LinkExpectation, findings: &mut Findings) -> (bool, String) {
    let link = &gpu.path_link;
    let (pass, found) = judge_link(link, expected);
    if pass {
        return (pass, found);
    }
    let idle = link.speed_gts == Some(LinkSpeed::GEN1)
        && link.width.is_some_and(|w| w >= expected.width)
        && link.capable_speed_gts.is_some_and(|c| c >= expected.speed);
    if idle {
        let capable = link
            .capable_speed_gts
            .map_or_else(String::new, |c| c.to_string());
        findings.push(format!(
            "GPU {}: link idles at 2.5 GT/s; passed because every part of it can run {capable} (a bandwidth test under load confirms the speed)",
            gpu.address
        ));
        return (true, format!("{found} (idle; capable of {capable})"));
    }
    (false, found)
}

fn judge_memory(spec: &SkuSpec, host: &Host) -> Check {
    let nominal = spec.memory_gib * GIB;
    let least = (nominal as f64 * (1.0 - MEMORY_RESERVED_FRACTION)) as u64;
    let expected = format!(
        "{} (MemTotal {} to {})",
        format_bytes(nominal),
        format_bytes(least),
        format_bytes(nominal)
    );
    match host.memory_bytes {
        Some(bytes) => check(
            "memory",
            None,
            expected,
            format_bytes(bytes),
            (least..=nominal).contains(&bytes),
        ),
        None => check("memory", None, expected, "unknown".into(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::gpu::{GpuVendor, RebarStatus};
    use crate::inventory::pci::{PciAddress, PciLink};

    fn gpu(bus: u8, model: &str, speed: u32, width: u32, capable: u32) -> Gpu {
        Gpu {
            address: PciAddress {
                domain: 0,
                bus,
                device: 0,
                function: 0,
            },
            vendor: GpuVendor::Nvidia,
            pci_id: "10de:2684".into(),
            model: model.into(),
            known_model: true,
            driver: Some("nvidia".into()),
            driver_version: None,
            vram_bytes: None,
            vram_source: None,
            link: PciLink::default(),
            path_link: PathLink {
                speed_gts: Some(LinkSpeed::gts(speed)),
                width: Some(width),
                capable_speed_gts: Some(LinkSpeed::gts(capable)),
                limited_at: None,
            },
            resizable_bar: RebarStatus {
                state: RebarState::On,
                basis: String::new(),
            },
            numa_node: None,
        }
    }

    #[test]
    fn sku_names_are_unique_and_models_exist() {
        for (i, spec) in SKUS.iter().enumerate() {
            assert!(SKUS[i + 1..].iter().all(|other| other.name != spec.name));
            let known = [
                crate::inventory::gpu::model_name(0x10de, 0x2684, None),
                crate::inventory::gpu::model_name(0x10de, 0x2b85, None),
                crate::inventory::gpu::model_name(0x1002, 0x744c, Some(0xc8)),
                crate::inventory::gpu::model_name(0x1002, 0x7550, Some(0xc0)),
            ];
            assert!(known.contains(&Some(spec.gpu_model)), "{}", spec.gpu_model);
        }
    }

    #[test]
    fn majority_model_picks_the_sku() {
        let mut gpus: Vec<Gpu> = (1..6)
            .map(|b| gpu(b, "GeForce RTX 4090", 160, 16, 160))
            .collect();
        gpus.push(gpu(7, "GeForce RTX 4080", 160, 16, 160));
        assert_eq!(recognise(&gpus).0.map(|s| s.name), Some("tinybox-green"));
        let tie = vec![
            gpu(1, "GeForce RTX 4090", 160, 16, 160),
            gpu(2, "GeForce RTX 5090", 320, 16, 320),
        ];
        let (spec, note) = recognise(&tie);
        assert!(spec.is_none());
        assert!(note.unwrap().contains("as many GPUs"));
        assert_eq!(recognise(&[]), (None, None));
        let (spec, note) = recognise(&[gpu(1, "H100 PCIe", 320, 16, 320)]);
        assert!(spec.is_none());
        assert_eq!(note.as_deref(), Some("no SKU has H100 PCIe GPUs"));
    }

    #[test]
    fn idle_link_passes_but_degraded_ones_fail() {
        let mut findings = Findings::default();
        let (pass, found) = judge_gpu_link(&gpu(1, "x", 25, 16, 160), GEN4_X16, &mut findings);
        assert!(pass, "{found}");
        assert_eq!(found, "2.5 GT/s x16 (idle; capable of 16.0 GT/s)");
        assert_eq!(findings.into_vec().len(), 1);
        let mut findings = Findings::default();
        assert!(!judge_gpu_link(&gpu(1, "x", 25, 16, 80), GEN4_X16, &mut findings).0);
        assert!(!judge_gpu_link(&gpu(1, "x", 80, 16, 160), GEN4_X16, &mut findings).0);
        assert!(!judge_gpu_link(&gpu(1, "x", 160, 8, 160), GEN4_X16, &mut findings).0);
        assert!(!judge_gpu_link(&gpu(1, "x", 25, 8, 160), GEN4_X16, &mut findings).0);
        assert!(judge_gpu_link(&gpu(1, "x", 320, 16, 320), GEN4_X16, &mut findings).0);
    }

    #[test]
    fn memory_allows_the_kernel_its_share() {
        let spec = find("tinybox-green").unwrap();
        let host = |kib: u64| Host {
            memory_bytes: Some(kib * 1024),
            ..Host::default()
        };
        let ok = judge_memory(spec, &host(131_889_436));
        assert_eq!(ok.verdict, Verdict::Pass, "{ok:?}");
        assert_eq!(ok.found, "125.8 GiB");
        assert_eq!(judge_memory(spec, &host(98_000_000)).verdict, Verdict::Fail);
        assert_eq!(
            judge_memory(spec, &host(263_000_000)).verdict,
            Verdict::Fail
        );
        assert_eq!(judge_memory(spec, &Host::default()).found, "unknown");
    }

    #[test]
    fn aliases_find_their_sku_and_clash_with_no_name() {
        assert_eq!(
            find("tinybox-5090").map(|s| s.name),
            Some("tinybox-green-v2")
        );
        assert_eq!(find("tinybox-pro-v2").map(|s| s.name), Some("tinybox-pro"));
        assert_eq!(
            find("tinybox-red-v2").map(|s| s.name),
            Some("tinybox-red-v2")
        );
        assert_eq!(find("tinybox-blue"), None);
        let names: Vec<&str> = SKUS
            .iter()
            .flat_map(|s| std::iter::once(s.name).chain(s.aliases.iter().copied()))
            .collect();
        for (i, name) in names.iter().enumerate() {
            assert!(!names[i + 1..].contains(name), "{name} twice");
        }
    }

    fn rtx_5090s(n: u8) -> Vec<Gpu> {
        (1..=n)
            .map(|b| gpu(b, "GeForce RTX 5090", 320, 16, 320))
            .collect()
    }

    #[test]
    fn boxes_of_one_model_are_told_apart_by_the_nearest_count() {
        let name = |n| recognise(&rtx_5090s(n)).0.map(|s| s.name);
        assert_eq!(name(4), Some("tinybox-green-v2"));
        assert_eq!(name(3), Some("tinybox-green-v2"));
        assert_eq!(name(5), Some("tinybox-green-v2"));
        assert_eq!(name(8), Some("tinybox-pro"));
        assert_eq!(name(7), Some("tinybox-pro"));
        let (spec, note) = recognise(&rtx_5090s(6));
        assert!(spec.is_none());
        assert_eq!(
            note.as_deref(),
            Some(
                "no SKU recognised: 6 GeForce RTX 5090 GPUs are as near to each of \
                 tinybox-green-v2 (4), tinybox-pro (8)"
            )
        );
        // A wrong card in a pro still leaves eight GPUs, most of them 5090s.
        let mut pro = rtx_5090s(7);
        pro.push(gpu(9, "GeForce RTX 4090", 160, 16, 160));
        assert_eq!(recognise(&pro).0.map(|s| s.name), Some("tinybox-pro"));
        let red_v2: Vec<Gpu> = (1..=4)
            .map(|b| gpu(b, "Radeon RX 9070 XT", 160, 16, 320))
            .collect();
        assert_eq!(recognise(&red_v2).0.map(|s| s.name), Some("tinybox-red-v2"));
    }

    #[test]
    fn a_pro_missing_a_gpu_fails_only_its_count() {
        let spec = find("tinybox-pro").unwrap();
        let host = Host {
            memory_bytes: Some(395_839_408 * 1024),
            cpu_cores: Some(64),
            ..Host::default()
        };
        let mut findings = Findings::default();
        let checks = judge(spec, &rtx_5090s(7), &host, &[], &mut findings);
        let failed: Vec<(&str, &str, &str)> = checks
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .map(|c| (c.name.as_str(), c.expected.as_str(), c.found.as_str()))
            .collect();
        assert_eq!(failed, [("gpu_count", "8", "7"), ("nvme_count", "4", "0")]);
    }
}
