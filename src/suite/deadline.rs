//! How long each stage may take before the supervisor gives up on its worker, and how
//! often the worker says it is alive.
//!
//! A deadline is the stage's expected length, from the run's options, with a wide
//! margin: it exists to catch a worker that hangs (a GPU kernel that never returns, a
//! stopped process), never to cut a slow but working box short. `stage_timeout_s`
//! replaces it for every stage of a run.

use std::time::Duration;

use serde_json::{Map, Value};

use super::options::{
    self, BURN_SECONDS, GEMM_SECONDS, GPU_GEMM_SECONDS, LINK_LOAD_SECONDS, PULSE_SECONDS,
    RAMP_SECONDS, STAGE_TIMEOUT_S, THROTTLE_SECONDS,
};

/// How often the worker sends a heartbeat while it runs.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(2);
/// The longest the worker may be silent (no event, no heartbeat) whatever the stage:
/// heartbeats come from their own thread, so silence means the whole process is stuck.
pub const MAX_SILENCE: Duration = Duration::from_secs(60);
/// Time from starting the worker to its first stage.
pub const START_DEADLINE: Duration = Duration::from_secs(120);

const MINUTE: u64 = 60;
const HOUR: u64 = 3600;

/// The deadline of stage `stage` of a run with `options`.
pub fn stage_deadline(stage: &str, options: &Map<String, Value>) -> Duration {
    if let Some(timeout) = override_s(options) {
        return Duration::from_secs_f64(timeout);
    }
    let seconds = |spec, default| options::number(options, spec, default);
    Duration::from_secs_f64(match stage {
        "inventory" => (5 * MINUTE) as f64,
        // Calibration and a sustained run of gemm_seconds, with repeats.
        "cpu-gemm" => (10 * MINUTE) as f64 + 4.0 * seconds(GEMM_SECONDS, 3.0),
        // Each GPU in two precisions, each sustained for gpu_gemm_seconds, on up to
        // eight GPUs.
        "gpu-gemm" => (10 * MINUTE) as f64 + 2.0 * 8.0 * 2.0 * seconds(GPU_GEMM_SECONDS, 3.0),
        "gpu-bandwidth" | "gpu-p2p" | "gpu-allreduce" => (20 * MINUTE) as f64,
        "kernel-messages" => (5 * MINUTE) as f64,
        // Rounds of burn_seconds on every GPU at once, then the reference checks.
        "gpu-corruption" => {
            (15 * MINUTE) as f64
                + 2.0
                    * seconds(
                        BURN_SECONDS,
                        super::health::corruption_stage::DEFAULT_BURN_SECONDS,
                    )
        }
        // Each GPU's link under load for link_load_seconds, one after another.
        "link-health" => {
            (15 * MINUTE) as f64
                + 8.0
                    * 2.0
                    * seconds(
                        LINK_LOAD_SECONDS,
                        super::health::link_stage::DEFAULT_LOAD_SECONDS,
                    )
        }
        "gpu-memory" => (30 * MINUTE) as f64,
        "power-pulse" => (15 * MINUTE) as f64 + 4.0 * seconds(PULSE_SECONDS, 0.0),
        // Up to eight steps on the boxes sold, each held for ramp_seconds.
        "power-ramp" => (15 * MINUTE) as f64 + 8.0 * seconds(RAMP_SECONDS, 0.0),
        "throttling" => {
            (10 * MINUTE) as f64
                + 8.0
                    * seconds(
                        THROTTLE_SECONDS,
                        super::health::throttle_stage::DEFAULT_SECONDS,
                    )
        }
        // The command's own timeout, when it has one, and time to stop it and score it.
        "external" => options
            .get("timeout_s")
            .and_then(Value::as_f64)
            .map_or((72 * HOUR) as f64, |t| t + (10 * MINUTE) as f64),
        "mlperf-package" => (30 * MINUTE) as f64,
        "burn-in-limits" => (5 * MINUTE) as f64,
        "train-throughput" => HOUR as f64,
        "smoke" => (2 * HOUR) as f64,
        // Hours on a tinybox; a CPU-only machine may take days.
        "mlperf-resnet" => (72 * HOUR) as f64,
        _ => HOUR as f64,
    })
}

/// How long the worker may start up before its first stage.
pub fn start_deadline(options: &Map<String, Value>) -> Duration {
    match override_s(options) {
        Some(timeout) => Duration::from_secs_f64(timeout).min(START_DEADLINE),
        None => START_DEADLINE,
    }
}

/// How long the worker may be silent within a stage whose deadline is `deadline`.
pub fn silence_limit(deadline: Duration) -> Duration {
    deadline.min(MAX_SILENCE)
}

fn override_s(options: &Map<String, Value>) -> Option<f64> {
    options
        .get(STAGE_TIMEOUT_S.key)
        .and_then(Value::as_f64)
        .filter(|s| s.is_finite() && *s > 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn deadlines_follow_the_options_and_the_override_wins() {
        let none = Map::new();
        let longer = map(json!({"gemm_seconds": 600}));
        assert!(stage_deadline("cpu-gemm", &longer) > stage_deadline("cpu-gemm", &none));
        assert!(stage_deadline("cpu-gemm", &longer) > Duration::from_secs(2400));
        let short = map(json!({"stage_timeout_s": 2.5}));
        for stage in ["inventory", "cpu-gemm", "mlperf-resnet"] {
            assert_eq!(stage_deadline(stage, &short), Duration::from_millis(2500));
        }
        assert_eq!(start_deadline(&short), Duration::from_millis(2500));
        assert_eq!(silence_limit(Duration::from_secs(3600)), MAX_SILENCE);
        assert_eq!(
            silence_limit(Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }
}
