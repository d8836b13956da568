//! Data-parallel training over several real CPU backends in one process, each replica its
//! own `CpuBackend` on its own thread, gradients summed by the host-staged ring: the
//! all-reduced gradients against separately computed ones, lockstep weights, one replica
//! against the plain training step, padding-only shards, a replica with an injected
//! fault, and the throughput and bandwidth measurements.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::small_resnet::{batch as host_batch, bits, host, model, never, replica, xent, IMAGE};
use tinyperf::engine::backend::cpu::CpuBuffer;
use tinyperf::engine::data::Batch;
use tinyperf::engine::model::resnet::ResNet;
use tinyperf::engine::model::Model;
use tinyperf::engine::optim::LarsConfig;
use tinyperf::engine::parallel::{
    measure_all_reduce_bandwidth, measure_data_parallel_throughput, ring_bus_factor, split_batch,
    AllReduce, DataParallel, HostRing, ParallelError,
};
use tinyperf::engine::train::{
    compute_gradients, train_step, DeviceBatch, DeviceOptimizer, GradientOutcome, StepOutcome,
};
use tinyperf::engine::{
    Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved, Conv2dParams,
    CpuBackend, CrossEntropyParams, EngineError, GlobalPoolParams, LinearParams, PoolParams,
    Result,
};

const SEED: u64 = 11;
const LR: f32 = 0.5;

fn cpu_dp(replicas: usize) -> DataParallel<CpuBackend, ResNet<CpuBackend>> {
    let reps = (0..replicas)
        .map(|_| replica(CpuBackend::new(), SEED))
        .collect();
    DataParallel::new(reps, Box::new(HostRing::new(replicas).unwrap()), xent()).unwrap()
}

fn grads<B: Backend, M: Model<B>>(b: &B, m: &mut M) -> Vec<Vec<f32>> {
    m.parameters()
        .iter()
        .map(|p| host(b, p.param.grad))
        .collect()
}

fn weights<B: Backend, M: Model<B>>(b: &B, m: &mut M) -> Vec<Vec<f32>> {
    m.parameters()
        .iter()
        .map(|p| host(b, p.param.value))
        .collect()
}

fn running_stats<B: Backend>(b: &B, m: &ResNet<B>) -> Vec<Vec<f32>> {
    m.batch_norms()
        .iter()
        .flat_map(|(_, bn)| {
            [
                host(b, &bn.state.running_mean),
                host(b, &bn.state.running_var),
            ]
        })
        .collect()
}

fn assert_close(got: &[Vec<f32>], want: &[Vec<f32>]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len());
        for (e, (a, b)) in g.iter().zip(w).enumerate() {
            let tol = 1e-5 + 1e-4 * b.abs();
            assert!((a - b).abs() <= tol, "param {i} element {e}: {a} vs {b}");
        }
    }
}

/// The gradients a fresh replica computes on `shard` alone.
fn separate_gradients(shard: &Batch) -> (Vec<Vec<f32>>, f32) {
    let b = CpuBackend::new();
    let mut m = model(&b, SEED);
    let on_device = DeviceBatch::upload(&b, shard).unwrap();
    let loss = match compute_gradients(&b, &mut m, &xent(), &on_device, 1.0, &never).unwrap() {
        GradientOutcome::Computed(r) => r.loss,
        _ => panic!("the tiny model's loss is finite"),
    };
    (grads(&b, &mut m), loss)
}

#[test]
fn two_replicas_hold_the_mean_gradient_and_step_to_identical_weights() {
    let batch = host_batch(8, 1);
    let shards = split_batch(&batch, 2).unwrap();
    let (g0, loss0) = separate_gradients(&shards[0]);
    let (g1, loss1) = separate_gradients(&shards[1]);
    let mean: Vec<Vec<f32>> = g0
        .iter()
        .zip(&g1)
        .map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x + y) / 2.0).collect())
        .collect();
    let initial = {
        let b = CpuBackend::new();
        weights(&b, &mut model(&b, SEED))
    };

    let mut dp = cpu_dp(2);
    let outcome = dp.train_step(&batch, LR, 1.0, &never).unwrap();
    let StepOutcome::Updated(result) = outcome else {
        panic!("the step should update");
    };
    assert_eq!(result.valid, 8);
    assert!((result.loss - (loss0 + loss1) / 2.0).abs() < 1e-5);

    let reps = dp.replicas_mut();
    let (a, rest) = reps.split_first_mut().unwrap();
    let b = &mut rest[0];
    let (ga, gb) = (
        grads(&a.backend, &mut a.model),
        grads(&b.backend, &mut b.model),
    );
    assert_eq!(
        bits(&ga),
        bits(&gb),
        "all-reduced gradients differ between replicas"
    );
    assert_close(&ga, &mean);
    assert_ne!(
        bits(&g0),
        bits(&g1),
        "the shards should give different gradients"
    );

    let (wa, wb) = (
        weights(&a.backend, &mut a.model),
        weights(&b.backend, &mut b.model),
    );
    assert_eq!(bits(&wa), bits(&wb), "weights differ between replicas");
    assert_ne!(
        bits(&wa),
        bits(&initial),
        "the step left the weights unchanged"
    );

    // Batch norm keeps per-device statistics, from each replica's own shard.
    assert_ne!(
        bits(&running_stats(&a.backend, &a.model)),
        bits(&running_stats(&b.backend, &b.model))
    );

    // A second step keeps the replicas in lockstep (momentum included).
    dp.train_step(&host_batch(8, 2), LR, 1.0, &never).unwrap();
    let reps = dp.replicas_mut();
    let (a, rest) = reps.split_first_mut().unwrap();
    let b = &mut rest[0];
    assert_eq!(
        bits(&weights(&a.backend, &mut a.model)),
        bits(&weights(&b.backend, &mut b.model))
    );
}

#[test]
fn one_replica_equals_the_plain_train_step_bit_for_bit() {
    let mut dp = cpu_dp(1);
    let plain_backend = CpuBackend::new();
    let mut plain = model(&plain_backend, SEED);
    let mut optimizer = DeviceOptimizer::new(LarsConfig::default());
    for step in 0..3 {
        let batch = host_batch(6, 10 + step);
        let on_device = DeviceBatch::upload(&plain_backend, &batch).unwrap();
        let want = train_step(
            &plain_backend,
            &mut plain,
            &mut optimizer,
            &xent(),
            &on_device,
            LR,
            1.0,
            &never,
        )
        .unwrap();
        let got = dp.train_step(&batch, LR, 1.0, &never).unwrap();
        let (StepOutcome::Updated(want), StepOutcome::Updated(got)) = (want, got) else {
            panic!("both steps should update");
        };
        assert_eq!(got.loss.to_bits(), want.loss.to_bits(), "step {step}");
        assert_eq!((got.correct, got.valid), (want.correct, want.valid));

        let rep = &mut dp.replicas_mut()[0];
        assert_eq!(
            bits(&grads(&rep.backend, &mut rep.model)),
            bits(&grads(&plain_backend, &mut plain))
        );
        assert_eq!(
            bits(&weights(&rep.backend, &mut rep.model)),
            bits(&weights(&plain_backend, &mut plain)),
            "step {step}"
        );
        assert_eq!(
            bits(&running_stats(&rep.backend, &rep.model)),
            bits(&running_stats(&plain_backend, &plain))
        );
        assert_eq!(
            rep.optimizer.last_trust_ratios(),
            optimizer.last_trust_ratios()
        );
    }
}

#[test]
fn a_shard_of_padding_only_contributes_nothing() {
    let mut batch = host_batch(8, 3);
    for v in &mut batch.valid[..4] {
        *v = false;
    }
    let shards = split_batch(&batch, 2).unwrap();
    let (g1, loss1) = separate_gradients(&shards[1]);

    let mut dp = cpu_dp(2);
    let StepOutcome::Updated(result) = dp.train_step(&batch, LR, 1.0, &never).unwrap() else {
        panic!("the step should update");
    };
    assert_eq!(result.valid, 4);
    assert_eq!(result.loss, loss1);
    // Exactly the gradients of the valid shard (compared as values: the sum with the
    // padding shard's zeros turns a −0 into +0).
    for rep in dp.replicas_mut() {
        assert_eq!(grads(&rep.backend, &mut rep.model), g1);
    }
}

#[test]
fn a_batch_that_does_not_split_evenly_is_an_error_naming_the_sizes() {
    let mut dp = cpu_dp(2);
    let err = dp
        .train_step(&host_batch(7, 1), LR, 1.0, &never)
        .unwrap_err();
    assert!(
        matches!(
            err,
            ParallelError::BatchNotDivisible {
                batch: 7,
                replicas: 2
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("7") && err.to_string().contains("2 replicas"));
    // Nothing ran: the group still steps.
    assert!(dp.train_step(&host_batch(8, 1), LR, 1.0, &never).is_ok());
}

#[test]
fn a_cancel_on_any_replica_cancels_the_step_on_all() {
    let mut dp = cpu_dp(3);
    let before: Vec<_> = dp
        .replicas_mut()
        .iter_mut()
        .map(|r| bits(&weights(&r.backend, &mut r.model)))
        .collect();
    let asked = AtomicUsize::new(0);
    // Only the first replica to ask sees the cancel.
    let cancel_once = || asked.fetch_add(1, Ordering::SeqCst) == 0;
    let outcome = dp
        .train_step(&host_batch(6, 4), LR, 1.0, &cancel_once)
        .unwrap();
    assert!(matches!(outcome, StepOutcome::Cancelled));
    for (r, rep) in dp.replicas_mut().iter_mut().enumerate() {
        assert_eq!(bits(&weights(&rep.backend, &mut rep.model)), before[r]);
    }
}

/// Which backend op fails on the faulty replica, and how.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    None,
    /// `conv2d_backward_filter` returns a device error.
    BackwardError,
    /// `conv2d_backward_filter` panics.
    BackwardPanic,
}

/// A real CPU backend with a fault injected into one op.
struct CpuWithFault {
    cpu: CpuBackend,
    fault: Fault,
}

impl CpuWithFault {
    fn backward_fault(&self) -> Result<()> {
        match self.fault {
            Fault::None => Ok(()),
            Fault::BackwardError => Err(EngineError::Device {
                backend: self.name(),
                reason: "injected: illegal memory access".into(),
            }),
            Fault::BackwardPanic => panic!("injected panic in conv2d_backward_filter"),
        }
    }
}

impl Backend for CpuWithFault {
    type Buffer = CpuBuffer;

    fn name(&self) -> String {
        match self.fault {
            Fault::None => "cpu".into(),
            _ => "cpu-with-fault".into(),
        }
    }
    fn alloc(&self, len: usize) -> Result<CpuBuffer> {
        self.cpu.alloc(len)
    }
    fn zeros(&self, len: usize) -> Result<CpuBuffer> {
        self.cpu.zeros(len)
    }
    fn upload(&self, host: &[f32]) -> Result<CpuBuffer> {
        self.cpu.upload(host)
    }
    fn download(&self, buf: &CpuBuffer, host: &mut [f32]) -> Result<()> {
        self.cpu.download(buf, host)
    }
    fn buffer_len(&self, buf: &CpuBuffer) -> usize {
        self.cpu.buffer_len(buf)
    }
    fn copy(&self, src: &CpuBuffer, dst: &mut CpuBuffer) -> Result<()> {
        self.cpu.copy(src, dst)
    }
    fn fill(&self, buf: &mut CpuBuffer, value: f32) -> Result<()> {
        self.cpu.fill(buf, value)
    }
    fn conv2d_forward(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.conv2d_forward(p, x, w, y)
    }
    fn conv2d_backward_data(
        &self,
        p: &Conv2dParams,
        dy: &CpuBuffer,
        w: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.conv2d_backward_data(p, dy, w, dx)
    }
    fn conv2d_backward_filter(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        dw: &mut CpuBuffer,
    ) -> Result<()> {
        self.backward_fault()?;
        self.cpu.conv2d_backward_filter(p, x, dy, dw)
    }
    fn batch_norm_forward_train(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        bn: &mut BatchNormBuffers<CpuBuffer>,
        saved: &mut BatchNormSaved<CpuBuffer>,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.batch_norm_forward_train(p, x, bn, saved, y)
    }
    fn batch_norm_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        bn: &BatchNormBuffers<CpuBuffer>,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.batch_norm_forward_eval(p, x, bn, y)
    }
    fn batch_norm_backward(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        gamma: &CpuBuffer,
        saved: &BatchNormSaved<CpuBuffer>,
        dx: &mut CpuBuffer,
        grads: &mut BatchNormGrads<CpuBuffer>,
    ) -> Result<()> {
        self.cpu
            .batch_norm_backward(p, x, dy, gamma, saved, dx, grads)
    }
    fn relu_forward(&self, x: &mut CpuBuffer) -> Result<()> {
        self.cpu.relu_forward(x)
    }
    fn relu_backward(&self, y: &CpuBuffer, dy: &mut CpuBuffer) -> Result<()> {
        self.cpu.relu_backward(y, dy)
    }
    fn max_pool_forward(&self, p: &PoolParams, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        self.cpu.max_pool_forward(p, x, y)
    }
    fn max_pool_backward(
        &self,
        p: &PoolParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.max_pool_backward(p, x, dy, dx)
    }
    fn global_avg_pool_forward(
        &self,
        p: &GlobalPoolParams,
        x: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.global_avg_pool_forward(p, x, y)
    }
    fn global_avg_pool_backward(
        &self,
        p: &GlobalPoolParams,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.global_avg_pool_backward(p, dy, dx)
    }
    fn linear_forward(
        &self,
        p: &LinearParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        b: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.linear_forward(p, x, w, b, y)
    }
    fn linear_backward(
        &self,
        p: &LinearParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        dy: &CpuBuffer,
        dx: Option<&mut CpuBuffer>,
        dw: &mut CpuBuffer,
        db: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.linear_backward(p, x, w, dy, dx, dw, db)
    }
    fn cross_entropy_forward(
        &self,
        p: &CrossEntropyParams,
        logits: &CpuBuffer,
        labels: &CpuBuffer,
        loss: &mut CpuBuffer,
        correct: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu
            .cross_entropy_forward(p, logits, labels, loss, correct)
    }
    fn cross_entropy_backward(
        &self,
        p: &CrossEntropyParams,
        logits: &CpuBuffer,
        labels: &CpuBuffer,
        dlogits: &mut CpuBuffer,
    ) -> Result<()> {
        self.cpu.cross_entropy_backward(p, logits, labels, dlogits)
    }
    fn add(&self, a: &CpuBuffer, b: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        self.cpu.add(a, b, out)
    }
    fn add_assign(&self, dst: &mut CpuBuffer, src: &CpuBuffer) -> Result<()> {
        self.cpu.add_assign(dst, src)
    }
    fn scale(&self, x: &mut CpuBuffer, alpha: f32) -> Result<()> {
        self.cpu.scale(x, alpha)
    }
    fn axpy(&self, alpha: f32, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        self.cpu.axpy(alpha, x, y)
    }
    fn sum_squares(&self, x: &CpuBuffer, out: &mut CpuBuffer, index: usize) -> Result<()> {
        self.cpu.sum_squares(x, out, index)
    }
    fn has_non_finite(&self, x: &CpuBuffer) -> Result<bool> {
        self.cpu.has_non_finite(x)
    }
}

fn dp_with_fault_on_rank_1(fault: Fault) -> DataParallel<CpuWithFault, ResNet<CpuWithFault>> {
    let reps = (0..3)
        .map(|r| {
            replica(
                CpuWithFault {
                    cpu: CpuBackend::new(),
                    fault: if r == 1 { fault } else { Fault::None },
                },
                SEED,
            )
        })
        .collect();
    DataParallel::new(reps, Box::new(HostRing::new(3).unwrap()), xent()).unwrap()
}

/// The other replicas wait in the all-reduce while replica 1 fails in its backward; the
/// host ring's timeout is minutes, so finishing in seconds shows the abort released them.
fn assert_fails_naming_replica_1(fault: Fault, expect: &str) {
    let mut dp = dp_with_fault_on_rank_1(fault);
    let started = Instant::now();
    let err = dp
        .train_step(&host_batch(6, 5), LR, 1.0, &never)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(err.replica(), Some(1), "{err}");
    let text = err.to_string();
    assert!(text.contains("replica 1 (cpu-with-fault)"), "{text}");
    assert!(text.contains(expect), "{text}");

    // The group is aborted: the next step fails at once, still naming replica 1.
    let started = Instant::now();
    let err = dp
        .train_step(&host_batch(6, 6), LR, 1.0, &never)
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(err.to_string().contains("replica 1"), "{err}");
}

#[test]
fn a_replica_whose_backend_fails_stops_every_replica_with_injected_fault() {
    assert_fails_naming_replica_1(Fault::BackwardError, "injected: illegal memory access");
}

#[test]
fn a_replica_that_panics_stops_every_replica_with_injected_fault() {
    assert_fails_naming_replica_1(
        Fault::BackwardPanic,
        "panicked: injected panic in conv2d_backward_filter",
    );
}

#[test]
fn throughput_over_replicas_counts_the_global_batch() {
    let mut dp = cpu_dp(2);
    let mut calls = Vec::new();
    let report = measure_data_parallel_throughput(
        &mut dp,
        4,
        IMAGE,
        1,
        2,
        0.01,
        &never,
        &mut |done, total, s| calls.push((done, total, s)),
    )
    .unwrap()
    .unwrap();
    assert_eq!(report.batch, 4);
    assert_eq!(report.step_seconds.len(), 2);
    assert!(report.images_per_s() > 0.0 && report.images_per_s().is_finite());
    assert_eq!(
        calls.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>(),
        vec![(1, 3), (2, 3), (3, 3)]
    );
    // The replicas trained in lockstep through the measurement.
    let reps = dp.replicas_mut();
    let (a, rest) = reps.split_first_mut().unwrap();
    assert_eq!(
        bits(&weights(&a.backend, &mut a.model)),
        bits(&weights(&rest[0].backend, &mut rest[0].model))
    );

    let err =
        measure_data_parallel_throughput(&mut dp, 5, IMAGE, 0, 1, 0.01, &never, &mut |_, _, _| {})
            .unwrap_err();
    assert!(matches!(
        err,
        ParallelError::BatchNotDivisible {
            batch: 5,
            replicas: 2
        }
    ));
}

#[test]
fn all_reduce_bandwidth_reports_algorithm_and_bus_bandwidth() {
    for ranks in 1..=4 {
        let ring = HostRing::new(ranks).unwrap();
        let backends: Vec<CpuBackend> = (0..ranks).map(|_| CpuBackend::new()).collect();
        let report = measure_all_reduce_bandwidth(&ring, &backends, 1 << 16, 1, 3).unwrap();
        assert_eq!(report.collective, "host-ring");
        assert_eq!(
            (report.ranks, report.bytes, report.iterations),
            (ranks, 1 << 18, 3)
        );
        assert!(report.seconds_per_call > 0.0);
        assert!(report.algbw_gbps() > 0.0 && report.algbw_gbps().is_finite());
        let bus = report.algbw_gbps() * ring_bus_factor(ranks);
        assert!((report.busbw_gbps() - bus).abs() <= 1e-12 * bus.max(1.0));
        eprintln!(
            "host-ring {ranks} ranks, 256 KiB: algbw {:.2} GB/s, busbw {:.2} GB/s",
            report.algbw_gbps(),
            report.busbw_gbps()
        );
    }
    let ring = HostRing::new(2).unwrap();
    let one = [CpuBackend::new()];
    assert!(measure_all_reduce_bandwidth(&ring, &one, 16, 0, 1).is_err());
    assert_eq!(AllReduce::<CpuBackend>::ranks(&ring), 2);
}

#[test]
fn fp16_replicas_skip_an_overflowing_step_together_and_apply_a_scaled_one() {
    use tinyperf::engine::backend::half_storage::HalfStorageCpu;
    use tinyperf::engine::Precision;
    let half = || HalfStorageCpu::new(CpuBackend::new(), Precision::Fp16).unwrap();
    let reps = (0..2).map(|_| replica(half(), SEED)).collect();
    let mut dp = DataParallel::new(reps, Box::new(HostRing::new(2).unwrap()), xent()).unwrap();
    let snapshot = |dp: &mut DataParallel<HalfStorageCpu, ResNet<HalfStorageCpu>>| {
        dp.replicas_mut()
            .iter_mut()
            .map(|r| weights(&r.backend, &mut r.model))
            .collect::<Vec<_>>()
    };
    let initial = snapshot(&mut dp);
    let batch = host_batch(8, 3);

    // A scale this large overflows fp16 in the backward on every replica.
    let outcome = dp.train_step(&batch, LR, 1e30, &never).unwrap();
    assert!(
        matches!(outcome, StepOutcome::NonFiniteGradients(r) if r.loss.is_finite()),
        "{outcome:?}"
    );
    assert_eq!(snapshot(&mut dp), initial);

    let outcome = dp.train_step(&batch, LR, 128.0, &never).unwrap();
    assert!(matches!(outcome, StepOutcome::Updated(_)), "{outcome:?}");
    let after = snapshot(&mut dp);
    assert_ne!(after[0], initial[0]);
    assert_eq!(bits(&after[0]), bits(&after[1]), "replicas stay identical");
}
