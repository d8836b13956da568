//! The BMC through an ipmitool stand-in (`tests/fixtures/bmc/ipmitool-stand-in`, which prints
//! recorded output and talks to no BMC): the parsers on output of real BMCs, and the
//! `bmc-events` and `bmc-sensors` checks of `tinyperf health` across runs that share a state
//! folder.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use tinyperf::runtime::bmc::{identity, sel, sensors};

fn bmc_fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/bmc")
        .join(name)
}

fn stand_in() -> PathBuf {
    bmc_fixture("ipmitool-stand-in")
}

fn read(board: &str, file: &str) -> String {
    std::fs::read_to_string(bmc_fixture(board).join(file)).unwrap()
}

#[test]
fn recorded_sels_parse_with_no_line_lost() {
    for (board, file, lines) in [
        ("openpower", "sel-list.txt", 12),
        ("intel-sosreport", "sel-elist.txt", 3),
        ("composed-psu-failure", "sel-elist.txt", 7),
    ] {
        let events = sel::parse_elist(&read(board, file));
        assert_eq!(events.len(), lines, "{board}");
        assert!(
            events.iter().all(|e| !e.id.is_empty()),
            "{board}: {events:?}"
        );
    }
    let openpower = sel::parse_elist(&read("openpower", "sel-list.txt"));
    assert!(openpower
        .iter()
        .all(|e| e.severity == sel::Severity::Informational
            && e.sensor_type == "System Firmware Progress"));
    assert_eq!(openpower[9].id, "a");
    let intel = sel::parse_elist(&read("intel-sosreport", "sel-elist.txt"));
    assert_eq!(intel[0].sensor_type, "Power Unit");
    assert_eq!(intel[1].direction, sel::Direction::Deasserted);
    assert_eq!(intel[2].sensor_type, "Management Subsys Health");
}

#[test]
fn recorded_fans_at_zero_rpm_are_findings() {
    let asrock = sensors::fans(&sensors::parse_sdr(&read(
        "asrock-rack-c2750d4i",
        "sdr-type-fan.txt",
    )));
    assert_eq!(asrock.len(), 6);
    assert_eq!(asrock[4].rpm, None, "an empty header has no reading");
    assert_eq!(
        sensors::findings(&asrock, &[]),
        ["fan CPU_FAN2 at 0 RPM (lnc)"]
    );
    let dell = sensors::fans(&sensors::parse_sdr(&read("dell-r320", "sdr-list.txt")));
    assert_eq!(dell.len(), 10, "only the RPM sensors are fans");
    assert_eq!(
        sensors::findings(&dell, &[]),
        ["fan Fan3B at 0 RPM (cr)", "fan Fan4B at 0 RPM (cr)"]
    );
}

#[test]
fn stand_in_identity_reads_the_controller_and_the_board() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        bmc_fixture("supermicro/mc-info.txt"),
        dir.path().join("mc-info.txt"),
    )
    .unwrap();
    std::fs::copy(
        bmc_fixture("asrock-rack-e3c252d4u/fru-print-0.txt"),
        dir.path().join("fru-print-0.txt"),
    )
    .unwrap();
    // The library reads through whatever program it is given; the stand-in reads
    // STAND_IN_BMC from the environment, which this test sets for itself only through a
    // wrapper script so that parallel tests are not disturbed.
    let wrapper = dir.path().join("ipmitool");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nSTAND_IN_BMC='{}' exec '{}' \"$@\"\n",
            dir.path().display(),
            stand_in().display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = identity::read(&wrapper).unwrap();
    assert_eq!(id.manufacturer_name.as_deref(), Some("Supermicro"));
    assert_eq!(id.firmware_revision.as_deref(), Some("3.10"));
    assert_eq!(id.ipmi_version.as_deref(), Some("2.0"));
    assert_eq!(id.board_mfg.as_deref(), Some("ASRockRack"));
    assert_eq!(id.board_product.as_deref(), Some("E3C252D4U"));
    assert_eq!(id.board_serial.as_deref(), Some("215850710000008"));
    assert_eq!(id.product_serial.as_deref(), Some("F5S0R8000584"));
    assert_eq!(id.fru_unreadable, None);
    // Without a FRU the controller is still read.
    std::fs::remove_file(dir.path().join("fru-print-0.txt")).unwrap();
    let id = identity::read(&wrapper).unwrap();
    assert_eq!(id.board_mfg, None);
    assert!(id.fru_unreadable.unwrap().starts_with("no BMC answered"));
    // Without a controller there is no identity: an error, never a panic.
    std::fs::remove_file(dir.path().join("mc-info.txt")).unwrap();
    let err = identity::read(&wrapper).unwrap_err();
    assert!(err.to_string().starts_with("no BMC answered"), "{err}");
}

/// A box's BMC for the stand-in: a copy of `board`'s recorded files, changed between runs.
fn bmc_box(board: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(bmc_fixture(board)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    dir
}

/// `tinyperf health` on the clean green box, its BMC answered by the stand-in from `bmc`.
fn health(state: &Path, env: &[(&str, &str)]) -> Output {
    let empty = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/green-clean-boot");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tinyperf"));
    cmd.arg("health")
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(state)
        .env("LD_LIBRARY_PATH", empty.path())
        .env("ROCM_PATH", empty.path())
        .env("TINYPERF_IPMITOOL", stand_in());
    for (key, value) in env {
        cmd.env(key, value);
    }
    cmd.output().expect("tinyperf runs")
}

/// The newest run's record in `state`.
fn newest_record(state: &Path) -> Value {
    let mut records: Vec<Value> = std::fs::read_dir(state.join("runs"))
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path().join("run.json");
            serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
        })
        .collect();
    records.sort_by_key(|r| r["started_at"].as_str().unwrap_or_default().to_string());
    records.pop().unwrap()
}

fn check<'a>(record: &'a Value, name: &str) -> &'a Value {
    record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "kernel-messages")
        .and_then(|s| {
            s["checks"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["name"] == name)
        })
        .unwrap_or_else(|| panic!("no {name} check: {record}"))
}

#[test]
fn stand_in_psu_failure_fails_bmc_events_once_then_passes_until_the_log_is_cleared() {
    let bmc = bmc_box("composed-psu-failure");
    let state = tempfile::tempdir().unwrap();
    let bmc_dir = bmc.path().to_str().unwrap();

    let first = health(state.path(), &[("STAND_IN_BMC", bmc_dir)]);
    assert_eq!(
        first.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&first.stdout)
    );
    let record = newest_record(state.path());
    let events = check(&record, "bmc-events");
    assert_eq!(events["verdict"], "fail", "{events}");
    let found = events["found"].as_str().unwrap();
    assert!(
        found.contains(
            "Power Supply PSU1 Status: Failure detected () at 11/27/2024 10:15:02 (record 5)"
        ),
        "{found}"
    );
    assert!(
        found.contains("1 serious event(s) in the BMC's event log"),
        "{found}"
    );
    // The corrected memory error and the lost redundancy are named as warnings.
    assert!(found.contains("2 warning(s)"), "{found}");
    let sensors = check(&record, "bmc-sensors");
    assert_eq!(sensors["verdict"], "fail", "{sensors}");
    let found = sensors["found"].as_str().unwrap();
    assert!(found.contains("fan CPU_FAN2 at 0 RPM"), "{found}");
    assert!(found.contains("power supply PSU1 Status"), "{found}");
    let mark: Value =
        serde_json::from_slice(&std::fs::read(state.path().join("bmc-sel.json")).unwrap()).unwrap();
    assert_eq!(mark["last_id"], "7");
    assert_eq!(mark["entries"], 7);

    // The same log again: nothing new, so nothing to fail.
    health(state.path(), &[("STAND_IN_BMC", bmc_dir)]);
    let events = check(&newest_record(state.path()), "bmc-events").clone();
    assert_eq!(events["verdict"], "pass", "{events}");
    assert_eq!(
        events["found"],
        "0 event(s) since the last run, none serious"
    );

    // One new event since: only it is judged.
    let log = bmc.path().join("sel-elist.txt");
    let mut text = std::fs::read_to_string(&log).unwrap();
    text.push_str(
        "   8 | 11/28/2024 | 08:00:00 | Fan FAN3 | Lower Non-critical going low | Asserted\n",
    );
    std::fs::write(&log, &text).unwrap();
    health(state.path(), &[("STAND_IN_BMC", bmc_dir)]);
    let events = check(&newest_record(state.path()), "bmc-events").clone();
    assert_eq!(events["verdict"], "warn", "{events}");
    assert!(
        events["found"]
            .as_str()
            .unwrap()
            .starts_with("1 warning(s) since the last run: Fan FAN3"),
        "{events}"
    );

    // Cleared: fewer entries than the mark counted, so every entry is judged again.
    std::fs::write(
        &log,
        "   1 | 11/29/2024 | 09:00:00 | Event Logging Disabled #0x07 | Log area reset/cleared | Asserted\n   2 | 11/29/2024 | 09:10:00 | Temperature CPU1 Temp | Upper Critical going high | Asserted\n",
    )
    .unwrap();
    health(state.path(), &[("STAND_IN_BMC", bmc_dir)]);
    let record = newest_record(state.path());
    let events = check(&record, "bmc-events");
    assert_eq!(events["verdict"], "fail", "{events}");
    assert!(
        events["found"]
            .as_str()
            .unwrap()
            .contains("Temperature CPU1 Temp: Upper Critical going high"),
        "{events}"
    );
    let stage = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "kernel-messages")
        .unwrap();
    assert!(
        stage["findings"]
            .to_string()
            .contains("was cleared since the last run"),
        "{stage}"
    );
}

#[test]
fn stand_in_an_unrecorded_run_judges_everything_and_saves_nothing() {
    let bmc = bmc_box("composed-psu-failure");
    let empty = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/green-clean-boot");
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .arg("health")
        .arg("--root")
        .arg(root)
        .env("LD_LIBRARY_PATH", empty.path())
        .env("ROCM_PATH", empty.path())
        .env("TINYPERF_IPMITOOL", stand_in())
        .env("STAND_IN_BMC", bmc.path())
        .env("HOME", empty.path())
        .env("XDG_CACHE_HOME", empty.path())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let files: Vec<_> = walk(empty.path());
    assert!(
        !files.iter().any(|f| f.ends_with("bmc-sel.json")),
        "{files:?}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn stand_in_missing_means_no_bmc_and_a_skip_never_an_error() {
    let state = tempfile::tempdir().unwrap();
    let empty_bin = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/green-clean-boot");
    // A PATH without any ipmitool on it.
    let path: Vec<PathBuf> = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .filter(|dir| !dir.join("ipmitool").exists())
        .chain([empty_bin.path().to_path_buf()])
        .collect();
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .arg("health")
        .arg("--root")
        .arg(root)
        .arg("--state-dir")
        .arg(state.path())
        .env("LD_LIBRARY_PATH", empty.path())
        .env("ROCM_PATH", empty.path())
        .env_remove("TINYPERF_IPMITOOL")
        .env("PATH", std::env::join_paths(path).unwrap())
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let record = newest_record(state.path());
    let events = check(&record, "bmc-events");
    assert_eq!(events["verdict"], "skip", "{events}");
    assert_eq!(events["found"], "no BMC: ipmitool not found");

    // ipmitool there, but no BMC behind it.
    let out = health(state.path(), &[("STAND_IN_NO_DEVICE", "1")]);
    assert_eq!(out.status.code(), Some(0));
    let events = check(&newest_record(state.path()), "bmc-events").clone();
    assert_eq!(events["verdict"], "skip", "{events}");
    assert_eq!(
        events["found"],
        "no BMC answered: Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory"
    );
}

#[test]
fn stand_in_that_hangs_is_timed_out_with_a_finding() {
    let state = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let out = health(
        state.path(),
        &[("STAND_IN_HANG", "1"), ("TINYPERF_BMC_TIMEOUT_S", "1")],
    );
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "a hung BMC warns: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let record = newest_record(state.path());
    let events = check(&record, "bmc-events");
    assert_eq!(events["verdict"], "warn", "{events}");
    assert_eq!(
        events["found"],
        "no BMC answered: ipmitool sel elist gave no answer within 1 s"
    );
}
