//! The status page's view of the box from its inventory: the host's fields, the GPU
//! and NVMe tables, the findings and the expectation checks.
//!
//! The inventory is read defensively: every key may be missing or of another type,
//! and the page shows what is there.

use serde_json::Value;

use super::text::{field_text, label, value_text};

/// Most columns in a device table; further keys stay in the JSON.
const MAX_COLUMNS: usize = 9;
/// Columns of the GPU table, in this order, when the inventory has them.
const GPU_COLUMNS: &[&str] = &[
    "index",
    "address",
    "pci_address",
    "model",
    "name",
    "driver",
    "driver_version",
    "vram_bytes",
    "memory_bytes",
    "link",
    "path_link",
    "resizable_bar",
    "numa_node",
];
/// Columns of the NVMe table, likewise.
const NVME_COLUMNS: &[&str] = &["name", "model", "address", "transport", "link"];

/// A table of devices of one kind.
pub(super) struct DeviceTable {
    /// The table's heading (`GPUs`, `NVMe drives`).
    pub title: String,
    /// The column labels.
    pub columns: Vec<String>,
    /// A row per device, a cell per column.
    pub rows: Vec<Vec<String>>,
}

/// The inventory's expectation checks.
pub(super) struct Checks {
    /// How many of them passed.
    pub passed: usize,
    /// How many there are.
    pub total: usize,
    /// A row per check, in the inventory's order.
    pub rows: Vec<CheckRow>,
}

/// One expectation check.
pub(super) struct CheckRow {
    /// The check's name (`gpu_count`, `pcie_width`, …).
    pub name: String,
    /// What it is about (a PCI address), or empty for the box.
    pub subject: String,
    /// What the SKU expects.
    pub expected: String,
    /// What the inventory found.
    pub found: String,
    /// `pass`, `fail`, … or `—` where the inventory gave none.
    pub verdict: String,
}

/// The host's fields as (label, text), in the inventory's order.
pub(super) fn host(hardware: &Value) -> Vec<(String, String)> {
    hardware
        .get("host")
        .and_then(Value::as_object)
        .map(|host| {
            host.iter()
                .map(|(k, v)| (label(k), field_text(k, v)))
                .collect()
        })
        .unwrap_or_default()
}

/// How many GPUs the inventory lists, or `unknown`.
pub(super) fn gpu_count(hardware: &Value) -> String {
    hardware
        .get("gpus")
        .and_then(Value::as_array)
        .map(|g| g.len().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// The GPU and NVMe tables, each only when the inventory lists such devices.
pub(super) fn device_tables(hardware: &Value) -> Vec<DeviceTable> {
    [
        ("GPUs", "gpus", GPU_COLUMNS),
        ("NVMe drives", "nvme", NVME_COLUMNS),
    ]
    .into_iter()
    .filter_map(|(title, key, columns)| {
        let items = hardware.get(key).and_then(Value::as_array)?;
        (!items.is_empty()).then(|| device_table(title, items, columns))
    })
    .collect()
}

/// The inventory's findings that are text.
pub(super) fn findings(hardware: &Value) -> Vec<String> {
    hardware
        .get("findings")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// A table of devices: the `preferred` columns the items have, or else every key
/// they have.
fn device_table(title: &str, items: &[Value], preferred: &[&str]) -> DeviceTable {
    let has = |key: &str| items.iter().any(|item| item.get(key).is_some());
    let mut columns: Vec<String> = preferred
        .iter()
        .filter(|key| has(key))
        .map(|key| key.to_string())
        .collect();
    if columns.is_empty() {
        for item in items {
            for key in item.as_object().into_iter().flat_map(|o| o.keys()) {
                if !columns.contains(key) {
                    columns.push(key.clone());
                }
            }
        }
    }
    columns.truncate(MAX_COLUMNS);
    let rows = items
        .iter()
        .map(|item| {
            if item.is_object() {
                columns
                    .iter()
                    .map(|c| item.get(c).map(|v| field_text(c, v)).unwrap_or_default())
                    .collect()
            } else {
                vec![value_text(item)]
            }
        })
        .collect();
    DeviceTable {
        title: title.to_string(),
        columns: columns.iter().map(|c| label(c)).collect(),
        rows,
    }
}

/// The expectation checks, or `None` where the inventory has none.
pub(super) fn checks(hardware: &Value) -> Option<Checks> {
    let checks = hardware.get("checks").and_then(Value::as_array)?;
    if checks.is_empty() {
        return None;
    }
    let field = |check: &Value, key: &str| {
        check
            .get(key)
            .map(value_text)
            .unwrap_or_else(|| "—".to_string())
    };
    let rows: Vec<CheckRow> = checks
        .iter()
        .map(|check| CheckRow {
            name: field(check, "name"),
            subject: check
                .get("subject")
                .filter(|s| !s.is_null())
                .map(value_text)
                .unwrap_or_default(),
            expected: field(check, "expected"),
            found: field(check, "found"),
            verdict: check
                .get("verdict")
                .and_then(Value::as_str)
                .unwrap_or("—")
                .to_string(),
        })
        .collect();
    Some(Checks {
        passed: rows.iter().filter(|r| r.verdict == "pass").count(),
        total: rows.len(),
        rows,
    })
}
