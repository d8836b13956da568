//! A residual block: a chain of conv → BN units with a ReLU between consecutive units,
//! a shortcut (identity, or a 1×1 conv + BN projection where the shape changes), the sum
//! of both, and a final ReLU. Two 3×3 units make a basic block; 1×1, 3×3, 1×1 units make
//! a bottleneck (stride on the 3×3 conv, as ResNet v1.5).

use crate::engine::backend::Backend;
use crate::engine::layers::{BatchNorm2d, Conv2d, Relu, ResidualAdd};
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// A convolution followed by its batch norm.
pub struct ConvBn<B: Backend> {
    pub conv: Conv2d<B>,
    pub bn: BatchNorm2d<B>,
}

impl<B: Backend> ConvBn<B> {
    pub fn new(
        backend: &B,
        in_c: usize,
        out_c: usize,
        kernel: usize,
        stride: usize,
    ) -> Result<Self> {
        Ok(ConvBn {
            conv: Conv2d::new(backend, in_c, out_c, kernel, stride, kernel / 2)?,
            bn: BatchNorm2d::new(backend, out_c)?,
        })
    }

    /// Returns (conv output, BN output); the conv output is what the BN backward needs.
    pub fn forward(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        training: bool,
    ) -> Result<(Tensor<B>, Tensor<B>)> {
        let c = self.conv.forward(backend, x)?;
        self.bn.training = training;
        let y = self.bn.forward(backend, &c)?;
        Ok((c, y))
    }

    /// The forward with a ReLU on the BN output, fused where the backend can: returns
    /// (conv output, ReLU output).
    pub fn forward_relu(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        training: bool,
    ) -> Result<(Tensor<B>, Tensor<B>)> {
        let c = self.conv.forward(backend, x)?;
        self.bn.training = training;
        let y = self.bn.forward_relu(backend, &c)?;
        Ok((c, y))
    }

    /// The backward of [`forward_relu`](Self::forward_relu): `y` is its ReLU output and
    /// `dy` the gradient there.
    pub fn backward_relu(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        c: Tensor<B>,
        y: &Tensor<B>,
        dy: Tensor<B>,
    ) -> Result<Option<Tensor<B>>> {
        let dc = self.bn.backward_relu(backend, &c, y, dy)?;
        drop(c);
        self.conv.backward(backend, x, &dc)
    }

    /// Gradient with respect to the conv input `x`, given the conv output `c` the forward
    /// returned and the gradient `dy` at the BN output. Consumes `c`, freeing it early.
    pub fn backward(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        c: Tensor<B>,
        dy: &Tensor<B>,
    ) -> Result<Option<Tensor<B>>> {
        let dc = self.bn.backward(backend, &c, dy)?;
        drop(c);
        self.conv.backward(backend, x, &dc)
    }
}

/// What a training-mode forward keeps for the backward, besides the block's input and
/// output (which the model holds, because the neighbouring blocks need them too).
struct BlockSaved<B: Backend> {
    /// Each unit's conv output: its BN's input.
    conv_out: Vec<Tensor<B>>,
    /// The ReLU output of every unit but the last: the next unit's conv input.
    relu_out: Vec<Tensor<B>>,
    /// The projection conv's output, when the block has one.
    shortcut_conv_out: Option<Tensor<B>>,
}

pub struct Block<B: Backend> {
    pub units: Vec<ConvBn<B>>,
    pub downsample: Option<ConvBn<B>>,
    saved: Option<BlockSaved<B>>,
}

fn input_grad<B: Backend>(grad: Option<Tensor<B>>) -> Result<Tensor<B>> {
    grad.ok_or_else(|| EngineError::InvalidParameter {
        op: "resnet block backward",
        reason: "a block convolution has its input gradient switched off".into(),
    })
}

impl<B: Backend> Block<B> {
    /// Two 3×3 convs of `out_c` channels, the first with `stride`.
    pub fn basic(backend: &B, in_c: usize, out_c: usize, stride: usize) -> Result<Self> {
        Self::new(
            backend,
            vec![
                ConvBn::new(backend, in_c, out_c, 3, stride)?,
                ConvBn::new(backend, out_c, out_c, 3, 1)?,
            ],
            in_c,
            out_c,
            stride,
        )
    }

    /// 1×1 to `width`, 3×3 at `width` with `stride`, 1×1 to `width * expansion`.
    pub fn bottleneck(
        backend: &B,
        in_c: usize,
        width: usize,
        expansion: usize,
        stride: usize,
    ) -> Result<Self> {
        let out_c = width * expansion;
        Self::new(
            backend,
            vec![
                ConvBn::new(backend, in_c, width, 1, 1)?,
                ConvBn::new(backend, width, width, 3, stride)?,
                ConvBn::new(backend, width, out_c, 1, 1)?,
            ],
            in_c,
            out_c,
            stride,
        )
    }

    fn new(
        backend: &B,
        units: Vec<ConvBn<B>>,
        in_c: usize,
        out_c: usize,
        stride: usize,
    ) -> Result<Self> {
        let downsample = if stride != 1 || in_c != out_c {
            Some(ConvBn::new(backend, in_c, out_c, 1, stride)?)
        } else {
            None
        };
        Ok(Block {
            units,
            downsample,
            saved: None,
        })
    }

    /// The block's output for input `x`. In training mode the block keeps what its
    /// backward needs (not `x` or the output: the caller holds those).
    pub fn forward(&mut self, backend: &B, x: &Tensor<B>, training: bool) -> Result<Tensor<B>> {
        self.saved = None;
        let last = self.units.len().saturating_sub(1);
        let mut conv_out = Vec::with_capacity(self.units.len());
        let mut relu_out = Vec::with_capacity(last);
        let mut current: Option<Tensor<B>> = None;
        for (i, unit) in self.units.iter_mut().enumerate() {
            let input = current.as_ref().unwrap_or(x);
            // Every unit but the last ends in a ReLU; the last one's comes after the sum.
            let (c, next) = if i == last {
                unit.forward(backend, input, training)?
            } else {
                unit.forward_relu(backend, input, training)?
            };
            if training {
                conv_out.push(c);
            }
            if let Some(previous) = current.replace(next) {
                if training {
                    relu_out.push(previous);
                }
            }
        }
        let main = current.ok_or_else(|| EngineError::InvalidParameter {
            op: "resnet block forward",
            reason: "a block needs at least one conv".into(),
        })?;
        let (sum, shortcut_conv_out) = match &mut self.downsample {
            Some(ds) => {
                let (c, s) = ds.forward(backend, x, training)?;
                (ResidualAdd::forward(backend, main, &s)?, Some(c))
            }
            None => (ResidualAdd::forward(backend, main, x)?, None),
        };
        let out = Relu::forward(backend, sum)?;
        if training {
            self.saved = Some(BlockSaved {
                conv_out,
                relu_out,
                shortcut_conv_out,
            });
        }
        Ok(out)
    }

    /// The gradient at the block's input `x`, given its output `out` and the gradient
    /// `dout` there. Frees each saved activation as soon as it has been used.
    pub fn backward(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        out: &Tensor<B>,
        dout: Tensor<B>,
    ) -> Result<Tensor<B>> {
        let saved = self.saved.take().ok_or(EngineError::MissingForwardState {
            op: "resnet block backward",
        })?;
        let BlockSaved {
            mut conv_out,
            mut relu_out,
            shortcut_conv_out,
        } = saved;
        let g_sum = Relu::backward(backend, out, dout)?;
        let shortcut_grad = match (&mut self.downsample, shortcut_conv_out) {
            (Some(ds), Some(c)) => Some(input_grad(ds.backward(backend, x, c, &g_sum)?)?),
            (None, None) => None,
            _ => {
                return Err(EngineError::MissingForwardState {
                    op: "resnet block backward (shortcut)",
                })
            }
        };
        // With a projection the summed gradient is only needed until the last unit's
        // backward; with an identity shortcut it is the shortcut's gradient.
        let mut g_sum = Some(g_sum);
        // The gradient at the ReLU output of the unit below, with that output: the next
        // unit down takes both, masking and back-propagating in one fused op.
        let mut pending: Option<(Tensor<B>, Tensor<B>)> = None;
        let mut grad: Option<Tensor<B>> = None;
        for i in (0..self.units.len()).rev() {
            let c = conv_out.pop().ok_or(EngineError::MissingForwardState {
                op: "resnet block backward (conv output)",
            })?;
            let unit_input = if i > 0 {
                relu_out.last().ok_or(EngineError::MissingForwardState {
                    op: "resnet block backward (relu output)",
                })?
            } else {
                x
            };
            let g_in = match pending.take() {
                Some((g, y)) => self.units[i].backward_relu(backend, unit_input, c, &y, g)?,
                None => {
                    let dy = g_sum.as_ref().ok_or(EngineError::MissingForwardState {
                        op: "resnet block backward (gradient)",
                    })?;
                    self.units[i].backward(backend, unit_input, c, dy)?
                }
            };
            let g_in = input_grad(g_in)?;
            if shortcut_grad.is_some() {
                g_sum = None;
            }
            if i > 0 {
                let y = relu_out.pop().ok_or(EngineError::MissingForwardState {
                    op: "resnet block backward (relu output)",
                })?;
                pending = Some((g_in, y));
            } else {
                grad = Some(g_in);
            }
        }
        let main_grad = input_grad(grad)?;
        match (shortcut_grad, g_sum) {
            (Some(s), _) => ResidualAdd::merge_grads(backend, main_grad, &s),
            (None, Some(g)) => ResidualAdd::merge_grads(backend, main_grad, &g),
            (None, None) => Err(EngineError::MissingForwardState {
                op: "resnet block backward (shortcut gradient)",
            }),
        }
    }
}
