//! An external benchmark under the agent: configured in the agent's config by name,
//! started over HTTP, its MLLOG's epochs and evaluations arriving as live progress on the
//! event stream, its score in the run record; cancel over HTTP stopping it and the
//! processes it started; a worker killed outright taking the benchmark's processes with
//! it; and a command the config does not name refused.

mod common;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tinyperf::agent::config::Config;
use tinyperf::api::http::serve;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{sleep, timeout, Instant};

const TOKEN: &str = "test-token-0123456789abcdef";
const IO_LIMIT: Duration = Duration::from_secs(30);

/// An agent whose config names `benchmarks` (name → the external suite's options).
async fn start(dir: &Path, benchmarks: &[(&str, Value)]) -> SocketAddr {
    let state_dir = dir.join("state");
    std::fs::create_dir_all(state_dir.join("runs")).unwrap();
    let handle = common::core_in(
        dir,
        Config {
            state_dir,
            cancel_grace: Duration::from_secs(2),
            benchmarks: benchmarks
                .iter()
                .map(|(name, options)| (name.to_string(), options.as_object().unwrap().clone()))
                .collect(),
            ..Config::default()
        },
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(handle, listener, Some(TOKEN.to_string())));
    addr
}

async fn exchange(addr: SocketAddr, raw: String) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    timeout(IO_LIMIT, stream.read_to_end(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

async fn get(addr: SocketAddr, path: &str) -> Value {
    exchange(
        addr,
        format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n"),
    )
    .await
    .1
}

async fn post(addr: SocketAddr, path: &str, body: &str) -> (u16, Value) {
    exchange(
        addr,
        format!(
            "POST {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}

async fn open_events(addr: SocketAddr) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"GET /api/v1/events HTTP/1.1\r\nhost: test\r\naccept: text/event-stream\r\n\r\n",
        )
        .await
        .unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        timeout(IO_LIMIT, reader.read_line(&mut line))
            .await
            .unwrap()
            .unwrap();
        if line == "\r\n" {
            return reader;
        }
    }
}

/// The next `data:` line of the stream.
async fn next_data(reader: &mut BufReader<TcpStream>) -> String {
    loop {
        let mut line = String::new();
        let n = timeout(IO_LIMIT, reader.read_line(&mut line))
            .await
            .expect("an event in time")
            .unwrap();
        assert!(n > 0, "event stream closed");
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            return data.to_string();
        }
    }
}

async fn wait_finished(addr: SocketAddr, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let record = get(addr, &format!("/api/v1/runs/{id}")).await;
        if record["state"] != "running" {
            return record;
        }
        assert!(Instant::now() < deadline, "{record:#}");
        sleep(Duration::from_millis(200)).await;
    }
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
    let addr = start(
        dir.path(),
        &[(
            "replay",
            json!({"command": ["sh", bench], "mllog": "stdout"}),
        )],
    )
    .await;
    let mut events = open_events(addr).await;
    let body = json!({"suite": "external", "options": {"benchmark": "replay"}}).to_string();
    let (status, started) = post(addr, "/api/v1/runs", &body).await;
    assert_eq!(status, 202, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    let mut messages = Vec::new();
    loop {
        let data = next_data(&mut events).await;
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
    let record = wait_finished(addr, &id).await;
    assert_eq!(record["state"], "passed", "{record:#}");
    let minutes = record["stages"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "time_to_train_min")
        .unwrap()["value"]
        .as_f64()
        .unwrap();
    assert!((minutes - 217001.0 / 60000.0).abs() < 1e-9);
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// An agent running the benchmark `sleeper`, a shell that starts `sleep 300` and waits
/// for it: the agent's address, the run's id and the pid of `sleep`, once it runs.
async fn start_sleeper(dir: &Path) -> (SocketAddr, String, u32) {
    let pid_file = dir.join("child.pid");
    let line = format!("sleep 300 & echo $! > '{}'; wait", pid_file.display());
    let addr = start(dir, &[("sleeper", json!({"command": line}))]).await;
    let body = json!({"suite": "external", "options": {"benchmark": "sleeper"}}).to_string();
    let (status, started) = post(addr, "/api/v1/runs", &body).await;
    assert_eq!(status, 202, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(Ok(pid)) = std::fs::read_to_string(&pid_file).map(|t| t.trim().parse()) {
            return (addr, id, pid);
        }
        assert!(Instant::now() < deadline, "the benchmark never started");
        sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_over_http_stops_the_benchmark_and_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let (addr, id, child) = start_sleeper(dir.path()).await;
    assert!(alive(child));
    let (status, answer) = post(addr, &format!("/api/v1/runs/{id}/cancel"), "").await;
    assert!(status < 300, "{status} {answer}");
    let record = wait_finished(addr, &id).await;
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
    let (addr, id, child) = start_sleeper(dir.path()).await;
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
    let record = wait_finished(addr, &id).await;
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
    let addr = start(dir.path(), &[("known", json!({"command": ["true"]}))]).await;
    let line = format!("touch '{}'", marker.display());
    for options in [
        json!({"command": line}),
        json!({"benchmark": "unknown"}),
        json!({"benchmark": "known", "command": line}),
    ] {
        let body = json!({"suite": "external", "options": options}).to_string();
        let (status, answer) = post(addr, "/api/v1/runs", &body).await;
        assert_eq!(status, 400, "{options}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("configured") || message.contains("takes no option"),
            "{message}"
        );
    }
    sleep(Duration::from_millis(500)).await;
    assert!(!marker.exists(), "a refused command ran");
    let runs = get(addr, "/api/v1/runs").await;
    assert_eq!(runs["runs"].as_array().unwrap().len(), 0, "{runs}");
}
