//! Suites and stages: what a run does, the metrics it records, and its verdicts.

pub mod deadline;
pub mod epoch_log;
pub mod event;
pub mod option_schema;
pub mod options;

use serde_json::{Map, Value};

/// Suites this build can run.
pub const SUITES: &[&str] = &[
    "inventory",
    "acceptance",
    "health",
    "smoke",
    "mlperf-resnet",
    "external",
];

/// Suites of the design that this build cannot run yet.
pub const NOT_IMPLEMENTED_SUITES: &[&str] = &[];

pub fn is_known_suite(name: &str) -> bool {
    SUITES.contains(&name)
}

/// Checks that `suite` exists and takes `options`.
pub fn validate(suite: &str, options: &Map<String, Value>) -> Result<(), String> {
    if NOT_IMPLEMENTED_SUITES.contains(&suite) {
        return Err(format!(
            "suite {suite} is not implemented in this build (available: {})",
            SUITES.join(", ")
        ));
    }
    if !is_known_suite(suite) {
        return Err(format!(
            "unknown suite {} (available: {})",
            crate::echo::quoted(suite),
            SUITES.join(", ")
        ));
    }
    if suite == external::NAME {
        return external::spec(options).map(|_| ());
    }
    options::validate(suite, options)?;
    if options::takes_recipe(suite) {
        training::recipe_for(suite, options).map_err(|e| e.to_string())?;
    }
    Ok(())
}
pub mod cpu_gemm;
pub mod cpu_peak;
pub mod external;
pub mod gpu_allreduce;
pub mod gpu_bandwidth;
pub mod gpu_devices;
pub mod gpu_gemm;
pub mod gpu_p2p;
pub mod health;
pub mod human;
pub mod inventory_stage;
pub mod mlperf_package;
pub mod mlperf_resnet;
pub mod runner;
pub mod smoke;
pub mod stage;
pub mod train_throughput;
pub mod training;
