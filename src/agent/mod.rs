//! The daemon: run supervisor (one run at a time, in a worker subprocess), result
//! store, and event fan-out to D-Bus and HTTP.

pub mod config;
pub mod events;
pub mod handle;
pub mod notify;
pub mod state;
pub mod store;
pub mod supervisor;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use chrono::Utc;
use tokio::sync::{broadcast, mpsc};
use tracing::{info, warn};

pub use handle::{AgentError, AgentHandle, AgentState, RunBrief, StatusSnapshot};

use crate::api::dbus::BusChoice;
use crate::suite::record::Trigger;
use config::Config;
use handle::{Counters, HardwareView, Shared};
use store::Store;
use supervisor::{Supervisor, SupervisorConfig};

/// How the agent was asked to run, after the configuration file and the flags.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub config: Config,
    pub bus: BusChoice,
    /// The binary started as the worker (normally this very executable).
    pub worker_exe: PathBuf,
    /// Root of the sysfs/procfs tree to inventory.
    pub root: PathBuf,
}

/// Takes the inventory and judges the box, as the agent shows it.
pub fn scan_hardware(root: &Path, sku: Option<&str>) -> HardwareView {
    let report = crate::inventory::take(root, sku, true);
    HardwareView {
        sku: report.sku_name().to_string(),
        json: serde_json::to_value(&report).unwrap_or_default(),
    }
}

/// Builds the agent's core: store (with interrupted runs marked), hardware view and
/// the supervisor task. Front ends attach to the returned handle.
pub fn start_core(options: &AgentOptions) -> anyhow::Result<AgentHandle> {
    let config = &options.config;
    let store =
        Store::open(&config.state_dir, config.retention).context("cannot open the run store")?;
    for id in store.mark_interrupted() {
        warn!(run = %id, "run was in progress when the agent stopped; marked interrupted");
    }
    let listing = store.list(1);
    for skipped in &listing.skipped {
        warn!(run = %skipped.id, reason = %skipped.reason, "skipping unreadable run record");
    }
    let hardware = scan_hardware(&options.root, config.sku.as_deref());
    info!(sku = %hardware.sku, "inventory taken");
    let status = StatusSnapshot {
        state: AgentState::Idle,
        current_run: None,
        current_suite: None,
        current_stage: None,
        progress: 0.0,
        last_run: listing.records.first().map(RunBrief::from),
        sku: hardware.sku.clone(),
        version: crate::VERSION.to_string(),
        agent_started_at: Utc::now(),
    };
    let counters = Counters {
        store_records_skipped: listing.skipped.len() as u64,
        ..Counters::default()
    };
    let (events, _) = broadcast::channel(1024);
    let (commands, inbox) = mpsc::channel(256);
    let shared = Arc::new(Shared {
        store,
        status: RwLock::new(status),
        hardware: RwLock::new(hardware),
        counters: RwLock::new(counters),
        events,
        commands: commands.clone(),
    });
    let supervisor_config = SupervisorConfig {
        worker_exe: options.worker_exe.clone(),
        root: options.root.clone(),
        sku: config.sku.clone(),
        dataset: config.dataset.clone(),
        grace: config.cancel_grace,
    };
    tokio::spawn(Supervisor::new(shared.clone(), supervisor_config, commands).run(inbox));
    Ok(AgentHandle { shared })
}

/// Reads the write token; a missing or empty file disables writes over HTTP.
fn read_token(path: &Path) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(text) if !text.trim().is_empty() => Some(text.trim().to_string()),
        Ok(_) => {
            warn!(path = %path.display(), "token file is empty; HTTP writes are disabled");
            None
        }
        Err(e) => {
            warn!(path = %path.display(), error = %e, "no token file; HTTP writes are disabled");
            None
        }
    }
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(options: AgentOptions) -> anyhow::Result<()> {
    let config = options.config.clone();
    let handle = start_core(&options)?;

    let _dbus = crate::api::dbus::serve(handle.clone(), &options.bus)
        .await
        .with_context(|| format!("cannot serve on the {} bus", options.bus))?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let http_addr = listener.local_addr()?;
    let token = read_token(&config.token_file);
    tokio::spawn(crate::api::http::serve(handle.clone(), listener, token));

    info!(http = %http_addr, bus = %options.bus, state_dir = %config.state_dir.display(), "agent ready");
    // Scripts and tests read this line to learn the bound address.
    println!("ready http://{http_addr}");
    notify::ready(&format!("serving on {http_addr}"));
    notify::spawn_watchdog();

    if let Some(suite) = &config.boot_suite {
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
        wait_idle(
            &handle,
            config.cancel_grace + std::time::Duration::from_secs(2),
        )
        .await;
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

async fn wait_idle(handle: &AgentHandle, limit: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    while handle.status().state != AgentState::Idle && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
