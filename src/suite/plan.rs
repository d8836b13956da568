//! The one preflight of a run: a suite name and raw options become a checked plan.
//! Every option is validated here once, with its error; the recipe is resolved once;
//! the dataset and the disk it needs are estimated. The agent calls only this before
//! it starts a worker, and the worker executes the plan it is handed without checking
//! the options again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::external::{self, ExternalSpec};
use super::options::{self, DATASET, RUNS};
use super::{
    burn_in, cpu_gemm, gpu_allreduce, gpu_bandwidth, gpu_devices, gpu_gemm, gpu_p2p, health,
    inventory_stage, mlperf_package, mlperf_resnet, smoke, train_throughput, training,
};
use crate::engine::backend::select::BackendKind;
use crate::engine::data::{synth_cache, SynthSpec};
use crate::engine::recipe::Recipe;
use crate::record::StageResult;

/// The size budget of the generated datasets in a cache folder unless configured.
pub const DEFAULT_CACHE_BUDGET_BYTES: u64 = synth_cache::DEFAULT_BUDGET_BYTES;

/// An option or suite that cannot be run, with the reason in words an operator acts on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

/// Where a run keeps what outlives it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workspace {
    /// The folder of the generated datasets, kept between runs.
    pub cache_dir: PathBuf,
    /// How many bytes the generated datasets may take in `cache_dir` together.
    pub cache_budget: u64,
    /// The ImageNet folder `mlperf-resnet` trains on when its options name none
    /// (`None`: [`mlperf_resnet::DEFAULT_DATASET`]).
    pub imagenet: Option<PathBuf>,
}

impl Workspace {
    /// The workspace of a run recorded in the state folder `state_dir` (or writing
    /// into the run folder `run_dir`), with the default cache budget.
    pub fn for_run(state_dir: Option<&Path>, run_dir: Option<&Path>) -> Workspace {
        Workspace {
            cache_dir: cache_dir_for(state_dir, run_dir),
            cache_budget: DEFAULT_CACHE_BUDGET_BYTES,
            imagenet: None,
        }
    }
}

/// What a run trains on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DatasetPlan {
    /// The suite reads no dataset.
    None,
    /// A folder in ImageNet layout (train/ and val/, a folder per class).
    Folder {
        /// The dataset's root folder.
        path: PathBuf,
    },
    /// The generated dataset, made in the cache folder on first use; `new_bytes` is
    /// what making it adds there (0 when it is cached already).
    Generated {
        /// What to generate (classes, images per class, size, seed); it also names the
        /// dataset's folder in the cache.
        spec: SynthSpec,
        /// Bytes that making it adds to the cache folder; 0 when it is cached already.
        new_bytes: u64,
    },
}

/// One step of a suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageKind {
    /// PCI, CPU, memory and NVMe inventory with the box's expectations.
    Inventory,
    /// The CPU's sustained GEMM beside its peak.
    CpuGemm,
    /// Each GPU's matmul TFLOP/s.
    GpuGemm,
    /// Host↔device copy bandwidth of each GPU.
    GpuBandwidth,
    /// Peer copies between every pair of GPUs.
    GpuP2p,
    /// The all-reduce bus bandwidth across the GPUs.
    GpuAllReduce,
    /// ResNet-50 training throughput and the time to train it projects.
    TrainThroughput,
    /// A small ResNet trained to a target accuracy.
    Smoke,
    /// One MLPerf ResNet-50 time-to-train run.
    MlperfResnet,
    /// Run `n` (1-based) of an `mlperf-resnet` suite of several runs.
    MlperfResnetRun(u8),
    /// The submission package of the runs before it.
    MlperfPackage,
    /// Another framework's benchmark, run as a command.
    External,
    /// The silent-corruption check, its load `health`'s minutes or `acceptance`'s seconds.
    GpuCorruption {
        /// Whether the load lasts `acceptance`'s seconds rather than `health`'s minutes.
        short: bool,
    },
    /// AER counters, replays and the link under load.
    LinkHealth,
    /// The kernel's messages about the GPUs and links.
    KernelMessages,
    /// A pattern test over each GPU's memory.
    GpuMemory,
    /// Every GPU switched between load and idle together.
    PowerPulse,
    /// One GPU at full load, then two, … up to all.
    PowerRamp,
    /// Throttling and temperatures under sustained load.
    Throttling,
    /// The burn-in's training time and the whole run's temperatures against the box's
    /// limits.
    BurnInLimits,
}

impl StageKind {
    /// The stage's name in events, records and metrics.
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
            StageKind::PowerRamp => health::ramp_stage::NAME,
            StageKind::Throttling => health::throttle_stage::NAME,
            StageKind::BurnInLimits => burn_in::LIMITS_STAGE,
        }
    }
}

/// A run, checked and resolved: what the worker executes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    /// The suite's name.
    pub suite: String,
    /// The options as given, every one of them checked.
    pub options: Map<String, Value>,
    /// The stages in the order they run.
    pub stages: Vec<StageKind>,
    /// The compute backend the options ask for.
    pub backend: BackendKind,
    /// The training recipe with the options applied, for the suites that train.
    pub recipe: Option<Recipe>,
    /// The command of an external benchmark, for the `external` suite.
    pub external: Option<ExternalSpec>,
    /// What the run trains on.
    pub dataset: DatasetPlan,
    /// The cache folder and ImageNet path the plan was made for.
    pub workspace: Workspace,
    /// The interrupted run this one takes up, when it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<Resume>,
}

/// What a run taking up an interrupted one carries over from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Resume {
    /// The interrupted run's id.
    pub from_run: String,
    /// Its finished stages, as they ended: they are not run again.
    pub carried: Vec<StageResult>,
    /// Its `telemetry.csv`, whose temperatures count toward this run's peaks.
    pub telemetry: Option<PathBuf>,
}

impl RunPlan {
    /// Bytes the run adds to the state folder before it has results: the generated
    /// dataset it makes, when it is not cached yet.
    pub fn dataset_bytes_needed(&self) -> u64 {
        match self.dataset {
            DatasetPlan::Generated { new_bytes, .. } => new_bytes,
            DatasetPlan::None | DatasetPlan::Folder { .. } => 0,
        }
    }
}

/// Checks `suite` and `options` and plans the run in `workspace`: the stages, the
/// backend, the recipe, the external command and the dataset, with the bytes a
/// generated dataset would add to the cache. A generated dataset larger than the
/// cache's budget is refused here, before anything is written.
pub fn preflight(
    suite: &str,
    options: Map<String, Value>,
    workspace: Workspace,
) -> Result<RunPlan, PlanError> {
    let checked = check(suite, &options)?;
    let dataset = dataset_plan(suite, &options, &workspace)?;
    Ok(RunPlan {
        suite: suite.to_string(),
        stages: stages_of(suite, &options)
            .ok_or_else(|| PlanError(format!("suite {suite} has no plan")))?,
        backend: gpu_devices::backend_kind(&options),
        recipe: checked.recipe,
        external: checked.external,
        dataset,
        workspace,
        options,
        resume: None,
    })
}

/// Checks `suite` and `options` as [`preflight`] does, without a workspace: for a
/// configuration read before any run (the boot suite's options).
pub fn check_options(suite: &str, options: &Map<String, Value>) -> Result<(), PlanError> {
    check(suite, options).map(|_| ())
}

/// What checking the options resolved.
struct Checked {
    recipe: Option<Recipe>,
    external: Option<ExternalSpec>,
}

fn check(suite: &str, options: &Map<String, Value>) -> Result<Checked, PlanError> {
    if super::NOT_IMPLEMENTED_SUITES.contains(&suite) {
        return Err(PlanError(format!(
            "suite {suite} is not implemented in this build (available: {})",
            super::SUITES.join(", ")
        )));
    }
    if !super::is_known_suite(suite) {
        return Err(PlanError(format!(
            "unknown suite {} (available: {})",
            crate::echo::quoted(suite),
            super::SUITES.join(", ")
        )));
    }
    if suite == external::NAME {
        let spec = external::spec(options).map_err(PlanError)?;
        return Ok(Checked {
            recipe: None,
            external: Some(spec),
        });
    }
    if suite == burn_in::NAME {
        return check_burn_in(options);
    }
    options::validate(suite, options).map_err(PlanError)?;
    let recipe = if options::takes_recipe(suite) {
        Some(training::recipe_for(suite, options).map_err(|e| PlanError(e.to_string()))?)
    } else {
        None
    };
    Ok(Checked {
        recipe,
        external: None,
    })
}

/// A burn-in trains with tinyperf's own recipe, or runs the external benchmark its
/// options give; recipe keys beside a benchmark would be silently unused, so they are
/// refused.
fn check_burn_in(options: &Map<String, Value>) -> Result<Checked, PlanError> {
    let (external_options, own) = burn_in::split_options(options);
    options::validate(burn_in::NAME, &own).map_err(PlanError)?;
    if external_options.is_empty() {
        let recipe =
            training::recipe_for(burn_in::NAME, &own).map_err(|e| PlanError(e.to_string()))?;
        return Ok(Checked {
            recipe: Some(recipe),
            external: None,
        });
    }
    let training_keys: Vec<&str> = own
        .keys()
        .map(String::as_str)
        .filter(|key| {
            crate::engine::recipe::OPTION_KEYS
                .iter()
                .any(|o| o.key == *key)
                || [
                    options::DATASET.key,
                    options::IMAGE_SIZE.key,
                    options::LOADER_THREADS.key,
                    options::SUBMITTER.key,
                ]
                .contains(key)
        })
        .collect();
    if !training_keys.is_empty() {
        return Err(PlanError(format!(
            "a burn-in with an external benchmark trains with that benchmark's own settings; \
             the options {} are for tinyperf's own training",
            training_keys.join(", ")
        )));
    }
    let spec = external::spec(&external_options).map_err(PlanError)?;
    Ok(Checked {
        recipe: None,
        external: Some(spec),
    })
}

fn dataset_plan(
    suite: &str,
    options: &Map<String, Value>,
    workspace: &Workspace,
) -> Result<DatasetPlan, PlanError> {
    let named = options::text(options, DATASET).map(PathBuf::from);
    Ok(match suite {
        smoke::NAME => match named {
            Some(path) => DatasetPlan::Folder { path },
            None => {
                let spec = smoke::synth_spec_of(options);
                synth_cache::check_fits(&spec, workspace.cache_budget).map_err(PlanError)?;
                let new_bytes = if synth_cache::is_cached(&workspace.cache_dir, &spec) {
                    0
                } else {
                    synth_cache::estimated_bytes(&spec)
                };
                DatasetPlan::Generated { spec, new_bytes }
            }
        },
        mlperf_resnet::NAME => DatasetPlan::Folder {
            path: named
                .or_else(|| workspace.imagenet.clone())
                .unwrap_or_else(|| PathBuf::from(mlperf_resnet::DEFAULT_DATASET)),
        },
        burn_in::NAME if burn_in::uses_external(options) => DatasetPlan::None,
        burn_in::NAME => {
            let path = named
                .or_else(|| workspace.imagenet.clone())
                .unwrap_or_else(|| PathBuf::from(mlperf_resnet::DEFAULT_DATASET));
            // Hours of health checks before a training run that cannot start would be a
            // burn-in that proves nothing: refuse before anything runs.
            if !path.join("train").is_dir() || !path.join("val").is_dir() {
                return Err(PlanError(format!(
                    "burn-in trains ResNet-50 on ImageNet, which is not at {} (looked for its \
                     train/ and val/ folders): put it there, give its path as the dataset \
                     option, or train with a configured external benchmark (benchmark=NAME)",
                    path.display()
                )));
            }
            DatasetPlan::Folder { path }
        }
        _ => DatasetPlan::None,
    })
}

/// The stages of `suite` with `options`: `mlperf-resnet` with `runs=N` trains N times
/// and, for five runs, packages them.
pub fn stages_of(suite: &str, options: &Map<String, Value>) -> Option<Vec<StageKind>> {
    let runs = options.get(RUNS.key).and_then(Value::as_u64).unwrap_or(1);
    if suite == mlperf_resnet::NAME && runs > 1 {
        let mut stages: Vec<StageKind> = (1..=runs.min(mlperf_resnet::MAX_RUNS as u64))
            .map(|n| StageKind::MlperfResnetRun(n as u8))
            .collect();
        if runs as usize == crate::mlperf::score::RESULTS_NEEDED {
            stages.push(StageKind::MlperfPackage);
        }
        return Some(stages);
    }
    if suite == burn_in::NAME && burn_in::uses_external(options) {
        let mut stages = suite_stages(suite)?;
        for stage in stages.iter_mut() {
            if *stage == StageKind::MlperfResnet {
                *stage = StageKind::External;
            }
        }
        return Some(stages);
    }
    suite_stages(suite)
}

/// The stages of `suite` with its default options, in order.
pub fn suite_stages(suite: &str) -> Option<Vec<StageKind>> {
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
            StageKind::GpuGemm,
            StageKind::GpuCorruption { short: false },
            StageKind::GpuMemory,
            StageKind::LinkHealth,
            StageKind::Throttling,
            StageKind::PowerPulse,
            StageKind::PowerRamp,
        ]),
        // The whole health suite, then the training run it exists for, then its judge.
        "burn-in" => suite_stages("health").map(|mut stages| {
            stages.extend([StageKind::MlperfResnet, StageKind::BurnInLimits]);
            stages
        }),
        "smoke" => Some(vec![StageKind::Smoke]),
        "mlperf-resnet" => Some(vec![StageKind::MlperfResnet]),
        "external" => Some(vec![StageKind::External]),
        _ => None,
    }
}

/// The state folder of a recorded run: `STATE` for a run folder `STATE/runs/<id>`.
pub fn state_dir_of(run_dir: &Path) -> Option<PathBuf> {
    let runs = run_dir.parent()?;
    if runs.file_name()? != "runs" {
        return None;
    }
    runs.parent().map(Path::to_path_buf)
}

/// Where generated datasets are cached: `STATE/cache` for a run recorded in a state
/// folder (a run folder `STATE/runs/<id>` names its state folder too), else
/// `$XDG_CACHE_HOME/tinyperf` or `~/.cache/tinyperf`, else the temporary folder.
pub fn cache_dir_for(state_dir: Option<&Path>, run_dir: Option<&Path>) -> PathBuf {
    if let Some(state) = state_dir
        .map(Path::to_path_buf)
        .or_else(|| run_dir.and_then(state_dir_of))
    {
        return state.join("cache");
    }
    if let Some(xdg) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(xdg).join("tinyperf");
    }
    if let Some(home) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(home).join(".cache").join("tinyperf");
    }
    std::env::temp_dir().join("tinyperf-cache")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(m) => m,
            _ => unreachable!("a JSON object"),
        }
    }

    fn workspace(dir: &Path, budget: u64) -> Workspace {
        Workspace {
            cache_dir: dir.to_path_buf(),
            cache_budget: budget,
            imagenet: None,
        }
    }

    #[test]
    fn plans_name_their_stages() {
        let names = |s| {
            suite_stages(s)
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
                "gpu-gemm",
                "gpu-corruption",
                "gpu-memory",
                "link-health",
                "throttling",
                "power-pulse",
                "power-ramp"
            ]
        );
        assert_eq!(names("smoke"), ["smoke"]);
        assert_eq!(names("mlperf-resnet"), ["mlperf-resnet"]);
        assert!(suite_stages("nope").is_none());
        let mut five = Map::new();
        five.insert("runs".into(), 5.into());
        let stages: Vec<&str> = stages_of("mlperf-resnet", &five)
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
        assert_eq!(stages_of("mlperf-resnet", &five).unwrap().len(), 2);
        assert_eq!(stages_of("smoke", &five).unwrap().len(), 1);
    }

    #[test]
    fn the_state_folder_is_the_runs_folders_parent() {
        assert_eq!(
            state_dir_of(Path::new("/var/lib/tinyperf/runs/abc")),
            Some(PathBuf::from("/var/lib/tinyperf"))
        );
        assert_eq!(state_dir_of(Path::new("/tmp/somewhere/abc")), None);
        assert_eq!(state_dir_of(Path::new("/")), None);
    }

    #[test]
    fn cache_dir_follows_the_state_folder() {
        assert_eq!(
            cache_dir_for(Some(Path::new("/s")), None),
            Path::new("/s/cache")
        );
        assert_eq!(
            cache_dir_for(None, Some(Path::new("/var/lib/tinyperf/runs/abc"))),
            Path::new("/var/lib/tinyperf/cache")
        );
    }

    #[test]
    fn a_smoke_plan_resolves_its_recipe_backend_and_generated_dataset_once() {
        let dir = tempfile::tempdir().unwrap();
        let options = map(json!({"batch_size": 64, "backend": "cpu", "synth_classes": 3}));
        let plan = preflight("smoke", options, workspace(dir.path(), 1 << 30)).unwrap();
        assert_eq!(plan.stages, [StageKind::Smoke]);
        assert_eq!(plan.backend, BackendKind::Cpu);
        assert_eq!(plan.recipe.as_ref().unwrap().global_batch_size, 64);
        let DatasetPlan::Generated { spec, new_bytes } = &plan.dataset else {
            panic!("a generated dataset: {:?}", plan.dataset);
        };
        assert_eq!(spec.classes, 3);
        assert!(*new_bytes > 0);
        assert_eq!(plan.dataset_bytes_needed(), *new_bytes);
    }

    #[test]
    fn a_plan_survives_the_trip_to_the_worker_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let plan = preflight(
            "smoke",
            map(json!({"base_lr": 0.3, "label_smoothing": 0.05, "precision": "bf16"})),
            workspace(dir.path(), 1 << 30),
        )
        .unwrap();
        let text = serde_json::to_string(&plan).unwrap();
        let back: RunPlan = serde_json::from_str(&text).unwrap();
        assert_eq!(back, plan);
    }

    #[test]
    fn a_named_dataset_or_the_configured_imagenet_is_planned_as_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let plan = preflight(
            "smoke",
            map(json!({"dataset": "/data/flowers"})),
            workspace(dir.path(), 1),
        )
        .unwrap();
        assert_eq!(
            plan.dataset,
            DatasetPlan::Folder {
                path: "/data/flowers".into()
            }
        );
        assert_eq!(plan.dataset_bytes_needed(), 0);
        let mut ws = workspace(dir.path(), 1);
        ws.imagenet = Some("/raid/other".into());
        let plan = preflight("mlperf-resnet", Map::new(), ws).unwrap();
        assert_eq!(
            plan.dataset,
            DatasetPlan::Folder {
                path: "/raid/other".into()
            }
        );
    }

    #[test]
    fn bad_options_and_unknown_suites_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let ws = || workspace(dir.path(), 1 << 30);
        let err = preflight("acceptance", map(json!({"precision": "fp8"})), ws()).unwrap_err();
        assert!(err.0.contains("precision"), "{err}");
        let err = preflight("nope", Map::new(), ws()).unwrap_err();
        assert!(err.0.contains("unknown suite"), "{err}");
        let err = preflight("smoke", map(json!({"batch_size": 0})), ws()).unwrap_err();
        assert!(err.0.contains("batch_size"), "{err}");
        let err = preflight("external", Map::new(), ws()).unwrap_err();
        assert!(err.0.contains("command"), "{err}");
        assert!(check_options("smoke", &map(json!({"batch_size": 0}))).is_err());
    }

    #[test]
    fn a_generated_dataset_beyond_the_cache_budget_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let err = preflight("smoke", Map::new(), workspace(dir.path(), 1024)).unwrap_err();
        assert!(err.0.contains("budget") || err.0.contains("cache"), "{err}");
    }
}
