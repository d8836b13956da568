//! The durable run store: `STATE_DIR/runs/<id>/run.json` plus the run's artifacts,
//! with an index of every run in memory.
//!
//! The index is read once when the store opens and kept current by every save, so
//! listing and retention never touch the disk; a whole record is read only when one
//! is asked for, and never past a size limit. Records are written atomically (temp
//! file, fsync, rename, fsync of the folder), so a crash leaves the old record or the
//! new one. A record that cannot be read is reported and skipped, never fatal.
//!
//! Every method that reads or writes files blocks: async callers run them with
//! `spawn_blocking`.

use std::fs::{self, File};
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use chrono::{DateTime, Utc};
use serde::Deserialize;
use tracing::{info, warn};

use super::brief::{BriefParts, RunBrief, StageParts};
use super::files::{open_in_plain_folder, read_bounded, BoundedReadError, Modes};
use super::index::RunIndex;
pub use super::index::SkippedRecord;
use super::run::{Metric, RunRecord, RunState, Summary, Trigger, Verdict};

const RECORD_FILE: &str = "run.json";
/// How many runs a store keeps unless told otherwise.
pub const DEFAULT_RETENTION: usize = 200;
/// The largest record read whole: far above any real run (a tinybox green acceptance
/// run is about 54 KB), far below what would hurt the agent's memory.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 8 * 1024 * 1024;
/// The largest artifact (MLLOG, telemetry CSV, training figures) read whole, to draw a
/// run's page: a three-hour run's telemetry is a few MB. Served files go out in pieces
/// whatever their size.
pub const DEFAULT_MAX_ARTIFACT_BYTES: u64 = 16 * 1024 * 1024;
const MAX_RUN_ID_LEN: usize = 64;

/// A run's files besides its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// The MLLOG (`mllog.txt`).
    Mllog,
    /// The GPUs' samples (`telemetry.csv`).
    Telemetry,
    /// What the worker process wrote besides its events (`worker.log`).
    WorkerLog,
    /// Each epoch's training figures (`train.jsonl`).
    TrainFigures,
}

impl Artifact {
    /// The file's name in the run's folder.
    pub fn file_name(self) -> &'static str {
        match self {
            Artifact::Mllog => "mllog.txt",
            Artifact::Telemetry => "telemetry.csv",
            Artifact::WorkerLog => "worker.log",
            Artifact::TrainFigures => "train.jsonl",
        }
    }
}

/// Why the store could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A folder of the store could not be made.
    #[error("cannot create state directory {path}: {source}")]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A file of the store could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The id could name a path outside the store.
    #[error("invalid run id {}", crate::echo::quoted(.0))]
    InvalidId(String),
}

impl StoreError {
    /// True when the write failed for want of space, which may come back.
    pub fn is_out_of_space(&self) -> bool {
        match self {
            StoreError::CreateDir { source, .. } | StoreError::Write { source, .. } => {
                matches!(
                    source.raw_os_error(),
                    Some(nix::libc::ENOSPC) | Some(nix::libc::EDQUOT)
                )
            }
            StoreError::InvalidId(_) => false,
        }
    }
}

/// Why a run's record or file could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// The id could name a path outside the store.
    #[error("invalid run id {}", crate::echo::quoted(.0))]
    InvalidId(String),
    /// The store has no run of that id.
    #[error("no run with id {}", crate::echo::quoted(.0))]
    NotFound(String),
    /// The run exists; the file does not (a run that never wrote one).
    #[error("run {} has no {file}", crate::echo::quoted(.id))]
    MissingFile {
        /// The run's id.
        id: String,
        /// The file's name.
        file: String,
    },
    /// A file is larger than the store reads whole.
    #[error("{what} of run {id} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// The run's id.
        id: String,
        /// Which file (`the record`, `telemetry.csv`).
        what: String,
        /// Its size, in bytes.
        size: u64,
        /// The limit it is over, in bytes.
        limit: u64,
    },
    /// The file exists but could not be read or parsed; says why.
    #[error("{0}")]
    Unreadable(String),
    /// The file is a link, or no plain file: never served; says which.
    #[error("{0}")]
    Refused(String),
}

/// How a store is kept.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Runs kept; older finished ones are removed.
    pub retention: usize,
    /// The largest `run.json` read whole, in bytes.
    pub max_record_bytes: u64,
    /// The largest artifact read whole, in bytes.
    pub max_artifact_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            retention: DEFAULT_RETENTION,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            max_artifact_bytes: DEFAULT_MAX_ARTIFACT_BYTES,
        }
    }
}

/// What opening the store found besides the readable runs.
#[derive(Debug, Default)]
pub struct OpenReport {
    /// Folders of runs that never got a record, removed.
    pub removed_empty: Vec<String>,
}

/// The runs on disk and their index in memory.
#[derive(Debug)]
pub struct Store {
    runs_dir: PathBuf,
    options: StoreOptions,
    modes: Modes,
    index: RwLock<RunIndex>,
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

/// The fields of `run.json` a brief needs; everything else (the inventory, checks,
/// findings) is skipped while parsing, so indexing reads a file without holding it.
#[derive(Deserialize)]
struct RecordHead {
    id: String,
    suite: String,
    state: RunState,
    trigger: Trigger,
    started_at: DateTime<Utc>,
    #[serde(default)]
    finished_at: Option<DateTime<Utc>>,
    #[serde(default)]
    stages: Vec<StageHead>,
    #[serde(default)]
    summary: Summary,
}

#[derive(Deserialize)]
struct StageHead {
    name: String,
    verdict: Verdict,
    #[serde(default)]
    metrics: Vec<Metric>,
}

impl RecordHead {
    fn brief(&self) -> RunBrief {
        RunBrief::from_parts(
            BriefParts {
                id: &self.id,
                suite: &self.suite,
                state: self.state,
                trigger: self.trigger,
                started_at: self.started_at,
                finished_at: self.finished_at,
                summary: &self.summary,
            },
            self.stages.iter().map(|s| StageParts {
                name: &s.name,
                verdict: s.verdict,
                metrics: &s.metrics,
            }),
        )
    }
}

impl Store {
    /// Opens (creating if needed) the store under `state_dir` with the default
    /// limits, keeping at most `retention` runs.
    pub fn open(state_dir: &Path, retention: usize) -> Result<Store, StoreError> {
        let options = StoreOptions {
            retention,
            ..StoreOptions::default()
        };
        Store::open_with(state_dir, options).map(|(store, _)| store)
    }

    /// Opens the store and reads its index: one pass over the run folders, each
    /// record parsed for its brief only. Folders without a record (runs that never
    /// started) are removed.
    pub fn open_with(
        state_dir: &Path,
        mut options: StoreOptions,
    ) -> Result<(Store, OpenReport), StoreError> {
        options.retention = options.retention.max(1);
        let modes = Modes::lookup();
        let runs_dir = state_dir.join("runs");
        let create_dir = |path: &Path| {
            modes
                .create_dir_all(path)
                .map_err(|source| StoreError::CreateDir {
                    path: path.to_path_buf(),
                    source,
                })
        };
        create_dir(state_dir)?;
        create_dir(&runs_dir)?;
        let store = Store {
            runs_dir,
            options,
            modes,
            index: RwLock::new(RunIndex::default()),
        };
        let report = store.read_index();
        Ok((store, report))
    }

    fn read_index(&self) -> OpenReport {
        let mut report = OpenReport::default();
        let entries = match fs::read_dir(&self.runs_dir) {
            Ok(e) => e,
            Err(e) => {
                warn!(dir = %self.runs_dir.display(), error = %e, "cannot list the run store");
                return report;
            }
        };
        let mut index = RunIndex::default();
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(id) = name.to_str() else { continue };
            if !is_valid_run_id(id) || !entry.path().is_dir() {
                continue;
            }
            let path = entry.path().join(RECORD_FILE);
            match read_head(&path, id) {
                Ok(head) => index.put(head.brief()),
                Err(HeadError::Missing) => match fs::remove_dir_all(entry.path()) {
                    Ok(()) => report.removed_empty.push(id.to_string()),
                    Err(e) => index.skip(SkippedRecord {
                        id: id.to_string(),
                        reason: format!("no record, and the folder cannot be removed: {e}"),
                    }),
                },
                Err(HeadError::Bad(reason)) => index.skip(SkippedRecord {
                    id: id.to_string(),
                    reason,
                }),
            }
        }
        let suite_latest: Vec<String> = index
            .suite_latest_briefs()
            .iter()
            .map(|b| b.id.clone())
            .collect();
        *self.index_mut() = index;
        for id in suite_latest {
            match self.read_record(&id) {
                Ok(record) => self.index_mut().set_suite_latest(Arc::new(record)),
                Err(e) => warn!(run = %id, error = %e, "cannot read a suite's last finished run"),
            }
        }
        report
    }

    fn index(&self) -> RwLockReadGuard<'_, RunIndex> {
        self.index.read().unwrap_or_else(|e| e.into_inner())
    }

    fn index_mut(&self) -> RwLockWriteGuard<'_, RunIndex> {
        self.index.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The folder holding one folder per run.
    pub fn runs_dir(&self) -> &Path {
        &self.runs_dir
    }

    /// How the store is kept.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// The directory of run `id`, after checking the id cannot escape the store.
    pub fn run_dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        if !is_valid_run_id(id) {
            return Err(StoreError::InvalidId(id.to_string()));
        }
        Ok(self.runs_dir.join(id))
    }

    /// Creates the directory of a new run and writes its first record. When the
    /// record cannot be written the folder goes too, so a refused start leaves
    /// nothing behind.
    pub fn create(&self, record: &RunRecord) -> Result<PathBuf, StoreError> {
        let dir = self.run_dir(&record.id)?;
        self.modes
            .create_dir(&dir)
            .map_err(|source| StoreError::Write {
                path: dir.clone(),
                source,
            })?;
        if let Err(e) = self.write(record) {
            let _ = fs::remove_dir_all(&dir);
            return Err(e);
        }
        self.index_mut().put(RunBrief::from(record));
        Ok(dir)
    }

    /// Updates the index with `record` and writes it atomically. The index holds the
    /// run as it is even when the write fails.
    pub fn save(&self, record: &RunRecord) -> Result<(), StoreError> {
        self.note(&Arc::new(record.clone()));
        self.write(record)
    }

    /// Updates the index with `record`, in memory only.
    pub fn note(&self, record: &Arc<RunRecord>) {
        self.index_mut().put_record(record);
    }

    /// Writes `record` atomically, leaving the index alone.
    pub fn write(&self, record: &RunRecord) -> Result<(), StoreError> {
        let dir = self.run_dir(&record.id)?;
        let path = dir.join(RECORD_FILE);
        let encode = |e: serde_json::Error| StoreError::Write {
            path: path.clone(),
            source: io::Error::other(e),
        };
        let mut value = serde_json::to_value(record).map_err(encode)?;
        if let Some(on_disk) = super::files::read_bounded(&path, self.options().max_record_bytes)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        {
            super::newer_fields::carry_over(&on_disk, &mut value);
        }
        let bytes = serde_json::to_vec_pretty(&value).map_err(encode)?;
        self.modes
            .write_atomically(&path, &bytes)
            .map_err(|source| StoreError::Write { path, source })
    }

    /// The owner and modes of what the store creates, for the files a run adds.
    pub fn modes(&self) -> Modes {
        self.modes
    }

    /// Reads one whole record, refusing one over the size limit.
    pub fn load(&self, id: &str) -> Result<RunRecord, ReadError> {
        if !is_valid_run_id(id) {
            return Err(ReadError::InvalidId(id.to_string()));
        }
        self.read_record(id)
    }

    fn read_record(&self, id: &str) -> Result<RunRecord, ReadError> {
        let path = self.runs_dir.join(id).join(RECORD_FILE);
        let limit = self.options.max_record_bytes;
        let bytes = match read_bounded(&path, limit) {
            Ok(b) => b,
            Err(BoundedReadError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ReadError::NotFound(id.to_string()))
            }
            Err(BoundedReadError::Io(e)) if e.kind() == io::ErrorKind::InvalidInput => {
                return Err(ReadError::Refused(format!(
                    "the record of run {id} is not served: {e}"
                )))
            }
            Err(BoundedReadError::Io(e)) => {
                return Err(ReadError::Unreadable(format!("cannot read run {id}: {e}")))
            }
            Err(BoundedReadError::TooLarge { size }) => {
                return Err(ReadError::TooLarge {
                    id: id.to_string(),
                    what: "the record".into(),
                    size,
                    limit,
                })
            }
        };
        let record: RunRecord = serde_json::from_slice(&bytes).map_err(|e| {
            ReadError::Unreadable(format!("the record of run {id} is unreadable: {e}"))
        })?;
        check_id(&record.id, id).map_err(ReadError::Unreadable)?;
        Ok(record)
    }

    /// Up to `limit` runs, newest first, from the index.
    pub fn list(&self, limit: usize) -> Vec<RunBrief> {
        self.index().newest().take(limit).cloned().collect()
    }

    /// One run's brief, from the index.
    pub fn brief(&self, id: &str) -> Option<RunBrief> {
        self.index().get(id).cloned()
    }

    /// The newest run in a final state, in brief.
    pub fn last_finished(&self) -> Option<RunBrief> {
        self.index().last_finished_brief().cloned()
    }

    /// The newest finished result of each suite and each stage, from the index.
    pub fn latest_results(&self) -> Arc<super::LatestResults> {
        self.index().latest_results()
    }

    /// The newest finished run in full, kept in memory.
    pub fn last_finished_record(&self) -> Option<Arc<RunRecord>> {
        self.index().last_finished_record()
    }

    /// Each suite's newest finished run in full.
    pub fn suite_latest_records(&self) -> Vec<Arc<RunRecord>> {
        self.index().suite_latest_records()
    }

    /// Runs in the index.
    pub fn len(&self) -> usize {
        self.index().len()
    }

    /// Whether the index has no run.
    pub fn is_empty(&self) -> bool {
        self.index().is_empty()
    }

    /// Records found unreadable when the store opened.
    pub fn skipped(&self) -> Vec<SkippedRecord> {
        self.index().skipped().to_vec()
    }

    /// Marks every run still `running` as `interrupted`: called at agent start, when no
    /// run can be in progress. `explain` says why, given the record and its folder (what
    /// the run left there, what the previous boot's log names). Returns the ids it marked.
    pub fn mark_interrupted(&self, explain: impl Fn(&RunRecord, &Path) -> String) -> Vec<String> {
        let running: Vec<String> = self
            .index()
            .newest()
            .filter(|b| b.state == RunState::Running)
            .map(|b| b.id.clone())
            .collect();
        let mut marked = Vec::new();
        for id in running {
            let mut record = match self.read_record(&id) {
                Ok(r) => r,
                Err(e) => {
                    warn!(run = %id, error = %e, "cannot mark run interrupted");
                    continue;
                }
            };
            let message = explain(&record, &self.runs_dir.join(&record.id));
            record.finish(RunState::Interrupted, Some(message));
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
        let doomed = self.index().beyond(self.options.retention);
        let mut removed = 0;
        for id in doomed {
            match fs::remove_dir_all(self.runs_dir.join(&id)) {
                Ok(()) => {
                    self.index_mut().remove(&id);
                    removed += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.index_mut().remove(&id);
                }
                Err(e) => warn!(run = %id, error = %e, "cannot remove old run"),
            }
        }
        if removed > 0 {
            info!(removed, "old runs removed by the retention limit");
        }
        removed
    }

    /// One of a run's files, refusing one over the artifact size limit.
    pub fn read_artifact(&self, id: &str, artifact: Artifact) -> Result<Vec<u8>, ReadError> {
        self.check_artifact_run(id)?;
        let limit = self.options.max_artifact_bytes;
        read_bounded(&self.artifact_path(id, artifact), limit).map_err(|e| match e {
            BoundedReadError::Io(e) => artifact_error(id, artifact, e),
            BoundedReadError::TooLarge { size } => ReadError::TooLarge {
                id: id.to_string(),
                what: artifact.file_name().to_string(),
                size,
                limit,
            },
        })
    }

    /// One of a run's files opened for reading, whatever its size, with its length
    /// when opened: what is served in pieces rather than read whole.
    pub fn open_artifact(&self, id: &str, artifact: Artifact) -> Result<(File, u64), ReadError> {
        self.check_artifact_run(id)?;
        let file = open_in_plain_folder(&self.artifact_path(id, artifact))
            .map_err(|e| artifact_error(id, artifact, e))?;
        let len = file
            .metadata()
            .map_err(|e| artifact_error(id, artifact, e))?
            .len();
        Ok((file, len))
    }

    fn check_artifact_run(&self, id: &str) -> Result<(), ReadError> {
        if !is_valid_run_id(id) {
            return Err(ReadError::InvalidId(id.to_string()));
        }
        if self.index().get(id).is_none() {
            return Err(ReadError::NotFound(id.to_string()));
        }
        Ok(())
    }

    fn artifact_path(&self, id: &str, artifact: Artifact) -> PathBuf {
        self.runs_dir.join(id).join(artifact.file_name())
    }
}

/// What went wrong opening or reading one of a run's files, as the store says it.
fn artifact_error(id: &str, artifact: Artifact, e: io::Error) -> ReadError {
    let file = artifact.file_name();
    match e.kind() {
        io::ErrorKind::NotFound => ReadError::MissingFile {
            id: id.to_string(),
            file: file.to_string(),
        },
        io::ErrorKind::InvalidInput => {
            ReadError::Refused(format!("{file} of run {id} is not served: {e}"))
        }
        _ => ReadError::Unreadable(format!("cannot read {file} of run {id}: {e}")),
    }
}

enum HeadError {
    /// The folder has no record: the run never started.
    Missing,
    Bad(String),
}

/// Parses the brief's fields of `path` as it is read, checking the record names the
/// folder it is in.
fn read_head(path: &Path, folder: &str) -> Result<RecordHead, HeadError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(HeadError::Missing),
        Err(e) => return Err(HeadError::Bad(format!("cannot read the record: {e}"))),
    };
    let head: RecordHead = serde_json::from_reader(BufReader::new(file))
        .map_err(|e| HeadError::Bad(format!("the record is unreadable: {e}")))?;
    check_id(&head.id, folder).map_err(HeadError::Bad)?;
    Ok(head)
}

/// A record must carry the id of its folder: otherwise it would be listed, cancelled
/// or pruned under a name that is not its own.
fn check_id(recorded: &str, folder: &str) -> Result<(), String> {
    if recorded == folder {
        Ok(())
    } else {
        Err(format!(
            "the record in folder {folder} says its id is {:?}",
            recorded.chars().take(80).collect::<String>()
        ))
    }
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
        let ids: Vec<_> = store.list(10).into_iter().map(|r| r.id).collect();
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
        let store = Store::open(dir.path(), 10).unwrap();
        let listing = store.list(10);
        assert_eq!(listing.len(), 1);
        assert_eq!(listing[0].id, "good");
        let skipped = store.skipped();
        let mut skipped: Vec<_> = skipped.iter().map(|s| s.id.as_str()).collect();
        skipped.sort();
        assert_eq!(skipped, ["garbage", "trunc"]);
        assert!(matches!(store.load("trunc"), Err(ReadError::Unreadable(_))));
    }

    #[test]
    fn a_record_a_newer_tinyperf_wrote_is_read_and_rewritten_with_its_unknown_fields() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        store.create(&record("newer")).unwrap();
        let path = dir.path().join("runs/newer").join(RECORD_FILE);
        let mut value: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        value["os_version"] = "7".into();
        value["summary"]["energy_cost_usd"] = 1.5.into();
        std::fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();

        let store = Store::open(dir.path(), 10).unwrap();
        assert!(store.skipped().is_empty());
        assert_eq!(
            store.mark_interrupted(|_, _| "the box rebooted".into()),
            ["newer"]
        );
        let after: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(after["state"], "interrupted");
        assert_eq!(after["os_version"], "7");
        assert_eq!(after["summary"]["energy_cost_usd"], 1.5);
    }

    #[test]
    fn running_records_become_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        store.create(&record("live")).unwrap();
        let mut done = record("done");
        done.finish(RunState::Passed, None);
        store.create(&done).unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        let explain = |_: &RunRecord, _: &Path| "stopped".to_string();
        assert_eq!(store.mark_interrupted(explain), vec!["live".to_string()]);
        assert_eq!(store.load("live").unwrap().state, RunState::Interrupted);
        assert_eq!(store.load("done").unwrap(), done);
        assert!(store.mark_interrupted(explain).is_empty());
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
        let ids: Vec<_> = store.list(10).into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["r4", "r3"]);
        let reopened = Store::open(dir.path(), 2).unwrap();
        let ids: Vec<_> = reopened.list(10).into_iter().map(|r| r.id).collect();
        assert_eq!(ids, ["r4", "r3"]);
    }

    #[test]
    fn each_suites_newest_finished_run_stays_in_full_until_it_is_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 3).unwrap();
        for (i, (id, suite)) in [("h1", "health"), ("h2", "health"), ("s1", "smoke")]
            .into_iter()
            .enumerate()
        {
            let mut r = record(id);
            r.suite = suite.into();
            r.started_at += chrono::Duration::seconds(i as i64);
            r.finish(RunState::Passed, None);
            store.create(&r).unwrap();
            store.save(&r).unwrap();
        }
        let ids = |store: &Store| -> Vec<String> {
            let mut ids: Vec<_> = store
                .suite_latest_records()
                .iter()
                .map(|r| r.id.clone())
                .collect();
            ids.sort();
            ids
        };
        // The smoke run finished last; the health run before it is still at hand.
        assert_eq!(ids(&store), ["h2", "s1"]);
        assert_eq!(store.last_finished_record().unwrap().id, "s1");
        let reopened = Store::open(dir.path(), 3).unwrap();
        assert_eq!(ids(&reopened), ["h2", "s1"]);
        assert_eq!(reopened.last_finished_record().unwrap().id, "s1");
        // Three newer smoke runs push both health runs past the retention limit.
        for i in 0..3 {
            let mut r = record(&format!("s{}", i + 2));
            r.suite = "smoke".into();
            r.started_at += chrono::Duration::seconds(10 + i);
            r.finish(RunState::Passed, None);
            reopened.create(&r).unwrap();
            reopened.save(&r).unwrap();
        }
        reopened.prune();
        assert_eq!(ids(&reopened), ["s4"]);
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
        assert_eq!(
            store.read_artifact("r", Artifact::Telemetry),
            Err(ReadError::MissingFile {
                id: "r".into(),
                file: "telemetry.csv".into()
            })
        );
        assert!(matches!(
            store.read_artifact("nope", Artifact::Mllog),
            Err(ReadError::NotFound(_))
        ));
    }

    #[test]
    fn the_index_is_read_once_and_kept_current_by_saves() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        let mut r = record("r1");
        store.create(&r).unwrap();
        // Gone from the disk, still listed: listing reads the index, not the files.
        fs::remove_file(store.run_dir("r1").unwrap().join(RECORD_FILE)).unwrap();
        assert_eq!(store.list(5)[0].state, RunState::Running);
        r.finish(RunState::Passed, None);
        store.save(&r).unwrap();
        assert_eq!(store.list(5)[0].state, RunState::Passed);
        assert_eq!(store.last_finished().unwrap().id, "r1");
        assert_eq!(store.last_finished_record().unwrap().id, "r1");
        let reopened = Store::open(dir.path(), 10).unwrap();
        assert_eq!(reopened.list(5)[0].state, RunState::Passed);
        assert_eq!(
            reopened.last_finished_record().unwrap().state,
            RunState::Passed
        );
    }

    #[test]
    fn a_record_over_the_size_limit_is_listed_but_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions {
            max_record_bytes: 4096,
            ..StoreOptions::default()
        };
        let (store, _) = Store::open_with(dir.path(), options.clone()).unwrap();
        let mut big = record("big");
        big.hardware = serde_json::json!({"blob": "x".repeat(100_000)});
        big.finish(RunState::Passed, None);
        store.create(&big).unwrap();
        let (store, _) = Store::open_with(dir.path(), options).unwrap();
        assert_eq!(store.list(5)[0].id, "big");
        let err = store.load("big").unwrap_err();
        assert!(
            matches!(err, ReadError::TooLarge { limit: 4096, .. }),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("over the limit of 4096 bytes"),
            "{err}"
        );
    }

    #[test]
    fn a_record_whose_id_is_not_its_folder_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        store.create(&record("honest")).unwrap();
        let moved = store.run_dir("impostor").unwrap();
        fs::create_dir(&moved).unwrap();
        fs::copy(
            store.run_dir("honest").unwrap().join(RECORD_FILE),
            moved.join(RECORD_FILE),
        )
        .unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        let ids: Vec<_> = store.list(10).into_iter().map(|b| b.id).collect();
        assert_eq!(ids, ["honest"]);
        let skipped = store.skipped();
        assert_eq!(skipped[0].id, "impostor");
        assert!(
            skipped[0].reason.contains("says its id is \"honest\""),
            "{skipped:?}"
        );
        assert!(matches!(
            store.load("impostor"),
            Err(ReadError::Unreadable(_))
        ));
    }

    #[test]
    fn folders_of_runs_that_never_started_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), 10).unwrap();
        fs::create_dir(store.run_dir("never").unwrap()).unwrap();
        let (store, report) = Store::open_with(dir.path(), StoreOptions::default()).unwrap();
        assert_eq!(report.removed_empty, ["never"]);
        assert!(!store.run_dir("never").unwrap().exists());
        assert!(store.skipped().is_empty());
    }
}
