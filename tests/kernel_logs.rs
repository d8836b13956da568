//! Kernel logs copied from public bug reports (`tests/fixtures/kernel-logs/`, each with its
//! source), judged by `tinyperf health --kernel-log` as a person holding one would: every
//! fault each case lists is found with its class, no serious fault is found that the case
//! does not list, and the verdict is the case's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    source: String,
    what: String,
    shape: String,
    verdict: String,
    #[serde(default)]
    expect: Vec<Expected>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expected {
    kind: String,
    class: String,
    code: Option<u64>,
    address: Option<String>,
    severity: Option<String>,
}

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kernel-logs")
}

fn cases() -> Vec<(String, Case)> {
    let mut cases: Vec<(String, Case)> = std::fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| {
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            let case: Case = toml::from_str(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{name}.toml: {e}"));
            (name, case)
        })
        .collect();
    cases.sort_by(|a, b| a.0.cmp(&b.0));
    cases
}

fn judge(log: &Path) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["health", "--json", "--kernel-log"])
        .arg(log)
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: {}",
            log.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), json)
}

/// The same device, whatever function the message names (an Xid names none).
fn same_device(a: &str, b: &str) -> bool {
    a.rsplit_once('.').map(|(d, _)| d) == b.rsplit_once('.').map(|(d, _)| d)
}

fn matches(event: &Value, expected: &Expected) -> bool {
    event["kind"] == expected.kind.as_str()
        && event["class"] == expected.class.as_str()
        && expected.code.is_none_or(|c| event["code"] == c)
        && expected
            .severity
            .as_deref()
            .is_none_or(|s| event["severity"] == s)
        && match &expected.address {
            Some(address) => event["address"].as_str() == Some(address.as_str()),
            None => true,
        }
}

/// Whether a serious `event` is one the case lists: the same kind on the same device (a
/// GPU's Xid 79 also covers its "fallen off the bus" line).
fn listed(event: &Value, case: &Case) -> bool {
    let device = event["address"].as_str();
    case.expect.iter().any(|e| {
        let same_place = match (device, e.address.as_deref()) {
            (Some(a), Some(b)) => same_device(a, b),
            (None, None) => true,
            // An address found where the case names none is a finer judgement, not a
            // wrong one; no address found where the case names one is caught by `matches`.
            (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let same_kind = e.kind == event["kind"].as_str().unwrap_or("")
            || (event["kind"] == "fallen_off_the_bus" && e.kind == "xid" && e.code == Some(79));
        same_place && same_kind
    })
}

#[test]
fn every_real_log_is_judged_as_its_case_says() {
    let cases = cases();
    assert!(cases.len() >= 30, "the corpus has {} cases", cases.len());
    let mut failures = Vec::new();
    for (name, case) in &cases {
        assert!(
            case.source.starts_with("https://"),
            "{name}: source {}",
            case.source
        );
        assert!(!case.what.is_empty() && !case.shape.is_empty(), "{name}");
        let (status, judged) = judge(&corpus().join(format!("{name}.log")));
        let events = judged["events"].as_array().unwrap();
        let mut problems = Vec::new();
        for expected in &case.expect {
            if !events.iter().any(|e| matches(e, expected)) {
                problems.push(format!("missed {expected:?}"));
            }
        }
        for event in events.iter().filter(|e| e["class"] == "serious") {
            if !listed(event, case) {
                problems.push(format!(
                    "found an unlisted {} on {}: {}",
                    event["kind"], event["address"], event["message"]
                ));
            }
        }
        if judged["verdict"] != case.verdict.as_str() {
            problems.push(format!(
                "verdict {} where the case says {}",
                judged["verdict"], case.verdict
            ));
        }
        let want_status = i32::from(case.verdict == "fail");
        if status != want_status {
            problems.push(format!("exit status {status}, not {want_status}"));
        }
        if !problems.is_empty() {
            failures.push(format!("{name}:\n  {}", problems.join("\n  ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_corpus_covers_every_class_and_kind_the_checks_know() {
    let cases = cases();
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut xids = std::collections::BTreeSet::new();
    let mut severities = std::collections::BTreeSet::new();
    for (_, case) in &cases {
        for e in &case.expect {
            *by_kind.entry(e.kind.clone()).or_default() += 1;
            if let Some(code) = e.code {
                xids.insert(code);
            }
            if let Some(severity) = &e.severity {
                severities.insert(severity.clone());
            }
        }
    }
    assert!(xids.len() >= 10, "Xids of {} kinds: {xids:?}", xids.len());
    assert_eq!(
        severities.into_iter().collect::<Vec<_>>(),
        ["correctable", "fatal", "nonfatal"]
    );
    for kind in [
        "xid",
        "fallen_off_the_bus",
        "init_failure",
        "firmware_load",
        "ring_timeout",
        "ring_reset",
        "gpu_reset",
        "smu_hang",
        "mes_hang",
        "aer",
    ] {
        assert!(by_kind.contains_key(kind), "no case of {kind}: {by_kind:?}");
    }
    let clean = cases.iter().filter(|(_, c)| c.verdict == "pass").count();
    assert!(clean >= 2, "{clean} clean logs");
    assert!(
        cases
            .iter()
            .any(|(n, c)| n.starts_with("vfio") && c.verdict == "pass"),
        "a vfio reset that is no fault"
    );
}

#[test]
fn a_log_too_large_to_read_is_refused_naming_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.log");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(257 << 20).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["health", "--kernel-log"])
        .arg(&path)
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("256 MiB"), "{stderr}");
}

#[test]
fn a_missing_log_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["health", "--kernel-log", "/nonexistent/kern.log"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/kern.log"));
}
