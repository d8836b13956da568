//! The box as the last inventory found it: GPU count, each GPU's PCIe link, and every
//! SKU expectation check with its outcome.

use serde_json::Value;

use super::exposition::{bool_value, Exposition, Kind};
use super::results::gpu_index;

const GIGA: f64 = 1e9;
const OUTCOMES: [&str; 5] = ["pass", "warn", "fail", "skip", "error"];

pub fn render(out: &mut Exposition, hardware: &Value) {
    let gpus = hardware
        .get("gpus")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if hardware.get("gpus").is_some() {
        out.single(
            "tinyperf_inventory_gpus",
            Kind::Gauge,
            "GPUs found by the last inventory.",
            gpus.len() as f64,
        );
    }
    links(out, gpus);
    checks(out, hardware);
}

/// (family, help, field of `link`, factor to base units)
const LINK_FIELDS: [(&str, &str, &str, f64); 4] = [
    (
        "tinyperf_gpu_pcie_link_width",
        "Lanes the GPU's PCIe link trained to.",
        "current_width",
        1.0,
    ),
    (
        "tinyperf_gpu_pcie_link_max_width",
        "Lanes the GPU's PCIe link can train to.",
        "max_width",
        1.0,
    ),
    (
        "tinyperf_gpu_pcie_link_speed_transfers_per_second",
        "Transfer rate per lane the GPU's PCIe link trained to.",
        "current_speed_gts",
        GIGA,
    ),
    (
        "tinyperf_gpu_pcie_link_max_speed_transfers_per_second",
        "Transfer rate per lane the GPU's PCIe link can train to.",
        "max_speed_gts",
        GIGA,
    ),
];

fn links(out: &mut Exposition, gpus: &[Value]) {
    for (family, help, field, scale) in LINK_FIELDS {
        for (index, gpu) in gpus.iter().enumerate() {
            let Some(value) = gpu
                .pointer(&format!("/link/{field}"))
                .and_then(Value::as_f64)
            else {
                continue;
            };
            let address = gpu.get("address").and_then(Value::as_str).unwrap_or("");
            out.family(family, Kind::Gauge, help);
            out.sample(
                family,
                &[("gpu", &index.to_string()), ("pci_address", address)],
                value * scale,
            );
        }
    }
}

fn checks(out: &mut Exposition, hardware: &Value) {
    let Some(checks) = hardware.get("checks").and_then(Value::as_array) else {
        return;
    };
    out.family(
        "tinyperf_inventory_checks",
        Kind::Gauge,
        "SKU expectation checks of the last inventory, by verdict.",
    );
    for outcome in OUTCOMES {
        let count = checks
            .iter()
            .filter(|c| c.get("verdict").and_then(Value::as_str) == Some(outcome))
            .count();
        out.sample(
            "tinyperf_inventory_checks",
            &[("verdict", outcome)],
            count as f64,
        );
    }
    out.family(
        "tinyperf_inventory_check_outcome",
        Kind::Gauge,
        "1 for the outcome of each SKU expectation check of the last inventory, 0 for the \
         others; gpu and pci_address name the GPU a check is about (gpu_link: its PCIe link \
         against the SKU's).",
    );
    for check in checks {
        let name = check.get("name").and_then(Value::as_str).unwrap_or("");
        let verdict = check.get("verdict").and_then(Value::as_str).unwrap_or("");
        let subject = check.get("subject").and_then(Value::as_str).unwrap_or("");
        let gpu = gpu_index(hardware, subject);
        let gpu_label = gpu.map(|i| i.to_string()).unwrap_or_default();
        let (pci_address, other_subject) = match gpu {
            Some(_) => (subject, ""),
            None => ("", subject),
        };
        for outcome in OUTCOMES {
            out.sample(
                "tinyperf_inventory_check_outcome",
                &[
                    ("check", name),
                    ("gpu", &gpu_label),
                    ("pci_address", pci_address),
                    ("subject", other_subject),
                    ("outcome", outcome),
                ],
                bool_value(verdict == outcome),
            );
        }
    }
}
