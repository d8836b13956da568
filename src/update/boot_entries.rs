//! The OS versions systemd-boot can start: the UKIs in the EFI system partition's
//! `/EFI/Linux`, named `tinybox_VERSION.efi`, and while a new version is on trial
//! `tinybox_VERSION+LEFT-DONE.efi` (Automatic Boot Assessment). systemd-boot takes a
//! try off each boot of a counting entry; `systemd-bless-boot` drops the counter once
//! `boot-complete.target` is reached (blessed), or sets it to `+0` when the boot is
//! marked bad, which sorts it after every other entry.

use std::path::{Path, PathBuf};

use super::reset;

/// One UKI of a tinybox version in `/EFI/Linux`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootEntry {
    /// Its file name.
    pub file: String,
    /// The OS version it starts.
    pub version: String,
    /// Tries left; `None` when the entry counts nothing (blessed, or installed so).
    pub tries_left: Option<u32>,
    /// Tries done; `None` when the name gives none.
    pub tries_done: Option<u32>,
}

impl BootEntry {
    /// Reads a file name `tinybox_VERSION[+LEFT[-DONE]].efi`; `None` for other names.
    pub fn parse(file: &str) -> Option<BootEntry> {
        let stem = file.strip_prefix("tinybox_")?.strip_suffix(".efi")?;
        let (version, counter) = match stem.split_once('+') {
            Some((version, counter)) => (version, Some(counter)),
            None => (stem, None),
        };
        if version.is_empty() || version.contains(['_', '-', '/']) {
            return None;
        }
        let (tries_left, tries_done) = match counter {
            None => (None, None),
            Some(counter) => match counter.split_once('-') {
                Some((left, done)) => (Some(left.parse().ok()?), Some(done.parse().ok()?)),
                None => (Some(counter.parse().ok()?), None),
            },
        };
        Some(BootEntry {
            file: file.to_string(),
            version: version.to_string(),
            tries_left,
            tries_done,
        })
    }

    /// Marked bad: no tries left, so systemd-boot starts it only when nothing else is
    /// there.
    pub fn is_bad(&self) -> bool {
        self.tries_left == Some(0)
    }

    /// Still on trial: it counts its tries and has some left.
    pub fn is_on_trial(&self) -> bool {
        matches!(self.tries_left, Some(left) if left > 0)
    }
}

/// Where the EFI system partition is mounted below `root`: `efi`, else `boot/efi`,
/// else `boot`, the first holding `EFI/Linux`.
pub fn esp_dir(root: &Path) -> PathBuf {
    ["efi", "boot/efi", "boot"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.join("EFI/Linux").is_dir())
        .unwrap_or_else(|| root.join("efi"))
}

/// The tinybox UKIs in `esp/EFI/Linux`, sorted by file name. Other files are left
/// out; an unreadable folder is an error.
pub fn list(esp: &Path) -> std::io::Result<Vec<BootEntry>> {
    let mut entries: Vec<BootEntry> = std::fs::read_dir(esp.join("EFI/Linux"))?
        .filter_map(Result::ok)
        .filter_map(|e| BootEntry::parse(&e.file_name().to_string_lossy()))
        .collect();
    entries.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(entries)
}

/// How this boot's entry stands in boot counting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trial {
    /// The entry booted counts its tries (systemd-boot set `LoaderBootCountPath`):
    /// the version is on trial, and a failed check rejects it. Holds the path systemd-boot gave.
    OnTrial(String),
    /// The entry booted counts nothing: the version is blessed (or was installed
    /// blessed), and a failed check is a finding, never a rollback.
    Blessed,
}

/// Whether this boot is a version's trial: systemd-boot sets the EFI variable
/// `LoaderBootCountPath` only when it boots an entry with a counter.
pub fn trial(root: &Path) -> Trial {
    match std::fs::read(reset::efi_variable_path(root, "LoaderBootCountPath")) {
        Ok(bytes) => match reset::decode_efi_string(&bytes) {
            Ok(path) => Trial::OnTrial(path),
            Err(_) => Trial::Blessed,
        },
        Err(_) => Trial::Blessed,
    }
}

/// Versions whose entries are marked bad (`+0`), with the tries they had.
pub fn rejected_versions(entries: &[BootEntry]) -> Vec<&BootEntry> {
    entries.iter().filter(|e| e.is_bad()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_and_without_counters_parse() {
        let blessed = BootEntry::parse("tinybox_20261205.120000.efi").unwrap();
        assert_eq!(blessed.version, "20261205.120000");
        assert_eq!((blessed.tries_left, blessed.tries_done), (None, None));
        assert!(!blessed.is_bad() && !blessed.is_on_trial());

        let trial = BootEntry::parse("tinybox_2+3-0.efi").unwrap();
        assert_eq!(trial.version, "2");
        assert_eq!((trial.tries_left, trial.tries_done), (Some(3), Some(0)));
        assert!(trial.is_on_trial());

        let bad = BootEntry::parse("tinybox_3+0-1.efi").unwrap();
        assert!(bad.is_bad() && !bad.is_on_trial());
        assert_eq!(
            BootEntry::parse("tinybox_4+2.efi").unwrap().tries_left,
            Some(2)
        );
    }

    #[test]
    fn other_names_are_not_entries() {
        for name in [
            "linux.efi",
            "tinybox_.efi",
            "tinybox_2+x-1.efi",
            "tinybox_2+1-y.efi",
            "tinybox_2.conf",
            "tinybox_2_abc.efi",
        ] {
            assert_eq!(BootEntry::parse(name), None, "{name}");
        }
    }

    #[test]
    fn the_list_holds_tinybox_entries_and_the_bad_ones_are_found() {
        let dir = tempfile::tempdir().unwrap();
        let linux = dir.path().join("efi/EFI/Linux");
        std::fs::create_dir_all(&linux).unwrap();
        for name in ["tinybox_2.efi", "tinybox_3+0-3.efi", "other.efi"] {
            std::fs::write(linux.join(name), b"MZ").unwrap();
        }
        let esp = esp_dir(dir.path());
        assert_eq!(esp, dir.path().join("efi"));
        let entries = list(&esp).unwrap();
        assert_eq!(entries.len(), 2);
        let bad = rejected_versions(&entries);
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].version, "3");
    }

    #[test]
    fn a_counting_boot_is_a_trial_and_no_variable_means_blessed() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(trial(dir.path()), Trial::Blessed);
        super::super::fixture::efi_variable(
            dir.path(),
            "LoaderBootCountPath",
            "\\EFI\\Linux\\tinybox_2+2-1.efi",
        );
        assert_eq!(
            trial(dir.path()),
            Trial::OnTrial("\\EFI\\Linux\\tinybox_2+2-1.efi".into())
        );
    }
}
