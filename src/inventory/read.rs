//! Reading sysfs and procfs files. A file that is absent is often normal (a device
//! that is not PCIe has no link files); a file that is there but cannot be read or
//! parsed is a finding that names its path, never an error that stops the inventory.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Why a file that is present could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{}: dangling symlink", path.display())]
    DanglingLink { path: PathBuf },
    #[error("{}: is a directory, expected a file", path.display())]
    IsDirectory { path: PathBuf },
    #[error("{}: cannot read: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: not text", path.display())]
    NotText { path: PathBuf },
    #[error("{}: missing", path.display())]
    Missing { path: PathBuf },
    #[error("{}: malformed {what}: {content:?}", path.display())]
    Malformed {
        path: PathBuf,
        what: &'static str,
        content: String,
    },
}

/// Whether a file's absence is itself worth a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    Required,
    Optional,
}

/// Notes collected while taking the inventory, in the order they were found.
#[derive(Debug, Default)]
pub struct Findings(Vec<String>);

impl Findings {
    pub fn push(&mut self, note: impl Into<String>) {
        self.0.push(note.into());
    }

    pub fn record(&mut self, error: ReadError) {
        self.0.push(error.to_string());
    }

    pub fn into_vec(self) -> Vec<String> {
        self.0
    }
}

/// The raw bytes of a file; `Ok(None)` when nothing is there at all.
pub fn bytes(path: &Path) -> Result<Option<Vec<u8>>, ReadError> {
    match fs::read(path) {
        Ok(data) => Ok(Some(data)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A symlink whose target is gone reads as "not found", yet something is there.
            if fs::symlink_metadata(path).is_ok() {
                Err(ReadError::DanglingLink {
                    path: path.to_path_buf(),
                })
            } else {
                Ok(None)
            }
        }
        Err(_) if path.is_dir() => Err(ReadError::IsDirectory {
            path: path.to_path_buf(),
        }),
        Err(source) => Err(ReadError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// A file's bytes, with problems recorded as findings.
pub fn bytes_or_note(path: &Path, presence: Presence, findings: &mut Findings) -> Option<Vec<u8>> {
    match bytes(path) {
        Ok(Some(data)) => Some(data),
        Ok(None) => {
            if presence == Presence::Required {
                findings.record(ReadError::Missing {
                    path: path.to_path_buf(),
                });
            }
            None
        }
        Err(e) => {
            findings.record(e);
            None
        }
    }
}

/// A text file's content with surrounding whitespace removed.
pub fn text(path: &Path, presence: Presence, findings: &mut Findings) -> Option<String> {
    let data = bytes_or_note(path, presence, findings)?;
    match String::from_utf8(data) {
        Ok(s) => Some(s.trim().to_string()),
        Err(_) => {
            findings.record(ReadError::NotText {
                path: path.to_path_buf(),
            });
            None
        }
    }
}

/// A text file parsed by `parse`; content it rejects is a finding naming `what` it should be.
pub fn parsed<T>(
    path: &Path,
    what: &'static str,
    presence: Presence,
    findings: &mut Findings,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Option<T> {
    let content = text(path, presence, findings)?;
    let value = parse(&content);
    if value.is_none() {
        findings.record(ReadError::Malformed {
            path: path.to_path_buf(),
            what,
            content: shorten(&content),
        });
    }
    value
}

/// The last path component a symlink points at (`driver` → `amdgpu`); `None` when
/// the link is absent.
pub fn link_name(path: &Path, findings: &mut Findings) -> Option<String> {
    match fs::read_link(path) {
        Ok(target) => target
            .file_name()
            .map(|name| name.to_string_lossy().into_owned()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(source) => {
            findings.record(ReadError::Io {
                path: path.to_path_buf(),
                source,
            });
            None
        }
    }
}

/// Parses `0x1002`-style hexadecimal as sysfs writes ids and class codes.
pub fn hex_u32(s: &str) -> Option<u32> {
    let digits = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X"))?;
    u32::from_str_radix(digits, 16).ok()
}

/// Long garbage would drown the finding; keep its start.
fn shorten(content: &str) -> String {
    const LIMIT: usize = 60;
    match content.char_indices().nth(LIMIT) {
        Some((cut, _)) => format!("{}…", &content[..cut]),
        None => content.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_optional_file_is_silent_and_required_one_is_noted() {
        let dir = tempfile::tempdir().unwrap();
        let mut findings = Findings::default();
        assert_eq!(
            text(&dir.path().join("nope"), Presence::Optional, &mut findings),
            None
        );
        assert!(findings.0.is_empty());
        text(&dir.path().join("nope"), Presence::Required, &mut findings);
        assert_eq!(findings.0.len(), 1);
        assert!(findings.0[0].ends_with("nope: missing"), "{:?}", findings.0);
    }

    #[test]
    fn dangling_link_and_directory_are_findings_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("gone", dir.path().join("link")).unwrap();
        fs::create_dir(dir.path().join("sub")).unwrap();
        let mut findings = Findings::default();
        assert_eq!(
            text(&dir.path().join("link"), Presence::Optional, &mut findings),
            None
        );
        assert_eq!(
            text(&dir.path().join("sub"), Presence::Optional, &mut findings),
            None
        );
        let notes = findings.into_vec();
        assert!(notes[0].ends_with("link: dangling symlink"), "{notes:?}");
        assert!(notes[1].ends_with("sub: is a directory, expected a file"));
    }

    #[test]
    fn rejected_content_is_a_malformed_finding() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("vendor");
        fs::write(&path, "banana\n").unwrap();
        let mut findings = Findings::default();
        let value = parsed(&path, "PCI id", Presence::Required, &mut findings, hex_u32);
        assert_eq!(value, None);
        assert!(findings.0[0].ends_with("vendor: malformed PCI id: \"banana\""));
    }

    #[test]
    fn hex_needs_its_prefix() {
        assert_eq!(hex_u32("0x1002"), Some(0x1002));
        assert_eq!(hex_u32("0x030000"), Some(0x030000));
        assert_eq!(hex_u32("1002"), None);
        assert_eq!(hex_u32("0xzz"), None);
    }
}
