//! The compliance rules of ruleset 4.0.0 for ResNet, as `mlperf_logging`'s compliance
//! checker applies them: the common rules, then the division's, then ResNet's, then the
//! optimizer's. The result summarizer drops every run that fails them, so scoring
//! needs the same verdict. The rules are read in file order with the checker's own
//! quirks: a later rule set replaces the messages an earlier one left for the same
//! key, a key that must appear once but repeats with one value only warns, and
//! `submission_*` keys are checked on their first line only.

use std::collections::{BTreeMap, VecDeque};

use serde_json::Value;

use super::log::{Entry, MlLogText};

/// Top-1 the closed division needs, as the checker writes it.
pub const CLOSED_TARGET: f64 = 0.7590;

/// What the checker would say about one log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Compliance {
    /// Why it fails; empty when it passes.
    pub errors: Vec<String>,
    /// What it only warns about.
    pub warnings: Vec<String>,
    /// `submission_division` and `submission_benchmark` as first logged.
    pub division: Option<String>,
    /// `submission_benchmark`, likewise.
    pub benchmark: Option<String>,
}

impl Compliance {
    /// Whether the log passes every rule (it may still have warnings).
    pub fn passed(&self) -> bool {
        self.errors.is_empty()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Config {
    Common,
    ClosedCommon,
    OpenCommon,
    ClosedResnet,
    OpenResnet,
    Lars,
    Sgd,
}

#[derive(Clone, Copy)]
enum Req {
    ExactlyOne,
    AtLeastOne,
    AtLeastOneOr(&'static str),
}

/// The state the common rules carry from line to line.
#[derive(Default)]
struct State {
    init_started: bool,
    init_stopped: bool,
    run_started: bool,
    first_init_start: f64,
    compile_time_mins: f64,
}

type Check = fn(&Entry, &State) -> bool;
type Post = fn(&Entry, &mut State, &mut VecDeque<Enqueued>);
/// A test at least one line of a key must pass, with how the checker writes it.
type AtLeastOne = (&'static str, fn(f64) -> bool);

#[derive(Debug)]
enum Enqueued {
    Config(Config),
    Missing(String),
}

struct Rule {
    name: &'static str,
    req: Req,
    checks: &'static [(&'static str, Check)],
    post: Option<Post>,
    at_least_one: Option<AtLeastOne>,
}

const fn rule(name: &'static str, req: Req, checks: &'static [(&'static str, Check)]) -> Rule {
    Rule {
        name,
        req,
        checks,
        post: None,
        at_least_one: None,
    }
}

/// A JSON value as Python's comparisons see it: numbers and booleans are numbers.
fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        _ => None,
    }
}

fn py_eq(a: &Value, b: &Value) -> bool {
    match (num(a), num(b)) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

fn is_integer(x: f64) -> bool {
    (x.round() - x).abs() < 0.00001
}

fn not_empty(e: &Entry, _: &State) -> bool {
    e.value.as_str() != Some("")
}
fn positive(e: &Entry, _: &State) -> bool {
    num(&e.value).is_some_and(|v| v > 0.0)
}
fn meta_is_object(e: &Entry) -> bool {
    e.metadata.is_object()
}
fn has_epoch_num(e: &Entry, _: &State) -> bool {
    meta_is_object(e) && e.has_meta("epoch_num")
}
fn has_epoch_or_samples(e: &Entry, _: &State) -> bool {
    meta_is_object(e) && (e.has_meta("epoch_num") || e.has_meta("samples_count"))
}
fn in_list(e: &Entry, list: &[&str]) -> bool {
    e.value.as_str().is_some_and(|v| list.contains(&v))
}
fn power_of_two_wd(e: &Entry, _: &State) -> bool {
    num(&e.value).is_some_and(|v| {
        let x = (v / 0.0001).log2();
        x.is_finite() && is_integer(x)
    })
}
fn equals(e: &Entry, target: f64) -> bool {
    num(&e.value) == Some(target)
}

const BENCHMARKS: &[&str] = &[
    "resnet",
    "ssd",
    "stable_diffusion",
    "maskrcnn",
    "gpt3",
    "dlrm_dcnv2",
    "bert",
    "rnnt",
    "unet3d",
    "gnn",
    "llama2_70b_lora",
];

fn common_rules() -> Vec<Rule> {
    vec![
        rule("submission_org", Req::ExactlyOne, &[("value != ''", not_empty)]),
        rule("submission_platform", Req::ExactlyOne, &[("value != ''", not_empty)]),
        Rule {
            post: Some(|e, s, queue| {
                let division = e.value.as_str().unwrap_or_default();
                s.compile_time_mins = if division == "open" { 240.0 } else { 30.0 };
                queue.push_back(match division {
                    "closed" => Enqueued::Config(Config::ClosedCommon),
                    "open" => Enqueued::Config(Config::OpenCommon),
                    other => Enqueued::Missing(format!("training_4.0.0/{other}_common.yaml")),
                });
            }),
            ..rule(
                "submission_division",
                Req::ExactlyOne,
                &[("value in ['closed', 'open']", |e, _| {
                    in_list(e, &["closed", "open"])
                })],
            )
        },
        rule(
            "submission_status",
            Req::ExactlyOne,
            &[("value in ['cloud', 'onprem', 'preview', 'research']", |e, _| {
                in_list(e, &["cloud", "onprem", "preview", "research"])
            })],
        ),
        rule("cache_clear", Req::AtLeastOne, &[]),
        Rule {
            post: Some(|e, s, _| {
                s.init_started = true;
                s.first_init_start = s.first_init_start.min(e.time_ms);
            }),
            ..rule(
                "init_start",
                Req::AtLeastOne,
                &[
                    ("not after init_stop", |_, s| !s.init_stopped),
                    ("not after run_start", |_, s| !s.run_started),
                ],
            )
        },
        Rule {
            post: Some(|_, s, _| s.init_stopped = true),
            ..rule(
                "init_stop",
                Req::ExactlyOne,
                &[
                    ("after init_start", |_, s| s.init_started),
                    ("before run_start", |_, s| !s.run_started),
                    (
                        "within the initialisation limit (30 min closed, 240 min open) of the first init_start",
                        |e, s| e.time_ms - s.first_init_start < s.compile_time_mins * 60.0 * 1e3,
                    ),
                ],
            )
        },
        Rule {
            post: Some(|_, s, _| s.run_started = true),
            ..rule("run_start", Req::ExactlyOne, &[("after init_stop", |_, s| s.init_stopped)])
        },
        rule(
            "run_stop",
            Req::ExactlyOne,
            &[
                ("after run_start", |_, s| s.run_started),
                ("a status in its metadata", |e, _| {
                    meta_is_object(e) && e.has_meta("status")
                }),
            ],
        ),
        rule(
            "block_start",
            Req::AtLeastOneOr("epoch_start"),
            &[
                ("after run_start", |_, s| s.run_started),
                ("epoch_count or samples_count in its metadata", |e, _| {
                    meta_is_object(e) && (e.has_meta("epoch_count") || e.has_meta("samples_count"))
                }),
                ("first_epoch_num beside epoch_count", |e, _| {
                    !e.has_meta("epoch_count") || e.has_meta("first_epoch_num")
                }),
                ("epoch_count > 0", |e, _| {
                    e.meta("epoch_count").is_none_or(|v| num(v).is_some_and(|n| n > 0.0))
                }),
                ("samples_count >= 0", |e, _| {
                    e.meta("samples_count").is_none_or(|v| num(v).is_some_and(|n| n >= 0.0))
                }),
            ],
        ),
        rule(
            "block_stop",
            Req::AtLeastOneOr("epoch_stop"),
            &[("first_epoch_num or samples_count in its metadata", |e, _| {
                meta_is_object(e) && (e.has_meta("first_epoch_num") || e.has_meta("samples_count"))
            })],
        ),
        rule("epoch_start", Req::AtLeastOneOr("block_start"), &[("epoch_num in its metadata", has_epoch_num)]),
        rule("epoch_stop", Req::AtLeastOneOr("block_stop"), &[("epoch_num in its metadata", has_epoch_num)]),
        rule("eval_start", Req::AtLeastOneOr("block_start"), &[("epoch_num or samples_count in its metadata", has_epoch_or_samples)]),
        rule("eval_stop", Req::AtLeastOneOr("block_stop"), &[("epoch_num or samples_count in its metadata", has_epoch_or_samples)]),
        rule("eval_accuracy", Req::AtLeastOne, &[("epoch_num or samples_count in its metadata", has_epoch_or_samples)]),
        rule("train_samples", Req::ExactlyOne, &[("value != ''", not_empty)]),
        rule("eval_samples", Req::ExactlyOne, &[("value != ''", not_empty)]),
    ]
}

fn benchmark_rule(closed: bool) -> Rule {
    Rule {
        post: Some(if closed {
            |e, _, queue| {
                queue.push_back(match e.value.as_str() {
                    Some("resnet") => Enqueued::Config(Config::ClosedResnet),
                    other => Enqueued::Missing(format!(
                        "training_4.0.0/closed_{}.yaml",
                        other.unwrap_or("?")
                    )),
                })
            }
        } else {
            |e, _, queue| {
                queue.push_back(match e.value.as_str() {
                    Some("resnet") => Enqueued::Config(Config::OpenResnet),
                    other => Enqueued::Missing(format!(
                        "training_4.0.0/open_{}.yaml",
                        other.unwrap_or("?")
                    )),
                })
            }
        }),
        ..rule(
            "submission_benchmark",
            Req::ExactlyOne,
            if closed {
                &[("a known benchmark", |e, _| in_list(e, BENCHMARKS))]
            } else {
                &[("a known benchmark", |e, _| {
                    in_list(e, &BENCHMARKS[..BENCHMARKS.len() - 1])
                })]
            },
        )
    }
}

fn rules(config: Config) -> Vec<Rule> {
    match config {
        Config::Common => common_rules(),
        Config::ClosedCommon => vec![benchmark_rule(true)],
        Config::OpenCommon => vec![benchmark_rule(false)],
        Config::ClosedResnet => vec![
            rule(
                "gradient_accumulation_steps",
                Req::ExactlyOne,
                &[("value > 0", positive)],
            ),
            rule(
                "global_batch_size",
                Req::ExactlyOne,
                &[("value > 0", positive)],
            ),
            Rule {
                post: Some(|e, _, queue| {
                    queue.push_back(match e.value.as_str() {
                        Some("lars") => Enqueued::Config(Config::Lars),
                        Some("sgd") => Enqueued::Config(Config::Sgd),
                        other => Enqueued::Missing(format!(
                            "training_3.1.0/closed_resnet_{}.yaml",
                            other.unwrap_or("?")
                        )),
                    })
                }),
                ..rule(
                    "opt_name",
                    Req::ExactlyOne,
                    &[("value in ['sgd', 'lars']", |e, _| {
                        in_list(e, &["sgd", "lars"])
                    })],
                )
            },
            Rule {
                at_least_one: Some(("value >= 0.7590 and value < 1.0", |v| {
                    (CLOSED_TARGET..1.0).contains(&v)
                })),
                ..rule(
                    "eval_accuracy",
                    Req::AtLeastOne,
                    &[("epoch_num in its metadata", has_epoch_num)],
                )
            },
        ],
        Config::OpenResnet => vec![Rule {
            at_least_one: Some(("value < 1.0", |v| v < 1.0)),
            ..rule(
                "eval_accuracy",
                Req::AtLeastOne,
                &[("epoch_num in its metadata", has_epoch_num)],
            )
        }],
        Config::Lars => vec![
            rule("lars_opt_base_learning_rate", Req::ExactlyOne, &[]),
            rule(
                "lars_opt_end_learning_rate",
                Req::ExactlyOne,
                &[("value == 0.0001", |e, _| equals(e, 0.0001))],
            ),
            rule(
                "lars_opt_learning_rate_decay_poly_power",
                Req::ExactlyOne,
                &[("value == 2", |e, _| equals(e, 2.0))],
            ),
            rule("lars_opt_learning_rate_decay_steps", Req::ExactlyOne, &[]),
            rule(
                "lars_epsilon",
                Req::ExactlyOne,
                &[("value == 0.0", |e, _| equals(e, 0.0))],
            ),
            rule("lars_opt_learning_rate_warmup_epochs", Req::ExactlyOne, &[]),
            rule("lars_opt_momentum", Req::ExactlyOne, &[]),
            rule(
                "lars_opt_weight_decay",
                Req::ExactlyOne,
                &[("value = 0.0001·2^N", power_of_two_wd)],
            ),
        ],
        Config::Sgd => vec![
            rule(
                "sgd_opt_base_learning_rate",
                Req::ExactlyOne,
                &[("value a multiple of 0.001", |e, _| {
                    num(&e.value).is_some_and(|v| is_integer(v / 0.001))
                })],
            ),
            rule(
                "sgd_opt_end_learning_rate",
                Req::ExactlyOne,
                &[("value == 0.0001", |e, _| equals(e, 0.0001))],
            ),
            rule(
                "sgd_opt_learning_rate_decay_poly_power",
                Req::ExactlyOne,
                &[],
            ),
            rule("sgd_opt_learning_rate_decay_steps", Req::ExactlyOne, &[]),
            rule(
                "sgd_opt_weight_decay",
                Req::ExactlyOne,
                &[("value = 0.0001·2^N", power_of_two_wd)],
            ),
            rule("sgd_opt_momentum", Req::ExactlyOne, &[]),
            rule("model_bn_span", Req::ExactlyOne, &[]),
            rule("opt_learning_rate_warmup_epochs", Req::ExactlyOne, &[]),
        ],
    }
}

/// Messages as the checker keeps them: one per key (a later rule set for the key
/// clears it) and the rest.
#[derive(Default)]
struct Messages {
    keyed: BTreeMap<String, String>,
    other: Vec<String>,
    warnings: Vec<String>,
}

/// Checks `log` as `compliance_checker --usage training --ruleset 4.0.0` does.
pub fn check(log: &MlLogText) -> Compliance {
    let mut messages = Messages::default();
    if log.entries.is_empty() {
        messages.other.push("no MLLOG lines".into());
    }
    for bad in &log.bad_lines {
        messages
            .other
            .push(format!("line {} cannot be read: {}", bad.line, bad.reason));
    }
    let mut queue = VecDeque::from([Enqueued::Config(Config::Common)]);
    while let Some(next) = queue.pop_front() {
        match next {
            Enqueued::Config(config) => run_config(config, log, &mut messages, &mut queue),
            Enqueued::Missing(file) => {
                // The checker stops with a traceback here.
                messages
                    .other
                    .push(format!("the checker has no rules {file} for this log"));
            }
        }
    }
    let mut errors: Vec<String> = messages.keyed.into_values().collect();
    errors.extend(messages.other);
    Compliance {
        errors,
        warnings: messages.warnings,
        division: log
            .first("submission_division")
            .and_then(|e| e.value.as_str().map(str::to_string)),
        benchmark: log
            .first("submission_benchmark")
            .and_then(|e| e.value.as_str().map(str::to_string)),
    }
}

fn run_config(
    config: Config,
    log: &MlLogText,
    messages: &mut Messages,
    queue: &mut VecDeque<Enqueued>,
) {
    let rules = rules(config);
    let by_name: BTreeMap<&str, &Rule> = rules.iter().map(|r| (r.name, r)).collect();
    for name in by_name.keys() {
        messages.keyed.remove(*name);
    }
    let mut state = State {
        first_init_start: 9e99,
        ..State::default()
    };
    let mut reported: BTreeMap<&str, Vec<&Value>> =
        by_name.keys().map(|k| (*k, Vec::new())).collect();
    let mut at_least_one: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
    let mut submission_seen: Vec<&str> = Vec::new();
    for entry in &log.entries {
        let Some(rule) = by_name.get(entry.key.as_str()) else {
            continue;
        };
        if let Some(values) = reported.get_mut(rule.name) {
            values.push(&entry.value);
        }
        if !submission_seen.contains(&rule.name) {
            for (what, check) in rule.checks {
                if !check(entry, &state) {
                    messages.keyed.insert(
                        rule.name.to_string(),
                        format!("line {}: {} needs {what}", entry.line, rule.name),
                    );
                }
            }
            if let Some(post) = rule.post {
                post(entry, &mut state, queue);
            }
        }
        if let Some((what, test)) = rule.at_least_one {
            let count = &mut at_least_one.entry(rule.name).or_insert((what, 0)).1;
            if num(&entry.value).is_some_and(test) {
                *count += 1;
            }
        }
        if rule.name.starts_with("submission_") && !submission_seen.contains(&rule.name) {
            submission_seen.push(rule.name);
        }
    }
    for (name, (what, count)) in at_least_one {
        if count == 0 {
            messages.other.push(format!("no {name} line has {what}"));
        }
    }
    let mut alternatives: Vec<[&str; 2]> = Vec::new();
    for rule in &rules {
        let values = &reported[rule.name];
        match rule.req {
            Req::ExactlyOne if values.len() != 1 => {
                let all_same = values.iter().all(|v| py_eq(v, values[0]));
                if !values.is_empty() && all_same {
                    messages.warnings.push(format!(
                        "{} appears {} times with the same value; it should appear once",
                        rule.name,
                        values.len()
                    ));
                } else {
                    messages.keyed.insert(
                        rule.name.to_string(),
                        format!(
                            "{} must appear exactly once, found {}{}",
                            rule.name,
                            values.len(),
                            if values.is_empty() {
                                ""
                            } else {
                                " with different values"
                            }
                        ),
                    );
                }
            }
            Req::ExactlyOne => {}
            Req::AtLeastOne if values.is_empty() => {
                messages.keyed.insert(
                    rule.name.to_string(),
                    format!("{} must appear at least once", rule.name),
                );
            }
            Req::AtLeastOne => {}
            Req::AtLeastOneOr(other) => {
                let mut pair = [rule.name, other];
                pair.sort_unstable();
                if !alternatives.contains(&pair) {
                    alternatives.push(pair);
                }
            }
        }
    }
    for pair in alternatives {
        let any = pair
            .iter()
            .any(|k| reported.get(k).is_some_and(|v| !v.is_empty()));
        if !any {
            messages
                .other
                .push(format!("neither {} nor {} appears", pair[0], pair[1]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = include_str!("../../tests/fixtures/mlperf/minimal_resnet_pass.log");

    #[test]
    fn the_minimal_closed_log_passes() {
        let result = check(&MlLogText::parse(MINIMAL));
        assert!(result.passed(), "{:?}", result.errors);
        assert_eq!(result.division.as_deref(), Some("closed"));
    }

    #[test]
    fn each_failure_is_named() {
        let cases: [(&str, &str, &str); 5] = [
            (
                "\"value\": 0.0002,",
                "\"value\": 0.0003,",
                "lars_opt_weight_decay",
            ),
            ("\"value\": 0.7595,", "\"value\": 0.7589,", "0.7590"),
            (", \"status\": \"success\"", "", "status"),
            (
                "\"value\": \"onprem\"",
                "\"value\": \"available\"",
                "submission_status",
            ),
            (
                "\"time_ms\": 1700000600000,",
                "\"time_ms\": 1700001900000,",
                "init_stop",
            ),
        ];
        for (from, to, named) in cases {
            assert!(MINIMAL.contains(from), "{from}");
            let result = check(&MlLogText::parse(&MINIMAL.replacen(from, to, 1)));
            assert!(!result.passed(), "{to}");
            assert!(
                result.errors.iter().any(|e| e.contains(named)),
                "{named}: {:?}",
                result.errors
            );
        }
    }

    #[test]
    fn a_repeated_identical_key_only_warns_and_a_different_one_fails() {
        let run_start = MINIMAL
            .lines()
            .find(|l| l.contains("\"run_start\""))
            .unwrap();
        let doubled = MINIMAL.replace(run_start, &format!("{run_start}\n{run_start}"));
        let result = check(&MlLogText::parse(&doubled));
        assert!(result.passed(), "{:?}", result.errors);
        assert_eq!(result.warnings.len(), 1);

        // A key of the common rules repeated warns once, not once per rule set.
        for key in ["submission_org", "global_batch_size", "run_start"] {
            let line = MINIMAL
                .lines()
                .find(|l| l.contains(&format!("\"{key}\"")))
                .unwrap();
            let doubled = MINIMAL.replace(line, &format!("{line}\n{line}"));
            let result = check(&MlLogText::parse(&doubled));
            assert_eq!(result.warnings.len(), 1, "{key}: {:?}", result.warnings);
        }

        let seed = MINIMAL
            .lines()
            .find(|l| l.contains("\"global_batch_size\""))
            .unwrap();
        let other = seed.replace("1536", "1024");
        let result = check(&MlLogText::parse(
            &MINIMAL.replace(seed, &format!("{seed}\n{other}")),
        ));
        assert!(!result.passed());
    }

    #[test]
    fn open_division_needs_no_target() {
        let open = MINIMAL
            .replace("\"value\": \"closed\"", "\"value\": \"open\"")
            .replace("\"value\": 0.7595,", "\"value\": 0.5,");
        let result = check(&MlLogText::parse(&open));
        assert!(result.passed(), "{:?}", result.errors);
    }

    #[test]
    fn another_benchmark_is_not_checked_here() {
        let bert = MINIMAL.replace("\"value\": \"resnet\"", "\"value\": \"bert\"");
        let result = check(&MlLogText::parse(&bert));
        assert_eq!(result.benchmark.as_deref(), Some("bert"));
        assert!(!result.passed());
    }
}
