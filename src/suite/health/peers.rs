//! A GPU against its siblings in the same box: for one figure (GEMM TFLOPS, memory
//! bandwidth, host↔device bandwidth, power, clocks under load), a GPU is an outlier when
//! it lies beyond the box's median by more than `k` median absolute deviations, and by
//! more than a minimum relative gap (six identical GPUs can agree to within noise that is
//! smaller than any real fault). No fleet baseline or spec is needed.

/// How far from the median counts as an outlier.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PeerLimits {
    /// Median absolute deviations.
    pub k: f64,
    /// And at least this fraction of the median.
    pub min_relative_gap: f64,
}

impl Default for PeerLimits {
    fn default() -> Self {
        PeerLimits {
            k: 3.0,
            min_relative_gap: 0.05,
        }
    }
}

/// Where one GPU's figure stands among its peers'.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerStanding {
    /// This GPU's figure.
    pub value: f64,
    /// The median of every GPU's figure.
    pub median: f64,
    /// `value / median`.
    pub ratio: f64,
    /// Below the band around the median.
    pub low_outlier: bool,
    /// Above the band around the median.
    pub high_outlier: bool,
    /// Inside the band but more than one median absolute deviation from the median, and
    /// more than half the minimum gap: worth a warning, never a failure.
    pub drifting: bool,
}

/// The median of the finite values (the mean of the middle two for an even count), `None`
/// when there are none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    Some(if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    })
}

/// Each GPU's standing, in the order given; `None` for all when fewer than three GPUs
/// have a figure (two cannot outvote each other).
pub fn standings(values: &[Option<f64>], limits: PeerLimits) -> Vec<Option<PeerStanding>> {
    let present: Vec<f64> = values.iter().flatten().copied().collect();
    let (Some(center), true) = (median(&present), present.len() >= 3) else {
        return vec![None; values.len()];
    };
    let deviations: Vec<f64> = present.iter().map(|v| (v - center).abs()).collect();
    let mad = median(&deviations).unwrap_or(0.0);
    let band = (limits.k * mad).max(limits.min_relative_gap * center.abs());
    // Half the GPUs of a box lie beyond one MAD by its definition: only a drift larger
    // than noise among identical GPUs (half the minimum gap) is worth a word.
    let drift = mad.max(0.5 * limits.min_relative_gap * center.abs());
    values
        .iter()
        .map(|value| {
            value.map(|value| PeerStanding {
                value,
                median: center,
                ratio: if center != 0.0 {
                    value / center
                } else {
                    f64::NAN
                },
                low_outlier: value < center - band,
                high_outlier: value > center + band,
                drifting: (value - center).abs() > drift && (value - center).abs() <= band,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_ten_percent_below_five_siblings_is_flagged() {
        let tflops = [
            Some(165.2),
            Some(164.8),
            Some(148.0),
            Some(165.0),
            Some(165.5),
            Some(164.9),
        ];
        let standings = standings(&tflops, PeerLimits::default());
        let flagged: Vec<usize> = standings
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().unwrap().low_outlier)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(flagged, [2]);
        let slow = standings[2].as_ref().unwrap();
        assert!((slow.median - 164.95).abs() < 1e-9, "{slow:?}");
        assert!((slow.ratio - 148.0 / 164.95).abs() < 1e-9, "{slow:?}");
        assert!(standings.iter().flatten().all(|s| !s.high_outlier));
    }

    #[test]
    fn noise_among_identical_gpus_flags_nobody() {
        let values = [
            Some(100.0),
            Some(100.4),
            Some(99.7),
            Some(100.1),
            Some(99.9),
            Some(100.2),
        ];
        assert!(standings(&values, PeerLimits::default())
            .iter()
            .flatten()
            .all(|s| !s.low_outlier && !s.high_outlier && !s.drifting));
    }

    #[test]
    fn a_gpu_four_percent_below_its_peers_drifts_without_failing() {
        let values = [
            Some(100.0),
            Some(100.3),
            Some(96.0),
            Some(99.8),
            Some(100.1),
            Some(99.9),
        ];
        let standings = standings(&values, PeerLimits::default());
        let drifting: Vec<usize> = standings
            .iter()
            .enumerate()
            .filter(|(_, s)| s.as_ref().unwrap().drifting)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(drifting, [2]);
        assert!(standings.iter().flatten().all(|s| !s.low_outlier));
    }

    #[test]
    fn fewer_than_three_figures_cannot_be_compared_and_missing_ones_are_skipped() {
        assert_eq!(
            standings(&[Some(1.0), Some(0.5)], PeerLimits::default()),
            vec![None, None]
        );
        let with_gap = standings(
            &[Some(10.0), None, Some(10.1), Some(5.0)],
            PeerLimits::default(),
        );
        assert!(with_gap[1].is_none());
        assert!(with_gap[3].as_ref().unwrap().low_outlier);
        assert_eq!(median(&[3.0, 1.0, 2.0, 4.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN]), None);
    }
}
