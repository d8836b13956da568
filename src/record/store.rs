//! The durable run store: `STATE_DIR/runs/<id>/run.json` plus the run's artifacts.
//!
//! Records are written atomically (temp file, fsync, rename, fsync of the directory), so
//! a crash leaves either the old record or the new one. A record that cannot be read is
//! reported and skipped, never fatal.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use chrono::Utc;
use tracing::warn;

use super::run::{RunRecord, RunState};

const RECORD_FILE: &str = "run.json";
/// How many runs a store keeps unless told otherwise.
pub const DEFAULT_RETENTION: usize = 200;
const MAX_RUN_ID_LEN: usize = 64;

/// A run's files besides its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    Mllog,
    Telemetry,
    WorkerLog,
}

impl Artifact {
    pub fn file_name(self) -> &'static str {
        match self {
            Artifact::Mllog => "mllog.txt",
            Artifact::Telemetry => "telemetry.csv",
            Artifact::WorkerLog => "worker.log",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create state directory {path}: {source}")]
    CreateDir { path: PathBuf, source: io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error("invalid run id {0:?}")]
    InvalidId(String),
}

/// Why a run's record or file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("invalid run id {0:?}")]
    InvalidId(String),
    #[error("no run with id {0:?}")]
    NotFound(String),
    #[error("{0}")]
    Unreadable(String),
}

/// A record the store could not read.
#[derive(Debug, Clone, PartialEq)]
pub struct SkippedRecord {
    pub id: String,
    pub reason: String,
}

/// The result of listing the store.
#[derive(Debug, Default)]
pub struct Listing {
    pub records: Vec<RunRecord>,
    pub skipped: Vec<SkippedRecord>,
}

#[derive(Debug, Clone)]
pub struct Store {
    runs_dir: PathBuf,
    retention: usize,
}

/// True for ids the store could have made: ASCII letters, digits and `-`, not starting
/// with `-`, at most 64 characters. Anything else could name a path outside the store.
pub fn is_valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_RUN_ID_LEN
        && !id.starts_with('-')
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// A new run id: UTC time to the second, then six random hex digits
/// (`20261129-210512-3fa9c2`), so ids sort by start time.
pub fn new_run_id() -> String {
    let mut random = [0u8; 3];
    // With no entropy source the time alone still names the run; collisions are
    // caught when the run directory is created.
    let _ = getrandom::fill(&mut random);
    format!(
        "{}-{:02x}{:02x}{:02x}",
        Utc::now().format("%Y%m%d-%H%M%S"),
        random[0],
        random[1],
        random[2]
    )
}

impl Store {
    /// Opens (creating if needed) the store under `state_dir`, keeping at most
    /// `retention` runs.
    pub fn open(state_dir: &Path, retention: usize) -> Result<Store, StoreError> {
        let runs_dir = state_dir.join("runs");
        fs::create_dir_all(&runs_dir).map_err(|source| StoreError::CreateDir {
            path: runs_dir.clone(),
            source,
        })?;
        Ok(Store {
            runs_dir,
            retention: retention.max(1),
        })
    }

    pub fn runs_dir(&self) -> &Path {
        &self.runs_dir
    }

    /// The directory of run `id`, after checking the id cannot escape the store.
    pub fn run_dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        if !is_valid_run_id(id) {
            return Err(StoreError::InvalidId(id.to_string()));
        }
        Ok(self.runs_dir.join(id))
    }

    /// Creates the directory of a new run and writes its first record.
    pub fn create(&self, record: &RunRecord) -> Result<PathBuf, StoreError> {
        let dir = self.run_dir(&record.id)?;
        fs::create_dir(&dir).map_err(|source| StoreError::Write {
            path: dir.clone(),
            source,
        })?;
        self.save(record)?;
        Ok(dir)
    }

    /// Writes `record` atomically.
    pub fn save(&self, record: &RunRecord) -> Result<(), StoreError> {
        let dir = self.run_dir(&record.id)?;
        let path = dir.join(RECORD_FILE);
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| StoreError::Write {
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        write_atomically(&path, &bytes).map_err(|source| StoreError::Write { path, source })
    }

    /// Reads one record.
    pub fn load(&self, id: &str) -> Result<RunRecord, ReadError> {
        let dir = self
            .run_dir(id)
            .map_err(|_| ReadError::InvalidId(id.to_string()))?;
        let path = dir.join(RECORD_FILE);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ReadError::NotFound(id.to_string()))
            }
            Err(e) => return Err(ReadError::Unreadable(format!("cannot read run {id}: {e}"))),
        };
        serde_json::from_slice(&bytes).map_err(|e| {
            ReadError::Unreadable(format!("the record of run {id} is unreadable: {e}"))
        })
    }

    /// Up to `limit` readable runs, newest first, and the records that were skipped.
    pub fn list(&self, limit: usize) -> Listing {
        let mut listing = self.list_all();
        listing.records.truncate(limit);
        listing
    }

    fn list_all(&self) -> Listing {
        let mut listing = Listing::default();
        let entries = match fs::read_dir(&self.runs_dir) {
            Ok(e) => e,
            Err(e) => {
                warn!(dir = %self.runs_dir.display(), error = %e, "cannot list the run store");
                return listing;
            }
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str() else { continue };
            if !is_valid_run_id(id) || !entry.path().is_dir() {
                continue;
            }
            match self.load(id) {
                Ok(r) => listing.records.push(r),
                Err(e) => listing.skipped.push(SkippedRecord {
                    id: id.to_string(),
                    reason: e.to_string(),
                }),
            }
        }
        listing
            .records
            .sort_by(|a, b| b.started_at.cmp(&a.started_at).then(b.id.cmp(&a.id)));
        listing
    }

    /// Marks every run still `running` as `interrupted`: called at agent start, when no
    /// run can be in progress. Returns the ids it marked.
    pub fn mark_interrupted(&self) -> Vec<String> {
        let mut marked = Vec::new();
        for mut record in self.list_all().records {
            if record.state != RunState::Running {
                continue;
            }
            record.finish(
                RunState::Interrupted,
                Some("the agent stopped while this run was in progress".into()),
            );
            match self.save(&record) {
                Ok(()) => marked.push(record.id),
                Err(e) => warn!(run = %record.id, error = %e, "cannot mark run interrupted"),
            }
        }
        marked
    }

    /// Deletes the oldest finished runs beyond the retention limit. Returns how many
    /// it removed.
    pub fn prune(&self) -> usize {
        let listing = self.list_all();
        let mut removed = 0;
        for record in listing.records.iter().skip(self.retention) {
            if !record.state.is_final() {
                continue;
            }
            if let Ok(dir) = self.run_dir(&record.id) {
                match fs::remove_dir_all(&dir) {
                    Ok(()) => removed += 1,
                    Err(e) => warn!(run = %record.id, error = %e, "cannot remove old run"),
                }
            }
        }
        removed
    }

    /// One of a run's files.
    pub fn read_artifact(&self, id: &str, artifact: Artifact) -> Result<Vec<u8>, ReadError> {
        let dir = self
            .run_dir(id)
            .map_err(|_| ReadError::InvalidId(id.to_string()))?;
        if !dir.join(RECORD_FILE).exists() {
            return Err(ReadError::NotFound(id.to_string()));
        }
        match fs::read(dir.join(artifact.file_name())) {
            Ok(b) => Ok(b),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(ReadError::NotFound(format!(
                "{id}/{}",
                artifact.file_name()
            ))),
            Err(e) => Err(ReadError::Unreadable(format!(
                "cannot read {} of run {id}: {e}",
                artifact.file_name()
            ))),
        }
    }
}

/// Writes `bytes` to `path` so that readers see the old file or the new one, never a
/// mix: temp file in the same directory, fsync, rename, fsync of the directory.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("record");
    let tmp = dir.join(format!(".{file_name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut f = File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Trigger;

    fn record(id: &str) -> RunRecord {
        RunRecord::new(
            id.into(),
            "inventory".into(),
            Trigger::Cli,
            Default::default(),
        )
    }

    #[test]
    fn run_ids_cannot_escape_the_store() {
        for bad in [
            "",
            "..",
            "../etc",
            "a/b",
            "-rf",
            "a b",
            "a\0b",
            &"x".repeat(65),
        ] {
            assert!(!is_valid_run_id(bad), "{bad:?} accepted");
        }
        assert!(is_valid_run_id(&new_run_id()));
        assert!(is_valid_run_id("20261129-210512-3fa9c2"));
    }

    #[test]
    fn save_load_and_list_newest_first() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        let mut a = record("a");
        a.started_at -= chrono::Duration::seconds(10);
        store.create(&a).unwrap();
        store.create(&record("b")).unwrap();
        let listing = store.list(10);
        let ids: Vec<_> = listing.records.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        assert_eq!(store.load("a").unwrap(), a);
        assert_eq!(store.load("zz"), Err(ReadError::NotFound("zz".into())));
        assert!(matches!(store.load("../x"), Err(ReadError::InvalidId(_))));
    }

    #[test]
    fn corrupt_and_truncated_records_are_skipped_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        store.create(&record("good")).unwrap();
        store.create(&record("trunc")).unwrap();
        let path = store.run_dir("trunc").unwrap().join(RECORD_FILE);
        let text = fs::read(&path).unwrap();
        fs::write(&path, &text[..text.len() / 2]).unwrap();
        fs::create_dir(store.run_dir("garbage").unwrap()).unwrap();
        fs::write(
            store.run_dir("garbage").unwrap().join(RECORD_FILE),
            b"\xff\x00",
        )
        .unwrap();
        let listing = store.list(10);
        assert_eq!(listing.records.len(), 1);
        assert_eq!(listing.records[0].id, "good");
        let mut skipped: Vec<_> = listing.skipped.iter().map(|s| s.id.as_str()).collect();
        skipped.sort();
        assert_eq!(skipped, ["garbage", "trunc"]);
        assert!(matches!(store.load("trunc"), Err(ReadError::Unreadable(_))));
    }

    #[test]
    fn running_records_become_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        store.create(&record("live")).unwrap();
        let mut done = record("done");
        done.finish(RunState::Passed, None);
        store.create(&done).unwrap();
        assert_eq!(store.mark_interrupted(), vec!["live".to_string()]);
        assert_eq!(store.load("live").unwrap().state, RunState::Interrupted);
        assert_eq!(store.load("done").unwrap(), done);
        assert!(store.mark_interrupted().is_empty());
    }

    #[test]
    fn prune_keeps_the_newest_runs() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 2).unwrap();
        for (i, id) in ["r1", "r2", "r3", "r4"].iter().enumerate() {
            let mut r = record(id);
            r.started_at += chrono::Duration::seconds(i as i64);
            r.finish(RunState::Passed, None);
            store.create(&r).unwrap();
        }
        assert_eq!(store.prune(), 2);
        let ids: Vec<_> = store.list(10).records.into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["r4", "r3"]);
    }

    #[test]
    fn artifacts_are_read_by_name_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        let run_dir = store.create(&record("r")).unwrap();
        fs::write(run_dir.join("mllog.txt"), ":::MLLOG {}\n").unwrap();
        assert_eq!(
            store.read_artifact("r", Artifact::Mllog).unwrap(),
            b":::MLLOG {}\n"
        );
        assert!(matches!(
            store.read_artifact("r", Artifact::Telemetry),
            Err(ReadError::NotFound(_))
        ));
        assert!(matches!(
            store.read_artifact("nope", Artifact::Mllog),
            Err(ReadError::NotFound(_))
        ));
    }
}
