//! The learning-rate schedule of the reference: linear warmup from 0, then polynomial
//! decay to an end rate.
//!
//! With `t` the number of optimizer steps already taken (the first step has `t = 0`),
//! `W` the warmup steps and `T` the planned training steps:
//!
//! ```text
//! lr(t) = base · t / W                                          t ≤ W
//! lr(t) = (base − end) · (1 − (t − W) / (T − W + 1))^power + end    W < t ≤ T + 1
//! lr(t) = end                                                   t > T + 1
//! ```
//!
//! So the first step runs at LR 0, step `W` at the base LR, and the last planned step
//! (`t = T − 1`) just above the end LR. The reference leaves `t > T + 1` unclamped (the
//! base of the power turns negative and the LR would grow again); here it stays at the
//! end LR. With `W = 0` there is no warmup and the decay starts at `t = 0`.

/// A schedule that cannot be built.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// `total_steps` is 0.
    #[error("the LR schedule needs at least one training step")]
    NoSteps,
    /// A rate is not finite, the end LR is negative, or it exceeds the base LR.
    #[error("the LR schedule needs finite rates with 0 ≤ end LR ≤ base LR, got base {base} and end {end}")]
    BadRates {
        /// The base LR given.
        base: f64,
        /// The end LR given.
        end: f64,
    },
    /// The decay power is NaN, infinite, zero or negative; holds the power given.
    #[error("the LR decay power must be finite and positive, got {0}")]
    BadPower(f64),
}

/// Polynomial decay with linear warmup, evaluated per step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolynomialDecayWithWarmup {
    base_lr: f64,
    end_lr: f64,
    warmup_steps: u64,
    total_steps: u64,
    power: f64,
}

impl PolynomialDecayWithWarmup {
    /// A schedule over `total_steps` steps; `warmup_steps` is capped at `total_steps` as
    /// in the reference.
    pub fn new(
        base_lr: f64,
        end_lr: f64,
        warmup_steps: u64,
        total_steps: u64,
        power: f64,
    ) -> Result<Self, ScheduleError> {
        if total_steps == 0 {
            return Err(ScheduleError::NoSteps);
        }
        if !(base_lr.is_finite() && end_lr.is_finite() && end_lr >= 0.0 && end_lr <= base_lr) {
            return Err(ScheduleError::BadRates {
                base: base_lr,
                end: end_lr,
            });
        }
        if !(power.is_finite() && power > 0.0) {
            return Err(ScheduleError::BadPower(power));
        }
        Ok(Self {
            base_lr,
            end_lr,
            warmup_steps: warmup_steps.min(total_steps),
            total_steps,
            power,
        })
    }

    /// The learning rate of the step that has `step` steps before it.
    pub fn lr_at(&self, step: u64) -> f64 {
        let (warmup, total) = (self.warmup_steps, self.total_steps);
        if warmup > 0 && step <= warmup {
            return self.base_lr * step as f64 / warmup as f64;
        }
        if step > total + 1 {
            return self.end_lr;
        }
        let decay_steps = (total - warmup + 1) as f64;
        let remaining = 1.0 - (step - warmup) as f64 / decay_steps;
        (self.base_lr - self.end_lr) * remaining.powf(self.power) + self.end_lr
    }

    /// The peak LR, reached at the end of warmup.
    pub fn base_lr(&self) -> f64 {
        self.base_lr
    }

    /// The LR the decay ends at, held after step `T + 1`.
    pub fn end_lr(&self) -> f64 {
        self.end_lr
    }

    /// The linear-warmup steps `W`, already capped at [`total_steps`](Self::total_steps).
    pub fn warmup_steps(&self) -> u64 {
        self.warmup_steps
    }

    /// The planned training steps `T` the decay spans.
    pub fn total_steps(&self) -> u64 {
        self.total_steps
    }

    /// The exponent of the polynomial decay (2 in the reference).
    pub fn power(&self) -> f64 {
        self.power
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The v4.0 schedule: 835 steps per epoch, 2 warmup epochs, 37 planned epochs.
    fn reference() -> PolynomialDecayWithWarmup {
        PolynomialDecayWithWarmup::new(7.2, 1e-4, 2 * 835, 37 * 835, 2.0).unwrap()
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn warmup_starts_at_zero_and_reaches_the_base_rate() {
        let s = reference();
        assert_eq!(s.lr_at(0), 0.0);
        assert!(close(s.lr_at(1), 7.2 / 1670.0, 1e-12));
        assert!(close(s.lr_at(835), 3.6, 1e-12));
        assert_eq!(s.lr_at(1670), 7.2);
    }

    #[test]
    fn decay_matches_the_reference_values_at_epoch_ends() {
        // Values the reference recipe documents at the end of epochs 10, 20, 30, 34, 35.
        let s = reference();
        for (epoch, lr) in [
            (10u64, 4.285),
            (20, 1.699),
            (30, 0.288),
            (34, 0.053),
            (35, 0.0236),
        ] {
            let got = s.lr_at(epoch * 835);
            assert!(close(got, lr, 1e-3), "epoch {epoch}: {got} vs {lr}");
        }
        // First decay step: (7.2 − 1e-4)·(1 − 1/29226)² + 1e-4.
        let first = (7.2 - 1e-4) * (1.0 - 1.0 / 29226.0f64).powi(2) + 1e-4;
        assert!(close(s.lr_at(1671), first, 1e-12));
    }

    #[test]
    fn last_step_and_beyond() {
        let s = reference();
        let total = 37 * 835;
        // Last planned step (t = T − 1): (base − end)·(2/29226)² + end.
        let last = (7.2 - 1e-4) * (2.0 / 29226.0f64).powi(2) + 1e-4;
        assert!(close(s.lr_at(total - 1), last, 1e-15));
        assert!(s.lr_at(total - 1) > 1e-4);
        assert!(close(s.lr_at(total + 1), 1e-4, 1e-15));
        assert_eq!(s.lr_at(total + 2), 1e-4);
        assert_eq!(s.lr_at(10 * total), 1e-4);
    }

    #[test]
    fn lr_never_increases_after_warmup() {
        let s = PolynomialDecayWithWarmup::new(0.8, 0.0, 10, 100, 2.0).unwrap();
        let mut previous = s.lr_at(10);
        for t in 11..200 {
            let lr = s.lr_at(t);
            assert!(lr <= previous, "step {t}: {lr} > {previous}");
            assert!(lr >= 0.0);
            previous = lr;
        }
    }

    #[test]
    fn no_warmup_and_oversized_warmup() {
        let s = PolynomialDecayWithWarmup::new(1.0, 0.0, 0, 9, 2.0).unwrap();
        assert_eq!(s.lr_at(0), 1.0);
        assert!(close(s.lr_at(5), 0.25, 1e-12));
        let s = PolynomialDecayWithWarmup::new(1.0, 0.0, 50, 10, 2.0).unwrap();
        assert_eq!(s.warmup_steps(), 10);
        assert_eq!(s.lr_at(10), 1.0);
    }

    #[test]
    fn bad_parameters_are_errors() {
        assert_eq!(
            PolynomialDecayWithWarmup::new(1.0, 0.0, 0, 0, 2.0),
            Err(ScheduleError::NoSteps)
        );
        assert!(PolynomialDecayWithWarmup::new(1.0, 2.0, 1, 10, 2.0).is_err());
        assert!(PolynomialDecayWithWarmup::new(f64::NAN, 0.0, 1, 10, 2.0).is_err());
        assert!(PolynomialDecayWithWarmup::new(1.0, -0.1, 1, 10, 2.0).is_err());
        assert!(PolynomialDecayWithWarmup::new(1.0, 0.0, 1, 10, 0.0).is_err());
    }
}
