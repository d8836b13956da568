//! The `gpu-bandwidth` stage of `acceptance`: host→device and device→host copy
//! bandwidth of every GPU with pinned host memory, against its PCIe link's capacity.

use super::gpu_devices::{path_link, usable_link_gbps};
use super::options::{self, TRANSFER_MIB};
use super::stage::{StageContext, StageReport};
use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices::open_gpus_or_finish;

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "gpu-bandwidth";
/// The size of each copy in MiB when `transfer_mib` is not given.
pub const DEFAULT_MIB: usize = 256;
/// Share of the link's usable bandwidth a copy must reach: below it the link trained
/// down, the slot is shared, or IOMMU settings are in the way.
pub const MIN_FRACTION: f64 = 0.8;
const REPEATS: usize = 10;

/// Runs the stage: times pinned host→device and device→host copies of `transfer_mib` on
/// every GPU and fails a direction below [`MIN_FRACTION`] of its PCIe link's usable
/// bandwidth (recorded unjudged when the inventory lacks the link); skips on the CPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let bytes = (options::number(ctx.options(), TRANSFER_MIB, DEFAULT_MIB as f64) as usize) << 20;
    let backends = open_gpus_or_finish!(ctx, report);
    let mut summary = Vec::new();
    let total = backends.len() * 2;
    for (i, backend) in backends.iter().enumerate() {
        let driver = backend.driver();
        let address = driver.info().pci_address.clone().unwrap_or_default();
        let link = path_link(ctx.hardware.as_ref(), &address);
        for (j, (to_device, label)) in [(true, "h2d"), (false, "d2h")].into_iter().enumerate() {
            if ctx.cancelled() {
                return report.finish_as(Verdict::Skip, Some("cancelled".into()));
            }
            ctx.progress(
                (i * 2 + j) as f64 / total as f64,
                Some(format!("GPU {i}: {label} copies of {} MiB", bytes >> 20)),
            );
            let gbps = match driver.host_copy_gbps(to_device, bytes, REPEATS) {
                Ok(g) => g,
                Err(e) => {
                    report.checks.push(Check {
                        name: format!("{label} copy"),
                        subject: Some(address.clone()),
                        expected: "completes".into(),
                        found: e.to_string(),
                        verdict: Verdict::Fail,
                    });
                    continue;
                }
            };
            report.metric(&format!("gpu{i}_{label}_gbps"), gbps, "GB/s");
            summary.push(format!("GPU {i} {label} {gbps:.1}"));
            if let Some((speed, width)) = link {
                let usable = usable_link_gbps(speed, width);
                report.checks.push(Check {
                    name: format!("{label} bandwidth"),
                    subject: Some(address.clone()),
                    expected: format!(
                        "≥ {:.1} GB/s ({:.0} % of {usable:.1} usable on {speed} GT/s ×{width})",
                        usable * MIN_FRACTION,
                        MIN_FRACTION * 100.0
                    ),
                    found: format!("{gbps:.1} GB/s"),
                    verdict: Verdict::pass_if(gbps >= usable * MIN_FRACTION),
                });
            }
        }
        if link.is_none() {
            report.findings.push(format!(
                "GPU {i} at {address}: its PCIe link is not in the inventory; figures recorded unjudged"
            ));
        }
    }
    ctx.progress(1.0, None);
    report.finish(Some(format!("pinned copies, GB/s: {}", summary.join(", "))))
}
