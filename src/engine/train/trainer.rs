//! The training loop: epochs of steps over the training loader, evaluation on the
//! recipe's cadence, a stop at the target accuracy, and the MLLOG of all of it.
//!
//! The loop never panics and never loses what it measured: every way out (target
//! reached, epochs used up, cancel, a non-finite loss, an engine or data error) ends in
//! a [`TrainSummary`] whose [`StopReason`] says why, and the MLLOG gets its `run_stop`.

use std::time::Instant;

use crate::engine::backend::Backend;
use crate::engine::data::{Batch, Loader};
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::mllog::{MlLog, RunStatus};
use crate::engine::model::Model;
use crate::engine::recipe::Recipe;
use crate::engine::schedule::PolynomialDecayWithWarmup;

use super::loss_scale::{LossScaler, OverflowVerdict};
use super::optimizer::DeviceOptimizer;
use super::step::{eval_step, train_step, DeviceBatch, StepOutcome, StepResult};

/// How the loop runs one batch: on a single device, or split over data-parallel replicas.
/// Errors come back as the message the run's [`StopReason::Failed`] will carry.
pub(super) trait StepRunner {
    /// A training step on `batch` at learning rate `lr`, the loss gradient multiplied by
    /// `loss_scale`. `cancelled` is asked between the forward and the backward pass, so a
    /// cancel during a long step updates nothing.
    fn train_step(
        &mut self,
        batch: &Batch,
        lr: f32,
        loss_scale: f32,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<StepOutcome, String>;

    /// An evaluation step: the loss and correct count over `batch`'s valid samples.
    fn eval_step(&mut self, batch: &Batch) -> Result<StepResult, String>;
}

/// After one training step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepReport {
    /// 1-based.
    pub epoch: u32,
    /// 1-based position within the epoch.
    pub step: usize,
    /// Steps in this epoch.
    pub steps_per_epoch: usize,
    /// Steps taken in the whole run, this one included.
    pub global_step: u64,
    /// The mean loss over this batch's valid samples.
    pub loss: f32,
    /// Accuracy on this batch's valid samples.
    pub accuracy: f64,
    /// This step's valid images over its wall time (data wait included).
    pub images_per_s: f64,
    /// The learning rate the step ran at.
    pub lr: f64,
}

/// After one epoch (and its evaluation, when it had one).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochReport {
    /// The epoch that ended, 1-based.
    pub epoch: u32,
    /// The recipe's planned epochs (`train_epochs`).
    pub planned_epochs: u32,
    /// The mean of the epoch's per-step losses.
    pub mean_loss: f64,
    /// Top-1 accuracy on the epoch's valid training samples, as the model stood at each
    /// step.
    pub train_accuracy: f64,
    /// Valid training images over the time spent in the epoch's steps (data waits
    /// included, evaluation not).
    pub images_per_s: f64,
    /// The learning rate of the epoch's last step.
    pub lr: f64,
    /// Top-1 accuracy of the evaluation after this epoch; `None` when the epoch was not
    /// evaluated.
    pub eval_accuracy: Option<f64>,
    /// Wall time of the epoch with its evaluation, in seconds.
    pub elapsed_s: f64,
}

/// Who watches a run: progress reports and the cancel flag.
pub trait TrainObserver {
    /// Whether the run should stop; asked before every epoch and step, and between a
    /// step's forward and backward.
    fn cancelled(&self) -> bool;
    /// Called after every training step, skipped overflowing ones included.
    fn on_step(&mut self, report: &StepReport);
    /// Called after every completed epoch, once its evaluation (if any) is done.
    fn on_epoch(&mut self, report: &EpochReport);
}

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// An evaluation reached the recipe's target accuracy.
    TargetReached,
    /// The planned epochs ran without reaching the target.
    EpochsExhausted,
    /// The observer asked to stop.
    Cancelled,
    /// A step's loss was NaN or infinite; that step updated nothing.
    NonFiniteLoss {
        /// The epoch of that step, 1-based.
        epoch: u32,
        /// The step's position within its epoch, 1-based.
        step: usize,
        /// The loss it computed.
        loss: f32,
    },
    /// The gradients overflowed `consecutive` steps in a row at loss scale `scale`, the
    /// smallest the run's loss scaling allows.
    GradientsOverflowed {
        /// The epoch of the last overflowing step, 1-based.
        epoch: u32,
        /// The last overflowing step's position within its epoch, 1-based.
        step: usize,
        /// Overflowing steps in a row at the smallest scale.
        consecutive: u32,
        /// The loss scale those steps ran at.
        scale: f32,
    },
    /// An engine, data or log error.
    Failed(String),
}

impl StopReason {
    /// The `run_stop` status MLLOG gets: success for a reached target, aborted for every
    /// other stop.
    pub fn mllog_status(&self) -> RunStatus {
        match self {
            StopReason::TargetReached => RunStatus::Success,
            _ => RunStatus::Aborted,
        }
    }

    /// One sentence for the operator on why the run stopped, with what to change where
    /// training diverged; `target` is the recipe's target accuracy.
    pub fn describe(&self, target: f64) -> String {
        match self {
            StopReason::TargetReached => format!("reached the target accuracy {target}"),
            StopReason::EpochsExhausted => {
                format!("the planned epochs ended before the target accuracy {target}")
            }
            StopReason::Cancelled => "cancelled".to_string(),
            StopReason::NonFiniteLoss { epoch, step, loss } => format!(
                "the loss became {loss} at epoch {epoch} step {step}: training diverged \
                 (lower the learning rate); the weights of the step before were kept"
            ),
            StopReason::GradientsOverflowed {
                epoch,
                step,
                consecutive,
                scale,
            } => {
                let (at_scale, or_scale) = if *scale == 1.0 {
                    (String::new(), "")
                } else {
                    (
                        format!(" at loss scale {scale}"),
                        ", or the fp16 loss scale",
                    )
                };
                format!(
                    "the gradients held NaN or infinite values in {consecutive} steps in a \
                     row, up to epoch {epoch} step {step}{at_scale}: training diverged \
                     (lower the learning rate{or_scale}); those steps were skipped and the \
                     weights kept"
                )
            }
            StopReason::Failed(message) => message.clone(),
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainSummary {
    /// Why the run stopped.
    pub reason: StopReason,
    /// Epochs whose every step ran.
    pub epochs_completed: u32,
    /// Training steps taken, skipped overflowing ones included.
    pub steps: u64,
    /// Each evaluation: (epoch, top-1 accuracy).
    pub evals: Vec<(u32, f64)>,
    /// Seconds from the start of the run to the evaluation that reached the target.
    pub time_to_target_s: Option<f64>,
    /// Wall time from the start of the loop to its stop, in seconds.
    pub run_seconds: f64,
    /// Valid training images over the time spent in training steps.
    pub train_images_per_s: f64,
    /// Distinct unreadable image files, replaced by the loaders.
    pub unreadable_files: usize,
    /// Line-level MLLOG failures (the run goes on without the log).
    pub mllog_errors: Vec<String>,
    /// Steps whose gradients overflowed and were skipped (see [`LossScaler`]).
    pub skipped_steps: u64,
    /// The loss scale at the end of the run (1 without loss scaling).
    pub loss_scale: f32,
}

impl TrainSummary {
    /// The top-1 accuracy of the last evaluation; `None` when none ran.
    pub fn final_accuracy(&self) -> Option<f64> {
        self.evals.last().map(|&(_, a)| a)
    }

    /// The best top-1 accuracy over all evaluations; `None` when none ran.
    pub fn best_accuracy(&self) -> Option<f64> {
        self.evals.iter().map(|&(_, a)| a).reduce(f64::max)
    }
}

/// The data of a run: the training and evaluation loaders.
pub struct TrainData {
    /// The training set's loader: each epoch's shuffled, augmented batches.
    pub train: Loader,
    /// The evaluation set's loader, read after every evaluated epoch.
    pub eval: Loader,
}

/// The loop's state, so each phase is a method that reads top to bottom.
struct Run<'a, S: StepRunner> {
    steps: S,
    recipe: &'a Recipe,
    data: &'a TrainData,
    observer: &'a mut dyn TrainObserver,
    mllog: Option<&'a mut MlLog>,
    mllog_errors: Vec<String>,
    schedule: PolynomialDecayWithWarmup,
    started: Instant,
    global_step: u64,
    train_images: u64,
    train_seconds: f64,
    evals: Vec<(u32, f64)>,
    time_to_target_s: Option<f64>,
    scaler: LossScaler,
}

/// One model on one backend.
struct SingleDevice<'a, B: Backend, M: Model<B> + ?Sized> {
    backend: &'a B,
    model: &'a mut M,
    optimizer: DeviceOptimizer<B>,
    loss_fn: SoftmaxCrossEntropy,
}

impl<B: Backend, M: Model<B> + ?Sized> StepRunner for SingleDevice<'_, B, M> {
    fn train_step(
        &mut self,
        batch: &Batch,
        lr: f32,
        loss_scale: f32,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<StepOutcome, String> {
        DeviceBatch::upload(self.backend, batch)
            .and_then(|b| {
                train_step(
                    self.backend,
                    self.model,
                    &mut self.optimizer,
                    &self.loss_fn,
                    &b,
                    lr,
                    loss_scale,
                    cancelled,
                )
            })
            .map_err(|e| e.to_string())
    }

    fn eval_step(&mut self, batch: &Batch) -> Result<StepResult, String> {
        DeviceBatch::upload(self.backend, batch)
            .and_then(|b| eval_step(self.backend, self.model, &self.loss_fn, &b))
            .map_err(|e| e.to_string())
    }
}

/// The loss of `recipe`: softmax cross-entropy with its label smoothing.
pub(super) fn recipe_loss(recipe: &Recipe) -> SoftmaxCrossEntropy {
    SoftmaxCrossEntropy {
        label_smoothing: recipe.label_smoothing as f32,
    }
}

/// Trains `model` by `recipe` until the target accuracy, the end of the planned epochs,
/// a cancel or a failure. `mllog`, when given, must be past `run_header`: the loop
/// logs every epoch and evaluation and then `run_stop`.
pub fn train<B: Backend, M: Model<B> + ?Sized>(
    backend: &B,
    model: &mut M,
    recipe: &Recipe,
    data: &TrainData,
    mllog: Option<&mut MlLog>,
    observer: &mut dyn TrainObserver,
) -> TrainSummary {
    let steps = SingleDevice {
        backend,
        model,
        optimizer: DeviceOptimizer::new(recipe.lars_config()),
        loss_fn: recipe_loss(recipe),
    };
    run_loop(steps, recipe, data, mllog, observer)
}

/// The summary of a run that could not start, after logging its `run_stop` as aborted.
pub(super) fn not_started(reason: String, mllog: Option<&mut MlLog>) -> TrainSummary {
    let mut errors = Vec::new();
    if let Some(log) = mllog {
        if let Err(e) = log.run_stop(RunStatus::Aborted) {
            errors.push(e.to_string());
        }
    }
    TrainSummary {
        reason: StopReason::Failed(reason),
        epochs_completed: 0,
        steps: 0,
        evals: Vec::new(),
        time_to_target_s: None,
        run_seconds: 0.0,
        train_images_per_s: 0.0,
        unreadable_files: 0,
        mllog_errors: errors,
        skipped_steps: 0,
        loss_scale: 1.0,
    }
}

/// The training loop over any [`StepRunner`]: everything [`train`] does besides running
/// the batches.
pub(super) fn run_loop<S: StepRunner>(
    steps: S,
    recipe: &Recipe,
    data: &TrainData,
    mllog: Option<&mut MlLog>,
    observer: &mut dyn TrainObserver,
) -> TrainSummary {
    let started = Instant::now();
    let steps_per_epoch = data.train.batches_per_epoch() as u64;
    let schedule = match recipe.schedule(steps_per_epoch) {
        Ok(s) => s,
        Err(e) => return not_started(format!("invalid learning-rate schedule: {e}"), mllog),
    };
    let mut run = Run {
        steps,
        recipe,
        data,
        observer,
        mllog,
        mllog_errors: Vec::new(),
        schedule,
        started,
        global_step: 0,
        train_images: 0,
        train_seconds: 0.0,
        evals: Vec::new(),
        time_to_target_s: None,
        scaler: LossScaler::new(recipe.loss_scaling()),
    };
    let (reason, epochs_completed) = run.epochs();
    run.log(|l| l.run_stop(reason.mllog_status()));
    TrainSummary {
        reason,
        epochs_completed,
        steps: run.global_step,
        evals: run.evals,
        time_to_target_s: run.time_to_target_s,
        run_seconds: run.started.elapsed().as_secs_f64(),
        train_images_per_s: if run.train_seconds > 0.0 {
            run.train_images as f64 / run.train_seconds
        } else {
            0.0
        },
        unreadable_files: data.train.unreadable_files() + data.eval.unreadable_files(),
        mllog_errors: run.mllog_errors,
        skipped_steps: run.scaler.skipped_steps(),
        loss_scale: run.scaler.scale(),
    }
}

/// How an epoch's steps ended.
enum EpochEnd {
    Completed {
        loss_sum: f64,
        correct: usize,
        valid: usize,
    },
    Stopped(StopReason),
}

impl<S: StepRunner> Run<'_, S> {
    fn log(
        &mut self,
        write: impl FnOnce(&mut MlLog) -> Result<(), crate::engine::mllog::MlLogError>,
    ) {
        if let Some(log) = self.mllog.as_deref_mut() {
            if let Err(e) = write(log) {
                tracing::warn!(error = %e, "MLLOG line not written");
                self.mllog_errors.push(e.to_string());
            }
        }
    }

    fn epochs(&mut self) -> (StopReason, u32) {
        let planned = self.recipe.train_epochs;
        for epoch in 1..=planned {
            if self.observer.cancelled() {
                return (StopReason::Cancelled, epoch - 1);
            }
            let epoch_started = Instant::now();
            let images_before = (self.train_images, self.train_seconds);
            self.log(|l| l.epoch_start(epoch));
            let end = self.train_epoch(epoch);
            self.log(|l| l.epoch_stop(epoch));
            let (loss_sum, correct, valid) = match end {
                EpochEnd::Completed {
                    loss_sum,
                    correct,
                    valid,
                } => (loss_sum, correct, valid),
                EpochEnd::Stopped(reason) => return (reason, epoch - 1),
            };
            let epoch_images = (self.train_images - images_before.0) as f64;
            let epoch_seconds = self.train_seconds - images_before.1;
            let images_per_s = if epoch_seconds > 0.0 {
                epoch_images / epoch_seconds
            } else {
                0.0
            };
            self.log(|l| l.throughput(epoch, images_per_s));
            let mut eval_accuracy = None;
            if self.recipe.is_eval_epoch(epoch) {
                match self.evaluate(epoch) {
                    Ok(Some(accuracy)) => eval_accuracy = Some(accuracy),
                    Ok(None) => return (StopReason::Cancelled, epoch),
                    Err(reason) => return (reason, epoch),
                }
            }
            let steps = self.data.train.batches_per_epoch().max(1);
            self.observer.on_epoch(&EpochReport {
                epoch,
                planned_epochs: planned,
                mean_loss: loss_sum / steps as f64,
                train_accuracy: if valid == 0 {
                    0.0
                } else {
                    correct as f64 / valid as f64
                },
                images_per_s,
                lr: self.schedule.lr_at(self.global_step.saturating_sub(1)),
                eval_accuracy,
                elapsed_s: epoch_started.elapsed().as_secs_f64(),
            });
            if eval_accuracy.is_some_and(|a| a >= self.recipe.target_accuracy) {
                return (StopReason::TargetReached, epoch);
            }
        }
        (StopReason::EpochsExhausted, planned)
    }

    fn train_epoch(&mut self, epoch: u32) -> EpochEnd {
        let batches = match self.data.train.epoch(epoch) {
            Ok(b) => b,
            Err(e) => return EpochEnd::Stopped(StopReason::Failed(e.to_string())),
        };
        let steps_per_epoch = batches.len();
        let (mut loss_sum, mut correct, mut valid) = (0.0f64, 0usize, 0usize);
        let mut step_started = Instant::now();
        let mut taken = 0usize;
        for batch in batches {
            if self.observer.cancelled() {
                return EpochEnd::Stopped(StopReason::Cancelled);
            }
            taken += 1;
            let lr = self.schedule.lr_at(self.global_step);
            let result = match self.one_step(&batch, lr) {
                Ok(StepOutcome::Updated(r)) => {
                    self.scaler.record_applied();
                    r
                }
                Ok(StepOutcome::NonFiniteGradients(r)) => match self.scaler.record_overflow() {
                    OverflowVerdict::Skip => {
                        tracing::debug!(
                            epoch,
                            step = taken,
                            loss_scale = self.scaler.scale(),
                            "gradients overflowed: step skipped"
                        );
                        r
                    }
                    OverflowVerdict::GiveUp { consecutive, scale } => {
                        return EpochEnd::Stopped(StopReason::GradientsOverflowed {
                            epoch,
                            step: taken,
                            consecutive,
                            scale,
                        })
                    }
                },
                Ok(StepOutcome::Cancelled) => return EpochEnd::Stopped(StopReason::Cancelled),
                Ok(StepOutcome::NonFiniteLoss(r)) => {
                    return EpochEnd::Stopped(StopReason::NonFiniteLoss {
                        epoch,
                        step: taken,
                        loss: r.loss,
                    })
                }
                Err(e) => {
                    return EpochEnd::Stopped(StopReason::Failed(format!(
                        "training step {taken} of epoch {epoch} failed: {e}"
                    )))
                }
            };
            let seconds = step_started.elapsed().as_secs_f64();
            step_started = Instant::now();
            self.global_step += 1;
            self.train_images += result.valid as u64;
            self.train_seconds += seconds;
            loss_sum += f64::from(result.loss);
            correct += result.correct;
            valid += result.valid;
            self.observer.on_step(&StepReport {
                epoch,
                step: taken,
                steps_per_epoch,
                global_step: self.global_step,
                loss: result.loss,
                accuracy: result.accuracy(),
                images_per_s: if seconds > 0.0 {
                    result.valid as f64 / seconds
                } else {
                    0.0
                },
                lr,
            });
        }
        if taken < steps_per_epoch {
            return EpochEnd::Stopped(StopReason::Failed(format!(
                "the data loader stopped after {taken} of {steps_per_epoch} batches of epoch {epoch}"
            )));
        }
        EpochEnd::Completed {
            loss_sum,
            correct,
            valid,
        }
    }

    fn one_step(&mut self, batch: &Batch, lr: f64) -> Result<StepOutcome, String> {
        let observer = &*self.observer;
        let loss_scale = self.scaler.scale();
        self.steps
            .train_step(batch, lr as f32, loss_scale, &|| observer.cancelled())
    }

    /// Top-1 accuracy on the evaluation split, padding excluded; `None` when cancelled.
    fn evaluate(&mut self, epoch: u32) -> Result<Option<f64>, StopReason> {
        self.log(|l| l.eval_start(epoch));
        let result = self.eval_batches(epoch);
        if let Ok(Some(accuracy)) = result {
            self.evals.push((epoch, accuracy));
            self.log(|l| l.eval_accuracy(epoch, accuracy));
            if accuracy >= self.recipe.target_accuracy && self.time_to_target_s.is_none() {
                self.time_to_target_s = Some(self.started.elapsed().as_secs_f64());
            }
        }
        self.log(|l| l.eval_stop(epoch));
        result
    }

    fn eval_batches(&mut self, epoch: u32) -> Result<Option<f64>, StopReason> {
        let batches = self
            .data
            .eval
            .epoch(epoch)
            .map_err(|e| StopReason::Failed(e.to_string()))?;
        let (mut correct, mut valid) = (0usize, 0usize);
        for batch in batches {
            if self.observer.cancelled() {
                return Ok(None);
            }
            let r: StepResult = self.steps.eval_step(&batch).map_err(|e| {
                StopReason::Failed(format!("evaluation after epoch {epoch} failed: {e}"))
            })?;
            correct += r.correct;
            valid += r.valid;
        }
        if valid == 0 {
            return Err(StopReason::Failed(format!(
                "evaluation after epoch {epoch} saw no images"
            )));
        }
        Ok(Some(correct as f64 / valid as f64))
    }
}
