//! The training loop on real generated JPEG datasets with a tiny convolutional model:
//! learning, the MLLOG it writes, the optimizer against the host reference, and every
//! bad-input path (non-finite loss, cancel in the first step, unreadable images, a batch
//! larger than the dataset).

use std::cell::Cell;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use tinyperf::engine::backend::half_storage::HalfStorageCpu;
use tinyperf::engine::data::{write_synth_dataset, Dataset, Loader, LoaderConfig, SynthSpec};
use tinyperf::engine::layers::{BatchNorm2d, Conv2d, GlobalAvgPool, Linear, ParamKind, Relu};
use tinyperf::engine::mllog::{drop_page_cache, Division, MlLog, Submission, SUBMITTER};
use tinyperf::engine::model::{Model, NamedParam};
use tinyperf::engine::optim::{step_param, LarsConfig};
use tinyperf::engine::recipe::Recipe;
use tinyperf::engine::train::loss_scale::OVERFLOW_PATIENCE;
use tinyperf::engine::train::{
    measure_train_throughput, train, DeviceOptimizer, EpochReport, StepReport, StopReason,
    TrainData, TrainObserver, UpdateOutcome,
};
use tinyperf::engine::Precision;
use tinyperf::engine::{init, Backend, CpuBackend, Result, Tensor};

/// conv 3×3 stride 2 → BN → ReLU → conv 3×3 stride 2 → BN → ReLU → global pool → FC.
struct TinyNet<B: Backend> {
    conv1: Conv2d<B>,
    bn1: BatchNorm2d<B>,
    conv2: Conv2d<B>,
    bn2: BatchNorm2d<B>,
    fc: Linear<B>,
    saved: Option<Saved<B>>,
}

struct Saved<B: Backend> {
    x: Tensor<B>,
    c1: Tensor<B>,
    r1: Tensor<B>,
    c2: Tensor<B>,
    r2: Tensor<B>,
    pooled: Tensor<B>,
}

impl<B: Backend> TinyNet<B> {
    fn new(b: &B, classes: usize, seed: u64) -> TinyNet<B> {
        let width = 16;
        let mut conv1 = Conv2d::new(b, 3, width, 3, 2, 1).unwrap();
        conv1
            .set_weight_oihw(b, &init::conv_weight(seed, 1, width, 3, 3, 3))
            .unwrap();
        conv1.needs_input_grad = false;
        let mut conv2 = Conv2d::new(b, width, width, 3, 2, 1).unwrap();
        conv2
            .set_weight_oihw(b, &init::conv_weight(seed, 2, width, width, 3, 3))
            .unwrap();
        let mut fc = Linear::new(b, width, classes).unwrap();
        fc.weight = Tensor::from_host(
            b,
            &[classes, width],
            &init::linear_weight(seed, 3, classes, width),
        )
        .unwrap();
        TinyNet {
            conv1,
            bn1: BatchNorm2d::new(b, width).unwrap(),
            conv2,
            bn2: BatchNorm2d::new(b, width).unwrap(),
            fc,
            saved: None,
        }
    }
}

impl<B: Backend> Model<B> for TinyNet<B> {
    fn classes(&self) -> usize {
        self.fc.out_features
    }

    fn forward(&mut self, b: &B, x: &Tensor<B>, training: bool) -> Result<Tensor<B>> {
        self.bn1.training = training;
        self.bn2.training = training;
        let c1 = self.conv1.forward(b, x)?;
        let r1 = Relu::forward(b, self.bn1.forward(b, &c1)?)?;
        let c2 = self.conv2.forward(b, &r1)?;
        let r2 = Relu::forward(b, self.bn2.forward(b, &c2)?)?;
        let pooled = GlobalAvgPool::forward(b, &r2)?;
        let logits = self.fc.forward(b, &pooled)?;
        self.saved = if training {
            Some(Saved {
                x: x.duplicate(b)?,
                c1,
                r1,
                c2,
                r2,
                pooled,
            })
        } else {
            None
        };
        Ok(logits)
    }

    fn backward(&mut self, b: &B, dlogits: &Tensor<B>) -> Result<()> {
        let s = self
            .saved
            .take()
            .ok_or(tinyperf::engine::EngineError::MissingForwardState { op: "TinyNet" })?;
        let dpooled = self.fc.backward(b, &s.pooled, dlogits, true)?.unwrap();
        let dr2 = GlobalAvgPool::backward(b, s.r2.nhwc("gap")?, &dpooled)?;
        let dbn2 = Relu::backward(b, &s.r2, dr2)?;
        let dc2 = self.bn2.backward(b, &s.c2, &dbn2)?;
        let dr1 = self.conv2.backward(b, &s.r1, &dc2)?.unwrap();
        let dbn1 = Relu::backward(b, &s.r1, dr1)?;
        let dc1 = self.bn1.backward(b, &s.c1, &dbn1)?;
        self.conv1.backward(b, &s.x, &dc1)?;
        Ok(())
    }

    fn parameters(&mut self) -> Vec<NamedParam<'_, B>> {
        let mut out = Vec::new();
        fn named<'a, B: Backend>(
            prefix: &str,
            ps: Vec<tinyperf::engine::layers::ParamMut<'a, B>>,
        ) -> Vec<NamedParam<'a, B>> {
            ps.into_iter()
                .enumerate()
                .map(|(i, param)| NamedParam {
                    name: format!("{prefix}.{i}"),
                    param,
                })
                .collect()
        }
        out.extend(named("conv1", self.conv1.parameters()));
        out.extend(named("bn1", self.bn1.parameters()));
        out.extend(named("conv2", self.conv2.parameters()));
        out.extend(named("bn2", self.bn2.parameters()));
        out.extend(named("fc", self.fc.parameters()));
        out
    }
}

/// Records every report; cancels when `cancel_at_call` cancel checks have been made.
#[derive(Default)]
struct Recorder {
    steps: Vec<StepReport>,
    epochs: Vec<EpochReport>,
    checks: Cell<usize>,
    cancel_at_call: Option<usize>,
}

impl TrainObserver for Recorder {
    fn cancelled(&self) -> bool {
        let n = self.checks.get() + 1;
        self.checks.set(n);
        self.cancel_at_call.is_some_and(|at| n >= at)
    }
    fn on_step(&mut self, report: &StepReport) {
        self.steps.push(report.clone());
    }
    fn on_epoch(&mut self, report: &EpochReport) {
        self.epochs.push(report.clone());
    }
}

fn spec(classes: usize, per_class: usize, val_per_class: usize) -> SynthSpec {
    SynthSpec {
        classes,
        per_class,
        val_per_class,
        size: 24,
        seed: 5,
        quality: 90,
    }
}

fn data(root: &Path, recipe: &Recipe, image_size: usize) -> (Dataset, TrainData) {
    let dataset = Dataset::open(root).unwrap();
    let mut train_cfg = LoaderConfig::train(recipe.global_batch_size, image_size, recipe.seed);
    train_cfg.threads = 2;
    let mut eval_cfg = LoaderConfig::eval(recipe.eval_batch_size, image_size);
    eval_cfg.threads = 2;
    let data = TrainData {
        train: Loader::new(Arc::new(dataset.train.clone()), train_cfg).unwrap(),
        eval: Loader::new(Arc::new(dataset.val.clone()), eval_cfg).unwrap(),
    };
    (dataset, data)
}

fn small_recipe(batch: usize, epochs: u32) -> Recipe {
    Recipe {
        global_batch_size: batch,
        eval_batch_size: 7,
        base_lr: 1.0,
        warmup_epochs: 1,
        train_epochs: epochs,
        eval_start_epoch: 1,
        eval_every: 1,
        eval_every_epoch_from: 1,
        target_accuracy: 0.9,
        // A few dozen steps of a tiny net need larger LARS steps than ResNet-50's
        // thousands: 2 % of ‖w‖ per unit of LR instead of 0.1 %.
        lars_trust_coefficient: 0.02,
        ..Recipe::smoke()
    }
}

fn open_mllog(path: &Path, recipe: &Recipe, train: u64, eval: u64) -> MlLog {
    let mut log = MlLog::create(path).unwrap();
    let mut submission = Submission::resnet(SUBMITTER, "test_box");
    submission.division = Division::Open;
    log.submission(&submission).unwrap();
    log.cache_clear(drop_page_cache().flushed()).unwrap();
    log.init_start().unwrap();
    log.init_stop().unwrap();
    log.run_start().unwrap();
    log.run_header(&recipe.mllog_config(train, eval, recipe.global_batch_size as u64))
        .unwrap();
    log
}

fn mllog_keys(path: &Path) -> Vec<(String, String)> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l.strip_prefix(":::MLLOG ").unwrap()).unwrap();
            (
                v["key"].as_str().unwrap().to_string(),
                v["metadata"]["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

#[test]
fn a_tiny_model_learns_the_generated_set_to_its_target_and_logs_every_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    write_synth_dataset(&root, &spec(2, 40, 11)).unwrap();
    let recipe = small_recipe(16, 12);
    let (dataset, data) = data(&root, &recipe, 24);
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 2, 1);
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe, 80, 22);
    let mut observer = Recorder::default();
    let summary = train(
        &backend,
        &mut model,
        &recipe,
        &data,
        Some(&mut log),
        &mut observer,
    );
    drop(log);
    assert_eq!(summary.reason, StopReason::TargetReached, "{summary:?}");
    let final_acc = summary.final_accuracy().unwrap();
    assert!(final_acc >= 0.9, "{summary:?}");
    // 22 val images in batches of 7: the last batch holds 6 padding samples, which
    // must not count, so accuracy is a multiple of 1/22.
    let hits = final_acc * dataset.val.len() as f64;
    assert!((hits - hits.round()).abs() < 1e-9, "{final_acc}");
    assert!(summary.time_to_target_s.unwrap() <= summary.run_seconds);
    assert_eq!(summary.epochs_completed as usize, observer.epochs.len());
    assert_eq!(summary.steps as usize, observer.steps.len());
    // 80 images at batch 16: 5 steps per epoch; progress says so.
    assert!(observer.steps.iter().all(|s| s.steps_per_epoch == 5));
    assert!(observer
        .steps
        .iter()
        .all(|s| s.loss.is_finite() && s.lr >= 0.0));
    assert!(observer.epochs.iter().all(|e| e.eval_accuracy.is_some()));
    assert_eq!(summary.mllog_errors, Vec::<String>::new());
    let keys = mllog_keys(&log_path);
    let count = |k: &str| keys.iter().filter(|(key, _)| key == k).count();
    assert_eq!(count("epoch_start"), summary.epochs_completed as usize);
    assert_eq!(count("eval_accuracy"), summary.evals.len());
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), "success".to_string())
    );
}

#[test]
fn the_device_optimizer_matches_the_host_lars_and_sgd_reference() {
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 3, 2);
    let config = LarsConfig {
        momentum: 0.9,
        weight_decay: 2e-4,
        trust_coefficient: 0.001,
        epsilon: 0.0,
    };
    let mut optimizer = DeviceOptimizer::<CpuBackend>::new(config);
    let mut host: Vec<(ParamKind, Vec<f32>, Vec<f32>)> = Vec::new();
    for step in 0..2 {
        let x: Vec<f32> = (0..4 * 8 * 8 * 3)
            .map(|i| ((i * 37 + step * 11) % 101) as f32 - 50.0)
            .collect();
        let x = Tensor::from_host(&backend, &[4, 8, 8, 3], &x).unwrap();
        let logits = model.forward(&backend, &x, true).unwrap();
        let dlogits: Vec<f32> = (0..12).map(|i| (i as f32 - 5.5) * 0.1).collect();
        let dlogits = Tensor::from_host(&backend, &[4, 3], &dlogits).unwrap();
        drop(logits);
        model.backward(&backend, &dlogits).unwrap();
        let mut params = model.parameters();
        // The host reference from the same values and gradients.
        let mut expected = Vec::new();
        for (i, p) in params.iter().enumerate() {
            let len = backend.buffer_len(p.param.value);
            let mut w = vec![0.0; len];
            let mut g = vec![0.0; len];
            backend.download(p.param.value, &mut w).unwrap();
            backend.download(p.param.grad, &mut g).unwrap();
            let kind = p.param.kind;
            if host.len() <= i {
                host.push((kind, Vec::new(), vec![0.0; len]));
            }
            let momentum = &mut host[i].2;
            step_param(kind, &mut w, &g, momentum, 0.5, &config).unwrap();
            expected.push(w);
        }
        let outcome = optimizer.step(&backend, &mut params, 0.5, 1.0).unwrap();
        assert_eq!(outcome, UpdateOutcome::Applied);
        for (p, want) in params.iter().zip(&expected) {
            let mut got = vec![0.0; want.len()];
            backend.download(p.param.value, &mut got).unwrap();
            for (a, b) in got.iter().zip(want) {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{} step {step}: {a} vs {b}",
                    p.name
                );
            }
        }
        let lars = params.iter().filter(|p| p.param.kind.uses_lars()).count();
        let trusted = optimizer
            .last_trust_ratios()
            .iter()
            .filter(|&&t| t != 1.0)
            .count();
        assert_eq!(
            trusted, lars,
            "every LARS parameter gets its own trust ratio"
        );
    }
}

#[test]
fn a_diverging_run_stops_at_the_first_non_finite_loss_and_logs_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    write_synth_dataset(&root, &spec(2, 16, 2)).unwrap();
    let recipe = Recipe {
        base_lr: 1e30,
        end_lr: 1e-4,
        warmup_epochs: 0,
        // LARS scales updates by ‖w‖/‖g‖; a trust coefficient of 1 with a huge LR
        // blows the weights up within a step or two.
        lars_trust_coefficient: 1.0,
        ..small_recipe(8, 5)
    };
    let (_, data) = data(&root, &recipe, 24);
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 2, 3);
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe, 32, 4);
    let mut observer = Recorder::default();
    let summary = train(
        &backend,
        &mut model,
        &recipe,
        &data,
        Some(&mut log),
        &mut observer,
    );
    drop(log);
    // Either the loss itself stops being finite, or the gradients do first, and the
    // steps are skipped until the patience runs out.
    let (epoch, step) = match summary.reason.clone() {
        StopReason::NonFiniteLoss { epoch, step, loss } => {
            assert!(!loss.is_finite());
            (epoch, step)
        }
        StopReason::GradientsOverflowed {
            epoch,
            step,
            consecutive,
            scale,
        } => {
            assert_eq!((consecutive, scale), (OVERFLOW_PATIENCE, 1.0));
            assert_eq!(summary.skipped_steps, u64::from(OVERFLOW_PATIENCE));
            (epoch, step)
        }
        _ => panic!("{summary:?}"),
    };
    assert!(epoch >= 1 && step >= 1);
    assert!(summary.reason.describe(0.9).contains("diverged"));
    // Every step before the bad one was reported, and nothing after it.
    assert_eq!(summary.steps as usize, observer.steps.len());
    assert!(observer.steps.iter().all(|s| s.loss.is_finite()));
    let keys = mllog_keys(&log_path);
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), "aborted".to_string())
    );
}

#[test]
fn a_cancel_during_the_first_step_stops_before_its_backward_and_logs_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    write_synth_dataset(&root, &spec(2, 8, 2)).unwrap();
    let recipe = small_recipe(8, 3);
    let (_, data) = data(&root, &recipe, 24);
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 2, 4);
    let before: Vec<Vec<f32>> = model
        .parameters()
        .iter()
        .map(|p| {
            let mut v = vec![0.0; backend.buffer_len(p.param.value)];
            backend.download(p.param.value, &mut v).unwrap();
            v
        })
        .collect();
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe, 16, 4);
    // Checks: before epoch 1, before step 1, after the forward of step 1 (cancel).
    let mut observer = Recorder {
        cancel_at_call: Some(3),
        ..Recorder::default()
    };
    let summary = train(
        &backend,
        &mut model,
        &recipe,
        &data,
        Some(&mut log),
        &mut observer,
    );
    drop(log);
    assert_eq!(summary.reason, StopReason::Cancelled);
    assert_eq!(summary.steps, 0);
    assert_eq!(observer.checks.get(), 3);
    let after: Vec<Vec<f32>> = model
        .parameters()
        .iter()
        .map(|p| {
            let mut v = vec![0.0; backend.buffer_len(p.param.value)];
            backend.download(p.param.value, &mut v).unwrap();
            v
        })
        .collect();
    assert_eq!(
        before, after,
        "a cancelled step must not update the weights"
    );
    let keys = mllog_keys(&log_path);
    assert!(keys.iter().any(|(k, _)| k == "epoch_stop"));
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), "aborted".to_string())
    );
}

#[test]
fn unreadable_images_are_replaced_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    write_synth_dataset(&root, &spec(2, 8, 2)).unwrap();
    let class_dir = fs::read_dir(root.join("train"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut files: Vec<_> = fs::read_dir(&class_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    fs::write(&files[0], b"").unwrap();
    let bytes = fs::read(&files[1]).unwrap();
    fs::write(&files[1], &bytes[..bytes.len() / 3]).unwrap();
    let recipe = Recipe {
        target_accuracy: 1.0,
        ..small_recipe(8, 1)
    };
    let (_, data) = data(&root, &recipe, 24);
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 2, 5);
    let mut observer = Recorder::default();
    let summary = train(&backend, &mut model, &recipe, &data, None, &mut observer);
    assert!(
        matches!(
            summary.reason,
            StopReason::EpochsExhausted | StopReason::TargetReached
        ),
        "{summary:?}"
    );
    assert_eq!(summary.epochs_completed, 1);
    assert_eq!(summary.unreadable_files, 2, "{summary:?}");
}

#[test]
fn a_batch_larger_than_the_dataset_trains_one_padded_step_per_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    write_synth_dataset(&root, &spec(2, 5, 2)).unwrap();
    let recipe = Recipe {
        target_accuracy: 1.0,
        ..small_recipe(32, 2)
    };
    let (_, data) = data(&root, &recipe, 24);
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 2, 6);
    let mut observer = Recorder::default();
    let summary = train(&backend, &mut model, &recipe, &data, None, &mut observer);
    assert!(
        !matches!(summary.reason, StopReason::Failed(_)),
        "{summary:?}"
    );
    assert_eq!(summary.steps, summary.epochs_completed as u64);
    assert_eq!(observer.steps.len() as u64, summary.steps);
    // Only the 10 real images count as trained images.
    assert!(observer.steps.iter().all(|s| s.steps_per_epoch == 1));
}

#[test]
fn throughput_times_the_requested_steps_after_warm_up() {
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 10, 7);
    let mut calls = Vec::new();
    let report = measure_train_throughput(
        &backend,
        &mut model,
        4,
        16,
        1,
        3,
        0.1,
        &|| false,
        &mut |done, total, _| calls.push((done, total)),
    )
    .unwrap()
    .unwrap();
    assert_eq!(report.step_seconds.len(), 3);
    assert_eq!(calls, vec![(1, 4), (2, 4), (3, 4), (4, 4)]);
    assert!(report.images_per_s() > 0.0 && report.images_per_s().is_finite());
    let cancelled = measure_train_throughput(
        &backend,
        &mut model,
        4,
        16,
        1,
        3,
        0.1,
        &|| true,
        &mut |_, _, _| {},
    )
    .unwrap();
    assert!(cancelled.is_none());
}

fn host_values<B: Backend>(backend: &B, model: &mut TinyNet<B>) -> Vec<Vec<f32>> {
    model
        .parameters()
        .iter()
        .map(|p| {
            let mut v = vec![0.0; backend.buffer_len(p.param.value)];
            backend.download(p.param.value, &mut v).unwrap();
            v
        })
        .collect()
}

/// Forward and backward of `model` on a fixed batch, with `dlogits` multiplied by `scale`.
fn backward_scaled<B: Backend>(backend: &B, model: &mut TinyNet<B>, scale: f32) {
    let x: Vec<f32> = (0..4 * 8 * 8 * 3)
        .map(|i| ((i * 37) % 101) as f32 / 50.0 - 1.0)
        .collect();
    let x = Tensor::from_host(backend, &[4, 8, 8, 3], &x).unwrap();
    let logits = model.forward(backend, &x, true).unwrap();
    drop(logits);
    let dlogits: Vec<f32> = (0..12).map(|i| (i as f32 - 5.5) * 0.01 * scale).collect();
    let dlogits = Tensor::from_host(backend, &[4, 3], &dlogits).unwrap();
    model.backward(backend, &dlogits).unwrap();
}

fn lars() -> LarsConfig {
    LarsConfig {
        momentum: 0.9,
        weight_decay: 2e-4,
        trust_coefficient: 0.001,
        epsilon: 0.0,
    }
}

#[test]
fn a_step_on_loss_scaled_gradients_matches_the_unscaled_step() {
    let backend = CpuBackend::new();
    let mut plain = TinyNet::new(&backend, 3, 7);
    let mut scaled = TinyNet::new(&backend, 3, 7);
    assert_eq!(
        host_values(&backend, &mut plain),
        host_values(&backend, &mut scaled)
    );
    let (mut opt_plain, mut opt_scaled) =
        (DeviceOptimizer::new(lars()), DeviceOptimizer::new(lars()));
    let scale = 1024.0;
    for _ in 0..2 {
        backward_scaled(&backend, &mut plain, 1.0);
        backward_scaled(&backend, &mut scaled, scale);
        let a = opt_plain
            .step(&backend, &mut plain.parameters(), 0.5, 1.0)
            .unwrap();
        let b = opt_scaled
            .step(&backend, &mut scaled.parameters(), 0.5, scale)
            .unwrap();
        assert_eq!((a, b), (UpdateOutcome::Applied, UpdateOutcome::Applied));
    }
    let before = TinyNet::new(&backend, 3, 7);
    let mut before = before;
    let initial = host_values(&backend, &mut before);
    let (want, got) = (
        host_values(&backend, &mut plain),
        host_values(&backend, &mut scaled),
    );
    for ((w, g), init) in want.iter().zip(&got).zip(&initial) {
        assert_ne!(w, init, "every parameter moved");
        for (a, b) in w.iter().zip(g) {
            assert!((a - b).abs() <= 1e-6 * (1.0 + a.abs()), "{a} vs {b}");
        }
    }
    assert_eq!(
        opt_plain.last_trust_ratios(),
        opt_scaled.last_trust_ratios()
    );
}

#[test]
fn a_step_with_an_overflowed_gradient_leaves_weights_and_momentum_alone() {
    let backend = CpuBackend::new();
    let mut model = TinyNet::new(&backend, 3, 8);
    let mut reference = TinyNet::new(&backend, 3, 8);
    let mut optimizer = DeviceOptimizer::new(lars());
    let mut fresh = DeviceOptimizer::new(lars());
    let initial = host_values(&backend, &mut model);

    backward_scaled(&backend, &mut model, 1.0);
    {
        // One infinity in a skip-list gradient (the last batch-norm's β) is enough.
        let mut params = model.parameters();
        let beta = params
            .iter_mut()
            .rev()
            .find(|p| p.name.starts_with("bn2"))
            .unwrap();
        backend.fill(beta.param.grad, f32::INFINITY).unwrap();
        let outcome = optimizer.step(&backend, &mut params, 0.5, 1.0).unwrap();
        assert_eq!(outcome, UpdateOutcome::NonFiniteGradients);
    }
    assert_eq!(host_values(&backend, &mut model), initial);

    // The momentum was not touched either: the next good step is a first step.
    backward_scaled(&backend, &mut model, 1.0);
    backward_scaled(&backend, &mut reference, 1.0);
    let a = optimizer
        .step(&backend, &mut model.parameters(), 0.5, 1.0)
        .unwrap();
    let b = fresh
        .step(&backend, &mut reference.parameters(), 0.5, 1.0)
        .unwrap();
    assert_eq!((a, b), (UpdateOutcome::Applied, UpdateOutcome::Applied));
    assert_eq!(
        host_values(&backend, &mut model),
        host_values(&backend, &mut reference)
    );
}

#[test]
fn fp16_training_backs_off_an_overflowing_loss_scale_and_still_learns() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    write_synth_dataset(&root, &spec(2, 40, 11)).unwrap();
    let recipe = Recipe {
        precision: Precision::Fp16,
        // Far beyond fp16's range for these gradients: the first steps overflow.
        loss_scale: 16_777_216.0,
        dynamic_loss_scale: true,
        ..small_recipe(16, 12)
    };
    let (_, data) = data(&root, &recipe, 24);
    let backend = HalfStorageCpu::new(CpuBackend::new(), Precision::Fp16).unwrap();
    let mut model = TinyNet::new(&backend, 2, 1);
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe, 80, 22);
    let mut observer = Recorder::default();
    let summary = train(
        &backend,
        &mut model,
        &recipe,
        &data,
        Some(&mut log),
        &mut observer,
    );
    assert_eq!(summary.reason, StopReason::TargetReached, "{summary:?}");
    assert!(summary.skipped_steps >= 1, "{summary:?}");
    assert!(summary.skipped_steps < summary.steps, "{summary:?}");
    assert!(summary.loss_scale < 16_777_216.0, "{summary:?}");
    assert!(summary.loss_scale >= 1.0);
    assert!(observer.steps.iter().all(|s| s.loss.is_finite()));
}

#[test]
fn a_static_loss_scale_that_always_overflows_stops_the_run_and_logs_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    write_synth_dataset(&root, &spec(2, 16, 2)).unwrap();
    let recipe = Recipe {
        precision: Precision::Fp16,
        // Past f32's range too once multiplied through: every step overflows.
        loss_scale: 1e30,
        ..small_recipe(8, 5)
    };
    let (_, data) = data(&root, &recipe, 24);
    let backend = HalfStorageCpu::new(CpuBackend::new(), Precision::Fp16).unwrap();
    let mut model = TinyNet::new(&backend, 2, 3);
    let initial = host_values(&backend, &mut model);
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe, 32, 4);
    let mut observer = Recorder::default();
    let summary = train(
        &backend,
        &mut model,
        &recipe,
        &data,
        Some(&mut log),
        &mut observer,
    );
    drop(log);
    let StopReason::GradientsOverflowed {
        consecutive, scale, ..
    } = summary.reason.clone()
    else {
        panic!("{summary:?}");
    };
    assert_eq!(consecutive, OVERFLOW_PATIENCE);
    assert_eq!(scale, 1e30);
    assert_eq!(summary.skipped_steps, u64::from(OVERFLOW_PATIENCE));
    assert!(summary.reason.describe(0.9).contains("at loss scale"));
    // Every step was skipped, so the weights are the initial ones.
    assert_eq!(host_values(&backend, &mut model), initial);
    let keys = mllog_keys(&log_path);
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), "aborted".to_string())
    );
}
