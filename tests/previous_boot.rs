//! The previous boot, read from a real journal (written by systemd-journal-remote, read by
//! journalctl) in a box tree: a boot that ended on an Xid 79 is a failed check of the next
//! boot's health naming the GPU, and a run that was going when the box died is marked
//! interrupted with that cause at the agent's next start, with the power-ramp step it
//! was at when the worker died. The ramp's GPUs are stand-ins (no GPU here): the
//! bookkeeping is real, the load is not.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use common::{wait_for, Agent, AgentDirs, Bus};

const BOOT_BEFORE: &str = "0d6a1f7c1f6e4b5e8f0b2a3c4d5e6f70";
const BOOT_NOW: &str = "9a8b7c6d5e4f40312a1b2c3d4e5f6a7b";

/// A copy of a healthy green box's tree, to add a journal to.
fn box_tree() -> tempfile::TempDir {
    common::fixture_copy("green-clean-boot")
}

fn journal_remote() -> PathBuf {
    [
        "/usr/lib/systemd/systemd-journal-remote",
        "/lib/systemd/systemd-journal-remote",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
    .expect("systemd-journal-remote (Debian's systemd-journal-remote package) is installed")
}

/// One journal entry in the export format: (boot, seconds after 2026-11-30 12:00 UTC,
/// microseconds since boot, transport, identifier, message).
type Entry<'a> = (&'a str, u64, u64, &'a str, &'a str, &'a str);

/// Writes `entries` as the box's persistent journal, with the real tool that turns the
/// export format into journal files.
fn write_journal(tree: &Path, entries: &[Entry<'_>]) {
    let machine = "5c2a9e0f3b7d4c1e8a6f2d0b9c8e7a61";
    let dir = tree.join("var/log/journal").join(machine);
    std::fs::create_dir_all(&dir).unwrap();
    let mut export = Vec::new();
    for (boot, at, monotonic, transport, identifier, message) in entries {
        let realtime = (1_764_504_000 + at) * 1_000_000;
        export.extend_from_slice(
            format!(
                "__REALTIME_TIMESTAMP={realtime}\n__MONOTONIC_TIMESTAMP={monotonic}\n_BOOT_ID={boot}\n\
                 _MACHINE_ID={machine}\n_HOSTNAME=tinybox-test\n_TRANSPORT={transport}\n\
                 SYSLOG_IDENTIFIER={identifier}\nPRIORITY=3\nMESSAGE={message}\n\n"
            )
            .as_bytes(),
        );
    }
    let input = tree.join("journal.export");
    std::fs::write(&input, export).unwrap();
    let out = Command::new(journal_remote())
        .arg(format!("--output={}", dir.join("system.journal").display()))
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::remove_file(input).unwrap();
}

/// A previous boot whose last words are an Xid 79 on the tree's first GPU, and this boot.
fn journal_ending_in_xid_79(tree: &Path) {
    write_journal(
        tree,
        &[
            (BOOT_BEFORE, 0, 2_000_000, "kernel", "kernel", "Linux version 6.12.57+deb13-amd64"),
            (BOOT_BEFORE, 600, 600_000_000, "stdout", "tinyperf", "stage burn started"),
            (
                BOOT_BEFORE,
                843,
                843_000_000,
                "kernel",
                "kernel",
                "NVRM: Xid (PCI:0000:01:00): 79, pid=2211, name=tinyperf, GPU has fallen off the bus.",
            ),
            (BOOT_NOW, 1_000, 2_000_000, "kernel", "kernel", "Linux version 6.12.57+deb13-amd64"),
        ],
    );
}

fn health(tree: &Path, state: &Path) -> (i32, Value) {
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["health", "--root"])
        .arg(tree)
        .arg("--state-dir")
        .arg(state)
        .env("LD_LIBRARY_PATH", empty.path())
        .env("ROCM_PATH", empty.path())
        .output()
        .unwrap();
    let runs: Vec<PathBuf> = std::fs::read_dir(state.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let record = serde_json::from_slice(&std::fs::read(runs[0].join("run.json")).unwrap()).unwrap();
    (out.status.code().unwrap(), record)
}

fn checks_named<'a>(record: &'a Value, name: &str) -> Vec<&'a Value> {
    record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["checks"].as_array().unwrap())
        .filter(|c| c["name"] == name)
        .collect()
}

#[test]
fn a_previous_boot_that_ended_on_an_xid_79_fails_the_next_boots_health_naming_the_gpu() {
    let tree = box_tree();
    journal_ending_in_xid_79(tree.path());
    let state = tempfile::tempdir().unwrap();
    let (status, record) = health(tree.path(), state.path());
    assert_eq!(status, 1, "{record}");
    let previous = checks_named(&record, "previous boot");
    assert_eq!(previous.len(), 1, "{record}");
    assert_eq!(previous[0]["verdict"], "fail");
    assert_eq!(previous[0]["subject"], "0000:01:00.0");
    let found = previous[0]["found"].as_str().unwrap();
    assert!(
        found.starts_with("the previous boot ended unexpectedly after Xid 79 on GPU 0000:01:00.0 at 2025-11-30 12:14:03 UTC"),
        "{found}"
    );
    // This boot's own log is clean: the GPU's own kernel-messages check passes.
    let own = checks_named(&record, "kernel messages");
    assert!(own.iter().all(|c| c["verdict"] == "pass"), "{own:?}");
}

#[test]
fn a_previous_boot_that_shut_down_cleanly_says_nothing() {
    let tree = box_tree();
    write_journal(
        tree.path(),
        &[
            (
                BOOT_BEFORE,
                0,
                2_000_000,
                "kernel",
                "kernel",
                "Linux version 6.12.57+deb13-amd64",
            ),
            (
                BOOT_BEFORE,
                300,
                300_000_000,
                "kernel",
                "kernel",
                "NVRM: Xid (PCI:0000:01:00): 13, pid=77, name=python3, Graphics Exception",
            ),
            (
                BOOT_BEFORE,
                900,
                900_000_000,
                "journal",
                "systemd-journald",
                "Journal stopped",
            ),
            (
                BOOT_NOW,
                1_000,
                2_000_000,
                "kernel",
                "kernel",
                "Linux version 6.12.57+deb13-amd64",
            ),
        ],
    );
    let state = tempfile::tempdir().unwrap();
    let (status, record) = health(tree.path(), state.path());
    assert_eq!(status, 0, "{record}");
    assert!(
        checks_named(&record, "previous boot").is_empty(),
        "{record}"
    );
}

#[test]
fn a_power_ramp_killed_at_step_3_is_reported_at_the_next_start_with_stand_in_gpus() {
    let tree = box_tree();
    let dirs = AgentDirs::new("");
    let state = dirs.state_dir();
    let mut worker = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["run", "--suite", "health", "-o", "ramp_seconds=5", "--root"])
        .arg(tree.path())
        .arg("--state-dir")
        .arg(&state)
        .env("TINYPERF_RAMP_STAND_IN_GPUS", "4")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run_dir = wait_for(Duration::from_secs(120), "the ramp's step 3", || {
        let runs = std::fs::read_dir(state.join("runs")).ok()?;
        runs.flatten().map(|e| e.path()).find(|dir| {
            std::fs::read_to_string(dir.join("power-ramp.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|p| p["step"] == 3 && p["finished"] == false)
        })
    });
    // The power trip's stand-in: the worker dies at once, with nothing written after.
    worker.kill().unwrap();
    worker.wait().unwrap();
    journal_ending_in_xid_79(tree.path());
    let bus = Bus::start();
    let mut agent = Agent::start_with_args(&bus, &dirs, &["--root", tree.path().to_str().unwrap()]);
    let record: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    let log = agent.stop();
    assert_eq!(record["state"], "interrupted", "{record}\n{log}");
    let message = record["summary"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the previous boot ended unexpectedly after Xid 79 on GPU 0000:01:00.0"),
        "{message}"
    );
    assert!(
        message.contains("power-ramp step 3 of 4: 3 GPU(s) at full load"),
        "{message}"
    );
}
