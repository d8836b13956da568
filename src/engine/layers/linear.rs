//! Fully connected layer, weights in PyTorch's `[out, in]` order plus a bias.

use super::{ParamKind, ParamMut};
use crate::engine::backend::{Backend, LinearParams};
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// A fully connected layer `y = x·Wᵀ + b` over `[batch, in_features]` inputs.
pub struct Linear<B: Backend> {
    /// Inputs per sample.
    pub in_features: usize,
    /// Outputs per sample.
    pub out_features: usize,
    /// `[out_features, in_features]`.
    pub weight: Tensor<B>,
    /// `[out_features]`, added to every sample's output.
    pub bias: Tensor<B>,
    /// The weight gradient of the last backward, in `weight`'s layout.
    pub weight_grad: Tensor<B>,
    /// The bias gradient of the last backward, `[out_features]`.
    pub bias_grad: Tensor<B>,
}

impl<B: Backend> Linear<B> {
    /// Zero weights and bias; load values with [`Tensor::from_host`].
    pub fn new(backend: &B, in_features: usize, out_features: usize) -> Result<Self> {
        if in_features == 0 || out_features == 0 {
            return Err(EngineError::InvalidParameter {
                op: "Linear::new",
                reason: format!("in {in_features}, out {out_features}"),
            });
        }
        Ok(Linear {
            in_features,
            out_features,
            weight: Tensor::zeros(backend, &[out_features, in_features])?,
            bias: Tensor::zeros(backend, &[out_features])?,
            weight_grad: Tensor::zeros(backend, &[out_features, in_features])?,
            bias_grad: Tensor::zeros(backend, &[out_features])?,
        })
    }

    fn params(&self, x: &Tensor<B>) -> Result<LinearParams> {
        match x.shape() {
            &[batch, fin] if fin == self.in_features => Ok(LinearParams {
                batch,
                in_features: fin,
                out_features: self.out_features,
            }),
            other => Err(EngineError::ShapeMismatch {
                op: "linear",
                what: "input [batch, in_features]",
                expected: vec![other.first().copied().unwrap_or(0), self.in_features],
                got: other.to_vec(),
            }),
        }
    }

    /// `x·Wᵀ + b` for `x` of shape `[batch, in_features]`: `[batch, out_features]`.
    pub fn forward(&self, backend: &B, x: &Tensor<B>) -> Result<Tensor<B>> {
        let p = self.params(x)?;
        let mut y = Tensor::alloc(backend, &[p.batch, p.out_features])?;
        backend.linear_forward(
            &p,
            x.buffer(),
            self.weight.buffer(),
            self.bias.buffer(),
            y.buffer_mut(),
        )?;
        Ok(y)
    }

    /// Writes the weight and bias gradients; returns dx when `need_input_grad`.
    pub fn backward(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        dy: &Tensor<B>,
        need_input_grad: bool,
    ) -> Result<Option<Tensor<B>>> {
        let p = self.params(x)?;
        dy.expect_shape("linear backward", "dy", &[p.batch, p.out_features])?;
        let mut dx = if need_input_grad {
            Some(Tensor::alloc(backend, x.shape())?)
        } else {
            None
        };
        backend.linear_backward(
            &p,
            x.buffer(),
            self.weight.buffer(),
            dy.buffer(),
            dx.as_mut().map(|t| t.buffer_mut()),
            self.weight_grad.buffer_mut(),
            self.bias_grad.buffer_mut(),
        )?;
        Ok(dx)
    }

    /// The weight and the bias with their gradients, for the optimizer.
    pub fn parameters(&mut self) -> Vec<ParamMut<'_, B>> {
        vec![
            ParamMut {
                kind: ParamKind::LinearWeight,
                value: self.weight.buffer_mut(),
                grad: self.weight_grad.buffer_mut(),
            },
            ParamMut {
                kind: ParamKind::LinearBias,
                value: self.bias.buffer_mut(),
                grad: self.bias_grad.buffer_mut(),
            },
        ]
    }
}
