//! `tinyperf health` on the kernel's own file formats: fixture trees whose kernel log
//! holds Xids and falls off the bus, and a clean one. Without a GPU runtime the GPU
//! checks skip with the reason, and a GPU backend that cannot be used is a check that
//! could not run (exit 3), never a failed GPU (exit 1).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

mod common;

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
    let checks = messages["checks"].as_array().unwrap();
    let verdicts: Vec<(String, String)> = checks
        .iter()
        .filter(|c| c["subject"].is_string())
        .map(|c| {
            (
                c["subject"].as_str().unwrap().to_string(),
                c["verdict"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let with = |verdict: &str| -> Vec<&str> {
        verdicts
            .iter()
            .filter(|(_, v)| v == verdict)
            .map(|(s, _)| s.as_str())
            .collect()
    };
    assert_eq!(
        with("fail"),
        ["0000:41:00.0", "0000:81:00.0"],
        "{verdicts:?}"
    );
    assert_eq!(verdicts.len(), 6, "a check per GPU");
    // An application's Xid, and a memory error the GPU contained, warn, never fail.
    assert_eq!(
        with("warn"),
        ["0000:21:00.0", "0000:61:00.0"],
        "{verdicts:?}"
    );
    // A serious Xid for an address that is no GPU of this box (one that left the bus)
    // fails a check of the box, saying so.
    let elsewhere: Vec<&Value> = checks
        .iter()
        .filter(|c| c["subject"].is_null() && c["name"] == "kernel messages")
        .collect();
    assert_eq!(elsewhere.len(), 1, "{elsewhere:?}");
    assert_eq!(elsewhere[0]["verdict"], "fail");
    assert!(
        elsewhere[0]["found"]
            .as_str()
            .unwrap()
            .contains("0000:f1:00.0 (no GPU at that address"),
        "{elsewhere:?}"
    );
    // The health result beside the record, in the shape its schema gives.
    let result = health_result(state.path());
    assert_conforms(&result, &schema(), &schema());
    assert_eq!(result["exit_status"], 1);
    let outcomes: Vec<(&str, &str)> = result["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["address"].as_str().unwrap(),
                g["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(outcomes.len(), 6, "{outcomes:?}");
    assert!(outcomes.contains(&("0000:41:00.0", "fail")), "{outcomes:?}");
    assert!(outcomes.contains(&("0000:01:00.0", "pass")), "{outcomes:?}");
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

fn schema() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/health-result.schema.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Holds `value` to the parts of JSON Schema the health result's schema uses: required
/// keys, types, enums, constants and references into `$defs`.
fn assert_conforms(value: &Value, schema: &Value, root: &Value) {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.trim_start_matches("#/$defs/");
        return assert_conforms(value, &root["$defs"][name], root);
    }
    if let Some(constant) = schema.get("const") {
        assert_eq!(value, constant);
    }
    if let Some(choices) = schema["enum"].as_array() {
        assert!(choices.contains(value), "{value} not in {choices:?}");
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !types.is_empty() {
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        assert!(types.contains(&kind), "{value} is not {types:?}");
    }
    for key in schema["required"].as_array().into_iter().flatten() {
        let key = key.as_str().unwrap();
        assert!(value.get(key).is_some(), "missing {key} in {value}");
    }
    if let Some(properties) = schema["properties"].as_object() {
        for (key, sub) in properties {
            if let Some(v) = value.get(key) {
                assert_conforms(v, sub, root);
            }
        }
    }
    if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
        for item in array {
            assert_conforms(item, items, root);
        }
    }
}

/// The health result `tinyperf health --state-dir` wrote beside the run's record.
fn health_result(state: &Path) -> Value {
    let runs: Vec<PathBuf> = std::fs::read_dir(state.join("runs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    serde_json::from_slice(&std::fs::read(runs[0].join("health.json")).unwrap()).unwrap()
}

fn gpu_check<'a>(result: &'a Value, gpu: &str, check: &str) -> &'a Value {
    result["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["address"] == gpu)
        .and_then(|g| {
            g["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["check"] == check)
        })
        .unwrap_or_else(|| panic!("no {check} check on {gpu}: {result}"))
}

/// A red box's tree where one GPU's power limit is set below its default and others'
/// RAS counts hold the given memory errors (`ue: N` / `ce: N`, as amdgpu writes them).
fn red_box_with(capped: &str, ras: &[(&str, &str)]) -> tempfile::TempDir {
    let tree = common::fixture_copy("tinybox-red");
    let device = |gpu: &str| tree.path().join("sys/bus/pci/devices").join(gpu);
    let hwmon = std::fs::read_dir(device(capped).join("hwmon"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::write(hwmon.join("power1_cap"), "300000000\n").unwrap();
    for (gpu, counts) in ras {
        std::fs::create_dir_all(device(gpu).join("ras")).unwrap();
        std::fs::write(device(gpu).join("ras/umc_err_count"), counts).unwrap();
    }
    tree
}

#[test]
fn a_capped_gpu_and_corrected_memory_errors_warn_and_health_still_exits_0() {
    let tree = red_box_with("0000:23:00.0", &[("0000:43:00.0", "ue: 0\nce: 12\n")]);
    let state = tempfile::tempdir().unwrap();
    let out = health(&[
        "--root",
        tree.path().to_str().unwrap(),
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let result = health_result(state.path());
    let capped = gpu_check(&result, "0000:23:00.0", "power limit");
    assert_eq!(capped["outcome"], "warn", "{capped}");
    assert!(
        capped["found"]
            .as_str()
            .unwrap()
            .contains("capped at 300 W"),
        "{capped}"
    );
    let corrected = gpu_check(&result, "0000:43:00.0", "memory errors");
    assert_eq!(corrected["outcome"], "warn", "{corrected}");
    assert!(
        corrected["found"]
            .as_str()
            .unwrap()
            .contains("12 corrected"),
        "{corrected}"
    );
    let gpus = result["gpus"].as_array().unwrap();
    let outcome = |gpu: &str| gpus.iter().find(|g| g["address"] == gpu).unwrap()["outcome"].clone();
    assert_eq!(outcome("0000:23:00.0"), "warn");
    assert_eq!(outcome("0000:43:00.0"), "warn");
    assert_eq!(outcome("0000:63:00.0"), "pass");
    assert!(stdout.contains("0000:23:00.0  WARN"), "{stdout}");
    assert_eq!(record(state.path())["state"], "passed");
}

#[test]
fn an_uncorrected_memory_error_fails_the_gpu_that_reports_it() {
    let tree = red_box_with("0000:23:00.0", &[("0000:83:00.0", "ue: 1\nce: 0\n")]);
    let state = tempfile::tempdir().unwrap();
    let out = health(&[
        "--root",
        tree.path().to_str().unwrap(),
        "--state-dir",
        state.path().to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let result = health_result(state.path());
    let failed = gpu_check(&result, "0000:83:00.0", "memory errors");
    assert_eq!(failed["outcome"], "fail", "{failed}");
    assert!(
        failed["found"].as_str().unwrap().contains("1 uncorrected"),
        "{failed}"
    );
}
