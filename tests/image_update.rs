//! OS updates and the boot gate from the command line, on image trees laid out as the
//! kernel lays them out (`tinyperf::update::fixture`), with update folders signed by a
//! real OpenPGP key (gpg) and checked by real gpgv: `tinyperf image check`, the
//! refusals of `tinyperf image update` before anything is written, and `tinyperf
//! boot-check` on run records in a real store layout. systemd-sysupdate, systemd-boot's
//! counters and a reboot cannot run here: a stand-in script plays systemd-sysupdate
//! (its name says so), and `boot-check --dry-run` prints what it would do.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use chrono::{Duration, Utc};
use common::signing::{add_version, signed_folder, write_sums, SigningKey, UUID_R};
use common::tinyperf_exe;
use serde_json::{json, Value};
use tinyperf::record::{Metric, RunRecord, RunState, StageResult, Trigger, Verdict};
use tinyperf::update::fixture::{self, ImageLayout, SlotContent};
use tinyperf::update::gate::Assessment;

const RUNNING: &str = "20261205.1130";
const NEWER: &str = "20261206.0900";
const NEWEST: &str = "20261207.0900";

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// An image tree running RUNNING from slot A with B empty, its keyring from `key`,
/// an ESP with its UKI, and a config naming its state folder.
struct Box_ {
    root: tempfile::TempDir,
    state: tempfile::TempDir,
    config: PathBuf,
}

impl Box_ {
    fn new(key: &SigningKey) -> Box_ {
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
        fixture::write(
            root.path(),
            &format!("efi/EFI/Linux/tinybox_{RUNNING}.efi"),
            "uki",
        );
        let state = tempfile::tempdir().unwrap();
        let config = state.path().join("tinyperf.toml");
        std::fs::write(
            &config,
            format!(
                "boot_suite = \"acceptance\"\nstate_dir = \"{}\"\nimage_root = \"{}\"\n",
                state.path().display(),
                root.path().display()
            ),
        )
        .unwrap();
        Box_ {
            root,
            state,
            config,
        }
    }

    fn tinyperf(&self, args: &[&str]) -> Output {
        Command::new(tinyperf_exe())
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .output()
            .unwrap()
    }

    /// `tinyperf image status --json` of the tree and its state folder.
    fn status(&self) -> Value {
        let out = Command::new(tinyperf_exe())
            .args(["image", "status", "--json", "--root"])
            .arg(self.root.path())
            .arg("--state-dir")
            .arg(self.state.path())
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    }

    fn update_state(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.state.path().join("update-state.json")).unwrap())
            .unwrap()
    }
}

#[test]
fn check_lists_a_signed_folder_and_refuses_tampered_or_unsigned_lists() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    let updates = tempfile::tempdir().unwrap();
    add_version(updates.path(), NEWER);
    add_version(updates.path(), NEWEST);
    key.sign(updates.path());
    let source = updates.path().to_str().unwrap();

    let out = b.tinyperf(&["image", "check", "--json", "--source", source]);
    assert!(out.status.success(), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["current"], RUNNING);
    assert_eq!(report["newest"], NEWEST);
    let states: Vec<(&str, &str)> = report["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["version"].as_str().unwrap(), v["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [(NEWEST, "newer"), (NEWER, "newer")]);

    // A list changed after signing.
    let sums = updates.path().join("SHA256SUMS");
    let mut listed = std::fs::read_to_string(&sums).unwrap();
    listed.push_str(&format!("{}  tinybox_9.efi\n", "0".repeat(64)));
    std::fs::write(&sums, &listed).unwrap();
    let out = b.tinyperf(&["image", "check", "--source", source]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("is not signed by a key in"),
        "{}",
        text(&out)
    );

    // No signature at all.
    std::fs::remove_file(updates.path().join("SHA256SUMS.gpg")).unwrap();
    let out = b.tinyperf(&["image", "check", "--source", source]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("unsigned"), "{}", text(&out));

    // Signed by a key the image does not carry.
    let stranger = SigningKey::new();
    stranger.sign(updates.path());
    let out = b.tinyperf(&["image", "check", "--source", source]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("is not signed by a key in"),
        "{}",
        text(&out)
    );
}

#[test]
fn check_without_a_source_says_how_to_set_one() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    let out = b.tinyperf(&["image", "check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("set update_url"), "{}", text(&out));
}

#[test]
fn update_refuses_a_wrong_checksum_a_missing_uki_and_a_rejected_version_before_writing() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    let updates = signed_folder(&key, NEWER);
    let source = updates.path().to_str().unwrap();
    if !is_root() {
        let out = b.tinyperf(&["image", "update", "--source", source]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out).contains("an update needs root"),
            "{}",
            text(&out)
        );
        return;
    }

    // A file changed after the list was signed.
    let root_file = updates
        .path()
        .join(format!("tinybox_{NEWER}_{UUID_R}.root.raw.xz"));
    std::fs::write(&root_file, "not the root that was listed").unwrap();
    let out = b.tinyperf(&[
        "image",
        "update",
        "--source",
        source,
        "--bus",
        "unix:path=/nonexistent",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("does not match SHA256SUMS"),
        "{}",
        text(&out)
    );
    let state = b.update_state();
    assert_eq!(state["state"], "rejected");
    assert!(state["message"]
        .as_str()
        .unwrap()
        .contains("does not match"));
    assert_slot_b_empty(b.root.path());

    // A version without its UKI.
    std::fs::remove_dir_all(updates.path()).unwrap();
    add_version(updates.path(), NEWER);
    std::fs::remove_file(updates.path().join(format!("tinybox_{NEWER}.efi"))).unwrap();
    write_sums(updates.path());
    key.sign(updates.path());
    let out = b.tinyperf(&[
        "image",
        "update",
        NEWER,
        "--source",
        source,
        "--bus",
        "unix:path=/nonexistent",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("missing the UKI (.efi)"),
        "{}",
        text(&out)
    );
    let out = b.tinyperf(&[
        "image",
        "update",
        "--source",
        source,
        "--bus",
        "unix:path=/nonexistent",
    ]);
    assert!(
        text(&out).contains("is listed but incomplete"),
        "{}",
        text(&out)
    );
    assert_slot_b_empty(b.root.path());

    // A version this box's boot check rejected is neither offered nor installed.
    std::fs::remove_dir_all(updates.path()).unwrap();
    add_version(updates.path(), NEWER);
    key.sign(updates.path());
    let rejected = assessment(
        NEWER,
        false,
        true,
        "training img/s 10 vs 20 on 1, 0.50 < 0.95",
    );
    std::fs::write(
        b.state.path().join("boot-assessments.json"),
        serde_json::to_vec(&[rejected]).unwrap(),
    )
    .unwrap();
    let out = b.tinyperf(&[
        "image",
        "update",
        NEWER,
        "--source",
        source,
        "--bus",
        "unix:path=/nonexistent",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).contains("was rejected by this box's boot check"),
        "{}",
        text(&out)
    );
    let out = b.tinyperf(&["image", "check", "--json", "--source", source]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["versions"][0]["state"], "rejected");
    assert_eq!(report["newest"], Value::Null);
}

#[test]
fn update_refuses_while_a_run_is_going() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    let updates = signed_folder(&key, NEWER);
    if !is_root() {
        return;
    }
    let mut run = RunRecord::new(
        "20261205-120000-aaaaaa".into(),
        "burn-in".into(),
        Trigger::Http,
        Default::default(),
    );
    run.state = RunState::Running;
    store_run(b.state.path(), &run);
    let out = b.tinyperf(&[
        "image",
        "update",
        "--source",
        updates.path().to_str().unwrap(),
        "--bus",
        "unix:path=/nonexistent",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("a run is going"), "{}", text(&out));
    assert_eq!(b.update_state()["state"], "rejected");
}

#[test]
fn update_with_a_stand_in_sysupdate_reports_progress_in_bytes_and_ends_written() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    let updates = signed_folder(&key, NEWER);
    if !is_root() {
        return;
    }
    // systemd-sysupdate cannot write partitions here: a stand-in reports progress on
    // the notification socket, as systemd-sysupdate does, and records its arguments.
    let stand_in = b.root.path().join("usr/lib/systemd/systemd-sysupdate");
    fixture::write(
        b.root.path(),
        "usr/lib/systemd/systemd-sysupdate",
        format!(
            "#!/usr/bin/python3\nimport os, socket, sys, time\n\
             open('{}', 'w').write(' '.join(sys.argv[1:]))\n\
             s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n\
             for p in (25, 50, 100):\n    s.sendto(f'X_SYSUPDATE_PROGRESS={{p}}'.encode(), os.environ['NOTIFY_SOCKET'])\n    time.sleep(0.3)\n",
            b.state.path().join("sysupdate-args").display()
        ),
    );
    std::fs::set_permissions(
        &stand_in,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/sysupdate.d");
    for t in std::fs::read_dir(&templates).unwrap() {
        let t = t.unwrap();
        fixture::write(
            b.root.path(),
            &format!(
                "usr/lib/tinyperf/sysupdate.d/{}",
                t.file_name().to_string_lossy()
            ),
            std::fs::read(t.path()).unwrap(),
        );
    }
    let out = b.tinyperf(&[
        "image",
        "update",
        "--source",
        updates.path().to_str().unwrap(),
        "--bus",
        "unix:path=/nonexistent",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{NEWER} written into the other slot")),
        "{}",
        text(&out)
    );
    let args = std::fs::read_to_string(b.state.path().join("sysupdate-args")).unwrap();
    assert_eq!(
        args,
        format!("--definitions=/run/tinyperf/sysupdate.d --no-pager update {NEWER}")
    );
    let defs = std::fs::read_to_string("/run/tinyperf/sysupdate.d/90-uki.transfer").unwrap();
    assert!(
        defs.contains(&format!("Path={}", updates.path().display())),
        "{defs}"
    );
    let state = b.update_state();
    assert_eq!(state["state"], "written");
    assert_eq!(state["pending_version"], NEWER);
    let total = state["total_bytes"].as_u64().unwrap();
    assert!(total > 0);
    assert_eq!(state["done_bytes"].as_u64().unwrap(), total);
    // The status shows the written version as pending.
    let status = b.status();
    assert_eq!(status["update"]["state"], "written", "{status}");
    assert_eq!(status["update"]["pending_version"], NEWER);
}

fn assert_slot_b_empty(root: &Path) {
    let out = Command::new(tinyperf_exe())
        .args(["image", "status", "--json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["slots"][1]["state"], "empty", "{status}");
}

fn store_run(state_dir: &Path, run: &RunRecord) {
    let dir = state_dir.join("runs").join(&run.id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("run.json"), serde_json::to_vec(run).unwrap()).unwrap();
}

fn assessment(version: &str, passed: bool, rejected: bool, reason: &str) -> Assessment {
    Assessment {
        version: version.into(),
        at: Utc::now() - Duration::hours(1),
        boot_id: format!("boot-of-{version}"),
        result: if passed { "pass" } else { "fail" }.into(),
        on_trial: rejected,
        rejected,
        previous_version: None,
        run_id: None,
        checks: Vec::new(),
        figures: Vec::new(),
        reason: reason.into(),
    }
}

/// A finished boot run of the cpu image's acceptance suite, `gflops` of CPU GEMM.
fn boot_run(started: chrono::DateTime<Utc>, gflops: f64, state: RunState) -> RunRecord {
    let mut run = RunRecord::new(
        format!("{}-b00700", started.format("%Y%m%d-%H%M%S")),
        "acceptance".into(),
        Trigger::Boot,
        Default::default(),
    );
    run.started_at = started;
    run.stages = vec![StageResult {
        name: "cpu-gemm".into(),
        verdict: Verdict::Pass,
        started_at: started,
        finished_at: started,
        metrics: vec![Metric::new("gflops_sustained", gflops, "GFLOP/s")],
        checks: Vec::new(),
        findings: Vec::new(),
        message: None,
    }];
    run.hardware = json!({ "sku": "unrecognised", "verdict": "skip", "gpus": [] });
    run.finish(state, None);
    run
}

/// A tree booted into `version` (cpu variant) `minutes_ago`, on trial or blessed.
fn booted(b: &Box_, version: &str, on_trial: bool, started: chrono::DateTime<Utc>) {
    fixture::os_release(b.root.path(), "tinybox", version);
    let release = b.root.path().join("usr/lib/os-release");
    let mut text = std::fs::read_to_string(&release).unwrap();
    text.push_str("VARIANT_ID=cpu\n");
    std::fs::write(&release, text).unwrap();
    fixture::write(
        b.root.path(),
        "proc/sys/kernel/random/boot_id",
        format!("boot-of-{version}\n"),
    );
    fixture::write(
        b.root.path(),
        "proc/stat",
        format!("cpu 1 2 3\nbtime {}\n", started.timestamp()),
    );
    let var = tinyperf::update::reset::efi_variable_path(b.root.path(), "LoaderBootCountPath");
    if on_trial {
        fixture::efi_variable(
            b.root.path(),
            "LoaderBootCountPath",
            &format!("\\EFI\\Linux\\tinybox_{version}+2-1.efi"),
        );
    } else {
        let _ = std::fs::remove_file(var);
    }
}

fn history(state: &Path) -> Vec<Assessment> {
    serde_json::from_slice(&std::fs::read(state.join("boot-assessments.json")).unwrap()).unwrap()
}

#[test]
fn boot_check_keeps_a_new_version_as_fast_as_the_last_and_rejects_a_slower_one_on_trial() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    let start = Utc::now() - Duration::minutes(30);

    // The first version: no earlier figures, checks only.
    booted(&b, RUNNING, false, start);
    store_run(
        b.state.path(),
        &boot_run(start + Duration::seconds(40), 100.0, RunState::Passed),
    );
    let out = b.tinyperf(&["boot-check", "--timeout-s", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("no earlier version to compare with"),
        "{}",
        text(&out)
    );

    // The next version, as fast: kept.
    let start = start + Duration::minutes(10);
    booted(&b, NEWER, true, start);
    store_run(
        b.state.path(),
        &boot_run(start + Duration::seconds(40), 98.0, RunState::Passed),
    );
    let out = b.tinyperf(&["boot-check", "--timeout-s", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("against {RUNNING}")),
        "{}",
        text(&out)
    );

    // The one after, at 0.84 of its figure: rejected on trial.
    let start = start + Duration::minutes(10);
    booted(&b, NEWEST, true, start);
    store_run(
        b.state.path(),
        &boot_run(start + Duration::seconds(40), 98.0 * 0.84, RunState::Passed),
    );
    let out = b.tinyperf(&["boot-check", "--timeout-s", "5"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let expected =
        format!("{NEWEST} rejected: CPU GEMM GFLOP/s 82.3 vs 98.0 on {NEWER}, 0.84 < 0.95");
    assert!(text(&out).contains(&expected), "{}", text(&out));
    let recorded = history(b.state.path());
    assert_eq!(recorded.len(), 3);
    assert!(recorded[2].rejected && recorded[2].on_trial);
    // Its failure handler marks the boot bad and reboots (printed with --dry-run).
    let out = b.tinyperf(&["boot-check", "--rejected", "--dry-run"]);
    assert!(
        text(&out).contains("would run: /usr/lib/systemd/systemd-bless-boot bad; systemctl reboot"),
        "{}",
        text(&out)
    );

    // Back on the previous version: the rejection is published.
    booted(&b, NEWER, false, start + Duration::minutes(5));
    let status = b.status();
    assert_eq!(status["rejections"][0]["version"], NEWEST, "{status}");
    assert_eq!(status["rejections"][0]["reason"], expected);
    assert_eq!(status["rollbacks_total"], 1);
    assert_eq!(status["boot_assessments_total"]["pass"], 2);
    assert_eq!(status["boot_assessments_total"]["rejected"], 1);
}

#[test]
fn boot_check_on_a_blessed_version_publishes_a_failure_and_never_rolls_back() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    let start = Utc::now() - Duration::minutes(10);
    booted(&b, RUNNING, false, start);
    store_run(
        b.state.path(),
        &boot_run(start + Duration::seconds(30), 100.0, RunState::Failed),
    );
    let out = b.tinyperf(&["boot-check", "--timeout-s", "5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(
        text(&out).contains("kept (already blessed)"),
        "{}",
        text(&out)
    );
    let recorded = history(b.state.path());
    assert_eq!(recorded[0].result, "fail");
    assert!(!recorded[0].rejected);
}

#[test]
fn boot_check_with_no_boot_run_fails_at_its_deadline_and_its_handler_records_an_unfinished_check() {
    let key = SigningKey::new();
    let b = Box_::new(&key);
    booted(&b, NEWER, true, Utc::now() - Duration::minutes(1));
    let out = b.tinyperf(&["boot-check", "--timeout-s", "1"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no boot run started within 1 s"),
        "{}",
        text(&out)
    );

    // Without a boot suite there is nothing to wait for: it fails at once.
    let config = std::fs::read_to_string(&b.config).unwrap();
    std::fs::write(
        &b.config,
        config.replace("boot_suite = \"acceptance\"\n", ""),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = b.tinyperf(&["boot-check", "--timeout-s", "30"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("no boot suite is configured"),
        "{}",
        text(&out)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));

    // A check killed before it recorded anything is a failure too.
    std::fs::remove_file(b.state.path().join("boot-assessments.json")).unwrap();
    let out = b.tinyperf(&["boot-check", "--rejected", "--dry-run"]);
    assert!(text(&out).contains("did not finish"), "{}", text(&out));
    assert!(text(&out).contains("would run"), "{}", text(&out));
    assert!(history(b.state.path())[0].rejected);
}
