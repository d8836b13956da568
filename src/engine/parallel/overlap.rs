//! The all-reduce overlapped with the backward pass: gradients leave the model bucket by
//! bucket as the backward finishes them, a communication thread all-reduces each bucket
//! while the backward goes on, and the summed gradients are back in the model before the
//! optimizer step.
//!
//! A finished gradient is swapped out of the model for a spare buffer of its length
//! (allocated once and kept), so the backward can go on writing other gradients while the
//! communication thread owns the finished ones; after the last all-reduce every gradient
//! is swapped back. The communication thread makes the same calls in the same order on
//! every rank (the buckets in plan order, then the step's extra buffer), as the
//! collective's contract requires.

use std::sync::mpsc;

use crate::engine::backend::Backend;
use crate::engine::model::{GradientsReady, Model};
use crate::engine::{EngineError, Result as EngineResult};

use super::buckets::BucketPlan;
use super::collective::AllReduce;
use super::error::ParallelError;

/// One replica's bucket plan and spare gradient buffers, kept from step to step.
pub struct GradientBuckets<B: Backend> {
    bucket_bytes: usize,
    plan: Option<BucketPlan>,
    spares: Vec<Option<B::Buffer>>,
}

/// What the communication thread is handed: a bucket's gradients, or (bucket `None`)
/// the step's extra buffer, reduced last.
struct Job<Buf> {
    bucket: Option<usize>,
    buffers: Vec<Buf>,
}

/// A job handed back, reduced or, after a failure, untouched.
struct Done<Buf> {
    job: Job<Buf>,
    result: Result<(), ParallelError>,
}

impl<B: Backend> GradientBuckets<B> {
    /// Buckets of at least `bucket_bytes`; the plan and the spare buffers are made at the
    /// first step, from the model's gradients.
    pub fn new(bucket_bytes: usize) -> Self {
        GradientBuckets {
            bucket_bytes,
            plan: None,
            spares: Vec::new(),
        }
    }

    /// The bucket size the plan is cut at, in bytes.
    pub fn bucket_bytes(&self) -> usize {
        self.bucket_bytes
    }

    /// The plan of the last step (none before the first).
    pub fn plan(&self) -> Option<&BucketPlan> {
        self.plan.as_ref()
    }

    /// Runs `backward` (which must run the model's backward through
    /// [`Model::backward_notifying`] with the callback it is given, or not at all),
    /// all-reducing each bucket on a communication thread as soon as its gradients are
    /// final, each gradient multiplied by `weight` first; then all-reduces `extra`. Returns
    /// `backward`'s value and `extra` once every all-reduce is done and the summed
    /// gradients are back in the model. Gradients the backward did not report (it
    /// stopped early, or did not run) are all-reduced as they are, so every rank still
    /// makes every call.
    ///
    /// A failure in the backward or in the communication thread aborts the collective for
    /// `rank` (releasing the other ranks) and is returned; the group cannot step again.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_during_backward<M, T, F>(
        &mut self,
        rank: usize,
        backend: &B,
        collective: &dyn AllReduce<B>,
        model: &mut M,
        weight: f32,
        extra: impl FnOnce(&T) -> EngineResult<B::Buffer>,
        backward: F,
    ) -> Result<(T, B::Buffer), ParallelError>
    where
        M: Model<B> + ?Sized,
        F: FnOnce(&mut M, &mut GradientsReady<'_, B>) -> EngineResult<T>,
    {
        let lens: Vec<usize> = model
            .parameters()
            .iter()
            .map(|p| backend.buffer_len(p.param.grad))
            .collect();
        if self.plan.as_ref().map(|p| p.params()) != Some(lens.len()) {
            self.plan = Some(BucketPlan::new(&lens, self.bucket_bytes));
            self.spares = (0..lens.len()).map(|_| None).collect();
        }
        for (spare, &len) in self.spares.iter_mut().zip(&lens) {
            if spare.as_ref().map(|b| backend.buffer_len(b)) != Some(len) {
                *spare = Some(backend.alloc(len)?);
            }
        }
        let plan = self.plan.clone().expect("the plan was made above");
        let (jobs, job_rx) = mpsc::channel::<Job<B::Buffer>>();
        let (done_tx, done) = mpsc::channel::<Done<B::Buffer>>();
        let outcome = std::thread::scope(|s| {
            s.spawn(move || communicate(rank, backend, collective, job_rx, done_tx));
            let mut feeder = Feeder {
                backend,
                plan: &plan,
                weight,
                spares: &mut self.spares,
                staged: (0..lens.len()).map(|_| None).collect(),
                next: 0,
                jobs,
            };
            let result = backward(model, &mut |range, grads| feeder.ready(range, grads));
            let result = result.map_err(ParallelError::from).and_then(|value| {
                // Whatever the backward did not report goes as it is.
                let mut params = model.parameters();
                for (i, p) in params.iter_mut().enumerate() {
                    if feeder.staged[i].is_none() && feeder.spares[i].is_some() {
                        feeder.stage(i, p.param.grad)?;
                    }
                }
                feeder.send_finished_buckets();
                let extra = extra(&value)?;
                let _ = feeder.jobs.send(Job {
                    bucket: None,
                    buffers: vec![extra],
                });
                Ok(value)
            });
            if let Err(e) = &result {
                if !e.is_consequence() {
                    collective.abort(rank, &e.to_string());
                }
            }
            drop(feeder);
            result
        });
        // Every job comes back, reduced or not, so no gradient is lost.
        let mut reduced: Vec<Option<B::Buffer>> = (0..lens.len()).map(|_| None).collect();
        let mut extra_back = None;
        let mut first_error = None;
        for Done { job, result } in done.iter() {
            if let Err(e) = result {
                first_error.get_or_insert(e);
            }
            match job.bucket {
                Some(b) => {
                    for (i, buf) in plan.buckets()[b].clone().zip(job.buffers) {
                        reduced[i] = Some(buf);
                    }
                }
                None => extra_back = job.buffers.into_iter().next(),
            }
        }
        let mut params = model.parameters();
        for (i, p) in params.iter_mut().enumerate() {
            if let Some(mut buf) = reduced[i].take() {
                std::mem::swap(p.param.grad, &mut buf);
                self.spares[i] = Some(buf);
            }
        }
        let value = outcome?;
        if let Some(e) = first_error {
            return Err(e);
        }
        let extra = extra_back.ok_or_else(|| ParallelError::Setup {
            reason: "the communication thread lost the step's extra buffer".into(),
        })?;
        Ok((value, extra))
    }
}

/// The backward's side: takes finished gradients out of the model and hands each bucket
/// to the communication thread once all of it is staged, in plan order.
struct Feeder<'a, B: Backend> {
    backend: &'a B,
    plan: &'a BucketPlan,
    weight: f32,
    spares: &'a mut Vec<Option<B::Buffer>>,
    staged: Vec<Option<B::Buffer>>,
    next: usize,
    jobs: mpsc::Sender<Job<B::Buffer>>,
}

impl<B: Backend> Feeder<'_, B> {
    fn ready(
        &mut self,
        range: std::ops::Range<usize>,
        grads: Vec<&mut B::Buffer>,
    ) -> EngineResult<()> {
        if range.len() != grads.len() || range.end > self.staged.len() {
            return Err(EngineError::InvalidParameter {
                op: "gradient buckets",
                reason: format!(
                    "{} gradients reported for parameters {range:?} of {}",
                    grads.len(),
                    self.staged.len()
                ),
            });
        }
        for (i, grad) in range.zip(grads) {
            self.stage(i, grad)?;
        }
        self.send_finished_buckets();
        Ok(())
    }

    fn stage(&mut self, i: usize, grad: &mut B::Buffer) -> EngineResult<()> {
        let Some(mut spare) = self.spares[i].take() else {
            return Err(EngineError::InvalidParameter {
                op: "gradient buckets",
                reason: format!("parameter {i} reported twice in one backward"),
            });
        };
        if self.weight != 1.0 {
            self.backend.scale(grad, self.weight)?;
        }
        std::mem::swap(grad, &mut spare);
        self.staged[i] = Some(spare);
        Ok(())
    }

    fn send_finished_buckets(&mut self) {
        while let Some(range) = self.plan.buckets().get(self.next) {
            if !range.clone().all(|i| self.staged[i].is_some()) {
                return;
            }
            let buffers = range
                .clone()
                .filter_map(|i| self.staged[i].take())
                .collect();
            // The thread answers every job until this sender is dropped.
            let _ = self.jobs.send(Job {
                bucket: Some(self.next),
                buffers,
            });
            self.next += 1;
        }
    }
}

/// The communication thread: all-reduces each job in arrival order. After a failure it
/// aborts the collective for its rank (unless the failure was another rank's) and hands
/// the remaining jobs back untouched.
fn communicate<B: Backend>(
    rank: usize,
    backend: &B,
    collective: &dyn AllReduce<B>,
    jobs: mpsc::Receiver<Job<B::Buffer>>,
    done: mpsc::Sender<Done<B::Buffer>>,
) {
    let mut failed = false;
    for mut job in jobs.iter() {
        let result = if failed {
            Err(ParallelError::Setup {
                reason: "not all-reduced: an earlier bucket failed".into(),
            })
        } else {
            let mut refs: Vec<&mut B::Buffer> = job.buffers.iter_mut().collect();
            let r = collective.all_reduce_sum(rank, backend, &mut refs);
            if let Err(e) = &r {
                failed = true;
                if !e.is_consequence() {
                    collective.abort(rank, &e.to_string());
                }
            }
            r
        };
        if done.send(Done { job, result }).is_err() {
            return;
        }
    }
}
