//! The worker's JSON-lines event protocol: one event per line on the worker's stdout,
//! folded into a [`RunRecord`] by whoever reads it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::{RunRecord, RunState, StageResult};
use crate::runtime::telemetry::TelemetrySample;

/// Whether a training figure is one step's or a whole epoch's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TrainPointKind {
    /// A training step's figure, sent at most about once a second.
    Step,
    /// An epoch's summary, with its evaluation when it had one.
    Epoch,
}

/// One training figure as a run reports it live: a step (sent at most about once a
/// second) or an epoch's summary with its evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainPoint {
    /// The stage that trained (`smoke`, `mlperf-resnet-1`, …).
    pub stage: String,
    /// Whether this is a step's figure or an epoch's summary.
    pub kind: TrainPointKind,
    /// 1-based.
    pub epoch: u32,
    /// How many epochs the stage plans.
    pub planned_epochs: u32,
    /// Steps taken in the stage so far, and how many it plans.
    pub global_step: u64,
    /// How many steps the stage plans in all.
    pub planned_steps: u64,
    /// The step's loss, or the epoch's mean; `None` where the trainer does not say (an
    /// external benchmark's MLLOG).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// Training top-1 of the step's batch, or of the epoch, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
    /// Training throughput, in images per second.
    pub images_per_s: f64,
    /// The learning rate at that step or epoch, where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    /// Evaluation top-1, on epoch points that had an evaluation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_accuracy: Option<f64>,
    /// Seconds since the stage started.
    pub elapsed_s: f64,
}

/// One line of `tinyperf run --events jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    /// The run began; the first line the worker writes.
    RunStarted {
        /// The suite the run executes.
        suite: String,
        /// The names of its stages, in the order they run.
        stages: Vec<String>,
    },
    /// The inventory a stage took; it becomes the run record's `hardware`.
    Hardware {
        /// The inventory report, as JSON.
        hardware: Value,
    },
    /// A stage began.
    StageStarted {
        /// The stage's name.
        stage: String,
        /// Its place in the run, 0-based.
        index: usize,
        /// How many stages the run has.
        total: usize,
    },
    /// Progress of the whole run, 0..1, with an optional word on what is happening.
    Progress {
        /// The stage that reported it.
        stage: String,
        /// The whole run's progress, from 0 to 1.
        progress: f64,
        /// What is happening, in a few words.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A stage ended.
    StageFinished {
        /// Its metrics, checks, findings and verdict.
        result: StageResult,
    },
    /// The run ended; the last line the worker writes.
    RunFinished {
        /// `passed` when no verdict failed or errored, `failed` when one did, `cancelled`
        /// when stopped.
        state: RunState,
        /// Why the run ended so, when there is more to say (`cancelled`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Sent from a thread of its own every few seconds: the worker process is alive,
    /// whatever its stage is doing.
    Heartbeat,
    /// A training figure, as it happens.
    Train {
        /// The figure.
        point: TrainPoint,
    },
    /// One telemetry sample of every GPU, as the sampler takes it (from its own thread).
    Telemetry {
        /// The sample.
        sample: TelemetrySample,
    },
}

impl WorkerEvent {
    /// The event as one line of JSON, without the newline.
    pub fn to_line(&self) -> String {
        // Serialising these plain enums cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parses one line; `None` for blank lines.
    pub fn parse_line(line: &str) -> Option<Result<WorkerEvent, serde_json::Error>> {
        let line = line.trim();
        if line.is_empty() {
            return None;
        }
        Some(serde_json::from_str(line))
    }
}

impl RunRecord {
    /// Folds one worker event into the record.
    pub fn apply(&mut self, event: &WorkerEvent) {
        match event {
            WorkerEvent::RunStarted { .. }
            | WorkerEvent::StageStarted { .. }
            | WorkerEvent::Progress { .. }
            | WorkerEvent::Heartbeat
            | WorkerEvent::Train { .. }
            | WorkerEvent::Telemetry { .. } => {}
            WorkerEvent::Hardware { hardware } => self.hardware = hardware.clone(),
            WorkerEvent::StageFinished { result } => self.stages.push(result.clone()),
            WorkerEvent::RunFinished { state, message } => self.finish(*state, message.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Trigger, Verdict};
    use chrono::Utc;

    #[test]
    fn events_round_trip_one_per_line() {
        let e = WorkerEvent::Progress {
            stage: "cpu-gemm".into(),
            progress: 0.5,
            message: Some("n=1024".into()),
        };
        let line = e.to_line();
        assert!(!line.contains('\n'));
        assert!(line.starts_with("{\"event\":\"progress\""));
        assert_eq!(WorkerEvent::parse_line(&line).unwrap().unwrap(), e);
        assert!(WorkerEvent::parse_line("   ").is_none());
        assert!(WorkerEvent::parse_line("{\"event\":\"nope\"}")
            .unwrap()
            .is_err());
    }

    #[test]
    fn folding_events_builds_the_record() {
        let mut r = RunRecord::new(
            "x".into(),
            "inventory".into(),
            Trigger::Dbus,
            Default::default(),
        );
        r.apply(&WorkerEvent::StageFinished {
            result: StageResult::measured("inventory", Verdict::Pass, Utc::now(), Vec::new()),
        });
        r.apply(&WorkerEvent::RunFinished {
            state: RunState::Passed,
            message: None,
        });
        assert_eq!(r.state, RunState::Passed);
        assert_eq!(r.stages.len(), 1);
        assert_eq!(r.verdict(), Some(Verdict::Pass));
        assert!(r.finished_at.is_some());
    }
}
