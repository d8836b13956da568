//! The `gpu-memory` stage of `health`: the device-memory pattern test on every GPU at
//! once, over `memory_fraction` of each one's memory, a check per GPU.

use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices;
use crate::suite::options::{self, MEMORY_FRACTION};
use crate::suite::stage::{StageContext, StageReport};

use super::memory;

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "gpu-memory";
/// The share of each GPU's memory tested when `memory_fraction` is not given.
pub const DEFAULT_FRACTION: f64 = 0.8;
const CHUNK_BYTES: usize = 256 << 20;

/// Runs the stage: the pattern test over `memory_fraction` of every GPU's memory at once,
/// failing a GPU with any bad word (error when its test could not run), then each GPU's
/// memory bandwidth against its peers'; skips on the CPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let fraction = options::number(ctx.options(), MEMORY_FRACTION, DEFAULT_FRACTION);
    report
        .checks
        .extend(super::driver_reports::memory_error_checks(&ctx.root));
    let backends = match gpu_devices::open_for_stage(ctx.options()) {
        Ok(backends) => backends,
        Err((verdict, why)) => return report.finish_unloaded(verdict, why),
    };
    let drivers = gpu_devices::drivers_of(&backends);
    ctx.progress(
        0.0,
        Some(format!(
            "patterns over {:.0} % of every GPU's memory",
            fraction * 100.0
        )),
    );
    let results: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = drivers
            .iter()
            .enumerate()
            .map(|(i, &driver)| {
                let budget = (driver.info().memory_bytes as f64 * fraction) as u64;
                scope.spawn(move || memory::test(driver, budget, CHUNK_BYTES, i as i32))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(panicked())))
            .collect()
    });
    let bandwidth: Vec<Option<f64>> = results
        .iter()
        .map(|r| r.as_ref().ok().map(|found| found.gbps))
        .collect();
    for (i, (driver, result)) in drivers.iter().zip(results).enumerate() {
        let subject = driver.info().pci_address.clone();
        let (found, verdict) = match result {
            Ok(found) => {
                report.metric(
                    &format!("gpu{i}_memory_tested_gib"),
                    found.tested_bytes as f64 / (1u64 << 30) as f64,
                    "GiB",
                );
                report.metric(&format!("gpu{i}_memory_gbps"), found.gbps, "GB/s");
                if found.bad.is_empty() {
                    (
                        format!(
                            "{:.1} GiB, no error",
                            found.tested_bytes as f64 / (1u64 << 30) as f64
                        ),
                        Verdict::Pass,
                    )
                } else {
                    let ranges: Vec<String> = found
                        .bad
                        .iter()
                        .map(|b| {
                            format!(
                                "{} bad words in bytes {:#x}..{:#x} (first at {:#x}, {})",
                                b.errors,
                                b.offset,
                                b.offset + b.bytes,
                                b.offset + b.first_bad_offset,
                                b.pattern
                            )
                        })
                        .collect();
                    (ranges.join("; "), Verdict::Fail)
                }
            }
            Err(e) => (format!("could not run: {e}"), Verdict::Error),
        };
        report.checks.push(Check {
            name: "device memory".into(),
            subject,
            expected: "every word holds what was written, in every pattern".into(),
            found,
            verdict,
        });
    }
    super::corruption_stage::judge_peers(
        &mut report,
        "memory bandwidth among peers",
        "GB/s",
        &drivers,
        &bandwidth,
    );
    report.finish(None)
}

fn panicked() -> crate::engine::backend::gpu::driver::DriverError {
    crate::engine::backend::gpu::driver::DriverError::InvalidArgument(
        "the memory test panicked".into(),
    )
}
