//! `tinyperf run` and `tinyperf health`: the arguments become the worker's request (the
//! options through the preflight, or the plan the agent checked), and the run's events
//! are printed for a person or written as JSON lines for the agent.

use std::io::Write;

use serde_json::{Map, Value};

use super::args::{EventFormat, RunArgs};
use super::progress::TerminalProgress;
use super::UsageError;
use crate::suite::event::WorkerEvent;
use crate::suite::health;
use crate::suite::jsonl::JsonLines;
use crate::suite::options;
use crate::suite::plan::{self, RunPlan, Workspace};
use crate::suite::request::{self, Recording, WorkerRequest};
use crate::suite::worker::{self, EventSink};

/// The `tinyperf run` command. Exit status 0 when the run passed, 1 otherwise.
pub fn main(args: &RunArgs) -> anyhow::Result<i32> {
    let request = worker_request(args)?;
    let outcome = match request.events {
        request::EventFormat::Jsonl => worker::run(&request, &mut JsonLines::start())?,
        request::EventFormat::Human => {
            let outcome = if args.live_progress() {
                worker::run(&request, &mut TerminalProgress::new())?
            } else {
                worker::run(&request, &mut PlainLines)?
            };
            if outcome.record.suite == health::SUITE {
                let result = health::result::from_record(&outcome.record);
                print!("{}", health::result::table(&result));
            }
            outcome
        }
    };
    Ok(outcome.exit_status())
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

/// The request the arguments make: the agent's checked plan as it is, or the suite
/// and options through the preflight.
fn worker_request(args: &RunArgs) -> Result<WorkerRequest, UsageError> {
    let telemetry_interval = args.telemetry_interval()?;
    let plan = match &args.plan_json {
        Some(text) => serde_json::from_str::<RunPlan>(text)
            .map_err(|e| UsageError(format!("--plan-json is not a run plan: {e}")))?,
        None => {
            let workspace = Workspace {
                cache_budget: args.dataset_cache_mb.saturating_mul(1024 * 1024),
                ..Workspace::for_run(args.state_dir.as_deref(), args.run_dir.as_deref())
            };
            plan::preflight(
                &args.suite_name().map_err(UsageError)?,
                collect_options(args)?,
                workspace,
            )
            .map_err(|e| UsageError(e.to_string()))?
        }
    };
    let recording = match (&args.state_dir, &args.run_dir) {
        (Some(state), _) => Recording::StateDir(state.clone()),
        (None, Some(dir)) => Recording::RunDir(dir.clone()),
        (None, None) => Recording::None,
    };
    Ok(WorkerRequest {
        plan,
        root: args.root.clone(),
        sku: args.sku.clone(),
        recording,
        telemetry_interval,
        events: match args.event_format() {
            EventFormat::Human => request::EventFormat::Human,
            EventFormat::Jsonl => request::EventFormat::Jsonl,
        },
    })
}

/// The suite options the arguments give: `--options-json`, each `-o KEY=VALUE`, and
/// the flags that stand for an option.
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

/// Readable lines on stdout, one or a few an event.
struct PlainLines;

impl EventSink for PlainLines {
    fn event(&mut self, event: &WorkerEvent) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        super::human::write_event(&mut out, event)?;
        out.flush()
    }
}

impl EventSink for TerminalProgress {
    fn event(&mut self, event: &WorkerEvent) -> std::io::Result<()> {
        self.show(event)
    }
}
