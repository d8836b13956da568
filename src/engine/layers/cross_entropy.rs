//! Softmax cross-entropy with label smoothing, as PyTorch's
//! `CrossEntropyLoss(label_smoothing=ε)`, averaged over the valid samples of the batch.
//! Labels are f32 class indices; a negative label marks a padded sample.

use crate::engine::backend::{Backend, CrossEntropyParams};
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// The MLPerf ResNet recipe's label smoothing.
pub const RESNET_LABEL_SMOOTHING: f32 = 0.1;

/// The loss layer: softmax cross-entropy with label smoothing over `[batch, classes]`
/// logits.
#[derive(Debug, Clone, Copy)]
pub struct SoftmaxCrossEntropy {
    /// The share ε of the target probability spread evenly over all classes, in [0, 1)
    /// ([`RESNET_LABEL_SMOOTHING`] for ResNet).
    pub label_smoothing: f32,
}

/// Device-side results: `loss` has one element, `correct` one 0/1 per sample.
pub struct CrossEntropyOutput<B: Backend> {
    /// The mean loss over the batch's valid samples.
    pub loss: Tensor<B>,
    /// Per sample, 1 when its first maximal logit is its label, else 0 (0 for padded
    /// samples).
    pub correct: Tensor<B>,
}

impl SoftmaxCrossEntropy {
    fn params<B: Backend>(
        &self,
        logits: &Tensor<B>,
        labels: &Tensor<B>,
    ) -> Result<CrossEntropyParams> {
        let &[batch, classes] = logits.shape() else {
            return Err(EngineError::ShapeMismatch {
                op: "cross_entropy",
                what: "logits [batch, classes]",
                expected: vec![],
                got: logits.shape().to_vec(),
            });
        };
        labels.expect_shape("cross_entropy", "labels", &[batch])?;
        let p = CrossEntropyParams {
            batch,
            classes,
            label_smoothing: self.label_smoothing,
        };
        p.validate()?;
        Ok(p)
    }

    /// The loss of `logits` (`[batch, classes]`) against `labels` (`[batch]`), with each
    /// sample's hit.
    pub fn forward<B: Backend>(
        &self,
        backend: &B,
        logits: &Tensor<B>,
        labels: &Tensor<B>,
    ) -> Result<CrossEntropyOutput<B>> {
        let p = self.params(logits, labels)?;
        let mut loss = Tensor::alloc(backend, &[1])?;
        let mut correct = Tensor::alloc(backend, &[p.batch])?;
        backend.cross_entropy_forward(
            &p,
            logits.buffer(),
            labels.buffer(),
            loss.buffer_mut(),
            correct.buffer_mut(),
        )?;
        Ok(CrossEntropyOutput { loss, correct })
    }

    /// d(mean loss)/d(logits).
    pub fn backward<B: Backend>(
        &self,
        backend: &B,
        logits: &Tensor<B>,
        labels: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let p = self.params(logits, labels)?;
        let mut dlogits = Tensor::alloc(backend, logits.shape())?;
        backend.cross_entropy_backward(
            &p,
            logits.buffer(),
            labels.buffer(),
            dlogits.buffer_mut(),
        )?;
        Ok(dlogits)
    }
}
