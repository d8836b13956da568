//! HIP through the runtime API (rocmrc, loaded at run time).

use std::ffi::{c_char, c_int, c_void};
use std::mem::MaybeUninit;

use rocmrc::hip::result::{self, HipError};
use rocmrc::hip::sys::{self, hipDeviceProp_tR0600, hipError_t};

use super::{guard, join_findings, normalise_pci_address, string_from_c_buffer};
use super::{RuntimeDevice, RuntimeStatus, NO_DEVICE};

pub(super) const LIBRARY_NOT_FOUND: &str = "HIP runtime library not found";

/// Every entry point the probe calls. rocmrc resolves a symbol on first call and panics
/// when it is missing, so the probe checks them all before calling any.
const REQUIRED_SYMBOLS: &[&str] = &[
    "hipInit",
    "hipDriverGetVersion",
    "hipGetDeviceCount",
    "hipDeviceGet",
    "hipDeviceGetName",
    "hipDeviceTotalMem",
    "hipDeviceGetPCIBusId",
];

/// Gives the gfx target; ROCm before 6.0 does not have it, and the probe then reports
/// the devices without their target.
const PROPERTIES_SYMBOL: &str = "hipGetDevicePropertiesR0600";

pub(super) fn probe() -> RuntimeStatus {
    // SAFETY: only tries to open the library by each candidate name and closes it again.
    let present = guard::catch(|| unsafe { sys::is_rocmlib_present() }).unwrap_or(false);
    if !present {
        return RuntimeStatus::absent(LIBRARY_NOT_FOUND);
    }
    guard::catch(query).unwrap_or_else(|panic| {
        RuntimeStatus::loaded_with_finding(format!("the HIP runtime library failed: {panic}"))
    })
}

fn query() -> RuntimeStatus {
    // SAFETY: the library was found a moment ago; `rocmlib` opens it by the same names.
    let library = unsafe { sys::rocmlib() };
    // SAFETY: looks a symbol up without calling it.
    let has_symbol =
        |symbol: &str| unsafe { library.get::<*const c_void>(symbol.as_bytes()) }.is_ok();
    let missing: Vec<&str> = REQUIRED_SYMBOLS
        .iter()
        .copied()
        .filter(|symbol| !has_symbol(symbol))
        .collect();
    if !missing.is_empty() {
        return RuntimeStatus::loaded_with_finding(format!(
            "the HIP runtime library lacks {}",
            missing.join(", ")
        ));
    }
    let has_properties = has_symbol(PROPERTIES_SYMBOL);

    if let Err(error) = result::init() {
        return RuntimeStatus::loaded_with_finding(describe("hipInit", error));
    }
    let driver_version = result::version::driver().ok().map(format_version);
    let count = match result::device::get_count() {
        Ok(count) => count,
        Err(error) => {
            return RuntimeStatus {
                driver_version,
                ..RuntimeStatus::loaded_with_finding(describe("hipGetDeviceCount", error))
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
        match device(ordinal, has_properties) {
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

/// HIP encodes `major * 10_000_000 + minor * 100_000 + patch`: `60443483` → `6.4.43483`.
fn format_version(version: i32) -> String {
    format!(
        "{}.{}.{}",
        version / 10_000_000,
        (version / 100_000) % 100,
        version % 100_000
    )
}

fn device(ordinal: c_int, has_properties: bool) -> Result<RuntimeDevice, String> {
    let handle = result::device::get(ordinal).map_err(|e| describe("hipDeviceGet", e))?;
    let name = device_name(handle)?;
    let memory_bytes = result::device::total_mem(handle)
        .ok()
        .map(|bytes| bytes as u64);
    Ok(RuntimeDevice {
        index: ordinal as u32,
        name,
        pci_address: pci_address(ordinal),
        memory_bytes,
        arch: has_properties.then(|| gfx_target(ordinal)).flatten(),
    })
}

fn device_name(handle: sys::hipDevice_t) -> Result<String, String> {
    let mut buffer = [0 as c_char; 256];
    // SAFETY: the runtime writes at most `len` bytes into the buffer.
    let answer =
        unsafe { sys::hipDeviceGetName(buffer.as_mut_ptr(), buffer.len() as c_int, handle) };
    answer
        .result()
        .map_err(|e| describe("hipDeviceGetName", e))?;
    Ok(string_from_c_buffer(&buffer))
}

fn pci_address(ordinal: c_int) -> Option<String> {
    let mut buffer = [0 as c_char; 64];
    // SAFETY: the runtime writes at most `len` bytes into the buffer.
    let answer =
        unsafe { sys::hipDeviceGetPCIBusId(buffer.as_mut_ptr(), buffer.len() as c_int, ordinal) };
    (answer == hipError_t::hipSuccess)
        .then(|| normalise_pci_address(&string_from_c_buffer(&buffer)))
        .flatten()
}

/// `gfx1100`, from `gcnArchName` without its feature suffix (`gfx90a:sramecc+:xnack-`).
fn gfx_target(ordinal: c_int) -> Option<String> {
    let mut properties = MaybeUninit::<hipDeviceProp_tR0600>::zeroed();
    // SAFETY: the runtime fills the struct of the layout its symbol is named after.
    let answer = unsafe { sys::hipGetDevicePropertiesR0600(properties.as_mut_ptr(), ordinal) };
    if answer != hipError_t::hipSuccess {
        return None;
    }
    // SAFETY: zeroed first, so every byte is initialised; the fields are plain data.
    let properties = unsafe { properties.assume_init() };
    let arch = string_from_c_buffer(&properties.gcnArchName);
    let target = arch.split(':').next().unwrap_or_default().trim();
    (!target.is_empty()).then(|| target.to_string())
}

/// The finding for a failed call; a runtime that sees no GPU says `no device`.
fn describe(call: &str, error: HipError) -> String {
    if error.0 == hipError_t::hipErrorNoDevice {
        NO_DEVICE.to_string()
    } else {
        format!("{call} failed: {:?}", error.0)
    }
}

#[cfg(test)]
mod tests {
    use super::format_version;

    #[test]
    fn formats_the_hip_version_encoding() {
        assert_eq!(format_version(60443483), "6.4.43483");
        assert_eq!(format_version(50_203_000), "5.2.3000");
    }
}
