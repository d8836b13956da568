//! Test support: deterministic inputs, central finite differences and a tolerance check
//! that names the worst element when it fails.

/// Deterministic values in `[lo, hi)` from a 64-bit LCG, so failures reproduce.
pub fn uniform(len: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32;
            lo + (hi - lo) * unit
        })
        .collect()
}

/// Values in `±[min_abs, max_abs)`: away from ReLU's kink.
pub fn away_from_zero(len: usize, seed: u64, min_abs: f32, max_abs: f32) -> Vec<f32> {
    let magnitudes = uniform(len, seed, min_abs, max_abs);
    let signs = uniform(len, seed ^ 0x5eed, -1.0, 1.0);
    magnitudes
        .iter()
        .zip(signs)
        .map(|(m, s)| if s < 0.0 { -m } else { *m })
        .collect()
}

/// `Σ y·r` in f64: a scalar loss whose gradient with respect to y is r.
pub fn weighted_sum(y: &[f32], r: &[f32]) -> f64 {
    y.iter().zip(r).map(|(&a, &b)| a as f64 * b as f64).sum()
}

/// Central differences `(f(x+h) − f(x−h)) / 2h` for every element of x.
pub fn numeric_grad(x: &[f32], h: f32, mut f: impl FnMut(&[f32]) -> f64) -> Vec<f64> {
    let mut probe = x.to_vec();
    (0..x.len())
        .map(|i| {
            probe[i] = x[i] + h;
            let up = f(&probe);
            probe[i] = x[i] - h;
            let down = f(&probe);
            probe[i] = x[i];
            // The step actually taken in f32, not the nominal one.
            let step = ((x[i] + h) as f64) - ((x[i] - h) as f64);
            (up - down) / step
        })
        .collect()
}

/// Asserts `|a − n| ≤ abs_tol + rel_tol·max|n|` element-wise, and that the numeric
/// gradient is not identically zero (a check against zero proves nothing).
pub fn assert_grad_close(
    name: &str,
    analytic: &[f32],
    numeric: &[f64],
    rel_tol: f64,
    abs_tol: f64,
) {
    assert_values_close(name, analytic, numeric, rel_tol, abs_tol);
    assert!(
        numeric.iter().any(|&v| v != 0.0),
        "{name}: numeric gradient is identically zero, the check proves nothing"
    );
}

/// Asserts `|got − expected| ≤ abs_tol + rel_tol·max|expected|` element-wise.
pub fn assert_values_close(
    name: &str,
    analytic: &[f32],
    numeric: &[f64],
    rel_tol: f64,
    abs_tol: f64,
) {
    assert_eq!(analytic.len(), numeric.len(), "{name}: length");
    let scale = numeric.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let bound = abs_tol + rel_tol * scale;
    let (worst_i, worst) = analytic
        .iter()
        .zip(numeric)
        .map(|(&a, &n)| (a as f64 - n).abs())
        .enumerate()
        .fold(
            (0, 0.0f64),
            |(bi, bv), (i, v)| if v > bv { (i, v) } else { (bi, bv) },
        );
    assert!(
        worst <= bound,
        "{name}: element {worst_i}: analytic {} vs numeric {} (error {worst:.3e} > bound {bound:.3e}, scale {scale:.3e})",
        analytic[worst_i],
        numeric[worst_i]
    );
}
