//! An external benchmark's progress, read from its MLLOG lines as they come: the
//! epochs done against the epochs planned, a message naming the last event, and one
//! training point per epoch (with its evaluation when one followed), so that the status,
//! D-Bus, the status page and the terminal's bar follow an external run as they follow
//! one of tinyperf's own.

use serde_json::Value;

use crate::mlperf::log::{Entry, MlLogText};
use crate::suite::event::{TrainPoint, TrainPointKind};

/// What one MLLOG line changed.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    /// The stage's progress, 0..1 (0 while the planned epochs are unknown), with a word on
    /// the event.
    Progress {
        /// Epochs done over epochs planned.
        fraction: f64,
        /// The event, in a few words.
        message: String,
    },
    /// An epoch's figures, sent once the epoch's evaluation (if it had one) is known.
    Epoch(TrainPoint),
}

/// Follows the MLLOG's keys that say how far the benchmark got.
#[derive(Debug)]
pub struct MllogProgress {
    stage: String,
    /// From the benchmark's definition; else its MLLOG's `epoch_count`.
    planned_epochs: Option<u32>,
    train_samples: Option<f64>,
    epoch_started_ms: Option<f64>,
    last_throughput: Option<f64>,
    epochs_done: u32,
    /// The last finished epoch's point, held until its evaluation or the next epoch.
    pending: Option<TrainPoint>,
}

impl MllogProgress {
    /// A follower for stage `stage`, planning `planned_epochs` when the benchmark's
    /// definition says.
    pub fn new(stage: &str, planned_epochs: Option<u32>) -> MllogProgress {
        MllogProgress {
            stage: stage.to_string(),
            planned_epochs,
            train_samples: None,
            epoch_started_ms: None,
            last_throughput: None,
            epochs_done: 0,
            pending: None,
        }
    }

    /// Reads one line (any line: those without an MLLOG entry change nothing);
    /// `elapsed_s` is the stage's time so far.
    pub fn line(&mut self, line: &str, elapsed_s: f64) -> Vec<Update> {
        let log = MlLogText::parse(line);
        let Some(entry) = log.entries.first() else {
            return Vec::new();
        };
        let mut updates = Vec::new();
        let epoch = entry
            .meta("epoch_num")
            .and_then(Value::as_f64)
            .filter(|e| e.is_finite() && *e >= 0.0);
        let message = match entry.key.as_str() {
            "epoch_count" => {
                if self.planned_epochs.is_none() {
                    self.planned_epochs = number(entry).map(|n| n as u32).filter(|n| *n > 0);
                }
                None
            }
            "train_samples" => {
                self.train_samples = number(entry).filter(|n| *n > 0.0);
                None
            }
            "init_start" => Some("the benchmark is initialising".to_string()),
            "init_stop" => Some("the benchmark finished initialising".to_string()),
            "run_start" => Some("the run's clock started".to_string()),
            "run_stop" => {
                updates.extend(self.flush());
                let status = entry.meta("status").and_then(Value::as_str).unwrap_or("");
                Some(format!("the run's clock stopped ({status})"))
            }
            "epoch_start" => {
                updates.extend(self.flush());
                self.epoch_started_ms = Some(entry.time_ms);
                None
            }
            "epoch_stop" => epoch.map(|e| {
                updates.extend(self.flush());
                self.epochs_done = self.epochs_done.max(e as u32);
                self.pending = Some(self.point(e as u32, entry.time_ms, elapsed_s));
                self.epoch_started_ms = None;
                match self.planned_epochs {
                    Some(planned) => format!("epoch {e} of {planned} done"),
                    None => format!("epoch {e} done"),
                }
            }),
            "eval_accuracy" => {
                let accuracy = number(entry);
                if let (Some(point), Some(a)) = (self.pending.as_mut(), accuracy) {
                    if epoch.is_none_or(|e| e as u32 == point.epoch) {
                        point.eval_accuracy = Some(a);
                    }
                }
                updates.extend(self.flush());
                Some(format!(
                    "epoch {} eval top-1 {}",
                    epoch.map_or("?".into(), |e| e.to_string()),
                    accuracy.map_or("?".into(), |a| format!("{a:.4}"))
                ))
            }
            "tracked_stats" => {
                let throughput = entry
                    .value
                    .get("throughput")
                    .and_then(Value::as_f64)
                    .filter(|t| t.is_finite() && *t > 0.0);
                if throughput.is_some() {
                    self.last_throughput = throughput;
                }
                throughput.map(|t| format!("{t:.0} img/s"))
            }
            _ => None,
        };
        if let Some(message) = message {
            updates.push(Update::Progress {
                fraction: self.fraction(),
                message,
            });
        }
        updates
    }

    /// What is still held when the log ends: the last epoch's point.
    pub fn finish(&mut self) -> Vec<Update> {
        self.flush()
    }

    fn flush(&mut self) -> Vec<Update> {
        self.pending.take().map(Update::Epoch).into_iter().collect()
    }

    fn fraction(&self) -> f64 {
        match self.planned_epochs {
            Some(planned) => (f64::from(self.epochs_done) / f64::from(planned)).min(1.0),
            None => 0.0,
        }
    }

    fn point(&self, epoch: u32, stop_ms: f64, elapsed_s: f64) -> TrainPoint {
        let from_epoch_time = self
            .train_samples
            .zip(self.epoch_started_ms)
            .map(|(samples, start)| samples / ((stop_ms - start) / 1000.0))
            .filter(|rate| rate.is_finite() && *rate > 0.0);
        let planned = self.planned_epochs.unwrap_or(0);
        TrainPoint {
            stage: self.stage.clone(),
            kind: TrainPointKind::Epoch,
            epoch,
            planned_epochs: planned,
            // An external benchmark's steps are not logged: its progress counts epochs.
            global_step: u64::from(epoch),
            planned_steps: u64::from(planned),
            loss: None,
            accuracy: None,
            images_per_s: self.last_throughput.or(from_epoch_time).unwrap_or(0.0),
            lr: None,
            eval_accuracy: None,
            elapsed_s,
        }
    }
}

fn number(entry: &Entry) -> Option<f64> {
    entry.value.as_f64().filter(|n| n.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(time_ms: u64, key: &str, value: &str, meta: &str) -> String {
        format!(
            ":::MLLOG {{\"namespace\": \"\", \"time_ms\": {time_ms}, \"event_type\": \"POINT_IN_TIME\", \"key\": \"{key}\", \"value\": {value}, \"metadata\": {{{meta}}}}}"
        )
    }

    fn feed(progress: &mut MllogProgress, lines: &[String]) -> Vec<Update> {
        let mut all = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            all.extend(progress.line(l, i as f64));
        }
        all.extend(progress.finish());
        all
    }

    fn epoch_lines(epoch: u32, start: u64, stop: u64) -> Vec<String> {
        let meta = format!("\"epoch_num\": {epoch}");
        vec![
            line(start, "epoch_start", "null", &meta),
            line(stop, "epoch_stop", "null", &meta),
        ]
    }

    #[test]
    fn epochs_count_against_the_planned_and_carry_their_evaluation() {
        let mut p = MllogProgress::new("external", Some(4));
        let mut lines = vec![
            line(0, "run_start", "null", ""),
            line(1, "train_samples", "1000", ""),
        ];
        lines.extend(epoch_lines(1, 1000, 3000));
        lines.extend(epoch_lines(2, 3000, 5000));
        lines.push(line(5100, "eval_accuracy", "0.5", "\"epoch_num\": 2"));
        lines.extend(epoch_lines(3, 5200, 7200));
        let updates = feed(&mut p, &lines);
        let points: Vec<&TrainPoint> = updates
            .iter()
            .filter_map(|u| match u {
                Update::Epoch(p) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(
            points.iter().map(|p| p.epoch).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(points[1].eval_accuracy, Some(0.5));
        assert_eq!(points[0].eval_accuracy, None);
        // 1000 images in 2 s.
        assert!((points[0].images_per_s - 500.0).abs() < 1e-9);
        assert_eq!((points[2].global_step, points[2].planned_steps), (3, 4));
        let fractions: Vec<f64> = updates
            .iter()
            .filter_map(|u| match u {
                Update::Progress { fraction, .. } => Some(*fraction),
                _ => None,
            })
            .collect();
        assert_eq!(fractions.last(), Some(&0.75));
        assert!(updates.iter().any(|u| matches!(u,
            Update::Progress { message, .. } if message == "epoch 2 eval top-1 0.5000")));
    }

    #[test]
    fn the_logs_own_epoch_count_plans_when_the_definition_does_not() {
        let mut p = MllogProgress::new("external", None);
        let mut lines = vec![line(0, "epoch_count", "2", "")];
        lines.extend(epoch_lines(1, 0, 10));
        let updates = feed(&mut p, &lines);
        assert!(updates.iter().any(|u| matches!(u,
            Update::Progress { fraction, message } if *fraction == 0.5 && message == "epoch 1 of 2 done")));
    }

    #[test]
    fn without_a_plan_progress_stays_at_zero_but_still_says_what_happened() {
        let mut p = MllogProgress::new("external", None);
        let updates = feed(&mut p, &epoch_lines(1, 0, 10));
        assert!(updates.iter().any(|u| matches!(u,
            Update::Progress { fraction, message } if *fraction == 0.0 && message == "epoch 1 done")));
        let point = updates.iter().find_map(|u| match u {
            Update::Epoch(p) => Some(p),
            _ => None,
        });
        assert_eq!(point.map(|p| p.planned_epochs), Some(0));
    }

    #[test]
    fn throughput_from_tracked_stats_wins_and_noise_changes_nothing() {
        let mut p = MllogProgress::new("external", Some(1));
        assert!(p.line("    3  240.00 ms run, 1.2 loss", 0.0).is_empty());
        assert!(p.line(":::MLLOG {garbage", 0.0).is_empty());
        let mut lines = vec![line(0, "tracked_stats", "{\"throughput\": 6400.5}", "")];
        lines.extend(epoch_lines(1, 0, 10));
        let updates = feed(&mut p, &lines);
        let point = updates
            .iter()
            .find_map(|u| match u {
                Update::Epoch(p) => Some(p.clone()),
                _ => None,
            })
            .unwrap();
        assert_eq!(point.images_per_s, 6400.5);
        assert_eq!(point.loss, None);
    }
}
