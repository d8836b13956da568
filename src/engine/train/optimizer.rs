//! The recipe's optimizer applied on the device: LARS on conv and linear weights,
//! momentum SGD without weight decay on the skip list (batch-norm γ/β, biases).
//!
//! The norms and the updates of all parameters are one backend call each (which a device
//! backend may run as one launch); the only data that leaves the device is one buffer
//! holding ‖g‖² of every parameter and ‖w‖² of every LARS parameter, downloaded once per
//! step. From it the host computes
//! the trust ratios with [`lars_trust_ratio`] and finds a gradient that overflowed, in
//! which case no weight is touched.
//!
//! Gradients may arrive multiplied by a loss scale; the scale is divided out inside the
//! update (in the step size and the trust ratio), so no extra pass over them is needed.

use crate::engine::backend::{Backend, MomentumStep};
use crate::engine::model::NamedParam;
use crate::engine::optim::{lars_trust_ratio, LarsConfig};
use crate::engine::{EngineError, Result};

/// Whether an optimizer step changed the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum UpdateOutcome {
    /// Every parameter was updated.
    Applied,
    /// A gradient held a NaN or an infinity: every weight and momentum kept its value.
    NonFiniteGradients,
}

/// Momentum buffers and the norm buffer of one model's parameters.
pub struct DeviceOptimizer<B: Backend> {
    config: LarsConfig,
    momentum: Vec<B::Buffer>,
    norms: Option<B::Buffer>,
    norms_host: Vec<f32>,
    last_trust: Vec<f32>,
}

impl<B: Backend> DeviceOptimizer<B> {
    /// An optimizer with `config` and no buffers yet: the first [`step`](Self::step) makes
    /// them for its parameter list, the momentum starting at zero.
    pub fn new(config: LarsConfig) -> Self {
        DeviceOptimizer {
            config,
            momentum: Vec::new(),
            norms: None,
            norms_host: Vec::new(),
            last_trust: Vec::new(),
        }
    }

    /// The trust ratio each parameter got in the last step (1 for the skip list).
    pub fn last_trust_ratios(&self) -> &[f32] {
        &self.last_trust
    }

    /// One update of every parameter with learning rate `lr`, from the gradients of the
    /// last backward, which hold `grad_scale` times the true gradient. When any gradient
    /// holds a NaN or an infinity nothing is updated. The parameter list must be the same,
    /// in the same order, every step.
    pub fn step(
        &mut self,
        backend: &B,
        params: &mut [NamedParam<'_, B>],
        lr: f32,
        grad_scale: f32,
    ) -> Result<UpdateOutcome> {
        if !(grad_scale.is_finite() && grad_scale > 0.0) {
            return Err(invalid(format!(
                "the gradient scale must be a positive number, got {grad_scale}"
            )));
        }
        self.ensure_state(backend, params)?;
        let norms = self
            .norms
            .as_mut()
            .ok_or_else(|| invalid("the norm buffer was not allocated".into()))?;
        let mut squared: Vec<(&B::Buffer, usize)> = Vec::with_capacity(2 * params.len());
        for (i, p) in params.iter().enumerate() {
            if p.param.kind.uses_lars() {
                squared.push((&*p.param.value, 2 * i));
            }
            squared.push((&*p.param.grad, 2 * i + 1));
        }
        backend.sum_squares_many(&squared, norms)?;
        drop(squared);
        backend.download(norms, &mut self.norms_host)?;
        let overflowed = (0..params.len()).any(|i| !self.norms_host[2 * i + 1].is_finite());
        if overflowed {
            return Ok(UpdateOutcome::NonFiniteGradients);
        }
        let unscale = 1.0 / grad_scale;
        let LarsConfig {
            momentum,
            weight_decay,
            trust_coefficient,
            epsilon,
        } = self.config;
        let mut updates = Vec::with_capacity(params.len());
        for ((i, p), buf) in params.iter_mut().enumerate().zip(&mut self.momentum) {
            let (trust, decay) = if p.param.kind.uses_lars() {
                let w_norm = self.norms_host[2 * i].max(0.0).sqrt();
                let g_norm = self.norms_host[2 * i + 1].max(0.0).sqrt() * unscale;
                let trust =
                    lars_trust_ratio(w_norm, g_norm, weight_decay, trust_coefficient, epsilon);
                (trust, weight_decay)
            } else {
                (1.0, 0.0)
            };
            self.last_trust[i] = trust;
            // b = momentum·b + trust·lr·(g + wd·w); w = w − b, with g = grad/grad_scale
            // folded in as step trust·lr/grad_scale and decay wd·grad_scale.
            updates.push(MomentumStep {
                w: &mut *p.param.value,
                g: &*p.param.grad,
                b: buf,
                step: trust * lr * unscale,
                decay: decay * grad_scale,
            });
        }
        backend.momentum_update_many(momentum, &mut updates)?;
        Ok(UpdateOutcome::Applied)
    }

    fn ensure_state(&mut self, backend: &B, params: &[NamedParam<'_, B>]) -> Result<()> {
        if self.momentum.is_empty() {
            for p in params {
                self.momentum
                    .push(backend.zeros(backend.buffer_len(p.param.value))?);
            }
            self.norms = Some(backend.zeros(2 * params.len().max(1))?);
            self.norms_host = vec![0.0; 2 * params.len().max(1)];
            self.last_trust = vec![1.0; params.len()];
            return Ok(());
        }
        if self.momentum.len() != params.len() {
            return Err(invalid(format!(
                "the model has {} parameters, the optimizer was set up for {}",
                params.len(),
                self.momentum.len()
            )));
        }
        for (p, b) in params.iter().zip(&self.momentum) {
            let (have, want) = (backend.buffer_len(p.param.value), backend.buffer_len(b));
            EngineError::check_length("optimizer step", "parameter", want, have)?;
        }
        Ok(())
    }
}

fn invalid(reason: String) -> EngineError {
    EngineError::InvalidParameter {
        op: "optimizer step",
        reason,
    }
}
