//! The exported object: methods and properties of `org.tinyperf.Agent1`, answered
//! from the agent handle.

use std::collections::HashMap;

use serde::Serialize;
use zbus::object_server::SignalEmitter;
use zbus::OwnedVariant;

use super::error::Agent1Error;
use super::options::options_from_dbus;
use crate::agent::AgentHandle;
use crate::record::Trigger;

/// The most runs one `ListRuns` reply carries: with briefs of about a kilobyte the
/// reply stays near 100 KB, far below the bus's message limit.
pub const MAX_LISTED_RUNS: usize = 100;

/// Every property below, all read-only.
pub const PROPERTIES: &[&str] = &[
    "State",
    "CurrentRun",
    "CurrentStage",
    "Progress",
    "Message",
    "LastRun",
    "Hardware",
    "Sku",
    "Version",
    "ImageVersion",
    "ImageSlots",
    "UpdateState",
    "PendingVersion",
];

/// The agent as exported on the bus.
pub struct AgentInterface {
    handle: AgentHandle,
}

impl AgentInterface {
    /// The interface over the agent behind `handle`.
    pub fn new(handle: AgentHandle) -> Self {
        AgentInterface { handle }
    }
}

fn to_json(value: &impl Serialize) -> Result<String, Agent1Error> {
    serde_json::to_string(value)
        .map_err(|e| Agent1Error::Internal(format!("cannot encode the answer as JSON: {e}")))
}

#[zbus::interface(name = "org.tinyperf.Agent1")]
impl AgentInterface {
    /// Starts a run of `suite` (`inventory`, `acceptance`, `health`, `smoke`, `mlperf-resnet`)
    /// with suite options (numbers, strings, booleans) and returns its id.
    async fn start(
        &self,
        suite: String,
        options: HashMap<String, OwnedVariant>,
    ) -> Result<String, Agent1Error> {
        let options = options_from_dbus(options).map_err(Agent1Error::InvalidArgs)?;
        Ok(self.handle.start(&suite, options, Trigger::Dbus).await?)
    }

    /// Cancels the run in progress with this id.
    async fn cancel(&self, run_id: String) -> Result<(), Agent1Error> {
        Ok(self.handle.cancel(&run_id).await?)
    }

    /// The agent's status as JSON: the same object as HTTP's `/api/v1/status` (state,
    /// current run, suite, stage, progress, last run, unsaved runs, SKU, version, start).
    async fn get_status(&self) -> Result<String, Agent1Error> {
        to_json(&self.handle.status())
    }

    /// One run's full record as JSON.
    async fn get_run(&self, run_id: String) -> Result<String, Agent1Error> {
        let record = self.handle.get_run(&run_id).await?;
        to_json(&*record)
    }

    /// Up to `limit` runs in brief as a JSON array, newest first; 0, or more than
    /// the cap of 100, means the newest 100. `GetRun` gives a run in full.
    async fn list_runs(&self, limit: u32) -> Result<String, Agent1Error> {
        let limit = match limit as usize {
            0 => MAX_LISTED_RUNS,
            n => n.min(MAX_LISTED_RUNS),
        };
        to_json(&self.handle.list_runs(limit))
    }

    /// Takes the hardware inventory again and returns it as JSON.
    async fn rescan(&self) -> Result<String, Agent1Error> {
        to_json(&self.handle.rescan().await?)
    }

    /// Asks for a factory reset: the agent writes its request, a root service reboots
    /// the box into a boot that erases the state partition (runs, records, settings in
    /// /etc). Root only, by the bus policy and by the agent's own check of the caller.
    /// `Busy` while a run is going, `NotAnImage` on a machine that is not a tinybox OS
    /// image.
    async fn factory_reset(
        &self,
        #[zbus(header)] header: zbus::message::Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<(), Agent1Error> {
        let uid = caller_uid(connection, &header).await?;
        if uid != 0 {
            return Err(Agent1Error::AccessDenied(format!(
                "only root may ask for a factory reset (the caller is uid {uid})"
            )));
        }
        self.handle
            .request_factory_reset(&format!("dbus uid {uid}"))
            .await?;
        // The status now says a reset is pending.
        let _ = self.image_slots_changed(&emitter).await;
        Ok(())
    }

    /// Asks the update source (`update_url`) what it offers, verifies its signed list,
    /// and returns as JSON: the source, the running version, each version offered whole
    /// (`newer`, `current`, `older`, or `rejected` by this box's boot check, with the
    /// reason), incomplete ones, and `newest`, what `Update("")` would write (null when up
    /// to date). `UpdateSource` when the source cannot be used.
    async fn check_update(&self) -> Result<String, Agent1Error> {
        to_json(&self.handle.check_update().await?)
    }

    /// Asks for an OS update to `version` ("" for the newest newer one): the agent writes
    /// its request and a root service (tinyperf-update.service) verifies and writes the
    /// other slot; `UpdateState`, `PendingVersion` and the `UpdateProgress` signal follow
    /// it. The box does not reboot by itself: the new version starts at the next boot.
    /// Root and group tinyperf, by the bus policy. `Busy` while a run or another update
    /// is going, `InvalidArgs` without an update source.
    async fn update(
        &self,
        version: String,
        #[zbus(header)] header: zbus::message::Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
    ) -> Result<(), Agent1Error> {
        let uid = caller_uid(connection, &header).await?;
        self.handle
            .request_update(&version, false, &format!("dbus uid {uid}"))
            .await?;
        Ok(())
    }

    /// Where the OS update stands: `idle`, `checking`, `downloading`, `written` (waiting
    /// for a reboot) or `rejected` (refused; `ImageSlots` says why).
    #[zbus(property)]
    async fn update_state(&self) -> String {
        self.handle.image_source().update_progress().state
    }

    /// A version written into the other slot that starts at the next boot; empty when
    /// none.
    #[zbus(property)]
    async fn pending_version(&self) -> String {
        self.handle.image_source().update_progress().pending_version
    }

    /// `idle` or `running`.
    #[zbus(property)]
    async fn state(&self) -> String {
        self.handle.status().state.as_str().to_string()
    }

    /// The id of the run in progress; empty when idle.
    #[zbus(property)]
    async fn current_run(&self) -> String {
        self.handle.status().current_run.unwrap_or_default()
    }

    /// The stage the current run is in; empty when idle or between stages.
    #[zbus(property)]
    async fn current_stage(&self) -> String {
        self.handle.status().current_stage.unwrap_or_default()
    }

    /// Progress of the run in progress, 0..1, over all its stages; it never goes back
    /// during a run, and is 0 when idle.
    #[zbus(property)]
    async fn progress(&self) -> f64 {
        self.handle.status().progress
    }

    /// What the run in progress last said about where it is ("epoch 3 of 37 done",
    /// "the benchmark is initialising"); empty when idle or when it has said nothing yet.
    #[zbus(property)]
    async fn message(&self) -> String {
        self.handle.status().message.unwrap_or_default()
    }

    /// The last finished run in brief, as JSON; empty when no run has finished yet.
    #[zbus(property)]
    async fn last_run(&self) -> String {
        self.handle
            .status()
            .last_run
            .and_then(|brief| serde_json::to_string(&brief).ok())
            .unwrap_or_default()
    }

    /// The hardware inventory as JSON.
    #[zbus(property)]
    async fn hardware(&self) -> String {
        serde_json::to_string(&self.handle.hardware()).unwrap_or_else(|_| "{}".to_string())
    }

    /// The SKU the box was recognised as, or `unrecognised`.
    #[zbus(property)]
    async fn sku(&self) -> String {
        self.handle.sku()
    }

    /// The agent's version.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(&self) -> String {
        crate::VERSION.to_string()
    }

    /// The OS image's version (`IMAGE_VERSION`); empty when the agent does not run on a
    /// tinybox OS image.
    #[zbus(property(emits_changed_signal = "const"))]
    async fn image_version(&self) -> String {
        self.handle.image().await.version().to_string()
    }

    /// The OS image's status as JSON, as `GET /api/v1/image` gives it: version, booted
    /// slot, verity, both slots, the state partition, a pending factory reset; or
    /// `{"image": false, "message": ...}`.
    #[zbus(property)]
    async fn image_slots(&self) -> String {
        serde_json::to_string(&self.handle.image().await).unwrap_or_else(|_| "{}".to_string())
    }

    /// An OS update moved on: its state (as `UpdateState`), the version, and bytes
    /// written of the whole (0 when not known).
    #[zbus(signal)]
    pub async fn update_progress(
        emitter: &SignalEmitter<'_>,
        state: &str,
        version: &str,
        done_bytes: u64,
        total_bytes: u64,
    ) -> zbus::Result<()>;

    /// A run started.
    #[zbus(signal)]
    pub async fn run_started(
        emitter: &SignalEmitter<'_>,
        run_id: &str,
        suite: &str,
    ) -> zbus::Result<()>;

    /// A stage finished with a verdict (`pass`, `fail`, `skip`, `error`).
    #[zbus(signal)]
    pub async fn stage_finished(
        emitter: &SignalEmitter<'_>,
        run_id: &str,
        stage: &str,
        verdict: &str,
    ) -> zbus::Result<()>;

    /// A run ended in `state` (`passed`, `failed`, `error`, `cancelled`) with an
    /// overall verdict; the verdict is empty for a cancelled run, which was not judged.
    #[zbus(signal)]
    pub async fn run_finished(
        emitter: &SignalEmitter<'_>,
        run_id: &str,
        state: &str,
        verdict: &str,
    ) -> zbus::Result<()>;
}

/// The uid of the connection that sent the call, as the bus knows it.
async fn caller_uid(
    connection: &zbus::Connection,
    header: &zbus::message::Header<'_>,
) -> Result<u32, Agent1Error> {
    let sender = header.sender().ok_or_else(|| {
        Agent1Error::AccessDenied("the call names no sender, so its caller is unknown".into())
    })?;
    let bus = zbus::fdo::DBusProxy::new(connection)
        .await
        .map_err(|e| Agent1Error::Internal(format!("cannot ask the bus who called: {e}")))?;
    bus.get_connection_unix_user(sender.clone().into())
        .await
        .map_err(|e| Agent1Error::Internal(format!("cannot ask the bus who called: {e}")))
}
