//! What every stage gets to work with, and what it hands back.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::event::WorkerEvent;
use crate::record::{Check, Metric, StageResult, Verdict};

/// A stage's view of the run.
pub struct StageContext<'a> {
    /// Root of the sysfs/procfs tree to inventory.
    pub root: PathBuf,
    pub sku: Option<String>,
    pub options: &'a Map<String, Value>,
    /// Where the run's files go (`mllog.txt`, `system_desc.json`); `None` when the run
    /// is not recorded, and a stage that writes files picks a temporary folder.
    pub run_dir: Option<PathBuf>,
    /// Where generated datasets are kept between runs, and how many bytes they may
    /// take there together.
    pub cache_dir: PathBuf,
    pub cache_budget: u64,
    /// The inventory an earlier stage of this run took, as JSON.
    pub hardware: Option<Value>,
    pub cancel: &'a AtomicBool,
    /// Sends an event to whoever reads the worker.
    pub emit: &'a mut dyn FnMut(WorkerEvent),
    /// This stage's share of the run's progress: `[start, end)`.
    pub progress_span: (f64, f64),
    pub stage_name: &'static str,
}

impl StageContext<'_> {
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Reports progress within the stage, 0..1.
    pub fn progress(&mut self, fraction: f64, message: Option<String>) {
        let (start, end) = self.progress_span;
        let progress = start + (end - start) * fraction.clamp(0.0, 1.0);
        (self.emit)(WorkerEvent::Progress {
            stage: self.stage_name.to_string(),
            progress,
            message,
        });
    }
}

/// Builds a stage's result as it goes.
#[derive(Debug)]
pub struct StageReport {
    name: &'static str,
    started_at: DateTime<Utc>,
    pub metrics: Vec<Metric>,
    pub checks: Vec<Check>,
    pub findings: Vec<String>,
}

impl StageReport {
    pub fn new(name: &'static str) -> Self {
        StageReport {
            name,
            started_at: Utc::now(),
            metrics: Vec::new(),
            checks: Vec::new(),
            findings: Vec::new(),
        }
    }

    pub fn metric(&mut self, name: &str, value: f64, unit: &str) {
        self.metrics.push(Metric::new(name, value, unit));
    }

    /// Closes the stage with the verdict its checks earn (`Skip` with no checks).
    pub fn finish(self, message: Option<String>) -> StageResult {
        let verdict = Verdict::combine(self.checks.iter().map(|c| c.verdict));
        self.finish_as(verdict, message)
    }

    /// Closes the stage with an explicit verdict (an error, say).
    pub fn finish_as(self, verdict: Verdict, message: Option<String>) -> StageResult {
        StageResult {
            name: self.name.to_string(),
            verdict,
            started_at: self.started_at,
            finished_at: Utc::now(),
            metrics: self.metrics,
            checks: self.checks,
            findings: self.findings,
            message,
        }
    }
}
