//! 2-D convolution without bias. Weights are stored HWIO (`[kh, kw, in_c, out_c]`), the
//! layout in which the CPU GEMM reads them directly; [`conv_weight_from_oihw`] and
//! [`conv_weight_to_oihw`] convert from and to PyTorch's `[out_c, in_c, kh, kw]`.

use super::{ParamKind, ParamMut};
use crate::engine::backend::{Backend, Conv2dParams};
use crate::engine::tensor::Tensor;
use crate::engine::{EngineError, Result};

/// The sizes of a convolution's weight, in PyTorch's (out, in, kh, kw) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvWeightShape {
    /// Output channels.
    pub out_c: usize,
    /// Input channels.
    pub in_c: usize,
    /// Kernel height, in taps.
    pub kernel_h: usize,
    /// Kernel width, in taps.
    pub kernel_w: usize,
}

impl ConvWeightShape {
    /// Weight elements: the product of the four sizes.
    pub fn len(&self) -> usize {
        self.out_c * self.in_c * self.kernel_h * self.kernel_w
    }
    /// Whether any of the sizes is 0.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Calls `copy(oihw_index, hwio_index)` for every weight element: where it stands in
/// PyTorch's OIHW layout and where in this engine's HWIO layout.
fn for_each_weight_index(s: &ConvWeightShape, mut copy: impl FnMut(usize, usize)) {
    for o in 0..s.out_c {
        for i in 0..s.in_c {
            for h in 0..s.kernel_h {
                for w in 0..s.kernel_w {
                    copy(
                        ((o * s.in_c + i) * s.kernel_h + h) * s.kernel_w + w,
                        ((h * s.kernel_w + w) * s.in_c + i) * s.out_c + o,
                    );
                }
            }
        }
    }
}

/// PyTorch OIHW values → this engine's HWIO layout.
pub fn conv_weight_from_oihw(oihw: &[f32], s: ConvWeightShape) -> Result<Vec<f32>> {
    EngineError::check_length(
        "conv_weight_from_oihw",
        "weight values",
        s.len(),
        oihw.len(),
    )?;
    let mut hwio = vec![0.0; s.len()];
    for_each_weight_index(&s, |from, to| hwio[to] = oihw[from]);
    Ok(hwio)
}

/// This engine's HWIO layout → PyTorch OIHW (for weights and their gradients).
pub fn conv_weight_to_oihw(hwio: &[f32], s: ConvWeightShape) -> Result<Vec<f32>> {
    EngineError::check_length("conv_weight_to_oihw", "weight values", s.len(), hwio.len())?;
    let mut oihw = vec![0.0; s.len()];
    for_each_weight_index(&s, |to, from| oihw[to] = hwio[from]);
    Ok(oihw)
}

/// A square-kernel 2-D convolution without bias over NHWC activations, with its weight and
/// the weight gradient of the last backward.
pub struct Conv2d<B: Backend> {
    /// Input channels.
    pub in_c: usize,
    /// Output channels.
    pub out_c: usize,
    /// The side of the square kernel, in taps.
    pub kernel: usize,
    /// The step between output positions on the input, in pixels.
    pub stride: usize,
    /// Zero pixels added on each side of the input; less than `kernel`.
    pub padding: usize,
    /// `[kernel, kernel, in_c, out_c]`.
    pub weight: Tensor<B>,
    /// The weight gradient of the last backward, in `weight`'s layout.
    pub weight_grad: Tensor<B>,
    /// When false (the first layer of a network), backward skips the input gradient.
    pub needs_input_grad: bool,
}

impl<B: Backend> Conv2d<B> {
    /// A square-kernel convolution with zero weights (initialise them with
    /// [`Conv2d::set_weight_oihw`]).
    pub fn new(
        backend: &B,
        in_c: usize,
        out_c: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<Self> {
        if in_c == 0 || out_c == 0 || kernel == 0 || stride == 0 || padding >= kernel {
            return Err(EngineError::InvalidParameter {
                op: "Conv2d::new",
                reason: format!(
                    "in {in_c}, out {out_c}, kernel {kernel}, stride {stride}, padding {padding}"
                ),
            });
        }
        let shape = [kernel, kernel, in_c, out_c];
        Ok(Conv2d {
            in_c,
            out_c,
            kernel,
            stride,
            padding,
            weight: Tensor::zeros(backend, &shape)?,
            weight_grad: Tensor::zeros(backend, &shape)?,
            needs_input_grad: true,
        })
    }

    /// The weight's sizes in PyTorch's (out, in, kh, kw) order.
    pub fn weight_shape(&self) -> ConvWeightShape {
        ConvWeightShape {
            out_c: self.out_c,
            in_c: self.in_c,
            kernel_h: self.kernel,
            kernel_w: self.kernel,
        }
    }

    /// Loads weights given in PyTorch's (out, in, kh, kw) order.
    pub fn set_weight_oihw(&mut self, backend: &B, oihw: &[f32]) -> Result<()> {
        let hwio = conv_weight_from_oihw(oihw, self.weight_shape())?;
        let shape = self.weight.shape().to_vec();
        self.weight = Tensor::from_host(backend, &shape, &hwio)?;
        Ok(())
    }

    /// The weights, copied to the host in PyTorch's (out, in, kh, kw) order.
    pub fn weight_oihw(&self, backend: &B) -> Result<Vec<f32>> {
        conv_weight_to_oihw(&self.weight.to_host(backend)?, self.weight_shape())
    }

    /// The weight gradient of the last backward, copied to the host in PyTorch's (out, in,
    /// kh, kw) order.
    pub fn weight_grad_oihw(&self, backend: &B) -> Result<Vec<f32>> {
        conv_weight_to_oihw(&self.weight_grad.to_host(backend)?, self.weight_shape())
    }

    /// The op parameters for an NHWC input of this shape.
    pub fn params(&self, input: &Tensor<B>) -> Result<Conv2dParams> {
        let [n, h, w, c] = input.nhwc("conv2d")?;
        if c != self.in_c {
            return Err(EngineError::ShapeMismatch {
                op: "conv2d",
                what: "input channels",
                expected: vec![self.in_c],
                got: vec![c],
            });
        }
        let p = Conv2dParams {
            batch: n,
            in_h: h,
            in_w: w,
            in_c: c,
            out_c: self.out_c,
            kernel_h: self.kernel,
            kernel_w: self.kernel,
            stride: self.stride,
            padding: self.padding,
        };
        p.validate()?;
        Ok(p)
    }

    /// The convolution of an NHWC input with `in_c` channels: `[n, out_h, out_w, out_c]`.
    pub fn forward(&self, backend: &B, x: &Tensor<B>) -> Result<Tensor<B>> {
        let p = self.params(x)?;
        let mut y = Tensor::alloc(backend, &[p.batch, p.out_h(), p.out_w(), p.out_c])?;
        backend.conv2d_forward(&p, x.buffer(), self.weight.buffer(), y.buffer_mut())?;
        Ok(y)
    }

    /// Writes the weight gradient and returns dx (None when `needs_input_grad` is off).
    pub fn backward(
        &mut self,
        backend: &B,
        x: &Tensor<B>,
        dy: &Tensor<B>,
    ) -> Result<Option<Tensor<B>>> {
        let p = self.params(x)?;
        dy.expect_shape(
            "conv2d backward",
            "dy",
            &[p.batch, p.out_h(), p.out_w(), p.out_c],
        )?;
        backend.conv2d_backward_filter(
            &p,
            x.buffer(),
            dy.buffer(),
            self.weight_grad.buffer_mut(),
        )?;
        if !self.needs_input_grad {
            return Ok(None);
        }
        let mut dx = Tensor::alloc(backend, x.shape())?;
        backend.conv2d_backward_data(&p, dy.buffer(), self.weight.buffer(), dx.buffer_mut())?;
        Ok(Some(dx))
    }

    /// The weight with its gradient, for the optimizer.
    pub fn parameters(&mut self) -> Vec<ParamMut<'_, B>> {
        vec![ParamMut {
            kind: ParamKind::ConvWeight,
            value: self.weight.buffer_mut(),
            grad: self.weight_grad.buffer_mut(),
        }]
    }
}
