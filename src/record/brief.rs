//! A run in a few fields: what lists, the status page, `LastRun` and `ListRuns` show,
//! small enough that the store keeps one per run in memory.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::run::{Metric, RunRecord, RunState, Summary, Trigger, Verdict};

/// Figures a brief carries when a stage measured them: the ones an operator
/// compares run against run.
pub const HEADLINE_METRICS: &[&str] = &[
    "gflops_sustained",
    "min_pair_gbps",
    "busbw_gbps",
    "img_per_s",
    "estimated_time_to_train_min",
    "time_to_target_s",
    "final_accuracy",
    "energy_kwh",
];
/// Per-device matmul figures (`gpu0_fp16_tflops`) are headline figures too.
const HEADLINE_SUFFIX: &str = "_tflops";
/// At most this many figures per brief, and this many characters of a message.
const MAX_FIGURES: usize = 16;
const MAX_MESSAGE_CHARS: usize = 500;

/// One stage in a brief.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageBrief {
    /// The stage's name.
    pub name: String,
    /// What it concluded.
    pub verdict: Verdict,
}

/// A headline figure: which stage measured it, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figure {
    /// The stage that measured it.
    pub stage: String,
    /// The metric's name (`img_per_s`).
    pub name: String,
    /// Its value, in `unit`.
    pub value: f64,
    /// Its unit, or empty for a pure number.
    pub unit: String,
    /// The device it is about (a PCI address), for a per-device figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
}

impl Figure {
    /// A per-GPU matmul figure's runtime device index and precision:
    /// `gpu3_fp16_tflops` → (3, "fp16").
    pub fn gpu_matmul(&self) -> Option<(usize, &str)> {
        let rest = self
            .name
            .strip_prefix("gpu")?
            .strip_suffix(HEADLINE_SUFFIX)?;
        let (index, precision) = rest.split_once('_')?;
        Some((index.parse().ok()?, precision))
    }
}

/// A run in brief.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunBrief {
    /// The run's id.
    pub id: String,
    /// The suite it ran.
    pub suite: String,
    /// Where it stands.
    pub state: RunState,
    /// Its verdict; `None` while it runs or when it was never judged.
    pub verdict: Option<Verdict>,
    /// Who asked for it.
    pub trigger: Trigger,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// When it finished; `None` while it runs.
    pub finished_at: Option<DateTime<Utc>>,
    /// From start to finish, in seconds.
    pub duration_s: Option<f64>,
    /// The summary's message, cut after 500 characters.
    pub message: Option<String>,
    /// Each stage's name and verdict, in the order they ran.
    #[serde(default)]
    pub stages: Vec<StageBrief>,
    /// Its headline figures, at most 16.
    #[serde(default)]
    pub figures: Vec<Figure>,
    /// Run-level findings (a record that could not be saved, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
}

/// The parts of a stage a brief is made from.
pub(super) struct StageParts<'a> {
    pub name: &'a str,
    pub verdict: Verdict,
    pub metrics: &'a [Metric],
}

/// The parts of a record a brief is made from, whether read from a whole record or
/// from the head of a file.
pub(super) struct BriefParts<'a> {
    pub id: &'a str,
    pub suite: &'a str,
    pub state: RunState,
    pub trigger: Trigger,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub summary: &'a Summary,
}

impl RunBrief {
    pub(super) fn from_parts<'a>(
        parts: BriefParts<'a>,
        stages: impl Iterator<Item = StageParts<'a>>,
    ) -> RunBrief {
        let mut brief = RunBrief {
            id: parts.id.to_string(),
            suite: parts.suite.to_string(),
            state: parts.state,
            verdict: parts.summary.verdict,
            trigger: parts.trigger,
            started_at: parts.started_at,
            finished_at: parts.finished_at,
            duration_s: parts.summary.duration_s,
            message: parts.summary.message.as_deref().map(shorten),
            stages: Vec::new(),
            figures: Vec::new(),
            findings: parts.summary.findings.iter().map(|f| shorten(f)).collect(),
        };
        for stage in stages {
            brief.stages.push(StageBrief {
                name: stage.name.to_string(),
                verdict: stage.verdict,
            });
            for metric in stage.metrics.iter().filter(|m| is_headline(&m.name)) {
                if brief.figures.len() < MAX_FIGURES {
                    brief.figures.push(Figure {
                        stage: stage.name.to_string(),
                        name: metric.name.clone(),
                        value: metric.value,
                        unit: metric.unit.clone(),
                        subject: metric.subject.clone(),
                    });
                }
            }
        }
        brief
    }
}

impl From<&RunRecord> for RunBrief {
    fn from(r: &RunRecord) -> Self {
        RunBrief::from_parts(
            BriefParts {
                id: &r.id,
                suite: &r.suite,
                state: r.state,
                trigger: r.trigger,
                started_at: r.started_at,
                finished_at: r.finished_at,
                summary: &r.summary,
            },
            r.stages.iter().map(|s| StageParts {
                name: &s.name,
                verdict: s.verdict,
                metrics: &s.metrics,
            }),
        )
    }
}

fn is_headline(metric: &str) -> bool {
    HEADLINE_METRICS.contains(&metric) || metric.ends_with(HEADLINE_SUFFIX)
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::StageResult;

    /// The brief of a passed acceptance run of one stage that measured `metrics`.
    fn brief_of(stage: &str, metrics: Vec<Metric>, message: Option<String>) -> RunBrief {
        let mut r = RunRecord::new(
            "r".into(),
            "acceptance".into(),
            Trigger::Cli,
            Default::default(),
        );
        r.stages.push(StageResult::measured(
            stage,
            Verdict::Pass,
            r.started_at,
            metrics,
        ));
        r.finish(RunState::Passed, message);
        RunBrief::from(&r)
    }

    #[test]
    fn a_brief_keeps_headline_figures_and_bounds_its_text() {
        let brief = brief_of(
            "cpu-gemm",
            vec![
                Metric::new("gflops_sustained", 812.0, "GFLOP/s"),
                Metric::new("threads", 32.0, "count"),
            ],
            Some("x".repeat(10_000)),
        );
        assert_eq!(
            brief.stages,
            [StageBrief {
                name: "cpu-gemm".into(),
                verdict: Verdict::Pass
            }]
        );
        assert_eq!(brief.figures.len(), 1);
        assert_eq!(brief.figures[0].name, "gflops_sustained");
        assert!(brief.message.unwrap().chars().count() <= MAX_MESSAGE_CHARS + 1);
    }

    #[test]
    fn a_per_gpu_figure_keeps_its_gpus_address_through_the_brief_and_json() {
        let brief = brief_of(
            "gpu-gemm",
            vec![
                Metric::new("gpu0_fp16_tflops", 160.0, "TFLOP/s")
                    .about(Some("0000:41:00.0".into())),
                Metric::new("gpu1_fp16_tflops", 161.0, "TFLOP/s"),
            ],
            None,
        );
        let subjects: Vec<_> = brief.figures.iter().map(|f| f.subject.as_deref()).collect();
        assert_eq!(subjects, [Some("0000:41:00.0"), None]);
        let json = serde_json::to_value(&brief).unwrap();
        assert_eq!(json["figures"][0]["subject"], "0000:41:00.0");
        // No address, no key: records and briefs written before read and write the same.
        assert!(json["figures"][1].get("subject").is_none());
        let back: RunBrief = serde_json::from_value(json).unwrap();
        assert_eq!(back, brief);
    }

    #[test]
    fn per_gpu_matmul_figures_give_index_and_precision() {
        let figure = Figure {
            stage: "gpu-gemm".into(),
            name: "gpu3_fp16_tflops".into(),
            value: 160.0,
            unit: "TFLOP/s".into(),
            subject: None,
        };
        assert_eq!(figure.gpu_matmul(), Some((3, "fp16")));
        for name in [
            "img_per_s",
            "gpux_fp16_tflops",
            "gpu3_tflops",
            "gpu3_fp16_gbps",
        ] {
            let other = Figure {
                name: name.into(),
                ..figure.clone()
            };
            assert_eq!(other.gpu_matmul(), None, "{name}");
        }
    }
}
