//! `tinyperf gpu check`: the GPU backend checked op by op and over one training step
//! against the CPU backend, in f32 and with 16-bit activations against the CPU reference
//! with the same storage, then measured (GEMM TFLOPS, ResNet-50 training throughput in
//! f32 and fp16), on every GPU of the machine.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;

use super::args::{GpuCheckArgs, GpuCommand};
use super::gpu_compile;
use super::gpu_floors;
use super::UsageError;
use crate::engine::backend::crosscheck::{
    self, OpComparison, StepShape, StepTolerances, Tolerances, SIXTEEN_BIT_STEP,
};
use crate::engine::backend::gpu::cache::KernelCache;
use crate::engine::backend::gpu::cuda::{CudaDriver, MathMode};
use crate::engine::backend::gpu::driver::{DeviceInfo, GpuDriver, MatmulPrecision};
use crate::engine::backend::gpu::{GpuBackend, Profile};
use crate::engine::backend::half_storage::HalfStorageCpu;
use crate::engine::backend::select::{self, BackendKind, GpuRuntime};
use crate::engine::parallel::{gpu_all_reduce, measure_all_reduce_bandwidth};
use crate::engine::train::{measure_train_throughput, ModelChoice};
use crate::engine::{CpuBackend, Precision};

/// The training-step comparison: ResNet-50 at a size the CPU reference does in seconds.
const STEP_BATCH: usize = 4;
const STEP_IMAGE: usize = 128;
const STEP_CLASSES: usize = 1000;

/// `tinyperf gpu check|compile|floors`: runs the subcommand and returns its exit status
/// (0 when every check or compilation passed, 1 otherwise); a bad option is a usage
/// error, a missing GPU or compiler a plain error.
pub fn main(command: &GpuCommand) -> anyhow::Result<i32> {
    match command {
        GpuCommand::Check(args) => check(args),
        GpuCommand::Compile(args) => gpu_compile::compile(args),
        GpuCommand::Floors(args) => gpu_floors::floors(args),
    }
}

#[derive(Debug, Serialize)]
struct DeviceReport {
    device: DeviceInfo,
    kernel_setup_s: f64,
    ops: Vec<OpComparison>,
    training_step: Vec<OpComparison>,
    /// The same with activations stored in fp16 and in bf16, the step on a small ResNet.
    ops_16_bit: Vec<OpComparison>,
    training_steps_16_bit: Vec<OpComparison>,
    matmul: Vec<MatmulFigure>,
    /// Training throughput in f32 and with fp16 activations.
    throughput: Vec<ThroughputFigure>,
    /// (kernel or GEMM, calls, seconds) over one profiled training step.
    profile: Vec<(String, u64, f64)>,
    /// The collective a data-parallel run on these devices would use.
    all_reduce: Option<String>,
    errors: Vec<String>,
    passed: bool,
}

impl DeviceReport {
    /// The report of `device` before any check has run: nothing measured, not passed,
    /// its setup time counted from `started`.
    fn checked_nothing(device: DeviceInfo, started: Instant) -> DeviceReport {
        DeviceReport {
            device,
            kernel_setup_s: started.elapsed().as_secs_f64(),
            ops: vec![],
            training_step: vec![],
            ops_16_bit: vec![],
            training_steps_16_bit: vec![],
            matmul: vec![],
            throughput: vec![],
            profile: vec![],
            all_reduce: None,
            errors: vec![],
            passed: false,
        }
    }
}

#[derive(Debug, Serialize)]
struct MatmulFigure {
    precision: MatmulPrecision,
    /// How the matmul ran: `fp16` operands, f32 on `tf32` tensor cores, or `strict` f32.
    mode: &'static str,
    n: usize,
    tflops: f64,
}

#[derive(Debug, Serialize)]
struct ThroughputFigure {
    model: &'static str,
    batch: usize,
    image_size: usize,
    precision: String,
    img_per_s: f64,
    step_ms_median: f64,
    step_ms: Vec<f64>,
    peak_memory_in_use_gib: f64,
    peak_memory_reserved_gib: f64,
}

fn check(args: &GpuCheckArgs) -> anyhow::Result<i32> {
    let kind: BackendKind = args.backend.parse().map_err(UsageError)?;
    let precisions = throughput_precisions(args)?;
    if kind == BackendKind::Cpu {
        return Err(UsageError("gpu check needs a GPU backend: auto, cuda or hip".into()).into());
    }
    let (runtime, count) = match select::resolve(kind) {
        Ok(Some(found)) => found,
        Ok(None) => {
            let why = |r: GpuRuntime| match r.device_count() {
                Ok(n) => format!("{n} device(s)"),
                Err(e) => e.to_string(),
            };
            anyhow::bail!(
                "no GPU to check: CUDA: {}; HIP: {}",
                why(GpuRuntime::Cuda),
                why(GpuRuntime::Hip)
            );
        }
        Err(e) => anyhow::bail!("no {kind} GPU to check: {e}"),
    };
    let devices: Vec<usize> = match args.device {
        Some(d) if d >= count => {
            return Err(UsageError(format!(
                "device {d}: the {} runtime sees {count}",
                runtime.name()
            ))
            .into())
        }
        Some(d) => vec![d],
        None => (0..count).collect(),
    };
    println!(
        "tinyperf gpu check: {} runtime, {count} device(s)",
        runtime.name()
    );
    let cache = KernelCache::from_environment();
    if let Some(dir) = cache.dir() {
        println!("kernel cache: {}", dir.display());
    }
    let cpu = CpuBackend::new();
    let mut reports = Vec::new();
    for ordinal in devices {
        reports.push(if args.throughput_only {
            throughput_only(args, &precisions, runtime, ordinal, &cache)
        } else {
            check_device(args, &precisions, runtime, ordinal, &cache, &cpu)
        });
    }
    if let Some(path) = &args.json_out {
        let json = serde_json::to_vec_pretty(&reports)?;
        std::fs::write(path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    let passed = reports.iter().all(|r| r.passed);
    println!(
        "\n{}",
        if passed {
            "gpu check PASSED"
        } else {
            "gpu check FAILED"
        }
    );
    Ok(if passed { 0 } else { 1 })
}

/// A driver whose f32 GEMMs are exact f32, for the correctness checks.
fn strict_driver(
    runtime: GpuRuntime,
    ordinal: usize,
    cache: &KernelCache,
) -> Result<Arc<dyn GpuDriver>, crate::engine::backend::gpu::driver::DriverError> {
    match runtime {
        GpuRuntime::Cuda => Ok(Arc::new(CudaDriver::open(
            ordinal,
            cache,
            MathMode::Strict,
        )?)),
        // rocBLAS has no TF32 mode on these parts: its f32 GEMMs are already strict.
        GpuRuntime::Hip => runtime.open(ordinal, cache),
    }
}

/// The `--precision` list, f32 and fp16 when none is given.
fn throughput_precisions(args: &GpuCheckArgs) -> anyhow::Result<Vec<Precision>> {
    if args.precisions.is_empty() {
        return Ok(vec![Precision::Fp32, Precision::Fp16]);
    }
    let mut out = Vec::new();
    for name in &args.precisions {
        let p: Precision = name
            .parse()
            .map_err(|e| UsageError(format!("--precision: {e}")))?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    Ok(out)
}

/// What a report says of a device it could not open or describe.
fn unknown_device(ordinal: usize) -> DeviceInfo {
    DeviceInfo {
        ordinal,
        name: "unknown".into(),
        arch: "unknown".into(),
        pci_address: None,
        memory_bytes: 0,
        multiprocessors: 0,
    }
}

/// A report with only the training throughput in each precision.
fn throughput_only(
    args: &GpuCheckArgs,
    precisions: &[Precision],
    runtime: GpuRuntime,
    ordinal: usize,
    cache: &KernelCache,
) -> DeviceReport {
    let started = Instant::now();
    let mut errors = Vec::new();
    let mut throughput = Vec::new();
    let mut info = unknown_device(ordinal);
    match runtime.open(ordinal, cache) {
        Ok(fast) => {
            info = fast.info().clone();
            println!(
                "\ndevice {ordinal}: {} ({}); convolutions: {}",
                info.name,
                info.arch,
                fast.dnn_library()
                    .unwrap_or_else(|| "im2col + BLAS".to_string())
            );
            let backend = GpuBackend::new(fast);
            measure_training(&backend, precisions, args, &mut throughput, &mut errors);
        }
        Err(e) => errors.push(format!("open: {e}")),
    }
    for e in &errors {
        println!("  ERROR {e}");
    }
    let _ = std::io::stdout().flush();
    DeviceReport {
        passed: errors.is_empty() && !throughput.is_empty(),
        throughput,
        errors,
        ..DeviceReport::checked_nothing(info, started)
    }
}

/// Training throughput on `backend` in each of `precisions`, printed and kept; a failed
/// measurement goes into `errors`.
fn measure_training(
    backend: &GpuBackend,
    precisions: &[Precision],
    args: &GpuCheckArgs,
    throughput: &mut Vec<ThroughputFigure>,
    errors: &mut Vec<String>,
) {
    for &precision in precisions {
        match train_throughput(&backend.with_precision(precision), args) {
            Ok(t) => {
                print_throughput(&t);
                throughput.push(t);
            }
            Err(e) => errors.push(format!("training throughput ({precision}): {e}")),
        }
    }
}

fn print_throughput(t: &ThroughputFigure) {
    println!(
        "\nResNet-50 training, batch {} at {}² ({}): {:.0} img/s, median step {:.1} ms, \
         peak device memory {:.1} GiB in use ({:.1} GiB held)",
        t.batch,
        t.image_size,
        t.precision,
        t.img_per_s,
        t.step_ms_median,
        t.peak_memory_in_use_gib,
        t.peak_memory_reserved_gib
    );
}

fn check_device(
    args: &GpuCheckArgs,
    precisions: &[Precision],
    runtime: GpuRuntime,
    ordinal: usize,
    cache: &KernelCache,
    cpu: &CpuBackend,
) -> DeviceReport {
    let mut errors = Vec::new();
    let started = Instant::now();
    let strict = match strict_driver(runtime, ordinal, cache) {
        Ok(d) => d,
        Err(e) => {
            println!("\ndevice {ordinal}: cannot open: {e}");
            return DeviceReport {
                errors: vec![format!("open: {e}")],
                ..DeviceReport::checked_nothing(unknown_device(ordinal), started)
            };
        }
    };
    let kernel_setup_s = started.elapsed().as_secs_f64();
    let info = strict.info().clone();
    println!(
        "\ndevice {ordinal}: {} ({}, {} multiprocessors, {:.1} GiB) at {}; kernels ready in {:.2} s; \
         convolutions: {}",
        info.name,
        info.arch,
        info.multiprocessors,
        info.memory_bytes as f64 / (1u64 << 30) as f64,
        info.pci_address.as_deref().unwrap_or("?"),
        kernel_setup_s,
        strict
            .dnn_library()
            .unwrap_or_else(|| "im2col + BLAS".to_string())
    );
    let gpu = GpuBackend::new(strict.clone());
    let strict_tol = Tolerances {
        exact: 1e-5,
        gemm: 1e-5,
    };
    let ops = crosscheck::check_ops(&gpu, cpu, 2024, strict_tol).unwrap_or_else(|e| {
        errors.push(format!("op checks: {e}"));
        vec![]
    });
    print_comparisons("kernels against the CPU backend (f32)", &ops);
    let step_started = Instant::now();
    let training_step = crosscheck::check_training_step(
        &gpu,
        cpu,
        ModelChoice::ResNet50,
        STEP_BATCH,
        STEP_IMAGE,
        STEP_CLASSES,
        StepTolerances::default(),
    )
    .unwrap_or_else(|e| {
        errors.push(format!("training step: {e}"));
        vec![]
    });
    print_comparisons(
        &format!(
            "one ResNet-50 training step, batch {STEP_BATCH} at {STEP_IMAGE}², against the CPU ({:.1} s)",
            step_started.elapsed().as_secs_f64()
        ),
        &training_step,
    );
    let (ops_16_bit, training_steps_16_bit) = check_16_bit(&gpu, &mut errors);
    drop(gpu);

    let mut matmul = Vec::new();
    let mut throughput = Vec::new();
    let mut profile = Vec::new();
    let mut all_reduce = None;
    if !args.quick {
        match runtime.open(ordinal, cache) {
            Ok(fast) => {
                let mode = if runtime == GpuRuntime::Cuda {
                    "tf32"
                } else {
                    "strict"
                };
                for precision in [MatmulPrecision::F16, MatmulPrecision::F32] {
                    match fast.matmul_tflops(precision, args.gemm_size, 10) {
                        Ok(tflops) => matmul.push(MatmulFigure {
                            precision,
                            mode,
                            n: args.gemm_size,
                            tflops,
                        }),
                        Err(e) => errors.push(format!("matmul {precision:?}: {e}")),
                    }
                }
                if let Ok(strict_tflops) =
                    strict.matmul_tflops(MatmulPrecision::F32, args.gemm_size, 5)
                {
                    matmul.push(MatmulFigure {
                        precision: MatmulPrecision::F32,
                        mode: "strict",
                        n: args.gemm_size,
                        tflops: strict_tflops,
                    });
                }
                println!("\nmatmul {}³", args.gemm_size);
                for m in &matmul {
                    println!(
                        "  {:<4} {:<7} {:>9.1} TFLOP/s",
                        format!("{:?}", m.precision),
                        m.mode,
                        m.tflops
                    );
                }
                drop(strict);
                let backend = GpuBackend::new(fast);
                measure_training(&backend, precisions, args, &mut throughput, &mut errors);
                let (collective, chosen) = gpu_all_reduce(std::slice::from_ref(&backend));
                match measure_all_reduce_bandwidth(
                    collective.as_ref(),
                    std::slice::from_ref(&backend),
                    64 << 20,
                    2,
                    5,
                ) {
                    Ok(bw) => {
                        println!(
                            "\nall-reduce of 256 MiB on this device alone ({chosen}): {:.1} GB/s algorithm bandwidth",
                            bw.algbw_gbps()
                        );
                        all_reduce = Some(chosen);
                    }
                    Err(e) => errors.push(format!("all-reduce ({chosen}): {e}")),
                }
                drop(collective);
                if args.profile {
                    for precision in [Precision::Fp32, Precision::Fp16] {
                        match profile_step(&backend.with_precision(precision), args.batch) {
                            Ok(rows) => {
                                let total: f64 = rows.iter().map(|r| r.2).sum();
                                println!("\nwhere one {precision} training step's device time goes ({:.1} ms in all, synchronised per launch)", total * 1e3);
                                for (name, calls, secs) in rows.iter().take(20) {
                                    println!(
                                        "  {name:<24} {calls:>6} calls {:>9.2} ms {:>5.1} %",
                                        secs * 1e3,
                                        secs / total * 100.0
                                    );
                                }
                                profile.extend(rows.into_iter().map(|(name, calls, secs)| {
                                    (format!("{precision} {name}"), calls, secs)
                                }));
                            }
                            Err(e) => errors.push(format!("profile ({precision}): {e}")),
                        }
                    }
                }
            }
            Err(e) => errors.push(format!("open for measurements: {e}")),
        }
    }
    for e in &errors {
        println!("  ERROR {e}");
    }
    let all_passed =
        |results: &[OpComparison]| !results.is_empty() && results.iter().all(|c| c.passed);
    let passed = errors.is_empty()
        && all_passed(&ops)
        && all_passed(&training_step)
        && all_passed(&ops_16_bit)
        && all_passed(&training_steps_16_bit);
    let _ = std::io::stdout().flush();
    DeviceReport {
        device: info,
        kernel_setup_s,
        ops,
        training_step,
        ops_16_bit,
        training_steps_16_bit,
        matmul,
        throughput,
        profile,
        all_reduce,
        errors,
        passed,
    }
}

/// The kernels and a training step with 16-bit activations, against the CPU reference
/// storing them the same way, in fp16 and in bf16 (the step is the small
/// [`SIXTEEN_BIT_STEP`], whose disagreement a wrong kernel cannot hide in).
fn check_16_bit(
    gpu: &GpuBackend,
    errors: &mut Vec<String>,
) -> (Vec<OpComparison>, Vec<OpComparison>) {
    let (mut ops, mut steps) = (Vec::new(), Vec::new());
    let label = |precision: Precision, results: Vec<OpComparison>| {
        results.into_iter().map(move |mut r| {
            r.op = format!("{precision} {}", r.op);
            r
        })
    };
    for precision in [Precision::Fp16, Precision::Bf16] {
        let reference = match HalfStorageCpu::new(CpuBackend::new(), precision) {
            Ok(r) => r,
            Err(e) => {
                errors.push(e.to_string());
                continue;
            }
        };
        let test = gpu.with_precision(precision);
        let tol = Tolerances::sixteen_bit(precision);
        match crosscheck::check_ops(&test, &reference, 2024, tol) {
            Ok(results) => {
                print_comparisons(
                    &format!("kernels against the CPU reference, {precision} activations"),
                    &results,
                );
                ops.extend(label(precision, results));
            }
            Err(e) => errors.push(format!("{precision} op checks: {e}")),
        }
        let StepShape {
            model,
            batch,
            image_size,
            classes,
        } = SIXTEEN_BIT_STEP;
        let started = Instant::now();
        match crosscheck::check_training_step(
            &test,
            &reference,
            model,
            batch,
            image_size,
            classes,
            StepTolerances::sixteen_bit(),
        ) {
            Ok(results) => {
                print_comparisons(
                    &format!(
                        "one {} training step, batch {batch} at {image_size}², {precision} activations, against the CPU reference ({:.1} s)",
                        model.name(),
                        started.elapsed().as_secs_f64()
                    ),
                    &results,
                );
                steps.extend(label(precision, results));
            }
            Err(e) => errors.push(format!("{precision} training step: {e}")),
        }
    }
    (ops, steps)
}

/// Two training steps with every kernel timed: where the step's time goes.
fn profile_step(backend: &GpuBackend, batch: usize) -> anyhow::Result<Vec<(String, u64, f64)>> {
    let profile = Arc::new(Profile::default());
    let profiled = backend.profiled(profile.clone());
    let mut model = ModelChoice::ResNet50.build(&profiled, 1000, 224, 1)?;
    let mut first = true;
    measure_train_throughput(
        &profiled,
        &mut model,
        batch,
        224,
        1,
        1,
        0.1,
        &|| false,
        &mut |_, _, _| {
            if first {
                profile.clear();
                first = false;
            }
        },
    )?;
    Ok(profile.report())
}

fn train_throughput(backend: &GpuBackend, args: &GpuCheckArgs) -> anyhow::Result<ThroughputFigure> {
    let image_size = 224;
    backend.reset_memory()?;
    let mut model = ModelChoice::ResNet50.build(backend, 1000, image_size, 1)?;
    let report = measure_train_throughput(
        backend,
        &mut model,
        args.batch,
        image_size,
        args.warmup,
        args.steps,
        0.1,
        &|| false,
        &mut |_, _, _| {},
    )?
    .context("the measurement was cancelled")?;
    let memory = backend.memory();
    let gib = |bytes: usize| bytes as f64 / (1u64 << 30) as f64;
    Ok(ThroughputFigure {
        model: "resnet50",
        batch: args.batch,
        image_size,
        precision: match backend.precision() {
            Precision::Fp32 => "f32 activations, TF32 GEMMs".to_string(),
            p => format!("{p} activations, f32 master weights"),
        },
        img_per_s: report.images_per_s(),
        step_ms_median: report.median_step_s() * 1e3,
        step_ms: report.step_seconds.iter().map(|s| s * 1e3).collect(),
        peak_memory_in_use_gib: gib(memory.peak_in_use_bytes),
        peak_memory_reserved_gib: gib(memory.peak_reserved_bytes),
    })
}

fn print_comparisons(title: &str, results: &[OpComparison]) {
    println!("\n{title}");
    println!(
        "  {:<34} {:<16} {:>9} {:>11} {:>11} {:>9}  ok",
        "op", "output", "elements", "worst abs", "relative", "tolerance"
    );
    for r in results {
        println!(
            "  {:<34} {:<16} {:>9} {:>11.3e} {:>11.3e} {:>9.0e}  {}",
            r.op,
            truncate(&r.output, 16),
            r.elements,
            r.worst_abs,
            r.relative,
            r.tolerance,
            if r.passed { "yes" } else { "NO" }
        );
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n - 1).chain(std::iter::once('…')).collect()
    }
}
