//! Models the training loop drives: a forward pass that keeps what its backward needs,
//! and a named parameter list an optimizer walks.

use super::backend::Backend;
use super::layers::ParamMut;
use super::{Result, Tensor};

/// A learned parameter under its PyTorch state-dict name (`layer1.0.conv1.weight`), so
/// checks against the PyTorch reference and logs speak the same names.
pub struct NamedParam<'a, B: Backend> {
    pub name: String,
    pub param: ParamMut<'a, B>,
}

/// An image classifier over NHWC f32 batches.
pub trait Model<B: Backend>: Send {
    /// Logits per sample.
    fn classes(&self) -> usize;

    /// `images` is `[n, h, w, 3]`; returns logits `[n, classes]`. In training mode batch
    /// norm uses batch statistics (and updates its running ones) and the pass keeps the
    /// activations `backward` needs; in eval mode it keeps nothing.
    fn forward(&mut self, backend: &B, images: &Tensor<B>, training: bool) -> Result<Tensor<B>>;

    /// Back-propagates `dlogits` through the last training-mode forward, overwriting
    /// every parameter gradient. Fails with `MissingForwardState` without one.
    fn backward(&mut self, backend: &B, dlogits: &Tensor<B>) -> Result<()>;

    /// Every learned parameter, in a fixed order.
    fn parameters(&mut self) -> Vec<NamedParam<'_, B>>;
}
