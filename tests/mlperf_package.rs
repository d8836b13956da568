//! `tinyperf mlperf package` on five real (short) smoke runs: the package passes
//! `mlperf_logging.package_checker` (ruleset 4.0.0), `tinyperf mlperf score` equals
//! `result_summarizer` on it, and every way a package can be wrong is refused with
//! nothing left behind. Needs PyPI (through scripts/mlperf-check.sh) the first time.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::runs::{
    ipmitool_stand_in, mlperf_check, output_text, run_dirs, stage_metric, SHORT_SMOKE,
};
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn tinyperf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(args)
        .env("TINYPERF_LOG", "warn")
        .output()
        .expect("run tinyperf")
}

/// A short smoke run whose wall power comes from the ipmitool stand-in (a script that
/// answers `dcmi power reading` with 400 W, as a BMC would). Runs are deterministic given
/// their seed, and a drawn seed may miss this tiny set's target: each run gets one of
/// seeds 1 to 5, every one of which reaches it.
fn smoke_run(state: &Path, seed: u32) {
    let seed = format!("seed={seed}");
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["run", "smoke", "--state-dir", state.to_str().unwrap()])
        .args(SHORT_SMOKE.iter().flat_map(|o| ["-o", o]))
        .args(["-o", &seed])
        .env("TINYPERF_LOG", "warn")
        .env("TINYPERF_IPMITOOL", ipmitool_stand_in())
        .output()
        .expect("run tinyperf");
    assert!(out.status.success(), "{}", output_text(&out));
}

fn package(out: &Path, extra: &[&str], runs: &[PathBuf]) -> Output {
    let mut args = vec![
        "mlperf",
        "package",
        "--org",
        "tinycorp",
        "--system",
        "cpubox",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    for r in runs {
        args.push(r.to_str().unwrap());
    }
    tinyperf(&args)
}

fn summarizer(org: &Path) -> Value {
    let python = Command::new(repo().join("scripts/mlperf-check.sh"))
        .arg("python")
        .output()
        .unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(String::from_utf8_lossy(&python.stdout).trim())
        .arg(repo().join("scripts/mlperf_results.py"))
        .arg("summarize")
        .arg(org)
        .current_dir(scratch.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", output_text(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Nothing but `names` in `dir`: no half-written package beside them.
fn only(dir: &Path, names: &[&str]) {
    let mut found: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    found.sort();
    assert_eq!(found, names, "in {}", dir.display());
}

#[test]
fn five_smoke_runs_make_a_package_the_checkers_pass() {
    let state = tempfile::tempdir().unwrap();
    for seed in 1..=5 {
        smoke_run(state.path(), seed);
    }
    let runs = run_dirs(state.path());
    let out = tempfile::tempdir().unwrap();
    // Each run measured wall power for its timed part.
    for run in &runs {
        let record: Value =
            serde_json::from_slice(&fs::read(run.join("run.json")).unwrap()).unwrap();
        let power = fs::read_to_string(run.join("power.txt")).unwrap();
        assert!(
            power.contains("\"key\": \"power_reading\", \"value\": 400.0"),
            "{power}"
        );
        assert!(power.contains("wall power from the BMC"), "{power}");
        let joules =
            stage_metric(&record["stages"][0], "mlperf_energy_j").expect("energy on the record");
        let seconds = stage_metric(&record["stages"][0], "run_seconds").unwrap();
        assert!(
            joules > 0.5 * 400.0 * seconds && joules < 1.5 * 400.0 * seconds,
            "{joules} J in {seconds} s"
        );
        assert!(stage_metric(&record["stages"][0], "mlperf_img_per_j").unwrap() > 0.0);
        assert_eq!(
            stage_metric(&record["stages"][0], "mlperf_wall_power"),
            Some(1.0)
        );
    }

    let written = package(out.path(), &["--json"], &runs);
    assert!(written.status.success(), "{}", output_text(&written));
    let report: Value = serde_json::from_slice(&written.stdout).unwrap();
    let org = out.path().join("tinycorp");
    only(out.path(), &["tinycorp"]);

    // Smoke runs log open division, and the system description says so too.
    assert_eq!(report["package"]["division"], "open");
    let desc: Value =
        serde_json::from_slice(&fs::read(org.join("systems/cpubox.json")).unwrap()).unwrap();
    assert_eq!(desc["division"], "open");
    assert_eq!(desc["system_name"], "cpubox");
    assert_eq!(desc["submitter"], "tinycorp");
    // Every run drew its own seed.
    let mut seeds: Vec<i64> = report["package"]["seeds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_i64().unwrap())
        .collect();
    seeds.sort();
    seeds.dedup();
    assert_eq!(seeds.len(), 5, "{report:#}");
    for i in 0..5 {
        let result = org.join(format!("results/cpubox/resnet/result_{i}.txt"));
        assert!(result.is_file(), "{}", result.display());
        let power = org.join(format!("results/cpubox/resnet/power/result_{i}/node_0.txt"));
        assert!(power.is_file(), "{}", power.display());
    }
    assert_eq!(report["package"]["power"], true);
    let implementation = org.join(format!(
        "benchmarks/resnet/implementations/tinyperf-{}",
        env!("CARGO_PKG_VERSION")
    ));
    let readme = fs::read_to_string(implementation.join("README.md")).unwrap();
    assert!(
        readme.contains("smoke") && readme.contains(&seeds[0].to_string()),
        "{readme}"
    );
    let again = fs::read_to_string(implementation.join("run_and_time.sh")).unwrap();
    assert_eq!(again.matches("tinyperf run smoke").count(), 5, "{again}");

    let checked = mlperf_check("package", &org);
    assert!(checked.status.success(), "{}", output_text(&checked));

    let official = summarizer(&org);
    let ours = &report["systems"][0];
    let theirs = official["cpubox"]["time_to_train_min"].as_f64().unwrap();
    let mine = ours["time_to_train_min"].as_f64().unwrap();
    assert!(
        (mine - theirs).abs() < 0.001,
        "tinyperf {mine}, summarizer {theirs}"
    );
    eprintln!("tinyperf package: tinyperf {mine} min, result_summarizer {theirs} min");
    let theirs = official["cpubox"]["energy_j"]
        .as_f64()
        .expect("the summarizer's energy");
    let mine = ours["energy_j"].as_f64().unwrap();
    assert!(
        (mine - theirs).abs() < 1.0,
        "energy: tinyperf {mine} J, summarizer {theirs} J"
    );
    eprintln!("tinyperf package: tinyperf {mine} J, result_summarizer {theirs} J");
    assert_eq!(ours["runs_counted"], 5);

    // A target that exists is refused and left as it was.
    let again = package(out.path(), &[], &runs);
    assert!(!again.status.success());
    assert!(
        output_text(&again).contains("exists"),
        "{}",
        output_text(&again)
    );
    only(out.path(), &["tinycorp"]);

    // Refusals, each before anything is written.
    let fresh = tempfile::tempdir().unwrap();
    let refused = |extra: &[&str], runs: &[PathBuf], says: &str| {
        let o = package(fresh.path(), extra, runs);
        assert!(!o.status.success(), "{says}: {}", output_text(&o));
        assert!(
            output_text(&o).contains(says),
            "{says}: {}",
            output_text(&o)
        );
        only(fresh.path(), &[]);
    };
    refused(&["--division", "closed"], &runs, "made as open division");
    refused(&[], &runs[..4], "exactly 5 runs; 4 given");

    // The same run twice is one seed twice.
    let doubled = tempfile::tempdir().unwrap();
    let copy = doubled.path().join("copy");
    copy_dir(&runs[0], &copy);
    let mut with_copy = runs[..4].to_vec();
    with_copy.push(copy.clone());
    refused(&[], &with_copy, "the same seed");

    // A run of another box.
    let record_path = copy.join("run.json");
    let mut record: Value = serde_json::from_slice(&fs::read(&record_path).unwrap()).unwrap();
    record["hardware"]["sku"] = "tinybox-green".into();
    fs::write(&record_path, serde_json::to_vec(&record).unwrap()).unwrap();
    refused(&[], &with_copy, "runs of different systems");

    let not_a_run = doubled.path().join("empty");
    fs::create_dir(&not_a_run).unwrap();
    let mut with_empty = runs[..4].to_vec();
    with_empty.push(not_a_run);
    refused(&[], &with_empty, "not a run folder");
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// `mlperf-resnet` with `runs=5` trains five times, each run seeded apart and logged in
/// its own `result_N/`, then packages them; here on a tiny generated set at 16², one
/// epoch each (so no run reaches the target, and the package has no score by the rules).
#[test]
fn mlperf_resnet_with_five_runs_trains_five_times_and_packages_them() {
    let work = tempfile::tempdir().unwrap();
    let data = work.path().join("data");
    let synth = tinyperf(&[
        "dataset",
        "synth",
        data.to_str().unwrap(),
        "--classes",
        "2",
        "--per-class",
        "4",
        "--val-per-class",
        "2",
        "--size",
        "16",
    ]);
    assert!(synth.status.success(), "{}", output_text(&synth));
    let state = work.path().join("state");
    let mut args = vec![
        "run",
        "mlperf-resnet",
        "--dataset",
        data.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
    ];
    for o in [
        "runs=5",
        "image_size=16",
        "batch_size=8",
        "eval_batch_size=4",
        "train_epochs=1",
        "warmup_epochs=0",
        "loader_threads=1",
        "submitter=example-lab",
    ] {
        args.push("-o");
        args.push(o);
    }
    let run = tinyperf(&args);
    let runs = run_dirs(&state);
    assert_eq!(runs.len(), 1, "{}", output_text(&run));
    let record: Value =
        serde_json::from_slice(&fs::read(runs[0].join("run.json")).unwrap()).unwrap();
    let names: Vec<&str> = record["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "mlperf-resnet-1",
            "mlperf-resnet-2",
            "mlperf-resnet-3",
            "mlperf-resnet-4",
            "mlperf-resnet-5",
            "mlperf-package"
        ],
        "{}",
        output_text(&run)
    );
    let mut seeds: Vec<u64> = record["stages"].as_array().unwrap()[..5]
        .iter()
        .map(|s| {
            s["metrics"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["name"] == "seed")
                .unwrap()["value"]
                .as_f64()
                .unwrap() as u64
        })
        .collect();
    seeds.sort();
    seeds.dedup();
    assert_eq!(seeds.len(), 5, "{record:#}");
    for i in 0..5 {
        assert!(runs[0].join(format!("result_{i}/mllog.txt")).is_file());
        let desc: Value = serde_json::from_slice(
            &fs::read(runs[0].join(format!("result_{i}/system_desc.json"))).unwrap(),
        )
        .unwrap();
        // 16² images are not the benchmark: open division, in the log and the description.
        assert_eq!(desc["division"], "open");
        assert_eq!(desc["submitter"], "example-lab");
        let mllog = fs::read_to_string(runs[0].join(format!("result_{i}/mllog.txt"))).unwrap();
        assert!(
            mllog.contains(r#""key": "submission_org", "value": "example-lab""#),
            "{mllog}"
        );
    }
    let org = runs[0].join("submission/example-lab");
    assert!(org.join("systems").is_dir(), "{record:#}");
    let package_stage = &record["stages"][5];
    assert!(
        package_stage["message"]
            .as_str()
            .unwrap()
            .contains("no score"),
        "{package_stage:#}"
    );

    // Open division asks nothing of a run but an evaluation below 1.0, so the package
    // checker passes these unconverged runs and the summarizer times them; tinyperf says
    // what the summarizer prints beside its own verdict.
    let checked = mlperf_check("package", &org);
    assert!(checked.status.success(), "{}", output_text(&checked));
    let official = summarizer(&org);
    let (_, theirs) = official.as_object().unwrap().iter().next().unwrap();
    let score = tinyperf(&["mlperf", "score", "--json", org.to_str().unwrap()]);
    let ours: Value = serde_json::from_slice(&score.stdout).unwrap();
    let ours = &ours["systems"][0];
    assert!(ours["time_to_train_min"].is_null());
    let (a, b) = (
        ours["summarizer_time_to_train_min"].as_f64().unwrap(),
        theirs["time_to_train_min"].as_f64().unwrap(),
    );
    assert!(
        (a - b).abs() < 0.001,
        "tinyperf's summarizer figure {a}, summarizer {b}"
    );

    // The run folder of five scores as its package does.
    let folder = tinyperf(&["mlperf", "score", "--json", runs[0].to_str().unwrap()]);
    let folder: Value = serde_json::from_slice(&folder.stdout).unwrap();
    assert_eq!(folder["systems"][0]["runs"].as_array().unwrap().len(), 5);
    assert_eq!(
        folder["systems"][0]["summarizer_time_to_train_min"],
        ours["summarizer_time_to_train_min"]
    );
    let script = fs::read_to_string(org.join(format!(
        "benchmarks/resnet/implementations/tinyperf-{}/run_and_time.sh",
        env!("CARGO_PKG_VERSION")
    )))
    .unwrap();
    assert_eq!(
        script.matches("tinyperf run mlperf-resnet").count(),
        5,
        "{script}"
    );
    assert!(!script.contains("runs="), "{script}");

    // The run of five packages again from the command line.
    let out = work.path().join("again");
    fs::create_dir(&out).unwrap();
    let again = package(&out, &[], &runs);
    assert_eq!(
        again.status.code(),
        Some(1),
        "written but without a score: {}",
        output_text(&again)
    );
    assert!(out
        .join("tinycorp/results/cpubox/resnet/result_4.txt")
        .is_file());
}
