//! `train.jsonl`: every epoch's training figures (loss, top-1, evaluation, img/s,
//! learning rate), one `TrainPoint` as JSON per line, written as each epoch ends so a
//! run's page can draw its training after the run. Step figures stay live-only.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::event::{TrainPoint, TrainPointKind};

/// Appends the epoch figures of one run, opening the file at the first epoch (a run
/// that trains nothing gets none); a file that cannot be written is said once and
/// then left alone, never stopping the run.
pub struct EpochLog {
    path: Option<PathBuf>,
    file: Option<File>,
}

impl EpochLog {
    /// The log in `run_dir`, or one that keeps nothing when the run has no folder.
    pub fn in_run_dir(run_dir: Option<&Path>) -> EpochLog {
        EpochLog {
            path: run_dir.map(|d| d.join(crate::record::store::Artifact::TrainFigures.file_name())),
            file: None,
        }
    }

    /// Keeps `point` when it is an epoch's.
    pub fn note(&mut self, point: &TrainPoint) {
        if point.kind != TrainPointKind::Epoch {
            return;
        }
        let Some(path) = &self.path else {
            return;
        };
        if self.file.is_none() {
            match OpenOptions::new().create(true).append(true).open(path) {
                Ok(file) => self.file = Some(file),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot keep the epoch figures");
                    self.path = None;
                    return;
                }
            }
        }
        // A plain struct of numbers and strings always serialises.
        let mut line = serde_json::to_string(point).unwrap_or_default();
        line.push('\n');
        if let Some(Err(e)) = self.file.as_mut().map(|f| f.write_all(line.as_bytes())) {
            tracing::warn!(path = %path.display(), error = %e, "cannot keep the epoch figures");
            self.path = None;
            self.file = None;
        }
    }
}

/// The epoch figures in a `train.jsonl`; lines that do not read are skipped.
pub fn parse(text: &str) -> Vec<TrainPoint> {
    text.lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(kind: TrainPointKind, epoch: u32) -> TrainPoint {
        TrainPoint {
            stage: "smoke".into(),
            kind,
            epoch,
            planned_epochs: 3,
            global_step: u64::from(epoch) * 4,
            planned_steps: 12,
            loss: Some(1.0 / f64::from(epoch)),
            accuracy: Some(0.5),
            images_per_s: 100.0,
            lr: Some(0.1),
            eval_accuracy: Some(0.7),
            elapsed_s: f64::from(epoch),
        }
    }

    #[test]
    fn only_epochs_are_kept_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EpochLog::in_run_dir(Some(dir.path()));
        log.note(&point(TrainPointKind::Step, 1));
        assert!(
            !dir.path().join("train.jsonl").exists(),
            "no file before an epoch"
        );
        log.note(&point(TrainPointKind::Epoch, 1));
        log.note(&point(TrainPointKind::Epoch, 2));
        drop(log);
        let path = dir.path().join("train.jsonl");
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{cut short\n");
        let points = parse(&text);
        assert_eq!(points.len(), 2);
        assert_eq!(points[1], point(TrainPointKind::Epoch, 2));
        // Without a run folder nothing is written anywhere.
        EpochLog::in_run_dir(None).note(&point(TrainPointKind::Epoch, 1));
    }
}
