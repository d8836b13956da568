//! The CUDA and HIP probes written once: [`query`] starts a runtime, counts its devices and
//! describes each through a [`DeviceQuery`], which `cuda.rs` and `hip.rs` implement with
//! their vendor's calls and error words.

use std::ffi::{c_char, c_int};

use super::{join_findings, string_from_c_buffer, RuntimeDevice, RuntimeStatus, NO_DEVICE};

/// One GPU runtime's calls as the probe makes them; each failure is the finding to report.
pub(super) trait DeviceQuery {
    /// Initialises the runtime and reads the driver's version (`12.8`, `6.2.41133`);
    /// `Err` is the status of a runtime that loaded but cannot be used.
    fn start(&self) -> Result<Option<String>, RuntimeStatus>;
    /// How many devices the runtime sees.
    fn device_count(&self) -> Result<c_int, String>;
    /// What the runtime says about device `ordinal`.
    fn device(&self, ordinal: c_int) -> Result<RuntimeDevice, String>;
}

/// The status of a runtime that loaded, with its driver's version when it told it.
pub(super) fn with_version(
    driver_version: Option<String>,
    finding: impl Into<String>,
) -> RuntimeStatus {
    RuntimeStatus {
        driver_version,
        ..RuntimeStatus::loaded_with_finding(finding)
    }
}

/// Every device the runtime reports, a device it cannot describe becoming a finding.
pub(super) fn query(runtime: &impl DeviceQuery) -> RuntimeStatus {
    let driver_version = match runtime.start() {
        Ok(version) => version,
        Err(status) => return status,
    };
    let count = match runtime.device_count() {
        Ok(count) => count,
        Err(finding) => return with_version(driver_version, finding),
    };
    if count <= 0 {
        return with_version(driver_version, NO_DEVICE);
    }
    let mut devices = Vec::new();
    let mut findings = Vec::new();
    for ordinal in 0..count {
        match runtime.device(ordinal) {
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

/// The text a runtime call writes into a C string buffer of `N` bytes, and the call's
/// answer (its status), which says whether the text is to be believed.
pub(super) fn read_c_string<const N: usize, Answer>(
    write: impl FnOnce(*mut c_char, c_int) -> Answer,
) -> (Answer, String) {
    let mut buffer = [0 as c_char; N];
    let answer = write(buffer.as_mut_ptr(), N as c_int);
    (answer, string_from_c_buffer(&buffer))
}
