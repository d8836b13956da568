//! The worker's run: a request executed in this process, its events folded into the
//! run's record and handed to a sink, the record kept in a store when asked, and a
//! cancel by SIGTERM or SIGINT honoured between steps.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use super::event::WorkerEvent;
use super::health;
use super::request::{Recording, WorkerRequest};
use super::runner::{self, RunEnvironment};
use crate::engine::backend::select::{self, BackendKind};
use crate::record::store::{new_run_id, Store, StoreError, DEFAULT_RETENTION};
use crate::record::{RunRecord, RunState, Trigger};
use crate::runtime::telemetry::SampleSink;

/// Where a run's events go as they happen.
pub trait EventSink {
    /// Reports one event. An error means nobody reads the run any more: it is
    /// cancelled.
    fn event(&mut self, event: &WorkerEvent) -> std::io::Result<()>;

    /// Where each telemetry sample goes live, besides `telemetry.csv`; none by default.
    fn live_telemetry(&mut self) -> Option<SampleSink> {
        None
    }
}

/// Why a run could not start; nothing of it is recorded.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The plan names a GPU backend the machine cannot run.
    #[error("backend {kind} cannot be used: {reason}")]
    Backend {
        /// The backend the plan asked for.
        kind: BackendKind,
        /// What is missing: a library, a driver or a device.
        reason: String,
    },
    /// The run folder could not be made.
    #[error("cannot create run directory {}: {source}", path.display())]
    RunDir {
        /// The folder asked for.
        path: PathBuf,
        /// Why it could not be made.
        source: std::io::Error,
    },
    /// The state folder's store could not be opened or the run not recorded in it.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How a run ended.
#[derive(Debug)]
pub struct WorkerOutcome {
    /// The run's final state.
    pub state: RunState,
    /// The run's record as its events built it.
    pub record: RunRecord,
    /// The folder of the run's files, when it had one.
    pub run_dir: Option<PathBuf>,
}

impl WorkerOutcome {
    /// 0 when the run passed, 1 otherwise; the health suite tells a GPU that failed (1)
    /// from a check that could not run (3), so a script never mistakes one for the other.
    pub fn exit_status(&self) -> i32 {
        if self.record.suite == health::SUITE {
            health::result::exit_status(&self.record)
        } else {
            i32::from(self.state != RunState::Passed)
        }
    }
}

/// Set by SIGTERM or SIGINT; stages check it between steps.
static CANCEL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_cancel_signal(_: nix::libc::c_int) {
    CANCEL.store(true, Ordering::Relaxed);
}

fn install_cancel_handler() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_cancel_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        if let Err(e) = unsafe { sigaction(signal, &action) } {
            tracing::warn!(%signal, error = %e, "cannot install the cancel handler");
        }
    }
}

/// A run that names a GPU backend needs a device of it: without one it stops here,
/// before anything is recorded, with the reason (a library or device missing).
fn require_backend(kind: BackendKind) -> Result<(), WorkerError> {
    if matches!(kind, BackendKind::Cuda | BackendKind::Hip) {
        if let Err(e) = select::resolve(kind) {
            return Err(WorkerError::Backend {
                kind,
                reason: e.to_string(),
            });
        }
    }
    Ok(())
}

/// Executes `request`, sending every event to `sink`. A sink that fails cancels the
/// run (its reader went away). The health suite's result is written beside the run's
/// record as `health.json`.
pub fn run(
    request: &WorkerRequest,
    sink: &mut dyn EventSink,
) -> Result<WorkerOutcome, WorkerError> {
    let plan = &request.plan;
    require_backend(plan.backend)?;
    let (store, mut run_dir) = match &request.recording {
        Recording::None => (None, None),
        Recording::RunDir(dir) => {
            std::fs::create_dir_all(dir).map_err(|source| WorkerError::RunDir {
                path: dir.clone(),
                source,
            })?;
            (None, Some(dir.clone()))
        }
        Recording::StateDir(dir) => (Some(Store::open(dir, DEFAULT_RETENTION)?), None),
    };
    let mut record = RunRecord::new(
        new_run_id(),
        plan.suite.clone(),
        Trigger::Cli,
        plan.options.clone(),
    );
    if let Some(store) = &store {
        let dir = store.create(&record)?;
        eprintln!("recording run {} in {}", record.id, dir.display());
        run_dir = Some(dir);
    }
    install_cancel_handler();
    let env = RunEnvironment {
        root: request.root.clone(),
        sku: request.sku.clone(),
        run_dir,
        telemetry_interval: request.telemetry_interval,
        telemetry_sink: sink.live_telemetry(),
    };
    let mut sink_error: Option<std::io::Error> = None;
    let mut emit = |event: WorkerEvent| {
        record.apply(&event);
        if let Err(e) = sink.event(&event) {
            CANCEL.store(true, Ordering::Relaxed);
            sink_error.get_or_insert(e);
        }
        if let (Some(store), true) = (&store, saves_record(&event)) {
            if let Err(e) = store.save(&record) {
                tracing::error!(error = %e, "cannot record the run");
            }
        }
    };
    let state = runner::execute(plan, &env, &CANCEL, &mut emit);
    if let Some(e) = sink_error {
        tracing::warn!(error = %e, "lost the event reader");
    }
    if plan.suite == health::SUITE {
        if let Some(dir) = &env.run_dir {
            write_health_result(&record, dir);
        }
    }
    Ok(WorkerOutcome {
        state,
        record,
        run_dir: env.run_dir,
    })
}

fn write_health_result(record: &RunRecord, run_dir: &std::path::Path) {
    let result = health::result::from_record(record);
    let path = run_dir.join(health::result::FILE_NAME);
    let written = serde_json::to_vec_pretty(&result)
        .map_err(std::io::Error::other)
        .and_then(|json| std::fs::write(&path, json));
    if let Err(e) = written {
        tracing::warn!(path = %path.display(), error = %e, "cannot write the health result");
    }
}

fn saves_record(event: &WorkerEvent) -> bool {
    matches!(
        event,
        WorkerEvent::Hardware { .. }
            | WorkerEvent::StageFinished { .. }
            | WorkerEvent::RunFinished { .. }
    )
}
