//! GPU trouble in the kernel's log: NVIDIA Xid lines in all three shapes the driver writes
//! (`NVRM: Xid (PCI:0000:41:00): 79, pid=…`, the MIG form with `GPU-I:`/`GPU-CI:`, and "has
//! fallen off the bus" with no Xid, possibly over several records), and amdgpu ring
//! timeouts and GPU resets. Read from `/dev/kmsg` (every record since boot the ring still
//! holds), or from `ROOT/dev/kmsg` as a plain file of the same records under another root.

use std::io::Read;
use std::path::Path;

use serde::Serialize;

use super::pci::PciAddress;
use super::xid::{self, XidClass};

/// What a GPU message says happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KernelEventKind {
    /// An NVIDIA Xid: the driver's error code for a GPU fault.
    Xid {
        /// The Xid number (79 is "fallen off the bus").
        code: u32,
        /// NVIDIA's name for it.
        name: &'static str,
        /// Whose fault it usually is, and so whether it is serious.
        class: XidClass,
    },
    /// The GPU stopped answering on PCIe ("has fallen off the bus"), with no Xid.
    FallenOffTheBus,
    /// An amdgpu ring (a GPU command queue) timed out.
    RingTimeout {
        /// The ring's name (`gfx_0.0.0`, `sdma0`).
        ring: String,
    },
    /// amdgpu reset the GPU.
    GpuReset,
}

/// One message about a GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KernelEvent {
    /// The record's sequence number and time since boot.
    pub seq: u64,
    /// Seconds from boot to the message.
    pub seconds_since_boot: f64,
    /// The address as logged (an Xid names the device without its function).
    pub address: PciAddress,
    /// Whether that address is a GPU of this box.
    pub known_gpu: bool,
    /// What happened.
    #[serde(flatten)]
    pub kind: KernelEventKind,
    /// Whether it points at broken hardware or a lost GPU, rather than at a program.
    pub serious: bool,
    /// The record's text, at most 300 characters.
    pub message: String,
}

impl KernelEvent {
    /// The finding in words: the GPU, what happened, when, and the message.
    pub fn describe(&self) -> String {
        let what = match &self.kind {
            KernelEventKind::Xid { code, name, .. } => format!("Xid {code} ({name})"),
            KernelEventKind::FallenOffTheBus => "fell off the bus".to_string(),
            KernelEventKind::RingTimeout { ring } => format!("ring {ring} timed out"),
            KernelEventKind::GpuReset => "was reset by the driver".to_string(),
        };
        let unknown = if self.known_gpu {
            ""
        } else {
            " (no GPU at that address in this box)"
        };
        format!(
            "GPU {}{unknown}: {what} at {:.1} s after boot: {}",
            self.address, self.seconds_since_boot, self.message
        )
    }
}

/// One `/dev/kmsg` record: `prio,seq,usec,flags[,…];text`, followed by continuation lines
/// (` KEY=value`) that are not part of the text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The record's sequence number.
    pub seq: u64,
    /// When it was logged, in microseconds since boot.
    pub usec: u64,
    /// The message, without the header.
    pub text: String,
}

/// The records in `data` (a `/dev/kmsg` dump), in order; malformed lines and
/// continuation lines are left out.
pub fn parse_records(data: &str) -> Vec<Record> {
    data.lines()
        .filter(|line| !line.starts_with(' '))
        .filter_map(|line| {
            let (header, text) = line.split_once(';')?;
            let mut fields = header.split(',');
            let _priority = fields.next()?;
            let seq = fields.next()?.parse().ok()?;
            let usec = fields.next()?.parse().ok()?;
            Some(Record {
                seq,
                usec,
                text: text.to_string(),
            })
        })
        .collect()
}

/// Reads every record: a plain file under another root, else the kernel's ring, read
/// without blocking until it is drained. `Err` says why it could not be read.
pub fn read_records(root: &Path) -> Result<Vec<Record>, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join("dev/kmsg");
    // Never blocking: the kernel's ring ends with EAGAIN, and a fixture that is a pipe
    // with no writer must not hang the check that reads it.
    let mut file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && root != Path::new("/") => {
            return Ok(Vec::new())
        }
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let mut data = Vec::new();
    // Each read of /dev/kmsg returns one record; a plain file reads in pieces.
    let mut buffer = vec![0u8; 8192];
    loop {
        match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&buffer[..n]),
            // A record overwritten while being read; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
    Ok(parse_records(&String::from_utf8_lossy(&data)))
}

/// `0000:41:00` (an Xid's device, function 0) or a full `0000:41:00.0`.
fn parse_address(text: &str) -> Option<PciAddress> {
    let text = text.trim_end_matches([':', '.', ',']);
    PciAddress::parse(text).or_else(|| PciAddress::parse(&format!("{text}.0")))
}

/// The GPU events in `records`; `gpus` are the box's GPUs, to tell which exist.
pub fn gpu_events(records: &[Record], gpus: &[PciAddress]) -> Vec<KernelEvent> {
    let mut events = Vec::new();
    // "The NVIDIA GPU <address>" may end its record before "has fallen off the bus".
    let mut pending_fallen: Option<(PciAddress, usize)> = None;
    for (index, record) in records.iter().enumerate() {
        let text = record.text.as_str();
        let found = if let Some(rest) = text.split_once("NVRM: Xid (PCI:").map(|(_, r)| r) {
            parse_xid(rest)
        } else if let Some(rest) = text.split_once("NVRM: The NVIDIA GPU ").map(|(_, r)| r) {
            let address = rest.split_whitespace().next().and_then(parse_address);
            match address {
                Some(address) if text.contains("fallen off the bus") => {
                    Some((address, KernelEventKind::FallenOffTheBus))
                }
                Some(address) => {
                    pending_fallen = Some((address, index));
                    None
                }
                None => None,
            }
        } else if text.contains("fallen off the bus") && text.contains("NVRM: GPU ") {
            text.split_once("NVRM: GPU ")
                .and_then(|(_, r)| r.split_whitespace().next())
                .and_then(parse_address)
                .map(|a| (a, KernelEventKind::FallenOffTheBus))
        } else if text.contains("fallen off the bus") {
            pending_fallen
                .take()
                .filter(|(_, at)| index - at <= 3)
                .map(|(a, _)| (a, KernelEventKind::FallenOffTheBus))
        } else if let Some(rest) = text.strip_prefix("amdgpu ") {
            parse_amdgpu(rest)
        } else {
            None
        };
        if let Some((address, kind)) = found {
            let serious = match &kind {
                KernelEventKind::Xid { class, .. } => class.is_serious(),
                _ => true,
            };
            let known_gpu = gpus.iter().any(|g| same_device(*g, address));
            events.push(KernelEvent {
                seq: record.seq,
                seconds_since_boot: record.usec as f64 / 1e6,
                address,
                known_gpu,
                kind,
                serious,
                message: text.chars().take(300).collect(),
            });
        }
    }
    events
}

/// An Xid names bus and device: it matches the GPU's function 0.
pub fn same_device(gpu: PciAddress, logged: PciAddress) -> bool {
    gpu.domain == logged.domain && gpu.bus == logged.bus && gpu.device == logged.device
}

/// `0000:41:00): 79, pid=…` or `0000:61:00 GPU-I:01 GPU-CI:00): 94, pid=…`.
fn parse_xid(rest: &str) -> Option<(PciAddress, KernelEventKind)> {
    let (inside, after) = rest.split_once(')')?;
    let address = parse_address(inside.split_whitespace().next()?)?;
    let code: u32 = after
        .trim_start_matches(':')
        .trim()
        .split(',')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let (name, class) = xid::classify(code);
    Some((address, KernelEventKind::Xid { code, name, class }))
}

/// `0000:43:00.0: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, …` and
/// `0000:43:00.0: amdgpu: GPU reset begin!`.
fn parse_amdgpu(rest: &str) -> Option<(PciAddress, KernelEventKind)> {
    let (address, message) = rest.split_once(": ")?;
    let address = parse_address(address)?;
    if let Some(after) = message.split_once(" ring ").map(|(_, a)| a) {
        if message.contains("timeout") {
            let ring = after.split_whitespace().next()?.to_string();
            return Some((address, KernelEventKind::RingTimeout { ring }));
        }
    }
    if message.contains("GPU reset begin") {
        return Some((address, KernelEventKind::GpuReset));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(text: &str, gpus: &[&str]) -> Vec<KernelEvent> {
        let gpus: Vec<PciAddress> = gpus.iter().map(|g| PciAddress::parse(g).unwrap()).collect();
        gpu_events(&parse_records(text), &gpus)
    }

    #[test]
    fn reads_an_xid_and_classifies_it_from_the_driver_table() {
        let found = events(
            "4,2001,812345678,-;NVRM: Xid (PCI:0000:21:00): 13, pid=4242, name=python3, \
             Graphics Exception\n",
            &["0000:21:00.0"],
        );
        assert_eq!(found.len(), 1);
        let event = &found[0];
        assert!(event.known_gpu);
        assert!(!event.serious);
        assert!(matches!(event.kind, KernelEventKind::Xid { code: 13, .. }));
        assert_eq!(event.seq, 2001);
        assert!((event.seconds_since_boot - 812.345678).abs() < 1e-9);
    }

    #[test]
    fn reads_the_mig_form() {
        let found = events(
            "4,9,9,-;NVRM: Xid (PCI:0000:61:00 GPU-I:01 GPU-CI:00): 94, pid=77, name=t, x\n",
            &["0000:61:00.0"],
        );
        assert!(matches!(
            found[0].kind,
            KernelEventKind::Xid { code: 94, .. }
        ));
        assert_eq!(found[0].address, PciAddress::parse("0000:61:00.0").unwrap());
    }

    #[test]
    fn fallen_off_the_bus_over_several_records_and_without_an_xid() {
        let found = events(
            "3,1,1,-;NVRM: The NVIDIA GPU 0000:81:00.0\n SUBSYSTEM=pci\n\
             3,2,2,c;NVRM: (PCI ID: 10de:2684) installed in this system has\n\
             3,3,3,-;NVRM: fallen off the bus and is not responding to commands.\n\
             3,4,4,-;NVRM: GPU 0000:41:00.0: GPU has fallen off the bus.\n",
            &["0000:81:00.0", "0000:41:00.0"],
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found
            .iter()
            .all(|e| e.kind == KernelEventKind::FallenOffTheBus && e.serious));
    }

    #[test]
    fn amdgpu_ring_timeouts_and_resets_are_serious_its_boot_lines_are_nothing() {
        let found = events(
            "6,1,1,-;amdgpu 0000:43:00.0: amdgpu: SMU is initialized successfully!\n\
             3,2,2,-;amdgpu 0000:43:00.0: [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring \
             gfx_0.0.0 timeout, signaled seq=1, emitted seq=3\n\
             6,3,3,-;amdgpu 0000:43:00.0: amdgpu: GPU reset begin!\n\
             6,4,4,-;amdgpu 0000:43:00.0: amdgpu: GPU reset(2) succeeded!\n",
            &["0000:43:00.0"],
        );
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(
            found[0].kind,
            KernelEventKind::RingTimeout {
                ring: "gfx_0.0.0".into()
            }
        );
        assert_eq!(found[1].kind, KernelEventKind::GpuReset);
    }

    #[test]
    fn an_event_for_an_address_that_is_no_gpu_here_says_so() {
        let found = events(
            "4,1,1,-;NVRM: Xid (PCI:0000:f1:00): 48, pid=9, name=g, DBE\n",
            &["0000:21:00.0"],
        );
        assert!(!found[0].known_gpu);
        assert!(found[0].serious);
        assert!(found[0].describe().contains("no GPU at that address"));
    }

    #[test]
    fn a_pipe_with_no_writer_reads_as_empty_instead_of_hanging() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("dev")).unwrap();
        let fifo = root.path().join("dev/kmsg");
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        assert_eq!(read_records(root.path()), Ok(Vec::new()));
    }

    #[test]
    fn garbage_and_truncated_records_are_skipped() {
        assert!(parse_records("no header here\n4,x,1,-;text\n4,1\n").is_empty());
    }
}
