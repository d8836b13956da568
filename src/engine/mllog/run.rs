//! The run-level sequence of a ResNet training run's MLLOG, with every key the
//! closed-division compliance checker (ruleset 4.0.0) requires, in an order it accepts.

use std::panic::Location;
use std::path::Path;

use super::config::{Division, RunConfig, Submission};
use super::encode::{EventType, LogValue};
use super::keys;
use super::writer::{now_ms, MlLogWriter};
use super::MlLogError;

/// How a run ended, as `run_stop`'s `status` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// The run reached its target accuracy.
    Success,
    /// The run stopped without reaching it: cancelled, failed, or out of epochs.
    Aborted,
}

impl RunStatus {
    /// The value `run_stop`'s `status` logs: `success` or `aborted`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Success => keys::SUCCESS,
            RunStatus::Aborted => keys::ABORTED,
        }
    }
}

/// Where a run is in its sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Opened: the submission comes next, then `init_start`.
    Created,
    /// Between `init_start` and `init_stop`.
    Initialising,
    /// After `init_stop`, waiting for `run_start`.
    Initialised,
    /// Between `run_start` and `run_stop`: the clock is running.
    Running,
    /// After `run_stop`; nothing more may be logged.
    Stopped,
}

/// The MLLOG of one training run.
///
/// Call order (each call returns an error, and writes nothing, when made out of turn):
/// `create` → `submission` → `cache_clear` → `init_start` → (build the model, compile,
/// warm up; never touch the dataset) → `init_stop` → `run_start` → `run_header` → per
/// epoch `epoch_start`/`epoch_stop`, optionally inside `block_start`/`block_stop`, and
/// per evaluation `eval_start`/`eval_accuracy`/`eval_stop` → `run_stop`. `cache_clear`
/// may come any time before `run_start`. A log dropped after `run_start` without
/// `run_stop` writes `run_stop` with status `aborted`.
///
/// Every line is stamped with the caller's file and line (`#[track_caller]`).
#[derive(Debug)]
pub struct MlLog {
    writer: MlLogWriter,
    phase: Phase,
    division: Division,
    submission_logged: bool,
    cache_clear_logged: bool,
    header_logged: bool,
    init_start_ms: Option<u64>,
    last_epoch: u32,
    open_epoch: Option<u32>,
    open_eval: Option<u32>,
    open_block: Option<u32>,
}

impl MlLog {
    /// Opens (appending) the log at `path`, normally `mllog.txt` in the run directory.
    pub fn create(path: &Path) -> Result<MlLog, MlLogError> {
        Ok(MlLog {
            writer: MlLogWriter::open(path)?,
            phase: Phase::Created,
            division: Division::Closed,
            submission_logged: false,
            cache_clear_logged: false,
            header_logged: false,
            init_start_ms: None,
            last_epoch: 0,
            open_epoch: None,
            open_eval: None,
            open_block: None,
        })
    }

    /// The file the log appends to.
    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    /// Where the log is in its sequence.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The five `submission_*` keys.
    #[track_caller]
    pub fn submission(&mut self, submission: &Submission) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect(
            keys::SUBMISSION_ORG,
            self.phase == Phase::Created,
            "before init_start",
        )?;
        self.expect(keys::SUBMISSION_ORG, !self.submission_logged, "once")?;
        for (key, value) in [
            (keys::SUBMISSION_ORG, &submission.org),
            (keys::SUBMISSION_PLATFORM, &submission.platform),
            (keys::SUBMISSION_BENCHMARK, &submission.benchmark),
        ] {
            if value.trim().is_empty() {
                return Err(MlLogError::InvalidValue {
                    key,
                    reason: "must not be empty".into(),
                });
            }
        }
        let entries = [
            (keys::SUBMISSION_ORG, submission.org.as_str()),
            (keys::SUBMISSION_PLATFORM, submission.platform.as_str()),
            (keys::SUBMISSION_DIVISION, submission.division.as_str()),
            (keys::SUBMISSION_STATUS, submission.status.as_str()),
            (keys::SUBMISSION_BENCHMARK, submission.benchmark.as_str()),
        ];
        for (key, value) in entries {
            self.point(caller, key, value.into(), Vec::new())?;
        }
        self.division = submission.division;
        self.submission_logged = true;
        Ok(())
    }

    /// `cache_clear`: whether the page cache was actually dropped before the run.
    #[track_caller]
    pub fn cache_clear(&mut self, flushed: bool) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect(
            keys::CACHE_CLEAR,
            matches!(
                self.phase,
                Phase::Created | Phase::Initialising | Phase::Initialised
            ),
            "before run_start",
        )?;
        self.point(caller, keys::CACHE_CLEAR, flushed.into(), Vec::new())?;
        self.cache_clear_logged = true;
        Ok(())
    }

    /// `init_start`: the system begins to construct the model.
    #[track_caller]
    pub fn init_start(&mut self) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect(keys::INIT_START, self.submission_logged, "after submission")?;
        self.expect(
            keys::INIT_START,
            self.phase == Phase::Created,
            "once, before init_stop",
        )?;
        let at = self.writer.log(
            caller,
            EventType::IntervalStart,
            keys::INIT_START,
            LogValue::Null,
            Vec::new(),
        )?;
        self.init_start_ms = Some(at);
        self.phase = Phase::Initialising;
        Ok(())
    }

    /// `init_stop`. When initialisation took longer than the division allows, the
    /// clock has been running since that limit: the line is stamped there.
    #[track_caller]
    pub fn init_stop(&mut self) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect(
            keys::INIT_STOP,
            self.phase == Phase::Initialising,
            "after init_start",
        )?;
        let at = self.clock_start_ms();
        self.writer.log_at(
            caller,
            at,
            EventType::IntervalEnd,
            keys::INIT_STOP,
            LogValue::Null,
            Vec::new(),
        )?;
        self.phase = Phase::Initialised;
        Ok(())
    }

    /// `run_start`: the clock starts. Call it before any part of the run touches the
    /// dataset. Stamped no later than the end of the allowed initialisation time.
    #[track_caller]
    pub fn run_start(&mut self) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect(
            keys::RUN_START,
            self.phase == Phase::Initialised,
            "after init_stop",
        )?;
        self.expect(
            keys::RUN_START,
            self.cache_clear_logged,
            "after cache_clear",
        )?;
        let at = self.clock_start_ms();
        self.writer.log_at(
            caller,
            at,
            EventType::IntervalStart,
            keys::RUN_START,
            LogValue::Null,
            Vec::new(),
        )?;
        self.phase = Phase::Running;
        Ok(())
    }

    /// The hyperparameters: seed, batch, sample counts and the LARS keys. A
    /// closed-division log refuses a configuration the closed rules do not allow.
    #[track_caller]
    pub fn run_header(&mut self, config: &RunConfig) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect(keys::SEED, self.phase == Phase::Running, "after run_start")?;
        self.expect(keys::SEED, !self.header_logged, "once")?;
        let invalid = config.invalid_values();
        if !invalid.is_empty() {
            return Err(MlLogError::InvalidConfig(invalid.join("; ")));
        }
        if self.division == Division::Closed {
            let violations = config.closed_division_violations();
            if !violations.is_empty() {
                return Err(MlLogError::NotClosedDivision(violations.join("; ")));
            }
        }
        let entries: [(&str, LogValue); 15] = [
            (keys::SEED, config.seed.into()),
            (keys::GLOBAL_BATCH_SIZE, config.global_batch_size.into()),
            (keys::TRAIN_SAMPLES, config.train_samples.into()),
            (keys::EVAL_SAMPLES, config.eval_samples.into()),
            (
                keys::GRADIENT_ACCUMULATION_STEPS,
                config.gradient_accumulation_steps.into(),
            ),
            (keys::OPT_NAME, keys::LARS.into()),
            (
                keys::LARS_OPT_BASE_LEARNING_RATE,
                config.base_learning_rate.into(),
            ),
            (keys::LARS_OPT_END_LR, config.end_learning_rate.into()),
            (keys::LARS_OPT_LR_DECAY_POLY_POWER, config.poly_power.into()),
            (keys::LARS_OPT_LR_DECAY_STEPS, config.decay_steps.into()),
            (keys::LARS_EPSILON, config.epsilon.into()),
            (
                keys::LARS_OPT_LEARNING_RATE_WARMUP_EPOCHS,
                config.warmup_epochs.into(),
            ),
            (keys::LARS_OPT_MOMENTUM, config.momentum.into()),
            (keys::LARS_OPT_WEIGHT_DECAY, config.weight_decay.into()),
            (keys::MODEL_BN_SPAN, config.bn_span.into()),
        ];
        for (key, value) in entries {
            self.point(caller, key, value, Vec::new())?;
        }
        self.header_logged = true;
        Ok(())
    }

    /// `block_start`: the epochs from `first_epoch` up to the next evaluation.
    #[track_caller]
    pub fn block_start(&mut self, first_epoch: u32, epoch_count: u32) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::BLOCK_START)?;
        self.expect(
            keys::BLOCK_START,
            self.open_block.is_none(),
            "after the previous block_stop",
        )?;
        check_epoch(keys::BLOCK_START, first_epoch)?;
        if epoch_count == 0 {
            return Err(MlLogError::InvalidValue {
                key: keys::BLOCK_START,
                reason: "epoch_count must be at least 1".into(),
            });
        }
        self.writer.log(
            caller,
            EventType::IntervalStart,
            keys::BLOCK_START,
            LogValue::Null,
            vec![
                (keys::FIRST_EPOCH_NUM.into(), first_epoch.into()),
                (keys::EPOCH_COUNT.into(), epoch_count.into()),
            ],
        )?;
        self.open_block = Some(first_epoch);
        Ok(())
    }

    /// `block_stop` of the block that `block_start(first_epoch, …)` opened.
    #[track_caller]
    pub fn block_stop(&mut self, first_epoch: u32) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::BLOCK_STOP)?;
        self.expect(
            keys::BLOCK_STOP,
            self.open_block == Some(first_epoch),
            "after block_start of the same first epoch",
        )?;
        self.writer.log(
            caller,
            EventType::IntervalEnd,
            keys::BLOCK_STOP,
            LogValue::Null,
            vec![(keys::FIRST_EPOCH_NUM.into(), first_epoch.into())],
        )?;
        self.open_block = None;
        Ok(())
    }

    /// `epoch_start` of epoch `epoch` (numbered from 1, increasing).
    #[track_caller]
    pub fn epoch_start(&mut self, epoch: u32) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::EPOCH_START)?;
        check_epoch(keys::EPOCH_START, epoch)?;
        self.expect(
            keys::EPOCH_START,
            self.open_epoch.is_none(),
            "after the previous epoch_stop",
        )?;
        if epoch <= self.last_epoch {
            return Err(MlLogError::InvalidValue {
                key: keys::EPOCH_START,
                reason: format!("epoch {epoch} does not follow epoch {}", self.last_epoch),
            });
        }
        self.epoch_event(caller, EventType::IntervalStart, keys::EPOCH_START, epoch)?;
        self.open_epoch = Some(epoch);
        self.last_epoch = epoch;
        Ok(())
    }

    /// `epoch_stop` of the open epoch `epoch`.
    #[track_caller]
    pub fn epoch_stop(&mut self, epoch: u32) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::EPOCH_STOP)?;
        self.expect(
            keys::EPOCH_STOP,
            self.open_epoch == Some(epoch),
            "after epoch_start of the same epoch",
        )?;
        self.epoch_event(caller, EventType::IntervalEnd, keys::EPOCH_STOP, epoch)?;
        self.open_epoch = None;
        Ok(())
    }

    /// `eval_start` of the evaluation after epoch `epoch`.
    #[track_caller]
    pub fn eval_start(&mut self, epoch: u32) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::EVAL_START)?;
        check_epoch(keys::EVAL_START, epoch)?;
        self.expect(
            keys::EVAL_START,
            self.open_eval.is_none(),
            "after the previous eval_stop",
        )?;
        self.epoch_event(caller, EventType::IntervalStart, keys::EVAL_START, epoch)?;
        self.open_eval = Some(epoch);
        Ok(())
    }

    /// `eval_accuracy`: top-1 as a fraction in [0, 1], between `eval_start` and `eval_stop`.
    #[track_caller]
    pub fn eval_accuracy(&mut self, epoch: u32, accuracy: f64) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::EVAL_ACCURACY)?;
        self.expect(
            keys::EVAL_ACCURACY,
            self.open_eval == Some(epoch),
            "after eval_start of the same epoch",
        )?;
        if !(0.0..=1.0).contains(&accuracy) {
            return Err(MlLogError::InvalidValue {
                key: keys::EVAL_ACCURACY,
                reason: format!("must be a fraction in [0, 1], not {accuracy}"),
            });
        }
        self.writer.log(
            caller,
            EventType::PointInTime,
            keys::EVAL_ACCURACY,
            accuracy.into(),
            vec![(keys::EPOCH_NUM.into(), epoch.into())],
        )?;
        Ok(())
    }

    /// `eval_stop` of the open evaluation after epoch `epoch`.
    #[track_caller]
    pub fn eval_stop(&mut self, epoch: u32) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::EVAL_STOP)?;
        self.expect(
            keys::EVAL_STOP,
            self.open_eval == Some(epoch),
            "after eval_start of the same epoch",
        )?;
        self.epoch_event(caller, EventType::IntervalEnd, keys::EVAL_STOP, epoch)?;
        self.open_eval = None;
        Ok(())
    }

    /// `tracked_stats` `{"throughput": images_per_second}` for epoch `epoch`.
    #[track_caller]
    pub fn throughput(&mut self, epoch: u32, images_per_second: f64) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect_training(keys::TRACKED_STATS)?;
        let value = LogValue::Object(vec![(keys::THROUGHPUT.into(), images_per_second.into())]);
        self.point(
            caller,
            keys::TRACKED_STATS,
            value,
            vec![(keys::STEP.into(), epoch.into())],
        )
    }

    /// `run_stop` with its status; the clock stops. Flushes the file to disk.
    #[track_caller]
    pub fn run_stop(&mut self, status: RunStatus) -> Result<(), MlLogError> {
        let caller = Location::caller();
        self.expect(
            keys::RUN_STOP,
            self.phase == Phase::Running,
            "once, after run_start",
        )?;
        self.stop(caller, status)
    }

    fn stop(&mut self, caller: &Location<'_>, status: RunStatus) -> Result<(), MlLogError> {
        self.writer.log(
            caller,
            EventType::IntervalEnd,
            keys::RUN_STOP,
            LogValue::Null,
            vec![(keys::STATUS.into(), status.as_str().into())],
        )?;
        self.phase = Phase::Stopped;
        self.writer.sync()
    }

    fn expect_training(&self, key: &'static str) -> Result<(), MlLogError> {
        self.expect(
            key,
            self.phase == Phase::Running,
            "between run_start and run_stop",
        )?;
        self.expect(key, self.header_logged, "after run_header")
    }

    fn expect(&self, key: &'static str, holds: bool, when: &str) -> Result<(), MlLogError> {
        if holds {
            Ok(())
        } else {
            Err(MlLogError::OutOfOrder {
                key,
                expected: when.to_string(),
                phase: self.phase,
            })
        }
    }

    fn point(
        &mut self,
        caller: &Location<'_>,
        key: &str,
        value: LogValue,
        metadata: Vec<(String, LogValue)>,
    ) -> Result<(), MlLogError> {
        self.writer
            .log(caller, EventType::PointInTime, key, value, metadata)
            .map(|_| ())
    }

    fn epoch_event(
        &mut self,
        caller: &Location<'_>,
        event_type: EventType,
        key: &str,
        epoch: u32,
    ) -> Result<(), MlLogError> {
        self.writer
            .log(
                caller,
                event_type,
                key,
                epoch.into(),
                vec![(keys::EPOCH_NUM.into(), epoch.into())],
            )
            .map(|_| ())
    }

    fn clock_start_ms(&self) -> u64 {
        let init_start = self.init_start_ms.unwrap_or_else(now_ms);
        clock_start_ms(init_start, now_ms(), self.division.max_init_ms())
    }
}

impl Drop for MlLog {
    fn drop(&mut self) {
        if self.phase == Phase::Running {
            if let Err(err) = self.stop(Location::caller(), RunStatus::Aborted) {
                tracing::warn!("could not log run_stop for an unfinished run: {err}");
            }
        }
    }
}

/// When the clock starts: now, or, when initialisation overran its limit, the last
/// millisecond before that limit (the checker wants `init_stop` strictly inside it).
pub fn clock_start_ms(init_start_ms: u64, now_ms: u64, max_init_ms: u64) -> u64 {
    now_ms.min(init_start_ms.saturating_add(max_init_ms.saturating_sub(1)))
}

fn check_epoch(key: &'static str, epoch: u32) -> Result<(), MlLogError> {
    if epoch == 0 {
        Err(MlLogError::InvalidValue {
            key,
            reason: "epochs are numbered from 1".into(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_starts_at_the_init_limit_when_init_overruns() {
        let limit = Division::Closed.max_init_ms();
        assert_eq!(clock_start_ms(1_000, 5_000, limit), 5_000);
        assert_eq!(
            clock_start_ms(1_000, 1_000 + limit, limit),
            1_000 + limit - 1
        );
        assert_eq!(
            clock_start_ms(1_000, 1_000 + 3 * limit, limit),
            1_000 + limit - 1
        );
    }
}
