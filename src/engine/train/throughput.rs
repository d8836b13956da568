//! Training throughput on synthetic input: warm-up steps, then timed steps of the full
//! training step (forward, loss, backward, optimizer update).

use std::time::Instant;

use crate::engine::backend::Backend;
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::model::Model;
use crate::engine::optim::LarsConfig;
use crate::engine::{EngineError, Result, Tensor};

use super::optimizer::DeviceOptimizer;
use super::step::{train_step, DeviceBatch, StepOutcome};

/// Timed steps of one batch size.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputReport {
    /// Images per timed step.
    pub batch: usize,
    /// The side of the square images, in pixels.
    pub image_size: usize,
    /// Wall time of each timed step, in order.
    pub step_seconds: Vec<f64>,
}

impl ThroughputReport {
    /// Runs `warmup` untimed and `steps` timed calls of `step`, each a training step of
    /// this report's batch, and appends the timed ones to `step_seconds`.
    /// `after_step(done, total, seconds)` follows every step; `cancelled` is asked before
    /// each step. Returns `Ok(None)` when cancelled there or when a step reports
    /// [`StepOutcome::Cancelled`].
    pub fn time_steps<E>(
        mut self,
        warmup: usize,
        steps: usize,
        cancelled: &dyn Fn() -> bool,
        after_step: &mut dyn FnMut(usize, usize, f64),
        mut step: impl FnMut() -> std::result::Result<StepOutcome, E>,
    ) -> std::result::Result<Option<ThroughputReport>, E> {
        let total = warmup + steps;
        self.step_seconds.reserve(steps);
        for i in 0..total {
            if cancelled() {
                return Ok(None);
            }
            let started = Instant::now();
            if let StepOutcome::Cancelled = step()? {
                return Ok(None);
            }
            let seconds = started.elapsed().as_secs_f64();
            if i >= warmup {
                self.step_seconds.push(seconds);
            }
            after_step(i + 1, total, seconds);
        }
        Ok(Some(self))
    }

    /// The median of `step_seconds`, in seconds; NaN without a timed step.
    pub fn median_step_s(&self) -> f64 {
        let mut s = self.step_seconds.clone();
        s.sort_by(f64::total_cmp);
        match s.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => s[n / 2],
            n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
        }
    }

    /// Images per second at the median step time.
    pub fn images_per_s(&self) -> f64 {
        self.batch as f64 / self.median_step_s()
    }
}

/// A synthetic batch: a fixed pattern of pixel values in the range of mean-subtracted
/// images and labels spread over the classes.
pub fn synthetic_batch<B: Backend>(
    backend: &B,
    batch: usize,
    image_size: usize,
    classes: usize,
) -> Result<DeviceBatch<B>> {
    if batch == 0 || image_size == 0 || classes == 0 {
        return Err(EngineError::InvalidParameter {
            op: "synthetic_batch",
            reason: format!("batch {batch}, image size {image_size}, classes {classes}"),
        });
    }
    let len = batch * image_size * image_size * 3;
    let images: Vec<f32> = (0..len)
        .map(|i| ((i.wrapping_mul(2_654_435_761) % 255) as f32) - 127.0)
        .collect();
    let labels: Vec<f32> = (0..batch).map(|i| ((i * 7919) % classes) as f32).collect();
    Ok(DeviceBatch {
        images: Tensor::from_host(backend, &[batch, image_size, image_size, 3], &images)?,
        labels: Tensor::from_host(backend, &[batch], &labels)?,
        valid: batch,
    })
}

/// Runs `warmup` untimed and `steps` timed training steps of `model` at `batch` images of
/// `image_size`² and learning rate `lr`. `after_step(done, total)` is called after every
/// step; `cancelled` is asked before each step and after each forward pass. Returns
/// `Ok(None)` when cancelled.
#[allow(clippy::too_many_arguments)]
pub fn measure_train_throughput<B: Backend, M: Model<B> + ?Sized>(
    backend: &B,
    model: &mut M,
    batch: usize,
    image_size: usize,
    warmup: usize,
    steps: usize,
    lr: f32,
    cancelled: &dyn Fn() -> bool,
    after_step: &mut dyn FnMut(usize, usize, f64),
) -> Result<Option<ThroughputReport>> {
    let data = synthetic_batch(backend, batch, image_size, model.classes())?;
    let mut optimizer = DeviceOptimizer::new(LarsConfig::default());
    let loss_fn = SoftmaxCrossEntropy {
        label_smoothing: crate::engine::layers::cross_entropy::RESNET_LABEL_SMOOTHING,
    };
    let report = ThroughputReport {
        batch,
        image_size,
        step_seconds: Vec::new(),
    };
    report.time_steps(warmup, steps, cancelled, after_step, || {
        train_step(
            backend,
            model,
            &mut optimizer,
            &loss_fn,
            &data,
            lr,
            1.0,
            cancelled,
        )
    })
}
