//! The HTTP API against a real socket on loopback: the agent core runs in this process
//! with a real store on disk and real `tinyperf run` workers; requests are raw HTTP/1.1
//! over TCP (so odd paths reach the server exactly as written) and, in places, curl.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::curl::curl;
use common::in_process::{
    exchange, get, next_event, open_events, post_json, request, serve_core, wait_finished, Served,
    Serving, IO_LIMIT,
};
use common::TOKEN;
use serde_json::{json, Value};
use tinyperf::agent::config::Config;
use tinyperf::agent::AgentHandle;
use tinyperf::api::http::Limits;
use tinyperf::record::{Metric, RunRecord, RunState, StageResult, Trigger, Verdict};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{sleep, timeout, Instant};

const SEEDED_RUN: &str = "20260101-000000-aaaaaa";

/// Starts the agent core on a fresh store (after `seed` has written into its state
/// directory) and serves HTTP on a loopback port, with `limits` or the defaults.
async fn start_server(
    token: Option<&str>,
    limits: Option<Limits>,
    seed: impl FnOnce(&Path),
) -> Served {
    let config = Config {
        cancel_grace: Duration::from_secs(2),
        ..Config::default()
    };
    let serving = Serving {
        token: token.map(String::from),
        limits: limits.unwrap_or_default(),
        ..Serving::default()
    };
    serve_core(config, serving, seed).await
}

async fn default_server() -> Served {
    start_server(Some(TOKEN), None, |_| {}).await
}

/// A finished run with figures, an MLLOG and telemetry, written into the store.
fn seed_run(state_dir: &Path) {
    let mut record = RunRecord::new(
        SEEDED_RUN.into(),
        "acceptance".into(),
        Trigger::Boot,
        Default::default(),
    );
    record.stages.push(StageResult {
        name: "gemm".into(),
        verdict: Verdict::Pass,
        started_at: record.started_at,
        finished_at: record.started_at,
        metrics: vec![
            Metric::new("tflops", 82.5, "TFLOP/s"),
            Metric::new("odd \"name\" \\ with\nnewline", 1.0, "x"),
        ],
        checks: vec![],
        findings: vec![],
        message: None,
    });
    record.finish(RunState::Passed, Some("<script>alert(1)</script>".into()));
    let dir = state_dir.join("runs").join(SEEDED_RUN);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), serde_json::to_vec(&record).unwrap()).unwrap();
    std::fs::write(dir.join("mllog.txt"), ":::MLLOG {\"key\": \"run_start\"}\n").unwrap();
    std::fs::write(dir.join("telemetry.csv"), "t_s,gpu,power_w\n0.0,0,350\n").unwrap();
    std::fs::write(dir.join("train.jsonl"), SEEDED_TRAIN).unwrap();
}

/// The seeded run's `train.jsonl`: two epochs, the second evaluated.
const SEEDED_TRAIN: &str = concat!(
    r#"{"stage":"train","kind":"epoch","epoch":1,"planned_epochs":2,"global_step":10,"planned_steps":20,"loss":6.1,"accuracy":0.01,"images_per_s":120.5,"lr":0.1,"elapsed_s":8.0}"#,
    "\n",
    r#"{"stage":"train","kind":"epoch","epoch":2,"planned_epochs":2,"global_step":20,"planned_steps":20,"loss":5.2,"accuracy":0.04,"images_per_s":121.0,"lr":0.05,"eval_accuracy":0.03,"elapsed_s":16.5}"#,
    "\n",
);

async fn assert_healthy(addr: SocketAddr) {
    let reply = get(addr, "/healthz").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(reply.json()["status"], "ok");
}

async fn wait_idle(handle: &AgentHandle) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while handle.status().current_run.is_some() {
        assert!(Instant::now() < deadline, "agent never went idle");
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_get_endpoint_answers() {
    let server = start_server(Some(TOKEN), None, seed_run).await;
    let addr = server.addr;

    let status = get(addr, "/api/v1/status").await;
    assert_eq!(status.status, 200);
    let status = status.json();
    assert_eq!(status["state"], "idle");
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(status["last_run"]["id"], SEEDED_RUN);
    assert!(status["sku"].is_string());

    let hardware = get(addr, "/api/v1/hardware").await;
    assert_eq!(hardware.status, 200);
    assert_eq!(hardware.json(), server.handle.hardware());
    assert_eq!(hardware.json()["schema_version"], 1);
    assert_eq!(
        hardware.json()["tinyperf_version"],
        env!("CARGO_PKG_VERSION")
    );

    let runs = get(addr, "/api/v1/runs?limit=5").await.json();
    assert_eq!(runs["runs"][0]["id"], SEEDED_RUN);
    assert_eq!(runs["runs"][0]["state"], "passed");
    get(addr, "/api/v1/runs?limit=0")
        .await
        .assert_error(400, "invalid_query");

    let run = get(addr, &format!("/api/v1/runs/{SEEDED_RUN}")).await;
    assert_eq!(run.status, 200);
    assert_eq!(run.json()["stages"][0]["metrics"][0]["value"], 82.5);

    let mllog = get(addr, &format!("/api/v1/runs/{SEEDED_RUN}/mllog")).await;
    assert_eq!(mllog.status, 200);
    assert!(mllog
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    assert!(mllog.text().starts_with(":::MLLOG"));

    let telemetry = get(addr, &format!("/api/v1/runs/{SEEDED_RUN}/telemetry")).await;
    assert_eq!(telemetry.status, 200);
    assert!(telemetry
        .header("content-type")
        .unwrap()
        .starts_with("text/csv"));
    assert_eq!(telemetry.text().lines().next(), Some("t_s,gpu,power_w"));

    let train = get(addr, &format!("/api/v1/runs/{SEEDED_RUN}/train")).await;
    assert_eq!(train.status, 200);
    assert_eq!(train.header("content-type"), Some("application/x-ndjson"));
    let epochs: Vec<serde_json::Value> = train
        .text()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(epochs.len(), 2);
    assert_eq!(epochs[1]["eval_accuracy"], 0.03);

    let openapi = get(addr, "/api/v1/openapi.json").await;
    assert_eq!(openapi.status, 200);
    let doc = openapi.json();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.0"));
    assert!(doc["paths"]["/api/v1/runs/{id}/cancel"]["post"].is_object());

    let page = get(addr, "/").await;
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    let html = page.text();
    assert!(html.contains(&format!("href=\"/runs/{SEEDED_RUN}\"")));
    assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"));
    assert!(!html.contains("<script>alert(1)"));
    assert!(html.contains("<script src=\"/static/page.js"));

    let metrics = get(addr, "/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(metrics
        .header("content-type")
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));

    assert_healthy(addr).await;
    let head = exchange(addr, &request("HEAD", "/api/v1/status", &[], None))
        .await
        .unwrap();
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_an_mllog_is_told_apart_from_no_run() {
    let server = start_server(Some(TOKEN), None, |dir| {
        seed_run(dir);
        std::fs::remove_file(dir.join("runs").join(SEEDED_RUN).join("mllog.txt")).unwrap();
    })
    .await;
    let missing = get(server.addr, &format!("/api/v1/runs/{SEEDED_RUN}/mllog")).await;
    missing.assert_error(404, "not_found");
    assert_eq!(
        missing.json()["error"]["message"],
        format!("run \"{SEEDED_RUN}\" has no mllog.txt")
    );
    std::fs::remove_file(
        server
            .state_dir
            .join("runs")
            .join(SEEDED_RUN)
            .join("train.jsonl"),
    )
    .unwrap();
    let untrained = get(server.addr, &format!("/api/v1/runs/{SEEDED_RUN}/train")).await;
    untrained.assert_error(404, "not_found");
    assert_eq!(
        untrained.json()["error"]["message"],
        format!("run \"{SEEDED_RUN}\" has no train.jsonl")
    );
    let absent = get(server.addr, "/api/v1/runs/20260101-000000-bbbbbb/mllog").await;
    absent.assert_error(404, "not_found");
    assert_eq!(
        absent.json()["error"]["message"],
        "no run with id \"20260101-000000-bbbbbb\""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_runs_and_artifacts_are_404_json() {
    let server = default_server().await;
    let addr = server.addr;
    get(addr, "/api/v1/runs/20260101-000000-bbbbbb")
        .await
        .assert_error(404, "not_found");
    get(addr, "/api/v1/runs/20260101-000000-bbbbbb/mllog")
        .await
        .assert_error(404, "not_found");
    get(addr, "/nowhere").await.assert_error(404, "not_found");
    get(addr, "/api/v1/runs/x/y/z")
        .await
        .assert_error(404, "not_found");
    assert_healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_need_the_right_token_and_a_started_run_is_recorded() {
    let server = default_server().await;
    let addr = server.addr;
    let body = r#"{"suite": "inventory"}"#;

    let missing = post_json(addr, "/api/v1/runs", None, body).await;
    missing.assert_error(401, "unauthorized");
    assert!(missing
        .header("www-authenticate")
        .unwrap()
        .starts_with("Bearer"));
    post_json(addr, "/api/v1/runs", Some("wrong-token"), body)
        .await
        .assert_error(403, "forbidden");
    post_json(addr, "/api/v1/runs", Some(&TOKEN[..TOKEN.len() - 1]), body)
        .await
        .assert_error(403, "forbidden");
    assert_eq!(server.handle.counters().runs_started, 0);

    let started = post_json(addr, "/api/v1/runs", Some(TOKEN), body).await;
    assert_eq!(started.status, 202, "{}", started.text());
    let id = started.json()["id"].as_str().unwrap().to_string();
    assert_eq!(
        started.header("location"),
        Some(format!("/api/v1/runs/{id}").as_str())
    );
    let record = get(addr, &format!("/api/v1/runs/{id}")).await.json();
    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["suite"], "inventory");
    assert_eq!(record["trigger"], "http");
    assert!(server
        .state_dir
        .join("runs")
        .join(&id)
        .join("run.json")
        .exists());

    let finished = wait_finished(addr, &id, Duration::from_secs(60)).await;
    assert_eq!(finished["state"], "passed", "{finished}");
    assert_eq!(finished["stages"][0]["name"], "inventory");
    let runs = get(addr, "/api/v1/runs").await.json();
    assert_eq!(runs["runs"][0]["id"], id.as_str());
    // A finished run cannot be cancelled.
    post_json(addr, &format!("/api/v1/runs/{id}/cancel"), Some(TOKEN), "")
        .await
        .assert_error(400, "invalid_args");
    assert_healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_token_writes_are_disabled() {
    let server = start_server(None, None, |_| {}).await;
    let reply = post_json(
        server.addr,
        "/api/v1/runs",
        Some(TOKEN),
        r#"{"suite": "inventory"}"#,
    )
    .await;
    reply.assert_error(403, "writes_disabled");
    assert!(reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("no write token is configured"));
    post_json(
        server.addr,
        "/api/v1/runs/20260101-000000-aaaaaa/cancel",
        None,
        "",
    )
    .await
    .assert_error(403, "writes_disabled");
    assert_eq!(server.handle.counters().runs_started, 0);
    assert_healthy(server.addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_is_busy_and_the_first_can_be_cancelled() {
    let server = default_server().await;
    let addr = server.addr;
    let long = r#"{"suite": "acceptance", "options": {"gemm_seconds": 600}}"#;
    let first = post_json(addr, "/api/v1/runs", Some(TOKEN), long).await;
    assert_eq!(first.status, 202, "{}", first.text());
    let id = first.json()["id"].as_str().unwrap().to_string();

    let status = get(addr, "/api/v1/status").await.json();
    assert_eq!(status["state"], "running");
    assert_eq!(status["current_run"], id.as_str());
    let metrics = get(addr, "/metrics").await.text();
    assert!(
        metrics.lines().any(|l| l == "tinyperf_agent_running 1"),
        "{metrics}"
    );
    assert!(metrics
        .lines()
        .any(|l| l == "tinyperf_agent_runs_started_total 1"));
    let page = get(addr, "/").await.text();
    assert!(page.contains(&format!("data-run=\"{id}\"")));
    assert!(page.contains("id=\"progress-bar\""));

    let second = post_json(
        addr,
        "/api/v1/runs",
        Some(TOKEN),
        r#"{"suite": "inventory"}"#,
    )
    .await;
    second.assert_error(409, "busy");
    assert!(second.text().contains(&id));

    let cancel = post_json(addr, &format!("/api/v1/runs/{id}/cancel"), Some(TOKEN), "").await;
    assert_eq!(cancel.status, 202, "{}", cancel.text());
    assert_eq!(cancel.json()["id"], id.as_str());
    let record = wait_finished(addr, &id, Duration::from_secs(30)).await;
    assert_eq!(record["state"], "cancelled", "{record}");
    // Not judged: no verdict, rather than an error that reads as a broken box.
    assert_eq!(record["summary"]["verdict"], Value::Null, "{record}");
    let listed = get(addr, "/api/v1/runs?limit=1").await.json();
    assert_eq!(listed["runs"][0]["verdict"], Value::Null, "{listed}");
    wait_idle(&server.handle).await;
    let metrics = get(addr, "/metrics").await.text();
    assert!(metrics
        .lines()
        .any(|l| l == "tinyperf_agent_runs_finished_total{state=\"cancelled\"} 1"));
    assert_healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_errors_and_change_nothing() {
    let server = default_server().await;
    let addr = server.addr;
    for (body, status, code) in [
        ("{", 400, "bad_json"),
        ("", 400, "bad_json"),
        ("[\"inventory\"]", 400, "invalid_body"),
        (r#"{"suite": 3}"#, 400, "invalid_body"),
        (
            r#"{"suite": "inventory", "colour": "red"}"#,
            400,
            "invalid_body",
        ),
        (
            r#"{"suite": "inventory", "options": []}"#,
            400,
            "invalid_body",
        ),
        (r#"{"suite": "fastest"}"#, 400, "invalid_args"),
        (
            r#"{"suite": "inventory", "options": {"x": 1}}"#,
            400,
            "invalid_args",
        ),
        (
            r#"{"suite": "acceptance", "options": {"gemm_size": "big"}}"#,
            400,
            "invalid_args",
        ),
        (
            r#"{"suite": "acceptance", "options": {"gemm_size": 1}}"#,
            400,
            "invalid_args",
        ),
    ] {
        let reply = post_json(addr, "/api/v1/runs", Some(TOKEN), body).await;
        reply.assert_error(status, code);
        assert_healthy(addr).await;
    }
    let form = exchange(
        addr,
        &request(
            "POST",
            "/api/v1/runs",
            &[
                ("authorization", &format!("Bearer {TOKEN}")),
                ("content-type", "text/plain"),
            ],
            Some(r#"{"suite": "inventory"}"#),
        ),
    )
    .await
    .unwrap();
    form.assert_error(415, "unsupported_media_type");

    let wrong_method = exchange(addr, &request("POST", "/api/v1/status", &[], Some("")))
        .await
        .unwrap();
    wrong_method.assert_error(405, "method_not_allowed");
    assert_eq!(wrong_method.header("allow"), Some("GET, HEAD"));
    let delete = exchange(addr, &request("DELETE", "/api/v1/runs", &[], None))
        .await
        .unwrap();
    delete.assert_error(405, "method_not_allowed");
    assert_eq!(delete.header("allow"), Some("GET, HEAD, POST"));
    let get_cancel = get(addr, &format!("/api/v1/runs/{SEEDED_RUN}/cancel")).await;
    get_cancel.assert_error(405, "method_not_allowed");
    assert_eq!(get_cancel.header("allow"), Some("POST"));

    post_json(
        addr,
        "/api/v1/runs/20260101-000000-cccccc/cancel",
        Some(TOKEN),
        "",
    )
    .await
    .assert_error(404, "not_found");

    assert_eq!(server.handle.counters().runs_started, 0);
    assert_eq!(get(addr, "/api/v1/runs").await.json()["runs"], json!([]));
    assert_healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_headers_and_bodies_are_refused() {
    let server = default_server().await;
    let addr = server.addr;

    // Over our limit: a JSON 431, and the connection stays usable.
    let big = "a".repeat(32 * 1024);
    exchange(addr, &request("GET", "/healthz", &[("x-big", &big)], None))
        .await
        .unwrap()
        .assert_error(431, "headers_too_large");
    assert_healthy(addr).await;
    let names: Vec<String> = (0..80).map(|i| format!("x-h{i}")).collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    exchange(addr, &request("GET", "/healthz", &many, None))
        .await
        .unwrap()
        .assert_error(431, "headers_too_large");
    assert_healthy(addr).await;

    // Far over it: hyper cuts the request off itself, with a bare 431 or by closing.
    let huge = "a".repeat(256 * 1024);
    match exchange(addr, &request("GET", "/healthz", &[("x-big", &huge)], None)).await {
        Ok(reply) => assert_eq!(reply.status, 431),
        Err(e) => eprintln!("huge header: connection closed ({e})"),
    }
    assert_healthy(addr).await;
    let names: Vec<String> = (0..200).map(|i| format!("x-h{i}")).collect();
    let many: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "v")).collect();
    match exchange(addr, &request("GET", "/healthz", &many, None)).await {
        Ok(reply) => assert_eq!(reply.status, 431),
        Err(e) => eprintln!("too many headers: connection closed ({e})"),
    }
    assert_healthy(addr).await;

    // Declared too large: refused before the body is read.
    let auth = format!("Bearer {TOKEN}");
    let declared = format!(
        "POST /api/v1/runs HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
         authorization: {auth}\r\ncontent-type: application/json\r\n\
         content-length: 1000000\r\n\r\n"
    );
    exchange(addr, declared.as_bytes())
        .await
        .unwrap()
        .assert_error(413, "payload_too_large");
    assert_healthy(addr).await;

    // Streamed without a length: refused once the limit is crossed.
    let mut chunked = format!(
        "POST /api/v1/runs HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\
         authorization: {auth}\r\ncontent-type: application/json\r\n\
         transfer-encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..80 {
        chunked.extend_from_slice(format!("400\r\n{}\r\n", " ".repeat(1024)).as_bytes());
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    exchange(addr, &chunked)
        .await
        .unwrap()
        .assert_error(413, "payload_too_large");
    assert_eq!(server.handle.counters().runs_started, 0);
    assert_healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_ids_cannot_reach_outside_the_store() {
    let server = start_server(Some(TOKEN), None, |state| {
        seed_run(state);
        // What `runs/..` would name: a record just outside the store.
        let mut outside = RunRecord::new(
            "OUTSIDE-MARKER".into(),
            "inventory".into(),
            Trigger::Cli,
            Default::default(),
        );
        outside.finish(RunState::Passed, None);
        std::fs::write(
            state.join("run.json"),
            serde_json::to_vec(&outside).unwrap(),
        )
        .unwrap();
        std::fs::write(state.join("mllog.txt"), "OUTSIDE-MARKER").unwrap();
    })
    .await;
    let addr = server.addr;
    for path in [
        "/api/v1/runs/..",
        "/api/v1/runs/%2e%2e",
        "/api/v1/runs/%2E%2E",
        "/api/v1/runs/.%2e",
        "/api/v1/runs/..%2F",
        "/api/v1/runs/%2e%2e/mllog",
        "/api/v1/runs/..%2f..%2fetc%2fpasswd",
        "/api/v1/runs/%2e%2e%2f%2e%2e%2fetc%2fpasswd/telemetry",
        "/api/v1/runs/..%5c..%5cwindows",
        "/api/v1/runs/-rf",
        "/api/v1/runs/a%00b",
    ] {
        let reply = get(addr, path).await;
        reply.assert_error(400, "invalid_run_id");
        assert!(!reply.text().contains("OUTSIDE-MARKER"), "{path} escaped");
        assert_healthy(addr).await;
    }
    for path in [
        "/api/v1/runs/../../etc/passwd",
        "/api/v1/runs/../mllog/x",
        "/api/v1/runs/%2e%2e/%2e%2e/etc/passwd",
    ] {
        let reply = get(addr, path).await;
        assert!(
            reply.status == 400 || reply.status == 404,
            "{path}: {}",
            reply.status
        );
        assert!(!reply.text().contains("OUTSIDE-MARKER"), "{path} escaped");
    }
    let too_long = format!("/api/v1/runs/{}", "a".repeat(65));
    get(addr, &too_long)
        .await
        .assert_error(400, "invalid_run_id");
    post_json(addr, "/api/v1/runs/%2e%2e/cancel", Some(TOKEN), "")
        .await
        .assert_error(400, "invalid_run_id");

    // curl, with and without its own path normalisation.
    let url = format!("http://{addr}/api/v1/runs/..");
    let out = Command::new("curl")
        .args(["-s", "--path-as-is", "-w", "\n%{http_code}", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n400"), "{text}");
    assert!(!text.contains("OUTSIDE-MARKER"));
    let out = Command::new("curl")
        .args(["-s", "-w", "\n%{http_code}", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.ends_with("\n404"), "{text}");
    assert!(!text.contains("OUTSIDE-MARKER"));
    assert_healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_stream_a_run_from_start_to_finish() {
    let server = default_server().await;
    let addr = server.addr;
    let mut events = open_events(addr).await;
    let (name, data) = next_event(&mut events).await;
    assert_eq!(name, "status");
    let status: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(status["state"], "idle");

    let started = post_json(
        addr,
        "/api/v1/runs",
        Some(TOKEN),
        r#"{"suite": "inventory"}"#,
    )
    .await;
    assert_eq!(started.status, 202, "{}", started.text());
    let id = started.json()["id"].as_str().unwrap().to_string();

    let mut seen = Vec::new();
    let finished = loop {
        let (name, data) = next_event(&mut events).await;
        if name == ":" {
            continue;
        }
        let value: Value = serde_json::from_str(&data).unwrap();
        seen.push(name.clone());
        if name == "run_finished" {
            break value;
        }
    };
    assert_eq!(
        &seen[..3],
        ["state_changed", "run_started", "stage_started"],
        "{seen:?}"
    );
    assert!(seen.contains(&"stage_finished".to_string()), "{seen:?}");
    assert_eq!(finished["run_id"], id.as_str());
    assert_eq!(finished["state"], "passed");
    assert_eq!(finished["type"], "run_finished");
    let record = get(addr, &format!("/api/v1/runs/{id}")).await.json();
    assert_eq!(finished["state"], record["state"]);
    let (name, data) = next_event(&mut events).await;
    assert_eq!(name, "state_changed");
    assert_eq!(
        serde_json::from_str::<Value>(&data).unwrap()["state"],
        "idle"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_streams_keep_alive_and_are_capped() {
    let limits = Limits {
        keep_alive: Duration::from_millis(200),
        max_event_streams: 1,
        ..Limits::default()
    };
    let server = start_server(Some(TOKEN), Some(limits), |_| {}).await;
    let mut events = open_events(server.addr).await;
    assert_eq!(next_event(&mut events).await.0, "status");
    assert_eq!(
        next_event(&mut events).await,
        (":".to_string(), "keep-alive".to_string())
    );
    get(server.addr, "/api/v1/events")
        .await
        .assert_error(503, "too_many_streams");
    drop(events);
    // The stream's slot frees once the server notices the client left.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut stream = TcpStream::connect(server.addr).await.unwrap();
        stream
            .write_all(b"GET /api/v1/events HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 12];
        timeout(IO_LIMIT, stream.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        if &buf == b"HTTP/1.1 200" {
            break;
        }
        assert!(Instant::now() < deadline, "the stream slot was never freed");
        sleep(Duration::from_millis(100)).await;
    }
    assert_healthy(server.addr).await;
}

/// Splits a Prometheus sample line into name, labels and value, checking its syntax.
fn parse_sample(line: &str) -> (String, Vec<(String, String)>, f64) {
    let chars: Vec<char> = line.chars().collect();
    let at = |i: usize| chars.get(i).copied();
    let is_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut i = 0;
    while at(i).is_some_and(is_name) {
        i += 1;
    }
    let name: String = chars[..i].iter().collect();
    assert!(
        !name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit()),
        "bad metric name in {line:?}"
    );
    let mut labels = Vec::new();
    if at(i) == Some('{') {
        i += 1;
        while at(i) != Some('}') {
            let start = i;
            while at(i).is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                i += 1;
            }
            let key: String = chars[start..i].iter().collect();
            assert!(!key.is_empty(), "empty label name in {line:?}");
            assert_eq!((at(i), at(i + 1)), (Some('='), Some('"')), "{line:?}");
            i += 2;
            let mut value = String::new();
            loop {
                let c = at(i).unwrap_or_else(|| panic!("unterminated label in {line:?}"));
                i += 1;
                match c {
                    '"' => break,
                    '\\' => {
                        value.push(match at(i) {
                            Some('n') => '\n',
                            Some('\\') => '\\',
                            Some('"') => '"',
                            other => panic!("bad escape {other:?} in {line:?}"),
                        });
                        i += 1;
                    }
                    c => value.push(c),
                }
            }
            labels.push((key, value));
            match at(i) {
                Some(',') => i += 1,
                Some('}') => {}
                other => panic!("unexpected {other:?} after a label in {line:?}"),
            }
        }
        i += 1;
    }
    assert_eq!(at(i), Some(' '), "no space before the value in {line:?}");
    let value_text: String = chars[i + 1..].iter().collect();
    let value = match value_text.as_str() {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v
            .parse()
            .unwrap_or_else(|_| panic!("bad value {v:?} in {line:?}")),
    };
    (name, labels, value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_prometheus_text() {
    let server = start_server(Some(TOKEN), None, seed_run).await;
    let reply = get(server.addr, "/metrics").await;
    assert_eq!(reply.status, 200);
    let text = reply.text();
    let mut typed = std::collections::HashMap::new();
    let mut helped = std::collections::HashSet::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            helped.insert(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(["gauge", "counter"].contains(&kind), "{line}");
            typed.insert(name.to_string(), kind.to_string());
        } else {
            assert!(!line.starts_with('#'), "stray comment {line:?}");
            samples.push(parse_sample(line));
        }
    }
    for (name, _, _) in &samples {
        assert!(
            name.starts_with("tinyperf_") || name.starts_with("process_"),
            "{name}"
        );
        assert!(typed.contains_key(name), "{name} has no TYPE");
        assert!(helped.contains(name), "{name} has no HELP");
        if typed[name] == "counter" {
            assert!(name.ends_with("_total"), "{name}");
        }
    }
    let find = |name: &str, labels: &[(&str, &str)]| {
        samples
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
            })
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("no {name} {labels:?} in\n{text}"))
    };
    assert_eq!(find("tinyperf_agent_running", &[]), 0.0);
    assert_eq!(
        find(
            "tinyperf_box_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    assert_eq!(find("tinyperf_agent_runs_started_total", &[]), 0.0);
    assert_eq!(
        find("tinyperf_agent_runs_finished_total", &[("state", "passed")]),
        0.0
    );
    assert_eq!(find("tinyperf_store_records_skipped", &[]), 0.0);
    assert!(find("tinyperf_agent_uptime_seconds", &[]) >= 0.0);
    assert_eq!(
        find(
            "tinyperf_suite_state",
            &[("suite", "acceptance"), ("state", "passed")]
        ),
        1.0
    );
    assert_eq!(
        find(
            "tinyperf_stage_verdict",
            &[
                ("suite", "acceptance"),
                ("stage", "gemm"),
                ("verdict", "pass")
            ]
        ),
        1.0
    );
    let finished = find(
        "tinyperf_suite_result_timestamp_seconds",
        &[("suite", "acceptance")],
    );
    assert!(
        (finished - chrono::Utc::now().timestamp() as f64).abs() < 600.0,
        "{finished}"
    );
    assert!(find("process_resident_memory_bytes", &[]) > 0.0);
    assert!(find("process_open_fds", &[]) > 0.0);
    // No run id is a label: a label per run would grow without bound.
    assert!(!text.contains(SEEDED_RUN), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_reads_and_writes() {
    let server = default_server().await;
    let base = format!("http://{}", server.addr);
    let out = Command::new("curl")
        .args(["-sf", &format!("{base}/api/v1/status")])
        .output()
        .unwrap();
    assert!(out.status.success());
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["state"], "idle");

    let (code, body) = curl(&[
        "-H",
        &format!("Authorization: Bearer {TOKEN}"),
        "-H",
        "Content-Type: application/json",
        "-d",
        r#"{"suite":"inventory"}"#,
        &format!("{base}/api/v1/runs"),
    ]);
    assert_eq!(code, 202, "{body}");
    let id = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    wait_finished(server.addr, &id, Duration::from_secs(60)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_refused_then_served_again() {
    let limits = Limits {
        max_connections: 2,
        ..Limits::default()
    };
    let server = start_server(Some(TOKEN), Some(limits), |_| {}).await;
    let idle_a = TcpStream::connect(server.addr).await.unwrap();
    let idle_b = TcpStream::connect(server.addr).await.unwrap();
    sleep(Duration::from_millis(200)).await;
    let refused = exchange(server.addr, &request("GET", "/api/v1/status", &[], None))
        .await
        .unwrap();
    refused.assert_error(503, "too_many_connections");
    // Over the cap, a health check still learns the agent is alive.
    let health = exchange(server.addr, &request("GET", "/healthz", &[], None))
        .await
        .unwrap();
    assert_eq!(health.status, 200, "{}", health.text());
    drop((idle_a, idle_b));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = get(server.addr, "/healthz").await;
        if reply.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never served again");
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_idle_clients_are_timed_out() {
    let limits = Limits {
        header_read_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = start_server(Some(TOKEN), Some(limits), |_| {}).await;
    let addr = server.addr;

    // Headers that never end.
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nhost: te")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let started = Instant::now();
    timeout(Duration::from_secs(5), slow.read_to_end(&mut buf))
        .await
        .expect("the server closes a slow header")
        .ok();
    assert!(started.elapsed() < Duration::from_secs(4));

    // A keep-alive connection left idle after one answer.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: test\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    idle.read_exact(&mut first).await.unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let mut rest = Vec::new();
    timeout(Duration::from_secs(5), idle.read_to_end(&mut rest))
        .await
        .expect("the server closes an idle keep-alive connection")
        .ok();

    // A body that never arrives.
    let auth = format!("Bearer {TOKEN}");
    let stalled = format!(
        "POST /api/v1/runs HTTP/1.1\r\nhost: test\r\nauthorization: {auth}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"suite\""
    );
    let reply = exchange(addr, stalled.as_bytes()).await.unwrap();
    reply.assert_error(408, "request_timeout");
    assert_eq!(server.handle.counters().runs_started, 0);
    assert_healthy(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_training_run_streams_live_figures_and_keeps_them_for_the_live_endpoint() {
    let server = default_server().await;
    let addr = server.addr;
    let mut events = open_events(addr).await;
    let body = serde_json::json!({
        "suite": "smoke",
        "options": {
            "synth_classes": 2, "synth_per_class": 32, "synth_val_per_class": 8,
            "synth_size": 16, "image_size": 16, "batch_size": 16, "eval_batch_size": 16,
            "base_lr": 1, "lars_trust_coefficient": 0.02, "train_epochs": 4,
            "target_accuracy": 1.0, "seed": 1
        }
    });
    let started = post_json(addr, "/api/v1/runs", Some(TOKEN), &body.to_string()).await;
    assert_eq!(started.status, 202, "{}", started.text());
    let id = started.json()["id"].as_str().unwrap().to_string();
    let mut train = Vec::new();
    let mut samples = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the run did not finish"
        );
        let (name, data) = next_event(&mut events).await;
        if name == ":" {
            continue;
        }
        let value: Value = serde_json::from_str(&data).unwrap();
        match name.as_str() {
            "train" => {
                assert_eq!(value["run_id"], id.as_str());
                train.push(value["point"].clone());
            }
            "telemetry" => {
                assert_eq!(value["run_id"], id.as_str());
                assert!(
                    value["at"].is_string() && value["gpus"].is_array(),
                    "{value}"
                );
                samples += 1;
            }
            "run_finished" => break,
            _ => {}
        }
    }
    let epochs = train.iter().filter(|p| p["kind"] == "epoch").count();
    assert_eq!(epochs, 4, "{train:?}");
    assert!(samples >= 1, "no telemetry event");
    let live = get(addr, "/api/v1/live").await;
    assert_eq!(live.status, 200);
    let live = live.json();
    assert_eq!(live["run_id"], id.as_str());
    assert_eq!(live["running"], false);
    assert_eq!(live["train"].as_array().unwrap().len(), train.len());
    assert!(!live["telemetry"].as_array().unwrap().is_empty());
}

/// A run folder's files linked to a file elsewhere (`/etc/shadow`, here a secret of the
/// test's) are never served: each answers 403 `refused` saying it is a link, and the
/// secret's bytes never leave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_linked_out_of_a_run_folder_are_refused_not_served() {
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("shadow");
    std::fs::write(&secret, "root:$6$secret-hash:19000:0:99999:7:::\n").unwrap();
    let target = secret.clone();
    let server = start_server(Some(TOKEN), None, move |dir| {
        seed_run(dir);
        let run = dir.join("runs").join(SEEDED_RUN);
        for file in ["mllog.txt", "telemetry.csv", "train.jsonl"] {
            let _ = std::fs::remove_file(run.join(file));
            std::os::unix::fs::symlink(&target, run.join(file)).unwrap();
        }
    })
    .await;
    for endpoint in ["mllog", "telemetry", "train"] {
        let reply = get(
            server.addr,
            &format!("/api/v1/runs/{SEEDED_RUN}/{endpoint}"),
        )
        .await;
        reply.assert_error(403, "refused");
        let text = reply.text();
        assert!(!text.contains("secret-hash"), "{endpoint}: {text}");
        assert!(text.contains("symbolic link"), "{endpoint}: {text}");
    }
}
