//! CUDA through the driver API (cudarc, loaded at run time).

use std::ffi::{c_int, c_void};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute, CUresult};

use super::gpu_probe::{self, read_c_string, DeviceQuery};
use super::{guard, normalise_pci_address, RuntimeDevice, RuntimeStatus, NO_DEVICE};

/// The finding when the CUDA driver library is not on this machine.
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

/// What the CUDA driver library says about itself and its devices; never panics.
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

    gpu_probe::query(&DriverApi)
}

/// The driver API, as cudarc opens it.
struct DriverApi;

impl DeviceQuery for DriverApi {
    fn start(&self) -> Result<Option<String>, RuntimeStatus> {
        result::init().map_err(|e| RuntimeStatus::loaded_with_finding(describe("cuInit", e)))?;
        Ok(driver_version())
    }

    fn device_count(&self) -> Result<c_int, String> {
        result::device::get_count().map_err(|e| describe("cuDeviceGetCount", e))
    }

    fn device(&self, ordinal: c_int) -> Result<RuntimeDevice, String> {
        device(ordinal)
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
    // SAFETY: the driver writes at most `len` bytes into the buffer.
    let (answer, name) =
        read_c_string::<256, _>(|buffer, len| unsafe { sys::cuDeviceGetName(buffer, len, handle) });
    answer
        .result()
        .map_err(|e| describe("cuDeviceGetName", e))?;
    Ok(name)
}

fn pci_address(handle: CUdevice) -> Option<String> {
    // SAFETY: the driver writes at most `len` bytes into the buffer.
    let (answer, address) = read_c_string::<64, _>(|buffer, len| unsafe {
        sys::cuDeviceGetPCIBusId(buffer, len, handle)
    });
    (answer == CUresult::CUDA_SUCCESS)
        .then(|| normalise_pci_address(&address))
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
