//! The worker subprocess: `tinyperf run --events jsonl …`, its events read line by line,
//! cancelled with SIGTERM and then SIGKILL after a grace period; whatever it leaves
//! running is killed when it ends: its cgroup as a whole, or where the agent has none
//! to give it, its session.

use std::ffi::OsString;
use std::fs::File;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command as ProcessCommand;
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};
use tracing::{debug, warn};

use super::cgroup::RunCgroup;
use super::messages::{Command, WorkerMessage};
use crate::suite::event::WorkerEvent;

/// How to start a worker.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    /// The executable to run: the `tinyperf` binary.
    pub exe: PathBuf,
    /// Its arguments: `run --events jsonl --run-dir … --plan-json …`.
    pub args: Vec<OsString>,
    /// The run's folder in the store, where the worker writes its files.
    pub run_dir: PathBuf,
    /// How long the worker has between SIGTERM and SIGKILL when cancelled.
    pub grace: Duration,
}

/// The supervisor's hold on a running worker.
pub struct WorkerControl {
    cancel: Option<oneshot::Sender<()>>,
}

impl WorkerControl {
    /// Asks the worker to stop: SIGTERM now, SIGKILL after the grace period.
    pub fn cancel(&mut self) {
        if let Some(tx) = self.cancel.take() {
            let _ = tx.send(());
        }
    }
}

/// Starts the worker for `run_id`; its events and its exit arrive on `commands`.
pub fn spawn(
    run_id: &str,
    spec: &WorkerSpec,
    log: File,
    cgroup: Option<RunCgroup>,
    commands: mpsc::Sender<Command>,
) -> std::io::Result<WorkerControl> {
    let mut command = ProcessCommand::new(&spec.exe);
    command
        .args(&spec.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log));
    let procs_fd = cgroup.as_ref().and_then(RunCgroup::procs_fd);
    // SAFETY: write, setsid and prctl are async-signal-safe and touch no memory of the
    // parent; the descriptor stays open until the spawn returns.
    unsafe {
        command.pre_exec(move || {
            if let Some(fd) = procs_fd {
                // Into the run's group before exec, so nothing it starts is ever outside.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // A session of its own (and so a process group whose id is its pid): what
            // it starts in groups of their own can still be found once it is gone.
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            // The worker must not outlive an agent killed with SIGKILL.
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
        });
    }
    let mut child = command.spawn()?;
    let pid = child.id().map(|p| Pid::from_raw(p as i32));
    let stdout = child.stdout.take();
    let (cancel_tx, cancel_rx) = oneshot::channel();
    let run_id = run_id.to_string();
    let grace = spec.grace;
    tokio::spawn(async move {
        let mut lines = stdout.map(|s| BufReader::new(s).lines());
        let mut cancel_rx = Some(cancel_rx);
        let mut kill_at: Option<Instant> = None;
        let status: std::io::Result<ExitStatus> = loop {
            tokio::select! {
                line = next_line(&mut lines) => match line {
                    Some(line) => forward(&run_id, &line, &commands).await,
                    None => lines = None,
                },
                _ = wait_cancel(&mut cancel_rx) => {
                    cancel_rx = None;
                    signal(pid, Signal::SIGTERM);
                    // A stopped worker acts on SIGTERM only once it runs again.
                    signal(pid, Signal::SIGCONT);
                    kill_at = Some(Instant::now() + grace);
                }
                _ = sleep_until(kill_at.unwrap_or_else(Instant::now)), if kill_at.is_some() => {
                    warn!(run = %run_id, "worker ignored SIGTERM; sending SIGKILL");
                    signal(pid, Signal::SIGKILL);
                    kill_at = None;
                }
                status = child.wait(), if lines.is_none() => break status,
            }
        };
        // Anything left in the worker's process group, or elsewhere in its cgroup or
        // session (an external benchmark's), goes with it.
        signal(pid, Signal::SIGKILL);
        let session = pid.map(Pid::as_raw);
        let left = tokio::task::spawn_blocking(move || kill_leftovers(cgroup, session))
            .await
            .unwrap_or(0);
        if left > 0 {
            warn!(run = %run_id, processes = left, "killed what the worker left running");
        }
        let (outcome, own_status) = match status {
            Ok(s) => (describe(s), is_own_status(s)),
            Err(e) => (format!("cannot wait for the worker: {e}"), false),
        };
        debug!(run = %run_id, %outcome, "worker exited");
        let _ = commands
            .send(Command::Worker(WorkerMessage::Exited {
                run_id,
                outcome,
                own_status,
            }))
            .await;
    });
    Ok(WorkerControl {
        cancel: Some(cancel_tx),
    })
}

/// Kills what is left of a worker that has ended: its cgroup, or its session where it
/// has no cgroup (or the group cannot be removed); returns how many processes were left.
fn kill_leftovers(cgroup: Option<RunCgroup>, session: Option<i32>) -> usize {
    if let Some(cgroup) = cgroup {
        match cgroup.kill() {
            Ok(left) => return left,
            Err(e) => warn!(error = %e, "cannot end the run's cgroup; killing its session instead"),
        }
    }
    session.map_or(0, super::session::kill_session)
}

async fn next_line(
    lines: &mut Option<tokio::io::Lines<BufReader<tokio::process::ChildStdout>>>,
) -> Option<String> {
    match lines {
        Some(l) => match l.next_line().await {
            Ok(line) => line,
            Err(e) => {
                warn!(error = %e, "cannot read the worker's events");
                None
            }
        },
        None => std::future::pending().await,
    }
}

async fn wait_cancel(rx: &mut Option<oneshot::Receiver<()>>) {
    match rx {
        Some(r) => {
            if r.await.is_err() {
                // The supervisor dropped its control without cancelling: nothing to do.
                std::future::pending::<()>().await
            }
        }
        None => std::future::pending().await,
    }
}

async fn forward(run_id: &str, line: &str, commands: &mpsc::Sender<Command>) {
    match WorkerEvent::parse_line(line) {
        None => {}
        Some(Ok(event)) => {
            let _ = commands
                .send(Command::Worker(WorkerMessage::Event {
                    run_id: run_id.to_string(),
                    event,
                }))
                .await;
        }
        Some(Err(e)) => {
            warn!(run = %run_id, error = %e, "worker printed a line that is not an event")
        }
    }
}

fn signal(pid: Option<Pid>, sig: Signal) {
    if let Some(pid) = pid {
        // ESRCH just means the group is already gone.
        let _ = killpg(pid, sig);
    }
}

/// Whether the worker ended by itself with one of the statuses a run gives it (0 passed,
/// 1 failed or cancelled, 3 could not run), rather than by a signal or a crash.
fn is_own_status(status: ExitStatus) -> bool {
    matches!(status.code(), Some(0 | 1 | 3))
}

fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {sig}"),
        },
        (None, None) => "exited".to_string(),
    }
}
