//! The all-reduce split into gradient buckets that run on a communication thread during
//! the backward pass, on real CPU replicas summed by the host-staged ring: the same
//! weights as the single all-reduce after several steps, every gradient reported once by
//! the model's backward, padding-only shards, and a failing collective ending the step
//! with an error instead of a hang.

use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::small_resnet::{batch, bits, host, model, never, replica, xent};
use tinyperf::engine::model::resnet::ResNet;
use tinyperf::engine::model::Model;
use tinyperf::engine::parallel::{AllReduce, BucketPlan, DataParallel, HostRing, ParallelError};
use tinyperf::engine::train::{
    compute_gradients, compute_gradients_notifying, DeviceBatch, StepOutcome,
};
use tinyperf::engine::{Backend, CpuBackend};

const SEED: u64 = 5;
const LR: f32 = 0.5;

fn group(
    replicas: usize,
    collective: Box<dyn AllReduce<CpuBackend>>,
    bucket_bytes: Option<usize>,
) -> DataParallel<CpuBackend, ResNet<CpuBackend>> {
    let reps = (0..replicas)
        .map(|_| replica(CpuBackend::new(), SEED))
        .collect();
    let mut dp = DataParallel::new(reps, collective, xent()).unwrap();
    dp.set_gradient_buckets(bucket_bytes);
    assert_eq!(dp.gradient_bucket_bytes(), bucket_bytes);
    dp
}

fn ring(replicas: usize) -> Box<dyn AllReduce<CpuBackend>> {
    Box::new(HostRing::new(replicas).unwrap())
}

fn weights(dp: &mut DataParallel<CpuBackend, ResNet<CpuBackend>>) -> Vec<Vec<Vec<f32>>> {
    dp.replicas_mut()
        .iter_mut()
        .map(|rep| {
            let b = &rep.backend;
            rep.model
                .parameters()
                .iter()
                .map(|p| host(b, p.param.value))
                .collect()
        })
        .collect()
}

/// `steps` updates of a group on batches of `per_replica` samples per replica.
fn train(
    dp: &mut DataParallel<CpuBackend, ResNet<CpuBackend>>,
    steps: u64,
    per_replica: usize,
) -> Vec<Vec<Vec<f32>>> {
    let replicas = dp.replicas().len();
    for step in 0..steps {
        let outcome = dp
            .train_step(&batch(per_replica * replicas, 100 + step), LR, 1.0, &never)
            .unwrap();
        assert!(matches!(outcome, StepOutcome::Updated(_)), "{outcome:?}");
    }
    weights(dp)
}

#[test]
fn two_replicas_bucketed_equal_the_single_all_reduce_bit_for_bit() {
    let mut plain = group(2, ring(2), None);
    let want = train(&mut plain, 3, 3);
    // Small buckets (several per step), one per parameter, and one for everything.
    for bucket_bytes in [256, 0, usize::MAX] {
        let mut bucketed = group(2, ring(2), Some(bucket_bytes));
        let got = train(&mut bucketed, 3, 3);
        for r in 0..2 {
            assert_eq!(
                bits(&got[r]),
                bits(&want[r]),
                "bucket {bucket_bytes}, replica {r}"
            );
        }
        let plan = bucketed.replicas().len();
        assert_eq!(plan, 2);
    }
}

#[test]
fn three_replicas_bucketed_agree_with_each_other_exactly_and_with_the_single_all_reduce_closely() {
    let mut plain = group(3, ring(3), None);
    let want = train(&mut plain, 3, 2);
    let mut bucketed = group(3, ring(3), Some(512));
    let got = train(&mut bucketed, 3, 2);
    // Lockstep: every replica holds the same bits.
    assert_eq!(bits(&got[0]), bits(&got[1]));
    assert_eq!(bits(&got[0]), bits(&got[2]));
    // The ring sums an element in an order that depends on where it falls in a call's
    // buffers; three steps of that rounding stay within a few ulps of the weights.
    for (p, (g, w)) in got[0].iter().zip(&want[0]).enumerate() {
        for (e, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a - b).abs() <= 1e-6 + 1e-5 * b.abs(),
                "param {p} element {e}: {a} vs {b}"
            );
        }
    }
}

#[test]
fn the_backward_reports_every_gradient_once_from_the_last_with_the_gradients_of_backward() {
    let b = CpuBackend::new();
    let shard = DeviceBatch::upload(&b, &batch(4, 7)).unwrap();
    let mut reference = model(&b, SEED);
    compute_gradients(&b, &mut reference, &xent(), &shard, 1.0, &never).unwrap();
    let want: Vec<Vec<f32>> = reference
        .parameters()
        .iter()
        .map(|p| host(&b, p.param.grad))
        .collect();

    let mut m = model(&b, SEED);
    let params = m.parameters().len();
    let mut reported: Vec<Range<usize>> = Vec::new();
    let mut got: Vec<Option<Vec<f32>>> = vec![None; params];
    compute_gradients_notifying(
        &b,
        &mut m,
        &xent(),
        &shard,
        1.0,
        &never,
        &mut |range, grads| {
            assert_eq!(range.len(), grads.len());
            for (i, g) in range.clone().zip(grads) {
                got[i] = Some(host(&b, g));
            }
            reported.push(range);
            Ok(())
        },
    )
    .unwrap();
    // Contiguous ranges from the end (classifier, blocks from the last, stem) down to 0.
    let mut end = params;
    for range in &reported {
        assert_eq!(range.end, end, "{reported:?}");
        end = range.start;
    }
    assert_eq!(end, 0, "{reported:?}");
    assert_eq!(
        reported.len(),
        1 + 2 + 1,
        "classifier, two blocks, stem: {reported:?}"
    );
    let got: Vec<Vec<f32>> = got.into_iter().map(Option::unwrap).collect();
    assert_eq!(bits(&got), bits(&want));
}

#[test]
fn the_plan_covers_the_models_gradients_with_an_uneven_last_bucket() {
    let b = CpuBackend::new();
    let mut m = model(&b, SEED);
    let lens: Vec<usize> = m
        .parameters()
        .iter()
        .map(|p| b.buffer_len(p.param.grad))
        .collect();
    // The second block's 3×3 convs hold 8·8·9 = 576 values, larger than a 1 KiB bucket.
    let plan = BucketPlan::new(&lens, 1024);
    let mut seen = vec![0; lens.len()];
    for bucket in plan.buckets() {
        let bytes: usize = bucket.clone().map(|i| lens[i] * 4).sum();
        if bucket.start > 0 {
            assert!(bytes >= 1024, "{bucket:?} holds {bytes} bytes");
        }
        for i in bucket.clone() {
            seen[i] += 1;
        }
    }
    assert!(seen.iter().all(|&n| n == 1), "{seen:?}");
    let last = plan.buckets().last().unwrap();
    assert_eq!(last.start, 0);
    assert!(last.clone().map(|i| lens[i] * 4).sum::<usize>() < 1024);
}

#[test]
fn a_shard_of_padding_only_steps_as_with_the_single_all_reduce() {
    let mut global = batch(4, 9);
    // The second replica's shard (samples 2 and 3) is all padding.
    global.valid = vec![true, true, false, false];
    let mut plain = group(2, ring(2), None);
    let mut bucketed = group(2, ring(2), Some(256));
    for dp in [&mut plain, &mut bucketed] {
        let outcome = dp.train_step(&global, LR, 1.0, &never).unwrap();
        assert!(matches!(outcome, StepOutcome::Updated(r) if r.valid == 2));
    }
    assert_eq!(
        bits(&weights(&mut bucketed)[1]),
        bits(&weights(&mut plain)[1])
    );
}

/// The host ring with a fault injected into one rank's `call`-th all-reduce.
struct InjectedFault {
    ring: HostRing,
    rank: usize,
    call: usize,
    calls: AtomicUsize,
}

impl AllReduce<CpuBackend> for InjectedFault {
    fn name(&self) -> &str {
        "host-ring with an injected fault"
    }
    fn ranks(&self) -> usize {
        AllReduce::<CpuBackend>::ranks(&self.ring)
    }
    fn all_reduce_sum(
        &self,
        rank: usize,
        backend: &CpuBackend,
        buffers: &mut [&mut <CpuBackend as Backend>::Buffer],
    ) -> Result<(), ParallelError> {
        if rank == self.rank && self.calls.fetch_add(1, Ordering::SeqCst) == self.call {
            return Err(ParallelError::Collective {
                name: "injected".into(),
                reason: "link down".into(),
            });
        }
        self.ring.all_reduce_sum(rank, backend, buffers)
    }
    fn abort(&self, rank: usize, reason: &str) {
        AllReduce::<CpuBackend>::abort(&self.ring, rank, reason)
    }
}

#[test]
fn a_failing_bucket_all_reduce_ends_the_step_with_an_error_naming_it() {
    for call in [0, 2] {
        let fault = InjectedFault {
            ring: HostRing::with_timeout(3, Duration::from_secs(20)).unwrap(),
            rank: 1,
            call,
            calls: AtomicUsize::new(0),
        };
        let mut dp = group(3, Box::new(fault), Some(256));
        let started = Instant::now();
        let err = dp
            .train_step(&batch(6, 3), LR, 1.0, &never)
            .expect_err("the injected fault fails the step");
        // Released by the abort, not by the ring's timeout.
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        let text = err.to_string();
        assert!(text.contains("link down"), "{text}");
        assert_eq!(err.replica(), Some(1), "{text}");
    }
}

#[test]
fn a_cancel_on_one_replica_cancels_the_bucketed_step_on_all_and_the_next_step_runs() {
    let mut dp = group(3, ring(3), Some(256));
    let before = weights(&mut dp);
    let asked = AtomicUsize::new(0);
    // Only the first replica to ask sees the cancel; its backward never runs, so its
    // gradients go to the all-reduce as they are.
    let cancel_once = || asked.fetch_add(1, Ordering::SeqCst) == 0;
    let outcome = dp.train_step(&batch(6, 4), LR, 1.0, &cancel_once).unwrap();
    assert!(matches!(outcome, StepOutcome::Cancelled), "{outcome:?}");
    let after = weights(&mut dp);
    for r in 0..3 {
        assert_eq!(bits(&after[r]), bits(&before[r]), "replica {r}");
    }
    // Every gradient buffer is back in its model: the group steps on, in lockstep.
    let stepped = train(&mut dp, 1, 2);
    assert_ne!(bits(&stepped[0]), bits(&before[0]));
    assert_eq!(bits(&stepped[0]), bits(&stepped[1]));
    assert_eq!(bits(&stepped[0]), bits(&stepped[2]));
}
