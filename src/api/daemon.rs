//! The agent process: its core with the D-Bus and HTTP front ends attached, until
//! SIGTERM or SIGINT.

use std::time::Duration;

use anyhow::Context;
use tracing::{info, warn};

use crate::agent::{notify, start_core, AgentHandle, AgentOptions, AgentState};
use crate::api::dbus::BusChoice;
use crate::record::Trigger;

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(options: AgentOptions, bus: BusChoice) -> anyhow::Result<()> {
    let config = options.config.clone();
    let token = super::token_file::read_token(&config.token_file)?;
    if token.is_none() {
        warn!(path = %config.token_file.display(), "no token file; HTTP writes are disabled");
    }
    // What the agent and its workers create is theirs and their group's to read,
    // nobody else's, whatever umask the agent was started with.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o027));
    super::large_buffers::give_back_when_freed();
    // Opening the store reads every record once: file work, kept off the async threads.
    let handle = tokio::task::spawn_blocking(move || start_core(&options))
        .await
        .context("the agent's core did not start")??;

    let _dbus = crate::api::dbus::serve(handle.clone(), &bus)
        .await
        .with_context(|| format!("cannot serve on the {} bus", bus))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let http_addr = listener.local_addr()?;
    let limits = super::http::Limits {
        max_connections: config.http_max_connections,
        max_connections_per_peer: config.http_max_connections_per_peer,
        idle_timeout: config.http_idle_timeout,
        send_timeout: config.http_send_timeout,
        ..super::http::Limits::default()
    };
    let prices = super::http::Prices {
        box_usd: config.box_price_usd,
        electricity_usd_per_kwh: config.electricity_usd_per_kwh,
    };
    tokio::spawn(super::http::serve_priced(
        handle.clone(),
        listener,
        token,
        limits,
        prices,
    ));
    crate::agent::front_display::spawn(handle.clone(), config.front_display_socket.clone());
    if let Some(schedule) = config.idle_health.clone() {
        crate::agent::idle::spawn(handle.clone(), schedule);
    }

    info!(http = %http_addr, bus = %bus, state_dir = %config.state_dir.display(), "agent ready");
    // Scripts and tests read this line to learn the bound address.
    println!("ready http://{http_addr}");
    notify::ready(&format!("serving on {http_addr}"));
    notify::spawn_watchdog();

    let resumed = if config.resume_after_reboot {
        match crate::agent::resume::resume_interrupted(&handle).await {
            Some(Ok(id)) => {
                info!(run = %id, "an interrupted run is taken up");
                true
            }
            Some(Err(e)) => {
                warn!(error = %e, "cannot take up the interrupted run");
                false
            }
            None => false,
        }
    } else {
        false
    };
    if let Some(suite) = config.boot_suite.as_ref().filter(|_| !resumed) {
        match handle
            .start(suite, config.boot_options.clone(), Trigger::Boot)
            .await
        {
            Ok(id) => info!(run = %id, %suite, "boot suite started"),
            Err(e) => warn!(%suite, error = %e, "cannot start the boot suite"),
        }
    }

    wait_for_shutdown().await;
    notify::stopping();
    if let Some(run_id) = handle.status().current_run {
        info!(run = %run_id, "cancelling the run in progress before exit");
        let _ = handle.cancel(&run_id).await;
        wait_idle(&handle, config.cancel_grace + Duration::from_secs(2)).await;
    }
    if !handle.flush_records(Duration::from_secs(5)).await {
        warn!("run records were still being written at exit");
    }
    for unsaved in handle.unsaved_runs() {
        warn!(run = %unsaved.id, error = %unsaved.error, "run record could not be written before exit");
    }
    info!("agent stopped");
    Ok(())
}

async fn wait_for_shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        warn!("cannot install signal handlers; running until killed");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => info!("SIGTERM received"),
        _ = int.recv() => info!("SIGINT received"),
    }
}

async fn wait_idle(handle: &AgentHandle, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while handle.status().state != AgentState::Idle && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
