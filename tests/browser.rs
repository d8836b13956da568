//! The pages in a real browser: Debian's Chromium driven by Selenium (scripts/browser-check.py)
//! against a real agent on a fixture tinybox red (six amdgpu hwmon trees on disk), while
//! a real smoke run trains. The live charts must grow as events arrive, the GPU tiles
//! come from the fixture, the console stay clean, the page read without JavaScript, and
//! the run's page draw its stored telemetry. The front display gets the run's state on
//! a real Unix socket meanwhile.
//!
//! Without chromium, chromedriver or Selenium the test says so and passes, except under
//! CI=1 or TINYPERF_REQUIRE_BROWSER=1 (`make test` sets it), where it fails.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{wait_for, Agent, AgentDirs, Bus, TOKEN};
use serde_json::Value;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A smoke run that trains for 60 epochs unless it reaches top-1 0.99 first: long
/// enough to watch its charts grow, even on a fast machine.
const SMOKE: &str = r#"{"suite": "smoke", "options": {"backend": "cpu", "synth_classes": 2,
  "synth_per_class": 32, "synth_val_per_class": 8, "synth_size": 16, "image_size": 16,
  "batch_size": 16, "eval_batch_size": 16, "base_lr": 1, "lars_trust_coefficient": 0.02,
  "train_epochs": 60, "target_accuracy": 0.99, "seed": 1}}"#;

fn required() -> bool {
    std::env::var("CI").as_deref() == Ok("1")
        || std::env::var("TINYPERF_REQUIRE_BROWSER").as_deref() == Ok("1")
}

/// The venv's python with Selenium, or why there is none.
fn selenium_python() -> Result<PathBuf, String> {
    for tool in [CHROMIUM, CHROMEDRIVER] {
        if !Path::new(tool).exists() {
            return Err(format!(
                "{tool} is missing (apt-get install chromium chromium-driver fonts-dejavu-core)"
            ));
        }
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(repo.join("scripts/browser-venv.sh"))
        .output()
        .map_err(|e| format!("cannot run scripts/browser-venv.sh: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "no Selenium: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn artifacts_dir() -> PathBuf {
    match std::env::var_os("OUT") {
        Some(out) => PathBuf::from(out).join("browser-artifacts"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/browser-artifacts"),
    }
}

/// Runs one phase of the Selenium script and returns what it saw.
fn browse(python: &Path, phase: &str, base: &str, extra: &[&str]) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/browser-check.py");
    let out = Command::new("timeout")
        .arg("180")
        .arg(python)
        .arg(script)
        .arg(phase)
        .arg(base)
        .arg(artifacts_dir())
        .args(extra)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "browser phase {phase} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{phase}: not JSON ({e}): {stdout}"))
}

fn post_run(addr: SocketAddr) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /api/v1/runs HTTP/1.1\r\nhost: t\r\nconnection: close\r\nauthorization: Bearer {TOKEN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{SMOKE}",
        SMOKE.len()
    )
    .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let body = reply.split("\r\n\r\n").nth(1).unwrap_or_default();
    let answer: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{reply}"));
    answer["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{reply}"))
        .to_string()
}

fn status(addr: SocketAddr) -> Value {
    let (code, body) = common::http_get(addr, "/api/v1/status").unwrap();
    assert_eq!(code, 200);
    serde_json::from_slice(&body).unwrap()
}

/// Collects every command the agent sends the front display.
fn front_display(path: &Path) -> Arc<Mutex<Vec<String>>> {
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

#[test]
fn the_pages_in_a_real_browser_while_a_smoke_run_trains() {
    let python = match selenium_python() {
        Ok(python) => python,
        Err(why) if required() => panic!("the browser test is required here, but {why}"),
        Err(why) => {
            eprintln!("SKIPPED the browser test: {why}");
            return;
        }
    };
    std::fs::create_dir_all(artifacts_dir()).unwrap();
    let bus = Bus::start();
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("tinybox-screen.sock");
    let display = front_display(&socket);
    let dirs = AgentDirs::new(&format!("front_display_socket = \"{}\"", socket.display()));
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tinybox-red");
    // A fixed port, so that the page can find the agent again after a restart.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let listen = format!("127.0.0.1:{port}");
    let args = ["--root", fixture.to_str().unwrap(), "--listen", &listen];
    let mut agent = Agent::start_with_args(&bus, &dirs, &args);
    let base = format!("http://{}", agent.http);
    let id = post_run(agent.http);

    let live = browse(&python, "live", &base, &[]);
    println!("live page: {live}");
    for chart in [
        "throughput",
        "loss",
        "top1",
        "lr",
        "power",
        "temp",
        "clock",
        "util",
    ] {
        let first = live["first"][chart].as_u64().unwrap();
        let grown = live["grown"][chart].as_u64().unwrap();
        assert!(first >= 2, "{chart}: {first} points at first");
        if ["throughput", "power"].contains(&chart) {
            assert!(grown > first, "{chart} did not grow: {first} → {grown}");
        }
    }
    assert_eq!(live["page"]["tiles"], 6, "{live}");
    for model in live["page"]["tile_models"].as_array().unwrap() {
        assert_eq!(model, "Radeon RX 7900 XTX");
    }
    // The fixture's hwmon trees draw 55 W to 65 W; the tiles follow the telemetry.
    assert_eq!(live["page"]["tile_power"][0], "55 W", "{live}");
    assert!(live["page"]["canvases"].as_u64().unwrap() >= 8, "{live}");
    assert_eq!(live["charted"], true);
    assert!(live["epoch"].as_str().unwrap().ends_with("of 60"), "{live}");
    assert_eq!(live["console"], Value::Array(vec![]), "console: {live}");
    println!("uPlot setData cost: {}", live["set_data_cost"]);

    wait_for(Duration::from_secs(180), "the smoke run to finish", || {
        (status(agent.http)["state"] == "idle").then_some(())
    });
    let still = browse(&python, "static", &base, &[]);
    println!("page without JavaScript: {still}");
    assert_eq!(still["state"], "idle");
    assert_eq!(still["tiles"], 6);
    assert_eq!(still["canvases"], 0, "no script ran");
    assert!(still["svg_figures"].as_u64().unwrap() >= 5, "{still}");
    assert!(still["recent_rows"].as_u64().unwrap() > 0, "{still}");
    assert!(still["history_links"]
        .as_array()
        .unwrap()
        .iter()
        .any(|l| l.as_str().unwrap().ends_with(&format!("/runs/{id}"))));

    let run = browse(&python, "run", &base, &[&id]);
    println!("run page: {run}");
    let titles: Vec<&str> = run["titles"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // The smoke run's epochs from its train.jsonl, its GPUs from its telemetry.csv.
    for title in [
        "loss per epoch",
        "top-1 per epoch",
        "throughput per epoch (img/s)",
        "power (W)",
        "temperature (°C)",
    ] {
        assert!(titles.contains(&title), "{title} missing from {titles:?}");
    }
    for (chart, n) in run["chart_points"].as_object().unwrap() {
        assert!(n.as_u64().unwrap() >= 2, "{chart}: {n}");
    }
    assert!(run["nojs_polylines"].as_u64().unwrap() >= 6 * 2, "{run}");
    assert_eq!(run["nojs_stages"][0], "smoke");
    assert_eq!(run["console"], Value::Array(vec![]), "console: {run}");

    let shown = wait_for(
        Duration::from_secs(10),
        "the display to show the end",
        || {
            let lines = display.lock().unwrap().clone();
            lines
                .iter()
                .any(|l| l.starts_with("text,SMOKE PASSED,"))
                .then_some(lines)
        },
    );
    println!("front display: {shown:?}");
    assert!(
        shown
            .iter()
            .any(|l| l.starts_with("text,SMOKE ") && l.contains('%')),
        "{shown:?}"
    );
    assert!(shown
        .iter()
        .all(|l| l.ends_with('\n') && l.matches('\n').count() == 1));

    // The agent restarts under an open page: it reconnects and catches up.
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/browser-check.py");
    let mut watcher = Command::new("timeout")
        .arg("180")
        .arg(&python)
        .arg(script)
        .args(["reconnect", &base])
        .arg(artifacts_dir())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines =
        std::io::BufRead::lines(std::io::BufReader::new(watcher.stdout.take().unwrap()));
    let loaded = lines.next().and_then(Result::ok);
    assert_eq!(loaded.as_deref(), Some("loaded"), "the page did not load");
    agent.kill();
    std::thread::sleep(Duration::from_secs(1));
    let agent = Agent::start_with_args(&bus, &dirs, &args);
    let answer: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(watcher.wait().unwrap().success(), "{answer:?}");
    let caught_up: Value = serde_json::from_str(answer.last().unwrap()).unwrap();
    println!("after the restart: {caught_up}");
    assert!(caught_up["reconnects"].as_u64().unwrap() >= 1);
    assert!(caught_up["liveLoads"].as_u64().unwrap() >= 2);
    assert_eq!(caught_up["live"], "live");
    assert_eq!(caught_up["console"], Value::Array(vec![]), "{caught_up}");
    assert_eq!(status(agent.http)["state"], "idle");
    println!("screenshots in {}", artifacts_dir().display());
}
