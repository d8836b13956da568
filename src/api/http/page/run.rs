//! `GET /runs/{id}`: one run's page. Its stages, checks and findings from the record,
//! its GPUs' power, temperature, clock and utilisation from its `telemetry.csv`, its
//! evaluations from its MLLOG, its energy, and the box beside MLPerf's published
//! results. The figures are drawn as SVG on the server; `page.js` draws the same
//! series as uPlot charts from the page's `data-series` attribute.

use askama::Template;
use serde::Serialize;

use super::compare::{comparison, Comparison, Prices};
use super::stages::{stage_rows, StageRow};
use super::svg::{self, Series, SvgFigure};
use super::text::{duration_or_dash, number, or_dash, utc_text};
use crate::mlperf::log::MlLogText;
use crate::record::{RunBrief, RunRecord};
use crate::runtime::telemetry::csv::{CPU_DEVICE, HEADER};

/// The most samples a series sent to the browser keeps; longer ones are thinned.
const MAX_CHART_POINTS: usize = 600;

/// What the page is made from.
pub struct RunPageData<'a> {
    /// The run's record.
    pub record: &'a RunRecord,
    /// The box's SKU, for the header and the comparison.
    pub sku: &'a str,
    /// The agent's version, for the header and the assets' cache keys.
    pub version: &'a str,
    /// `telemetry.csv`, when the run has one.
    pub telemetry: Option<&'a [u8]>,
    /// `mllog.txt`, when the run has one.
    pub mllog: Option<&'a [u8]>,
    /// `train.jsonl`, each epoch's training figures, when the run trained.
    pub train: Option<&'a [u8]>,
    /// The stored runs, newest first, for the box's best figures.
    pub runs: &'a [RunBrief],
    /// What the box and its power cost.
    pub prices: &'a Prices,
    /// Whether the build embeds the chart library.
    pub charts: bool,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    sku: String,
    state: &'static str,
    version: String,
    charts: bool,
    id: String,
    suite: String,
    run_state: &'static str,
    verdict: String,
    trigger: &'static str,
    started: String,
    finished: String,
    duration: String,
    message: Option<String>,
    findings: Vec<String>,
    stages: Vec<StageRow>,
    checks: Vec<CheckRow>,
    stage_findings: Vec<(String, String)>,
    energy: Vec<(String, String)>,
    figures: Vec<SvgFigure>,
    series_json: String,
    has_mllog: bool,
    has_telemetry: bool,
    comparison: Comparison,
}

struct CheckRow {
    stage: String,
    name: String,
    subject: String,
    expected: String,
    found: String,
    verdict: String,
}

/// One chart for the browser: x values, then one array per series.
#[derive(Serialize)]
struct ChartData {
    title: String,
    unit: String,
    x_label: String,
    labels: Vec<String>,
    x: Vec<f64>,
    ys: Vec<Vec<Option<f64>>>,
}

/// The page as HTML; a template that fails to render gives a page that says so.
pub fn render(d: &RunPageData<'_>) -> String {
    let r = d.record;
    let mut charts = d.train.map(train_charts).unwrap_or_default();
    // The epoch figures carry the evaluations too; a run without them (an external
    // benchmark's) has its MLLOG's.
    if charts.is_empty() {
        charts.extend(d.mllog.and_then(eval_chart));
    }
    charts.extend(d.telemetry.map(telemetry_charts).unwrap_or_default());
    let figures = charts.iter().map(svg_of).collect();
    let page = RunPage {
        sku: d.sku.to_string(),
        state: r.state.as_str(),
        version: d.version.to_string(),
        charts: d.charts,
        id: r.id.clone(),
        suite: r.suite.clone(),
        run_state: r.state.as_str(),
        verdict: or_dash(r.summary.verdict.map(|v| v.as_str().to_string())),
        trigger: r.trigger.as_str(),
        started: utc_text(r.started_at),
        finished: or_dash(r.finished_at.map(utc_text)),
        duration: duration_or_dash(r.summary.duration_s),
        message: r.summary.message.clone(),
        findings: r.summary.findings.clone(),
        stages: stage_rows(&r.stages),
        checks: r
            .stages
            .iter()
            .flat_map(|s| {
                s.checks.iter().map(|c| CheckRow {
                    stage: s.name.clone(),
                    name: c.name.clone(),
                    subject: c.subject.clone().unwrap_or_default(),
                    expected: c.expected.clone(),
                    found: c.found.clone(),
                    verdict: c.verdict.as_str().to_string(),
                })
            })
            .collect(),
        stage_findings: r
            .stages
            .iter()
            .flat_map(|s| s.findings.iter().map(|f| (s.name.clone(), f.clone())))
            .collect(),
        energy: energy(r),
        figures,
        // Serialising plain numbers and strings cannot fail.
        series_json: serde_json::to_string(&charts).unwrap_or_else(|_| "[]".into()),
        has_mllog: d.mllog.is_some(),
        has_telemetry: d.telemetry.is_some(),
        comparison: comparison(d.sku, d.runs, d.prices),
    };
    page.render().unwrap_or_else(|e| {
        format!("<!doctype html><title>tinyperf</title><p>the page could not be rendered: {e}</p>")
    })
}

/// The run's energy figures: the summary's, and each stage's joules, kWh and img/J.
fn energy(r: &RunRecord) -> Vec<(String, String)> {
    let mut rows = Vec::new();
    if let Some(kwh) = r.summary.energy_kwh {
        rows.push(("run (GPUs)".to_string(), format!("{} kWh", number(kwh))));
    }
    for stage in &r.stages {
        for m in stage.metrics.iter().filter(|m| {
            m.name.ends_with("energy_j")
                || m.name.ends_with("energy_kwh")
                || m.name.ends_with("img_per_j")
                || m.name == "images_per_joule"
        }) {
            rows.push((
                format!("{} {}", stage.name, m.name),
                format!("{} {}", number(m.value), m.unit),
            ));
        }
    }
    rows
}

/// Each GPU's power, temperature, SM clock and utilisation over the run.
fn telemetry_charts(csv: &[u8]) -> Vec<ChartData> {
    let text = String::from_utf8_lossy(csv);
    let mut lines = text.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let columns: Vec<&str> = header.split(',').collect();
    let at = |name: &str| columns.iter().position(|c| *c == name);
    let (Some(time), Some(device)) = (at(HEADER[0]), at("device")) else {
        return Vec::new();
    };
    let quantities = [
        ("power", "W", at("power_w")),
        ("temperature", "°C", at("temp_c")),
        ("SM clock", "MHz", at("sm_clock_mhz")),
        ("utilisation", "%", at("util_percent")),
    ];
    let mut devices: Vec<String> = Vec::new();
    let mut x: Vec<f64> = Vec::new();
    // Per quantity, per device: the value at each x.
    let mut values: Vec<Vec<Vec<Option<f64>>>> = vec![Vec::new(); quantities.len()];
    for line in lines {
        // Stage names are escaped when they hold a comma; a plain split is enough for
        // the numeric columns as long as the row has its full width.
        let cells: Vec<&str> = line.split(',').collect();
        if cells.len() != columns.len() {
            continue;
        }
        let Ok(t) = cells[time].parse::<f64>() else {
            continue;
        };
        let name = cells[device];
        if name == CPU_DEVICE {
            continue;
        }
        if x.last() != Some(&t) {
            x.push(t);
            for per_device in values.iter_mut() {
                for series in per_device.iter_mut() {
                    series.push(None);
                }
            }
        }
        let d = match devices.iter().position(|n| n == name) {
            Some(d) => d,
            None => {
                devices.push(name.to_string());
                for per_device in values.iter_mut() {
                    per_device.push(vec![None; x.len()]);
                }
                devices.len() - 1
            }
        };
        for (q, (_, _, column)) in quantities.iter().enumerate() {
            let v = column.and_then(|c| cells[c].parse::<f64>().ok());
            if let Some(slot) = values[q][d].last_mut() {
                *slot = v;
            }
        }
    }
    let step = x.len().div_ceil(MAX_CHART_POINTS).max(1);
    let thin_x: Vec<f64> = x.iter().step_by(step).copied().collect();
    quantities
        .iter()
        .zip(values)
        .filter(|(_, per_device)| per_device.iter().any(|s| s.iter().any(Option::is_some)))
        .map(|((title, unit, _), per_device)| ChartData {
            title: title.to_string(),
            unit: unit.to_string(),
            x_label: "s".into(),
            labels: devices.clone(),
            x: thin_x.clone(),
            ys: per_device
                .into_iter()
                .map(|s| s.into_iter().step_by(step).collect())
                .collect(),
        })
        .collect()
}

/// Loss, top-1 (training and evaluation), throughput and learning rate by epoch.
fn train_charts(jsonl: &[u8]) -> Vec<ChartData> {
    let points = crate::suite::epoch_log::parse(&String::from_utf8_lossy(jsonl));
    if points.is_empty() {
        return Vec::new();
    }
    let x: Vec<f64> = points.iter().map(|p| f64::from(p.epoch)).collect();
    let chart = |title: &str, unit: &str, series: Vec<(&str, Vec<Option<f64>>)>| ChartData {
        title: title.to_string(),
        unit: unit.to_string(),
        x_label: "epoch".into(),
        labels: series.iter().map(|(l, _)| l.to_string()).collect(),
        x: x.clone(),
        ys: series.into_iter().map(|(_, ys)| ys).collect(),
    };
    let of = |f: fn(&crate::suite::event::TrainPoint) -> Option<f64>| {
        points.iter().map(f).collect::<Vec<_>>()
    };
    vec![
        chart("loss per epoch", "", vec![("loss", of(|p| p.loss))]),
        chart(
            "top-1 per epoch",
            "",
            vec![
                ("train", of(|p| p.accuracy)),
                ("eval", of(|p| p.eval_accuracy)),
            ],
        ),
        chart(
            "throughput per epoch",
            "img/s",
            vec![("img/s", of(|p| Some(p.images_per_s)))],
        ),
        chart("learning rate per epoch", "", vec![("lr", of(|p| p.lr))]),
    ]
}

/// Top-1 of each evaluation by epoch, from the MLLOG.
fn eval_chart(mllog: &[u8]) -> Option<ChartData> {
    let log = MlLogText::parse(&String::from_utf8_lossy(mllog));
    let points: Vec<(f64, f64)> = log
        .with_key("eval_accuracy")
        .filter_map(|e| Some((e.meta("epoch_num")?.as_f64()?, e.value.as_f64()?)))
        .collect();
    if points.is_empty() {
        return None;
    }
    Some(ChartData {
        title: "evaluation top-1".into(),
        unit: String::new(),
        x_label: "epoch".into(),
        labels: vec!["eval top-1".into()],
        x: points.iter().map(|p| p.0).collect(),
        ys: vec![points.iter().map(|p| Some(p.1)).collect()],
    })
}

fn svg_of(chart: &ChartData) -> SvgFigure {
    svg::figure(
        &chart.title,
        &chart.unit,
        chart
            .labels
            .iter()
            .zip(&chart.ys)
            .map(|(label, ys)| Series {
                label: label.clone(),
                values: chart
                    .x
                    .iter()
                    .zip(ys)
                    .filter_map(|(x, y)| y.map(|y| (*x, y)))
                    .collect(),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_becomes_a_chart_per_quantity_and_a_series_per_gpu() {
        let csv = format!(
            "{}\n0.000,train,gpu0,0000:03:00.0,100,40,,,,1500,,50,none\n\
             0.000,train,gpu1,0000:04:00.0,110,41,,,,1500,,55,none\n\
             0.000,train,cpu,,,38,,,,,,,\n\
             1.000,train,gpu0,0000:03:00.0,300,60,,,,2500,,100,none\n\
             1.000,train,gpu1,0000:04:00.0,,61,,,,2500,,100,none\n\
             cut short\n",
            HEADER.join(",")
        );
        let charts = telemetry_charts(csv.as_bytes());
        let titles: Vec<&str> = charts.iter().map(|c| c.title.as_str()).collect();
        assert_eq!(titles, ["power", "temperature", "SM clock", "utilisation"]);
        let power = &charts[0];
        assert_eq!(power.labels, ["gpu0", "gpu1"]);
        assert_eq!(power.x, [0.0, 1.0]);
        assert_eq!(power.ys[0], [Some(100.0), Some(300.0)]);
        assert_eq!(power.ys[1], [Some(110.0), None]);
        assert_eq!(svg_of(power).points, 3);
    }

    #[test]
    fn epoch_figures_become_four_charts() {
        let line = |epoch: u32, eval: &str| {
            format!(
                "{{\"stage\":\"smoke\",\"kind\":\"epoch\",\"epoch\":{epoch},\"planned_epochs\":3,\
                 \"global_step\":{},\"planned_steps\":12,\"loss\":0.5,\"accuracy\":0.6,\
                 \"images_per_s\":90.0,\"lr\":0.1{eval},\"elapsed_s\":1.0}}\n",
                epoch * 4
            )
        };
        let text = line(1, "") + &line(2, ",\"eval_accuracy\":0.7") + "not json\n";
        let charts = train_charts(text.as_bytes());
        let titles: Vec<&str> = charts.iter().map(|c| c.title.as_str()).collect();
        assert_eq!(
            titles,
            [
                "loss per epoch",
                "top-1 per epoch",
                "throughput per epoch",
                "learning rate per epoch"
            ]
        );
        assert_eq!(charts[1].x, [1.0, 2.0]);
        assert_eq!(charts[1].ys[1], [None, Some(0.7)]);
        assert!(train_charts(b"").is_empty());
    }

    #[test]
    fn evaluations_come_from_the_mllog() {
        let log = ":::MLLOG {\"namespace\": \"\", \"time_ms\": 1, \"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_accuracy\", \"value\": 0.5, \"metadata\": {\"epoch_num\": 3}}\n\
                   :::MLLOG {\"namespace\": \"\", \"time_ms\": 2, \"event_type\": \"POINT_IN_TIME\", \"key\": \"eval_accuracy\", \"value\": 0.77, \"metadata\": {\"epoch_num\": 7}}\n";
        let chart = eval_chart(log.as_bytes()).expect("a chart");
        assert_eq!(chart.x, [3.0, 7.0]);
        assert_eq!(chart.ys[0], [Some(0.5), Some(0.77)]);
        assert!(eval_chart(b"no log here").is_none());
    }
}
