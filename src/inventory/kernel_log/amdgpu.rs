//! amdgpu's messages: ring timeouts (`[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring
//! gfx_0.0.0 timeout, …`, with or without the `amdgpu 0000:43:00.0:` before it, as older
//! kernels print it), per-ring resets and soft recoveries, GPU resets, a GPU that failed
//! to come up or to load its firmware, and SMU and MES firmware that stopped answering.

use super::lines::{device_prefix, first_address, word_after};
use super::records::Record;
use super::{Driver, Found, KernelEventKind};
use crate::inventory::pci::PciAddress;

/// Messages that say the GPU never came up.
const INIT_FAILURES: &[&str] = &[
    "Fatal error during GPU init",
    "amdgpu_device_ip_init failed",
    "amdgpu_device_init failed",
    "hw_init of IP block",
    "sw_init of IP block",
    "early_init of IP block",
    "late_init of IP block",
    "resume of IP block",
    "Failed to setup smc hw",
];

/// Messages that say firmware could not be loaded into the GPU.
const FIRMWARE_FAILURES: &[&str] = &[
    "failed to load ucode",
    "Failed to load ucode",
    "LOAD_IP_FW",
    "PSP load",
    "PSP firmware loading failed",
    "psp load",
    "failed to load firmware",
    "Failed to load firmware",
    "firmware loading failed",
    "Direct firmware load for amdgpu/",
];

/// Messages that say the SMU stopped answering.
const SMU_HANGS: &[&str] = &[
    "I'm not done with your previous command",
    "Failed to export SMU metrics table",
    "SMU: response:",
    "SMU is not responding",
    "SMU: No response",
];

/// Messages that say the MES stopped answering ("failed to response" is how older
/// kernels spell it, `MES(1)` how newer ones name the second MES pipe).
const MES_HANGS: &[&str] = &[
    "failed to respond to msg=",
    "failed to response msg=",
    "failed to add hardware queue to MES",
    "failed to remove hardware queue from MES",
    "MES might be in unrecoverable state",
];

/// The amdgpu messages among `records`.
pub(super) fn scan(records: &[Record]) -> Vec<Found> {
    records
        .iter()
        .enumerate()
        .filter_map(|(index, record)| {
            let text = record.text.as_str();
            if !is_amdgpu(text) {
                return None;
            }
            let (address, kind) = classify(text)?;
            Some(Found {
                index,
                address,
                kind,
                driver: Driver::Amdgpu,
            })
        })
        .collect()
}

fn is_amdgpu(text: &str) -> bool {
    text.contains("amdgpu") || text.starts_with("[drm") || text.contains("[drm]")
}

fn classify(text: &str) -> Option<(Option<PciAddress>, KernelEventKind)> {
    let address = device_prefix(text)
        .filter(|(driver, ..)| *driver == "amdgpu")
        .map(|(_, a, _)| a);
    let ring = |marker: &str| word_after(text, marker).map(str::to_string);
    let lower = text.to_ascii_lowercase();
    if lower.contains(" reset succeeded") && lower.contains("ring ") {
        return Some((
            address,
            KernelEventKind::RingReset {
                ring: ring_name(text),
            },
        ));
    }
    if text.contains("wedged, but recovered through reset") {
        return Some((address, KernelEventKind::RingReset { ring: None }));
    }
    if lower.contains("ring ") && text.contains("timeout") {
        let kind = if text.contains("soft recovered") {
            KernelEventKind::RingReset {
                ring: ring("ring "),
            }
        } else {
            KernelEventKind::RingTimeout {
                ring: ring("ring "),
            }
        };
        return Some((address, kind));
    }
    if text.contains("GPU reset begin") {
        return Some((address, KernelEventKind::GpuReset));
    }
    if let Some(failure) = INIT_FAILURES.iter().find(|f| text.contains(**f)) {
        let cause = if failure.ends_with("IP block") {
            text.split_once(failure)
                .map(|(_, after)| format!("{failure}{after}"))
                .unwrap_or_else(|| (*failure).to_string())
        } else {
            (*failure).to_string()
        };
        return Some((address, KernelEventKind::InitFailure { cause }));
    }
    // `amdgpu: probe of 0000:03:00.0 failed with error -22`, and the driver core's newer
    // `amdgpu 0000:03:00.0: probe with driver amdgpu failed with error -62`.
    if (text.contains("probe of ") || text.contains("probe with driver"))
        && text.contains(" failed with error")
    {
        let address = address.or_else(|| first_address(text));
        return Some((
            address,
            KernelEventKind::InitFailure {
                cause: "probe failed".into(),
            },
        ));
    }
    if FIRMWARE_FAILURES.iter().any(|f| text.contains(f)) && lower.contains("fail") {
        let cause = message_of(text).to_string();
        return Some((address, KernelEventKind::FirmwareLoad { cause }));
    }
    if SMU_HANGS.iter().any(|f| text.contains(f)) {
        return Some((address, KernelEventKind::SmuHang));
    }
    if text.contains("MES") && MES_HANGS.iter().any(|f| text.contains(f)) {
        return Some((address, KernelEventKind::MesHang));
    }
    None
}

/// `Ring gfx_0.0.0 reset succeeded` → `gfx_0.0.0`.
fn ring_name(text: &str) -> Option<String> {
    word_after(text, "Ring ")
        .or_else(|| word_after(text, "ring "))
        .map(str::to_string)
}

/// The message without the device and the driver's own prefixes, capped for a cause.
fn message_of(text: &str) -> &str {
    let rest = device_prefix(text).map_or(text, |(_, _, rest)| rest);
    let rest = rest.strip_prefix("amdgpu: ").unwrap_or(rest);
    let end = rest.char_indices().nth(160).map_or(rest.len(), |(i, _)| i);
    &rest[..end]
}

/// The device an amdgpu message names, for a neighbour that names none.
pub(super) fn names_device(text: &str) -> Option<PciAddress> {
    device_prefix(text)
        .filter(|(driver, ..)| *driver == "amdgpu")
        .map(|(_, a, _)| a)
}
