//! The newest finished result of every suite and every stage, from the store's briefs:
//! verdicts as state sets, when each result was made (so a fleet can alert on stale
//! ones), and the headline figures in base units.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::record::{LatestResults, RunRecord, RunState, Verdict};

use super::exposition::{bool_value, Exposition, Kind};

/// Outcomes a stage or a check can have.
const OUTCOMES: [Verdict; 5] = [
    Verdict::Pass,
    Verdict::Warn,
    Verdict::Fail,
    Verdict::Skip,
    Verdict::Error,
];

/// A headline figure as a metric family: its name, help, and the factor to base units.
struct Family {
    name: &'static str,
    help: &'static str,
    scale: f64,
}

/// Every headline figure a brief can carry (`record::brief::HEADLINE_METRICS`), by the
/// name the stage gives it.
const FIGURES: &[(&str, Family)] = &[
    (
        "gflops_sustained",
        Family {
            name: "tinyperf_cpu_gemm_flop_per_second",
            help: "Sustained CPU matrix-multiply throughput, floating-point operations per second.",
            scale: 1e9,
        },
    ),
    (
        "min_pair_gbps",
        Family {
            name: "tinyperf_peer_bandwidth_slowest_pair_bytes_per_second",
            help: "Peer-to-peer copy bandwidth of the slowest GPU pair.",
            scale: 1e9,
        },
    ),
    (
        "busbw_gbps",
        Family {
            name: "tinyperf_allreduce_bus_bandwidth_bytes_per_second",
            help: "All-reduce bus bandwidth across the box's GPUs.",
            scale: 1e9,
        },
    ),
    (
        "img_per_s",
        Family {
            name: "tinyperf_train_images_per_second",
            help: "Training throughput in images per second.",
            scale: 1.0,
        },
    ),
    (
        "estimated_time_to_train_min",
        Family {
            name: "tinyperf_train_estimated_time_to_train_seconds",
            help: "Time to train ResNet-50 to the MLPerf target, estimated from the measured throughput.",
            scale: 60.0,
        },
    ),
    (
        "time_to_target_s",
        Family {
            name: "tinyperf_train_time_to_target_seconds",
            help: "Time the training took to reach its target accuracy.",
            scale: 1.0,
        },
    ),
    (
        "final_accuracy",
        Family {
            name: "tinyperf_train_final_accuracy_ratio",
            help: "Evaluation accuracy at the end of training, 0 to 1.",
            scale: 1.0,
        },
    ),
    (
        "energy_kwh",
        Family {
            name: "tinyperf_stage_energy_joules",
            help: "Energy the GPUs used over the stage.",
            scale: 3.6e6,
        },
    ),
];

/// Per-GPU matrix-multiply figures are named `gpu<index>_<precision>_tflops` by the
/// GPU runtime's device order, which need not be the inventory's PCI order; each carries
/// the PCI address of its GPU, which gives `pci_address` and the inventory's `gpu` index,
/// as every other per-GPU family has them. A figure recorded without an address keeps
/// the runtime's index and an empty `pci_address`.
const GPU_GEMM: Family = Family {
    name: "tinyperf_gpu_gemm_flop_per_second",
    help: "Matrix-multiply throughput of one GPU, floating-point operations per second, \
           by precision.",
    scale: 1e12,
};

/// `hardware` is the inventory, for each per-GPU figure's index.
pub fn render(out: &mut Exposition, latest: &LatestResults, hardware: &Value) {
    suites(out, latest);
    stages(out, latest);
    figures(out, latest, hardware);
}

fn suites(out: &mut Exposition, latest: &LatestResults) {
    if latest.suites.is_empty() {
        return;
    }
    out.family(
        "tinyperf_suite_state",
        Kind::Gauge,
        "1 for the final state of each suite's newest finished run, 0 for the other states.",
    );
    for suite in &latest.suites {
        for state in RunState::ALL.iter().filter(|s| s.is_final()) {
            out.sample(
                "tinyperf_suite_state",
                &[("suite", &suite.suite), ("state", state.as_str())],
                bool_value(suite.state == *state),
            );
        }
    }
    for suite in &latest.suites {
        if let Some(at) = suite.finished_at {
            out.gauge(
                "tinyperf_suite_result_timestamp_seconds",
                "When each suite's newest finished run ended, in Unix seconds.",
                &[("suite", &suite.suite)],
                unix_seconds(at),
            );
        }
    }
    for suite in &latest.suites {
        if let Some(duration) = suite.duration_s {
            out.gauge(
                "tinyperf_suite_duration_seconds",
                "How long each suite's newest finished run took.",
                &[("suite", &suite.suite)],
                duration,
            );
        }
    }
}

fn stages(out: &mut Exposition, latest: &LatestResults) {
    if latest.stages.is_empty() {
        return;
    }
    out.family(
        "tinyperf_stage_verdict",
        Kind::Gauge,
        "1 for the verdict of each stage in its suite's newest finished run that had it, 0 for the others.",
    );
    for stage in &latest.stages {
        for verdict in OUTCOMES {
            out.sample(
                "tinyperf_stage_verdict",
                &[
                    ("suite", &stage.suite),
                    ("stage", &stage.stage),
                    ("verdict", verdict.as_str()),
                ],
                bool_value(stage.verdict == verdict),
            );
        }
    }
    for stage in &latest.stages {
        if let Some(at) = stage.finished_at {
            out.gauge(
                "tinyperf_stage_result_timestamp_seconds",
                "When the run that gave each stage's newest result ended, in Unix seconds.",
                &[("suite", &stage.suite), ("stage", &stage.stage)],
                unix_seconds(at),
            );
        }
    }
}

/// Families are written one after another (Prometheus wants a family's samples together),
/// so the figures are walked once per family.
fn figures(out: &mut Exposition, latest: &LatestResults, hardware: &Value) {
    for (figure_name, family) in FIGURES {
        for stage in &latest.stages {
            for figure in stage.figures.iter().filter(|f| f.name == *figure_name) {
                out.gauge(
                    family.name,
                    family.help,
                    &[("suite", &stage.suite), ("stage", &stage.stage)],
                    figure.value * family.scale,
                );
            }
        }
    }
    for stage in &latest.stages {
        for (figure, runtime_index, precision) in stage
            .figures
            .iter()
            .filter_map(|f| f.gpu_matmul().map(|(i, p)| (f, i, p)))
        {
            let address = figure.subject.as_deref().unwrap_or("");
            let gpu = gpu_index(hardware, address).unwrap_or(runtime_index);
            out.gauge(
                GPU_GEMM.name,
                GPU_GEMM.help,
                &[
                    ("suite", &stage.suite),
                    ("stage", &stage.stage),
                    ("gpu", &gpu.to_string()),
                    ("pci_address", address),
                    ("precision", precision),
                ],
                figure.value * GPU_GEMM.scale,
            );
        }
    }
}

/// Each check about one GPU in `run`, a suite's newest finished run (the health suite's,
/// the acceptance GPU stages'), as a set of states.
pub fn gpu_checks(out: &mut Exposition, run: &RunRecord, hardware: &Value) {
    for stage in &run.stages {
        for check in &stage.checks {
            let Some(address) = check.subject.as_deref() else {
                continue;
            };
            out.family(
                "tinyperf_gpu_check_outcome",
                Kind::Gauge,
                "1 for the outcome each check about one GPU had in its suite's newest finished \
                 run, 0 for the others.",
            );
            let gpu = gpu_index(hardware, address)
                .map(|i| i.to_string())
                .unwrap_or_default();
            for outcome in OUTCOMES {
                out.sample(
                    "tinyperf_gpu_check_outcome",
                    &[
                        ("suite", run.suite.as_str()),
                        ("stage", stage.name.as_str()),
                        ("check", check.name.as_str()),
                        ("gpu", &gpu),
                        ("pci_address", address),
                        ("outcome", outcome.as_str()),
                    ],
                    bool_value(check.verdict == outcome),
                );
            }
        }
    }
}

/// The inventory index of the GPU at `address`.
pub fn gpu_index(hardware: &Value, address: &str) -> Option<usize> {
    hardware
        .get("gpus")?
        .as_array()?
        .iter()
        .position(|g| g.get("address").and_then(Value::as_str) == Some(address))
}

fn unix_seconds(at: DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64 / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_headline_figure_has_a_family_in_base_units() {
        for name in crate::record::brief::HEADLINE_METRICS {
            assert!(
                FIGURES.iter().any(|(figure, _)| figure == name),
                "{name} has no metric family"
            );
        }
        for (_, family) in FIGURES {
            assert!(family.name.starts_with("tinyperf_"));
            for unit in [
                "_kwh", "_min", "_gbps", "gflops", "tflops", "percent", "milli",
            ] {
                assert!(!family.name.contains(unit), "{} names {unit}", family.name);
            }
        }
    }
}
