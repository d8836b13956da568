//! Where an OS update stands, as the root side writes it and the agent reads it:
//! `update-state.json` in the agent's state folder (`idle`, `checking`,
//! `downloading`, `written`, `rejected`; bytes done of bytes in all; the version; a
//! message), and the request file the agent writes for the root side.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::boot_check::write_whole;

/// The state file in the agent's state folder.
pub const STATE_FILE: &str = "update-state.json";
/// The request file the agent writes and `tinyperf-update.path` watches.
pub const REQUEST_FILE: &str = "update.request";

/// How long a `checking` or `downloading` state holds without being renewed: its
/// writer renews it at least every [`RENEW_EVERY_S`] seconds.
pub const STALE_AFTER_S: i64 = 60;
/// How often the writer of an update in progress renews its state.
pub const RENEW_EVERY_S: i64 = 5;

/// The update states, as `UpdateState` on D-Bus says them.
pub const STATES: [&str; 5] = ["idle", "checking", "downloading", "written", "rejected"];

/// An update's state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateProgress {
    /// One of [`STATES`].
    pub state: String,
    /// The version being written, written, or refused; empty when none.
    #[serde(default)]
    pub version: String,
    /// A version written into the other slot and not yet started.
    #[serde(default)]
    pub pending_version: String,
    /// Bytes fetched and written so far.
    #[serde(default)]
    pub done_bytes: u64,
    /// Bytes of the whole update (compressed), when known.
    #[serde(default)]
    pub total_bytes: u64,
    /// The newest version the source offers that is newer than the running one and
    /// not rejected, as of the last check; empty when none.
    #[serde(default)]
    pub available: String,
    /// What happened, in words (the refusal's reason for `rejected`).
    #[serde(default)]
    pub message: String,
    /// When this was written.
    pub updated_at: DateTime<Utc>,
    /// The boot it was written in; a `checking` or `downloading` state of an earlier
    /// boot was cut off.
    #[serde(default)]
    pub boot_id: String,
    /// The process writing it (for people: the agent's sandbox cannot see root's
    /// processes, so liveness is told by `updated_at`, which the writer renews).
    #[serde(default)]
    pub pid: u32,
}

impl UpdateProgress {
    /// Nothing happening.
    pub fn idle() -> UpdateProgress {
        UpdateProgress {
            state: "idle".into(),
            version: String::new(),
            pending_version: String::new(),
            done_bytes: 0,
            total_bytes: 0,
            available: String::new(),
            message: String::new(),
            updated_at: Utc::now(),
            boot_id: String::new(),
            pid: 0,
        }
    }

    /// Whether an update is under way (and a run must not start).
    pub fn busy(&self) -> bool {
        matches!(self.state.as_str(), "checking" | "downloading")
    }

    /// The state as this boot sees it at `now`: a `checking` or `downloading` state of
    /// another boot, or one not renewed for [`STALE_AFTER_S`] (its writer is gone), was
    /// cut off and is `idle` with a message saying so; a written version that now runs
    /// is no longer pending.
    pub fn settle(mut self, boot_id: &str, running_version: &str, now: DateTime<Utc>) -> Self {
        let stale = (now - self.updated_at).num_seconds() > STALE_AFTER_S;
        if self.busy() && (self.boot_id != boot_id || stale) {
            self.message = format!(
                "the update to {} was cut off at {} of {} bytes ({}); the other slot was left for the next update",
                if self.version.is_empty() { "?" } else { &self.version },
                self.done_bytes,
                self.total_bytes,
                if self.boot_id != boot_id { "the box restarted" } else { "its writer stopped renewing it" }
            );
            self.state = "idle".into();
        }
        if !self.pending_version.is_empty() && self.pending_version == running_version {
            self.pending_version.clear();
            if self.state == "written" {
                self.state = "idle".into();
                self.message = format!("{running_version} runs");
            }
        }
        if !self.available.is_empty() && self.available == running_version {
            self.available.clear();
        }
        self
    }
}

/// The stored state as the boot running below `root` sees it, on a box that runs
/// `running_version` (see [`UpdateProgress::settle`]); `idle` when none is stored.
pub fn as_seen(root: &Path, state_dir: &Path, running_version: &str) -> UpdateProgress {
    read(state_dir).unwrap_or_else(UpdateProgress::idle).settle(
        &super::boot_check::boot_id(root),
        running_version,
        Utc::now(),
    )
}

/// The state file below `state_dir`.
pub fn state_path(state_dir: &Path) -> PathBuf {
    state_dir.join(STATE_FILE)
}

/// The request file below `state_dir`.
pub fn request_path(state_dir: &Path) -> PathBuf {
    state_dir.join(REQUEST_FILE)
}

/// The stored state; `None` when there is none or it does not parse.
pub fn read(state_dir: &Path) -> Option<UpdateProgress> {
    let bytes = std::fs::read(state_path(state_dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Stores `progress` whole, readable by the agent.
pub fn write(state_dir: &Path, progress: &UpdateProgress) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(progress).map_err(std::io::Error::other)?;
    write_whole(&state_path(state_dir), &bytes)
}

/// An update asked of the root side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpdateRequest {
    /// The version asked for; empty for the newest.
    #[serde(default)]
    pub version: String,
    /// Reboot once written.
    #[serde(default)]
    pub reboot: bool,
    /// Who asked (`dbus uid 0`, `http [::1]:40112`).
    pub requested_by: String,
    /// When.
    pub requested_at: DateTime<Utc>,
}

/// Writes the request file (the agent's side).
pub fn write_request(state_dir: &Path, request: &UpdateRequest) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(request).map_err(std::io::Error::other)?;
    write_whole(&request_path(state_dir), &bytes)
}

/// Takes the request file (the root side): reads and removes it. `Ok(None)` when
/// there is none; a request that does not parse is taken as one for the newest
/// version, asked by an unknown party.
pub fn take_request(state_dir: &Path) -> std::io::Result<Option<UpdateRequest>> {
    let path = request_path(state_dir);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    std::fs::remove_file(&path)?;
    Ok(Some(serde_json::from_slice(&bytes).unwrap_or_else(|_| {
        UpdateRequest {
            version: String::new(),
            reboot: false,
            requested_by: "unknown (the request file does not parse)".into(),
            requested_at: Utc::now(),
        }
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_download_of_an_earlier_boot_or_a_dead_process_was_cut_off() {
        let mut progress = UpdateProgress::idle();
        progress.state = "downloading".into();
        progress.version = "2".into();
        progress.boot_id = "old".into();
        progress.pid = 42;
        progress.done_bytes = 10;
        progress.total_bytes = 100;
        let now = progress.updated_at;
        let settled = progress.clone().settle("new", "1", now);
        assert_eq!(settled.state, "idle");
        assert!(
            settled.message.contains("cut off at 10 of 100 bytes"),
            "{}",
            settled.message
        );
        assert!(settled.message.contains("restarted"));

        progress.boot_id = "new".into();
        let soon = now + chrono::Duration::seconds(STALE_AFTER_S - 1);
        assert_eq!(
            progress.clone().settle("new", "1", soon).state,
            "downloading"
        );
        let late = now + chrono::Duration::seconds(STALE_AFTER_S + 1);
        let dead = progress.settle("new", "1", late);
        assert_eq!(dead.state, "idle");
        assert!(
            dead.message.contains("stopped renewing"),
            "{}",
            dead.message
        );
    }

    #[test]
    fn a_written_version_that_runs_is_no_longer_pending() {
        let mut progress = UpdateProgress::idle();
        progress.state = "written".into();
        progress.pending_version = "2".into();
        progress.available = "2".into();
        let still = progress.clone().settle("b", "1", Utc::now());
        assert_eq!(
            (still.state.as_str(), still.pending_version.as_str()),
            ("written", "2")
        );
        let runs = progress.settle("b", "2", Utc::now());
        assert_eq!(runs.state, "idle");
        assert!(runs.pending_version.is_empty() && runs.available.is_empty());
    }

    #[test]
    fn the_state_and_the_request_round_trip_and_a_request_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        let mut progress = UpdateProgress::idle();
        progress.state = "written".into();
        write(dir.path(), &progress).unwrap();
        assert_eq!(read(dir.path()).unwrap().state, "written");

        let request = UpdateRequest {
            version: "3".into(),
            reboot: true,
            requested_by: "test".into(),
            requested_at: Utc::now(),
        };
        write_request(dir.path(), &request).unwrap();
        assert_eq!(take_request(dir.path()).unwrap(), Some(request));
        assert_eq!(take_request(dir.path()).unwrap(), None);
        std::fs::write(request_path(dir.path()), "{").unwrap();
        assert!(take_request(dir.path())
            .unwrap()
            .unwrap()
            .requested_by
            .contains("unknown"));
    }
}
