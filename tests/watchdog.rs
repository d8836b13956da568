//! The supervisor's watchdog against a real agent and real workers: a worker stopped
//! with SIGSTOP is ended at its stage's deadline (SIGTERM, then SIGKILL), the run ends
//! `error` naming the stage and what was last heard, and the agent takes the next run.

mod common;

use std::time::{Duration, Instant};

use common::{wait_for, AgentOnBus};

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}
const SIGSTOP: i32 = 19;

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

const ACCEPTANCE: &str = r#"{"suite": "acceptance", "options": {"stage_timeout_s": STAGE,
    "gemm_size": 128, "gemm_seconds": 2, "gemm_min_fraction": 0, "train_steps": 1,
    "train_warmup": 0, "train_batch": 2, "train_image_size": 32}}"#;

#[test]
fn a_stopped_worker_ends_in_error_at_its_deadline_and_the_next_run_starts() {
    let running = AgentOnBus::start("cancel_grace_s = 1");
    let agent = &running.agent;
    let deadline = Duration::from_secs(6);
    let grace = Duration::from_secs(1);
    let id = agent.start_run(&ACCEPTANCE.replace("STAGE", "6"));
    agent.wait_stage("cpu-gemm");
    let stage_seen = Instant::now();
    unsafe {
        kill(worker_pid(&id), SIGSTOP);
    }
    let record = agent.wait_run_ended(
        &id,
        deadline + grace + Duration::from_secs(10),
        "the run to end",
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
    assert_eq!(agent.status()["state"], "idle");

    let next = agent.start_run(r#"{"suite": "inventory"}"#);
    let done = agent.wait_run_ended(&next, Duration::from_secs(30), "the next run");
    assert_eq!(done["state"], "passed", "{done}");
}

#[test]
fn a_stopped_worker_can_be_cancelled() {
    let running = AgentOnBus::start("cancel_grace_s = 1");
    let agent = &running.agent;
    let id = agent.start_run(&ACCEPTANCE.replace("STAGE", "600"));
    agent.wait_stage("cpu-gemm");
    unsafe {
        kill(worker_pid(&id), SIGSTOP);
    }
    let asked = Instant::now();
    let (code, reply) = agent.post_with_token(&format!("/api/v1/runs/{id}/cancel"), None);
    assert_eq!(code, 202, "{reply}");
    let record = agent.wait_run_ended(&id, Duration::from_secs(10), "the cancel");
    assert_eq!(record["state"], "cancelled", "{record}");
    assert!(
        asked.elapsed() < Duration::from_secs(4),
        "{:?}",
        asked.elapsed()
    );
}
