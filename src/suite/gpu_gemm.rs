//! The `gpu-gemm` stage of `acceptance` and `health`: fp16 and f32 matmul TFLOP/s of every
//! GPU under a few seconds of sustained load, against its model's published peak and the
//! GPU's own recent figures, and how much the products slowed from the start of the load
//! to its end.

use super::gemm_trend;
use super::gpu_devices::model_peak;
use super::options::{self, GPU_GEMM_SECONDS, GPU_GEMM_SIZE, GPU_MIN_FRACTION};
use super::stage::{StageContext, StageReport};
use crate::engine::backend::gpu::driver::MatmulPrecision;
use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices::open_gpus_or_finish;

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "gpu-gemm";
/// The matrix side N when `gpu_gemm_size` is not given.
pub const DEFAULT_SIZE: usize = 8192;
/// Share of the published peak a healthy card reaches on large square matmuls: cuBLAS
/// and rocBLAS reach 60–80 % on these parts; a card far below is throttled or broken.
pub const DEFAULT_MIN_FRACTION: f64 = 0.5;
/// Long enough for the 1 Hz telemetry to see the load and for clocks to settle.
pub const DEFAULT_SECONDS: f64 = 3.0;
const MIN_PRODUCTS: usize = 10;
/// A card whose last products run this much slower than its first is lowering its
/// clocks under load: a finding, since boost clocks legitimately fall a few per cent.
const SLOWDOWN_NOTE: f64 = 0.10;

/// Runs the stage: sustains fp16 and f32 N³ matmuls on every GPU for `gpu_gemm_seconds`
/// each and fails a GPU whose median TFLOP/s is below `gpu_min_fraction` of its model's
/// published peak (recorded unjudged for a model with no known peak); skips on the CPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let n = options::number(ctx.options(), GPU_GEMM_SIZE, DEFAULT_SIZE as f64) as usize;
    let min_fraction = options::number(ctx.options(), GPU_MIN_FRACTION, DEFAULT_MIN_FRACTION);
    let seconds = options::number(ctx.options(), GPU_GEMM_SECONDS, DEFAULT_SECONDS);
    let backends = open_gpus_or_finish!(ctx, report);
    let history = ctx
        .run_dir
        .as_deref()
        .map(|dir| gemm_trend::earlier_figures(dir, NAME))
        .unwrap_or_default();
    let total = backends.len() * 2;
    let mut summary = Vec::new();
    for (i, backend) in backends.iter().enumerate() {
        let driver = backend.driver();
        let info = driver.info().clone();
        let address = info.pci_address.clone();
        let peak = model_peak(&info.name);
        for (j, (precision, label)) in [
            (MatmulPrecision::F16, "fp16"),
            (MatmulPrecision::F32, "f32"),
        ]
        .into_iter()
        .enumerate()
        {
            if ctx.cancelled() {
                return report.finish_as(Verdict::Skip, Some("cancelled".into()));
            }
            ctx.progress(
                (i * 2 + j) as f64 / total as f64,
                Some(format!(
                    "GPU {i} ({}): {label} matmuls {n}³ for {seconds} s",
                    info.name
                )),
            );
            let measured = driver
                .matmul_series(precision, n, MIN_PRODUCTS, seconds)
                .and_then(|series| Ok((series.median_tflops()?, series)));
            let tflops = match measured {
                Ok((t, series)) => {
                    report.metric(&format!("gpu{i}_{label}_load_s"), series.seconds(), "s");
                    if let Some(slowdown) = series.slowdown() {
                        report.metric(&format!("gpu{i}_{label}_slowdown"), slowdown, "ratio");
                        if slowdown > SLOWDOWN_NOTE {
                            report.findings.push(format!(
                                "GPU {i} ({}): {label} matmuls ran {:.0} % slower at the end of \
                                 {:.1} s of load than at its start (clocks lowered under load: \
                                 see the telemetry for temperature and throttling)",
                                address.as_deref().unwrap_or(&info.name),
                                slowdown * 100.0,
                                series.seconds()
                            ));
                        }
                    }
                    t
                }
                Err(e) => {
                    report.checks.push(Check {
                        name: format!("{label} matmul"),
                        subject: address.clone(),
                        expected: "completes".into(),
                        found: e.to_string(),
                        verdict: Verdict::Fail,
                    });
                    continue;
                }
            };
            report.device_metric(
                &format!("gpu{i}_{label}_tflops"),
                tflops,
                "TFLOP/s",
                address.as_deref(),
            );
            summary.push(format!("GPU {i} {label} {tflops:.1}"));
            if let Some(subject) = address.as_deref() {
                let earlier = history
                    .get(&(subject.to_string(), label.to_string()))
                    .map_or(&[][..], Vec::as_slice);
                report
                    .checks
                    .extend(gemm_trend::judge(subject, label, tflops, earlier));
            }
            let Some(peak) = peak else {
                continue;
            };
            let peak_tflops = match precision {
                MatmulPrecision::F16 => peak.fp16_tflops,
                MatmulPrecision::F32 => peak.f32_tflops,
            };
            let fraction = tflops / peak_tflops;
            report.metric(
                &format!("gpu{i}_{label}_fraction_of_peak"),
                fraction,
                "ratio",
            );
            report.checks.push(Check {
                name: format!("{label} matmul TFLOP/s"),
                subject: address.clone(),
                expected: format!(
                    "≥ {:.1} ({:.0} % of the {}'s {peak_tflops} peak)",
                    peak_tflops * min_fraction,
                    min_fraction * 100.0,
                    peak.name
                ),
                found: format!("{tflops:.1} ({:.0} %)", fraction * 100.0),
                verdict: Verdict::pass_if(fraction >= min_fraction),
            });
        }
        if peak.is_none() {
            report.findings.push(format!(
                "GPU {i} ({}): no published peak known for this model; figures recorded",
                info.name
            ));
        }
    }
    ctx.progress(1.0, None);
    report.finish(Some(format!(
        "{n}³ matmuls, TFLOP/s: {}",
        summary.join(", ")
    )))
}
