//! The `smoke` suite: a small ResNet trained to a target accuracy on the generated
//! dataset (made on first use in the cache folder) or on any dataset in ImageNet
//! layout, with the same loop, optimizer and MLLOG as the full benchmark.

use std::path::PathBuf;

use super::options::{
    self, DATASET, IMAGE_SIZE, LOADER_THREADS, MODEL, SYNTH_CLASSES, SYNTH_PER_CLASS, SYNTH_SIZE,
    SYNTH_VAL_PER_CLASS,
};
use super::record::{StageResult, Verdict};
use super::stage::{StageContext, StageReport};
use super::training::{self, TrainJob};
use crate::engine::data::{ensure_synth_dataset, SynthSpec};
use crate::engine::recipe::Recipe;
use crate::engine::train::ModelChoice;

pub const NAME: &str = "smoke";
pub const DEFAULT_MODEL: ModelChoice = ModelChoice::ResNet20;
pub const DEFAULT_IMAGE_SIZE: usize = 32;
/// At or above the closed ResNet target (0.759), so the run's MLLOG reads as a
/// successful run to the compliance checker.
pub const DEFAULT_TARGET: f64 = 0.8;

/// Generated classes and training images per class: with ResNet-20 at 32² this takes
/// about a minute on two cores.
pub const DEFAULT_CLASSES: usize = 4;
pub const DEFAULT_PER_CLASS: usize = 250;

/// The smoke recipe: the reference optimizer and schedule at batch 128 (see
/// [`Recipe::smoke`]), stopping at [`DEFAULT_TARGET`]. A run of about eighty steps
/// needs larger LARS steps than the reference's thousands: a trust coefficient of 0.01
/// (the reference 0.001) and a base LR of 2.
pub fn recipe() -> Recipe {
    Recipe {
        target_accuracy: DEFAULT_TARGET,
        base_lr: 2.0,
        lars_trust_coefficient: 0.01,
        train_epochs: 10,
        ..Recipe::smoke()
    }
}

/// The generated dataset the suite trains on unless told otherwise.
pub fn synth_spec(ctx: &StageContext<'_>) -> SynthSpec {
    let d = SynthSpec::default();
    let n = |spec, default: usize| options::number(ctx.options, spec, default as f64) as usize;
    SynthSpec {
        classes: n(SYNTH_CLASSES, DEFAULT_CLASSES),
        per_class: n(SYNTH_PER_CLASS, DEFAULT_PER_CLASS),
        val_per_class: n(SYNTH_VAL_PER_CLASS, d.val_per_class),
        size: n(SYNTH_SIZE, d.size),
        ..d
    }
}

pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let recipe = match training::recipe_for(NAME, ctx.options) {
        Ok(r) => r,
        Err(e) => {
            return StageReport::new(NAME).finish_as(Verdict::Error, Some(format!("{e}")));
        }
    };
    let dataset = match options::text(ctx.options, DATASET) {
        Some(path) => PathBuf::from(path),
        None => {
            let spec = synth_spec(ctx);
            ctx.progress(
                0.0,
                Some(format!(
                    "preparing the generated dataset ({} classes × {} images) in {}",
                    spec.classes,
                    spec.per_class,
                    ctx.cache_dir.display()
                )),
            );
            match ensure_synth_dataset(&ctx.cache_dir, &spec) {
                Ok(root) => root,
                Err(e) => {
                    return StageReport::new(NAME).finish_as(
                        Verdict::Error,
                        Some(format!("cannot generate the smoke dataset: {e}")),
                    )
                }
            }
        }
    };
    let model = options::text(ctx.options, MODEL)
        .and_then(ModelChoice::parse)
        .unwrap_or(DEFAULT_MODEL);
    let job = TrainJob {
        stage: NAME,
        result_folder: None,
        dataset,
        recipe,
        model,
        image_size: options::number(ctx.options, IMAGE_SIZE, DEFAULT_IMAGE_SIZE as f64) as usize,
        loader_threads: ctx
            .options
            .get(LOADER_THREADS.key)
            .and_then(|v| v.as_u64())
            .map(|t| t as usize),
        may_be_closed: false,
    };
    training::run(ctx, job)
}
