//! NVIDIA telemetry through NVML, loaded at run time like the runtime probe loads it:
//! a missing library means no NVIDIA source, and a call that panics inside the
//! bindings becomes a missing value, never a dead worker.

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor, TemperatureThreshold};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::sample::{GpuSample, Temperature, ThrottleReason};
use crate::runtime::guard;
use crate::runtime::normalise_pci_address;

pub(in crate::runtime) use crate::runtime::nvml::LIBRARY_NOT_FOUND;

/// An initialised NVML and how many GPUs it saw.
pub struct NvmlSource {
    nvml: Nvml,
    count: u32,
}

impl NvmlSource {
    /// Loads NVML; the error is the finding that explains why there is no source.
    pub fn open() -> Result<NvmlSource, String> {
        let opened = guard::catch(|| match Nvml::init() {
            Ok(nvml) => {
                let count = nvml
                    .device_count()
                    .map_err(|e| format!("nvmlDeviceGetCount failed: {e}"))?;
                Ok(NvmlSource { nvml, count })
            }
            Err(NvmlError::LibloadingError(_)) => Err(LIBRARY_NOT_FOUND.to_string()),
            Err(NvmlError::DriverNotLoaded) => Err("the NVIDIA driver is not loaded".to_string()),
            Err(e) => Err(format!("nvmlInit failed: {e}")),
        });
        opened.unwrap_or_else(|panic| Err(format!("the NVML library failed: {panic}")))
    }

    pub fn device_count(&self) -> u32 {
        self.count
    }

    /// One sample per GPU NVML can still hand out.
    pub fn read(&self) -> Vec<GpuSample> {
        (0..self.count)
            .filter_map(|index| {
                guard::catch(|| {
                    let device = self.nvml.device_by_index(index).ok()?;
                    Some(read_device(index, &device))
                })
                .ok()
                .flatten()
            })
            .collect()
    }
}

fn read_device(index: u32, device: &Device<'_>) -> GpuSample {
    let limit_c = device
        .temperature_threshold(TemperatureThreshold::Slowdown)
        .ok()
        .map(f64::from);
    GpuSample {
        index,
        address: device
            .pci_info()
            .ok()
            .and_then(|pci| normalise_pci_address(&pci.bus_id)),
        power_w: device
            .power_usage()
            .ok()
            .map(|milliwatts| f64::from(milliwatts) / 1000.0),
        temperatures: device
            .temperature(TemperatureSensor::Gpu)
            .ok()
            .map(|celsius| Temperature {
                label: "gpu".to_string(),
                celsius: f64::from(celsius),
                limit_c,
            })
            .into_iter()
            .collect(),
        sm_clock_mhz: device.clock_info(Clock::SM).ok().map(f64::from),
        mem_clock_mhz: device.clock_info(Clock::Memory).ok().map(f64::from),
        util_percent: device.utilization_rates().ok().map(|u| f64::from(u.gpu)),
        throttling: device
            .current_throttle_reasons()
            .ok()
            .map(|reasons| throttle_reasons(reasons.bits())),
    }
}

/// NVML's `nvmlClocksThrottleReason*` bits, by name.
pub fn throttle_reasons(bits: u64) -> Vec<ThrottleReason> {
    const BITS: [(u64, ThrottleReason); 9] = [
        (0x1, ThrottleReason::Idle),
        (0x2, ThrottleReason::ApplicationClocks),
        (0x4, ThrottleReason::SwPowerCap),
        (0x8, ThrottleReason::HwSlowdown),
        (0x10, ThrottleReason::SyncBoost),
        (0x20, ThrottleReason::SwThermal),
        (0x40, ThrottleReason::HwThermal),
        (0x80, ThrottleReason::HwPowerBrake),
        (0x100, ThrottleReason::DisplayClocks),
    ];
    BITS.into_iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, reason)| reason)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_bits_name_their_reasons() {
        assert!(throttle_reasons(0).is_empty());
        assert_eq!(
            throttle_reasons(0x4 | 0x40),
            [ThrottleReason::SwPowerCap, ThrottleReason::HwThermal]
        );
        // Bits NVML may add later are ignored rather than misnamed.
        assert_eq!(throttle_reasons(0x1 | 0x8000), [ThrottleReason::Idle]);
    }

    #[test]
    fn the_wrapper_bits_match_the_ones_named_here() {
        use nvml_wrapper::bitmasks::device::ThrottleReasons;
        assert_eq!(ThrottleReasons::SW_POWER_CAP.bits(), 0x4);
        assert_eq!(ThrottleReasons::HW_THERMAL_SLOWDOWN.bits(), 0x40);
        assert_eq!(ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN.bits(), 0x80);
    }
}
