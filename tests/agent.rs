//! The agent process end to end: boot suite, durable store, SIGKILL recovery, and
//! configuration errors at start.

mod common;

use std::process::Command;
use std::time::Duration;

use common::curl::curl;
use common::{
    agent_command, read_record, run_ids, tinyperf_exe, wait_for, Agent, AgentDirs, AgentOnBus, Bus,
};

fn set_boot_suite(dirs: &AgentDirs, suite: Option<&str>) {
    let text = std::fs::read_to_string(dirs.config()).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .filter(|l| !l.starts_with("boot_suite"))
        .map(str::to_string)
        .collect();
    if let Some(s) = suite {
        lines.push(format!("boot_suite = \"{s}\""));
    }
    std::fs::write(dirs.config(), lines.join("\n") + "\n").unwrap();
}

fn processes_mentioning(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            if String::from_utf8_lossy(&cmdline).contains(needle) {
                pids.push(pid);
            }
        }
    }
    pids
}

#[test]
fn sigkill_during_a_run_leaves_it_interrupted_and_keeps_earlier_runs() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let state = dirs.state_dir();

    // A finished run first.
    set_boot_suite(&dirs, Some("inventory"));
    let mut agent = Agent::start(&bus, &dirs);
    let first = wait_for(Duration::from_secs(30), "the boot run to finish", || {
        let ids = run_ids(&state);
        let id = ids.first()?.clone();
        let r = read_record(&state, &id)?;
        (r["state"] != "running").then_some(id)
    });
    agent.stop();
    let first_bytes = std::fs::read(state.join("runs").join(&first).join("run.json")).unwrap();
    let first_record = read_record(&state, &first).unwrap();
    assert_eq!(first_record["trigger"], "boot");
    assert_eq!(first_record["suite"], "inventory");
    assert_eq!(first_record["stages"][0]["name"], "inventory");

    // A long run, killed in the middle.
    set_boot_suite(&dirs, Some("acceptance"));
    let mut agent = Agent::start(&bus, &dirs);
    let second = wait_for(
        Duration::from_secs(30),
        "the second run's first stage",
        || {
            let id = run_ids(&state).into_iter().find(|id| *id != first)?;
            let r = read_record(&state, &id)?;
            (r["stages"].as_array()?.len() == 1 && r["state"] == "running").then_some(id)
        },
    );
    agent.kill();
    // The worker must not outlive the agent.
    wait_for(
        Duration::from_secs(10),
        "the worker to die with the agent",
        || processes_mentioning(&second).is_empty().then_some(()),
    );
    assert_eq!(read_record(&state, &second).unwrap()["state"], "running");

    // Restart: the killed run is interrupted, the earlier one untouched.
    set_boot_suite(&dirs, None);
    let mut agent = Agent::start(&bus, &dirs);
    let record = read_record(&state, &second).unwrap();
    assert_eq!(record["state"], "interrupted");
    assert!(record["finished_at"].is_string());
    assert_eq!(
        std::fs::read(state.join("runs").join(&first).join("run.json")).unwrap(),
        first_bytes
    );
    let log = agent.stop();
    assert!(log.contains("marked interrupted"), "{log}");
}

#[test]
fn a_corrupt_record_is_skipped_and_the_agent_serves() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let bad = dirs.state_dir().join("runs").join("20260101-000000-abcdef");
    std::fs::create_dir_all(&bad).unwrap();
    std::fs::write(bad.join("run.json"), b"{\"id\": \"20260101-000000-ab").unwrap();
    let mut agent = Agent::start(&bus, &dirs);
    let log = agent.stop();
    assert!(log.contains("skipping unreadable run record"), "{log}");
    // Nothing was lost: the bad record is still there for an operator to look at.
    assert!(bad.join("run.json").exists());
}

#[test]
fn bad_configuration_stops_the_agent_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    for (text, needle) in [
        ("retention = 0\n", "at least 1"),
        ("listen = \"nowhere\"\n", "not an ADDRESS:PORT"),
        ("boot_suite = \"fastest\"\n", "not a suite"),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let out = Command::new(tinyperf_exe())
            .args(["agent", "--bus", "unix:path=/nonexistent", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{text}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle) && err.contains("bad.toml"), "{err}");
    }
    let out = Command::new(tinyperf_exe())
        .args(["agent", "--config", "/nonexistent/tinyperf.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/tinyperf.toml"));
}

#[test]
fn run_with_a_state_dir_records_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(tinyperf_exe())
        .args(["run", "inventory", "--events", "jsonl", "--state-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let events: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.first().unwrap()["event"], "run_started");
    assert_eq!(events.last().unwrap()["event"], "run_finished");
    let ids = run_ids(dir.path());
    assert_eq!(ids.len(), 1);
    let record = read_record(dir.path(), &ids[0]).unwrap();
    assert_eq!(record["state"], "passed");
    assert_eq!(record["trigger"], "cli");
    assert!(record["hardware"].is_object());
}

#[test]
fn run_rejects_unknown_suites_and_options_with_usage_errors() {
    for args in [
        vec!["run", "fastest"],
        vec!["run", "smoke", "-o", "base_lr=-1"],
        vec!["run", "inventory", "-o", "x=1"],
        vec!["run", "acceptance", "-o", "gemm_size=3"],
        vec!["run", "acceptance", "--options-json", "[1]"],
    ] {
        let out = Command::new(tinyperf_exe()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
}

#[test]
fn the_worker_executes_the_plan_it_is_given_without_a_suite_of_its_own() {
    let bad = Command::new(tinyperf_exe())
        .args(["run", "--plan-json", "{\"suite\": 1}"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("--plan-json is not a run plan"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let both = Command::new(tinyperf_exe())
        .args(["run", "inventory", "--plan-json", "{}"])
        .output()
        .unwrap();
    assert_eq!(both.status.code(), Some(2), "a plan and a suite together");

    // The plan the agent would hand its worker: checked once, here, then run as it is.
    let plan = tinyperf::suite::plan::preflight(
        "inventory",
        serde_json::Map::new(),
        tinyperf::suite::plan::Workspace::for_run(None, None),
    )
    .unwrap();
    let out = Command::new(tinyperf_exe())
        .args(["run", "--events", "jsonl", "--plan-json"])
        .arg(serde_json::to_string(&plan).unwrap())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["event"], "run_started");
    assert_eq!(events[0]["suite"], "inventory");
    assert_eq!(events.last().unwrap()["state"], "passed");
}

#[test]
fn a_cancelled_worker_reports_cancelled() {
    let mut child = Command::new(tinyperf_exe())
        .args([
            "run",
            "acceptance",
            "--events",
            "jsonl",
            "-o",
            "gemm_seconds=30",
            "-o",
            "gemm_size=256",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });
    std::thread::sleep(Duration::from_millis(1500));
    unsafe {
        kill(child.id() as i32, 15);
    }
    let status = child.wait().unwrap();
    let lines = reader.join().unwrap();
    assert_eq!(status.code(), Some(1));
    let last: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(last["event"], "run_finished");
    assert_eq!(last["state"], "cancelled");
}

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn a_run_started_over_dbus_shows_over_http_and_in_the_cli() {
    let running = AgentOnBus::start("");
    let (bus, agent) = (&running.bus, &running.agent);

    let out = Command::new("busctl")
        .arg(format!("--address={}", bus.address))
        .args([
            "call",
            "org.tinyperf.Agent1",
            "/org/tinyperf/Agent1",
            "org.tinyperf.Agent1",
            "Start",
            "sa{sv}",
            "inventory",
            "0",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // busctl prints: s "<id>"
    let id = String::from_utf8_lossy(&out.stdout)
        .trim()
        .trim_start_matches("s ")
        .trim_matches('"')
        .to_string();
    assert!(!id.is_empty());

    let record = wait_for(
        Duration::from_secs(30),
        "the run to finish over HTTP",
        || {
            let (code, body) = curl(&[&agent.url(&format!("/api/v1/runs/{id}"))]);
            let v: serde_json::Value = serde_json::from_str(&body).ok()?;
            (code == 200 && v["state"] != "running").then_some(v)
        },
    );
    assert_eq!(record["id"], id.as_str());
    assert_eq!(record["trigger"], "dbus");
    assert_eq!(record["state"], "passed");
    assert_eq!(record["stages"][0]["name"], "inventory");

    let runs = Command::new(tinyperf_exe())
        .args(["runs", "--bus", &bus.address])
        .output()
        .unwrap();
    assert!(runs.status.success(), "{runs:?}");
    assert!(String::from_utf8_lossy(&runs.stdout).contains(&id));

    let (code, body) = curl(&[
        "-X",
        "POST",
        "-H",
        "Content-Type: application/json",
        "-d",
        "{\"suite\": \"inventory\"}",
        &agent.url("/api/v1/runs"),
    ]);
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("\"error\""), "{body}");
}

#[test]
fn refused_clients_are_logged_once_per_interval() {
    use std::io::Write;
    let mut running =
        AgentOnBus::start("http_max_connections_per_peer = 4\nhttp_idle_timeout_s = 30");
    let agent = &mut running.agent;
    let held: Vec<_> = (0..4)
        .map(|_| std::net::TcpStream::connect(agent.http).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..50 {
        let (status, body) = common::http_get(agent.http, "/api/v1/status").unwrap();
        assert_eq!(status, 503, "{}", String::from_utf8_lossy(&body));
    }
    let (status, _) = common::http_get(agent.http, "/healthz").unwrap();
    assert_eq!(status, 200, "/healthz answers over the cap");
    let mut raw = std::net::TcpStream::connect(agent.http).unwrap();
    let _ = raw.write_all(b"GET / HTTP/1.1\r\nhost: t\r\n\r\n");
    drop(held);
    let log = agent.stop();
    let lines = log.matches("HTTP clients refused").count();
    assert_eq!(lines, 1, "{log}");
    assert!(!log.contains("ERROR"), "{log}");
}

/// Starts an agent on `dirs` expecting it to refuse; returns its stderr.
fn refused_start(bus: &Bus, dirs: &AgentDirs) -> String {
    let out = agent_command(&dirs.config(), &bus.address)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "the agent started: {stdout}");
    assert!(!stdout.contains("ready"), "{stdout}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn token_files_others_can_read_or_change_are_refused_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let token = dirs.dir.path().join("token");
    for (mode, access) in [(0o644, "read"), (0o666, "read and write"), (0o620, "write")] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
        let log = refused_start(&bus, &dirs);
        assert!(
            log.contains(&format!("others can {access} it")),
            "{mode:o}: {log}"
        );
        assert!(
            log.contains(&format!("chmod 600 {}", token.display())),
            "{log}"
        );
    }
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::chown(&token, Some(65534), None).unwrap();
    let log = refused_start(&bus, &dirs);
    assert!(log.contains("owned by uid 65534"), "{log}");
    assert!(
        log.contains(&format!("chown root:root {}", token.display())),
        "{log}"
    );
    std::os::unix::fs::chown(&token, Some(0), None).unwrap();

    common::write_token(&token, b"x", 0o600);
    let log = refused_start(&bus, &dirs);
    assert!(
        log.contains("holds 1 bytes of token, fewer than 32"),
        "{log}"
    );
    assert!(log.contains("/dev/urandom"), "{log}");

    common::write_token(&token, common::TOKEN.as_bytes(), 0o600);
    let mut agent = Agent::start(&bus, &dirs);
    agent.stop();
}

/// The group that may read records, made when this machine has none.
fn reader_group() -> u32 {
    if let Ok(Some(group)) = nix::unistd::Group::from_name("tinyperf") {
        return group.gid.as_raw();
    }
    let _ = Command::new("groupadd")
        .args(["--system", "tinyperf"])
        .status();
    nix::unistd::Group::from_name("tinyperf")
        .unwrap()
        .expect("group tinyperf exists after groupadd")
        .gid
        .as_raw()
}

#[test]
fn state_files_are_readable_by_the_group_and_writable_by_nobody_else() {
    use std::os::unix::fs::MetadataExt;
    let gid = reader_group();
    let bus = Bus::start();
    let dirs = AgentDirs::new("boot_suite = \"inventory\"");
    let state = dirs.state_dir();
    let agent = Agent::start(&bus, &dirs);
    let id = wait_for(Duration::from_secs(30), "the boot run", || {
        let id = run_ids(&state).into_iter().next()?;
        (read_record(&state, &id)?["state"] != "running").then_some(id)
    });
    drop(agent);
    let run = state.join("runs").join(&id);
    for dir in [state.clone(), state.join("runs"), run.clone()] {
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(m.mode() & 0o7777, 0o2750, "{}", dir.display());
        assert_eq!(m.gid(), gid, "{}", dir.display());
    }
    for file in std::fs::read_dir(&run).unwrap().flatten() {
        let m = file.metadata().unwrap();
        assert_eq!(m.mode() & 0o027, 0, "{:?} is {:o}", file.path(), m.mode());
        assert_eq!(m.gid(), gid, "{:?}", file.path());
    }
    let record = std::fs::metadata(run.join("run.json")).unwrap();
    assert_eq!(record.mode() & 0o777, 0o640);
}

/// A cancel is logged as a cancel: a worker that ends its cancelled run exits 1 by
/// design, which is no fault and never a warning.
#[test]
fn a_cancel_is_logged_as_a_cancel_not_as_a_worker_that_exited_badly() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let mut agent = Agent::start(&bus, &dirs);
    let id = agent
        .start_run(r#"{"suite": "acceptance", "options": {"gemm_seconds": 30, "gemm_size": 256}}"#);
    agent.wait_stage("cpu-gemm");
    let (code, reply) = agent.post_with_token(&format!("/api/v1/runs/{id}/cancel"), None);
    assert_eq!(code, 202, "{reply}");
    let record = agent.wait_run_ended(&id, Duration::from_secs(60), "the cancelled run");
    assert_eq!(record["state"], "cancelled", "{record}");
    let log = agent.stop();
    assert!(log.contains("run cancelled"), "{log}");
    assert!(!log.contains("exited badly"), "a cancel warned: {log}");
}

/// A run's state is final only when the agent can take the next one: a script that
/// waits for a run to read as finished and starts the next at once (a factory line) is
/// never told the agent is busy. Tried many times, as the window, if there were one,
/// would be milliseconds wide.
#[test]
fn a_run_that_reads_as_finished_leaves_the_agent_free_for_the_next() {
    let bus = Bus::start();
    let dirs = AgentDirs::new("");
    let mut agent = Agent::start(&bus, &dirs);
    let mut id = agent.start_run(r#"{"suite": "inventory"}"#);
    for round in 0..25 {
        wait_for(
            Duration::from_secs(60),
            "the run to read as finished",
            || {
                let record = agent.run_record(&id);
                (record["state"] != "running" && record["state"].is_string()).then_some(())
            },
        );
        let (code, reply) = agent.post_run(r#"{"suite": "inventory"}"#);
        assert_eq!(
            code, 202,
            "round {round}: started at once after {id}: {reply}"
        );
        id = reply["id"].as_str().unwrap().to_string();
    }
    agent.stop();
}
