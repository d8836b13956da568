//! An external benchmark under the agent: configured in the agent's config by name,
//! started over HTTP, its MLLOG's epochs and evaluations arriving as live progress on the
//! event stream, its score in the run record; cancel over HTTP stopping it and the
//! processes it started; a worker killed outright taking the benchmark's processes with
//! it; and a command the config does not name refused.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::in_process::{
    get, next_event, open_events, post_json, serve_core, wait_finished, Served, Serving,
};
use common::runs::expect_metric;
use common::TOKEN;
use serde_json::{json, Value};
use tinyperf::agent::config::Config;
use tokio::time::{sleep, Instant};

/// An agent whose config names `benchmarks` (name → the external suite's options).
async fn start(benchmarks: &[(&str, Value)]) -> Served {
    let config = Config {
        cancel_grace: Duration::from_secs(2),
        benchmarks: benchmarks
            .iter()
            .map(|(name, options)| (name.to_string(), options.as_object().unwrap().clone()))
            .collect(),
        ..Config::default()
    };
    let serving = Serving {
        token: Some(TOKEN.to_string()),
        ..Serving::default()
    };
    serve_core(config, serving, |_| {}).await
}

/// Starts a run with the request `body`, which must be accepted: its id.
async fn start_run(addr: SocketAddr, body: &Value) -> String {
    let started = post_json(addr, "/api/v1/runs", Some(TOKEN), &body.to_string()).await;
    assert_eq!(started.status, 202, "{}", started.text());
    started.json()["id"].as_str().unwrap().to_string()
}

/// Prints the minimal passing MLLOG, pausing after each epoch and evaluation as a
/// real benchmark would.
fn benchmark(dir: &Path) -> PathBuf {
    let log = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/mlperf/minimal_resnet_pass.log");
    let path = dir.join("bench.sh");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nwhile IFS= read -r line; do\n  echo \"$line\"\n  case \"$line\" in *epoch_stop*|*eval_accuracy*) sleep 1 ;; esac\ndone < '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_benchmark_runs_under_the_agent_with_live_progress() {
    let dir = tempfile::tempdir().unwrap();
    let bench = benchmark(dir.path());
    let server = start(&[(
        "replay",
        json!({"command": ["sh", bench], "mllog": "stdout"}),
    )])
    .await;
    let addr = server.addr;
    let mut events = open_events(addr).await;
    let id = start_run(
        addr,
        &json!({"suite": "external", "options": {"benchmark": "replay"}}),
    )
    .await;
    let mut messages = Vec::new();
    loop {
        let (name, data) = next_event(&mut events).await;
        if name == ":" {
            continue;
        }
        let event: Value = serde_json::from_str(&data).unwrap_or(Value::Null);
        if let Some(m) = event["message"].as_str() {
            messages.push(m.to_string());
        }
        if event["type"] == "run_finished" {
            break;
        }
    }
    assert!(
        messages.iter().any(|m| m.contains("epoch 1 done")),
        "{messages:?}"
    );
    assert!(
        messages.iter().any(|m| m.contains("eval top-1 0.7595")),
        "{messages:?}"
    );
    let record = wait_finished(addr, &id, Duration::from_secs(60)).await;
    assert_eq!(record["state"], "passed", "{record:#}");
    let minutes = expect_metric(&record["stages"][0], "time_to_train_min");
    assert!((minutes - 217001.0 / 60000.0).abs() < 1e-9);
}

fn alive(pid: u32) -> bool {
    common::process_alive(pid as i32)
}

/// An agent running the benchmark `sleeper`, a shell that starts `sleep 300` and waits
/// for it: the agent, the run's id and the pid of `sleep`, once it runs.
async fn start_sleeper(dir: &Path) -> (Served, String, u32) {
    let pid_file = dir.join("child.pid");
    let line = format!("sleep 300 & echo $! > '{}'; wait", pid_file.display());
    let server = start(&[("sleeper", json!({"command": line}))]).await;
    let id = start_run(
        server.addr,
        &json!({"suite": "external", "options": {"benchmark": "sleeper"}}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Ok(pid)) = std::fs::read_to_string(&pid_file).map(|t| t.trim().parse()) {
            return (server, id, pid);
        }
        assert!(Instant::now() < deadline, "the benchmark never started");
        sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_over_http_stops_the_benchmark_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let (server, id, child) = start_sleeper(dir.path()).await;
    let addr = server.addr;
    assert!(alive(child));
    let answer = post_json(addr, &format!("/api/v1/runs/{id}/cancel"), Some(TOKEN), "").await;
    assert!(answer.status < 300, "{} {}", answer.status, answer.text());
    let record = wait_finished(addr, &id, Duration::from_secs(60)).await;
    assert_eq!(record["state"], "cancelled", "{record:#}");
    let gone = Instant::now() + Duration::from_secs(15);
    while alive(child) && Instant::now() < gone {
        sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !alive(child),
        "the benchmark's child {child} outlived the cancel"
    );
}

/// The parent of `pid`, from `/proc/<pid>/stat`.
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    stat.rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_outright_takes_the_benchmarks_processes_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let (server, id, child) = start_sleeper(dir.path()).await;
    let addr = server.addr;
    // sleep's parent is the benchmark's shell, in a process group of its own; the
    // shell's parent is the worker. SIGKILL gives the worker no chance to stop it.
    let shell = parent(child);
    let worker = parent(shell);
    assert!(
        std::fs::read_to_string(format!("/proc/{worker}/cmdline"))
            .unwrap()
            .contains("--events"),
        "{worker} is not the worker"
    );
    assert_ne!(
        nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(child as i32))).unwrap(),
        nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(worker as i32))).unwrap(),
        "the benchmark shares the worker's group, so this checks nothing"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let record = wait_finished(addr, &id, Duration::from_secs(60)).await;
    assert_ne!(record["state"], "passed", "{record:#}");
    let gone = Instant::now() + Duration::from_secs(15);
    while (alive(child) || alive(shell)) && Instant::now() < gone {
        sleep(Duration::from_millis(100)).await;
    }
    assert!(!alive(shell), "the benchmark {shell} outlived its worker");
    assert!(
        !alive(child),
        "the benchmark's child {child} outlived its worker"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_the_config_does_not_name_is_refused_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let server = start(&[("known", json!({"command": ["true"]}))]).await;
    let addr = server.addr;
    let line = format!("touch '{}'", marker.display());
    // A burn-in trains with an external benchmark on the same terms.
    let refused = [
        json!({"command": line}),
        json!({"benchmark": "unknown"}),
        json!({"benchmark": "known", "command": line}),
    ];
    for (suite, options) in ["external", "burn-in"]
        .into_iter()
        .flat_map(|suite| refused.iter().map(move |options| (suite, options)))
    {
        let body = json!({"suite": suite, "options": options}).to_string();
        let answer = post_json(addr, "/api/v1/runs", Some(TOKEN), &body).await;
        assert_eq!(answer.status, 400, "{suite} {options}: {}", answer.text());
        let message = answer.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            message.contains("configured") || message.contains("takes no option"),
            "{message}"
        );
    }
    sleep(Duration::from_millis(500)).await;
    assert!(!marker.exists(), "a refused command ran");
    let runs = get(addr, "/api/v1/runs").await.json();
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "{runs}");
}
