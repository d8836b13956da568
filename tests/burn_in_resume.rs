//! A burn-in that the box's power interrupts is taken up when the agent starts again:
//! a real agent (a real dbus-daemon, HTTP on loopback) runs a burn-in on the tinybox red
//! fixture tree with a configured benchmark stand-in (a script replaying a real MLLOG,
//! as no ImageNet is here), is killed outright while the training runs, and the next
//! agent on the same state folder starts a run (trigger `resume`) that carries over the
//! stages already finished, takes the inventory and the training again, judges the
//! limits, and says what it took up and why.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use common::{wait_for, Agent, AgentDirs, Bus};

/// Sleeps a while (long enough to be killed in), then prints a real passing MLLOG.
fn benchmark(dir: &Path) -> PathBuf {
    let log =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlperf/minimal_resnet_pass.log");
    let path = dir.join("bench.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nsleep \"${{BENCH_SLEEP:-0}}\"\nwhile IFS= read -r line; do echo \"$line\"; done < '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    path
}

fn config(bench: &Path, sleep_s: u32) -> String {
    format!(
        "[benchmarks.replay]\ncommand = [\"sh\", \"{}\"]\nenv = {{ BENCH_SLEEP = \"{sleep_s}\" }}\n",
        bench.display()
    )
}

const BURN_IN: &str = r#"{"suite": "burn-in", "options": {"benchmark": "replay",
    "burn_seconds": 1, "link_load_seconds": 1, "throttle_seconds": 1, "ramp_seconds": 0.2}}"#;

fn stage_names(record: &Value) -> Vec<String> {
    record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_burn_in_interrupted_in_its_training_resumes_after_its_last_finished_stage() {
    let bus = Bus::start();
    let work = tempfile::tempdir().unwrap();
    let tree = common::fixture_copy("tinybox-red");
    let root = tree.path().to_path_buf();
    let bench = benchmark(work.path());
    let root_arg = root.display().to_string();
    let args = ["--root", root_arg.as_str()];

    // The first boot: the training sleeps long enough to be cut off.
    let dirs = AgentDirs::new(&config(&bench, 600));
    let mut agent = Agent::start_with_args(&bus, &dirs, &args);
    let first = agent.start_run(BURN_IN);
    agent.wait_stage("external");
    let before = agent.run_record(&first);
    let finished_before = stage_names(&before);
    assert!(
        finished_before.contains(&"power-ramp".to_string()),
        "{before:#}"
    );
    // The power goes once the record on disk holds every stage finished so far.
    let on_disk = dirs.state_dir().join("runs").join(&first).join("run.json");
    wait_for(Duration::from_secs(30), "the record on disk", || {
        let record: Value = serde_json::from_slice(&std::fs::read(&on_disk).ok()?).ok()?;
        (stage_names(&record) == finished_before).then_some(())
    });
    agent.kill();

    // The box comes back: the same state folder, a benchmark that no longer sleeps.
    std::fs::write(dirs.config(), {
        let text = std::fs::read_to_string(dirs.config()).unwrap();
        text.replace("BENCH_SLEEP = \"600\"", "BENCH_SLEEP = \"0\"")
    })
    .unwrap();
    let mut agent = Agent::start_with_args(&bus, &dirs, &args);
    let interrupted = agent.run_record(&first);
    assert_eq!(interrupted["state"], "interrupted", "{interrupted:#}");
    let recorded = stage_names(&interrupted);
    assert_eq!(recorded, finished_before);
    let resumed_id = wait_for(Duration::from_secs(30), "the resumed run", || {
        let runs = agent.get_json("/api/v1/runs");
        runs["runs"]
            .as_array()?
            .iter()
            .find(|r| r["trigger"] == "resume")
            .and_then(|r| r["id"].as_str().map(str::to_string))
    });
    let resumed = agent.wait_run_ended(&resumed_id, Duration::from_secs(300), "the resumed run");
    assert_eq!(resumed["resumed_from"], first.as_str(), "{resumed:#}");
    assert_eq!(resumed["suite"], "burn-in");
    let summary = resumed["summary"]["findings"].to_string();
    assert!(
        summary.contains(&format!("takes up run {first}")),
        "{summary}"
    );
    assert!(
        summary.contains(recorded.last().unwrap().as_str()),
        "{summary}"
    );

    // Every stage once, in order; the finished ones carried over as they ended, the
    // inventory and the training run again.
    let names = stage_names(&resumed);
    assert_eq!(
        names,
        [
            "inventory",
            "kernel-messages",
            "gpu-gemm",
            "gpu-corruption",
            "gpu-memory",
            "link-health",
            "throttling",
            "power-pulse",
            "power-ramp",
            "external",
            "burn-in-limits"
        ],
        "{resumed:#}"
    );
    for stage in resumed["stages"].as_array().unwrap() {
        let name = stage["name"].as_str().unwrap();
        let carried = stage["findings"]
            .to_string()
            .contains(&format!("carried over from run {first}"));
        let expect_carried =
            recorded.iter().any(|n| n == name) && name != "inventory" && name != "external";
        assert_eq!(carried, expect_carried, "{name}: {stage:#}");
        if expect_carried {
            let earlier = interrupted["stages"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["name"] == name)
                .unwrap();
            assert_eq!(stage["started_at"], earlier["started_at"], "{name}");
        }
    }
    let external = &resumed["stages"][9];
    assert_eq!(external["verdict"], "pass", "{external:#}");
    let limits = &resumed["stages"][10];
    let time = limits["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "training-time")
        .unwrap();
    assert_eq!(time["verdict"], "pass", "{limits:#}");
    agent.stop();

    // A clean restart takes nothing up again.
    let mut agent = Agent::start_with_args(&bus, &dirs, &args);
    std::thread::sleep(Duration::from_secs(2));
    let runs = agent.get_json("/api/v1/runs");
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2, "{runs:#}");
    agent.stop();
}

#[test]
fn with_resume_after_reboot_off_the_interrupted_burn_in_stays_interrupted() {
    let bus = Bus::start();
    let work = tempfile::tempdir().unwrap();
    let tree = common::fixture_copy("tinybox-red");
    let root = tree.path().to_path_buf();
    let bench = benchmark(work.path());
    let root_arg = root.display().to_string();
    let args = ["--root", root_arg.as_str()];
    let dirs = AgentDirs::new(&format!(
        "resume_after_reboot = false\n{}",
        config(&bench, 600)
    ));
    let mut agent = Agent::start_with_args(&bus, &dirs, &args);
    let first = agent.start_run(BURN_IN);
    agent.wait_stage("external");
    agent.kill();
    let mut agent = Agent::start_with_args(&bus, &dirs, &args);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(agent.run_record(&first)["state"], "interrupted");
    assert_eq!(agent.status()["state"], "idle");
    let runs = agent.get_json("/api/v1/runs");
    assert_eq!(runs["runs"].as_array().unwrap().len(), 1, "{runs:#}");
    agent.stop();
}
