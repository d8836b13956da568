//! MLPerf Training submission packages from recorded runs: `ORG/systems/NAME.json`,
//! `ORG/results/NAME/resnet/result_{0..4}.txt` (each run's MLLOG as it was written),
//! `power/result_N/node_0.txt` when every run measured power, and
//! `ORG/benchmarks/resnet/implementations/tinyperf-VERSION/` saying how the runs were
//! made. The package is built in a temporary folder beside the target and renamed into
//! place, so nothing half-written ever carries the final name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::log::MlLogText;
use super::score::RESULTS_NEEDED;
use super::shell_words;
use super::system_desc::{system_description, SoftwareStack, STATUS_ON_PREMISE, SYSTEM_DESC_FILE};
use crate::engine::mllog::Division;

/// A run folder's files.
pub const RECORD_FILE: &str = "run.json";
/// The run's MLLOG as training wrote it (also the name inside each `result_N/` of a run
/// of several).
pub const MLLOG_FILE: &str = "mllog.txt";
/// The run's MLPerf power log (one node), when power was measured.
pub const POWER_FILE: &str = "power.txt";

/// Why a package could not be made; nothing is left under the final name when it fails.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// The folder given as a run has no `run.json`, and no record was supplied for it.
    #[error("{0}: not a run folder (no run.json)")]
    NotARun(PathBuf),
    /// The run folder (given here) holds neither `mllog.txt` nor `result_N/mllog.txt`.
    #[error("{0}: the run has no MLLOG (mllog.txt, or result_N/mllog.txt for a run of several)")]
    NoMllog(PathBuf),
    /// A file could not be read or parsed, or its MLLOG lacks a line the package needs.
    #[error("cannot read {path}: {reason}")]
    Read {
        /// The file that was read.
        path: PathBuf,
        /// What went wrong, for the operator.
        reason: String,
    },
    /// The runs given hold this many results, not the number a ResNet result needs.
    #[error("a ResNet result is exactly {RESULTS_NEEDED} runs; {0} given")]
    RunCount(usize),
    /// The runs do not belong in one result (other benchmark, system, division or a
    /// repeated seed); the message says which and where.
    #[error("{0}")]
    Mismatch(String),
    /// A run's record holds a value no shell script can repeat (a NUL byte).
    #[error("{run}: its options cannot be written into run_and_time.sh: {reason}")]
    Unscriptable {
        /// The run.
        run: PathBuf,
        /// Which value, and why.
        reason: String,
    },
    /// The package's `ORG/` folder (given here) already exists; it is never overwritten.
    #[error("{0} exists: package into another folder (--out) or move it away")]
    Exists(PathBuf),
    /// A file or folder of the package could not be written, or the package not renamed
    /// into place.
    #[error("cannot write {path}: {source}")]
    Write {
        /// What was being written.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The organisation or system name (given here) is empty, starts with '.', or holds
    /// other characters than letters, digits, '-', '_' and '.'.
    #[error("{0} is not a usable name: letters, digits, '-', '_' and '.' only")]
    BadName(String),
}

/// What to package.
#[derive(Debug, Clone)]
pub struct PackageRequest {
    /// The submitting organisation: the package's top folder and the descriptions'
    /// `submitter`.
    pub org: String,
    /// The system's name: `systems/SYSTEM.json`, `results/SYSTEM/` and `system_name`.
    pub system: String,
    /// The division asked for; it must be the one the runs logged.
    pub division: Option<Division>,
    /// The folder `ORG/` is created in.
    pub out_dir: PathBuf,
    /// Run folders, each holding one run's MLLOG or one per `result_N/`; together
    /// they must give exactly the results a ResNet result needs.
    pub runs: Vec<PathBuf>,
    /// The record of a run folder that has no `run.json` yet (the suite packaging its
    /// own runs); `None` refuses such a folder.
    pub record: Option<Value>,
}

/// What was written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PackageReport {
    /// The package's `ORG/` folder, under its final name.
    pub root: PathBuf,
    /// The division the runs logged and the package declares (`closed` or `open`).
    pub division: String,
    /// (result name, the MLLOG it was copied from)
    pub results: Vec<(String, PathBuf)>,
    /// Each result's logged seed, in result order.
    pub seeds: Vec<i64>,
    /// Whether power logs were packaged (only when every run measured power).
    pub power: bool,
    /// Things the operator should know about what was left out (e.g. power logs when
    /// only some runs measured it).
    pub notes: Vec<String>,
}

/// One result: a training run's files and what its MLLOG says.
struct Result1 {
    mllog: PathBuf,
    system_desc: Option<PathBuf>,
    power: Option<PathBuf>,
    record: Value,
    run_dir: PathBuf,
    division: String,
    seed: (String, i64, i64),
    platform: String,
}

fn read_err(path: &Path, reason: impl ToString) -> PackageError {
    PackageError::Read {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    }
}

fn checked_name(name: &str) -> Result<(), PackageError> {
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if ok {
        Ok(())
    } else {
        Err(PackageError::BadName(name.to_string()))
    }
}

/// The results of one run folder: its MLLOG, or one per `result_N/` of a run of several.
fn results_of(run_dir: &Path, fallback: Option<&Value>) -> Result<Vec<Result1>, PackageError> {
    let record_path = run_dir.join(RECORD_FILE);
    let record: Value = if record_path.is_file() {
        let text = read_text(&record_path)?;
        serde_json::from_str(&text).map_err(|e| read_err(&record_path, e))?
    } else if let Some(record) = fallback {
        record.clone()
    } else {
        return Err(PackageError::NotARun(run_dir.to_path_buf()));
    };
    let mut folders = Vec::new();
    if run_dir.join(MLLOG_FILE).is_file() {
        folders.push(run_dir.to_path_buf());
    } else {
        let entries = std::fs::read_dir(run_dir).map_err(|e| read_err(run_dir, e))?;
        let mut subs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("result_"))
                    && p.join(MLLOG_FILE).is_file()
            })
            .collect();
        subs.sort();
        folders.extend(subs);
    }
    if folders.is_empty() {
        return Err(PackageError::NoMllog(run_dir.to_path_buf()));
    }
    folders
        .into_iter()
        .map(|dir| {
            let mllog = dir.join(MLLOG_FILE);
            let log = MlLogText::read(&mllog).map_err(|e| read_err(&mllog, e))?;
            let text_of = |key: &str| {
                log.first(key)
                    .and_then(|e| e.value.as_str().map(str::to_string))
            };
            if let Some(bench) = text_of("submission_benchmark").filter(|b| b != "resnet") {
                return Err(PackageError::Mismatch(format!(
                    "{} is a log of {bench}, not resnet",
                    mllog.display()
                )));
            }
            let division = text_of("submission_division")
                .ok_or_else(|| read_err(&mllog, "no submission_division"))?;
            let seed_line = log
                .first("seed")
                .ok_or_else(|| read_err(&mllog, "no seed logged"))?;
            let seed = (
                seed_line
                    .meta("file")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                seed_line
                    .meta("lineno")
                    .and_then(Value::as_i64)
                    .unwrap_or(0),
                seed_line
                    .value
                    .as_i64()
                    .ok_or_else(|| read_err(&mllog, "the seed is not an integer"))?,
            );
            Ok(Result1 {
                system_desc: Some(dir.join(SYSTEM_DESC_FILE)).filter(|p| p.is_file()),
                power: Some(dir.join(POWER_FILE)).filter(|p| p.is_file()),
                platform: text_of("submission_platform").unwrap_or_default(),
                record: record.clone(),
                run_dir: run_dir.to_path_buf(),
                mllog,
                division,
                seed,
            })
        })
        .collect()
}

/// What says two runs were made on the same system: the SKU, the GPUs, the CPU and
/// the memory of the inventory, and the platform the MLLOG names.
fn system_identity(result: &Result1) -> String {
    let hw = &result.record["hardware"];
    let mut gpus: Vec<String> = hw["gpus"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|g| g["model"].as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default();
    gpus.sort();
    format!(
        "platform {}, SKU {}, {} GPU(s) [{}], CPU {}, {} bytes of memory",
        result.platform,
        hw["sku"].as_str().unwrap_or("?"),
        gpus.len(),
        gpus.join(", "),
        hw["host"]["cpu_model"].as_str().unwrap_or("?"),
        hw["host"]["memory_bytes"].as_u64().unwrap_or(0),
    )
}

fn division_named(name: &str) -> Option<Division> {
    match name {
        "closed" => Some(Division::Closed),
        "open" => Some(Division::Open),
        _ => None,
    }
}

/// Checks the runs belong together and writes the package.
///
/// The runs must be exactly one ResNet result's worth, of one system, one division
/// (the one asked for, if any) and with distinct seeds; the package is written beside
/// the target and renamed into place. Returns what was written, or a [`PackageError`]
/// saying what did not fit, with nothing left under the final name.
pub fn package(request: &PackageRequest) -> Result<PackageReport, PackageError> {
    checked_name(&request.org)?;
    checked_name(&request.system)?;
    let mut results = Vec::new();
    for run in &request.runs {
        results.extend(results_of(run, request.record.as_ref())?);
    }
    if results.len() != RESULTS_NEEDED {
        return Err(PackageError::RunCount(results.len()));
    }
    let first = &results[0];
    for other in &results[1..] {
        if system_identity(other) != system_identity(first) {
            return Err(PackageError::Mismatch(format!(
                "runs of different systems: {} ({}) and {} ({})",
                first.run_dir.display(),
                system_identity(first),
                other.run_dir.display(),
                system_identity(other)
            )));
        }
    }
    let divisions: BTreeMap<&str, usize> = results.iter().fold(BTreeMap::new(), |mut m, r| {
        *m.entry(r.division.as_str()).or_default() += 1;
        m
    });
    if divisions.len() != 1 {
        return Err(PackageError::Mismatch(format!(
            "the runs were made under different divisions ({divisions:?}); a result is one division"
        )));
    }
    let division = division_named(&first.division).ok_or_else(|| {
        PackageError::Mismatch(format!("the runs log division {:?}", first.division))
    })?;
    if let Some(asked) = request.division {
        if asked != division {
            return Err(PackageError::Mismatch(format!(
                "the runs were made as {} division (their MLLOG says so); a package of them \
                 cannot be {}",
                division.as_str(),
                asked.as_str()
            )));
        }
    }
    let mut seen: BTreeMap<&(String, i64, i64), &Path> = BTreeMap::new();
    for r in &results {
        if let Some(earlier) = seen.insert(&r.seed, &r.mllog) {
            return Err(PackageError::Mismatch(format!(
                "{} and {} log the same seed {} from {}:{}; every run of a result needs its own \
                 seed (run them without -o seed, which draws one)",
                earlier.display(),
                r.mllog.display(),
                r.seed.2,
                r.seed.0,
                r.seed.1
            )));
        }
    }

    let target = request.out_dir.join(&request.org);
    if target.exists() {
        return Err(PackageError::Exists(target));
    }
    let partial = request
        .out_dir
        .join(format!(".{}.partial-{}", request.org, std::process::id()));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(|source| PackageError::Write {
            path: partial.clone(),
            source,
        })?;
    }
    let written = write_tree(&partial, request, &results, division);
    let notes = match written {
        Ok(notes) => notes,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    std::fs::rename(&partial, &target).map_err(|source| {
        let _ = std::fs::remove_dir_all(&partial);
        PackageError::Write {
            path: target.clone(),
            source,
        }
    })?;
    let power = results.iter().all(|r| r.power.is_some());
    Ok(PackageReport {
        root: target,
        division: division.as_str().to_string(),
        results: results
            .iter()
            .enumerate()
            .map(|(i, r)| (format!("result_{i}"), r.mllog.clone()))
            .collect(),
        seeds: results.iter().map(|r| r.seed.2).collect(),
        power,
        notes,
    })
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), PackageError> {
    let fail = |source| PackageError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    std::fs::write(path, bytes).map_err(fail)
}

/// A run's text file, never read through a link.
fn read_text(path: &Path) -> Result<String, PackageError> {
    use std::io::Read;
    let mut text = String::new();
    crate::record::files::open_plain_file(path)
        .and_then(|mut f| f.read_to_string(&mut text))
        .map_err(|e| read_err(path, e))?;
    Ok(text)
}

/// Copies a run's file into the package, never through a link: a `power.txt` linked to
/// a file elsewhere is refused, not copied.
fn copy(from: &Path, to: &Path) -> Result<(), PackageError> {
    use std::io::Read;
    let mut bytes = Vec::new();
    crate::record::files::open_plain_file(from)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| read_err(from, e))?;
    write(to, &bytes)
}

fn write_tree(
    root: &Path,
    request: &PackageRequest,
    results: &[Result1],
    division: Division,
) -> Result<Vec<String>, PackageError> {
    let mut notes = Vec::new();
    let bench = root.join("results").join(&request.system).join("resnet");
    for (i, r) in results.iter().enumerate() {
        copy(&r.mllog, &bench.join(format!("result_{i}.txt")))?;
    }
    let with_power = results.iter().filter(|r| r.power.is_some()).count();
    if with_power == results.len() {
        for (i, r) in results.iter().enumerate() {
            if let Some(power) = &r.power {
                copy(power, &bench.join(format!("power/result_{i}/node_0.txt")))?;
            }
        }
    } else if with_power > 0 {
        notes.push(format!(
            "only {with_power} of {} runs measured power: no power logs are packaged (every \
             result needs one)",
            results.len()
        ));
    }
    let desc = system_desc(request, &results[0], division)?;
    let desc_text = serde_json::to_string_pretty(&desc).unwrap_or_default() + "\n";
    write(
        &root
            .join("systems")
            .join(format!("{}.json", request.system)),
        desc_text.as_bytes(),
    )?;
    let implementation = root
        .join("benchmarks/resnet/implementations")
        .join(format!("tinyperf-{}", crate::VERSION));
    write(
        &implementation.join("README.md"),
        implementation_readme(request, results, division).as_bytes(),
    )?;
    write(
        &implementation.join("run_and_time.sh"),
        run_and_time(results)?.as_bytes(),
    )?;
    Ok(notes)
}

/// The run's own system description (written when it ran), else one from its
/// inventory, named and divided as the package says.
fn system_desc(
    request: &PackageRequest,
    result: &Result1,
    division: Division,
) -> Result<Value, PackageError> {
    let mut desc = match &result.system_desc {
        Some(path) => {
            let text = read_text(path)?;
            serde_json::from_str(&text).map_err(|e| read_err(path, e))?
        }
        None => system_description(
            &result.record["hardware"],
            &request.system,
            &request.org,
            &SoftwareStack::of_this_system(),
            division,
        ),
    };
    if let Some(fields) = desc.as_object_mut() {
        fields.insert("submitter".into(), request.org.clone().into());
        fields.insert("system_name".into(), request.system.clone().into());
        fields.insert("division".into(), division.as_str().into());
        fields
            .entry("status")
            .or_insert_with(|| STATUS_ON_PREMISE.into());
    }
    Ok(desc)
}

/// The `tinyperf run` command line that repeats a run: its suite, options and seed.
/// The command that repeats `result`'s run, every word from its record quoted.
fn command_line(result: &Result1) -> Result<String, PackageError> {
    let record = &result.record;
    let suite = record["suite"].as_str().unwrap_or("smoke");
    let mut options: Vec<String> = Vec::new();
    if let Some(given) = record["options"].as_object() {
        for (key, value) in given {
            // One line is one run, with its own seed.
            if key == "seed" || key == "runs" {
                continue;
            }
            let value = match value {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            options.push(format!("{key}={value}"));
        }
    }
    options.push(format!("seed={}", result.seed.2));
    let mut words = vec!["tinyperf", "run", suite, "--state-dir", "/var/lib/tinyperf"];
    for option in &options {
        words.extend(["-o", option.as_str()]);
    }
    shell_words::command(&words).map_err(|e| PackageError::Unscriptable {
        run: result.run_dir.clone(),
        reason: e.to_string(),
    })
}

fn implementation_readme(
    request: &PackageRequest,
    results: &[Result1],
    division: Division,
) -> String {
    let mut text = format!(
        "# ResNet-50 on {system} with tinyperf {version}\n\n\
         These {n} runs were made by tinyperf (a Rust training engine with its own kernels,\n\
         layers, optimizer and data loader), not by a Python framework. Each run is one\n\
         `tinyperf run` of the suite named below; its MLLOG is copied here unchanged as\n\
         `results/{system}/resnet/result_N.txt`. Division: {division}.\n\n\
         | result | run | suite | started | seed |\n|---|---|---|---|---|\n",
        system = request.system,
        version = crate::VERSION,
        n = results.len(),
        division = division.as_str(),
    );
    for (i, r) in results.iter().enumerate() {
        text.push_str(&format!(
            "| result_{i} | {} | {} | {} | {} |\n",
            r.record["id"].as_str().unwrap_or("?"),
            r.record["suite"].as_str().unwrap_or("?"),
            r.record["started_at"].as_str().unwrap_or("?"),
            r.seed.2
        ));
    }
    text.push_str(
        "\n`smoke` trains a small ResNet on a generated dataset and logs open division;\n\
         `mlperf-resnet` trains ResNet-50 v1.5 on ImageNet by the v4.0 reference recipe\n\
         (LARS, batch 1536, poly-2 schedule with warm-up, label smoothing 0.1) and logs\n\
         closed division when nothing departs from the closed rules. Every run draws its\n\
         own seed unless `-o seed=N` fixes it. `run_and_time.sh` repeats the runs.\n",
    );
    if results.iter().all(|r| r.power.is_some()) {
        text.push_str(
            "\nPower: `results/.../power/result_N/node_0.txt` hold the readings taken while\n\
             each run trained; each file's `power_source` line says what was measured (wall\n\
             power from the BMC, or the sum of GPU and CPU package power, which is not wall\n\
             power and does not compare with other submissions).\n",
        );
    }
    text
}

fn run_and_time(results: &[Result1]) -> Result<String, PackageError> {
    let mut text = String::from(
        "#!/bin/sh\n# Repeats the packaged runs, one tinyperf run each, with their seeds.\nset -e\n",
    );
    for r in results {
        text.push_str(&command_line(r)?);
        text.push('\n');
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result_with(record: Value, seed: i64) -> Result1 {
        Result1 {
            mllog: PathBuf::from("mllog.txt"),
            system_desc: None,
            power: None,
            record,
            run_dir: PathBuf::from("/runs/r1"),
            division: "closed".into(),
            seed: ("seed".into(), seed, seed),
            platform: "cpubox".into(),
        }
    }

    #[test]
    fn run_and_time_repeats_hostile_runs_word_for_word_and_runs_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("PWNED");
        let m = marker.display();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let seen = dir.path().join("argv");
        // A stand-in for tinyperf that writes down the words it was given.
        std::fs::write(
            bin.join("tinyperf"),
            format!(
                "#!/bin/sh\nprintf '%s\\0' \"$@\" >> '{}'\nprintf '\\036' >> '{}'\n",
                seen.display(),
                seen.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(
            bin.join("tinyperf"),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let hostile = [
            format!("/some/ds'; touch {m}; echo '"),
            format!("$(touch {m})"),
            format!("`touch {m}`\nline two"),
        ];
        let results: Vec<Result1> = hostile
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let mut options = serde_json::Map::new();
                options.insert("dataset".into(), Value::String(value.clone()));
                options.insert(format!("k'; touch {m}; '{i}"), Value::from(1));
                result_with(
                    serde_json::json!({"suite": format!("smoke; touch {m}"), "options": options}),
                    i as i64 + 1,
                )
            })
            .collect();
        let script = dir.path().join("run_and_time.sh");
        std::fs::write(&script, run_and_time(&results).unwrap()).unwrap();
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = std::process::Command::new("sh")
            .arg(&script)
            .env("PATH", path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!marker.exists(), "the script ran a word of a record");
        let calls = std::fs::read_to_string(&seen).unwrap();
        let calls: Vec<Vec<&str>> = calls
            .split_terminator('\u{1e}')
            .map(|c| c.split_terminator('\0').collect())
            .collect();
        assert_eq!(calls.len(), 3);
        for (i, call) in calls.iter().enumerate() {
            assert_eq!(
                call[..3],
                ["run", &format!("smoke; touch {m}"), "--state-dir"]
            );
            assert!(
                call.contains(&format!("dataset={}", hostile[i]).as_str()),
                "{call:?}"
            );
            assert!(
                call.contains(&format!("k'; touch {m}; '{i}=1").as_str()),
                "{call:?}"
            );
            assert_eq!(call.last(), Some(&format!("seed={}", i + 1).as_str()));
        }
    }

    #[test]
    fn a_power_log_linked_out_of_its_run_folder_is_refused_not_copied() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("shadow");
        std::fs::write(&secret, "root:$6$secret-hash:19000:0:99999:7:::\n").unwrap();
        let power = dir.path().join("power.txt");
        std::os::unix::fs::symlink(&secret, &power).unwrap();
        let copied = dir.path().join("node_0.txt");
        let error = copy(&power, &copied).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(!copied.exists());
    }

    #[test]
    fn a_value_with_a_nul_byte_is_refused_naming_the_run() {
        let record = serde_json::json!({"suite": "smoke", "options": {"dataset": "a\0b"}});
        let error = run_and_time(&[result_with(record, 1)]).unwrap_err();
        assert!(error.to_string().contains("/runs/r1"), "{error}");
        assert!(error.to_string().contains("NUL"), "{error}");
    }
}
