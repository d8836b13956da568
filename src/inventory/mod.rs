//! Hardware inventory from /sys and /proc, the SKU table, and the verdicts.
//! (Placeholder interface: the scanner is not implemented yet.)

use std::path::Path;

use serde::Serialize;

use crate::suite::record::{Check, Metric};

/// Everything found on the box, and how it compares with its SKU.
#[derive(Debug, Clone, Serialize)]
pub struct HardwareReport {
    pub sku: String,
    pub findings: Vec<String>,
}

impl HardwareReport {
    /// The SKU the box was recognised as (or judged as), or `unrecognised`.
    pub fn sku_name(&self) -> &str {
        &self.sku
    }
    /// Every expectation of the SKU, with expected and found values.
    pub fn checks(&self) -> Vec<Check> {
        Vec::new()
    }
    /// Notes that are not checks (a missing runtime, an unreadable file).
    pub fn findings(&self) -> Vec<String> {
        self.findings.clone()
    }
    /// Headline figures: GPU count, memory, cores.
    pub fn metrics(&self) -> Vec<Metric> {
        Vec::new()
    }
    /// Human-readable report for `tinyperf detect`.
    pub fn render_human(&self) -> String {
        "inventory: not implemented\n".to_string()
    }
}

/// Takes the inventory under `root` (`root/sys`, `root/proc`), judges it against the
/// SKU (`sku` overrides recognition), and probes GPU runtimes when `probe_runtime`.
pub fn take(_root: &Path, _sku: Option<&str>, _probe_runtime: bool) -> HardwareReport {
    HardwareReport {
        sku: "unrecognised".into(),
        findings: vec!["inventory scanner not implemented".into()],
    }
}

pub fn known_skus() -> Vec<&'static str> {
    vec!["tinybox-green", "tinybox-red", "tinybox-5090"]
}

pub fn is_known_sku(name: &str) -> bool {
    known_skus().contains(&name)
}

impl HardwareReport {
    /// 0 when the box meets every expectation (or is unrecognised), 1 when any fails.
    pub fn exit_code(&self) -> i32 {
        0
    }
}
