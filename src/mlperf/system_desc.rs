//! The MLPerf Training system description (`systems/<system>.json`) of this box, built
//! from the hardware inventory. Every field `mlperf_logging.system_desc_checker`
//! requires is present (empty when the inventory does not know it), and every field
//! the checker joins into its summary is a string.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

use crate::engine::mllog::Division;

/// The system description's file in a run folder, beside the run's MLLOG.
pub const SYSTEM_DESC_FILE: &str = "system_desc.json";

/// The availability the checker accepts for a box the submitter owns and runs.
pub const STATUS_ON_PREMISE: &str = "Available on-premise";

/// What the system description says about software.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftwareStack {
    /// `operating_system`, e.g. `Ubuntu 22.04.4 LTS`.
    pub operating_system: String,
    /// `framework`: `tinyperf <version>`.
    pub framework: String,
    /// `other_software_stack`: component → version.
    pub other: BTreeMap<String, String>,
}

impl SoftwareStack {
    /// The running system: `/etc/os-release` and this build.
    pub fn of_this_system() -> SoftwareStack {
        let os = std::fs::read_to_string(Path::new("/etc/os-release"))
            .ok()
            .and_then(|text| os_name(&text))
            .unwrap_or_default();
        SoftwareStack::new(os)
    }

    /// The stack of this build on the named operating system, with no other components.
    pub fn new(operating_system: String) -> SoftwareStack {
        SoftwareStack {
            operating_system,
            framework: format!("tinyperf {}", crate::VERSION),
            other: BTreeMap::new(),
        }
    }
}

/// The system's name from an `os-release` file: `PRETTY_NAME`, else `NAME VERSION`.
pub fn os_name(os_release: &str) -> Option<String> {
    let mut fields = BTreeMap::new();
    for line in os_release.lines() {
        if let Some((key, value)) = line.trim().split_once('=') {
            let value = value.trim().trim_matches('"').trim_matches('\'');
            if !value.is_empty() {
                fields.insert(key.trim(), value.to_string());
            }
        }
    }
    if let Some(pretty) = fields.get("PRETTY_NAME") {
        return Some(pretty.clone());
    }
    let name = fields.get("NAME")?;
    Some(match fields.get("VERSION") {
        Some(version) => format!("{name} {version}"),
        None => name.clone(),
    })
}

/// The platform name a run logs as `submission_platform` and the system description
/// uses as `system_name`: the SKU with underscores (`tinybox_green`), or, for a box
/// that matches no SKU, its host name.
pub fn submission_platform(hardware: &Value) -> String {
    let sku = str_at(hardware, &["sku"]).unwrap_or("");
    if !sku.is_empty() && sku != "unrecognised" {
        return sku.replace('-', "_");
    }
    match str_at(hardware, &["host", "hostname"]) {
        Some(host) if !host.is_empty() => host.to_string(),
        _ => "unrecognised".to_string(),
    }
}

/// The system description of the box `hardware` (the inventory's JSON) as `platform`,
/// submitted by `submitter`, for results of `division` (the package checker applies that
/// division's rules, so it must be the one the runs logged). Reads the inventory
/// defensively: a missing or odd field leaves its entry empty.
pub fn system_description(
    hardware: &Value,
    platform: &str,
    submitter: &str,
    software: &SoftwareStack,
    division: Division,
) -> Value {
    let host = hardware.get("host").unwrap_or(&Value::Null);
    let gpus: Vec<&Value> = hardware
        .get("gpus")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let accelerator = majority_gpu(&gpus);

    let sockets = u64_at(host, &["cpu_sockets"]).filter(|n| *n > 0);
    let cores = u64_at(host, &["cpu_cores"]);
    let cores_per_processor = match (cores, sockets) {
        (Some(c), Some(s)) => Some(c / s),
        (Some(c), None) => Some(c),
        _ => None,
    };
    let threads = u64_at(host, &["cpu_threads"]);
    let memory = u64_at(host, &["memory_bytes"]).map(installed_memory_label);

    let nvme: Vec<&Value> = hardware
        .get("nvme")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let storage_type = if nvme.is_empty() {
        String::new()
    } else {
        "NVMe SSD".to_string()
    };

    let mut hw_notes = Vec::new();
    if let Some(title) = str_at(hardware, &["sku_title"]) {
        hw_notes.push(title.to_string());
    }
    if !nvme.is_empty() {
        hw_notes.push(format!("{} NVMe: {}", nvme.len(), drive_models(&nvme)));
    }
    if let Some(board) = board_name(host) {
        hw_notes.push(format!("board: {board}"));
    }

    let mut other: Map<String, Value> = software
        .other
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    if let Some(kernel) = str_at(host, &["kernel"]) {
        other
            .entry("kernel")
            .or_insert_with(|| Value::String(kernel.to_string()));
    }
    for (name, version) in driver_versions(&gpus, hardware) {
        other.entry(name).or_insert(Value::String(version));
    }

    let is_tinybox = str_at(hardware, &["sku"]).is_some_and(|s| s.starts_with("tinybox"));
    let text = |v: Option<String>| v.unwrap_or_default();
    json!({
        "submitter": submitter,
        "division": division.as_str(),
        "status": STATUS_ON_PREMISE,
        "system_name": platform,
        "number_of_nodes": "1",
        "host_processors_per_node": text(sockets.map(|s| s.to_string())),
        "host_processor_model_name": text(str_at(host, &["cpu_model"]).map(str::to_string)),
        "host_processor_core_count": text(cores_per_processor.map(|c| c.to_string())),
        "host_processor_vcpu_count": text(threads.map(|t| t.to_string())),
        "host_processor_frequency": "",
        "host_processor_caches": "",
        "host_processor_interconnect": "",
        "host_memory_capacity": text(memory),
        "host_storage_type": storage_type,
        "host_storage_capacity": "",
        "host_networking": "",
        "host_networking_topology": "",
        "host_memory_configuration": "",
        "accelerators_per_node": gpus.len().to_string(),
        "accelerator_model_name": text(accelerator.as_ref().map(|a| a.name.clone())),
        "accelerator_host_interconnect": text(accelerator.as_ref().and_then(|a| a.host_link.clone())),
        "accelerator_frequency": "",
        "accelerator_on-chip_memories": "",
        "accelerator_memory_configuration": text(accelerator.as_ref().and_then(|a| a.memory_type.map(str::to_string))),
        "accelerator_memory_capacity": text(accelerator.as_ref().and_then(|a| a.memory.clone())),
        "accelerator_interconnect": "",
        "accelerator_interconnect_topology": "",
        "cooling": if is_tinybox { "air" } else { "" },
        "hw_notes": hw_notes.join("; "),
        "framework": software.framework,
        "other_software_stack": other,
        "operating_system": software.operating_system,
        "sw_notes": "",
    })
}

/// The accelerator most GPUs of the box are.
struct Accelerator {
    name: String,
    host_link: Option<String>,
    memory: Option<String>,
    memory_type: Option<&'static str>,
}

fn majority_gpu(gpus: &[&Value]) -> Option<Accelerator> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for gpu in gpus {
        if let Some(name) = gpu_name(gpu) {
            *counts.entry(name).or_default() += 1;
        }
    }
    let (name, _) = counts.iter().max_by_key(|(_, n)| **n)?;
    let first = gpus
        .iter()
        .find(|g| gpu_name(g).as_deref() == Some(name.as_str()))?;
    Some(Accelerator {
        name: name.clone(),
        host_link: host_link(first),
        memory: u64_at(first, &["vram_bytes"]).map(|b| format!("{} GB", round_gib(b))),
        memory_type: memory_type(name),
    })
}

/// `NVIDIA GeForce RTX 4090`: the model with its vendor in front.
fn gpu_name(gpu: &Value) -> Option<String> {
    let model = str_at(gpu, &["model"]).filter(|m| !m.is_empty())?;
    let vendor = match str_at(gpu, &["vendor"]) {
        Some("nvidia") => "NVIDIA",
        Some("amd") => "AMD",
        _ => "",
    };
    if vendor.is_empty() || model.to_ascii_uppercase().starts_with(vendor) {
        Some(model.to_string())
    } else {
        Some(format!("{vendor} {model}"))
    }
}

/// `PCIe 4.0 x16`: the link the GPU's path can train to. GPUs park their links at
/// low speed when idle, so the capability says more than the current speed.
fn host_link(gpu: &Value) -> Option<String> {
    let speed = f64_at(gpu, &["path_link", "capable_speed_gts"])
        .or_else(|| f64_at(gpu, &["link", "max_speed_gts"]))
        .or_else(|| f64_at(gpu, &["path_link", "speed_gts"]));
    let width =
        u64_at(gpu, &["path_link", "width"]).or_else(|| u64_at(gpu, &["link", "max_width"]));
    let generation = speed.and_then(pcie_generation)?;
    Some(match width {
        Some(w) => format!("PCIe {generation} x{w}"),
        None => format!("PCIe {generation}"),
    })
}

fn pcie_generation(gts: f64) -> Option<&'static str> {
    const GENERATIONS: [(f64, &str); 6] = [
        (2.5, "1.0"),
        (5.0, "2.0"),
        (8.0, "3.0"),
        (16.0, "4.0"),
        (32.0, "5.0"),
        (64.0, "6.0"),
    ];
    GENERATIONS
        .iter()
        .find(|(speed, _)| (speed - gts).abs() < 0.05)
        .map(|(_, generation)| *generation)
}

/// The memory technology of the GPU models tinyboxes and their peers carry.
fn memory_type(model: &str) -> Option<&'static str> {
    const TYPES: [(&str, &str); 9] = [
        ("RTX 4090", "GDDR6X"),
        ("RTX 3090", "GDDR6X"),
        ("RTX 5090", "GDDR7"),
        ("RX 7900", "GDDR6"),
        ("H200", "HBM3e"),
        ("H100", "HBM3"),
        ("A100", "HBM2e"),
        ("MI300", "HBM3"),
        ("L40", "GDDR6"),
    ];
    TYPES
        .iter()
        .find(|(needle, _)| model.contains(needle))
        .map(|(_, kind)| *kind)
}

/// Installed memory from `MemTotal`, which leaves out what firmware and the kernel
/// keep (1–3 %): rounded up to a whole 8 GiB from 16 GiB on, else to a whole GiB.
fn installed_memory_label(mem_total_bytes: u64) -> String {
    let gib = mem_total_bytes as f64 / (1u64 << 30) as f64;
    let installed = if gib >= 16.0 {
        (gib / 8.0).ceil() * 8.0
    } else {
        gib.ceil()
    };
    format!("{installed:.0} GB")
}

fn round_gib(bytes: u64) -> u64 {
    (bytes as f64 / (1u64 << 30) as f64).round() as u64
}

fn drive_models(nvme: &[&Value]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for drive in nvme {
        *counts
            .entry(str_at(drive, &["model"]).unwrap_or("unknown model"))
            .or_default() += 1;
    }
    counts
        .iter()
        .map(|(model, n)| format!("{n}x {model}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn board_name(host: &Value) -> Option<String> {
    let vendor = str_at(host, &["board", "board_vendor"]);
    let name = str_at(host, &["board", "board_name"])?;
    Some(match vendor {
        Some(v) => format!("{v} {name}"),
        None => name.to_string(),
    })
}

/// Driver and runtime versions: `NVIDIA driver`, `amdgpu driver`, `CUDA driver`, `HIP`.
fn driver_versions(gpus: &[&Value], hardware: &Value) -> Vec<(String, String)> {
    let mut versions = BTreeMap::new();
    for gpu in gpus {
        if let (Some(driver), Some(version)) =
            (str_at(gpu, &["driver"]), str_at(gpu, &["driver_version"]))
        {
            versions.insert(format!("{driver} driver"), version.to_string());
        }
    }
    for (runtime, label) in [("cuda", "CUDA driver"), ("hip", "HIP")] {
        if let Some(version) = str_at(hardware, &["runtime", runtime, "driver_version"]) {
            versions.insert(label.to_string(), version.to_string());
        }
    }
    versions.into_iter().collect()
}

fn at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(value, |v, key| v.get(key))
}

fn str_at<'a>(value: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(value, path).and_then(Value::as_str).map(str::trim)
}

fn u64_at(value: &Value, path: &[&str]) -> Option<u64> {
    at(value, path).and_then(Value::as_u64)
}

fn f64_at(value: &Value, path: &[&str]) -> Option<f64> {
    at(value, path).and_then(Value::as_f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_name_prefers_pretty_name() {
        let debian = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION=\"12 (bookworm)\"\n";
        assert_eq!(
            os_name(debian).as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(
            os_name("NAME=Ubuntu\nVERSION=\"22.04.4 LTS\"").as_deref(),
            Some("Ubuntu 22.04.4 LTS")
        );
        assert_eq!(os_name("ID=x\n"), None);
    }

    #[test]
    fn memory_is_rounded_up_to_what_is_installed() {
        let gib = 1u64 << 30;
        assert_eq!(installed_memory_label(125 * gib + gib / 2), "128 GB");
        assert_eq!(installed_memory_label(188 * gib), "192 GB");
        assert_eq!(installed_memory_label(7 * gib + gib / 2), "8 GB");
    }

    #[test]
    fn pcie_generations_follow_the_transfer_rate() {
        assert_eq!(pcie_generation(16.0), Some("4.0"));
        assert_eq!(pcie_generation(32.0), Some("5.0"));
        assert_eq!(pcie_generation(2.5), Some("1.0"));
        assert_eq!(pcie_generation(12.0), None);
    }

    #[test]
    fn a_missing_inventory_still_gives_every_field_as_a_string() {
        let desc = system_description(
            &Value::Null,
            "somebox",
            crate::engine::mllog::SUBMITTER,
            &SoftwareStack::new(String::new()),
            Division::Open,
        );
        let fields = desc.as_object().expect("an object");
        assert_eq!(fields.len(), 33);
        for (key, value) in fields {
            if key != "other_software_stack" {
                assert!(value.is_string(), "{key} is {value}");
            }
        }
        assert_eq!(desc["accelerators_per_node"], "0");
        assert_eq!(desc["system_name"], "somebox");
        assert_eq!(desc["division"], "open");
    }
}
