//! HIP through the runtime API of whichever ROCm is installed (see [`super::rocm`]).

use std::ffi::{c_char, c_int};

use super::rocm::{self, api::HIP_ERROR_NO_DEVICE, api::HIP_SUCCESS, Hip};
use super::{guard, join_findings, normalise_pci_address, string_from_c_buffer};
use super::{RuntimeDevice, RuntimeStatus, NO_DEVICE};

pub(super) const LIBRARY_NOT_FOUND: &str = "HIP runtime library not found";

pub(super) fn probe() -> RuntimeStatus {
    let hip = match rocm::hip() {
        Ok(hip) => hip,
        Err(error) if error.is_not_found() => return RuntimeStatus::absent(LIBRARY_NOT_FOUND),
        Err(error) => return RuntimeStatus::loaded_with_finding(error.to_string()),
    };
    guard::catch(|| query(hip)).unwrap_or_else(|panic| {
        RuntimeStatus::loaded_with_finding(format!("the HIP runtime library failed: {panic}"))
    })
}

fn query(hip: &Hip) -> RuntimeStatus {
    let api = &hip.api;
    // SAFETY: every entry point was resolved when the library was opened.
    let init = unsafe { (api.hipInit)(0) };
    let mut version = 0;
    // SAFETY: writes one int.
    let driver_version = (unsafe { (api.hipDriverGetVersion)(&mut version) } == HIP_SUCCESS)
        .then(|| rocm::format_hip_version(version));
    if init != HIP_SUCCESS {
        // Without the amdgpu driver's compute node, ROCm 5 fails hipInit with
        // hipErrorInvalidDevice where ROCm 6 says hipErrorNoDevice: both mean no GPU.
        let finding = if init == HIP_ERROR_NO_DEVICE || !kfd_present() {
            NO_DEVICE.to_string()
        } else {
            describe("hipInit", init)
        };
        return RuntimeStatus {
            driver_version,
            ..RuntimeStatus::loaded_with_finding(finding)
        };
    }
    let mut count: c_int = 0;
    // SAFETY: writes one int.
    let answer = unsafe { (api.hipGetDeviceCount)(&mut count) };
    if answer != HIP_SUCCESS {
        return RuntimeStatus {
            driver_version,
            ..RuntimeStatus::loaded_with_finding(describe("hipGetDeviceCount", answer))
        };
    }
    if count <= 0 {
        return RuntimeStatus {
            driver_version,
            ..RuntimeStatus::loaded_with_finding(NO_DEVICE)
        };
    }

    let mut devices = Vec::new();
    let mut findings = Vec::new();
    for ordinal in 0..count {
        match device(hip, ordinal) {
            Ok(device) => devices.push(device),
            Err(error) => findings.push(format!("device {ordinal}: {error}")),
        }
    }
    RuntimeStatus {
        loaded: true,
        driver_version,
        devices,
        finding: join_findings(findings),
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
    let mut buffer = [0 as c_char; 256];
    // SAFETY: the runtime writes at most `len` bytes into the buffer.
    let answer =
        unsafe { (api.hipDeviceGetName)(buffer.as_mut_ptr(), buffer.len() as c_int, handle) };
    if answer != HIP_SUCCESS {
        return Err(describe("hipDeviceGetName", answer));
    }
    let name = string_from_c_buffer(&buffer);
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
    let mut buffer = [0 as c_char; 64];
    // SAFETY: the runtime writes at most `len` bytes into the buffer.
    let answer = unsafe {
        (hip.api.hipDeviceGetPCIBusId)(buffer.as_mut_ptr(), buffer.len() as c_int, ordinal)
    };
    (answer == HIP_SUCCESS)
        .then(|| normalise_pci_address(&string_from_c_buffer(&buffer)))
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
