//! The `external` suite: another framework's MLPerf benchmark (tinygrad's
//! `examples/mlperf/model_train.py`, a vendor container) run as a stage. The command
//! runs in its own process group; its MLLOG, on stdout or in a file it appends to, is
//! followed while it runs (each epoch and evaluation is progress on every surface),
//! copied to the run's `mllog.txt` with all its output in `external.log`, and scored at
//! the end as tinyperf's own runs are. However the run ends, the group is stopped
//! (SIGINT, SIGTERM, then SIGKILL) and the shared memory it left is removed.

mod follow;
mod group;
mod progress;
mod shm;
mod spec;

pub use spec::{spec, ExternalSpec};

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

use self::follow::{FileFollower, Stream};
use self::progress::{MllogProgress, Update};
use self::shm::ShmSweep;
use super::event::WorkerEvent;
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
/// The run's file holding everything the command wrote on stdout and stderr.
pub const OUTPUT_FILE: &str = "external.log";
const POLL: Duration = Duration::from_millis(100);
/// How often the shared memory the command's processes hold is looked at.
const SHM_LOOK: Duration = Duration::from_secs(1);
/// How long the output of a stopped command may take to drain.
const DRAIN: Duration = Duration::from_secs(1);

/// What the command writes, followed into the run's files and its progress.
struct Following {
    mllog: File,
    output_log: Option<File>,
    /// Lines of the command's stdout and stderr, from their reader threads.
    output: mpsc::Receiver<(Stream, String)>,
    /// The MLLOG file it appends to; `None` when its MLLOG is on stdout.
    file: Option<FileFollower>,
    progress: MllogProgress,
    started: Instant,
}

impl Following {
    /// Takes what the command has written, waiting up to `wait` for its streams to end.
    fn take(&mut self, wait: Duration, ctx: &mut StageContext<'_>) {
        let until = Instant::now() + wait;
        loop {
            let next = match until.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => self.output.recv_timeout(left).ok(),
                _ => self.output.try_recv().ok(),
            };
            let Some((stream, line)) = next else { break };
            if let Some(out) = self.output_log.as_mut() {
                let _ = writeln!(out, "{line}");
            }
            if self.file.is_none() && stream == Stream::Stdout {
                self.mllog_line(&line, ctx);
            }
        }
        let lines = self.file.as_mut().map(FileFollower::new_lines);
        for line in lines.into_iter().flatten() {
            self.mllog_line(&line, ctx);
        }
    }

    /// Takes what is left once the command has ended, a last line without its newline
    /// included, and the last epoch's figures.
    fn take_rest(&mut self, ctx: &mut StageContext<'_>) {
        self.take(DRAIN, ctx);
        let rest = self.file.as_mut().and_then(FileFollower::rest);
        for line in rest.iter().flat_map(|text| text.lines()) {
            self.mllog_line(line, ctx);
        }
        publish(self.progress.finish(), ctx);
        let _ = self.mllog.sync_data();
    }

    /// Copies an MLLOG line to the run's MLLOG and reports what it says about progress.
    fn mllog_line(&mut self, line: &str, ctx: &mut StageContext<'_>) {
        if !line.contains(TOKEN) {
            return;
        }
        let _ = writeln!(self.mllog, "{line}");
        let elapsed = self.started.elapsed().as_secs_f64();
        publish(self.progress.line(line, elapsed), ctx);
    }
}

fn publish(updates: Vec<Update>, ctx: &mut StageContext<'_>) {
    for update in updates {
        match update {
            Update::Progress { fraction, message } => ctx.progress(fraction, Some(message)),
            Update::Epoch(point) => (ctx.emit)(WorkerEvent::Train { point }),
        }
    }
}

/// The findings of a shared-memory sweep, one per entry.
fn leftover_findings(leftovers: Vec<shm::Leftover>) -> impl Iterator<Item = String> {
    leftovers.into_iter().map(|left| match left.error {
        None => format!(
            "removed shared memory the run left: {} ({} bytes)",
            left.path.display(),
            left.bytes
        ),
        Some(e) => format!(
            "cannot remove shared memory the run left: {}: {e}",
            left.path.display()
        ),
    })
}

/// Runs the stage: starts the command in its own process group, follows its MLLOG into the
/// run's `mllog.txt` (progress on each epoch and evaluation), and scores it: fails when the
/// command exits non-zero or the run does not converge; errors when no MLLOG line could be
/// read, the command could not start or hit its timeout; skips when cancelled. Needs a
/// recorded run (a run folder).
pub fn run(ctx: &mut StageContext<'_>) -> StageResult {
    let mut stage_report = StageReport::new(NAME);
    let Some(spec) = ctx.plan.external.clone() else {
        return stage_report.finish_as(
            Verdict::Error,
            Some("the run's plan has no external command".into()),
        );
    };
    let Some(run_dir) = ctx.run_dir.clone() else {
        return stage_report.finish_as(
            Verdict::Error,
            Some("an external benchmark needs a recorded run (--state-dir or --run-dir)".into()),
        );
    };
    if let Err(e) = std::fs::create_dir_all(&run_dir) {
        return stage_report.finish_as(Verdict::Error, Some(format!("{}: {e}", run_dir.display())));
    }
    let mllog_path = run_dir.join(crate::mlperf::package::MLLOG_FILE);
    let mllog = match File::create(&mllog_path) {
        Ok(f) => f,
        Err(e) => {
            return stage_report.finish_as(
                Verdict::Error,
                Some(format!("{}: {e}", mllog_path.display())),
            )
        }
    };
    let mut command = Command::new(&spec.command[0]);
    command
        .args(&spec.command[1..])
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    group::own_group(&mut command);
    if let Some(cwd) = &spec.cwd {
        command.current_dir(cwd);
    }
    let file_follow = spec.mllog_file.as_ref().map(|path| {
        FileFollower::from_end(&spec.cwd.as_ref().map_or(path.clone(), |cwd| cwd.join(path)))
    });
    if let Some(follow) = file_follow.as_ref().filter(|f| f.skipped_bytes > 0) {
        stage_report.findings.push(format!(
            "{} already held {} bytes from earlier runs; only what this run appends is read",
            follow.path().display(),
            follow.skipped_bytes
        ));
    }
    let mut shared_memory = ShmSweep::start(Path::new(shm::SHM_DIR));
    let power = PowerLog::prepare(&ctx.root, &run_dir.join(crate::mlperf::package::POWER_FILE));
    stage_report.findings.extend(power.findings.iter().cloned());
    // The command's clock is its own: the measurement covers all of it.
    power.begin();
    let started = Instant::now();
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            return stage_report.finish_as(
                Verdict::Error,
                Some(format!("cannot start {:?}: {e}", spec.command[0])),
            )
        }
    };
    stage_report.findings.push(format!(
        "ran {:?} (process group {}); MLLOG copied to {}, its output to {OUTPUT_FILE}",
        spec.command,
        child.id(),
        mllog_path.display()
    ));
    let (tx, output) = mpsc::channel();
    if let Some(stdout) = child.stdout.take() {
        let tx = tx.clone();
        std::thread::spawn(move || follow::forward_lines(stdout, Stream::Stdout, false, tx));
    }
    if let Some(stderr) = child.stderr.take() {
        let tx = tx.clone();
        std::thread::spawn(move || follow::forward_lines(stderr, Stream::Stderr, true, tx));
    }
    drop(tx);
    let mut following = Following {
        mllog,
        output_log: File::create(run_dir.join(OUTPUT_FILE)).ok(),
        output,
        file: file_follow,
        progress: MllogProgress::new(NAME, spec.epochs),
        started,
    };
    let pgid = child.id() as i32;
    let mut last_look = Instant::now();
    let mut ending = None;
    let status = loop {
        if last_look.elapsed() >= SHM_LOOK {
            shared_memory.observe(pgid);
            last_look = Instant::now();
        }
        following.take(Duration::ZERO, ctx);
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
            break None;
        }
        if let Some(limit) = spec.timeout.filter(|t| started.elapsed() > *t) {
            ending = Some(format!(
                "the command ran past its {} s timeout and was stopped",
                limit.as_secs_f64()
            ));
            break None;
        }
        std::thread::sleep(POLL);
    };
    // What it holds as it is stopped; what it made and let go of before is seen earlier.
    shared_memory.observe(pgid);
    // However it ended, nothing of the group outlives the stage.
    if let Some(signal) = group::stop(&mut child) {
        stage_report.findings.push(match status {
            Some(_) => {
                format!("the command exited but left processes in its group; {signal} stopped them")
            }
            None => format!("the command's process group was stopped with {signal}"),
        });
    }
    // What the pipes and the file still held when the command ended.
    following.take_rest(ctx);
    stage_report
        .findings
        .extend(leftover_findings(shared_memory.sweep()));
    let power = power.finish();
    stage_report.metric("command_seconds", started.elapsed().as_secs_f64(), "s");
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
    super::training::record_energy(&mut stage_report, power, &mllog_path, images);
    finish(
        stage_report,
        &mllog_path,
        &log,
        status,
        ending,
        ctx.cancelled(),
    )
}

fn finish(
    mut report: StageReport,
    mllog: &Path,
    log: &MlLogText,
    status: Option<std::process::ExitStatus>,
    ending: Option<String>,
    cancelled: bool,
) -> StageResult {
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
    let score = RunScore::of(NAME, &mllog.display().to_string(), log);
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
    let outcome = match (score.converged, score.time_to_train_min) {
        (true, Some(t)) => format!("converged in {t:.3} min"),
        _ => score.reason.unwrap_or_else(|| "did not converge".into()),
    };
    let message = if exited_ok {
        outcome
    } else {
        format!("the command failed ({exit}); its MLLOG: {outcome}")
    };
    report.finish(Some(message))
}
