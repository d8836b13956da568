//! The fused ops of the end of a residual block, spelled as the ops they fuse: what the
//! [`Backend`] trait's defaults do, and what a device backend whose fusion is switched off
//! runs, so that both mean exactly the same.

use super::{Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved};
use crate::engine::Result;

/// y := ReLU(batch_norm_train(x) + residual).
pub fn batch_norm_add_relu_forward_train<B: Backend + ?Sized>(
    backend: &B,
    p: &BatchNormParams,
    x: &B::Buffer,
    residual: &B::Buffer,
    bn: &mut BatchNormBuffers<B::Buffer>,
    saved: &mut BatchNormSaved<B::Buffer>,
    y: &mut B::Buffer,
) -> Result<()> {
    backend.batch_norm_forward_train(p, x, bn, saved, y)?;
    backend.add_assign(y, residual)?;
    backend.relu_forward(y)
}

/// y := ReLU(batch_norm_eval(x) + residual).
pub fn batch_norm_add_relu_forward_eval<B: Backend + ?Sized>(
    backend: &B,
    p: &BatchNormParams,
    x: &B::Buffer,
    residual: &B::Buffer,
    bn: &BatchNormBuffers<B::Buffer>,
    y: &mut B::Buffer,
) -> Result<()> {
    backend.batch_norm_forward_eval(p, x, bn, y)?;
    backend.add_assign(y, residual)?;
    backend.relu_forward(y)
}

/// dy := dy · [y > 0] (the residual's gradient), then batch norm's dx, dγ and dβ of it.
#[allow(clippy::too_many_arguments)]
pub fn batch_norm_add_relu_backward<B: Backend + ?Sized>(
    backend: &B,
    p: &BatchNormParams,
    x: &B::Buffer,
    y: &B::Buffer,
    dy: &mut B::Buffer,
    gamma: &B::Buffer,
    saved: &BatchNormSaved<B::Buffer>,
    dx: &mut B::Buffer,
    grads: &mut BatchNormGrads<B::Buffer>,
) -> Result<()> {
    backend.relu_backward(y, dy)?;
    backend.batch_norm_backward(p, x, dy, gamma, saved, dx, grads)
}
