//! The front display of a real agent on a tinybox OS image that went back from a
//! rejected version, over a real Unix socket: it names the rejected version and the
//! check that failed it, then follows an update's download as the root side writes its
//! progress into the state folder.

mod common;

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{wait_for, Agent, AgentDirs, Bus};
use tinyperf::update::fixture::{self, ImageLayout, SlotContent};
use tinyperf::update::gate::{Assessment, GateCheck};
use tinyperf::update::progress::{self, UpdateProgress};

const RUNNING: &str = "20261206.0900";
const REJECTED: &str = "20261207.0900";
const BOOT: &str = "boot-2";

/// Collects every command the agent sends the display.
fn display(path: &Path) -> Arc<Mutex<Vec<String>>> {
    let listener = std::os::unix::net::UnixListener::bind(path).unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = lines.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text);
            kept.lock().unwrap().push(text);
        }
    });
    lines
}

fn shown(lines: &Arc<Mutex<Vec<String>>>, what: &str, command: &str) -> Vec<String> {
    wait_for(Duration::from_secs(30), what, || {
        let lines = lines.lock().unwrap().clone();
        lines.iter().any(|l| l == command).then_some(lines)
    })
}

#[test]
fn the_display_names_the_rejected_version_then_follows_a_download() {
    let root = tempfile::tempdir().unwrap();
    fixture::image(
        root.path(),
        ImageLayout {
            a: SlotContent::Version(RUNNING),
            b: SlotContent::Version(REJECTED),
            booted: 'a',
            verity: true,
        },
    );
    fixture::write(
        root.path(),
        "proc/sys/kernel/random/boot_id",
        format!("{BOOT}\n"),
    );
    let pid = std::process::id();
    std::fs::create_dir_all(root.path().join("proc").join(pid.to_string())).unwrap();
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("tinybox-screen.sock");
    let lines = display(&socket);
    let dirs = AgentDirs::new(&format!(
        "image_root = \"{}\"\nfront_display_socket = \"{}\"\n",
        root.path().display(),
        socket.display()
    ));
    let rejected = Assessment {
        version: REJECTED.into(),
        at: chrono::Utc::now(),
        boot_id: "boot-1".into(),
        result: "fail".into(),
        on_trial: true,
        rejected: true,
        previous_version: Some(RUNNING.into()),
        run_id: None,
        checks: vec![GateCheck {
            name: "training img/s".into(),
            expected: "≥ 0.95 × 5,220".into(),
            found: "4,410".into(),
            result: "fail".into(),
            ratio: Some(0.84),
            previous_value: Some(5220.0),
        }],
        figures: Vec::new(),
        reason: format!(
            "{REJECTED} rejected: training img/s 4,410 vs 5,220 on {RUNNING}, 0.84 < 0.95"
        ),
    };
    tinyperf::update::boot_check::record(&dirs.state_dir(), &rejected).unwrap();
    let bus = Bus::start();
    let agent = Agent::start(&bus, &dirs);
    let seen = shown(
        &lines,
        "the rejection on the display",
        &format!("text,TINYPERF IDLE,v{REJECTED} rejected:,training img/s\n"),
    );
    println!("front display: {seen:?}");

    // The root side begins a download in this boot, from a process that is alive.
    let mut update = UpdateProgress::idle();
    update.state = "downloading".into();
    update.version = "20261208.0900".into();
    update.done_bytes = 1 << 30;
    update.total_bytes = 4 << 30;
    update.boot_id = BOOT.into();
    update.pid = pid;
    progress::write(&agent.state_dir, &update).unwrap();
    let seen = shown(
        &lines,
        "the download on the display",
        &format!(
            "text,TINYPERF IDLE,OS UPDATE 25%,v20261208.0900,v{REJECTED} rejected:,training img/s\n"
        ),
    );
    update.done_bytes = 3 << 30;
    progress::write(&agent.state_dir, &update).unwrap();
    let seen_after = shown(
        &lines,
        "the download's progress on the display",
        &format!(
            "text,TINYPERF IDLE,OS UPDATE 75%,v20261208.0900,v{REJECTED} rejected:,training img/s\n"
        ),
    );
    println!("front display: {seen:?} then {seen_after:?}");
    assert!(seen_after
        .iter()
        .all(|l| l.ends_with('\n') && l.matches('\n').count() == 1));
}
