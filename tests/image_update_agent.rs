//! OS updates through the agent: a real agent on a private dbus-daemon and on loopback
//! HTTP, reading an image tree (`tinyperf::update::fixture`) whose keyring vouches for a
//! signed update folder. D-Bus CheckUpdate and Update, the UpdateState and
//! PendingVersion properties and the UpdateProgress signal as the root side's progress
//! file changes, POST /api/v1/image/update, and the interlock both ways: no update
//! while a run is going, no run while an update is written.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;

use common::signing::{signed_folder, SigningKey};
use common::{wait_for, AgentOnBus};
use serde_json::Value;
use tinyperf::api::dbus::Agent1Proxy;
use tinyperf::update::fixture::{self, ImageLayout, SlotContent};
use tinyperf::update::progress::{self, UpdateProgress};

const RUNNING: &str = "20261205.1130";
const NEWER: &str = "20261206.0900";
const BOOT_ID: &str = "3f1c2a9e-5b7d-4e21-9a0b-6c8d7e5f4a3b";

/// An image tree booted from slot A with B empty, its keyring from `key`, and a boot id.
fn image_tree(key: &SigningKey) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(RUNNING),
            b: SlotContent::Empty,
            booted: 'a',
            verity: true,
        },
    );
    key.export_to(&root.path().join("usr/lib/systemd/import-pubring.gpg"));
    fixture::write(root.path(), "proc/sys/kernel/random/boot_id", BOOT_ID);
    root
}

fn agent_on(root: &Path, updates: &Path) -> AgentOnBus {
    AgentOnBus::start(&format!(
        "image_root = \"{}\"\nupdate_url = \"{}\"\n[benchmarks.sleep]\ncommand = [\"sleep\", \"60\"]\n",
        root.display(),
        updates.display()
    ))
}

fn busctl(bus: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new("busctl")
        .arg(format!("--address={bus}"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn call(bus: &str, member: &str, signature: &[&str]) -> (bool, String) {
    let mut args = vec![
        "--json=short",
        "call",
        "org.tinyperf.Agent1",
        "/org/tinyperf/Agent1",
        "org.tinyperf.Agent1",
        member,
    ];
    args.extend_from_slice(signature);
    busctl(bus, &args)
}

fn property(bus: &str, name: &str) -> String {
    let (ok, out) = busctl(
        bus,
        &[
            "get-property",
            "org.tinyperf.Agent1",
            "/org/tinyperf/Agent1",
            "org.tinyperf.Agent1",
            name,
        ],
    );
    assert!(ok, "{out}");
    out.trim()
        .trim_start_matches("s ")
        .trim_matches('"')
        .to_string()
}

/// Writes the root side's progress file as it would during a download by `pid`.
fn downloading(state_dir: &Path, root: &Path, done: u64) {
    let pid = std::process::id();
    fixture::write(root, &format!("proc/{pid}/stat"), "1");
    let mut state = UpdateProgress::idle();
    state.state = "downloading".into();
    state.version = NEWER.into();
    state.done_bytes = done;
    state.total_bytes = 1000;
    state.boot_id = BOOT_ID.into();
    state.pid = pid;
    progress::write(state_dir, &state).unwrap();
}

/// One `UpdateProgress` signal: state, version, bytes done, bytes in all.
type Progress = (String, String, u64, u64);

/// The agent's `UpdateProgress` signals, as a zbus client on the bus receives them.
struct Signals {
    seen: Arc<Mutex<Vec<Progress>>>,
}

impl Signals {
    fn listen(bus: &str) -> Signals {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (ready, subscribed) = std::sync::mpsc::channel();
        let (address, into) = (bus.to_string(), seen.clone());
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let connection = zbus::connection::Builder::address(address.as_str())
                    .build()
                    .await
                    .unwrap();
                let agent = Agent1Proxy::new(&connection).await.unwrap();
                let mut stream = agent.receive_update_progress().await.unwrap();
                ready.send(()).unwrap();
                while let Some(signal) = stream.next().await {
                    let args = signal.args().unwrap();
                    into.lock().unwrap().push((
                        args.state.clone(),
                        args.version.clone(),
                        args.done_bytes,
                        args.total_bytes,
                    ));
                }
            });
        });
        subscribed.recv_timeout(Duration::from_secs(10)).unwrap();
        Signals { seen }
    }

    fn saw(&self, state: &str, done: u64) -> bool {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .any(|(s, v, d, t)| s == state && v == NEWER && *d == done && *t == 1000)
    }
}

#[test]
fn check_and_update_over_dbus_and_the_progress_the_root_side_writes_is_published() {
    let key = SigningKey::new();
    let root = image_tree(&key);
    let updates = signed_folder(&key, NEWER);
    let on = agent_on(root.path(), updates.path());
    let bus = on.bus.address.as_str();
    let state_dir = on.agent.state_dir.clone();

    let (ok, out) = call(bus, "CheckUpdate", &[]);
    assert!(ok, "{out}");
    let reply: Value = serde_json::from_str(&out).unwrap();
    let report: Value = serde_json::from_str(reply["data"][0].as_str().unwrap()).unwrap();
    assert_eq!(report["newest"], NEWER, "{report}");
    assert_eq!(report["versions"][0]["state"], "newer");
    assert_eq!(property(bus, "UpdateState"), "idle");
    // The check's finding is published.
    let image = on.agent.get_json("/api/v1/image");
    assert_eq!(image["update"]["available"], NEWER, "{image}");

    let signals = Signals::listen(bus);
    let (ok, out) = call(bus, "Update", &["s", ""]);
    assert!(ok, "{out}");
    let request: Value =
        serde_json::from_slice(&std::fs::read(progress::request_path(&state_dir)).unwrap())
            .unwrap();
    assert!(
        request["requested_by"]
            .as_str()
            .unwrap()
            .starts_with("dbus uid "),
        "{request}"
    );
    // A second request while the first waits for the root side is refused.
    let (ok, out) = call(bus, "Update", &["s", ""]);
    assert!(!ok && out.contains("about to start"), "{out}");

    // The root side takes the request and writes its progress.
    std::fs::remove_file(progress::request_path(&state_dir)).unwrap();
    downloading(&state_dir, root.path(), 250);
    wait_for(Duration::from_secs(10), "UpdateState downloading", || {
        (property(bus, "UpdateState") == "downloading").then_some(())
    });
    wait_for(Duration::from_secs(10), "the UpdateProgress signal", || {
        signals.saw("downloading", 250).then_some(())
    });
    // No run starts meanwhile.
    let (ok, out) = call(bus, "Start", &["sa{sv}", "inventory", "0"]);
    assert!(!ok, "{out}");
    assert!(
        out.contains("an OS update to 20261206.0900 is downloading"),
        "{out}"
    );
    let (code, body) = on.agent.post_run("{\"suite\": \"inventory\"}");
    assert_eq!(code, 409, "{body}");

    let mut written = progress::read(&state_dir).unwrap();
    written.state = "written".into();
    written.pending_version = NEWER.into();
    written.done_bytes = 1000;
    written.pid = 0;
    progress::write(&state_dir, &written).unwrap();
    wait_for(Duration::from_secs(10), "PendingVersion", || {
        (property(bus, "PendingVersion") == NEWER).then_some(())
    });
    let image = on.agent.get_json("/api/v1/image");
    assert_eq!(image["update"]["state"], "written");
    assert_eq!(image["update"]["pending_version"], NEWER);
    // Runs start again once it is written.
    let (ok, out) = call(bus, "Start", &["sa{sv}", "inventory", "0"]);
    assert!(ok, "{out}");
}

#[test]
fn post_update_needs_the_token_and_waits_for_a_run_to_end() {
    let key = SigningKey::new();
    let root = image_tree(&key);
    let updates = signed_folder(&key, NEWER);
    let on = agent_on(root.path(), updates.path());
    let agent = &on.agent;
    let request_file = progress::request_path(&agent.state_dir);

    let (code, body) = common::curl::curl_json(&[
        "-X",
        "POST",
        "--json",
        "{}",
        &agent.url("/api/v1/image/update"),
    ]);
    assert_eq!(code, 401, "{body}");
    let (code, body) = agent.post_with_token("/api/v1/image/update", Some("{\"colour\": 1}"));
    assert_eq!(code, 400, "{body}");

    let id = agent.start_run("{\"suite\": \"external\", \"options\": {\"benchmark\": \"sleep\"}}");
    let (code, body) = agent.post_with_token("/api/v1/image/update", Some("{}"));
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "busy");
    assert!(!request_file.exists());
    let (code, _) = agent.post_with_token(&format!("/api/v1/runs/{id}/cancel"), None);
    assert_eq!(code, 202);
    agent.wait_run_ended(&id, Duration::from_secs(60), "the cancelled run");

    let body = format!("{{\"version\": \"{NEWER}\", \"reboot\": true}}");
    let (code, answer) = agent.post_with_token("/api/v1/image/update", Some(&body));
    assert_eq!(code, 202, "{answer}");
    assert_eq!(answer["update"], "requested");
    let written: Value = serde_json::from_slice(&std::fs::read(&request_file).unwrap()).unwrap();
    assert_eq!(written["version"], NEWER);
    assert_eq!(written["reboot"], true);
    assert!(written["requested_by"]
        .as_str()
        .unwrap()
        .starts_with("http "));

    let (code, body) =
        agent.post_with_token("/api/v1/image/update", Some("{\"version\": \"../x\"}"));
    assert!(code == 400 || code == 409, "{code} {body}");
}

#[test]
fn without_an_update_source_check_and_update_say_how_to_set_one() {
    let key = SigningKey::new();
    let root = image_tree(&key);
    let on = AgentOnBus::start(&format!("image_root = \"{}\"\n", root.path().display()));
    let bus = on.bus.address.as_str();
    let (ok, out) = call(bus, "CheckUpdate", &[]);
    assert!(!ok && out.contains("set update_url"), "{out}");
    let (code, body) = on.agent.post_with_token("/api/v1/image/update", None);
    assert_eq!(code, 400, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("update_url"));
}

#[test]
fn a_scheduled_check_publishes_what_is_offered_and_requests_it_only_with_update_reboot() {
    let key = SigningKey::new();
    let root = image_tree(&key);
    let updates = signed_folder(&key, NEWER);
    let config = |reboot: bool| {
        format!(
            "image_root = \"{}\"\nupdate_url = \"{}\"\nupdate_check = \"1s\"\nupdate_reboot = {reboot}\n",
            root.path().display(),
            updates.path().display()
        )
    };

    let on = AgentOnBus::start(&config(false));
    wait_for(
        Duration::from_secs(20),
        "the scheduled check's finding",
        || (on.agent.get_json("/api/v1/image")["update"]["available"] == NEWER).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        !progress::request_path(&on.agent.state_dir).exists(),
        "without update_reboot nothing is written"
    );
    drop(on);

    let on = AgentOnBus::start(&config(true));
    let request = progress::request_path(&on.agent.state_dir);
    let written: Value = wait_for(
        Duration::from_secs(20),
        "the scheduled update's request",
        || {
            std::fs::read(&request)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
        },
    );
    assert_eq!(written["version"], NEWER);
    assert_eq!(written["reboot"], true);
    assert_eq!(written["requested_by"], "update_check schedule");
}
