//! The `external` suite: another framework's MLPerf benchmark (tinygrad's
//! `examples/mlperf/model_train.py`, a vendor container) run as a stage. The command
//! runs in its own process group; its MLLOG, on stdout or in a file it writes, is
//! followed while it runs (each epoch and evaluation is a progress event), copied to
//! the run's `mllog.txt`, and scored at the end as tinyperf's own runs are. Cancel and
//! the deadline send SIGTERM to the whole group, then SIGKILL after a grace period.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::stage::{StageContext, StageReport};
use crate::mlperf::log::{MlLogText, TOKEN};
use crate::mlperf::power_log::PowerLog;
use crate::mlperf::score::RunScore;
use crate::record::{Check, StageResult, Verdict};

/// The suite's and its one stage's name.
pub const NAME: &str = "external";
/// The option naming a benchmark configured in `tinyperf.toml`, kept in the record so a
/// run says which framework's benchmark it was.
pub const BENCHMARK: &str = "benchmark";
/// How long the group has between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(100);

/// The command's settings, from the suite's options.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExternalSpec {
    /// The program and its arguments (`sh -c LINE` when the option was one string).
    pub command: Vec<String>,
    /// Variables added to the command's environment, name and value.
    pub env: Vec<(String, String)>,
    /// The folder the command starts in; the worker's own when `None`.
    pub cwd: Option<PathBuf>,
    /// `None`: the MLLOG is on stdout; else the file the command writes it to.
    pub mllog_file: Option<PathBuf>,
    /// How long the command may run before it is stopped (SIGTERM, then SIGKILL); no limit
    /// when `None`.
    pub timeout: Option<Duration>,
}

/// Reads and checks the options: `command` (a list of words, or one string run by
/// `sh -c`), `env` (an object of strings), `cwd`, `mllog` (`stdout` or a path) and
/// `timeout_s`.
pub fn spec(options: &Map<String, Value>) -> Result<ExternalSpec, String> {
    for key in options.keys() {
        if ![
            "command",
            "env",
            "cwd",
            "mllog",
            "timeout_s",
            BENCHMARK,
            super::options::STAGE_TIMEOUT_S.key,
        ]
        .contains(&key.as_str())
        {
            return Err(format!(
                "suite external has no option {} (it takes: command, env, cwd, mllog, timeout_s, \
                 benchmark, stage_timeout_s)",
                crate::echo::quoted(key)
            ));
        }
    }
    let command = match options.get("command") {
        Some(Value::Array(words)) => words
            .iter()
            .map(|w| w.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("option command must be a list of strings")?,
        Some(Value::String(line)) if !line.trim().is_empty() => {
            vec!["sh".into(), "-c".into(), line.clone()]
        }
        Some(other) => {
            return Err(format!(
                "option command must be a list of strings, not {other}"
            ))
        }
        None => return Err("suite external needs the option command".into()),
    };
    if command.is_empty() || command[0].is_empty() {
        return Err("option command is empty".into());
    }
    let env = match options.get("env") {
        None => Vec::new(),
        Some(Value::Object(vars)) => vars
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect::<Option<Vec<_>>>()
            .ok_or("option env must map names to strings")?,
        Some(other) => return Err(format!("option env must be an object, not {other}")),
    };
    let text = |key: &str| -> Result<Option<String>, String> {
        match options.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(format!("option {key} must be text, not {other}")),
        }
    };
    let mllog_file = match text("mllog")?.as_deref() {
        None | Some("stdout") => None,
        Some(path) => Some(PathBuf::from(path)),
    };
    let timeout = match options.get("timeout_s") {
        None => None,
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s.is_finite() => Some(Duration::from_secs_f64(s)),
            _ => {
                return Err(format!(
                    "option timeout_s must be a positive number, not {v}"
                ))
            }
        },
    };
    Ok(ExternalSpec {
        command,
        env,
        cwd: text("cwd")?.map(PathBuf::from),
        mllog_file,
        timeout,
    })
}

/// Follows an MLLOG as it grows: lines from the command's stdout, or new bytes of the
/// file it writes.
enum Follow {
    Stdout(Receiver<String>),
    File {
        path: PathBuf,
        offset: u64,
        partial: String,
    },
}

impl Follow {
    fn new_lines(&mut self) -> Vec<String> {
        match self {
            Follow::Stdout(lines) => lines.try_iter().collect(),
            Follow::File {
                path,
                offset,
                partial,
            } => {
                let Ok(mut file) = File::open(&*path) else {
                    return Vec::new();
                };
                let mut bytes = Vec::new();
                if file.seek(SeekFrom::Start(*offset)).is_err()
                    || file.read_to_end(&mut bytes).is_err()
                {
                    return Vec::new();
                }
                *offset += bytes.len() as u64;
                partial.push_str(&String::from_utf8_lossy(&bytes));
                let mut lines: Vec<String> = partial.split('\n').map(str::to_string).collect();
                // The last piece has no newline yet: keep it for the next read.
                *partial = lines.pop().unwrap_or_default();
                lines
            }
        }
    }
}

/// What a followed line says about progress, as a message.
fn progress_of(line: &str) -> Option<String> {
    let log = MlLogText::parse(line);
    let entry = log.entries.first()?;
    let epoch = entry.meta("epoch_num").and_then(Value::as_f64);
    match (entry.key.as_str(), epoch) {
        ("epoch_stop", Some(e)) => Some(format!("epoch {e} done")),
        ("eval_accuracy", Some(e)) => Some(format!(
            "epoch {e} eval top-1 {}",
            entry
                .value
                .as_f64()
                .map_or("?".into(), |a| format!("{a:.4}"))
        )),
        ("tracked_stats", _) => entry
            .value
            .get("throughput")
            .and_then(Value::as_f64)
            .map(|t| format!("{t:.0} img/s")),
        ("run_start", _) => Some("the run's clock started".into()),
        ("run_stop", _) => Some("the run's clock stopped".into()),
        _ => None,
    }
}

fn signal_group(child: &Child, signal: nix::sys::signal::Signal) {
    let pgid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::killpg(pgid, signal);
}

/// SIGTERM to the group, SIGKILL after the grace period; waits for the leader.
fn stop_group(child: &mut Child) {
    use nix::sys::signal::Signal;
    signal_group(child, Signal::SIGTERM);
    let until = Instant::now() + GRACE;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            // The leader is gone; what it left in the group goes too.
            signal_group(child, Signal::SIGKILL);
            return;
        }
        std::thread::sleep(POLL);
    }
    signal_group(child, Signal::SIGKILL);
    let _ = child.wait();
}

/// Runs the stage: starts the command in its own process group, follows its MLLOG into the
/// run's `mllog.txt` (progress on each epoch and evaluation), and scores it: fails when the
/// command exits non-zero or the run does not converge; errors when no MLLOG line could be
/// read, the command could not start or hit its timeout; skips when cancelled. Needs a
/// recorded run (a run folder).
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut report = StageReport::new(NAME);
    let Some(spec) = ctx.plan.external.clone() else {
        return report.finish_as(
            Verdict::Error,
            Some("the run's plan has no external command".into()),
        );
    };
    let Some(run_dir) = ctx.run_dir.clone() else {
        return report.finish_as(
            Verdict::Error,
            Some("an external benchmark needs a recorded run (--state-dir or --run-dir)".into()),
        );
    };
    if let Err(e) = std::fs::create_dir_all(&run_dir) {
        return report.finish_as(Verdict::Error, Some(format!("{}: {e}", run_dir.display())));
    }
    let mllog_path = run_dir.join(crate::mlperf::package::MLLOG_FILE);
    let output_path = run_dir.join("external.log");
    let mut mllog_out = match File::create(&mllog_path) {
        Ok(f) => f,
        Err(e) => {
            return report.finish_as(
                Verdict::Error,
                Some(format!("{}: {e}", mllog_path.display())),
            )
        }
    };
    let mut output = File::create(&output_path).ok();
    let stderr = File::create(run_dir.join("external.stderr")).map_or(Stdio::null(), Stdio::from);
    let mut command = Command::new(&spec.command[0]);
    command
        .args(&spec.command[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(if spec.mllog_file.is_none() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(stderr)
        // Its own group, so cancel reaches every process it starts.
        .process_group(0);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    let power = PowerLog::prepare(&ctx.root, &run_dir.join(crate::mlperf::package::POWER_FILE));
    report.findings.extend(power.findings.iter().cloned());
    // The command's clock is its own: the measurement covers all of it.
    power.begin();
    let started = Instant::now();
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            return report.finish_as(
                Verdict::Error,
                Some(format!("cannot start {:?}: {e}", spec.command[0])),
            )
        }
    };
    report.findings.push(format!(
        "ran {:?} (process group {}); MLLOG copied to {}",
        spec.command,
        child.id(),
        mllog_path.display()
    ));
    let mut follow = match &spec.mllog_file {
        None => {
            let (tx, rx) = mpsc::channel();
            if let Some(stdout) = child.stdout.take() {
                std::thread::spawn(move || {
                    for line in BufReader::new(stdout).lines() {
                        let Ok(line) = line else { break };
                        if tx.send(line).is_err() {
                            break;
                        }
                    }
                });
            }
            Follow::Stdout(rx)
        }
        Some(path) => Follow::File {
            path: spec.cwd.as_ref().map_or(path.clone(), |cwd| cwd.join(path)),
            offset: 0,
            partial: String::new(),
        },
    };
    let mut copy_lines = |lines: Vec<String>, ctx: &mut StageContext<'_>| {
        for line in lines {
            if let Some(out) = output.as_mut() {
                let _ = writeln!(out, "{line}");
            }
            if line.contains(TOKEN) {
                let _ = writeln!(mllog_out, "{line}");
                if let Some(message) = progress_of(&line) {
                    ctx.progress(0.0, Some(message));
                }
            }
        }
    };
    let mut ending = None;
    let status = loop {
        copy_lines(follow.new_lines(), ctx);
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) => {}
            Err(e) => {
                ending = Some(format!("cannot wait for the command: {e}"));
                break None;
            }
        }
        if ctx.cancelled() {
            ending = Some("cancelled: the command's process group was stopped".into());
            stop_group(&mut child);
            break None;
        }
        if spec.timeout.is_some_and(|t| started.elapsed() > t) {
            ending = Some(format!(
                "the command ran past its {} s timeout and was stopped",
                spec.timeout.unwrap_or_default().as_secs_f64()
            ));
            stop_group(&mut child);
            break None;
        }
        std::thread::sleep(POLL);
    };
    // What the pipe or the file still held when the command ended.
    std::thread::sleep(POLL);
    copy_lines(follow.new_lines(), ctx);
    if status.is_some() {
        // A leader that exited may leave children in its group.
        signal_group(&child, nix::sys::signal::Signal::SIGKILL);
    }
    let _ = mllog_out.sync_data();
    let power = power.finish();
    report.metric("command_seconds", started.elapsed().as_secs_f64(), "s");
    let log = MlLogText::read(&mllog_path).unwrap_or_default();
    let images = log
        .first("train_samples")
        .and_then(|e| e.value.as_f64())
        .zip(
            log.with_key("epoch_stop")
                .filter_map(|e| e.meta("epoch_num").and_then(Value::as_f64))
                .reduce(f64::max),
        )
        .map_or(0.0, |(samples, epochs)| samples * epochs);
    super::training::record_energy(&mut report, power, &mllog_path, images);
    finish(report, &mllog_path, status, ending, ctx.cancelled())
}

fn finish(
    mut report: StageReport,
    mllog: &Path,
    status: Option<std::process::ExitStatus>,
    ending: Option<String>,
    cancelled: bool,
) -> StageResult {
    let log = MlLogText::read(mllog).unwrap_or_default();
    if cancelled {
        return report.finish_as(Verdict::Skip, ending);
    }
    if let Some(why) = ending {
        return report.finish_as(Verdict::Error, Some(why));
    }
    let exit = status.map(|s| s.to_string()).unwrap_or_default();
    if log.entries.is_empty() {
        let garbage = log.bad_lines.len();
        let why = if garbage > 0 {
            format!("the command ({exit}) wrote {garbage} MLLOG line(s), none readable")
        } else {
            format!("the command ({exit}) never wrote an MLLOG line")
        };
        return report.finish_as(Verdict::Error, Some(why));
    }
    let score = RunScore::of(NAME, &mllog.display().to_string(), &log);
    if let Some(t) = score.time_to_train_min {
        report.metric("time_to_train_min", t, "min");
    }
    if let Some(e) = score.epochs_to_converge {
        report.metric("epochs", e, "epochs");
    }
    if let Some(best) = score.evals.iter().map(|e| e.accuracy).reduce(f64::max) {
        report.metric("best_accuracy", best, "fraction");
    }
    if let Some(t) = score
        .epochs
        .iter()
        .filter_map(|e| e.images_per_s)
        .next_back()
    {
        report.metric("img_per_s", t, "img/s");
    }
    report.findings.extend(score.warnings.iter().cloned());
    let exited_ok = status.is_some_and(|s| s.success());
    report.checks.push(Check {
        name: "the command exits with status 0".into(),
        subject: None,
        expected: "0".into(),
        found: exit.clone(),
        verdict: Verdict::pass_if(exited_ok),
    });
    report.checks.push(Check {
        name: "the run converges (MLLOG, ruleset 4.0.0)".into(),
        subject: None,
        expected: "run_stop success, compliant".into(),
        found: score.reason.clone().unwrap_or_else(|| "converged".into()),
        verdict: Verdict::pass_if(score.converged),
    });
    let message = match (score.converged, score.time_to_train_min) {
        (true, Some(t)) => format!("converged in {t:.3} min"),
        _ => score.reason.unwrap_or_else(|| "did not converge".into()),
    };
    report.finish(Some(message))
}
