//! Where records are kept: `STATE/box/<serial>.json`, written atomically.

use std::io;
use std::path::{Path, PathBuf};

use super::{BirthRecord, BOX_DIR};
use crate::record::files::{self, BoundedReadError, Modes};

/// A record is a few dozen KiB; a file far larger is not one.
const RECORD_LIMIT: u64 = 16 << 20;
/// Serials longer than this are cut: a file name has room for 255 bytes.
const SERIAL_LIMIT: usize = 100;
/// The file of a box whose board gives no serial.
pub const UNKNOWN_SERIAL: &str = "unknown-serial";

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BirthError {
    /// The file or its folder could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file is larger than any record.
    #[error("{}: {size} bytes, larger than any box record", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// The file is not a record.
    #[error("{}: not a box record: {source}", path.display())]
    Malformed {
        /// The file.
        path: PathBuf,
        /// Where the JSON went wrong.
        source: serde_json::Error,
    },
}

/// The file name a serial is kept under: letters, digits, `.`, `_` and `-` as they are,
/// anything else as `_`; `unknown-serial.json` without one.
pub fn file_name_for(serial: Option<&str>) -> String {
    let cleaned: String = serial
        .unwrap_or_default()
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(SERIAL_LIMIT)
        .collect();
    // A name of dots alone would be the folder itself or its parent, and a leading dot
    // would hide the file.
    let cleaned = cleaned.trim_start_matches('.');
    if cleaned.is_empty() {
        format!("{UNKNOWN_SERIAL}.json")
    } else {
        format!("{cleaned}.json")
    }
}

/// The record file of the box with `serial` under the state folder.
pub fn record_path(state_dir: &Path, serial: Option<&str>) -> PathBuf {
    state_dir.join(BOX_DIR).join(file_name_for(serial))
}

/// The record at `path`; `None` when there is none yet.
pub fn load(path: &Path) -> Result<Option<BirthRecord>, BirthError> {
    let bytes = match files::read_bounded(path, RECORD_LIMIT) {
        Ok(bytes) => bytes,
        Err(BoundedReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(BoundedReadError::Io(source)) => {
            return Err(BirthError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
        Err(BoundedReadError::TooLarge { size }) => {
            return Err(BirthError::TooLarge {
                path: path.to_path_buf(),
                size,
            })
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| BirthError::Malformed {
            path: path.to_path_buf(),
            source,
        })
}

/// Writes `record` as the record of its box under `state_dir`, atomically: a reader sees
/// the old record or the new one. Returns the file.
pub fn save(state_dir: &Path, record: &BirthRecord) -> Result<PathBuf, BirthError> {
    let path = record_path(state_dir, record.baseboard_serial.as_deref());
    let io_error = |source| BirthError::Io {
        path: path.clone(),
        source,
    };
    let modes = Modes::lookup();
    modes
        .create_dir_all(&state_dir.join(BOX_DIR))
        .map_err(io_error)?;
    let mut json = serde_json::to_vec_pretty(record).map_err(|source| BirthError::Malformed {
        path: path.clone(),
        source,
    })?;
    json.push(b'\n');
    modes.write_atomically(&path, &json).map_err(io_error)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serials_become_safe_file_names() {
        assert_eq!(
            file_name_for(Some("M80-F4012300561")),
            "M80-F4012300561.json"
        );
        assert_eq!(file_name_for(Some(" A/B C\u{e9} ")), "A_B_C_.json");
        assert_eq!(file_name_for(Some("../..")), "_...json");
        assert_eq!(file_name_for(Some("..")), "unknown-serial.json");
        assert_eq!(file_name_for(Some("")), "unknown-serial.json");
        assert_eq!(file_name_for(None), "unknown-serial.json");
        assert_eq!(file_name_for(Some(&"x".repeat(300))).len(), 105);
    }

    #[test]
    fn a_missing_record_is_none_and_a_broken_one_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&dir.path().join("nope.json")).unwrap().is_none());
        std::fs::write(dir.path().join("bad.json"), "{").unwrap();
        let e = load(&dir.path().join("bad.json")).unwrap_err().to_string();
        assert!(e.contains("bad.json: not a box record"), "{e}");
    }
}
