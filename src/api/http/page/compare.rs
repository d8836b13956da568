//! This box beside published MLPerf Training results, and what its figures cost.
//!
//! The reference figures are the official MLPerf Training v4.0 ResNet-50 (closed)
//! results, scored from the submitters' logs as `result_summarizer` scores them.

use super::text::or_dash;
use crate::record::RunBrief;

/// One published result.
pub struct Reference {
    /// The submitter's system name.
    pub system: &'static str,
    /// Its accelerators (`8× H100-SXM5-80GB`).
    pub accelerators: &'static str,
    /// The published time to train, in minutes.
    pub minutes: f64,
    /// Training throughput from the submission's logs, where known.
    pub img_per_s: Option<f64>,
    /// Energy of one time-to-train run (MLPerf power, AC), where submitted.
    pub energy_mj: Option<f64>,
    /// The box's list price, for price-performance, where it has one.
    pub list_price_usd: Option<f64>,
}

/// MLPerf Training v4.0, ResNet-50, closed division.
pub const REFERENCES: &[Reference] = &[
    Reference {
        system: "tinycorp tinybox green",
        accelerators: "6× GeForce RTX 4090",
        minutes: 122.08,
        img_per_s: Some(6350.0),
        energy_mj: None,
        list_price_usd: Some(GREEN_PRICE_USD),
    },
    Reference {
        system: "tinycorp tinybox red",
        accelerators: "6× Radeon RX 7900 XTX",
        minutes: 167.15,
        img_per_s: Some(4700.0),
        energy_mj: None,
        list_price_usd: Some(RED_PRICE_USD),
    },
    Reference {
        system: "NVIDIA H200",
        accelerators: "8× H200-SXM5-141GB",
        minutes: 12.08,
        img_per_s: None,
        energy_mj: None,
        list_price_usd: None,
    },
    Reference {
        system: "NVIDIA L40S (2 nodes)",
        accelerators: "8× L40S",
        minutes: 50.59,
        img_per_s: None,
        energy_mj: None,
        list_price_usd: None,
    },
    Reference {
        system: "Sustainable Metal Cloud 1xSMC-H100-SXM-80GB (power)",
        accelerators: "8× H100-SXM5-80GB",
        minutes: 13.43,
        img_per_s: Some(57_000.0),
        energy_mj: Some(5.67),
        list_price_usd: None,
    },
];

/// A tinybox green's list price, in US dollars.
pub const GREEN_PRICE_USD: f64 = 25_000.0;
/// A tinybox red's list price, in US dollars.
pub const RED_PRICE_USD: f64 = 15_000.0;
/// What a kilowatt-hour costs unless configured, in US dollars.
pub const DEFAULT_ELECTRICITY_USD_PER_KWH: f64 = 0.15;

/// What the box cost and what its power costs, for price-performance.
#[derive(Debug, Clone, PartialEq)]
pub struct Prices {
    /// The box's price; `None` takes the list price of its SKU, when it has one.
    pub box_usd: Option<f64>,
    /// What a kilowatt-hour costs, in US dollars.
    pub electricity_usd_per_kwh: f64,
}

impl Default for Prices {
    fn default() -> Self {
        Prices {
            box_usd: None,
            electricity_usd_per_kwh: DEFAULT_ELECTRICITY_USD_PER_KWH,
        }
    }
}

impl Prices {
    /// The price of a box of `sku`: the configured one, else its list price.
    pub fn box_price(&self, sku: &str) -> Option<f64> {
        self.box_usd.or(match sku {
            "tinybox-green" => Some(GREEN_PRICE_USD),
            "tinybox-red" => Some(RED_PRICE_USD),
            _ => None,
        })
    }
}

/// This box's best figures, from the runs in memory.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BoxFigures {
    /// The shortest measured time to train (`mlperf-resnet`), in minutes, and its run.
    pub time_to_train_min: Option<(f64, String)>,
    /// The estimate of the acceptance suite's throughput stage, in minutes.
    pub estimated_time_to_train_min: Option<(f64, String)>,
    /// The highest training throughput of a ResNet-50 stage, and its run.
    pub img_per_s: Option<(f64, String)>,
    /// Energy of the time-to-train run, in kWh.
    pub energy_kwh: Option<f64>,
}

/// Walks the briefs, newest first, for the box's best figures.
pub fn box_figures(runs: &[RunBrief]) -> BoxFigures {
    let mut figures = BoxFigures::default();
    let better_low = |slot: &mut Option<(f64, String)>, value: f64, id: &str| {
        if value.is_finite() && value > 0.0 && slot.as_ref().is_none_or(|(v, _)| value < *v) {
            *slot = Some((value, id.to_string()));
        }
    };
    for run in runs {
        let resnet50 = run.suite == "mlperf-resnet" || run.suite == "acceptance";
        for figure in &run.figures {
            match figure.name.as_str() {
                "time_to_target_s" if run.suite == "mlperf-resnet" => {
                    let before = figures.time_to_train_min.clone();
                    better_low(&mut figures.time_to_train_min, figure.value / 60.0, &run.id);
                    if figures.time_to_train_min != before {
                        figures.energy_kwh = run
                            .figures
                            .iter()
                            .find(|f| f.name == "energy_kwh")
                            .map(|f| f.value);
                    }
                }
                "estimated_time_to_train_min" => better_low(
                    &mut figures.estimated_time_to_train_min,
                    figure.value,
                    &run.id,
                ),
                "img_per_s"
                    if resnet50
                        && figure.value.is_finite()
                        && figures
                            .img_per_s
                            .as_ref()
                            .is_none_or(|(v, _)| figure.value > *v) =>
                {
                    figures.img_per_s = Some((figure.value, run.id.clone()));
                }
                _ => {}
            }
        }
    }
    figures
}

/// Images per second per $1,000 of box.
pub fn img_per_s_per_kusd(img_per_s: f64, price_usd: f64) -> Option<f64> {
    (price_usd > 0.0).then(|| img_per_s / (price_usd / 1000.0))
}

/// What the energy of one run costs.
pub fn energy_cost_usd(energy_kwh: f64, prices: &Prices) -> f64 {
    energy_kwh * prices.electricity_usd_per_kwh
}

/// The comparison table and the prices it was reckoned at.
pub(super) struct Comparison {
    /// This box first, then each published result.
    pub rows: Vec<ComparisonRow>,
    /// The box price and the electricity price used, or how to set them.
    pub notes: Vec<String>,
}

/// One system of the comparison, its figures as text.
pub(super) struct ComparisonRow {
    /// The system's name.
    pub system: String,
    /// Its accelerators (`6× GeForce RTX 4090`), empty for this box.
    pub accelerators: String,
    /// Time to train, in minutes.
    pub minutes: String,
    /// Training throughput, in img/s.
    pub img_per_s: String,
    /// Training throughput per $1,000 of box.
    pub per_kusd: String,
    /// Energy of one time-to-train run and what it costs.
    pub energy: String,
    /// Whether this is the box itself (the page marks its row).
    pub this_box: bool,
}

/// The published results beside this box's best.
pub(super) fn comparison(sku: &str, runs: &[RunBrief], prices: &Prices) -> Comparison {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let mine = box_figures(runs);
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
        img_per_s: or_dash(img.map(|v| format!("{v:.0}"))),
        per_kusd: per_kusd_text(img, box_price),
        energy: or_dash(
            mine.energy_kwh
                .map(|kwh| format!("{kwh:.2} kWh · ${:.2}", energy_cost_usd(kwh, prices))),
        ),
        this_box: true,
    });
    for r in REFERENCES {
        rows.push(ComparisonRow {
            system: r.system.to_string(),
            accelerators: r.accelerators.to_string(),
            minutes: format!("{:.2}", r.minutes),
            img_per_s: or_dash(r.img_per_s.map(|v| format!("≈ {v:.0}"))),
            per_kusd: per_kusd_text(r.img_per_s, r.list_price_usd),
            energy: or_dash(r.energy_mj.map(|mj| {
                let kwh = mj / 3.6;
                format!(
                    "{mj:.2} MJ ({kwh:.2} kWh) · ${:.2}",
                    energy_cost_usd(kwh, prices)
                )
            })),
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

/// [`img_per_s_per_kusd`] with one decimal, or `—` without a throughput or a price.
fn per_kusd_text(img_per_s: Option<f64>, price_usd: Option<f64>) -> String {
    or_dash(
        img_per_s
            .zip(price_usd)
            .and_then(|(v, p)| img_per_s_per_kusd(v, p))
            .map(|x| format!("{x:.1}")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Figure, RunState, Trigger};
    use chrono::Utc;

    fn brief(id: &str, suite: &str, figures: &[(&str, f64)]) -> RunBrief {
        RunBrief {
            id: id.into(),
            suite: suite.into(),
            state: RunState::Passed,
            verdict: None,
            trigger: Trigger::Cli,
            started_at: Utc::now(),
            finished_at: None,
            duration_s: None,
            message: None,
            stages: Vec::new(),
            figures: figures
                .iter()
                .map(|(name, value)| Figure {
                    stage: "s".into(),
                    name: name.to_string(),
                    value: *value,
                    unit: String::new(),
                    subject: None,
                })
                .collect(),
            findings: Vec::new(),
        }
    }

    #[test]
    fn the_best_figures_and_their_runs_are_found() {
        let runs = vec![
            brief(
                "a",
                "acceptance",
                &[
                    ("img_per_s", 6000.0),
                    ("estimated_time_to_train_min", 130.0),
                ],
            ),
            brief(
                "b",
                "mlperf-resnet",
                &[
                    ("time_to_target_s", 7500.0),
                    ("energy_kwh", 9.0),
                    ("img_per_s", 6300.0),
                ],
            ),
            brief(
                "c",
                "mlperf-resnet",
                &[("time_to_target_s", 7400.0), ("energy_kwh", 8.5)],
            ),
            brief(
                "d",
                "smoke",
                &[("img_per_s", 90000.0), ("time_to_target_s", 30.0)],
            ),
        ];
        let f = box_figures(&runs);
        assert_eq!(f.img_per_s, Some((6300.0, "b".into())));
        assert_eq!(f.time_to_train_min, Some((7400.0 / 60.0, "c".into())));
        assert_eq!(f.energy_kwh, Some(8.5));
        assert_eq!(f.estimated_time_to_train_min, Some((130.0, "a".into())));
    }

    #[test]
    fn prices_come_from_the_configuration_or_the_sku() {
        let list = Prices::default();
        assert_eq!(list.box_price("tinybox-green"), Some(25_000.0));
        assert_eq!(list.box_price("tinybox-red"), Some(15_000.0));
        assert_eq!(list.box_price("unknown"), None);
        let own = Prices {
            box_usd: Some(30_000.0),
            electricity_usd_per_kwh: 0.3,
        };
        assert_eq!(own.box_price("tinybox-red"), Some(30_000.0));
        assert_eq!(img_per_s_per_kusd(6350.0, 25_000.0), Some(254.0));
        assert!((energy_cost_usd(1.575, &own) - 0.4725).abs() < 1e-9);
    }
}
