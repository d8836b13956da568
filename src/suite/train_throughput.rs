//! The `train-throughput` stage of `acceptance`: timed ResNet-50 training steps on
//! synthetic input, images per second, and the time to train that they imply,
//! compared with the MLPerf v4.0 result of the recognised box.

use serde_json::Value;

use super::gpu_allreduce;
use super::gpu_devices::{self, GpuChoice};
use super::options::{self, TRAIN_BATCH, TRAIN_IMAGE_SIZE, TRAIN_STEPS, TRAIN_WARMUP};
use super::stage::{StageContext, StageReport};
use crate::engine::backend::gpu::GpuBackend;
use crate::engine::backend::half_storage::HalfStorageCpu;
use crate::engine::layers::cross_entropy::RESNET_LABEL_SMOOTHING;
use crate::engine::layers::SoftmaxCrossEntropy;
use crate::engine::optim::LarsConfig;
use crate::engine::parallel::{
    bucket_bytes_from_env, measure_data_parallel_throughput, DataParallel, Replica,
};
use crate::engine::recipe::Recipe;
use crate::engine::train::{
    measure_train_throughput, DeviceOptimizer, ModelChoice, ThroughputReport,
};
use crate::engine::{Backend, CpuBackend, Precision};
use crate::record::{Check, StageResult, Verdict};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "train-throughput";
/// Short on a CPU, where one ResNet-50 step of 32 images takes seconds.
pub const CPU_DEFAULT_STEPS: usize = 3;
/// Untimed warm-up steps on a CPU when `train_warmup` is not given.
pub const CPU_DEFAULT_WARMUP: usize = 1;
/// Images per step on a CPU when `train_batch` is not given.
pub const CPU_DEFAULT_BATCH: usize = 32;
/// On a GPU: the v4.0 tinybox recipe's 256 images per GPU.
pub const GPU_DEFAULT_STEPS: usize = 10;
/// Untimed warm-up steps on a GPU when `train_warmup` is not given.
pub const GPU_DEFAULT_WARMUP: usize = 3;
/// Images per GPU and step when `train_batch` is not given.
pub const GPU_DEFAULT_BATCH: usize = 256;
/// ImageNet's training crop side in pixels; the default of `train_image_size`.
pub const IMAGE_SIDE: usize = 224;
/// Images in ImageNet's training set, which an epoch of the estimate covers.
pub const IMAGENET_TRAIN_IMAGES: u64 = 1_281_167;
/// Epochs a v4.0-recipe run takes to reach 0.759, as the tinybox results did.
pub const EXPECTED_EPOCHS: u64 = 35;
/// How far over its reference time a box may be and still pass.
pub const TOLERANCE: f64 = 1.05;
const CLASSES: usize = 1000;

/// What a box of a SKU reached in MLPerf Training v4.0.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reference {
    /// The SKU's name, as the inventory recognises it.
    pub sku: &'static str,
    /// Its training throughput, in images per second, from its logs.
    pub images_per_s: f64,
    /// Its time to train, in minutes.
    pub minutes: f64,
}

/// The MLPerf Training v4.0 ResNet-50 results of the tinybox SKUs.
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

/// The MLPerf reference of SKU `sku`, `None` for a box with none.
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
    let verdict = Verdict::pass_if(minutes <= limit);
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

/// What a measurement on one device or on all GPUs produced.
struct Measured {
    report: ThroughputReport,
    /// Devices the global batch was spread over.
    devices: usize,
    /// Images per step on each device.
    per_device_batch: usize,
    on_cpu: bool,
    device_name: String,
    collective: Option<String>,
    /// The most device memory any one GPU needed.
    memory: Option<DeviceMemory>,
}

#[derive(Debug, Clone, Copy)]
struct DeviceMemory {
    peak_in_use_bytes: usize,
    peak_reserved_bytes: usize,
    capacity_bytes: u64,
}

impl DeviceMemory {
    fn of(backend: &GpuBackend) -> Self {
        let memory = backend.memory();
        DeviceMemory {
            peak_in_use_bytes: memory.peak_in_use_bytes,
            peak_reserved_bytes: memory.peak_reserved_bytes,
            capacity_bytes: backend.driver().info().memory_bytes,
        }
    }

    /// The GPU needing the most of its memory.
    fn most_of(backends: impl Iterator<Item = DeviceMemory>) -> Option<Self> {
        backends.max_by(|a, b| a.share().total_cmp(&b.share()))
    }

    fn share(&self) -> f64 {
        self.peak_in_use_bytes as f64 / self.capacity_bytes.max(1) as f64
    }
}

/// Above this share of a GPU's memory in use, a larger batch or model would not fit.
const MEMORY_HEADROOM_SHARE: f64 = 0.9;

/// Runs the stage: times `train_steps` ResNet-50 steps (after `train_warmup`) on every GPU,
/// or on the CPU, estimates the time to train ImageNet for [`EXPECTED_EPOCHS`], and on GPUs
/// fails when that is over the SKU's reference time by more than [`TOLERANCE`] (recorded
/// unjudged on the CPU or for a SKU with no reference); errors when a step fails, skips
/// when cancelled.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let choice = match gpu_devices::open(ctx.options()) {
        Ok(c) => c,
        Err(e) => return report.finish_as(Verdict::Error, Some(e)),
    };
    let on_gpu = matches!(choice, GpuChoice::Gpus { .. });
    let n = |spec, default: usize| options::number(ctx.options(), spec, default as f64) as usize;
    let (steps, warmup, batch) = if on_gpu {
        (
            n(TRAIN_STEPS, GPU_DEFAULT_STEPS),
            n(TRAIN_WARMUP, GPU_DEFAULT_WARMUP),
            n(TRAIN_BATCH, GPU_DEFAULT_BATCH),
        )
    } else {
        (
            n(TRAIN_STEPS, CPU_DEFAULT_STEPS),
            n(TRAIN_WARMUP, CPU_DEFAULT_WARMUP),
            n(TRAIN_BATCH, CPU_DEFAULT_BATCH),
        )
    };
    let image_size = n(TRAIN_IMAGE_SIZE, IMAGE_SIDE);
    let recipe = Recipe::mlperf();
    let precision = options::precision(ctx.options());
    let measured = match choice.with_precision(precision) {
        GpuChoice::Cpu { reason } if precision.is_reduced() => {
            report.findings.push(format!(
                "measured on the CPU: {reason}; the CPU emulates {precision} storage by \
                 rounding, so this is slower than f32, not faster"
            ));
            match HalfStorageCpu::new(CpuBackend::new(), precision) {
                Ok(backend) => measure_on_one(
                    ctx,
                    &backend,
                    true,
                    (warmup, steps, batch, image_size),
                    recipe.seed,
                ),
                Err(e) => Err(e.to_string()),
            }
        }
        GpuChoice::Cpu { reason } => {
            report
                .findings
                .push(format!("measured on the CPU: {reason}"));
            measure_on_one(
                ctx,
                &CpuBackend::new(),
                true,
                (warmup, steps, batch, image_size),
                recipe.seed,
            )
        }
        GpuChoice::Gpus { mut backends, .. } if backends.len() == 1 => {
            let backend = backends.remove(0);
            measure_on_one(
                ctx,
                &backend,
                false,
                (warmup, steps, batch, image_size),
                recipe.seed,
            )
            .map(|measured| {
                measured.map(|m| Measured {
                    memory: Some(DeviceMemory::of(&backend)),
                    ..m
                })
            })
        }
        GpuChoice::Gpus { backends, .. } => measure_on_all(
            ctx,
            backends,
            (warmup, steps, batch, image_size),
            recipe.seed,
        ),
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
    let median = measured.report.median_step_s();
    let images_per_s = measured.report.images_per_s();
    let minutes = estimated_minutes(
        median,
        measured.per_device_batch,
        recipe.global_batch_size,
        measured.devices,
        EXPECTED_EPOCHS,
    );
    report.metric("img_per_s", images_per_s, "img/s");
    report.metric("step_ms_median", median * 1000.0, "ms");
    report.metric("batch", measured.report.batch as f64, "images");
    report.metric(
        "per_device_batch",
        measured.per_device_batch as f64,
        "images",
    );
    report.metric("devices", measured.devices as f64, "devices");
    report.metric("image_size", image_size as f64, "px");
    report.metric("timed_steps", steps as f64, "steps");
    report.metric("estimated_time_to_train_min", minutes, "min");
    let sku = sku_of(ctx.hardware.as_ref(), ctx.sku.as_deref());
    if let Some(reference) = reference_for(&sku) {
        report.metric("reference_img_per_s", reference.images_per_s, "img/s");
        report.metric("reference_time_to_train_min", reference.minutes, "min");
    }
    if !measured.on_cpu {
        // The most six devices of this kind could reach if they scaled perfectly: what a
        // single-GPU machine says about a six-GPU box.
        let per_device = images_per_s / measured.devices as f64;
        report.metric("img_per_s_per_device", per_device, "img/s");
        report.metric("linear_6_device_img_per_s", per_device * 6.0, "img/s");
    }
    if image_size != IMAGE_SIDE {
        report.findings.push(format!(
            "measured at {image_size}² instead of {IMAGE_SIDE}²: the estimate is not ImageNet's"
        ));
    }
    if let Some(memory) = measured.memory {
        const GIB: f64 = (1u64 << 30) as f64;
        report.metric(
            "peak_device_memory_in_use_gib",
            memory.peak_in_use_bytes as f64 / GIB,
            "GiB",
        );
        report.metric(
            "peak_device_memory_reserved_gib",
            memory.peak_reserved_bytes as f64 / GIB,
            "GiB",
        );
        report.metric(
            "device_memory_gib",
            memory.capacity_bytes as f64 / GIB,
            "GiB",
        );
        if memory.share() > MEMORY_HEADROOM_SHARE {
            report.findings.push(format!(
                "training at batch {} per GPU needs {:.1} GiB of the GPU's {:.1} GiB: \
                 little room is left",
                measured.per_device_batch,
                memory.peak_in_use_bytes as f64 / GIB,
                memory.capacity_bytes as f64 / GIB
            ));
        }
    }
    if let Some(collective) = &measured.collective {
        report
            .findings
            .push(format!("gradients summed by {collective}"));
    }
    if !measured.on_cpu {
        report.findings.push(match precision {
            Precision::Fp32 => "f32 activations with TF32 GEMMs (the reference trains with fp16 \
                                activations: precision=fp16)"
                .into(),
            p => format!("{p} activations and convolutions, f32 master weights"),
        });
    }
    let (check, summary) = judge(&sku, measured.on_cpu, minutes);
    report.checks.extend(check);
    let message = format!(
        "ResNet-50 on {}: {images_per_s:.1} img/s at batch {} ({:.0} ms/step); \
         {EXPECTED_EPOCHS} epochs at batch {} would take {minutes:.0} min. {summary}",
        measured.device_name,
        measured.report.batch,
        median * 1000.0,
        recipe.global_batch_size
    );
    ctx.progress(1.0, None);
    report.finish(Some(message))
}

/// Progress after each step: warm-up or timed, its time and rate.
fn step_progress<'a, 'b>(
    ctx: &'a mut StageContext<'b>,
    warmup: usize,
    batch: usize,
) -> impl FnMut(usize, usize, f64) + use<'a, 'b> {
    move |done: usize, total: usize, seconds: f64| {
        let phase = if done <= warmup { "warm-up" } else { "timed" };
        ctx.progress(
            done as f64 / total as f64,
            Some(format!(
                "ResNet-50 {phase} step {done}/{total}: {seconds:.2} s, {:.1} img/s",
                batch as f64 / seconds
            )),
        );
    }
}

fn measure_on_one<B: Backend>(
    ctx: &mut StageContext<'_>,
    backend: &B,
    on_cpu: bool,
    (warmup, steps, batch, image_size): (usize, usize, usize, usize),
    seed: u64,
) -> Result<Option<Measured>, String> {
    ctx.progress(
        0.0,
        Some(format!(
            "building ResNet-50 on {} for {warmup} warm-up and {steps} timed steps at batch {batch}",
            backend.name()
        )),
    );
    let mut model = ModelChoice::ResNet50
        .build(backend, CLASSES, image_size, seed)
        .map_err(|e| format!("cannot build ResNet-50: {e}"))?;
    let cancel = ctx.cancel;
    let measured = measure_train_throughput(
        backend,
        &mut model,
        batch,
        image_size,
        warmup,
        steps,
        // A small LR keeps the synthetic steps finite; the time does not depend on it.
        0.01,
        &|| cancel.load(std::sync::atomic::Ordering::Relaxed),
        &mut step_progress(ctx, warmup, batch),
    )
    .map_err(|e| e.to_string())?;
    Ok(measured.map(|report| Measured {
        report,
        devices: 1,
        per_device_batch: batch,
        on_cpu,
        device_name: if on_cpu {
            "the CPU".into()
        } else {
            backend.name()
        },
        collective: None,
        memory: None,
    }))
}

fn measure_on_all(
    ctx: &mut StageContext<'_>,
    backends: Vec<GpuBackend>,
    (warmup, steps, batch, image_size): (usize, usize, usize, usize),
    seed: u64,
) -> Result<Option<Measured>, String> {
    let devices = backends.len();
    ctx.progress(
        0.0,
        Some(format!(
            "building ResNet-50 on {devices} GPUs for {warmup} warm-up and {steps} timed steps \
             at batch {batch} per GPU"
        )),
    );
    let (collective, chosen) = gpu_allreduce::collective_for(&backends)?;
    let mut replicas = Vec::with_capacity(devices);
    for backend in backends {
        let model = ModelChoice::ResNet50
            .build(&backend, CLASSES, image_size, seed)
            .map_err(|e| format!("cannot build ResNet-50 on {}: {e}", backend.name()))?;
        replicas.push(Replica {
            backend,
            model,
            optimizer: DeviceOptimizer::new(LarsConfig::default()),
        });
    }
    let loss_fn = SoftmaxCrossEntropy {
        label_smoothing: RESNET_LABEL_SMOOTHING,
    };
    let mut dp = DataParallel::new(replicas, collective, loss_fn).map_err(|e| e.to_string())?;
    dp.set_gradient_buckets(bucket_bytes_from_env().map_err(|e| e.to_string())?);
    let cancel = ctx.cancel;
    let global = batch * devices;
    let measured = measure_data_parallel_throughput(
        &mut dp,
        global,
        image_size,
        warmup,
        steps,
        0.01,
        &|| cancel.load(std::sync::atomic::Ordering::Relaxed),
        &mut step_progress(ctx, warmup, global),
    )
    .map_err(|e| e.to_string())?;
    let memory = DeviceMemory::most_of(
        dp.replicas_mut()
            .iter()
            .map(|r| DeviceMemory::of(&r.backend)),
    );
    Ok(measured.map(|report| Measured {
        report,
        devices,
        per_device_batch: batch,
        on_cpu: false,
        device_name: format!("{devices} GPUs"),
        collective: Some(chosen),
        memory,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_reported_is_that_of_the_gpu_using_most_of_its_own() {
        let gpu = |in_use_gib: usize, capacity_gib: u64| DeviceMemory {
            peak_in_use_bytes: in_use_gib << 30,
            peak_reserved_bytes: (in_use_gib + 1) << 30,
            capacity_bytes: capacity_gib << 30,
        };
        let fullest = DeviceMemory::most_of([gpu(20, 80), gpu(22, 24), gpu(23, 141)].into_iter())
            .expect("three GPUs");
        assert_eq!(fullest.peak_in_use_bytes, 22 << 30);
        assert!(fullest.share() > MEMORY_HEADROOM_SHARE);
        assert!(gpu(11, 24).share() < MEMORY_HEADROOM_SHARE);
        assert!(DeviceMemory::most_of(std::iter::empty()).is_none());
    }

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
