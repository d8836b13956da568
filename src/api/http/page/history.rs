//! What the status page makes from the stored runs: the history table, the
//! comparison with published results and the trends of the box's figures over its
//! runs. They change only when a run does, so the agent keeps them between requests.

use super::compare::{comparison, Comparison, Prices};
use super::svg::{self, Series, SvgFigure};
use super::text::{duration_or_dash, number, or_dash, utc_text};
use crate::record::RunBrief;

/// Figures of the box's history drawn as trends.
const TREND_FIGURES: &[(&str, &str)] = &[
    ("img_per_s", "training throughput"),
    ("estimated_time_to_train_min", "estimated time to train"),
    ("time_to_target_s", "time to target"),
    ("gflops_sustained", "CPU GEMM"),
    ("busbw_gbps", "all-reduce bus bandwidth"),
    ("min_pair_gbps", "slowest GPU pair"),
    ("energy_kwh", "energy"),
];

/// The parts of the page made from the stored runs: they change only when a run
/// does, so the agent keeps them between requests.
pub struct HistoryParts {
    /// A row per run, newest first.
    pub(super) history: Vec<HistoryRow>,
    /// This box beside the published results.
    pub(super) comparison: Comparison,
    /// The headline figures over the runs.
    pub(super) trends: Vec<SvgFigure>,
}

/// One run of the history table.
pub(super) struct HistoryRow {
    /// The run's id.
    pub id: String,
    /// Its suite.
    pub suite: String,
    /// Its state (`passed`, `failed`, …).
    pub state: &'static str,
    /// Its verdict, or `—`.
    pub verdict: String,
    /// What started it (`boot`, `http`, …).
    pub trigger: &'static str,
    /// When it started, in UTC.
    pub started: String,
    /// How long it took, or `—`.
    pub duration: String,
    /// Its first figure as `name value unit`, or empty.
    pub headline: String,
}

/// Builds the history table from `runs` and the comparison and trends from
/// `trend_runs` (both newest first).
pub fn history_parts(
    sku: &str,
    runs: &[RunBrief],
    trend_runs: &[RunBrief],
    prices: &Prices,
) -> HistoryParts {
    HistoryParts {
        history: runs.iter().map(history_row).collect(),
        comparison: comparison(sku, trend_runs, prices),
        trends: trends(trend_runs),
    }
}

fn history_row(run: &RunBrief) -> HistoryRow {
    HistoryRow {
        id: run.id.clone(),
        suite: run.suite.clone(),
        state: run.state.as_str(),
        verdict: or_dash(run.verdict.map(|v| v.as_str().to_string())),
        trigger: run.trigger.as_str(),
        started: utc_text(run.started_at),
        duration: duration_or_dash(run.duration_s),
        headline: run
            .figures
            .first()
            .map(|f| format!("{} {} {}", f.name, number(f.value), f.unit))
            .unwrap_or_default(),
    }
}

/// Each headline figure over the box's runs, oldest to newest.
fn trends(runs: &[RunBrief]) -> Vec<SvgFigure> {
    TREND_FIGURES
        .iter()
        .filter_map(|(name, title)| {
            let mut by_suite: Vec<Series> = Vec::new();
            let mut unit = String::new();
            for run in runs.iter().rev() {
                for f in run.figures.iter().filter(|f| f.name == *name) {
                    unit.clone_from(&f.unit);
                    let label = format!("{} {}", run.suite, f.stage);
                    let x = run.started_at.timestamp() as f64;
                    svg::add_point(&mut by_suite, label, (x, f.value));
                }
            }
            by_suite.retain(|s| s.values.len() >= 2);
            (!by_suite.is_empty()).then(|| svg::figure(title, &unit, by_suite))
        })
        .chain(gpu_matmul_trends(runs))
        .collect()
}

/// Each GPU's matmul TFLOP/s over the box's runs, a figure per precision and a line per
/// GPU (by PCI address; by the runtime's index in records made before figures carried
/// one): a card that slows from run to run is a line of its own falling.
fn gpu_matmul_trends(runs: &[RunBrief]) -> Vec<SvgFigure> {
    let mut by_precision: Vec<(String, Vec<Series>)> = Vec::new();
    for run in runs.iter().rev() {
        let x = run.started_at.timestamp() as f64;
        for figure in &run.figures {
            let Some((index, precision)) = figure.gpu_matmul() else {
                continue;
            };
            let label = match &figure.subject {
                Some(address) => format!("GPU {address}"),
                None => format!("GPU {index}"),
            };
            let lines = match by_precision.iter_mut().find(|(p, _)| p == precision) {
                Some((_, lines)) => lines,
                None => {
                    by_precision.push((precision.to_string(), Vec::new()));
                    &mut by_precision.last_mut().expect("just pushed").1
                }
            };
            svg::add_point(lines, label, (x, figure.value));
        }
    }
    by_precision
        .into_iter()
        .filter_map(|(precision, mut lines)| {
            lines.retain(|s| s.values.len() >= 2);
            (!lines.is_empty())
                .then(|| svg::figure(&format!("GPU {precision} matmul"), "TFLOP/s", lines))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::http::page::testing::brief;
    use crate::record::Figure;
    use chrono::Utc;

    #[test]
    fn each_gpus_matmul_is_a_line_of_its_own_over_the_runs() {
        let run = |minutes: i64, figures: &[(&str, f64, Option<&str>)]| RunBrief {
            started_at: Utc::now() - chrono::Duration::minutes(minutes),
            figures: figures
                .iter()
                .map(|(name, value, subject)| Figure {
                    stage: "gpu-gemm".into(),
                    name: name.to_string(),
                    value: *value,
                    unit: "TFLOP/s".into(),
                    subject: subject.map(str::to_string),
                })
                .collect(),
            ..brief("r")
        };
        let (a, b) = (Some("0000:01:00.0"), Some("0000:41:00.0"));
        // Newest first, as the store lists them; the runtime's device 0 is b in one run.
        let runs = [
            run(
                1,
                &[
                    ("gpu0_fp16_tflops", 150.0, b),
                    ("gpu1_fp16_tflops", 160.0, a),
                ],
            ),
            run(
                2,
                &[
                    ("gpu0_fp16_tflops", 161.0, a),
                    ("gpu1_fp16_tflops", 158.0, b),
                ],
            ),
            run(3, &[("gpu0_f32_tflops", 80.0, a)]),
        ];
        let trends = gpu_matmul_trends(&runs);
        let titles: Vec<_> = trends.iter().map(|f| f.title.as_str()).collect();
        // f32 has one point only, so no line.
        assert_eq!(titles, ["GPU fp16 matmul"]);
        let lines: Vec<_> = trends[0]
            .lines
            .iter()
            .map(|l| (l.label.as_str(), l.last.as_str()))
            .collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines.iter().any(|(label, _)| *label == "GPU 0000:01:00.0"));
        let b_line = lines
            .iter()
            .find(|(label, _)| *label == "GPU 0000:41:00.0")
            .unwrap();
        assert!(b_line.1.starts_with("150"), "{b_line:?}");
    }
}
