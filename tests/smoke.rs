//! The `smoke` and `mlperf-resnet` suites through the real `tinyperf run` binary: a
//! short smoke run whose MLLOG and system description pass MLCommons' checkers, and
//! every bad input a run can meet (missing dataset, no val split, broken JPEGs,
//! out-of-range hyperparameters, cancel during training).

mod common;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::runs::{expect_metric, mlperf_check, only_run, output_text, SHORT_SMOKE};
use serde_json::Value;

const EXIT_USAGE: i32 = 2;

/// The short smoke options with a seed: runs draw their own seed unless given one,
/// and this one reaches the target here.
fn short_smoke() -> Vec<&'static str> {
    let mut options = SHORT_SMOKE.to_vec();
    options.push("seed=1");
    options
}

fn tinyperf() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tinyperf"));
    cmd.env("RUST_LOG", "warn");
    cmd
}

fn run_with(state: &Path, args: &[&str], options: &[&str]) -> Output {
    let mut cmd = tinyperf();
    cmd.arg("run").args(args).arg("--state-dir").arg(state);
    for o in options {
        cmd.arg("-o").arg(o);
    }
    cmd.output().expect("run tinyperf")
}

#[test]
fn a_short_smoke_run_trains_to_target_and_its_mllog_passes_the_compliance_checker() {
    let state = tempfile::tempdir().unwrap();
    let out = run_with(state.path(), &["--suite", "smoke"], &short_smoke());
    assert!(out.status.success(), "{}", output_text(&out));
    let (dir, record) = only_run(state.path());
    assert_eq!(record["state"], "passed", "{record:#}");
    let stage = &record["stages"][0];
    assert_eq!(stage["name"], "smoke");
    let metric = |name: &str| expect_metric(stage, name);
    assert!(metric("final_accuracy") >= 0.76);
    assert!(metric("time_to_target_s") > 0.0);
    assert!(metric("epochs") >= 1.0);
    assert!(metric("img_per_s") > 0.0);
    // The dataset was generated into the state folder's cache.
    assert!(fs::read_dir(state.path().join("cache")).unwrap().count() >= 1);

    let mllog = dir.join("mllog.txt");
    let log = fs::read_to_string(&mllog).unwrap();
    assert!(log.contains("\"key\": \"run_stop\""), "{log}");
    assert!(log.contains("\"status\": \"success\""), "{log}");
    let check = mlperf_check("compliance", &mllog);
    assert!(check.status.success(), "{}\n{log}", output_text(&check));
    assert!(output_text(&check).contains("SUCCESS"));

    let desc = dir.join("system_desc.json");
    let check = mlperf_check("system-desc", &desc);
    assert!(check.status.success(), "{}", output_text(&check));
}

#[test]
fn a_missing_dataset_fails_the_run_with_an_error_naming_the_path() {
    let state = tempfile::tempdir().unwrap();
    let missing = state.path().join("no-such-imagenet");
    let missing_arg = missing.to_str().unwrap();
    for (suite, extra) in [
        ("smoke", vec!["--dataset", missing_arg]),
        (
            "mlperf-resnet",
            vec!["-o", &*format!("dataset={missing_arg}")],
        ),
    ] {
        let state = tempfile::tempdir().unwrap();
        let mut args = vec![suite];
        args.extend(extra.iter().map(|s| &**s));
        let out = run_with(state.path(), &args, &[]);
        assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
        let (dir, record) = only_run(state.path());
        assert_eq!(record["state"], "failed", "{record:#}");
        let stage = &record["stages"][0];
        assert_eq!(stage["verdict"], "error");
        let message = stage["message"].as_str().unwrap();
        assert!(message.contains(missing_arg), "{message}");
        // Nothing was started, so there is no MLLOG to mislead.
        assert!(!dir.join("mllog.txt").exists());
    }
}

#[test]
fn a_dataset_without_a_val_split_is_an_error_that_says_so() {
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("data");
    fs::create_dir_all(data.join("train/a")).unwrap();
    let out = run_with(
        state.path(),
        &["smoke", "--dataset", data.to_str().unwrap()],
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let (_, record) = only_run(state.path());
    let message = record["stages"][0]["message"].as_str().unwrap();
    assert!(message.contains("val/"), "{message}");
}

#[test]
fn out_of_range_hyperparameters_are_usage_errors_before_anything_is_recorded() {
    for (option, needle) in [
        ("base_lr=-1", "base_lr"),
        ("momentum=1.5", "momentum"),
        ("warmup_epochs=50", "warmup_epochs"),
        ("model=vgg", "model"),
        ("image_size=3", "image_size"),
        ("precision=fp8", "fp32, fp16, bf16"),
        ("loss_scale=0", "loss_scale"),
    ] {
        let state = tempfile::tempdir().unwrap();
        let out = run_with(state.path(), &["smoke"], &[option]);
        assert_eq!(
            out.status.code(),
            Some(EXIT_USAGE),
            "{option}: {}",
            output_text(&out)
        );
        assert!(
            output_text(&out).contains(needle),
            "{option}: {}",
            output_text(&out)
        );
        assert!(!state.path().join("runs").exists() || only_runs_empty(state.path()));
    }
}

/// `tinyperf dataset synth` into `data` with `args`, which must succeed.
fn synth_dataset(data: &Path, args: &[&str]) {
    let out = tinyperf()
        .args(["dataset", "synth"])
        .arg(data)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
}

fn only_runs_empty(state: &Path) -> bool {
    common::run_ids(state).is_empty()
}

#[test]
fn a_cancel_during_training_stops_the_run_and_keeps_its_aborted_mllog() {
    let state = tempfile::tempdir().unwrap();
    let mut cmd = tinyperf();
    cmd.args(["run", "smoke", "--events", "jsonl", "--state-dir"])
        .arg(state.path());
    for o in short_smoke() {
        cmd.arg("-o").arg(o);
    }
    // Enough epochs that the run is still training when the signal comes.
    cmd.args(["-o", "train_epochs=200", "-o", "target_accuracy=1"]);
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let started = Instant::now();
    let mut steps_seen = 0;
    for line in lines.by_ref() {
        let line = line.unwrap();
        let event: Value = serde_json::from_str(&line).unwrap();
        let message = event["message"].as_str().unwrap_or("");
        if event["event"] == "progress" && message.contains(" step ") {
            steps_seen += 1;
            // Live progress names the epoch, loss, accuracy, img/s and LR.
            for part in ["epoch ", "loss ", "acc ", "img/s", "lr "] {
                assert!(message.contains(part), "{message}");
            }
            if steps_seen == 3 {
                break;
            }
        }
        assert!(started.elapsed() < Duration::from_secs(120), "no steps");
    }
    assert_eq!(steps_seen, 3);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1));
    let last: Value = serde_json::from_str(rest.last().unwrap()).unwrap();
    assert_eq!(last["event"], "run_finished", "{last}");
    assert_eq!(last["state"], "cancelled", "{last}");
    let (dir, record) = only_run(state.path());
    assert_eq!(record["state"], "cancelled");
    let log = fs::read_to_string(dir.join("mllog.txt")).unwrap();
    let last_line = log.lines().last().unwrap();
    assert!(
        last_line.contains("\"run_stop\"") && last_line.contains("\"aborted\""),
        "{last_line}"
    );
    assert!(log.contains("\"epoch_start\""));
}

#[test]
fn a_given_dataset_with_broken_jpegs_trains_and_reports_them() {
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("data");
    synth_dataset(
        &data,
        &[
            "--classes",
            "2",
            "--per-class",
            "32",
            "--val-per-class",
            "8",
            "--size",
            "16",
        ],
    );
    let class_dir = data.join("train").join(
        fs::read_dir(data.join("train"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .file_name(),
    );
    let mut files: Vec<PathBuf> = fs::read_dir(&class_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    fs::write(&files[0], b"").unwrap();
    let bytes = fs::read(&files[1]).unwrap();
    fs::write(&files[1], &bytes[..bytes.len() / 2]).unwrap();
    let options: Vec<&str> = short_smoke()
        .into_iter()
        .filter(|o| !o.starts_with("synth_"))
        .collect();
    let out = run_with(
        state.path(),
        &["smoke", "--dataset", data.to_str().unwrap()],
        &options,
    );
    let (_, record) = only_run(state.path());
    let stage = &record["stages"][0];
    assert!(
        matches!(stage["verdict"].as_str(), Some("pass" | "fail")),
        "{}\n{stage:#}",
        output_text(&out)
    );
    let unreadable = stage["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "unreadable_images")
        .unwrap();
    assert_eq!(unreadable["value"], 2.0, "{stage:#}");
    assert!(
        stage["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().contains("unreadable")),
        "{stage:#}"
    );
}

#[test]
fn an_unrecorded_run_says_where_its_mllog_went() {
    let scratch = tempfile::tempdir().unwrap();
    let tmp = scratch.path().join("tmp");
    let cache = scratch.path().join("xdg-cache");
    fs::create_dir_all(&tmp).unwrap();
    let mut cmd = tinyperf();
    cmd.args(["run", "smoke"])
        .env("TMPDIR", &tmp)
        .env("XDG_CACHE_HOME", &cache);
    for o in short_smoke() {
        cmd.arg("-o").arg(o);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let path = stderr
        .lines()
        .find_map(|l| l.split("its MLLOG goes to ").nth(1))
        .unwrap_or_else(|| panic!("{stderr}"));
    let path = Path::new(path.trim());
    assert!(path.starts_with(&tmp), "{}", path.display());
    assert!(fs::read_to_string(path).unwrap().contains("run_stop"));
    // The generated dataset went to the XDG cache.
    assert!(cache.join("tinyperf").is_dir());
}

#[test]
fn an_fp16_smoke_run_on_the_cpu_trains_with_the_reference_loss_scale() {
    let state = tempfile::tempdir().unwrap();
    let out = run_with(
        state.path(),
        &["--suite", "smoke", "--precision", "fp16"],
        &short_smoke(),
    );
    assert!(out.status.success(), "{}", output_text(&out));
    let (_, record) = only_run(state.path());
    assert_eq!(record["state"], "passed", "{record:#}");
    let stage = &record["stages"][0];
    let metric = |name: &str| expect_metric(stage, name);
    assert!(metric("final_accuracy") >= 0.76);
    assert_eq!(metric("final_loss_scale"), 128.0);
    assert!(metric("skipped_steps") < metric("steps"));
    let findings = stage["findings"].to_string();
    assert!(
        findings.contains("fp16 mixed precision on the CPU")
            && findings.contains("static loss scale 128"),
        "{findings}"
    );
}

#[test]
fn precision_is_refused_by_a_suite_that_does_not_train() {
    let state = tempfile::tempdir().unwrap();
    let out = run_with(
        state.path(),
        &["--suite", "inventory", "--precision", "bf16"],
        &[],
    );
    assert_eq!(out.status.code(), Some(EXIT_USAGE), "{}", output_text(&out));
    assert!(
        output_text(&out).contains("precision"),
        "{}",
        output_text(&out)
    );
    assert!(only_runs_empty(state.path()));
}

/// A dataset unlike the generated one (five classes of twenty 24² images, not four of
/// 250 at 64²) trains to the default target with no schedule options, where the
/// generated set's ten epochs end short of it: the planned epochs come from the set.
#[test]
fn a_dataset_of_another_shape_trains_to_the_default_target_without_schedule_options() {
    let state = tempfile::tempdir().unwrap();
    let data = state.path().join("data");
    synth_dataset(
        &data,
        &[
            "--classes",
            "5",
            "--per-class",
            "20",
            "--val-per-class",
            "10",
            "--size",
            "24",
            "--seed",
            "7",
        ],
    );
    // Only what keeps a debug build quick: the image side and the batch.
    let options = [
        "image_size=16",
        "batch_size=32",
        "eval_batch_size=30",
        "seed=1",
    ];
    let smoke = |state: &Path, extra: &[&str]| {
        let options: Vec<&str> = options.iter().chain(extra).copied().collect();
        let out = run_with(
            state,
            &["smoke", "--dataset", data.to_str().unwrap()],
            &options,
        );
        let (_, record) = only_run(state);
        (out, record["stages"][0].clone())
    };

    let (out, stage) = smoke(state.path(), &[]);
    assert!(out.status.success(), "{}\n{stage:#}", output_text(&out));
    let metric = |name: &str| expect_metric(&stage, name);
    assert!(metric("final_accuracy") >= 0.8, "{stage:#}");
    assert!(metric("epochs") > 10.0, "{stage:#}");
    let fitted = stage["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f.as_str())
        .find(|f| f.starts_with("schedule fitted to the dataset"))
        .unwrap_or_else(|| panic!("{stage:#}"));
    // 2,500 images per class at batch 32: 391 steps, 98 epochs of four.
    assert!(fitted.contains("98 planned epochs of 4 steps"), "{fitted}");

    // A schedule given as options is kept: three epochs (twelve steps) stop short.
    let fixed = tempfile::tempdir().unwrap();
    let (out, stage) = smoke(fixed.path(), &["train_epochs=3", "warmup_epochs=1"]);
    assert!(!out.status.success(), "{}\n{stage:#}", output_text(&out));
    assert_eq!(stage["verdict"], "fail", "{stage:#}");
}

/// An amdgpu in a sysfs-shaped tree, the way the kernel lays it out, drawing `watts`.
fn amd_gpu_drawing(root: &Path, address: &str, watts: u32) {
    let hwmon = common::amdgpu_sysfs(root, address, "hwmon3");
    let device = hwmon.parent().unwrap().parent().unwrap();
    fs::write(device.join("gpu_busy_percent"), "93\n").unwrap();
    fs::write(
        hwmon.join("power1_average"),
        format!("{}\n", watts * 1_000_000),
    )
    .unwrap();
    fs::write(hwmon.join("temp1_label"), "edge\n").unwrap();
    fs::write(hwmon.join("temp1_input"), "61000\n").unwrap();
}

#[test]
fn a_run_streams_its_training_figures_and_gpu_samples_live_and_nothing_after_its_end() {
    let state = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    amd_gpu_drawing(root.path(), "0000:0a:00.0", 250);
    let mut cmd = tinyperf();
    cmd.args([
        "run",
        "smoke",
        "--events",
        "jsonl",
        "--telemetry-interval",
        "0.05",
    ])
    .arg("--state-dir")
    .arg(state.path())
    .arg("--root")
    .arg(root.path());
    for o in short_smoke() {
        cmd.arg("-o").arg(o);
    }
    let out = cmd.stderr(Stdio::null()).output().unwrap();
    let events: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["event"], "run_finished", "{last}");
    let points: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "train")
        .map(|e| &e["point"])
        .collect();
    let steps = points.iter().filter(|p| p["kind"] == "step").count();
    let epochs: Vec<&&Value> = points.iter().filter(|p| p["kind"] == "epoch").collect();
    assert!(steps >= 1, "no step figures: {points:?}");
    assert!(!epochs.is_empty(), "no epoch figures");
    for epoch in &epochs {
        assert_eq!(epoch["stage"], "smoke");
        assert!(epoch["images_per_s"].as_f64().unwrap() > 0.0, "{epoch}");
        assert!(epoch["loss"].as_f64().unwrap().is_finite(), "{epoch}");
        assert!(epoch["elapsed_s"].as_f64().unwrap() >= 0.0, "{epoch}");
    }
    assert!(
        epochs.iter().any(|e| e["eval_accuracy"].as_f64().is_some()),
        "no evaluation in any epoch figure: {epochs:?}"
    );
    let steps_in_order: Vec<u64> = points
        .iter()
        .map(|p| p["global_step"].as_u64().unwrap())
        .collect();
    assert!(steps_in_order.windows(2).all(|w| w[0] <= w[1]));
    let samples: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "telemetry")
        .map(|e| &e["sample"])
        .collect();
    assert!(!samples.is_empty(), "no telemetry samples");
    let gpu = &samples[0]["gpus"][0];
    assert_eq!(gpu["address"], "0000:0a:00.0", "{gpu}");
    assert_eq!(gpu["power_w"].as_f64(), Some(250.0), "{gpu}");
    assert_eq!(gpu["util_percent"].as_f64(), Some(93.0), "{gpu}");
}

/// A run that uses its planned epochs without reaching the target says how far it got
/// and what to change, not only that the epochs ended.
#[test]
fn a_missed_target_says_how_far_it_got_and_what_to_change() {
    let state = tempfile::tempdir().unwrap();
    let mut options = short_smoke();
    options.extend([
        "target_accuracy=0.9999",
        "train_epochs=1",
        "warmup_epochs=0",
    ]);
    let out = run_with(state.path(), &["--suite", "smoke"], &options);
    assert!(!out.status.success(), "{}", output_text(&out));
    let (_, record) = only_run(state.path());
    let message = record["stages"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("the 1 planned epoch ended")
            && message.contains("short of the target accuracy 0.9999")
            && message.contains("best top-1"),
        "{message}"
    );
    assert!(message.contains("-o train_epochs=N") || message.contains("-o target_accuracy=X"));
}
