//! The `gpu-allreduce` stage of `acceptance`: all-reduce bus bandwidth over every GPU of
//! the box, the way nccl-tests reports it, against the box's factory requirement.

use super::options::{self, ALLREDUCE_MIB, ALLREDUCE_MIN_GBPS};
use super::stage::{StageContext, StageReport};
use crate::engine::backend::gpu::GpuBackend;
use crate::engine::parallel::{gpu_all_reduce, measure_all_reduce_bandwidth, AllReduce};
use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices::open_gpus_or_finish;

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "gpu-allreduce";
/// The all-reduce buffer in MiB when `allreduce_mib` is not given.
pub const DEFAULT_MIB: usize = 256;
/// A tinybox's own first-boot test requires this bus bandwidth over its six GPUs.
pub const FACTORY_MIN_BUSBW_GBPS: f64 = 12.0;
const WARMUP: usize = 2;
const ITERATIONS: usize = 10;

/// The collective for these devices (NCCL on CUDA devices, RCCL on HIP devices, when it
/// loads, else the host-staged ring) and a note on why it was chosen.
pub fn collective_for(
    backends: &[GpuBackend],
) -> Result<(Box<dyn AllReduce<GpuBackend>>, String), String> {
    Ok(gpu_all_reduce(backends))
}

/// Runs the stage: all-reduces a buffer of `allreduce_mib` over every GPU and fails when
/// the bus bandwidth is below `allreduce_min_gbps`; skips on the CPU or with one GPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let bytes = (options::number(ctx.options(), ALLREDUCE_MIB, DEFAULT_MIB as f64) as usize) << 20;
    let min_busbw = options::number(ctx.options(), ALLREDUCE_MIN_GBPS, FACTORY_MIN_BUSBW_GBPS);
    let backends = open_gpus_or_finish!(ctx, report);
    if backends.len() < 2 {
        return report.finish_as(
            Verdict::Skip,
            Some("one GPU: an all-reduce moves no data".into()),
        );
    }
    let (collective, chosen) = match collective_for(&backends) {
        Ok(c) => c,
        Err(e) => return report.finish_as(Verdict::Error, Some(e)),
    };
    ctx.progress(
        0.1,
        Some(format!(
            "{} MiB all-reduce over {} GPUs ({chosen})",
            bytes >> 20,
            backends.len()
        )),
    );
    let measured = measure_all_reduce_bandwidth(
        collective.as_ref(),
        &backends,
        bytes / 4,
        WARMUP,
        ITERATIONS,
    );
    let bw = match measured {
        Ok(bw) => bw,
        Err(e) => return report.finish_as(Verdict::Error, Some(format!("all-reduce failed: {e}"))),
    };
    let busbw = bw.busbw_gbps();
    report.metric("algbw_gbps", bw.algbw_gbps(), "GB/s");
    report.metric("busbw_gbps", busbw, "GB/s");
    report.metric("gpus", bw.ranks as f64, "GPUs");
    report.metric("bytes", bw.bytes as f64, "bytes");
    report.checks.push(Check {
        name: "all-reduce bus bandwidth".into(),
        subject: None,
        expected: format!("≥ {min_busbw:.1} GB/s"),
        found: format!("{busbw:.1} GB/s ({})", bw.collective),
        verdict: Verdict::pass_if(busbw >= min_busbw),
    });
    ctx.progress(1.0, None);
    report.finish(Some(format!(
        "{} GPUs, {} MiB: bus bandwidth {busbw:.1} GB/s, algorithm bandwidth {:.1} GB/s ({chosen})",
        bw.ranks,
        bytes >> 20,
        bw.algbw_gbps()
    )))
}
