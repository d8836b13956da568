//! Energy from power samples: the trapezoid rule between consecutive readings of each
//! device. Two readings further apart than the longest bridged gap are not joined: the
//! time between them is left out of the integral and counted as a gap, since nothing
//! says what the device drew meanwhile.

use std::collections::BTreeMap;

use super::sample::TelemetrySample;

/// Readings further apart than this are not joined.
pub const MAX_BRIDGED_GAP_S: f64 = 5.0;

pub use crate::record::JOULES_PER_KWH;

/// Energy drawn over a span of samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Energy {
    /// All devices together.
    pub joules: f64,
    /// By device name (`gpu0`, …).
    pub per_device: BTreeMap<String, f64>,
    /// Seconds integrated, by device.
    pub covered_s: BTreeMap<String, f64>,
    /// Spans between readings that were too long to bridge, all devices together.
    pub gaps: usize,
}

impl Energy {
    /// The energy, in kWh.
    pub fn kwh(&self) -> f64 {
        self.joules / JOULES_PER_KWH
    }

    /// The devices' mean power added up; `None` when no time was covered.
    pub fn mean_power_w(&self) -> Option<f64> {
        let per_device: Vec<f64> = self
            .per_device
            .iter()
            .filter_map(|(device, joules)| {
                let covered = *self.covered_s.get(device)?;
                (covered > 0.0).then_some(joules / covered)
            })
            .collect();
        (!per_device.is_empty()).then(|| per_device.iter().sum())
    }
}

#[derive(Debug, Clone, Default)]
struct Series {
    last: Option<(f64, f64)>,
    joules: f64,
    covered_s: f64,
    gaps: usize,
}

impl Series {
    fn add(&mut self, t_s: f64, power_w: f64, max_gap_s: f64) {
        if !t_s.is_finite() || !power_w.is_finite() || power_w < 0.0 {
            return;
        }
        match self.last {
            // A clock that went back or stood still adds nothing.
            Some((t0, _)) if t_s <= t0 => return,
            Some((t0, _)) if t_s - t0 > max_gap_s => self.gaps += 1,
            Some((t0, p0)) => {
                self.joules += (p0 + power_w) / 2.0 * (t_s - t0);
                self.covered_s += t_s - t0;
            }
            None => {}
        }
        self.last = Some((t_s, power_w));
    }
}

/// Integrates power readings as they arrive, device by device.
#[derive(Debug, Clone)]
pub struct EnergyMeter {
    max_gap_s: f64,
    devices: BTreeMap<String, Series>,
}

impl Default for EnergyMeter {
    fn default() -> Self {
        EnergyMeter::new(MAX_BRIDGED_GAP_S)
    }
}

impl EnergyMeter {
    /// A meter that integrates across spans of up to `max_gap_s` seconds between readings;
    /// longer spans count as gaps.
    pub fn new(max_gap_s: f64) -> Self {
        EnergyMeter {
            max_gap_s,
            devices: BTreeMap::new(),
        }
    }

    /// One power reading of one device at `t_s` seconds.
    pub fn add(&mut self, device: &str, t_s: f64, power_w: f64) {
        let max_gap_s = self.max_gap_s;
        self.devices
            .entry(device.to_string())
            .or_default()
            .add(t_s, power_w, max_gap_s);
    }

    /// Every GPU power reading in `sample`.
    pub fn add_sample(&mut self, sample: &TelemetrySample) {
        for gpu in &sample.gpus {
            if let Some(power) = gpu.power_w {
                self.add(&gpu.device(), sample.t_s, power);
            }
        }
    }

    /// The energy so far; `None` when no device gave a single reading.
    pub fn energy(&self) -> Option<Energy> {
        if self.devices.is_empty() {
            return None;
        }
        Some(Energy {
            joules: self.devices.values().map(|s| s.joules).sum(),
            per_device: self
                .devices
                .iter()
                .map(|(d, s)| (d.clone(), s.joules))
                .collect(),
            covered_s: self
                .devices
                .iter()
                .map(|(d, s)| (d.clone(), s.covered_s))
                .collect(),
            gaps: self.devices.values().map(|s| s.gaps).sum(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meter(points: &[(f64, f64)]) -> Energy {
        let mut m = EnergyMeter::default();
        for (t, p) in points {
            m.add("gpu0", *t, *p);
        }
        m.energy().unwrap()
    }

    #[test]
    fn constant_power_gives_power_times_time() {
        let points: Vec<(f64, f64)> = (0..=10).map(|t| (t as f64, 300.0)).collect();
        let e = meter(&points);
        assert_eq!(e.joules, 3000.0);
        assert_eq!(e.gaps, 0);
        assert_eq!(e.mean_power_w(), Some(300.0));
    }

    #[test]
    fn a_ramp_gives_the_trapezoid() {
        // 0 W to 100 W over 4 s in uneven steps: the area of the triangle, 200 J.
        let e = meter(&[(0.0, 0.0), (1.0, 25.0), (1.5, 37.5), (4.0, 100.0)]);
        assert!((e.joules - 200.0).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn a_long_gap_is_not_bridged_and_is_counted() {
        let e = meter(&[(0.0, 100.0), (1.0, 100.0), (10.0, 500.0), (11.0, 500.0)]);
        assert_eq!(e.joules, 100.0 + 500.0);
        assert_eq!(e.covered_s["gpu0"], 2.0);
        assert_eq!(e.gaps, 1);
    }

    #[test]
    fn a_gap_of_exactly_the_limit_is_bridged() {
        let e = meter(&[(0.0, 10.0), (MAX_BRIDGED_GAP_S, 10.0)]);
        assert_eq!(e.joules, 10.0 * MAX_BRIDGED_GAP_S);
        assert_eq!(e.gaps, 0);
    }

    #[test]
    fn bad_readings_and_clocks_going_back_add_nothing() {
        let e = meter(&[
            (0.0, 100.0),
            (1.0, f64::NAN),
            (1.0, -5.0),
            (2.0, 100.0),
            (1.5, 9000.0),
        ]);
        assert_eq!(e.joules, 200.0);
    }

    #[test]
    fn devices_add_up_and_keep_their_own_share() {
        let mut m = EnergyMeter::default();
        for t in 0..=2 {
            m.add("gpu0", t as f64, 100.0);
            m.add("gpu1", t as f64, 50.0);
        }
        let e = m.energy().unwrap();
        assert_eq!(e.joules, 300.0);
        assert_eq!(e.per_device["gpu1"], 100.0);
        assert_eq!(e.mean_power_w(), Some(150.0));
        assert!((e.kwh() - 300.0 / 3.6e6).abs() < 1e-15);
    }

    #[test]
    fn no_reading_is_no_energy_rather_than_zero() {
        assert_eq!(EnergyMeter::default().energy(), None);
    }
}
