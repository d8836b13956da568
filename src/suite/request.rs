//! The worker's request: everything `tinyperf run` needs to execute a plan, as plain
//! data. The command line builds it from its arguments; the agent's worker receives
//! the plan the agent checked, on its command line.

use std::path::PathBuf;
use std::time::Duration;

use super::plan::RunPlan;

/// How the worker reports its events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventFormat {
    /// For a person: lines, a table, progress.
    Human,
    /// One JSON event per line on stdout, with heartbeats and live telemetry between
    /// them: what the agent's supervisor reads.
    Jsonl,
}

/// Where the run's record and files go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recording {
    /// Nowhere: a stage that writes files picks a temporary folder.
    None,
    /// The run's files go into this folder; the caller (the agent) owns the record.
    RunDir(PathBuf),
    /// The run is recorded in the store of this state folder, under `runs/<id>/`.
    StateDir(PathBuf),
}

/// One run for the worker to execute.
#[derive(Debug, Clone)]
pub struct WorkerRequest {
    /// The checked plan: suite, options, stages, backend, recipe and dataset.
    pub plan: RunPlan,
    /// Root of the sysfs/procfs tree to inventory (`/` on a box).
    pub root: PathBuf,
    /// The SKU to judge the box as, instead of the one it is recognised as.
    pub sku: Option<String>,
    /// Where the run is recorded.
    pub recording: Recording,
    /// How often telemetry is sampled while a stage runs.
    pub telemetry_interval: Duration,
    /// How events are reported.
    pub events: EventFormat,
}
