//! Suite options: which keys each suite takes, and their ranges.

use serde_json::{Map, Value};

/// One option a suite accepts: a number within `min..=max`.
#[derive(Debug, Clone, Copy)]
pub struct OptionSpec {
    pub key: &'static str,
    pub min: f64,
    pub max: f64,
    pub integer: bool,
    pub help: &'static str,
}

pub const GEMM_SIZE: OptionSpec = OptionSpec {
    key: "gemm_size",
    min: 64.0,
    max: 8192.0,
    integer: true,
    help: "matrix size N of the N×N×N CPU GEMM",
};
pub const GEMM_SECONDS: OptionSpec = OptionSpec {
    key: "gemm_seconds",
    min: 0.05,
    max: 600.0,
    integer: false,
    help: "how long the CPU GEMM is sustained, in seconds",
};
pub const GEMM_MIN_FRACTION: OptionSpec = OptionSpec {
    key: "gemm_min_fraction",
    min: 0.0,
    max: 1.0,
    integer: false,
    help: "fraction of the CPU's theoretical peak the GEMM must reach to pass",
};

/// The options `suite` accepts.
pub fn specs(suite: &str) -> &'static [OptionSpec] {
    match suite {
        "acceptance" => &[GEMM_SIZE, GEMM_SECONDS, GEMM_MIN_FRACTION],
        _ => &[],
    }
}

/// Checks every option against the suite's specs.
pub fn validate(suite: &str, options: &Map<String, Value>) -> Result<(), String> {
    let specs = specs(suite);
    for (key, value) in options {
        let Some(spec) = specs.iter().find(|s| s.key == key) else {
            let known: Vec<_> = specs.iter().map(|s| s.key).collect();
            return Err(if known.is_empty() {
                format!("suite {suite} takes no options, got {key:?}")
            } else {
                format!(
                    "suite {suite} has no option {key:?} (it takes: {})",
                    known.join(", ")
                )
            });
        };
        let Some(n) = value.as_f64() else {
            return Err(format!("option {key} must be a number, got {value}"));
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
    fn accepts_known_options_in_range() {
        assert!(validate(
            "acceptance",
            &map(json!({"gemm_size": 512, "gemm_seconds": 0.5}))
        )
        .is_ok());
        assert!(validate("inventory", &Map::new()).is_ok());
    }

    #[test]
    fn rejects_unknown_keys_wrong_types_and_ranges() {
        for (suite, opts, needle) in [
            ("inventory", json!({"x": 1}), "takes no options"),
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
