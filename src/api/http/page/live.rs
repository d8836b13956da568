//! What the status page shows of the run in progress (or of the last run) as it
//! goes: a tile per GPU with its newest sample, figures of the training and of each
//! GPU's power and temperature, and tables of the newest values.

use std::collections::HashMap;

use serde_json::Value;

use super::svg::{self, Series, SvgFigure};
use super::text::field_text;
use crate::agent::live::LiveRun;
use crate::record::Verdict;
use crate::runtime::telemetry::GpuSample;
use crate::suite::event::{TrainPoint, TrainPointKind};

/// Rows of the recent-values tables.
const RECENT_ROWS: usize = 8;

/// One GPU of the inventory, with its newest sample.
pub(super) struct GpuTile {
    /// `GPU {index}`.
    pub title: String,
    /// Its model, or `unknown model`.
    pub model: String,
    /// Its PCI address, or empty where the inventory has none.
    pub address: String,
    /// Its PCIe link as text.
    pub link: String,
    /// Its verdict in the newest health run, or `not checked`.
    pub health: String,
    /// Its newest power draw, as `300 W`.
    pub power: String,
    /// Its newest temperature, as `61 °C`.
    pub temp: String,
}

/// The newest telemetry samples, a column per GPU.
pub(super) struct RecentTelemetry {
    /// The GPUs of the newest sample, by name.
    pub gpus: Vec<String>,
    /// Newest first: the sample's time and, per GPU, its power, temperature, clock and
    /// utilisation.
    pub rows: Vec<(String, Vec<String>)>,
}

/// A tile per GPU of the inventory, with its newest sample while a run goes.
pub(super) fn tiles(
    gpus: &[Value],
    live: &LiveRun,
    health: &HashMap<String, Verdict>,
) -> Vec<GpuTile> {
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
pub(super) fn live_figures(live: &LiveRun) -> Vec<SvgFigure> {
    let mut figures = Vec::new();
    if !live.train.is_empty() {
        let steps = |f: fn(&TrainPoint) -> Option<f64>| {
            live.train
                .iter()
                .filter_map(|p| Some((p.global_step as f64, f(p)?)))
                .collect::<Vec<_>>()
        };
        let one_line = |title: &str, unit: &str, label: &str, f: fn(&TrainPoint) -> Option<f64>| {
            let label = label.to_string();
            svg::figure(
                title,
                unit,
                vec![Series {
                    label,
                    values: steps(f),
                }],
            )
        };
        figures.push(one_line("throughput", "img/s", "img/s", |p| {
            Some(p.images_per_s)
        }));
        figures.push(one_line("loss", "", "loss", |p| p.loss));
        let evals: Vec<(f64, f64)> = live
            .train
            .iter()
            .filter(|p| p.kind == TrainPointKind::Epoch)
            .filter_map(|p| p.eval_accuracy.map(|a| (p.global_step as f64, a)))
            .collect();
        figures.push(svg::figure(
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

/// A figure of one quantity of every GPU over the run, a line per GPU.
fn per_gpu_figure(
    live: &LiveRun,
    title: &str,
    unit: &str,
    value: fn(&GpuSample) -> Option<f64>,
) -> SvgFigure {
    let mut series: Vec<Series> = Vec::new();
    for timed in &live.telemetry {
        for gpu in &timed.sample.gpus {
            if let Some(v) = value(gpu) {
                svg::add_point(&mut series, gpu.device(), (timed.sample.t_s, v));
            }
        }
    }
    svg::figure(title, unit, series)
}

/// The newest training points, newest first: epoch, step, loss, top-1 (training and
/// evaluation), throughput and learning rate.
pub(super) fn recent_train(live: &LiveRun) -> Vec<Vec<String>> {
    live.train
        .iter()
        .rev()
        .take(RECENT_ROWS)
        .map(|p| {
            vec![
                p.epoch.to_string(),
                p.global_step.to_string(),
                known(p.loss, |l| format!("{l:.4}")),
                known(p.accuracy, |a| format!("{a:.3}")),
                p.eval_accuracy
                    .map(|a| format!("{a:.3}"))
                    .unwrap_or_else(|| "—".into()),
                format!("{:.1}", p.images_per_s),
                known(p.lr, |lr| format!("{lr:.4}")),
            ]
        })
        .collect()
}

/// A figure as text, or a dash where it is not known.
fn known(value: Option<f64>, text: impl Fn(f64) -> String) -> String {
    value.map(text).unwrap_or_else(|| "—".into())
}

/// The newest telemetry samples, newest first.
pub(super) fn recent_telemetry(live: &LiveRun) -> RecentTelemetry {
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
