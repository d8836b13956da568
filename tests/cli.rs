//! `tinyperf start|cancel|status|runs|show` as a script would use them, against a real
//! agent on a private bus.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Agent, AgentDirs, Bus};
use serde_json::Value;

fn tinyperf(bus: &str, args: &[&str]) -> Output {
    Command::new(common::tinyperf_exe())
        .args(args)
        .arg("--bus")
        .arg(bus)
        .stdin(Stdio::null())
        .output()
        .expect("tinyperf runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

#[test]
fn start_wait_then_runs_show_and_status() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let agent = Agent::start(&bus, &dirs);

    let out = tinyperf(&bus.address, &["start", "inventory", "--wait"]);
    let text = stdout(&out);
    // This machine is no known tinybox: nothing fails, so the run passes.
    assert_eq!(out.status.code(), Some(0), "{text}{}", stderr(&out));
    let first = text.lines().next().unwrap();
    let run_id = first
        .strip_prefix("run ")
        .and_then(|rest| rest.strip_suffix(" started (inventory)"))
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_string();
    assert!(text.contains(&format!("run {run_id} passed")), "{text}");

    let out = tinyperf(&bus.address, &["runs"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("STATE") && header.contains("SUITE"),
        "{text}"
    );
    let row = lines.next().unwrap();
    assert!(
        row.starts_with(&run_id) && row.contains("inventory") && row.contains("passed"),
        "{text}"
    );
    // Columns line up: every row's STATE starts where the header's does.
    let state_col = header.find("STATE").unwrap();
    assert_eq!(&row[state_col..state_col + 6], "passed", "{text}");

    // The shape HTTP's GET /api/v1/runs gives: {"runs": [briefs]}.
    let listed = json(&tinyperf(&bus.address, &["runs", "--json", "--limit", "1"]));
    let runs = &listed["runs"];
    assert_eq!(runs.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(runs[0]["id"], run_id.as_str());
    assert_eq!(runs[0]["trigger"], "dbus");
    assert!(runs[0]["stages"].is_array() && runs[0].get("hardware").is_none());

    let out = tinyperf(&bus.address, &["show", &run_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        format!("run       {run_id}"),
        "suite     inventory".into(),
        "state     passed".into(),
        "STAGE".into(),
    ] {
        assert!(text.contains(&needle), "{needle:?} missing from:\n{text}");
    }
    let record = json(&tinyperf(&bus.address, &["show", &run_id, "--json"]));
    assert_eq!(record["id"], run_id.as_str());
    assert_eq!(record["state"], "passed");

    let out = tinyperf(&bus.address, &["status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("state     idle"), "{text}");
    assert!(
        text.contains(&format!("last run  {run_id} inventory passed")),
        "{text}"
    );
    let status = json(&tinyperf(&bus.address, &["status", "--json"]));
    assert_eq!(status["state"], "idle");
    assert_eq!(status["current_run"], Value::Null);
    assert_eq!(status["last_run"]["id"], run_id.as_str());
    assert_eq!(status["version"], env!("CARGO_PKG_VERSION"));
    // The same fields as HTTP's GET /api/v1/status.
    let (code, body) = common::http_get(agent.http, "/api/v1/status").unwrap();
    assert_eq!(code, 200);
    let http: Value = serde_json::from_slice(&body).unwrap();
    let keys = |v: &Value| {
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&status), keys(&http), "{status}\n{http}");
    assert_eq!(status["agent_started_at"], http["agent_started_at"]);

    // Without --wait, start prints the id at once; with --json, as an object.
    let started = json(&tinyperf(&bus.address, &["start", "inventory", "--json"]));
    let id = started["id"].as_str().unwrap();
    assert!(tinyperf::record::store::is_valid_run_id(id), "{started}");
}

#[test]
fn start_wait_exits_1_when_the_run_is_cancelled() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let _agent = Agent::start(&bus, &dirs);

    let waiter = Command::new(common::tinyperf_exe())
        .args([
            "start",
            "acceptance",
            "-o",
            "gemm_seconds=5",
            "--wait",
            "--bus",
            &bus.address,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run_id = common::wait_for(Duration::from_secs(30), "the run to start", || {
        let status = json(&tinyperf(&bus.address, &["status", "--json"]));
        status["current_run"].as_str().map(str::to_string)
    });

    let out = tinyperf(&bus.address, &["start", "inventory"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains(&format!("the agent is busy with run {run_id}")),
        "{}",
        stderr(&out)
    );

    let out = tinyperf(&bus.address, &["cancel", &run_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(&run_id));

    let out = waiter.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains(&format!("run {run_id} cancelled")),
        "{}",
        stdout(&out)
    );
}

#[test]
fn errors_exit_1_with_a_clear_message() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let _agent = Agent::start(&bus, &dirs);

    for command in ["cancel", "show"] {
        let out = tinyperf(&bus.address, &[command, "20200101-000000-abcdef"]);
        assert_eq!(out.status.code(), Some(1), "{command}");
        assert_eq!(
            stderr(&out).trim(),
            "tinyperf: no run with id 20200101-000000-abcdef",
            "{command}"
        );
        assert!(stdout(&out).is_empty());
    }

    let out = tinyperf(&bus.address, &["start", "no-such-suite"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no-such-suite"), "{}", stderr(&out));

    let out = tinyperf(&bus.address, &["start", "acceptance", "-o", "gemm_size=1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("gemm_size"), "{}", stderr(&out));
}

#[test]
fn usage_mistakes_exit_2() {
    let bus = Bus::start();
    for args in [
        &["start", "inventory", "-o", "novalue"][..],
        &["start", "inventory", "-o", "sizes=[1,2]"][..],
        &["status", "--bus", "nonsense"][..],
        &["show"][..],
    ] {
        let out = Command::new(common::tinyperf_exe())
            .args(args)
            .args(if args.contains(&"--bus") {
                vec![]
            } else {
                vec!["--bus", bus.address.as_str()]
            })
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty());
    }
}

#[test]
fn an_absent_agent_is_reported_as_unreachable() {
    let bus = Bus::start();
    let out = tinyperf(&bus.address, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot reach the agent on the"),
        "{}",
        stderr(&out)
    );

    let dir = tempfile::tempdir().unwrap();
    let nowhere = format!("unix:path={}", dir.path().join("no-socket").display());
    let out = tinyperf(&nowhere, &["runs"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot reach the agent on the"),
        "{}",
        stderr(&out)
    );
}
