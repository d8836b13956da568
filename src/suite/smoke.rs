//! The `smoke` suite: a small ResNet trained to a target accuracy on the generated
//! dataset (made on first use in the cache folder) or on any dataset in ImageNet
//! layout, with the same loop, optimizer and MLLOG as the full benchmark.

use std::path::PathBuf;

use serde_json::{Map, Value};

use super::options::{
    self, IMAGE_SIZE, LOADER_THREADS, MODEL, SYNTH_CLASSES, SYNTH_PER_CLASS, SYNTH_SIZE,
    SYNTH_VAL_PER_CLASS,
};
use super::plan::DatasetPlan;
use super::stage::{StageContext, StageReport};
use super::training::{self, TrainJob};
use crate::engine::data::{ensure_synth_dataset, synth_cache, SynthSpec};
use crate::engine::recipe::Recipe;
use crate::engine::train::ModelChoice;
use crate::record::{StageResult, Verdict};

/// The suite's and its one stage's name.
pub const NAME: &str = "smoke";
/// The network trained when `model` is not given.
pub const DEFAULT_MODEL: ModelChoice = ModelChoice::ResNet20;
/// The side in pixels of the training and evaluation crops when `image_size` is not given.
pub const DEFAULT_IMAGE_SIZE: usize = 32;
/// At or above the closed ResNet target (0.759), so the run's MLLOG reads as a
/// successful run to the compliance checker.
pub const DEFAULT_TARGET: f64 = 0.8;

/// Generated classes and training images per class: with ResNet-20 at 32² this takes
/// about a minute on two cores.
pub const DEFAULT_CLASSES: usize = 4;
/// Training images per generated class when `synth_per_class` is not given.
pub const DEFAULT_PER_CLASS: usize = 250;

/// The smoke recipe: the reference optimizer and schedule (see [`Recipe::smoke`]),
/// stopping at [`DEFAULT_TARGET`]. A run of a few hundred steps needs larger LARS steps
/// than the reference's thousands: a trust coefficient of 0.01 (the reference 0.001)
/// and a base LR of 2 at batch 128. Its training crops keep at least
/// [`CROP_MIN_SCALE`] of the image. Its batch, planned and warmup epochs are fitted to
/// the dataset by [`fit_schedule`].
pub fn recipe() -> Recipe {
    Recipe {
        target_accuracy: DEFAULT_TARGET,
        base_lr: 2.0,
        lars_trust_coefficient: 0.01,
        train_epochs: 10,
        crop_min_scale: CROP_MIN_SCALE,
        ..Recipe::smoke()
    }
}

/// The smallest training crop of a smoke run, as a share of the image's area. The
/// reference's 0.10 suits 224² photographs of one object over thousands of steps; on
/// the small images and few steps of a smoke run a tenth of a 48² scan is a stroke or
/// a corner that names no class, so training accuracy stalled near 0.75 while the
/// loss still fell, and evaluation crossed a 0.9 target only in the last epochs.
pub const CROP_MIN_SCALE: f64 = 0.35;

/// The training budget of a smoke run, in images seen per class. A fixed number of
/// epochs fits one dataset only: a set with fewer images per class, or more classes to
/// tell apart, needs more passes for the same number of optimizer steps per class. On
/// the generated dataset (4 × 250 images) this is its 10 epochs.
pub const IMAGES_PER_CLASS: usize = 2_500;
/// The planned epochs stay within these: one pass over a large set is too few for the
/// warmup and the decay, and a tiny set should not loop for ever.
pub const MIN_EPOCHS: u32 = 3;
/// The most epochs a smoke run plans, however small its dataset.
pub const MAX_EPOCHS: u32 = 100;
/// Warmup as a share of the planned epochs: the generated set's one epoch in ten.
pub const WARMUP_SHARE: f64 = 0.1;
/// The fewest steps an epoch of a smoke run takes, when the batch is fitted. At batch
/// 128 a set of 1,400 images is 12 steps an epoch: the two warmup epochs end before
/// the network has learnt anything, batch norm's running statistics (about ten steps
/// of memory) trail weights that move a lot between evaluations, and the whole plan is
/// 200 steps. A smaller batch takes the same images in more, smaller steps.
pub const MIN_STEPS_PER_EPOCH: usize = 24;
/// The smallest batch a fitted smoke run takes: below it batch norm's statistics of one
/// batch are too noisy.
pub const MIN_BATCH: usize = 16;

/// The batch for `train_images`: the largest power of two that still makes
/// [`MIN_STEPS_PER_EPOCH`] steps an epoch, between [`MIN_BATCH`] and `largest`.
pub fn fitted_batch(train_images: usize, largest: usize) -> usize {
    let most = (train_images / MIN_STEPS_PER_EPOCH).max(1);
    let power = 1usize << most.ilog2();
    power.clamp(MIN_BATCH.min(largest), largest.max(1))
}

/// Batch, planned and warmup epochs for `classes` classes and `train_images` training
/// images: the batch from [`fitted_batch`] (the base LR scaled with it, as LARS's
/// linear scaling has it), then a budget of optimizer steps ([`IMAGES_PER_CLASS`] per
/// class) rounded up to whole epochs, with a warmup in proportion. Each is left alone
/// when the run's options set it. Returns what it chose, for the run's findings.
pub fn fit_schedule(
    recipe: &mut Recipe,
    classes: usize,
    train_images: usize,
    options: &Map<String, Value>,
) -> Option<String> {
    let batch_given = options.contains_key("batch_size");
    let epochs_given = options.contains_key("train_epochs");
    let warmup_given = options.contains_key("warmup_epochs");
    if batch_given && epochs_given && warmup_given {
        return None;
    }
    if !batch_given {
        let batch = fitted_batch(train_images, recipe.global_batch_size);
        if options.contains_key("base_lr") {
            recipe.global_batch_size = batch;
        } else {
            recipe.scale_batch(batch);
        }
    }
    let batch = recipe.global_batch_size.max(1);
    let budget_steps = (IMAGES_PER_CLASS * classes.max(1)).div_ceil(batch) as u64;
    let steps_per_epoch = recipe.steps_per_epoch(train_images.max(1)).max(1);
    if !epochs_given {
        let epochs = budget_steps.div_ceil(steps_per_epoch);
        let epochs = epochs.clamp(u64::from(MIN_EPOCHS), u64::from(MAX_EPOCHS)) as u32;
        // A warmup that was asked for is never cut short by the fitted horizon.
        recipe.train_epochs = epochs.max(recipe.warmup_epochs * u32::from(warmup_given));
    }
    if !warmup_given {
        let warmup = (f64::from(recipe.train_epochs) * WARMUP_SHARE).round() as u32;
        recipe.warmup_epochs = warmup.clamp(1, recipe.train_epochs);
    }
    Some(format!(
        "schedule fitted to the dataset: batch {batch} at base LR {}, {} planned epochs of \
         {steps_per_epoch} steps ({} steps, about {IMAGES_PER_CLASS} images seen per class), \
         {} warmup epoch(s); -o batch_size=N, -o train_epochs=N and -o warmup_epochs=N set them",
        recipe.base_lr,
        recipe.train_epochs,
        u64::from(recipe.train_epochs) * steps_per_epoch,
        recipe.warmup_epochs
    ))
}

/// The generated dataset a run with `run_options` trains on, when it names no dataset.
pub fn synth_spec_of(run_options: &serde_json::Map<String, serde_json::Value>) -> SynthSpec {
    let d = SynthSpec::default();
    let n = |spec, default: usize| options::number(run_options, spec, default as f64) as usize;
    SynthSpec {
        classes: n(SYNTH_CLASSES, DEFAULT_CLASSES),
        per_class: n(SYNTH_PER_CLASS, DEFAULT_PER_CLASS),
        val_per_class: n(SYNTH_VAL_PER_CLASS, d.val_per_class),
        size: n(SYNTH_SIZE, d.size),
        ..d
    }
}

/// The generated dataset of `spec` in the run's cache folder, made on first use; older
/// generated datasets go first when the cache's budget needs the room.
fn generated_dataset(ctx: &mut StageContext<'_>, spec: &SynthSpec) -> Result<PathBuf, String> {
    let workspace = &ctx.plan.workspace;
    ctx.progress(
        0.0,
        Some(format!(
            "preparing the generated dataset ({} classes × {} images) in {}",
            spec.classes,
            spec.per_class,
            workspace.cache_dir.display()
        )),
    );
    for removed in synth_cache::prune(
        &workspace.cache_dir,
        workspace.cache_budget,
        synth_cache::estimated_bytes(spec),
        spec,
    ) {
        tracing::info!(folder = %removed.display(), "removed a generated dataset to stay within the cache budget");
    }
    synth_cache::touch(&workspace.cache_dir, spec);
    ensure_synth_dataset(&workspace.cache_dir, spec)
        .map_err(|e| format!("cannot generate the smoke dataset: {e}"))
}

/// Runs the stage: trains the `model` on the plan's dataset (the generated one, made or
/// reused in the cache folder, or the folder given) until it reaches the target top-1 or
/// its epochs run out; fails short of the target or on a diverging loss, errors when the
/// dataset cannot be had, skips when cancelled.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let Some(recipe) = ctx.plan.recipe.clone() else {
        return StageReport::new(NAME)
            .finish_as(Verdict::Error, Some("the run's plan has no recipe".into()));
    };
    let dataset = match &ctx.plan.dataset {
        DatasetPlan::Folder { path } => path.clone(),
        DatasetPlan::Generated { spec, .. } => match generated_dataset(ctx, spec) {
            Ok(root) => root,
            Err(message) => return StageReport::new(NAME).finish_as(Verdict::Error, Some(message)),
        },
        DatasetPlan::None => {
            return StageReport::new(NAME)
                .finish_as(Verdict::Error, Some("the run's plan has no dataset".into()))
        }
    };
    let model = options::text(ctx.options(), MODEL)
        .and_then(ModelChoice::parse)
        .unwrap_or(DEFAULT_MODEL);
    let job = TrainJob {
        stage: NAME,
        result_folder: None,
        dataset,
        recipe,
        model,
        image_size: options::number(ctx.options(), IMAGE_SIZE, DEFAULT_IMAGE_SIZE as f64) as usize,
        loader_threads: ctx
            .options()
            .get(LOADER_THREADS.key)
            .and_then(|v| v.as_u64())
            .map(|t| t as usize),
        may_be_closed: false,
        fit_schedule: Some(fit_schedule),
    };
    training::run(ctx, job)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fitted(classes: usize, images: usize, options: &[(&str, u64)]) -> Recipe {
        let options: Map<String, Value> = options
            .iter()
            .map(|(k, v)| (k.to_string(), Value::from(*v)))
            .collect();
        let mut r = recipe().with_options(&options).unwrap();
        fit_schedule(&mut r, classes, images, &options);
        r
    }

    #[test]
    fn the_generated_dataset_keeps_its_ten_epochs() {
        let r = fitted(DEFAULT_CLASSES, DEFAULT_CLASSES * DEFAULT_PER_CLASS, &[]);
        assert_eq!(
            (r.train_epochs, r.warmup_epochs),
            (recipe().train_epochs, 1)
        );
    }

    #[test]
    fn the_batch_keeps_two_dozen_steps_an_epoch_and_the_lr_follows_it() {
        assert_eq!(fitted_batch(1_000, 128), 32);
        assert_eq!(fitted_batch(1_438, 128), 32);
        assert_eq!(fitted_batch(3_072, 128), 128);
        assert_eq!(fitted_batch(500_000, 128), 128);
        assert_eq!(fitted_batch(500, 128), MIN_BATCH);
        assert_eq!(fitted_batch(10, 8), 8);
        let r = fitted(10, 1_438, &[]);
        assert_eq!(r.global_batch_size, 32);
        assert!((r.base_lr - recipe().base_lr / 4.0).abs() < 1e-12);
        // A batch or an LR given as options is kept.
        let r = fitted(10, 1_438, &[("batch_size", 64)]);
        assert_eq!(r.global_batch_size, 64);
        assert!((r.base_lr - recipe().base_lr / 2.0).abs() < 1e-12);
        let r = fitted(10, 1_438, &[("base_lr", 3)]);
        assert_eq!((r.global_batch_size, r.base_lr), (32, 3.0));
    }

    #[test]
    fn fewer_images_per_class_and_more_classes_get_more_epochs() {
        // Ten classes of 140 images at batch 32: 44 steps an epoch, 782 steps planned.
        let r = fitted(10, 1_400, &[]);
        assert_eq!((r.train_epochs, r.warmup_epochs), (18, 2));
        // A large set still gets a warmup and a decay.
        assert_eq!(fitted(10, 100_000, &[]).train_epochs, MIN_EPOCHS);
        assert_eq!(
            fitted(1_000, 1_000, &[("batch_size", 16)]).train_epochs,
            MAX_EPOCHS
        );
    }

    #[test]
    fn epochs_and_warmup_given_as_options_are_kept() {
        let r = fitted(10, 1_400, &[("train_epochs", 30)]);
        assert_eq!((r.train_epochs, r.warmup_epochs), (30, 3));
        let r = fitted(10, 1_400, &[("warmup_epochs", 0)]);
        assert_eq!((r.train_epochs, r.warmup_epochs), (18, 0));
        let r = fitted(10, 1_400, &[("train_epochs", 7), ("warmup_epochs", 2)]);
        assert_eq!((r.train_epochs, r.warmup_epochs), (7, 2));
    }
}
