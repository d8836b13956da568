//! Events the agent fans out to D-Bus signals, property changes and server-sent events.

use serde::Serialize;

use super::live::TimedSample;
use super::status::AgentState;
use crate::record::{RunState, Verdict};
use crate::suite::event::TrainPoint;

/// One thing that happened on the agent, published in order; serialized with its `type`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    /// The agent went idle or started running (a D-Bus `State` change).
    StateChanged {
        /// Whether the agent is idle or running a run.
        state: AgentState,
        /// The run in progress, `None` when idle.
        current_run: Option<String>,
    },
    /// A run was accepted and its worker is starting.
    RunStarted {
        /// The id of the run that started.
        run_id: String,
        /// The suite the run executes.
        suite: String,
    },
    /// The worker began a stage.
    StageStarted {
        /// The run the stage belongs to.
        run_id: String,
        /// The stage's name.
        stage: String,
    },
    /// The run moved on; published as the D-Bus `Progress` property.
    Progress {
        /// The run in progress.
        run_id: String,
        /// The stage that reported it.
        stage: String,
        /// The run's progress from 0 to 1; it never goes back.
        progress: f64,
        /// What the stage is doing now, when it said.
        message: Option<String>,
    },
    /// A stage ended with a verdict.
    StageFinished {
        /// The run the stage belongs to.
        run_id: String,
        /// The stage's name.
        stage: String,
        /// How the stage was judged.
        verdict: Verdict,
    },
    /// A run ended, in whatever state.
    RunFinished {
        /// The run that ended.
        run_id: String,
        /// The state it ended in: passed, failed, error, cancelled or interrupted.
        state: RunState,
        /// None for a run cancelled or interrupted before it was judged.
        verdict: Option<Verdict>,
    },
    /// A rescan took the inventory again.
    HardwareChanged {
        /// The SKU the box is now judged as (`unrecognised` when none fits).
        sku: String,
    },
    /// A training figure of the run in progress.
    Train {
        /// The run the figure belongs to.
        run_id: String,
        /// The training figure (loss, throughput, accuracy) as the worker reported it.
        point: TrainPoint,
    },
    /// An OS update moved on (published as the D-Bus `UpdateState` and
    /// `PendingVersion` properties and the `UpdateProgress` signal).
    UpdateChanged {
        /// `idle`, `checking`, `downloading`, `written` or `rejected`.
        state: String,
        /// The version being written, written or refused.
        version: String,
        /// A version written and not yet started.
        pending_version: String,
        /// Bytes written so far.
        done_bytes: u64,
        /// Bytes of the whole update, when known.
        total_bytes: u64,
        /// What happened, in words.
        message: String,
    },
    /// A telemetry sample of every GPU during the run in progress.
    Telemetry {
        /// The run the sample was taken during.
        run_id: String,
        /// When it was taken and what each GPU read.
        #[serde(flatten)]
        sample: TimedSample,
    },
}

impl AgentEvent {
    /// The SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            AgentEvent::StateChanged { .. } => "state_changed",
            AgentEvent::RunStarted { .. } => "run_started",
            AgentEvent::StageStarted { .. } => "stage_started",
            AgentEvent::Progress { .. } => "progress",
            AgentEvent::StageFinished { .. } => "stage_finished",
            AgentEvent::RunFinished { .. } => "run_finished",
            AgentEvent::HardwareChanged { .. } => "hardware_changed",
            AgentEvent::Train { .. } => "train",
            AgentEvent::Telemetry { .. } => "telemetry",
            AgentEvent::UpdateChanged { .. } => "update",
        }
    }
}
