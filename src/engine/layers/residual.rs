//! The residual join `out = main + shortcut`. Its backward hands dy unchanged to both
//! branches (layers take dy by reference, so no copy is needed); where the branches fork
//! again, their input gradients are summed with [`ResidualAdd::merge_grads`].

use crate::engine::backend::Backend;
use crate::engine::tensor::Tensor;
use crate::engine::Result;

/// The join of a residual block's main branch and its shortcut.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResidualAdd;

impl ResidualAdd {
    /// `main += shortcut`, reusing main's buffer.
    pub fn forward<B: Backend>(
        backend: &B,
        mut main: Tensor<B>,
        shortcut: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        shortcut.expect_shape("residual add", "shortcut", main.shape())?;
        backend.add_assign(main.buffer_mut(), shortcut.buffer())?;
        Ok(main)
    }

    /// The gradient at a fork: the sum of the gradients of both branches.
    pub fn merge_grads<B: Backend>(
        backend: &B,
        mut a: Tensor<B>,
        b: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        b.expect_shape("residual merge_grads", "second gradient", a.shape())?;
        backend.add_assign(a.buffer_mut(), b.buffer())?;
        Ok(a)
    }
}
