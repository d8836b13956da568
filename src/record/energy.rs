//! A run's energy, as its summary adds up the figures its stages measured.

use super::run::StageResult;

/// The stage metric holding its energy; the run's summary adds these up.
pub const ENERGY_METRIC: &str = "energy_j";
/// Joules in a kilowatt-hour.
pub const JOULES_PER_KWH: f64 = 3.6e6;

/// The run's energy: the sum of its stages' energy metrics, `None` when no stage
/// measured any.
pub fn run_energy_j(stages: &[StageResult]) -> Option<f64> {
    let measured: Vec<f64> = stages
        .iter()
        .flat_map(|s| &s.metrics)
        .filter(|m| m.name == ENERGY_METRIC)
        .map(|m| m.value)
        .collect();
    (!measured.is_empty()).then(|| measured.iter().sum())
}

/// `joules` in kWh.
pub fn joules_to_kwh(joules: f64) -> f64 {
    joules / JOULES_PER_KWH
}
