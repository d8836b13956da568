//! The status page of a box that went back from a rejected OS version and is
//! downloading an update, in a real browser: Debian's Chromium driven by Selenium
//! against the agent core served on loopback, over an image tree laid out as the kernel
//! lays it out (`tinyperf::update::fixture`). The rejection banner and the update's
//! progress bar must be there as the server rendered them; the bar must follow the
//! bytes the root side writes, the page must show the update written once it is, and
//! the console must stay clean.
//!
//! Without chromium, chromedriver or Selenium the test says so and passes, except under
//! CI=1 or TINYPERF_REQUIRE_BROWSER=1 (`make test` sets it), where it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::in_process::{serve_core, Serving};
use serde_json::Value;
use tinyperf::agent::config::Config;
use tinyperf::update::fixture::{self, ImageLayout, SlotContent};
use tinyperf::update::gate::{Assessment, GateCheck};
use tinyperf::update::progress::{self, UpdateProgress};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
const RUNNING: &str = "20261206.0900";
const REJECTED: &str = "20261207.0900";
const UPDATE: &str = "20261208.0900";
const BOOT: &str = "boot-3";
/// The process the update's state file names; its folder under `proc/` keeps the
/// download alive in the agent's eyes.
const UPDATER_PID: u32 = 4242;

/// Opens the page, reads the banner and the bar, has the root side's state file move on
/// (more bytes, then the update written) and watches the page follow; prints one JSON
/// object.
const SCRIPT: &str = r#"
import json, os, sys, tempfile, time
os.environ.setdefault("SE_OFFLINE", "true")
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

base, state_file = sys.argv[1], sys.argv[2]
options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync",
             "--user-data-dir=" + tempfile.mkdtemp(prefix="tinyperf-chromium-")]:
    options.add_argument(flag)
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
d = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
d.set_page_load_timeout(30)

def write_state(change):
    with open(state_file) as f:
        state = json.load(f)
    state.update(change)
    with open(state_file + ".new", "w") as f:
        json.dump(state, f)
    os.rename(state_file + ".new", state_file)

def bar():
    return d.execute_script(
        "var b = document.getElementById('os-update-bar'); return b ? [b.value, b.max] : null;")

out = {}
try:
    d.get(base + "/")
    out["banner"] = d.find_element(By.ID, "os-rejection").text
    out["update_text"] = d.find_element(By.ID, "os-update-text").text
    out["bar"] = bar()
    write_state({"done_bytes": 3 << 30})
    WebDriverWait(d, 20).until(lambda _: bar() == [3 << 30, 4 << 30])
    out["bar_after"] = bar()
    out["update_text_after"] = d.find_element(By.ID, "os-update-text").text
    write_state({"state": "written", "pending_version": "20261208.0900", "done_bytes": 4 << 30})
    WebDriverWait(d, 20).until(lambda _: d.execute_script(
        "var u = document.getElementById('os-update');"
        "return u && u.getAttribute('data-state') === 'written';"))
    out["written_text"] = d.find_element(By.ID, "os-update-text").text
    out["banner_after_reload"] = d.find_element(By.ID, "os-rejection").text
finally:
    out["console"] = [e["message"] for e in d.get_log("browser")
                      if e.get("level") in ("SEVERE", "WARNING")]
    d.quit()
    print(json.dumps(out))
"#;

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

fn assessment(version: &str, at: &str, boot: &str, rejected: bool) -> Assessment {
    Assessment {
        version: version.into(),
        at: chrono::DateTime::parse_from_rfc3339(at)
            .unwrap()
            .with_timezone(&chrono::Utc),
        boot_id: boot.into(),
        result: if rejected { "fail" } else { "pass" }.into(),
        on_trial: rejected,
        rejected,
        previous_version: rejected.then(|| RUNNING.into()),
        run_id: None,
        checks: rejected
            .then(|| GateCheck {
                name: "training img/s".into(),
                expected: "≥ 0.95 × 5,220".into(),
                found: "4,410".into(),
                result: "fail".into(),
                ratio: Some(0.84),
                previous_value: Some(5220.0),
            })
            .into_iter()
            .collect(),
        figures: Vec::new(),
        reason: if rejected {
            format!("{version} rejected: training img/s 4,410 vs 5,220 on {RUNNING}, 0.84 < 0.95")
        } else {
            format!("{version} passed")
        },
    }
}

/// Slot A runs the version the box went back to, slot B holds the one it rejected; the
/// state folder holds the boot checks' history and an update a quarter downloaded in
/// this boot by a process that is alive.
fn rolled_back_and_downloading(root: &Path, state_dir: &Path) {
    fixture::image(
        root,
        ImageLayout {
            a: SlotContent::Version(RUNNING),
            b: SlotContent::Version(REJECTED),
            booted: 'a',
            verity: true,
        },
    );
    fixture::write(root, "proc/sys/kernel/random/boot_id", format!("{BOOT}\n"));
    std::fs::create_dir_all(root.join("proc").join(UPDATER_PID.to_string())).unwrap();
    for a in [
        assessment(RUNNING, "2026-12-06T09:10:00Z", "boot-1", false),
        assessment(REJECTED, "2026-12-07T09:12:31Z", "boot-2", true),
        assessment(RUNNING, "2026-12-07T09:20:00Z", BOOT, false),
    ] {
        tinyperf::update::boot_check::record(state_dir, &a).unwrap();
    }
    let mut update = UpdateProgress::idle();
    update.state = "downloading".into();
    update.version = UPDATE.into();
    update.done_bytes = 1 << 30;
    update.total_bytes = 4 << 30;
    update.boot_id = BOOT.into();
    update.pid = UPDATER_PID;
    progress::write(state_dir, &update).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_box_downloading_an_update_in_a_real_browser() {
    let python = match selenium_python() {
        Ok(python) => python,
        Err(why) if required() => panic!("the browser test is required here, but {why}"),
        Err(why) => {
            eprintln!("SKIPPED the browser test: {why}");
            return;
        }
    };
    let root = tempfile::tempdir().unwrap();
    let image_root = root.path().to_path_buf();
    let server = serve_core(
        Config {
            image_root: image_root.clone(),
            ..Config::default()
        },
        Serving::default(),
        |state| rolled_back_and_downloading(&image_root, state),
    )
    .await;
    let base = format!("http://{}", server.addr);
    let state_file = progress::state_path(&server.state_dir);
    let out = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .arg("120")
            .arg(python)
            .arg("-c")
            .arg(SCRIPT)
            .arg(base)
            .arg(state_file)
            .output()
            .expect("python runs")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    println!("{seen}");
    let banner = format!(
        "{REJECTED} rejected 2026-12-07 09:12 UTC: training img/s 4,410 vs 5,220 on {RUNNING}, \
         0.84 < 0.95 — the box went back to {RUNNING}"
    );
    assert_eq!(seen["banner"], banner.as_str());
    assert_eq!(
        seen["update_text"],
        format!("Downloading OS {UPDATE}: 1 GiB of 4 GiB (25 %).").as_str()
    );
    assert_eq!(seen["bar"], serde_json::json!([1u64 << 30, 4u64 << 30]));
    assert_eq!(
        seen["update_text_after"],
        format!("Downloading OS {UPDATE}: 3 GiB of 4 GiB (75 %).").as_str()
    );
    assert!(
        seen["written_text"]
            .as_str()
            .unwrap()
            .starts_with(&format!("OS {UPDATE} is written to the other slot")),
        "{seen}"
    );
    assert_eq!(seen["banner_after_reload"], banner.as_str());
    assert_eq!(seen["console"], serde_json::json!([]), "{seen}");
}
