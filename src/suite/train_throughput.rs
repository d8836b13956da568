//! The `train-throughput` stage of `acceptance`: timed ResNet-50 training steps on
//! synthetic input, images per second, and the time to train that they imply,
//! compared with the MLPerf v4.0 result of the recognised box.

use serde_json::Value;

use super::options::{self, TRAIN_BATCH, TRAIN_IMAGE_SIZE, TRAIN_STEPS, TRAIN_WARMUP};
use super::record::{Check, StageResult, Verdict};
use super::stage::{StageContext, StageReport};
use crate::engine::recipe::Recipe;
use crate::engine::train::{measure_train_throughput, ModelChoice};
use crate::engine::CpuBackend;

pub const NAME: &str = "train-throughput";
/// Short on a CPU, where one ResNet-50 step of 32 images takes seconds.
pub const CPU_DEFAULT_STEPS: usize = 3;
pub const CPU_DEFAULT_WARMUP: usize = 1;
pub const CPU_DEFAULT_BATCH: usize = 32;
pub const IMAGE_SIDE: usize = 224;
pub const IMAGENET_TRAIN_IMAGES: u64 = 1_281_167;
/// Epochs a v4.0-recipe run takes to reach 0.759, as the tinybox results did.
pub const EXPECTED_EPOCHS: u64 = 35;
/// How far over its reference time a box may be and still pass.
pub const TOLERANCE: f64 = 1.05;
const CLASSES: usize = 1000;

/// What a box of a SKU reached in MLPerf Training v4.0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reference {
    pub sku: &'static str,
    pub images_per_s: f64,
    pub minutes: f64,
}

pub const REFERENCES: &[Reference] = &[
    Reference {
        sku: "tinybox-green",
        images_per_s: 6350.0,
        minutes: 122.08,
    },
    Reference {
        sku: "tinybox-red",
        images_per_s: 4700.0,
        minutes: 167.15,
    },
];

pub fn reference_for(sku: &str) -> Option<&'static Reference> {
    REFERENCES.iter().find(|r| r.sku == sku)
}

/// Minutes to train ImageNet for `expected_epochs` at `global_batch`, from the median
/// step time of `measured_batch` images on one device, scaled linearly to the global
/// batch spread over `devices`.
pub fn estimated_minutes(
    median_step_s: f64,
    measured_batch: usize,
    global_batch: usize,
    devices: usize,
    expected_epochs: u64,
) -> f64 {
    let steps_per_epoch = IMAGENET_TRAIN_IMAGES.div_ceil(global_batch.max(1) as u64);
    let per_device = global_batch as f64 / devices.max(1) as f64;
    let step_s = median_step_s * per_device / measured_batch.max(1) as f64;
    (steps_per_epoch * expected_epochs) as f64 * step_s / 60.0
}

/// How the measured estimate compares with the box's reference. The CPU backend is
/// never compared: its figure is recorded for what it is.
pub fn judge(sku: &str, on_cpu: bool, minutes: f64) -> (Option<Check>, String) {
    let Some(reference) = reference_for(sku) else {
        return (
            None,
            format!("{sku}: no MLPerf reference for this box; estimate recorded"),
        );
    };
    let limit = reference.minutes * TOLERANCE;
    if on_cpu {
        return (
            None,
            format!(
                "measured on the CPU backend: not compared with {sku}'s {:.2} min \
                 ({:.0} img/s) reference",
                reference.minutes, reference.images_per_s
            ),
        );
    }
    let verdict = if minutes <= limit {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    (
        Some(Check {
            name: "estimated ResNet-50 time to train".into(),
            subject: None,
            expected: format!(
                "≤ {limit:.1} min ({sku} v4.0: {:.2} min + 5 %)",
                reference.minutes
            ),
            found: format!("{minutes:.1} min"),
            verdict,
        }),
        format!(
            "estimated {minutes:.1} min against {sku}'s {:.2} min",
            reference.minutes
        ),
    )
}

fn sku_of(hardware: Option<&Value>, override_sku: Option<&str>) -> String {
    override_sku
        .map(str::to_string)
        .or_else(|| {
            hardware
                .and_then(|h| h.get("sku"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .unwrap_or_else(|| crate::inventory::UNRECOGNISED.to_string())
}

pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let n = |spec, default: usize| options::number(ctx.options, spec, default as f64) as usize;
    let steps = n(TRAIN_STEPS, CPU_DEFAULT_STEPS);
    let warmup = n(TRAIN_WARMUP, CPU_DEFAULT_WARMUP);
    let batch = n(TRAIN_BATCH, CPU_DEFAULT_BATCH);
    let image_size = n(TRAIN_IMAGE_SIZE, IMAGE_SIDE);
    ctx.progress(
        0.0,
        Some(format!(
            "building ResNet-50 for {warmup} warm-up and {steps} timed steps at batch {batch}"
        )),
    );
    let backend = CpuBackend::new();
    let recipe = Recipe::mlperf();
    let mut model = match ModelChoice::ResNet50.build(&backend, CLASSES, image_size, recipe.seed) {
        Ok(m) => m,
        Err(e) => {
            return report.finish_as(Verdict::Error, Some(format!("cannot build ResNet-50: {e}")))
        }
    };
    let cancel = ctx.cancel;
    let measured = {
        let mut after_step = |done: usize, total: usize, seconds: f64| {
            let phase = if done <= warmup { "warm-up" } else { "timed" };
            ctx.progress(
                done as f64 / total as f64,
                Some(format!(
                    "ResNet-50 {phase} step {done}/{total}: {seconds:.2} s, {:.1} img/s",
                    batch as f64 / seconds
                )),
            );
        };
        measure_train_throughput(
            &backend,
            &mut model,
            batch,
            image_size,
            warmup,
            steps,
            // A small LR keeps the synthetic steps finite; the time does not depend on it.
            0.01,
            &|| cancel.load(std::sync::atomic::Ordering::Relaxed),
            &mut after_step,
        )
    };
    let measured = match measured {
        Ok(Some(m)) => m,
        Ok(None) => return report.finish_as(Verdict::Skip, Some("cancelled".into())),
        Err(e) => {
            return report.finish_as(
                Verdict::Error,
                Some(format!("ResNet-50 training step failed: {e}")),
            )
        }
    };
    let median = measured.median_step_s();
    let images_per_s = measured.images_per_s();
    let minutes = estimated_minutes(median, batch, recipe.global_batch_size, 1, EXPECTED_EPOCHS);
    report.metric("img_per_s", images_per_s, "img/s");
    report.metric("step_ms_median", median * 1000.0, "ms");
    report.metric("batch", batch as f64, "images");
    report.metric("image_size", image_size as f64, "px");
    report.metric("timed_steps", steps as f64, "steps");
    report.metric("estimated_time_to_train_min", minutes, "min");
    let sku = sku_of(ctx.hardware.as_ref(), ctx.sku.as_deref());
    if let Some(reference) = reference_for(&sku) {
        report.metric("reference_img_per_s", reference.images_per_s, "img/s");
        report.metric("reference_time_to_train_min", reference.minutes, "min");
    }
    if image_size != IMAGE_SIDE {
        report.findings.push(format!(
            "measured at {image_size}² instead of {IMAGE_SIDE}²: the estimate is not ImageNet's"
        ));
    }
    let (check, summary) = judge(&sku, true, minutes);
    report.checks.extend(check);
    let message = format!(
        "ResNet-50 on the CPU: {images_per_s:.1} img/s at batch {batch} ({:.0} ms/step); \
         {EXPECTED_EPOCHS} epochs at batch {} would take {minutes:.0} min. {summary}",
        median * 1000.0,
        recipe.global_batch_size
    );
    ctx.progress(1.0, None);
    report.finish(Some(message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_scales_step_time_to_the_global_batch() {
        // 835 steps of 1536 per epoch; at 1536/6 = 256 per device and 40 ms per 256
        // images, 35 epochs take 835·35·0.04 s.
        let m = estimated_minutes(0.04, 256, 1536, 6, 35);
        assert!((m - 835.0 * 35.0 * 0.04 / 60.0).abs() < 1e-9, "{m}");
        // Measuring 32 images per step on one device scales by 1536/32.
        let cpu = estimated_minutes(4.5, 32, 1536, 1, 35);
        assert!((cpu - 835.0 * 35.0 * 4.5 * 48.0 / 60.0).abs() < 1e-6);
    }

    #[test]
    fn only_a_recognised_box_off_the_cpu_is_judged() {
        let (check, msg) = judge("tinybox-green", false, 120.0);
        assert_eq!(check.unwrap().verdict, Verdict::Pass);
        assert!(msg.contains("122.08"));
        let (check, _) = judge("tinybox-red", false, 176.0);
        assert_eq!(check.unwrap().verdict, Verdict::Fail);
        let (check, msg) = judge("tinybox-green", true, 1e6);
        assert!(check.is_none());
        assert!(msg.contains("CPU"));
        let (check, msg) = judge("unrecognised", false, 1.0);
        assert!(check.is_none() && msg.contains("no MLPerf reference"));
    }
}
