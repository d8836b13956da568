//! The small parameter structs every backend op takes, with their shape arithmetic and
//! validation, so all backends agree on what a shape means.

use crate::engine::{EngineError, Result};

/// A 2-D convolution over NHWC input with HWIO weights, square stride and padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dParams {
    pub batch: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub in_c: usize,
    pub out_c: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride: usize,
    pub padding: usize,
}

impl Conv2dParams {
    pub fn out_h(&self) -> usize {
        (self.in_h + 2 * self.padding - self.kernel_h) / self.stride + 1
    }
    pub fn out_w(&self) -> usize {
        (self.in_w + 2 * self.padding - self.kernel_w) / self.stride + 1
    }
    pub fn input_len(&self) -> usize {
        self.batch * self.in_h * self.in_w * self.in_c
    }
    pub fn output_len(&self) -> usize {
        self.batch * self.out_h() * self.out_w() * self.out_c
    }
    pub fn weight_len(&self) -> usize {
        self.kernel_h * self.kernel_w * self.in_c * self.out_c
    }
    /// Multiply-adds of the forward pass, times two.
    pub fn forward_flops(&self) -> f64 {
        2.0 * (self.batch * self.out_h() * self.out_w()) as f64
            * (self.kernel_h * self.kernel_w * self.in_c * self.out_c) as f64
    }
    pub fn is_pointwise(&self) -> bool {
        self.kernel_h == 1 && self.kernel_w == 1 && self.stride == 1 && self.padding == 0
    }

    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| {
            Err(EngineError::InvalidParameter {
                op: "conv2d",
                reason,
            })
        };
        let dims = [
            self.batch,
            self.in_h,
            self.in_w,
            self.in_c,
            self.out_c,
            self.kernel_h,
            self.kernel_w,
            self.stride,
        ];
        if dims.contains(&0) {
            return invalid(format!("zero-sized dimension in {self:?}"));
        }
        if self.kernel_h > self.in_h + 2 * self.padding
            || self.kernel_w > self.in_w + 2 * self.padding
        {
            return invalid(format!(
                "kernel {}×{} larger than padded input {}×{}",
                self.kernel_h,
                self.kernel_w,
                self.in_h + 2 * self.padding,
                self.in_w + 2 * self.padding
            ));
        }
        if self.padding >= self.kernel_h.max(self.kernel_w) {
            return invalid(format!(
                "padding {} leaves windows of pure padding for a {}×{} kernel",
                self.padding, self.kernel_h, self.kernel_w
            ));
        }
        Ok(())
    }
}

/// Batch norm over an `[rows, channels]` view of an NHWC tensor (rows = N·H·W).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormParams {
    pub rows: usize,
    pub channels: usize,
    pub eps: f32,
    pub momentum: f32,
}

impl BatchNormParams {
    pub fn validate(&self, training: bool) -> Result<()> {
        let invalid = |reason: String| {
            Err(EngineError::InvalidParameter {
                op: "batch_norm",
                reason,
            })
        };
        if self.rows == 0 || self.channels == 0 {
            return invalid(format!("zero-sized dimension in {self:?}"));
        }
        if training && self.rows < 2 {
            return invalid("training statistics need at least two values per channel".into());
        }
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return invalid(format!("eps must be positive, got {}", self.eps));
        }
        if !(0.0..=1.0).contains(&self.momentum) {
            return invalid(format!("momentum must be in [0, 1], got {}", self.momentum));
        }
        Ok(())
    }
}

/// A max pool over NHWC input with a square window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolParams {
    pub batch: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub channels: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
}

impl PoolParams {
    pub fn out_h(&self) -> usize {
        (self.in_h + 2 * self.padding - self.kernel) / self.stride + 1
    }
    pub fn out_w(&self) -> usize {
        (self.in_w + 2 * self.padding - self.kernel) / self.stride + 1
    }
    pub fn input_len(&self) -> usize {
        self.batch * self.in_h * self.in_w * self.channels
    }
    pub fn output_len(&self) -> usize {
        self.batch * self.out_h() * self.out_w() * self.channels
    }
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| {
            Err(EngineError::InvalidParameter {
                op: "max_pool",
                reason,
            })
        };
        let dims = [
            self.batch,
            self.in_h,
            self.in_w,
            self.channels,
            self.kernel,
            self.stride,
        ];
        if dims.contains(&0) {
            return invalid(format!("zero-sized dimension in {self:?}"));
        }
        if self.kernel > self.in_h + 2 * self.padding || self.kernel > self.in_w + 2 * self.padding
        {
            return invalid(format!("window {} larger than padded input", self.kernel));
        }
        // As in PyTorch: every window then holds at least one real element.
        if self.padding > self.kernel / 2 {
            return invalid(format!(
                "padding {} too large for window {}",
                self.padding, self.kernel
            ));
        }
        Ok(())
    }
}

/// Global average pooling of NHWC input to `[batch, channels]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GlobalPoolParams {
    pub batch: usize,
    /// H·W of the input.
    pub spatial: usize,
    pub channels: usize,
}

impl GlobalPoolParams {
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.spatial == 0 || self.channels == 0 {
            return Err(EngineError::InvalidParameter {
                op: "global_avg_pool",
                reason: format!("zero-sized dimension in {self:?}"),
            });
        }
        Ok(())
    }
}

/// A fully connected layer: `y[batch, out] = x[batch, in] · Wᵀ + b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinearParams {
    pub batch: usize,
    pub in_features: usize,
    pub out_features: usize,
}

impl LinearParams {
    pub fn validate(&self) -> Result<()> {
        if self.batch == 0 || self.in_features == 0 || self.out_features == 0 {
            return Err(EngineError::InvalidParameter {
                op: "linear",
                reason: format!("zero-sized dimension in {self:?}"),
            });
        }
        Ok(())
    }
}

/// Softmax cross-entropy over `[batch, classes]` logits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CrossEntropyParams {
    pub batch: usize,
    pub classes: usize,
    pub label_smoothing: f32,
}

impl CrossEntropyParams {
    pub fn validate(&self) -> Result<()> {
        let invalid = |reason: String| {
            Err(EngineError::InvalidParameter {
                op: "cross_entropy",
                reason,
            })
        };
        if self.batch == 0 || self.classes == 0 {
            return invalid(format!("zero-sized dimension in {self:?}"));
        }
        if !(0.0..=1.0).contains(&self.label_smoothing) {
            return invalid(format!(
                "label smoothing must be in [0, 1], got {}",
                self.label_smoothing
            ));
        }
        Ok(())
    }
}
