//! A residual block: a chain of conv → BN units with a ReLU between consecutive units,
//! a shortcut (identity, or a 1×1 conv + BN projection where the shape changes), the sum
//! of both, and a final ReLU. Two 3×3 units make a basic block; 1×1, 3×3, 1×1 units make
//! a bottleneck (stride on the 3×3 conv, as ResNet v1.5).

use crate::engine::backend::Backend;
use crate::engine::layers::{BatchNorm2d, Conv2d, ResidualAdd};
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// A convolution followed by its batch norm.
pub struct ConvBn<B: Backend> {
    /// The convolution, without bias.
    pub conv: Conv2d<B>,
    /// The batch norm over the convolution's output.
    pub bn: BatchNorm2d<B>,
}

impl<B: Backend> ConvBn<B> {
    /// A `kernel`×`kernel` convolution from `in_c` to `out_c` channels with `stride` and
    /// padding `kernel / 2`, then batch norm over `out_c` channels.
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

    /// The backward of a block's last unit, whose BN output was added to the shortcut
    /// and put through ReLU ([`BatchNorm2d::forward_add_relu`]): `out` is the block's
    /// output and `dout` the gradient there. Returns (the gradient at `x` through this
    /// unit, the gradient at the sum, which is the shortcut's).
    pub fn backward_add_relu(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        c: Tensor<B>,
        out: &Tensor<B>,
        dout: Tensor<B>,
    ) -> Result<(Option<Tensor<B>>, Tensor<B>)> {
        let (dc, g_sum) = self.bn.backward_add_relu(backend, &c, out, dout)?;
        drop(c);
        Ok((self.conv.backward(backend, x, &dc)?, g_sum))
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

/// A residual block (see the module docs): its units, its shortcut, and what its last
/// training-mode forward kept.
pub struct Block<B: Backend> {
    /// The conv → BN units of the main path, in order.
    pub units: Vec<ConvBn<B>>,
    /// The shortcut's 1×1 conv + BN projection; `None` for an identity shortcut.
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
        let last = self.last_unit()?;
        let mut conv_out = Vec::with_capacity(self.units.len());
        let mut relu_out = Vec::with_capacity(last);
        let mut current: Option<Tensor<B>> = None;
        // Every unit but the last ends in a ReLU; the last one's BN output is added to the
        // shortcut and the sum put through the ReLU, in one op.
        for unit in &mut self.units[..last] {
            let input = current.as_ref().unwrap_or(x);
            let (c, next) = unit.forward_relu(backend, input, training)?;
            if training {
                conv_out.push(c);
            }
            if let Some(previous) = current.replace(next) {
                if training {
                    relu_out.push(previous);
                }
            }
        }
        let unit = &mut self.units[last];
        let c = unit.conv.forward(backend, current.as_ref().unwrap_or(x))?;
        // The projection runs once the last conv has, so that its output lives no longer
        // than the sum needs it.
        let (projected, shortcut_conv_out) = match &mut self.downsample {
            Some(ds) => {
                let (c, s) = ds.forward(backend, x, training)?;
                (Some(s), Some(c))
            }
            None => (None, None),
        };
        unit.bn.training = training;
        let out = unit
            .bn
            .forward_add_relu(backend, &c, projected.as_ref().unwrap_or(x))?;
        if training {
            conv_out.push(c);
            relu_out.extend(current);
            self.saved = Some(BlockSaved {
                conv_out,
                relu_out,
                shortcut_conv_out,
            });
        }
        Ok(out)
    }

    fn last_unit(&self) -> Result<usize> {
        self.units
            .len()
            .checked_sub(1)
            .ok_or_else(|| EngineError::InvalidParameter {
                op: "resnet block",
                reason: "a block needs at least one conv".into(),
            })
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
        let last = self.last_unit()?;
        let missing = |what: &'static str| EngineError::MissingForwardState { op: what };
        // The last unit first: its fused backward also gives the gradient at the sum.
        let c = conv_out
            .pop()
            .ok_or(missing("resnet block backward (conv output)"))?;
        let unit_input = match last {
            0 => x,
            _ => relu_out
                .last()
                .ok_or(missing("resnet block backward (relu output)"))?,
        };
        let (g_in, g_sum) =
            self.units[last].backward_add_relu(backend, unit_input, c, out, dout)?;
        let shortcut_grad = match (&mut self.downsample, shortcut_conv_out) {
            (Some(ds), Some(c)) => input_grad(ds.backward(backend, x, c, &g_sum)?)?,
            // With an identity shortcut the gradient at the sum is the shortcut's.
            (None, None) => g_sum,
            _ => return Err(missing("resnet block backward (shortcut)")),
        };
        let mut grad = input_grad(g_in)?;
        // Each unit below takes the gradient at its ReLU output with that output, masking
        // and back-propagating in one fused op.
        for i in (0..last).rev() {
            let y = relu_out
                .pop()
                .ok_or(missing("resnet block backward (relu output)"))?;
            let c = conv_out
                .pop()
                .ok_or(missing("resnet block backward (conv output)"))?;
            let unit_input = match i {
                0 => x,
                _ => relu_out
                    .last()
                    .ok_or(missing("resnet block backward (relu output)"))?,
            };
            grad = input_grad(self.units[i].backward_relu(backend, unit_input, c, &y, grad)?)?;
        }
        ResidualAdd::merge_grads(backend, grad, &shortcut_grad)
    }
}
