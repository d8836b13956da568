//! An external benchmark followed live through a real agent: a replay of an MLLOG as
//! tinygrad's `model_train.py` writes it (two phases appending to `result_<SEED>.txt`,
//! step lines on stdout, a progress bar on stderr) configured as `[benchmarks.NAME]`,
//! started over HTTP and held after its first epoch while HTTP status, D-Bus and the
//! status page are read.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{wait_for, AgentOnBus};

const BUS_NAME: &str = "org.tinyperf.Agent1";
const OBJECT_PATH: &str = "/org/tinyperf/Agent1";
const INTERFACE: &str = "org.tinyperf.Agent1";

fn minimal_log() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlperf/minimal_resnet_pass.log")
}

/// The replay: the init phase (submission keys through `init_stop`), then the run
/// phase, each line appended to `result_${SEED}.txt` with a step line on stdout and a
/// bar redrawn on stderr; after the first evaluation it waits for the gate file.
fn replay_script(dir: &Path) -> PathBuf {
    let path = dir.join("model_train.sh");
    fs::write(
        &path,
        r#"#!/bin/sh
log="$1"; gate="$2"; out="result_${SEED}.txt"
phase() {
  sed -n "$1,$2p" "$log" | while IFS= read -r line; do
    echo "$line" >> "$out"
    echo "    1  240.00 ms run, 1.23 loss"
    printf 'loss: 1.23 |#####     | 50%%\r' >&2
    case "$line" in
      *'"eval_accuracy"'*) while [ ! -e "$gate" ]; do sleep 0.05; done ;;
    esac
  done
}
phase 1 8
phase 9 29
"#,
    )
    .unwrap();
    path
}

fn get_property(running: &AgentOnBus, name: &str) -> String {
    let out = Command::new("busctl")
        .arg(format!("--address={}", running.bus.address))
        .args(["get-property", BUS_NAME, OBJECT_PATH, INTERFACE, name])
        .stdin(Stdio::null())
        .output()
        .expect("busctl runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn an_external_run_shows_its_progress_over_http_dbus_and_the_page() {
    let work = tempfile::tempdir().unwrap();
    let script = replay_script(work.path());
    let gate = work.path().join("gate");
    let config = format!(
        "[benchmarks.tinygrad-replay]\n\
         command = [\"sh\", \"{}\", \"{}\", \"{}\"]\n\
         cwd = \"{}\"\n\
         env = {{ SEED = \"42\" }}\n\
         mllog = \"result_42.txt\"\n\
         epochs = 2\n",
        script.display(),
        minimal_log().display(),
        gate.display(),
        work.path().display()
    );
    let running = AgentOnBus::start(&config);
    let agent = &running.agent;
    let body = r#"{"suite": "external", "options": {"benchmark": "tinygrad-replay"}}"#;
    let id = agent.start_run(body);

    // Held after epoch 1 of 2 and its evaluation.
    let status = wait_for(Duration::from_secs(60), "progress in the status", || {
        let status = agent.status();
        let message = status["message"].as_str().unwrap_or_default().to_string();
        (status["progress"].as_f64() > Some(0.0) && message.contains("eval top-1"))
            .then_some(status)
    });
    assert_eq!(status["current_run"], id.as_str());
    assert_eq!(status["current_stage"], "external");
    assert!(
        (status["progress"].as_f64().unwrap() - 0.5).abs() < 1e-9,
        "{status:#}"
    );
    assert_eq!(status["message"], "epoch 1 eval top-1 0.7595");

    assert_eq!(get_property(&running, "Progress"), "d 0.5");
    assert_eq!(get_property(&running, "CurrentStage"), "s \"external\"");
    assert_eq!(
        get_property(&running, "Message"),
        "s \"epoch 1 eval top-1 0.7595\""
    );

    let live = agent.get_json("/api/v1/live");
    let points = live["train"].as_array().unwrap();
    assert_eq!(points.len(), 1, "{live:#}");
    assert_eq!(points[0]["epoch"], 1);
    assert_eq!(points[0]["planned_epochs"], 2);
    assert_eq!(points[0]["eval_accuracy"], 0.7595);
    assert!(points[0].get("loss").is_none(), "{live:#}");

    let (code, page) = common::curl::curl(&[&agent.url("/")]);
    assert_eq!(code, 200);
    assert!(page.contains("<dd id=\"epoch\">1 of 2</dd>"), "{page}");
    assert!(!page.contains("<dd id=\"elapsed\">—</dd>"), "{page}");
    assert!(page.contains("epoch 1 eval top-1 0.7595"), "{page}");
    assert!(page.contains("value=\"50\""), "{page}");

    fs::write(&gate, b"").unwrap();
    let record = agent.wait_run_ended(&id, Duration::from_secs(60), "the replay");
    assert_eq!(record["state"], "passed", "{record:#}");

    // The same seed again: the file now holds the first run's lines, never read again.
    wait_for(Duration::from_secs(30), "the agent idle", || {
        (agent.status()["state"] == "idle").then_some(())
    });
    assert_eq!(get_property(&running, "Message"), "s \"\"");
    let second = agent.start_run(body);
    let record = agent.wait_run_ended(&second, Duration::from_secs(60), "the second replay");
    assert_eq!(record["state"], "passed", "{record:#}");
    let run_dir = agent.state_dir.join("runs").join(&second);
    let mllog = fs::read_to_string(run_dir.join("mllog.txt")).unwrap();
    assert_eq!(mllog.lines().count(), 29);
    assert_eq!(mllog.matches("\"run_start\"").count(), 1);
    let output = fs::read_to_string(run_dir.join("external.log")).unwrap();
    assert_eq!(output.matches("240.00 ms run").count(), 29, "{output}");
    assert!(output.contains("loss: 1.23 |#####"), "{output}");
}
