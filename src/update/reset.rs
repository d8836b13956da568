//! Factory reset, split by privilege. The agent (an unprivileged user) only writes a
//! request file into its state folder; a root service started by a path unit on that
//! file applies it: it asks systemd-boot to boot the running version's factory-reset
//! profile once (`bootctl set-oneshot tinybox_<version>.efi@factory-reset`; that
//! profile of the UKI adds `systemd.factory_reset=1`) and reboots. In that boot systemd-repart erases the state
//! partition in the initrd.

use std::path::{Path, PathBuf};
use std::process::Command;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The request file's name in the agent's state folder
/// (`/var/lib/tinyperf/factory-reset.request`), which the path unit watches.
pub const REQUEST_FILE: &str = "factory-reset.request";
/// The vendor GUID of systemd-boot's EFI variables (the Boot Loader Interface).
pub const LOADER_GUID: &str = "4a67b082-0a4c-41cf-b6c7-440b29bb8c4f";
/// The `ID=` of the UKI profile that boots into a factory reset; systemd-boot names
/// a profile's entry `<file>@<ID>`, in lower case.
pub const RESET_PROFILE: &str = "factory-reset";

/// Why a factory reset cannot be asked for or arranged.
#[derive(Debug, thiserror::Error)]
pub enum ResetError {
    /// The machine is not a tinybox OS image; the message says why.
    #[error("{0}")]
    NotAnImage(String),
    /// No systemd-boot variable names the entry booted.
    #[error("not booted by systemd-boot; cannot arrange a factory-reset boot ({} is missing)", .0.display())]
    NotSystemdBoot(PathBuf),
    /// A file could not be read or written.
    #[error("{what} {}: {source}", .path.display())]
    Io {
        /// What was being done: "cannot read", "cannot write".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// An EFI variable's content is not what systemd-boot writes.
    #[error("{} is garbled: {why}", .path.display())]
    Garbled {
        /// The variable's file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A program could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program, as looked up on PATH.
        program: String,
        /// The error.
        source: std::io::Error,
    },
    /// A program ran and failed.
    #[error("`{command}` failed ({status}){}", if .output.is_empty() { String::new() } else { format!(": {}", .output) })]
    Failed {
        /// The command line.
        command: String,
        /// How it ended.
        status: String,
        /// What it said on stderr (else stdout), trimmed.
        output: String,
    },
}

/// The request file: when and by whom a factory reset was asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResetRequest {
    /// When it was asked for.
    pub requested_at: DateTime<Utc>,
    /// Who asked, in words (`http 192.0.2.7`, `dbus uid 0`).
    pub requested_by: String,
}

/// Where the request file is in the state folder `state_dir`.
pub fn request_path(state_dir: &Path) -> PathBuf {
    state_dir.join(REQUEST_FILE)
}

/// Writes the request file into `state_dir` atomically (a reader sees all of it or
/// none), and returns what it wrote.
pub fn write_request(state_dir: &Path, requested_by: &str) -> Result<ResetRequest, ResetError> {
    let request = ResetRequest {
        requested_at: Utc::now(),
        requested_by: requested_by.to_string(),
    };
    let path = request_path(state_dir);
    let mut bytes = serde_json::to_vec_pretty(&request).unwrap_or_default();
    bytes.push(b'\n');
    crate::record::files::Modes::lookup()
        .write_atomically(&path, &bytes)
        .map_err(|source| ResetError::Io {
            what: "cannot write the factory-reset request",
            path,
            source,
        })?;
    Ok(request)
}

/// Takes the request file out of `state_dir`: removes it and returns what it said, or
/// `None` when there is none. A file whose content does not parse still counts as a
/// request (only the agent can write there); its `requested_by` says it was unreadable.
pub fn take_request(state_dir: &Path) -> Result<Option<ResetRequest>, ResetError> {
    let path = request_path(state_dir);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ResetError::Io {
                what: "cannot read",
                path,
                source,
            })
        }
    };
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ResetError::Io {
                what: "cannot remove",
                path,
                source,
            })
        }
        Ok(()) => {}
    }
    Ok(Some(serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        ResetRequest {
            requested_at: Utc::now(),
            requested_by: "unknown (the request file does not parse)".into(),
        }
    })))
}

/// The file of systemd-boot's EFI variable `name` below `root`.
pub fn efi_variable_path(root: &Path, name: &str) -> PathBuf {
    root.join("sys/firmware/efi/efivars")
        .join(format!("{name}-{LOADER_GUID}"))
}

/// The string in an efivarfs file of systemd-boot's: four bytes of attributes, then
/// UTF-16LE up to a NUL (or the end).
pub fn decode_efi_string(bytes: &[u8]) -> Result<String, String> {
    let Some(data) = bytes.get(4..) else {
        return Err(format!(
            "{} bytes, fewer than the 4 of its attributes",
            bytes.len()
        ));
    };
    if data.len() % 2 != 0 {
        return Err(format!("{} bytes of UTF-16, an odd count", data.len()));
    }
    let units: Vec<u16> = data
        .chunks_exact(2)
        .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
        .take_while(|&unit| unit != 0)
        .collect();
    let text = String::from_utf16(&units).map_err(|e| format!("not UTF-16: {e}"))?;
    if text.is_empty() {
        return Err("an empty entry name".into());
    }
    Ok(text)
}

/// The boot loader entry systemd-boot booted (`LoaderEntrySelected`), as
/// `tinybox_20261205.1130.efi` or with a profile, `…efi@0`.
pub fn selected_entry(root: &Path) -> Result<String, ResetError> {
    let path = efi_variable_path(root, "LoaderEntrySelected");
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ResetError::NotSystemdBoot(path))
        }
        Err(source) => {
            return Err(ResetError::Io {
                what: "cannot read",
                path,
                source,
            })
        }
    };
    decode_efi_string(&bytes).map_err(|why| ResetError::Garbled { path, why })
}

/// The systemd-boot entry of version `version`'s factory-reset profile:
/// `tinybox_20261205.1130.efi@factory-reset`. It is named after the running
/// version, not the entry booted: a boot through a hand-made entry (a test's, an
/// operator's) still resets into the UKI of the version that runs.
pub fn factory_reset_entry(version: &str) -> String {
    format!("tinybox_{version}.efi@{RESET_PROFILE}").to_lowercase()
}

/// Whether systemd-boot's next boot (`LoaderEntryOneShot`) is a factory-reset profile.
pub fn oneshot_is_factory_reset(root: &Path) -> bool {
    std::fs::read(efi_variable_path(root, "LoaderEntryOneShot"))
        .ok()
        .and_then(|bytes| decode_efi_string(&bytes).ok())
        .is_some_and(|entry| entry.ends_with(&format!("@{RESET_PROFILE}")))
}

/// Arranges the factory-reset boot and reboots: checks that `root` is a tinybox OS
/// image booted by systemd-boot, runs `bootctl set-oneshot
/// tinybox_<version>.efi@factory-reset`, then
/// `systemctl reboot` (both looked up on PATH). Returns the entry it set. Root only:
/// bootctl writes an EFI variable and systemctl asks systemd to reboot.
pub fn apply(root: &Path) -> Result<String, ResetError> {
    let status = super::status::read(root, super::status::Extras::default());
    if !status.image {
        return Err(ResetError::NotAnImage(
            status
                .message
                .unwrap_or_else(|| "not a tinybox OS image".into()),
        ));
    }
    selected_entry(root)?;
    let version = status.version().to_string();
    if version.is_empty() {
        return Err(ResetError::NotAnImage(
            "the image's os-release names no IMAGE_VERSION".into(),
        ));
    }
    let entry = factory_reset_entry(&version);
    run("bootctl", &["set-oneshot", &entry])?;
    tracing::warn!(entry = %entry, "factory reset: the next boot erases the state partition; rebooting");
    run("systemctl", &["reboot"])?;
    Ok(entry)
}

/// Runs `program` with `args`; its output becomes the error when it fails.
fn run(program: &str, args: &[&str]) -> Result<(), ResetError> {
    let out = Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| ResetError::Spawn {
            program: program.to_string(),
            source,
        })?;
    if out.status.success() {
        return Ok(());
    }
    let said = if out.stderr.iter().any(|b| !b.is_ascii_whitespace()) {
        &out.stderr
    } else {
        &out.stdout
    };
    Err(ResetError::Failed {
        command: std::iter::once(program)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" "),
        status: match out.status.code() {
            Some(code) => format!("exit status {code}"),
            None => "killed by a signal".into(),
        },
        output: String::from_utf8_lossy(said).trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An efivarfs file as the kernel shows it: attributes, then UTF-16LE with a NUL.
    fn efi_string(text: &str) -> Vec<u8> {
        let mut bytes = vec![0x06, 0, 0, 0];
        for unit in text.encode_utf16().chain([0]) {
            bytes.extend(unit.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn the_running_version_gets_its_reset_profile_in_lower_case() {
        assert_eq!(
            factory_reset_entry("20261205.1130"),
            "tinybox_20261205.1130.efi@factory-reset"
        );
        assert_eq!(
            factory_reset_entry("7.RC1"),
            "tinybox_7.rc1.efi@factory-reset"
        );
    }

    #[test]
    fn efi_strings_decode_and_garbled_ones_are_refused() {
        assert_eq!(
            decode_efi_string(&efi_string("tinybox_1.efi@0")).unwrap(),
            "tinybox_1.efi@0"
        );
        let mut no_nul = efi_string("abc");
        no_nul.truncate(no_nul.len() - 2);
        assert_eq!(decode_efi_string(&no_nul).unwrap(), "abc");
        assert!(decode_efi_string(&[6, 0])
            .unwrap_err()
            .contains("attributes"));
        assert!(decode_efi_string(&[6, 0, 0, 0, b'a'])
            .unwrap_err()
            .contains("odd"));
        assert!(decode_efi_string(&[6, 0, 0, 0, 0, 0]).is_err());
        assert!(decode_efi_string(&[6, 0, 0, 0, 0x00, 0xd8, 0x41, 0]).is_err());
    }

    #[test]
    fn a_missing_variable_means_no_systemd_boot() {
        let root = tempfile::tempdir().unwrap();
        let err = selected_entry(root.path()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("not booted by systemd-boot; cannot arrange a factory-reset boot"),
            "{err}"
        );
        let vars = root.path().join("sys/firmware/efi/efivars");
        std::fs::create_dir_all(&vars).unwrap();
        std::fs::write(
            efi_variable_path(root.path(), "LoaderEntrySelected"),
            [6, 0, 0],
        )
        .unwrap();
        assert!(matches!(
            selected_entry(root.path()),
            Err(ResetError::Garbled { .. })
        ));
        assert!(!oneshot_is_factory_reset(root.path()));
        std::fs::write(
            efi_variable_path(root.path(), "LoaderEntryOneShot"),
            efi_string("tinybox_2.efi@factory-reset"),
        )
        .unwrap();
        assert!(oneshot_is_factory_reset(root.path()));
    }

    #[test]
    fn the_request_is_written_whole_and_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(take_request(dir.path()).unwrap(), None);
        let written = write_request(dir.path(), "dbus uid 0").unwrap();
        let text = std::fs::read_to_string(request_path(dir.path())).unwrap();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(value["requested_by"], "dbus uid 0");
        assert!(value["requested_at"].is_string());
        assert_eq!(take_request(dir.path()).unwrap(), Some(written));
        assert!(!request_path(dir.path()).exists());
        assert_eq!(take_request(dir.path()).unwrap(), None);
        std::fs::write(request_path(dir.path()), "{").unwrap();
        let garbled = take_request(dir.path()).unwrap().unwrap();
        assert!(garbled.requested_by.contains("does not parse"));
    }
}
