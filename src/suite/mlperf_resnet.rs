//! The `mlperf-resnet` suite: ResNet-50 v1.5 trained on ImageNet by the v4.0 recipe to
//! top-1 0.759, timed and logged to MLLOG as a closed-division run (open when the
//! options leave the closed rules).

use super::options::{self, IMAGE_SIZE, LOADER_THREADS};
use super::plan::DatasetPlan;
use super::stage::{StageContext, StageReport};
use super::training::{self, TrainJob};
use crate::engine::train::ModelChoice;
use crate::record::{StageResult, Verdict};

/// The suite's name, and the stage's of a single run.
pub const NAME: &str = "mlperf-resnet";
/// Where the box keeps ImageNet (the agent's `dataset` setting says otherwise).
pub const DEFAULT_DATASET: &str = "/raid/datasets/imagenet";
/// The side in pixels of the training and evaluation crops when `image_size` is not given
/// (the reference's 224).
pub const IMAGE_SIDE: usize = 224;

/// The most runs one suite run makes.
pub const MAX_RUNS: usize = 10;
const RUN_NAMES: [&str; MAX_RUNS] = [
    "mlperf-resnet-1",
    "mlperf-resnet-2",
    "mlperf-resnet-3",
    "mlperf-resnet-4",
    "mlperf-resnet-5",
    "mlperf-resnet-6",
    "mlperf-resnet-7",
    "mlperf-resnet-8",
    "mlperf-resnet-9",
    "mlperf-resnet-10",
];

/// The stage name of run `n` (1-based) of several.
pub fn run_name(n: u8) -> &'static str {
    RUN_NAMES[(usize::from(n).clamp(1, MAX_RUNS)) - 1]
}

/// The folder, inside the run's, that run `n` (1-based) of several writes its MLLOG,
/// system description and power log into: `result_{n-1}`, as the package names them.
pub fn result_folder(n: u8) -> String {
    format!("result_{}", n.saturating_sub(1))
}

/// One training run; `nth` is its place among several, `None` for a single run.
pub fn run(ctx: &mut StageContext<'_>, nth: Option<u8>) -> StageResult {
    let name = nth.map_or(NAME, run_name);
    let Some(recipe) = ctx.plan.recipe.clone() else {
        return StageReport::new(name)
            .finish_as(Verdict::Error, Some("the run's plan has no recipe".into()));
    };
    let DatasetPlan::Folder { path: dataset } = ctx.plan.dataset.clone() else {
        return StageReport::new(name).finish_as(
            Verdict::Error,
            Some("the run's plan has no dataset folder".into()),
        );
    };
    if !dataset.exists() {
        return StageReport::new(name).finish_as(
            Verdict::Error,
            Some(format!(
                "ImageNet is not at {}: put it there in folder layout (train/ and val/, a \
                 folder per wnid) or give its path as the dataset option",
                dataset.display()
            )),
        );
    }
    let image_size = options::number(ctx.options(), IMAGE_SIZE, IMAGE_SIDE as f64) as usize;
    let job = TrainJob {
        stage: name,
        result_folder: nth.map(result_folder),
        dataset,
        recipe,
        model: ModelChoice::ResNet50,
        image_size,
        loader_threads: ctx
            .options()
            .get(LOADER_THREADS.key)
            .and_then(|v| v.as_u64())
            .map(|t| t as usize),
        may_be_closed: image_size == IMAGE_SIDE,
        fit_schedule: None,
    };
    training::run(ctx, job)
}
