//! The supervisor's watchdog against a real agent and real workers: a worker stopped
//! with SIGSTOP is ended at its stage's deadline (SIGTERM, then SIGKILL), the run ends
//! `error` naming the stage and what was last heard, and the agent takes the next run.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{wait_for, Agent, AgentDirs, Bus, TOKEN};
use serde_json::Value;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
const SIGSTOP: i32 = 19;

fn curl(args: &[&str]) -> (u16, Value) {
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

fn start_run(agent: &Agent, body: &str) -> String {
    let (code, reply) = curl(&[
        "-X",
        "POST",
        "-H",
        &format!("Authorization: Bearer {TOKEN}"),
        "--json",
        body,
        &format!("http://{}/api/v1/runs", agent.http),
    ]);
    assert_eq!(code, 202, "{reply}");
    reply["id"].as_str().unwrap().to_string()
}

fn status(agent: &Agent) -> Value {
    curl(&[&format!("http://{}/api/v1/status", agent.http)]).1
}

fn run(agent: &Agent, id: &str) -> Value {
    curl(&[&format!("http://{}/api/v1/runs/{id}", agent.http)]).1
}

/// The worker of run `id`: the `tinyperf run` process whose command line names it.
fn worker_pid(id: &str) -> i32 {
    wait_for(Duration::from_secs(10), "the worker process", || {
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .find_map(|entry| {
                let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
                let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
                let cmdline = String::from_utf8_lossy(&cmdline);
                (cmdline.contains("--events") && cmdline.contains(id)).then_some(pid)
            })
    })
}

/// Waits until the run in progress is in `stage`.
fn wait_stage(agent: &Agent, stage: &str) {
    wait_for(Duration::from_secs(60), stage, || {
        (status(agent)["current_stage"] == stage).then_some(())
    });
}

const ACCEPTANCE: &str = r#"{"suite": "acceptance", "options": {"stage_timeout_s": STAGE,
    "gemm_size": 128, "gemm_seconds": 2, "gemm_min_fraction": 0, "train_steps": 1,
    "train_warmup": 0, "train_batch": 2, "train_image_size": 32}}"#;

#[test]
fn a_stopped_worker_ends_in_error_at_its_deadline_and_the_next_run_starts() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("cancel_grace_s = 1");
    let agent = Agent::start(&bus, &dirs);
    let deadline = Duration::from_secs(6);
    let grace = Duration::from_secs(1);
    let id = start_run(&agent, &ACCEPTANCE.replace("STAGE", "6"));
    wait_stage(&agent, "cpu-gemm");
    let stage_seen = Instant::now();
    unsafe {
        kill(worker_pid(&id), SIGSTOP);
    }
    let record = wait_for(
        deadline + grace + Duration::from_secs(10),
        "the run to end",
        || {
            let r = run(&agent, &id);
            (r["state"] != "running").then_some(r)
        },
    );
    let took = stage_seen.elapsed();
    assert!(
        took <= deadline + grace + Duration::from_secs(2),
        "ended {took:?} after the stage started"
    );
    assert_eq!(record["state"], "error", "{record}");
    let message = record["summary"]["message"].as_str().unwrap();
    assert!(
        message.contains("stage cpu-gemm passed its deadline of 6 s"),
        "{message}"
    );
    assert!(message.contains("last heard: "), "{message}");
    assert!(message.contains("the worker was stopped"), "{message}");
    assert_eq!(status(&agent)["state"], "idle");

    let next = start_run(&agent, r#"{"suite": "inventory"}"#);
    let done = wait_for(Duration::from_secs(30), "the next run", || {
        let r = run(&agent, &next);
        (r["state"] != "running").then_some(r)
    });
    assert_eq!(done["state"], "passed", "{done}");
}

#[test]
fn a_stopped_worker_can_be_cancelled() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("cancel_grace_s = 1");
    let agent = Agent::start(&bus, &dirs);
    let id = start_run(&agent, &ACCEPTANCE.replace("STAGE", "600"));
    wait_stage(&agent, "cpu-gemm");
    unsafe {
        kill(worker_pid(&id), SIGSTOP);
    }
    let asked = Instant::now();
    let (code, reply) = curl(&[
        "-X",
        "POST",
        "-H",
        &format!("Authorization: Bearer {TOKEN}"),
        &format!("http://{}/api/v1/runs/{id}/cancel", agent.http),
    ]);
    assert_eq!(code, 202, "{reply}");
    let record = wait_for(Duration::from_secs(10), "the cancel", || {
        let r = run(&agent, &id);
        (r["state"] != "running").then_some(r)
    });
    assert_eq!(record["state"], "cancelled", "{record}");
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "{:?}",
        asked.elapsed()
    );
}
