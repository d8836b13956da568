//! The client side of `org.tinyperf.Agent1`, as the command line and the tests use it.

use std::collections::HashMap;

use zbus::Variant;

use super::error::Agent1Error;

/// `org.tinyperf.Agent1` as a client calls it; zbus makes `Agent1Proxy` from this.
#[zbus::proxy(
    interface = "org.tinyperf.Agent1",
    default_service = "org.tinyperf.Agent1",
    default_path = "/org/tinyperf/Agent1"
)]
pub trait Agent1 {
    /// Starts a run; returns its id.
    fn start(
        &self,
        suite: &str,
        options: &HashMap<String, Variant<'_>>,
    ) -> Result<String, Agent1Error>;

    /// Cancels the run in progress with this id.
    fn cancel(&self, run_id: &str) -> Result<(), Agent1Error>;

    /// The agent's status as JSON, as HTTP's `/api/v1/status` gives it.
    fn get_status(&self) -> Result<String, Agent1Error>;

    /// One run's record as JSON.
    fn get_run(&self, run_id: &str) -> Result<String, Agent1Error>;

    /// Up to `limit` run records as a JSON array, newest first; 0 means all.
    fn list_runs(&self, limit: u32) -> Result<String, Agent1Error>;

    /// Takes the inventory again; returns it as JSON.
    fn rescan(&self) -> Result<String, Agent1Error>;

    /// Asks for a factory reset (root only).
    fn factory_reset(&self) -> Result<(), Agent1Error>;

    /// What the update source offers, as JSON.
    fn check_update(&self) -> Result<String, Agent1Error>;

    /// Asks for an OS update ("" for the newest).
    fn update(&self, version: &str) -> Result<(), Agent1Error>;

    /// `idle` or `running`.
    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
    /// The id of the run in progress; empty when idle.
    #[zbus(property)]
    fn current_run(&self) -> zbus::Result<String>;
    /// The stage the current run is in; empty when idle or between stages.
    #[zbus(property)]
    fn current_stage(&self) -> zbus::Result<String>;
    /// Progress of the run in progress, 0..1; 0 when idle.
    #[zbus(property)]
    fn progress(&self) -> zbus::Result<f64>;
    /// What the run in progress last said about where it is; empty when idle.
    #[zbus(property)]
    fn message(&self) -> zbus::Result<String>;
    /// The last finished run in brief, as JSON; empty when none has finished.
    #[zbus(property)]
    fn last_run(&self) -> zbus::Result<String>;
    /// The hardware inventory as JSON.
    #[zbus(property)]
    fn hardware(&self) -> zbus::Result<String>;
    /// The SKU the box was recognised as, or `unrecognised`.
    #[zbus(property)]
    fn sku(&self) -> zbus::Result<String>;
    /// The agent's version.
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> zbus::Result<String>;

    /// The OS image's version; empty when not on a tinybox OS image.
    #[zbus(property(emits_changed_signal = "const"))]
    fn image_version(&self) -> zbus::Result<String>;
    /// The OS image's status as JSON.
    #[zbus(property)]
    fn image_slots(&self) -> zbus::Result<String>;
    /// Where the OS update stands.
    #[zbus(property)]
    fn update_state(&self) -> zbus::Result<String>;
    /// A version written and not yet started.
    #[zbus(property)]
    fn pending_version(&self) -> zbus::Result<String>;

    /// An OS update moved on: its state, version, bytes written and bytes in all.
    #[zbus(signal)]
    fn update_progress(
        &self,
        state: String,
        version: String,
        done_bytes: u64,
        total_bytes: u64,
    ) -> zbus::Result<()>;
    /// A run started.
    #[zbus(signal)]
    fn run_started(&self, run_id: String, suite: String) -> zbus::Result<()>;
    /// A stage finished with a verdict.
    #[zbus(signal)]
    fn stage_finished(&self, run_id: String, stage: String, verdict: String) -> zbus::Result<()>;
    /// A run ended in `state` with an overall verdict, empty when it was not judged.
    #[zbus(signal)]
    fn run_finished(&self, run_id: String, state: String, verdict: String) -> zbus::Result<()>;
}
