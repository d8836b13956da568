//! The NVIDIA driver's messages (`NVRM: …`): Xids in every shape the driver has printed
//! (`Xid (PCI:0000:41:00): 79, …`, the older `Xid (0000:41:00): …`, the MIG form with
//! `GPU-I:`/`GPU-CI:`), a GPU fallen off the bus without an Xid (in one record, or split
//! over three: "The NVIDIA GPU 0000:b3:00.0" / "(PCI ID: …) installed in this system has"
//! / "fallen off the bus …"), and a GPU that never came up.

use super::lines::{first_address, parse_address};
use super::records::Record;
use super::{Driver, Found, KernelEventKind};
use crate::inventory::pci::PciAddress;
use crate::inventory::xid;

/// Messages that say the driver could not bring a GPU up.
const INIT_FAILURES: &[&str] = &[
    "RmInitAdapter failed",
    "rm_init_adapter failed",
    "probe routine failed",
    "probe routine was not called",
    "does not have the necessary power cables connected",
    "Failed to copy vbios to system memory",
    "failed to allocate memory for the PCI I/O region",
    "This PCI I/O region assigned to your NVIDIA device is invalid",
    "None of the NVIDIA graphics adapters were initialized",
];

/// How many records back "The NVIDIA GPU <address>" may start a fallen-off message.
const FALLEN_SPAN: usize = 3;

/// The NVIDIA messages among `records`.
pub(super) fn scan(records: &[Record]) -> Vec<Found> {
    let mut found = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let text = record.text.as_str();
        if let Some(address) = failed_probe(text) {
            found.push(Found {
                index,
                address: Some(address),
                kind: KernelEventKind::InitFailure {
                    cause: "probe failed".into(),
                },
                driver: Driver::Nvidia,
            });
            continue;
        }
        let Some(at) = text.find("NVRM: ") else {
            continue;
        };
        let message = &text[at + "NVRM: ".len()..];
        let hit = if let Some(rest) = message.strip_prefix("Xid (") {
            xid_line(rest)
        } else if message.contains("fallen off the bus") {
            let address = first_address(message).or_else(|| fallen_start(records, index));
            Some((address, KernelEventKind::FallenOffTheBus))
        } else {
            INIT_FAILURES
                .iter()
                .find(|f| message.contains(**f))
                .map(|failure| {
                    let cause = (*failure).to_string();
                    (
                        first_address(message),
                        KernelEventKind::InitFailure { cause },
                    )
                })
        };
        if let Some((address, kind)) = hit {
            found.push(Found {
                index,
                address,
                kind,
                driver: Driver::Nvidia,
            });
        }
    }
    found
}

/// `PCI:0000:41:00): 79, pid=…`, `0000:41:00): 31, Ch 00000010, …` or
/// `PCI:0000:61:00 GPU-I:01 GPU-CI:00): 94, …`.
fn xid_line(rest: &str) -> Option<(Option<PciAddress>, KernelEventKind)> {
    let (inside, after) = rest.split_once(')')?;
    let address = inside.split_whitespace().next().and_then(parse_address);
    let code: u32 = after
        .trim_start_matches(':')
        .trim()
        .split([',', ' '])
        .next()?
        .trim()
        .parse()
        .ok()?;
    let (name, xid_class) = xid::classify(code);
    // Newer drivers name the cause of an Xid 45 in its own line.
    let caused_by = after
        .split_once("caused by previous Xid ")
        .and_then(|(_, n)| n.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok());
    Some((
        address,
        KernelEventKind::Xid {
            code,
            name,
            xid_class,
            caused_by,
        },
    ))
}

/// The address of "The NVIDIA GPU <address>" in one of the records just before `index`,
/// where a fallen-off message split over several records starts.
fn fallen_start(records: &[Record], index: usize) -> Option<PciAddress> {
    records[index.saturating_sub(FALLEN_SPAN)..index]
        .iter()
        .rev()
        .find_map(|r| {
            let (_, after) = r.text.split_once("NVRM: The NVIDIA GPU ")?;
            first_address(after)
        })
}

/// `nvidia: probe of 0000:03:00.0 failed with error -1`, the kernel's own word that the
/// driver gave up on a device.
fn failed_probe(text: &str) -> Option<PciAddress> {
    let rest = text.strip_prefix("nvidia: probe of ")?;
    rest.contains(" failed with error")
        .then(|| rest.split_whitespace().next().and_then(parse_address))
        .flatten()
}

/// The device an NVIDIA message names, for a neighbour that names none.
pub(super) fn names_device(text: &str) -> Option<PciAddress> {
    if let Some(address) = failed_probe(text) {
        return Some(address);
    }
    if let Some(("nvidia", address, _)) = super::lines::device_prefix(text) {
        return Some(address);
    }
    let (_, message) = text.split_once("NVRM: ")?;
    if let Some(rest) = message.strip_prefix("Xid (") {
        return rest.split([')', ' ']).next().and_then(parse_address);
    }
    let named = message.starts_with("GPU ") || message.starts_with("The NVIDIA GPU ");
    named.then(|| first_address(message)).flatten()
}
