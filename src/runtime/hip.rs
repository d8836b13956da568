//! HIP through the runtime API of whichever ROCm is installed (see [`super::rocm`]).

use std::ffi::c_int;

use super::gpu_probe::{self, read_c_string, DeviceQuery};
use super::rocm::{self, api::HIP_ERROR_NO_DEVICE, api::HIP_SUCCESS, Hip};
use super::{guard, normalise_pci_address, RuntimeDevice, RuntimeStatus, NO_DEVICE};

/// The finding when the HIP runtime library is not on this machine.
pub(super) const LIBRARY_NOT_FOUND: &str = "HIP runtime library not found";

/// What the HIP runtime library says about itself and its devices; never panics.
pub(super) fn probe() -> RuntimeStatus {
    let hip = match rocm::hip() {
        Ok(hip) => hip,
        Err(error) if error.is_not_found() => return RuntimeStatus::absent(LIBRARY_NOT_FOUND),
        Err(error) => return RuntimeStatus::loaded_with_finding(error.to_string()),
    };
    guard::catch(|| gpu_probe::query(hip)).unwrap_or_else(|panic| {
        RuntimeStatus::loaded_with_finding(format!("the HIP runtime library failed: {panic}"))
    })
}

impl DeviceQuery for Hip {
    fn start(&self) -> Result<Option<String>, RuntimeStatus> {
        let api = &self.api;
        // SAFETY: every entry point was resolved when the library was opened.
        let init = unsafe { (api.hipInit)(0) };
        let mut version = 0;
        // SAFETY: writes one int.
        let driver_version = (unsafe { (api.hipDriverGetVersion)(&mut version) } == HIP_SUCCESS)
            .then(|| rocm::format_hip_version(version));
        if init == HIP_SUCCESS {
            return Ok(driver_version);
        }
        // Without the amdgpu driver's compute node, ROCm 5 fails hipInit with
        // hipErrorInvalidDevice where ROCm 6 says hipErrorNoDevice: both mean no GPU.
        let finding = if init == HIP_ERROR_NO_DEVICE || !kfd_present() {
            NO_DEVICE.to_string()
        } else {
            describe("hipInit", init)
        };
        Err(gpu_probe::with_version(driver_version, finding))
    }

    fn device_count(&self) -> Result<c_int, String> {
        let mut count: c_int = 0;
        // SAFETY: writes one int.
        match unsafe { (self.api.hipGetDeviceCount)(&mut count) } {
            HIP_SUCCESS => Ok(count),
            failed => Err(describe("hipGetDeviceCount", failed)),
        }
    }

    fn device(&self, ordinal: c_int) -> Result<RuntimeDevice, String> {
        device(self, ordinal)
    }
}

fn device(hip: &Hip, ordinal: c_int) -> Result<RuntimeDevice, String> {
    let api = &hip.api;
    let mut handle: c_int = 0;
    // SAFETY: writes one device handle.
    let answer = unsafe { (api.hipDeviceGet)(&mut handle, ordinal) };
    if answer != HIP_SUCCESS {
        return Err(describe("hipDeviceGet", answer));
    }
    // SAFETY: the runtime writes at most `len` bytes into the buffer.
    let (answer, name) = read_c_string::<256, _>(|buffer, len| unsafe {
        (api.hipDeviceGetName)(buffer, len, handle)
    });
    if answer != HIP_SUCCESS {
        return Err(describe("hipDeviceGetName", answer));
    }
    let mut bytes = 0usize;
    // SAFETY: writes one size.
    let memory_bytes = (unsafe { (api.hipDeviceTotalMem)(&mut bytes, handle) } == HIP_SUCCESS)
        .then_some(bytes as u64);
    Ok(RuntimeDevice {
        index: ordinal as u32,
        name,
        pci_address: pci_address(hip, ordinal),
        memory_bytes,
        arch: hip
            .properties
            .get(ordinal)
            .ok()
            .map(|p| p.gfx_target)
            .filter(|t| !t.is_empty()),
    })
}

fn pci_address(hip: &Hip, ordinal: c_int) -> Option<String> {
    // SAFETY: the runtime writes at most `len` bytes into the buffer.
    let (answer, address) = read_c_string::<64, _>(|buffer, len| unsafe {
        (hip.api.hipDeviceGetPCIBusId)(buffer, len, ordinal)
    });
    (answer == HIP_SUCCESS)
        .then(|| normalise_pci_address(&address))
        .flatten()
}

/// `/dev/kfd`, through which ROCm reaches every AMD GPU.
fn kfd_present() -> bool {
    std::path::Path::new("/dev/kfd").exists()
}

/// The finding for a failed call; a runtime that sees no GPU says `no device`.
fn describe(call: &str, error: c_int) -> String {
    if error == HIP_ERROR_NO_DEVICE {
        NO_DEVICE.to_string()
    } else {
        format!("{call} failed: hipError_t {error}")
    }
}
