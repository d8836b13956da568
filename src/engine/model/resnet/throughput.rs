//! Training throughput on synthetic input: full training steps (forward, label-smoothed
//! cross-entropy, backward, a plain SGD update) on one fixed batch, timed one by one.
//! The figure `tinyperf`'s benchmarks and the train-throughput stage report.

use std::time::Instant;

use super::{ResNet, ResNetConfig};
use crate::engine::backend::Backend;
use crate::engine::init::standard_normal;
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::model::Model;
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// Learning rate of the update inside a timed step: small, so many steps stay finite.
const SGD_LR: f32 = 0.01;

/// What [`measure_training_steps`] runs.
#[derive(Debug, Clone)]
pub struct ThroughputConfig {
    /// The network to build and train.
    pub model: ResNetConfig,
    /// Images per step.
    pub batch: usize,
    /// Side of the square synthetic images in pixels.
    pub image_size: usize,
    /// Timed steps (the median is reported).
    pub steps: usize,
    /// Untimed steps first (buffer pools fill, caches warm).
    pub warmup: usize,
    /// Seeds the weights and the synthetic images.
    pub seed: u64,
}

/// What [`measure_training_steps`] measured.
#[derive(Debug, Clone)]
pub struct ThroughputReport {
    /// Wall time of every timed step, in order.
    pub step_seconds: Vec<f64>,
    /// Median of `step_seconds`.
    pub median_step_seconds: f64,
    /// Batch size over the median step time.
    pub images_per_second: f64,
    /// The loss of the last step (finite when the steps were sound).
    pub last_loss: f32,
}

/// Runs `warmup + steps` training steps of a freshly initialised model and times them.
pub fn measure_training_steps<B: Backend>(
    backend: &B,
    config: &ThroughputConfig,
) -> Result<ThroughputReport> {
    if config.steps == 0 || config.batch == 0 || config.image_size == 0 {
        return Err(EngineError::InvalidParameter {
            op: "measure_training_steps",
            reason: format!(
                "steps {}, batch {} and image size {} must be positive",
                config.steps, config.batch, config.image_size
            ),
        });
    }
    let mut model = ResNet::new(backend, &config.model)?;
    model.init_from_seed(backend, config.seed)?;
    let classes = config.model.classes;
    let shape = [config.batch, config.image_size, config.image_size, 3];
    let pixels = standard_normal(config.seed, u64::MAX, shape.iter().product());
    let images = Tensor::from_host(backend, &shape, &pixels)?;
    drop(pixels);
    let labels: Vec<f32> = (0..config.batch)
        .map(|i| (i * 7 % classes) as f32)
        .collect();
    let labels = Tensor::from_host(backend, &[config.batch], &labels)?;
    let xent = SoftmaxCrossEntropy {
        label_smoothing: 0.1,
    };
    let mut step_seconds = Vec::with_capacity(config.steps);
    let mut last_loss = f32::NAN;
    for step in 0..config.warmup + config.steps {
        let start = Instant::now();
        let logits = model.forward(backend, &images, true)?;
        let out = xent.forward(backend, &logits, &labels)?;
        let dlogits = xent.backward(backend, &logits, &labels)?;
        drop(logits);
        model.backward(backend, &dlogits)?;
        for p in model.parameters() {
            backend.axpy(-SGD_LR, p.param.grad, p.param.value)?;
        }
        // The download is the step's synchronisation point on device backends.
        last_loss = out.loss.to_host(backend)?[0];
        if step >= config.warmup {
            step_seconds.push(start.elapsed().as_secs_f64());
        }
    }
    let mut sorted = step_seconds.clone();
    sorted.sort_by(f64::total_cmp);
    let median_step_seconds = sorted[sorted.len() / 2];
    Ok(ThroughputReport {
        images_per_second: config.batch as f64 / median_step_seconds,
        step_seconds,
        median_step_seconds,
        last_loss,
    })
}

/// The peak resident set of this process (VmHWM), in bytes, where /proc tells it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::model::resnet::Stem;
    use crate::engine::CpuBackend;

    #[test]
    fn small_training_steps_are_timed_and_finite() {
        let b = &CpuBackend::new();
        let config = ThroughputConfig {
            model: ResNetConfig::resnet18(4, 3, Stem::Small),
            batch: 4,
            image_size: 8,
            steps: 3,
            warmup: 1,
            seed: 1,
        };
        let report = measure_training_steps(b, &config).unwrap();
        assert_eq!(report.step_seconds.len(), 3);
        assert!(report.step_seconds.iter().all(|&s| s > 0.0));
        assert!(report.images_per_second > 0.0);
        assert!(report.last_loss.is_finite());
        assert!(peak_rss_bytes().unwrap_or(0) > 1 << 20);
        let zero_steps = ThroughputConfig { steps: 0, ..config };
        assert!(measure_training_steps(b, &zero_steps).is_err());
    }
}
