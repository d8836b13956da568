//! `GET /`: the status page, rendered on the server from the `templates/` folder so it
//! reads without JavaScript: state, progress, GPU tiles, figures of the recent values
//! as SVG, the box, its checks, comparisons and the history. `page.js` then draws
//! the live charts (uPlot) from `/api/v1/live` and the event stream.
//!
//! The hardware view is read defensively: every key may be missing or of another
//! type, and the page shows what is there. The templates escape every value.

use std::collections::HashMap;

use askama::Template;
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::page_compare::{self, Prices};
use super::page_svg::{self, Series, SvgFigure};
use super::page_text::{
    ago, duration_text, field_text, label, number, seconds_between, value_text,
};
use crate::agent::live::LiveRun;
use crate::agent::{AgentState, StatusSnapshot};
use crate::record::{RunBrief, RunRecord, Verdict};
use crate::suite::event::TrainPointKind;

/// Most columns in a device table; further keys stay in the JSON.
const MAX_COLUMNS: usize = 9;
/// Columns of the GPU table, in this order, when the inventory has them.
const GPU_COLUMNS: &[&str] = &[
    "index",
    "address",
    "pci_address",
    "model",
    "name",
    "driver",
    "driver_version",
    "vram_bytes",
    "memory_bytes",
    "link",
    "path_link",
    "resizable_bar",
    "numa_node",
];
/// Columns of the NVMe table, likewise.
const NVME_COLUMNS: &[&str] = &["name", "model", "address", "transport", "link"];
/// Rows of the recent-values tables.
const RECENT_ROWS: usize = 8;
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

/// What the page shows.
pub struct PageData<'a> {
    pub status: &'a StatusSnapshot,
    pub hardware: &'a Value,
    /// What the page shows of the stored runs.
    pub history: &'a HistoryParts,
    /// The record of the run in progress, for its stages so far.
    pub current: Option<&'a RunRecord>,
    /// The live figures of the run in progress (or of the last run).
    pub live: &'a LiveRun,
    /// Each GPU's verdict in the newest health run, by PCI address.
    pub health: &'a HashMap<String, Verdict>,
    pub charts: bool,
    pub now: DateTime<Utc>,
}

#[derive(Template)]
#[template(path = "home.html")]
struct HomePage<'a> {
    sku: String,
    sku_title: Option<String>,
    state: &'static str,
    version: String,
    uptime: String,
    current_run: String,
    charts: bool,
    running: Option<Running>,
    last_run: Option<LastRun>,
    tiles: Vec<GpuTile>,
    live_figures: Vec<SvgFigure>,
    recent_train: Vec<Vec<String>>,
    recent_telemetry: RecentTelemetry,
    hardware_verdict: Option<String>,
    gpu_count: String,
    host: Vec<(String, String)>,
    tables: Vec<DeviceTable>,
    findings: Vec<String>,
    checks: Option<Checks>,
    parts: &'a HistoryParts,
    comparison: &'a Comparison,
}

/// The parts of the page made from the stored runs: they change only when a run
/// does, so the agent keeps them between requests.
pub struct HistoryParts {
    history: Vec<HistoryRow>,
    comparison: Comparison,
    trends: Vec<SvgFigure>,
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

struct Running {
    id: String,
    suite: String,
    stage: String,
    percent: String,
    epoch: Option<String>,
    elapsed: Option<String>,
    eta: Option<String>,
    stages: Vec<StageRow>,
}

pub(super) struct StageRow {
    pub name: String,
    pub verdict: String,
    pub figures: Vec<String>,
}

struct LastRun {
    id: String,
    suite: String,
    state: &'static str,
    finished: String,
    duration: String,
    message: Option<String>,
}

struct GpuTile {
    title: String,
    model: String,
    address: String,
    link: String,
    health: String,
    power: String,
    temp: String,
}

struct RecentTelemetry {
    gpus: Vec<String>,
    rows: Vec<(String, Vec<String>)>,
}

struct DeviceTable {
    title: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
}

struct Checks {
    passed: usize,
    total: usize,
    rows: Vec<CheckRow>,
}

struct CheckRow {
    name: String,
    subject: String,
    expected: String,
    found: String,
    verdict: String,
}

struct HistoryRow {
    id: String,
    suite: String,
    state: &'static str,
    verdict: String,
    trigger: &'static str,
    started: String,
    duration: String,
    headline: String,
}

pub(super) struct Comparison {
    pub rows: Vec<ComparisonRow>,
    pub notes: Vec<String>,
}

pub(super) struct ComparisonRow {
    pub system: String,
    pub accelerators: String,
    pub minutes: String,
    pub img_per_s: String,
    pub per_kusd: String,
    pub energy: String,
    pub this_box: bool,
}

pub fn render(d: &PageData<'_>) -> String {
    let status = d.status;
    let gpus: Vec<Value> = d
        .hardware
        .get("gpus")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let page = HomePage {
        sku: status.sku.clone(),
        sku_title: d
            .hardware
            .get("sku_title")
            .and_then(Value::as_str)
            .map(String::from),
        state: status.state.as_str(),
        version: status.version.clone(),
        uptime: duration_text(seconds_between(status.agent_started_at, d.now)),
        current_run: status.current_run.clone().unwrap_or_default(),
        charts: d.charts,
        running: running(d),
        last_run: last_run(d),
        tiles: tiles(&gpus, d.live, d.health),
        live_figures: live_figures(d.live),
        recent_train: recent_train(d.live),
        recent_telemetry: recent_telemetry(d.live),
        hardware_verdict: d
            .hardware
            .get("verdict")
            .and_then(Value::as_str)
            .map(String::from),
        gpu_count: d
            .hardware
            .get("gpus")
            .and_then(Value::as_array)
            .map(|g| g.len().to_string())
            .unwrap_or_else(|| "unknown".into()),
        host: d
            .hardware
            .get("host")
            .and_then(Value::as_object)
            .map(|host| {
                host.iter()
                    .map(|(k, v)| (label(k), field_text(k, v)))
                    .collect()
            })
            .unwrap_or_default(),
        tables: [
            ("GPUs", "gpus", GPU_COLUMNS),
            ("NVMe drives", "nvme", NVME_COLUMNS),
        ]
        .into_iter()
        .filter_map(|(title, key, columns)| {
            let items = d.hardware.get(key).and_then(Value::as_array)?;
            (!items.is_empty()).then(|| device_table(title, items, columns))
        })
        .collect(),
        findings: d
            .hardware
            .get("findings")
            .and_then(Value::as_array)
            .map(|f| {
                f.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default(),
        checks: checks(d.hardware),
        parts: d.history,
        comparison: &d.history.comparison,
    };
    page.render().unwrap_or_else(|e| {
        format!("<!doctype html><title>tinyperf</title><p>the page could not be rendered: {e}</p>")
    })
}

fn running(d: &PageData<'_>) -> Option<Running> {
    let status = d.status;
    let (AgentState::Running, Some(id)) = (status.state, status.current_run.as_deref()) else {
        return None;
    };
    let live_train = d
        .live
        .train
        .back()
        .filter(|_| d.live.run_id.as_deref() == Some(id));
    let (epoch, elapsed, eta) = match live_train {
        Some(p) => {
            let eta = (p.global_step > 0 && p.planned_steps > p.global_step).then(|| {
                let rate = p.global_step as f64 / p.elapsed_s.max(1e-9);
                duration_text((p.planned_steps - p.global_step) as f64 / rate)
            });
            (
                Some(format!("{} of {}", p.epoch, p.planned_epochs)),
                Some(duration_text(p.elapsed_s)),
                eta,
            )
        }
        None => (None, None, None),
    };
    Some(Running {
        id: id.to_string(),
        suite: status.current_suite.clone().unwrap_or_else(|| "—".into()),
        stage: status
            .current_stage
            .clone()
            .unwrap_or_else(|| "starting".into()),
        percent: format!("{:.0}", (status.progress.clamp(0.0, 1.0) * 100.0).round()),
        epoch,
        elapsed,
        eta,
        stages: d.current.map(|r| stage_rows(&r.stages)).unwrap_or_default(),
    })
}

pub(super) fn stage_rows(stages: &[crate::record::StageResult]) -> Vec<StageRow> {
    stages
        .iter()
        .map(|stage| StageRow {
            name: stage.name.clone(),
            verdict: stage.verdict.as_str().to_string(),
            figures: stage
                .metrics
                .iter()
                .map(|m| format!("{} {} {}", m.name, number(m.value), m.unit))
                .collect(),
        })
        .collect()
}

fn last_run(d: &PageData<'_>) -> Option<LastRun> {
    if d.status.state == AgentState::Running {
        return None;
    }
    let last = d.status.last_run.as_ref()?;
    Some(LastRun {
        id: last.id.clone(),
        suite: last.suite.clone(),
        state: last.state.as_str(),
        finished: last
            .finished_at
            .map(|t| ago(t, d.now))
            .unwrap_or_else(|| "—".into()),
        duration: last
            .duration_s
            .map(duration_text)
            .unwrap_or_else(|| "—".into()),
        message: last.message.clone(),
    })
}

/// A tile per GPU of the inventory, with its newest sample while a run goes.
fn tiles(gpus: &[Value], live: &LiveRun, health: &HashMap<String, Verdict>) -> Vec<GpuTile> {
    let latest = live.latest_sample();
    gpus.iter()
        .enumerate()
        .map(|(position, gpu)| {
            let text = |key: &str| gpu.get(key).map(|v| field_text(key, v));
            let address = text("pci_address")
                .or_else(|| text("address"))
                .unwrap_or_default();
            let index = gpu
                .get("index")
                .and_then(Value::as_u64)
                .unwrap_or(position as u64);
            let sample = latest.and_then(|s| {
                s.sample
                    .gpus
                    .iter()
                    .find(|g| !address.is_empty() && g.address.as_deref() == Some(address.as_str()))
                    .or_else(|| s.sample.gpus.iter().find(|g| u64::from(g.index) == index))
            });
            GpuTile {
                title: format!("GPU {index}"),
                model: text("model")
                    .or_else(|| text("name"))
                    .unwrap_or_else(|| "unknown model".into()),
                link: text("link").unwrap_or_else(|| "—".into()),
                health: health
                    .get(&address)
                    .map(|v| v.as_str().to_string())
                    .unwrap_or_else(|| "not checked".into()),
                power: sample
                    .and_then(|g| g.power_w)
                    .map(|w| format!("{w:.0} W"))
                    .unwrap_or_else(|| "—".into()),
                temp: sample
                    .and_then(|g| g.temp())
                    .map(|t| format!("{:.0} °C", t.celsius))
                    .unwrap_or_else(|| "—".into()),
                address,
            }
        })
        .collect()
}

/// Throughput, loss and top-1 of the training, and each GPU's power and temperature.
fn live_figures(live: &LiveRun) -> Vec<SvgFigure> {
    let mut figures = Vec::new();
    if !live.train.is_empty() {
        let steps = |f: fn(&crate::suite::event::TrainPoint) -> f64| {
            live.train
                .iter()
                .map(|p| (p.global_step as f64, f(p)))
                .collect::<Vec<_>>()
        };
        figures.push(page_svg::figure(
            "throughput",
            "img/s",
            vec![Series {
                label: "img/s".into(),
                values: steps(|p| p.images_per_s),
            }],
        ));
        figures.push(page_svg::figure(
            "loss",
            "",
            vec![Series {
                label: "loss".into(),
                values: steps(|p| p.loss),
            }],
        ));
        let evals: Vec<(f64, f64)> = live
            .train
            .iter()
            .filter(|p| p.kind == TrainPointKind::Epoch)
            .filter_map(|p| p.eval_accuracy.map(|a| (p.global_step as f64, a)))
            .collect();
        figures.push(page_svg::figure(
            "top-1",
            "",
            vec![
                Series {
                    label: "train".into(),
                    values: steps(|p| p.accuracy),
                },
                Series {
                    label: "eval".into(),
                    values: evals,
                },
            ],
        ));
    }
    if !live.telemetry.is_empty() {
        figures.push(per_gpu_figure(live, "power", "W", |g| g.power_w));
        figures.push(per_gpu_figure(live, "temperature", "°C", |g| {
            g.temp().map(|t| t.celsius)
        }));
    }
    figures
}

fn per_gpu_figure(
    live: &LiveRun,
    title: &str,
    unit: &str,
    value: fn(&crate::runtime::telemetry::GpuSample) -> Option<f64>,
) -> SvgFigure {
    let mut series: Vec<Series> = Vec::new();
    for timed in &live.telemetry {
        for gpu in &timed.sample.gpus {
            let Some(v) = value(gpu) else { continue };
            let name = gpu.device();
            let position = match series.iter().position(|s| s.label == name) {
                Some(i) => i,
                None => {
                    series.push(Series {
                        label: name,
                        values: Vec::new(),
                    });
                    series.len() - 1
                }
            };
            series[position].values.push((timed.sample.t_s, v));
        }
    }
    page_svg::figure(title, unit, series)
}

fn recent_train(live: &LiveRun) -> Vec<Vec<String>> {
    live.train
        .iter()
        .rev()
        .take(RECENT_ROWS)
        .map(|p| {
            vec![
                p.epoch.to_string(),
                p.global_step.to_string(),
                format!("{:.4}", p.loss),
                format!("{:.3}", p.accuracy),
                p.eval_accuracy
                    .map(|a| format!("{a:.3}"))
                    .unwrap_or_else(|| "—".into()),
                format!("{:.1}", p.images_per_s),
                format!("{:.4}", p.lr),
            ]
        })
        .collect()
}

fn recent_telemetry(live: &LiveRun) -> RecentTelemetry {
    let gpus: Vec<String> = live
        .telemetry
        .back()
        .map(|s| s.sample.gpus.iter().map(|g| g.device()).collect())
        .unwrap_or_default();
    let rows = live
        .telemetry
        .iter()
        .rev()
        .take(RECENT_ROWS)
        .map(|s| {
            let cells = gpus
                .iter()
                .map(|name| {
                    let Some(g) = s.sample.gpus.iter().find(|g| &g.device() == name) else {
                        return "—".to_string();
                    };
                    let part = |v: Option<f64>, unit: &str| {
                        v.map(|v| format!("{v:.0} {unit}"))
                            .unwrap_or_else(|| "—".into())
                    };
                    format!(
                        "{} · {} · {} · {}",
                        part(g.power_w, "W"),
                        part(g.temp().map(|t| t.celsius), "°C"),
                        part(g.sm_clock_mhz, "MHz"),
                        part(g.util_percent, "%"),
                    )
                })
                .collect();
            (format!("{:.0} s", s.sample.t_s), cells)
        })
        .collect();
    RecentTelemetry { gpus, rows }
}

/// A table of devices: the `preferred` columns the items have, or else every key
/// they have.
fn device_table(title: &str, items: &[Value], preferred: &[&str]) -> DeviceTable {
    let has = |key: &str| items.iter().any(|item| item.get(key).is_some());
    let mut columns: Vec<String> = preferred
        .iter()
        .filter(|key| has(key))
        .map(|key| key.to_string())
        .collect();
    if columns.is_empty() {
        for item in items {
            for key in item.as_object().into_iter().flat_map(|o| o.keys()) {
                if !columns.contains(key) {
                    columns.push(key.clone());
                }
            }
        }
    }
    columns.truncate(MAX_COLUMNS);
    let rows = items
        .iter()
        .map(|item| {
            if item.is_object() {
                columns
                    .iter()
                    .map(|c| item.get(c).map(|v| field_text(c, v)).unwrap_or_default())
                    .collect()
            } else {
                vec![value_text(item)]
            }
        })
        .collect();
    DeviceTable {
        title: title.to_string(),
        columns: columns.iter().map(|c| label(c)).collect(),
        rows,
    }
}

fn checks(hardware: &Value) -> Option<Checks> {
    let checks = hardware.get("checks").and_then(Value::as_array)?;
    if checks.is_empty() {
        return None;
    }
    let field = |check: &Value, key: &str| {
        check
            .get(key)
            .map(value_text)
            .unwrap_or_else(|| "—".to_string())
    };
    let rows: Vec<CheckRow> = checks
        .iter()
        .map(|check| CheckRow {
            name: field(check, "name"),
            subject: check
                .get("subject")
                .filter(|s| !s.is_null())
                .map(value_text)
                .unwrap_or_default(),
            expected: field(check, "expected"),
            found: field(check, "found"),
            verdict: check
                .get("verdict")
                .and_then(Value::as_str)
                .unwrap_or("—")
                .to_string(),
        })
        .collect();
    Some(Checks {
        passed: rows.iter().filter(|r| r.verdict == "pass").count(),
        total: rows.len(),
        rows,
    })
}

fn history_row(run: &RunBrief) -> HistoryRow {
    HistoryRow {
        id: run.id.clone(),
        suite: run.suite.clone(),
        state: run.state.as_str(),
        verdict: run
            .verdict
            .map(|v| v.as_str().to_string())
            .unwrap_or_else(|| "—".into()),
        trigger: run.trigger.as_str(),
        started: run.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        duration: run
            .duration_s
            .map(duration_text)
            .unwrap_or_else(|| "—".into()),
        headline: run
            .figures
            .first()
            .map(|f| format!("{} {} {}", f.name, number(f.value), f.unit))
            .unwrap_or_default(),
    }
}

/// The published results beside this box's best.
pub(super) fn comparison(sku: &str, runs: &[RunBrief], prices: &Prices) -> Comparison {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mine = page_compare::box_figures(runs);
    let box_price = prices.box_price(sku);
    let minutes = mine
        .time_to_train_min
        .as_ref()
        .map(|(m, _)| format!("{m:.2}"))
        .or_else(|| {
            mine.estimated_time_to_train_min
                .as_ref()
                .map(|(m, _)| format!("≈ {m:.1} (estimated)"))
        })
        .unwrap_or_else(|| "no run yet".into());
    let img = mine.img_per_s.as_ref().map(|(v, _)| *v);
    rows.push(ComparisonRow {
        system: format!("this box ({sku})"),
        accelerators: String::new(),
        minutes,
        img_per_s: img.map(|v| format!("{v:.0}")).unwrap_or_else(|| "—".into()),
        per_kusd: match (img, box_price) {
            (Some(v), Some(p)) => page_compare::img_per_s_per_kusd(v, p)
                .map(|x| format!("{x:.1}"))
                .unwrap_or_else(|| "—".into()),
            _ => "—".into(),
        },
        energy: mine
            .energy_kwh
            .map(|kwh| {
                format!(
                    "{kwh:.2} kWh · ${:.2}",
                    page_compare::energy_cost_usd(kwh, prices)
                )
            })
            .unwrap_or_else(|| "—".into()),
        this_box: true,
    });
    for r in page_compare::REFERENCES {
        rows.push(ComparisonRow {
            system: r.system.to_string(),
            accelerators: r.accelerators.to_string(),
            minutes: format!("{:.2}", r.minutes),
            img_per_s: r
                .img_per_s
                .map(|v| format!("≈ {v:.0}"))
                .unwrap_or_else(|| "—".into()),
            per_kusd: match (r.img_per_s, r.list_price_usd) {
                (Some(v), Some(p)) => page_compare::img_per_s_per_kusd(v, p)
                    .map(|x| format!("{x:.1}"))
                    .unwrap_or_else(|| "—".into()),
                _ => "—".into(),
            },
            energy: r
                .energy_mj
                .map(|mj| {
                    let kwh = mj / 3.6;
                    format!(
                        "{mj:.2} MJ ({kwh:.2} kWh) · ${:.2}",
                        page_compare::energy_cost_usd(kwh, prices)
                    )
                })
                .unwrap_or_else(|| "—".into()),
            this_box: false,
        });
    }
    match box_price {
        Some(p) => notes.push(format!("box price ${p:.0}")),
        None => notes.push("no box price: set box_price_usd in tinyperf.toml".into()),
    }
    notes.push(format!(
        "electricity ${:.3}/kWh",
        prices.electricity_usd_per_kwh
    ));
    Comparison { rows, notes }
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
                    match by_suite.iter_mut().find(|s| s.label == label) {
                        Some(s) => s.values.push((x, f.value)),
                        None => by_suite.push(Series {
                            label,
                            values: vec![(x, f.value)],
                        }),
                    }
                }
            }
            by_suite.retain(|s| s.values.len() >= 2);
            (!by_suite.is_empty()).then(|| page_svg::figure(title, &unit, by_suite))
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
            match lines.iter_mut().find(|s| s.label == label) {
                Some(line) => line.values.push((x, figure.value)),
                None => lines.push(Series {
                    label,
                    values: vec![(x, figure.value)],
                }),
            }
        }
    }
    by_precision
        .into_iter()
        .filter_map(|(precision, mut lines)| {
            lines.retain(|s| s.values.len() >= 2);
            (!lines.is_empty())
                .then(|| page_svg::figure(&format!("GPU {precision} matmul"), "TFLOP/s", lines))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::live::TimedSample;
    use crate::record::{Figure, RunState, Trigger};
    use crate::runtime::telemetry::{GpuSample, TelemetrySample, Temperature};
    use crate::suite::event::TrainPoint;
    use serde_json::json;

    const RUN: &str = "20261129-210512-3fa9c2";
    const HOSTILE: &str = "<script>alert(\"x\")</script>'\"";

    fn status(state: AgentState) -> StatusSnapshot {
        StatusSnapshot {
            state,
            current_run: (state == AgentState::Running).then(|| RUN.into()),
            current_suite: Some("acceptance".into()),
            current_stage: Some("gemm".into()),
            progress: 0.4,
            last_run: None,
            unsaved_runs: Vec::new(),
            sku: "tinybox-green".into(),
            version: "0.1.0".into(),
            agent_started_at: Utc::now() - chrono::Duration::seconds(3725),
        }
    }

    fn brief(id: &str, message: &str) -> RunBrief {
        RunBrief {
            id: id.into(),
            suite: "inventory<b>".into(),
            state: RunState::Failed,
            verdict: Some(Verdict::Fail),
            trigger: Trigger::Http,
            started_at: Utc::now(),
            finished_at: Some(Utc::now()),
            duration_s: Some(75.0),
            message: Some(message.into()),
            stages: Vec::new(),
            figures: Vec::new(),
            findings: Vec::new(),
        }
    }

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
            ..brief("r", "")
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

    fn page(
        status: &StatusSnapshot,
        hardware: &Value,
        runs: &[RunBrief],
        live: &LiveRun,
    ) -> String {
        render(&PageData {
            status,
            hardware,
            history: &history_parts(&status.sku, runs, runs, &Prices::default()),
            current: None,
            live,
            health: &HashMap::new(),
            charts: true,
            now: Utc::now(),
        })
    }

    /// Every `<script` in the page is one of the agent's own script tags.
    fn only_own_scripts(html: &str) {
        for (at, _) in html.match_indices("<script") {
            let tag = &html[at..html[at..].find('>').map(|e| at + e).unwrap_or(html.len())];
            assert!(
                tag.starts_with("<script src=\"/static/"),
                "foreign script: {tag}"
            );
        }
        assert!(
            !html.contains(" style=\""),
            "an inline style would be refused by the policy"
        );
    }

    #[test]
    fn renders_box_checks_gpus_and_history_escaped() {
        let hardware = json!({
            "host": {"hostname": "box<1>", "cpu_model": "EPYC & co", "memory_bytes": 137438953472u64},
            "gpus": [
                {"index": 0, "name": "RTX 4090", "pci_address": "0000:41:00.0", "link": {"speed": "16 GT/s", "width": 16}},
                {"index": 1, "name": "<img src=x onerror=alert(1)>"},
                "odd entry"
            ],
            "checks": [
                {"name": "gpu_count", "subject": null, "expected": "6", "found": "2", "verdict": "fail"},
                {"name": "pcie_width", "subject": "0000:41:00.0", "expected": "x16", "found": "x16", "verdict": "pass"},
                {"name": "weird", "found": HOSTILE}
            ],
            "findings": [HOSTILE]
        });
        let mut st = status(AgentState::Idle);
        let mut last = brief("r1", HOSTILE);
        last.suite = "smoke".into();
        st.last_run = Some(last);
        let runs = vec![brief("r1", "x")];
        let html = page(&st, &hardware, &runs, &LiveRun::default());
        assert!(html.contains("box&#60;1&#62;"));
        assert!(html.contains("EPYC &#38; co"));
        assert!(html.contains("<dt>memory</dt><dd>128 GiB</dd>"));
        assert!(html.contains("&#60;img src=x onerror=alert(1)&#62;"));
        assert!(!html.contains("<img"));
        assert!(html.contains("odd entry"));
        assert!(html.contains("speed: 16 GT/s, width: 16"));
        assert!(html.contains("1 of 3 checks pass."));
        assert!(html.contains("href=\"/runs/r1\""));
        assert!(html.contains("inventory&#60;b&#62;"));
        assert!(html.contains("1 min 15 s"));
        assert!(html.contains("up 1 h 02 min"));
        assert!(html.contains("Idle: no run in progress."));
        assert!(html.contains("&#60;script&#62;alert(&#34;x&#34;)"));
        assert!(!html.contains("alert(\"x\")"), "quotes in data are escaped");
        only_own_scripts(&html);
    }

    #[test]
    fn degrades_when_hardware_keys_are_missing_or_odd() {
        for hardware in [
            json!(null),
            json!({}),
            json!({"gpus": 3, "checks": "none", "host": []}),
        ] {
            let st = status(AgentState::Running);
            let html = page(&st, &hardware, &[], &LiveRun::default());
            assert!(html.contains("<dt>GPUs</dt><dd>unknown</dd>"));
            assert!(html.contains("No checks"));
            assert!(html.contains("No runs yet."));
            assert!(html.contains("<progress id=\"progress-bar\" max=\"100\" value=\"40\">"));
            assert!(html.contains(&format!("data-run=\"{RUN}\"")));
            assert!(html.contains("The inventory found no GPU."));
            assert!(html.trim_end().ends_with("</html>"));
        }
    }

    /// The page over what the real inventory finds in a fixture tree of a tinybox red.
    #[test]
    fn renders_the_inventory_of_a_fixture_box() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/red-link-x8-behind-switch");
        let report = crate::inventory::take(&root, None, false);
        let hardware = serde_json::to_value(&report).unwrap();
        let html = page(
            &status(AgentState::Idle),
            &hardware,
            &[],
            &LiveRun::default(),
        );
        let gpu_table = html
            .split("<h3>GPUs</h3>")
            .nth(1)
            .and_then(|rest| rest.split("</table>").next())
            .expect("a GPU table");
        assert_eq!(gpu_table.matches("<tr>").count(), 7, "{gpu_table}");
        assert_eq!(gpu_table.matches("<td>Radeon RX 7900 XTX</td>").count(), 6);
        assert_eq!(html.matches("<div class=\"tile\"").count(), 6);
        assert!(html.contains("<td>24.0 GiB</td>"));
        assert!(html.contains("16.0 GT/s x16"));
        assert!(html.contains("<th>path link</th>"));
        assert!(html.contains("x8, limited at"));
        assert!(html.contains("<tr class=\"failed\"><td>gpu_link</td>"));
        assert!(html.contains("<h3>NVMe drives</h3>"));
        assert!(html.contains("<span class=\"badge fail\">fail</span>"));
        let checks = hardware["checks"].as_array().unwrap();
        let passed = checks.iter().filter(|c| c["verdict"] == "pass").count();
        assert!(passed < checks.len());
        assert!(html.contains(&format!("{passed} of {} checks pass.", checks.len())));
    }

    fn train_point(step: u64, kind: TrainPointKind) -> TrainPoint {
        TrainPoint {
            stage: "smoke".into(),
            kind,
            epoch: 2,
            planned_epochs: 10,
            global_step: step,
            planned_steps: 100,
            loss: 2.0 / (step as f64 + 1.0),
            accuracy: 0.5,
            images_per_s: 1000.0 + step as f64,
            lr: 0.1,
            eval_accuracy: (kind == TrainPointKind::Epoch).then_some(0.6),
            elapsed_s: step as f64,
        }
    }

    #[test]
    fn a_run_in_progress_shows_its_epoch_time_left_tiles_and_figures() {
        let mut live = LiveRun::default();
        live.begin(RUN);
        for step in 1..=20 {
            let kind = if step % 10 == 0 {
                TrainPointKind::Epoch
            } else {
                TrainPointKind::Step
            };
            live.add_train(train_point(step, kind));
            live.add_sample(TimedSample {
                at: Utc::now(),
                sample: TelemetrySample {
                    t_s: step as f64,
                    gpus: vec![GpuSample {
                        index: 0,
                        address: Some("0000:41:00.0".into()),
                        power_w: Some(300.0 + step as f64),
                        temperatures: vec![Temperature {
                            label: "edge".into(),
                            celsius: 61.0,
                            limit_c: Some(100.0),
                        }],
                        sm_clock_mhz: Some(2500.0),
                        util_percent: Some(99.0),
                        ..GpuSample::default()
                    }],
                    cpu_temp_c: None,
                },
            });
        }
        let hardware = json!({"gpus": [{"index": 0, "model": "GeForce RTX 4090", "pci_address": "0000:41:00.0",
            "link": {"current_speed_gts": 16.0, "current_width": 16}}]});
        let mut health = HashMap::new();
        health.insert("0000:41:00.0".to_string(), Verdict::Pass);
        let st = status(AgentState::Running);
        let html = render(&PageData {
            status: &st,
            hardware: &hardware,
            history: &history_parts(&st.sku, &[], &[], &Prices::default()),
            current: None,
            live: &live,
            health: &health,
            charts: false,
            now: Utc::now(),
        });
        assert!(html.contains("<dd id=\"epoch\">2 of 10</dd>"), "{html}");
        // 20 steps in 20 s, 80 to go.
        assert!(html.contains("<dd id=\"eta\">≈ 1 min 20 s</dd>"));
        assert!(html.contains("<dd class=\"tile-power\">320 W</dd>"));
        assert!(html.contains("<dd class=\"tile-temp\">61 °C</dd>"));
        assert!(html.contains("<span class=\"badge pass\">pass</span>"));
        assert!(html.contains("16.0 GT/s x16"));
        for title in ["throughput", "loss", "top-1", "power", "temperature"] {
            assert!(html.contains(&format!("<figcaption>{title}")), "{title}");
        }
        assert_eq!(html.matches("<polyline").count(), 6);
        assert!(html.contains("id=\"recent-train\""));
        assert!(html.contains("320 W · 61 °C · 2500 MHz · 99 %"));
        assert!(html.contains("not implemented in this build"));
        assert!(!html.contains("uplot.min.js"));
    }

    #[test]
    fn comparisons_put_this_box_beside_mlperf_and_price_it() {
        let mut run = brief("a1", "");
        run.suite = "acceptance".into();
        run.figures = vec![Figure {
            stage: "train-throughput".into(),
            name: "img_per_s".into(),
            value: 5000.0,
            unit: "img/s".into(),
            subject: None,
        }];
        let mut older = run.clone();
        older.id = "a0".into();
        older.figures[0].value = 4800.0;
        let runs = vec![run, older];
        let html = page(
            &status(AgentState::Idle),
            &json!({}),
            &runs,
            &LiveRun::default(),
        );
        assert!(html.contains("<td>this box (tinybox-green)</td>"));
        assert!(html.contains("<td class=\"num\">5000</td><td class=\"num\">200.0</td>"));
        assert!(html.contains("122.08") && html.contains("167.15") && html.contains("13.43"));
        assert!(html.contains("5.67 MJ (1.57 kWh) · $0.24"));
        assert!(html.contains("<figcaption>training throughput (img/s)"));
    }
}
