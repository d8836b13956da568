//! What the run in progress shows live: its training figures and GPU samples as they
//! arrive, bounded, for the status page's charts and the telemetry gauges.
//!
//! A long run keeps its whole span at a coarser grain rather than only its last
//! minutes: when a series is full, every other point of it is dropped (epoch figures
//! are always kept).

use std::collections::VecDeque;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::runtime::telemetry::TelemetrySample;
use crate::suite::event::{TrainPoint, TrainPointKind};

/// The most training figures kept for one run.
pub const MAX_TRAIN_POINTS: usize = 2000;
/// The most telemetry samples kept for one run.
pub const MAX_TELEMETRY_SAMPLES: usize = 1800;

/// One telemetry sample and when the agent received it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimedSample {
    /// When the agent received the sample from the worker.
    pub at: DateTime<Utc>,
    /// What every GPU read.
    #[serde(flatten)]
    pub sample: TelemetrySample,
}

/// The live figures of the run in progress, or of the last run until the next starts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveRun {
    /// The run the figures belong to, `None` before the agent's first run.
    pub run_id: Option<String>,
    /// Whether that run is still going.
    pub running: bool,
    /// Its training figures, oldest first, at most `MAX_TRAIN_POINTS`.
    pub train: VecDeque<TrainPoint>,
    /// Its telemetry samples, oldest first, at most `MAX_TELEMETRY_SAMPLES`.
    pub telemetry: VecDeque<TimedSample>,
}

impl LiveRun {
    /// Forgets the last run's figures for `run_id`'s.
    pub fn begin(&mut self, run_id: &str) {
        *self = LiveRun {
            run_id: Some(run_id.to_string()),
            running: true,
            ..LiveRun::default()
        };
    }

    /// Marks the run finished; its figures stay until the next run begins.
    pub fn end(&mut self) {
        self.running = false;
    }

    /// Adds a training figure, thinning the step figures first when the series is full.
    pub fn add_train(&mut self, point: TrainPoint) {
        if self.train.len() >= MAX_TRAIN_POINTS {
            thin_steps(&mut self.train);
        }
        self.train.push_back(point);
    }

    /// Adds a telemetry sample, dropping every other sample first when the series is full.
    pub fn add_sample(&mut self, sample: TimedSample) {
        if self.telemetry.len() >= MAX_TELEMETRY_SAMPLES {
            let mut keep = false;
            self.telemetry.retain(|_| {
                keep = !keep;
                keep
            });
        }
        self.telemetry.push_back(sample);
    }

    /// The newest sample of a run still going.
    pub fn latest_sample(&self) -> Option<&TimedSample> {
        self.telemetry.back().filter(|_| self.running)
    }
}

/// Drops every other step figure, keeping every epoch figure; when only epoch figures
/// are left, drops the oldest.
fn thin_steps(points: &mut VecDeque<TrainPoint>) {
    let before = points.len();
    let mut keep_step = false;
    points.retain(|p| {
        if p.kind == TrainPointKind::Epoch {
            return true;
        }
        keep_step = !keep_step;
        keep_step
    });
    if points.len() == before {
        points.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(kind: TrainPointKind, step: u64) -> TrainPoint {
        TrainPoint {
            stage: "train".into(),
            kind,
            epoch: 1,
            planned_epochs: 1,
            global_step: step,
            planned_steps: 100_000,
            loss: Some(1.0),
            accuracy: Some(0.5),
            images_per_s: 100.0,
            lr: Some(0.1),
            eval_accuracy: None,
            elapsed_s: step as f64,
        }
    }

    #[test]
    fn a_full_series_keeps_its_whole_span_and_every_epoch() {
        let mut live = LiveRun::default();
        live.begin("r1");
        for step in 0..(3 * MAX_TRAIN_POINTS as u64) {
            let kind = if step % 500 == 499 {
                TrainPointKind::Epoch
            } else {
                TrainPointKind::Step
            };
            live.add_train(point(kind, step));
        }
        assert!(live.train.len() <= MAX_TRAIN_POINTS);
        assert!(live.train.len() > MAX_TRAIN_POINTS / 2);
        assert_eq!(live.train.front().unwrap().global_step, 0);
        assert_eq!(
            live.train.back().unwrap().global_step,
            3 * MAX_TRAIN_POINTS as u64 - 1
        );
        let epochs = live
            .train
            .iter()
            .filter(|p| p.kind == TrainPointKind::Epoch)
            .count();
        assert_eq!(epochs, 3 * MAX_TRAIN_POINTS / 500);
    }

    #[test]
    fn only_epochs_left_drops_the_oldest() {
        let mut live = LiveRun::default();
        for step in 0..(MAX_TRAIN_POINTS as u64 + 10) {
            live.add_train(point(TrainPointKind::Epoch, step));
        }
        assert_eq!(live.train.len(), MAX_TRAIN_POINTS);
        assert_eq!(live.train.front().unwrap().global_step, 10);
    }

    #[test]
    fn samples_are_thinned_and_the_latest_is_only_live_while_running() {
        let mut live = LiveRun::default();
        live.begin("r1");
        for i in 0..(MAX_TELEMETRY_SAMPLES + 5) {
            live.add_sample(TimedSample {
                at: Utc::now(),
                sample: TelemetrySample {
                    t_s: i as f64,
                    ..TelemetrySample::default()
                },
            });
        }
        assert!(live.telemetry.len() <= MAX_TELEMETRY_SAMPLES);
        assert_eq!(live.telemetry.front().unwrap().sample.t_s, 0.0);
        assert_eq!(
            live.latest_sample().unwrap().sample.t_s,
            (MAX_TELEMETRY_SAMPLES + 4) as f64
        );
        live.end();
        assert!(live.latest_sample().is_none());
        live.begin("r2");
        assert!(live.telemetry.is_empty() && live.train.is_empty());
    }
}
