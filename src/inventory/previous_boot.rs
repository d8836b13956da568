//! What the previous boot left behind: its kernel messages in the persistent journal
//! (`journalctl --root ROOT -b -1`), and the crash record the kernel wrote to pstore when it
//! panicked (`/sys/fs/pstore`, or `/var/lib/systemd/pstore` where systemd-pstore moved it).
//! A fault that rebooted the box (an Xid 79 under load, a power supply tripping) is found
//! here, not in this boot's log.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::Serialize;

use super::kernel_log::{self, KernelEvent, Record};
use super::pci::PciAddress;

/// The most of the previous boot's kernel log that is read.
const MAX_LOG_BYTES: u64 = 64 << 20;
/// How many of the previous boot's last journal entries are read to tell a clean end.
const LAST_ENTRIES: &str = "40";

/// How the previous boot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BootEnd {
    /// It shut down or rebooted as asked: its journal was stopped.
    Clean,
    /// It stopped without shutting down: a crash, a hang, a lost power supply.
    Unexpected,
    /// Nothing says (no persistent journal of it).
    Unknown,
}

/// The previous boot, as far as the box kept it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PreviousBoot {
    /// How it ended.
    pub ended: BootEnd,
    /// When its last journal entry was written, where the journal has it.
    pub last_entry_at: Option<String>,
    /// Where its messages were read from (`journal`, `pstore`, both, or none).
    pub sources: Vec<&'static str>,
    /// Its messages about a GPU, a link or a slot.
    pub events: Vec<KernelEvent>,
    /// Why it could not be read, where something could not.
    pub unreadable: Vec<String>,
}

impl PreviousBoot {
    /// The serious message it ended on, or its last one: the likely cause of an end
    /// that was not asked for.
    pub fn likely_cause(&self) -> Option<&KernelEvent> {
        self.events
            .iter()
            .rev()
            .find(|e| e.serious)
            .or(self.events.last())
    }

    /// One line for an operator, when there is something to say: how it ended, after
    /// what, and when.
    pub fn describe(&self) -> Option<String> {
        let after = self.likely_cause().map(|e| {
            let when = e
                .logged_at
                .clone()
                .or(e.seconds_since_boot.map(|s| format!("{s:.1} s after boot")));
            let on = if e.known_gpu {
                format!("GPU {}", e.subject())
            } else {
                e.subject()
            };
            format!(
                " after {} on {on}{}",
                e.kind.summary(),
                when.map(|w| format!(" at {w}")).unwrap_or_default()
            )
        });
        match self.ended {
            BootEnd::Unexpected => Some(format!(
                "the previous boot ended unexpectedly{}{}",
                after.unwrap_or_default(),
                self.last_entry_at
                    .as_ref()
                    .map(|t| format!(" (its last journal entry at {t})"))
                    .unwrap_or_default()
            )),
            BootEnd::Clean | BootEnd::Unknown if self.events.iter().any(|e| e.serious) => Some(
                format!("the previous boot logged{}", after.unwrap_or_default()),
            ),
            _ => None,
        }
    }
}

/// Reads the previous boot under `root`; `gpus` are this box's GPUs.
pub fn read(root: &Path, gpus: &[PciAddress]) -> PreviousBoot {
    let mut boot = PreviousBoot {
        ended: BootEnd::Unknown,
        last_entry_at: None,
        sources: Vec::new(),
        events: Vec::new(),
        unreadable: Vec::new(),
    };
    let mut records: Vec<Record> = Vec::new();
    match journal(root, &["-k"], MAX_LOG_BYTES) {
        Ok(Some(text)) => {
            boot.sources.push("journal");
            records.extend(kernel_log::parse_pasted(&text));
            match journal(root, &["-n", LAST_ENTRIES], 1 << 20) {
                Ok(Some(last)) => {
                    boot.ended = if journal_stopped(&last) {
                        BootEnd::Clean
                    } else {
                        BootEnd::Unexpected
                    };
                    boot.last_entry_at = last_time(&last);
                }
                Ok(None) => {}
                Err(why) => boot.unreadable.push(why),
            }
        }
        Ok(None) => {}
        Err(why) => boot.unreadable.push(why),
    }
    let crash = pstore_records(root);
    if !crash.is_empty() {
        boot.sources.push("pstore");
        // A crash record is written only when the kernel panicked or oopsed.
        boot.ended = BootEnd::Unexpected;
        records.extend(crash);
    }
    boot.events = kernel_log::gpu_events(&records, gpus);
    boot
}

/// The previous boot's journal as `journalctl -o json` lines, with `args`; `None` when
/// the journal holds no previous boot (or there is no journalctl to ask).
fn journal(root: &Path, args: &[&str], limit: u64) -> Result<Option<String>, String> {
    let mut command = Command::new("journalctl");
    if root != Path::new("/") {
        command.arg(format!("--root={}", root.display()));
    }
    command
        .args(["-b", "-1", "-o", "json", "--no-pager", "-q"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("journalctl: {e}")),
    };
    let mut text = String::new();
    if let Some(stdout) = child.stdout.take() {
        stdout
            .take(limit)
            .read_to_string(&mut text)
            .map_err(|e| format!("journalctl: {e}"))?;
    }
    // What was not read is not waited for.
    let _ = child.kill();
    let output = child
        .wait_with_output()
        .map_err(|e| format!("journalctl: {e}"))?;
    if text.trim().is_empty() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // No previous boot, or no persistent journal: nothing to say, not an error.
        if stderr.is_empty()
            || stderr.contains("No journal")
            || stderr.contains("out of range")
            || stderr.contains("Specifying boot ID")
            || stderr.contains("No such boot")
        {
            return Ok(None);
        }
        return Err(format!("journalctl: {}", stderr.trim()));
    }
    Ok(Some(text))
}

/// Whether the journal's last entries show it stopped as a shutdown stops it.
fn journal_stopped(lines: &str) -> bool {
    lines.lines().any(|line| {
        serde_json::from_str::<serde_json::Value>(line)
            .ok()
            .and_then(|entry| {
                entry
                    .get("MESSAGE")
                    .and_then(|m| m.as_str())
                    .map(str::to_string)
            })
            .is_some_and(|message| {
                message.starts_with("Journal stopped")
                    || message.contains("System is powering down")
                    || message.contains("System is rebooting")
            })
    })
}

fn last_time(lines: &str) -> Option<String> {
    lines
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|entry| {
            entry
                .get("__REALTIME_TIMESTAMP")?
                .as_str()?
                .parse::<i64>()
                .ok()
        })
        .max()
        .and_then(chrono::DateTime::from_timestamp_micros)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
}

/// The kernel's last messages from a crash record: `dmesg-*` files in pstore (`Panic#1
/// Part1` and then `<4>[  812.3] …` lines), where the kernel or systemd-pstore left them.
fn pstore_records(root: &Path) -> Vec<Record> {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["sys/fs/pstore", "var/lib/systemd/pstore"] {
        collect_dmesg_files(&root.join(dir), 2, &mut files);
    }
    files.sort();
    let mut records = Vec::new();
    for file in files {
        let mut text = String::new();
        if std::fs::File::open(&file)
            .and_then(|f| f.take(MAX_LOG_BYTES).read_to_string(&mut text))
            .is_ok()
        {
            records.extend(kernel_log::parse_pasted(&text));
        }
    }
    records
}

fn collect_dmesg_files(dir: &Path, depth: u32, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        if kind.is_dir() && depth > 0 {
            collect_dmesg_files(&path, depth - 1, files);
        } else if kind.is_file() && name.starts_with("dmesg") {
            files.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_record_in_pstore_is_an_unexpected_end_with_its_cause() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("var/lib/systemd/pstore/1700000000");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("dmesg-efi-170000000001001"),
            "Panic#1 Part1\n<6>[  811.000000] amdgpu 0000:43:00.0: amdgpu: SMU is initialized successfully!\n\
             <3>[  812.300000] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=3\n\
             <6>[  812.400000] amdgpu 0000:43:00.0: amdgpu: GPU reset begin!\n",
        )
        .unwrap();
        let gpu = PciAddress::parse("0000:43:00.0").unwrap();
        let boot = read(root.path(), &[gpu]);
        assert_eq!(boot.ended, BootEnd::Unexpected);
        assert!(boot.sources.contains(&"pstore"));
        let line = boot.describe().unwrap();
        assert!(
            line.starts_with(
                "the previous boot ended unexpectedly after a GPU reset on GPU 0000:43:00.0"
            ),
            "{line}"
        );
    }

    #[test]
    fn a_box_with_no_record_of_its_previous_boot_says_nothing() {
        let root = tempfile::tempdir().unwrap();
        let boot = read(root.path(), &[]);
        assert_eq!(boot.ended, BootEnd::Unknown);
        assert_eq!(boot.describe(), None);
        assert!(boot.unreadable.is_empty(), "{:?}", boot.unreadable);
    }
}
