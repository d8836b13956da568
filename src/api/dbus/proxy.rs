//! The client side of `org.tinyperf.Agent1`, as the command line and the tests use it.

use std::collections::HashMap;

use zbus::Variant;

use super::error::Agent1Error;

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

    #[zbus(property)]
    fn state(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn current_run(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn current_stage(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn progress(&self) -> zbus::Result<f64>;
    #[zbus(property)]
    fn last_run(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn hardware(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn sku(&self) -> zbus::Result<String>;
    #[zbus(property(emits_changed_signal = "const"))]
    fn version(&self) -> zbus::Result<String>;

    #[zbus(signal)]
    fn run_started(&self, run_id: String, suite: String) -> zbus::Result<()>;
    #[zbus(signal)]
    fn stage_finished(&self, run_id: String, stage: String, verdict: String) -> zbus::Result<()>;
    #[zbus(signal)]
    fn run_finished(&self, run_id: String, state: String, verdict: String) -> zbus::Result<()>;
}
