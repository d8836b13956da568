//! Turns the agent's events into D-Bus signals and `PropertiesChanged` notifications.

use tokio::sync::broadcast::{error::RecvError, Receiver};
use tracing::{debug, warn};
use zbus::object_server::InterfaceRef;

use super::interface::AgentInterface;
use super::read_only::ReadOnly;
use crate::agent::events::AgentEvent;

/// Forwards every event until the agent's event channel closes.
pub(super) async fn forward(
    iface: InterfaceRef<ReadOnly<AgentInterface>>,
    mut events: Receiver<AgentEvent>,
) {
    loop {
        let result = match events.recv().await {
            Ok(event) => emit(&iface, &event).await,
            Err(RecvError::Lagged(missed)) => {
                // The values are read at emission time, so re-announcing every property
                // brings listeners back in step even though the events are gone.
                warn!(
                    missed,
                    "D-Bus signal forwarding fell behind; re-announcing all properties"
                );
                announce(&iface, Property::ALL).await
            }
            Err(RecvError::Closed) => break,
        };
        if let Err(e) = result {
            warn!(error = %e, "cannot emit a D-Bus signal");
        }
    }
    debug!("agent event channel closed; D-Bus signal forwarding stops");
}

async fn emit(
    iface: &InterfaceRef<ReadOnly<AgentInterface>>,
    event: &AgentEvent,
) -> zbus::Result<()> {
    let emitter = iface.signal_emitter();
    match event {
        // A run starting or ending clears its message.
        AgentEvent::StateChanged { .. } => {
            announce(
                iface,
                &[Property::State, Property::CurrentRun, Property::Message],
            )
            .await
        }
        AgentEvent::RunStarted { run_id, suite } => {
            AgentInterface::run_started(emitter, run_id, suite).await
        }
        AgentEvent::StageStarted { .. } => announce(iface, &[Property::CurrentStage]).await,
        AgentEvent::Progress { message: None, .. } => announce(iface, &[Property::Progress]).await,
        AgentEvent::Progress {
            message: Some(_), ..
        } => announce(iface, &[Property::Progress, Property::Message]).await,
        AgentEvent::StageFinished {
            run_id,
            stage,
            verdict,
        } => AgentInterface::stage_finished(emitter, run_id, stage, verdict.as_str()).await,
        AgentEvent::RunFinished {
            run_id,
            state,
            verdict,
        } => {
            announce(
                iface,
                &[
                    Property::LastRun,
                    Property::State,
                    Property::CurrentRun,
                    Property::CurrentStage,
                    Property::Progress,
                    Property::Message,
                ],
            )
            .await?;
            // No verdict (a cancelled or interrupted run) is the empty string.
            let verdict = verdict.map_or("", |v| v.as_str());
            AgentInterface::run_finished(emitter, run_id, state.as_str(), verdict).await
        }
        AgentEvent::HardwareChanged { .. } => {
            announce(iface, &[Property::Hardware, Property::Sku]).await
        }
        AgentEvent::UpdateChanged {
            state,
            version,
            done_bytes,
            total_bytes,
            ..
        } => {
            announce(
                iface,
                &[
                    Property::UpdateState,
                    Property::PendingVersion,
                    Property::ImageSlots,
                ],
            )
            .await?;
            AgentInterface::update_progress(emitter, state, version, *done_bytes, *total_bytes)
                .await
        }
        // Live figures change no property; D-Bus callers read them with the run.
        AgentEvent::Train { .. } | AgentEvent::Telemetry { .. } => Ok(()),
    }
}

/// The properties that change (`Version` never does).
#[derive(Debug, Clone, Copy)]
enum Property {
    State,
    CurrentRun,
    CurrentStage,
    Progress,
    Message,
    LastRun,
    Hardware,
    Sku,
    UpdateState,
    PendingVersion,
    ImageSlots,
}

impl Property {
    const ALL: &'static [Property] = &[
        Property::State,
        Property::CurrentRun,
        Property::CurrentStage,
        Property::Progress,
        Property::Message,
        Property::LastRun,
        Property::Hardware,
        Property::Sku,
        Property::UpdateState,
        Property::PendingVersion,
        Property::ImageSlots,
    ];
}

/// Emits `PropertiesChanged` for each property, with its value as of now.
async fn announce(
    iface: &InterfaceRef<ReadOnly<AgentInterface>>,
    properties: &[Property],
) -> zbus::Result<()> {
    let emitter = iface.signal_emitter();
    let object = &iface.get().await.inner;
    for property in properties {
        match property {
            Property::State => object.state_changed(emitter).await?,
            Property::CurrentRun => object.current_run_changed(emitter).await?,
            Property::CurrentStage => object.current_stage_changed(emitter).await?,
            Property::Progress => object.progress_changed(emitter).await?,
            Property::Message => object.message_changed(emitter).await?,
            Property::LastRun => object.last_run_changed(emitter).await?,
            Property::Hardware => object.hardware_changed(emitter).await?,
            Property::Sku => object.sku_changed(emitter).await?,
            Property::UpdateState => object.update_state_changed(emitter).await?,
            Property::PendingVersion => object.pending_version_changed(emitter).await?,
            Property::ImageSlots => object.image_slots_changed(emitter).await?,
        }
    }
    Ok(())
}
