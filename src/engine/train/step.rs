//! One batch through the model: upload, forward, loss and accuracy, and for training
//! the backward pass and the optimizer update.

use crate::engine::backend::Backend;
use crate::engine::data::Batch;
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::model::{GradientsReady, Model};
use crate::engine::{EngineError, Result, Tensor};

use super::optimizer::{DeviceOptimizer, UpdateOutcome};

/// A batch on the device: NHWC images and f32 labels, −1 for padding samples.
pub struct DeviceBatch<B: Backend> {
    /// `[n, size, size, 3]` NHWC pixels, as the loader made them.
    pub images: Tensor<B>,
    /// `[n]` class indices as f32, −1 for padding samples.
    pub labels: Tensor<B>,
    /// Samples that count (not padding).
    pub valid: usize,
}

impl<B: Backend> DeviceBatch<B> {
    /// Uploads `batch` to `backend`'s device, marking its padding samples with label −1;
    /// its valid flags must be one per sample.
    pub fn upload(backend: &B, batch: &Batch) -> Result<Self> {
        let n = batch.len();
        let s = batch.image_size;
        let images = Tensor::from_host(backend, &[n, s, s, 3], &batch.images)?;
        EngineError::check_length("DeviceBatch::upload", "valid flags", n, batch.valid.len())?;
        let labels: Vec<f32> = batch
            .labels
            .iter()
            .zip(&batch.valid)
            .map(|(&l, &v)| if v { l as f32 } else { -1.0 })
            .collect();
        let labels = Tensor::from_host(backend, &[n], &labels)?;
        Ok(DeviceBatch {
            images,
            labels,
            valid: batch.valid_count(),
        })
    }
}

/// What a step measured: the mean loss over its valid samples and how many of them
/// the model got right.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepResult {
    /// The mean loss over the valid samples.
    pub loss: f32,
    /// Valid samples whose top-1 prediction was their label.
    pub correct: usize,
    /// Samples that count (not padding).
    pub valid: usize,
}

impl StepResult {
    /// Top-1 accuracy, `correct / valid`; 0 for a batch without a valid sample.
    pub fn accuracy(&self) -> f64 {
        if self.valid == 0 {
            0.0
        } else {
            self.correct as f64 / self.valid as f64
        }
    }
}

/// How a training step ended.
#[derive(Debug)]
pub enum StepOutcome {
    /// The weights were updated.
    Updated(StepResult),
    /// The loss was NaN or infinite; the weights were left as they were.
    NonFiniteLoss(StepResult),
    /// The loss was finite but a gradient overflowed (with fp16, a loss scale too
    /// large); the weights were left as they were.
    NonFiniteGradients(StepResult),
    /// Cancelled between the forward and the backward pass; nothing was updated.
    Cancelled,
}

fn loss_and_correct<B: Backend>(
    backend: &B,
    loss_fn: &SoftmaxCrossEntropy,
    logits: &Tensor<B>,
    batch: &DeviceBatch<B>,
) -> Result<StepResult> {
    let out = loss_fn.forward(backend, logits, &batch.labels)?;
    let loss = out.loss.to_host(backend)?;
    let correct = out.correct.to_host(backend)?;
    Ok(StepResult {
        loss: loss.first().copied().unwrap_or(f32::NAN),
        correct: correct.iter().filter(|&&c| c > 0.5).count(),
        valid: batch.valid,
    })
}

/// How the forward and backward half of a training step ended.
#[derive(Debug)]
pub enum GradientOutcome {
    /// The batch's gradients are in the model's parameters.
    Computed(StepResult),
    /// The loss was NaN or infinite; no backward was run.
    NonFiniteLoss(StepResult),
    /// Cancelled between the forward and the backward pass.
    Cancelled,
}

/// Forward, loss and backward of a training step, leaving the gradients in the model for
/// an update (or, across replicas, for an all-reduce first), multiplied by `loss_scale`.
/// `cancelled` is asked after the forward pass.
pub fn compute_gradients<B: Backend, M: Model<B> + ?Sized>(
    backend: &B,
    model: &mut M,
    loss_fn: &SoftmaxCrossEntropy,
    batch: &DeviceBatch<B>,
    loss_scale: f32,
    cancelled: &dyn Fn() -> bool,
) -> Result<GradientOutcome> {
    compute_gradients_with(backend, model, loss_fn, batch, loss_scale, cancelled, None)
}

/// [`compute_gradients`], telling `ready` about gradients as the backward finishes them
/// (see [`Model::backward_notifying`]).
pub fn compute_gradients_notifying<B: Backend, M: Model<B> + ?Sized>(
    backend: &B,
    model: &mut M,
    loss_fn: &SoftmaxCrossEntropy,
    batch: &DeviceBatch<B>,
    loss_scale: f32,
    cancelled: &dyn Fn() -> bool,
    ready: &mut GradientsReady<'_, B>,
) -> Result<GradientOutcome> {
    compute_gradients_with(
        backend,
        model,
        loss_fn,
        batch,
        loss_scale,
        cancelled,
        Some(ready),
    )
}

fn compute_gradients_with<B: Backend, M: Model<B> + ?Sized>(
    backend: &B,
    model: &mut M,
    loss_fn: &SoftmaxCrossEntropy,
    batch: &DeviceBatch<B>,
    loss_scale: f32,
    cancelled: &dyn Fn() -> bool,
    ready: Option<&mut GradientsReady<'_, B>>,
) -> Result<GradientOutcome> {
    let logits = model.forward(backend, &batch.images, true)?;
    let result = loss_and_correct(backend, loss_fn, &logits, batch)?;
    if !result.loss.is_finite() {
        return Ok(GradientOutcome::NonFiniteLoss(result));
    }
    if cancelled() {
        return Ok(GradientOutcome::Cancelled);
    }
    let mut dlogits = loss_fn.backward(backend, &logits, &batch.labels)?;
    drop(logits);
    if loss_scale != 1.0 {
        backend.scale(dlogits.buffer_mut(), loss_scale)?;
    }
    match ready {
        Some(ready) => model.backward_notifying(backend, &dlogits, ready)?,
        None => model.backward(backend, &dlogits)?,
    }
    Ok(GradientOutcome::Computed(result))
}

/// A training step at learning rate `lr`, with the loss gradient multiplied by
/// `loss_scale` (1 for none). `cancelled` is asked after the forward pass, so a cancel
/// during a long first step takes effect before the backward.
#[allow(clippy::too_many_arguments)]
pub fn train_step<B: Backend, M: Model<B> + ?Sized>(
    backend: &B,
    model: &mut M,
    optimizer: &mut DeviceOptimizer<B>,
    loss_fn: &SoftmaxCrossEntropy,
    batch: &DeviceBatch<B>,
    lr: f32,
    loss_scale: f32,
    cancelled: &dyn Fn() -> bool,
) -> Result<StepOutcome> {
    match compute_gradients(backend, model, loss_fn, batch, loss_scale, cancelled)? {
        GradientOutcome::Computed(result) => {
            let mut params = model.parameters();
            Ok(
                match optimizer.step(backend, &mut params, lr, loss_scale)? {
                    UpdateOutcome::Applied => StepOutcome::Updated(result),
                    UpdateOutcome::NonFiniteGradients => StepOutcome::NonFiniteGradients(result),
                },
            )
        }
        GradientOutcome::NonFiniteLoss(result) => Ok(StepOutcome::NonFiniteLoss(result)),
        GradientOutcome::Cancelled => Ok(StepOutcome::Cancelled),
    }
}

/// An evaluation step: forward in eval mode, loss and correct count over valid samples.
pub fn eval_step<B: Backend, M: Model<B> + ?Sized>(
    backend: &B,
    model: &mut M,
    loss_fn: &SoftmaxCrossEntropy,
    batch: &DeviceBatch<B>,
) -> Result<StepResult> {
    let logits = model.forward(backend, &batch.images, false)?;
    loss_and_correct(backend, loss_fn, &logits, batch)
}
