//! Data-parallel training: `k` replicas of one model, each with its own backend and
//! optimizer state, each step on its own thread with an equal share of the global batch.
//!
//! A step on replica `r`: forward and backward on its shard (batch-norm statistics from
//! the shard alone, as in the MLPerf reference), its gradients weighted by its share of
//! the batch's valid samples, one all-reduce of every gradient plus two status flags,
//! then the optimizer update. The all-reduce leaves bit-identical sums on every replica,
//! so replicas that start with the same weights keep the same weights.
//!
//! With every sample valid the weight is `1/k`: each replica's loss is the mean over its
//! shard, so the mean of the replicas' gradients is the gradient of the global batch's
//! mean loss. Padding samples (the first training batch of an epoch) make the shares
//! unequal, and a shard of padding only contributes nothing.

use crate::engine::backend::Backend;
use crate::engine::data::Batch;
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::model::{GradientsReady, Model};
use crate::engine::train::{
    compute_gradients, compute_gradients_notifying, DeviceBatch, DeviceOptimizer, GradientOutcome,
    StepOutcome, StepResult, UpdateOutcome,
};

use super::collective::AllReduce;
use super::error::ParallelError;
use super::overlap::GradientBuckets;
use super::per_rank::run_per_rank;
use super::shard::split_batch;

/// One device's copy of the training state.
pub struct Replica<B: Backend, M> {
    /// The device this replica runs on.
    pub backend: B,
    /// The replica's copy of the model, weights on `backend`.
    pub model: M,
    /// The replica's optimizer state (momentum buffers) on `backend`.
    pub optimizer: DeviceOptimizer<B>,
}

/// Replicas trained in lockstep through a collective with one rank per replica.
pub struct DataParallel<B: Backend, M> {
    replicas: Vec<Replica<B, M>>,
    devices: Vec<String>,
    collective: Box<dyn AllReduce<B>>,
    loss_fn: SoftmaxCrossEntropy,
    /// Per replica, when the all-reduce runs bucket by bucket during the backward.
    buckets: Option<Vec<GradientBuckets<B>>>,
}

/// Positions of the status flags appended to each step's all-reduce.
const FLAG_NON_FINITE: usize = 0;
const FLAG_CANCELLED: usize = 1;
const FLAGS: usize = 2;

/// What one replica's step decided, identical on every replica since it comes from the
/// all-reduced flags.
enum Decision {
    Updated,
    NonFiniteLoss,
    NonFiniteGradients,
    Cancelled,
}

struct ReplicaStep {
    decision: Decision,
    /// `None` when this replica was cancelled before its loss or had no valid sample.
    result: Option<StepResult>,
}

impl<B: Backend, M: Model<B>> DataParallel<B, M> {
    /// `replicas` must hold the same initial weights (build each from the same seed);
    /// the collective has one rank per replica, rank `r` being `replicas[r]`.
    pub fn new(
        replicas: Vec<Replica<B, M>>,
        collective: Box<dyn AllReduce<B>>,
        loss_fn: SoftmaxCrossEntropy,
    ) -> Result<Self, ParallelError> {
        if replicas.is_empty() || replicas.len() != collective.ranks() {
            return Err(ParallelError::Setup {
                reason: format!(
                    "{} replicas for the {}-rank collective {}",
                    replicas.len(),
                    collective.ranks(),
                    collective.name()
                ),
            });
        }
        let devices = replicas.iter().map(|rep| rep.backend.name()).collect();
        Ok(DataParallel {
            replicas,
            devices,
            collective,
            loss_fn,
            buckets: None,
        })
    }

    /// All-reduces the gradients in buckets of at least `bucket_bytes`, each started on
    /// a communication thread as soon as the backward has finished it (`Some`), or all at
    /// once after the backward (`None`, the default). Every rank still ends with
    /// bit-identical sums. Against the single all-reduce they are bit-identical on two
    /// ranks; on more, a ring sums an element in an order that depends on where it falls in
    /// the call's buffers, so the sums can differ in the last bits.
    pub fn set_gradient_buckets(&mut self, bucket_bytes: Option<usize>) {
        self.buckets = bucket_bytes.map(|bytes| {
            (0..self.replicas.len())
                .map(|_| GradientBuckets::new(bytes))
                .collect()
        });
    }

    /// The bucket size when the all-reduce overlaps the backward.
    pub fn gradient_bucket_bytes(&self) -> Option<usize> {
        self.buckets
            .as_ref()
            .and_then(|b| b.first().map(GradientBuckets::bucket_bytes))
    }

    /// The replicas in rank order.
    pub fn replicas(&self) -> &[Replica<B, M>] {
        &self.replicas
    }

    /// The replicas in rank order, mutably, for work between steps. A change to one
    /// replica's weights must be made to all, or they stop training in lockstep.
    pub fn replicas_mut(&mut self) -> &mut [Replica<B, M>] {
        &mut self.replicas
    }

    /// The replicas in rank order, dropping the collective.
    pub fn into_replicas(self) -> Vec<Replica<B, M>> {
        self.replicas
    }

    /// The all-reduce the steps go through.
    pub fn collective(&self) -> &dyn AllReduce<B> {
        self.collective.as_ref()
    }

    /// Each replica's backend name, as errors give it.
    pub fn devices(&self) -> &[String] {
        &self.devices
    }

    /// Runs `work` for every replica on its own thread (see [`run_per_rank`]).
    pub fn for_each_replica<T, F>(&mut self, work: F) -> Result<Vec<T>, ParallelError>
    where
        T: Send,
        F: Fn(usize, &mut Replica<B, M>) -> Result<T, ParallelError> + Sync,
    {
        run_per_rank(
            self.collective.as_ref(),
            &mut self.replicas,
            &self.devices,
            work,
        )
    }

    /// An error unless `shards` is one shard per replica.
    fn expect_one_shard_each(&self, shards: usize) -> Result<(), ParallelError> {
        if shards != self.replicas.len() {
            return Err(ParallelError::Setup {
                reason: format!("{} shards for {} replicas", shards, self.replicas.len()),
            });
        }
        Ok(())
    }

    /// Uploads `shards[r]` to replica `r`, each on the replica's own thread.
    pub fn upload_shards(
        &mut self,
        shards: &[Batch],
    ) -> Result<Vec<DeviceBatch<B>>, ParallelError> {
        self.expect_one_shard_each(shards.len())?;
        self.for_each_replica(|r, rep| Ok(DeviceBatch::upload(&rep.backend, &shards[r])?))
    }

    /// A training step on the global `batch` at learning rate `lr`: split evenly over the
    /// replicas (an error when it does not divide), uploaded, and stepped as
    /// [`DataParallel::train_step_on_device`] does.
    pub fn train_step(
        &mut self,
        batch: &Batch,
        lr: f32,
        loss_scale: f32,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<StepOutcome, ParallelError> {
        let shards = split_batch(batch, self.replicas.len())?;
        let on_device = self.upload_shards(&shards)?;
        self.train_step_on_device(&on_device, lr, loss_scale, cancelled)
    }

    /// A training step where `shards[r]` is already on replica `r`'s device. The result
    /// combines all replicas: the mean loss over every valid sample and the total correct.
    /// A failure on any replica returns an error naming it, after every replica's thread
    /// has returned; the collective is then aborted and this group cannot step again.
    pub fn train_step_on_device(
        &mut self,
        shards: &[DeviceBatch<B>],
        lr: f32,
        loss_scale: f32,
        cancelled: &(dyn Fn() -> bool + Sync),
    ) -> Result<StepOutcome, ParallelError> {
        self.expect_one_shard_each(shards.len())?;
        let valid_total: usize = shards.iter().map(|s| s.valid).sum();
        if valid_total == 0 {
            return Err(ParallelError::Setup {
                reason: "the global batch holds no valid sample".into(),
            });
        }
        let collective = self.collective.as_ref();
        let loss_fn = &self.loss_fn;
        let inputs = |r: usize| StepInputs {
            collective,
            loss_fn,
            batch: &shards[r],
            weight: (shards[r].valid as f64 / valid_total as f64) as f32,
            loss_scale,
            lr,
            cancelled,
        };
        let steps = match &mut self.buckets {
            None => run_per_rank(collective, &mut self.replicas, &self.devices, |r, rep| {
                replica_step(r, rep, None, inputs(r))
            })?,
            Some(buckets) => {
                let mut states: Vec<(&mut Replica<B, M>, &mut GradientBuckets<B>)> =
                    self.replicas.iter_mut().zip(buckets.iter_mut()).collect();
                run_per_rank(
                    collective,
                    &mut states,
                    &self.devices,
                    |r, (rep, buckets)| replica_step(r, rep, Some(buckets), inputs(r)),
                )?
            }
        };
        Ok(combine(&steps))
    }
}

/// What one replica's step works on: its shard, how its gradients are scaled (by its
/// share of the global batch's valid samples, and by the loss scale, which the optimizer
/// divides out), and the update's learning rate.
struct StepInputs<'a, B: Backend> {
    collective: &'a dyn AllReduce<B>,
    loss_fn: &'a SoftmaxCrossEntropy,
    batch: &'a DeviceBatch<B>,
    weight: f32,
    loss_scale: f32,
    lr: f32,
    cancelled: &'a (dyn Fn() -> bool + Sync),
}

impl<B: Backend> StepInputs<'_, B> {
    /// Forward and backward of `model` on the shard, telling `ready` about gradients as
    /// the backward finishes them where there is one; `None` when the shard holds no valid
    /// sample. Such a replica has nothing to learn from, but still takes its part in every
    /// all-reduce: its gradients are zeroed and go as they are.
    fn gradients<M: Model<B>>(
        &self,
        backend: &B,
        model: &mut M,
        ready: Option<&mut GradientsReady<'_, B>>,
    ) -> crate::engine::Result<Option<GradientOutcome>> {
        if self.batch.valid == 0 {
            zero_gradients(backend, model)?;
            return Ok(None);
        }
        let (loss_fn, batch, scale, cancelled) =
            (self.loss_fn, self.batch, self.loss_scale, self.cancelled);
        match ready {
            None => compute_gradients(backend, model, loss_fn, batch, scale, cancelled),
            Some(ready) => {
                compute_gradients_notifying(backend, model, loss_fn, batch, scale, cancelled, ready)
            }
        }
        .map(Some)
    }
}

/// One replica's step: forward and backward on its shard, the all-reduce of its weighted
/// gradients and the status flags (bucket by bucket during the backward where it has
/// `buckets`, else after it), then the decision and update every replica makes alike.
fn replica_step<B: Backend, M: Model<B>>(
    rank: usize,
    replica: &mut Replica<B, M>,
    buckets: Option<&mut GradientBuckets<B>>,
    inputs: StepInputs<'_, B>,
) -> Result<ReplicaStep, ParallelError> {
    let Replica {
        backend,
        model,
        optimizer,
    } = replica;
    let (outcome, flags) = match buckets {
        None => reduce_after_backward(rank, backend, model, &inputs)?,
        Some(buckets) => reduce_during_backward(rank, backend, model, buckets, &inputs)?,
    };
    let result = step_result(outcome);
    decide(
        backend,
        optimizer,
        &mut model.parameters(),
        &flags,
        &inputs,
        result,
    )
}

/// The backward, then one all-reduce of every weighted gradient with the flags appended:
/// the backward's outcome and the all-reduced flags.
fn reduce_after_backward<B: Backend, M: Model<B>>(
    rank: usize,
    backend: &B,
    model: &mut M,
    inputs: &StepInputs<'_, B>,
) -> Result<(Option<GradientOutcome>, [f32; FLAGS]), ParallelError> {
    let outcome = inputs.gradients(backend, model, None)?;
    let mut flags = local_flags(&outcome, inputs.cancelled);
    let mut flags_buf = backend.upload(&flags)?;
    let mut params = model.parameters();
    if inputs.weight != 1.0 {
        for p in params.iter_mut() {
            backend.scale(p.param.grad, inputs.weight)?;
        }
    }
    let mut buffers: Vec<&mut B::Buffer> = params.iter_mut().map(|p| &mut *p.param.grad).collect();
    buffers.push(&mut flags_buf);
    inputs
        .collective
        .all_reduce_sum(rank, backend, &mut buffers)?;
    backend.download(&flags_buf, &mut flags)?;
    Ok((outcome, flags))
}

/// The backward with the gradients all-reduced bucket by bucket as it finishes them, and
/// the flags reduced after the last bucket: the backward's outcome and those flags.
fn reduce_during_backward<B: Backend, M: Model<B>>(
    rank: usize,
    backend: &B,
    model: &mut M,
    buckets: &mut GradientBuckets<B>,
    inputs: &StepInputs<'_, B>,
) -> Result<(Option<GradientOutcome>, [f32; FLAGS]), ParallelError> {
    let (outcome, flags_buf) = buckets.reduce_during_backward(
        rank,
        backend,
        inputs.collective,
        model,
        inputs.weight,
        |outcome| backend.upload(&local_flags(outcome, inputs.cancelled)),
        |model, ready| inputs.gradients(backend, model, Some(ready)),
    )?;
    let mut flags = [0.0f32; FLAGS];
    backend.download(&flags_buf, &mut flags)?;
    Ok((outcome, flags))
}

/// Zeroes every gradient of `model`.
fn zero_gradients<B: Backend, M: Model<B>>(
    backend: &B,
    model: &mut M,
) -> crate::engine::Result<()> {
    for p in model.parameters().iter_mut() {
        backend.fill(p.param.grad, 0.0)?;
    }
    Ok(())
}

/// The flags this replica adds to the all-reduce: its loss was not finite, or it was
/// cancelled (`outcome` is `None` when it had no samples, and asks `cancelled` then).
fn local_flags(
    outcome: &Option<GradientOutcome>,
    cancelled: &(dyn Fn() -> bool + Sync),
) -> [f32; FLAGS] {
    let mut flags = [0.0f32; FLAGS];
    match outcome {
        Some(GradientOutcome::NonFiniteLoss(_)) => flags[FLAG_NON_FINITE] = 1.0,
        Some(GradientOutcome::Cancelled) => flags[FLAG_CANCELLED] = 1.0,
        Some(GradientOutcome::Computed(_)) => {}
        None if cancelled() => flags[FLAG_CANCELLED] = 1.0,
        None => {}
    }
    flags
}

/// The figures of a backward that ran.
fn step_result(outcome: Option<GradientOutcome>) -> Option<StepResult> {
    match outcome {
        Some(GradientOutcome::Computed(r)) | Some(GradientOutcome::NonFiniteLoss(r)) => Some(r),
        _ => None,
    }
}

/// The step's decision from the all-reduced flags, and the update when there is one.
fn decide<B: Backend>(
    backend: &B,
    optimizer: &mut DeviceOptimizer<B>,
    params: &mut [crate::engine::model::NamedParam<'_, B>],
    flags: &[f32; FLAGS],
    inputs: &StepInputs<'_, B>,
    result: Option<StepResult>,
) -> Result<ReplicaStep, ParallelError> {
    let decision = if flags[FLAG_CANCELLED] > 0.0 {
        Decision::Cancelled
    } else if flags[FLAG_NON_FINITE] > 0.0 {
        Decision::NonFiniteLoss
    } else {
        match optimizer.step(backend, params, inputs.lr, inputs.loss_scale)? {
            UpdateOutcome::Applied => Decision::Updated,
            UpdateOutcome::NonFiniteGradients => Decision::NonFiniteGradients,
        }
    };
    Ok(ReplicaStep { decision, result })
}

/// The replicas' results as one step of the global batch: loss weighted by each
/// replica's valid samples (in f64, so one replica's loss comes back unchanged).
fn combine(steps: &[ReplicaStep]) -> StepOutcome {
    let results: Vec<StepResult> = steps.iter().filter_map(|s| s.result).collect();
    let valid: usize = results.iter().map(|r| r.valid).sum();
    let correct = results.iter().map(|r| r.correct).sum();
    let weighted: f64 = results
        .iter()
        .filter(|r| r.valid > 0)
        .map(|r| f64::from(r.loss) * r.valid as f64)
        .sum();
    let loss = if valid == 0 {
        f32::NAN
    } else {
        (weighted / valid as f64) as f32
    };
    let combined = StepResult {
        loss,
        correct,
        valid,
    };
    match steps.first().map(|s| &s.decision) {
        Some(Decision::Updated) => StepOutcome::Updated(combined),
        Some(Decision::NonFiniteLoss) => StepOutcome::NonFiniteLoss(combined),
        Some(Decision::NonFiniteGradients) => StepOutcome::NonFiniteGradients(combined),
        Some(Decision::Cancelled) | None => StepOutcome::Cancelled,
    }
}
