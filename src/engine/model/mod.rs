//! Models the training loop drives: a forward pass that keeps what its backward needs,
//! and a named parameter list an optimizer walks.

pub mod resnet;

use std::ops::Range;

use super::backend::Backend;
use super::layers::ParamMut;
use super::{Result, Tensor};

/// A learned parameter under its PyTorch state-dict name (`layer1.0.conv1.weight`), so
/// checks against the PyTorch reference and logs speak the same names.
pub struct NamedParam<'a, B: Backend> {
    /// The state-dict name, e.g. `layer1.0.conv1.weight`.
    pub name: String,
    /// The parameter's kind and its value and gradient buffers.
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

    /// [`Model::backward`], calling `ready` each time some parameters' gradients are
    /// final, so their all-reduce can start while the rest of the backward runs. Each call
    /// names a range of [`Model::parameters`] indices with exactly those gradients; every
    /// parameter is named once. This default reports them all at the end.
    fn backward_notifying(
        &mut self,
        backend: &B,
        dlogits: &Tensor<B>,
        ready: &mut GradientsReady<'_, B>,
    ) -> Result<()> {
        self.backward(backend, dlogits)?;
        let mut params = self.parameters();
        let all = 0..params.len();
        ready(all, params.iter_mut().map(|p| &mut *p.param.grad).collect())
    }
}

/// The callback of [`Model::backward_notifying`]: parameter indices and their gradients.
pub type GradientsReady<'a, B> =
    dyn FnMut(Range<usize>, Vec<&mut <B as Backend>::Buffer>) -> Result<()> + 'a;
