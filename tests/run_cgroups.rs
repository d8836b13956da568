//! Every run in a cgroup of its own, on a real agent process and the host's real cgroup v2
//! hierarchy: a benchmark's child that leaves its session (`setsid`) is killed with the
//! run however the run ends (cancel, the worker killed, the agent stopped), what an agent
//! killed outright leaves running is killed when the next agent starts, and an agent that
//! may not make groups says so and still ends what stays in the run's session.
//!
//! Where this machine gives no writable cgroup v2 hierarchy (not root, cgroup v1 only),
//! each test checks that the agent says it has none instead.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{http_get, process_alive as alive, wait_for, Agent, AgentDirs, Bus, TOKEN};
use tinyperf::agent::cgroup::RunCgroups;

const NO_CGROUP: &str = "runs get no cgroup of their own";

/// A benchmark that starts a `sleep` in a session of its own, writes its pid to
/// `pid_file`, and waits.
fn escaping_benchmark(pid_file: &Path) -> String {
    format!(
        "[benchmarks.escaper]\ncommand = \"setsid sh -c 'echo $$ > {}; exec sleep 300' & wait\"\n",
        pid_file.display()
    )
}

fn cgroups_here() -> bool {
    RunCgroups::of_this_process().is_ok()
}

fn session_of(pid: i32) -> i32 {
    nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(pid)))
        .unwrap()
        .as_raw()
}

fn post(agent: &Agent, path: &str, body: &str) -> (u16, String) {
    let output = Command::new("curl")
        .args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args(["-H", "Content-Type: application/json", "--data", body])
        .arg(format!("http://{}{path}", agent.http))
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

/// Starts the escaping benchmark: the run's id and the escaped process's pid.
fn start_escaper(agent: &Agent, pid_file: &Path) -> (String, i32) {
    start_benchmark(agent, "escaper", pid_file)
}

/// Starts benchmark `name`, which writes the pid of a child to `pid_file`: the run's id
/// and that pid.
fn start_benchmark(agent: &Agent, name: &str, pid_file: &Path) -> (String, i32) {
    let (status, body) = post(
        agent,
        "/api/v1/runs",
        &format!(r#"{{"suite":"external","options":{{"benchmark":"{name}"}}}}"#),
    );
    assert_eq!(status, 202, "{body}");
    let id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let pid = wait_for(Duration::from_secs(30), "the benchmark's child", || {
        std::fs::read_to_string(pid_file).ok()?.trim().parse().ok()
    });
    (id, pid)
}

fn run_state(agent: &Agent, id: &str) -> Option<String> {
    let (status, body) = http_get(agent.http, &format!("/api/v1/runs/{id}")).ok()?;
    if status != 200 {
        return None;
    }
    let record: serde_json::Value = serde_json::from_slice(&body).ok()?;
    record["state"].as_str().map(str::to_string)
}

fn wait_final(agent: &Agent, id: &str) -> String {
    wait_for(Duration::from_secs(60), "the run's end", || {
        run_state(agent, id).filter(|state| state != "running" && state != "cancelling")
    })
}

fn wait_gone(pid: i32, what: &str) {
    wait_for(Duration::from_secs(15), what, || {
        (!alive(pid)).then_some(())
    });
}

/// The run's group, while it runs.
fn run_group(id: &str) -> PathBuf {
    RunCgroups::of_this_process()
        .unwrap()
        .parent()
        .join(format!("tinyperf-run-{id}"))
}

fn kill(pid: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
}

struct Setup {
    agent: Agent,
    dirs: AgentDirs,
    bus: Bus,
    pid_file: PathBuf,
    _scratch: tempfile::TempDir,
}

fn setup() -> Setup {
    let scratch = tempfile::tempdir().unwrap();
    let pid_file = scratch.path().join("escaped.pid");
    let bus = Bus::start();
    let dirs = AgentDirs::new(&format!(
        "cancel_grace_s = 2\n{}",
        escaping_benchmark(&pid_file)
    ));
    let agent = Agent::start(&bus, &dirs);
    Setup {
        agent,
        dirs,
        bus,
        pid_file,
        _scratch: scratch,
    }
}

/// An agent running the escaping benchmark: the setup, the run's id and the escaped
/// child's pid. Where this machine gives no cgroups, checks that the agent says so
/// instead, and gives `None`.
fn escaper_started() -> Option<(Setup, String, i32)> {
    let mut setup = setup();
    if !cgroups_here() {
        let log = setup.agent.kill();
        assert!(log.contains(NO_CGROUP), "{log}");
        return None;
    }
    let (id, escaped) = start_escaper(&setup.agent, &setup.pid_file);
    Some((setup, id, escaped))
}

/// Runs `end` on a run whose benchmark escaped its session, then checks the escaped
/// process is gone and the run's group removed.
fn escaped_child_goes_when(end: impl FnOnce(&mut Setup, &str)) {
    let Some((mut setup, id, escaped)) = escaper_started() else {
        return;
    };
    let group = run_group(&id);
    assert!(group.is_dir(), "{} is missing", group.display());
    let worker_session = session_of(
        std::fs::read_to_string(group.join("cgroup.procs"))
            .unwrap()
            .lines()
            .map(|l| l.parse::<i32>().unwrap())
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.contains("--events"))
            })
            .expect("the worker is in the run's group"),
    );
    assert_ne!(
        session_of(escaped),
        worker_session,
        "the child never left the worker's session, so this checks nothing"
    );
    end(&mut setup, &id);
    wait_gone(escaped, "the escaped child's end");
    wait_for(Duration::from_secs(15), "the run group's removal", || {
        (!group.exists()).then_some(())
    });
}

#[test]
fn a_child_that_leaves_the_session_is_killed_on_cancel() {
    escaped_child_goes_when(|setup, id| {
        let (status, body) = post(&setup.agent, &format!("/api/v1/runs/{id}/cancel"), "");
        assert!(status < 300, "{status} {body}");
        assert_eq!(wait_final(&setup.agent, id), "cancelled");
    });
}

#[test]
fn a_child_that_leaves_the_session_is_killed_with_a_killed_worker() {
    escaped_child_goes_when(|setup, id| {
        let procs = std::fs::read_to_string(run_group(id).join("cgroup.procs")).unwrap();
        for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
            if std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| c.contains("--events"))
            {
                kill(pid, nix::sys::signal::Signal::SIGKILL);
            }
        }
        assert_ne!(wait_final(&setup.agent, id), "passed");
    });
}

#[test]
fn a_child_that_leaves_the_session_is_killed_when_the_agent_stops() {
    escaped_child_goes_when(|setup, _| {
        setup.agent.stop();
    });
}

#[test]
fn what_a_killed_agent_left_running_is_killed_when_the_next_starts() {
    let Some((mut setup, id, escaped)) = escaper_started() else {
        return;
    };
    setup.agent.kill();
    // Nothing ended the run: its escaped child outlives the agent (and its worker).
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        alive(escaped),
        "the child went with the agent; nothing to check"
    );
    assert!(run_group(&id).is_dir());
    let mut next = Agent::start(&setup.bus, &setup.dirs);
    wait_gone(escaped, "the leftover's end at the next start");
    assert!(!run_group(&id).exists());
    assert_eq!(run_state(&next, &id).as_deref(), Some("interrupted"));
    let log = next.stop();
    assert!(
        log.contains("killed what an earlier agent's run left running"),
        "{log}"
    );
}

#[test]
fn an_agent_without_cgroups_says_so_and_still_ends_the_session() {
    let uid = nix::unistd::geteuid();
    if !uid.is_root() || !cgroups_here() {
        // Nothing here can take the hierarchy away from the agent; it has none anyway.
        let mut setup = setup();
        let log = setup.agent.kill();
        assert!(cgroups_here() || log.contains(NO_CGROUP), "{log}");
        return;
    }
    // The agent in a mount namespace of its own where the cgroup v2 hierarchy is
    // read-only, as a unit without Delegate= sees it.
    let scratch = tempfile::tempdir().unwrap();
    let pid_file = scratch.path().join("child.pid");
    let bus = Bus::start();
    let dirs = AgentDirs::new(&format!(
        "cancel_grace_s = 2\n[benchmarks.sleeper]\ncommand = \"sleep 300 & echo $! > {}; wait\"\n",
        pid_file.display()
    ));
    let hierarchy = RunCgroups::of_this_process()
        .unwrap()
        .parent()
        .to_path_buf();
    let wrapper = scratch.path().join("read-only-cgroups.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nset -e\nmount --bind '{0}' '{0}'\nmount -o remount,bind,ro '{0}'\nexec \"$@\"\n",
            hierarchy.display()
        ),
    )
    .unwrap();
    let agent = Agent::start_wrapped(
        &bus.address,
        &dirs,
        &[
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            wrapper.to_str().unwrap(),
        ],
    );
    let (id, child) = start_benchmark(&agent, "sleeper", &pid_file);
    assert!(!run_group(&id).exists());
    let (status, body) = post(&agent, &format!("/api/v1/runs/{id}/cancel"), "");
    assert!(status < 300, "{status} {body}");
    assert_eq!(wait_final(&agent, &id), "cancelled");
    wait_gone(child, "the benchmark child's end by its session");
    let mut agent = agent;
    let log = agent.stop();
    assert!(log.contains(NO_CGROUP), "{log}");
}
