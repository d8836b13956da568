//! The supervisor's inbox: what the handle and the worker ask of it and tell it. They
//! know the supervisor only through these messages.

use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::error::AgentError;
use crate::record::Trigger;
use crate::suite::event::WorkerEvent;

/// Requests to the supervisor.
pub enum Command {
    Start {
        suite: String,
        options: Map<String, Value>,
        trigger: Trigger,
        reply: oneshot::Sender<Result<String, AgentError>>,
    },
    Cancel {
        run_id: String,
        reply: oneshot::Sender<Result<(), AgentError>>,
    },
    Rescan {
        reply: oneshot::Sender<Result<Value, AgentError>>,
    },
    Worker(WorkerMessage),
}

/// What the worker tells the supervisor.
#[derive(Debug)]
pub enum WorkerMessage {
    Event {
        run_id: String,
        event: WorkerEvent,
    },
    Exited {
        run_id: String,
        outcome: String,
        success: bool,
    },
}
