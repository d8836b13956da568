//! The hottest reading of every sensor over a whole run, with the stage and moment it
//! came in: what a burn-in holds against its thermal limits.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::csv::{CsvRow, CPU_DEVICE};
use super::sample::TelemetrySample;

/// One sensor's hottest reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Peak {
    /// The reading, in °C.
    pub celsius: f64,
    /// The stage that was running.
    pub stage: String,
    /// Seconds since sampling began.
    pub t_s: f64,
}

/// The hottest readings of one GPU, a peak per sensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuPeaks {
    /// How findings name the GPU: its PCI address, else `gpuN`.
    pub subject: String,
    /// The name of the GPU in metrics: `gpu0`.
    pub device: String,
    /// Each sensor's label (`edge`, `junction`, `mem`, `gpu`) and its peak.
    pub sensors: BTreeMap<String, Peak>,
}

impl Peak {
    /// Whether `self` is a real reading hotter than `kept`. A reading that is not finite
    /// is left out: a sensor that reads garbage is not the box running hot.
    fn hotter_than(&self, kept: Option<&Peak>) -> bool {
        self.celsius.is_finite() && kept.is_none_or(|p| self.celsius > p.celsius)
    }

    /// Puts `self` in `slot` when it is hotter than what is there.
    fn raise(self, slot: &mut Option<Peak>) {
        if self.hotter_than(slot.as_ref()) {
            *slot = Some(self);
        }
    }
}

impl GpuPeaks {
    /// Keeps `peak` as sensor `label`'s when it is hotter than the one kept.
    fn raise(&mut self, label: &str, peak: Peak) {
        if peak.hotter_than(self.sensors.get(label)) {
            self.sensors.insert(label.to_string(), peak);
        }
    }

    /// The hottest of the GPU's sensors, with its label.
    pub fn hottest(&self) -> Option<(&str, &Peak)> {
        self.sensors
            .iter()
            .max_by(|a, b| a.1.celsius.total_cmp(&b.1.celsius))
            .map(|(label, peak)| (label.as_str(), peak))
    }
}

/// The peaks of every sensor seen so far in a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThermalPeaks {
    /// The CPU package's hottest reading.
    pub cpu: Option<Peak>,
    /// Every GPU that reported a temperature, in the order first seen.
    pub gpus: Vec<GpuPeaks>,
    /// Samples looked at.
    pub samples: usize,
}

impl ThermalPeaks {
    /// The peaks of the rows of a `telemetry.csv` (an earlier run's, taken up again).
    /// The file does not say which sensor its `temp_c` is: amdgpu's `edge` where the
    /// row has a junction or memory reading, else NVML's `gpu`.
    pub fn from_rows(rows: &[CsvRow]) -> ThermalPeaks {
        let mut peaks = ThermalPeaks::default();
        let mut times: Vec<f64> = Vec::new();
        for row in rows {
            if times.last() != Some(&row.time_s) {
                times.push(row.time_s);
            }
            let peak = |celsius: f64| Peak {
                celsius,
                stage: row.stage.clone(),
                t_s: row.time_s,
            };
            if row.device == CPU_DEVICE {
                if let Some(cpu) = row.temp_c {
                    peak(cpu).raise(&mut peaks.cpu);
                }
                continue;
            }
            let own_label = if row.junction_temp_c.is_some() || row.mem_temp_c.is_some() {
                "edge"
            } else {
                "gpu"
            };
            let readings = [
                (own_label, row.temp_c),
                ("junction", row.junction_temp_c),
                ("mem", row.mem_temp_c),
            ];
            let subject = row.address.clone().unwrap_or_else(|| row.device.clone());
            let gpu = peaks.gpu_entry(&subject, &row.device);
            for (label, reading) in readings {
                if let Some(celsius) = reading {
                    gpu.raise(label, peak(celsius));
                }
            }
        }
        peaks.samples = times.len();
        peaks
    }

    /// Takes in `other`'s peaks as if its samples had been observed here.
    pub fn merge(&mut self, other: &ThermalPeaks) {
        self.samples += other.samples;
        if let Some(cpu) = &other.cpu {
            cpu.clone().raise(&mut self.cpu);
        }
        for theirs in &other.gpus {
            let gpu = self.gpu_entry(&theirs.subject, &theirs.device);
            for (label, peak) in &theirs.sensors {
                gpu.raise(label, peak.clone());
            }
        }
    }

    fn gpu_entry(&mut self, subject: &str, device: &str) -> &mut GpuPeaks {
        let index = match self.gpus.iter().position(|g| g.subject == subject) {
            Some(index) => index,
            None => {
                self.gpus.push(GpuPeaks {
                    subject: subject.to_string(),
                    device: device.to_string(),
                    sensors: BTreeMap::new(),
                });
                self.gpus.len() - 1
            }
        };
        &mut self.gpus[index]
    }

    /// Takes in one sample of `stage`.
    pub fn observe(&mut self, stage: &str, sample: &TelemetrySample) {
        self.samples += 1;
        let peak = |celsius: f64| Peak {
            celsius,
            stage: stage.to_string(),
            t_s: sample.t_s,
        };
        if let Some(cpu) = sample.cpu_temp_c {
            peak(cpu).raise(&mut self.cpu);
        }
        for gpu in &sample.gpus {
            let peaks = self.gpu_entry(&gpu.subject(), &gpu.device());
            for temperature in &gpu.temperatures {
                peaks.raise(&temperature.label, peak(temperature.celsius));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::telemetry::{GpuSample, Temperature};

    fn sample(t_s: f64, cpu: f64, junction: f64) -> TelemetrySample {
        TelemetrySample {
            t_s,
            cpu_temp_c: Some(cpu),
            gpus: vec![GpuSample {
                index: 0,
                address: Some("0000:41:00.0".into()),
                temperatures: vec![
                    Temperature {
                        label: "edge".into(),
                        celsius: junction - 10.0,
                        limit_c: None,
                    },
                    Temperature {
                        label: "junction".into(),
                        celsius: junction,
                        limit_c: Some(110.0),
                    },
                ],
                ..GpuSample::default()
            }],
        }
    }

    #[test]
    fn the_hottest_reading_of_each_sensor_is_kept_with_its_stage() {
        let mut peaks = ThermalPeaks::default();
        peaks.observe("power-ramp", &sample(1.0, 70.0, 80.0));
        peaks.observe("mlperf-resnet", &sample(2.0, 85.0, 97.5));
        peaks.observe("mlperf-resnet", &sample(3.0, 60.0, f64::NAN));
        assert_eq!(peaks.samples, 3);
        let cpu = peaks.cpu.as_ref().unwrap();
        assert_eq!((cpu.celsius, cpu.stage.as_str()), (85.0, "mlperf-resnet"));
        assert_eq!(peaks.gpus.len(), 1);
        let (label, hottest) = peaks.gpus[0].hottest().unwrap();
        assert_eq!(label, "junction");
        assert_eq!(hottest.celsius, 97.5);
        assert_eq!(hottest.t_s, 2.0);
        assert_eq!(peaks.gpus[0].sensors["edge"].celsius, 87.5);
        assert_eq!(peaks.gpus[0].subject, "0000:41:00.0");
    }

    #[test]
    fn an_earlier_runs_telemetry_file_counts_toward_the_peaks() {
        let mut text = crate::runtime::telemetry::csv::HEADER.join(",");
        text.push('\n');
        text.push_str(&crate::runtime::telemetry::csv::rows(
            "gpu-memory",
            &sample(5.0, 91.0, 99.0),
        ));
        let rows = crate::runtime::telemetry::csv::parse(&text).unwrap();
        let earlier = ThermalPeaks::from_rows(&rows);
        assert_eq!(earlier.cpu.as_ref().unwrap().celsius, 91.0);
        assert_eq!(earlier.gpus[0].sensors["junction"].celsius, 99.0);
        assert_eq!(earlier.gpus[0].sensors["edge"].stage, "gpu-memory");
        let mut peaks = ThermalPeaks::default();
        peaks.observe("mlperf-resnet", &sample(2.0, 70.0, 80.0));
        peaks.merge(&earlier);
        assert_eq!(peaks.samples, 2);
        assert_eq!(peaks.cpu.as_ref().unwrap().stage, "gpu-memory");
        let (label, hottest) = peaks.gpus[0].hottest().unwrap();
        assert_eq!((label, hottest.celsius), ("junction", 99.0));
    }
}
