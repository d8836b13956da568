//! The MLPerf power log of one training run (`power.txt` in the run folder, packaged
//! as `power/result_N/node_0.txt`): `power_measurement_start` just before `run_start`,
//! a `power_reading` in watts every second from the machine's best source, a
//! `power_source` line saying what that source measures, and `power_measurement_stop`
//! just after `run_stop`. A thread takes the readings; the source is looked for on it
//! before the run's clock starts, so neither a slow BMC nor a slow library delays
//! training.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::engine::mllog::{encode_line, now_ms, Event, EventType, LogValue};
use crate::runtime::power::{PowerKind, PowerMeter};

/// The rules ask for at least one reading a second.
pub const READING_INTERVAL: Duration = Duration::from_secs(1);
/// How long looking for a source may take.
const DISCOVERY_WAIT: Duration = Duration::from_secs(15);
/// The one node a tinybox is.
pub const NODE: &str = "node_0";

/// What the log came to.
#[derive(Debug, Clone, PartialEq)]
pub struct PowerLogOutcome {
    /// The log written.
    pub path: PathBuf,
    /// What the readings are, in words.
    pub label: String,
    /// Whether they are wall power (through the BMC), as MLPerf power wants.
    pub wall: bool,
    /// Readings logged.
    pub readings: usize,
    /// Readings the source did not give (left out of the log).
    pub missed: usize,
}

enum Command {
    Begin,
    Finish(Sender<Result<PowerLogOutcome, String>>),
}

/// A power log being kept.
pub struct PowerLog {
    commands: Sender<Command>,
    thread: Option<JoinHandle<()>>,
    /// What was found while looking for a source.
    pub source: Result<String, String>,
    /// What was found about the source (missing sensors, a BMC that does not answer).
    pub findings: Vec<String>,
}

impl PowerLog {
    /// Looks for a power source under `root` and, when there is one, waits to log into
    /// `path`; `source` says which, or why there is none.
    pub fn prepare(root: &Path, path: &Path) -> PowerLog {
        PowerLog::prepare_from(root, path, true)
    }

    /// The same without NVML: only what the tree under `root` holds.
    pub fn prepare_sysfs(root: &Path, path: &Path) -> PowerLog {
        PowerLog::prepare_from(root, path, false)
    }

    fn prepare_from(root: &Path, path: &Path, nvml: bool) -> PowerLog {
        let (commands, receiver) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        let root = root.to_path_buf();
        let target = path.to_path_buf();
        let thread = std::thread::Builder::new()
            .name("power-log".into())
            .spawn(move || {
                let meter = if nvml {
                    PowerMeter::discover(&root)
                } else {
                    PowerMeter::discover_sysfs(&root)
                };
                match meter {
                    Ok(meter) => {
                        let _ =
                            ready_tx.send((Ok(meter.label().to_string()), meter.findings.clone()));
                        keep(meter, &target, &receiver);
                    }
                    Err(why) => {
                        let _ = ready_tx.send((Err(why), Vec::new()));
                    }
                }
            });
        let (source, findings, thread) = match thread {
            // A BMC that does not answer must not hold the run up.
            Ok(handle) => match ready.recv_timeout(DISCOVERY_WAIT) {
                Ok((source, findings)) => (source, findings, Some(handle)),
                Err(RecvTimeoutError::Timeout) => (
                    Err(format!(
                        "the power source did not answer within {} s",
                        DISCOVERY_WAIT.as_secs()
                    )),
                    Vec::new(),
                    None,
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    (Err("the power thread ended early".into()), Vec::new(), None)
                }
            },
            Err(e) => (
                Err(format!("cannot start the power thread: {e}")),
                Vec::new(),
                None,
            ),
        };
        PowerLog {
            commands,
            thread,
            source,
            findings,
        }
    }

    /// Starts the measurement: call just before `run_start`.
    pub fn begin(&self) {
        let _ = self.commands.send(Command::Begin);
    }

    /// Stops it (call just after `run_stop`) and says what was logged.
    pub fn finish(mut self) -> Result<PowerLogOutcome, String> {
        let why = match &self.source {
            Err(why) => why.clone(),
            Ok(_) => String::new(),
        };
        if self.source.is_err() {
            return Err(why);
        }
        let (reply, answer) = mpsc::channel();
        let _ = self.commands.send(Command::Finish(reply));
        let outcome = answer
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| Err("the power log did not finish in time".into()));
        if let Some(thread) = self.thread.take() {
            if outcome.is_ok() {
                let _ = thread.join();
            }
        }
        outcome
    }
}

fn line(
    key: &str,
    event_type: EventType,
    value: LogValue,
    extra: Vec<(String, LogValue)>,
) -> String {
    let mut metadata = vec![("host".to_string(), LogValue::from(NODE))];
    metadata.extend(extra);
    let mut text = encode_line(&Event {
        namespace: String::new(),
        time_ms: now_ms(),
        event_type,
        key: key.to_string(),
        value,
        metadata,
    });
    text.push('\n');
    text
}

fn keep(mut meter: PowerMeter, path: &Path, commands: &Receiver<Command>) {
    // Nothing is written until the clock is about to start.
    match commands.recv() {
        Ok(Command::Begin) => {}
        Ok(Command::Finish(reply)) => {
            let _ = reply.send(Err("the power measurement never began".into()));
            return;
        }
        Err(_) => return,
    }
    let mut file = match File::create(path) {
        Ok(f) => f,
        Err(e) => {
            if let Ok(Command::Finish(reply)) = commands.recv() {
                let _ = reply.send(Err(format!("cannot write {}: {e}", path.display())));
            }
            return;
        }
    };
    let wall = meter.kind() == PowerKind::Wall;
    let mut write_failed = None;
    let mut write = |file: &mut File, text: String| {
        if let Err(e) = file.write_all(text.as_bytes()) {
            write_failed.get_or_insert(format!("cannot write {}: {e}", path.display()));
        }
    };
    write(
        &mut file,
        line(
            "power_measurement_start",
            EventType::IntervalStart,
            LogValue::Null,
            Vec::new(),
        ),
    );
    write(
        &mut file,
        line(
            "power_source",
            EventType::PointInTime,
            meter.label().into(),
            vec![("wall_power".into(), wall.into())],
        ),
    );
    let (mut readings, mut missed) = (0, 0);
    let mut take = |meter: &mut PowerMeter, file: &mut File| match meter.read() {
        Some(watts) if watts.is_finite() && watts >= 0.0 => {
            readings += 1;
            write(
                file,
                line(
                    "power_reading",
                    EventType::PointInTime,
                    watts.into(),
                    Vec::new(),
                ),
            );
        }
        _ => missed += 1,
    };
    let reply = loop {
        match commands.recv_timeout(READING_INTERVAL) {
            Err(RecvTimeoutError::Timeout) => take(&mut meter, &mut file),
            Ok(Command::Begin) => {}
            Ok(Command::Finish(reply)) => {
                take(&mut meter, &mut file);
                break Some(reply);
            }
            Err(RecvTimeoutError::Disconnected) => break None,
        }
    };
    let mut write = |file: &mut File, text: String| {
        if let Err(e) = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
        {
            write_failed.get_or_insert(format!("cannot write {}: {e}", path.display()));
        }
    };
    write(
        &mut file,
        line(
            "power_measurement_stop",
            EventType::IntervalEnd,
            LogValue::Null,
            Vec::new(),
        ),
    );
    if let Some(reply) = reply {
        let _ = reply.send(match write_failed {
            Some(e) => Err(e),
            None => Ok(PowerLogOutcome {
                path: path.to_path_buf(),
                label: meter.label().to_string(),
                wall,
                readings,
                missed,
            }),
        });
    }
}
