//! Hardware inventory from /sys and /proc, the SKU table, and the verdicts.
//!
//! Everything is read under an injectable root (`root/sys`, `root/proc`), so the same
//! code scans the live system and a sysfs-shaped tree on disk. Nothing here fails:
//! a file that cannot be read or parsed becomes a finding that names it.

pub mod aer;
pub mod birth;
mod config_space;
mod gpu;
mod host;
pub mod kernel_log;
mod nvme;
pub mod os_release;
mod pci;
pub mod previous_boot;
mod read;
mod render;
mod rocm;
mod sku;
pub mod smbios;
mod units;
pub mod xid;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use config_space::resizable_bars;
pub use gpu::{parse_nvidia_version, Gpu, GpuVendor, RebarState, RebarStatus, VramSource};
pub use host::{parse_cpuinfo, parse_mem_total, Board, CpuSummary, Host};
pub use nvme::NvmeController;
pub use pci::{parse_resource, LinkSpeed, PathLink, PciAddress, PciDevice, PciLink};
pub use sku::{find as find_sku, BurnInLimits, SkuSpec, DEFAULT_BURN_IN, SKUS};

use crate::record::{Check, Metric, Verdict};
use crate::runtime::RuntimeReport;
use read::Findings;

/// The name of a box that matches no SKU.
pub const UNRECOGNISED: &str = "unrecognised";

/// How the SKU a box is judged as was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SkuSource {
    /// From the GPUs found.
    Recognised,
    /// Named by the caller (`--sku`, the configuration file).
    Configured,
    /// No SKU: nothing is checked.
    None,
}

/// The version of the inventory's JSON shape: a change that removes or renames a field
/// bumps it.
pub const INVENTORY_SCHEMA_VERSION: u32 = 1;

/// Everything found on the box, and how it compares with its SKU.
#[derive(Debug, Clone, Serialize)]
pub struct HardwareReport {
    /// [`INVENTORY_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The tinyperf that took the inventory.
    pub tinyperf_version: String,
    /// The SKU the box is judged as (`tinybox-red`), or `unrecognised`.
    pub sku: String,
    /// How that SKU was chosen.
    pub sku_source: SkuSource,
    /// The SKU's name for people (`tinybox red`), when there is one.
    pub sku_title: Option<String>,
    /// `pass` when every check passes, `fail` when any fails, `skip` for an
    /// unrecognised box.
    pub verdict: Verdict,
    /// Each expectation of the SKU, held against what was found.
    pub checks: Vec<Check>,
    /// Everything worth an operator's attention, one line each: unreadable files, link
    /// errors, kernel messages, failed expectations.
    pub findings: Vec<String>,
    /// The GPUs on the PCI bus, by address.
    pub gpus: Vec<Gpu>,
    /// CPU, memory, kernel and board.
    pub host: Host,
    /// The NVMe controllers.
    pub nvme: Vec<NvmeController>,
    /// Every PCI function on the bus.
    pub pci_devices: Vec<PciDevice>,
    /// AER counters that moved on any GPU's path since boot.
    pub link_errors: Vec<aer::LinkErrors>,
    /// GPU trouble in the kernel's log: Xids, GPUs off the bus, ring timeouts, resets.
    pub kernel_events: Vec<kernel_log::KernelEvent>,
    /// The previous boot: how it ended, and its messages about a GPU, a link or a slot.
    pub previous_boot: previous_boot::PreviousBoot,
    /// What the GPU runtimes said; `null` when they were not probed.
    pub runtime: Option<RuntimeReport>,
    /// The root the inventory was read under (`/` on the box; a fixture tree in tests).
    pub root: PathBuf,
}

impl HardwareReport {
    /// The SKU the box was recognised as (or judged as), or `unrecognised`.
    pub fn sku_name(&self) -> &str {
        &self.sku
    }

    /// Every expectation of the SKU, with expected and found values.
    pub fn checks(&self) -> Vec<Check> {
        self.checks.clone()
    }

    /// Notes that are not checks (a missing runtime, an unreadable file).
    pub fn findings(&self) -> Vec<String> {
        self.findings.clone()
    }

    /// Headline figures: GPU count, memory, cores.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut metrics = vec![Metric::new("gpu_count", self.gpus.len() as f64, "count")];
        let vram: Vec<u64> = self.gpus.iter().filter_map(|g| g.vram_bytes).collect();
        if !vram.is_empty() {
            // Sizes from sysfs, however large: a sum past u64 stays at its top.
            let total = vram
                .iter()
                .fold(0u64, |sum, &bytes| sum.saturating_add(bytes));
            metrics.push(Metric::new("gpu_memory_gib", units::gib(total), "GiB"));
        }
        if let Some(bytes) = self.host.memory_bytes {
            metrics.push(Metric::new("memory_gib", units::gib(bytes), "GiB"));
        }
        if let Some(cores) = self.host.cpu_cores {
            metrics.push(Metric::new("cpu_cores", f64::from(cores), "count"));
        }
        if let Some(threads) = self.host.cpu_threads {
            metrics.push(Metric::new("cpu_threads", f64::from(threads), "count"));
        }
        let drives = self.nvme.iter().filter(|c| c.is_pcie()).count();
        metrics.push(Metric::new("nvme_count", drives as f64, "count"));
        let failed = self
            .checks
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .count();
        metrics.push(Metric::new("checks_failed", failed as f64, "count"));
        metrics
    }

    /// Human-readable report for `tinyperf detect`.
    pub fn render_human(&self) -> String {
        render::render(self)
    }

    /// 0 when the box meets every expectation (or is unrecognised), 1 when any fails.
    /// 1 when an expectation failed, or a GPU's link or the kernel's log shows it cannot be
    /// trusted (an uncorrectable AER error, a lost or broken GPU, a GPU reset).
    pub fn exit_code(&self) -> i32 {
        i32::from(
            self.checks.iter().any(|c| c.verdict == Verdict::Fail)
                || self.link_errors.iter().any(aer::LinkErrors::is_serious)
                || self.kernel_events.iter().any(|e| e.serious),
        )
    }
}

/// Takes the inventory under `root` (`root/sys`, `root/proc`), judges it against the
/// SKU (`sku` overrides recognition), and probes GPU runtimes when `probe_runtime`.
pub fn take(root: &Path, sku: Option<&str>, probe_runtime: bool) -> HardwareReport {
    let mut findings = Findings::default();
    let devices = pci::enumerate(root, &mut findings);
    let host = host::read(root, &mut findings);
    let drivers = gpu::DriverVersions::read(root, host.kernel.clone(), &mut findings);
    let runtime = probe_runtime.then(|| probe_runtime_safely(&mut findings));
    let gpus = gpu::find_gpus(&devices, &drivers, runtime.as_ref(), &mut findings);
    if let Some(runtime) = &runtime {
        compare_runtime_with_bus(runtime, &gpus, &mut findings);
    }
    rocm::check(root, &gpus, runtime.as_ref(), &mut findings);
    let nvme = nvme::find_controllers(root, &devices, &mut findings);
    let gpu_addresses: Vec<PciAddress> = gpus.iter().map(|g| g.address).collect();
    let link_errors = aer::link_errors(&gpu_addresses, &devices);
    for errors in &link_errors {
        findings.push(errors.describe());
    }
    let kernel_events = match kernel_log::read_records(root) {
        Ok(records) => kernel_log::gpu_events(&records, &gpu_addresses),
        Err(why) => {
            findings.push(format!("kernel messages not read: {why}"));
            Vec::new()
        }
    };
    for event in &kernel_events {
        findings.push(event.describe());
    }
    let previous_boot = previous_boot::read(root, &gpu_addresses);
    if let Some(line) = previous_boot.describe() {
        findings.push(line);
    }
    for why in &previous_boot.unreadable {
        findings.push(format!("the previous boot's journal not read: {why}"));
    }

    let (spec, source) = choose_sku(sku, &gpus, &mut findings);
    let checks = spec
        .map(|spec| sku::judge(spec, &gpus, &host, &nvme, &mut findings))
        .unwrap_or_default();
    let verdict = match spec {
        Some(_) => Verdict::combine(checks.iter().map(|c| c.verdict)),
        None => Verdict::Skip,
    };
    HardwareReport {
        schema_version: INVENTORY_SCHEMA_VERSION,
        tinyperf_version: env!("CARGO_PKG_VERSION").to_string(),
        sku: spec.map_or(UNRECOGNISED, |s| s.name).to_string(),
        sku_source: source,
        sku_title: spec.map(|s| s.title.to_string()),
        verdict,
        checks,
        findings: findings.into_vec(),
        gpus,
        host,
        nvme,
        pci_devices: devices.into_values().collect(),
        link_errors,
        kernel_events,
        previous_boot,
        runtime,
        root: root.to_path_buf(),
    }
}

fn choose_sku(
    requested: Option<&str>,
    gpus: &[Gpu],
    findings: &mut Findings,
) -> (Option<&'static SkuSpec>, SkuSource) {
    if let Some(name) = requested {
        match sku::find(name) {
            Some(spec) => return (Some(spec), SkuSource::Configured),
            None => findings.push(format!(
                "unknown SKU {name:?} (known: {}); recognising the box instead",
                known_skus().join(", ")
            )),
        }
    }
    match sku::recognise(gpus) {
        (Some(spec), _) => (Some(spec), SkuSource::Recognised),
        (None, note) => {
            if let Some(note) = note {
                findings.push(note);
            }
            (None, SkuSource::None)
        }
    }
}

/// The runtime libraries are foreign code; a panic inside them must not take the
/// inventory (or the agent) down.
fn probe_runtime_safely(findings: &mut Findings) -> RuntimeReport {
    match std::panic::catch_unwind(crate::runtime::probe) {
        Ok(report) => {
            for note in report.findings() {
                findings.push(format!("runtime: {note}"));
            }
            report
        }
        Err(_) => {
            findings.push("runtime: the probe panicked; no runtime information");
            RuntimeReport::default()
        }
    }
}

/// A GPU on the bus that its runtime cannot see has usually failed to initialise.
fn compare_runtime_with_bus(runtime: &RuntimeReport, gpus: &[Gpu], findings: &mut Findings) {
    for (name, status, vendor) in [
        ("CUDA", &runtime.cuda, GpuVendor::Nvidia),
        ("HIP", &runtime.hip, GpuVendor::Amd),
    ] {
        let on_bus = gpus.iter().filter(|g| g.vendor == vendor).count();
        if status.loaded && status.devices.len() != on_bus {
            findings.push(format!(
                "runtime: {name} reports {} device(s) but {on_bus} {} GPU(s) are on the PCI bus",
                status.devices.len(),
                vendor.name()
            ));
        }
    }
}

/// The names of the SKUs in the table, in its order.
pub fn known_skus() -> Vec<&'static str> {
    SKUS.iter().map(|s| s.name).collect()
}

/// Whether `name` is a SKU of the table.
pub fn is_known_sku(name: &str) -> bool {
    sku::find(name).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::RuntimeDevice;

    #[test]
    fn runtime_seeing_fewer_gpus_than_the_bus_is_a_finding() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinybox-green");
        let mut findings = Findings::default();
        let devices = pci::enumerate(&root, &mut findings);
        let gpus = gpu::find_gpus(
            &devices,
            &gpu::DriverVersions::default(),
            None,
            &mut findings,
        );
        let mut runtime = RuntimeReport::default();
        runtime.cuda.loaded = true;
        runtime.cuda.devices = (0..5)
            .map(|index| RuntimeDevice {
                index,
                name: "NVIDIA GeForce RTX 4090".into(),
                pci_address: None,
                memory_bytes: None,
                arch: None,
            })
            .collect();
        compare_runtime_with_bus(&runtime, &gpus, &mut findings);
        assert_eq!(
            findings.into_vec(),
            ["runtime: CUDA reports 5 device(s) but 6 NVIDIA GPU(s) are on the PCI bus"]
        );
    }

    #[test]
    fn unknown_requested_sku_falls_back_to_recognition() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinybox-red");
        let report = take(&root, Some("tinybox-blue"), false);
        assert_eq!(report.sku_name(), "tinybox-red");
        assert!(report.findings()[0].starts_with("unknown SKU \"tinybox-blue\""));
        assert_eq!(report.exit_code(), 0);
        let metrics = report.metrics();
        let metric = |name: &str| metrics.iter().find(|m| m.name == name).map(|m| m.value);
        assert_eq!(metric("gpu_count"), Some(6.0));
        assert_eq!(metric("cpu_cores"), Some(32.0));
        assert_eq!(metric("nvme_count"), Some(4.0));
        assert_eq!(metric("gpu_memory_gib").map(|v| v.round()), Some(144.0));
        assert_eq!(metric("checks_failed"), Some(0.0));
    }
}

/// Each GPU's link as trained right now and the AER counters on its path: what the
/// health check's link test reads before, during and after a load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuLinkState {
    /// The GPU.
    pub gpu: PciAddress,
    /// The slowest link on its way to the root port, as trained now.
    pub path_link: PathLink,
    /// The widest link every part of the path is capable of (`max_link_width`).
    pub capable_width: Option<u32>,
    /// Every device on the path, the GPU first: its address, role and counters (`None`
    /// where it has no AER files).
    pub counters: Vec<(PciAddress, aer::PathRole, Option<aer::AerCounters>)>,
}

/// Every GPU's link state, read afresh from the tree under `root`.
pub fn gpu_link_states(root: &Path) -> Vec<GpuLinkState> {
    let mut findings = Findings::default();
    let devices = pci::enumerate(root, &mut findings);
    devices
        .values()
        .filter(|d| gpu::gpu_vendor(d).is_some())
        .map(|device| {
            let mut path = vec![(device.address, aer::PathRole::Gpu)];
            for (i, &bridge) in device.upstream.iter().enumerate().rev() {
                let role = if i == 0 {
                    aer::PathRole::RootPort
                } else {
                    aer::PathRole::Bridge
                };
                path.push((bridge, role));
            }
            let capable_width = path
                .iter()
                .filter_map(|(a, _)| devices.get(a).and_then(|d| d.link.max_width))
                .min();
            GpuLinkState {
                gpu: device.address,
                path_link: pci::path_link(device, &devices),
                capable_width,
                counters: path
                    .into_iter()
                    .map(|(address, role)| {
                        let counters = devices
                            .get(&address)
                            .and_then(|d| aer::read_counters(&d.sysfs_dir));
                        (address, role, counters)
                    })
                    .collect(),
            }
        })
        .collect()
}
