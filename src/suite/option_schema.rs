//! The run options of every suite as one JSON Schema object (OpenAPI 3.0's dialect),
//! made from the same tables the agent checks options with, so the API description
//! cannot drift from what the agent takes.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::options::{self, OptionSpec, TextSpec};
use crate::engine::recipe::{ValueKind, OPTION_KEYS};

/// One option's schema and the suites that take it.
struct Entry {
    schema: Map<String, Value>,
    suites: Vec<&'static str>,
}

/// `{"type": "object", "properties": {key: schema, …}}`; each property's description
/// names the suites that take it. Which keys a suite takes is checked when a run starts.
pub fn schema() -> Value {
    let mut entries: BTreeMap<&'static str, Entry> = BTreeMap::new();
    let mut add = |key: &'static str, suite: &'static str, schema: Map<String, Value>| {
        entries
            .entry(key)
            .or_insert_with(|| Entry {
                schema,
                suites: Vec::new(),
            })
            .suites
            .push(suite);
    };
    for suite in super::SUITES.iter().copied() {
        add(
            options::STAGE_TIMEOUT_S.key,
            suite,
            number(&options::STAGE_TIMEOUT_S),
        );
        if suite == super::external::NAME || suite == super::burn_in::NAME {
            add(
                super::external::BENCHMARK,
                suite,
                kind(
                    ValueKind::Text(&[]),
                    "name of a benchmark configured in tinyperf.toml ([benchmarks.NAME])",
                ),
            );
        }
        if suite == super::external::NAME {
            continue;
        }
        for spec in options::specs(suite) {
            add(spec.key, suite, number(spec));
        }
        for spec in options::text_specs(suite) {
            add(spec.key, suite, text(spec));
        }
        if options::takes_recipe(suite) {
            for option in OPTION_KEYS {
                add(option.key, suite, kind(option.kind, option.help));
            }
        }
    }
    let properties: Map<String, Value> = entries
        .into_iter()
        .map(|(key, mut entry)| {
            let help = entry.schema["description"]
                .as_str()
                .unwrap_or("")
                .to_string();
            entry.schema.insert(
                "description".into(),
                format!("{help} (suites: {})", entry.suites.join(", ")).into(),
            );
            (key.to_string(), Value::Object(entry.schema))
        })
        .collect();
    json!({
        "type": "object",
        "description": "Options of the run; each suite takes the ones whose description names it, \
                        and a run with any other is refused (400 invalid_args).",
        "additionalProperties": false,
        "properties": properties,
    })
}

fn number(spec: &OptionSpec) -> Map<String, Value> {
    let kind = if spec.integer {
        ValueKind::Integer
    } else {
        ValueKind::Number
    };
    let mut schema = self::kind(kind, spec.help);
    schema.insert("minimum".into(), spec.min.into());
    schema.insert("maximum".into(), spec.max.into());
    schema
}

fn text(spec: &TextSpec) -> Map<String, Value> {
    kind(ValueKind::Text(spec.choices), spec.help)
}

fn kind(kind: ValueKind, help: &str) -> Map<String, Value> {
    let mut schema = Map::new();
    let type_name = match kind {
        ValueKind::Number => "number",
        ValueKind::Integer => "integer",
        ValueKind::Text(_) => "string",
        ValueKind::Flag => "boolean",
    };
    schema.insert("type".into(), type_name.into());
    if let ValueKind::Text(choices) = kind {
        if !choices.is_empty() {
            schema.insert("enum".into(), json!(choices));
        }
    }
    schema.insert("description".into(), help.into());
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_option_a_suite_takes_is_described_with_its_type() {
        let schema = schema();
        let properties = schema["properties"].as_object().unwrap();
        let type_of = |key: &str| properties[key]["type"].as_str().unwrap().to_string();
        for suite in super::super::SUITES {
            for spec in options::specs(suite) {
                let expected = if spec.integer { "integer" } else { "number" };
                assert_eq!(type_of(spec.key), expected, "{}", spec.key);
                assert!(properties[spec.key]["description"]
                    .as_str()
                    .unwrap()
                    .contains(suite));
            }
            for spec in options::text_specs(suite) {
                assert_eq!(type_of(spec.key), "string", "{}", spec.key);
            }
        }
        for key in ["model", "backend", "precision", "dataset", "benchmark"] {
            assert_eq!(type_of(key), "string", "{key}");
        }
        assert_eq!(type_of("dynamic_loss_scale"), "boolean");
        assert_eq!(type_of("train_epochs"), "integer");
        assert_eq!(type_of("base_lr"), "number");
        assert_eq!(properties["model"]["enum"], json!(options::MODEL.choices));
    }
}
