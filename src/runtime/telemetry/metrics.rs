//! A stage's telemetry as figures and notes in its [`StageResult`].

use super::recorder::StageTelemetry;
use crate::record::{Metric, StageResult, ENERGY_METRIC, JOULES_PER_KWH};
/// The training figure images per joule is derived from.
const THROUGHPUT_METRIC: &str = "img_per_s";

impl StageTelemetry {
    /// Adds the stage's energy figures and the telemetry findings to `result`. With
    /// no power source the energy figures are left out, not written as zero.
    pub fn apply_to(&self, result: &mut StageResult) {
        for finding in &self.findings {
            if !result.findings.contains(finding) {
                result.findings.push(finding.clone());
            }
        }
        let Some(energy) = &self.energy else {
            return;
        };
        let mut metrics = vec![
            Metric::new(ENERGY_METRIC, energy.joules, "J"),
            Metric::new("energy_kwh", energy.joules / JOULES_PER_KWH, "kWh"),
        ];
        for (device, joules) in &energy.per_device {
            metrics.push(Metric::new(format!("{device}_energy_j"), *joules, "J"));
        }
        if energy.gaps > 0 {
            metrics.push(Metric::new("telemetry_gaps", energy.gaps as f64, "count"));
        }
        if let Some(mean) = energy.mean_power_w() {
            metrics.push(Metric::new("mean_power_w", mean, "W"));
            // Images per joule at the rate the stage measured: img/s over W.
            let throughput = result
                .metrics
                .iter()
                .find(|m| m.name == THROUGHPUT_METRIC)
                .map(|m| m.value);
            if let Some(img_per_s) = throughput.filter(|v| v.is_finite() && *v > 0.0) {
                if mean > 0.0 {
                    metrics.push(Metric::new("images_per_joule", img_per_s / mean, "img/J"));
                }
            }
        }
        result.metrics.extend(metrics);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use chrono::Utc;

    use super::*;
    use crate::record::run_energy_j;
    use crate::record::Verdict;
    use crate::runtime::telemetry::Energy;

    fn result(metrics: Vec<Metric>) -> StageResult {
        StageResult {
            findings: vec!["earlier".into()],
            ..StageResult::measured("train-throughput", Verdict::Skip, Utc::now(), metrics)
        }
    }

    fn telemetry(joules: f64, seconds: f64) -> StageTelemetry {
        StageTelemetry {
            energy: Some(Energy {
                joules,
                per_device: BTreeMap::from([("gpu0".to_string(), joules)]),
                covered_s: BTreeMap::from([("gpu0".to_string(), seconds)]),
                gaps: 2,
            }),
            findings: vec!["GPU 0000:0a:00.0: throttled by hw_thermal (in 1 of 9 samples)".into()],
            samples: 9,
        }
    }

    fn value(result: &StageResult, name: &str) -> Option<f64> {
        result
            .metrics
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.value)
    }

    #[test]
    fn a_training_stage_gets_energy_and_images_per_joule() {
        let mut stage = result(vec![Metric::new("img_per_s", 1200.0, "img/s")]);
        telemetry(36_000.0, 120.0).apply_to(&mut stage);
        assert_eq!(value(&stage, "energy_j"), Some(36_000.0));
        assert_eq!(value(&stage, "energy_kwh"), Some(0.01));
        assert_eq!(value(&stage, "gpu0_energy_j"), Some(36_000.0));
        assert_eq!(value(&stage, "mean_power_w"), Some(300.0));
        assert_eq!(value(&stage, "images_per_joule"), Some(4.0));
        assert_eq!(value(&stage, "telemetry_gaps"), Some(2.0));
        assert_eq!(stage.findings.len(), 2);
        assert!(stage.findings[1].contains("0000:0a:00.0"));
    }

    #[test]
    fn without_energy_there_are_no_energy_figures_and_the_run_has_no_total() {
        let mut stage = result(vec![Metric::new("img_per_s", 1200.0, "img/s")]);
        StageTelemetry {
            energy: None,
            findings: vec![crate::runtime::telemetry::NO_POWER_SOURCE.into()],
            samples: 3,
        }
        .apply_to(&mut stage);
        assert_eq!(stage.metrics.len(), 1);
        assert_eq!(run_energy_j(std::slice::from_ref(&stage)), None);

        let mut measured = result(vec![]);
        telemetry(500.0, 10.0).apply_to(&mut measured);
        assert_eq!(value(&measured, "images_per_joule"), None);
        assert_eq!(
            run_energy_j(&[stage, measured.clone(), measured]),
            Some(1000.0)
        );
    }
}
