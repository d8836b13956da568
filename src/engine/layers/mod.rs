//! Layers as explicit forward/backward pairs over [`Tensor`](crate::engine::Tensor)s.
//!
//! A layer never keeps its input: the caller holds the activations it will need and hands
//! them back to `backward`, so the model decides what lives in memory. Backward calls
//! overwrite the layer's parameter gradients (one gradient per step).

pub mod batchnorm;
pub mod conv2d;
pub mod cross_entropy;
pub mod linear;
pub mod pool;
pub mod relu;
pub mod residual;

pub use batchnorm::BatchNorm2d;
pub use conv2d::{conv_weight_from_oihw, conv_weight_to_oihw, Conv2d, ConvWeightShape};
pub use cross_entropy::{CrossEntropyOutput, SoftmaxCrossEntropy};
pub use linear::Linear;
pub use pool::{GlobalAvgPool, MaxPool2d};
pub use relu::Relu;
pub use residual::ResidualAdd;

use super::backend::Backend;

/// What a parameter is, which decides how an optimizer treats it (LARS applies to conv
/// and linear weights; BN parameters and biases are in the skip list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A convolution's weight.
    ConvWeight,
    /// The classifier's weight matrix.
    LinearWeight,
    /// The classifier's bias.
    LinearBias,
    /// A batch norm's scale γ.
    BatchNormGamma,
    /// A batch norm's shift β.
    BatchNormBeta,
}

impl ParamKind {
    /// Conv and linear weights get LARS and weight decay; the rest plain momentum SGD.
    pub fn uses_lars(self) -> bool {
        matches!(self, ParamKind::ConvWeight | ParamKind::LinearWeight)
    }
}

/// A learned parameter and its gradient from the last backward. The gradient is mutable
/// so a data-parallel step can sum it across replicas in place before the update.
pub struct ParamMut<'a, B: Backend> {
    /// What the parameter is, which picks its update rule.
    pub kind: ParamKind,
    /// The parameter's values, updated in place by the optimizer.
    pub value: &'a mut B::Buffer,
    /// The loss's gradient with respect to `value`, of the same length.
    pub grad: &'a mut B::Buffer,
}

#[cfg(test)]
mod tests;
