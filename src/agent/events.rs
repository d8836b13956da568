//! Events the agent fans out to D-Bus signals, property changes and server-sent events.

use serde::Serialize;

use super::live::TimedSample;
use super::status::AgentState;
use crate::record::{RunState, Verdict};
use crate::suite::event::TrainPoint;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AgentEvent {
    StateChanged {
        state: AgentState,
        current_run: Option<String>,
    },
    RunStarted {
        run_id: String,
        suite: String,
    },
    StageStarted {
        run_id: String,
        stage: String,
    },
    Progress {
        run_id: String,
        stage: String,
        progress: f64,
        message: Option<String>,
    },
    StageFinished {
        run_id: String,
        stage: String,
        verdict: Verdict,
    },
    RunFinished {
        run_id: String,
        state: RunState,
        /// None for a run cancelled or interrupted before it was judged.
        verdict: Option<Verdict>,
    },
    HardwareChanged {
        sku: String,
    },
    /// A training figure of the run in progress.
    Train {
        run_id: String,
        point: TrainPoint,
    },
    /// A telemetry sample of every GPU during the run in progress.
    Telemetry {
        run_id: String,
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
        }
    }
}
