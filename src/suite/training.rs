//! What the `smoke` and `mlperf-resnet` stages share: a ResNet training run on a dataset
//! in ImageNet layout, with its MLLOG and system description in the run folder, live
//! progress, and metrics and a verdict at the end.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use super::event::{TrainPoint, TrainPointKind, WorkerEvent};
use super::gpu_devices::GpuChoice;
use super::stage::{StageContext, StageReport};
use crate::engine::backend::half_storage::HalfStorageCpu;
use crate::engine::data::{Dataset, Loader, LoaderConfig};
use crate::engine::mllog::{flush_page_cache, Division, MlLog, MlLogError, Submission};
use crate::engine::model::resnet::ResNet;
use crate::engine::parallel::{gpu_all_reduce, AllReduce, DataParallel};
use crate::engine::recipe::{Recipe, RecipeError};
use crate::engine::train::LossScaling;
use crate::engine::train::{
    data_parallel_for, train, train_data_parallel, EpochReport, ModelChoice, StepReport,
    StopReason, TrainData, TrainObserver, TrainSummary,
};
use crate::engine::{Backend, CpuBackend};
use crate::mlperf::power_log::{PowerLog, PowerLogOutcome};
use crate::mlperf::system_desc::{
    submission_platform, system_description, SoftwareStack, SYSTEM_DESC_FILE,
};
use crate::record::{Check, StageResult, Verdict};

/// The MLLOG's file name in the run folder (or in a training's result folder).
pub const MLLOG_FILE: &str = "mllog.txt";

/// The recipe a training suite runs with `options` applied: the smoke preset for
/// `smoke`, the v4.0 reference otherwise.
pub fn recipe_for(suite: &str, options: &Map<String, Value>) -> Result<Recipe, RecipeError> {
    let base = match suite {
        "smoke" => super::smoke::recipe(),
        _ => Recipe::mlperf(),
    };
    base.with_options(options)
}

/// The recipe option that fixes the seed.
pub const SEED_OPTION: &str = "seed";

/// A fresh seed below 2³¹, which every consumer of the MLLOG reads as an integer.
fn draw_seed() -> Result<u64, getrandom::Error> {
    Ok(u64::from(getrandom::u32()? >> 1))
}

/// One training run of a stage.
pub struct TrainJob {
    /// The stage the training runs as, named in its events, result and MLLOG.
    pub stage: &'static str,
    /// A folder inside the run's for this training's files, when the run trains
    /// several times.
    pub result_folder: Option<String>,
    /// The dataset's root folder, in ImageNet layout (`train/` and `val/`, a folder per
    /// class).
    pub dataset: PathBuf,
    /// The recipe: batch, optimizer, schedule, target and seed, with the run's options
    /// applied.
    pub recipe: Recipe,
    /// The network to train.
    pub model: ModelChoice,
    /// The side in pixels of the training and evaluation crops.
    pub image_size: usize,
    /// Data loader threads; every CPU when `None`.
    pub loader_threads: Option<usize>,
    /// Whether the run may be logged as closed division (ImageNet with a closed
    /// recipe); otherwise it is always open.
    pub may_be_closed: bool,
    /// Fits the recipe's schedule to the dataset once it is opened (classes, training
    /// images, the run's options); what it returns is a finding.
    pub fit_schedule: Option<ScheduleFit>,
}

/// Fits a recipe's schedule to a dataset: `(recipe, classes, training images, the run's
/// options)`, returning a finding to record when it says something.
pub type ScheduleFit = fn(&mut Recipe, usize, usize, &Map<String, Value>) -> Option<String>;

/// Runs `job` and closes the stage. Nothing here panics on bad input: a dataset that
/// cannot be used, a file that cannot be written, a diverging loss or a cancel each
/// end the stage with a verdict and a message that says what happened.
pub fn run(ctx: &mut StageContext<'_>, mut job: TrainJob) -> StageResult {
    let mut report = StageReport::new(job.stage);
    // MLPerf wants every run of a result seeded apart (the package checker refuses a
    // seed logged twice from one line); a seed that was not asked for is drawn.
    if !ctx.options().contains_key(SEED_OPTION) {
        match draw_seed() {
            Ok(seed) => {
                job.recipe.seed = seed;
                report.findings.push(format!(
                    "seed {seed}, drawn for this run (-o {SEED_OPTION}={seed} repeats it)"
                ));
            }
            Err(e) => report.findings.push(format!(
                "cannot draw a seed ({e}): the run uses seed {}",
                job.recipe.seed
            )),
        }
    }
    report.metric("seed", job.recipe.seed as f64, "seed");
    ctx.progress(
        0.0,
        Some(format!("scanning dataset {}", job.dataset.display())),
    );
    let dataset = match Dataset::open(&job.dataset) {
        Ok(d) => d,
        Err(e) => {
            return report.finish_as(Verdict::Error, Some(format!("cannot train: {e}")));
        }
    };
    let (train_len, val_len) = (dataset.train.len(), dataset.val.len());
    report.findings.push(format!(
        "dataset {}: {} classes, {train_len} training and {val_len} validation images",
        dataset.root.display(),
        dataset.num_classes()
    ));
    if let Some(fit) = job.fit_schedule {
        let classes = dataset.num_classes();
        if let Some(finding) = fit(&mut job.recipe, classes, train_len, ctx.options()) {
            report.findings.push(finding);
        }
    }
    if job.recipe.global_batch_size > train_len {
        report.findings.push(format!(
            "the batch of {} is larger than the {train_len} training images: every step \
             fills the rest of its batch with padding, which does not count",
            job.recipe.global_batch_size
        ));
    }
    let run_dir = match run_folder(ctx, job.stage, job.result_folder.as_deref()) {
        Ok(dir) => dir,
        Err(message) => return report.finish_as(Verdict::Error, Some(message)),
    };
    let hardware = hardware(ctx);
    let platform = submission_platform(&hardware);
    let submitter = super::options::submitter(ctx.options()).to_string();

    let config = job.recipe.mllog_config(
        train_len as u64,
        val_len as u64,
        job.recipe.global_batch_size as u64,
    );
    let violations = config.closed_division_violations();
    let division = if job.may_be_closed && violations.is_empty() {
        Division::Closed
    } else {
        Division::Open
    };
    if job.may_be_closed && !violations.is_empty() {
        report.findings.push(format!(
            "logged as open division: {}",
            violations.join("; ")
        ));
    }
    write_system_description(
        &run_dir,
        &hardware,
        &platform,
        &submitter,
        division,
        &mut report,
    );
    let mllog_path = run_dir.join(MLLOG_FILE);
    report
        .findings
        .push(format!("MLLOG: {}", mllog_path.display()));
    let power_path = run_dir.join(crate::mlperf::package::POWER_FILE);
    let power = PowerLog::prepare(&ctx.root, &power_path);
    report.findings.extend(power.findings.iter().cloned());
    let run = TrainingRun {
        power: &power,
        job: &job,
        dataset: &dataset,
        config: &config,
        platform: &platform,
        submitter: &submitter,
        division,
        mllog_path: &mllog_path,
    };
    let precision = job.recipe.precision;
    let devices = match super::gpu_devices::open(ctx.options()) {
        Ok(gpus @ GpuChoice::Gpus { .. }) if precision.is_reduced() => {
            report.findings.push(format!(
                "{precision} mixed precision: activations, activation gradients and \
                 convolutions in {precision}, master weights, batch-norm statistics, logits and \
                 loss f32; {}",
                describe_loss_scaling(job.recipe.loss_scaling())
            ));
            Ok(gpus.with_precision(precision))
        }
        other => other,
    };
    let summary = match devices {
        Err(message) => return report.finish_as(Verdict::Error, Some(message)),
        Ok(GpuChoice::Cpu { .. }) if precision.is_reduced() => {
            let backend = match HalfStorageCpu::new(CpuBackend::new(), precision) {
                Ok(b) => b,
                Err(e) => return report.finish_as(Verdict::Error, Some(e.to_string())),
            };
            report.findings.push(format!(
                "{precision} mixed precision on the CPU: activations, activation gradients \
                 and convolution operands rounded to {precision}, master weights, batch-norm \
                 statistics, logits and loss f32; {}. This is the numerical reference, \
                 slower than f32 training",
                describe_loss_scaling(job.recipe.loss_scaling())
            ));
            run.on(Devices::One(backend), ctx)
        }
        Ok(GpuChoice::Cpu { .. }) => run.on(Devices::One(CpuBackend::new()), ctx),
        Ok(GpuChoice::Gpus { backends, .. }) if backends.len() > 1 => {
            let (collective, chosen) = gpu_all_reduce(&backends);
            report.findings.push(format!(
                "data-parallel over {} GPUs, the global batch of {} split between them; \
                 gradients all-reduced by {} ({chosen})",
                backends.len(),
                job.recipe.global_batch_size,
                collective.name()
            ));
            run.on(Devices::Replicas(backends, collective), ctx)
        }
        Ok(GpuChoice::Gpus { mut backends, .. }) => run.on(Devices::One(backends.remove(0)), ctx),
    };
    let power = power.finish();
    let summary = match summary {
        Ok(summary) => summary,
        Err(message) => return report.finish_as(Verdict::Error, Some(message)),
    };
    record_energy(
        &mut report,
        power,
        &mllog_path,
        f64::from(summary.epochs_completed) * train_len as f64,
    );
    let target = job.recipe.target_accuracy;
    report.metric("epochs", f64::from(summary.epochs_completed), "epochs");
    report.metric("steps", summary.steps as f64, "steps");
    if let Some(t) = summary.time_to_target_s {
        report.metric("time_to_target_s", t, "s");
    }
    if let Some(a) = summary.final_accuracy() {
        report.metric("final_accuracy", a, "fraction");
    }
    if let Some(a) = summary.best_accuracy() {
        report.metric("best_accuracy", a, "fraction");
    }
    report.metric("img_per_s", summary.train_images_per_s, "img/s");
    if job.recipe.precision.needs_loss_scaling() {
        report.metric("skipped_steps", summary.skipped_steps as f64, "steps");
        report.metric("final_loss_scale", f64::from(summary.loss_scale), "factor");
    }
    if summary.skipped_steps > 0 {
        report.findings.push(format!(
            "{} step(s) skipped because their gradients overflowed; the loss scale ended at {}",
            summary.skipped_steps, summary.loss_scale
        ));
    }
    report.metric("run_seconds", summary.run_seconds, "s");
    report.metric(
        "unreadable_images",
        summary.unreadable_files as f64,
        "images",
    );
    if summary.unreadable_files > 0 {
        report.findings.push(format!(
            "{} unreadable image file(s) were replaced by other images of their class \
             (see the worker log for their paths)",
            summary.unreadable_files
        ));
    }
    for e in &summary.mllog_errors {
        report.findings.push(format!("MLLOG line not written: {e}"));
    }
    let found = summary
        .best_accuracy()
        .map_or("no evaluation".to_string(), |a| format!("{a:.4}"));
    let reached = summary.reason == StopReason::TargetReached;
    report.checks.push(Check {
        name: "top-1 accuracy reaches the target".into(),
        subject: None,
        expected: format!("≥ {target}"),
        found,
        verdict: Verdict::pass_if(reached),
    });
    let message = match summary.time_to_target_s {
        Some(t) if reached => format!(
            "{} reached top-1 {:.4} in {} epochs, {t:.1} s",
            job.model.name(),
            summary.final_accuracy().unwrap_or(0.0),
            summary.epochs_completed
        ),
        _ if summary.reason == StopReason::EpochsExhausted => {
            short_of_target(&summary.evals, target, job.recipe.train_epochs)
        }
        _ => summary.reason.describe(target),
    };
    match summary.reason {
        StopReason::TargetReached | StopReason::EpochsExhausted => report.finish(Some(message)),
        StopReason::NonFiniteLoss { .. } | StopReason::GradientsOverflowed { .. } => {
            report.finish_as(Verdict::Fail, Some(message))
        }
        StopReason::Cancelled => report.finish_as(
            Verdict::Skip,
            Some(format!(
                "cancelled after {} steps ({} epochs); the MLLOG ends with run_stop aborted",
                summary.steps, summary.epochs_completed
            )),
        ),
        StopReason::Failed(_) => report.finish_as(Verdict::Error, Some(message)),
    }
}

/// The run's energy the MLPerf way, from its power log over its MLLOG's time to train:
/// joules, kWh and images per joule, and what the readings measured.
pub(crate) fn record_energy(
    report: &mut StageReport,
    power: Result<PowerLogOutcome, String>,
    mllog: &Path,
    images: f64,
) {
    let outcome = match power {
        Ok(outcome) => outcome,
        Err(why) => {
            report.findings.push(format!("no MLPerf power log: {why}"));
            return;
        }
    };
    report.findings.push(format!(
        "MLPerf power log: {} ({} readings, {} missed; {})",
        outcome.path.display(),
        outcome.readings,
        outcome.missed,
        outcome.label
    ));
    let run_ms = crate::mlperf::log::MlLogText::read(mllog)
        .ok()
        .and_then(|log| match crate::mlperf::score::run_start_stop(&log) {
            (Some(start), Some(stop)) => Some(stop - start),
            _ => None,
        });
    let power_log = crate::mlperf::log::MlLogText::read(&outcome.path);
    let energy = match (run_ms, power_log) {
        (Some(ms), Ok(log)) => crate::mlperf::energy::node_energy_j(&log, ms),
        (None, _) => Err("the MLLOG has no run_start and run_stop".into()),
        (_, Err(e)) => Err(e.to_string()),
    };
    match energy {
        Ok(joules) => {
            report.metric("mlperf_energy_j", joules, "J");
            report.metric(
                "mlperf_energy_kwh",
                crate::runtime::telemetry::joules_to_kwh(joules),
                "kWh",
            );
            if joules > 0.0 {
                report.metric("mlperf_img_per_j", images / joules, "img/J");
            }
            report.metric(
                "mlperf_wall_power",
                if outcome.wall { 1.0 } else { 0.0 },
                "bool",
            );
        }
        Err(e) => report
            .findings
            .push(format!("no MLPerf energy for the run: {e}")),
    }
}

fn describe_loss_scaling(scaling: LossScaling) -> String {
    match scaling {
        LossScaling::None => "no loss scaling".into(),
        LossScaling::Static(s) => format!("static loss scale {s}"),
        LossScaling::Dynamic {
            initial,
            growth_interval,
        } => format!(
            "dynamic loss scale from {initial}, halved on overflow, doubled after \
             {growth_interval} clean steps"
        ),
    }
}

fn mllog_error(e: MlLogError) -> String {
    format!("MLLOG: {e}")
}

fn loaders(dataset: &Dataset, job: &TrainJob) -> Result<TrainData, String> {
    let mut train_cfg = LoaderConfig::train(
        job.recipe.global_batch_size,
        job.image_size,
        job.recipe.seed,
    );
    train_cfg.crop_scale = (job.recipe.crop_min_scale, 1.0);
    let mut eval_cfg = LoaderConfig::eval(job.recipe.eval_batch_size, job.image_size);
    if let Some(t) = job.loader_threads {
        train_cfg.threads = t;
        eval_cfg.threads = t;
    }
    let train = Loader::new(Arc::new(dataset.train.clone()), train_cfg)
        .map_err(|e| format!("the training split: {e}"))?;
    let eval = Loader::new(Arc::new(dataset.val.clone()), eval_cfg)
        .map_err(|e| format!("the validation split: {e}"))?;
    Ok(TrainData { train, eval })
}

/// The run folder, or a new temporary one (said on stderr) for a run nobody records.
fn run_folder(
    ctx: &StageContext<'_>,
    stage: &str,
    result_folder: Option<&str>,
) -> Result<PathBuf, String> {
    let dir = match &ctx.run_dir {
        Some(d) => match result_folder {
            Some(sub) => d.join(sub),
            None => d.clone(),
        },
        None => {
            let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%S");
            let dir = std::env::temp_dir()
                .join(format!("tinyperf-{stage}-{stamp}-{}", std::process::id()));
            eprintln!(
                "the run is not recorded: its MLLOG goes to {}",
                dir.join(MLLOG_FILE).display()
            );
            dir
        }
    };
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the run folder {}: {e}", dir.display()))?;
    Ok(dir)
}

/// The inventory an earlier stage took, or a fresh one (reported as this run's).
fn hardware(ctx: &mut StageContext<'_>) -> Value {
    if let Some(h) = &ctx.hardware {
        return h.clone();
    }
    let report = crate::inventory::take(&ctx.root, ctx.sku.as_deref(), false);
    match serde_json::to_value(&report) {
        Ok(hardware) => {
            (ctx.emit)(WorkerEvent::Hardware {
                hardware: hardware.clone(),
            });
            ctx.hardware = Some(hardware.clone());
            hardware
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot serialise the inventory");
            Value::Null
        }
    }
}

fn write_system_description(
    run_dir: &Path,
    hardware: &Value,
    platform: &str,
    submitter: &str,
    division: Division,
    report: &mut StageReport,
) {
    let path = run_dir.join(SYSTEM_DESC_FILE);
    let description = system_description(
        hardware,
        platform,
        submitter,
        &SoftwareStack::of_this_system(),
        division,
    );
    let written = serde_json::to_vec_pretty(&description)
        .map_err(|e| e.to_string())
        .and_then(|bytes| std::fs::write(&path, bytes).map_err(|e| e.to_string()));
    match written {
        Ok(()) => report
            .findings
            .push(format!("system description: {}", path.display())),
        Err(e) => report.findings.push(format!(
            "cannot write the system description {}: {e}",
            path.display()
        )),
    }
}

/// Where a run trains: one device, or one replica per device joined by a collective.
enum Devices<B: Backend> {
    One(B),
    Replicas(Vec<B>, Box<dyn AllReduce<B>>),
}

/// The model, or its replicas, built on the run's devices; boxed so the variants weigh
/// the same.
enum Trainee<B: Backend> {
    One(B, Box<ResNet<B>>),
    Replicas(DataParallel<B, ResNet<B>>),
}

/// Everything a training run needs besides its devices.
struct TrainingRun<'r> {
    job: &'r TrainJob,
    power: &'r PowerLog,
    dataset: &'r Dataset,
    config: &'r crate::engine::mllog::RunConfig,
    platform: &'r str,
    submitter: &'r str,
    division: Division,
    mllog_path: &'r Path,
}

impl TrainingRun<'_> {
    /// Logs the MLLOG header, builds the model on each device (every replica from the
    /// recipe's seed), and trains.
    fn on<B: Backend>(
        &self,
        devices: Devices<B>,
        ctx: &mut StageContext<'_>,
    ) -> Result<TrainSummary, String> {
        let job = self.job;
        let config = self.config;
        let mut log = MlLog::create(self.mllog_path).map_err(|e| e.to_string())?;
        let mut submission = Submission::resnet(self.submitter, self.platform);
        submission.division = self.division;
        log.submission(&submission).map_err(mllog_error)?;
        let dataset = &self.dataset;
        let flush = flush_page_cache(
            dataset
                .train
                .samples
                .iter()
                .chain(&dataset.val.samples)
                .map(|sample| sample.path.as_path()),
        );
        ctx.progress(0.0, Some(flush.describe()));
        log.cache_clear(flush.flushed()).map_err(mllog_error)?;
        log.init_start().map_err(mllog_error)?;
        let build = |backend: &B| {
            job.model.build(
                backend,
                self.dataset.num_classes(),
                job.image_size,
                job.recipe.seed,
            )
        };
        let mut trainee = match devices {
            Devices::One(backend) => {
                let model = build(&backend).map_err(|e| {
                    format!(
                        "cannot build {} on {}: {e}",
                        job.model.name(),
                        backend.name()
                    )
                })?;
                Trainee::One(backend, Box::new(model))
            }
            Devices::Replicas(backends, collective) => Trainee::Replicas(
                data_parallel_for(&job.recipe, backends, collective, build)
                    .map_err(|e| format!("cannot build {}: {e}", job.model.name()))?,
            ),
        };
        let data = loaders(self.dataset, job).map_err(|e| format!("cannot load {e}"))?;
        log.init_stop().map_err(mllog_error)?;
        self.power.begin();
        log.run_start().map_err(mllog_error)?;
        log.run_header(config).map_err(mllog_error)?;
        let steps_per_epoch = data.train.batches_per_epoch() as u64;
        let mut observer = StageObserver {
            ctx,
            planned_steps: steps_per_epoch * u64::from(job.recipe.train_epochs),
            planned_epochs: job.recipe.train_epochs,
            global_step: 0,
            started: std::time::Instant::now(),
            last_step_point: None,
        };
        Ok(match &mut trainee {
            Trainee::One(backend, model) => train(
                backend,
                model.as_mut(),
                &job.recipe,
                &data,
                Some(&mut log),
                &mut observer,
            ),
            Trainee::Replicas(dp) => {
                train_data_parallel(dp, &job.recipe, &data, Some(&mut log), &mut observer)
            }
        })
    }
}

/// The least time between two live step figures: enough for a chart, few enough
/// lines for a run of many thousand steps.
const STEP_POINT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Turns the loop's reports into stage progress events and live training figures.
struct StageObserver<'c, 'a> {
    ctx: &'c mut StageContext<'a>,
    planned_steps: u64,
    planned_epochs: u32,
    global_step: u64,
    started: std::time::Instant,
    last_step_point: Option<std::time::Instant>,
}

impl StageObserver<'_, '_> {
    fn fraction(&self) -> f64 {
        if self.planned_steps == 0 {
            0.0
        } else {
            self.global_step as f64 / self.planned_steps as f64
        }
    }
}

impl TrainObserver for StageObserver<'_, '_> {
    fn cancelled(&self) -> bool {
        self.ctx.cancelled()
    }

    fn on_step(&mut self, r: &StepReport) {
        self.global_step = r.global_step;
        let message = format!(
            "epoch {} step {}/{} loss {:.3} acc {:.2} {:.0} img/s lr {:.4}",
            r.epoch, r.step, r.steps_per_epoch, r.loss, r.accuracy, r.images_per_s, r.lr
        );
        let fraction = self.fraction();
        self.ctx.progress(fraction, Some(message));
        let now = std::time::Instant::now();
        let due = self
            .last_step_point
            .is_none_or(|last| now.duration_since(last) >= STEP_POINT_INTERVAL);
        if due || r.global_step == self.planned_steps {
            self.last_step_point = Some(now);
            self.send_point(TrainPoint {
                stage: self.ctx.stage_name.to_string(),
                kind: TrainPointKind::Step,
                epoch: r.epoch,
                planned_epochs: self.planned_epochs,
                global_step: r.global_step,
                planned_steps: self.planned_steps,
                loss: Some(f64::from(r.loss)),
                accuracy: Some(r.accuracy),
                images_per_s: r.images_per_s,
                lr: Some(r.lr),
                eval_accuracy: None,
                elapsed_s: self.started.elapsed().as_secs_f64(),
            });
        }
    }

    fn on_epoch(&mut self, r: &EpochReport) {
        let eval = r
            .eval_accuracy
            .map_or(String::new(), |a| format!(" eval top-1 {a:.4}"));
        let message = format!(
            "epoch {}/{} done: loss {:.3} train acc {:.2} {:.0} img/s lr {:.4}{eval}",
            r.epoch, r.planned_epochs, r.mean_loss, r.train_accuracy, r.images_per_s, r.lr
        );
        let fraction = self.fraction();
        self.ctx.progress(fraction, Some(message));
        self.send_point(TrainPoint {
            stage: self.ctx.stage_name.to_string(),
            kind: TrainPointKind::Epoch,
            epoch: r.epoch,
            planned_epochs: r.planned_epochs,
            global_step: self.global_step,
            planned_steps: self.planned_steps,
            loss: Some(r.mean_loss),
            accuracy: Some(r.train_accuracy),
            images_per_s: r.images_per_s,
            lr: Some(r.lr),
            eval_accuracy: r.eval_accuracy,
            elapsed_s: self.started.elapsed().as_secs_f64(),
        });
    }
}

impl StageObserver<'_, '_> {
    fn send_point(&mut self, point: TrainPoint) {
        (self.ctx.emit)(WorkerEvent::Train { point });
    }
}

/// Evaluations closer together than this count as level, not rising.
const STILL_RISING: f64 = 0.005;

/// Why a run that used its planned epochs missed the target, how far it got, and what to
/// change: more epochs while its evaluations still rise, else a lower target.
fn short_of_target(evals: &[(u32, f64)], target: f64, planned_epochs: u32) -> String {
    let epochs = if planned_epochs == 1 {
        "epoch"
    } else {
        "epochs"
    };
    let Some(&(best_epoch, best)) = evals.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return format!(
            "the {planned_epochs} planned {epochs} ended with no evaluation, so the target \
             accuracy {target} was never checked; give it more epochs (-o train_epochs=N)"
        );
    };
    let rising = match evals {
        [.., (_, before), (_, last)] => last - before > STILL_RISING,
        _ => true,
    };
    let advice = if rising {
        format!(
            "top-1 was still rising: give it more epochs (-o train_epochs=N, {planned_epochs} \
             now) or a lower target (-o target_accuracy=X)"
        )
    } else {
        format!(
            "top-1 had levelled off: a lower target (-o target_accuracy=X) fits this dataset \
             better than more epochs ({planned_epochs} now)"
        )
    };
    format!(
        "the {planned_epochs} planned {epochs} ended {:.3} short of the target accuracy {target}: \
         best top-1 {best:.4} at epoch {best_epoch}; {advice}",
        (target - best).max(0.0)
    )
}

#[cfg(test)]
mod tests {
    use super::short_of_target;

    #[test]
    fn a_missed_target_says_how_far_it_got_and_what_to_change() {
        let rising = short_of_target(&[(2, 0.70), (3, 0.80), (4, 0.86)], 0.9, 4);
        assert!(
            rising.contains("0.040 short of the target accuracy 0.9"),
            "{rising}"
        );
        assert!(rising.contains("best top-1 0.8600 at epoch 4"), "{rising}");
        assert!(
            rising.contains("more epochs (-o train_epochs=N, 4 now)"),
            "{rising}"
        );
        let level = short_of_target(&[(3, 0.851), (4, 0.853)], 0.9, 4);
        assert!(
            level.contains("levelled off") && level.contains("target_accuracy"),
            "{level}"
        );
        let none = short_of_target(&[], 0.9, 3);
        assert!(none.contains("no evaluation"), "{none}");
    }
}
