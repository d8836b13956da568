//! Appends encoded MLLOG lines to a file, one `write` per line, so that a run that is
//! killed keeps every line it logged.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::panic::Location;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::encode::{encode_line, Event, EventType, LogValue};
use super::keys;
use super::MlLogError;

/// Writes `:::MLLOG` lines to one file.
#[derive(Debug)]
pub struct MlLogWriter {
    path: PathBuf,
    file: File,
    namespace: String,
}

impl MlLogWriter {
    /// Opens `path` for appending, creating it when missing.
    pub fn open(path: &Path) -> Result<MlLogWriter, MlLogError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| MlLogError::Open {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(MlLogWriter {
            path: path.to_path_buf(),
            file,
            namespace: String::new(),
        })
    }

    /// The file the writer appends to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logs one event stamped now, with the call site as `file` and `lineno`.
    pub fn log(
        &mut self,
        caller: &Location<'_>,
        event_type: EventType,
        key: &str,
        value: LogValue,
        metadata: Vec<(String, LogValue)>,
    ) -> Result<u64, MlLogError> {
        let time_ms = now_ms();
        self.log_at(caller, time_ms, event_type, key, value, metadata)?;
        Ok(time_ms)
    }

    /// Logs one event stamped `time_ms` (milliseconds since the Unix epoch).
    pub fn log_at(
        &mut self,
        caller: &Location<'_>,
        time_ms: u64,
        event_type: EventType,
        key: &str,
        value: LogValue,
        metadata: Vec<(String, LogValue)>,
    ) -> Result<(), MlLogError> {
        let mut fields = Vec::with_capacity(metadata.len() + 2);
        fields.push((keys::FILE.to_string(), LogValue::from(caller.file())));
        fields.push((keys::LINENO.to_string(), LogValue::from(caller.line())));
        fields.extend(metadata);
        let event = Event {
            namespace: self.namespace.clone(),
            time_ms,
            event_type,
            key: key.to_string(),
            value,
            metadata: fields,
        };
        let mut line = encode_line(&event);
        line.push('\n');
        self.file
            .write_all(line.as_bytes())
            .and_then(|()| self.file.flush())
            .map_err(|source| MlLogError::Write {
                path: self.path.clone(),
                key: key.to_string(),
                source,
            })
    }

    /// Forces what was written onto the disk.
    pub fn sync(&mut self) -> Result<(), MlLogError> {
        self.file.sync_data().map_err(|source| MlLogError::Write {
            path: self.path.clone(),
            key: "(sync)".to_string(),
            source,
        })
    }
}

/// Milliseconds since the Unix epoch, as `int(time.time() * 1e3)`.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
