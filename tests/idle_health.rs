//! The idle health pass under a real agent (a real dbus-daemon, HTTP on loopback): with
//! `idle_health_every` set, the agent starts a pass of its own (trigger `schedule`)
//! once the box has been idle for `idle_health_after`; a run somebody starts while it
//! goes makes it give way at once: it ends `cancelled`, saying for what, and theirs runs.

mod common;

use std::time::Duration;

use common::{wait_for, Agent, AgentDirs, Bus};

/// The pass trains the smoke suite's small ResNet for many epochs, so that it is still
/// going when the test starts a run of its own.
const CONFIG: &str = r#"
idle_health_every = "1h"
idle_health_after = "1s"
idle_health_suite = "smoke"
idle_health_options = { backend = "cpu", train_epochs = 100, synth_classes = 2 }
"#;

#[test]
fn an_idle_pass_runs_on_its_own_and_gives_way_to_a_started_run() {
    let bus = Bus::start();
    let dirs = AgentDirs::new(CONFIG);
    let mut agent = Agent::start(&bus, &dirs);
    let pass = wait_for(Duration::from_secs(60), "the idle pass to start", || {
        let status = agent.status();
        status["current_run"].as_str().map(str::to_string)
    });
    let record = agent.run_record(&pass);
    assert_eq!(record["trigger"], "schedule", "{record:#}");
    assert_eq!(record["suite"], "smoke", "{record:#}");

    // Somebody wants the box: their run is accepted, not refused as busy.
    let started = std::time::Instant::now();
    let theirs = agent.start_run(r#"{"suite": "inventory"}"#);
    assert_ne!(theirs, pass);
    let yielded = agent.wait_run_ended(&pass, Duration::from_secs(30), "the pass to stop");
    assert_eq!(yielded["state"], "cancelled", "{yielded:#}");
    let message = yielded["summary"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("gave way to inventory, asked for over http"),
        "{yielded:#}"
    );
    let record = agent.wait_run_ended(&theirs, Duration::from_secs(120), "their run");
    assert_eq!(record["trigger"], "http", "{record:#}");
    assert_eq!(record["state"], "passed", "{record:#}");
    assert!(started.elapsed() < Duration::from_secs(60));

    // The pass waits its hour before coming again: the box stays idle.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(agent.status()["state"], "idle");
    let runs = agent.get_json("/api/v1/runs");
    assert_eq!(runs["runs"].as_array().unwrap().len(), 2, "{runs:#}");
    let log = agent.stop();
    assert!(log.contains("idle health pass started"), "{log}");
}

#[test]
fn without_idle_health_every_the_agent_runs_nothing_on_its_own() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let mut agent = Agent::start(&bus, &dirs);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(agent.status()["state"], "idle");
    let runs = agent.get_json("/api/v1/runs");
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "{runs:#}");
    agent.stop();
}
