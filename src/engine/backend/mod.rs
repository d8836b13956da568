//! The backend boundary. A backend owns device memory (`Buffer`) and runs every op of a
//! training step on it; model code is generic over `B: Backend` and never touches buffer
//! contents except through [`Backend::upload`] and [`Backend::download`].
//!
//! Layout conventions every backend follows:
//! - activations are NHWC, f32;
//! - conv weights are HWIO: `[kernel_h, kernel_w, in_c, out_c]`, row-major, so a conv is
//!   `im2col(x)[N·OH·OW, KH·KW·Cin] × W[KH·KW·Cin, Cout]` (see `layers::conv2d` for the
//!   conversion from PyTorch's OIHW order);
//! - linear weights are PyTorch's `[out_features, in_features]`;
//! - class labels are a buffer of f32 class indices, one per sample; a negative label
//!   marks a padded sample that contributes neither loss, gradient nor accuracy.

pub mod cpu;
pub mod crosscheck;
pub mod gpu;
pub mod half_storage;
mod params;
pub mod select;
pub mod unfused;

pub use params::{
    BatchNormParams, Conv2dParams, CrossEntropyParams, GlobalPoolParams, LinearParams, PoolParams,
};

use super::Result;

/// Element type of a buffer. Only f32 is implemented; the field exists so mixed precision
/// can be added without changing the tensor type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DType {
    /// 32-bit IEEE floats.
    #[default]
    F32,
}

/// One parameter's share of [`Backend::momentum_update_many`].
pub struct MomentumStep<'a, Buf> {
    /// The parameter, updated in place.
    pub w: &'a mut Buf,
    /// Its gradient as accumulated (still multiplied by any loss scale).
    pub g: &'a Buf,
    /// Its momentum buffer, updated in place.
    pub b: &'a mut Buf,
    /// What multiplies the gradient: learning rate × trust ratio, with any loss scale divided out.
    pub step: f32,
    /// Weight decay in the gradient's units (the update adds `step·decay·w`); 0 for none.
    pub decay: f32,
}

/// The learned and running parameters of one batch-norm layer, each `channels` long.
pub struct BatchNormBuffers<Buf> {
    /// Learned scale γ.
    pub gamma: Buf,
    /// Learned shift β.
    pub beta: Buf,
    /// Running mean, which the eval-mode forward normalises with.
    pub running_mean: Buf,
    /// Running unbiased variance, which the eval-mode forward normalises with.
    pub running_var: Buf,
}

/// What the training-mode forward keeps for the backward: batch mean and 1/sqrt(var+eps).
pub struct BatchNormSaved<Buf> {
    /// Batch mean per channel.
    pub mean: Buf,
    /// 1/sqrt(var + eps) per channel, from the biased batch variance.
    pub inv_std: Buf,
}

/// Gradients of a batch-norm layer's learned parameters.
pub struct BatchNormGrads<Buf> {
    /// dL/dγ per channel.
    pub gamma: Buf,
    /// dL/dβ per channel.
    pub beta: Buf,
}

/// A device that owns buffers and runs every op of a training step on them, following the
/// layout conventions above. Ops validate their parameters and operand lengths and report
/// a mismatch as an error.
pub trait Backend: Send + Sync {
    /// Device memory holding a fixed number of f32 elements.
    type Buffer: Send + Sync;

    /// A short name for logs and errors, e.g. `cpu`.
    fn name(&self) -> String;

    // --- memory -------------------------------------------------------------------
    /// A buffer whose contents are unspecified: for op outputs, which every op overwrites.
    /// Until an op has written it, reading it (as an op's operand, in place, or by
    /// `download`) is an error on backends that defer its memory to that first write.
    fn alloc(&self, len: usize) -> Result<Self::Buffer>;
    /// A buffer of `len` zeros.
    fn zeros(&self, len: usize) -> Result<Self::Buffer>;
    /// A new buffer holding a copy of `host`.
    fn upload(&self, host: &[f32]) -> Result<Self::Buffer>;
    /// The only way data leaves the device: `host` must have the buffer's length.
    fn download(&self, buf: &Self::Buffer, host: &mut [f32]) -> Result<()>;
    /// The buffer's length in elements.
    fn buffer_len(&self, buf: &Self::Buffer) -> usize;
    /// dst := src; `dst` must have `src`'s length.
    fn copy(&self, src: &Self::Buffer, dst: &mut Self::Buffer) -> Result<()>;
    /// Sets every element of `buf` to `value`.
    fn fill(&self, buf: &mut Self::Buffer, value: f32) -> Result<()>;

    // --- convolution (NHWC activations, HWIO weights, no bias) -------------------------
    /// y := x ⋆ w with `p`'s stride and padding (overwrites y).
    fn conv2d_forward(
        &self,
        p: &Conv2dParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        y: &mut Self::Buffer,
    ) -> Result<()>;
    /// dx := convᵀ(dy, w) (overwrites dx).
    fn conv2d_backward_data(
        &self,
        p: &Conv2dParams,
        dy: &Self::Buffer,
        w: &Self::Buffer,
        dx: &mut Self::Buffer,
    ) -> Result<()>;
    /// dw := Σ over the batch of x ⋆ dy (overwrites dw).
    fn conv2d_backward_filter(
        &self,
        p: &Conv2dParams,
        x: &Self::Buffer,
        dy: &Self::Buffer,
        dw: &mut Self::Buffer,
    ) -> Result<()>;

    // --- batch norm over the rows of an [rows, channels] view -------------------------
    /// Normalises with batch statistics, saves mean and 1/std for the backward, and
    /// updates the running statistics (running var from the unbiased batch variance).
    fn batch_norm_forward_train(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        bn: &mut BatchNormBuffers<Self::Buffer>,
        saved: &mut BatchNormSaved<Self::Buffer>,
        y: &mut Self::Buffer,
    ) -> Result<()>;
    /// Normalises with the running statistics.
    fn batch_norm_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        bn: &BatchNormBuffers<Self::Buffer>,
        y: &mut Self::Buffer,
    ) -> Result<()>;
    /// dx, dγ, dβ of the training-mode forward (overwrites all three).
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_backward(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        dy: &Self::Buffer,
        gamma: &Self::Buffer,
        saved: &BatchNormSaved<Self::Buffer>,
        dx: &mut Self::Buffer,
        grads: &mut BatchNormGrads<Self::Buffer>,
    ) -> Result<()>;

    /// Batch norm in training mode followed by ReLU on its output. Device backends fuse
    /// the two passes; this default runs them one after the other.
    fn batch_norm_relu_forward_train(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        bn: &mut BatchNormBuffers<Self::Buffer>,
        saved: &mut BatchNormSaved<Self::Buffer>,
        y: &mut Self::Buffer,
    ) -> Result<()> {
        self.batch_norm_forward_train(p, x, bn, saved, y)?;
        self.relu_forward(y)
    }

    /// Batch norm with running statistics followed by ReLU.
    fn batch_norm_relu_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        bn: &BatchNormBuffers<Self::Buffer>,
        y: &mut Self::Buffer,
    ) -> Result<()> {
        self.batch_norm_forward_eval(p, x, bn, y)?;
        self.relu_forward(y)
    }

    /// The backward of batch norm followed by ReLU: `y` is the ReLU's output and `dy` the
    /// gradient there, which this may overwrite (the default masks it in place).
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_relu_backward(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        y: &Self::Buffer,
        dy: &mut Self::Buffer,
        gamma: &Self::Buffer,
        saved: &BatchNormSaved<Self::Buffer>,
        dx: &mut Self::Buffer,
        grads: &mut BatchNormGrads<Self::Buffer>,
    ) -> Result<()> {
        self.relu_backward(y, dy)?;
        self.batch_norm_backward(p, x, dy, gamma, saved, dx, grads)
    }

    /// The end of a residual block: `y := ReLU(batch_norm_train(x) + residual)`. Device
    /// backends may fuse it into one pass over the tensors; this default runs the three
    /// ops ([`unfused`]).
    fn batch_norm_add_relu_forward_train(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        residual: &Self::Buffer,
        bn: &mut BatchNormBuffers<Self::Buffer>,
        saved: &mut BatchNormSaved<Self::Buffer>,
        y: &mut Self::Buffer,
    ) -> Result<()> {
        unfused::batch_norm_add_relu_forward_train(self, p, x, residual, bn, saved, y)
    }

    /// The same with running statistics.
    fn batch_norm_add_relu_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        residual: &Self::Buffer,
        bn: &BatchNormBuffers<Self::Buffer>,
        y: &mut Self::Buffer,
    ) -> Result<()> {
        unfused::batch_norm_add_relu_forward_eval(self, p, x, residual, bn, y)
    }

    /// The backward of [`batch_norm_add_relu_forward_train`](Self::batch_norm_add_relu_forward_train):
    /// `y` is its output and `dy` the gradient there, which this overwrites with the
    /// gradient at the sum (dy masked by `y > 0`: the residual's gradient); `dx`, dγ and
    /// dβ are batch norm's.
    #[allow(clippy::too_many_arguments)]
    fn batch_norm_add_relu_backward(
        &self,
        p: &BatchNormParams,
        x: &Self::Buffer,
        y: &Self::Buffer,
        dy: &mut Self::Buffer,
        gamma: &Self::Buffer,
        saved: &BatchNormSaved<Self::Buffer>,
        dx: &mut Self::Buffer,
        grads: &mut BatchNormGrads<Self::Buffer>,
    ) -> Result<()> {
        unfused::batch_norm_add_relu_backward(self, p, x, y, dy, gamma, saved, dx, grads)
    }

    // --- ReLU (in place) -----------------------------------------------------------
    /// x := max(x, 0).
    fn relu_forward(&self, x: &mut Self::Buffer) -> Result<()>;
    /// dy := dy · [y > 0], where y is the ReLU's output.
    fn relu_backward(&self, y: &Self::Buffer, dy: &mut Self::Buffer) -> Result<()>;

    // --- pooling -------------------------------------------------------------------
    /// y := the maximum of each window of x, padding left out (overwrites y).
    fn max_pool_forward(
        &self,
        p: &PoolParams,
        x: &Self::Buffer,
        y: &mut Self::Buffer,
    ) -> Result<()>;
    /// Routes each dy to the first maximum of its window in x (overwrites dx).
    fn max_pool_backward(
        &self,
        p: &PoolParams,
        x: &Self::Buffer,
        dy: &Self::Buffer,
        dx: &mut Self::Buffer,
    ) -> Result<()>;
    /// y[n, c] := the mean of x over image n's H·W pixels (overwrites y).
    fn global_avg_pool_forward(
        &self,
        p: &GlobalPoolParams,
        x: &Self::Buffer,
        y: &mut Self::Buffer,
    ) -> Result<()>;
    /// dx := dy / (H·W) at every pixel of its image and channel (overwrites dx).
    fn global_avg_pool_backward(
        &self,
        p: &GlobalPoolParams,
        dy: &Self::Buffer,
        dx: &mut Self::Buffer,
    ) -> Result<()>;

    // --- fully connected (weights [out, in], bias [out]) ------------------------------
    /// y := x · Wᵀ + b (overwrites y).
    fn linear_forward(
        &self,
        p: &LinearParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        b: &Self::Buffer,
        y: &mut Self::Buffer,
    ) -> Result<()>;
    /// dw, db (overwritten) and, when asked for, dx (overwritten).
    #[allow(clippy::too_many_arguments)]
    fn linear_backward(
        &self,
        p: &LinearParams,
        x: &Self::Buffer,
        w: &Self::Buffer,
        dy: &Self::Buffer,
        dx: Option<&mut Self::Buffer>,
        dw: &mut Self::Buffer,
        db: &mut Self::Buffer,
    ) -> Result<()>;

    // --- softmax cross-entropy with label smoothing ------------------------------------
    /// `loss[0]` := mean over valid samples of (1-ε)(-log p_y) + ε·mean_k(-log p_k);
    /// `correct[i]` := 1 when sample i is valid and its arg-max logit is its label.
    fn cross_entropy_forward(
        &self,
        p: &CrossEntropyParams,
        logits: &Self::Buffer,
        labels: &Self::Buffer,
        loss: &mut Self::Buffer,
        correct: &mut Self::Buffer,
    ) -> Result<()>;
    /// d(loss)/d(logits) (overwrites dlogits).
    fn cross_entropy_backward(
        &self,
        p: &CrossEntropyParams,
        logits: &Self::Buffer,
        labels: &Self::Buffer,
        dlogits: &mut Self::Buffer,
    ) -> Result<()>;

    // --- element-wise and reductions ----------------------------------------------
    /// out := a + b.
    fn add(&self, a: &Self::Buffer, b: &Self::Buffer, out: &mut Self::Buffer) -> Result<()>;
    /// dst := dst + src.
    fn add_assign(&self, dst: &mut Self::Buffer, src: &Self::Buffer) -> Result<()>;
    /// x := alpha · x.
    fn scale(&self, x: &mut Self::Buffer, alpha: f32) -> Result<()>;
    /// y := y + alpha · x.
    fn axpy(&self, alpha: f32, x: &Self::Buffer, y: &mut Self::Buffer) -> Result<()>;
    /// One momentum step of the optimizer on a parameter `w` with gradient `g` and momentum
    /// buffer `b`: `b := momentum·b + step·g + step·decay·w`, then `w := w − b`. Device
    /// backends fuse it into one pass; this default is the same sequence of single ops.
    #[allow(clippy::too_many_arguments)]
    fn momentum_update(
        &self,
        w: &mut Self::Buffer,
        g: &Self::Buffer,
        b: &mut Self::Buffer,
        momentum: f32,
        step: f32,
        decay: f32,
    ) -> Result<()> {
        self.scale(b, momentum)?;
        self.axpy(step, g, b)?;
        if decay != 0.0 {
            self.axpy(step * decay, w, b)?;
        }
        self.axpy(-1.0, b, w)
    }

    /// [`momentum_update`](Self::momentum_update) of many parameters, each with its own
    /// step and decay. Device backends may update them all in one launch; this default
    /// updates them one by one.
    fn momentum_update_many(
        &self,
        momentum: f32,
        updates: &mut [MomentumStep<'_, Self::Buffer>],
    ) -> Result<()> {
        for u in updates {
            self.momentum_update(u.w, u.g, u.b, momentum, u.step, u.decay)?;
        }
        Ok(())
    }

    /// out[index] := Σ x², so many norms can be gathered in one buffer and downloaded
    /// (or consumed on the device) together.
    fn sum_squares(&self, x: &Self::Buffer, out: &mut Self::Buffer, index: usize) -> Result<()>;

    /// [`sum_squares`](Self::sum_squares) of each `(x, index)`: device backends may sum
    /// them all in one launch; this default sums them one by one.
    fn sum_squares_many(
        &self,
        xs: &[(&Self::Buffer, usize)],
        out: &mut Self::Buffer,
    ) -> Result<()> {
        for &(x, index) in xs {
            self.sum_squares(x, out, index)?;
        }
        Ok(())
    }
    /// Whether any element is NaN or infinite (a small download on device backends).
    fn has_non_finite(&self, x: &Self::Buffer) -> Result<bool>;
}
