//! ReLU, in place: the forward overwrites its input and the backward masks dy by the
//! forward's output.

use crate::engine::backend::Backend;
use crate::engine::tensor::Tensor;
use crate::engine::Result;

/// ReLU, `max(x, 0)` elementwise.
#[derive(Debug, Clone, Copy, Default)]
pub struct Relu;

impl Relu {
    /// `max(x, 0)`, written over `x`'s buffer and returned.
    pub fn forward<B: Backend>(backend: &B, mut x: Tensor<B>) -> Result<Tensor<B>> {
        backend.relu_forward(x.buffer_mut())?;
        Ok(x)
    }

    /// `y` is the forward's output; dy is masked in place and returned.
    pub fn backward<B: Backend>(
        backend: &B,
        y: &Tensor<B>,
        mut dy: Tensor<B>,
    ) -> Result<Tensor<B>> {
        dy.expect_shape("relu backward", "dy", y.shape())?;
        backend.relu_backward(y.buffer(), dy.buffer_mut())?;
        Ok(dy)
    }
}
