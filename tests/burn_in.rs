//! The `burn-in` suite through the real `tinyperf run`, on a copy of the tinybox red
//! fixture tree whose amdgpu hwmon files are the telemetry: a GPU whose junction sensor
//! crosses 95 °C mid-run fails the thermal check naming it and its peak; a box within its
//! thermal limits whose training runs past its time limit fails the time check with both
//! figures. The training is an external benchmark stand-in (a script replaying a real
//! MLLOG), since no ImageNet is here; without one the suite refuses, naming the path.

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use common::runs::{only_run, output_text};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The hwmon folder of the red box's `n`th amdgpu, in hwmon order.
fn amdgpu_hwmon(root: &Path, n: usize) -> PathBuf {
    let class = root.join("sys/class/hwmon");
    let mut amdgpus: Vec<PathBuf> = fs::read_dir(&class)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| fs::read_to_string(p.join("name")).is_ok_and(|name| name.trim() == "amdgpu"))
        .collect();
    amdgpus.sort();
    fs::canonicalize(&amdgpus[n]).unwrap()
}

/// A benchmark stand-in: waits `delay` seconds (while the test heats a GPU), then prints
/// a real passing MLLOG, a line every 50 ms.
fn benchmark(dir: &Path, delay: f64) -> PathBuf {
    let log = fixture("mlperf/minimal_resnet_pass.log");
    let path = dir.join("bench.sh");
    fs::write(
        &path,
        format!(
            "#!/bin/sh\nsleep {delay}\nwhile IFS= read -r line; do\n  echo \"$line\"\n  sleep 0.05\ndone < '{}'\n",
            log.display()
        ),
    )
    .unwrap();
    path
}

fn burn_in(root: &Path, state: &Path, options: &[String]) -> std::process::Child {
    burn_in_with_bmc(root, state, options, None)
}

/// The ipmitool stand-in (a script printing recorded BMC output, no BMC) answering from
/// the folder `bmc`, or no BMC at all.
fn burn_in_with_bmc(
    root: &Path,
    state: &Path,
    options: &[String],
    bmc: Option<&Path>,
) -> std::process::Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tinyperf"));
    match bmc {
        Some(dir) => {
            cmd.env("TINYPERF_IPMITOOL", fixture("bmc/ipmitool-stand-in"))
                .env("STAND_IN_BMC", dir);
        }
        None => {
            cmd.env("TINYPERF_IPMITOOL", "/nonexistent/ipmitool");
        }
    }
    cmd.args([
        "run",
        "burn-in",
        "--events",
        "jsonl",
        "--telemetry-interval",
        "0.2",
    ])
    .arg("--root")
    .arg(root)
    .arg("--state-dir")
    .arg(state)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped());
    // Short health stages: the fixture box has no GPU to load.
    for o in [
        "burn_seconds=1",
        "link_load_seconds=1",
        "throttle_seconds=1",
        "ramp_seconds=0.2",
    ] {
        cmd.arg("-o").arg(o);
    }
    for o in options {
        cmd.arg("-o").arg(o);
    }
    cmd.spawn().expect("run tinyperf")
}

fn limits_stage(record: &Value) -> &Value {
    record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "burn-in-limits")
        .unwrap_or_else(|| panic!("no burn-in-limits stage: {record:#}"))
}

fn checks<'a>(stage: &'a Value, name: &str) -> Vec<&'a Value> {
    stage["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == name)
        .collect()
}

/// Reads the run's events until its training stage starts; the thread returned reads
/// the rest, so that the run never blocks on a full pipe.
fn wait_for_training(child: &mut std::process::Child) -> std::thread::JoinHandle<usize> {
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = lines
            .next()
            .expect("the run ended before its training began")
            .unwrap();
        let event: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if event["event"] == "stage_started" && event["stage"] == "external" {
            break;
        }
    }
    std::thread::spawn(move || lines.count())
}

fn finished(child: std::process::Child) -> Output {
    child.wait_with_output().unwrap()
}

#[test]
fn a_gpu_crossing_95_c_fails_the_burn_in_naming_the_gpu_and_its_peak() {
    let work = tempfile::tempdir().unwrap();
    let tree = common::fixture_copy("tinybox-red");
    let root = tree.path().to_path_buf();
    let state = work.path().join("state");
    let bench = benchmark(work.path(), 3.0);
    let hot = amdgpu_hwmon(&root, 2);
    // hwmon/hwmonN sits in the GPU's own device folder.
    let address = hot
        .parent()
        .and_then(Path::parent)
        .and_then(Path::file_name)
        .unwrap()
        .to_string_lossy()
        .to_string();
    let mut child = burn_in(
        &root,
        &state,
        &[format!("command=[\"sh\", \"{}\"]", bench.display())],
    );
    // Heat the third GPU's junction once the training has started, as a card whose
    // cooling gives out under the long load would; then cool it again.
    let drain = wait_for_training(&mut child);
    fs::write(hot.join("temp2_input"), "97250\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    fs::write(hot.join("temp2_input"), "61000\n").unwrap();
    let out = finished(child);
    drain.join().unwrap();
    assert!(!out.status.success(), "{}", output_text(&out));
    let (_, record) = only_run(&state);
    assert_eq!(record["state"], "failed", "{record:#}");
    let stage = limits_stage(&record);
    assert_eq!(stage["verdict"], "fail", "{stage:#}");
    let gpus = checks(stage, "gpu-temperature");
    assert_eq!(gpus.len(), 6, "{stage:#}");
    let failed: Vec<_> = gpus.iter().filter(|c| c["verdict"] == "fail").collect();
    assert_eq!(failed.len(), 1, "{stage:#}");
    assert_eq!(failed[0]["subject"], address.as_str(), "{stage:#}");
    let found = failed[0]["found"].as_str().unwrap();
    assert!(found.contains("97.2 °C (junction)"), "{found}");
    assert!(found.contains(&address), "{found}");
    assert!(
        found.contains("external"),
        "the stage it was seen in: {found}"
    );
    // The time check passed: the red's limit is hours.
    assert_eq!(checks(stage, "training-time")[0]["verdict"], "pass");
    // The run says why it failed.
    assert!(
        record["summary"].to_string().contains("burn-in-limits")
            || record["message"].to_string().contains("burn-in-limits"),
        "{record:#}"
    );
}

#[test]
fn a_cool_box_over_its_time_limit_fails_the_time_check_with_both_figures() {
    let work = tempfile::tempdir().unwrap();
    let tree = common::fixture_copy("tinybox-red");
    let root = tree.path().to_path_buf();
    let state = work.path().join("state");
    let bench = benchmark(work.path(), 1.0);
    let out = finished(burn_in(
        &root,
        &state,
        &[
            format!("command=[\"sh\", \"{}\"]", bench.display()),
            "time_limit_s=1".into(),
        ],
    ));
    assert!(!out.status.success(), "{}", output_text(&out));
    let (_, record) = only_run(&state);
    let stage = limits_stage(&record);
    let time = checks(stage, "training-time")[0];
    assert_eq!(time["verdict"], "fail", "{time:#}");
    assert!(
        time["expected"]
            .as_str()
            .unwrap()
            .contains("at most 1 s (1 s + 5 %)"),
        "{time:#}"
    );
    let seconds: f64 = time["found"]
        .as_str()
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(seconds >= 2.0, "{time:#}");
    // Every GPU stayed within 95 °C: the fixture's sensors read 40–52 °C.
    let gpus = checks(stage, "gpu-temperature");
    assert_eq!(gpus.len(), 6);
    assert!(gpus.iter().all(|c| c["verdict"] == "pass"), "{stage:#}");
    assert_eq!(checks(stage, "cpu-temperature")[0]["verdict"], "pass");
}

#[test]
fn without_imagenet_the_burn_in_refuses_naming_the_path_it_looked_for() {
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("no-imagenet");
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["run", "burn-in", "--run-dir"])
        .arg(work.path().join("run"))
        .arg("--dataset")
        .arg(&missing)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = output_text(&out);
    assert!(text.contains(&missing.display().to_string()), "{text}");
    assert!(text.contains("ImageNet"), "{text}");
    // Refused before anything ran: no stage started.
    assert!(
        !work.path().join("run/run.json").exists() || {
            let record: Value =
                serde_json::from_slice(&fs::read(work.path().join("run/run.json")).unwrap())
                    .unwrap();
            record["stages"].as_array().is_none_or(|s| s.is_empty())
        }
    );
}

/// Fans and supplies as an ASRock Rack BMC lists them (recorded output, trimmed to
/// healthy fans), and an event log just cleared; `stopped` puts FRNT_FAN2 at 0 RPM in
/// critical state.
fn write_sensors(dir: &Path, stopped: bool) {
    let frnt_fan2 = if stopped {
        "FRNT_FAN2        | 14h | cr  |  7.0 | 0 RPM"
    } else {
        "FRNT_FAN2        | 14h | ok  |  7.0 | 600 RPM"
    };
    let fans = format!(
        "CPU_FAN1         | 0Fh | ok  |  7.0 | 1300 RPM\nREAR_FAN1        | 11h | ok  |  7.0 | 1900 RPM\nFRNT_FAN1        | 13h | ok  |  7.0 | 1500 RPM\n{frnt_fan2}\n"
    );
    // Written whole and renamed, as the stand-in may read it at any moment.
    fs::write(dir.join("fan.tmp"), fans).unwrap();
    fs::rename(dir.join("fan.tmp"), dir.join("sdr-type-fan.txt")).unwrap();
    fs::write(
        dir.join("sel-elist.txt"),
        "   1 | 12/01/2026 | 09:00:00 | Event Logging Disabled #0x09 | Log area reset/cleared | Asserted\n",
    )
    .unwrap();
    fs::write(
        dir.join("sdr-type-power-supply.txt"),
        "PSU1 Status      | C8h | ok  | 10.1 | Presence detected\nPSU2 Status      | C9h | ok  | 10.2 | Presence detected\n",
    )
    .unwrap();
}

#[test]
fn a_fan_that_stops_mid_burn_in_fails_naming_it_through_the_ipmitool_stand_in() {
    let work = tempfile::tempdir().unwrap();
    let tree = common::fixture_copy("tinybox-red");
    let root = tree.path().to_path_buf();
    let state = work.path().join("state");
    let bmc = work.path().join("bmc");
    fs::create_dir_all(&bmc).unwrap();
    write_sensors(&bmc, false);
    let bench = benchmark(work.path(), 6.0);
    let mut child = burn_in_with_bmc(
        &root,
        &state,
        &[format!("command=[\"sh\", \"{}\"]", bench.display())],
        Some(&bmc),
    );
    let drain = wait_for_training(&mut child);
    write_sensors(&bmc, true);
    let out = finished(child);
    drain.join().unwrap();
    assert!(!out.status.success(), "{}", output_text(&out));
    let (_, record) = only_run(&state);
    let stage = limits_stage(&record);
    let fans = checks(stage, "fans-and-supplies")[0];
    assert_eq!(fans["verdict"], "fail", "{stage:#}");
    let found = fans["found"].as_str().unwrap();
    assert!(found.contains("fan FRNT_FAN2 at 0 RPM (cr)"), "{found}");
    assert!(found.contains("first in stage external"), "{found}");
    let slowest = stage["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "bmc_frnt_fan2_min_rpm")
        .unwrap_or_else(|| panic!("{stage:#}"));
    assert_eq!(slowest["value"], 0.0);
    // The fan was turning when the health stages judged the BMC.
    let kernel = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "kernel-messages")
        .unwrap();
    let sensors = checks(kernel, "bmc-sensors");
    assert_eq!(sensors[0]["verdict"], "pass", "{kernel:#}");
}
