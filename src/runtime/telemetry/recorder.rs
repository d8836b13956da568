//! The background sampler of a run: a thread that reads every source at a fixed
//! interval while a stage runs, appends each sample to `telemetry.csv`, and keeps the
//! current stage's energy and limit findings.
//!
//! The stage never waits on the thread for long: marking a stage's start only sends a
//! message, its end waits a bounded time for one last sample, and stopping waits a
//! bounded time for the thread before leaving it behind. A sysfs read that hangs in
//! a driver therefore costs the run its telemetry, never its progress.

use std::path::PathBuf;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::bmc_watch::{BmcExtremes, BmcWatch};
use super::csv::CsvWriter;
use super::energy::{Energy, EnergyMeter};
use super::limits::LimitWatch;
use super::peaks::ThermalPeaks;
use super::sample::{Sampler, TelemetrySample};

/// Where each sample goes as it is taken, besides the CSV: the worker's event stream,
/// so that whoever watches the run sees the GPUs live. Called on the sampling thread.
#[derive(Clone)]
pub struct SampleSink(Arc<dyn Fn(&TelemetrySample) + Send + Sync>);

impl SampleSink {
    /// A sink that calls `sink` with every sample.
    pub fn new(sink: impl Fn(&TelemetrySample) + Send + Sync + 'static) -> SampleSink {
        SampleSink(Arc::new(sink))
    }
}

impl std::fmt::Debug for SampleSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SampleSink")
    }
}

/// How often a run is sampled unless told otherwise.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a stage's end waits for its closing sample.
const CLOSING_SAMPLE_WAIT: Duration = Duration::from_secs(3);
/// The longest the end of a run waits for the thread to stop.
const STOP_WAIT: Duration = Duration::from_secs(2);

/// Which sources a recorder reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sources {
    /// sysfs under the root, and NVML.
    All,
    /// sysfs under the root only.
    SysfsOnly,
}

/// Where and how often to sample.
#[derive(Debug, Clone)]
pub struct RecorderConfig {
    /// Root of the sysfs tree (`root/sys`).
    pub root: PathBuf,
    /// `telemetry.csv`; `None` samples for energy only.
    pub csv_path: Option<PathBuf>,
    /// Time between samples.
    pub interval: Duration,
    /// Which sources to read.
    pub sources: Sources,
    /// Also hands every sample to this, as it is taken.
    pub sink: Option<SampleSink>,
    /// Also reads the BMC's fans and power supplies, on a thread of their own: for a run
    /// that judges them (`burn-in`), since each reading asks ipmitool.
    pub watch_bmc: bool,
}

/// What one stage's samples came to.
#[derive(Debug, Clone, PartialEq)]
pub struct StageTelemetry {
    /// `None` when no source reports power: unknown, not zero.
    pub energy: Option<Energy>,
    /// Missing sources, GPUs past their limits, a CSV that could not be written.
    pub findings: Vec<String>,
    /// Samples taken during the stage.
    pub samples: usize,
}

enum Command {
    /// Sample now.
    Sample,
    /// Take the named stage's closing sample, end the stage, then answer.
    EndStage(String, Sender<()>),
    Stop,
}

#[derive(Default)]
struct State {
    stage: Option<String>,
    meter: EnergyMeter,
    limits: LimitWatch,
    samples: usize,
    /// Every sensor's hottest reading since the run began, across its stages.
    peaks: ThermalPeaks,
    /// `None` until the sources have been looked for.
    has_power: Option<bool>,
    /// What the sources' discovery found (no power source, an unreadable library): said
    /// once, in the first stage that ends, not repeated in every stage of the run.
    source_findings: Vec<String>,
    source_findings_reported: bool,
    /// Why the CSV stopped being written, until the stage that ends next reports it.
    csv_finding: Option<String>,
}

/// A running background sampler; dropping it stops the thread.
pub struct TelemetryRecorder {
    state: Arc<Mutex<State>>,
    /// The BMC's sensors, read on a thread of their own when the config asks for them.
    bmc: Option<BmcWatch>,
    commands: Sender<Command>,
    stopped: Receiver<()>,
    thread: Option<JoinHandle<()>>,
}

impl TelemetryRecorder {
    /// Starts the thread. Looking for the sources happens on it, so this returns at
    /// once; a thread that cannot be spawned leaves a recorder that records nothing
    /// and says so.
    pub fn start(config: RecorderConfig) -> TelemetryRecorder {
        let (watch_bmc, config_interval) = (config.watch_bmc, config.interval);
        let state = Arc::new(Mutex::new(State::default()));
        let (commands, receiver) = mpsc::channel();
        let (stopped_tx, stopped) = mpsc::channel();
        let thread_state = Arc::clone(&state);
        let spawned = std::thread::Builder::new()
            .name("telemetry".into())
            .spawn(move || {
                sample_loop(&config, &thread_state, &receiver);
                let _ = stopped_tx.send(());
            });
        let thread = match spawned {
            Ok(handle) => Some(handle),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the telemetry thread");
                lock(&state).source_findings = vec![format!(
                    "telemetry not recorded: cannot start its thread: {e}"
                )];
                None
            }
        };
        let bmc = watch_bmc.then(|| {
            let stage_state = Arc::clone(&state);
            BmcWatch::start(
                None,
                bmc_interval(config_interval),
                Arc::new(move || lock(&stage_state).stage.clone()),
            )
        });
        TelemetryRecorder {
            state,
            bmc,
            commands,
            stopped,
            thread,
        }
    }

    /// Samples from now on are `stage`'s; the first is taken at once.
    pub fn begin_stage(&self, stage: &str) {
        {
            let mut state = lock(&self.state);
            state.stage = Some(stage.to_string());
            state.meter = EnergyMeter::default();
            state.limits = LimitWatch::default();
            state.samples = 0;
        }
        let _ = self.commands.send(Command::Sample);
    }

    /// Every sensor's hottest reading in the stages that have ended or are running.
    pub fn run_peaks(&self) -> ThermalPeaks {
        lock(&self.state).peaks.clone()
    }

    /// What the BMC's fans and power supplies came to over the run so far.
    pub fn run_bmc(&self) -> BmcExtremes {
        self.bmc.as_ref().map_or_else(
            || BmcExtremes {
                unread: Some("the BMC's sensors were not watched in this run".into()),
                ..BmcExtremes::default()
            },
            BmcWatch::extremes,
        )
    }

    /// Counts `earlier` (the peaks of a run this one takes up) toward the run's peaks.
    pub fn include_peaks(&self, earlier: &ThermalPeaks) {
        lock(&self.state).peaks.merge(earlier);
    }

    /// Takes the stage's closing sample (waiting a bounded time for it) and returns
    /// what the stage's samples came to.
    pub fn end_stage(&self) -> StageTelemetry {
        let (ack, acked) = mpsc::channel();
        let stage = lock(&self.state).stage.clone().unwrap_or_default();
        if self.thread.is_some() && self.commands.send(Command::EndStage(stage, ack)).is_ok() {
            if let Err(RecvTimeoutError::Timeout) = acked.recv_timeout(CLOSING_SAMPLE_WAIT) {
                tracing::warn!("the telemetry thread did not take the closing sample in time");
            }
        }
        let mut state = lock(&self.state);
        state.stage = None;
        let mut findings = if state.source_findings_reported {
            Vec::new()
        } else {
            state.source_findings_reported = true;
            state.source_findings.clone()
        };
        findings.extend(state.limits.findings());
        findings.extend(state.csv_finding.take());
        StageTelemetry {
            energy: match state.has_power {
                Some(true) => state.meter.energy(),
                _ => None,
            },
            findings,
            samples: state.samples,
        }
    }
}

impl Drop for TelemetryRecorder {
    fn drop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        let Some(thread) = self.thread.take() else {
            return;
        };
        match self.stopped.recv_timeout(STOP_WAIT) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => {
                if thread.join().is_err() {
                    tracing::warn!("the telemetry thread panicked");
                }
            }
            // Stuck in a read: leave it; the process exit ends it.
            Err(RecvTimeoutError::Timeout) => {
                tracing::warn!("the telemetry thread did not stop in time; leaving it")
            }
        }
    }
}

/// How often the BMC is read: ten GPU samples apart (10 s at the default pace), and at
/// least half a second, since one reading asks ipmitool twice.
fn bmc_interval(sample_interval: Duration) -> Duration {
    (sample_interval * 10).max(Duration::from_millis(500))
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // A panic elsewhere while holding the lock leaves plain data that is still usable.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn sample_loop(config: &RecorderConfig, state: &Mutex<State>, commands: &Receiver<Command>) {
    let start = Instant::now();
    let mut sampler = match config.sources {
        Sources::All => Sampler::discover(&config.root),
        Sources::SysfsOnly => Sampler::discover_sysfs(&config.root),
    };
    {
        let mut state = lock(state);
        state.has_power = Some(sampler.has_power_source());
        state.source_findings = sampler.findings().to_vec();
    }
    let mut csv = config
        .csv_path
        .as_ref()
        .and_then(|path| match CsvWriter::create(path) {
            Ok(writer) => Some(writer),
            Err(e) => {
                tracing::warn!(error = %e, "cannot write telemetry");
                lock(state).csv_finding = Some(format!("telemetry not written: {e}"));
                None
            }
        });
    let interval = config.interval.max(Duration::from_millis(10));
    let mut next_due = Instant::now() + interval;
    loop {
        let wait = next_due.saturating_duration_since(Instant::now());
        let ack = match commands.recv_timeout(wait) {
            Ok(Command::Sample) => None,
            Ok(Command::EndStage(stage, ack)) => Some((stage, ack)),
            Ok(Command::Stop) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                next_due = (next_due + interval).max(Instant::now());
                None
            }
        };
        let stage = lock(state).stage.clone();
        if let Some(stage) = stage {
            let sample = sampler.sample(start.elapsed().as_secs_f64());
            if let Some(writer) = csv.as_mut() {
                if let Err(e) = writer.append(&stage, &sample) {
                    tracing::warn!(error = %e, "cannot write telemetry; no more rows");
                    lock(state).csv_finding = Some(format!("telemetry not written: {e}"));
                    csv = None;
                }
            }
            if let Some(sink) = &config.sink {
                (sink.0)(&sample);
            }
            let mut state = lock(state);
            // A stage that ended while this sample was taken does not get it.
            if state.stage.as_deref() == Some(stage.as_str()) {
                state.meter.add_sample(&sample);
                state.limits.observe(&sample);
                state.peaks.observe(&stage, &sample);
                state.samples += 1;
            }
        }
        if let Some((ended, ack)) = ack {
            // Ended here, right after its last sample, so no later row carries its
            // name; a closing request that came too late leaves the next stage alone.
            let mut state = lock(state);
            if state.stage.as_deref() == Some(ended.as_str()) {
                state.stage = None;
            }
            drop(state);
            let _ = ack.send(());
        }
    }
}
