//! Loss scaling for fp16 training: the loss gradient is multiplied by a scale before the
//! backward pass so that small gradients stay above fp16's subnormal range, and the
//! optimizer divides it back out. A step whose gradients overflowed (a NaN or infinity
//! anywhere) is skipped: the weights keep their values.

/// How the loss is scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossScaling {
    /// The loss gradient is used as it is (f32 and bf16 training).
    None,
    /// A fixed factor, as in the reference recipe (128 with fp16).
    Static(f32),
    /// Starts at `initial`, halves on every overflowing step (down to 1) and doubles after
    /// `growth_interval` steps in a row without an overflow (up to [`MAX_LOSS_SCALE`]).
    Dynamic {
        /// The starting scale, clamped to 1..=[`MAX_LOSS_SCALE`].
        initial: f32,
        /// Overflow-free steps in a row after which the scale doubles (0 counts as 1;
        /// the recipe uses [`DEFAULT_GROWTH_INTERVAL`]).
        growth_interval: u32,
    },
}

/// The largest scale the dynamic mode grows to.
pub const MAX_LOSS_SCALE: f32 = 16_777_216.0;

/// Steps in a row without an overflow before the dynamic scale doubles (PyTorch's default).
pub const DEFAULT_GROWTH_INTERVAL: u32 = 2000;

/// Overflowing steps in a row, at the smallest scale the mode allows, after which a run
/// stops: the gradients are not finite for a reason the scale cannot fix.
pub const OVERFLOW_PATIENCE: u32 = 5;

/// What to do after a step whose gradients overflowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum OverflowVerdict {
    /// Skip this step and go on (with the new scale, for the dynamic mode).
    Skip,
    /// Stop the run: the step overflowed `consecutive` times in a row at `scale`.
    GiveUp {
        /// Overflowing steps in a row at the smallest scale ([`OVERFLOW_PATIENCE`]).
        consecutive: u32,
        /// The loss scale those steps ran at.
        scale: f32,
    },
}

/// The loss scale of a run as it goes: its mode, the current scale, the clean-step and
/// overflow counts the mode acts on, and the steps skipped.
#[derive(Debug, Clone)]
pub struct LossScaler {
    mode: LossScaling,
    scale: f32,
    clean_steps: u32,
    overflows_at_floor: u32,
    skipped_steps: u64,
}

impl LossScaler {
    /// A scaler at the mode's starting scale: 1 without scaling, the fixed factor, or the
    /// dynamic `initial` clamped to 1..=[`MAX_LOSS_SCALE`].
    pub fn new(mode: LossScaling) -> Self {
        let scale = match mode {
            LossScaling::None => 1.0,
            LossScaling::Static(s) => s,
            LossScaling::Dynamic { initial, .. } => initial.clamp(1.0, MAX_LOSS_SCALE),
        };
        LossScaler {
            mode,
            scale,
            clean_steps: 0,
            overflows_at_floor: 0,
            skipped_steps: 0,
        }
    }

    /// The mode it was built with.
    pub fn mode(&self) -> LossScaling {
        self.mode
    }

    /// The factor the next step's loss gradient is multiplied by.
    pub fn scale(&self) -> f32 {
        self.scale
    }

    /// Steps skipped so far because their gradients overflowed.
    pub fn skipped_steps(&self) -> u64 {
        self.skipped_steps
    }

    /// After a step whose gradients were all finite and applied.
    pub fn record_applied(&mut self) {
        self.overflows_at_floor = 0;
        if let LossScaling::Dynamic {
            growth_interval, ..
        } = self.mode
        {
            self.clean_steps += 1;
            if self.clean_steps >= growth_interval.max(1) {
                self.scale = (self.scale * 2.0).min(MAX_LOSS_SCALE);
                self.clean_steps = 0;
            }
        }
    }

    /// After a step whose gradients overflowed and were not applied.
    pub fn record_overflow(&mut self) -> OverflowVerdict {
        self.skipped_steps += 1;
        self.clean_steps = 0;
        let at_floor = match self.mode {
            LossScaling::Dynamic { .. } => {
                let at_floor = self.scale <= 1.0;
                self.scale = (self.scale * 0.5).max(1.0);
                at_floor
            }
            LossScaling::None | LossScaling::Static(_) => true,
        };
        if !at_floor {
            self.overflows_at_floor = 0;
            return OverflowVerdict::Skip;
        }
        self.overflows_at_floor += 1;
        if self.overflows_at_floor >= OVERFLOW_PATIENCE {
            OverflowVerdict::GiveUp {
                consecutive: self.overflows_at_floor,
                scale: self.scale,
            }
        } else {
            OverflowVerdict::Skip
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_scaling_is_a_scale_of_one_that_never_changes() {
        let mut s = LossScaler::new(LossScaling::None);
        for _ in 0..10_000 {
            s.record_applied();
        }
        assert_eq!(s.scale(), 1.0);
        assert_eq!(s.record_overflow(), OverflowVerdict::Skip);
        assert_eq!(s.scale(), 1.0);
        assert_eq!(s.skipped_steps(), 1);
    }

    #[test]
    fn a_static_scale_skips_overflows_and_gives_up_after_the_patience() {
        let mut s = LossScaler::new(LossScaling::Static(128.0));
        for _ in 1..OVERFLOW_PATIENCE {
            assert_eq!(s.record_overflow(), OverflowVerdict::Skip);
            assert_eq!(s.scale(), 128.0);
        }
        // A clean step resets the count.
        s.record_applied();
        for _ in 1..OVERFLOW_PATIENCE {
            assert_eq!(s.record_overflow(), OverflowVerdict::Skip);
        }
        assert_eq!(
            s.record_overflow(),
            OverflowVerdict::GiveUp {
                consecutive: OVERFLOW_PATIENCE,
                scale: 128.0
            }
        );
        assert_eq!(s.skipped_steps(), u64::from(2 * OVERFLOW_PATIENCE - 1));
    }

    #[test]
    fn a_dynamic_scale_halves_on_overflow_and_doubles_after_clean_intervals() {
        let mut s = LossScaler::new(LossScaling::Dynamic {
            initial: 1024.0,
            growth_interval: 3,
        });
        assert_eq!(s.record_overflow(), OverflowVerdict::Skip);
        assert_eq!(s.scale(), 512.0);
        s.record_applied();
        s.record_applied();
        assert_eq!(s.scale(), 512.0);
        s.record_applied();
        assert_eq!(s.scale(), 1024.0);
        // An overflow restarts the interval.
        s.record_applied();
        s.record_applied();
        s.record_overflow();
        s.record_applied();
        s.record_applied();
        assert_eq!(s.scale(), 512.0);
    }

    #[test]
    fn a_dynamic_scale_stays_within_one_and_the_maximum() {
        let mut s = LossScaler::new(LossScaling::Dynamic {
            initial: MAX_LOSS_SCALE,
            growth_interval: 1,
        });
        s.record_applied();
        assert_eq!(s.scale(), MAX_LOSS_SCALE);
        // From 2²⁴ it takes 24 halvings to reach 1, then the patience runs at 1.
        for _ in 0..24 {
            assert_eq!(s.record_overflow(), OverflowVerdict::Skip);
        }
        assert_eq!(s.scale(), 1.0);
        for _ in 1..OVERFLOW_PATIENCE {
            assert_eq!(s.record_overflow(), OverflowVerdict::Skip);
        }
        assert!(matches!(
            s.record_overflow(),
            OverflowVerdict::GiveUp { scale, .. } if scale == 1.0
        ));
        let clamped = LossScaler::new(LossScaling::Dynamic {
            initial: 0.25,
            growth_interval: 10,
        });
        assert_eq!(clamped.scale(), 1.0);
    }
}
