//! Runs made with the `tinyperf run` binary: the short smoke options, the runs a state
//! folder holds, their figures, and MLCommons' checkers.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

/// Settings that train ResNet-20 past 0.76 in seconds, even in a debug build. Runs draw
/// their own seed unless given one, and a drawn seed may miss this tiny set's target:
/// callers add `seed=N` with one that reaches it.
pub const SHORT_SMOKE: &[&str] = &[
    "synth_classes=2",
    "synth_per_class=32",
    "synth_val_per_class=8",
    "synth_size=16",
    "image_size=16",
    "batch_size=16",
    "eval_batch_size=16",
    "base_lr=1",
    "lars_trust_coefficient=0.02",
    "train_epochs=12",
    "target_accuracy=0.76",
];

/// A command's stdout then its stderr, for assertion messages.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The ipmitool stand-in: a script that answers `dcmi power reading` with 400 W, as a
/// BMC would.
pub fn ipmitool_stand_in() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mlperf/ipmitool-stand-in/ipmitool")
}

/// One of MLCommons' checkers (`compliance`, `system-desc`, `package`, …) on `path`,
/// through scripts/mlperf-check.sh, which sets up their Python the first time.
pub fn mlperf_check(kind: &str, path: &Path) -> Output {
    Command::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scripts/mlperf-check.sh"
    ))
    .arg(kind)
    .arg(path)
    .output()
    .expect("run scripts/mlperf-check.sh")
}

/// The folders of the runs stored under `state`, oldest first.
pub fn run_dirs(state: &Path) -> Vec<PathBuf> {
    super::run_ids(state)
        .into_iter()
        .map(|id| state.join("runs").join(id))
        .collect()
}

/// The one run recorded under `state`: its folder and record.
pub fn only_run(state: &Path) -> (PathBuf, Value) {
    let runs = run_dirs(state);
    assert_eq!(runs.len(), 1, "{runs:?}");
    let record = std::fs::read(runs[0].join("run.json")).expect("run.json");
    (runs[0].clone(), serde_json::from_slice(&record).unwrap())
}

/// The value of metric `name` of a stage of a run record.
pub fn stage_metric(stage: &Value, name: &str) -> Option<f64> {
    stage["metrics"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == name)?["value"]
        .as_f64()
}

/// [`stage_metric`], which the stage must have.
pub fn expect_metric(stage: &Value, name: &str) -> f64 {
    stage_metric(stage, name).unwrap_or_else(|| panic!("metric {name} in {stage:#}"))
}
