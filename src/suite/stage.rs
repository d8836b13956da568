//! What every stage gets to work with, and what it hands back.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::event::WorkerEvent;
use super::plan::RunPlan;
use crate::record::{Check, Metric, StageResult, Verdict};

/// A stage's view of the run.
pub struct StageContext<'a> {
    /// Root of the sysfs/procfs tree to inventory.
    pub root: PathBuf,
    /// Judge the box as this SKU instead of recognising it.
    pub sku: Option<String>,
    /// The run's checked plan: its options, recipe, dataset and workspace.
    pub plan: &'a RunPlan,
    /// Where the run's files go (`mllog.txt`, `system_desc.json`); `None` when the run
    /// is not recorded, and a stage that writes files picks a temporary folder.
    pub run_dir: Option<PathBuf>,
    /// The inventory an earlier stage of this run took, as JSON.
    pub hardware: Option<Value>,
    /// Set when the run is cancelled; a stage checks it between steps and stops early.
    pub cancel: &'a AtomicBool,
    /// Sends an event to whoever reads the worker.
    pub emit: &'a mut dyn FnMut(WorkerEvent),
    /// This stage's share of the run's progress: `[start, end)`.
    pub progress_span: (f64, f64),
    /// The run's progress this stage has reported so far (the span's start at first).
    /// A stage whose phases each count from 0 (preparing, then training) never moves
    /// the run's progress back.
    pub progress_reached: f64,
    /// The stage's name, as its events and result carry it.
    pub stage_name: &'static str,
}

impl<'a> StageContext<'a> {
    /// The run's options, as checked by the preflight.
    pub fn options(&self) -> &'a Map<String, Value> {
        &self.plan.options
    }

    /// Whether the run was cancelled; a stage that sees it stops and returns what it has.
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// Reports progress within the stage, 0..1, as the run's progress: never below what
    /// the stage reported before.
    pub fn progress(&mut self, fraction: f64, message: Option<String>) {
        let (start, end) = self.progress_span;
        let progress =
            (start + (end - start) * fraction.clamp(0.0, 1.0)).max(self.progress_reached);
        self.progress_reached = progress;
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
    /// The figures measured so far, each with its unit.
    pub metrics: Vec<Metric>,
    /// The checks judged so far; their verdicts make the stage's.
    pub checks: Vec<Check>,
    /// Notes that are not checks (a device skipped, a fallback taken), in plain words.
    pub findings: Vec<String>,
}

impl StageReport {
    /// Starts the report of stage `name`, timed from now.
    pub fn new(name: &'static str) -> Self {
        StageReport {
            name,
            started_at: Utc::now(),
            metrics: Vec::new(),
            checks: Vec::new(),
            findings: Vec::new(),
        }
    }

    /// Adds a figure of the whole stage: `value` in `unit` (`img/s`, `GB/s`, `s`, …).
    pub fn metric(&mut self, name: &str, value: f64, unit: &str) {
        self.metrics.push(Metric::new(name, value, unit));
    }

    /// A figure about one device, the PCI address `subject` when it is known.
    pub fn device_metric(&mut self, name: &str, value: f64, unit: &str, subject: Option<&str>) {
        self.metrics
            .push(Metric::new(name, value, unit).about(subject.map(str::to_string)));
    }

    /// Closes the stage with the verdict its checks earn (`Skip` with no checks).
    pub fn finish(self, message: Option<String>) -> StageResult {
        let verdict = Verdict::combine(self.checks.iter().map(|c| c.verdict));
        self.finish_as(verdict, message)
    }

    /// Closes a stage whose load could not run (`verdict` and `why` say so), keeping the
    /// checks it made without one: judged by them when there are any.
    pub fn finish_unloaded(self, verdict: Verdict, why: String) -> StageResult {
        if self.checks.is_empty() {
            self.finish_as(verdict, Some(why))
        } else {
            self.finish(Some(format!(
                "{why}; only what the drivers report was judged"
            )))
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_moves_the_runs_progress_only_forward_within_its_span() {
        let cancel = AtomicBool::new(false);
        let plan = crate::suite::plan::preflight(
            "inventory",
            Map::new(),
            crate::suite::plan::Workspace::for_run(None, None),
        )
        .unwrap();
        let mut seen = Vec::new();
        let mut emit = |event: WorkerEvent| {
            if let WorkerEvent::Progress { progress, .. } = event {
                seen.push(progress);
            }
        };
        let mut ctx = StageContext {
            root: PathBuf::from("/"),
            sku: None,
            plan: &plan,
            run_dir: None,
            hardware: None,
            cancel: &cancel,
            emit: &mut emit,
            progress_span: (0.5, 0.75),
            progress_reached: 0.5,
            stage_name: "train",
        };
        // Preparing, then training from 0 again, as the smoke stage does.
        for fraction in [0.0, 0.4, 0.0, 0.2, 0.6, 2.0] {
            ctx.progress(fraction, None);
        }
        drop(ctx);
        assert_eq!(seen, [0.5, 0.6, 0.6, 0.6, 0.65, 0.75]);
    }
}
