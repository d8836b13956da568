//! Telemetry of a run: GPU power, temperatures, clocks and load from amdgpu's hwmon
//! and from NVML, the CPU's temperature from hwmon, sampled in the background while
//! stages run.
//!
//! Samples go to the run's `telemetry.csv`; each stage gets its energy (the trapezoid
//! rule over the power samples) as metrics, and a finding for any GPU above its
//! temperature limit or throttled by heat or power. A machine with no power source
//! gets no energy figures and a note that says why.

pub mod bmc_watch;
pub mod csv;
pub mod energy;
pub mod gpu_metrics;
pub mod hwmon;
mod limits;
mod metrics;
mod nvml;
mod peaks;
mod recorder;
mod sample;

pub use crate::record::{joules_to_kwh, run_energy_j, ENERGY_METRIC};
pub use energy::{Energy, EnergyMeter, MAX_BRIDGED_GAP_S};
pub use limits::LimitWatch;
pub use nvml::throttle_reasons;
pub use peaks::{GpuPeaks, Peak, ThermalPeaks};
pub use recorder::{
    RecorderConfig, SampleSink, Sources, StageTelemetry, TelemetryRecorder, DEFAULT_INTERVAL,
};
pub use sample::{
    GpuSample, Sampler, TelemetrySample, Temperature, ThrottleReason, Throttling, NO_POWER_SOURCE,
};
