//! Training throughput over all replicas: the single-device measurement's synthetic
//! batch on every replica, timed as whole data-parallel steps.

use crate::engine::backend::Backend;
use crate::engine::model::Model;
use crate::engine::train::throughput::synthetic_batch;
use crate::engine::train::ThroughputReport;

use super::data_parallel::DataParallel;
use super::error::ParallelError;

/// Runs `warmup` untimed and `steps` timed data-parallel steps with `global_batch` images
/// of `image_size`² split evenly over the replicas. The report's batch is the global
/// batch, so its images per second count all replicas. `after_step(done, total, seconds)`
/// follows every step; `cancelled` is asked before each step and after each forward
/// pass. Returns `Ok(None)` when cancelled.
#[allow(clippy::too_many_arguments)]
pub fn measure_data_parallel_throughput<B: Backend, M: Model<B>>(
    dp: &mut DataParallel<B, M>,
    global_batch: usize,
    image_size: usize,
    warmup: usize,
    steps: usize,
    lr: f32,
    cancelled: &(dyn Fn() -> bool + Sync),
    after_step: &mut dyn FnMut(usize, usize, f64),
) -> Result<Option<ThroughputReport>, ParallelError> {
    let replicas = dp.replicas().len();
    if global_batch == 0 || !global_batch.is_multiple_of(replicas) {
        return Err(ParallelError::BatchNotDivisible {
            batch: global_batch,
            replicas,
        });
    }
    let per_replica = global_batch / replicas;
    let shards = dp.for_each_replica(|_, rep| {
        let classes = rep.model.classes();
        Ok(synthetic_batch(
            &rep.backend,
            per_replica,
            image_size,
            classes,
        )?)
    })?;
    let report = ThroughputReport {
        batch: global_batch,
        image_size,
        step_seconds: Vec::new(),
    };
    report.time_steps(warmup, steps, cancelled, after_step, || {
        dp.train_step_on_device(&shards, lr, 1.0, cancelled)
    })
}
