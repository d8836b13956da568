//! The `link-health` stage of `health`: each GPU's PCIe link under a saturating load in
//! both directions. The link must train to what every part of its path is capable of
//! (idle links downclock, which is fine, so it is read while loaded), and the AER
//! counters of the GPU, its bridges and its root port must not grow: no uncorrectable
//! error at all, and no more correctable ones than a bit-error rate allows.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::inventory::aer::AerCounters;
use crate::inventory::{gpu_link_states, GpuLinkState, PciAddress};
use crate::record::{Check, StageResult, Verdict};
use crate::suite::gpu_devices;
use crate::suite::gpu_devices::open_gpus_or_finish;
use crate::suite::options::{self, LINK_LOAD_SECONDS};
use crate::suite::stage::{StageContext, StageReport};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "link-health";
/// Seconds of load on the links when `link_load_seconds` is not given.
pub const DEFAULT_LOAD_SECONDS: f64 = 10.0;
/// The bit-error rate a healthy PCIe link stays under (the PCIe specification's 10⁻¹²,
/// which DCGM also derives its replay limit from).
pub const BIT_ERROR_RATE: f64 = 1e-12;
const COPY_BYTES: usize = 256 << 20;
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// Correctable errors a link of `gts` × `width` may show in `seconds` at
/// [`BIT_ERROR_RATE`], at least one.
pub fn allowed_correctable(gts: f64, width: u32, seconds: f64) -> u64 {
    let bits = gts * 1e9 * width as f64 * seconds;
    ((bits * BIT_ERROR_RATE).ceil() as u64).max(1)
}

/// The largest growth of `after` over `before` on one device, by kind.
fn growth(before: Option<&AerCounters>, after: Option<&AerCounters>) -> (u64, u64) {
    match (before, after) {
        (Some(b), Some(a)) => (
            a.total_correctable.saturating_sub(b.total_correctable),
            a.uncorrectable().saturating_sub(b.uncorrectable()),
        ),
        _ => (0, 0),
    }
}

/// Runs the stage: copies both ways on every GPU at once for `link_load_seconds` and, per
/// GPU, fails a link that did not train to its path's capability under the load, PCIe
/// replays above the bit-error allowance, or AER counters that grew (any uncorrectable
/// error, or correctable ones above the allowance); a load that failed is an error. Skips
/// on the CPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    report.findings.push(NOT_IMPLEMENTED.to_string());
    let seconds = options::number(ctx.options(), LINK_LOAD_SECONDS, DEFAULT_LOAD_SECONDS);
    let backends = open_gpus_or_finish!(ctx, report);
    let drivers = gpu_devices::drivers_of(&backends);
    let root = ctx.root.clone();
    let before = gpu_link_states(&root);
    let replays_before = crate::runtime::pcie_replay_counters();
    ctx.progress(
        0.0,
        Some(format!("copies both ways on every GPU for {seconds:.0} s")),
    );
    let done = AtomicBool::new(false);
    let cancel = ctx.cancel;
    let (bandwidth, best) = std::thread::scope(|scope| {
        let loads: Vec<_> = drivers
            .iter()
            .map(|&driver| {
                let done = &done;
                scope.spawn(move || {
                    let mut gbps: BTreeMap<&'static str, f64> = BTreeMap::new();
                    let mut error = None;
                    while !done.load(Ordering::Relaxed) {
                        for (to_device, label) in [(true, "h2d"), (false, "d2h")] {
                            match driver.host_copy_gbps(to_device, COPY_BYTES, 4) {
                                Ok(g) => {
                                    let best = gbps.entry(label).or_insert(0.0);
                                    *best = best.max(g);
                                }
                                Err(e) => error = Some(e.to_string()),
                            }
                        }
                        if error.is_some() {
                            break;
                        }
                    }
                    (gbps, error)
                })
            })
            .collect();
        // While the copies run: each GPU's best trained link.
        let started = Instant::now();
        let mut best: BTreeMap<PciAddress, GpuLinkState> = BTreeMap::new();
        while started.elapsed().as_secs_f64() < seconds && !cancel.load(Ordering::Relaxed) {
            for state in gpu_link_states(&root) {
                let keep = best.get(&state.gpu).is_none_or(|b| {
                    (state.path_link.speed_gts, state.path_link.width)
                        > (b.path_link.speed_gts, b.path_link.width)
                });
                if keep {
                    best.insert(state.gpu, state);
                }
            }
            std::thread::sleep(SAMPLE_EVERY);
        }
        done.store(true, Ordering::Relaxed);
        let bandwidth: Vec<_> = loads
            .into_iter()
            .map(|l| {
                l.join()
                    .unwrap_or((BTreeMap::new(), Some("the load panicked".into())))
            })
            .collect();
        (bandwidth, best)
    });
    let after = gpu_link_states(&root);
    let replays_after = crate::runtime::pcie_replay_counters();
    for (i, (driver, (gbps, error))) in drivers.iter().zip(&bandwidth).enumerate() {
        let Some(address) = driver
            .info()
            .pci_address
            .as_deref()
            .and_then(PciAddress::parse)
        else {
            report
                .findings
                .push(format!("GPU {i}: the runtime gave no PCI address"));
            continue;
        };
        let subject = Some(address.to_string());
        for (label, value) in gbps {
            report.metric(&format!("gpu{i}_{label}_gbps"), *value, "GB/s");
        }
        if let Some(error) = error {
            report.checks.push(Check {
                name: "link load".into(),
                subject: subject.clone(),
                expected: "copies both ways complete".into(),
                found: error.clone(),
                verdict: Verdict::Error,
            });
            continue;
        }
        let state = best.get(&address);
        let link = state.map(|s| s.path_link);
        let capable = (
            link.and_then(|l| l.capable_speed_gts),
            state.and_then(|s| s.capable_width),
        );
        if let (Some(link), (Some(speed), Some(width))) = (link, capable) {
            let trained = (link.speed_gts, link.width);
            let full =
                trained.0.is_some_and(|s| s >= speed) && trained.1.is_some_and(|w| w >= width);
            report.checks.push(Check {
                name: "link under load".into(),
                subject: subject.clone(),
                expected: format!("{} GT/s ×{width}", speed.mts as f64 / 1000.0),
                found: link.describe(),
                verdict: Verdict::pass_if(full),
            });
        }
        let (gts, width) = link
            .and_then(|l| Some((l.speed_gts?.mts as f64 / 1000.0, l.width?)))
            .unwrap_or((16.0, 16));
        let allowed = allowed_correctable(gts, width, seconds);
        let before_state = before.iter().find(|s| s.gpu == address);
        let after_state = after.iter().find(|s| s.gpu == address);
        let mut grew = Vec::new();
        let mut serious = false;
        if let (Some(b), Some(a)) = (before_state, after_state) {
            for ((device, role, old), (_, _, new)) in b.counters.iter().zip(&a.counters) {
                let (correctable, uncorrectable) = growth(old.as_ref(), new.as_ref());
                if uncorrectable > 0 || correctable > allowed {
                    serious = true;
                }
                if correctable + uncorrectable > 0 {
                    grew.push(format!(
                        "{device} ({role:?}): +{correctable} correctable, +{uncorrectable} \
                         uncorrectable"
                    ));
                }
            }
        }
        let key = address.to_string();
        if let (Some(old), Some(new)) = (replays_before.get(&key), replays_after.get(&key)) {
            let replays = new.saturating_sub(*old);
            report.metric(&format!("gpu{i}_pcie_replays"), replays as f64, "count");
            report.checks.push(Check {
                name: "PCIe replays under load".into(),
                subject: subject.clone(),
                expected: format!(
                    "at most {allowed} (bit-error rate {BIT_ERROR_RATE:e} over {seconds:.0} s)"
                ),
                found: format!("{replays}"),
                verdict: if replays > allowed {
                    Verdict::Fail
                } else {
                    // Within the allowance, but a link that replays at all is worth knowing.
                    Verdict::warn_if(replays > 0)
                },
            });
        }
        report.checks.push(Check {
            name: "AER errors under load".into(),
            subject,
            expected: format!(
                "no uncorrectable error, at most {allowed} correctable (bit-error rate {BIT_ERROR_RATE:e})"
            ),
            found: if grew.is_empty() {
                "none".into()
            } else {
                grew.join("; ")
            },
            verdict: if serious {
                Verdict::Fail
            } else {
                // Corrected errors within the allowance: the link works, and is watched.
                Verdict::warn_if(!grew.is_empty())
            },
        });
    }
    report.finish(None)
}

/// What the health suite does not check yet, said in every run of it.
pub const NOT_IMPLEMENTED: &str = "not implemented yet in the health suite: the peer comparison \
     of host-device bandwidth, power and clocks (GEMM throughput and memory bandwidth are \
     compared)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allowance_follows_the_bit_error_rate() {
        // 16 GT/s × 16 lanes for a minute: 15.36 errors at 10⁻¹², as DCGM's 16 a minute.
        assert_eq!(allowed_correctable(16.0, 16, 60.0), 16);
        assert_eq!(allowed_correctable(16.0, 16, 10.0), 3);
        assert_eq!(allowed_correctable(2.5, 1, 0.001), 1);
    }
}
