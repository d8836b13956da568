//! The boot gate's side effects on the box: the history of assessments in the state
//! folder (`boot-assessments.json`, which every later version reads), waiting for this
//! boot's boot run in the store, and what the running boot is (its id, when it began,
//! whether its entry is on trial). Everything is read below a root folder and a state
//! folder, so tests give it a tree on disk.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeZone, Utc};

use super::boot_entries::{self, Trial};
use super::gate::{self, Assessment, GateInput, Judgement};
use super::os_release::OsRelease;
use crate::record::{RunRecord, RunState, Trigger};

/// The assessments file in the agent's state folder.
pub const HISTORY_FILE: &str = "boot-assessments.json";
/// How many assessments the history keeps.
const HISTORY_KEEP: usize = 200;

/// The assessments file below `state_dir`.
pub fn history_path(state_dir: &Path) -> PathBuf {
    state_dir.join(HISTORY_FILE)
}

/// Earlier assessments, oldest first. A missing file is an empty history; a damaged
/// one is reported and read as empty, so that the gate still judges the checks.
pub fn read_history(state_dir: &Path) -> (Vec<Assessment>, Option<String>) {
    let path = history_path(state_dir);
    match std::fs::read(&path) {
        Ok(bytes) => match serde_json::from_slice::<Vec<Assessment>>(&bytes) {
            Ok(history) => (history, None),
            Err(e) => (
                Vec::new(),
                Some(format!(
                    "{} does not parse ({e}); read as empty",
                    path.display()
                )),
            ),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), None),
        Err(e) => (
            Vec::new(),
            Some(format!("cannot read {}: {e}", path.display())),
        ),
    }
}

/// Adds `assessment` to the history, replacing an earlier one of the same boot, and
/// writes it whole, readable by the agent.
pub fn record(state_dir: &Path, assessment: &Assessment) -> std::io::Result<()> {
    let (mut history, _) = read_history(state_dir);
    history.retain(|a| assessment.boot_id.is_empty() || a.boot_id != assessment.boot_id);
    history.push(assessment.clone());
    if history.len() > HISTORY_KEEP {
        history.drain(..history.len() - HISTORY_KEEP);
    }
    write_whole(
        &history_path(state_dir),
        &serde_json::to_vec_pretty(&history).map_err(std::io::Error::other)?,
    )
}

/// Writes `bytes` to `path` as the run store writes its files (a temporary file
/// renamed over the old one, group `tinyperf` that the agent reads as), so that a
/// reader sees the old file or the new one whole.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder)?;
    }
    crate::record::files::Modes::lookup().write_atomically(path, bytes)
}

/// The running boot, as the kernel and the boot loader say.
#[derive(Debug, Clone)]
pub struct ThisBoot {
    /// `/proc/sys/kernel/random/boot_id`; empty when unreadable.
    pub boot_id: String,
    /// When the boot began (`btime` in `/proc/stat`).
    pub started_at: Option<DateTime<Utc>>,
    /// Whether its entry is on trial.
    pub trial: Trial,
    /// The running version (`IMAGE_VERSION`).
    pub version: String,
    /// `VARIANT_ID` of os-release (`cpu`, `red`, `green`); empty when absent.
    pub variant: String,
}

impl ThisBoot {
    /// Reads the running boot below `root`.
    pub fn read(root: &Path) -> ThisBoot {
        let release = OsRelease::read(root);
        let field = |key: &str| {
            release
                .as_ref()
                .and_then(|r| r.get(key))
                .unwrap_or_default()
                .to_string()
        };
        ThisBoot {
            boot_id: boot_id(root),
            started_at: boot_time(root),
            trial: boot_entries::trial(root),
            version: field("IMAGE_VERSION"),
            variant: field("VARIANT_ID"),
        }
    }

    /// Whether the image carries a GPU stack: every variant but `cpu`. An image that
    /// does not say is held to the GPU checks.
    pub fn gpu_image(&self) -> bool {
        self.variant != "cpu"
    }

    /// Whether its entry is on trial.
    pub fn on_trial(&self) -> bool {
        matches!(self.trial, Trial::OnTrial(_))
    }
}

/// The kernel's id of this boot.
pub fn boot_id(root: &Path) -> String {
    std::fs::read_to_string(root.join("proc/sys/kernel/random/boot_id"))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// When this boot began: `btime` of `/proc/stat`.
pub fn boot_time(root: &Path) -> Option<DateTime<Utc>> {
    let text = std::fs::read_to_string(root.join("proc/stat")).ok()?;
    let seconds: i64 = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Utc.timestamp_opt(seconds, 0).single()
}

/// The newest run of trigger `boot` that started after `since` (less a minute for a
/// clock stepped at boot), when one is in `state_dir/runs`. Only run folders whose
/// ids (UTC start times) are that recent are read.
pub fn find_boot_run(state_dir: &Path, since: DateTime<Utc>) -> Option<RunRecord> {
    let earliest = (since - chrono::Duration::seconds(60))
        .format("%Y%m%d-%H%M%S")
        .to_string();
    let mut ids: Vec<String> = std::fs::read_dir(state_dir.join("runs"))
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|id| crate::record::store::is_valid_run_id(id) && id.as_str() >= earliest.as_str())
        .collect();
    ids.sort();
    ids.iter().rev().find_map(|id| {
        let bytes = std::fs::read(state_dir.join("runs").join(id).join("run.json")).ok()?;
        let run: RunRecord = serde_json::from_slice(&bytes).ok()?;
        (run.trigger == Trigger::Boot && run.started_at >= since - chrono::Duration::seconds(60))
            .then_some(run)
    })
}

/// What waiting for the boot run found.
#[derive(Debug, Clone)]
pub enum Waited {
    /// The run finished.
    Finished(Box<RunRecord>),
    /// No run finished in time; why, in words.
    Missing(String),
}

/// Waits until this boot's boot run has finished, up to `timeout`, looking every
/// `poll`.
pub fn wait_for_boot_run(
    state_dir: &Path,
    since: DateTime<Utc>,
    timeout: Duration,
    poll: Duration,
) -> Waited {
    let start = Instant::now();
    loop {
        let run = find_boot_run(state_dir, since);
        match &run {
            Some(run) if run.state != RunState::Running => {
                return Waited::Finished(Box::new(run.clone()));
            }
            _ => {}
        }
        if start.elapsed() >= timeout {
            return Waited::Missing(match run {
                Some(run) => format!(
                    "boot run {} ({}) still running after {} s (boot_check_timeout_s)",
                    run.id,
                    run.suite,
                    timeout.as_secs()
                ),
                None => format!(
                    "no boot run started within {} s (is boot_suite set, and tinyperf.service running?)",
                    timeout.as_secs()
                ),
            });
        }
        std::thread::sleep(
            poll.min(timeout.saturating_sub(start.elapsed()))
                .max(Duration::from_millis(10)),
        );
    }
}

/// Turns the gate's judgement of this boot into the assessment to record.
pub fn assess(boot: &ThisBoot, run_id: Option<String>, judgement: Judgement) -> Assessment {
    let rejected = !judgement.passed && boot.on_trial();
    let reason = if judgement.passed {
        format!("{} passed: {}", boot.version, judgement.summary)
    } else if rejected {
        format!("{} rejected: {}", boot.version, judgement.summary)
    } else {
        format!(
            "{} failed its boot check, kept (already blessed): {}",
            boot.version, judgement.summary
        )
    };
    Assessment {
        version: boot.version.clone(),
        at: Utc::now(),
        boot_id: boot.boot_id.clone(),
        result: if judgement.passed { "pass" } else { "fail" }.into(),
        on_trial: boot.on_trial(),
        rejected,
        previous_version: judgement.previous_version,
        run_id,
        checks: judgement.checks,
        figures: judgement.figures,
        reason,
    }
}

/// Judges this boot against `history` once its boot run finished (or the wait ran
/// out), and returns the assessment to record.
pub fn judge_boot(
    boot: &ThisBoot,
    waited: &Waited,
    history: &[Assessment],
    min_ratio: f64,
) -> Assessment {
    let (run, why) = match waited {
        Waited::Finished(run) => (Some(run.as_ref()), String::new()),
        Waited::Missing(why) => (None, why.clone()),
    };
    let judgement = gate::judge(&GateInput {
        version: &boot.version,
        gpu_image: boot.gpu_image(),
        run,
        no_run_reason: &why,
        history,
        min_ratio,
    });
    assess(boot, run.map(|r| r.id.clone()), judgement)
}

/// The assessment recorded for this boot when the gate itself did not finish (it hung
/// past its deadline or was killed): a failure.
pub fn unfinished(boot: &ThisBoot) -> Assessment {
    let judgement = Judgement {
        passed: false,
        checks: vec![gate::GateCheck {
            name: "boot check".into(),
            expected: "finishes".into(),
            found: "did not finish (it timed out, or was killed)".into(),
            result: "fail".into(),
            ratio: None,
            previous_value: None,
        }],
        figures: Vec::new(),
        previous_version: None,
        summary: "the boot check did not finish (it timed out, or was killed)".into(),
    };
    assess(boot, None, judgement)
}
