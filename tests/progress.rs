//! The run's progress, as the agent publishes it (status, SSE, D-Bus's `Progress`), only
//! grows during a run, whatever a worker reports: a worker process (a script speaking
//! the worker's JSON-lines events) reports a lower figure after a higher one.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tinyperf::agent::config::Config;
use tinyperf::agent::{start_core, AgentOptions};
use tinyperf::record::Trigger;
use tokio::time::{timeout, Instant};

/// A worker that reports 0.6, then 0.2 (a stage counting a new phase from 0), then 0.8.
fn script_worker(dir: &Path) -> PathBuf {
    let path = dir.join("worker.sh");
    let now = "2026-01-01T00:00:00Z";
    let events = [
        r#"{"event":"run_started","suite":"inventory","stages":["inventory"]}"#.to_string(),
        r#"{"event":"stage_started","stage":"inventory","index":0,"total":1}"#.to_string(),
        r#"{"event":"progress","stage":"inventory","progress":0.6}"#.to_string(),
        r#"{"event":"progress","stage":"inventory","progress":0.2}"#.to_string(),
        r#"{"event":"progress","stage":"inventory","progress":0.8}"#.to_string(),
        format!(
            r#"{{"event":"stage_finished","result":{{"name":"inventory","verdict":"pass","started_at":"{now}","finished_at":"{now}","metrics":[],"checks":[],"findings":[],"message":null}}}}"#
        ),
        r#"{"event":"run_finished","state":"passed"}"#.to_string(),
    ];
    let mut script = String::from("#!/bin/sh\n");
    for event in events {
        script.push_str(&format!("echo '{event}'\nsleep 0.2\n"));
    }
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_progress_never_goes_back_during_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    std::fs::create_dir_all(state_dir.join("runs")).unwrap();
    let handle = start_core(&AgentOptions {
        config: Config {
            state_dir,
            ..Config::default()
        },
        worker_exe: script_worker(dir.path()),
        root: dir.path().to_path_buf(),
    })
    .unwrap();
    let mut events = handle.subscribe();
    let id = handle
        .start("inventory", Default::default(), Trigger::Http)
        .await
        .unwrap();
    let mut published = Vec::new();
    let mut polled = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            Instant::now() < deadline,
            "the run did not finish: {published:?}"
        );
        polled.push(handle.status().progress);
        let Ok(Ok(event)) = timeout(Duration::from_millis(50), events.recv()).await else {
            continue;
        };
        let event: Value = serde_json::to_value(&event).unwrap();
        if event["type"] == "progress" {
            assert_eq!(event["run_id"], id.as_str());
            published.push(event["progress"].as_f64().unwrap());
        }
        if event["type"] == "run_finished" {
            break;
        }
    }
    assert_eq!(published, [0.6, 0.6, 0.8]);
    let during: Vec<f64> = polled.into_iter().filter(|p| *p > 0.0).collect();
    assert!(during.windows(2).all(|w| w[0] <= w[1]), "{during:?}");
}
