//! Run records and the agent's status as readable text.

use chrono::{DateTime, SecondsFormat, Utc};

use super::table::{fields, Table};
use crate::record::{RunBrief, RunRecord, Verdict};

/// What `tinyperf status` shows, from the agent's `GetStatus`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Status {
    pub state: String,
    pub current_run: Option<String>,
    pub current_stage: Option<String>,
    pub progress: f64,
    pub last_run: Option<serde_json::Value>,
    pub sku: String,
    pub version: String,
}

pub fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn duration(seconds: Option<f64>) -> String {
    match seconds {
        Some(s) if s >= 3600.0 => format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        ),
        Some(s) if s >= 60.0 => format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64),
        Some(s) => format!("{s:.1}s"),
        None => "-".to_string(),
    }
}

fn verdict(v: Option<Verdict>) -> String {
    v.map(|v| v.as_str().to_string())
        .unwrap_or_else(|| "-".into())
}

/// `tinyperf runs`: one line per run.
pub fn runs(records: &[RunBrief]) -> String {
    if records.is_empty() {
        return "no runs recorded\n".to_string();
    }
    let mut table = Table::new(&[
        "ID", "SUITE", "STATE", "VERDICT", "TRIGGER", "STARTED", "DURATION",
    ]);
    for r in records {
        table.row(vec![
            r.id.clone(),
            r.suite.clone(),
            r.state.as_str().to_string(),
            verdict(r.verdict),
            r.trigger.as_str().to_string(),
            time(r.started_at),
            duration(r.duration_s),
        ]);
    }
    table.render()
}

/// `tinyperf show`: the run's header, then its stages, metrics, checks and findings.
pub fn record(r: &RunRecord) -> String {
    let mut header = vec![
        ("run", r.id.clone()),
        ("suite", r.suite.clone()),
        ("state", r.state.as_str().to_string()),
        ("verdict", verdict(r.summary.verdict)),
        ("trigger", r.trigger.as_str().to_string()),
        ("started", time(r.started_at)),
        (
            "finished",
            r.finished_at.map(time).unwrap_or_else(|| "-".into()),
        ),
        ("duration", duration(r.summary.duration_s)),
    ];
    if !r.options.is_empty() {
        header.push((
            "options",
            serde_json::Value::Object(r.options.clone()).to_string(),
        ));
    }
    if let Some(message) = &r.summary.message {
        header.push(("message", message.clone()));
    }
    let mut out = fields(&header);

    if r.stages.is_empty() {
        out.push_str("\nno stages finished\n");
        return out;
    }
    let mut stages = Table::new(&["STAGE", "VERDICT", "DURATION", "MESSAGE"]);
    let mut metrics = Table::new(&["STAGE", "METRIC", "VALUE", "UNIT"]);
    let mut checks = Table::new(&["STAGE", "CHECK", "SUBJECT", "EXPECTED", "FOUND", "VERDICT"]);
    let mut findings = Vec::new();
    for s in &r.stages {
        let seconds = (s.finished_at - s.started_at).num_milliseconds() as f64 / 1000.0;
        stages.row(vec![
            s.name.clone(),
            s.verdict.as_str().to_string(),
            duration(Some(seconds.max(0.0))),
            s.message.clone().unwrap_or_default(),
        ]);
        for m in &s.metrics {
            metrics.row(vec![
                s.name.clone(),
                m.name.clone(),
                format_value(m.value),
                m.unit.clone(),
            ]);
        }
        for c in &s.checks {
            checks.row(vec![
                s.name.clone(),
                c.name.clone(),
                c.subject.clone().unwrap_or_else(|| "-".into()),
                c.expected.clone(),
                c.found.clone(),
                c.verdict.as_str().to_string(),
            ]);
        }
        findings.extend(s.findings.iter().map(|f| format!("{}: {f}", s.name)));
    }
    out.push('\n');
    out.push_str(&stages.render());
    for table in [&metrics, &checks] {
        if !table.is_empty() {
            out.push('\n');
            out.push_str(&table.render());
        }
    }
    if !findings.is_empty() {
        out.push_str("\nFINDINGS\n");
        for f in findings {
            out.push_str(&format!("  {}\n", crate::cli::printable::printable(&f)));
        }
    }
    out
}

fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else if v.abs() < 1e-3 {
        format!("{v:.2e}")
    } else if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// `tinyperf status`.
pub fn status(s: &Status) -> String {
    let mut pairs = vec![("state", s.state.clone())];
    if let Some(run) = &s.current_run {
        pairs.push(("current run", run.clone()));
        pairs.push((
            "stage",
            s.current_stage.clone().unwrap_or_else(|| "-".into()),
        ));
        pairs.push(("progress", format!("{:.0}%", s.progress * 100.0)));
    }
    let last = s
        .last_run
        .as_ref()
        .and_then(|v| serde_json::from_value::<BriefView>(v.clone()).ok());
    pairs.push((
        "last run",
        match last {
            Some(b) => format!(
                "{} {} {}{}",
                b.id,
                b.suite,
                b.state,
                b.finished_at
                    .map(|t| format!(" at {}", time(t)))
                    .unwrap_or_default()
            ),
            None => "none".into(),
        },
    ));
    pairs.push(("sku", s.sku.clone()));
    pairs.push(("version", s.version.clone()));
    fields(&pairs)
}

/// The fields of the agent's `LastRun` brief (a [`crate::record::RunBrief`]) that `status` shows.
#[derive(serde::Deserialize)]
struct BriefView {
    id: String,
    suite: String,
    state: String,
    finished_at: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Check, Metric, StageResult, Trigger};
    use serde_json::Map;

    #[test]
    fn values_keep_their_significant_digits() {
        assert_eq!(format_value(2048.0), "2048");
        assert_eq!(format_value(294.43), "294.4");
        assert_eq!(format_value(0.0531), "0.053");
        assert_eq!(format_value(1.99e-8), "1.99e-8");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Some(1.234)), "1.2s");
        assert_eq!(duration(Some(125.0)), "2m05s");
        assert_eq!(duration(Some(7260.0)), "2h01m");
        assert_eq!(duration(None), "-");
    }

    #[test]
    fn a_record_shows_stages_metrics_and_checks() {
        let mut r = RunRecord::new("r-1".into(), "acceptance".into(), Trigger::Cli, Map::new());
        r.stages.push(StageResult {
            name: "gemm".into(),
            verdict: Verdict::Fail,
            started_at: r.started_at,
            finished_at: r.started_at + chrono::Duration::milliseconds(1500),
            metrics: vec![Metric::new("tflops", 82.51, "TFLOP/s")],
            checks: vec![Check {
                name: "tflops".into(),
                subject: Some("0000:01:00.0".into()),
                expected: ">= 100".into(),
                found: "82.5".into(),
                verdict: Verdict::Fail,
            }],
            findings: vec!["no CUDA driver".into()],
            message: None,
        });
        r.finish(crate::record::RunState::Failed, None);
        let text = record(&r);
        for needle in [
            "run       r-1",
            "state     failed",
            "gemm   fail",
            "82.510",
            "0000:01:00.0",
            "gemm: no CUDA driver",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
        }
    }
}
