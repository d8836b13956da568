//! The CPU backend with activations held in a 16-bit format: the numerical reference for
//! mixed-precision training. Ops read their activation operands in the 16-bit format and
//! store the activations and activation gradients they produce in it, while computing in
//! f32; convolutions read their weights rounded too, as tensor-core convolutions do.
//! Weights, weight gradients of the f32 layers, batch-norm statistics, logits, the loss
//! and the optimizer stay f32. ReLU works in place on whatever it is given.
//!
//! It computes what a GPU step with 16-bit storage computes, up to summation order; it is
//! not a fast path (every rounding is an extra pass over the data).

use super::cpu::{CpuBackend, CpuBuffer};
use super::{
    Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved, Conv2dParams,
    CrossEntropyParams, GlobalPoolParams, LinearParams, PoolParams,
};
use crate::engine::precision::Precision;
use crate::engine::{EngineError, Result};

/// The CPU backend storing activations and activation gradients in fp16 or bf16 (see the
/// module docs); buffers are [`CpuBuffer`]s holding the rounded values as f32.
#[derive(Debug, Clone)]
pub struct HalfStorageCpu {
    inner: CpuBackend,
    precision: Precision,
}

impl HalfStorageCpu {
    /// `precision` must be a 16-bit format: f32 storage is [`CpuBackend`] itself.
    pub fn new(inner: CpuBackend, precision: Precision) -> Result<Self> {
        if !precision.is_reduced() {
            return Err(EngineError::InvalidParameter {
                op: "HalfStorageCpu::new",
                reason: format!("{precision} is not a 16-bit storage format"),
            });
        }
        Ok(HalfStorageCpu { inner, precision })
    }

    /// The 16-bit format activations are stored in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    /// The f32 CPU backend that does the arithmetic.
    pub fn inner(&self) -> &CpuBackend {
        &self.inner
    }

    /// A rounded copy of an operand, from the inner backend's pool.
    fn rounded(&self, src: &CpuBuffer) -> Result<CpuBuffer> {
        let mut copy = self.inner.alloc(src.as_slice().len())?;
        self.precision
            .round_into(src.as_slice(), copy.as_mut_slice());
        Ok(copy)
    }

    fn store(&self, buf: &mut CpuBuffer) {
        self.precision.round_slice(buf.as_mut_slice());
    }
}

impl Backend for HalfStorageCpu {
    type Buffer = CpuBuffer;

    fn name(&self) -> String {
        format!("cpu ({} storage)", self.precision)
    }

    fn alloc(&self, len: usize) -> Result<CpuBuffer> {
        self.inner.alloc(len)
    }
    fn zeros(&self, len: usize) -> Result<CpuBuffer> {
        self.inner.zeros(len)
    }
    fn upload(&self, host: &[f32]) -> Result<CpuBuffer> {
        self.inner.upload(host)
    }
    fn download(&self, buf: &CpuBuffer, host: &mut [f32]) -> Result<()> {
        self.inner.download(buf, host)
    }
    fn buffer_len(&self, buf: &CpuBuffer) -> usize {
        self.inner.buffer_len(buf)
    }
    fn copy(&self, src: &CpuBuffer, dst: &mut CpuBuffer) -> Result<()> {
        self.inner.copy(src, dst)
    }
    fn fill(&self, buf: &mut CpuBuffer, value: f32) -> Result<()> {
        self.inner.fill(buf, value)
    }

    fn conv2d_forward(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        let (x, w) = (self.rounded(x)?, self.rounded(w)?);
        self.inner.conv2d_forward(p, &x, &w, y)?;
        self.store(y);
        Ok(())
    }

    fn conv2d_backward_data(
        &self,
        p: &Conv2dParams,
        dy: &CpuBuffer,
        w: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        let (dy, w) = (self.rounded(dy)?, self.rounded(w)?);
        self.inner.conv2d_backward_data(p, &dy, &w, dx)?;
        self.store(dx);
        Ok(())
    }

    /// The weight gradient comes out in the storage format, as the gradient of a 16-bit
    /// convolution does before it reaches the f32 master weight: this is where an
    /// unscaled fp16 gradient underflows.
    fn conv2d_backward_filter(
        &self,
        p: &Conv2dParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        dw: &mut CpuBuffer,
    ) -> Result<()> {
        let (x, dy) = (self.rounded(x)?, self.rounded(dy)?);
        self.inner.conv2d_backward_filter(p, &x, &dy, dw)?;
        self.store(dw);
        Ok(())
    }

    fn batch_norm_forward_train(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        bn: &mut BatchNormBuffers<CpuBuffer>,
        saved: &mut BatchNormSaved<CpuBuffer>,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        let x = self.rounded(x)?;
        self.inner.batch_norm_forward_train(p, &x, bn, saved, y)?;
        self.store(y);
        Ok(())
    }

    fn batch_norm_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        bn: &BatchNormBuffers<CpuBuffer>,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        let x = self.rounded(x)?;
        self.inner.batch_norm_forward_eval(p, &x, bn, y)?;
        self.store(y);
        Ok(())
    }

    fn batch_norm_backward(
        &self,
        p: &BatchNormParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        gamma: &CpuBuffer,
        saved: &BatchNormSaved<CpuBuffer>,
        dx: &mut CpuBuffer,
        grads: &mut BatchNormGrads<CpuBuffer>,
    ) -> Result<()> {
        let (x, dy) = (self.rounded(x)?, self.rounded(dy)?);
        self.inner
            .batch_norm_backward(p, &x, &dy, gamma, saved, dx, grads)?;
        self.store(dx);
        Ok(())
    }

    // ReLU selects values in place, so stored values stay stored values.
    fn relu_forward(&self, x: &mut CpuBuffer) -> Result<()> {
        self.inner.relu_forward(x)
    }
    fn relu_backward(&self, y: &CpuBuffer, dy: &mut CpuBuffer) -> Result<()> {
        self.inner.relu_backward(y, dy)
    }

    /// The maximum of rounded values is a rounded value.
    fn max_pool_forward(&self, p: &PoolParams, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        let x = self.rounded(x)?;
        self.inner.max_pool_forward(p, &x, y)
    }

    /// Overlapping windows sum two gradients into one element, so dx is stored again.
    fn max_pool_backward(
        &self,
        p: &PoolParams,
        x: &CpuBuffer,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        let (x, dy) = (self.rounded(x)?, self.rounded(dy)?);
        self.inner.max_pool_backward(p, &x, &dy, dx)?;
        self.store(dx);
        Ok(())
    }

    fn global_avg_pool_forward(
        &self,
        p: &GlobalPoolParams,
        x: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        let x = self.rounded(x)?;
        self.inner.global_avg_pool_forward(p, &x, y)?;
        self.store(y);
        Ok(())
    }

    fn global_avg_pool_backward(
        &self,
        p: &GlobalPoolParams,
        dy: &CpuBuffer,
        dx: &mut CpuBuffer,
    ) -> Result<()> {
        let dy = self.rounded(dy)?;
        self.inner.global_avg_pool_backward(p, &dy, dx)?;
        self.store(dx);
        Ok(())
    }

    /// The classifier runs in f32 on its stored input, so the logits and the loss are f32.
    fn linear_forward(
        &self,
        p: &LinearParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        b: &CpuBuffer,
        y: &mut CpuBuffer,
    ) -> Result<()> {
        let x = self.rounded(x)?;
        self.inner.linear_forward(p, &x, w, b, y)
    }

    fn linear_backward(
        &self,
        p: &LinearParams,
        x: &CpuBuffer,
        w: &CpuBuffer,
        dy: &CpuBuffer,
        mut dx: Option<&mut CpuBuffer>,
        dw: &mut CpuBuffer,
        db: &mut CpuBuffer,
    ) -> Result<()> {
        let x = self.rounded(x)?;
        self.inner
            .linear_backward(p, &x, w, dy, dx.as_deref_mut(), dw, db)?;
        if let Some(dx) = dx {
            self.store(dx);
        }
        Ok(())
    }

    fn cross_entropy_forward(
        &self,
        p: &CrossEntropyParams,
        logits: &CpuBuffer,
        labels: &CpuBuffer,
        loss: &mut CpuBuffer,
        correct: &mut CpuBuffer,
    ) -> Result<()> {
        self.inner
            .cross_entropy_forward(p, logits, labels, loss, correct)
    }

    fn cross_entropy_backward(
        &self,
        p: &CrossEntropyParams,
        logits: &CpuBuffer,
        labels: &CpuBuffer,
        dlogits: &mut CpuBuffer,
    ) -> Result<()> {
        self.inner
            .cross_entropy_backward(p, logits, labels, dlogits)
    }

    /// Residual sums are activations (forward) or activation gradients (backward).
    fn add(&self, a: &CpuBuffer, b: &CpuBuffer, out: &mut CpuBuffer) -> Result<()> {
        let (a, b) = (self.rounded(a)?, self.rounded(b)?);
        self.inner.add(&a, &b, out)?;
        self.store(out);
        Ok(())
    }
    fn add_assign(&self, dst: &mut CpuBuffer, src: &CpuBuffer) -> Result<()> {
        let src = self.rounded(src)?;
        self.inner.add_assign(dst, &src)?;
        self.store(dst);
        Ok(())
    }

    // The optimizer's arithmetic is on f32 master weights and gradients.
    fn scale(&self, x: &mut CpuBuffer, alpha: f32) -> Result<()> {
        self.inner.scale(x, alpha)
    }
    fn axpy(&self, alpha: f32, x: &CpuBuffer, y: &mut CpuBuffer) -> Result<()> {
        self.inner.axpy(alpha, x, y)
    }
    fn sum_squares(&self, x: &CpuBuffer, out: &mut CpuBuffer, index: usize) -> Result<()> {
        self.inner.sum_squares(x, out, index)
    }
    fn has_non_finite(&self, x: &CpuBuffer) -> Result<bool> {
        self.inner.has_non_finite(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv() -> Conv2dParams {
        Conv2dParams {
            batch: 2,
            in_h: 6,
            in_w: 6,
            in_c: 4,
            out_c: 8,
            kernel_h: 3,
            kernel_w: 3,
            stride: 1,
            padding: 1,
        }
    }

    fn values(len: usize, seed: f32, magnitude: f32) -> Vec<f32> {
        (0..len)
            .map(|i| (i as f32 * 0.618 + seed).sin() * magnitude)
            .collect()
    }

    fn host(b: &impl Backend<Buffer = CpuBuffer>, buf: &CpuBuffer) -> Vec<f32> {
        let mut out = vec![0.0; b.buffer_len(buf)];
        b.download(buf, &mut out).unwrap();
        out
    }

    fn representable(p: Precision, values: &[f32]) -> bool {
        values.iter().all(|&v| p.round(v) == v)
    }

    #[test]
    fn f32_storage_is_refused_as_a_half_format() {
        let err = HalfStorageCpu::new(CpuBackend::new(), Precision::Fp32).unwrap_err();
        assert!(err.to_string().contains("fp32"), "{err}");
    }

    #[test]
    fn convolution_outputs_are_stored_rounded_and_close_to_f32() {
        let p = conv();
        let f32_backend = CpuBackend::with_gemm_convolutions();
        for precision in [Precision::Fp16, Precision::Bf16] {
            let half =
                HalfStorageCpu::new(CpuBackend::with_gemm_convolutions(), precision).unwrap();
            let x = half.upload(&values(p.input_len(), 0.3, 1.0)).unwrap();
            let w = half.upload(&values(p.weight_len(), 1.1, 0.2)).unwrap();
            let mut y = half.alloc(p.output_len()).unwrap();
            half.conv2d_forward(&p, &x, &w, &mut y).unwrap();
            let mut reference = f32_backend.alloc(p.output_len()).unwrap();
            f32_backend
                .conv2d_forward(&p, &x, &w, &mut reference)
                .unwrap();
            let (y, reference) = (host(&half, &y), host(&f32_backend, &reference));
            assert!(representable(precision, &y), "{precision}: y not rounded");
            assert!(!representable(precision, &reference));
            let worst = y
                .iter()
                .zip(&reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            let tolerance = if precision == Precision::Fp16 {
                1e-2
            } else {
                5e-2
            };
            assert!(worst > 0.0 && worst < tolerance, "{precision}: {worst}");
        }
    }

    #[test]
    fn batch_norm_and_residual_outputs_are_stored_rounded() {
        let half = HalfStorageCpu::new(CpuBackend::new(), Precision::Bf16).unwrap();
        let p = BatchNormParams {
            rows: 16,
            channels: 4,
            eps: 1e-5,
            momentum: 0.1,
        };
        let x = half.upload(&values(64, 0.5, 3.0)).unwrap();
        let mut bn = BatchNormBuffers {
            gamma: half.upload(&[1.3; 4]).unwrap(),
            beta: half.upload(&[0.1; 4]).unwrap(),
            running_mean: half.zeros(4).unwrap(),
            running_var: half.upload(&[1.0; 4]).unwrap(),
        };
        let mut saved = BatchNormSaved {
            mean: half.zeros(4).unwrap(),
            inv_std: half.zeros(4).unwrap(),
        };
        let mut y = half.alloc(64).unwrap();
        half.batch_norm_forward_train(&p, &x, &mut bn, &mut saved, &mut y)
            .unwrap();
        assert!(representable(Precision::Bf16, &host(&half, &y)));
        // The statistics stay f32.
        assert!(!representable(
            Precision::Bf16,
            &host(&half, &saved.inv_std)
        ));
        let mut sum = half.alloc(64).unwrap();
        half.add(&y, &x, &mut sum).unwrap();
        assert!(representable(Precision::Bf16, &host(&half, &sum)));
    }

    #[test]
    fn unscaled_fp16_weight_gradients_underflow_and_a_loss_scale_recovers_them() {
        let p = conv();
        let f32_backend = CpuBackend::with_gemm_convolutions();
        let half =
            HalfStorageCpu::new(CpuBackend::with_gemm_convolutions(), Precision::Fp16).unwrap();
        let x = half.upload(&values(p.input_len(), 0.3, 1.0)).unwrap();
        // Gradients this small are below fp16's smallest subnormal (2⁻²⁴ ≈ 6e-8).
        let tiny = values(p.output_len(), 2.0, 2e-8);
        let mut reference = f32_backend.alloc(p.weight_len()).unwrap();
        f32_backend
            .conv2d_backward_filter(&p, &x, &f32_backend.upload(&tiny).unwrap(), &mut reference)
            .unwrap();
        let reference = host(&f32_backend, &reference);
        assert!(reference.iter().any(|&g| g != 0.0));

        let mut dw = half.alloc(p.weight_len()).unwrap();
        half.conv2d_backward_filter(&p, &x, &half.upload(&tiny).unwrap(), &mut dw)
            .unwrap();
        assert!(host(&half, &dw).iter().all(|&g| g == 0.0));

        let scale = 65536.0f32;
        let scaled: Vec<f32> = tiny.iter().map(|g| g * scale).collect();
        half.conv2d_backward_filter(&p, &x, &half.upload(&scaled).unwrap(), &mut dw)
            .unwrap();
        let recovered: Vec<f32> = host(&half, &dw).iter().map(|g| g / scale).collect();
        let peak = reference.iter().fold(0.0f32, |m, g| m.max(g.abs()));
        let worst = recovered
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(worst < 1e-2 * peak, "worst {worst} of peak {peak}");
    }
}
