//! Max pooling and global average pooling over NHWC activations.

use crate::engine::backend::{Backend, GlobalPoolParams, PoolParams};
use crate::engine::tensor::Tensor;
use crate::engine::Result;

/// Max pooling over square windows of NHWC activations, channel by channel.
#[derive(Debug, Clone, Copy)]
pub struct MaxPool2d {
    /// The side of the square window, in pixels.
    pub kernel: usize,
    /// The step between windows, in pixels.
    pub stride: usize,
    /// Pixels of padding on each side of the input, which never hold a window's maximum.
    pub padding: usize,
}

impl MaxPool2d {
    /// ResNet's stem pool: 3×3, stride 2, padding 1.
    pub const RESNET_STEM: MaxPool2d = MaxPool2d {
        kernel: 3,
        stride: 2,
        padding: 1,
    };

    fn params<B: Backend>(&self, x: &Tensor<B>) -> Result<PoolParams> {
        let [n, h, w, c] = x.nhwc("max_pool")?;
        let p = PoolParams {
            batch: n,
            in_h: h,
            in_w: w,
            channels: c,
            kernel: self.kernel,
            stride: self.stride,
            padding: self.padding,
        };
        p.validate()?;
        Ok(p)
    }

    /// The maximum of each window, per channel: `[n, out_h, out_w, c]`.
    pub fn forward<B: Backend>(&self, backend: &B, x: &Tensor<B>) -> Result<Tensor<B>> {
        let p = self.params(x)?;
        let mut y = Tensor::alloc(backend, &[p.batch, p.out_h(), p.out_w(), p.channels])?;
        backend.max_pool_forward(&p, x.buffer(), y.buffer_mut())?;
        Ok(y)
    }

    /// Gradient routed to the first maximum of each window of `x`, the forward's input.
    pub fn backward<B: Backend>(
        &self,
        backend: &B,
        x: &Tensor<B>,
        dy: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let p = self.params(x)?;
        dy.expect_shape(
            "max_pool backward",
            "dy",
            &[p.batch, p.out_h(), p.out_w(), p.channels],
        )?;
        let mut dx = Tensor::alloc(backend, x.shape())?;
        backend.max_pool_backward(&p, x.buffer(), dy.buffer(), dx.buffer_mut())?;
        Ok(dx)
    }
}

/// `[n, h, w, c]` → `[n, c]`, the mean over h·w.
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalAvgPool;

impl GlobalAvgPool {
    fn params(input_shape: [usize; 4]) -> Result<GlobalPoolParams> {
        let [n, h, w, c] = input_shape;
        let p = GlobalPoolParams {
            batch: n,
            spatial: h * w,
            channels: c,
        };
        p.validate()?;
        Ok(p)
    }

    /// The mean of an NHWC `x` over its h·w positions: `[n, c]`.
    pub fn forward<B: Backend>(backend: &B, x: &Tensor<B>) -> Result<Tensor<B>> {
        let p = Self::params(x.nhwc("global_avg_pool")?)?;
        let mut y = Tensor::alloc(backend, &[p.batch, p.channels])?;
        backend.global_avg_pool_forward(&p, x.buffer(), y.buffer_mut())?;
        Ok(y)
    }

    /// The input gradient: each value of `dy` (`[n, c]`) spread evenly over the h·w
    /// positions of an input of `input_shape`, so the forward's input need not be kept.
    pub fn backward<B: Backend>(
        backend: &B,
        input_shape: [usize; 4],
        dy: &Tensor<B>,
    ) -> Result<Tensor<B>> {
        let p = Self::params(input_shape)?;
        dy.expect_shape("global_avg_pool backward", "dy", &[p.batch, p.channels])?;
        let mut dx = Tensor::alloc(backend, &input_shape)?;
        backend.global_avg_pool_backward(&p, dy.buffer(), dx.buffer_mut())?;
        Ok(dx)
    }
}
