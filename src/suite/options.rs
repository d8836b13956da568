//! Suite options: which keys each suite takes, and their ranges.

use serde_json::{Map, Value};

use crate::echo;
use crate::engine::Precision;

/// One option a suite accepts: a number within `min..=max`.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    /// The name the option is given by (`-o KEY=VALUE`, a D-Bus or HTTP options map).
    pub key: &'static str,
    /// The smallest value accepted.
    pub min: f64,
    /// The largest value accepted.
    pub max: f64,
    /// Whether the value must be a whole number.
    pub integer: bool,
    /// What the option controls, in a few words, for error messages and the option schema.
    pub help: &'static str,
}

/// `gemm_size`: the N of the CPU GEMM stage's N×N×N matmul (acceptance; 2048 when absent).
pub const GEMM_SIZE: OptionSpec = OptionSpec {
    key: "gemm_size",
    min: 64.0,
    max: 8192.0,
    integer: true,
    help: "matrix size N of the N×N×N CPU GEMM",
};
/// `gemm_seconds`: how long the CPU GEMM stage sustains its matmuls, in seconds (3 when
/// absent).
pub const GEMM_SECONDS: OptionSpec = OptionSpec {
    key: "gemm_seconds",
    min: 0.05,
    max: 600.0,
    integer: false,
    help: "how long the CPU GEMM is sustained, in seconds",
};
/// `gemm_min_fraction`: the share of the CPU's theoretical peak FLOPS the CPU GEMM must
/// reach to pass (0.3 when absent).
pub const GEMM_MIN_FRACTION: OptionSpec = OptionSpec {
    key: "gemm_min_fraction",
    min: 0.0,
    max: 1.0,
    integer: false,
    help: "fraction of the CPU's theoretical peak the GEMM must reach to pass",
};

/// `train_steps`: how many timed ResNet-50 steps the train-throughput stage measures (10 on
/// GPUs, 3 on the CPU when absent).
pub const TRAIN_STEPS: OptionSpec = OptionSpec {
    key: "train_steps",
    min: 1.0,
    max: 10_000.0,
    integer: true,
    help: "timed ResNet-50 training steps of the train-throughput stage",
};
/// `train_warmup`: untimed ResNet-50 steps before the timed ones (3 on GPUs, 1 on the CPU
/// when absent).
pub const TRAIN_WARMUP: OptionSpec = OptionSpec {
    key: "train_warmup",
    min: 0.0,
    max: 1000.0,
    integer: true,
    help: "untimed warm-up steps before the timed ones",
};
/// `train_batch`: images per device and step of the train-throughput stage (256 on GPUs, 32
/// on the CPU when absent).
pub const TRAIN_BATCH: OptionSpec = OptionSpec {
    key: "train_batch",
    // Batch norm needs two images for a variance.
    min: 2.0,
    max: 4096.0,
    integer: true,
    help: "per-device batch of the train-throughput stage (at least 2)",
};
/// `train_image_size`: the side in pixels of the train-throughput stage's images (224 when
/// absent).
pub const TRAIN_IMAGE_SIZE: OptionSpec = OptionSpec {
    key: "train_image_size",
    min: 32.0,
    max: 512.0,
    integer: true,
    help: "image side of the train-throughput stage (224 for ImageNet)",
};
/// `image_size`: the side in pixels of the training and evaluation crops of smoke and
/// mlperf-resnet.
pub const IMAGE_SIZE: OptionSpec = OptionSpec {
    key: "image_size",
    min: 16.0,
    max: 1024.0,
    integer: true,
    help: "side of the training and evaluation crops in pixels",
};
/// `loader_threads`: how many threads decode and augment the training data (every CPU when
/// absent).
pub const LOADER_THREADS: OptionSpec = OptionSpec {
    key: "loader_threads",
    min: 1.0,
    max: 1024.0,
    integer: true,
    help: "data loader threads (default: every CPU)",
};
/// `synth_classes`: how many classes the smoke suite's generated dataset has.
pub const SYNTH_CLASSES: OptionSpec = OptionSpec {
    key: "synth_classes",
    min: 2.0,
    max: 72.0,
    integer: true,
    help: "classes of the generated dataset",
};
/// `synth_per_class`: training images per class of the smoke suite's generated dataset.
pub const SYNTH_PER_CLASS: OptionSpec = OptionSpec {
    key: "synth_per_class",
    min: 1.0,
    max: 100_000.0,
    integer: true,
    help: "training images per class of the generated dataset",
};
/// `synth_val_per_class`: validation images per class of the smoke suite's generated
/// dataset.
pub const SYNTH_VAL_PER_CLASS: OptionSpec = OptionSpec {
    key: "synth_val_per_class",
    min: 1.0,
    max: 100_000.0,
    integer: true,
    help: "validation images per class of the generated dataset",
};
/// `synth_size`: the side in pixels of the smoke suite's generated images.
pub const SYNTH_SIZE: OptionSpec = OptionSpec {
    key: "synth_size",
    min: 16.0,
    max: 2048.0,
    integer: true,
    help: "side of the generated images in pixels",
};

/// `burn_seconds`: how long the silent-corruption check loads every GPU at once, in seconds
/// (120 in health, 10 in acceptance when absent).
pub const BURN_SECONDS: OptionSpec = OptionSpec {
    key: "burn_seconds",
    min: 0.0,
    max: 86_400.0,
    integer: false,
    help: "how long the silent-corruption check loads every GPU, in seconds",
};
/// `link_load_seconds`: how long the link-health check copies both ways on each GPU, in
/// seconds (10 when absent).
pub const LINK_LOAD_SECONDS: OptionSpec = OptionSpec {
    key: "link_load_seconds",
    min: 0.5,
    max: 3600.0,
    integer: false,
    help: "how long the link-health check copies both ways on every GPU, in seconds",
};

/// `pulse_seconds`: how long the power-pulse check switches every GPU between load and idle
/// together, in seconds (0, off, when absent).
pub const PULSE_SECONDS: OptionSpec = OptionSpec {
    key: "pulse_seconds",
    min: 0.0,
    max: 3600.0,
    integer: false,
    help: "how long every GPU is switched between load and idle together (0: off)",
};
/// `ramp_seconds`: how long each step of the power ramp holds its GPUs at full load, in
/// seconds (0, off, when absent).
pub const RAMP_SECONDS: OptionSpec = OptionSpec {
    key: "ramp_seconds",
    min: 0.0,
    max: 3600.0,
    integer: false,
    help: "how long each power-ramp step (1, 2, ... all GPUs at full load) is held (0: off)",
};
/// `time_limit_s`: the burn-in's time limit for its training run, in seconds, before
/// the SKU's tolerance (the SKU's own limit when absent).
pub const TIME_LIMIT_S: OptionSpec = OptionSpec {
    key: "time_limit_s",
    min: 1.0,
    max: 1_000_000.0,
    integer: false,
    help: "the burn-in's time limit for its training run in seconds, before the 5 % tolerance \
           (the SKU's limit when absent)",
};
/// `cpu_temp_limit_c`: the hottest the CPU may get during a burn-in, in °C (the SKU's
/// limit, 90 °C, when absent).
pub const CPU_TEMP_LIMIT_C: OptionSpec = OptionSpec {
    key: "cpu_temp_limit_c",
    min: 30.0,
    max: 125.0,
    integer: false,
    help: "the hottest the CPU package may read during the burn-in, in °C (the SKU's limit when \
           absent)",
};
/// `gpu_temp_limit_c`: the hottest any GPU sensor may get during a burn-in, in °C (the
/// SKU's limit, 95 °C, when absent).
pub const GPU_TEMP_LIMIT_C: OptionSpec = OptionSpec {
    key: "gpu_temp_limit_c",
    min: 30.0,
    max: 125.0,
    integer: false,
    help: "the hottest any GPU sensor may read during the burn-in, in °C (the SKU's limit when \
           absent)",
};
/// `throttle_seconds`: how long the throttling check loads every GPU while it watches
/// clocks and temperatures, in seconds (20 when absent).
pub const THROTTLE_SECONDS: OptionSpec = OptionSpec {
    key: "throttle_seconds",
    min: 1.0,
    max: 3600.0,
    integer: false,
    help: "how long every GPU is loaded while its throttling and temperatures are watched",
};
/// `memory_fraction`: the share of each GPU's memory the device-memory pattern test writes
/// and reads back (0.8 when absent).
pub const MEMORY_FRACTION: OptionSpec = OptionSpec {
    key: "memory_fraction",
    min: 0.01,
    max: 0.95,
    integer: false,
    help: "share of each GPU's memory the device-memory pattern test covers",
};

/// `gpu_gemm_size`: the N of each GPU's N×N×N matmuls in the GPU GEMM stage (8192 when
/// absent).
pub const GPU_GEMM_SIZE: OptionSpec = OptionSpec {
    key: "gpu_gemm_size",
    min: 256.0,
    max: 16384.0,
    integer: true,
    help: "matrix size N of each GPU's N×N×N matmuls",
};
/// `gpu_gemm_seconds`: how long each GPU sustains matmuls per precision, in seconds (3 when
/// absent).
pub const GPU_GEMM_SECONDS: OptionSpec = OptionSpec {
    key: "gpu_gemm_seconds",
    min: 0.0,
    max: 600.0,
    integer: false,
    help: "seconds of sustained matmuls per GPU and precision",
};
/// `gpu_min_fraction`: the share of a GPU model's published matmul peak it must reach to
/// pass (0.5 when absent).
pub const GPU_MIN_FRACTION: OptionSpec = OptionSpec {
    key: "gpu_min_fraction",
    min: 0.0,
    max: 1.0,
    integer: false,
    help: "fraction of a GPU model's published matmul peak it must reach to pass",
};
/// `transfer_mib`: the size in MiB of each host↔device and peer-to-peer copy (256 when
/// absent).
pub const TRANSFER_MIB: OptionSpec = OptionSpec {
    key: "transfer_mib",
    min: 1.0,
    max: 4096.0,
    integer: true,
    help: "size of each host↔device and peer copy, in MiB",
};
/// `allreduce_mib`: the size in MiB of the buffer the all-reduce stage reduces (256 when
/// absent).
pub const ALLREDUCE_MIB: OptionSpec = OptionSpec {
    key: "allreduce_mib",
    min: 1.0,
    max: 4096.0,
    integer: true,
    help: "size of the all-reduce buffer, in MiB",
};
/// `allreduce_min_gbps`: the all-reduce bus bandwidth in GB/s the box must reach to pass
/// (12, the factory script's bar, when absent).
pub const ALLREDUCE_MIN_GBPS: OptionSpec = OptionSpec {
    key: "allreduce_min_gbps",
    min: 0.0,
    max: 10_000.0,
    integer: false,
    help: "all-reduce bus bandwidth the box must reach, in GB/s",
};

/// Every suite takes it: the deadline of each of the run's stages, instead of the one
/// the stage's expected length gives.
pub const STAGE_TIMEOUT_S: OptionSpec = OptionSpec {
    key: "stage_timeout_s",
    min: 1.0,
    max: 7.0 * 24.0 * 3600.0,
    integer: false,
    help:
        "deadline of each stage in seconds; past it the worker is stopped and the run ends in error",
};

/// `runs`: how many mlperf-resnet training runs, each with its own seed; 5 also writes the
/// submission package (1 when absent).
pub const RUNS: OptionSpec = OptionSpec {
    key: "runs",
    min: 1.0,
    max: 10.0,
    integer: true,
    help: "training runs, each seeded apart; 5 also writes the submission package",
};

/// An option whose value is text: a path, or one of a few names.
#[derive(Debug, Clone, Copy)]
pub struct TextSpec {
    /// The name the option is given by (`-o KEY=VALUE`, a D-Bus or HTTP options map).
    pub key: &'static str,
    /// The accepted values; empty for free text such as a path.
    pub choices: &'static [&'static str],
    /// What the option controls, in a few words, for error messages and the option schema.
    pub help: &'static str,
}

/// `dataset`: the folder of images to train on, in ImageNet layout (smoke: the generated
/// dataset when absent; mlperf-resnet: the configured ImageNet).
pub const DATASET: TextSpec = TextSpec {
    key: "dataset",
    choices: &[],
    help: "dataset folder in ImageNet layout (train/ and val/, a folder per class)",
};
/// `backend`: where the work runs: `auto` (the best found, when absent), `cpu`, `cuda` or
/// `hip`.
pub const BACKEND: TextSpec = TextSpec {
    key: "backend",
    choices: &["auto", "cpu", "cuda", "hip"],
    help: "the compute backend: the best found, the CPU, CUDA or HIP",
};
/// `precision`: how the train-throughput stage stores activations: `fp32` (when absent),
/// `fp16` or `bf16`.
pub const PRECISION: TextSpec = TextSpec {
    key: "precision",
    choices: Precision::NAMES,
    help: "activation storage of the training measurement: fp32, fp16 or bf16",
};
/// `model`: the network the smoke suite trains: `resnet20` (when absent), `resnet18` or
/// `resnet50`.
pub const MODEL: TextSpec = TextSpec {
    key: "model",
    choices: &["resnet20", "resnet18", "resnet50"],
    help: "the network to train",
};
/// `submitter`: the organisation named in the MLLOG, the system description and the
/// submission package's folder (`tinycorp` when absent).
pub const SUBMITTER: TextSpec = TextSpec {
    key: "submitter",
    choices: &[],
    help: "the submitting organisation the MLLOG (submission_org), the system description and \
           the submission package's folder name (tinycorp when absent): letters, digits, \
           '-', '_' and '.', at most 64, not starting with '.'",
};

/// The numeric options `suite` accepts besides the recipe's.
pub fn specs(suite: &str) -> &'static [OptionSpec] {
    match suite {
        "acceptance" => &[
            GEMM_SIZE,
            GEMM_SECONDS,
            GEMM_MIN_FRACTION,
            TRAIN_STEPS,
            TRAIN_WARMUP,
            TRAIN_BATCH,
            TRAIN_IMAGE_SIZE,
            GPU_GEMM_SIZE,
            GPU_GEMM_SECONDS,
            GPU_MIN_FRACTION,
            TRANSFER_MIB,
            ALLREDUCE_MIB,
            ALLREDUCE_MIN_GBPS,
            BURN_SECONDS,
        ],
        "health" => &[
            BURN_SECONDS,
            LINK_LOAD_SECONDS,
            MEMORY_FRACTION,
            PULSE_SECONDS,
            RAMP_SECONDS,
            THROTTLE_SECONDS,
        ],
        "smoke" => &[
            IMAGE_SIZE,
            LOADER_THREADS,
            SYNTH_CLASSES,
            SYNTH_PER_CLASS,
            SYNTH_VAL_PER_CLASS,
            SYNTH_SIZE,
        ],
        "mlperf-resnet" => &[IMAGE_SIZE, LOADER_THREADS, RUNS],
        "burn-in" => &[
            BURN_SECONDS,
            LINK_LOAD_SECONDS,
            MEMORY_FRACTION,
            PULSE_SECONDS,
            RAMP_SECONDS,
            THROTTLE_SECONDS,
            IMAGE_SIZE,
            LOADER_THREADS,
            TIME_LIMIT_S,
            CPU_TEMP_LIMIT_C,
            GPU_TEMP_LIMIT_C,
        ],
        _ => &[],
    }
}

/// The text options `suite` accepts.
pub fn text_specs(suite: &str) -> &'static [TextSpec] {
    match suite {
        "acceptance" => &[BACKEND, PRECISION],
        "health" => &[BACKEND],
        "smoke" => &[DATASET, MODEL, BACKEND, SUBMITTER],
        "mlperf-resnet" | "burn-in" => &[DATASET, BACKEND, SUBMITTER],
        _ => &[],
    }
}

/// Whether `suite` trains, and so takes the recipe's options (`batch_size`, `base_lr`,
/// `target_accuracy`, …), which the recipe range-checks itself.
pub fn takes_recipe(suite: &str) -> bool {
    matches!(suite, "smoke" | "mlperf-resnet" | "burn-in")
}

fn is_recipe_key(key: &str) -> bool {
    crate::engine::recipe::OPTION_KEYS
        .iter()
        .any(|o| o.key == key)
}

/// Checks every option against the suite's specs.
pub fn validate(suite: &str, options: &Map<String, Value>) -> Result<(), String> {
    let specs = specs(suite);
    let texts = text_specs(suite);
    for (key, value) in options {
        if let Some(spec) = texts.iter().find(|s| s.key == key) {
            check_text(spec, value)?;
            continue;
        }
        if takes_recipe(suite) && is_recipe_key(key) {
            continue;
        }
        let spec = if key == STAGE_TIMEOUT_S.key {
            Some(&STAGE_TIMEOUT_S)
        } else {
            specs.iter().find(|s| s.key == key)
        };
        let Some(spec) = spec else {
            let mut known: Vec<_> = specs.iter().map(|s| s.key).collect();
            known.push(STAGE_TIMEOUT_S.key);
            known.extend(texts.iter().map(|s| s.key));
            if takes_recipe(suite) {
                known.extend(crate::engine::recipe::OPTION_KEYS.iter().map(|o| o.key));
            }
            return Err(format!(
                "suite {suite} has no option {} (it takes: {})",
                echo::quoted(key),
                known.join(", ")
            ));
        };
        let Some(n) = value.as_f64() else {
            return Err(format!(
                "option {key} must be a number, got {}",
                echo::value(value)
            ));
        };
        if spec.integer && n.fract() != 0.0 {
            return Err(format!("option {key} must be a whole number, got {n}"));
        }
        if !(spec.min..=spec.max).contains(&n) {
            return Err(format!(
                "option {key} = {n} is out of range {}..={} ({})",
                spec.min, spec.max, spec.help
            ));
        }
    }
    Ok(())
}

fn check_text(spec: &TextSpec, value: &Value) -> Result<(), String> {
    let Some(text) = value.as_str() else {
        return Err(format!(
            "option {} must be text, got {}",
            spec.key,
            echo::value(value)
        ));
    };
    if text.trim().is_empty() {
        return Err(format!(
            "option {} must not be empty ({})",
            spec.key, spec.help
        ));
    }
    if !spec.choices.is_empty() && !spec.choices.contains(&text) {
        return Err(format!(
            "option {} = {} is not one of {}",
            spec.key,
            echo::quoted(text),
            spec.choices.join(", ")
        ));
    }
    if spec.key == SUBMITTER.key && !is_folder_name(text) {
        return Err(format!(
            "option {} = {} cannot name the submission's folder ({})",
            spec.key,
            echo::quoted(text),
            spec.help
        ));
    }
    Ok(())
}

/// Whether `name` is safe as one folder's name: it becomes the submission package's
/// top folder.
fn is_folder_name(name: &str) -> bool {
    name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The `submitter` option, or the organisation tinyperf submits as by default.
pub fn submitter(options: &Map<String, Value>) -> &str {
    text(options, SUBMITTER).unwrap_or(crate::engine::mllog::SUBMITTER)
}

/// A text option, if given.
pub fn text(options: &Map<String, Value>, spec: TextSpec) -> Option<&str> {
    options.get(spec.key).and_then(Value::as_str)
}

/// The `precision` option (f32 when absent; [`validate`] has refused unknown names).
pub fn precision(options: &Map<String, Value>) -> Precision {
    options
        .get(PRECISION.key)
        .and_then(Value::as_str)
        .and_then(|name| name.parse().ok())
        .unwrap_or_default()
}

/// A number option, or its default.
pub fn number(options: &Map<String, Value>, spec: OptionSpec, default: f64) -> f64 {
    options
        .get(spec.key)
        .and_then(Value::as_f64)
        .unwrap_or(default)
}

/// Parses `KEY=VALUE` pairs from the command line. A value that reads as JSON (a
/// number, `true`) is taken as such; anything else is a string.
pub fn parse_pairs(pairs: &[String]) -> Result<Map<String, Value>, String> {
    let mut map = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("option {pair:?} is not KEY=VALUE"));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("option {pair:?} has an empty key"));
        }
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.into()));
        map.insert(key.to_string(), value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn acceptance_takes_a_precision_for_its_training_measurement() {
        let ok = map(json!({"precision": "fp16"}));
        assert!(validate("acceptance", &ok).is_ok());
        assert_eq!(precision(&ok), Precision::Fp16);
        assert_eq!(precision(&Map::new()), Precision::Fp32);
        let err = validate("acceptance", &map(json!({"precision": "fp8"}))).unwrap_err();
        assert!(err.contains("fp16"), "{err}");
        assert!(validate("inventory", &ok).is_err());
    }

    #[test]
    fn the_submitter_must_make_a_safe_folder_name() {
        let ok = map(json!({"submitter": "example-lab_2.0"}));
        assert!(validate("mlperf-resnet", &ok).is_ok());
        assert_eq!(submitter(&ok), "example-lab_2.0");
        assert_eq!(submitter(&Map::new()), "tinycorp");
        for bad in [
            "../etc",
            "a/b",
            ".hidden",
            "two words",
            "é",
            &"x".repeat(65),
        ] {
            let err = validate("mlperf-resnet", &map(json!({ "submitter": bad }))).unwrap_err();
            assert!(
                err.contains("cannot name the submission's folder"),
                "{bad}: {err}"
            );
        }
        assert!(validate("acceptance", &ok).is_err());
    }

    #[test]
    fn accepts_known_options_in_range() {
        assert!(validate(
            "acceptance",
            &map(json!({"gemm_size": 512, "gemm_seconds": 0.5}))
        )
        .is_ok());
        assert!(validate("inventory", &Map::new()).is_ok());
        assert!(validate(
            "smoke",
            &map(json!({"model": "resnet18", "dataset": "/d", "base_lr": 0.1, "image_size": 32}))
        )
        .is_ok());
    }

    #[test]
    fn every_option_a_health_stage_reads_can_be_given() {
        assert!(validate(
            "health",
            &map(json!({"throttle_seconds": 5, "pulse_seconds": 2, "memory_fraction": 0.5}))
        )
        .is_ok());
        assert!(validate("health", &map(json!({"throttle_seconds": 0.5}))).is_err());
    }

    #[test]
    fn rejects_unknown_keys_wrong_types_and_ranges() {
        for (suite, opts, needle) in [
            ("inventory", json!({"x": 1}), "(it takes: stage_timeout_s)"),
            ("inventory", json!({"stage_timeout_s": 0}), "out of range"),
            ("smoke", json!({"model": "vgg"}), "not one of"),
            ("smoke", json!({"dataset": 3}), "must be text"),
            ("smoke", json!({"dataset": " "}), "must not be empty"),
            ("smoke", json!({"colour": 3}), "target_accuracy"),
            (
                "mlperf-resnet",
                json!({"model": "resnet20"}),
                "has no option",
            ),
            ("acceptance", json!({"size": 1}), "has no option \"size\""),
            (
                "acceptance",
                json!({"gemm_size": "big"}),
                "must be a number",
            ),
            ("acceptance", json!({"gemm_size": 100.5}), "whole number"),
            ("acceptance", json!({"gemm_size": 1}), "out of range"),
            (
                "acceptance",
                json!({"gemm_min_fraction": 2}),
                "out of range",
            ),
        ] {
            let err = validate(suite, &map(opts)).unwrap_err();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn pairs_parse_numbers_and_strings() {
        let m = parse_pairs(&["gemm_size=512".into(), "name=abc".into()]).unwrap();
        assert_eq!(m["gemm_size"], json!(512));
        assert_eq!(m["name"], json!("abc"));
        assert!(parse_pairs(&["novalue".into()]).is_err());
        assert!(parse_pairs(&["=1".into()]).is_err());
    }
}
