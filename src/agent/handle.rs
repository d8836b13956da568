//! The agent as the D-Bus and HTTP front ends see it: a cheap, cloneable handle with
//! reads that answer at once and writes that go through the run supervisor.

use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use tokio::sync::{broadcast, mpsc, oneshot};

use super::birth::{BoxRecords, BoxSummary};
use super::error::AgentError;
use super::events::AgentEvent;
use super::image::ImageSource;
use super::live::LiveRun;
use super::messages::Command;
use super::status::{Counters, HardwareView, StatusSnapshot};
use crate::record::store::{Artifact, ReadError, Store};
use crate::record::writer::RecordWriter;
use crate::record::{RunBrief, RunRecord, Trigger};

pub(super) struct Shared {
    pub store: Arc<Store>,
    pub writer: RecordWriter,
    /// The run in progress as the supervisor last folded it.
    pub current: RwLock<Option<Arc<RunRecord>>>,
    pub status: RwLock<StatusSnapshot>,
    pub hardware: RwLock<HardwareView>,
    pub counters: RwLock<Counters>,
    pub live: RwLock<LiveRun>,
    pub events: broadcast::Sender<AgentEvent>,
    pub commands: mpsc::Sender<Command>,
    pub box_records: Arc<BoxRecords>,
    pub image: ImageSource,
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

    /// Reads the inventory in place, without copying it (a scrape needs only a few fields).
    pub fn with_hardware<T>(&self, reader: impl FnOnce(&Value) -> T) -> T {
        reader(&read(&self.shared.hardware).json)
    }

    /// The SKU the box is judged as: the configured override, else the one recognised,
    /// or `unrecognised`.
    pub fn sku(&self) -> String {
        read(&self.shared.hardware).sku.clone()
    }

    /// The live figures of the run in progress (or of the last run, marked not
    /// running, until the next starts).
    pub fn live(&self) -> LiveRun {
        read(&self.shared.live).clone()
    }

    /// Reads the live figures in place, for a reader that needs only part of them.
    pub fn with_live<T>(&self, reader: impl FnOnce(&LiveRun) -> T) -> T {
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

    /// Takes up the interrupted run `run_id` as a new run that carries over its finished
    /// stages. Fails with `Busy` while a run is in progress and with `InvalidArgs` for a
    /// run that was not interrupted.
    pub async fn resume(&self, run_id: &str) -> Result<String, AgentError> {
        check_run_id(run_id)?;
        let (reply, answer) = oneshot::channel();
        self.send(Command::Resume {
            run_id: run_id.to_string(),
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

    /// The newest finished result of each suite and each stage, from the store's index.
    pub fn latest_results(&self) -> Arc<crate::record::LatestResults> {
        self.shared.store.latest_results()
    }

    /// How many runs the store holds.
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

    /// One of a run's files opened for serving in pieces, with its length when opened.
    pub async fn open_run_artifact(
        &self,
        run_id: &str,
        artifact: Artifact,
    ) -> Result<(std::fs::File, u64), AgentError> {
        let store = self.shared.store.clone();
        let id = run_id.to_string();
        Ok(blocking(move || store.open_artifact(&id, artifact)).await??)
    }

    /// Waits (up to `limit`) for every record handed to the writer to be tried.
    pub async fn flush_records(&self, limit: std::time::Duration) -> bool {
        let writer = self.shared.writer.clone();
        blocking(move || writer.flush(limit)).await.unwrap_or(false)
    }

    /// The box's birth record, the box as it is now and what changed since
    /// (`GET /api/v1/box`), read off the async threads. `NotFound` before a record is
    /// kept for this box.
    pub async fn box_record(&self) -> Result<Arc<crate::inventory::birth::BoxView>, AgentError> {
        let records = self.shared.box_records.clone();
        let view = blocking(move || records.view())
            .await?
            .map_err(|e| AgentError::Internal(e.to_string()))?;
        if view.record.is_none() {
            return Err(AgentError::MissingFile(format!(
                "no record of this box (baseboard serial {}) yet: the agent writes one at its \
                 first start on a box and after each passed burn-in",
                view.current
                    .baseboard_serial
                    .as_deref()
                    .unwrap_or("unknown")
            )));
        }
        Ok(view)
    }

    /// What the status page shows of the box's record; `None` before it was compared.
    pub fn box_summary(&self) -> Option<BoxSummary> {
        self.shared.box_records.summary()
    }

    /// The OS image's status (`ImageVersion`, `ImageSlots`, `GET /api/v1/image`), read
    /// off the async threads.
    pub async fn image(&self) -> crate::update::ImageStatus {
        let source = self.shared.image.clone();
        match blocking(move || source.status()).await {
            Ok(status) => status,
            Err(e) => crate::update::ImageStatus::not_an_image(&e.to_string()),
        }
    }

    /// Asks for a factory reset: writes the request file that a root service acts on
    /// (it reboots the box into a boot that erases the state partition). `Busy` while a
    /// run is going, `NotAnImage` on a machine that is not a tinybox OS image.
    /// `requested_by` says who asked, for the request file and the log.
    pub async fn request_factory_reset(
        &self,
        requested_by: &str,
    ) -> Result<crate::update::ResetRequest, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::FactoryReset {
            requested_by: requested_by.to_string(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| supervisor_gone())?
    }

    /// Where the OS image is read and requests go.
    pub fn image_source(&self) -> super::image::ImageSource {
        self.shared.image.clone()
    }

    /// What the update source offers (`CheckUpdate`), fetched and verified off the
    /// async threads.
    pub async fn check_update(&self) -> Result<crate::update::install::CheckReport, AgentError> {
        let source = self.shared.image.clone();
        blocking(move || source.check_update()).await?
    }

    /// Asks for an OS update (`Update`, `POST /api/v1/image/update`): writes the request
    /// a root service acts on. `Busy` while a run is going, `Updating` while another
    /// update is, `InvalidArgs` without a source.
    pub async fn request_update(
        &self,
        version: &str,
        reboot: bool,
        requested_by: &str,
    ) -> Result<crate::update::progress::UpdateRequest, AgentError> {
        let (reply, answer) = oneshot::channel();
        self.send(Command::Update {
            version: version.to_string(),
            reboot,
            requested_by: requested_by.to_string(),
            reply,
        })
        .await?;
        answer.await.map_err(|_| supervisor_gone())?
    }

    /// Sends `event` to every subscriber (none listening is fine).
    pub fn publish(&self, event: super::events::AgentEvent) {
        let _ = self.shared.events.send(event);
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
