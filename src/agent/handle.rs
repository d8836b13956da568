//! The agent as the D-Bus and HTTP front ends see it: a cheap, cloneable handle with
//! reads that answer at once and writes that go through the run supervisor.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::events::AgentEvent;
use super::supervisor::Command;
use crate::record::store::{Artifact, ReadError, Store};
use crate::record::writer::RecordWriter;
use crate::record::{RunBrief, RunRecord, Trigger};

/// Errors the front ends turn into named D-Bus errors and HTTP status codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentError {
    #[error("a run is already in progress: {0}")]
    Busy(String),
    #[error("no run with id {}", crate::echo::quoted(.0))]
    NotFound(String),
    /// The run exists but lacks the file asked for; the message names both.
    #[error("{0}")]
    MissingFile(String),
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    /// A record or file too large to be served whole.
    #[error("{0}")]
    TooLarge(String),
    /// Not enough free space to start a run.
    #[error("{0}")]
    NoSpace(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<ReadError> for AgentError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::InvalidId(id) => {
                AgentError::InvalidArgs(format!("invalid run id {}", crate::echo::quoted(&id)))
            }
            ReadError::NotFound(id) => AgentError::NotFound(id),
            e @ ReadError::MissingFile { .. } => AgentError::MissingFile(e.to_string()),
            e @ ReadError::TooLarge { .. } => AgentError::TooLarge(e.to_string()),
            ReadError::Unreadable(reason) => AgentError::Internal(reason),
        }
    }
}

impl AgentError {
    /// A stable machine-readable code: `busy`, `not_found`, `invalid_args`,
    /// `too_large`, `no_space`, `internal`.
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::Busy(_) => "busy",
            AgentError::NotFound(_) | AgentError::MissingFile(_) => "not_found",
            AgentError::InvalidArgs(_) => "invalid_args",
            AgentError::TooLarge(_) => "too_large",
            AgentError::NoSpace(_) => "no_space",
            AgentError::Internal(_) => "internal",
        }
    }
}

/// Whether a run is in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AgentState {
    Idle,
    Running,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Idle => "idle",
            AgentState::Running => "running",
        }
    }
}

/// What the agent is doing, as `GET /api/v1/status` and the D-Bus properties show it.
#[derive(Debug, Clone, Serialize)]
pub struct StatusSnapshot {
    pub state: AgentState,
    pub current_run: Option<String>,
    pub current_suite: Option<String>,
    pub current_stage: Option<String>,
    /// Progress of the current run, 0..1; 0 when idle.
    pub progress: f64,
    pub last_run: Option<RunBrief>,
    /// Runs whose record the disk has not taken yet (a full state directory); the
    /// agent keeps them in memory and keeps trying.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsaved_runs: Vec<String>,
    pub sku: String,
    pub version: String,
    pub agent_started_at: DateTime<Utc>,
}

/// Totals since the agent started, for `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counters {
    pub runs_started: u64,
    /// Finished runs by final state (`passed`, `failed`, …).
    pub runs_finished: BTreeMap<String, u64>,
    /// Records in the store that could not be read and were skipped.
    pub store_records_skipped: u64,
}

/// The hardware as last scanned: the inventory JSON and the SKU it was judged as.
#[derive(Debug, Clone)]
pub struct HardwareView {
    pub json: Value,
    pub sku: String,
}

pub(super) struct Shared {
    pub store: Arc<Store>,
    pub writer: RecordWriter,
    /// The run in progress as the supervisor last folded it.
    pub current: RwLock<Option<Arc<RunRecord>>>,
    pub status: RwLock<StatusSnapshot>,
    pub hardware: RwLock<HardwareView>,
    pub counters: RwLock<Counters>,
    pub live: RwLock<super::live::LiveRun>,
    pub events: broadcast::Sender<AgentEvent>,
    pub commands: mpsc::Sender<Command>,
}

/// A cloneable handle on the running agent.
#[derive(Clone)]
pub struct AgentHandle {
    pub(super) shared: Arc<Shared>,
}

impl AgentHandle {
    /// What the agent is doing now.
    pub fn status(&self) -> StatusSnapshot {
        let mut status = read(&self.shared.status).clone();
        status.last_run = self.shared.store.last_finished();
        status.unsaved_runs = self
            .shared
            .writer
            .unsaved()
            .into_iter()
            .map(|u| u.id)
            .collect();
        status
    }

    /// The inventory JSON (the `Hardware` property, `GET /api/v1/hardware`).
    pub fn hardware(&self) -> Value {
        read(&self.shared.hardware).json.clone()
    }

    /// The SKU the box was recognised as, or `unrecognised`.
    /// Reads the inventory in place, without copying it (a scrape needs only a few fields).
    pub fn with_hardware<T>(&self, reader: impl FnOnce(&Value) -> T) -> T {
        reader(&read(&self.shared.hardware).json)
    }

    pub fn sku(&self) -> String {
        read(&self.shared.hardware).sku.clone()
    }

    /// The live figures of the run in progress (or of the last run, marked not
    /// running, until the next starts).
    pub fn live(&self) -> super::live::LiveRun {
        read(&self.shared.live).clone()
    }

    /// Reads the live figures in place, for a reader that needs only part of them.
    pub fn with_live<T>(&self, reader: impl FnOnce(&super::live::LiveRun) -> T) -> T {
        reader(&read(&self.shared.live))
    }

    /// Totals since start.
    pub fn counters(&self) -> Counters {
        read(&self.shared.counters).clone()
    }

    /// Starts `suite` with `options`. Fails with `Busy` while a run is in progress and
    /// with `InvalidArgs` for an unknown suite or option.
    pub async fn start(
        &self,
        suite: &str,
        options: Map<String, Value>,
        trigger: Trigger,
    ) -> Result<String, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Start {
            suite: suite.to_string(),
            options,
            trigger,
            reply,
        })
        .await?;
        answer.await.map_err(|_| supervisor_gone())?
    }

    /// Cancels the run `run_id`: `NotFound` when no such run exists, `InvalidArgs`
    /// when it is not the run in progress.
    pub async fn cancel(&self, run_id: &str) -> Result<(), AgentError> {
        check_run_id(run_id)?;
        let (reply, answer) = oneshot::channel();
        self.send(Command::Cancel {
            run_id: run_id.to_string(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| supervisor_gone())?
    }

    /// Scans the hardware again and returns the new inventory JSON.
    pub async fn rescan(&self) -> Result<Value, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Rescan { reply }).await?;
        answer.await.map_err(|_| supervisor_gone())?
    }

    /// One run's full record: the run in progress and records not yet on disk from
    /// memory, others read from the store off the async threads.
    pub async fn get_run(&self, run_id: &str) -> Result<Arc<RunRecord>, AgentError> {
        check_run_id(run_id)?;
        if let Some(current) = read(&self.shared.current)
            .as_ref()
            .filter(|r| r.id == run_id)
        {
            return Ok(current.clone());
        }
        if let Some(pending) = self.shared.writer.pending(run_id) {
            return Ok(pending);
        }
        let store = self.shared.store.clone();
        let id = run_id.to_string();
        let record = blocking(move || store.load(&id)).await??;
        Ok(Arc::new(record))
    }

    /// Up to `limit` runs in brief, newest first, from memory.
    pub fn list_runs(&self, limit: usize) -> Vec<RunBrief> {
        self.shared.store.list(limit)
    }

    /// Runs in the store.
    /// The newest finished result of each suite and each stage, from the store's index.
    pub fn latest_results(&self) -> crate::record::LatestResults {
        self.shared.store.latest_results()
    }

    pub fn runs_stored(&self) -> usize {
        self.shared.store.len()
    }

    /// Records the disk has not taken yet.
    pub fn unsaved_runs(&self) -> Vec<crate::record::writer::Unsaved> {
        self.shared.writer.unsaved()
    }

    /// Each suite's newest finished run in full, from memory.
    pub fn suite_latest_runs(&self) -> Vec<Arc<RunRecord>> {
        self.shared.store.suite_latest_records()
    }

    /// The run in progress as recorded so far.
    pub fn current_run(&self) -> Option<Arc<RunRecord>> {
        read(&self.shared.current).clone()
    }

    /// One of a run's files (`mllog.txt`, `telemetry.csv`), read off the async threads.
    pub async fn run_artifact(
        &self,
        run_id: &str,
        artifact: Artifact,
    ) -> Result<Vec<u8>, AgentError> {
        let store = self.shared.store.clone();
        let id = run_id.to_string();
        Ok(blocking(move || store.read_artifact(&id, artifact)).await??)
    }

    /// Waits (up to `limit`) for every record handed to the writer to be tried.
    pub async fn flush_records(&self, limit: std::time::Duration) -> bool {
        let writer = self.shared.writer.clone();
        blocking(move || writer.flush(limit)).await.unwrap_or(false)
    }

    /// Every event from now on. A slow reader that falls behind gets `Lagged` and
    /// should re-read the status.
    pub fn subscribe(&self) -> broadcast::Receiver<AgentEvent> {
        self.shared.events.subscribe()
    }

    async fn send(&self, command: Command) -> Result<(), AgentError> {
        self.shared
            .commands
            .send(command)
            .await
            .map_err(|_| supervisor_gone())
    }
}

/// Runs file work on the blocking pool, never on the async threads.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, AgentError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| AgentError::Internal(format!("file work failed: {e}")))
}

/// Refuses a run id the store could not have made before it goes further, quoting
/// it bounded.
fn check_run_id(run_id: &str) -> Result<(), AgentError> {
    if crate::record::store::is_valid_run_id(run_id) {
        Ok(())
    } else {
        Err(ReadError::InvalidId(run_id.to_string()).into())
    }
}

fn supervisor_gone() -> AgentError {
    AgentError::Internal("the run supervisor has stopped".into())
}

/// Reads a lock even if a writer panicked: the data is plain values, never half-written.
pub(super) fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|e| e.into_inner())
}
