//! The `mlperf-resnet` suite: ResNet-50 v1.5 trained on ImageNet by the v4.0 recipe to
//! top-1 0.759, timed and logged to MLLOG as a closed-division run (open when the
//! options leave the closed rules).

use std::path::PathBuf;

use super::options::{self, DATASET, IMAGE_SIZE, LOADER_THREADS};
use super::stage::{StageContext, StageReport};
use super::training::{self, TrainJob};
use crate::engine::train::ModelChoice;
use crate::record::{StageResult, Verdict};

pub const NAME: &str = "mlperf-resnet";
/// Where the box keeps ImageNet (the agent's `dataset` setting says otherwise).
pub const DEFAULT_DATASET: &str = "/raid/datasets/imagenet";
pub const IMAGE_SIDE: usize = 224;

pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let recipe = match training::recipe_for(NAME, ctx.options) {
        Ok(r) => r,
        Err(e) => return StageReport::new(NAME).finish_as(Verdict::Error, Some(e.to_string())),
    };
    let dataset = PathBuf::from(options::text(ctx.options, DATASET).unwrap_or(DEFAULT_DATASET));
    if !dataset.exists() {
        return StageReport::new(NAME).finish_as(
            Verdict::Error,
            Some(format!(
                "ImageNet is not at {}: put it there in folder layout (train/ and val/, a \
                 folder per wnid) or give its path as the dataset option",
                dataset.display()
            )),
        );
    }
    let image_size = options::number(ctx.options, IMAGE_SIZE, IMAGE_SIDE as f64) as usize;
    let job = TrainJob {
        stage: NAME,
        dataset,
        recipe,
        model: ModelChoice::ResNet50,
        image_size,
        loader_threads: ctx
            .options
            .get(LOADER_THREADS.key)
            .and_then(|v| v.as_u64())
            .map(|t| t as usize),
        may_be_closed: image_size == IMAGE_SIDE,
    };
    training::run(ctx, job)
}
