//! What the agent is doing and what it has counted, as the front ends show it.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use crate::record::RunBrief;

/// Whether a run is in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    Idle,
    Running,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Idle => "idle",
            AgentState::Running => "running",
        }
    }
}

/// What the agent is doing, as `GET /api/v1/status` and the D-Bus properties show it.
#[derive(Debug, Clone, Serialize)]
pub struct StatusSnapshot {
    pub state: AgentState,
    pub current_run: Option<String>,
    pub current_suite: Option<String>,
    pub current_stage: Option<String>,
    /// Progress of the current run, 0..1; 0 when idle.
    pub progress: f64,
    pub last_run: Option<RunBrief>,
    /// Runs whose record the disk has not taken yet (a full state directory); the
    /// agent keeps them in memory and keeps trying.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsaved_runs: Vec<String>,
    pub sku: String,
    pub version: String,
    pub agent_started_at: DateTime<Utc>,
}

/// Totals since the agent started, for `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    pub runs_started: u64,
    /// Finished runs by final state (`passed`, `failed`, …).
    pub runs_finished: BTreeMap<String, u64>,
    /// Records in the store that could not be read and were skipped.
    pub store_records_skipped: u64,
}

/// The hardware as last scanned: the inventory JSON and the SKU it was judged as.
#[derive(Debug, Clone)]
pub struct HardwareView {
    pub json: Value,
    pub sku: String,
}

impl HardwareView {
    /// Takes the inventory of the tree at `root` and judges the box, as `sku` or as
    /// the SKU it is recognised as.
    pub fn scan(root: &Path, sku: Option<&str>) -> HardwareView {
        let report = crate::inventory::take(root, sku, true);
        HardwareView {
            sku: report.sku_name().to_string(),
            json: serde_json::to_value(&report).unwrap_or_default(),
        }
    }
}
