//! `tinyperf health` on the kernel's own file formats: fixture trees whose kernel log
//! holds Xids and falls off the bus, and a clean one. Without a GPU runtime the GPU
//! checks skip with the reason, and a GPU backend that cannot be used is a check that
//! could not run (exit 3), never a failed GPU (exit 1).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn health(args: &[&str]) -> Output {
    let empty = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .arg("health")
        .args(args)
        // No vendor library from this machine may stand in for a GPU.
        .env("LD_LIBRARY_PATH", empty.path())
        .env("ROCM_PATH", empty.path())
        .output()
        .expect("tinyperf runs")
}

/// The run record `tinyperf health --state-dir` wrote.
fn record(state: &Path) -> Value {
    let runs: Vec<PathBuf> = std::fs::read_dir(state.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1);
    serde_json::from_slice(&std::fs::read(runs[0].join("run.json")).unwrap()).unwrap()
}

fn stage<'a>(record: &'a Value, name: &str) -> &'a Value {
    record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no stage {name}: {record}"))
}

#[test]
fn a_gpu_whose_log_shows_it_lost_fails_its_check_and_health_exits_1() {
    let state = tempfile::tempdir().unwrap();
    let root = fixture("green-link-errors");
    let out = health(&[
        "--root",
        root.to_str().unwrap(),
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let record = record(state.path());
    let messages = stage(&record, "kernel-messages");
    let verdicts: Vec<(String, String)> = messages["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["subject"].as_str().unwrap().to_string(),
                c["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let failed: Vec<&str> = verdicts
        .iter()
        .filter(|(_, v)| v == "fail")
        .map(|(s, _)| s.as_str())
        .collect();
    assert_eq!(failed, ["0000:41:00.0", "0000:81:00.0"], "{verdicts:?}");
    assert_eq!(verdicts.len(), 6, "a check per GPU");
    // An application's Xid and a GPU not in the box are told, not failed.
    let findings = messages["findings"].to_string();
    assert!(findings.contains("Xid 13"), "{findings}");
    assert!(
        findings.contains("0000:f1:00.0 (no GPU at that address"),
        "{findings}"
    );
    // Without a runtime the GPU checks skip, saying why.
    for name in ["gpu-corruption", "link-health"] {
        let s = stage(&record, name);
        assert_eq!(s["verdict"], "skip", "{s}");
        assert!(
            s["message"].as_str().unwrap().contains("no GPU runtime"),
            "{s}"
        );
    }
}

#[test]
fn a_clean_box_passes_health_with_exit_0() {
    let root = fixture("green-clean-boot");
    let out = health(&["--root", root.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_gpu_backend_that_cannot_be_used_is_a_check_that_could_not_run_exit_3() {
    let root = fixture("tinybox-green");
    let out = health(&["--root", root.to_str().unwrap(), "--backend", "cuda"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("backend cuda cannot be used"));
}

#[test]
fn health_runs_only_the_health_suite() {
    let out = health(&["smoke"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs the health suite, not smoke"));
}
