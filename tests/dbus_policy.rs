//! The bus policy in `systemd/org.tinyperf.Agent1.conf`, enforced by a real
//! dbus-daemon configured like Debian's system bus, with callers of different
//! identities (`setpriv`). These tests run as root: they start the agent as root,
//! create group `tinyperf` if it is missing, and call as `nobody` with and without it.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::AgentDirs;

const NAME: &str = "org.tinyperf.Agent1";
const PATH: &str = "/org/tinyperf/Agent1";
const NOBODY: u32 = 65534;

fn repo_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// A dbus-daemon with the system bus's default policy (as in Debian's
/// /usr/share/dbus-1/system.conf) plus the agent's policy file, killed on drop.
struct SystemLikeBus {
    _dir: tempfile::TempDir,
    address: String,
    pid: i32,
}

impl SystemLikeBus {
    fn start() -> SystemLikeBus {
        // The policy names group tinyperf, which a machine that never installed
        // tinyperf lacks; every bus this file starts needs it, whichever test runs first.
        tinyperf_gid();
        let dir = tempfile::tempdir().unwrap();
        // Other users must reach the socket inside.
        set_mode(dir.path(), 0o755);
        let services = dir.path().join("services");
        std::fs::create_dir(&services).unwrap();
        std::fs::copy(
            repo_file("systemd/org.tinyperf.Agent1.service"),
            services.join("org.tinyperf.Agent1.service"),
        )
        .unwrap();
        let config = format!(
            r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <servicedir>{services}</servicedir>
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Properties"/>
    <deny send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"
          send_member="UpdateActivationEnvironment"/>
  </policy>
  <include>{policy}</include>
</busconfig>
"#,
            socket = dir.path().join("socket").display(),
            services = services.display(),
            policy = repo_file("systemd/org.tinyperf.Agent1.conf").display(),
        );
        let config_path = dir.path().join("system.conf");
        std::fs::write(&config_path, config).unwrap();
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config_path.display()))
            .args(["--fork", "--nosyslog", "--print-address=1", "--print-pid=1"])
            .stdin(Stdio::null())
            .output()
            .expect("dbus-daemon runs");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "dbus-daemon failed: {log}");
        // An unknown user or group in a policy is only a warning to dbus-daemon, and
        // would silently drop the rules that name it.
        assert!(!log.contains("Unknown"), "dbus-daemon: {log}");
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines();
        let address = lines.next().unwrap().trim().to_string();
        let pid = lines.next().unwrap().trim().parse().unwrap();
        SystemLikeBus {
            _dir: dir,
            address,
            pid,
        }
    }
}

impl Drop for SystemLikeBus {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Gives `path` to `uid` and `gid`.
fn give(path: &Path, uid: u32, gid: u32) {
    nix::unistd::chown(
        path,
        Some(nix::unistd::Uid::from_raw(uid)),
        Some(nix::unistd::Gid::from_raw(gid)),
    )
    .unwrap_or_else(|e| panic!("chown {uid}:{gid} {}: {e}", path.display()));
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The gid of group `tinyperf`, created if the system lacks it, with the agent's user
/// `tinyperf` in it (as systemd/tinyperf.sysusers.conf makes them on the box).
fn tinyperf_gid() -> u32 {
    let status = Command::new("groupadd")
        .args(["-f", "--system", "tinyperf"])
        .status()
        .expect("groupadd runs (these tests run as root)");
    assert!(status.success(), "groupadd -f tinyperf failed");
    if nix::unistd::User::from_name("tinyperf").unwrap().is_none() {
        // Another test may add it at the same moment; the lookup below decides.
        let _ = Command::new("useradd")
            .args(["--system", "--gid", "tinyperf", "--no-create-home"])
            .args(["--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin"])
            .arg("tinyperf")
            .status();
    }
    assert!(
        nix::unistd::User::from_name("tinyperf").unwrap().is_some(),
        "useradd tinyperf failed"
    );
    let out = Command::new("getent")
        .args(["group", "tinyperf"])
        .output()
        .unwrap();
    let line = String::from_utf8(out.stdout).unwrap();
    line.split(':').nth(2).unwrap().trim().parse().unwrap()
}

/// The uid of user `tinyperf` (see [`tinyperf_gid`]).
fn tinyperf_uid() -> u32 {
    tinyperf_gid();
    nix::unistd::User::from_name("tinyperf")
        .unwrap()
        .unwrap()
        .uid
        .as_raw()
}

/// `tinyperf agent` as root on the bus, killed on drop.
struct RootAgent {
    child: Child,
    _dirs: AgentDirs,
}

impl RootAgent {
    fn start(bus: &SystemLikeBus) -> RootAgent {
        let dirs = AgentDirs::new("");
        let mut child = common::agent_command(&dirs.config(), &bus.address)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if line.starts_with("ready ") {
                    let _ = tx.send(());
                }
            }
        });
        if rx.recv_timeout(Duration::from_secs(30)).is_err() {
            let _ = child.kill();
            panic!("the agent did not become ready on the system-like bus");
        }
        RootAgent { child, _dirs: dirs }
    }
}

impl Drop for RootAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Who a command runs as.
#[derive(Clone, Copy)]
enum Caller {
    Root,
    /// `nobody`, in no group but its own.
    Nobody,
    /// `nobody` with group `tinyperf` as a supplementary group.
    NobodyInGroup(u32),
}

fn run_as(caller: Caller, program: &str, args: &[&str]) -> Output {
    let mut command = match caller {
        Caller::Root => Command::new(program),
        Caller::Nobody | Caller::NobodyInGroup(_) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={NOBODY}"))
                .arg(format!("--regid={NOBODY}"));
            match caller {
                Caller::NobodyInGroup(gid) => c.arg(format!("--groups={gid}")),
                _ => c.arg("--clear-groups"),
            };
            c.arg(program);
            c
        }
    };
    command
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program} runs: {e}"))
}

/// Calls through `dbus-send`, which prints the error name of a refused call.
fn call(
    bus: &SystemLikeBus,
    caller: Caller,
    interface_member: &str,
    args: &[&str],
) -> (bool, String) {
    let mut argv = vec![
        format!("--bus={}", bus.address),
        "--print-reply".to_string(),
        format!("--dest={NAME}"),
        PATH.to_string(),
        interface_member.to_string(),
    ];
    argv.extend(args.iter().map(|a| a.to_string()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let out = run_as(caller, "dbus-send", &argv);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Calls `Start(inventory, {})` through `busctl`, which can send an `a{sv}`.
fn start_inventory(bus: &SystemLikeBus, caller: Caller) -> (bool, String) {
    let address = format!("--address={}", bus.address);
    let out = run_as(
        caller,
        "busctl",
        &[
            &address,
            "call",
            NAME,
            PATH,
            NAME,
            "Start",
            "sa{sv}",
            "inventory",
            "0",
        ],
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

const ACCESS_DENIED: &str = "org.freedesktop.DBus.Error.AccessDenied";

#[test]
fn anyone_reads_but_only_root_and_group_tinyperf_write() {
    let gid = tinyperf_gid();
    let bus = SystemLikeBus::start();
    let _agent = RootAgent::start(&bus);
    let reads: &[(&str, &[&str])] = &[
        ("org.tinyperf.Agent1.ListRuns", &["uint32:5"]),
        ("org.tinyperf.Agent1.GetStatus", &[]),
        (
            "org.freedesktop.DBus.Properties.Get",
            &["string:org.tinyperf.Agent1", "string:State"],
        ),
        (
            "org.freedesktop.DBus.Properties.GetAll",
            &["string:org.tinyperf.Agent1"],
        ),
        ("org.freedesktop.DBus.Introspectable.Introspect", &[]),
        ("org.freedesktop.DBus.Peer.Ping", &[]),
    ];
    for (member, args) in reads {
        let (ok, text) = call(&bus, Caller::Nobody, member, args);
        assert!(ok, "nobody may call {member}: {text}");
    }
    // GetRun is allowed: the agent itself answers (NotFound), not the bus.
    let (ok, text) = call(
        &bus,
        Caller::Nobody,
        "org.tinyperf.Agent1.GetRun",
        &["string:nope"],
    );
    assert!(
        !ok && text.contains("org.tinyperf.Agent1.Error.NotFound"),
        "{text}"
    );

    // dbus-send cannot build an a{sv}; the bus decides on the member before it looks
    // at the arguments, so an a{ss} shows the refusal's name all the same.
    let writes: &[(&str, &[&str])] = &[
        (
            "org.tinyperf.Agent1.Start",
            &["string:inventory", "dict:string:string:"],
        ),
        ("org.tinyperf.Agent1.Cancel", &["string:nope"]),
        ("org.tinyperf.Agent1.Rescan", &[]),
        ("org.tinyperf.Agent1.FactoryReset", &[]),
        (
            "org.freedesktop.DBus.Properties.Set",
            &[
                "string:org.tinyperf.Agent1",
                "string:State",
                "variant:string:running",
            ],
        ),
    ];
    for (member, args) in writes {
        let (ok, text) = call(&bus, Caller::Nobody, member, args);
        assert!(
            !ok && text.contains(ACCESS_DENIED),
            "nobody must not call {member}: {text}"
        );
    }
    let (ok, text) = start_inventory(&bus, Caller::Nobody);
    assert!(!ok && text.contains("Access denied"), "{text}");
    // Properties.Set and FactoryReset are refused by the bus even for group tinyperf.
    for (member, args) in &writes[3..] {
        let (ok, text) = call(&bus, Caller::NobodyInGroup(gid), member, args);
        assert!(
            !ok && text.contains(ACCESS_DENIED),
            "group tinyperf must not call {member}: {text}"
        );
    }

    // A member of group tinyperf gets through to the agent.
    let (ok, text) = call(
        &bus,
        Caller::NobodyInGroup(gid),
        "org.tinyperf.Agent1.Rescan",
        &[],
    );
    assert!(ok, "group tinyperf may rescan: {text}");
    let (ok, text) = call(
        &bus,
        Caller::NobodyInGroup(gid),
        "org.tinyperf.Agent1.Cancel",
        &["string:nope"],
    );
    assert!(
        !ok && text.contains("org.tinyperf.Agent1.Error.NotFound"),
        "{text}"
    );
    let (ok, text) = start_inventory(&bus, Caller::NobodyInGroup(gid));
    assert!(
        ok && text.starts_with("s \""),
        "group tinyperf may start: {text}"
    );

    // Root too, once that run is over.
    wait_idle(&bus);
    let (ok, text) = start_inventory(&bus, Caller::Root);
    assert!(ok && text.starts_with("s \""), "root may start: {text}");
}

fn wait_idle(bus: &SystemLikeBus) {
    common::wait_for(Duration::from_secs(60), "the agent to be idle", || {
        let (_, text) = call(
            bus,
            Caller::Root,
            "org.freedesktop.DBus.Properties.Get",
            &["string:org.tinyperf.Agent1", "string:State"],
        );
        text.contains("\"idle\"").then_some(())
    });
}

#[test]
fn the_cli_explains_a_refusal_and_still_reads() {
    let bus = SystemLikeBus::start();
    let _agent = RootAgent::start(&bus);
    let exe = common::tinyperf_exe();
    let exe = exe.to_str().unwrap();

    let out = run_as(
        Caller::Nobody,
        exe,
        &["start", "inventory", "--bus", &bus.address],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("permission denied") && err.contains("group tinyperf"),
        "{err}"
    );

    let out = run_as(
        Caller::Nobody,
        exe,
        &["status", "--json", "--bus", &bus.address],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["state"], "idle");
}

#[test]
fn only_root_and_user_tinyperf_may_own_the_name() {
    let bus = SystemLikeBus::start();
    // An agent as nobody, with files it can read and write.
    let dirs = AgentDirs::new("");
    set_mode(dirs.dir.path(), 0o755);
    std::fs::create_dir(dirs.state_dir()).unwrap();
    give(&dirs.state_dir(), NOBODY, NOBODY);
    // Its own token, kept private, as the agent requires of a token file.
    nix::unistd::chown(
        &dirs.dir.path().join("token"),
        Some(nix::unistd::Uid::from_raw(NOBODY)),
        None,
    )
    .unwrap();
    let config = dirs.config();
    let exe = common::tinyperf_exe();
    let out = run_as(
        Caller::Nobody,
        exe.to_str().unwrap(),
        &[
            "agent",
            "--config",
            config.to_str().unwrap(),
            "--bus",
            &bus.address,
        ],
    );
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{log}");
    assert!(
        log.contains("does not allow this user to own org.tinyperf.Agent1"),
        "{log}"
    );

    // Root may.
    let _agent = RootAgent::start(&bus);
    let (ok, text) = call(
        &bus,
        Caller::Root,
        "org.tinyperf.Agent1.ListRuns",
        &["uint32:1"],
    );
    assert!(ok, "{text}");
}

#[test]
fn activation_file_starts_the_unit_as_user_tinyperf() {
    let text = std::fs::read_to_string(repo_file("systemd/org.tinyperf.Agent1.service")).unwrap();
    let keys: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        keys,
        [
            "[D-BUS Service]",
            "Name=org.tinyperf.Agent1",
            "Exec=/usr/bin/tinyperf agent",
            "User=tinyperf",
            "SystemdService=tinyperf.service",
        ]
    );
    // dbus-daemon reads it: the name is activatable.
    let bus = SystemLikeBus::start();
    let out = Command::new("dbus-send")
        .arg(format!("--bus={}", bus.address))
        .args([
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.ListActivatableNames",
        ])
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains("\"org.tinyperf.Agent1\""), "{listed}");
}

/// The groups of the unit's `SupplementaryGroups=` that this machine has.
fn unit_groups() -> Vec<u32> {
    ["render", "video", "systemd-journal"]
        .iter()
        .filter_map(|name| nix::unistd::Group::from_name(name).ok().flatten())
        .map(|group| group.gid.as_raw())
        .collect()
}

/// A cgroup delegated to user tinyperf, as `Delegate=yes` gives the unit its group:
/// the folder and its `cgroup.procs`, `cgroup.threads` and `cgroup.subtree_control`
/// are the user's. Removed on drop, once empty.
struct DelegatedCgroup {
    dir: PathBuf,
}

impl DelegatedCgroup {
    fn make(uid: u32, gid: u32) -> Option<DelegatedCgroup> {
        let parent = tinyperf::agent::cgroup::RunCgroups::of_this_process().ok()?;
        let dir = parent
            .parent()
            .join(format!("tinyperf-test-agent-{}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        for path in [
            dir.clone(),
            dir.join("cgroup.procs"),
            dir.join("cgroup.threads"),
            dir.join("cgroup.subtree_control"),
        ] {
            give(&path, uid, gid);
        }
        Some(DelegatedCgroup { dir })
    }
}

impl Drop for DelegatedCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        for _ in 0..200 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// The agent as the unit runs it: user and group tinyperf with the unit's supplementary
/// groups, CAP_SYSLOG its only capability (ambient, and the whole bounding set), no new
/// privileges, umask 0027, in a cgroup delegated to it. It owns the name, serves HTTP
/// with a token it may only read, reads the kernel's log, keeps its runs to its group, and
/// ends a benchmark child that left its session through the run's cgroup.
#[test]
fn the_agent_as_user_tinyperf_with_only_cap_syslog_serves_and_runs() {
    let uid = tinyperf_uid();
    let gid = tinyperf_gid();
    let bus = SystemLikeBus::start();
    let scratch = tempfile::tempdir().unwrap();
    set_mode(scratch.path(), 0o755);
    let escaped_pid = scratch.path().join("escaped.pid");
    let dirs = AgentDirs::new(&format!(
        "cancel_grace_s = 2\n[benchmarks.escaper]\ncommand = \"setsid sh -c 'echo $$ > {}; exec sleep 300' & wait\"\ncwd = \"{}\"\n",
        escaped_pid.display(),
        scratch.path().display()
    ));
    set_mode(dirs.dir.path(), 0o755);
    give(scratch.path(), uid, gid);
    std::fs::create_dir(dirs.state_dir()).unwrap();
    give(&dirs.state_dir(), uid, gid);
    // The token as the image keeps it: root's, read by group tinyperf.
    let token = dirs.dir.path().join("token");
    give(&token, 0, gid);
    set_mode(&token, 0o640);

    let cgroup = DelegatedCgroup::make(uid, gid);
    assert_eq!(
        cgroup.is_some(),
        tinyperf::agent::cgroup::RunCgroups::of_this_process().is_ok(),
        "a writable cgroup hierarchy, but no group could be delegated"
    );
    let groups = std::iter::once(gid)
        .chain(unit_groups())
        .map(|g| g.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let enter_cgroup = cgroup
        .as_ref()
        .map(|c| format!("echo $$ > '{}/cgroup.procs'\n", c.dir.display()))
        .unwrap_or_default();
    let wrapper = scratch.path().join("as-the-unit.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nset -e\n{enter_cgroup}umask 0027\nexec setpriv --reuid={uid} --regid={gid} --groups={groups} \
             --inh-caps=-all,+syslog --ambient-caps=-all,+syslog --bounding-set=-all,+syslog \
             --no-new-privs \"$@\"\n"
        ),
    )
    .unwrap();
    let mut agent =
        common::Agent::start_wrapped(&bus.address, &dirs, &["sh", wrapper.to_str().unwrap()]);

    // Who it is, and what it may do.
    let pid = agent.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    assert!(field("Uid:").starts_with(&format!("{uid}\t")), "{status}");
    assert_eq!(field("CapEff:"), "0000000400000000", "{status}");
    assert_eq!(field("CapBnd:"), "0000000400000000", "{status}");
    assert_eq!(field("NoNewPrivs:"), "1", "{status}");

    // It owns the name: a read over the bus reaches it.
    let (ok, text) = call(
        &bus,
        Caller::Nobody,
        "org.tinyperf.Agent1.ListRuns",
        &["uint32:1"],
    );
    assert!(ok, "{text}");

    // An inventory run, started by root over D-Bus: the kernel's log read, the run's
    // folder its group's only.
    let (ok, text) = start_inventory(&bus, Caller::Root);
    assert!(ok, "{text}");
    let id = text
        .trim()
        .trim_start_matches("s ")
        .trim_matches('"')
        .to_string();
    let record = common::wait_for(Duration::from_secs(60), "the inventory run's end", || {
        common::read_record(&dirs.state_dir(), &id).filter(|r| r["state"] != "running")
    });
    assert_eq!(record["state"], "passed", "{record:#}");
    // Without CAP_SYSLOG (dmesg_restrict=1) the inventory says "kernel messages not
    // read: /dev/kmsg: Operation not permitted".
    let findings = record["hardware"]["findings"].to_string();
    assert!(!findings.contains("kernel messages not read"), "{findings}");
    use std::os::unix::fs::MetadataExt;
    let run_dir = dirs.state_dir().join("runs").join(&id);
    let meta = std::fs::metadata(&run_dir).unwrap();
    assert_eq!(
        (meta.mode() & 0o7777, meta.uid(), meta.gid()),
        (0o750, uid, gid)
    );
    for file in std::fs::read_dir(&run_dir).unwrap().flatten() {
        let meta = file.metadata().unwrap();
        assert_eq!(meta.mode() & 0o027, 0, "{:?}", file.path());
        assert_eq!(meta.gid(), gid, "{:?}", file.path());
    }

    // A benchmark whose child leaves its session, started over HTTP with the token,
    // then cancelled: the child goes with the run's cgroup.
    let post = |path: &str, body: &str| {
        let out = Command::new("curl")
            .args(["-s", "-o", "-", "-w", "\n%{http_code}", "-X", "POST"])
            .args(["-H", &format!("Authorization: Bearer {}", common::TOKEN)])
            .args(["-H", "Content-Type: application/json", "--data", body])
            .arg(format!("http://{}{path}", agent.http))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let reply = post(
        "/api/v1/runs",
        r#"{"suite":"external","options":{"benchmark":"escaper"}}"#,
    );
    assert!(reply.ends_with("202"), "{reply}");
    let run: serde_json::Value = serde_json::from_str(reply.rsplit_once('\n').unwrap().0).unwrap();
    let run = run["id"].as_str().unwrap().to_string();
    let escaped: i32 = common::wait_for(Duration::from_secs(30), "the benchmark's child", || {
        std::fs::read_to_string(&escaped_pid)
            .ok()?
            .trim()
            .parse()
            .ok()
    });
    let reply = post(&format!("/api/v1/runs/{run}/cancel"), "");
    assert!(reply.ends_with("202") || reply.ends_with("200"), "{reply}");
    common::wait_for(Duration::from_secs(30), "the escaped child's end", || {
        (!common::process_alive(escaped)).then_some(())
    });

    let log = agent.stop();
    if cgroup.is_some() {
        assert!(log.contains("each run gets a cgroup of its own"), "{log}");
    }
}
