//! MLPerf Training ResNet-50 results: reading MLLOG, scoring runs and systems as
//! `mlperf_logging.result_summarizer` does, submission packages, and power logs.

pub mod compliance;
pub mod energy;
pub mod log;
pub mod package;
pub mod power_log;
pub mod score;
pub mod shell_words;
pub mod source;
pub mod system_desc;

use std::path::{Path, PathBuf};

use score::{RunScore, SystemScore};

/// Why results could not be read or scored.
#[derive(Debug, thiserror::Error)]
pub enum MlperfError {
    /// The path does not exist.
    #[error("no such file or folder: {0}")]
    Missing(PathBuf),
    /// A file or folder could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// What could not be read.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The folder holds no ResNet result files.
    #[error("{0} holds no ResNet results (no results/<system>/resnet/result_*.txt, result_*.txt, or mllog.txt)")]
    NoResults(PathBuf),
    /// The folder holds other benchmarks' results, none of ResNet.
    #[error("{path} holds results of other benchmarks ({}), not of resnet", found.join(", "))]
    NotResnet {
        /// The folder.
        path: PathBuf,
        /// The benchmarks it holds.
        found: Vec<String>,
    },
    /// A `scaling.json` that cannot be read or makes no sense.
    #[error("{path}: scaling.json {reason}")]
    Scaling {
        /// The benchmark folder.
        path: PathBuf,
        /// What is wrong with its `scaling.json`.
        reason: String,
    },
}

/// The `scaling.json` factor of a benchmark folder, 1 without one.
fn scaling_factor(benchmark_dir: Option<&Path>) -> Result<f64, MlperfError> {
    let Some(dir) = benchmark_dir else {
        return Ok(1.0);
    };
    let path = dir.join("scaling.json");
    if !path.is_file() {
        return Ok(1.0);
    }
    let text = std::fs::read_to_string(&path).map_err(|source| MlperfError::Read {
        path: path.clone(),
        source,
    })?;
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| MlperfError::Scaling {
            path: path.clone(),
            reason: format!("is not JSON: {e}"),
        })?;
    json.get("scaling_factor")
        .and_then(serde_json::Value::as_f64)
        .ok_or(MlperfError::Scaling {
            path,
            reason: "has no numeric scaling_factor".into(),
        })
}

/// Scores every system found under `paths`.
pub fn score_paths(paths: &[PathBuf]) -> Result<Vec<SystemScore>, MlperfError> {
    let mut systems = Vec::new();
    for source in source::collect(paths)? {
        let factor = scaling_factor(source.benchmark_dir.as_deref())?;
        let power_dir = source
            .benchmark_dir
            .as_ref()
            .map(|d| d.join("power"))
            .filter(|p| p.is_dir());
        let mut runs = Vec::new();
        for (name, file) in &source.files {
            let log = log::MlLogText::read(file).map_err(|source| MlperfError::Read {
                path: file.clone(),
                source,
            })?;
            let mut run = RunScore::of(name, &file.display().to_string(), &log);
            if let (Some(dir), Some(ms), true) =
                (&source.benchmark_dir, run.run_ms, power_dir.is_some())
            {
                match energy::run_energy_j(dir, name, ms) {
                    Ok(j) => run.energy_j = Some(j),
                    Err(e) => run.warnings.push(format!("no energy: {e}")),
                }
            }
            runs.push(run);
        }
        let mut system = SystemScore::of(&source.system, runs, factor, power_dir.is_some());
        for skipped in &source.skipped {
            system.notes.push(format!(
                "{} is not resnet and is not scored",
                skipped.display()
            ));
        }
        systems.push(system);
    }
    Ok(systems)
}
