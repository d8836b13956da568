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
    /// No run is in progress; a new one may start.
    Idle,
    /// A run is in progress; another start is refused as busy.
    Running,
}

impl AgentState {
    /// The state as the D-Bus `State` property and the API spell it: `idle` or `running`.
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
    /// Whether a run is in progress.
    pub state: AgentState,
    /// The id of the run in progress, `None` when idle.
    pub current_run: Option<String>,
    /// The suite of the run in progress.
    pub current_suite: Option<String>,
    /// The stage the run in progress is executing, once one has started.
    pub current_stage: Option<String>,
    /// Progress of the current run, 0..1; 0 when idle.
    pub progress: f64,
    /// What the run in progress last said it was doing (`epoch 3 of 37 done`), `None`
    /// when idle or before it said anything.
    pub message: Option<String>,
    /// The newest finished run in the store, `None` when it holds none.
    pub last_run: Option<RunBrief>,
    /// Runs whose record the disk has not taken yet (a full state directory); the
    /// agent keeps them in memory and keeps trying.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsaved_runs: Vec<String>,
    /// The SKU the box is judged as (`unrecognised` when none fits).
    pub sku: String,
    /// The tinyperf version the agent runs.
    pub version: String,
    /// When this agent process started.
    pub agent_started_at: DateTime<Utc>,
}

/// Totals since the agent started, for `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    /// Runs accepted and started since the agent started.
    pub runs_started: u64,
    /// Finished runs by final state (`passed`, `failed`, …).
    pub runs_finished: BTreeMap<String, u64>,
    /// Records in the store that could not be read and were skipped.
    pub store_records_skipped: u64,
}

/// The hardware as last scanned: the inventory JSON and the SKU it was judged as.
#[derive(Debug, Clone)]
pub struct HardwareView {
    /// The inventory report as JSON, as `GET /api/v1/hardware` serves it.
    pub json: Value,
    /// The SKU the box is judged as: the configured override, else the one recognised
    /// (`unrecognised` when none fits).
    pub sku: String,
}

impl HardwareView {
    /// Takes the inventory of the tree at `root` and judges the box, as `sku` or as
    /// the SKU it is recognised as.
    pub fn scan(root: &Path, sku: Option<&str>) -> HardwareView {
        HardwareView::of(&crate::inventory::take(root, sku, true))
    }

    /// The view of an inventory already taken.
    pub fn of(report: &crate::inventory::HardwareReport) -> HardwareView {
        HardwareView {
            sku: report.sku_name().to_string(),
            json: serde_json::to_value(report).unwrap_or_default(),
        }
    }
}
