//! Weight initialisation of the reference recipe, from the counter generator.
//!
//! Values come out in PyTorch's logical order (conv weights OIHW, linear weights
//! `[out, in]`) as `f32`; the backend converts to its own layout. `stream` names the
//! tensor (by convention its index in the model's parameter list, in PyTorch
//! `named_parameters()` order), so every tensor draws independent numbers.
//!
//! Truncated normals are drawn by rejection with a fixed schedule, so each element is a
//! pure function of its address: element `i` of an `n`-element tensor tries normal
//! indices `i`, `i + n`, `i + 2n`, … and keeps the first with |z| ≤ 2.

use super::optim::ParamKind;
use super::rng::CounterRng;

/// Keras' correction that gives a ±2σ truncated normal the variance of the untruncated
/// one: the standard deviation of a standard normal truncated at ±2 (0.87962566103423978,
/// written as the shortest literal of the same double).
pub const TRUNCATED_NORMAL_STD: f64 = 0.879_625_661_034_239_8;
/// Where the He normal is truncated, in standard deviations.
pub const TRUNCATION_STDS: f64 = 2.0;
/// Rejection rounds before an element gives up and is 0. One round rejects with
/// probability 0.0455, so reaching this limit has probability about 1e-43.
pub const MAX_REJECTION_ROUNDS: u64 = 32;
/// Standard deviation of the classifier weights.
pub const FC_WEIGHT_STD: f64 = 0.01;

/// `len` standard normals as `f32`, in index order.
pub fn standard_normal(seed: u64, stream: u64, len: usize) -> Vec<f32> {
    let rng = CounterRng::new(seed, stream);
    (0..len as u64).map(|i| rng.normal(i) as f32).collect()
}

/// `len` normals with standard deviation `std` and mean 0, truncated at ±2σ by the
/// fixed rejection schedule described in the module docs.
pub fn truncated_normal(seed: u64, stream: u64, len: usize, std: f64) -> Vec<f32> {
    let rng = CounterRng::new(seed, stream);
    let n = len as u64;
    (0..n)
        .map(|i| {
            (0..MAX_REJECTION_ROUNDS)
                .map(|round| rng.normal(i.wrapping_add(round.wrapping_mul(n))))
                .find(|z| z.abs() <= TRUNCATION_STDS)
                .map_or(0.0, |z| (z * std) as f32)
        })
        .collect()
}

/// The He normal standard deviation for a conv of fan-in `fan_in`, corrected for the
/// truncation: `sqrt(2 / fan_in) / 0.8796…`.
pub fn he_normal_std(fan_in: usize) -> f64 {
    (2.0 / fan_in.max(1) as f64).sqrt() / TRUNCATED_NORMAL_STD
}

/// Conv weights `[cout, cin, kh, kw]` (OIHW): truncated He normal with fan-in
/// `cin * kh * kw`.
pub fn conv_weight(
    seed: u64,
    stream: u64,
    cout: usize,
    cin: usize,
    kh: usize,
    kw: usize,
) -> Vec<f32> {
    let fan_in = cin * kh * kw;
    truncated_normal(seed, stream, cout * fan_in, he_normal_std(fan_in))
}

/// Linear weights `[out_features, in_features]`: N(0, 0.01²).
pub fn linear_weight(seed: u64, stream: u64, out_features: usize, in_features: usize) -> Vec<f32> {
    let rng = CounterRng::new(seed, stream);
    (0..(out_features * in_features) as u64)
        .map(|i| (rng.normal(i) * FC_WEIGHT_STD) as f32)
        .collect()
}

/// Linear bias: zeros.
pub fn linear_bias(out_features: usize) -> Vec<f32> {
    vec![0.0; out_features]
}

/// Batch-norm scale γ: ones.
pub fn bn_gamma(channels: usize) -> Vec<f32> {
    vec![1.0; channels]
}

/// Batch-norm shift β: zeros.
pub fn bn_beta(channels: usize) -> Vec<f32> {
    vec![0.0; channels]
}

/// The initial values of a parameter of `kind` with PyTorch shape `shape` (OIHW for
/// conv weights, `[out, in]` for linear weights, `[C]` or `[out]` otherwise), or `None`
/// when the shape does not fit the kind.
pub fn init_param(kind: ParamKind, shape: &[usize], seed: u64, stream: u64) -> Option<Vec<f32>> {
    match (kind, shape) {
        (ParamKind::ConvWeight, &[cout, cin, kh, kw]) => {
            Some(conv_weight(seed, stream, cout, cin, kh, kw))
        }
        (ParamKind::LinearWeight, &[out, inp]) => Some(linear_weight(seed, stream, out, inp)),
        (ParamKind::LinearBias, &[out]) => Some(linear_bias(out)),
        (ParamKind::BatchNormGamma, &[c]) => Some(bn_gamma(c)),
        (ParamKind::BatchNormBeta, &[c]) => Some(bn_beta(c)),
        _ => None,
    }
}

/// An exact fingerprint of `values`: Σ bits(vᵢ)·(2i+1) in wrapping u64 arithmetic. It
/// changes when any value changes by one ulp or moves, and numpy computes it the same way.
pub fn checksum(values: &[f32]) -> u64 {
    values.iter().enumerate().fold(0u64, |acc, (i, v)| {
        let weight = (i as u64).wrapping_mul(2).wrapping_add(1);
        acc.wrapping_add(u64::from(v.to_bits()).wrapping_mul(weight))
    })
}

/// Reorders an NCHW tensor to NHWC.
pub fn nchw_to_nhwc(values: &[f32], n: usize, c: usize, h: usize, w: usize) -> Option<Vec<f32>> {
    if values.len() != n * c * h * w {
        return None;
    }
    let mut out = vec![0.0; values.len()];
    for b in 0..n {
        for ch in 0..c {
            for y in 0..h {
                for x in 0..w {
                    out[((b * h + y) * w + x) * c + ch] = values[((b * c + ch) * h + y) * w + x];
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_and_std(values: &[f32]) -> (f64, f64) {
        let n = values.len() as f64;
        let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / n;
        let var = values
            .iter()
            .map(|&v| (f64::from(v) - mean).powi(2))
            .sum::<f64>()
            / n;
        (mean, var.sqrt())
    }

    #[test]
    fn conv_weights_are_truncated_he_normal() {
        let (cout, cin, k) = (64, 64, 3);
        let w = conv_weight(11, 5, cout, cin, k, k);
        assert_eq!(w.len(), cout * cin * k * k);
        let std = he_normal_std(cin * k * k);
        let bound = (TRUNCATION_STDS * std) as f32;
        assert!(w.iter().all(|v| v.abs() <= bound * (1.0 + 1e-6)));
        let (mean, sd) = mean_and_std(&w);
        // The truncation correction makes the truncated std equal to sqrt(2 / fan_in).
        let target = (2.0 / (cin * k * k) as f64).sqrt();
        assert!(mean.abs() < 0.01 * target, "mean {mean}");
        assert!((sd / target - 1.0).abs() < 0.02, "std {sd} vs {target}");
    }

    #[test]
    fn fc_weights_are_normal_with_std_one_hundredth() {
        let w = linear_weight(2, 9, 100, 512);
        let (mean, sd) = mean_and_std(&w);
        assert!(mean.abs() < 2e-4, "mean {mean}");
        assert!((sd - 0.01).abs() < 2e-4, "std {sd}");
    }

    #[test]
    fn constant_initialisers_and_shape_checks() {
        assert_eq!(
            init_param(ParamKind::BatchNormGamma, &[3], 0, 0),
            Some(vec![1.0; 3])
        );
        assert_eq!(
            init_param(ParamKind::BatchNormBeta, &[2], 0, 0),
            Some(vec![0.0; 2])
        );
        assert_eq!(
            init_param(ParamKind::LinearBias, &[4], 0, 0),
            Some(vec![0.0; 4])
        );
        assert_eq!(init_param(ParamKind::ConvWeight, &[4, 4], 0, 0), None);
        assert_eq!(init_param(ParamKind::LinearWeight, &[4, 4, 1], 0, 0), None);
        assert_eq!(
            init_param(ParamKind::ConvWeight, &[2, 3, 1, 1], 4, 5),
            Some(conv_weight(4, 5, 2, 3, 1, 1))
        );
    }

    #[test]
    fn each_element_depends_only_on_its_address() {
        // Plain normals have no rejection rounds, so a prefix does not depend on length.
        let short = standard_normal(1, 1, 10);
        let long = standard_normal(1, 1, 1000);
        assert_eq!(&long[..10], &short[..]);
        assert_ne!(standard_normal(1, 2, 10), short);
    }

    #[test]
    fn checksum_sees_one_ulp_and_order() {
        let a = [1.0f32, 2.0, 3.0];
        let mut b = a;
        b[1] = f32::from_bits(b[1].to_bits() + 1);
        assert_ne!(checksum(&a), checksum(&b));
        assert_ne!(checksum(&a), checksum(&[2.0, 1.0, 3.0]));
        assert_eq!(checksum(&a), checksum(&[1.0, 2.0, 3.0]));
    }

    #[test]
    fn nchw_to_nhwc_moves_channels_last() {
        // n=1, c=2, h=1, w=3: channel planes [0,1,2] and [10,11,12].
        let nchw = [0.0, 1.0, 2.0, 10.0, 11.0, 12.0];
        let nhwc = nchw_to_nhwc(&nchw, 1, 2, 1, 3).unwrap();
        assert_eq!(nhwc, vec![0.0, 10.0, 1.0, 11.0, 2.0, 12.0]);
        assert_eq!(nchw_to_nhwc(&nchw, 1, 2, 2, 3), None);
    }
}
