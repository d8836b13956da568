//! One reading of every telemetry source, and the [`Sampler`] that takes it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{hwmon, nvml};

/// One temperature sensor of a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Temperature {
    /// `edge`, `junction`, `mem` (hwmon labels) or `gpu` (NVML).
    pub label: String,
    /// The reading, in °C.
    pub celsius: f64,
    /// Where the GPU starts protecting itself: hwmon `crit` (else `emergency`), NVML's
    /// slowdown threshold.
    pub limit_c: Option<f64>,
}

impl Temperature {
    /// Whether the reading has reached the sensor's limit.
    pub fn over_limit(&self) -> bool {
        self.limit_c.is_some_and(|limit| self.celsius >= limit)
    }
}

/// Why a GPU runs below its clocks: `None` when the source cannot tell, an empty list
/// when it says nothing holds it back.
pub type Throttling = Option<Vec<ThrottleReason>>;

/// One reason a GPU reports for holding its clocks down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThrottleReason {
    /// Nothing runs on the GPU, so it clocks down.
    Idle,
    /// The application clock setting caps the clocks.
    ApplicationClocks,
    /// The driver holds power to the board's power limit.
    SwPowerCap,
    /// The hardware slows down (heat, or power drawn too high).
    HwSlowdown,
    /// Held to the clocks of other GPUs in a sync-boost group.
    SyncBoost,
    /// The driver slows down for heat.
    SwThermal,
    /// The hardware slows down for heat.
    HwThermal,
    /// The board's external power brake slows it down.
    HwPowerBrake,
    /// The display clock setting caps the clocks.
    DisplayClocks,
}

impl ThrottleReason {
    /// The name in `telemetry.csv` and the metrics: `sw_power_cap`.
    pub fn as_str(self) -> &'static str {
        match self {
            ThrottleReason::Idle => "idle",
            ThrottleReason::ApplicationClocks => "application_clocks",
            ThrottleReason::SwPowerCap => "sw_power_cap",
            ThrottleReason::HwSlowdown => "hw_slowdown",
            ThrottleReason::SyncBoost => "sync_boost",
            ThrottleReason::SwThermal => "sw_thermal",
            ThrottleReason::HwThermal => "hw_thermal",
            ThrottleReason::HwPowerBrake => "hw_power_brake",
            ThrottleReason::DisplayClocks => "display_clocks",
        }
    }

    /// The reason named `text` as [`as_str`](Self::as_str) writes it, or `None`.
    pub fn parse(text: &str) -> Option<ThrottleReason> {
        ThrottleReason::ALL
            .into_iter()
            .find(|reason| reason.as_str() == text)
    }

    /// Every reason, in the order [`parse`](Self::parse) tries them.
    pub const ALL: [ThrottleReason; 9] = [
        ThrottleReason::Idle,
        ThrottleReason::ApplicationClocks,
        ThrottleReason::SwPowerCap,
        ThrottleReason::HwSlowdown,
        ThrottleReason::SyncBoost,
        ThrottleReason::SwThermal,
        ThrottleReason::HwThermal,
        ThrottleReason::HwPowerBrake,
        ThrottleReason::DisplayClocks,
    ];

    /// Heat or power holds the clocks down, as opposed to idleness or a setting.
    pub fn is_thermal_or_power(self) -> bool {
        matches!(
            self,
            ThrottleReason::SwPowerCap
                | ThrottleReason::HwSlowdown
                | ThrottleReason::SwThermal
                | ThrottleReason::HwThermal
                | ThrottleReason::HwPowerBrake
        )
    }
}

/// What one GPU reported at one moment; `None` for anything it did not say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Position among the GPUs of its source (PCI order for hwmon, NVML's index).
    pub index: u32,
    /// PCI address in sysfs spelling.
    pub address: Option<String>,
    /// Board power draw, in watts.
    pub power_w: Option<f64>,
    /// Every temperature sensor it has.
    pub temperatures: Vec<Temperature>,
    /// Shader (SM) clock, in MHz.
    pub sm_clock_mhz: Option<f64>,
    /// Memory clock, in MHz.
    pub mem_clock_mhz: Option<f64>,
    /// How busy the GPU was, in percent.
    pub util_percent: Option<f64>,
    /// Why its clocks were held down.
    pub throttling: Throttling,
}

impl GpuSample {
    /// The name of the device in `telemetry.csv` and in metric names: `gpu0`.
    pub fn device(&self) -> String {
        format!("gpu{}", self.index)
    }

    /// The GPU's own temperature: hwmon's `edge`, NVML's `gpu`, else the first sensor.
    pub fn temp(&self) -> Option<&Temperature> {
        self.temperature("edge")
            .or_else(|| self.temperature("gpu"))
            .or_else(|| self.temperatures.first())
    }

    /// The sensor labelled `label`, if the GPU has one.
    pub fn temperature(&self, label: &str) -> Option<&Temperature> {
        self.temperatures.iter().find(|t| t.label == label)
    }

    /// How the GPU is named in findings: its address, else its index.
    pub fn subject(&self) -> String {
        self.address.clone().unwrap_or_else(|| self.device())
    }
}

/// Every source read at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TelemetrySample {
    /// Seconds since sampling began.
    pub t_s: f64,
    /// One sample per GPU.
    pub gpus: Vec<GpuSample>,
    /// The hottest CPU socket, in °C.
    pub cpu_temp_c: Option<f64>,
}

/// The telemetry sources of one machine, found once and read on every sample.
pub struct Sampler {
    amd: Vec<hwmon::AmdGpu>,
    cpu: Option<hwmon::CpuSensor>,
    nvidia: Option<nvml::NvmlSource>,
    findings: Vec<String>,
}

impl Sampler {
    /// Finds the sources under `root` (`root/sys`) and loads NVML. Never fails: a
    /// source that cannot be used is left out and explained in [`Sampler::findings`].
    pub fn discover(root: &Path) -> Sampler {
        let mut findings = Vec::new();
        let amd = hwmon::amd_gpus(root);
        let cpu = hwmon::cpu_sensor(root);
        let nvidia = match nvml::NvmlSource::open() {
            Ok(source) => Some(source),
            Err(finding) => {
                // Without the library there is simply no NVIDIA source; anything else
                // (a driver that will not talk) deserves a word.
                if finding != nvml::LIBRARY_NOT_FOUND {
                    findings.push(format!("NVML telemetry: {finding}"));
                }
                None
            }
        };
        Sampler::from_sources(amd, cpu, nvidia, findings)
    }

    /// Only the sysfs sources under `root`: what a test with a tree on disk reads.
    pub fn discover_sysfs(root: &Path) -> Sampler {
        Sampler::from_sources(
            hwmon::amd_gpus(root),
            hwmon::cpu_sensor(root),
            None,
            Vec::new(),
        )
    }

    fn from_sources(
        amd: Vec<hwmon::AmdGpu>,
        cpu: Option<hwmon::CpuSensor>,
        nvidia: Option<nvml::NvmlSource>,
        mut findings: Vec<String>,
    ) -> Sampler {
        let sampler = Sampler {
            amd,
            cpu,
            nvidia,
            findings: Vec::new(),
        };
        if !sampler.has_power_source() {
            findings.push(NO_POWER_SOURCE.to_string());
        }
        Sampler {
            findings,
            ..sampler
        }
    }

    /// Whether any source can report power, so that energy can be measured.
    pub fn has_power_source(&self) -> bool {
        self.amd.iter().any(hwmon::AmdGpu::has_power)
            || self.nvidia.as_ref().is_some_and(|n| n.device_count() > 0)
    }

    /// What was noticed while looking for sources.
    pub fn findings(&self) -> &[String] {
        &self.findings
    }

    /// Reads every source. Unreadable values are `None`; nothing here fails.
    pub fn sample(&mut self, t_s: f64) -> TelemetrySample {
        let mut gpus: Vec<GpuSample> = self.amd.iter().map(hwmon::AmdGpu::read).collect();
        if let Some(nvidia) = &self.nvidia {
            let offset = gpus.len() as u32;
            gpus.extend(nvidia.read().into_iter().map(|mut gpu| {
                gpu.index += offset;
                gpu
            }));
        }
        TelemetrySample {
            t_s,
            gpus,
            cpu_temp_c: self.cpu.as_ref().and_then(hwmon::CpuSensor::read),
        }
    }
}

/// The note a run carries when nothing on the machine reports power.
pub const NO_POWER_SOURCE: &str =
    "energy not measured: no power source found (no NVML GPU, no amdgpu hwmon power reading)";
