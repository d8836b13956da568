//! The boot gate: whether this OS version may stay. It judges this boot's boot run
//! (the box recognised, its SKU checks, the GPU stack and every GPU, the suite's
//! verdict) and, while the version has never passed here, holds its figures (GEMM,
//! host↔device and all-reduce bandwidth, training img/s) against the last good figures
//! of the version the box came from, figure by figure. The decision is a pure function
//! of the run and the earlier assessments, so it is tested on stored records.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::{RunRecord, RunState};

/// The ratio of a new version's figures to the previous version's below which it is
/// rejected, unless configured (`boot_check_min_ratio`).
pub const DEFAULT_MIN_RATIO: f64 = 0.95;

/// One figure of a boot run that the gate compares across versions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// What identifies it across runs: `stage/metric`, and `@subject` for a device.
    pub key: String,
    /// Its name for people (`training img/s`).
    pub label: String,
    /// The value.
    pub value: f64,
    /// Its unit.
    pub unit: String,
}

/// One thing the gate checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateCheck {
    /// What was checked (`boot suite verdict`, `training img/s`).
    pub name: String,
    /// What it needed.
    pub expected: String,
    /// What it found.
    pub found: String,
    /// `pass`, `fail` or `skip` (does not apply here).
    pub result: String,
    /// For a figure: the ratio to the previous version's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// For a figure: the previous version's value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_value: Option<f64>,
}

impl GateCheck {
    fn new(name: &str, expected: String, found: String, passed: bool) -> GateCheck {
        GateCheck {
            name: name.into(),
            expected,
            found,
            result: if passed { "pass" } else { "fail" }.into(),
            ratio: None,
            previous_value: None,
        }
    }

    fn skip(name: &str, why: &str) -> GateCheck {
        GateCheck {
            name: name.into(),
            expected: "—".into(),
            found: why.into(),
            result: "skip".into(),
            ratio: None,
            previous_value: None,
        }
    }

    /// Whether it failed.
    pub fn failed(&self) -> bool {
        self.result == "fail"
    }
}

/// One boot's assessment, as the gate recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Assessment {
    /// The OS version assessed.
    pub version: String,
    /// When.
    pub at: DateTime<Utc>,
    /// The kernel's id of the boot assessed.
    #[serde(default)]
    pub boot_id: String,
    /// `pass` or `fail`.
    pub result: String,
    /// The version was on trial (its entry counted tries) when assessed.
    #[serde(default)]
    pub on_trial: bool,
    /// It failed on trial: the boot was marked bad and the box went back.
    #[serde(default)]
    pub rejected: bool,
    /// The version the figures were held against, when they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_version: Option<String>,
    /// The boot run judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Every check, failures first.
    #[serde(default)]
    pub checks: Vec<GateCheck>,
    /// The run's figures, for the next version to be held against.
    #[serde(default)]
    pub figures: Vec<Figure>,
    /// The outcome in one line: `20261207.1 rejected: training img/s 4410 vs 5220 on
    /// 20261206.1, 0.84 < 0.95`.
    pub reason: String,
}

impl Assessment {
    /// Whether the version passed.
    pub fn passed(&self) -> bool {
        self.result == "pass"
    }
}

/// What the gate judges.
#[derive(Debug, Clone)]
pub struct GateInput<'a> {
    /// The running version.
    pub version: &'a str,
    /// Whether the image carries a GPU stack (every variant but `cpu`): then the box must
    /// be a known SKU whose GPUs all answer.
    pub gpu_image: bool,
    /// This boot's boot run, once finished; `None` when none finished in time.
    pub run: Option<&'a RunRecord>,
    /// Why there is no run, when there is none.
    pub no_run_reason: &'a str,
    /// Earlier assessments, oldest first.
    pub history: &'a [Assessment],
    /// `boot_check_min_ratio`.
    pub min_ratio: f64,
}

/// The gate's finding, before it is recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    /// Whether the version may stay.
    pub passed: bool,
    /// Every check, failures first.
    pub checks: Vec<GateCheck>,
    /// The run's figures.
    pub figures: Vec<Figure>,
    /// The version held against, when the figures were compared.
    pub previous_version: Option<String>,
    /// The first failure in words (`training img/s 4410 vs 5220 on 6, 0.84 < 0.95`), or
    /// what passed.
    pub summary: String,
}

/// The version this one is held against: the newest version other than `version` that
/// passed, and its last passing assessment. `None` when `version` already passed here
/// (it is no longer new) or nothing else ever passed.
pub fn previous_good<'a>(version: &str, history: &'a [Assessment]) -> Option<&'a Assessment> {
    if history.iter().any(|a| a.version == version && a.passed()) {
        return None;
    }
    history
        .iter()
        .rev()
        .find(|a| a.passed() && a.version != version && !a.figures.is_empty())
}

/// Judges this boot.
pub fn judge(input: &GateInput<'_>) -> Judgement {
    let mut checks = Vec::new();
    let Some(run) = input.run else {
        checks.push(GateCheck::new(
            "boot run",
            "finished".into(),
            input.no_run_reason.into(),
            false,
        ));
        return finish(checks, Vec::new(), None, input.min_ratio);
    };
    checks.push(GateCheck::new(
        "boot suite verdict",
        "passed".into(),
        format!(
            "{} ({} {}){}",
            run.state.as_str(),
            run.suite,
            run.id,
            run.summary
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ),
        run.state == RunState::Passed,
    ));
    hardware_checks(&run.hardware, input.gpu_image, &mut checks);
    let figures = figures(run);
    let previous = previous_good(input.version, input.history);
    if let Some(previous) = previous {
        compare(&figures, previous, input.min_ratio, &mut checks);
    }
    finish(
        checks,
        figures,
        previous.map(|p| p.version.clone()),
        input.min_ratio,
    )
}

fn finish(
    mut checks: Vec<GateCheck>,
    figures: Vec<Figure>,
    previous_version: Option<String>,
    min_ratio: f64,
) -> Judgement {
    checks.sort_by_key(|c| !c.failed());
    let failed: Vec<&GateCheck> = checks.iter().filter(|c| c.failed()).collect();
    let summary = match failed.first() {
        Some(first) => describe_failure(first, previous_version.as_deref(), min_ratio),
        None => match &previous_version {
            Some(previous) => format!(
                "{} checks passed, every figure at least as good as allowed against {previous}",
                checks.len()
            ),
            None => format!(
                "{} checks passed (no earlier version to compare with)",
                checks.len()
            ),
        },
    };
    Judgement {
        passed: failed.is_empty(),
        checks,
        figures,
        previous_version,
        summary,
    }
}

fn describe_failure(check: &GateCheck, previous: Option<&str>, min_ratio: f64) -> String {
    match (check.ratio, check.previous_value, previous) {
        (Some(ratio), Some(before), Some(previous)) => format!(
            "{} {} vs {} on {previous}, {ratio:.2} < {min_ratio:.2}",
            check.name,
            check.found,
            number(before)
        ),
        (None, Some(before), Some(previous)) => format!(
            "{} missing (was {} on {previous})",
            check.name,
            number(before)
        ),
        _ => format!(
            "{}: {} (expected {})",
            check.name, check.found, check.expected
        ),
    }
}

fn hardware_checks(hardware: &Value, gpu_image: bool, checks: &mut Vec<GateCheck>) {
    let sku = hardware.get("sku").and_then(Value::as_str).unwrap_or("");
    if !gpu_image {
        checks.push(GateCheck::skip(
            "box recognised",
            "not required: this image carries no GPU stack",
        ));
        return;
    }
    checks.push(GateCheck::new(
        "box recognised",
        "a known tinybox SKU".into(),
        if sku.is_empty() {
            "no inventory".into()
        } else {
            sku.into()
        },
        !sku.is_empty() && sku != crate::inventory::UNRECOGNISED,
    ));
    let verdict = hardware
        .get("verdict")
        .and_then(Value::as_str)
        .unwrap_or("");
    let failed: Vec<String> = hardware
        .get("checks")
        .and_then(Value::as_array)
        .map(|all| {
            all.iter()
                .filter(|c| {
                    matches!(
                        c.get("verdict").and_then(Value::as_str),
                        Some("fail" | "error")
                    )
                })
                .map(|c| {
                    format!(
                        "{}: {}",
                        c.get("name").and_then(Value::as_str).unwrap_or("?"),
                        c.get("found").and_then(Value::as_str).unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    checks.push(GateCheck::new(
        "SKU checks",
        "all pass".into(),
        if failed.is_empty() {
            verdict.to_string()
        } else {
            failed.join("; ")
        },
        matches!(verdict, "pass" | "warn") && failed.is_empty(),
    ));
    let on_bus = hardware
        .get("gpus")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let runtime = hardware.get("runtime");
    let loaded: Vec<&str> = ["cuda", "hip"]
        .into_iter()
        .filter(|name| {
            runtime
                .and_then(|r| r.get(name))
                .and_then(|s| s.get("loaded"))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        })
        .collect();
    let seen: usize = ["cuda", "hip"]
        .iter()
        .filter_map(|name| runtime?.get(name)?.get("devices")?.as_array().map(Vec::len))
        .sum();
    checks.push(GateCheck::new(
        "GPU stack loads",
        "CUDA or HIP loaded".into(),
        if loaded.is_empty() {
            "neither loaded".into()
        } else {
            format!("{} loaded", loaded.join(" and "))
        },
        !loaded.is_empty(),
    ));
    checks.push(GateCheck::new(
        "every GPU seen by its runtime",
        format!("{on_bus} (on the PCI bus)"),
        seen.to_string(),
        on_bus > 0 && seen >= on_bus,
    ));
}

/// The figures of a run the gate compares: per-GPU GEMM TFLOP/s, host↔device GB/s,
/// all-reduce bus GB/s, training img/s, and the CPU's GEMM GFLOP/s.
pub fn figures(run: &RunRecord) -> Vec<Figure> {
    let mut out = Vec::new();
    for stage in &run.stages {
        for metric in &stage.metrics {
            let Some(label) = figure_label(&stage.name, &metric.name) else {
                continue;
            };
            if !metric.value.is_finite() {
                continue;
            }
            let mut key = format!("{}/{}", stage.name, metric.name);
            if let Some(subject) = &metric.subject {
                key.push('@');
                key.push_str(subject);
            }
            out.push(Figure {
                key,
                label: format!("{label} {}", metric.unit),
                value: metric.value,
                unit: metric.unit.clone(),
            });
        }
    }
    out
}

fn figure_label(stage: &str, metric: &str) -> Option<String> {
    let gpu_part = |suffix: &str| -> Option<String> {
        let rest = metric.strip_prefix("gpu")?.strip_suffix(suffix)?;
        let (index, what) = rest.split_once('_')?;
        index.parse::<u32>().ok()?;
        Some(format!("GPU {index} {}", what.replace('_', " ")))
    };
    match (stage, metric) {
        ("cpu-gemm", "gflops_sustained") => Some("CPU GEMM".into()),
        ("train-throughput", "img_per_s") => Some("training".into()),
        ("gpu-allreduce", "busbw_gbps") => Some("all-reduce bus".into()),
        ("gpu-gemm", m) if m.ends_with("_tflops") => {
            gpu_part("_tflops").map(|g| format!("{g} GEMM"))
        }
        ("gpu-bandwidth", m) if m.ends_with("_gbps") => gpu_part("_gbps"),
        _ => None,
    }
}

fn compare(figures: &[Figure], previous: &Assessment, min_ratio: f64, checks: &mut Vec<GateCheck>) {
    for before in &previous.figures {
        let expected = format!(
            "≥ {min_ratio:.2} × {} (on {})",
            number(before.value),
            previous.version
        );
        let mut check = match figures.iter().find(|f| f.key == before.key) {
            None => GateCheck::new(&before.label, expected, "missing".into(), false),
            Some(now) => {
                let ratio = if before.value > 0.0 {
                    now.value / before.value
                } else {
                    1.0
                };
                let mut check = GateCheck::new(
                    &before.label,
                    expected,
                    number(now.value),
                    ratio >= min_ratio,
                );
                check.ratio = Some(ratio);
                check
            }
        };
        check.previous_value = Some(before.value);
        checks.push(check);
    }
}

/// A figure for people: three significant digits, thousands grouped.
pub fn number(value: f64) -> String {
    let rounded = if value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    };
    let (int, frac) = match rounded.split_once('.') {
        Some((i, f)) => (i.to_string(), Some(f.to_string())),
        None => (rounded.clone(), None),
    };
    let (sign, digits) = match int.strip_prefix('-') {
        Some(d) => ("-", d.to_string()),
        None => ("", int),
    };
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Metric, StageResult, Trigger, Verdict};
    use serde_json::json;

    /// A finished acceptance run on a six-GPU box, with `img_per_s` for training.
    fn run(img_per_s: f64, gpus_seen: usize) -> RunRecord {
        let mut run = RunRecord::new(
            "20261207-101010-abcdef".into(),
            "acceptance".into(),
            Trigger::Boot,
            Default::default(),
        );
        let stage = |name: &str, metrics: Vec<Metric>| StageResult {
            name: name.into(),
            verdict: Verdict::Pass,
            started_at: Utc::now(),
            finished_at: Utc::now(),
            metrics,
            checks: Vec::new(),
            findings: Vec::new(),
            message: None,
        };
        run.stages = vec![
            stage(
                "gpu-gemm",
                (0..6)
                    .map(|i| {
                        Metric::new(format!("gpu{i}_fp16_tflops"), 150.0, "TFLOP/s")
                            .about(Some(format!("0000:0{i}:00.0")))
                    })
                    .chain([Metric::new("gpu0_fp16_fraction_of_peak", 0.9, "ratio")])
                    .collect(),
            ),
            stage(
                "gpu-allreduce",
                vec![Metric::new("busbw_gbps", 20.0, "GB/s")],
            ),
            stage(
                "train-throughput",
                vec![
                    Metric::new("img_per_s", img_per_s, "img/s"),
                    Metric::new("batch", 256.0, "images"),
                ],
            ),
        ];
        let runtime: Vec<_> = (0..gpus_seen).map(|i| json!({ "index": i })).collect();
        run.hardware = json!({
            "sku": "tinybox-green",
            "verdict": "pass",
            "checks": [{ "name": "GPU count", "verdict": "pass", "found": "6" }],
            "gpus": (0..6).map(|i| json!({ "address": format!("0000:0{i}:00.0") })).collect::<Vec<_>>(),
            "runtime": { "cuda": { "loaded": true, "devices": runtime }, "hip": { "loaded": false, "devices": [] } },
        });
        run.finish(RunState::Passed, None);
        run
    }

    fn passed(version: &str, run: &RunRecord) -> Assessment {
        Assessment {
            version: version.into(),
            at: Utc::now(),
            boot_id: format!("boot-{version}"),
            result: "pass".into(),
            on_trial: false,
            rejected: false,
            previous_version: None,
            run_id: Some(run.id.clone()),
            checks: Vec::new(),
            figures: figures(run),
            reason: String::new(),
        }
    }

    fn judge_with(version: &str, run: Option<&RunRecord>, history: &[Assessment]) -> Judgement {
        judge(&GateInput {
            version,
            gpu_image: true,
            run,
            no_run_reason: "no boot run started within 600 s",
            history,
            min_ratio: DEFAULT_MIN_RATIO,
        })
    }

    #[test]
    fn the_figures_are_the_throughputs_of_the_boot_run() {
        let keys: Vec<String> = figures(&run(5220.0, 6))
            .into_iter()
            .map(|f| f.label)
            .collect();
        assert_eq!(keys.len(), 8, "{keys:?}");
        assert!(
            keys.contains(&"GPU 3 fp16 GEMM TFLOP/s".to_string()),
            "{keys:?}"
        );
        assert!(keys.contains(&"all-reduce bus GB/s".to_string()));
        assert!(keys.contains(&"training img/s".to_string()));
    }

    #[test]
    fn a_healthy_box_with_no_earlier_version_passes_on_its_checks_alone() {
        let j = judge_with("6", Some(&run(5220.0, 6)), &[]);
        assert!(j.passed, "{j:?}");
        assert_eq!(j.previous_version, None);
        assert!(j.summary.contains("no earlier version"), "{}", j.summary);
    }

    #[test]
    fn a_gpu_its_runtime_does_not_see_fails_the_gate() {
        let j = judge_with("6", Some(&run(5220.0, 5)), &[]);
        assert!(!j.passed);
        assert_eq!(j.checks[0].name, "every GPU seen by its runtime");
        assert!(j.summary.contains("5 (expected 6"), "{}", j.summary);
    }

    #[test]
    fn a_new_version_at_0_84_of_the_previous_training_speed_is_rejected_figure_by_figure() {
        let history = [passed("6", &run(5220.0, 6))];
        let j = judge_with("7", Some(&run(4410.0, 6)), &history);
        assert!(!j.passed);
        assert_eq!(j.previous_version.as_deref(), Some("6"));
        assert_eq!(j.summary, "training img/s 4,410 vs 5,220 on 6, 0.84 < 0.95");
        let failed: Vec<_> = j.checks.iter().filter(|c| c.failed()).collect();
        assert_eq!(failed.len(), 1, "only the training figure fell: {failed:?}");
        assert!((failed[0].ratio.unwrap() - 0.8448).abs() < 1e-3);
        // 0.96 of each figure is within the default ratio.
        assert!(judge_with("7", Some(&run(5220.0 * 0.96, 6)), &history).passed);
    }

    #[test]
    fn a_version_that_already_passed_here_is_not_held_against_the_one_before() {
        let history = [passed("6", &run(5220.0, 6)), passed("7", &run(5200.0, 6))];
        let j = judge_with("7", Some(&run(3000.0, 6)), &history);
        assert!(j.passed, "{j:?}");
        assert_eq!(j.previous_version, None);
    }

    #[test]
    fn a_figure_gone_missing_fails_and_says_what_it_was() {
        let history = [passed("6", &run(5220.0, 6))];
        let mut slow = run(5220.0, 6);
        slow.stages[0].metrics.remove(5);
        let j = judge_with("7", Some(&slow), &history);
        assert!(!j.passed);
        assert!(
            j.summary
                .starts_with("GPU 5 fp16 GEMM TFLOP/s missing (was 150 on 6)"),
            "{}",
            j.summary
        );
    }

    #[test]
    fn no_finished_boot_run_or_a_failed_one_fails() {
        let j = judge_with("7", None, &[]);
        assert!(!j.passed);
        assert!(
            j.summary.contains("no boot run started within 600 s"),
            "{}",
            j.summary
        );
        let mut failed = run(5220.0, 6);
        failed.state = RunState::Failed;
        let j = judge_with("7", Some(&failed), &[]);
        assert!(!j.passed);
        assert!(
            j.summary.starts_with("boot suite verdict: failed"),
            "{}",
            j.summary
        );
    }

    #[test]
    fn an_unrecognised_box_fails_on_a_gpu_image_and_is_not_asked_on_the_cpu_image() {
        let mut unknown = run(5220.0, 6);
        unknown.hardware["sku"] = json!("unrecognised");
        assert!(!judge_with("7", Some(&unknown), &[]).passed);
        let cpu = judge(&GateInput {
            version: "7",
            gpu_image: false,
            run: Some(&unknown),
            no_run_reason: "",
            history: &[],
            min_ratio: DEFAULT_MIN_RATIO,
        });
        assert!(cpu.passed, "{cpu:?}");
        assert_eq!(cpu.checks.iter().filter(|c| c.result == "skip").count(), 1);
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(number(5220.0), "5,220");
        assert_eq!(number(1234567.0), "1,234,567");
        assert_eq!(number(15.25), "15.2");
        assert_eq!(number(0.8448), "0.84");
    }
}
