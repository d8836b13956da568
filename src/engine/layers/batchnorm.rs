//! Batch normalisation over the channels of NHWC activations, as PyTorch's BatchNorm2d:
//! batch statistics in training (running statistics updated with momentum, running var
//! from the unbiased batch variance), running statistics in eval mode.

use super::{ParamKind, ParamMut};
use crate::engine::backend::{
    Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved,
};
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// The ε added to the variance before its square root, PyTorch's default.
pub const DEFAULT_EPS: f32 = 1e-5;
/// The running-statistics momentum, PyTorch's default: `running = (1 − m)·running +
/// m·batch`.
pub const DEFAULT_MOMENTUM: f32 = 0.1;

/// A batch-norm layer: its parameters, running statistics, and the batch statistics its
/// last training forward saved for backward.
pub struct BatchNorm2d<B: Backend> {
    /// Channels normalised: the last (C) dimension of the NHWC input.
    pub channels: usize,
    /// The ε added to the variance before its square root.
    pub eps: f32,
    /// The weight `m` of the batch statistics in the running-statistics update, in [0, 1].
    pub momentum: f32,
    /// Training mode uses and updates batch statistics; eval mode uses running ones.
    pub training: bool,
    /// γ (initially 1), β (0), running mean (0) and running var (1).
    pub state: BatchNormBuffers<B::Buffer>,
    /// γ's and β's gradients from the last backward.
    pub grads: BatchNormGrads<B::Buffer>,
    saved: BatchNormSaved<B::Buffer>,
    saved_valid: bool,
}

impl<B: Backend> BatchNorm2d<B> {
    /// A layer over `channels` channels in training mode, with PyTorch's initial values
    /// and defaults; zero channels is an error.
    pub fn new(backend: &B, channels: usize) -> Result<Self> {
        if channels == 0 {
            return Err(EngineError::InvalidParameter {
                op: "BatchNorm2d::new",
                reason: "zero channels".into(),
            });
        }
        let ones = vec![1.0; channels];
        Ok(BatchNorm2d {
            channels,
            eps: DEFAULT_EPS,
            momentum: DEFAULT_MOMENTUM,
            training: true,
            state: BatchNormBuffers {
                gamma: backend.upload(&ones)?,
                beta: backend.zeros(channels)?,
                running_mean: backend.zeros(channels)?,
                running_var: backend.upload(&ones)?,
            },
            grads: BatchNormGrads {
                gamma: backend.zeros(channels)?,
                beta: backend.zeros(channels)?,
            },
            saved: BatchNormSaved {
                mean: backend.zeros(channels)?,
                inv_std: backend.zeros(channels)?,
            },
            saved_valid: false,
        })
    }

    fn params(&self, x: &Tensor<B>) -> Result<BatchNormParams> {
        let [n, h, w, c] = x.nhwc("batch_norm")?;
        if c != self.channels {
            return Err(EngineError::ShapeMismatch {
                op: "batch_norm",
                what: "input channels",
                expected: vec![self.channels],
                got: vec![c],
            });
        }
        Ok(BatchNormParams {
            rows: n * h * w,
            channels: c,
            eps: self.eps,
            momentum: self.momentum,
        })
    }

    /// `bn(x)` of an NHWC input with `channels` channels: from batch statistics in
    /// training mode (updating the running ones and saving what backward needs), from
    /// running ones in eval mode.
    pub fn forward(&mut self, backend: &B, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_with(backend, x, false)
    }

    /// The forward followed by ReLU, in one op where the backend fuses them.
    pub fn forward_relu(&mut self, backend: &B, x: &Tensor<B>) -> Result<Tensor<B>> {
        self.forward_with(backend, x, true)
    }

    fn forward_with(&mut self, backend: &B, x: &Tensor<B>, relu: bool) -> Result<Tensor<B>> {
        let p = self.params(x)?;
        let mut y = Tensor::alloc(backend, x.shape())?;
        let (x, out) = (x.buffer(), y.buffer_mut());
        match (self.training, relu) {
            (true, false) => {
                backend.batch_norm_forward_train(&p, x, &mut self.state, &mut self.saved, out)?
            }
            (true, true) => backend.batch_norm_relu_forward_train(
                &p,
                x,
                &mut self.state,
                &mut self.saved,
                out,
            )?,
            (false, false) => backend.batch_norm_forward_eval(&p, x, &self.state, out)?,
            (false, true) => backend.batch_norm_relu_forward_eval(&p, x, &self.state, out)?,
        }
        if self.training {
            self.saved_valid = true;
        }
        Ok(y)
    }

    /// Gradient of the last training-mode forward, whose input was `x`.
    pub fn backward(&mut self, backend: &B, x: &Tensor<B>, dy: &Tensor<B>) -> Result<Tensor<B>> {
        let p = self.backward_params("batch_norm backward", x, dy)?;
        let mut dx = Tensor::alloc(backend, x.shape())?;
        backend.batch_norm_backward(
            &p,
            x.buffer(),
            dy.buffer(),
            &self.state.gamma,
            &self.saved,
            dx.buffer_mut(),
            &mut self.grads,
        )?;
        Ok(dx)
    }

    /// Gradient of the last training-mode [`forward_relu`](Self::forward_relu), given its
    /// output `y` and the gradient `dy` there (consumed).
    pub fn backward_relu(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        y: &Tensor<B>,
        mut dy: Tensor<B>,
    ) -> Result<Tensor<B>> {
        let p = self.backward_params("batch_norm backward", x, &dy)?;
        y.expect_shape("batch_norm backward", "relu output", x.shape())?;
        self.backward_fused(backend, &p, x, y, &mut dy, B::batch_norm_relu_backward)
    }

    /// `ReLU(bn(x) + residual)`: the end of a residual block, in one op where the backend
    /// fuses it.
    pub fn forward_add_relu(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        residual: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let p = self.params(x)?;
        residual.expect_shape("batch_norm add relu", "residual", x.shape())?;
        let mut y = Tensor::alloc(backend, x.shape())?;
        let (x, r, out) = (x.buffer(), residual.buffer(), y.buffer_mut());
        if self.training {
            backend.batch_norm_add_relu_forward_train(
                &p,
                x,
                r,
                &mut self.state,
                &mut self.saved,
                out,
            )?;
            self.saved_valid = true;
        } else {
            backend.batch_norm_add_relu_forward_eval(&p, x, r, &self.state, out)?;
        }
        Ok(y)
    }

    /// Gradients of the last training-mode [`forward_add_relu`](Self::forward_add_relu),
    /// given its output `y` and the gradient `dy` there (consumed): (dx, the residual's
    /// gradient).
    pub fn backward_add_relu(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        y: &Tensor<B>,
        mut dy: Tensor<B>,
    ) -> Result<(Tensor<B>, Tensor<B>)> {
        let p = self.backward_params("batch_norm add relu backward", x, &dy)?;
        y.expect_shape("batch_norm add relu backward", "output", x.shape())?;
        let dx =
            self.backward_fused(backend, &p, x, y, &mut dy, B::batch_norm_add_relu_backward)?;
        Ok((dx, dy))
    }

    /// A backward whose forward ended in ReLU, from its output `y` and the gradient `dy`
    /// there: `fused` (one of the backend's fused backwards) leaves in `dy` the gradient
    /// before the ReLU, writes the parameter gradients, and the returned dx.
    #[allow(clippy::type_complexity)]
    fn backward_fused(
        &mut self,
        backend: &B,
        p: &BatchNormParams,
        x: &Tensor<B>,
        y: &Tensor<B>,
        dy: &mut Tensor<B>,
        fused: impl FnOnce(
            &B,
            &BatchNormParams,
            &B::Buffer,
            &B::Buffer,
            &mut B::Buffer,
            &B::Buffer,
            &BatchNormSaved<B::Buffer>,
            &mut B::Buffer,
            &mut BatchNormGrads<B::Buffer>,
        ) -> Result<()>,
    ) -> Result<Tensor<B>> {
        let mut dx = Tensor::alloc(backend, x.shape())?;
        fused(
            backend,
            p,
            x.buffer(),
            y.buffer(),
            dy.buffer_mut(),
            &self.state.gamma,
            &self.saved,
            dx.buffer_mut(),
            &mut self.grads,
        )?;
        Ok(dx)
    }

    /// What every backward starts with: the training forward's saved state must be
    /// there, and `dy` must have the input's shape (`op` names the backward in errors).
    fn backward_params(
        &self,
        op: &'static str,
        x: &Tensor<B>,
        dy: &Tensor<B>,
    ) -> Result<BatchNormParams> {
        if !self.saved_valid {
            return Err(EngineError::MissingForwardState {
                op: "batch_norm backward",
            });
        }
        let p = self.params(x)?;
        dy.expect_shape(op, "dy", x.shape())?;
        Ok(p)
    }

    /// γ and β with their gradients, for the optimizer.
    pub fn parameters(&mut self) -> Vec<ParamMut<'_, B>> {
        vec![
            ParamMut {
                kind: ParamKind::BatchNormGamma,
                value: &mut self.state.gamma,
                grad: &mut self.grads.gamma,
            },
            ParamMut {
                kind: ParamKind::BatchNormBeta,
                value: &mut self.state.beta,
                grad: &mut self.grads.beta,
            },
        ]
    }
}
