//! The training loop over data-parallel replicas, each replica its own real `CpuBackend`
//! on its own thread and gradients summed by the host-staged ring, on real generated
//! JPEG datasets: ResNet-20 learning on two replicas as on one device, one replica
//! against the single-device loop step for step, a global batch that does not split, and
//! cancels between and during steps.

use std::cell::Cell;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use tinyperf::engine::data::{write_synth_dataset, Dataset, Loader, LoaderConfig, SynthSpec};
use tinyperf::engine::mllog::{drop_page_cache, Division, MlLog, Submission, SUBMITTER};
use tinyperf::engine::model::resnet::ResNet;
use tinyperf::engine::model::Model;
use tinyperf::engine::parallel::{DataParallel, HostRing};
use tinyperf::engine::recipe::Recipe;
use tinyperf::engine::train::{
    data_parallel_for, train, train_data_parallel, EpochReport, ModelChoice, StepReport,
    StopReason, TrainData, TrainObserver, TrainSummary,
};
use tinyperf::engine::{Backend, CpuBackend};

const IMAGE: usize = 16;
const CLASSES: usize = 2;

/// Records every report; cancels from the `cancel_at_call`-th cancel check on, or once
/// `cancel_after_steps` steps have been reported.
#[derive(Default)]
struct Recorder {
    steps: Vec<StepReport>,
    epochs: Vec<EpochReport>,
    checks: Cell<usize>,
    cancel_at_call: Option<usize>,
    cancel_after_steps: Option<usize>,
}

impl TrainObserver for Recorder {
    fn cancelled(&self) -> bool {
        let n = self.checks.get() + 1;
        self.checks.set(n);
        self.cancel_at_call.is_some_and(|at| n >= at)
            || self
                .cancel_after_steps
                .is_some_and(|after| self.steps.len() >= after)
    }
    fn on_step(&mut self, report: &StepReport) {
        self.steps.push(report.clone());
    }
    fn on_epoch(&mut self, report: &EpochReport) {
        self.epochs.push(report.clone());
    }
}

/// ResNet-20 at 16² on two generated classes: settings the smoke test trains past its
/// target with in seconds.
fn recipe(batch: usize, epochs: u32) -> Recipe {
    Recipe {
        global_batch_size: batch,
        eval_batch_size: 12,
        base_lr: 1.0,
        lars_trust_coefficient: 0.02,
        train_epochs: epochs,
        target_accuracy: 1.0,
        ..Recipe::smoke()
    }
}

fn synth(root: &Path, per_class: usize, val_per_class: usize) {
    let spec = SynthSpec {
        classes: CLASSES,
        per_class,
        val_per_class,
        size: IMAGE,
        seed: 3,
        quality: 90,
    };
    write_synth_dataset(root, &spec).unwrap();
}

fn data(root: &Path, recipe: &Recipe) -> TrainData {
    let dataset = Dataset::open(root).unwrap();
    let mut train_cfg = LoaderConfig::train(recipe.global_batch_size, IMAGE, recipe.seed);
    train_cfg.threads = 2;
    let mut eval_cfg = LoaderConfig::eval(recipe.eval_batch_size, IMAGE);
    eval_cfg.threads = 2;
    TrainData {
        train: Loader::new(Arc::new(dataset.train.clone()), train_cfg).unwrap(),
        eval: Loader::new(Arc::new(dataset.val.clone()), eval_cfg).unwrap(),
    }
}

/// A CPU backend whose convolutions run as GEMMs: the `gemm` crate is built optimised
/// even in a debug build, the direct convolution kernels are not, and these tests are
/// about the loop rather than the kernels.
fn cpu() -> CpuBackend {
    CpuBackend::with_gemm_convolutions()
}

fn resnet20(backend: &CpuBackend, recipe: &Recipe) -> ResNet<CpuBackend> {
    ModelChoice::ResNet20
        .build(backend, CLASSES, IMAGE, recipe.seed)
        .unwrap()
}

type Replicas = DataParallel<CpuBackend, ResNet<CpuBackend>>;

fn replicas(count: usize, recipe: &Recipe) -> Replicas {
    let backends = (0..count).map(|_| cpu()).collect();
    let ring = Box::new(HostRing::new(count).unwrap());
    data_parallel_for(recipe, backends, ring, |b: &CpuBackend| {
        ModelChoice::ResNet20.build(b, CLASSES, IMAGE, recipe.seed)
    })
    .unwrap()
}

fn open_mllog(path: &Path, recipe: &Recipe) -> MlLog {
    let mut log = MlLog::create(path).unwrap();
    let mut submission = Submission::resnet(SUBMITTER, "test_box");
    submission.division = Division::Open;
    log.submission(&submission).unwrap();
    log.cache_clear(drop_page_cache().flushed()).unwrap();
    log.init_start().unwrap();
    log.init_stop().unwrap();
    log.run_start().unwrap();
    log.run_header(&recipe.mllog_config(64, 16, recipe.global_batch_size as u64))
        .unwrap();
    log
}

/// Each MLLOG line's key and, for `run_stop`, its status.
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

fn weights(dp: &mut Replicas) -> Vec<Vec<Vec<u32>>> {
    dp.replicas_mut()
        .iter_mut()
        .map(|rep| {
            let backend = &rep.backend;
            rep.model
                .parameters()
                .iter()
                .map(|p| {
                    let mut v = vec![0.0; backend.buffer_len(p.param.value)];
                    backend.download(p.param.value, &mut v).unwrap();
                    v.iter().map(|f| f.to_bits()).collect()
                })
                .collect()
        })
        .collect()
}

/// What every finished run must show, on one device or several.
fn assert_learned_and_logged(summary: &TrainSummary, observer: &Recorder, log: &Path) {
    assert!(
        matches!(
            summary.reason,
            StopReason::EpochsExhausted | StopReason::TargetReached
        ),
        "{summary:?}"
    );
    assert!(summary.epochs_completed >= 2, "{summary:?}");
    assert_eq!(summary.epochs_completed as usize, observer.epochs.len());
    assert_eq!(summary.steps as usize, observer.steps.len());
    // 64 training images at batch 16.
    assert!(observer.steps.iter().all(|s| s.steps_per_epoch == 4));
    assert_eq!(summary.steps, 4 * u64::from(summary.epochs_completed));
    assert_eq!(summary.evals.len(), observer.epochs.len());
    assert!(summary.train_images_per_s > 0.0 && summary.run_seconds > 0.0);
    let first = observer.epochs.first().unwrap().mean_loss;
    let last = observer.epochs.last().unwrap().mean_loss;
    assert!(last < first, "the mean loss went from {first} to {last}");
    // Two balanced classes: 0.5 is chance, which the first evaluations sit at.
    let best = summary.best_accuracy().unwrap();
    assert!(best >= 0.625, "best top-1 {best}: {summary:?}");
    assert_eq!(summary.mllog_errors, Vec::<String>::new());
    let keys = mllog_keys(log);
    let count = |k: &str| keys.iter().filter(|(key, _)| key == k).count();
    let epochs = summary.epochs_completed as usize;
    for key in ["epoch_start", "epoch_stop", "tracked_stats"] {
        assert_eq!(count(key), epochs, "{key} in {keys:?}");
    }
    for key in ["eval_start", "eval_accuracy", "eval_stop"] {
        assert_eq!(count(key), summary.evals.len(), "{key} in {keys:?}");
    }
    let status = if summary.reason == StopReason::TargetReached {
        "success"
    } else {
        "aborted"
    };
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), status.to_string())
    );
}

#[test]
fn resnet20_on_two_replicas_learns_and_logs_like_one_device() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    synth(&root, 32, 8);
    let recipe = recipe(16, 8);

    let backend = cpu();
    let mut model = resnet20(&backend, &recipe);
    let one_log = dir.path().join("one.txt");
    let mut log = open_mllog(&one_log, &recipe);
    let mut one = Recorder::default();
    let single = train(
        &backend,
        &mut model,
        &recipe,
        &data(&root, &recipe),
        Some(&mut log),
        &mut one,
    );
    drop(log);
    assert_learned_and_logged(&single, &one, &one_log);

    let mut dp = replicas(2, &recipe);
    let two_log = dir.path().join("two.txt");
    let mut log = open_mllog(&two_log, &recipe);
    let mut two = Recorder::default();
    let parallel = train_data_parallel(
        &mut dp,
        &recipe,
        &data(&root, &recipe),
        Some(&mut log),
        &mut two,
    );
    drop(log);
    assert_learned_and_logged(&parallel, &two, &two_log);
    // The step reports count the global batch, not one replica's shard.
    assert!(two.steps.iter().all(|s| s.steps_per_epoch == 4));
    let w = weights(&mut dp);
    assert_eq!(w[0], w[1], "the replicas' weights drifted apart");
}

#[test]
fn one_replica_over_the_host_ring_matches_the_single_device_loop_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    synth(&root, 16, 6);
    let recipe = recipe(8, 2);

    let backend = cpu();
    let mut model = resnet20(&backend, &recipe);
    let mut single = Recorder::default();
    let want = train(
        &backend,
        &mut model,
        &recipe,
        &data(&root, &recipe),
        None,
        &mut single,
    );

    let mut dp = replicas(1, &recipe);
    let mut parallel = Recorder::default();
    let got = train_data_parallel(&mut dp, &recipe, &data(&root, &recipe), None, &mut parallel);

    assert_eq!(got.reason, want.reason);
    assert_eq!(got.steps, want.steps);
    assert_eq!(got.steps, 8);
    // One replica runs the same kernels on the same shard (the whole batch), its gradient
    // weight is exactly 1, a one-rank ring leaves the gradients as they are, and the
    // combined loss loss·n/n in f64 is exact: nothing may differ by even one bit.
    let losses = |r: &Recorder| -> Vec<u32> { r.steps.iter().map(|s| s.loss.to_bits()).collect() };
    assert_eq!(losses(&parallel), losses(&single));
    let lrs = |r: &Recorder| -> Vec<u64> { r.steps.iter().map(|s| s.lr.to_bits()).collect() };
    assert_eq!(lrs(&parallel), lrs(&single));
    assert_eq!(got.evals, want.evals);
}

#[test]
fn a_global_batch_that_does_not_split_fails_naming_both_numbers_and_logs_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    synth(&root, 8, 2);
    let recipe = recipe(15, 2);
    let mut dp = replicas(2, &recipe);
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe);
    let mut observer = Recorder::default();
    let summary = train_data_parallel(
        &mut dp,
        &recipe,
        &data(&root, &recipe),
        Some(&mut log),
        &mut observer,
    );
    drop(log);
    let StopReason::Failed(message) = &summary.reason else {
        panic!("{summary:?}");
    };
    assert!(
        message.contains("15") && message.contains("2 replicas"),
        "{message}"
    );
    assert_eq!((summary.steps, summary.epochs_completed), (0, 0));
    assert!(observer.steps.is_empty());
    let keys = mllog_keys(&log_path);
    assert!(!keys.iter().any(|(k, _)| k == "epoch_start"));
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), "aborted".to_string())
    );
}

#[test]
fn a_cancel_between_steps_stops_every_replica_and_logs_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    synth(&root, 16, 2);
    let recipe = recipe(8, 3);
    let mut dp = replicas(2, &recipe);
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe);
    let mut observer = Recorder {
        cancel_after_steps: Some(2),
        ..Recorder::default()
    };
    let summary = train_data_parallel(
        &mut dp,
        &recipe,
        &data(&root, &recipe),
        Some(&mut log),
        &mut observer,
    );
    drop(log);
    assert_eq!(summary.reason, StopReason::Cancelled, "{summary:?}");
    assert_eq!(summary.steps, 2);
    assert_eq!(observer.steps.len(), 2);
    assert_eq!(summary.epochs_completed, 0);
    let w = weights(&mut dp);
    assert_eq!(w[0], w[1]);
    let keys = mllog_keys(&log_path);
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), "aborted".to_string())
    );
}

#[test]
fn a_cancel_during_the_first_step_reaches_the_replicas_and_logs_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("synth");
    synth(&root, 16, 2);
    let recipe = recipe(16, 3);
    let mut dp = replicas(2, &recipe);
    let before = weights(&mut dp);
    let log_path = dir.path().join("mllog.txt");
    let mut log = open_mllog(&log_path, &recipe);
    // Checks: before epoch 1, before step 1, then while the replicas run step 1.
    let mut observer = Recorder {
        cancel_at_call: Some(3),
        ..Recorder::default()
    };
    let summary = train_data_parallel(
        &mut dp,
        &recipe,
        &data(&root, &recipe),
        Some(&mut log),
        &mut observer,
    );
    drop(log);
    assert_eq!(summary.reason, StopReason::Cancelled, "{summary:?}");
    assert!(observer.checks.get() >= 3);
    let after = weights(&mut dp);
    assert_eq!(after[0], after[1]);
    // The loop asks the observer every 10 ms while the replicas run, and they ask for
    // the answer after their forward pass, which for ResNet-20 on 8 images in a debug
    // build takes far longer: the first step is cancelled before its backward.
    assert_eq!(summary.steps, 0, "{summary:?}");
    assert_eq!(
        before, after,
        "a cancelled step must not update the weights"
    );
    assert!(observer.steps.is_empty());
    let keys = mllog_keys(&log_path);
    assert_eq!(
        keys.last().unwrap(),
        &("run_stop".to_string(), "aborted".to_string())
    );
}
