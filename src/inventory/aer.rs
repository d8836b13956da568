//! PCIe Advanced Error Reporting counters, the vendor-neutral sign of a bad link, cable,
//! riser or slot: `aer_dev_correctable`, `aer_dev_nonfatal` and `aer_dev_fatal` of each
//! GPU and of every bridge between it and the root complex (its card's switch, the root
//! port), and a root port's `aer_rootport_total_err_*` (Linux 4.19 and later). Errors are
//! counted where they are seen, often at the far end of the link, so a GPU's path is read
//! whole.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::pci::{PciAddress, PciDevice};

/// The counters of one device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AerCounters {
    /// Errors by the kernel's name for them, only those above zero; the totals below come
    /// from the kernel's own `TOTAL_ERR_*` line (one message can carry several bits).
    pub correctable: BTreeMap<String, u64>,
    /// Non-fatal uncorrectable errors by name, likewise.
    pub nonfatal: BTreeMap<String, u64>,
    /// Fatal uncorrectable errors by name, likewise.
    pub fatal: BTreeMap<String, u64>,
    /// Correctable errors since boot (`TOTAL_ERR_COR`).
    pub total_correctable: u64,
    /// Non-fatal uncorrectable errors since boot (`TOTAL_ERR_NONFATAL`).
    pub total_nonfatal: u64,
    /// Fatal uncorrectable errors since boot (`TOTAL_ERR_FATAL`).
    pub total_fatal: u64,
    /// What a root port received from below it (root ports only).
    pub rootport_total: Option<RootPortTotals>,
}

/// A root port's `aer_rootport_total_err_*`: the error messages it received from the
/// devices below it, since boot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RootPortTotals {
    /// Correctable error messages received.
    pub correctable: u64,
    /// Non-fatal uncorrectable error messages received.
    pub nonfatal: u64,
    /// Fatal uncorrectable error messages received.
    pub fatal: u64,
}

impl AerCounters {
    /// Non-fatal and fatal errors together: the transactions the device lost. The
    /// counters are the kernel's (or a corrupt file's): a sum past u64 stays at its top.
    pub fn uncorrectable(&self) -> u64 {
        self.total_nonfatal.saturating_add(self.total_fatal)
    }

    fn is_clean(&self) -> bool {
        self.total_correctable == 0
            && self.uncorrectable() == 0
            && self
                .rootport_total
                .is_none_or(|t| t.correctable + t.nonfatal + t.fatal == 0)
    }
}

/// Parses one `aer_dev_*` file: `"%s %llu"` lines, names possibly with spaces (older
/// kernels write "Receiver Error"), `dev_cor_errs_bit[N] M` for unnamed bits, and a last
/// `TOTAL_ERR_*` line. Returns the non-zero counts and the total, or `None` when a line
/// does not end in a number. Counts that sum past u64 give u64's top as the total.
pub fn parse_counter_file(text: &str) -> Option<(BTreeMap<String, u64>, u64)> {
    let mut counts = BTreeMap::new();
    let mut total = None;
    let mut sum = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = line.rsplit_once(' ')?;
        let value: u64 = value.parse().ok()?;
        let name = name.trim();
        if name.starts_with("TOTAL_ERR_") {
            total = Some(value);
        } else if value > 0 {
            sum = value.saturating_add(sum);
            counts.insert(name.to_string(), value);
        }
    }
    // A kernel without the total line: the bits are all there is.
    Some((counts, total.unwrap_or(sum)))
}

/// The counters of the device whose sysfs folder is `dir`; `None` when it has no AER
/// files (no AER capability, an old kernel, or firmware-first error handling).
pub fn read_counters(dir: &Path) -> Option<AerCounters> {
    let read = |name: &str| -> Option<(BTreeMap<String, u64>, u64)> {
        std::fs::read_to_string(dir.join(name))
            .ok()
            .and_then(|t| parse_counter_file(&t))
    };
    let (correctable, total_correctable) = read("aer_dev_correctable")?;
    let (nonfatal, total_nonfatal) = read("aer_dev_nonfatal").unwrap_or_default();
    let (fatal, total_fatal) = read("aer_dev_fatal").unwrap_or_default();
    let root = |kind: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(format!("aer_rootport_total_err_{kind}")))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    let rootport_total = root("cor").map(|correctable| RootPortTotals {
        correctable,
        nonfatal: root("nonfatal").unwrap_or(0),
        fatal: root("fatal").unwrap_or(0),
    });
    Some(AerCounters {
        correctable,
        nonfatal,
        fatal,
        total_correctable,
        total_nonfatal,
        total_fatal,
        rootport_total,
    })
}

/// Where on a GPU's path a device sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PathRole {
    /// The GPU function itself.
    Gpu,
    /// A switch or bridge port between the GPU and its root port (a 7900 XTX's own switch).
    Bridge,
    /// The root port the GPU's path starts at.
    RootPort,
}

/// Counters that moved, on one device of one GPU's path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LinkErrors {
    /// The GPU whose path the device is on.
    pub gpu: PciAddress,
    /// The device whose counters moved (the GPU itself, a bridge or the root port).
    pub device: PciAddress,
    /// Where on the path that device sits.
    pub role: PathRole,
    /// Its counters.
    pub counters: AerCounters,
}

impl LinkErrors {
    /// An uncorrectable error means a transaction was lost: the link is not healthy.
    pub fn is_serious(&self) -> bool {
        self.counters.uncorrectable() > 0
            || self
                .counters
                .rootport_total
                .is_some_and(|t| t.nonfatal + t.fatal > 0)
    }

    /// The finding in words: where on the path, and which errors how often.
    pub fn describe(&self) -> String {
        let place = match self.role {
            PathRole::Gpu => "on the GPU".to_string(),
            PathRole::Bridge => format!("at bridge {}", self.device),
            PathRole::RootPort => format!("at its root port {}", self.device),
        };
        let list = |counts: &BTreeMap<String, u64>| {
            counts
                .iter()
                .map(|(name, n)| format!("{name} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let c = &self.counters;
        let mut parts = Vec::new();
        if c.total_fatal > 0 {
            parts.push(format!("{} fatal ({})", c.total_fatal, list(&c.fatal)));
        }
        if c.total_nonfatal > 0 {
            parts.push(format!(
                "{} non-fatal ({})",
                c.total_nonfatal,
                list(&c.nonfatal)
            ));
        }
        if c.total_correctable > 0 {
            parts.push(format!(
                "{} correctable ({})",
                c.total_correctable,
                list(&c.correctable)
            ));
        }
        if let Some(t) = c
            .rootport_total
            .filter(|t| t.correctable + t.nonfatal + t.fatal > 0)
        {
            parts.push(format!(
                "received from below: {} correctable, {} non-fatal, {} fatal",
                t.correctable, t.nonfatal, t.fatal
            ));
        }
        format!(
            "GPU {}: PCIe AER errors since boot {place}: {}",
            self.gpu,
            parts.join("; ")
        )
    }
}

/// The counters that moved on each GPU's path, the GPU first, then towards the root.
pub fn link_errors(
    gpus: &[PciAddress],
    devices: &BTreeMap<PciAddress, PciDevice>,
) -> Vec<LinkErrors> {
    let mut found = Vec::new();
    for &gpu in gpus {
        let Some(device) = devices.get(&gpu) else {
            continue;
        };
        let mut path = vec![(gpu, PathRole::Gpu)];
        for (i, &bridge) in device.upstream.iter().enumerate().rev() {
            let role = if i == 0 {
                PathRole::RootPort
            } else {
                PathRole::Bridge
            };
            path.push((bridge, role));
        }
        for (address, role) in path {
            let Some(dir) = devices.get(&address).map(|d| &d.sysfs_dir) else {
                continue;
            };
            if let Some(counters) = read_counters(dir).filter(|c| !c.is_clean()) {
                found.push(LinkErrors {
                    gpu,
                    device: address,
                    role,
                    counters,
                });
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_that_sum_past_u64_give_its_top_not_a_panic() {
        let text = format!("RxErr {}\nBadTLP {}\n", u64::MAX, u64::MAX - 1);
        let (_, total) = parse_counter_file(&text).unwrap();
        assert_eq!(total, u64::MAX);
        let counters = AerCounters {
            total_nonfatal: u64::MAX,
            total_fatal: 3,
            ..AerCounters::default()
        };
        assert_eq!(counters.uncorrectable(), u64::MAX);
    }

    #[test]
    fn parses_the_short_names_of_current_kernels() {
        let text = "RxErr 0\nBadTLP 5\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\n\
                    CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 5\n";
        let (counts, total) = parse_counter_file(text).unwrap();
        assert_eq!(total, 5);
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            [("BadTLP".to_string(), 5)]
        );
    }

    #[test]
    fn parses_long_names_and_unnamed_bits_and_keeps_the_kernels_total() {
        let text = "Receiver Error 2\nBad TLP 0\nRELAY_NUM Rollover 0\n\
                    dev_cor_errs_bit[14] 3\nTOTAL_ERR_COR 4\n";
        let (counts, total) = parse_counter_file(text).unwrap();
        // One message can carry two bits: the kernel's total, not the sum.
        assert_eq!(total, 4);
        assert_eq!(counts["Receiver Error"], 2);
        assert_eq!(counts["dev_cor_errs_bit[14]"], 3);
    }

    #[test]
    fn a_file_that_is_not_counters_is_refused() {
        assert_eq!(parse_counter_file("RxErr lots\n"), None);
        assert_eq!(parse_counter_file("garbage"), None);
    }

    #[test]
    fn uncorrectable_errors_anywhere_on_the_path_are_serious() {
        let counters = AerCounters {
            total_nonfatal: 2,
            ..AerCounters::default()
        };
        let errors = LinkErrors {
            gpu: PciAddress::parse("0000:41:00.0").unwrap(),
            device: PciAddress::parse("0000:40:01.1").unwrap(),
            role: PathRole::RootPort,
            counters,
        };
        assert!(errors.is_serious());
        assert!(errors.describe().contains("at its root port 0000:40:01.1"));
    }
}
