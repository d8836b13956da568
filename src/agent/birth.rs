//! The box's birth record as the agent keeps it: written at the first start on a box,
//! compared at every later start, and written again after each passed burn-in.
//!
//! Reading the parts walks sysfs and asks the BMC, which can take seconds; all of it runs
//! on the blocking pool, never on the async threads, and a failure is logged, never fatal.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use tracing::{info, warn};

use crate::inventory::birth::{self, BirthError, BoxView};
use crate::record::RunState;

/// The suite after whose passed run the record is written again.
pub const BURN_IN_SUITE: &str = "burn-in";

/// A view this young is served again instead of reading the box anew, so that a burst of
/// requests reads sysfs once.
const FRESH_FOR: Duration = Duration::from_secs(2);

/// The record's paths, the BMC's identity as last read, and the newest comparison.
pub struct BoxRecords {
    root: PathBuf,
    state_dir: PathBuf,
    /// Asking the BMC takes seconds: it is asked at start and after a burn-in only.
    bmc: Mutex<Result<Value, String>>,
    latest: Mutex<Option<(Instant, Arc<BoxView>)>>,
    /// One reader or writer of the record at a time.
    busy: Mutex<()>,
}

/// What the status page shows of the record.
#[derive(Debug, Clone, Serialize)]
pub struct BoxSummary {
    /// The baseboard's serial number.
    pub serial: Option<String>,
    /// When the record was written; `None` before there is one.
    pub recorded_at: Option<DateTime<Utc>>,
    /// What changed since, one line each.
    pub changes: Vec<String>,
}

impl BoxRecords {
    /// The records of the box under `root`, kept under `state_dir`.
    pub fn new(root: PathBuf, state_dir: PathBuf) -> BoxRecords {
        BoxRecords {
            root,
            state_dir,
            bmc: Mutex::new(Err("BMC identity not read yet".to_string())),
            latest: Mutex::new(None),
            busy: Mutex::new(()),
        }
    }

    /// The stored record, the box now and the changes, read afresh unless a view was
    /// made within the last two seconds. Blocking.
    pub fn view(&self) -> Result<Arc<BoxView>, BirthError> {
        let _busy = lock(&self.busy);
        if let Some((at, view)) = lock(&self.latest).as_ref() {
            if at.elapsed() < FRESH_FOR {
                return Ok(view.clone());
            }
        }
        self.compare()
    }

    /// What the page shows, from the newest view; `None` before the first.
    pub fn summary(&self) -> Option<BoxSummary> {
        let latest = lock(&self.latest);
        let (_, view) = latest.as_ref()?;
        Some(BoxSummary {
            serial: view.current.baseboard_serial.clone(),
            recorded_at: view.record.as_ref().map(|r| r.recorded_at),
            changes: view.changes.iter().map(|c| c.message.clone()).collect(),
        })
    }

    fn compare(&self) -> Result<Arc<BoxView>, BirthError> {
        let bmc = lock(&self.bmc).clone();
        let view = Arc::new(birth::compare(&self.root, &self.state_dir, bmc)?);
        *lock(&self.latest) = Some((Instant::now(), view.clone()));
        Ok(view)
    }

    /// At start: writes the record when this box has none, else logs what changed.
    /// Blocking.
    pub fn at_start(&self) {
        *lock(&self.bmc) = birth::read_bmc();
        let _busy = lock(&self.busy);
        let view = match self.compare() {
            Ok(view) => view,
            Err(e) => {
                warn!(error = %e, "the box's record cannot be read; the box is not compared with it");
                return;
            }
        };
        let serial = view
            .current
            .baseboard_serial
            .as_deref()
            .unwrap_or("unknown");
        match &view.record {
            None => self.write(&view.current, "first start on this box"),
            Some(record) if view.changes.is_empty() => {
                info!(serial, recorded_at = %record.recorded_at, "the box matches its record")
            }
            Some(record) => {
                for change in &view.changes {
                    warn!(serial, recorded_at = %record.recorded_at, change = %change.message, "the box changed since its record");
                }
            }
        }
    }

    /// Writes the box as it is now as its record. Blocking.
    pub fn refresh(&self, why: &str) {
        *lock(&self.bmc) = birth::read_bmc();
        let _busy = lock(&self.busy);
        let current = birth::take(&self.root, lock(&self.bmc).clone());
        self.write(&current, why);
        // The next view compares with the new record.
        *lock(&self.latest) = None;
        if let Err(e) = self.compare() {
            warn!(error = %e, "the box's new record cannot be read back");
        }
    }

    fn write(&self, record: &birth::BirthRecord, why: &str) {
        match birth::save(&self.state_dir, record) {
            Ok(path) => {
                info!(path = %path.display(), why, "the box's record written");
                // The view made before the write has no record; the next one will.
                let mut latest = lock(&self.latest);
                if let Some((_, view)) = latest.as_mut() {
                    if view.record.is_none() && view.path == path {
                        let mut written = (**view).clone();
                        written.record = Some(record.clone());
                        *view = Arc::new(written);
                    }
                }
            }
            Err(e) => warn!(error = %e, why, "the box's record cannot be written"),
        }
    }
}

/// Starts the comparison at start on the blocking pool.
pub fn start(records: Arc<BoxRecords>) {
    tokio::task::spawn_blocking(move || records.at_start());
}

/// After a run finished: a passed burn-in writes the record again, off the async threads.
pub fn after_run(records: &Arc<BoxRecords>, suite: &str, state: RunState) {
    if suite == BURN_IN_SUITE && state == RunState::Passed {
        let records = records.clone();
        tokio::task::spawn_blocking(move || records.refresh("burn-in passed"));
    }
}

/// Locks even if a holder panicked: the values are whole either way.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(state: &std::path::Path) -> Arc<BoxRecords> {
        let root =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinybox-red");
        Arc::new(BoxRecords::new(root, state.to_path_buf()))
    }

    /// Waits for the blocking pool's work to show on disk, or for a while when none should.
    async fn written(path: &std::path::Path, expect: bool) -> bool {
        for _ in 0..if expect { 200 } else { 10 } {
            if path.exists() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        path.exists()
    }

    #[tokio::test]
    async fn only_a_passed_burn_in_writes_the_record_again() {
        let state = tempfile::tempdir().unwrap();
        let records = records(state.path());
        let path = state.path().join("box/M80-F4012300561.json");
        after_run(&records, "health", RunState::Passed);
        after_run(&records, BURN_IN_SUITE, RunState::Failed);
        after_run(&records, BURN_IN_SUITE, RunState::Cancelled);
        assert!(!written(&path, false).await);
        after_run(&records, BURN_IN_SUITE, RunState::Passed);
        assert!(written(&path, true).await);
        let summary = records.summary().expect("a view after the refresh");
        assert_eq!(summary.serial.as_deref(), Some("M80-F4012300561"));
        assert!(summary.recorded_at.is_some());
        assert!(summary.changes.is_empty());
    }

    #[tokio::test]
    async fn the_first_start_writes_the_record_and_the_view_holds_it() {
        let state = tempfile::tempdir().unwrap();
        let records = records(state.path());
        assert!(records.summary().is_none());
        let r = records.clone();
        tokio::task::spawn_blocking(move || r.at_start())
            .await
            .unwrap();
        let view = records.view().unwrap();
        assert!(view.record.is_some());
        assert!(view.changes.is_empty());
        assert!(view.path.exists());
    }
}
