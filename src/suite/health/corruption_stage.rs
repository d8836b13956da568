//! The `gpu-corruption` stage of `health` (and, short, of `acceptance`): the silent-
//! corruption check on every GPU at once, a check per GPU.

use std::time::Duration;

use super::corruption::{self, Sizes};
use super::peers::{self, PeerLimits};
use super::Outcome;
use crate::engine::backend::gpu::driver::GpuDriver;
use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices;
use crate::suite::gpu_devices::open_gpus_or_finish;
use crate::suite::options::{self, BURN_SECONDS};
use crate::suite::stage::{StageContext, StageReport};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "gpu-corruption";
/// `health`'s default load: minutes, as SDC screening needs time at temperature.
pub const DEFAULT_BURN_SECONDS: f64 = 120.0;
/// `acceptance`'s short form.
pub const SHORT_BURN_SECONDS: f64 = 10.0;
/// Workload sizes that load a GPU: 2048³ GEMMs, 16 M-element kernels.
const GPU_SIZES: Sizes = Sizes {
    gemm: 2048,
    elements: 1 << 24,
};

/// Runs the stage: the silent-corruption check on every GPU at once for `burn_seconds`
/// (`default_burn_seconds` when absent), a check per GPU (fail on any differing round,
/// error when rounds could not be judged), then each GPU's GEMM TFLOP/s against its peers';
/// skips on the CPU.
pub fn run(ctx: &mut StageContext<'_>, default_burn_seconds: f64) -> StageResult {
    let mut report = StageReport::new(NAME);
    let burn = options::number(ctx.options(), BURN_SECONDS, default_burn_seconds);
    let backends = open_gpus_or_finish!(ctx, report);
    let drivers = gpu_devices::drivers_of(&backends);
    ctx.progress(
        0.0,
        Some(format!(
            "{} GPU(s): the same seeded workloads on every GPU for {burn:.0} s",
            drivers.len()
        )),
    );
    let cancel = ctx.cancel;
    let found = corruption::check(&drivers, GPU_SIZES, Duration::from_secs_f64(burn), &|| {
        cancel.load(std::sync::atomic::Ordering::Relaxed)
    });
    report.metric("rounds", found.rounds as f64, "count");
    report.metric("burn_seconds", found.seconds, "s");
    for (i, (driver, gpu)) in drivers.iter().zip(&found.per_gpu).enumerate() {
        let address = driver.info().pci_address.clone();
        let mismatches: u64 = gpu.mismatches.values().sum();
        report.metric(
            &format!("gpu{i}_mismatched_rounds"),
            mismatches as f64,
            "count",
        );
        let verdict = match gpu.outcome() {
            Outcome::Pass => Verdict::Pass,
            Outcome::Fail => Verdict::Fail,
            _ => Verdict::Error,
        };
        report.checks.push(Check {
            name: "silent corruption".into(),
            subject: address,
            expected: format!(
                "bit-identical to the other GPUs and to the CPU reference over {} rounds",
                found.rounds
            ),
            found: gpu.reason().unwrap_or_else(|| "identical".into()),
            verdict,
        });
    }
    judge_peers(
        &mut report,
        "GEMM throughput among peers",
        "TFLOP/s",
        &drivers,
        &found
            .per_gpu
            .iter()
            .map(|g| g.gemm_tflops())
            .collect::<Vec<_>>(),
    );
    let summary = format!(
        "{} rounds in {:.0} s on {} GPU(s)",
        found.rounds,
        found.seconds,
        drivers.len()
    );
    report.finish(Some(summary))
}

/// A check per GPU of `values` (one figure each, in `unit`) against the box's median:
/// below the band around it fails, one inside the band but apart from its peers warns. With
/// fewer than three figures nothing is judged.
pub fn judge_peers(
    report: &mut StageReport,
    name: &str,
    unit: &str,
    drivers: &[&dyn GpuDriver],
    values: &[Option<f64>],
) {
    let standings = peers::standings(values, PeerLimits::default());
    for (driver, standing) in drivers.iter().zip(standings) {
        let Some(standing) = standing else {
            continue;
        };
        report.checks.push(Check {
            name: name.into(),
            subject: driver.info().pci_address.clone(),
            expected: format!(
                "within the box's band around its median of {:.2} {unit}",
                standing.median
            ),
            found: format!(
                "{:.2} {unit} ({:.0} % of the median){}",
                standing.value,
                standing.ratio * 100.0,
                if standing.drifting {
                    ", inside the band but apart from its peers"
                } else {
                    ""
                }
            ),
            verdict: if standing.low_outlier {
                Verdict::Fail
            } else {
                Verdict::warn_if(standing.drifting)
            },
        });
    }
}
