//! `tinyperf mlperf score` against `mlperf_logging.result_summarizer` on results written
//! with mlperf-logging's own `mllog` library in the styles other frameworks log in
//! (scripts/mlperf_results.py), and on bad input. Needs PyPI (through
//! scripts/mlperf-check.sh) the first time: these tests never skip.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn venv_python() -> String {
    let out = Command::new(repo().join("scripts/mlperf-check.sh"))
        .arg("python")
        .output()
        .expect("run scripts/mlperf-check.sh python");
    assert!(
        out.status.success(),
        "no mlperf-logging environment:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn results_script(args: &[&Path], command: &str) -> String {
    let scratch = tempfile::tempdir().unwrap();
    let out = Command::new(venv_python())
        .arg(repo().join("scripts/mlperf_results.py"))
        .arg(command)
        .args(args)
        // The summarizer writes summary.json into its working folder.
        .current_dir(scratch.path())
        .output()
        .expect("run scripts/mlperf_results.py");
    assert!(
        out.status.success(),
        "mlperf_results.py {command} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The summarizer's scores of the submission folder `org`, by system.
pub fn summarizer(org: &Path) -> Value {
    serde_json::from_str(&results_script(&[org], "summarize")).expect("summarizer JSON")
}

fn score_json(paths: &[&Path]) -> (bool, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["mlperf", "score", "--json"])
        .args(paths)
        .output()
        .expect("run tinyperf mlperf score");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), json)
}

fn score_error(paths: &[&Path]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["mlperf", "score"])
        .args(paths)
        .output()
        .expect("run tinyperf mlperf score");
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).to_string()
}

fn org_of(root: &Path, style: &str) -> PathBuf {
    let dir = root.join(style);
    let mut orgs: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(orgs.len(), 1, "{orgs:?}");
    orgs.remove(0)
}

fn close(a: Option<f64>, b: Option<f64>, tolerance: f64) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= tolerance,
        (None, None) => true,
        _ => false,
    }
}

/// Every style scores as the summarizer scores it, to 0.001 min and to 1 J.
#[test]
fn scores_equal_the_result_summarizer_in_every_style() {
    let root = tempfile::tempdir().unwrap();
    results_script(&[root.path()], "generate");
    let mut compared = 0;
    for style in ["mxnet", "pytorch", "tinygrad", "short", "failing"] {
        let org = org_of(root.path(), style);
        let official = summarizer(&org);
        let (all_scored, ours) = score_json(&[&org]);
        let systems = ours["systems"].as_array().unwrap();
        assert_eq!(systems.len(), 1, "{style}: {ours:#}");
        let system = &systems[0];
        let name = system["system"].as_str().unwrap();
        let theirs = &official[name];
        assert!(theirs.is_object(), "{style}: {name} not in {official}");
        let (a, b) = (
            system["time_to_train_min"].as_f64(),
            theirs["time_to_train_min"].as_f64(),
        );
        assert!(close(a, b, 0.001), "{style}: ours {a:?}, summarizer {b:?}");
        let c = system["summarizer_time_to_train_min"].as_f64();
        assert!(
            close(c, b, 0.001),
            "{style}: summarizer's figure {c:?}, summarizer {b:?}"
        );
        assert_eq!(all_scored, a.is_some(), "{style}: exit status");
        let (a, b) = (system["energy_j"].as_f64(), theirs["energy_j"].as_f64());
        assert!(
            close(a, b, 1.0),
            "{style}: energy ours {a:?}, summarizer {b:?}"
        );
        eprintln!(
            "{style}: tinyperf {:?} min, result_summarizer {:?} min; energy {:?} J, {:?} J",
            system["time_to_train_min"],
            theirs["time_to_train_min"],
            system["energy_j"],
            theirs["energy_j"]
        );
        compared += 1;

        let runs = system["runs"].as_array().unwrap();
        match style {
            "mxnet" => {
                assert_eq!(system["runs_dropped"], 1);
                let dnf = runs.iter().find(|r| r["converged"] == false).unwrap();
                assert!(
                    dnf["reason"].as_str().unwrap().contains("0.7590"),
                    "{dnf:#}"
                );
                // Throughput from the block timings: 4 epochs of 1,281,167 images each.
                let block = &runs[0]["epochs"][1];
                assert_eq!(block["epochs"], 4.0);
                assert!(
                    block["images_per_s"].as_f64().unwrap() > 50_000.0,
                    "{block}"
                );
            }
            "pytorch" => {
                assert_eq!(system["division"], "open");
                assert!(runs.iter().all(|r| r["converged"] == true));
                assert!(runs[0]["warnings"][0]
                    .as_str()
                    .unwrap()
                    .contains("run_start"));
                assert_eq!(runs[0]["evals"].as_array().unwrap().len(), 40);
            }
            "tinygrad" => {
                let cut = &runs[2];
                assert_eq!(cut["converged"], false);
                assert!(
                    cut["reason"].as_str().unwrap().contains("no run_stop"),
                    "{cut:#}"
                );
                assert!(system["energy_kwh"].as_f64().unwrap() > 1.0);
                assert!(runs[0]["energy_j"].as_f64().unwrap() > 1e6);
                assert_eq!(runs[0]["epochs_to_converge"], 35.0);
            }
            "short" => {
                assert_eq!(system["complete"], false);
                assert!(system["notes"][0].as_str().unwrap().contains("exactly 5"));
            }
            "failing" => {
                assert!(system["time_to_train_min"].is_null());
                assert_eq!(system["runs_dropped"], 2);
            }
            _ => unreachable!(),
        }
    }
    assert_eq!(compared, 5);

    // Single MLLOG files are scored too, grouped by the platform they log.
    let results = org_of(root.path(), "pytorch").join("results/torchbox/resnet");
    let files: Vec<PathBuf> = (0..5)
        .map(|i| results.join(format!("result_{i}.txt")))
        .collect();
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let (_, loose) = score_json(&refs);
    let (_, folder) = score_json(&[&results]);
    assert_eq!(loose["systems"][0]["system"], "torchbox");
    assert_eq!(
        loose["systems"][0]["time_to_train_min"],
        folder["systems"][0]["time_to_train_min"]
    );
}

fn minimal() -> String {
    std::fs::read_to_string(repo().join("tests/fixtures/mlperf/minimal_resnet_pass.log")).unwrap()
}

#[test]
fn bad_input_gets_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let log = minimal();
    let run_start = log.lines().find(|l| l.contains("\"run_start\"")).unwrap();
    // Two run_starts of one value pass the checker with a warning; the summarizer
    // times the run from the later one, and so does tinyperf, saying so.
    let twice = dir.path().join("two_run_starts.txt");
    let later = run_start.replace("1700000600001", "1700000600500");
    std::fs::write(
        &twice,
        log.replace(run_start, &format!("{run_start}\n{later}")),
    )
    .unwrap();
    let (_, json) = score_json(&[&twice]);
    let run = &json["systems"][0]["runs"][0];
    assert_eq!(run["converged"], true, "{run:#}");
    assert!((run["time_to_train_min"].as_f64().unwrap() - 216502.0 / 60000.0).abs() < 1e-9);
    assert!(
        run["warnings"]
            .to_string()
            .contains("run_start appears 2 times"),
        "{run:#}"
    );

    let cases = [
        (
            "bert.txt",
            log.replace("\"value\": \"resnet\"", "\"value\": \"bert\""),
            "another benchmark (bert)",
        ),
        (
            "truncated.txt",
            log.replace(
                "\"key\": \"eval_accuracy\", \"value\": 0.7595",
                "\"key\": \"eval_acc",
            ),
            "cannot be read",
        ),
        (
            "noise.txt",
            "training...\nloss 1.2\n".to_string(),
            "no MLLOG lines",
        ),
    ];
    for (name, text, reason) in &cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let (ok, json) = score_json(&[&path]);
        assert!(!ok, "{name}");
        let run = &json["systems"][0]["runs"][0];
        assert_eq!(run["converged"], false, "{name}");
        assert!(
            run["reason"].as_str().unwrap().contains(reason),
            "{name}: {run:#}"
        );
    }

    let good = dir.path().join("good.txt");
    std::fs::write(&good, &log).unwrap();
    let (ok, json) = score_json(&[&good]);
    // One run leaves nothing once the fastest and slowest are dropped: no score, said so.
    assert!(!ok, "{json:#}");
    let system = &json["systems"][0];
    assert!(system["time_to_train_min"].is_null());
    assert!(system["notes"][0].as_str().unwrap().contains("exactly 5"));
    assert_eq!(system["runs"][0]["converged"], true);
    assert!(
        (system["runs"][0]["time_to_train_min"].as_f64().unwrap() - 217001.0 / 60000.0).abs()
            < 1e-9
    );

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert!(score_error(&[&empty]).contains("holds no ResNet results"));
    assert!(score_error(&[&dir.path().join("absent")]).contains("no such file"));
}

#[test]
fn power_logs_with_negative_readings_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let bench = root.path().join("box/resnet");
    std::fs::create_dir_all(bench.join("power/result_0")).unwrap();
    std::fs::write(bench.join("result_0.txt"), minimal()).unwrap();
    let line = |t: u64, key: &str, v: &str| {
        format!(":::MLLOG {{\"time_ms\": {t}, \"key\": \"{key}\", \"value\": {v}, \"metadata\": {{}}}}\n")
    };
    let power = line(1700000600000, "power_measurement_start", "null")
        + &line(1700000700000, "power_reading", "-5.0")
        + &line(1700000817002, "power_measurement_stop", "null");
    std::fs::write(bench.join("power/result_0/node_0.txt"), power).unwrap();
    let (_, json) = score_json(&[&bench]);
    let run = &json["systems"][0]["runs"][0];
    assert!(run["energy_j"].is_null());
    assert!(
        run["warnings"][0].as_str().unwrap().contains("negative"),
        "{run:#}"
    );
}

/// A folder of result files names its system after the submission's `systems/`
/// description when it has one, else after the platform its logs name, else after the
/// folder's absolute path; never after an empty or relative name.
#[test]
fn a_folder_of_results_is_named_by_its_system_then_its_logs_then_its_path() {
    let work = tempfile::tempdir().unwrap();
    let minimal = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlperf/minimal_resnet_pass.log"),
    )
    .unwrap();
    let platform = minimal
        .lines()
        .find(|l| l.contains("\"submission_platform\""))
        .unwrap()
        .to_string();
    let write_five = |dir: &Path, log: &str| {
        std::fs::create_dir_all(dir).unwrap();
        for i in 0..5 {
            std::fs::write(dir.join(format!("result_{i}.txt")), log).unwrap();
        }
    };
    let name_in = |cwd: &Path, folder: &str| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
            .current_dir(cwd)
            .args(["mlperf", "score", "--json", folder])
            .output()
            .unwrap();
        let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stderr));
        });
        json["systems"][0]["system"].as_str().unwrap().to_string()
    };
    // A relative folder: the platform its logs name.
    write_five(&work.path().join("five"), &minimal);
    let logged = serde_json::from_str::<Value>(platform.split(":::MLLOG ").nth(1).unwrap())
        .unwrap()["value"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!logged.is_empty());
    assert_eq!(name_in(work.path(), "five"), logged);
    assert_eq!(name_in(work.path(), "five/"), logged);
    // No platform logged: the folder's absolute path.
    write_five(
        &work.path().join("unnamed"),
        &minimal.replace(&format!("{platform}\n"), ""),
    );
    let absolute = std::fs::canonicalize(work.path().join("unnamed")).unwrap();
    assert_eq!(
        name_in(work.path(), "unnamed"),
        absolute.display().to_string()
    );
    // A submission's layout with the system described: the system's folder name.
    let org = work.path().join("org");
    write_five(&org.join("results/box-a/resnet"), &minimal);
    std::fs::create_dir_all(org.join("systems")).unwrap();
    std::fs::write(org.join("systems/box-a.json"), "{}").unwrap();
    assert_eq!(name_in(&org.join("results"), "box-a/resnet"), "box-a");
}

/// A result folder whose logs name a platform with a newline and an escape sequence, in a
/// folder whose name holds them too, cannot make `mlperf score` print a line of its own or
/// drive the terminal: every such character is shown escaped.
#[test]
fn hostile_names_cannot_print_fake_result_lines() {
    let work = tempfile::tempdir().unwrap();
    let log = minimal();
    let platform_line = log
        .lines()
        .find(|l| l.contains("\"submission_platform\""))
        .unwrap()
        .to_string();
    let record: Value =
        serde_json::from_str(platform_line.split(":::MLLOG ").nth(1).unwrap()).unwrap();
    let mut hostile = record.clone();
    hostile["value"] =
        Value::String("box\nfake (closed): 0.001 min, 5 of 5 runs counted\u{1b}[2J".into());
    let log = log.replace(
        &platform_line,
        &format!(":::MLLOG {}", serde_json::to_string(&hostile).unwrap()),
    );
    let folder = work
        .path()
        .join("runs\nfake2 (closed): 0.002 min\u{1b}]0;title\u{7}");
    std::fs::create_dir_all(&folder).unwrap();
    for i in 0..5 {
        std::fs::write(folder.join(format!("result_{i}.txt")), &log).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["mlperf", "score"])
        .arg(&folder)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains('\u{1b}') && !stdout.contains('\u{7}'),
        "{stdout:?}"
    );
    assert!(
        stdout.lines().all(|l| !l.starts_with("fake")),
        "a value printed a line of its own: {stdout}"
    );
    assert!(stdout.contains("box\\nfake"), "{stdout}");
}

/// Times and numbers no run can have are never scored: a run_stop before its run_start,
/// a time that is NaN or 1e308, an evaluation at a negative epoch. Each run is not
/// counted, with the reason, and five of them make no score.
#[test]
fn impossible_times_and_numbers_are_never_scored() {
    let dir = tempfile::tempdir().unwrap();
    let log = minimal();
    let stop_line = log.lines().find(|l| l.contains("\"run_stop\"")).unwrap();
    let eval_line = log
        .lines()
        .find(|l| l.contains("\"eval_accuracy\""))
        .unwrap();
    let cases = [
        (
            "backwards",
            log.replace(
                stop_line,
                &stop_line.replace("1700000817002", "1700000500000"),
            ),
            "before run_start: the times are impossible",
        ),
        (
            "nan",
            log.replace(stop_line, &stop_line.replace("1700000817002", "\"NaN\"")),
            "is no time",
        ),
        (
            "huge",
            log.replace(stop_line, &stop_line.replace("1700000817002", "1e308")),
            "is no time",
        ),
        (
            "negative-epoch",
            log.replace(
                eval_line,
                &eval_line.replace("\"epoch_num\": 1", "\"epoch_num\": -1"),
            ),
            "epoch_num -1",
        ),
    ];
    for (name, text, reason) in &cases {
        let folder = dir.path().join(name);
        std::fs::create_dir(&folder).unwrap();
        for i in 0..5 {
            std::fs::write(folder.join(format!("result_{i}.txt")), text).unwrap();
        }
        let (ok, json) = score_json(&[&folder]);
        assert!(!ok, "{name}: {json:#}");
        let system = &json["systems"][0];
        assert!(system["time_to_train_min"].is_null(), "{name}: {system:#}");
        assert_eq!(system["runs_counted"], 0, "{name}: {system:#}");
        for run in system["runs"].as_array().unwrap() {
            assert_eq!(run["converged"], false, "{name}");
            assert!(
                run["reason"].as_str().unwrap().contains(reason),
                "{name}: {run:#}"
            );
            assert!(
                run["time_to_train_min"].as_f64().is_none_or(|t| t >= 0.0),
                "{name}: {run:#}"
            );
        }
    }
}

/// A result file larger than any ResNet log is refused, naming the bound, before it is
/// read into memory.
#[test]
fn a_result_file_over_the_bound_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("result_0.txt");
    let file = std::fs::File::create(&huge).unwrap();
    file.set_len(257 << 20).unwrap();
    let error = score_error(&[&huge]);
    assert!(error.contains("256 MiB"), "{error}");
    assert!(error.contains("result_0.txt"), "{error}");
}
