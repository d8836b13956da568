//! Live GPU gauges from the newest telemetry sample of the run in progress. They exist
//! only while a run samples its GPUs: between runs nothing measures them, and a stale
//! figure would read as a live one.

use crate::agent::live::TimedSample;
use crate::runtime::telemetry::ThrottleReason;

use super::exposition::{bool_value, Exposition, Kind};

const MHZ: f64 = 1e6;

pub fn render(out: &mut Exposition, timed: &TimedSample) {
    out.single(
        "tinyperf_telemetry_sample_timestamp_seconds",
        Kind::Gauge,
        "When the agent received the telemetry sample the GPU gauges show, in Unix seconds.",
        timed.at.timestamp_millis() as f64 / 1000.0,
    );
    for gpu in &timed.sample.gpus {
        let index = gpu.index.to_string();
        let address = gpu.address.as_deref().unwrap_or("");
        let labels = [("gpu", index.as_str()), ("pci_address", address)];
        if let Some(watts) = gpu.power_w {
            out.gauge(
                "tinyperf_gpu_power_watts",
                "Power the GPU draws, during a run.",
                &labels,
                watts,
            );
        }
        for t in &gpu.temperatures {
            let with_sensor = [labels[0], labels[1], ("sensor", t.label.as_str())];
            out.gauge(
                "tinyperf_gpu_temperature_celsius",
                "GPU temperature by sensor (edge, junction, mem; gpu on NVIDIA), during a run.",
                &with_sensor,
                t.celsius,
            );
            if let Some(limit) = t.limit_c {
                out.gauge(
                    "tinyperf_gpu_temperature_limit_celsius",
                    "Temperature at which the GPU starts protecting itself, by sensor.",
                    &with_sensor,
                    limit,
                );
            }
        }
        if let Some(mhz) = gpu.sm_clock_mhz {
            out.gauge(
                "tinyperf_gpu_sm_clock_hertz",
                "GPU shader (SM) clock, during a run.",
                &labels,
                mhz * MHZ,
            );
        }
        if let Some(mhz) = gpu.mem_clock_mhz {
            out.gauge(
                "tinyperf_gpu_memory_clock_hertz",
                "GPU memory clock, during a run.",
                &labels,
                mhz * MHZ,
            );
        }
        if let Some(percent) = gpu.util_percent {
            out.gauge(
                "tinyperf_gpu_utilization_ratio",
                "Share of time the GPU was busy, 0 to 1, during a run.",
                &labels,
                percent / 100.0,
            );
        }
        if let Some(reasons) = &gpu.throttling {
            out.family(
                "tinyperf_gpu_throttled",
                Kind::Gauge,
                "1 while heat or power holds the GPU's clocks down, else 0.",
            );
            let throttled = reasons.iter().any(|r| r.is_thermal_or_power());
            out.sample("tinyperf_gpu_throttled", &labels, bool_value(throttled));
            out.family(
                "tinyperf_gpu_throttle_reason",
                Kind::Gauge,
                "1 for each reason the GPU reports for holding its clocks, 0 for the others.",
            );
            for reason in ThrottleReason::ALL {
                let with_reason = [labels[0], labels[1], ("reason", reason.as_str())];
                out.sample(
                    "tinyperf_gpu_throttle_reason",
                    &with_reason,
                    bool_value(reasons.contains(&reason)),
                );
            }
        }
    }
}
