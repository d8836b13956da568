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

/// The smoke recipe: the reference optimizer and schedule at batch 128 (see
/// [`Recipe::smoke`]), stopping at [`DEFAULT_TARGET`]. A run of about eighty steps
/// needs larger LARS steps than the reference's thousands: a trust coefficient of 0.01
/// (the reference 0.001) and a base LR of 2. Its planned and warmup epochs are the
/// generated dataset's; [`fit_schedule`] replaces them with the given dataset's.
pub fn recipe() -> Recipe {
    Recipe {
        target_accuracy: DEFAULT_TARGET,
        base_lr: 2.0,
        lars_trust_coefficient: 0.01,
        train_epochs: 10,
        ..Recipe::smoke()
    }
}

/// The training budget of a smoke run, in images seen per class. A fixed number of
/// epochs fits one dataset only: a set with fewer images per class, or more classes to
/// tell apart, needs more passes for the same number of optimizer steps per class. On
/// the generated dataset (4 × 250 images, batch 128) this is its 10 epochs.
pub const IMAGES_PER_CLASS: usize = 2_500;
/// The planned epochs stay within these: one pass over a large set is too few for the
/// warmup and the decay, and a tiny set should not loop for ever.
pub const MIN_EPOCHS: u32 = 3;
/// The most epochs a smoke run plans, however small its dataset.
pub const MAX_EPOCHS: u32 = 100;
/// Warmup as a share of the planned epochs: the generated set's one epoch in ten.
pub const WARMUP_SHARE: f64 = 0.1;

/// Planned and warmup epochs for `classes` classes and `train_images` training images at
/// the recipe's batch: a budget of optimizer steps ([`IMAGES_PER_CLASS`] per class),
/// rounded up to whole epochs, with a warmup in proportion. Each is left alone when the
/// run's options set it. Returns what it chose, for the run's findings.
pub fn fit_schedule(
    recipe: &mut Recipe,
    classes: usize,
    train_images: usize,
    options: &Map<String, Value>,
) -> Option<String> {
    let epochs_given = options.contains_key("train_epochs");
    let warmup_given = options.contains_key("warmup_epochs");
    if epochs_given && warmup_given {
        return None;
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
        "schedule fitted to the dataset: {} planned epochs of {steps_per_epoch} steps \
         ({} steps, about {IMAGES_PER_CLASS} images seen per class), {} warmup epoch(s); \
         -o train_epochs=N and -o warmup_epochs=N set them",
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
    fn fewer_images_per_class_and_more_classes_get_more_epochs() {
        // Ten classes of 140 images: eleven steps an epoch, 196 steps planned.
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
