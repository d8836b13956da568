//! The GPU backend: the engine's ops as kernels of one CUDA/HIP source plus vendor-BLAS
//! GEMMs, over a [`GpuDriver`] for either vendor. Buffers stay on the device for the whole
//! step; only `download` (and `has_non_finite`) bring data back.
//!
//! Convolutions are im2col + GEMM (1×1 stride-1 convolutions are a GEMM alone), in
//! chunks of whole images so the column buffer stays bounded; the backward-data pass
//! gathers instead of scattering, so every kernel is deterministic and atomic-free.
//!
//! A backend made [`GpuBackend::with_precision`] a 16-bit format stores activations and
//! activation gradients in it, as [`HalfStorageCpu`](super::half_storage::HalfStorageCpu)
//! does on the CPU: each buffer carries the format its contents are in, ops convert an
//! operand that arrives in another format, and parameters, their gradients, batch-norm
//! statistics, logits and the loss stay f32.

/// The symbols of `list` that `library` (a cudarc or rocmrc library handle) lacks, so a
/// driver can refuse to start instead of panicking at its first call of one.
macro_rules! missing_symbols {
    ($library:expr, $list:expr) => {{
        let library = $library;
        $list
            .iter()
            // SAFETY: looks the symbol up without calling it.
            .filter(|s| unsafe { library.get::<*const std::ffi::c_void>(s.as_bytes()) }.is_err())
            .map(|s| s.to_string())
            .collect::<Vec<String>>()
    }};
}

pub mod allocator;
mod batchnorm;
mod buffer;
pub mod cache;
pub mod code_object;
mod conv;
mod conv_gemm;
pub mod cuda;
pub mod cudnn;
pub mod driver;
mod elementwise;
mod enqueue;
#[cfg(test)]
mod footprint_tests;
pub mod hip;
pub mod launch;
mod linear;
mod loss;
mod multi_tensor;
mod optimizer;
pub mod options;
mod pool;
mod profile;
pub mod runtime_driver;
pub mod source;
pub mod stand_in;

use std::sync::Arc;

use super::{
    Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved, Conv2dParams,
    CrossEntropyParams, GlobalPoolParams, LinearParams, MomentumStep, PoolParams,
};
use crate::engine::{Precision, Result};
use allocator::{AllocatorMemory, DeviceAllocator};
use batchnorm::BnEpilogue;
use driver::GpuDriver;
use options::{ConvPath, GpuOptions};

pub use buffer::GpuBuffer;
pub use profile::Profile;

/// Column-buffer budget of one im2col chunk, in elements (512 MiB of f32).
pub const IM2COL_BUDGET_ELEMS: usize = 1 << 27;

/// Device memory kept for reuse between steps.
pub const DEFAULT_CACHE_LIMIT_BYTES: usize = 64 << 30;

/// The engine's ops on one GPU. Clones and the views made by [`Self::with_precision`] and
/// [`Self::profiled`] share the device and its allocator.
#[derive(Debug, Clone)]
pub struct GpuBackend {
    allocator: Arc<DeviceAllocator>,
    name: String,
    profile: Option<Arc<Profile>>,
    /// How non-pointwise convolutions run.
    conv: ConvPath,
    /// Whether the end of a residual block runs as fused batch-norm kernels.
    fused_bn: bool,
    /// Whether the optimizer's norms and updates take one launch for all parameters.
    multi_tensor_optimizer: bool,
    /// The format activations are stored in.
    precision: Precision,
}

impl GpuBackend {
    /// A backend on `driver` with the speed switches the environment sets (see
    /// [`options`]).
    pub fn new(driver: Arc<dyn GpuDriver>) -> Self {
        Self::with_options(driver, GpuOptions::from_env())
    }

    /// A backend on `driver` with the speed switches `options` sets.
    pub fn with_options(driver: Arc<dyn GpuDriver>, options: GpuOptions) -> Self {
        let name = format!("{}:{}", driver.runtime(), driver.info().ordinal);
        let conv = options.conv.resolve(driver.dnn_library().is_some());
        if options != GpuOptions::default() {
            tracing::info!(?options, ?conv, "GPU backend speed switches");
        }
        GpuBackend {
            allocator: DeviceAllocator::new(driver, DEFAULT_CACHE_LIMIT_BYTES),
            name,
            profile: None,
            conv,
            fused_bn: options.fused_bn,
            multi_tensor_optimizer: options.multi_tensor_optimizer,
            precision: Precision::Fp32,
        }
    }

    /// How this backend runs convolutions that are not a plain GEMM.
    pub fn conv_path(&self) -> ConvPath {
        self.conv
    }

    /// The same device storing activations and activation gradients in `precision`.
    pub fn with_precision(&self, precision: Precision) -> Self {
        GpuBackend {
            precision,
            name: match precision {
                Precision::Fp32 => self.name.clone(),
                _ => format!("{} ({precision})", self.base_name()),
            },
            ..self.clone()
        }
    }

    /// The format activations and their gradients are stored in.
    pub fn precision(&self) -> Precision {
        self.precision
    }

    fn base_name(&self) -> &str {
        self.name.split(" (").next().unwrap_or(&self.name)
    }

    /// The same device with every kernel and GEMM timed into `profile`.
    pub fn profiled(&self, profile: Arc<Profile>) -> Self {
        GpuBackend {
            profile: Some(profile),
            ..self.clone()
        }
    }

    /// The vendor driver the backend's work goes through.
    pub fn driver(&self) -> &Arc<dyn GpuDriver> {
        self.allocator.driver()
    }

    /// The device memory this backend's allocator holds (shared by every view of the device).
    pub fn memory(&self) -> AllocatorMemory {
        self.allocator.memory()
    }

    /// Hands cached blocks back to the runtime and starts the peaks over, so that what
    /// runs next is measured on its own.
    pub fn reset_memory(&self) -> Result<()> {
        self.allocator
            .release_cached()
            .map_err(|e| self.device(e))?;
        self.allocator.reset_peaks();
        Ok(())
    }

    /// Waits for every enqueued op and reports the first device fault among them.
    pub fn synchronize(&self) -> Result<()> {
        self.driver().synchronize().map_err(|e| self.device(e))
    }
}

impl Backend for GpuBackend {
    type Buffer = GpuBuffer;

    fn name(&self) -> String {
        self.name.clone()
    }

    /// Takes no memory yet: the op that writes the buffer backs it in the format it
    /// writes (see [`GpuBuffer`]).
    fn alloc(&self, len: usize) -> Result<GpuBuffer> {
        buffer::alloc(self, len)
    }

    fn zeros(&self, len: usize) -> Result<GpuBuffer> {
        buffer::zeros(self, len)
    }

    fn upload(&self, host: &[f32]) -> Result<GpuBuffer> {
        buffer::upload(self, host)
    }

    fn download(&self, buf: &GpuBuffer, host: &mut [f32]) -> Result<()> {
        buffer::download(self, buf, host)
    }

    fn buffer_len(&self, buf: &GpuBuffer) -> usize {
        buf.len
    }

    fn copy(&self, src: &GpuBuffer, dst: &mut GpuBuffer) -> Result<()> {
        elementwise::copy(self, src, dst)
    }

    fn fill(&self, buf: &mut GpuBuffer, value: f32) -> Result<()> {
        elementwise::fill(self, buf, value)
    }

    fn conv2d_forward(
        &self,
        p: &Conv2dParams,
        x: &GpuBuffer,
        w: &GpuBuffer,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        conv::forward(self, p, x, w, y)
    }

    fn conv2d_backward_data(
        &self,
        p: &Conv2dParams,
        dy: &GpuBuffer,
        w: &GpuBuffer,
        dx: &mut GpuBuffer,
    ) -> Result<()> {
        conv::backward_data(self, p, dy, w, dx)
    }

    fn conv2d_backward_filter(
        &self,
        p: &Conv2dParams,
        x: &GpuBuffer,
        dy: &GpuBuffer,
        dw: &mut GpuBuffer,
    ) -> Result<()> {
        conv::backward_filter(self, p, x, dy, dw)
    }

    fn batch_norm_forward_train(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &mut BatchNormBuffers<GpuBuffer>,
        saved: &mut BatchNormSaved<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        batchnorm::forward_train(self, p, x, bn, saved, y, BnEpilogue::None)
    }

    fn batch_norm_relu_forward_train(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &mut BatchNormBuffers<GpuBuffer>,
        saved: &mut BatchNormSaved<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        batchnorm::forward_train(self, p, x, bn, saved, y, BnEpilogue::Relu)
    }

    fn batch_norm_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &BatchNormBuffers<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        batchnorm::forward_eval(self, p, x, bn, y, BnEpilogue::None)
    }

    fn batch_norm_relu_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &BatchNormBuffers<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        batchnorm::forward_eval(self, p, x, bn, y, BnEpilogue::Relu)
    }

    fn batch_norm_backward(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        dy: &GpuBuffer,
        gamma: &GpuBuffer,
        saved: &BatchNormSaved<GpuBuffer>,
        dx: &mut GpuBuffer,
        grads: &mut BatchNormGrads<GpuBuffer>,
    ) -> Result<()> {
        batchnorm::backward(self, p, x, None, None, dy, gamma, saved, dx, grads)
    }

    fn batch_norm_relu_backward(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        y: &GpuBuffer,
        dy: &mut GpuBuffer,
        gamma: &GpuBuffer,
        saved: &BatchNormSaved<GpuBuffer>,
        dx: &mut GpuBuffer,
        grads: &mut BatchNormGrads<GpuBuffer>,
    ) -> Result<()> {
        batchnorm::backward(self, p, x, Some(y), None, dy, gamma, saved, dx, grads)
    }

    fn batch_norm_add_relu_forward_train(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        residual: &GpuBuffer,
        bn: &mut BatchNormBuffers<GpuBuffer>,
        saved: &mut BatchNormSaved<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        batchnorm::add_relu_forward_train(self, p, x, residual, bn, saved, y)
    }

    fn batch_norm_add_relu_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        residual: &GpuBuffer,
        bn: &BatchNormBuffers<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        batchnorm::add_relu_forward_eval(self, p, x, residual, bn, y)
    }

    fn batch_norm_add_relu_backward(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        y: &GpuBuffer,
        dy: &mut GpuBuffer,
        gamma: &GpuBuffer,
        saved: &BatchNormSaved<GpuBuffer>,
        dx: &mut GpuBuffer,
        grads: &mut BatchNormGrads<GpuBuffer>,
    ) -> Result<()> {
        batchnorm::add_relu_backward(self, p, x, y, dy, gamma, saved, dx, grads)
    }

    fn relu_forward(&self, x: &mut GpuBuffer) -> Result<()> {
        elementwise::relu_forward(self, x)
    }

    fn relu_backward(&self, y: &GpuBuffer, dy: &mut GpuBuffer) -> Result<()> {
        elementwise::relu_backward(self, y, dy)
    }

    fn max_pool_forward(&self, p: &PoolParams, x: &GpuBuffer, y: &mut GpuBuffer) -> Result<()> {
        pool::max_forward(self, p, x, y)
    }

    fn max_pool_backward(
        &self,
        p: &PoolParams,
        x: &GpuBuffer,
        dy: &GpuBuffer,
        dx: &mut GpuBuffer,
    ) -> Result<()> {
        pool::max_backward(self, p, x, dy, dx)
    }

    fn global_avg_pool_forward(
        &self,
        p: &GlobalPoolParams,
        x: &GpuBuffer,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        pool::global_avg_forward(self, p, x, y)
    }

    fn global_avg_pool_backward(
        &self,
        p: &GlobalPoolParams,
        dy: &GpuBuffer,
        dx: &mut GpuBuffer,
    ) -> Result<()> {
        pool::global_avg_backward(self, p, dy, dx)
    }

    fn linear_forward(
        &self,
        p: &LinearParams,
        x: &GpuBuffer,
        w: &GpuBuffer,
        b: &GpuBuffer,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        linear::forward(self, p, x, w, b, y)
    }

    fn linear_backward(
        &self,
        p: &LinearParams,
        x: &GpuBuffer,
        w: &GpuBuffer,
        dy: &GpuBuffer,
        dx: Option<&mut GpuBuffer>,
        dw: &mut GpuBuffer,
        db: &mut GpuBuffer,
    ) -> Result<()> {
        linear::backward(self, p, x, w, dy, dx, dw, db)
    }

    fn cross_entropy_forward(
        &self,
        p: &CrossEntropyParams,
        logits: &GpuBuffer,
        labels: &GpuBuffer,
        loss: &mut GpuBuffer,
        correct: &mut GpuBuffer,
    ) -> Result<()> {
        loss::forward(self, p, logits, labels, loss, correct)
    }

    fn cross_entropy_backward(
        &self,
        p: &CrossEntropyParams,
        logits: &GpuBuffer,
        labels: &GpuBuffer,
        dlogits: &mut GpuBuffer,
    ) -> Result<()> {
        loss::backward(self, p, logits, labels, dlogits)
    }

    fn add(&self, a: &GpuBuffer, b: &GpuBuffer, out: &mut GpuBuffer) -> Result<()> {
        elementwise::add(self, a, b, out)
    }

    fn add_assign(&self, dst: &mut GpuBuffer, src: &GpuBuffer) -> Result<()> {
        elementwise::add_assign(self, dst, src)
    }

    fn scale(&self, x: &mut GpuBuffer, alpha: f32) -> Result<()> {
        elementwise::scale(self, x, alpha)
    }

    fn axpy(&self, alpha: f32, x: &GpuBuffer, y: &mut GpuBuffer) -> Result<()> {
        elementwise::axpy(self, alpha, x, y)
    }

    fn momentum_update(
        &self,
        w: &mut GpuBuffer,
        g: &GpuBuffer,
        b: &mut GpuBuffer,
        momentum: f32,
        step: f32,
        decay: f32,
    ) -> Result<()> {
        optimizer::momentum_update(self, w, g, b, momentum, step, decay)
    }

    fn sum_squares(&self, x: &GpuBuffer, out: &mut GpuBuffer, index: usize) -> Result<()> {
        optimizer::sum_squares(self, x, out, index)
    }

    fn momentum_update_many(
        &self,
        momentum: f32,
        updates: &mut [MomentumStep<'_, GpuBuffer>],
    ) -> Result<()> {
        optimizer::momentum_update_many(self, momentum, updates)
    }

    fn sum_squares_many(&self, xs: &[(&GpuBuffer, usize)], out: &mut GpuBuffer) -> Result<()> {
        optimizer::sum_squares_many(self, xs, out)
    }

    fn has_non_finite(&self, x: &GpuBuffer) -> Result<bool> {
        optimizer::has_non_finite(self, x)
    }
}
