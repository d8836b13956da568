//! GPUs running hot or held back: a temperature at or above its limit (hwmon `crit`,
//! NVML's slowdown threshold) and thermal or power throttling, collected over a span
//! of samples and told once per GPU and sensor.

use std::collections::BTreeMap;

use super::sample::{TelemetrySample, ThrottleReason};

#[derive(Debug, Clone)]
struct Heat {
    peak_c: f64,
    limit_c: f64,
    samples: usize,
}

#[derive(Debug, Clone, Default)]
struct Held {
    reasons: Vec<ThrottleReason>,
    samples: usize,
}

/// Watches samples for GPUs past their limits.
#[derive(Debug, Clone, Default)]
pub struct LimitWatch {
    samples: usize,
    /// By GPU and sensor label.
    heat: BTreeMap<(String, String), Heat>,
    /// By GPU.
    held: BTreeMap<String, Held>,
}

impl LimitWatch {
    /// Notes which GPUs of `sample` are past a temperature limit or held down by heat
    /// or power.
    pub fn observe(&mut self, sample: &TelemetrySample) {
        self.samples += 1;
        for gpu in &sample.gpus {
            let subject = gpu.subject();
            for temp in gpu.temperatures.iter().filter(|t| t.over_limit()) {
                let limit_c = temp.limit_c.unwrap_or(f64::INFINITY);
                let heat = self
                    .heat
                    .entry((subject.clone(), temp.label.clone()))
                    .or_insert(Heat {
                        peak_c: temp.celsius,
                        limit_c,
                        samples: 0,
                    });
                heat.peak_c = heat.peak_c.max(temp.celsius);
                heat.samples += 1;
            }
            let reasons: Vec<ThrottleReason> = gpu
                .throttling
                .iter()
                .flatten()
                .copied()
                .filter(|r| r.is_thermal_or_power())
                .collect();
            if !reasons.is_empty() {
                let held = self.held.entry(subject).or_default();
                held.samples += 1;
                for reason in reasons {
                    if !held.reasons.contains(&reason) {
                        held.reasons.push(reason);
                    }
                }
            }
        }
    }

    /// One finding per hot sensor and per throttled GPU, each naming the GPU.
    pub fn findings(&self) -> Vec<String> {
        let heat = self.heat.iter().map(|((subject, label), heat)| {
            format!(
                "GPU {subject}: {label} temperature reached {} °C, at or above its limit of {} °C \
                 (in {} of {} samples)",
                heat.peak_c, heat.limit_c, heat.samples, self.samples
            )
        });
        let held = self.held.iter().map(|(subject, held)| {
            let reasons: Vec<&str> = held.reasons.iter().map(|r| r.as_str()).collect();
            format!(
                "GPU {subject}: throttled by {} (in {} of {} samples)",
                reasons.join(", "),
                held.samples,
                self.samples
            )
        });
        heat.chain(held).collect()
    }
}
