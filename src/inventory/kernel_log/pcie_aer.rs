//! PCIe Advanced Error Reporting as the kernel logs it. A port reports an error it
//! received ("AER: Uncorrected (Fatal) error received: 0000:01:00.0", newer kernels
//! "AER: Correctable error message received from 0000:01:00.0"), then the failing device's
//! own lines follow ("PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver
//! ID)", its status, and one line per error bit: "[ 0] RxErr", "[ 5] SDES"), and for an
//! uncorrectable error whether the kernel recovered ("can't recover (no error_detected
//! callback)", "device recovery failed"). Older kernels say "Corrected" and
//! "Uncorrected", newer ones "Correctable" and "Uncorrectable".

use serde::Serialize;

use super::lines::{device_prefix, first_address};
use super::records::Record;
use super::{Driver, Found, KernelEventKind};
use crate::inventory::pci::PciAddress;

/// How bad a PCIe error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AerSeverity {
    /// The link repaired it (a replayed packet): the transaction was not lost.
    Correctable,
    /// A transaction was lost; the link still works.
    #[serde(rename = "nonfatal")]
    NonFatal,
    /// The link is unreliable: the device is reset, or lost.
    Fatal,
}

impl AerSeverity {
    /// The severity's name: `correctable`, `nonfatal`, `fatal`.
    pub fn as_str(self) -> &'static str {
        match self {
            AerSeverity::Correctable => "correctable",
            AerSeverity::NonFatal => "nonfatal",
            AerSeverity::Fatal => "fatal",
        }
    }

    /// The severity the kernel's words name: "Corrected", "Correctable", "Uncorrected
    /// (Non-Fatal)", "Uncorrectable (Fatal)", …
    fn from_words(words: &str) -> Option<AerSeverity> {
        if words.contains("Non-Fatal") || words.contains("Nonfatal") {
            Some(AerSeverity::NonFatal)
        } else if words.contains("Fatal") {
            Some(AerSeverity::Fatal)
        } else if words.contains("Correct") {
            Some(AerSeverity::Correctable)
        } else {
            None
        }
    }
}

/// How many records after a report its device's own lines may follow.
const FOLLOW_SPAN: usize = 6;

/// The AER errors among `records`: one per device's "PCIe Bus Error" line, and one per
/// report that no such line follows.
pub(super) fn scan(records: &[Record]) -> Vec<Found> {
    let mut found: Vec<Found> = Vec::new();
    for (index, record) in records.iter().enumerate() {
        let text = record.text.as_str();
        if let Some(after) = text.split_once("PCIe Bus Error: severity=").map(|(_, a)| a) {
            let Some(severity) = AerSeverity::from_words(after.split(',').next().unwrap_or(""))
            else {
                continue;
            };
            let address = device_prefix(text).map(|(_, a, _)| a);
            let layer = after
                .split_once("type=")
                .map(|(_, t)| t.split(',').next().unwrap_or(t).trim().to_string());
            let reported_by = reporter_before(records, index).filter(|p| Some(*p) != address);
            found.push(Found {
                index,
                address,
                kind: KernelEventKind::Aer {
                    severity,
                    layer,
                    errors: Vec::new(),
                    reported_by,
                    recovery_failed: false,
                },
                driver: Driver::Pcie,
            });
        } else if let Some((port, severity, source)) = report(text) {
            let followed = records[index + 1..]
                .iter()
                .take(FOLLOW_SPAN)
                .any(|r| r.text.contains("PCIe Bus Error: severity="));
            if !followed {
                found.push(Found {
                    index,
                    address: source.or(port),
                    kind: KernelEventKind::Aer {
                        severity,
                        layer: None,
                        errors: Vec::new(),
                        reported_by: port.filter(|p| Some(*p) != source),
                        recovery_failed: false,
                    },
                    driver: Driver::Pcie,
                });
            }
        } else if let Some(name) = error_bit(text) {
            let device = device_prefix(text).map(|(_, a, _)| a);
            if let Some(Found {
                kind: KernelEventKind::Aer { errors, .. },
                ..
            }) = latest_for(&mut found, index, |f| {
                f.address == device || device.is_none()
            }) {
                if !errors.iter().any(|e| e == name) {
                    errors.push(name.to_string());
                }
            }
        } else if text.contains("can't recover") || text.contains("device recovery failed") {
            if let Some(Found {
                kind:
                    KernelEventKind::Aer {
                        recovery_failed, ..
                    },
                ..
            }) = latest_for(&mut found, index, |_| true)
            {
                *recovery_failed = true;
            }
        }
    }
    found
}

/// A port's "… error received: 0000:01:00.0" or "… error message received from …" →
/// (the port, the severity, the device it names).
fn report(text: &str) -> Option<(Option<PciAddress>, AerSeverity, Option<PciAddress>)> {
    let at = text
        .find(" error received")
        .or_else(|| text.find(" error message received"))?;
    if !text.contains("AER") {
        return None;
    }
    let words = &text[..at];
    let severity = AerSeverity::from_words(words.rsplit("AER:").next().unwrap_or(words))?;
    let port = device_prefix(text).map(|(_, a, _)| a);
    let source = first_address(&text[at..]);
    Some((port, severity, source))
}

/// The port of the nearest report before `index`.
fn reporter_before(records: &[Record], index: usize) -> Option<PciAddress> {
    records[index.saturating_sub(FOLLOW_SPAN)..index]
        .iter()
        .rev()
        .find_map(|r| report(&r.text))
        .and_then(|(port, ..)| port)
}

/// `[ 0] RxErr`, `[ 5] SDES (First)`, `[12] Timeout` → the bit's name.
fn error_bit(text: &str) -> Option<&str> {
    let rest = device_prefix(text).map_or(text, |(_, _, rest)| rest);
    let rest = rest.trim_start().strip_prefix('[')?;
    let (number, name) = rest.split_once(']')?;
    if !number.trim().bytes().all(|b| b.is_ascii_digit()) || number.trim().is_empty() {
        return None;
    }
    name.split_whitespace().next()
}

/// The latest AER error found within [`FOLLOW_SPAN`] records before `index` that `which`
/// accepts.
fn latest_for(
    found: &mut [Found],
    index: usize,
    which: impl Fn(&Found) -> bool,
) -> Option<&mut Found> {
    found
        .iter_mut()
        .rev()
        .take_while(|f| index - f.index <= FOLLOW_SPAN * 2)
        .find(|f| matches!(f.kind, KernelEventKind::Aer { .. }) && which(f))
}
