//! The training loop over data-parallel replicas: the same epochs, schedule, evaluation,
//! MLLOG and stop reasons as [`train`](super::train), each global batch split over the
//! replicas of a [`DataParallel`] group and their gradients all-reduced.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use crate::engine::backend::Backend;
use crate::engine::data::Batch;
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::mllog::MlLog;
use crate::engine::model::Model;
use crate::engine::parallel::{
    bucket_bytes_from_env, AllReduce, DataParallel, ParallelError, Replica,
};
use crate::engine::recipe::Recipe;

use super::optimizer::DeviceOptimizer;
use super::step::{eval_step, DeviceBatch, StepOutcome, StepResult};
use super::trainer::{
    not_started, recipe_loss, run_loop, StepRunner, TrainData, TrainObserver, TrainSummary,
};

/// How often the observer is asked for a cancel while the replicas run a step. The
/// observer need not be shareable between threads, so the calling thread asks it and
/// passes the answer on to the replicas.
const CANCEL_POLL: Duration = Duration::from_millis(10);

/// A data-parallel group for `recipe`: one replica per backend, rank `r` on
/// `backends[r]`, each with the model `build` makes there and the recipe's optimizer, and
/// the recipe's loss. `build` must give every replica the same initial weights (build
/// each from the same seed). The gradient all-reduce runs in buckets during the backward
/// when `TINYPERF_GRAD_BUCKET_MB` names a size (see
/// [`bucket_bytes_from_env`]).
pub fn data_parallel_for<B, M, E>(
    recipe: &Recipe,
    backends: Vec<B>,
    collective: Box<dyn AllReduce<B>>,
    build: impl Fn(&B) -> Result<M, E>,
) -> Result<DataParallel<B, M>, ParallelError>
where
    B: Backend,
    M: Model<B>,
    E: Into<ParallelError>,
{
    let mut replicas = Vec::with_capacity(backends.len());
    for (replica, backend) in backends.into_iter().enumerate() {
        let model = build(&backend).map_err(|e| ParallelError::ReplicaFailed {
            replica,
            device: backend.name(),
            source: Box::new(e.into()),
        })?;
        replicas.push(Replica {
            backend,
            model,
            optimizer: DeviceOptimizer::new(recipe.lars_config()),
        });
    }
    let mut dp = DataParallel::new(replicas, collective, recipe_loss(recipe))?;
    dp.set_gradient_buckets(bucket_bytes_from_env()?);
    Ok(dp)
}

/// Trains the replicas of `dp` by `recipe`, as [`train`](super::train) trains one model:
/// every global batch of `recipe.global_batch_size` samples is split evenly over the
/// replicas, which must hold the same weights and optimizers made from
/// `recipe.lars_config()` (see [`data_parallel_for`]). A batch that does not split
/// evenly stops the run before its first step with [`StopReason::Failed`] naming both
/// numbers, and the MLLOG gets `run_stop` aborted.
///
/// [`StopReason::Failed`]: super::StopReason::Failed
pub fn train_data_parallel<B: Backend, M: Model<B>>(
    dp: &mut DataParallel<B, M>,
    recipe: &Recipe,
    data: &TrainData,
    mllog: Option<&mut MlLog>,
    observer: &mut dyn TrainObserver,
) -> TrainSummary {
    let replicas = dp.replicas().len();
    if replicas == 0 || !recipe.global_batch_size.is_multiple_of(replicas) {
        let error = ParallelError::BatchNotDivisible {
            batch: recipe.global_batch_size,
            replicas,
        };
        return not_started(error.to_string(), mllog);
    }
    let steps = Replicas {
        dp,
        loss_fn: recipe_loss(recipe),
    };
    run_loop(steps, recipe, data, mllog, observer)
}

struct Replicas<'a, B: Backend, M> {
    dp: &'a mut DataParallel<B, M>,
    loss_fn: SoftmaxCrossEntropy,
}

impl<B: Backend, M: Model<B>> StepRunner for Replicas<'_, B, M> {
    fn train_step(
        &mut self,
        batch: &Batch,
        lr: f32,
        loss_scale: f32,
        cancelled: &dyn Fn() -> bool,
    ) -> Result<StepOutcome, String> {
        let cancel = AtomicBool::new(false);
        let dp = &mut *self.dp;
        std::thread::scope(|s| {
            let (done, outcome) = mpsc::channel();
            let cancel = &cancel;
            let step = s.spawn(move || {
                let result =
                    dp.train_step(batch, lr, loss_scale, &|| cancel.load(Ordering::Relaxed));
                // The receiver outlives this thread: it is dropped only after the join.
                let _ = done.send(result);
            });
            loop {
                match outcome.recv_timeout(CANCEL_POLL) {
                    Ok(result) => {
                        let _ = step.join();
                        return result.map_err(|e| e.to_string());
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        if cancelled() {
                            cancel.store(true, Ordering::Relaxed);
                        }
                    }
                    Err(RecvTimeoutError::Disconnected) => {
                        let message = match step.join() {
                            Err(panic) => panic_message(panic.as_ref()),
                            Ok(()) => "ended without a result".to_string(),
                        };
                        return Err(format!("the data-parallel step {message}"));
                    }
                }
            }
        })
    }

    /// Each replica evaluates a contiguous part of the batch with its own batch-norm
    /// running statistics. The weights are identical on every replica but the running
    /// statistics are not: each replica averaged them over its own training shards, as
    /// in the MLPerf reference, whose workers each evaluate their part of the validation
    /// set with their own statistics. Splitting keeps the evaluation as fast as the
    /// training step scales, and every replica's statistics see use.
    fn eval_step(&mut self, batch: &Batch) -> Result<StepResult, String> {
        let shards = contiguous_parts(batch, self.dp.replicas().len());
        let loss_fn = &self.loss_fn;
        let results = self
            .dp
            .for_each_replica(|r, rep| {
                let shard = &shards[r];
                // The last batch of the split is padded to full size; a part of padding
                // only has nothing to evaluate (and the loss refuses it).
                if shard.valid_count() == 0 {
                    return Ok(None);
                }
                let on_device = DeviceBatch::upload(&rep.backend, shard)?;
                Ok(Some(eval_step(
                    &rep.backend,
                    &mut rep.model,
                    loss_fn,
                    &on_device,
                )?))
            })
            .map_err(|e| e.to_string())?;
        Ok(combine_eval(results.into_iter().flatten()))
    }
}

/// `batch` cut into `parts` contiguous pieces whose sizes differ by at most one (the
/// first ones larger); some are empty when the batch has fewer samples than parts.
/// Evaluation needs no equal split: nothing is all-reduced.
fn contiguous_parts(batch: &Batch, parts: usize) -> Vec<Batch> {
    let n = batch.len();
    let parts = parts.max(1);
    let pixels = batch.image_size * batch.image_size * 3;
    let (per, extra) = (n / parts, n % parts);
    let mut start = 0;
    (0..parts)
        .map(|r| {
            let len = per + usize::from(r < extra);
            let samples = start..start + len;
            start += len;
            Batch {
                epoch: batch.epoch,
                index: batch.index,
                image_size: batch.image_size,
                images: batch
                    .images
                    .get(samples.start * pixels..samples.end * pixels)
                    .unwrap_or_default()
                    .to_vec(),
                labels: batch
                    .labels
                    .get(samples.clone())
                    .unwrap_or_default()
                    .to_vec(),
                valid: batch
                    .valid
                    .get(samples.clone())
                    .unwrap_or_default()
                    .to_vec(),
                sample_ids: batch.sample_ids.get(samples).unwrap_or_default().to_vec(),
                replaced: if r == 0 { batch.replaced } else { 0 },
            }
        })
        .collect()
}

/// The parts' results as one: the loss weighted by valid samples, correct summed.
fn combine_eval(results: impl Iterator<Item = StepResult>) -> StepResult {
    let (mut weighted, mut correct, mut valid) = (0.0f64, 0usize, 0usize);
    for r in results.filter(|r| r.valid > 0) {
        weighted += f64::from(r.loss) * r.valid as f64;
        correct += r.correct;
        valid += r.valid;
    }
    StepResult {
        loss: if valid == 0 {
            f32::NAN
        } else {
            (weighted / valid as f64) as f32
        },
        correct,
        valid,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text payload".to_string());
    format!("panicked: {text}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(n: usize) -> Batch {
        Batch {
            epoch: 1,
            index: 0,
            image_size: 1,
            images: (0..n * 3).map(|v| v as f32).collect(),
            labels: (0..n as u32).collect(),
            valid: (0..n).map(|i| i + 1 < n).collect(),
            sample_ids: (0..n).collect(),
            replaced: 2,
        }
    }

    #[test]
    fn evaluation_parts_are_contiguous_and_differ_by_at_most_one() {
        let b = batch(7);
        let parts = contiguous_parts(&b, 3);
        let lens: Vec<usize> = parts.iter().map(Batch::len).collect();
        assert_eq!(lens, vec![3, 2, 2]);
        let labels: Vec<u32> = parts.iter().flat_map(|p| p.labels.clone()).collect();
        let images: Vec<f32> = parts.iter().flat_map(|p| p.images.clone()).collect();
        assert_eq!(labels, b.labels);
        assert_eq!(images, b.images);
        assert_eq!(parts.iter().map(|p| p.replaced).sum::<usize>(), 2);
        let few = contiguous_parts(&batch(1), 3);
        assert_eq!(
            few.iter().map(Batch::len).collect::<Vec<_>>(),
            vec![1, 0, 0]
        );
    }

    #[test]
    fn evaluation_results_combine_by_valid_samples() {
        let r = combine_eval(
            [
                StepResult {
                    loss: 1.0,
                    correct: 1,
                    valid: 1,
                },
                StepResult {
                    loss: f32::NAN,
                    correct: 0,
                    valid: 0,
                },
                StepResult {
                    loss: 4.0,
                    correct: 2,
                    valid: 3,
                },
            ]
            .into_iter(),
        );
        assert_eq!((r.correct, r.valid), (3, 4));
        assert!((r.loss - 3.25).abs() < 1e-6, "{}", r.loss);
    }
}
