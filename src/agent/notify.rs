//! systemd integration: READY=1 once serving, and watchdog pings while alive.

use std::time::Duration;

use tracing::{debug, warn};

/// Tells systemd the agent is ready. A no-op outside systemd.
pub fn ready(status: &str) {
    let state = [
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(status),
    ];
    if let Err(e) = sd_notify::notify(&state) {
        warn!(error = %e, "cannot notify systemd");
    }
}

/// Tells systemd the agent is stopping.
pub fn stopping() {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
}

/// Pings the watchdog at half its interval, for as long as the runtime runs, when
/// systemd asked for a watchdog.
pub fn spawn_watchdog() {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    let period = (interval / 2).max(Duration::from_millis(100));
    debug!(?period, "watchdog enabled");
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        loop {
            tick.tick().await;
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        }
    });
}
