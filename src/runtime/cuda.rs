//! CUDA through the driver API (cudarc, loaded at run time).

use std::ffi::{c_char, c_int, c_void};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute, CUresult};

use super::{guard, join_findings, normalise_pci_address, string_from_c_buffer};
use super::{RuntimeDevice, RuntimeStatus, NO_DEVICE};

pub(super) const LIBRARY_NOT_FOUND: &str = "CUDA driver library not found";

/// Every driver entry point the probe calls. cudarc resolves a symbol on first call and
/// panics when it is missing, so the probe checks them all before calling any.
const REQUIRED_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuGetErrorString",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDeviceGetPCIBusId",
];

pub(super) fn probe() -> RuntimeStatus {
    // SAFETY: only tries to open the library by each candidate name and closes it again.
    let present = guard::catch(|| unsafe { sys::is_culib_present() }).unwrap_or(false);
    if !present {
        return RuntimeStatus::absent(LIBRARY_NOT_FOUND);
    }
    guard::catch(query).unwrap_or_else(|panic| {
        RuntimeStatus::loaded_with_finding(format!("the CUDA driver library failed: {panic}"))
    })
}

fn query() -> RuntimeStatus {
    // SAFETY: the library was found a moment ago; `culib` opens it by the same names.
    let library = unsafe { sys::culib() };
    let missing: Vec<&str> = REQUIRED_SYMBOLS
        .iter()
        .copied()
        // SAFETY: looks the symbol up without calling it.
        .filter(|symbol| unsafe { library.get::<*const c_void>(*symbol) }.is_err())
        .collect();
    if !missing.is_empty() {
        return RuntimeStatus::loaded_with_finding(format!(
            "the CUDA driver library lacks {}",
            missing.join(", ")
        ));
    }

    if let Err(error) = result::init() {
        return RuntimeStatus::loaded_with_finding(describe("cuInit", error));
    }
    let driver_version = driver_version();
    let count = match result::device::get_count() {
        Ok(count) => count,
        Err(error) => {
            return RuntimeStatus {
                driver_version,
                ..RuntimeStatus::loaded_with_finding(describe("cuDeviceGetCount", error))
            }
        }
    };
    if count <= 0 {
        return RuntimeStatus {
            driver_version,
            ..RuntimeStatus::loaded_with_finding(NO_DEVICE)
        };
    }

    let mut devices = Vec::new();
    let mut findings = Vec::new();
    for ordinal in 0..count {
        match device(ordinal) {
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

/// `12080` → `12.8`.
fn driver_version() -> Option<String> {
    let mut version: c_int = 0;
    // SAFETY: writes one int.
    let answer = unsafe { sys::cuDriverGetVersion(&mut version) };
    (answer == CUresult::CUDA_SUCCESS)
        .then(|| format!("{}.{}", version / 1000, (version % 1000) / 10))
}

fn device(ordinal: c_int) -> Result<RuntimeDevice, String> {
    let handle = result::device::get(ordinal).map_err(|e| describe("cuDeviceGet", e))?;
    let name = device_name(handle)?;
    // SAFETY: `handle` came from cuDeviceGet.
    let memory_bytes = unsafe { result::device::total_mem(handle) }
        .ok()
        .map(|bytes| bytes as u64);
    Ok(RuntimeDevice {
        index: ordinal as u32,
        name,
        pci_address: pci_address(handle),
        memory_bytes,
        arch: compute_capability(handle),
    })
}

fn device_name(handle: CUdevice) -> Result<String, String> {
    let mut buffer = [0 as c_char; 256];
    // SAFETY: the driver writes at most `len` bytes into the buffer.
    let answer =
        unsafe { sys::cuDeviceGetName(buffer.as_mut_ptr(), buffer.len() as c_int, handle) };
    answer
        .result()
        .map_err(|e| describe("cuDeviceGetName", e))?;
    Ok(string_from_c_buffer(&buffer))
}

fn pci_address(handle: CUdevice) -> Option<String> {
    let mut buffer = [0 as c_char; 64];
    // SAFETY: the driver writes at most `len` bytes into the buffer.
    let answer =
        unsafe { sys::cuDeviceGetPCIBusId(buffer.as_mut_ptr(), buffer.len() as c_int, handle) };
    (answer == CUresult::CUDA_SUCCESS)
        .then(|| normalise_pci_address(&string_from_c_buffer(&buffer)))
        .flatten()
}

/// `8.9`, from the major and minor attributes.
fn compute_capability(handle: CUdevice) -> Option<String> {
    use CUdevice_attribute::{
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR as MAJOR,
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR as MINOR,
    };
    // SAFETY: `handle` came from cuDeviceGet.
    let major = unsafe { result::device::get_attribute(handle, MAJOR) }.ok()?;
    // SAFETY: as above.
    let minor = unsafe { result::device::get_attribute(handle, MINOR) }.ok()?;
    Some(format!("{major}.{minor}"))
}

/// The finding for a failed call; a driver that sees no GPU says `no device`.
fn describe(call: &str, error: DriverError) -> String {
    if error.0 == CUresult::CUDA_ERROR_NO_DEVICE {
        return NO_DEVICE.to_string();
    }
    match error.error_string() {
        Ok(text) => format!("{call} failed: {:?} ({})", error.0, text.to_string_lossy()),
        Err(_) => format!("{call} failed: {:?}", error.0),
    }
}
