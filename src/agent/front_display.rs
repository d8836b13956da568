//! The tinybox's front display: the agent shows the state and the headline figure of
//! the current or last run on it.
//!
//! tinyos's display service listens on a Unix stream socket (`/run/tinybox-screen.sock`)
//! and reads one newline-terminated command per connection, `text,<line>,<line>…`
//! (commas part the lines it centres on the screen). The agent writes only when the
//! socket exists, from a task of its own, with a short bound on connecting and writing,
//! so a display that is missing, stuck or broken costs a log line, never the agent.
//!
//! On a tinybox OS image it also shows an OS update's download and, after the box went
//! back from a rejected version, which version and which check.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::broadcast::error::RecvError;
use tokio::time::{timeout, Instant};

use super::events::AgentEvent;
use super::handle::AgentHandle;
use super::status::{AgentState, StatusSnapshot};
use crate::record::RunBrief;
use crate::update::OsImage;

/// How long connecting to the display and writing one command may take.
const SEND_BOUND: Duration = Duration::from_secs(1);
/// The fewest seconds between two updates while a run goes (progress moves often).
const MIN_UPDATE_INTERVAL: Duration = Duration::from_secs(2);
/// Characters per line: the display's mono font fits about this many.
const MAX_LINE_CHARS: usize = 24;
/// Figures a run's headline is taken from, in order of preference.
const HEADLINE: &[&str] = &[
    "img_per_s",
    "estimated_time_to_train_min",
    "time_to_target_s",
    "busbw_gbps",
    "gflops_sustained",
];

/// Why a command did not reach the front display.
#[derive(Debug, thiserror::Error)]
pub enum DisplayError {
    /// The socket could not be connected to or written (no display service, a refused
    /// connection).
    #[error("{path}: {source}")]
    Io {
        /// The display's socket.
        path: PathBuf,
        /// What connecting or writing failed with.
        source: std::io::Error,
    },
    /// The display did not take the command within the bound.
    #[error("{path}: the display took longer than {bound:?}")]
    TimedOut {
        /// The display's socket.
        path: PathBuf,
        /// How long the send was allowed (`SEND_BOUND`, one second).
        bound: Duration,
    },
}

/// Follows the agent's events and keeps the display current, forever.
pub fn spawn(handle: AgentHandle, socket: PathBuf) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut events = handle.subscribe();
        let mut shown = String::new();
        let mut last_sent = Instant::now() - MIN_UPDATE_INTERVAL;
        let mut warned = false;
        // The last run is shown as soon as the agent starts.
        let mut first = true;
        // A change held back by the interval, to be shown once the interval is over even
        // when no later event comes (the last bytes of a download before a pause).
        let mut held_back = false;
        loop {
            let urgent = if std::mem::take(&mut first) {
                true
            } else {
                tokio::select! {
                    event = events.recv() => match event {
                        // A download's bytes move as often as a run's progress.
                        Ok(AgentEvent::UpdateChanged { state, .. }) => state != "downloading",
                        Ok(event) => !matches!(
                            event,
                            AgentEvent::Progress { .. }
                                | AgentEvent::Telemetry { .. }
                                | AgentEvent::Train { .. }
                        ),
                        Err(RecvError::Lagged(_)) => true,
                        Err(RecvError::Closed) => return,
                    },
                    _ = tokio::time::sleep_until(last_sent + MIN_UPDATE_INTERVAL), if held_back => true,
                }
            };
            if !urgent && last_sent.elapsed() < MIN_UPDATE_INTERVAL {
                held_back = true;
                continue;
            }
            held_back = false;
            if !socket.exists() {
                continue;
            }
            let image = handle.image().await;
            let command = command(&handle.status(), latest_rate(&handle), image.os.as_ref());
            if command == shown {
                continue;
            }
            match send(&socket, &command).await {
                Ok(()) => {
                    shown = command;
                    last_sent = Instant::now();
                    warned = false;
                }
                // One warning per failing spell, not one per event.
                Err(e) if !warned => {
                    tracing::warn!(error = %e, "cannot update the front display");
                    warned = true;
                }
                Err(e) => tracing::debug!(error = %e, "cannot update the front display"),
            }
        }
    })
}

/// Writes one command line to the display's socket, within [`SEND_BOUND`].
pub async fn send(socket: &Path, command: &str) -> Result<(), DisplayError> {
    let io = |source| DisplayError::Io {
        path: socket.to_path_buf(),
        source,
    };
    let attempt = async {
        let mut stream = UnixStream::connect(socket).await.map_err(io)?;
        stream
            .write_all(format!("{command}\n").as_bytes())
            .await
            .map_err(io)?;
        stream.shutdown().await.map_err(io)
    };
    timeout(SEND_BOUND, attempt)
        .await
        .map_err(|_| DisplayError::TimedOut {
            path: socket.to_path_buf(),
            bound: SEND_BOUND,
        })?
}

/// The training throughput of the run in progress, from its live figures.
fn latest_rate(handle: &AgentHandle) -> Option<f64> {
    handle.with_live(|live| {
        live.train
            .back()
            .filter(|_| live.running)
            .map(|p| p.images_per_s)
    })
}

/// What the display shows: a run in progress with its stage, progress and
/// throughput; else the last run's suite, state and headline figure, then an OS
/// update's download and the version the box last went back from, when there are.
pub fn command(status: &StatusSnapshot, rate: Option<f64>, image: Option<&OsImage>) -> String {
    let mut lines: Vec<String> = Vec::new();
    match (status.state, &status.current_suite) {
        (AgentState::Running, suite) => {
            lines.push(format!(
                "{} {:.0}%",
                suite.as_deref().unwrap_or("run").to_uppercase(),
                status.progress.clamp(0.0, 1.0) * 100.0
            ));
            if let Some(stage) = &status.current_stage {
                lines.push(stage.clone());
            }
            if let Some(rate) = rate.filter(|r| r.is_finite()) {
                lines.push(format!("{rate:.0} img/s"));
            }
        }
        (AgentState::Idle, _) => match &status.last_run {
            Some(last) => {
                lines.push(format!(
                    "{} {}",
                    last.suite.to_uppercase(),
                    last.state.as_str().to_uppercase()
                ));
                if let Some(figure) = headline(last) {
                    lines.push(figure);
                }
            }
            None => lines.push("TINYPERF IDLE".into()),
        },
    }
    if let (AgentState::Idle, Some(os)) = (status.state, image) {
        lines.extend(update_lines(os));
        lines.extend(rejection_lines(os));
    }
    let lines: Vec<String> = lines.iter().map(|l| clean(l)).collect();
    format!("text,{}", lines.join(","))
}

/// An OS update being downloaded: `OS UPDATE 42%` and its version.
fn update_lines(os: &OsImage) -> Vec<String> {
    let Some(update) = os.update.as_ref().filter(|u| u.state == "downloading") else {
        return Vec::new();
    };
    let done = if update.total_bytes > 0 {
        let ratio = update.done_bytes.min(update.total_bytes) as f64 / update.total_bytes as f64;
        format!("{:.0}%", (ratio * 100.0).floor())
    } else {
        format!("{} MiB", update.done_bytes >> 20)
    };
    let mut lines = vec![format!("OS UPDATE {done}")];
    if !update.version.is_empty() {
        lines.push(format!("v{}", update.version));
    }
    lines
}

/// After the box went back from a rejected version: `v20261207.0900 rejected:` and the
/// check that failed. Once the box runs another version than the one it went back
/// to, the rejection is history and no longer shown.
fn rejection_lines(os: &OsImage) -> Vec<String> {
    let Some(newest) = os.rejections.first() else {
        return Vec::new();
    };
    let went_back = newest.version != os.version
        && newest
            .previous_version
            .as_deref()
            .is_none_or(|previous| previous == os.version);
    if !went_back {
        return Vec::new();
    }
    let check = match newest.failed_checks.first() {
        Some(check) => check.name.clone(),
        None => {
            let prefix = format!("{} rejected: ", newest.version);
            newest
                .reason
                .strip_prefix(&prefix)
                .unwrap_or(&newest.reason)
                .to_string()
        }
    };
    vec![format!("v{} rejected:", newest.version), check]
}

/// The run's headline figure as a short line: `6350 img/s`.
fn headline(run: &RunBrief) -> Option<String> {
    let figure = HEADLINE
        .iter()
        .find_map(|name| run.figures.iter().find(|f| f.name == *name))
        .or_else(|| run.figures.first())?;
    let value = if figure.value.abs() >= 100.0 {
        format!("{:.0}", figure.value)
    } else {
        format!("{:.2}", figure.value)
    };
    Some(format!("{value} {}", figure.unit))
}

/// A line the protocol can carry: no comma (it parts lines), no control character
/// (a newline ends the command), and short enough for the screen.
fn clean(line: &str) -> String {
    line.chars()
        .map(|c| if c == ',' || c.is_control() { ' ' } else { c })
        .take(MAX_LINE_CHARS)
        .collect::<String>()
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Figure, RunState, Trigger};
    use chrono::Utc;
    use tokio::io::AsyncReadExt;
    use tokio::net::UnixListener;

    fn status(state: AgentState) -> StatusSnapshot {
        StatusSnapshot {
            state,
            current_run: None,
            current_suite: Some("smoke".into()),
            current_stage: Some("train, then\neval".into()),
            progress: 0.42,
            message: None,
            last_run: None,
            unsaved_runs: Vec::new(),
            sku: "tinybox-green".into(),
            version: "0".into(),
            agent_started_at: Utc::now(),
        }
    }

    #[test]
    fn the_command_names_the_run_and_its_headline() {
        assert_eq!(
            command(&status(AgentState::Running), Some(6350.4), None),
            "text,SMOKE 42%,train  then eval,6350 img/s"
        );
        let mut idle = status(AgentState::Idle);
        assert_eq!(command(&idle, None, None), "text,TINYPERF IDLE");
        idle.last_run = Some(RunBrief {
            id: "r".into(),
            suite: "acceptance".into(),
            state: RunState::Passed,
            verdict: None,
            trigger: Trigger::Boot,
            started_at: Utc::now(),
            finished_at: None,
            duration_s: None,
            message: None,
            stages: Vec::new(),
            figures: vec![
                Figure {
                    stage: "cpu-gemm".into(),
                    name: "gflops_sustained".into(),
                    value: 812.0,
                    unit: "GFLOP/s".into(),
                    subject: None,
                },
                Figure {
                    stage: "train-throughput".into(),
                    name: "img_per_s".into(),
                    value: 6351.2,
                    unit: "img/s".into(),
                    subject: None,
                },
            ],
            findings: Vec::new(),
        });
        assert_eq!(
            command(&idle, None, None),
            "text,ACCEPTANCE PASSED,6351 img/s"
        );
    }

    fn os_image(running: &str) -> OsImage {
        let root = tempfile::tempdir().unwrap();
        crate::update::fixture::image(
            root.path(),
            crate::update::fixture::ImageLayout {
                a: crate::update::fixture::SlotContent::Version(running),
                b: crate::update::fixture::SlotContent::Empty,
                booted: 'a',
                verity: true,
            },
        );
        crate::update::status::read(root.path(), Default::default())
            .os
            .unwrap()
    }

    #[test]
    fn after_a_rollback_the_rejected_version_and_its_check_are_shown_while_idle() {
        let mut os = os_image("20261206.0900");
        let idle = status(AgentState::Idle);
        assert_eq!(command(&idle, None, Some(&os)), "text,TINYPERF IDLE");
        os.rejections = vec![crate::update::status::Rejection {
            version: "20261207.0900".into(),
            at: Some(Utc::now()),
            reason: "20261207.0900 rejected: training img/s 4,410 vs 5,220 on 20261206.0900, 0.84 < 0.95".into(),
            previous_version: Some("20261206.0900".into()),
            failed_checks: vec![crate::update::gate::GateCheck {
                name: "training img/s".into(),
                expected: "≥ 0.95 × 5,220".into(),
                found: "4,410".into(),
                result: "fail".into(),
                ratio: Some(0.84),
                previous_value: Some(5220.0),
            }],
        }];
        assert_eq!(
            command(&idle, None, Some(&os)),
            "text,TINYPERF IDLE,v20261207.0900 rejected:,training img/s"
        );
        // A run in progress has the screen to itself.
        assert_eq!(
            command(&status(AgentState::Running), None, Some(&os)),
            "text,SMOKE 42%,train  then eval"
        );
        // Without the failed checks, the reason says what failed.
        os.rejections[0].failed_checks.clear();
        assert_eq!(
            command(&idle, None, Some(&os)),
            "text,TINYPERF IDLE,v20261207.0900 rejected:,training img/s 4 410 vs"
        );
        // Once the box moved on to a newer version, the rejection is history.
        let mut moved_on = os_image("20261208.0900");
        moved_on.rejections = os.rejections.clone();
        assert_eq!(command(&idle, None, Some(&moved_on)), "text,TINYPERF IDLE");
    }

    #[test]
    fn an_os_update_shows_its_download_percentage() {
        let mut os = os_image("20261206.0900");
        let mut update = crate::update::progress::UpdateProgress::idle();
        update.state = "downloading".into();
        update.version = "20261208.0900".into();
        update.done_bytes = 999;
        update.total_bytes = 1000;
        os.update = Some(update.clone());
        let idle = status(AgentState::Idle);
        assert_eq!(
            command(&idle, None, Some(&os)),
            "text,TINYPERF IDLE,OS UPDATE 99%,v20261208.0900"
        );
        update.total_bytes = 0;
        update.done_bytes = 300 << 20;
        os.update = Some(update.clone());
        assert_eq!(
            command(&idle, None, Some(&os)),
            "text,TINYPERF IDLE,OS UPDATE 300 MiB,v20261208.0900"
        );
        update.state = "written".into();
        os.update = Some(update);
        assert_eq!(command(&idle, None, Some(&os)), "text,TINYPERF IDLE");
    }

    #[tokio::test]
    async fn a_command_reaches_a_real_socket_as_one_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("screen.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let reader = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut text = String::new();
            stream.read_to_string(&mut text).await.unwrap();
            text
        });
        send(&path, "text,SMOKE 42%,train").await.unwrap();
        assert_eq!(reader.await.unwrap(), "text,SMOKE 42%,train\n");
    }

    #[tokio::test]
    async fn a_missing_or_broken_display_is_an_error_within_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let started = std::time::Instant::now();
        let missing = send(&dir.path().join("absent.sock"), "text,x").await;
        assert!(
            matches!(missing, Err(DisplayError::Io { .. })),
            "{missing:?}"
        );
        let file = dir.path().join("plain-file");
        std::fs::write(&file, b"").unwrap();
        assert!(send(&file, "text,x").await.is_err());
        // A socket bound but never listened on refuses the connection.
        let bound = dir.path().join("bound.sock");
        let _socket = std::os::unix::net::UnixDatagram::bind(&bound).unwrap();
        assert!(send(&bound, "text,x").await.is_err());
        assert!(started.elapsed() < SEND_BOUND * 3);
    }

    #[tokio::test]
    async fn a_display_that_never_reads_costs_at_most_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stuck.sock");
        // Listening with a backlog of one and never accepting: the first client fills
        // the queue, the next connects or waits, and none is ever read.
        let socket = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let started = std::time::Instant::now();
        let long = "x".repeat(4 << 20);
        let result = send(&path, &long).await;
        assert!(
            matches!(result, Err(DisplayError::TimedOut { .. })),
            "{result:?}"
        );
        assert!(started.elapsed() < SEND_BOUND * 3);
        drop(socket);
    }
}
