//! Executes a plan's stages in order in this process, reporting each step as an event,
//! with telemetry sampled while each stage runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::event::WorkerEvent;
use super::plan::{Resume, RunPlan, StageKind};
use super::stage::StageContext;
use super::{
    burn_in, cpu_gemm, external, gpu_allreduce, gpu_bandwidth, gpu_gemm, gpu_p2p, health,
    inventory_stage, mlperf_package, mlperf_resnet, smoke, train_throughput,
};
use crate::record::store::Artifact;
use crate::record::{RunState, StageResult, Verdict};
use crate::runtime::telemetry::{
    csv, RecorderConfig, SampleSink, Sources, TelemetryRecorder, ThermalPeaks,
};

/// Runs one stage; `earlier` are the results of the stages before it in this run.
fn run_stage(
    stage: StageKind,
    ctx: &mut StageContext<'_>,
    telemetry: &TelemetryRecorder,
    earlier: &[StageResult],
) -> StageResult {
    match stage {
        StageKind::BurnInLimits => {
            burn_in::judge(ctx, &telemetry.run_peaks(), &telemetry.run_bmc(), earlier)
        }
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
        StageKind::PowerRamp => health::ramp_stage::run(ctx),
        StageKind::Throttling => health::throttle_stage::run(ctx),
    }
}

/// Runs the stages of `plan` in order, sending every event to `emit`. Returns the
/// final state.
pub fn execute(
    plan: &RunPlan,
    env: &RunEnvironment,
    cancel: &AtomicBool,
    emit: &mut dyn FnMut(WorkerEvent),
) -> RunState {
    let stages = &plan.stages;
    emit(WorkerEvent::RunStarted {
        suite: plan.suite.clone(),
        stages: stages.iter().map(|s| s.name().to_string()).collect(),
    });
    let total = stages.len().max(1);
    let mut finished: Vec<StageResult> = Vec::new();
    // A failed run's summary says why: its first failing stage and that stage's word.
    let mut first_failure: Option<String> = None;
    let telemetry = TelemetryRecorder::start(RecorderConfig {
        root: env.root.clone(),
        csv_path: env
            .run_dir
            .as_ref()
            .map(|dir| dir.join(Artifact::Telemetry.file_name())),
        interval: env.telemetry_interval,
        sources: Sources::All,
        sink: env.telemetry_sink.clone(),
        watch_bmc: stages.contains(&StageKind::BurnInLimits),
    });
    if let Some(resume) = &plan.resume {
        telemetry.include_peaks(&earlier_peaks(resume));
    }
    let mut epochs = super::epoch_log::EpochLog::in_run_dir(env.run_dir.as_deref());
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
        if let Some(result) = carried_result(plan, *stage) {
            emit(WorkerEvent::StageFinished {
                result: result.clone(),
            });
            finished.push(result);
            continue;
        }
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
            root: env.root.clone(),
            sku: env.sku.clone(),
            plan,
            run_dir: env.run_dir.clone(),
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
        let mut result = run_stage(*stage, &mut ctx, &telemetry, &finished);
        drop(ctx);
        telemetry.end_stage().apply_to(&mut result);
        if let Some(h) = seen_hardware {
            hardware = Some(h);
        }
        if first_failure.is_none() && matches!(result.verdict, Verdict::Fail | Verdict::Error) {
            first_failure = Some(failure_message(&result));
        }
        emit(WorkerEvent::StageFinished {
            result: result.clone(),
        });
        finished.push(result);
    }
    drop(telemetry);
    let (state, message) = if cancel.load(Ordering::Relaxed) {
        (RunState::Cancelled, Some("cancelled".to_string()))
    } else {
        match Verdict::combine(finished.iter().map(|r| r.verdict)) {
            Verdict::Pass | Verdict::Warn | Verdict::Skip => (RunState::Passed, None),
            Verdict::Fail | Verdict::Error => (RunState::Failed, first_failure),
        }
    };
    emit(WorkerEvent::RunFinished {
        state,
        message: message.clone(),
    });
    state
}

/// The result `stage` ended with in the interrupted run this one takes up, marked as
/// such; `None` for a stage to run. The inventory is always taken again: the box that
/// comes back from a reboot is the one later stages are judged on.
fn carried_result(plan: &RunPlan, stage: StageKind) -> Option<StageResult> {
    if stage == StageKind::Inventory {
        return None;
    }
    let resume = plan.resume.as_ref()?;
    let mut result = resume
        .carried
        .iter()
        .find(|r| r.name == stage.name())?
        .clone();
    result.findings.push(format!(
        "carried over from run {}, which a reboot interrupted after this stage",
        resume.from_run
    ));
    Some(result)
}

/// The temperatures the interrupted run recorded before it stopped; none when its file
/// is gone or unreadable, which the peaks then simply leave out.
fn earlier_peaks(resume: &Resume) -> ThermalPeaks {
    let Some(path) = &resume.telemetry else {
        return ThermalPeaks::default();
    };
    let rows = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| csv::parse(&text).map_err(|e| e.to_string()));
    match rows {
        Ok(rows) => ThermalPeaks::from_rows(&rows),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the interrupted run's telemetry");
            ThermalPeaks::default()
        }
    }
}

/// Why a stage failed, in one line: its name, verdict and message, else its first
/// failing check.
fn failure_message(result: &StageResult) -> String {
    let verdict = match result.verdict {
        Verdict::Error => "could not run",
        _ => "failed",
    };
    let why = result.message.clone().or_else(|| {
        result
            .checks
            .iter()
            .find(|c| matches!(c.verdict, Verdict::Fail | Verdict::Error))
            .map(|c| format!("{}: expected {}, found {}", c.name, c.expected, c.found))
    });
    match why {
        Some(why) => format!("stage {} {verdict}: {why}", result.name),
        None => format!("stage {} {verdict}", result.name),
    }
}

/// Where a plan is executed, besides the plan itself.
#[derive(Debug, Clone)]
pub struct RunEnvironment {
    /// Root of the sysfs/procfs tree to inventory.
    pub root: PathBuf,
    /// The SKU to judge the box as, instead of the one it is recognised as.
    pub sku: Option<String>,
    /// The run's folder, when it is recorded.
    pub run_dir: Option<PathBuf>,
    /// How often telemetry is sampled while a stage runs.
    pub telemetry_interval: Duration,
    /// Where each telemetry sample goes live, besides `telemetry.csv`.
    pub telemetry_sink: Option<SampleSink>,
}

impl RunEnvironment {
    /// A run of the tree at `root` that is not recorded, sampling telemetry at the
    /// default interval.
    pub fn unrecorded(root: PathBuf) -> Self {
        RunEnvironment {
            root,
            sku: None,
            run_dir: None,
            telemetry_interval: crate::runtime::telemetry::DEFAULT_INTERVAL,
            telemetry_sink: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::plan::{preflight, Workspace};
    use serde_json::Map;

    fn plan(suite: &str, options: Map<String, serde_json::Value>) -> RunPlan {
        preflight(suite, options, Workspace::for_run(None, None)).unwrap()
    }

    #[test]
    fn a_cancelled_run_runs_no_stage_and_says_so() {
        let cancel = AtomicBool::new(true);
        let mut events = Vec::new();
        let state = execute(
            &plan("inventory", Map::new()),
            &RunEnvironment::unrecorded("/".into()),
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
        execute(
            &plan("acceptance", options),
            &RunEnvironment::unrecorded("/".into()),
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
