//! The daemon's core: run supervisor (one run at a time, in a worker subprocess),
//! watchdog, and event fan-out; the front ends in `api` attach to its handle.

pub mod birth;
pub mod cgroup;
pub mod config;
pub mod error;
pub mod events;
pub mod front_display;
pub mod handle;
pub mod idle;
pub mod image;
pub mod interruption;
pub mod live;
pub mod messages;
pub mod notify;
pub mod resume;
pub mod session;
pub mod state;
pub mod status;
pub mod supervisor;
pub mod update_watch;
pub mod watchdog;
pub mod worker;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use anyhow::Context;
use chrono::Utc;
use tokio::sync::{broadcast, mpsc};
use tracing::{info, warn};

pub use crate::record::RunBrief;
pub use error::AgentError;
pub use handle::AgentHandle;
pub use status::{AgentState, Counters, HardwareView, StatusSnapshot};

use crate::record::store::{Store, StoreOptions};
use crate::record::writer::{RecordWriter, DEFAULT_RETRY_INTERVAL};
use cgroup::RunCgroups;
use config::Config;
use handle::Shared;
use supervisor::{Supervisor, SupervisorConfig};

/// How the agent was asked to run, after the configuration file and the flags.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The configuration from the file, with the command-line overrides applied.
    pub config: Config,
    /// The binary started as the worker (normally this very executable).
    pub worker_exe: PathBuf,
    /// Root of the sysfs/procfs tree to inventory.
    pub root: PathBuf,
}

/// Builds the agent's core: store (its index read, interrupted runs marked), record
/// writer, hardware view and the supervisor task. Front ends attach to the returned
/// handle.
pub fn start_core(options: &AgentOptions) -> anyhow::Result<AgentHandle> {
    let config = &options.config;
    for key in &config.unknown_keys {
        warn!(
            key = %key,
            "unknown key in the configuration, ignored (a setting of another tinyperf version?)"
        );
    }
    let store_options = StoreOptions {
        retention: config.retention,
        ..StoreOptions::default()
    };
    let (store, opened) =
        Store::open_with(&config.state_dir, store_options).context("cannot open the run store")?;
    for id in &opened.removed_empty {
        info!(run = %id, "removed the folder of a run that never started");
    }
    // The inventory reads the previous boot, which also says why a run was interrupted.
    let report = crate::inventory::take(&options.root, config.sku.as_deref(), true);
    let interruption = interruption::Interruption::new(&options.root, report.previous_boot.clone());
    if let Some(line) = interruption.previous_boot().describe() {
        warn!(previous_boot = %line, "the previous boot did not end cleanly");
    }
    for id in store.mark_interrupted(|record, dir| interruption.explain(record, dir)) {
        warn!(run = %id, "run was in progress when the agent stopped; marked interrupted");
    }
    let cgroups = run_cgroups(&store);
    let skipped = store.skipped();
    for skipped in &skipped {
        warn!(run = %skipped.id, reason = %skipped.reason, "skipping unreadable run record");
    }
    let store = Arc::new(store);
    let writer = RecordWriter::start(store.clone(), DEFAULT_RETRY_INTERVAL)
        .context("cannot start the record writer")?;
    let hardware = HardwareView::of(&report);
    info!(sku = %hardware.sku, runs = store.len(), "inventory taken");
    let status = StatusSnapshot {
        state: AgentState::Idle,
        current_run: None,
        current_suite: None,
        current_stage: None,
        progress: 0.0,
        message: None,
        last_run: None,
        unsaved_runs: Vec::new(),
        sku: hardware.sku.clone(),
        version: crate::VERSION.to_string(),
        agent_started_at: Utc::now(),
    };
    let counters = Counters {
        store_records_skipped: skipped.len() as u64,
        ..Counters::default()
    };
    let (events, _) = broadcast::channel(1024);
    let (commands, inbox) = mpsc::channel(256);
    let box_records = Arc::new(birth::BoxRecords::new(
        options.root.clone(),
        config.state_dir.clone(),
    ));
    birth::start(box_records.clone());
    let shared = Arc::new(Shared {
        store,
        writer,
        current: RwLock::new(None),
        status: RwLock::new(status),
        hardware: RwLock::new(hardware),
        counters: RwLock::new(counters),
        live: RwLock::new(live::LiveRun::default()),
        events,
        commands: commands.clone(),
        box_records,
        image: image::ImageSource {
            root: config.image_root.clone(),
            state_dir: config.state_dir.clone(),
            update_url: config.update_url.clone(),
        },
    });
    let supervisor_config = SupervisorConfig {
        worker_exe: options.worker_exe.clone(),
        root: options.root.clone(),
        sku: config.sku.clone(),
        dataset: config.dataset.clone(),
        grace: config.cancel_grace,
        state_dir: config.state_dir.clone(),
        min_free_space: config.min_free_space_bytes,
        dataset_cache: config.dataset_cache_bytes,
        benchmarks: config.benchmarks.clone(),
        cgroups,
    };
    tokio::spawn(Supervisor::new(shared.clone(), supervisor_config, commands).run(inbox));
    let handle = AgentHandle { shared };
    tokio::spawn(update_watch::run(
        handle.clone(),
        update_watch::Schedule {
            every: config.update_check,
            reboot: config.update_reboot,
        },
    ));
    Ok(handle)
}

/// The agent's own cgroup, where it can make a group per run, after the groups of this
/// store's runs that an earlier agent left behind are killed.
fn run_cgroups(store: &Store) -> Option<RunCgroups> {
    let groups = match RunCgroups::of_this_process() {
        Ok(groups) => groups,
        Err(e) => {
            warn!(
                error = %e,
                "runs get no cgroup of their own: what a run leaves running is found by its \
                 session when it ends, and a process that leaves the session (setsid) or \
                 outlives a killed agent is not"
            );
            return None;
        }
    };
    for (run_id, group) in groups.leftovers() {
        // A group of another agent's store sharing this cgroup (a developer's machine)
        // is its own to end.
        if store.brief(&run_id).is_none() {
            continue;
        }
        match group.kill() {
            Ok(killed) => {
                warn!(run = %run_id, processes = killed, "killed what an earlier agent's run left running")
            }
            Err(e) => {
                warn!(run = %run_id, error = %e, "cannot kill what an earlier agent's run left running")
            }
        }
    }
    info!(cgroup = %groups.parent().display(), "each run gets a cgroup of its own");
    Some(groups)
}
