//! The command line, as clap sees it.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The parsed command line: one subcommand and its arguments.
#[derive(Debug, Parser)]
#[command(
    name = "tinyperf",
    version,
    about = "Benchmark appliance agent for tinybox GPU machines"
)]
pub struct Cli {
    /// What tinyperf was asked to do.
    #[command(subcommand)]
    pub command: Command,
}

/// What tinyperf does: run the agent, run a suite in this process, talk to a running
/// agent, or work on datasets, GPUs and MLPerf results.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent: D-Bus service, HTTP endpoint, run supervisor.
    Agent(AgentArgs),
    /// Run a suite in this process and record it.
    Run(RunArgs),
    /// Run the `health` suite in this process: exit status 0 when every check passed, 1
    /// when a GPU (or its link) failed one, 3 when a check could not run; a check that only
    /// warns still exits 0. With --kernel-log, judge a saved kernel log instead.
    Health(HealthArgs),
    /// Take the hardware inventory and check it against the box's SKU.
    Detect(DetectArgs),
    /// Ask the agent to start a run.
    Start(StartArgs),
    /// Ask the agent to cancel a run.
    Cancel(RunIdArgs),
    /// Show what the agent is doing.
    Status(ClientArgs),
    /// List recorded runs, newest first.
    Runs(RunsArgs),
    /// Show one run in full.
    Show(RunIdArgs),
    /// Generate, check or measure a training dataset.
    #[command(subcommand)]
    Dataset(DatasetCommand),
    /// Check and measure the GPU backends on this machine's GPUs.
    #[command(subcommand)]
    Gpu(GpuCommand),
    /// Score MLPerf Training ResNet results and write submission packages.
    #[command(subcommand)]
    Mlperf(MlperfCommand),
    /// The box's birth record: the parts it was accepted with, and what changed since.
    #[command(subcommand)]
    Box(BoxCommand),
    /// The OS image this runs on: its version and A/B slots, updates, and factory reset.
    #[command(subcommand)]
    Image(ImageCommand),
    /// The boot check (tinyperf-boot-check.service): keep this OS version only if the
    /// box still passes its boot suite and, on a new version's first boot, performs at
    /// least boot_check_min_ratio of the version it came from. Exit status 0 when the
    /// version stays; 1 when it failed on trial (tinyperf-boot-rejected.service then
    /// marks the boot bad and reboots into the previous version).
    BootCheck(BootCheckArgs),
    /// Print a shell's completion script (bash, zsh, fish, elvish, powershell); `make
    /// install` installs them. Hidden from --help: packaging, not operating the box.
    #[command(hide = true)]
    Completions(CompletionsArgs),
    /// Print the tinyperf(1) manual page, or with --dir write it and one page per
    /// subcommand; `make install` installs them. Hidden from --help like completions.
    #[command(hide = true)]
    Man(ManArgs),
}

/// `tinyperf box`: the box's birth record.
#[derive(Debug, Subcommand)]
pub enum BoxCommand {
    /// Print the record kept for this box's baseboard serial and what changed since (exit
    /// status 1 when something did); with --save, write the box as it is now as its
    /// record.
    Record(BoxRecordArgs),
}

/// `tinyperf image`: the OS image as firmware.
#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Print the OS image's version, the slot it booted from, whether its root is
    /// verified, both slots and the state partition; on another machine, that it is
    /// not a tinybox OS image.
    Status(ImageStatusArgs),
    /// Erase the state partition (runs, records, changes to /etc) in a reboot: as root,
    /// sets systemd-boot's next boot to the running version's factory-reset profile and
    /// reboots. Refused while a run is going; at a terminal it asks for the box's host
    /// name unless --yes.
    FactoryReset(ImageFactoryResetArgs),
    /// Print the OS versions the update source offers (update_url, or --source), newest
    /// first, each marked newer, current, older or rejected (by this box's boot check).
    /// Exit status 1 when the source is unreachable, unsigned or wrongly signed.
    Check(ImageCheckArgs),
    /// Write an OS version (the newest newer one unless named) into the other slot with
    /// systemd-sysupdate, after checking the signature, the checksums, the space and that
    /// no run is going. As root; other users ask the agent (D-Bus Update, POST
    /// /api/v1/image/update). The new version starts at the next boot, on trial.
    Update(ImageUpdateArgs),
}

/// Where `tinyperf image check` and `update` look.
#[derive(Debug, Args)]
pub struct UpdatePlaces {
    /// The update source instead of update_url: an http(s):// folder or a local one.
    #[arg(long, value_name = "URL|DIR")]
    pub source: Option<String>,
    /// The agent's configuration file (update_url, state_dir, image_root).
    #[arg(long, default_value = crate::agent::config::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
    /// Root of the tree the image is read below, instead of image_root.
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// The agent's state folder, instead of state_dir.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

/// `tinyperf image check`.
#[derive(Debug, Args)]
pub struct ImageCheckArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Where to look.
    #[command(flatten)]
    pub places: UpdatePlaces,
}

/// `tinyperf image update`.
#[derive(Debug, Args)]
pub struct ImageUpdateArgs {
    /// The version to write; the newest newer one, not rejected here, when absent.
    pub version: Option<String>,
    /// Reboot into the new version once it is written.
    #[arg(long)]
    pub reboot: bool,
    /// Act on the agent's request: only when STATE/update.request exists, which is
    /// removed first (what tinyperf-update.service runs).
    #[arg(long, conflicts_with = "version")]
    pub requested: bool,
    /// Where to look.
    #[command(flatten)]
    pub places: UpdatePlaces,
    /// The bus the agent is asked on whether a run is going.
    #[arg(long, default_value = "system")]
    pub bus: String,
}

/// `tinyperf boot-check`.
#[derive(Debug, Args)]
pub struct BootCheckArgs {
    /// The unit's failure handler (tinyperf-boot-rejected.service): record a check that
    /// did not finish, and on a boot on trial mark it bad and reboot.
    #[arg(long)]
    pub rejected: bool,
    /// The ratio each figure must keep, instead of boot_check_min_ratio.
    #[arg(long)]
    pub min_ratio: Option<f64>,
    /// How long to wait for the boot run, instead of boot_check_timeout_s.
    #[arg(long)]
    pub timeout_s: Option<f64>,
    /// Judge and record, but neither mark the boot nor reboot: print what would be done.
    #[arg(long)]
    pub dry_run: bool,
    /// The agent's configuration file.
    #[arg(long, default_value = crate::agent::config::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
    /// Root of the tree the image is read below, instead of image_root.
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// The agent's state folder, instead of state_dir.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
}

/// `tinyperf image status`: where the image is read and how to print it.
#[derive(Debug, Args)]
pub struct ImageStatusArgs {
    /// Print the status as JSON, as GET /api/v1/image gives it.
    #[arg(long)]
    pub json: bool,
    /// Root of the tree the image is read below (DIR/usr/lib/os-release, DIR/proc,
    /// DIR/sys).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// The agent's state folder, where a factory-reset request waits.
    #[arg(long, default_value = crate::agent::config::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
}

/// `tinyperf image factory-reset`: how it is confirmed and where things are.
#[derive(Debug, Args)]
pub struct ImageFactoryResetArgs {
    /// Do not ask for the host name.
    #[arg(long)]
    pub yes: bool,
    /// Act on the agent's request: only when STATE/factory-reset.request exists, which
    /// is removed first (what tinyperf-factory-reset.service runs).
    #[arg(long)]
    pub requested: bool,
    /// Root of the tree the image is read below.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// The agent's state folder: the request file and the run store.
    #[arg(long, default_value = crate::agent::config::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// The bus the agent is asked on whether a run is going: `system`, `session`, or a
    /// D-Bus address.
    #[arg(long, default_value = "system")]
    pub bus: String,
}

/// `tinyperf box record`: where the box is read and where its record is kept.
#[derive(Debug, Args)]
pub struct BoxRecordArgs {
    /// Write the box as it is now as its record (`STATE/box/<serial>.json`), replacing the
    /// one kept.
    #[arg(long)]
    pub save: bool,
    /// Print `{"record": ..., "changes": [...], "current": ...}` as JSON.
    #[arg(long)]
    pub json: bool,
    /// Root of the sysfs/procfs tree to read (`DIR/sys`, `DIR/proc`, `DIR/etc`).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// The agent's state folder, where records are kept under `box/`.
    #[arg(long, default_value = crate::agent::config::DEFAULT_STATE_DIR)]
    pub state_dir: PathBuf,
    /// Do not ask the BMC (through ipmitool) who it is.
    #[arg(long)]
    pub no_bmc: bool,
}

/// `tinyperf completions SHELL`: the shell whose script is printed.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `tinyperf man`: print the main page, or write every page into a folder.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write tinyperf.1 and a page per subcommand (tinyperf-run.1, tinyperf-dataset-synth.1,
    /// …) into this folder instead of printing tinyperf.1.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// `tinyperf mlperf`: scoring MLPerf Training results and packaging them for submission.
#[derive(Debug, Subcommand)]
pub enum MlperfCommand {
    /// Score MLLOG files, a results folder or a submission folder as
    /// mlperf_logging.result_summarizer does (ruleset 4.0.0).
    Score(MlperfScoreArgs),
    /// Write a submission package (ORG/systems, ORG/results, ORG/benchmarks) from five
    /// recorded runs.
    Package(MlperfPackageArgs),
}

/// `tinyperf mlperf package`: the runs to package, the names to give them and where.
#[derive(Debug, Args)]
pub struct MlperfPackageArgs {
    /// The submitting organisation: the package's top folder and the system
    /// description's `submitter`.
    #[arg(long)]
    pub org: String,
    /// The system's name: `systems/NAME.json` and `results/NAME/`.
    #[arg(long)]
    pub system: String,
    /// The division the runs were made under (checked against their MLLOG; by default
    /// taken from it).
    #[arg(long, value_parser = ["closed", "open"])]
    pub division: Option<String>,
    /// The folder ORG/ is written in.
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Print what was written, and the package's score, as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run folders (`STATE/runs/<id>/`, with run.json and mllog.txt, or result_N/mllog.txt
    /// for a run of several).
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,
}

/// `tinyperf mlperf score`: the results to score and how to print the scores.
#[derive(Debug, Args)]
pub struct MlperfScoreArgs {
    /// MLLOG files, run folders, `results/<system>/resnet/` folders or submission folders.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Print one JSON object with a `systems` list.
    #[arg(long)]
    pub json: bool,
}

/// `tinyperf gpu`: checking and measuring the GPU backends, compiling their kernels and
/// counting a training step's cost.
#[derive(Debug, Subcommand)]
pub enum GpuCommand {
    /// Every kernel and one training step against the CPU backend, then GEMM TFLOPS and
    /// ResNet-50 training throughput, on each GPU.
    Check(GpuCheckArgs),
    /// Compile the kernels with this machine's NVRTC or hiprtc for the given GPU
    /// architectures, no GPU needed, and check the image holds every kernel.
    Compile(GpuCompileArgs),
    /// FLOPs and device-memory bytes of one ResNet-50 training step (today's kernel
    /// sequence and the fused floor), and the time floors they give on each target GPU.
    /// Counted from the model's layers; needs no GPU.
    Floors(GpuFloorsArgs),
}

/// `tinyperf gpu floors`: the training step to count.
#[derive(Debug, Args)]
pub struct GpuFloorsArgs {
    /// Images per step (per GPU).
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Side of the square training images.
    #[arg(long, default_value_t = 224)]
    pub size: usize,
    /// Activation storage: `fp32`, `fp16` or `bf16`.
    #[arg(long, default_value = "fp16")]
    pub precision: String,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// `tinyperf gpu compile`: the runtime compiler and the architectures to compile for.
#[derive(Debug, Args)]
pub struct GpuCompileArgs {
    /// `cuda` (NVRTC) or `hip` (hiprtc).
    #[arg(long, default_value = "cuda")]
    pub runtime: String,
    /// Architecture to compile for, repeatable (default: sm_89 and sm_90 for cuda, gfx1100
    /// and gfx942 for hip).
    #[arg(long = "arch", value_name = "ARCH")]
    pub archs: Vec<String>,
    /// Print one JSON object (compiler, and per architecture the image's format, target
    /// and kernels) instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// `tinyperf gpu check`: the backend and devices to check, and what to measure on them.
#[derive(Debug, Args)]
pub struct GpuCheckArgs {
    /// `auto`, `cuda` or `hip`.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Check only this device (default: every device).
    #[arg(long)]
    pub device: Option<usize>,
    /// ResNet-50 training throughput batch per GPU.
    #[arg(long, default_value_t = 256)]
    pub batch: usize,
    /// Timed training steps (after the warm-up steps).
    #[arg(long, default_value_t = 10)]
    pub steps: usize,
    /// Untimed training steps before the timed ones.
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Side of the square matrices of the GEMM measurement.
    #[arg(long, default_value_t = 8192)]
    pub gemm_size: usize,
    /// Skip the throughput measurements (correctness checks only).
    #[arg(long)]
    pub quick: bool,
    /// Only ResNet-50 training throughput, in each `--precision` (no correctness checks,
    /// GEMM or all-reduce figures): for timing one configuration at a time.
    #[arg(long, conflicts_with_all = ["quick", "profile"])]
    pub throughput_only: bool,
    /// Activation storage of the throughput measurement, repeatable: `fp32`, `fp16`,
    /// `bf16` (default: fp32 and fp16).
    #[arg(long = "precision", value_name = "PRECISION")]
    pub precisions: Vec<String>,
    /// Also time every kernel and GEMM of one training step (synchronising per launch).
    #[arg(long)]
    pub profile: bool,
    /// Also write the full report as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json_out: Option<PathBuf>,
}

/// `tinyperf dataset`: the generated dataset, and checking and measuring any dataset in
/// ImageNet folder layout.
#[derive(Debug, Subcommand)]
pub enum DatasetCommand {
    /// Write the generated dataset (ImageNet folder layout, real JPEG files) to DIR.
    Synth(SynthArgs),
    /// Scan a dataset in ImageNet folder layout and decode every image.
    Check(DatasetCheckArgs),
    /// Measure the training data pipeline in images per second.
    Bench(DatasetBenchArgs),
}

/// `tinyperf dataset synth`: where to write the generated dataset and how large to make it.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// The folder to create; it must not exist or be empty.
    pub dir: PathBuf,
    /// Number of classes (at most 72).
    #[arg(long, default_value_t = 10)]
    pub classes: usize,
    /// Training images per class.
    #[arg(long, default_value_t = 300)]
    pub per_class: usize,
    /// Validation images per class.
    #[arg(long, default_value_t = 50)]
    pub val_per_class: usize,
    /// Side of the square images in pixels.
    #[arg(long, default_value_t = 64)]
    pub size: usize,
    /// JPEG quality, 1 to 100.
    #[arg(long, default_value_t = 90)]
    pub quality: u8,
    /// Seed the images are drawn from; the same seed and sizes give the same images.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `tinyperf dataset check`: the dataset to scan, whether to decode it, how to print.
#[derive(Debug, Args)]
pub struct DatasetCheckArgs {
    /// The dataset root, holding train/ and val/.
    pub dir: PathBuf,
    /// Only scan the layout; do not decode the images.
    #[arg(long)]
    pub no_decode: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `tinyperf dataset bench`: the dataset and the loader configuration to measure.
#[derive(Debug, Args)]
pub struct DatasetBenchArgs {
    /// The dataset root, holding train/ and val/.
    #[arg(long)]
    pub data: PathBuf,
    /// Loader worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Output side in pixels.
    #[arg(long, default_value_t = 224)]
    pub image_size: usize,
    /// Images per loader batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Use at most this many train images.
    #[arg(long, default_value_t = 2000)]
    pub images: usize,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// `tinyperf agent`: the configuration file and what overrides it.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// Configuration file.
    #[arg(long, default_value = crate::agent::config::DEFAULT_CONFIG_PATH)]
    pub config: PathBuf,
    /// The bus to serve on: `system`, `session`, or a D-Bus address.
    #[arg(long)]
    pub bus: Option<String>,
    /// HTTP listen address, overriding the configuration.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// State directory, overriding the configuration.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Root of the sysfs/procfs tree to inventory (for testing against a tree on disk).
    #[arg(long, default_value = "/", hide = true)]
    pub root: PathBuf,
}

/// How `tinyperf run` reports progress on stdout (`--events`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventFormat {
    /// Readable progress on stdout.
    Human,
    /// One JSON event per line on stdout.
    Jsonl,
}

/// `tinyperf health`: the suite's run, or the judgement of a kernel log from another box.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Judge this saved kernel log (`dmesg`, `dmesg -T`, syslog, `journalctl -k`, its
    /// `-o json`, or a `/dev/kmsg` dump; `-` for standard input) as the `kernel-messages`
    /// check would, instead of running the suite: exit status 0 when nothing serious is in
    /// it, 1 when something is.
    #[arg(long, value_name = "FILE")]
    pub kernel_log: Option<PathBuf>,
    /// With --kernel-log: print the checks and every message found as JSON.
    #[arg(long, requires = "kernel_log")]
    pub json: bool,
    /// The suite's run.
    #[command(flatten)]
    pub run: RunArgs,
}

/// `tinyperf run` and `tinyperf health`: the suite and its options, the backend and
/// dataset, where the run is recorded and how progress is shown.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The suite to run (`inventory`, `acceptance`, `health`, `smoke`, `mlperf-resnet`); `acceptance`
    /// when neither this nor `--suite` is given.
    #[arg(value_name = "SUITE")]
    pub suite: Option<String>,
    /// The suite to run, as a flag.
    #[arg(long = "suite", value_name = "SUITE", conflicts_with = "suite")]
    pub suite_flag: Option<String>,
    /// Train on this dataset folder in ImageNet layout (the `dataset` option).
    #[arg(long, value_name = "DIR")]
    pub dataset: Option<PathBuf>,
    /// Compute backend: `auto` (the best found), `cpu`, `cuda` or `hip` (the `backend`
    /// option). A GPU backend the machine cannot run stops the run with the reason.
    #[arg(long, value_name = "BACKEND")]
    pub backend: Option<String>,
    /// Activation storage of training: `fp32`, or `fp16`/`bf16` mixed precision (the
    /// `precision` option).
    #[arg(long, value_name = "PRECISION")]
    pub precision: Option<String>,
    /// Stop training at this top-1 accuracy (the `target_accuracy` option).
    #[arg(long, value_name = "FRACTION")]
    pub target_accuracy: Option<f64>,
    /// How to report progress: `human` lines, or `jsonl` events (what the agent reads).
    /// Without it, a terminal gets a live progress bar per stage and anything else the
    /// `human` lines.
    #[arg(long, value_enum)]
    pub events: Option<EventFormat>,
    /// Record the run under `DIR/runs/<id>/`.
    #[arg(long, conflicts_with = "run_dir")]
    pub state_dir: Option<PathBuf>,
    /// Write the run's artifacts into this directory; the caller owns the record.
    #[arg(long)]
    pub run_dir: Option<PathBuf>,
    /// Size budget of the generated datasets in the cache folder, in MiB; the least
    /// recently used go first, and one that cannot fit is refused.
    #[arg(long, value_name = "MIB", default_value_t = crate::suite::plan::DEFAULT_CACHE_BUDGET_BYTES >> 20)]
    pub dataset_cache_mb: u64,
    /// Suite options as KEY=VALUE, repeatable.
    #[arg(long = "option", short = 'o', value_name = "KEY=VALUE")]
    pub options: Vec<String>,
    /// Suite options as one JSON object.
    #[arg(long, value_name = "JSON")]
    pub options_json: Option<String>,
    /// The checked plan of the run, as the agent passes it to its worker: executed as
    /// it is, without a suite or options of its own.
    #[arg(
        long,
        value_name = "JSON",
        hide = true,
        conflicts_with_all = ["suite", "suite_flag", "dataset", "backend", "precision", "target_accuracy", "options", "options_json", "dataset_cache_mb"]
    )]
    pub plan_json: Option<String>,
    /// Root of the sysfs/procfs tree to inventory.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Judge the box as this SKU instead of recognising it.
    #[arg(long)]
    pub sku: Option<String>,
    /// Seconds between telemetry samples (power, temperatures, clocks) while a stage runs.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    pub telemetry_interval: f64,
}

impl RunArgs {
    /// The telemetry interval, between 10 ms and one minute.
    pub fn telemetry_interval(&self) -> Result<std::time::Duration, crate::cli::UsageError> {
        let seconds = self.telemetry_interval;
        if !(0.01..=60.0).contains(&seconds) {
            return Err(crate::cli::UsageError(format!(
                "--telemetry-interval must be between 0.01 and 60 seconds, not {seconds}"
            )));
        }
        Ok(std::time::Duration::from_secs_f64(seconds))
    }

    /// The format events are written in: `human` unless `--events` names another.
    pub fn event_format(&self) -> EventFormat {
        self.events.unwrap_or(EventFormat::Human)
    }

    /// Whether progress is drawn as live bars: only for a person at a terminal, so a
    /// pipe, a log file or an explicit `--events` gets plain lines.
    pub fn live_progress(&self) -> bool {
        self.live_progress_on(std::io::IsTerminal::is_terminal(&std::io::stdout()))
    }

    fn live_progress_on(&self, stdout_is_terminal: bool) -> bool {
        stdout_is_terminal && self.events.is_none()
    }

    /// The suite named positionally or by `--suite`, `acceptance` by default.
    pub fn suite_name(&self) -> Result<String, String> {
        match (&self.suite, &self.suite_flag) {
            (Some(a), Some(b)) if a != b => Err(format!("two suites given: {a} and {b}")),
            (Some(s), _) | (None, Some(s)) => Ok(s.clone()),
            (None, None) => Ok("acceptance".to_string()),
        }
    }
}

/// `tinyperf detect`: the tree to inventory, the SKU to judge it as, how to print.
#[derive(Debug, Args)]
pub struct DetectArgs {
    /// Print the inventory as JSON.
    #[arg(long)]
    pub json: bool,
    /// Root of the sysfs/procfs tree to read (`DIR/sys`, `DIR/proc`).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Judge the box as this SKU instead of recognising it.
    #[arg(long)]
    pub sku: Option<String>,
    /// Skip the GPU runtime probe (CUDA, HIP, NVML).
    #[arg(long)]
    pub no_runtime: bool,
}

/// How a client command (`start`, `cancel`, `status`, `runs`, `show`) reaches the agent
/// and prints its answer.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The bus the agent serves on: `system`, `session`, or a D-Bus address.
    #[arg(long, default_value = "system")]
    pub bus: String,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

/// `tinyperf start`: the suite and options the agent is asked to run, and whether to wait.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The suite to run.
    pub suite: String,
    /// Suite options as KEY=VALUE, repeatable.
    #[arg(long = "option", short = 'o', value_name = "KEY=VALUE")]
    pub options: Vec<String>,
    /// Wait for the run to finish; exit 0 only when it passed.
    #[arg(long)]
    pub wait: bool,
    /// The bus the agent is reached on and the output format.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `tinyperf cancel` and `tinyperf show`: the run they act on.
#[derive(Debug, Args)]
pub struct RunIdArgs {
    /// The run's id.
    pub run_id: String,
    /// The bus the agent is reached on and the output format.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `tinyperf runs`: how many runs to list.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// At most this many runs.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    /// The bus the agent is reached on and the output format.
    #[command(flatten)]
    pub client: ClientArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(argv: &[&str]) -> RunArgs {
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Run(args) => args,
            Command::Health(args) => args.run,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_definitions_are_consistent() {
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn bars_only_for_a_terminal_and_no_explicit_events() {
        let plain = run_args(&["tinyperf", "run", "inventory"]);
        assert_eq!(plain.event_format(), EventFormat::Human);
        assert!(plain.live_progress_on(true));
        assert!(!plain.live_progress_on(false));
        for (format, want) in [("human", EventFormat::Human), ("jsonl", EventFormat::Jsonl)] {
            let args = run_args(&["tinyperf", "health", "--events", format]);
            assert_eq!(args.event_format(), want);
            assert!(!args.live_progress_on(true), "--events {format}");
        }
    }
}
