//! Why a run was still `running` when the agent started: the agent stopped, or the box
//! did. The previous boot's log names the fault that ended it (an Xid 79, a panic), and a
//! power ramp's last step says how many GPUs were at full load when the box went dark.

use std::path::Path;

use chrono::{DateTime, Duration, Utc};

use crate::inventory::previous_boot::{BootEnd, PreviousBoot};
use crate::record::RunRecord;
use crate::suite::health::ramp_stage::RampProgress;

/// What is known at agent start about how the last boot ended.
pub struct Interruption {
    previous: PreviousBoot,
    /// When this boot began, where `/proc/uptime` says.
    booted_at: Option<DateTime<Utc>>,
}

impl Interruption {
    /// What `previous` (the previous boot, as the inventory of `root` read it) says, and
    /// when this boot began under `root`.
    pub fn new(root: &Path, previous: PreviousBoot) -> Interruption {
        let booted_at = std::fs::read_to_string(root.join("proc/uptime"))
            .ok()
            .and_then(|t| t.split_whitespace().next()?.parse::<f64>().ok())
            .map(|up| Utc::now() - Duration::milliseconds((up * 1000.0) as i64));
        Interruption {
            previous,
            booted_at,
        }
    }

    /// The previous boot, as read.
    pub fn previous_boot(&self) -> &PreviousBoot {
        &self.previous
    }

    /// Why `record` (its folder `run_dir`) was left running.
    pub fn explain(&self, record: &RunRecord, run_dir: &Path) -> String {
        let mut parts = Vec::new();
        // A run of an earlier boot, when this boot's start is known; else every run left
        // running when the previous boot ended without a shutdown.
        let of_previous_boot = self.booted_at.is_none_or(|boot| record.started_at < boot);
        match (self.previous.ended, self.previous.describe()) {
            (BootEnd::Unexpected, Some(line)) if of_previous_boot => parts.push(line),
            _ => parts.push("the agent stopped while this run was in progress".to_string()),
        }
        if let Some(stage) = record.stages.last() {
            parts.push(format!("its last finished stage was {}", stage.name));
        }
        if let Some(ramp) = RampProgress::read(run_dir).and_then(|p| p.describe_stop()) {
            parts.push(ramp);
        }
        parts.join("; ")
    }
}
