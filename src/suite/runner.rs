//! `tinyperf run`: executes a suite's stages in this process, reporting each step as
//! an event, and records the run when asked to.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use serde_json::{Map, Value};

use super::event::WorkerEvent;
use super::record::{RunRecord, RunState, StageResult, Trigger, Verdict};
use super::stage::StageContext;
use super::{cpu_gemm, inventory_stage, options};
use crate::agent::store::{new_run_id, Store};
use crate::cli::args::{EventFormat, RunArgs};
use crate::cli::UsageError;

/// One step of a suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    Inventory,
    CpuGemm,
}

impl StageKind {
    pub fn name(self) -> &'static str {
        match self {
            StageKind::Inventory => inventory_stage::NAME,
            StageKind::CpuGemm => cpu_gemm::NAME,
        }
    }

    fn run(self, ctx: &mut StageContext<'_>) -> StageResult {
        match self {
            StageKind::Inventory => inventory_stage::run(ctx),
            StageKind::CpuGemm => cpu_gemm::run(ctx),
        }
    }
}

/// The stages of `suite`, in order.
pub fn plan(suite: &str) -> Option<Vec<StageKind>> {
    match suite {
        "inventory" => Some(vec![StageKind::Inventory]),
        "acceptance" => Some(vec![StageKind::Inventory, StageKind::CpuGemm]),
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
    for (index, stage) in stages.iter().enumerate() {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        emit(WorkerEvent::StageStarted {
            stage: stage.name().to_string(),
            index,
            total,
        });
        let mut ctx = StageContext {
            root: run_options.root.clone(),
            sku: run_options.sku.clone(),
            options: &run_options.options,
            cancel,
            emit: &mut *emit,
            progress_span: (
                index as f64 / total as f64,
                (index + 1) as f64 / total as f64,
            ),
            stage_name: stage.name(),
        };
        let result = stage.run(&mut ctx);
        verdicts.push(result.verdict);
        emit(WorkerEvent::StageFinished { result });
    }
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
    Ok(map)
}

/// The `tinyperf run` command. Exit status 0 when the run passed, 1 otherwise.
pub fn main(args: &RunArgs) -> anyhow::Result<i32> {
    let options = collect_options(args)?;
    super::validate(&args.suite, &options).map_err(UsageError)?;
    let stages =
        plan(&args.suite).ok_or_else(|| UsageError(format!("suite {} has no plan", args.suite)))?;
    if let Some(dir) = &args.run_dir {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create run directory {}", dir.display()))?;
    }
    let store = match &args.state_dir {
        Some(dir) => Some(Store::open(dir, crate::agent::config::DEFAULT_RETENTION)?),
        None => None,
    };
    let mut record = RunRecord::new(
        new_run_id(),
        args.suite.clone(),
        Trigger::Cli,
        options.clone(),
    );
    if let Some(store) = &store {
        let dir = store.create(&record)?;
        eprintln!("recording run {} in {}", record.id, dir.display());
    }
    install_cancel_handler();
    let run_options = RunOptions {
        root: args.root.clone(),
        sku: args.sku.clone(),
        options,
    };
    let mut out = std::io::stdout().lock();
    let mut sink_error: Option<std::io::Error> = None;
    let format = args.events;
    let mut emit = |event: WorkerEvent| {
        record.apply(&event);
        let written = match format {
            EventFormat::Jsonl => writeln!(out, "{}", event.to_line()).and_then(|_| out.flush()),
            EventFormat::Human => super::human::write_event(&mut out, &event),
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
    let state = execute(&args.suite, &stages, &run_options, &CANCEL, &mut emit);
    if let Some(e) = sink_error {
        tracing::warn!(error = %e, "lost the event reader");
    }
    Ok(if state == RunState::Passed { 0 } else { 1 })
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
        assert_eq!(names("acceptance"), ["inventory", "cpu-gemm"]);
        assert!(plan("smoke").is_none());
    }

    #[test]
    fn a_cancelled_run_runs_no_stage_and_says_so() {
        let cancel = AtomicBool::new(true);
        let mut events = Vec::new();
        let opts = RunOptions {
            root: "/".into(),
            sku: None,
            options: Map::new(),
        };
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
        let opts = RunOptions {
            root: "/".into(),
            sku: None,
            options,
        };
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
