//! `tinyperf run`: executes a suite's stages in this process, reporting each step as
//! an event, and records the run when asked to.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::{Map, Value};

use super::deadline::HEARTBEAT_INTERVAL;
use super::event::WorkerEvent;
use super::stage::StageContext;
use super::{
    cpu_gemm, external, gpu_allreduce, gpu_bandwidth, gpu_gemm, gpu_p2p, health, inventory_stage,
    mlperf_package, mlperf_resnet, options, smoke, train_throughput,
};
use crate::cli::args::{EventFormat, RunArgs};
use crate::cli::progress::TerminalProgress;
use crate::cli::UsageError;
use crate::record::store::{new_run_id, Artifact, Store};
use crate::record::{RunRecord, RunState, StageResult, Trigger, Verdict};
use crate::runtime::telemetry::{RecorderConfig, SampleSink, Sources, TelemetryRecorder};

/// One step of a suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    Inventory,
    CpuGemm,
    GpuGemm,
    GpuBandwidth,
    GpuP2p,
    GpuAllReduce,
    TrainThroughput,
    Smoke,
    MlperfResnet,
    /// Run `n` (1-based) of an `mlperf-resnet` suite of several runs.
    MlperfResnetRun(u8),
    /// The submission package of the runs before it.
    MlperfPackage,
    /// Another framework's benchmark, run as a command.
    External,
    /// The silent-corruption check, its load `health`'s minutes or `acceptance`'s seconds.
    GpuCorruption {
        short: bool,
    },
    LinkHealth,
    KernelMessages,
    GpuMemory,
    PowerPulse,
    Throttling,
}

impl StageKind {
    pub fn name(self) -> &'static str {
        match self {
            StageKind::Inventory => inventory_stage::NAME,
            StageKind::CpuGemm => cpu_gemm::NAME,
            StageKind::GpuGemm => gpu_gemm::NAME,
            StageKind::GpuBandwidth => gpu_bandwidth::NAME,
            StageKind::GpuP2p => gpu_p2p::NAME,
            StageKind::GpuAllReduce => gpu_allreduce::NAME,
            StageKind::TrainThroughput => train_throughput::NAME,
            StageKind::Smoke => smoke::NAME,
            StageKind::MlperfResnet => mlperf_resnet::NAME,
            StageKind::MlperfResnetRun(n) => mlperf_resnet::run_name(n),
            StageKind::MlperfPackage => mlperf_package::NAME,
            StageKind::External => external::NAME,
            StageKind::GpuCorruption { .. } => health::corruption_stage::NAME,
            StageKind::LinkHealth => health::link_stage::NAME,
            StageKind::KernelMessages => health::kernel_stage::NAME,
            StageKind::GpuMemory => health::memory_stage::NAME,
            StageKind::PowerPulse => health::pulse_stage::NAME,
            StageKind::Throttling => health::throttle_stage::NAME,
        }
    }

    fn run(self, ctx: &mut StageContext<'_>) -> StageResult {
        match self {
            StageKind::Inventory => inventory_stage::run(ctx),
            StageKind::CpuGemm => cpu_gemm::run(ctx),
            StageKind::GpuGemm => gpu_gemm::run(ctx),
            StageKind::GpuBandwidth => gpu_bandwidth::run(ctx),
            StageKind::GpuP2p => gpu_p2p::run(ctx),
            StageKind::GpuAllReduce => gpu_allreduce::run(ctx),
            StageKind::TrainThroughput => train_throughput::run(ctx),
            StageKind::Smoke => smoke::run(ctx),
            StageKind::MlperfResnet => mlperf_resnet::run(ctx, None),
            StageKind::MlperfResnetRun(n) => mlperf_resnet::run(ctx, Some(n)),
            StageKind::MlperfPackage => mlperf_package::run(ctx),
            StageKind::External => external::run(ctx),
            StageKind::GpuCorruption { short } => health::corruption_stage::run(
                ctx,
                if short {
                    health::corruption_stage::SHORT_BURN_SECONDS
                } else {
                    health::corruption_stage::DEFAULT_BURN_SECONDS
                },
            ),
            StageKind::LinkHealth => health::link_stage::run(ctx),
            StageKind::KernelMessages => health::kernel_stage::run(ctx),
            StageKind::GpuMemory => health::memory_stage::run(ctx),
            StageKind::PowerPulse => health::pulse_stage::run(ctx),
            StageKind::Throttling => health::throttle_stage::run(ctx),
        }
    }
}

/// The stages of `suite` with `options`: `mlperf-resnet` with `runs=N` trains N times
/// and, for five runs, packages them.
pub fn plan_for(suite: &str, options: &Map<String, Value>) -> Option<Vec<StageKind>> {
    let runs = options
        .get(options::RUNS.key)
        .and_then(Value::as_u64)
        .unwrap_or(1);
    if suite == mlperf_resnet::NAME && runs > 1 {
        let mut stages: Vec<StageKind> = (1..=runs.min(mlperf_resnet::MAX_RUNS as u64))
            .map(|n| StageKind::MlperfResnetRun(n as u8))
            .collect();
        if runs as usize == crate::mlperf::score::RESULTS_NEEDED {
            stages.push(StageKind::MlperfPackage);
        }
        return Some(stages);
    }
    plan(suite)
}

/// The stages of `suite`, in order.
pub fn plan(suite: &str) -> Option<Vec<StageKind>> {
    match suite {
        "inventory" => Some(vec![StageKind::Inventory]),
        "acceptance" => Some(vec![
            StageKind::Inventory,
            StageKind::CpuGemm,
            StageKind::GpuGemm,
            StageKind::GpuBandwidth,
            StageKind::GpuP2p,
            StageKind::GpuAllReduce,
            StageKind::GpuCorruption { short: true },
            StageKind::TrainThroughput,
        ]),
        "health" => Some(vec![
            StageKind::Inventory,
            StageKind::KernelMessages,
            StageKind::GpuCorruption { short: false },
            StageKind::GpuMemory,
            StageKind::LinkHealth,
            StageKind::Throttling,
            StageKind::PowerPulse,
        ]),
        "smoke" => Some(vec![StageKind::Smoke]),
        "mlperf-resnet" => Some(vec![StageKind::MlperfResnet]),
        "external" => Some(vec![StageKind::External]),
        _ => None,
    }
}

/// Set by SIGTERM or SIGINT; stages check it between steps.
static CANCEL: AtomicBool = AtomicBool::new(false);

extern "C" fn on_cancel_signal(_: nix::libc::c_int) {
    CANCEL.store(true, Ordering::Relaxed);
}

fn install_cancel_handler() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let action = SigAction::new(
        SigHandler::Handler(on_cancel_signal),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [Signal::SIGTERM, Signal::SIGINT] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        if let Err(e) = unsafe { sigaction(signal, &action) } {
            tracing::warn!(%signal, error = %e, "cannot install the cancel handler");
        }
    }
}

/// Runs the stages of `suite` in order, sending every event to `emit`. Returns the
/// final state.
pub fn execute(
    suite: &str,
    stages: &[StageKind],
    run_options: &RunOptions,
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(WorkerEvent),
) -> RunState {
    emit(WorkerEvent::RunStarted {
        suite: suite.to_string(),
        stages: stages.iter().map(|s| s.name().to_string()).collect(),
    });
    let total = stages.len().max(1);
    let mut verdicts = Vec::new();
    let telemetry = TelemetryRecorder::start(RecorderConfig {
        root: run_options.root.clone(),
        csv_path: run_options
            .run_dir
            .as_ref()
            .map(|dir| dir.join(Artifact::Telemetry.file_name())),
        interval: run_options.telemetry_interval,
        sources: Sources::All,
        sink: run_options.telemetry_sink.clone(),
    });
    let mut epochs = super::epoch_log::EpochLog::in_run_dir(run_options.run_dir.as_deref());
    // Later stages judge the box by the inventory an earlier stage took.
    let mut hardware: Option<serde_json::Value> = None;
    for (index, stage) in stages.iter().enumerate() {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        emit(WorkerEvent::StageStarted {
            stage: stage.name().to_string(),
            index,
            total,
        });
        let mut seen_hardware = None;
        let mut forward = |event: WorkerEvent| {
            match &event {
                WorkerEvent::Hardware { hardware } => seen_hardware = Some(hardware.clone()),
                WorkerEvent::Train { point } => epochs.note(point),
                _ => {}
            }
            emit(event);
        };
        let mut ctx = StageContext {
            root: run_options.root.clone(),
            sku: run_options.sku.clone(),
            options: &run_options.options,
            run_dir: run_options.run_dir.clone(),
            cache_dir: run_options.cache_dir.clone(),
            cache_budget: run_options.cache_budget,
            hardware: hardware.clone(),
            cancel,
            emit: &mut forward,
            progress_span: (
                index as f64 / total as f64,
                (index + 1) as f64 / total as f64,
            ),
            progress_reached: index as f64 / total as f64,
            stage_name: stage.name(),
        };
        telemetry.begin_stage(stage.name());
        let mut result = stage.run(&mut ctx);
        drop(ctx);
        telemetry.end_stage().apply_to(&mut result);
        if let Some(h) = seen_hardware {
            hardware = Some(h);
        }
        verdicts.push(result.verdict);
        emit(WorkerEvent::StageFinished { result });
    }
    drop(telemetry);
    let (state, message) = if cancel.load(Ordering::Relaxed) {
        (RunState::Cancelled, Some("cancelled".to_string()))
    } else {
        match Verdict::combine(verdicts) {
            Verdict::Pass | Verdict::Skip => (RunState::Passed, None),
            Verdict::Fail | Verdict::Error => (RunState::Failed, None),
        }
    };
    emit(WorkerEvent::RunFinished {
        state,
        message: message.clone(),
    });
    state
}

/// What a run needs besides its suite.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub root: PathBuf,
    pub sku: Option<String>,
    pub options: Map<String, Value>,
    /// The run's folder, when it is recorded.
    pub run_dir: Option<PathBuf>,
    pub cache_dir: PathBuf,
    /// The generated datasets' size budget in the cache folder.
    pub cache_budget: u64,
    /// How often telemetry is sampled while a stage runs.
    pub telemetry_interval: Duration,
    /// Where each telemetry sample goes live, besides `telemetry.csv`.
    pub telemetry_sink: Option<SampleSink>,
}

impl RunOptions {
    /// Options for a run that is not recorded, with the default cache folder.
    pub fn new(root: PathBuf, sku: Option<String>, options: Map<String, Value>) -> Self {
        RunOptions {
            root,
            sku,
            options,
            run_dir: None,
            cache_dir: default_cache_dir(None, None),
            cache_budget: crate::engine::data::synth_cache::DEFAULT_BUDGET_BYTES,
            telemetry_interval: crate::runtime::telemetry::DEFAULT_INTERVAL,
            telemetry_sink: None,
        }
    }
}

/// Where generated datasets are cached: `STATE/cache` for a run recorded in a state
/// folder (a run folder `STATE/runs/<id>` names its state folder too), else
/// `$XDG_CACHE_HOME/tinyperf` or `~/.cache/tinyperf`, else the temporary folder.
pub fn default_cache_dir(
    state_dir: Option<&std::path::Path>,
    run_dir: Option<&std::path::Path>,
) -> PathBuf {
    if let Some(state) = state_dir {
        return state.join("cache");
    }
    if let Some(runs) = run_dir.and_then(|d| d.parent()) {
        if runs.file_name().is_some_and(|n| n == "runs") {
            if let Some(state) = runs.parent() {
                return state.join("cache");
            }
        }
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("tinyperf");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".cache").join("tinyperf");
    }
    std::env::temp_dir().join("tinyperf-cache")
}

fn collect_options(args: &RunArgs) -> Result<Map<String, Value>, UsageError> {
    let mut map = match &args.options_json {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err(UsageError("--options-json must be a JSON object".into())),
            Err(e) => return Err(UsageError(format!("--options-json is not JSON: {e}"))),
        },
        None => Map::new(),
    };
    map.extend(options::parse_pairs(&args.options).map_err(UsageError)?);
    if let Some(dataset) = &args.dataset {
        map.insert(
            options::DATASET.key.into(),
            Value::String(dataset.display().to_string()),
        );
    }
    if let Some(target) = args.target_accuracy {
        map.insert("target_accuracy".into(), target.into());
    }
    if let Some(backend) = &args.backend {
        map.insert(options::BACKEND.key.into(), Value::String(backend.clone()));
    }
    if let Some(precision) = &args.precision {
        map.insert("precision".into(), Value::String(precision.clone()));
    }
    Ok(map)
}

/// A run that names a GPU backend needs a device of it: without one it stops here,
/// before anything is recorded, with the reason (a library or device missing).
fn require_backend(options: &Map<String, Value>) -> anyhow::Result<()> {
    use crate::engine::backend::select::{self, BackendKind};
    let kind = super::gpu_devices::backend_kind(options);
    if matches!(kind, BackendKind::Cuda | BackendKind::Hip) {
        if let Err(e) = select::resolve(kind) {
            anyhow::bail!("backend {kind} cannot be used: {e}");
        }
    }
    Ok(())
}

/// The `tinyperf run` command. Exit status 0 when the run passed, 1 otherwise.
pub fn main(args: &RunArgs) -> anyhow::Result<i32> {
    let options = collect_options(args)?;
    let telemetry_interval = args.telemetry_interval()?;
    let suite = args.suite_name().map_err(UsageError)?;
    super::validate(&suite, &options).map_err(UsageError)?;
    let stages = plan_for(&suite, &options)
        .ok_or_else(|| UsageError(format!("suite {suite} has no plan")))?;
    require_backend(&options)?;
    if let Some(dir) = &args.run_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create run directory {}", dir.display()))?;
    }
    let store = match &args.state_dir {
        Some(dir) => Some(Store::open(dir, crate::record::store::DEFAULT_RETENTION)?),
        None => None,
    };
    let mut record = RunRecord::new(new_run_id(), suite.clone(), Trigger::Cli, options.clone());
    let mut run_dir = args.run_dir.clone();
    if let Some(store) = &store {
        let dir = store.create(&record)?;
        eprintln!("recording run {} in {}", record.id, dir.display());
        run_dir = Some(dir);
    }
    install_cancel_handler();
    let run_options = RunOptions {
        root: args.root.clone(),
        sku: args.sku.clone(),
        options,
        cache_dir: default_cache_dir(args.state_dir.as_deref(), run_dir.as_deref()),
        cache_budget: args.dataset_cache_mb.saturating_mul(1024 * 1024),
        run_dir,
        telemetry_interval,
        telemetry_sink: None,
    };
    let format = args.event_format();
    let mut live = args.live_progress().then(TerminalProgress::new);
    // The supervisor reads silence as a hung worker; a thread of its own says the
    // process is alive while a stage computes.
    let mut heartbeat = (format == EventFormat::Jsonl).then(Heartbeat::start);
    let run_ended = Arc::new(AtomicBool::new(false));
    let run_options = RunOptions {
        telemetry_sink: (format == EventFormat::Jsonl).then(|| live_telemetry(&run_ended)),
        ..run_options
    };
    let mut sink_error: Option<std::io::Error> = None;
    let mut emit = |event: WorkerEvent| {
        record.apply(&event);
        if matches!(event, WorkerEvent::RunFinished { .. }) {
            // The run's last line is its end, never a heartbeat or a sample after it.
            run_ended.store(true, Ordering::Relaxed);
            heartbeat.take();
        }
        // Locked per event, so heartbeats interleave between whole lines.
        let mut out = std::io::stdout().lock();
        let written = match format {
            EventFormat::Jsonl => writeln!(out, "{}", event.to_line()).and_then(|_| out.flush()),
            EventFormat::Human => match &mut live {
                Some(live) => live.show(&event),
                None => super::human::write_event(&mut out, &event),
            },
        };
        if let Err(e) = written {
            // A reader that went away (the agent died) means nobody wants the run: stop.
            CANCEL.store(true, Ordering::Relaxed);
            sink_error.get_or_insert(e);
        }
        if let (Some(store), true) = (&store, saves_record(&event)) {
            if let Err(e) = store.save(&record) {
                tracing::error!(error = %e, "cannot record the run");
            }
        }
    };
    let state = execute(&suite, &stages, &run_options, &CANCEL, &mut emit);
    if let Some(e) = sink_error {
        tracing::warn!(error = %e, "lost the event reader");
    }
    if suite == health::SUITE {
        let result = health::result::from_record(&record);
        if format == EventFormat::Human {
            print!("{}", health::result::table(&result));
        }
        if let Some(dir) = &run_options.run_dir {
            let path = dir.join(health::result::FILE_NAME);
            let written = serde_json::to_vec_pretty(&result)
                .map_err(std::io::Error::other)
                .and_then(|json| std::fs::write(&path, json));
            if let Err(e) = written {
                tracing::warn!(path = %path.display(), error = %e, "cannot write the health result");
            }
        }
    }
    Ok(exit_status(&suite, state, &record))
}

/// `tinyperf health`: the `health` suite, however the arguments name it.
pub fn health(mut args: RunArgs) -> anyhow::Result<i32> {
    if let Some(other) = [&args.suite, &args.suite_flag]
        .into_iter()
        .flatten()
        .find(|s| s.as_str() != health::SUITE)
    {
        return Err(UsageError(format!(
            "tinyperf health runs the health suite, not {other}"
        ))
        .into());
    }
    args.suite = Some(health::SUITE.to_string());
    args.suite_flag = None;
    match main(&args) {
        // A backend that cannot be used: the checks could not run, which is not a fault.
        Err(e) if e.downcast_ref::<UsageError>().is_none() => {
            eprintln!("tinyperf: {e:#}");
            Ok(3)
        }
        other => other,
    }
}

/// 0 when the run passed, 1 otherwise; the health suite tells a GPU that failed (1) from
/// a check that could not run (3), so a script never mistakes one for the other.
fn exit_status(suite: &str, state: RunState, record: &RunRecord) -> i32 {
    if suite == health::SUITE {
        health::result::exit_status(record)
    } else {
        i32::from(state != RunState::Passed)
    }
}

/// Writes a heartbeat line every [`HEARTBEAT_INTERVAL`] until dropped.
/// Writes each telemetry sample to stdout as an event line, until the run has ended.
fn live_telemetry(run_ended: &Arc<AtomicBool>) -> SampleSink {
    let run_ended = Arc::clone(run_ended);
    SampleSink::new(move |sample| {
        if run_ended.load(Ordering::Relaxed) {
            return;
        }
        let line = WorkerEvent::Telemetry {
            sample: sample.clone(),
        }
        .to_line();
        let mut out = std::io::stdout().lock();
        // A reader that went away is noticed by the run's own events.
        let _ = writeln!(out, "{line}").and_then(|_| out.flush());
    })
}

struct Heartbeat {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Heartbeat {
    fn start() -> Heartbeat {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let line = WorkerEvent::Heartbeat.to_line();
        let thread = std::thread::Builder::new()
            .name("heartbeat".into())
            .spawn(move || {
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(HEARTBEAT_INTERVAL)
                {
                    let mut out = std::io::stdout().lock();
                    if writeln!(out, "{line}").and_then(|_| out.flush()).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| tracing::warn!(error = %e, "cannot start the heartbeat thread"))
            .ok();
        Heartbeat {
            stop: Some(stop),
            thread,
        }
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn saves_record(event: &WorkerEvent) -> bool {
    matches!(
        event,
        WorkerEvent::Hardware { .. }
            | WorkerEvent::StageFinished { .. }
            | WorkerEvent::RunFinished { .. }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_name_their_stages() {
        let names = |s| {
            plan(s)
                .unwrap()
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
        };
        assert_eq!(names("inventory"), ["inventory"]);
        assert_eq!(
            names("acceptance"),
            [
                "inventory",
                "cpu-gemm",
                "gpu-gemm",
                "gpu-bandwidth",
                "gpu-p2p",
                "gpu-allreduce",
                "gpu-corruption",
                "train-throughput"
            ]
        );
        assert_eq!(
            names("health"),
            [
                "inventory",
                "kernel-messages",
                "gpu-corruption",
                "gpu-memory",
                "link-health",
                "throttling",
                "power-pulse"
            ]
        );
        assert_eq!(names("smoke"), ["smoke"]);
        assert_eq!(names("mlperf-resnet"), ["mlperf-resnet"]);
        assert!(plan("nope").is_none());
        let mut five = Map::new();
        five.insert("runs".into(), 5.into());
        let stages: Vec<&str> = plan_for("mlperf-resnet", &five)
            .unwrap()
            .iter()
            .map(|k| k.name())
            .collect();
        assert_eq!(
            stages,
            [
                "mlperf-resnet-1",
                "mlperf-resnet-2",
                "mlperf-resnet-3",
                "mlperf-resnet-4",
                "mlperf-resnet-5",
                "mlperf-package"
            ]
        );
        five.insert("runs".into(), 2.into());
        assert_eq!(plan_for("mlperf-resnet", &five).unwrap().len(), 2);
        assert_eq!(plan_for("smoke", &five).unwrap().len(), 1);
    }

    #[test]
    fn cache_dir_follows_the_state_folder() {
        use std::path::Path;
        assert_eq!(
            default_cache_dir(Some(Path::new("/s")), None),
            Path::new("/s/cache")
        );
        assert_eq!(
            default_cache_dir(None, Some(Path::new("/var/lib/tinyperf/runs/abc"))),
            Path::new("/var/lib/tinyperf/cache")
        );
    }

    #[test]
    fn a_cancelled_run_runs_no_stage_and_says_so() {
        let cancel = AtomicBool::new(true);
        let mut events = Vec::new();
        let opts = RunOptions::new("/".into(), None, Map::new());
        let state = execute(
            "inventory",
            &plan("inventory").unwrap(),
            &opts,
            &cancel,
            &mut |e| events.push(e),
        );
        assert_eq!(state, RunState::Cancelled);
        assert!(matches!(
            events.first(),
            Some(WorkerEvent::RunStarted { .. })
        ));
        assert!(!events
            .iter()
            .any(|e| matches!(e, WorkerEvent::StageStarted { .. })));
        assert!(matches!(
            events.last(),
            Some(WorkerEvent::RunFinished {
                state: RunState::Cancelled,
                ..
            })
        ));
    }

    #[test]
    fn acceptance_measures_the_cpu_and_reports_progress() {
        let cancel = AtomicBool::new(false);
        let mut events = Vec::new();
        let mut options = Map::new();
        options.insert("gemm_size".into(), 128.into());
        options.insert("gemm_seconds".into(), 0.1.into());
        options.insert("gemm_min_fraction".into(), 0.0.into());
        options.insert("train_steps".into(), 1.into());
        options.insert("train_warmup".into(), 0.into());
        options.insert("train_batch".into(), 2.into());
        options.insert("train_image_size".into(), 32.into());
        let opts = RunOptions::new("/".into(), None, options);
        execute(
            "acceptance",
            &plan("acceptance").unwrap(),
            &opts,
            &cancel,
            &mut |e| events.push(e),
        );
        let gemm = events
            .iter()
            .find_map(|e| match e {
                WorkerEvent::StageFinished { result } if result.name == "cpu-gemm" => Some(result),
                _ => None,
            })
            .expect("cpu-gemm finished");
        let throughput = events
            .iter()
            .find_map(|e| match e {
                WorkerEvent::StageFinished { result } if result.name == "train-throughput" => {
                    Some(result)
                }
                _ => None,
            })
            .expect("train-throughput finished");
        assert_eq!(throughput.verdict, Verdict::Skip, "{throughput:?}");
        let img_per_s = throughput
            .metrics
            .iter()
            .find(|m| m.name == "img_per_s")
            .expect("img/s recorded");
        assert!(img_per_s.value > 0.0, "{img_per_s:?}");
        assert!(throughput
            .metrics
            .iter()
            .any(|m| m.name == "estimated_time_to_train_min" && m.value > 0.0));
        let sustained = gemm
            .metrics
            .iter()
            .find(|m| m.name == "gflops_sustained")
            .unwrap();
        assert!(sustained.value > 0.1, "{sustained:?}");
        let progress: Vec<f64> = events
            .iter()
            .filter_map(|e| match e {
                WorkerEvent::Progress { progress, .. } => Some(*progress),
                _ => None,
            })
            .collect();
        assert!(
            progress.windows(2).all(|w| w[0] <= w[1] + 1e-12),
            "{progress:?}"
        );
        assert!(progress.iter().all(|p| (0.0..=1.0).contains(p)));
        assert_eq!(progress.last().copied(), Some(1.0));
    }
}
