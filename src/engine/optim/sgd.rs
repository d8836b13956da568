//! Momentum SGD for the skip list: the reference runs it as LARS with trust coefficient
//! 0 and no weight decay, i.e. `b = momentum·b + lr·g; w = w − b`.

use super::lars::lars_step;
use super::OptimError;

/// One momentum SGD step in place, with classic momentum (the learning rate is applied
/// before the buffer) and no weight decay.
pub fn sgd_momentum_step(
    param: &mut [f32],
    grad: &[f32],
    momentum_buf: &mut [f32],
    lr: f32,
    momentum: f32,
) -> Result<(), OptimError> {
    lars_step(param, grad, momentum_buf, lr, 1.0, 0.0, momentum)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_steps_accumulate_momentum_without_decay() {
        let mut w = [1.0f32, -2.0];
        let mut b = [0.0f32; 2];
        let g = [0.5f32, 0.25];
        sgd_momentum_step(&mut w, &g, &mut b, 0.1, 0.9).unwrap();
        assert_eq!(b, [0.05, 0.025]);
        assert_eq!(w, [0.95, -2.025]);
        sgd_momentum_step(&mut w, &g, &mut b, 0.1, 0.9).unwrap();
        // b = 0.9·b + 0.1·g = [0.095, 0.0475].
        assert!(
            (b[0] - 0.095).abs() < 1e-7 && (b[1] - 0.0475).abs() < 1e-7,
            "{b:?}"
        );
        assert!(
            (w[0] - 0.855).abs() < 1e-6 && (w[1] + 2.0725).abs() < 1e-6,
            "{w:?}"
        );
    }

    #[test]
    fn zero_gradient_leaves_a_fresh_parameter_alone() {
        let mut w = [3.0f32; 4];
        let mut b = [0.0f32; 4];
        sgd_momentum_step(&mut w, &[0.0; 4], &mut b, 7.2, 0.9).unwrap();
        assert_eq!(w, [3.0; 4]);
    }
}
