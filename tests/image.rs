//! The OS image as the agent and the command line see it, on trees laid out as the
//! kernel lays them out (`tinyperf::update::fixture`): `tinyperf image status`, GET
//! /api/v1/image and the factory-reset request over HTTP (a real agent on loopback) and
//! D-Bus (a real dbus-daemon), and the root side of the reset with stand-in `bootctl`
//! and `systemctl` scripts, which cannot run here.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::curl::curl_json;
use common::{tinyperf_exe, wait_for, AgentOnBus, Bus};
use serde_json::Value;
use tinyperf::update::fixture::{self, ImageLayout, SlotContent};
use tinyperf::update::reset::REQUEST_FILE;

const VERSION: &str = "20261205.1130";
const OLDER: &str = "20261120.0900";

/// An image booted from slot A, slot B empty, verity on.
fn image_tree() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(VERSION),
            b: SlotContent::Empty,
            booted: 'a',
            verity: true,
        },
    );
    root
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// An agent on a private bus reading the image below `root`, with a benchmark
/// `sleep` that runs for a minute.
fn agent_on(root: &Path) -> AgentOnBus {
    AgentOnBus::start(&format!(
        "image_root = \"{}\"\n[benchmarks.sleep]\ncommand = [\"sleep\", \"60\"]\n",
        root.display()
    ))
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn image_status_prints_the_slots_and_json_in_the_apis_shape() {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(OLDER),
            b: SlotContent::Version(VERSION),
            booted: 'b',
            verity: true,
        },
    );
    let out = Command::new(tinyperf_exe())
        .args(["image", "status", "--json", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["image"], true);
    assert_eq!(json["version"], VERSION);
    assert_eq!(json["slot"], "b");
    assert_eq!(json["other_version"], OLDER);
    assert_eq!(json["verity"], "verified");
    assert_eq!(json["slots"][0]["state"], "installed");
    assert_eq!(json["slots"][1]["root_partition"], "vda5");
    assert_eq!(json["state_partition"]["device"], "vda6");

    let out = Command::new(tinyperf_exe())
        .args(["image", "status", "--root"])
        .arg(root.path())
        .output()
        .unwrap();
    let human = text(&out);
    assert!(
        human.starts_with(&format!("OS {VERSION} · slot B · verified\n")),
        "{human}"
    );
    assert!(
        human.contains(&format!("slot A          {OLDER}")),
        "{human}"
    );

    let debian = tempfile::tempdir().unwrap();
    fixture::debian(debian.path());
    let out = Command::new(tinyperf_exe())
        .args(["image", "status", "--json", "--root"])
        .arg(debian.path())
        .output()
        .unwrap();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["image"], false);
    assert!(json["message"]
        .as_str()
        .unwrap()
        .starts_with("not a tinybox OS image"));
}

#[test]
fn get_image_and_the_factory_reset_post_over_http() {
    let root = image_tree();
    let on = agent_on(root.path());
    let agent = &on.agent;
    let image = agent.get_json("/api/v1/image");
    assert_eq!(image["image"], true, "{image}");
    assert_eq!(image["version"], VERSION);
    assert_eq!(image["slot"], "a");
    assert_eq!(image["factory_reset_pending"], false);
    let request = agent.state_dir.join(REQUEST_FILE);
    let url = agent.url("/api/v1/image/factory-reset");
    let right = format!("{{\"confirm\": \"{}\"}}", hostname());

    let (code, body) = curl_json(&["-X", "POST", "--json", &right, &url]);
    assert_eq!(code, 401, "{body}");
    for wrong in ["{\"confirm\": \"some-other-box\"}", "{}", ""] {
        let (code, body) = agent.post_with_token(
            "/api/v1/image/factory-reset",
            Some(wrong).filter(|w| !w.is_empty()),
        );
        assert_eq!(code, 400, "{wrong}: {body}");
        assert_eq!(body["error"]["code"], "confirm_mismatch", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("\"{}\"", hostname())),
            "{message}"
        );
    }
    assert!(!request.exists());

    // A run going refuses it.
    let id = agent.start_run(r#"{"suite": "external", "options": {"benchmark": "sleep"}}"#);
    wait_for(Duration::from_secs(30), "the run to be going", || {
        (agent.status()["state"] == "running").then_some(())
    });
    let (code, body) = agent.post_with_token("/api/v1/image/factory-reset", Some(&right));
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "busy");
    assert!(!request.exists());
    let (code, _) = agent.post_with_token(&format!("/api/v1/runs/{id}/cancel"), None);
    assert_eq!(code, 202);
    agent.wait_run_ended(&id, Duration::from_secs(60), "the cancelled run");

    let (code, body) = agent.post_with_token("/api/v1/image/factory-reset", Some(&right));
    assert_eq!(code, 202, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"factory_reset": "requested", "message": "the box reboots and erases its state partition"})
    );
    let written: Value = serde_json::from_slice(&std::fs::read(&request).unwrap()).unwrap();
    assert!(
        written["requested_by"]
            .as_str()
            .unwrap()
            .starts_with("http "),
        "{written}"
    );
    assert!(written["requested_at"].is_string());
    assert_eq!(
        agent.get_json("/api/v1/image")["factory_reset_pending"],
        true
    );

    // The metrics and the page name the image.
    let (_, metrics) = common::curl::curl(&[&agent.url("/metrics")]);
    assert!(
        metrics.contains(&format!(
            "\ntinyperf_image_info{{version=\"{VERSION}\",slot=\"a\"}} 1\n"
        )),
        "{metrics}"
    );
    let (_, page) = common::curl::curl(&[&agent.url("/")]);
    assert!(
        page.contains(&format!("OS {VERSION} · slot A · verified")),
        "{page}"
    );
}

#[test]
fn off_an_image_get_says_so_and_the_factory_reset_is_refused() {
    let root = tempfile::tempdir().unwrap();
    fixture::debian(root.path());
    let on = agent_on(root.path());
    let agent = &on.agent;
    let image = agent.get_json("/api/v1/image");
    assert_eq!(image["image"], false);
    assert!(image["message"]
        .as_str()
        .unwrap()
        .starts_with("not a tinybox OS image ("));
    let right = format!("{{\"confirm\": \"{}\"}}", hostname());
    let (code, body) = agent.post_with_token("/api/v1/image/factory-reset", Some(&right));
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "not_an_image");
    assert!(!agent.state_dir.join(REQUEST_FILE).exists());
    let (_, metrics) = common::curl::curl(&[&agent.url("/metrics")]);
    assert!(!metrics.contains("tinyperf_image_info"), "{metrics}");
    // The rest of the agent works as anywhere.
    assert_eq!(agent.status()["state"], "idle");
}

/// Calls `member` of the agent with `dbus-send`, as `setpriv_as` when given: whether it
/// succeeded, and what it printed.
fn dbus_send(bus: &str, setpriv_as: Option<u32>, member: &str, args: &[&str]) -> (bool, String) {
    let mut command = match setpriv_as {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .arg("--clear-groups")
                .arg("dbus-send");
            c
        }
        None => Command::new("dbus-send"),
    };
    let out = command
        .arg(format!("--bus={bus}"))
        .args([
            "--print-reply",
            "--dest=org.tinyperf.Agent1",
            "/org/tinyperf/Agent1",
        ])
        .arg(member)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("dbus-send runs");
    (out.status.success(), text(&out))
}

fn property(bus: &str, name: &str) -> String {
    let (ok, text) = dbus_send(
        bus,
        None,
        "org.freedesktop.DBus.Properties.Get",
        &["string:org.tinyperf.Agent1", &format!("string:{name}")],
    );
    assert!(ok, "{text}");
    text
}

#[test]
fn image_properties_and_factory_reset_over_dbus() {
    let root = image_tree();
    let on = agent_on(root.path());
    let bus = &on.bus.address;
    assert!(property(bus, "ImageVersion").contains(&format!("\"{VERSION}\"")));
    let slots = property(bus, "ImageSlots");
    assert!(
        slots.contains("\\\"slot\\\":\\\"a\\\"") || slots.contains("\"slot\":\"a\""),
        "{slots}"
    );
    let request = on.agent.state_dir.join(REQUEST_FILE);

    // While a run is going: Busy.
    let id = on
        .agent
        .start_run(r#"{"suite": "external", "options": {"benchmark": "sleep"}}"#);
    wait_for(Duration::from_secs(30), "the run to be going", || {
        (on.agent.status()["state"] == "running").then_some(())
    });
    let (ok, text) = dbus_send(bus, None, "org.tinyperf.Agent1.FactoryReset", &[]);
    assert!(
        !ok && text.contains("org.tinyperf.Agent1.Error.Busy"),
        "{text}"
    );
    assert!(!request.exists());
    on.agent
        .post_with_token(&format!("/api/v1/runs/{id}/cancel"), None);
    on.agent
        .wait_run_ended(&id, Duration::from_secs(60), "the cancelled run");

    // Root (this test) may.
    let (ok, text) = dbus_send(bus, None, "org.tinyperf.Agent1.FactoryReset", &[]);
    assert!(ok, "{text}");
    let written: Value = serde_json::from_slice(&std::fs::read(&request).unwrap()).unwrap();
    assert_eq!(written["requested_by"], "dbus uid 0");
    assert!(
        property(bus, "ImageSlots").contains("factory_reset_pending\\\":true")
            || property(bus, "ImageSlots").contains("factory_reset_pending\":true")
    );
}

#[test]
fn factory_reset_over_dbus_off_an_image_is_not_an_image() {
    let root = tempfile::tempdir().unwrap();
    fixture::debian(root.path());
    let on = agent_on(root.path());
    assert!(property(&on.bus.address, "ImageVersion").contains("string \"\""));
    let (ok, text) = dbus_send(
        &on.bus.address,
        None,
        "org.tinyperf.Agent1.FactoryReset",
        &[],
    );
    assert!(
        !ok && text.contains("org.tinyperf.Agent1.Error.NotAnImage"),
        "{text}"
    );
    assert!(text.contains("not a tinybox OS image"), "{text}");
}

/// A bus that lets anyone call anything: the agent's own check of its caller is all
/// that stands between a user and FactoryReset.
struct OpenBus {
    _dir: tempfile::TempDir,
    address: String,
    pid: i32,
}

impl OpenBus {
    fn start() -> OpenBus {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let config = dir.path().join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                dir.path().join("socket").display()
            ),
        )
        .unwrap();
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--fork", "--nosyslog", "--print-address=1", "--print-pid=1"])
            .stdin(Stdio::null())
            .output()
            .expect("dbus-daemon runs");
        assert!(out.status.success(), "{}", text(&out));
        let printed = String::from_utf8(out.stdout).unwrap();
        let mut lines = printed.lines();
        let address = lines.next().unwrap().trim().to_string();
        let pid = lines.next().unwrap().trim().parse().unwrap();
        OpenBus {
            _dir: dir,
            address,
            pid,
        }
    }
}

impl Drop for OpenBus {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

#[test]
fn the_agent_refuses_factory_reset_to_a_caller_not_root_even_where_the_bus_lets_it_through() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: calling as another user needs root (setpriv)");
        return;
    }
    const NOBODY: u32 = 65534;
    let root = image_tree();
    let bus = OpenBus::start();
    let dirs = common::AgentDirs::new(&format!("image_root = \"{}\"", root.path().display()));
    // `env` only runs the agent: the bus is not one of common::Bus's.
    let agent = common::Agent::start_wrapped(&bus.address, &dirs, &["env"]);
    let (ok, text) = dbus_send(
        &bus.address,
        Some(NOBODY),
        "org.tinyperf.Agent1.FactoryReset",
        &[],
    );
    assert!(
        !ok && text.contains("org.tinyperf.Agent1.Error.AccessDenied")
            && text.contains("uid 65534"),
        "{text}"
    );
    assert!(!agent.state_dir.join(REQUEST_FILE).exists());
    // Reads stay open to nobody.
    let (ok, text) = dbus_send(
        &bus.address,
        Some(NOBODY),
        "org.freedesktop.DBus.Properties.Get",
        &["string:org.tinyperf.Agent1", "string:ImageVersion"],
    );
    assert!(ok && text.contains(VERSION), "{text}");
}

/// A folder of stand-in `bootctl` and `systemctl` scripts that log their arguments
/// to `calls` (and `bootctl` fails when `fail_bootctl`).
fn stand_ins(fail_bootctl: bool) -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let calls = dir.path().join("calls");
    for (name, fails) in [("bootctl", fail_bootctl), ("systemctl", false)] {
        let script = dir.path().join(name);
        let tail = if fails {
            "echo 'Failed to set EFI variable: Read-only file system' >&2; exit 1"
        } else {
            "exit 0"
        };
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{tail}\n",
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    (dir, calls)
}

/// `tinyperf image factory-reset ARGS` with the stand-ins first on PATH and the bus at
/// `bus` (where no agent serves, unless a test starts one).
fn factory_reset(bin: &Path, root: &Path, state: &Path, bus: &str, args: &[&str]) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new(tinyperf_exe())
        .args(["image", "factory-reset", "--root"])
        .arg(root)
        .arg("--state-dir")
        .arg(state)
        .args(["--bus", bus])
        .args(args)
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn calls(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn requested_factory_reset_with_stand_in_bootctl_and_systemctl_boots_the_reset_profile_once() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the factory reset's root side needs root");
        return;
    }
    let root = image_tree();
    let state = tempfile::tempdir().unwrap();
    let bus = Bus::start();
    let (bin, log) = stand_ins(false);

    // No request: nothing is done.
    let out = factory_reset(
        bin.path(),
        root.path(),
        state.path(),
        &bus.address,
        &["--requested"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("nothing to do"), "{}", text(&out));
    assert_eq!(calls(&log), "");

    tinyperf::update::reset::write_request(state.path(), "dbus uid 0").unwrap();
    let out = factory_reset(
        bin.path(),
        root.path(),
        state.path(),
        &bus.address,
        &["--requested"],
    );
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        calls(&log),
        format!("bootctl set-oneshot tinybox_{VERSION}.efi@factory-reset\nsystemctl reboot\n")
    );
    assert!(!state.path().join(REQUEST_FILE).exists());
    assert!(text(&out).contains(&format!("tinybox_{VERSION}.efi@factory-reset")));
}

#[test]
fn factory_reset_with_stand_in_bootctl_refuses_a_run_going_a_failing_bootctl_and_no_systemd_boot() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the factory reset's root side needs root");
        return;
    }
    let root = image_tree();
    let state = tempfile::tempdir().unwrap();
    let bus = Bus::start();

    // bootctl fails: its words are shown and nothing reboots.
    let (bin, log) = stand_ins(true);
    let out = factory_reset(
        bin.path(),
        root.path(),
        state.path(),
        &bus.address,
        &["--yes"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("Failed to set EFI variable: Read-only file system"),
        "{}",
        text(&out)
    );
    assert!(!calls(&log).contains("systemctl"), "{}", calls(&log));

    // A run in the store with no agent to ask: refused, though the request is gone.
    let (bin, log) = stand_ins(false);
    let run = state.path().join("runs/20261205-120000-abcdef");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(
        run.join("run.json"),
        r#"{"id": "20261205-120000-abcdef", "state": "running"}"#,
    )
    .unwrap();
    tinyperf::update::reset::write_request(state.path(), "http ::1").unwrap();
    let out = factory_reset(
        bin.path(),
        root.path(),
        state.path(),
        &bus.address,
        &["--requested"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("a run is going (run 20261205-120000-abcdef"),
        "{}",
        text(&out)
    );
    assert_eq!(calls(&log), "");
    assert!(!state.path().join(REQUEST_FILE).exists());
    std::fs::remove_dir_all(state.path().join("runs")).unwrap();

    // Without a terminal and without --yes, nothing is done.
    let out = factory_reset(bin.path(), root.path(), state.path(), &bus.address, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("pass --yes"), "{}", text(&out));
    assert_eq!(calls(&log), "");

    // Not booted by systemd-boot.
    std::fs::remove_file(tinyperf::update::reset::efi_variable_path(
        root.path(),
        "LoaderEntrySelected",
    ))
    .unwrap();
    let out = factory_reset(
        bin.path(),
        root.path(),
        state.path(),
        &bus.address,
        &["--yes"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("not booted by systemd-boot; cannot arrange a factory-reset boot"),
        "{}",
        text(&out)
    );
    assert_eq!(calls(&log), "");

    // Not an image.
    let debian = tempfile::tempdir().unwrap();
    fixture::debian(debian.path());
    let out = factory_reset(
        bin.path(),
        debian.path(),
        state.path(),
        &bus.address,
        &["--yes"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("not a tinybox OS image"),
        "{}",
        text(&out)
    );
    assert_eq!(calls(&log), "");
}

#[test]
fn factory_reset_with_stand_in_bootctl_asks_the_agent_whether_a_run_is_going() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the factory reset's root side needs root");
        return;
    }
    let root = image_tree();
    let on = agent_on(root.path());
    let (bin, log) = stand_ins(false);
    let id = on
        .agent
        .start_run(r#"{"suite": "external", "options": {"benchmark": "sleep"}}"#);
    wait_for(Duration::from_secs(30), "the run to be going", || {
        (on.agent.status()["state"] == "running").then_some(())
    });
    let out = factory_reset(
        bin.path(),
        root.path(),
        &on.agent.state_dir,
        &on.bus.address,
        &["--yes"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("a run is going (run {id})")),
        "{}",
        text(&out)
    );
    assert_eq!(calls(&log), "");
}
