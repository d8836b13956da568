//! LARS as the reference implements it (classic momentum, no Nesterov):
//!
//! ```text
//! trust = tcoef·‖w‖ / (‖g‖ + wd·‖w‖ + ε)      (1 when ‖w‖ = 0 or ‖g‖ = 0, or tcoef = 0)
//! g'    = (g + wd·w) · trust · lr
//! b     = momentum·b + g'
//! w     = w − b
//! ```
//!
//! Weight decay enters both the trust ratio's denominator and the gradient, and the
//! learning rate is applied before the momentum buffer ("classic" momentum), so the
//! buffer holds a step, not a gradient.

use super::{check_lengths, OptimError};

/// The LARS hyperparameters of the recipe.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LarsConfig {
    /// The factor `momentum` on the buffer `b` each step (0.9 in the reference); 0 drops
    /// momentum.
    pub momentum: f32,
    /// The L2 weight decay `wd` added to the gradient and to the trust ratio's denominator
    /// (2e-4 in the reference).
    pub weight_decay: f32,
    /// The trust coefficient `tcoef` scaling `‖w‖ / (‖g‖ + wd·‖w‖ + ε)` (0.001 in the
    /// reference); 0 makes the trust ratio 1, plain momentum SGD.
    pub trust_coefficient: f32,
    /// The ε added to the trust ratio's denominator against a zero divisor (0 in the
    /// reference).
    pub epsilon: f32,
}

impl Default for LarsConfig {
    /// The v4.0 reference: momentum 0.9, weight decay 2e-4, trust coefficient 0.001, ε 0.
    fn default() -> Self {
        Self {
            momentum: 0.9,
            weight_decay: 2e-4,
            trust_coefficient: 0.001,
            epsilon: 0.0,
        }
    }
}

/// The layer-wise trust ratio from the parameter's and the gradient's L2 norms. It is 1
/// when either norm is 0 (a fresh zero tensor, or no gradient) and when `tcoef` is 0
/// (plain SGD).
pub fn lars_trust_ratio(w_norm: f32, g_norm: f32, wd: f32, tcoef: f32, eps: f32) -> f32 {
    if tcoef == 0.0 || w_norm <= 0.0 || g_norm <= 0.0 {
        return 1.0;
    }
    tcoef * w_norm / (g_norm + wd * w_norm + eps)
}

/// One LARS update in place with a precomputed `trust` ratio (see [`lars_trust_ratio`]).
/// The slices must have equal length.
pub fn lars_step(
    param: &mut [f32],
    grad: &[f32],
    momentum_buf: &mut [f32],
    lr: f32,
    trust: f32,
    wd: f32,
    momentum: f32,
) -> Result<(), OptimError> {
    check_lengths(param.len(), grad.len(), momentum_buf.len())?;
    for ((w, &g), b) in param.iter_mut().zip(grad).zip(momentum_buf.iter_mut()) {
        let decayed = g + wd * *w;
        let scaled = decayed * trust * lr;
        *b = momentum * *b + scaled;
        *w -= *b;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::optim::l2_norm;

    #[test]
    fn trust_ratio_matches_the_formula() {
        let r = lars_trust_ratio(2.0, 0.5, 1e-4, 0.001, 0.0);
        assert!((r - 0.001 * 2.0 / (0.5 + 1e-4 * 2.0)).abs() < 1e-12);
        let with_eps = lars_trust_ratio(2.0, 0.5, 1e-4, 0.001, 0.25);
        assert!((with_eps - 0.001 * 2.0 / (0.75 + 1e-4 * 2.0)).abs() < 1e-12);
    }

    #[test]
    fn trust_ratio_is_one_for_zero_norms_and_zero_coefficient() {
        assert_eq!(lars_trust_ratio(0.0, 3.0, 2e-4, 0.001, 0.0), 1.0);
        assert_eq!(lars_trust_ratio(3.0, 0.0, 2e-4, 0.001, 0.0), 1.0);
        assert_eq!(lars_trust_ratio(0.0, 0.0, 2e-4, 0.001, 0.0), 1.0);
        assert_eq!(lars_trust_ratio(3.0, 4.0, 2e-4, 0.0, 0.0), 1.0);
    }

    #[test]
    fn two_steps_match_a_hand_computation() {
        // w = [3, 4] (‖w‖ = 5), g = [0.6, 0.8] (‖g‖ = 1), wd = 0.1, tcoef = 0.5, lr = 2.
        // trust = 0.5·5 / (1 + 0.1·5) = 5/3.
        let mut w = [3.0f32, 4.0];
        let g = [0.6f32, 0.8];
        let mut b = [0.0f32; 2];
        let trust = lars_trust_ratio(l2_norm(&w), l2_norm(&g), 0.1, 0.5, 0.0);
        assert!((trust - 5.0 / 3.0).abs() < 1e-6);
        lars_step(&mut w, &g, &mut b, 2.0, trust, 0.1, 0.9).unwrap();
        // g + wd·w = [0.9, 1.2]; × 5/3 × 2 = [3, 4]; b = [3, 4]; w = [0, 0].
        assert!(
            (b[0] - 3.0).abs() < 1e-5 && (b[1] - 4.0).abs() < 1e-5,
            "{b:?}"
        );
        assert!(w[0].abs() < 1e-5 && w[1].abs() < 1e-5, "{w:?}");
        // Second step with w ≈ 0: trust is 1 when ‖w‖ = 0; decay adds nothing.
        let w0 = [0.0f32, 0.0];
        let mut w = w0;
        let trust = lars_trust_ratio(l2_norm(&w), l2_norm(&g), 0.1, 0.5, 0.0);
        assert_eq!(trust, 1.0);
        lars_step(&mut w, &g, &mut b, 2.0, trust, 0.1, 0.9).unwrap();
        // b = 0.9·[3, 4] + [1.2, 1.6] = [3.9, 5.2]; w = −b.
        assert!(
            (b[0] - 3.9).abs() < 1e-5 && (b[1] - 5.2).abs() < 1e-5,
            "{b:?}"
        );
        assert!(
            (w[0] + 3.9).abs() < 1e-5 && (w[1] + 5.2).abs() < 1e-5,
            "{w:?}"
        );
    }

    #[test]
    fn lars_follows_the_reference_formula_elementwise() {
        // A less tidy case against the formula written out in f64.
        let w0 = [0.3f32, -1.2, 0.05, 2.0, -0.7];
        let g = [0.01f32, 0.2, -0.03, -0.5, 0.0];
        let b0 = [0.1f32, -0.1, 0.0, 0.2, 0.05];
        let (lr, wd, mom, tcoef) = (6.5f32, 2e-4f32, 0.9f32, 0.001f32);
        let wn = w0.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
        let gn = g.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>().sqrt();
        let trust64 = f64::from(tcoef) * wn / (gn + f64::from(wd) * wn);
        let (mut w, mut b) = (w0, b0);
        let trust = lars_trust_ratio(l2_norm(&w), l2_norm(&g), wd, tcoef, 0.0);
        assert!((f64::from(trust) - trust64).abs() < 1e-6 * trust64);
        lars_step(&mut w, &g, &mut b, lr, trust, wd, mom).unwrap();
        for i in 0..w0.len() {
            let step =
                (f64::from(g[i]) + f64::from(wd) * f64::from(w0[i])) * trust64 * f64::from(lr);
            let b_ref = f64::from(mom) * f64::from(b0[i]) + step;
            let w_ref = f64::from(w0[i]) - b_ref;
            assert!(
                (f64::from(b[i]) - b_ref).abs() < 1e-6,
                "b[{i}] {} vs {b_ref}",
                b[i]
            );
            assert!(
                (f64::from(w[i]) - w_ref).abs() < 1e-6,
                "w[{i}] {} vs {w_ref}",
                w[i]
            );
        }
    }
}
