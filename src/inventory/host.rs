//! The host: CPU, memory, kernel and board, from procfs and the DMI tables in sysfs.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Serialize;

use super::read::{self, Findings, Presence};

/// The host's identity and size: CPU, memory, kernel and board.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Host {
    /// The kernel's host name (`proc/sys/kernel/hostname`).
    pub hostname: Option<String>,
    /// The CPU's `model name` from `/proc/cpuinfo`.
    pub cpu_model: Option<String>,
    /// Populated CPU sockets: distinct physical ids.
    pub cpu_sockets: Option<u32>,
    /// Physical cores: distinct (physical id, core id) pairs.
    pub cpu_cores: Option<u32>,
    /// Logical processors.
    pub cpu_threads: Option<u32>,
    /// `MemTotal`: installed memory less what firmware and the kernel keep.
    pub memory_bytes: Option<u64>,
    /// The running kernel's release (`6.12.9-amd64`).
    pub kernel: Option<String>,
    /// The board and firmware, from SMBIOS.
    pub board: Board,
}

/// The DMI identity of the machine (`sys/class/dmi/id`); absent on VMs without SMBIOS.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Board {
    /// `sys_vendor`: who made the system.
    pub system_vendor: Option<String>,
    /// `product_name`: the system's model.
    pub product_name: Option<String>,
    /// `board_vendor`: who made the mainboard.
    pub board_vendor: Option<String>,
    /// `board_name`: the mainboard's model.
    pub board_name: Option<String>,
    /// `board_serial`: the mainboard's serial number.
    pub board_serial: Option<String>,
    /// `bios_version`: the firmware's version.
    pub bios_version: Option<String>,
}

impl Board {
    fn read(root: &Path, findings: &mut Findings) -> Board {
        let dir = root.join("sys/class/dmi/id");
        // Vendors fill unused fields with placeholders; they identify nothing.
        let mut field = |name: &str| {
            read::text(&dir.join(name), Presence::Optional, findings).filter(|v| {
                !v.is_empty()
                    && !matches!(
                        v.to_ascii_lowercase().as_str(),
                        "default string" | "to be filled by o.e.m." | "not specified" | "none"
                    )
            })
        };
        Board {
            system_vendor: field("sys_vendor"),
            product_name: field("product_name"),
            board_vendor: field("board_vendor"),
            board_name: field("board_name"),
            board_serial: field("board_serial"),
            bios_version: field("bios_version"),
        }
    }
}

/// What `/proc/cpuinfo` says about the processors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuSummary {
    /// The `model name` of the processors.
    pub model: Option<String>,
    /// Distinct `physical id`s, when the file has them.
    pub sockets: Option<u32>,
    /// Distinct (physical id, core id) pairs, or every thread without topology fields.
    pub cores: Option<u32>,
    /// Logical processors: blocks in the file.
    pub threads: u32,
}

/// Parses `/proc/cpuinfo`: one block per logical processor, `key\t: value` lines.
/// Without topology fields (some VMs, some architectures) every thread counts as a core.
pub fn parse_cpuinfo(text: &str) -> Option<CpuSummary> {
    let mut threads = 0u32;
    let mut model = None;
    let mut pairs = BTreeSet::new();
    let mut sockets = BTreeSet::new();
    let mut topology_complete = true;
    for block in text.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let field = |key: &str| {
            block.lines().find_map(|line| {
                let (k, v) = line.split_once(':')?;
                (k.trim() == key).then(|| v.trim())
            })
        };
        if field("processor").is_none() {
            continue;
        }
        threads += 1;
        if model.is_none() {
            model = field("model name").map(str::to_string);
        }
        match (field("physical id"), field("core id")) {
            (Some(socket), Some(core)) => {
                sockets.insert(socket.to_string());
                pairs.insert((socket.to_string(), core.to_string()));
            }
            _ => topology_complete = false,
        }
    }
    if threads == 0 {
        return None;
    }
    let (cores, socket_count) = if topology_complete {
        (pairs.len() as u32, Some(sockets.len() as u32))
    } else {
        (threads, None)
    };
    Some(CpuSummary {
        model,
        sockets: socket_count,
        cores: Some(cores),
        threads,
    })
}

/// `MemTotal` in bytes from `/proc/meminfo` (`MemTotal:       131889436 kB`).
pub fn parse_mem_total(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line["MemTotal:".len()..].split_whitespace();
    let value: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => value.checked_mul(1024),
        None => Some(value),
        Some(_) => None,
    }
}

/// The release from `/proc/version` (`Linux version 6.8.0-48-generic (…`).
fn parse_proc_version(text: &str) -> Option<String> {
    let rest = text.strip_prefix("Linux version ")?;
    rest.split_whitespace().next().map(str::to_string)
}

pub fn read(root: &Path, findings: &mut Findings) -> Host {
    let proc_dir = root.join("proc");
    let cpu = read::parsed(
        &proc_dir.join("cpuinfo"),
        "cpuinfo",
        Presence::Required,
        findings,
        parse_cpuinfo,
    );
    let memory_bytes = read::parsed(
        &proc_dir.join("meminfo"),
        "meminfo (no MemTotal)",
        Presence::Required,
        findings,
        parse_mem_total,
    );
    let kernel = read::text(
        &proc_dir.join("sys/kernel/osrelease"),
        Presence::Optional,
        findings,
    )
    .filter(|s| !s.is_empty())
    .or_else(|| {
        read::parsed(
            &proc_dir.join("version"),
            "kernel version",
            Presence::Optional,
            findings,
            parse_proc_version,
        )
    });
    if kernel.is_none() {
        findings.push(format!(
            "{}: kernel version not found (nor in proc/version)",
            proc_dir.join("sys/kernel/osrelease").display()
        ));
    }
    let hostname = read::text(
        &proc_dir.join("sys/kernel/hostname"),
        Presence::Optional,
        findings,
    );
    let cpu = cpu.unwrap_or_default();
    Host {
        hostname,
        cpu_model: cpu.model,
        cpu_sockets: cpu.sockets,
        cpu_cores: cpu.cores,
        cpu_threads: (cpu.threads > 0).then_some(cpu.threads),
        memory_bytes,
        kernel,
        board: Board::read(root, findings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(processor: u32, socket: u32, core: u32) -> String {
        format!(
            "processor\t: {processor}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7532 32-Core Processor\nphysical id\t: {socket}\nsiblings\t: 64\ncore id\t\t: {core}\ncpu cores\t: 32\n\n"
        )
    }

    #[test]
    fn cores_are_distinct_socket_core_pairs() {
        let text: String = (0..64).map(|p| block(p, 0, p % 32)).collect();
        let cpu = parse_cpuinfo(&text).unwrap();
        assert_eq!(cpu.threads, 64);
        assert_eq!(cpu.cores, Some(32));
        assert_eq!(cpu.sockets, Some(1));
        assert_eq!(
            cpu.model.as_deref(),
            Some("AMD EPYC 7532 32-Core Processor")
        );
    }

    #[test]
    fn same_core_id_on_two_sockets_counts_twice() {
        let text: String = (0..4).map(|p| block(p, p / 2, p % 2)).collect();
        assert_eq!(parse_cpuinfo(&text).unwrap().cores, Some(4));
    }

    #[test]
    fn without_topology_threads_are_cores() {
        let text = "processor\t: 0\nBogoMIPS\t: 50.00\n\nprocessor\t: 1\nBogoMIPS\t: 50.00\n";
        let cpu = parse_cpuinfo(text).unwrap();
        assert_eq!((cpu.threads, cpu.cores, cpu.sockets), (2, Some(2), None));
        assert_eq!(parse_cpuinfo("garbage"), None);
    }

    #[test]
    fn mem_total_in_bytes() {
        let text = "MemTotal:       131889436 kB\nMemFree:        128000000 kB\n";
        assert_eq!(parse_mem_total(text), Some(131_889_436 * 1024));
        assert_eq!(parse_mem_total("MemTotal: lots kB\n"), None);
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn kernel_release_from_proc_version() {
        assert_eq!(
            parse_proc_version("Linux version 6.8.0-48-generic (buildd@lcy02) #48-Ubuntu SMP")
                .as_deref(),
            Some("6.8.0-48-generic")
        );
    }
}
