//! The `throttling` stage of `health`: every GPU under sustained fp16 GEMM load while its
//! telemetry is sampled (NVML's clock-event reasons on NVIDIA, amdgpu's gpu_metrics
//! throttle bits and hwmon on AMD). Holding at the power limit is what a fully loaded
//! consumer card does; heat, a hardware slowdown or a power brake is not, nor a sensor
//! at or above its limit. A GPU whose source cannot tell throttling is `skip` for that
//! part, saying so.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::engine::backend::gpu::driver::MatmulPrecision;
use crate::record::{Check, StageResult, Verdict};
use crate::runtime::telemetry::{Sampler, ThrottleReason};
use crate::suite::gpu_devices;
use crate::suite::options::{self, THROTTLE_SECONDS};
use crate::suite::stage::{StageContext, StageReport};

/// The stage's name, as the plan, its events and its result carry it.
pub const NAME: &str = "throttling";
/// Seconds of load when `throttle_seconds` is not given.
pub const DEFAULT_SECONDS: f64 = 20.0;
const MATMUL_SIZE: usize = 8192;
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// What held one GPU back while loaded, and its hottest sensors against their limits.
#[derive(Debug, Clone, Default)]
struct Watched {
    samples: usize,
    /// Samples in which the source said anything about throttling.
    told: usize,
    reasons: BTreeMap<&'static str, usize>,
    over_limit: BTreeMap<String, (f64, f64)>,
    peak_power_w: Option<f64>,
}

/// The throttling check of one GPU from what its telemetry said while loaded.
fn judge_throttling(seen: &Watched) -> (String, Verdict) {
    let trouble: Vec<String> = seen
        .reasons
        .iter()
        .filter(|(r, _)| ThrottleReason::parse(r).is_some_and(is_trouble))
        .map(|(r, n)| format!("{r} in {n} of {} samples", seen.samples))
        .collect();
    if seen.told == 0 {
        (
            "this GPU's telemetry cannot tell throttling".to_string(),
            Verdict::Skip,
        )
    } else if trouble.is_empty() {
        let at_cap = seen.reasons.get("sw_power_cap").copied().unwrap_or(0);
        (
            format!(
                "none beyond its power limit (held there in {at_cap} of {} samples)",
                seen.samples
            ),
            Verdict::Pass,
        )
    } else {
        (trouble.join(", "), Verdict::Fail)
    }
}

/// A reason that means the card is in trouble under load, not at its normal limit.
fn is_trouble(reason: ThrottleReason) -> bool {
    reason.is_thermal_or_power() && reason != ThrottleReason::SwPowerCap
}

/// Runs the stage: loads every GPU with fp16 GEMMs for `throttle_seconds` while sampling
/// its telemetry, and per GPU fails throttling beyond the power limit (heat, a hardware
/// slowdown, a power brake) and a sensor at or above its limit; skips what the GPU's
/// telemetry cannot tell, errors when the load fails, skips on the CPU.
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let seconds = options::number(ctx.options(), THROTTLE_SECONDS, DEFAULT_SECONDS);
    report
        .checks
        .extend(super::driver_reports::power_limit_checks(&ctx.root));
    let backends = match gpu_devices::open_for_stage(ctx.options()) {
        Ok(backends) => backends,
        Err((verdict, why)) => return report.finish_unloaded(verdict, why),
    };
    let drivers = gpu_devices::drivers_of(&backends);
    let mut sampler = Sampler::discover(&ctx.root);
    ctx.progress(0.0, Some(format!("every GPU loaded for {seconds:.0} s")));
    let mut watched: BTreeMap<String, Watched> = BTreeMap::new();
    let load_errors: Vec<Option<String>> = std::thread::scope(|scope| {
        let loads: Vec<_> = drivers
            .iter()
            .map(|&driver| {
                scope.spawn(move || {
                    driver
                        .matmul_series(MatmulPrecision::F16, MATMUL_SIZE, 1, seconds)
                        .err()
                        .map(|e| e.to_string())
                })
            })
            .collect();
        let started = Instant::now();
        while !loads.iter().all(|l| l.is_finished()) {
            let sample = sampler.sample(started.elapsed().as_secs_f64());
            for gpu in &sample.gpus {
                let entry = watched
                    .entry(gpu.address.clone().unwrap_or_else(|| gpu.device()))
                    .or_default();
                entry.samples += 1;
                if let Some(reasons) = &gpu.throttling {
                    entry.told += 1;
                    for reason in reasons {
                        *entry.reasons.entry(reason.as_str()).or_default() += 1;
                    }
                }
                for t in gpu.temperatures.iter().filter(|t| t.over_limit()) {
                    let peak = entry
                        .over_limit
                        .entry(t.label.clone())
                        .or_insert((t.celsius, t.limit_c.unwrap_or(f64::NAN)));
                    peak.0 = peak.0.max(t.celsius);
                }
                if let Some(w) = gpu.power_w {
                    entry.peak_power_w = Some(entry.peak_power_w.map_or(w, |p: f64| p.max(w)));
                }
            }
            std::thread::sleep(SAMPLE_EVERY);
        }
        loads
            .into_iter()
            .map(|l| l.join().unwrap_or(Some("the load panicked".into())))
            .collect()
    });
    for (i, (driver, error)) in drivers.iter().zip(load_errors).enumerate() {
        let address = driver.info().pci_address.clone().unwrap_or_default();
        let subject = Some(address.clone());
        if let Some(error) = error {
            report.checks.push(Check {
                name: "throttling under load".into(),
                subject,
                expected: "sustained load".into(),
                found: format!("could not load: {error}"),
                verdict: Verdict::Error,
            });
            continue;
        }
        let seen = watched.get(&address).cloned().unwrap_or_default();
        if let Some(peak) = seen.peak_power_w {
            report.metric(&format!("gpu{i}_peak_power_w"), peak, "W");
        }
        let (found, verdict) = judge_throttling(&seen);
        report.checks.push(Check {
            name: "throttling under load".into(),
            subject: subject.clone(),
            expected: "no thermal throttling, hardware slowdown or power brake".into(),
            found,
            verdict,
        });
        report.checks.push(Check {
            name: "temperatures under load".into(),
            subject,
            expected: "every sensor below its limit".into(),
            found: if seen.over_limit.is_empty() {
                format!("{} samples, none at a limit", seen.samples)
            } else {
                seen.over_limit
                    .iter()
                    .map(|(label, (peak, limit))| format!("{label} {peak} °C (limit {limit} °C)"))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            verdict: if seen.samples == 0 {
                Verdict::Skip
            } else if seen.over_limit.is_empty() {
                Verdict::Pass
            } else {
                Verdict::Fail
            },
        });
    }
    report.findings.push(
        "ECC, retired pages and remapped rows are not read yet (an RTX 4090 ships with ECC off)"
            .into(),
    );
    report.finish(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(reasons: &[(&'static str, usize)], told: usize) -> Watched {
        Watched {
            samples: 40,
            told,
            reasons: reasons.iter().copied().collect(),
            ..Watched::default()
        }
    }

    #[test]
    fn the_power_limit_passes_heat_and_a_power_brake_fail_silence_skips() {
        assert_eq!(
            judge_throttling(&seen(&[("sw_power_cap", 38)], 40)).1,
            Verdict::Pass
        );
        let (found, verdict) =
            judge_throttling(&seen(&[("sw_power_cap", 30), ("hw_thermal", 4)], 40));
        assert_eq!(verdict, Verdict::Fail);
        assert_eq!(found, "hw_thermal in 4 of 40 samples");
        assert_eq!(
            judge_throttling(&seen(&[("hw_power_brake", 1)], 40)).1,
            Verdict::Fail
        );
        assert_eq!(judge_throttling(&seen(&[], 0)).1, Verdict::Skip);
        assert_eq!(judge_throttling(&seen(&[("idle", 3)], 40)).1, Verdict::Pass);
    }
}
