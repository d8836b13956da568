//! The external suite's options, read into the command it runs.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::BENCHMARK;

/// The options the suite takes, besides `stage_timeout_s`.
const KEYS: [&str; 7] = [
    "command",
    "env",
    "cwd",
    "mllog",
    "timeout_s",
    "epochs",
    BENCHMARK,
];

/// The command's settings, from the suite's options.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ExternalSpec {
    /// The program and its arguments (`sh -c LINE` when the option was one string).
    pub command: Vec<String>,
    /// Variables added to the command's environment, name and value.
    pub env: Vec<(String, String)>,
    /// The folder the command starts in; the worker's own when `None`.
    pub cwd: Option<PathBuf>,
    /// `None`: the MLLOG is on stdout; else the file the command writes it to.
    pub mllog_file: Option<PathBuf>,
    /// How long the command may run before it is stopped; no limit when `None`.
    pub timeout: Option<Duration>,
    /// The epochs the benchmark plans, for its progress; else its MLLOG's `epoch_count`.
    #[serde(default)]
    pub epochs: Option<u32>,
}

/// Reads and checks the options: `command` (a list of words, or one string run by
/// `sh -c`), `env` (an object of strings), `cwd`, `mllog` (`stdout` or a path),
/// `timeout_s` and `epochs`.
pub fn spec(options: &Map<String, Value>) -> Result<ExternalSpec, String> {
    for key in options.keys() {
        if !KEYS.contains(&key.as_str()) && key != super::super::options::STAGE_TIMEOUT_S.key {
            return Err(format!(
                "suite external has no option {} (it takes: {}, stage_timeout_s)",
                crate::echo::quoted(key),
                KEYS.join(", ")
            ));
        }
    }
    let command = match options.get("command") {
        Some(Value::Array(words)) => words
            .iter()
            .map(|w| w.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("option command must be a list of strings")?,
        Some(Value::String(line)) if !line.trim().is_empty() => {
            vec!["sh".into(), "-c".into(), line.clone()]
        }
        Some(other) => {
            return Err(format!(
                "option command must be a list of strings, not {other}"
            ))
        }
        None => return Err("suite external needs the option command".into()),
    };
    if command.is_empty() || command[0].is_empty() {
        return Err("option command is empty".into());
    }
    let env = match options.get("env") {
        None => Vec::new(),
        Some(Value::Object(vars)) => vars
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
            .collect::<Option<Vec<_>>>()
            .ok_or("option env must map names to strings")?,
        Some(other) => return Err(format!("option env must be an object, not {other}")),
    };
    let text = |key: &str| -> Result<Option<String>, String> {
        match options.get(key) {
            None => Ok(None),
            Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.clone())),
            Some(other) => Err(format!("option {key} must be text, not {other}")),
        }
    };
    let mllog_file = match text("mllog")?.as_deref() {
        None | Some("stdout") => None,
        Some(path) => Some(PathBuf::from(path)),
    };
    let timeout = match options.get("timeout_s") {
        None => None,
        Some(v) => match v.as_f64() {
            Some(s) if s > 0.0 && s.is_finite() => Some(Duration::from_secs_f64(s)),
            _ => {
                return Err(format!(
                    "option timeout_s must be a positive number, not {v}"
                ))
            }
        },
    };
    let epochs = match options.get("epochs") {
        None => None,
        Some(v) => match v.as_f64() {
            Some(n) if (1.0..=10_000.0).contains(&n) && n.fract() == 0.0 => Some(n as u32),
            _ => {
                return Err(format!(
                    "option epochs must be a whole number from 1 to 10000, not {v}"
                ))
            }
        },
    };
    Ok(ExternalSpec {
        command,
        env,
        cwd: text("cwd")?.map(PathBuf::from),
        mllog_file,
        timeout,
        epochs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn options(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn planned_epochs_are_a_whole_number_in_range() {
        let ok = spec(&options(json!({"command": "true", "epochs": 37}))).unwrap();
        assert_eq!(ok.epochs, Some(37));
        for bad in [json!(0), json!(2.5), json!("many"), json!(20000)] {
            let err = spec(&options(json!({"command": "true", "epochs": bad}))).unwrap_err();
            assert!(err.contains("option epochs"), "{err}");
        }
    }

    #[test]
    fn unknown_options_are_named_with_the_ones_taken() {
        let err = spec(&options(json!({"command": "true", "epoch": 3}))).unwrap_err();
        assert!(err.contains("\"epoch\"") && err.contains("epochs"), "{err}");
    }
}
