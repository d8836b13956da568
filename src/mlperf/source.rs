//! What `tinyperf mlperf score` is given, sorted into systems: a submission folder
//! (`ORG/results/<system>/resnet/`), a results folder (`results/<system>/resnet/`), a
//! system's folder, a benchmark folder of `result_*.txt`, a tinyperf run folder (with
//! `mllog.txt`), or MLLOG files. Loose files and run folders are grouped by the
//! `submission_platform` they log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::MlperfError;

/// The benchmark folder name this scorer reads.
pub const BENCHMARK: &str = "resnet";

/// One system's result files.
#[derive(Debug, Clone, PartialEq)]
pub struct SystemSource {
    /// The system's name: the folder under `results/`, or the file's or folder's name.
    pub system: String,
    /// The benchmark folder (for `scaling.json` and `power/`), when the files are in one.
    pub benchmark_dir: Option<PathBuf>,
    /// (run name, file), sorted by name.
    pub files: Vec<(String, PathBuf)>,
    /// Other benchmarks' folders passed over.
    pub skipped: Vec<PathBuf>,
}

fn result_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, MlperfError> {
    let mut files = Vec::new();
    for entry in read_dir(dir)? {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("result_") && name.ends_with(".txt") && entry.path().is_file() {
            files.push((name.trim_end_matches(".txt").to_string(), entry.path()));
        }
    }
    files.sort();
    Ok(files)
}

fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>, MlperfError> {
    let read = std::fs::read_dir(dir).map_err(|source| MlperfError::Read {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut entries: Vec<_> = read.filter_map(Result::ok).collect();
    entries.sort_by_key(|e| e.file_name());
    Ok(entries)
}

fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, MlperfError> {
    Ok(read_dir(dir)?
        .into_iter()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect())
}

fn name_of(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_else(|| path.display().to_string())
}

/// The `submission_platform` a result file logs.
fn platform_of(file: &Path) -> Option<String> {
    super::log::MlLogText::read(file).ok().and_then(|log| {
        log.first("submission_platform")
            .and_then(|e| e.value.as_str().map(str::to_string))
    })
}

/// The system a folder of result files belongs to: the system folder it sits in when
/// a submission's `systems/` describes that system (`ORG/results/<system>/resnet`),
/// else the platform its logs name, else the folder's absolute path.
fn system_of_benchmark_folder(path: &Path, files: &[(String, PathBuf)]) -> String {
    let absolute = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    if let Some(system_dir) = absolute.parent() {
        let system = name_of(system_dir);
        let described = system_dir
            .parent()
            .filter(|results| name_of(results) == "results")
            .and_then(Path::parent)
            .is_some_and(|org| org.join("systems").join(format!("{system}.json")).is_file());
        if described {
            return system;
        }
    }
    files
        .iter()
        .find_map(|(_, file)| platform_of(file))
        .unwrap_or_else(|| absolute.display().to_string())
}

/// A system folder (`<system>/resnet/…`): its ResNet result, other benchmarks skipped.
fn system_folder(dir: &Path, out: &mut Vec<SystemSource>) -> Result<(), MlperfError> {
    let mut skipped = Vec::new();
    let mut found = None;
    for bench in subdirs(dir)? {
        if name_of(&bench) == BENCHMARK {
            found = Some(bench);
        } else if !result_files(&bench)?.is_empty() {
            skipped.push(bench);
        }
    }
    match found {
        Some(bench) => out.push(SystemSource {
            system: name_of(dir),
            files: result_files(&bench)?,
            benchmark_dir: Some(bench),
            skipped,
        }),
        None if !skipped.is_empty() => {
            return Err(MlperfError::NotResnet {
                path: dir.to_path_buf(),
                found: skipped.iter().map(|p| name_of(p)).collect(),
            })
        }
        None => {}
    }
    Ok(())
}

/// The MLLOGs of a run folder of several runs (`result_N/mllog.txt`).
fn run_of_several(dir: &Path) -> Result<Option<Vec<PathBuf>>, MlperfError> {
    let logs: Vec<PathBuf> = subdirs(dir)?
        .into_iter()
        .filter(|d| name_of(d).starts_with("result_"))
        .map(|d| d.join("mllog.txt"))
        .filter(|f| f.is_file())
        .collect();
    Ok((!logs.is_empty()).then_some(logs))
}

/// Sorts `paths` into systems.
pub fn collect(paths: &[PathBuf]) -> Result<Vec<SystemSource>, MlperfError> {
    let mut systems = Vec::new();
    let mut loose: Vec<PathBuf> = Vec::new();
    for path in paths {
        if path.is_file() {
            loose.push(path.clone());
            continue;
        }
        if !path.is_dir() {
            return Err(MlperfError::Missing(path.clone()));
        }
        let before = systems.len();
        let results = path.join("results");
        if results.is_dir() {
            for system in subdirs(&results)? {
                system_folder(&system, &mut systems)?;
            }
        } else if !result_files(path)?.is_empty() {
            let files = result_files(path)?;
            systems.push(SystemSource {
                system: system_of_benchmark_folder(path, &files),
                files,
                benchmark_dir: Some(path.clone()),
                skipped: Vec::new(),
            });
        } else if path.join("mllog.txt").is_file() {
            loose.push(path.join("mllog.txt"));
            continue;
        } else if let Some(logs) = run_of_several(path)? {
            loose.extend(logs);
            continue;
        } else if path.join(BENCHMARK).is_dir() {
            system_folder(path, &mut systems)?;
        } else {
            for system in subdirs(path)? {
                system_folder(&system, &mut systems)?;
            }
        }
        if systems.len() == before {
            return Err(MlperfError::NoResults(path.clone()));
        }
    }
    let mut by_platform: BTreeMap<String, Vec<(String, PathBuf)>> = BTreeMap::new();
    for file in loose {
        let platform = platform_of(&file).unwrap_or_else(|| "unnamed".to_string());
        let name = match file.file_name().and_then(|n| n.to_str()) {
            Some("mllog.txt") => {
                let parent = file.parent();
                let run = parent.map(name_of).unwrap_or_else(|| "mllog".into());
                match parent.and_then(Path::parent) {
                    Some(outer) if run.starts_with("result_") => {
                        format!("{}/{run}", name_of(outer))
                    }
                    _ => run,
                }
            }
            _ => name_of(&file),
        };
        by_platform.entry(platform).or_default().push((name, file));
    }
    for (system, files) in by_platform {
        systems.push(SystemSource {
            system,
            benchmark_dir: None,
            files,
            skipped: Vec::new(),
        });
    }
    Ok(systems)
}
