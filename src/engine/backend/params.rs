//! The small parameter structs every backend op takes, with their shape arithmetic and
//! validation, so all backends agree on what a shape means.

use crate::engine::{EngineError, Result};

/// A 2-D convolution over NHWC input with HWIO weights, square stride and padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dParams {
    /// Images in the batch (N).
    pub batch: usize,
    /// Input height in pixels.
    pub in_h: usize,
    /// Input width in pixels.
    pub in_w: usize,
    /// Input channels (the weights' I).
    pub in_c: usize,
    /// Output channels (the weights' O).
    pub out_c: usize,
    /// Kernel height in pixels.
    pub kernel_h: usize,
    /// Kernel width in pixels.
    pub kernel_w: usize,
    /// Step between windows, the same along height and width.
    pub stride: usize,
    /// Zero padding added on each side, the same along height and width.
    pub padding: usize,
}

impl Conv2dParams {
    /// Output height: `(in_h + 2·padding − kernel_h) / stride + 1`.
    pub fn out_h(&self) -> usize {
        (self.in_h + 2 * self.padding - self.kernel_h) / self.stride + 1
    }
    /// Output width: `(in_w + 2·padding − kernel_w) / stride + 1`.
    pub fn out_w(&self) -> usize {
        (self.in_w + 2 * self.padding - self.kernel_w) / self.stride + 1
    }
    /// Elements of the NHWC input.
    pub fn input_len(&self) -> usize {
        self.batch * self.in_h * self.in_w * self.in_c
    }
    /// Elements of the NHWC output.
    pub fn output_len(&self) -> usize {
        self.batch * self.out_h() * self.out_w() * self.out_c
    }
    /// Elements of the HWIO weights.
    pub fn weight_len(&self) -> usize {
        self.kernel_h * self.kernel_w * self.in_c * self.out_c
    }
    /// Multiply-adds of the forward pass, times two.
    pub fn forward_flops(&self) -> f64 {
        2.0 * (self.batch * self.out_h() * self.out_w()) as f64
            * (self.kernel_h * self.kernel_w * self.in_c * self.out_c) as f64
    }
    /// Whether this is a 1×1, stride-1, unpadded convolution: a plain GEMM over the pixels.
    pub fn is_pointwise(&self) -> bool {
        self.kernel_h == 1 && self.kernel_w == 1 && self.stride == 1 && self.padding == 0
    }

    /// Errors unless every dimension is non-zero, the kernel fits the padded input and padding
    /// leaves no window of padding alone.
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
    /// Rows normalised together: N·H·W of the activations.
    pub rows: usize,
    /// Channels, each with its own statistics, γ and β.
    pub channels: usize,
    /// Added to the variance before the square root; must be positive.
    pub eps: f32,
    /// Weight of the batch statistic in the running-statistics update
    /// (`running := (1 − momentum)·running + momentum·batch`, PyTorch's convention); in [0, 1].
    pub momentum: f32,
}

impl BatchNormParams {
    /// Errors on a zero dimension, a non-positive eps or a momentum outside [0, 1]; `training`
    /// also needs at least two rows for the batch variance.
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
    /// Images in the batch (N).
    pub batch: usize,
    /// Input height in pixels.
    pub in_h: usize,
    /// Input width in pixels.
    pub in_w: usize,
    /// Channels, pooled independently.
    pub channels: usize,
    /// Window side in pixels.
    pub kernel: usize,
    /// Step between windows.
    pub stride: usize,
    /// Padding on each side, never chosen as a maximum.
    pub padding: usize,
}

impl PoolParams {
    /// Output height: `(in_h + 2·padding − kernel) / stride + 1`.
    pub fn out_h(&self) -> usize {
        (self.in_h + 2 * self.padding - self.kernel) / self.stride + 1
    }
    /// Output width: `(in_w + 2·padding − kernel) / stride + 1`.
    pub fn out_w(&self) -> usize {
        (self.in_w + 2 * self.padding - self.kernel) / self.stride + 1
    }
    /// Elements of the NHWC input.
    pub fn input_len(&self) -> usize {
        self.batch * self.in_h * self.in_w * self.channels
    }
    /// Elements of the NHWC output.
    pub fn output_len(&self) -> usize {
        self.batch * self.out_h() * self.out_w() * self.channels
    }
    /// Errors on a zero dimension, a window larger than the padded input, or padding over half
    /// the window (so every window holds a real element, as in PyTorch).
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
    /// Images in the batch (N).
    pub batch: usize,
    /// H·W of the input.
    pub spatial: usize,
    /// Channels, each averaged on its own.
    pub channels: usize,
}

impl GlobalPoolParams {
    /// Errors on a zero dimension.
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
    /// Samples in the batch.
    pub batch: usize,
    /// Width of each input row.
    pub in_features: usize,
    /// Width of each output row.
    pub out_features: usize,
}

impl LinearParams {
    /// Errors on a zero dimension.
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
    /// Samples in the batch, padded ones included.
    pub batch: usize,
    /// Number of classes: the width of each logits row.
    pub classes: usize,
    /// ε: the probability mass spread evenly over all classes; in [0, 1].
    pub label_smoothing: f32,
}

impl CrossEntropyParams {
    /// Errors on a zero dimension or a smoothing outside [0, 1].
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
