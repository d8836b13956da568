//! The supervisor's inbox: what the handle and the worker ask of it and tell it. They
//! know the supervisor only through these messages.

use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::error::AgentError;
use crate::record::Trigger;
use crate::suite::event::WorkerEvent;

/// Requests to the supervisor.
pub enum Command {
    /// Start a run, unless one is in progress or the preflight refuses it.
    Start {
        /// The suite to run.
        suite: String,
        /// The suite's options, as the caller gave them (not yet checked).
        options: Map<String, Value>,
        /// Who asked: boot, D-Bus, HTTP or the command line.
        trigger: Trigger,
        /// Gets the new run's id, or why it was not started.
        reply: oneshot::Sender<Result<String, AgentError>>,
    },
    /// Take up an interrupted run as a new run that carries over its finished stages.
    Resume {
        /// The interrupted run.
        run_id: String,
        /// Gets the new run's id, or why it was not started.
        reply: oneshot::Sender<Result<String, AgentError>>,
    },
    /// Cancel the run in progress.
    Cancel {
        /// The run to cancel; any other id is refused.
        run_id: String,
        /// Gets `Ok` once the cancel is under way, or why the run cannot be cancelled.
        reply: oneshot::Sender<Result<(), AgentError>>,
    },
    /// Take the inventory again.
    Rescan {
        /// Gets the new inventory as JSON, or why the scan failed.
        reply: oneshot::Sender<Result<Value, AgentError>>,
    },
    /// Write the factory-reset request, unless a run is going.
    FactoryReset {
        /// Who asked, in words.
        requested_by: String,
        /// Gets the request written, or why it was not.
        reply: oneshot::Sender<Result<crate::update::ResetRequest, AgentError>>,
    },
    /// Write the OS update request, unless a run is going.
    Update {
        /// The version; empty for the newest.
        version: String,
        /// Reboot into it once written.
        reboot: bool,
        /// Who asked, in words.
        requested_by: String,
        /// Gets the request written, or why it was not.
        reply: oneshot::Sender<Result<crate::update::progress::UpdateRequest, AgentError>>,
    },
    /// Something the worker of the run in progress said or did.
    Worker(WorkerMessage),
}

/// What the worker tells the supervisor.
#[derive(Debug)]
pub enum WorkerMessage {
    /// One event line read from the worker's stdout.
    Event {
        /// The run the worker executes.
        run_id: String,
        /// The event, parsed.
        event: WorkerEvent,
    },
    /// The worker process ended (after its session's leftovers were killed).
    Exited {
        /// The run the worker executed.
        run_id: String,
        /// How it ended, in words: `exit status N` or `killed by SIGNAL`.
        outcome: String,
        /// Whether it ended by itself with one of a run's own exit statuses (0, 1, 3),
        /// not by a signal or a crash.
        own_status: bool,
    },
}
