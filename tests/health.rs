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
    // The health result beside the record, in the shape its schema gives.
    let run_dir = std::fs::read_dir(state.path().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let result: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("health.json")).unwrap()).unwrap();
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
