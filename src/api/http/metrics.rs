//! `GET /metrics`: Prometheus text exposition format 0.0.4.
//!
//! Metric names start with `tinyperf_` and then the part of the agent that owns the
//! figure: `agent` (the daemon and its supervisor), `store`, `inventory`, `suite`
//! (what the last run measured).

use std::fmt::Write;

use chrono::Utc;
use serde_json::Value;

use crate::agent::handle::{AgentState, Counters, StatusSnapshot};
use crate::record::{RunRecord, RunState, Verdict};

/// What one scrape reports.
pub struct Snapshot<'a> {
    pub status: &'a StatusSnapshot,
    pub counters: &'a Counters,
    pub hardware: &'a Value,
    /// The full record of the last finished run, if it could be read.
    pub last_run: Option<&'a RunRecord>,
    /// Runs in the store's index.
    pub runs_stored: usize,
}

pub fn render(s: &Snapshot<'_>) -> String {
    let mut out = Exposition::default();
    let status = s.status;

    out.family(
        "tinyperf_agent_info",
        "gauge",
        "Always 1; the labels name the agent version and the SKU the box was judged as.",
    );
    out.sample(
        "tinyperf_agent_info",
        &[("version", &status.version), ("sku", &status.sku)],
        1.0,
    );
    out.family(
        "tinyperf_agent_running",
        "gauge",
        "1 while a run is in progress, else 0.",
    );
    out.sample(
        "tinyperf_agent_running",
        &[],
        bool_value(status.state == AgentState::Running),
    );
    out.family(
        "tinyperf_agent_progress_ratio",
        "gauge",
        "Progress of the run in progress, 0 to 1; 0 when idle.",
    );
    out.sample("tinyperf_agent_progress_ratio", &[], status.progress);
    out.family(
        "tinyperf_agent_uptime_seconds",
        "gauge",
        "Seconds since the agent started.",
    );
    let uptime = (Utc::now() - status.agent_started_at).num_milliseconds() as f64 / 1000.0;
    out.sample("tinyperf_agent_uptime_seconds", &[], uptime.max(0.0));
    out.family(
        "tinyperf_agent_runs_started_total",
        "counter",
        "Runs started since the agent started.",
    );
    out.sample(
        "tinyperf_agent_runs_started_total",
        &[],
        s.counters.runs_started as f64,
    );
    out.family(
        "tinyperf_agent_runs_finished_total",
        "counter",
        "Runs finished since the agent started, by final state.",
    );
    for state in RunState::ALL.iter().filter(|s| s.is_final()) {
        let count = s
            .counters
            .runs_finished
            .get(state.as_str())
            .copied()
            .unwrap_or(0);
        out.sample(
            "tinyperf_agent_runs_finished_total",
            &[("state", state.as_str())],
            count as f64,
        );
    }
    out.family(
        "tinyperf_store_records_skipped",
        "gauge",
        "Run records in the store that could not be read when the agent started.",
    );
    out.sample(
        "tinyperf_store_records_skipped",
        &[],
        s.counters.store_records_skipped as f64,
    );

    out.family("tinyperf_store_runs", "gauge", "Runs kept in the store.");
    out.sample("tinyperf_store_runs", &[], s.runs_stored as f64);
    out.family(
        "tinyperf_store_unsaved_runs",
        "gauge",
        "Run records the disk has not taken yet (kept in memory and retried).",
    );
    out.sample(
        "tinyperf_store_unsaved_runs",
        &[],
        status.unsaved_runs.len() as f64,
    );

    inventory(&mut out, s.hardware);
    if let Some(run) = s.last_run {
        last_run(&mut out, run);
    }
    out.text
}

fn inventory(out: &mut Exposition, hardware: &Value) {
    if let Some(gpus) = hardware.get("gpus").and_then(Value::as_array) {
        out.family(
            "tinyperf_inventory_gpus",
            "gauge",
            "GPUs found by the last inventory.",
        );
        out.sample("tinyperf_inventory_gpus", &[], gpus.len() as f64);
    }
    let Some(checks) = hardware.get("checks").and_then(Value::as_array) else {
        return;
    };
    out.family(
        "tinyperf_inventory_checks",
        "gauge",
        "SKU expectation checks of the last inventory, by verdict.",
    );
    for verdict in [Verdict::Pass, Verdict::Fail, Verdict::Skip, Verdict::Error] {
        let count = checks
            .iter()
            .filter(|c| c.get("verdict").and_then(Value::as_str) == Some(verdict.as_str()))
            .count();
        out.sample(
            "tinyperf_inventory_checks",
            &[("verdict", verdict.as_str())],
            count as f64,
        );
    }
}

fn last_run(out: &mut Exposition, run: &RunRecord) {
    out.family(
        "tinyperf_suite_last_run_info",
        "gauge",
        "Always 1; the labels name the last finished run, its suite and final state.",
    );
    out.sample(
        "tinyperf_suite_last_run_info",
        &[
            ("run_id", run.id.as_str()),
            ("suite", run.suite.as_str()),
            ("state", run.state.as_str()),
        ],
        1.0,
    );
    out.family(
        "tinyperf_suite_last_run_passed",
        "gauge",
        "1 if the last finished run passed, else 0.",
    );
    out.sample(
        "tinyperf_suite_last_run_passed",
        &[("suite", run.suite.as_str())],
        bool_value(run.state == RunState::Passed),
    );
    if let Some(finished) = run.finished_at {
        out.family(
            "tinyperf_suite_last_run_finished_timestamp_seconds",
            "gauge",
            "When the last finished run ended, in Unix seconds.",
        );
        out.sample(
            "tinyperf_suite_last_run_finished_timestamp_seconds",
            &[("suite", run.suite.as_str())],
            finished.timestamp_millis() as f64 / 1000.0,
        );
    }
    if let Some(duration) = run.summary.duration_s {
        out.family(
            "tinyperf_suite_last_run_duration_seconds",
            "gauge",
            "How long the last finished run took.",
        );
        out.sample(
            "tinyperf_suite_last_run_duration_seconds",
            &[("suite", run.suite.as_str())],
            duration,
        );
    }
    gpu_checks(out, run);
    if run.stages.iter().all(|stage| stage.metrics.is_empty()) {
        return;
    }
    out.family(
        "tinyperf_suite_stage_metric",
        "gauge",
        "Every figure the last finished run measured, by stage, metric and unit.",
    );
    for stage in &run.stages {
        for metric in &stage.metrics {
            out.sample(
                "tinyperf_suite_stage_metric",
                &[
                    ("suite", run.suite.as_str()),
                    ("stage", stage.name.as_str()),
                    ("metric", metric.name.as_str()),
                    ("unit", metric.unit.as_str()),
                ],
                metric.value,
            );
        }
    }
}

/// Each check of the last finished run that is about one GPU (the health suite's, the
/// acceptance GPU stages'), as a set of states: one sample per outcome, 1 for the one it
/// had, so a fleet can alert on `outcome="fail"` by GPU.
fn gpu_checks(out: &mut Exposition, run: &RunRecord) {
    const OUTCOMES: [Verdict; 4] = [Verdict::Pass, Verdict::Fail, Verdict::Skip, Verdict::Error];
    let mut started = false;
    for stage in &run.stages {
        for check in &stage.checks {
            let Some(gpu) = check.subject.as_deref() else {
                continue;
            };
            if !started {
                out.family(
                    "tinyperf_suite_gpu_check_outcome",
                    "gauge",
                    "1 for the outcome each check about one GPU had in the last finished run, \
                     0 for the others; gpu is its PCI address.",
                );
                started = true;
            }
            for outcome in OUTCOMES {
                out.sample(
                    "tinyperf_suite_gpu_check_outcome",
                    &[
                        ("suite", run.suite.as_str()),
                        ("stage", stage.name.as_str()),
                        ("check", check.name.as_str()),
                        ("gpu", gpu),
                        ("outcome", outcome.as_str()),
                    ],
                    bool_value(check.verdict == outcome),
                );
            }
        }
    }
}

fn bool_value(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (key, value)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                let _ = write!(self.text, "{key}=\"{}\"", escape_label(value));
            }
            self.text.push('}');
        }
        let _ = writeln!(self.text, " {}", format_value(value));
    }
}

/// Label values escape backslash, double quote and line feed.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escapes backslash and line feed.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

/// Values as Prometheus reads them: `NaN`, `+Inf`, `-Inf`, or a Go-parsable float.
fn format_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::handle::StatusSnapshot;
    use crate::record::{Metric, StageResult, Trigger};

    fn status() -> StatusSnapshot {
        StatusSnapshot {
            state: AgentState::Running,
            current_run: Some("r".into()),
            current_suite: Some("inventory".into()),
            current_stage: None,
            progress: 0.25,
            last_run: None,
            unsaved_runs: Vec::new(),
            sku: "tinybox-\"green\"".into(),
            version: "0.1.0".into(),
            agent_started_at: Utc::now(),
        }
    }

    #[test]
    fn labels_and_values_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(format_value(f64::NAN), "NaN");
        assert_eq!(format_value(f64::INFINITY), "+Inf");
        assert_eq!(format_value(f64::NEG_INFINITY), "-Inf");
        assert_eq!(format_value(12.5), "12.5");
        assert_eq!(format_value(3.0), "3");
    }

    #[test]
    fn renders_agent_inventory_and_last_run_families() {
        let mut run = crate::record::RunRecord::new(
            "r1".into(),
            "acceptance".into(),
            Trigger::Http,
            Default::default(),
        );
        run.stages.push(StageResult {
            name: "gemm".into(),
            verdict: Verdict::Pass,
            started_at: Utc::now(),
            finished_at: Utc::now(),
            metrics: vec![Metric::new("tflops \"fp16\"", 165.5, "TFLOP/s")],
            checks: vec![crate::record::Check {
                name: "silent corruption".into(),
                subject: Some("0000:41:00.0".into()),
                expected: "identical".into(),
                found: "differs".into(),
                verdict: Verdict::Fail,
            }],
            findings: vec![],
            message: None,
        });
        run.finish(RunState::Passed, None);
        let mut counters = Counters {
            runs_started: 3,
            ..Counters::default()
        };
        counters.runs_finished.insert("failed".into(), 2);
        let hardware = serde_json::json!({
            "gpus": [{}, {}],
            "checks": [{"verdict": "pass"}, {"verdict": "fail"}, {"verdict": "pass"}],
        });
        let text = render(&Snapshot {
            status: &status(),
            counters: &counters,
            hardware: &hardware,
            last_run: Some(&run),
            runs_stored: 4,
        });
        for line in [
            "tinyperf_agent_info{version=\"0.1.0\",sku=\"tinybox-\\\"green\\\"\"} 1",
            "tinyperf_agent_running 1",
            "tinyperf_agent_progress_ratio 0.25",
            "tinyperf_agent_runs_started_total 3",
            "tinyperf_agent_runs_finished_total{state=\"failed\"} 2",
            "tinyperf_agent_runs_finished_total{state=\"passed\"} 0",
            "tinyperf_inventory_gpus 2",
            "tinyperf_inventory_checks{verdict=\"pass\"} 2",
            "tinyperf_inventory_checks{verdict=\"fail\"} 1",
            "tinyperf_suite_last_run_info{run_id=\"r1\",suite=\"acceptance\",state=\"passed\"} 1",
            "tinyperf_suite_last_run_passed{suite=\"acceptance\"} 1",
            "tinyperf_suite_gpu_check_outcome{suite=\"acceptance\",stage=\"gemm\",check=\"silent corruption\",gpu=\"0000:41:00.0\",outcome=\"fail\"} 1",
            "tinyperf_suite_gpu_check_outcome{suite=\"acceptance\",stage=\"gemm\",check=\"silent corruption\",gpu=\"0000:41:00.0\",outcome=\"pass\"} 0",
            "tinyperf_suite_stage_metric{suite=\"acceptance\",stage=\"gemm\",metric=\"tflops \\\"fp16\\\"\",unit=\"TFLOP/s\"} 165.5",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("runs_finished_total{state=\"running\"}"));
        assert!(text.contains("# TYPE tinyperf_agent_runs_started_total counter\n"));
    }
}
