//! The run supervisor: one task that owns the state machine, starts workers, folds
//! their events into the run record, and publishes what happens.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::cgroup::RunCgroups;
use super::error::AgentError;
use super::events::AgentEvent;
use super::handle::{blocking, read, write, Shared};
use super::live::TimedSample;
use super::messages::{Command, WorkerMessage};
use super::state::{Input, SupervisorState, TransitionError};
use super::status::{AgentState, HardwareView};
use super::watchdog::Watchdog;
use super::worker::{self, WorkerControl, WorkerSpec};
use crate::record::files;
use crate::record::store::Artifact;
use crate::record::{RunRecord, RunState, Trigger};
use crate::suite::event::WorkerEvent;
use crate::suite::plan::{self, Resume, Workspace};

/// What the supervisor needs to start workers and take inventory.
#[derive(Debug, Clone)]
pub struct SupervisorConfig {
    /// The `tinyperf` binary that runs as the worker.
    pub worker_exe: PathBuf,
    /// The root of the sysfs/procfs tree to inventory (`/` on the box).
    pub root: PathBuf,
    /// Judge the box as this SKU instead of recognising it.
    pub sku: Option<String>,
    /// The ImageNet root that training suites read by default.
    pub dataset: PathBuf,
    /// How long a cancelled worker has between SIGTERM and SIGKILL.
    pub grace: std::time::Duration,
    /// The state directory, whose free space is checked before a run starts.
    pub state_dir: PathBuf,
    /// Free bytes the state directory keeps; a run is not started below it.
    pub min_free_space: u64,
    /// Size budget of the generated datasets in the cache folder.
    pub dataset_cache: u64,
    /// The configured external benchmarks, by name.
    pub benchmarks: std::collections::BTreeMap<String, Map<String, Value>>,
    /// Where each run gets a cgroup of its own; `None` where the agent cannot make them.
    pub cgroups: Option<RunCgroups>,
}

pub(super) struct Supervisor {
    shared: Arc<Shared>,
    config: SupervisorConfig,
    state: SupervisorState,
    record: Option<RunRecord>,
    worker: Option<WorkerControl>,
    /// Deadlines and what was last heard from the worker in progress.
    watch: Option<Watchdog>,
    /// Why the watchdog stopped the worker, once it has.
    overdue: Option<String>,
    /// A start that the scheduled run in progress is stopping for; it starts when that
    /// run's worker has exited.
    waiting: Option<StartRequest>,
    commands: mpsc::Sender<Command>,
}

/// A request to start a run, with where its answer goes.
struct StartRequest {
    suite: String,
    options: Map<String, Value>,
    trigger: Trigger,
    reply: tokio::sync::oneshot::Sender<Result<String, AgentError>>,
}

/// How often the watchdog looks at the worker.
const WATCHDOG_PERIOD: std::time::Duration = std::time::Duration::from_millis(250);

impl Supervisor {
    pub fn new(
        shared: Arc<Shared>,
        config: SupervisorConfig,
        commands: mpsc::Sender<Command>,
    ) -> Self {
        Supervisor {
            shared,
            config,
            state: SupervisorState::Idle,
            record: None,
            worker: None,
            watch: None,
            overdue: None,
            waiting: None,
            commands,
        }
    }

    pub async fn run(mut self, mut inbox: mpsc::Receiver<Command>) {
        let mut check = tokio::time::interval(WATCHDOG_PERIOD);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let command = tokio::select! {
                command = inbox.recv() => command,
                _ = check.tick() => {
                    self.check_watchdog();
                    continue;
                }
            };
            let Some(command) = command else { break };
            match command {
                Command::Start {
                    suite,
                    options,
                    trigger,
                    reply,
                } => {
                    let request = StartRequest {
                        suite,
                        options,
                        trigger,
                        reply,
                    };
                    if let Some(request) = self.yield_to(request) {
                        let started = self
                            .start(request.suite, request.options, request.trigger)
                            .await;
                        let _ = request.reply.send(started);
                    }
                }
                Command::Resume { run_id, reply } => {
                    let _ = reply.send(self.resume(&run_id).await);
                }
                Command::Cancel { run_id, reply } => {
                    let _ = reply.send(self.cancel(&run_id));
                }
                Command::Rescan { reply } => {
                    let shared = self.shared.clone();
                    let config = self.config.clone();
                    tokio::spawn(async move {
                        let _ = reply.send(rescan(shared, config).await);
                    });
                }
                Command::FactoryReset {
                    requested_by,
                    reply,
                } => {
                    let _ = reply.send(self.request_factory_reset(requested_by).await);
                }
                Command::Update {
                    version,
                    reboot,
                    requested_by,
                    reply,
                } => {
                    let _ = reply.send(self.request_update(version, reboot, requested_by).await);
                }
                Command::Worker(WorkerMessage::Event { run_id, event }) => {
                    if let Some(watch) = self.watch.as_mut() {
                        watch.heard(&event, Instant::now());
                    }
                    self.on_event(&run_id, event)
                }
                Command::Worker(WorkerMessage::Exited {
                    run_id,
                    outcome,
                    own_status,
                }) => {
                    self.on_exit(&run_id, outcome, own_status);
                    self.start_waiting().await;
                }
            }
        }
    }

    /// A run the agent scheduled itself (the idle health pass) gives way to anyone's:
    /// it is cancelled, and `request` waits for its worker to exit (`None` is returned).
    /// Any other request is handed back to be started or refused as usual. A request
    /// that would be refused anyway does not stop the scheduled run.
    fn yield_to(&mut self, request: StartRequest) -> Option<StartRequest> {
        let scheduled = self
            .record
            .as_ref()
            .filter(|r| r.trigger == Trigger::Schedule && !r.state.is_final())
            .map(|r| r.id.clone());
        let Some(run_id) = scheduled.filter(|_| request.trigger != Trigger::Schedule) else {
            return Some(request);
        };
        if self.waiting.is_some() {
            // One start is already waiting for the scheduled run to stop; this one is
            // refused as any start during a run is.
            return Some(request);
        }
        let resolved = self
            .configured_options(&request.suite, request.options.clone())
            .and_then(|options| {
                plan::check_options(&request.suite, &options).map_err(|e| e.to_string())
            });
        if let Err(why) = resolved {
            let _ = request.reply.send(Err(AgentError::InvalidArgs(why)));
            return None;
        }
        info!(run = %run_id, suite = %request.suite, trigger = request.trigger.as_str(), "the scheduled run yields to a run asked for");
        if let Err(e) = self.cancel(&run_id) {
            warn!(run = %run_id, error = %e, "cannot stop the scheduled run");
            return Some(request);
        }
        self.waiting = Some(request);
        None
    }

    /// `options` with the benchmark they name looked up in the configuration, for the
    /// suites that run one (`external`, `burn-in`); others' as given.
    fn configured_options(
        &self,
        suite: &str,
        options: Map<String, Value>,
    ) -> Result<Map<String, Value>, String> {
        match suite {
            crate::suite::external::NAME => configured_benchmark(&self.config.benchmarks, options),
            crate::suite::burn_in::NAME => configured_burn_in(&self.config.benchmarks, options),
            _ => Ok(options),
        }
    }

    /// Starts the run that waited for a scheduled run to stop, once it has.
    async fn start_waiting(&mut self) {
        if self.state.current_run().is_some() {
            return;
        }
        let Some(request) = self.waiting.take() else {
            return;
        };
        let started = self
            .start(request.suite, request.options, request.trigger)
            .await;
        let _ = request.reply.send(started);
    }

    /// Writes the factory-reset request unless a run is going (or waiting to start):
    /// the check and the write happen between two commands, so no run starts between
    /// them.
    async fn request_factory_reset(
        &mut self,
        requested_by: String,
    ) -> Result<crate::update::ResetRequest, AgentError> {
        if let Some(current) = self.state.current_run() {
            return Err(AgentError::Busy(format!(
                "{current}; cancel it or wait for it to end before a factory reset"
            )));
        }
        if let Some(waiting) = &self.waiting {
            return Err(AgentError::Busy(format!(
                "a {} run is about to start",
                waiting.suite
            )));
        }
        let image = self.shared.image.clone();
        blocking(move || image.request_reset(&requested_by)).await?
    }

    /// Writes the update request unless a run is going (or waiting to start), between
    /// two commands as a factory reset's.
    async fn request_update(
        &mut self,
        version: String,
        reboot: bool,
        requested_by: String,
    ) -> Result<crate::update::progress::UpdateRequest, AgentError> {
        if let Some(current) = self.state.current_run() {
            return Err(AgentError::Busy(format!(
                "{current}; an OS update waits until the run ends"
            )));
        }
        if let Some(waiting) = &self.waiting {
            return Err(AgentError::Busy(format!(
                "a {} run is about to start",
                waiting.suite
            )));
        }
        let image = self.shared.image.clone();
        blocking(move || image.request_update(&version, reboot, &requested_by)).await?
    }

    async fn start(
        &mut self,
        suite: String,
        options: Map<String, Value>,
        trigger: Trigger,
    ) -> Result<String, AgentError> {
        self.start_run(suite, options, trigger, None).await
    }

    /// Takes up the interrupted run `run_id` as a new run (trigger `resume`) of the same
    /// suite and options, which carries over the stages it finished.
    async fn resume(&mut self, run_id: &str) -> Result<String, AgentError> {
        let store = self.shared.store.clone();
        let id = run_id.to_string();
        let (record, dir) = blocking(move || -> Result<_, AgentError> {
            let record = store.load(&id)?;
            let dir = store
                .run_dir(&id)
                .map_err(|e| AgentError::Internal(e.to_string()))?;
            Ok((record, dir))
        })
        .await??;
        if record.state != RunState::Interrupted {
            return Err(AgentError::InvalidArgs(format!(
                "run {run_id} was not interrupted (it is {})",
                record.state
            )));
        }
        let mut options = record.options.clone();
        if options.contains_key(crate::suite::external::BENCHMARK) {
            // The benchmark is looked up again by its name, as the configuration has it now.
            options.retain(|key, _| {
                key == crate::suite::external::BENCHMARK
                    || !crate::suite::burn_in::EXTERNAL_KEYS.contains(&key.as_str())
            });
        }
        let resume = Resume {
            from_run: record.id.clone(),
            carried: record.stages.clone(),
            telemetry: Some(dir.join(Artifact::Telemetry.file_name())),
        };
        self.start_run(
            record.suite.clone(),
            options,
            Trigger::Resume,
            Some((resume, record)),
        )
        .await
    }

    async fn start_run(
        &mut self,
        suite: String,
        options: Map<String, Value>,
        trigger: Trigger,
        resume: Option<(Resume, RunRecord)>,
    ) -> Result<String, AgentError> {
        let options = self
            .configured_options(&suite, options)
            .map_err(AgentError::InvalidArgs)?;
        let workspace = Workspace {
            cache_dir: plan::cache_dir_for(Some(&self.config.state_dir), None),
            cache_budget: self.config.dataset_cache,
            imagenet: Some(self.config.dataset.clone()),
        };
        let mut plan = plan::preflight(&suite, options, workspace)
            .map_err(|e| AgentError::InvalidArgs(e.to_string()))?;
        if let Some(current) = self.state.current_run() {
            return Err(AgentError::Busy(current.to_string()));
        }
        let image = self.shared.image.clone();
        if let Some(why) = blocking(move || image.update_busy()).await? {
            return Err(AgentError::Updating(why));
        }
        let run_id = crate::record::store::new_run_id();
        let next = self
            .state
            .next(&Input::Start {
                run_id: run_id.clone(),
            })
            .map_err(transition_error)?;
        let mut record =
            RunRecord::new(run_id.clone(), suite.clone(), trigger, plan.options.clone());
        record.hardware = read(&self.shared.hardware).json.clone();
        if let Some((resume, interrupted)) = resume {
            let carried: Vec<&str> = resume
                .carried
                .iter()
                .map(|stage| stage.name.as_str())
                .filter(|name| *name != crate::suite::inventory_stage::NAME)
                .collect();
            record.summary.findings.push(format!(
                "takes up run {} (started {}), which was interrupted: {}; carried over as they \
                 ended: {}",
                interrupted.id,
                interrupted.started_at.format("%Y-%m-%d %H:%M:%S UTC"),
                interrupted
                    .summary
                    .message
                    .as_deref()
                    .unwrap_or("no cause recorded"),
                if carried.is_empty() {
                    "no stage".to_string()
                } else {
                    carried.join(", ")
                }
            ));
            record.resumed_from = Some(resume.from_run.clone());
            plan.resume = Some(resume);
        }
        let needed = plan.dataset_bytes_needed();
        let plan_json = serde_json::to_string(&plan)
            .map_err(|e| AgentError::Internal(format!("cannot hand the plan to a worker: {e}")))?;
        let store = self.shared.store.clone();
        let first = record.clone();
        let (state_dir, reserve) = (self.config.state_dir.clone(), self.config.min_free_space);
        let cgroups = self.config.cgroups.clone();
        let group_id = run_id.clone();
        let (run_dir, log, cgroup) = blocking(move || -> Result<_, AgentError> {
            check_free_space(&state_dir, reserve, needed)?;
            let dir = store
                .create(&first)
                .map_err(|e| AgentError::Internal(format!("cannot record the run: {e}")))?;
            let log = store
                .modes()
                .create_file(&dir.join(Artifact::WorkerLog.file_name()))
                .map_err(|e| AgentError::Internal(format!("cannot create the worker log: {e}")));
            let cgroup = cgroups.filter(|_| log.is_ok()).and_then(|groups| match groups.create(&group_id) {
                Ok(group) => Some(group),
                Err(e) => {
                    warn!(run = %group_id, error = %e, "the run has no cgroup; what it leaves running is found by its session");
                    None
                }
            });
            Ok((dir, log, cgroup))
        })
        .await??;
        info!(run = %run_id, %suite, trigger = trigger.as_str(), "run started");
        self.state = next;
        self.publish_started(&record);

        let spec = WorkerSpec {
            exe: self.config.worker_exe.clone(),
            args: self.worker_args(&plan_json, &run_dir),
            run_dir,
            grace: self.config.grace,
        };
        self.watch = Some(Watchdog::new(record.options.clone(), Instant::now()));
        self.overdue = None;
        self.set_current(record);
        match log.and_then(|log| {
            worker::spawn(&run_id, &spec, log, cgroup, self.commands.clone())
                .map_err(|e| AgentError::Internal(e.to_string()))
        }) {
            Ok(control) => self.worker = Some(control),
            Err(e) => {
                error!(run = %run_id, error = %e, "cannot start the worker");
                self.close_run(
                    RunState::Error,
                    Some(format!(
                        "cannot start the worker {}: {e}",
                        spec.exe.display()
                    )),
                );
            }
        }
        Ok(run_id)
    }

    /// The worker's command line: the checked plan, executed as it is.
    fn worker_args(&self, plan_json: &str, run_dir: &std::path::Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = vec![
            "run".into(),
            "--events".into(),
            "jsonl".into(),
            "--run-dir".into(),
            run_dir.into(),
            "--root".into(),
            self.config.root.clone().into(),
            "--plan-json".into(),
            plan_json.into(),
        ];
        if let Some(sku) = &self.config.sku {
            args.push("--sku".into());
            args.push(sku.into());
        }
        args
    }

    fn cancel(&mut self, run_id: &str) -> Result<(), AgentError> {
        let next = match self.state.next(&Input::Cancel {
            run_id: run_id.to_string(),
        }) {
            Ok(next) => next,
            Err(TransitionError::NotInProgress { .. }) => {
                // Tell an unknown run from one that already finished.
                let Some(brief) = self.shared.store.brief(run_id) else {
                    return Err(AgentError::NotFound(run_id.to_string()));
                };
                return Err(AgentError::InvalidArgs(format!(
                    "run {run_id} is not in progress (it is {})",
                    brief.state
                )));
            }
            Err(e) => return Err(transition_error(e)),
        };
        info!(run = %run_id, "cancel requested");
        self.state = next;
        if let Some(worker) = self.worker.as_mut() {
            worker.cancel();
        }
        Ok(())
    }

    fn on_event(&mut self, run_id: &str, event: WorkerEvent) {
        let Some(record) = self.record.as_mut().filter(|r| r.id == run_id) else {
            warn!(run = %run_id, "event from a run that is not in progress");
            return;
        };
        if matches!(event, WorkerEvent::RunFinished { .. }) && record.state.is_final() {
            return;
        }
        record.apply(&event);
        let mut save = false;
        match &event {
            WorkerEvent::StageStarted { stage, .. } => {
                write(&self.shared.status).current_stage = Some(stage.clone());
                self.publish(AgentEvent::StageStarted {
                    run_id: run_id.to_string(),
                    stage: stage.clone(),
                });
            }
            WorkerEvent::Progress {
                stage,
                progress,
                message,
            } => {
                // The run's progress only grows: a worker's report below what was
                // published already (a stage counting a phase from 0) leaves it be.
                let progress = {
                    let mut status = write(&self.shared.status);
                    status.progress = status.progress.max(progress.clamp(0.0, 1.0));
                    if message.is_some() {
                        status.message = message.clone();
                    }
                    status.progress
                };
                self.publish(AgentEvent::Progress {
                    run_id: run_id.to_string(),
                    stage: stage.clone(),
                    progress,
                    message: message.clone(),
                });
            }
            WorkerEvent::StageFinished { result } => {
                save = true;
                self.publish(AgentEvent::StageFinished {
                    run_id: run_id.to_string(),
                    stage: result.name.clone(),
                    verdict: result.verdict,
                });
            }
            WorkerEvent::Hardware { .. } | WorkerEvent::RunFinished { .. } => save = true,
            WorkerEvent::Train { point } => {
                write(&self.shared.live).add_train(point.clone());
                self.publish(AgentEvent::Train {
                    run_id: run_id.to_string(),
                    point: point.clone(),
                });
            }
            WorkerEvent::Telemetry { sample } => {
                let sample = TimedSample {
                    at: chrono::Utc::now(),
                    sample: sample.clone(),
                };
                write(&self.shared.live).add_sample(sample.clone());
                self.publish(AgentEvent::Telemetry {
                    run_id: run_id.to_string(),
                    sample,
                });
            }
            WorkerEvent::RunStarted { .. } | WorkerEvent::Heartbeat => {}
        }
        if save {
            self.save_current();
        }
    }

    /// Stops a worker past its stage's deadline or silent for too long: SIGTERM, then
    /// SIGKILL after the grace period; the run then ends in error saying why.
    fn check_watchdog(&mut self) {
        if self.overdue.is_some() {
            return;
        }
        let Some(why) = self.watch.as_ref().and_then(|w| w.overdue(Instant::now())) else {
            return;
        };
        let Some(run_id) = self.state.current_run().map(str::to_string) else {
            return;
        };
        error!(run = %run_id, reason = %why, "stopping a hung worker");
        if let Ok(next) = self.state.next(&Input::Cancel {
            run_id: run_id.clone(),
        }) {
            self.state = next;
        }
        if let Some(worker) = self.worker.as_mut() {
            worker.cancel();
        }
        self.overdue = Some(why);
    }

    fn on_exit(&mut self, run_id: &str, outcome: String, own_status: bool) {
        let cancelled = matches!(self.state, SupervisorState::Cancelling { .. });
        let overdue = self.overdue.take();
        if let Err(e) = self.state.next(&Input::WorkerExited {
            run_id: run_id.to_string(),
        }) {
            warn!(error = %e, "ignoring a worker exit");
            return;
        }
        let finished = self
            .record
            .as_ref()
            .map(|r| r.state.is_final())
            .unwrap_or(true);
        // A worker the watchdog stopped may still report its run, as cancelled: the
        // run ended because it hung, which is an error.
        let stopped_by_watchdog = !finished
            || self
                .record
                .as_ref()
                .is_some_and(|r| r.state == RunState::Cancelled);
        if let Some(why) = overdue.filter(|_| stopped_by_watchdog) {
            self.close_run(
                RunState::Error,
                Some(format!(
                    "{why}; the worker was stopped and ended with {outcome}"
                )),
            );
        } else if cancelled && !finished {
            self.close_run(
                RunState::Cancelled,
                Some(format!("cancelled; the worker ended with {outcome}")),
            );
        } else if !finished {
            self.close_run(
                RunState::Error,
                Some(format!(
                    "the worker ended with {outcome} before finishing the run (see worker.log)"
                )),
            );
        } else {
            // A failed or cancelled run exits 1 by design; only a worker that died after
            // reporting (a signal, a crash on the way out) is worth a warning.
            if !own_status {
                warn!(run = %run_id, %outcome, "worker finished its run but exited badly");
            } else if self
                .record
                .as_ref()
                .is_some_and(|r| r.state == RunState::Cancelled)
            {
                info!(run = %run_id, "run cancelled");
            }
            self.close_run_as_reported();
        }
    }

    /// Closes the current run as the worker reported it.
    fn close_run_as_reported(&mut self) {
        if let Some(record) = self.record.as_ref() {
            let (state, message) = (record.state, record.summary.message.clone());
            self.close_run(state, message);
        }
    }

    /// Finishes the current run in `state`, stores it, and goes idle.
    fn close_run(&mut self, state: RunState, message: Option<String>) {
        self.worker = None;
        self.watch = None;
        self.state = SupervisorState::Idle;
        let Some(mut record) = self.record.take() else {
            return;
        };
        if !record.state.is_final() || record.state != state {
            record.finish(state, message);
        }
        if let Some(waiting) = self
            .waiting
            .as_ref()
            .filter(|_| record.state == RunState::Cancelled)
        {
            // Not a failure of the box: somebody wanted it.
            record.summary.message = Some(format!(
                "cancelled: gave way to {}, asked for over {}",
                waiting.suite,
                waiting.trigger.as_str()
            ));
        }
        // The writer puts the record in the index at once and on disk as soon as the
        // disk takes it; old runs are pruned after it is written.
        self.shared
            .writer
            .save(&self.shared.store, Arc::new(record.clone()));
        *write(&self.shared.current) = None;
        write(&self.shared.live).end();
        info!(run = %record.id, state = %record.state, "run finished");
        {
            let mut status = write(&self.shared.status);
            status.state = AgentState::Idle;
            status.current_run = None;
            status.current_suite = None;
            status.current_stage = None;
            status.progress = 0.0;
            status.message = None;
        }
        *write(&self.shared.counters)
            .runs_finished
            .entry(record.state.as_str().to_string())
            .or_default() += 1;
        super::birth::after_run(&self.shared.box_records, &record.suite, record.state);
        self.publish(AgentEvent::RunFinished {
            run_id: record.id.clone(),
            state: record.state,
            verdict: record.verdict(),
        });
        self.publish(AgentEvent::StateChanged {
            state: AgentState::Idle,
            current_run: None,
        });
    }

    /// Makes `record` the run in progress, for readers and for the supervisor.
    fn set_current(&mut self, record: RunRecord) {
        *write(&self.shared.current) = Some(Arc::new(record.clone()));
        self.record = Some(record);
    }

    /// Hands the run in progress to readers and to the record writer. The worker's
    /// own final state stays unpublished until it exits: only then does the
    /// supervisor know whether it stands (a run the watchdog stopped ends in error,
    /// whatever the worker said).
    fn save_current(&self) {
        if let Some(record) = &self.record {
            let mut record = record.clone();
            record.state = RunState::Running;
            let record = Arc::new(record);
            *write(&self.shared.current) = Some(record.clone());
            self.shared.writer.save(&self.shared.store, record);
        }
    }

    fn publish_started(&self, record: &RunRecord) {
        {
            let mut status = write(&self.shared.status);
            status.state = AgentState::Running;
            status.current_run = Some(record.id.clone());
            status.current_suite = Some(record.suite.clone());
            status.current_stage = None;
            status.progress = 0.0;
            status.message = None;
        }
        write(&self.shared.counters).runs_started += 1;
        write(&self.shared.live).begin(&record.id);
        self.publish(AgentEvent::StateChanged {
            state: AgentState::Running,
            current_run: Some(record.id.clone()),
        });
        self.publish(AgentEvent::RunStarted {
            run_id: record.id.clone(),
            suite: record.suite.clone(),
        });
    }

    fn publish(&self, event: AgentEvent) {
        // No subscribers is fine: nobody is listening.
        let _ = self.shared.events.send(event);
    }
}

/// Refuses a run when the state directory has less than `reserve` bytes free beyond
/// the `needed` ones, before anything of the run is written.
fn check_free_space(
    state_dir: &std::path::Path,
    reserve: u64,
    needed: u64,
) -> Result<(), AgentError> {
    let free = match files::free_bytes(state_dir) {
        Ok(free) => free,
        Err(e) => {
            warn!(dir = %state_dir.display(), error = %e, "cannot tell the free space of the state directory");
            return Ok(());
        }
    };
    if free < reserve.saturating_add(needed) {
        let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
        let dataset = if needed > 0 {
            format!(
                " and about {:.0} MiB for the run's generated dataset",
                mib(needed)
            )
        } else {
            String::new()
        };
        return Err(AgentError::NoSpace(format!(
            "not enough free space to start a run: {} has {:.1} MiB free, and the agent keeps \
             {:.1} MiB in reserve (min_free_space_mb){dataset}; free some space or lower the reserve",
            state_dir.display(),
            mib(free),
            mib(reserve)
        )));
    }
    Ok(())
}

fn transition_error(e: TransitionError) -> AgentError {
    match e {
        TransitionError::Busy { current } => AgentError::Busy(current),
        TransitionError::NotInProgress { run_id } => {
            AgentError::InvalidArgs(format!("run {run_id} is not in progress"))
        }
        TransitionError::StrayWorker { run_id } => {
            AgentError::Internal(format!("stray worker for run {run_id}"))
        }
    }
}

/// Takes the inventory again (off the async threads) and publishes it.
pub(super) async fn rescan(
    shared: Arc<Shared>,
    config: SupervisorConfig,
) -> Result<Value, AgentError> {
    let root = config.root.clone();
    let sku = config.sku.clone();
    let view = tokio::task::spawn_blocking(move || HardwareView::scan(&root, sku.as_deref()))
        .await
        .map_err(|e| AgentError::Internal(format!("inventory scan failed: {e}")))?;
    let json = view.json.clone();
    let sku = view.sku.clone();
    *write(&shared.hardware) = view;
    write(&shared.status).sku = sku.clone();
    let _ = shared.events.send(AgentEvent::HardwareChanged { sku });
    Ok(json)
}

/// A burn-in's options with its training benchmark resolved: one that trains with an
/// external benchmark names a configured one, exactly as the `external` suite does, and
/// the rest of its options are its own.
fn configured_burn_in(
    benchmarks: &std::collections::BTreeMap<String, Map<String, Value>>,
    options: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let (external, mut own) = crate::suite::burn_in::split_options(&options);
    if external.is_empty() {
        return Ok(options);
    }
    let resolved = configured_benchmark(benchmarks, external)?;
    own.extend(resolved);
    Ok(own)
}

/// The options of an external run the agent starts: only a benchmark configured in
/// `tinyperf.toml`, by name, so that the right to start runs (group `tinyperf` on D-Bus,
/// the token over HTTP) is not the right to run any command as the agent's user.
fn configured_benchmark(
    benchmarks: &std::collections::BTreeMap<String, Map<String, Value>>,
    mut options: Map<String, Value>,
) -> Result<Map<String, Value>, String> {
    let known = || {
        if benchmarks.is_empty() {
            "none is configured: add [benchmarks.NAME] to tinyperf.toml".to_string()
        } else {
            format!(
                "configured: {}",
                benchmarks.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        }
    };
    let name = match options.remove(crate::suite::external::BENCHMARK) {
        Some(Value::String(name)) => name,
        _ => {
            return Err(format!(
                "the agent runs only external benchmarks configured in tinyperf.toml: give the \
                 option benchmark=NAME ({})",
                known()
            ))
        }
    };
    let Some(configured) = benchmarks.get(&name) else {
        return Err(format!(
            "no benchmark {} ({})",
            crate::echo::quoted(&name),
            known()
        ));
    };
    if let Some(key) = options
        .keys()
        .find(|k| k.as_str() != crate::suite::options::STAGE_TIMEOUT_S.key)
    {
        return Err(format!(
            "a configured benchmark takes no option {} besides stage_timeout_s",
            crate::echo::quoted(key)
        ));
    }
    let mut merged = configured.clone();
    merged.extend(options);
    merged.insert(
        crate::suite::external::BENCHMARK.into(),
        Value::String(name),
    );
    Ok(merged)
}
