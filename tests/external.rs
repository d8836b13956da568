//! The `external` suite through the real `tinyperf run`: a small script that writes a
//! realistic MLLOG over a couple of seconds (on stdout, or into a file), followed live
//! and scored; cancel stopping the script and its children; and every way a command
//! can go wrong.

mod common;

use std::fs;
use std::io::{BufRead, BufReader, Lines};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::runs::{ipmitool_stand_in, only_run, output_text, run_dirs, stage_metric};

fn minimal_log() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mlperf/minimal_resnet_pass.log")
}

/// A benchmark stand-in: prints each line of the minimal passing MLLOG with noise
/// between them, a little at a time.
fn script(dir: &Path, to_file: bool) -> PathBuf {
    let path = dir.join("bench.sh");
    let sink = if to_file { " >> result.txt" } else { "" };
    fs::write(
        &path,
        format!(
            "#!/bin/sh\necho starting benchmark\nwhile IFS= read -r line; do\n  echo \"$line\"{sink}\n  echo \"step loss 1.23\"\n  sleep 0.05\ndone < '{}'\n",
            minimal_log().display()
        ),
    )
    .unwrap();
    path
}

fn run(state: &Path, options: &[String]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tinyperf"));
    // Wall power from the ipmitool stand-in (a script answering as a BMC would).
    cmd.env("TINYPERF_IPMITOOL", ipmitool_stand_in());
    cmd.args(["run", "external", "--events", "jsonl", "--state-dir"])
        .arg(state);
    for o in options {
        cmd.arg("-o").arg(o);
    }
    cmd.output().expect("run tinyperf")
}

#[test]
fn a_benchmark_on_stdout_is_followed_live_and_scored() {
    let work = tempfile::tempdir().unwrap();
    let bench = script(work.path(), false);
    let state = work.path().join("state");
    let out = run(
        &state,
        &[format!("command=[\"sh\", \"{}\"]", bench.display())],
    );
    let events = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{events}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Progress came while it ran, from the MLLOG lines.
    assert!(events.contains("epoch 1 done"), "{events}");
    assert!(events.contains("eval top-1 0.7595"), "{events}");
    let (dir, record) = only_run(&state);
    assert_eq!(record["state"], "passed", "{record:#}");
    let minutes = stage_metric(&record["stages"][0], "time_to_train_min").unwrap();
    assert!((minutes - 217001.0 / 60000.0).abs() < 1e-9);
    // Measured at the wall through the stand-in's 400 W while the command ran.
    assert!(fs::read_to_string(dir.join("power.txt"))
        .unwrap()
        .contains("power_reading"));
    assert!(
        stage_metric(&record["stages"][0], "mlperf_energy_j").unwrap() > 0.0,
        "{record:#}"
    );
    // The run's MLLOG holds the MLLOG lines, the output log everything.
    let mllog = fs::read_to_string(dir.join("mllog.txt")).unwrap();
    assert_eq!(mllog.lines().count(), 29);
    assert!(fs::read_to_string(dir.join("external.log"))
        .unwrap()
        .contains("step loss"));
}

#[test]
fn a_benchmark_writing_its_own_file_is_followed_too() {
    let work = tempfile::tempdir().unwrap();
    let bench = script(work.path(), true);
    let state = work.path().join("state");
    let out = run(
        &state,
        &[
            format!("command=[\"sh\", \"{}\"]", bench.display()),
            format!("cwd={}", work.path().display()),
            "mllog=result.txt".into(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (dir, record) = only_run(&state);
    assert_eq!(record["state"], "passed");
    assert_eq!(
        fs::read_to_string(dir.join("mllog.txt"))
            .unwrap()
            .lines()
            .count(),
        29
    );
    // The command's own output is kept beside the MLLOG it wrote to its file.
    let output = fs::read_to_string(dir.join("external.log")).unwrap();
    assert!(output.contains("starting benchmark"), "{output}");
    assert_eq!(output.matches("step loss").count(), 29, "{output}");
}

/// A benchmark that appends to a seed-named file, as tinygrad's `result_<SEED>.txt`:
/// a second run with the same seed records only its own lines, and says the file held
/// earlier ones.
#[test]
fn a_second_run_appending_to_the_same_file_records_only_its_own_lines() {
    let work = tempfile::tempdir().unwrap();
    let bench = script(work.path(), true);
    let state = work.path().join("state");
    let options = [
        format!("command=[\"sh\", \"{}\"]", bench.display()),
        format!("cwd={}", work.path().display()),
        "mllog=result.txt".into(),
    ];
    for round in 1..=2 {
        let out = run(&state, &options);
        assert!(out.status.success(), "round {round}: {}", output_text(&out));
    }
    assert_eq!(
        fs::read_to_string(work.path().join("result.txt"))
            .unwrap()
            .lines()
            .count(),
        58
    );
    let dirs = run_dirs(&state);
    assert_eq!(dirs.len(), 2);
    for dir in &dirs {
        let record: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join("run.json")).unwrap()).unwrap();
        assert_eq!(record["state"], "passed", "{record:#}");
        let mllog = fs::read_to_string(dir.join("mllog.txt")).unwrap();
        assert_eq!(mllog.lines().count(), 29, "{}", dir.display());
        assert_eq!(mllog.matches("\"run_start\"").count(), 1);
        let findings = record["stages"][0]["findings"].to_string();
        assert!(!findings.contains("appears 2 times"), "{findings}");
    }
    let second: serde_json::Value =
        serde_json::from_slice(&fs::read(dirs[1].join("run.json")).unwrap()).unwrap();
    assert!(
        second["stages"][0]["findings"]
            .to_string()
            .contains("already held"),
        "{second:#}"
    );
}

/// A log with a repeated key warns once for it, and no finding is written twice.
#[test]
fn each_warning_is_one_finding() {
    let work = tempfile::tempdir().unwrap();
    let log = fs::read_to_string(minimal_log()).unwrap();
    let run_start = log.lines().find(|l| l.contains("\"run_start\"")).unwrap();
    let doubled = work.path().join("doubled.log");
    fs::write(
        &doubled,
        log.replace(run_start, &format!("{run_start}\n{run_start}")),
    )
    .unwrap();
    let state = work.path().join("state");
    let out = run(&state, &[format!("command=cat '{}'", doubled.display())]);
    assert!(out.status.success(), "{}", output_text(&out));
    let (_, record) = only_run(&state);
    let findings: Vec<&str> = record["stages"][0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    let mut unique = findings.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), findings.len(), "{findings:#?}");
    assert_eq!(
        findings.iter().filter(|f| f.contains("run_start")).count(),
        1,
        "{findings:#?}"
    );
}

/// `tinyperf run external` of the shell line `line`, once the line's MLLOG says the
/// run's clock started.
fn start_until_the_clock_runs(state: &Path, line: &str) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tinyperf"))
        .args(["run", "external", "--events", "jsonl", "--state-dir"])
        .arg(state)
        .arg("-o")
        .arg(format!("command={line}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    for line in lines.by_ref() {
        if line.unwrap().contains("clock started") || Instant::now() > deadline {
            break;
        }
    }
    (child, lines)
}

/// Cancels the run as Ctrl-C at a terminal would (SIGTERM to tinyperf), reads its
/// events to their end and waits for it.
fn cancel((mut child, lines): (Child, Lines<BufReader<ChildStdout>>)) -> std::process::ExitStatus {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let _ = lines.count();
    child.wait().unwrap()
}

fn process_alive(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // A zombie nobody reaped is not running.
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

#[test]
fn cancel_stops_the_command_and_its_children() {
    let work = tempfile::tempdir().unwrap();
    let pid_file = work.path().join("child.pid");
    let line = format!(
        "sleep 300 & echo $! > '{}'; echo ':::MLLOG {{\"time_ms\": 1, \"key\": \"run_start\", \"value\": null, \"metadata\": {{}}}}'; wait",
        pid_file.display()
    );
    let state = work.path().join("state");
    let run = start_until_the_clock_runs(&state, &line);
    let grandchild: u32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(process_alive(grandchild));
    let status = cancel(run);
    assert!(!status.success());
    let (_, record) = only_run(&state);
    assert_eq!(record["state"], "cancelled", "{record:#}");
    let gone = Instant::now() + Duration::from_secs(10);
    while process_alive(grandchild) && Instant::now() < gone {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        !process_alive(grandchild),
        "the command's child {grandchild} outlived the cancel"
    );
}

/// A cancelled benchmark gets SIGINT first (a Python benchmark cleans up on it), and
/// the shared memory and semaphores its processes held and left in /dev/shm are removed
/// and named; what was there before the run stays.
#[test]
fn cancel_interrupts_first_and_leaves_dev_shm_clean() {
    let work = tempfile::tempdir().unwrap();
    let tag = format!(
        "tinyperf-test-{}-{}",
        std::process::id(),
        work.path().file_name().unwrap().to_string_lossy()
    );
    let shm = Path::new("/dev/shm");
    let before = shm.join(format!("{tag}-before"));
    fs::write(&before, b"not the run's").unwrap();
    let marker = work.path().join("interrupted");
    let line = format!(
        "trap 'echo INT > \"{marker}\"; exit 130' INT; \
         exec 3>/dev/shm/{tag}-resnet_0 4>/dev/shm/sem.{tag}; head -c 65536 /dev/zero >&3; \
         echo ':::MLLOG {{\"time_ms\": 1, \"key\": \"run_start\", \"value\": null, \"metadata\": {{}}}}'; \
         sleep 300 & wait",
        marker = marker.display()
    );
    let state = work.path().join("state");
    let run = start_until_the_clock_runs(&state, &line);
    assert!(shm.join(format!("{tag}-resnet_0")).exists());
    cancel(run);
    let (_, record) = only_run(&state);
    assert_eq!(record["state"], "cancelled", "{record:#}");
    assert_eq!(
        fs::read_to_string(&marker).unwrap_or_default().trim(),
        "INT"
    );
    for left in [format!("{tag}-resnet_0"), format!("sem.{tag}")] {
        assert!(!shm.join(&left).exists(), "{left} left in /dev/shm");
        assert!(
            record["stages"][0]["findings"].to_string().contains(&left),
            "{left} not named: {record:#}"
        );
    }
    assert!(before.exists(), "what was there before the run was removed");
    fs::remove_file(before).unwrap();
}

#[test]
fn commands_that_go_wrong_get_a_recorded_outcome() {
    // (option, the stage's verdict, what the record says)
    let cases: [(&str, &str, &str); 6] = [
        (
            "command=[\"/nonexistent/benchmark\"]",
            "error",
            "cannot start",
        ),
        (
            "command=echo no mllog here",
            "error",
            "never wrote an MLLOG line",
        ),
        ("command=echo ':::MLLOG {garbage'", "error", "none readable"),
        ("command=cat '{log}'; exit 3", "fail", "exit status: 3"),
        // A benchmark that stops before its target logs no run_stop.
        ("command=head -n 28 '{log}'", "fail", "no run_stop"),
        ("command=sleep 30", "error", "timeout"),
    ];
    for (option, verdict, says) in cases {
        let work = tempfile::tempdir().unwrap();
        let state = work.path().join("state");
        let option = option.replace("{log}", &minimal_log().display().to_string());
        let started = Instant::now();
        let out = run(&state, &[option.clone(), "timeout_s=1".into()]);
        assert!(!out.status.success(), "{option}");
        assert!(started.elapsed() < Duration::from_secs(20), "{option}");
        let (_, record) = only_run(&state);
        assert_eq!(record["state"], "failed", "{option}: {record:#}");
        assert_eq!(
            record["stages"][0]["verdict"], verdict,
            "{option}: {record:#}"
        );
        assert!(record.to_string().contains(says), "{option}: {record:#}");
        // The run's summary, and so its brief, says why.
        let message = record["summary"]["message"].as_str().unwrap_or_default();
        assert!(
            message.starts_with("stage external") && message.contains(says),
            "{option}: {message:?}"
        );
    }
    // Options the suite does not take are usage errors, before anything runs.
    let work = tempfile::tempdir().unwrap();
    let out = run(&work.path().join("state"), &["comand=true".into()]);
    assert_eq!(out.status.code(), Some(2));
}
