//! Writes records off the caller's thread, and keeps retrying those that could not be
//! written (a full disk) until they are, so a result is never lost while the agent
//! runs.
//!
//! The index is updated before the write is tried, so every reader sees the run as it
//! really stands whether or not the disk took it.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tracing::{error, info, warn};

use super::run::RunRecord;
use super::store::Store;

/// How long the writer waits between attempts at a record that could not be written.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(5);
/// How long it sleeps when nothing is waiting; any new record wakes it at once.
const IDLE_WAIT: Duration = Duration::from_secs(3600);

/// A record the disk has not taken yet.
#[derive(Debug, Clone)]
pub struct Unsaved {
    /// The run's id.
    pub id: String,
    /// Why the last attempt failed.
    pub error: String,
}

struct Pending {
    record: Arc<RunRecord>,
    error: Option<String>,
}

enum Job {
    /// A record was added to the pending ones.
    Wake,
    Flush(mpsc::Sender<()>),
}

/// The handle on the writer thread; cheap to clone.
#[derive(Clone)]
pub struct RecordWriter {
    jobs: mpsc::Sender<Job>,
    pending: Arc<Mutex<BTreeMap<String, Pending>>>,
}

impl RecordWriter {
    /// Starts the writer thread for `store`.
    pub fn start(store: Arc<Store>, retry: Duration) -> std::io::Result<RecordWriter> {
        let (jobs, inbox) = mpsc::channel();
        let pending: Arc<Mutex<BTreeMap<String, Pending>>> = Arc::default();
        let worker = Worker {
            store,
            pending: pending.clone(),
            retry,
        };
        std::thread::Builder::new()
            .name("record-writer".into())
            .spawn(move || worker.run(inbox))?;
        Ok(RecordWriter { jobs, pending })
    }

    /// Puts `record` in the index now and on disk as soon as the disk takes it.
    pub fn save(&self, store: &Store, record: Arc<RunRecord>) {
        store.note(&record);
        lock(&self.pending).insert(
            record.id.clone(),
            Pending {
                record,
                error: None,
            },
        );
        if self.jobs.send(Job::Wake).is_err() {
            error!("the record writer has stopped; records are kept in memory only");
        }
    }

    /// A record not yet on disk, when `id` is one.
    pub fn pending(&self, id: &str) -> Option<Arc<RunRecord>> {
        lock(&self.pending).get(id).map(|p| p.record.clone())
    }

    /// Records the disk refused, with why.
    pub fn unsaved(&self) -> Vec<Unsaved> {
        lock(&self.pending)
            .iter()
            .filter_map(|(id, p)| {
                p.error.as_ref().map(|error| Unsaved {
                    id: id.clone(),
                    error: error.clone(),
                })
            })
            .collect()
    }

    /// Waits (up to `limit`) until the writer has tried every record handed to it.
    pub fn flush(&self, limit: Duration) -> bool {
        let (done, wait) = mpsc::channel();
        if self.jobs.send(Job::Flush(done)).is_err() {
            return false;
        }
        wait.recv_timeout(limit).is_ok()
    }
}

struct Worker {
    store: Arc<Store>,
    pending: Arc<Mutex<BTreeMap<String, Pending>>>,
    retry: Duration,
}

impl Worker {
    fn run(self, inbox: mpsc::Receiver<Job>) {
        let mut flushes = Vec::new();
        loop {
            let wait = if self.has_failures() {
                self.retry
            } else {
                IDLE_WAIT
            };
            match inbox.recv_timeout(wait) {
                Ok(Job::Flush(done)) => flushes.push(done),
                Ok(Job::Wake) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.write_pending();
                    return;
                }
            }
            // Take everything queued meanwhile: only the newest version of each record
            // is written.
            while let Ok(job) = inbox.try_recv() {
                if let Job::Flush(done) = job {
                    flushes.push(done);
                }
            }
            self.write_pending();
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
    }

    fn has_failures(&self) -> bool {
        lock(&self.pending).values().any(|p| p.error.is_some())
    }

    fn write_pending(&self) {
        let work: Vec<(Arc<RunRecord>, bool)> = lock(&self.pending)
            .values()
            .map(|p| (p.record.clone(), p.error.is_some()))
            .collect();
        let mut finished_saved = false;
        for (record, failed_before) in work {
            match self.store.write(&record) {
                Ok(()) => {
                    let mut pending = lock(&self.pending);
                    // A newer version may have arrived while this one was written.
                    if pending
                        .get(&record.id)
                        .is_some_and(|p| Arc::ptr_eq(&p.record, &record))
                    {
                        pending.remove(&record.id);
                    }
                    drop(pending);
                    if failed_before {
                        info!(run = %record.id, "run record written after an earlier failure");
                    }
                    finished_saved |= record.state.is_final();
                }
                Err(e) => self.failed(record, e.to_string(), failed_before),
            }
        }
        if finished_saved {
            self.store.prune();
        }
    }

    /// Keeps a record that could not be written. A finished run gets a finding that
    /// says so, which the index (and so every reader) shows at once.
    fn failed(&self, tried: Arc<RunRecord>, error: String, failed_before: bool) {
        if !failed_before {
            warn!(run = %tried.id, %error, "cannot write the run record; keeping it in memory and retrying");
        }
        let mut pending = lock(&self.pending);
        // A newer version may have arrived meanwhile: that is the one to keep.
        let newest = pending
            .get(&tried.id)
            .map(|p| p.record.clone())
            .unwrap_or(tried);
        let newest = if newest.state.is_final() && !has_unsaved_finding(&newest) {
            let mut noted = (*newest).clone();
            noted.summary.findings.push(format!(
                "{UNSAVED_FINDING} when the run ended ({error}); the agent kept it in memory \
                 and wrote it once the disk took it"
            ));
            let noted = Arc::new(noted);
            self.store.note(&noted);
            noted
        } else {
            newest
        };
        pending.insert(
            newest.id.clone(),
            Pending {
                record: newest,
                error: Some(error),
            },
        );
    }
}

/// How the finding about a record the disk refused begins.
pub const UNSAVED_FINDING: &str = "the record could not be saved";

fn has_unsaved_finding(record: &RunRecord) -> bool {
    record
        .summary
        .findings
        .iter()
        .any(|f| f.starts_with(UNSAVED_FINDING))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
