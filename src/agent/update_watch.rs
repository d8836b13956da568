//! Watches the OS update the root side writes (`update-state.json`) and publishes each
//! change as an event (D-Bus properties and signal, server-sent events); and, when
//! `update_check` is set, asks the update source what it offers on that schedule,
//! requesting the update itself only when `update_reboot` allows it to reboot the box.

use std::time::Duration;

use tokio::time::{interval, Instant, MissedTickBehavior};
use tracing::{info, warn};

use super::events::AgentEvent;
use super::handle::{blocking, AgentHandle};
use super::AgentError;

/// How often the state file is looked at.
const WATCH_PERIOD: Duration = Duration::from_secs(1);
/// How long after the agent starts the first scheduled check waits at most (a schedule
/// shorter than this waits one period): the boot suite and the boot check come first.
const FIRST_CHECK_AFTER: Duration = Duration::from_secs(15 * 60);
/// How soon a scheduled update that found the agent busy tries again.
const RETRY_AFTER: Duration = Duration::from_secs(10 * 60);

/// The configured schedule of automatic checks.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// How often; `None` never.
    pub every: Option<Duration>,
    /// Whether a newer version found is written and rebooted into without anyone asking.
    pub reboot: bool,
}

/// Runs until the agent's process ends.
pub async fn run(handle: AgentHandle, schedule: Schedule) {
    let mut tick = interval(WATCH_PERIOD);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut last = None;
    let mut next_check = schedule
        .every
        .map(|every| Instant::now() + every.min(FIRST_CHECK_AFTER));
    loop {
        tick.tick().await;
        let source = handle.image_source();
        let Ok(progress) = blocking(move || source.update_progress()).await else {
            continue;
        };
        let key = (
            progress.state.clone(),
            progress.version.clone(),
            progress.pending_version.clone(),
            progress.done_bytes,
            progress.message.clone(),
        );
        if last.as_ref() != Some(&key) {
            if last.is_some() || progress.state != "idle" {
                handle.publish(AgentEvent::UpdateChanged {
                    state: progress.state.clone(),
                    version: progress.version.clone(),
                    pending_version: progress.pending_version.clone(),
                    done_bytes: progress.done_bytes,
                    total_bytes: progress.total_bytes,
                    message: progress.message.clone(),
                });
            }
            last = Some(key);
        }
        if let (Some(every), Some(due)) = (schedule.every, next_check) {
            if Instant::now() >= due {
                next_check =
                    Some(Instant::now() + scheduled_check(&handle, schedule.reboot, every).await);
            }
        }
    }
}

/// One scheduled check; returns how long until the next.
async fn scheduled_check(handle: &AgentHandle, reboot: bool, every: Duration) -> Duration {
    let report = match handle.check_update().await {
        Ok(report) => report,
        Err(e) => {
            warn!(error = %e, "scheduled update check failed");
            return every;
        }
    };
    let Some(newest) = report.newest else {
        return every;
    };
    if !reboot {
        info!(version = %newest, "an OS update is available (update_reboot is off: it waits to be asked for)");
        return every;
    }
    match handle
        .request_update(&newest, true, "update_check schedule")
        .await
    {
        Ok(_) => {
            info!(version = %newest, "scheduled OS update requested; the box reboots into it when written");
            every
        }
        Err(AgentError::Busy(why) | AgentError::Updating(why)) => {
            info!(version = %newest, why = %why, "scheduled OS update waits");
            RETRY_AFTER.min(every)
        }
        Err(e) => {
            warn!(version = %newest, error = %e, "scheduled OS update refused");
            every
        }
    }
}
