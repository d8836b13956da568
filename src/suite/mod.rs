//! Suites and stages: what a run does, the metrics it records, and its verdicts.

pub mod deadline;
pub mod epoch_log;
pub mod event;
pub mod option_schema;
pub mod options;
pub mod plan;
pub mod request;

/// Suites this build can run.
pub const SUITES: &[&str] = &[
    "inventory",
    "acceptance",
    "health",
    "smoke",
    "mlperf-resnet",
    "burn-in",
    "external",
];

/// Suites of the design that this build cannot run yet.
pub const NOT_IMPLEMENTED_SUITES: &[&str] = &[];

/// Whether `name` is one of [`SUITES`].
pub fn is_known_suite(name: &str) -> bool {
    SUITES.contains(&name)
}

pub mod burn_in;
pub mod cpu_clock;
pub mod cpu_gemm;
pub mod cpu_peak;
pub mod external;
pub mod gemm_trend;
pub mod gpu_allreduce;
pub mod gpu_bandwidth;
pub mod gpu_devices;
pub mod gpu_gemm;
pub mod gpu_p2p;
pub mod health;
pub mod inventory_stage;
pub mod jsonl;
pub mod mlperf_package;
pub mod mlperf_resnet;
pub mod runner;
pub mod smoke;
pub mod stage;
pub mod train_throughput;
pub mod training;
pub mod worker;
