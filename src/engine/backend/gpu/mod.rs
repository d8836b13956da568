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
pub mod cache;
pub mod code_object;
mod conv_gemm;
pub mod cuda;
pub mod cudnn;
pub mod driver;
#[cfg(test)]
mod footprint_tests;
pub mod hip;
pub mod launch;
mod multi_tensor;
pub mod options;
pub mod source;
#[cfg(test)]
mod stand_in;

use std::sync::Arc;

use super::{
    unfused, Backend, BatchNormBuffers, BatchNormGrads, BatchNormParams, BatchNormSaved,
    Conv2dParams, CrossEntropyParams, GlobalPoolParams, LinearParams, MomentumStep, PoolParams,
};
use crate::engine::{EngineError, Precision, Result};
use allocator::{AllocatorMemory, DeviceAllocator};
use driver::{
    DevicePtr, DnnConv, DnnConvOp, DriverError, Gemm, GemmTypes, GpuDriver, KernelArg, LaunchShape,
    Transpose,
};
use options::{ConvPath, GpuOptions};
use source::{format_suffix, storage_kernel};

/// Column-buffer budget of one im2col chunk, in elements (512 MiB of f32).
pub const IM2COL_BUDGET_ELEMS: usize = 1 << 27;

/// Device memory kept for reuse between steps.
pub const DEFAULT_CACHE_LIMIT_BYTES: usize = 64 << 30;

/// `len` elements on the device, in the format `storage` says (f32 unless an op of a
/// 16-bit backend wrote them). A buffer from [`Backend::alloc`] has no memory until the op
/// writing it picks its format, so a 16-bit activation takes two bytes an element; every
/// other buffer has room for `len` values of its format.
#[derive(Debug)]
pub struct GpuBuffer {
    ptr: DevicePtr,
    len: usize,
    /// Bytes of the allocator block behind `ptr`; 0 while no op has written the buffer.
    class: usize,
    allocator: Arc<DeviceAllocator>,
    storage: Precision,
}

impl GpuBuffer {
    /// The address of the buffer's `len` f32 values, for a library that reads and writes
    /// them directly (NCCL); `None` while it holds no values or holds 16-bit ones.
    pub fn f32_device_ptr(&self) -> Option<DevicePtr> {
        (self.is_backed() && self.storage == Precision::Fp32).then_some(self.ptr)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The format the elements are stored in.
    pub fn storage(&self) -> Precision {
        self.storage
    }

    fn is_backed(&self) -> bool {
        self.class > 0
    }

    /// The address of element `elems` in the buffer's format (an op tags its output
    /// before it addresses into it).
    fn at(&self, elems: usize) -> DevicePtr {
        self.ptr.offset(elems * element_bytes(self.storage))
    }
}

fn element_bytes(format: Precision) -> usize {
    if format.is_reduced() {
        2
    } else {
        4
    }
}

/// An operand in the format an op needs: the caller's buffer, or a converted copy.
enum Operand<'a> {
    Borrowed(&'a GpuBuffer),
    Converted(GpuBuffer),
}

impl std::ops::Deref for Operand<'_> {
    type Target = GpuBuffer;

    fn deref(&self) -> &GpuBuffer {
        match self {
            Operand::Borrowed(b) => b,
            Operand::Converted(b) => b,
        }
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        if self.is_backed() {
            self.allocator.give_back(self.ptr, self.class);
        }
    }
}

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

/// Device time per kernel and GEMM, gathered by synchronising around every launch: slow,
/// and only for finding where a step's time goes.
#[derive(Debug, Default)]
pub struct Profile {
    entries: std::sync::Mutex<std::collections::HashMap<String, (u64, f64)>>,
}

impl Profile {
    fn add(&self, name: &str, seconds: f64) {
        let mut entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = entries.entry(name.to_string()).or_default();
        entry.0 += 1;
        entry.1 += seconds;
    }

    /// (name, calls, seconds), most time first.
    pub fn report(&self) -> Vec<(String, u64, f64)> {
        let entries = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut rows: Vec<_> = entries
            .iter()
            .map(|(name, &(calls, secs))| (name.clone(), calls, secs))
            .collect();
        rows.sort_by(|a, b| b.2.total_cmp(&a.2));
        rows
    }

    pub fn clear(&self) {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
    }
}

impl GpuBackend {
    /// A backend on `driver` with the speed switches the environment sets (see
    /// [`options`]).
    pub fn new(driver: Arc<dyn GpuDriver>) -> Self {
        Self::with_options(driver, GpuOptions::from_env())
    }

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

    pub fn precision(&self) -> Precision {
        self.precision
    }

    fn base_name(&self) -> &str {
        self.name.split(" (").next().unwrap_or(&self.name)
    }

    /// A buffer for the backend's own use with room for `len` values of `format`.
    fn scratch(&self, len: usize, format: Precision) -> Result<GpuBuffer> {
        let mut buf = self.alloc(len)?;
        self.output(&mut buf, format)?;
        Ok(buf)
    }

    /// Readies `buf` for an op to write `format` values into: a buffer not yet backed, or
    /// whose block is too small for the format, gets a block of its own (what it held is
    /// not kept, as the op overwrites it); one with room keeps its block and contents.
    fn output(&self, buf: &mut GpuBuffer, format: Precision) -> Result<()> {
        let bytes = buf.len * element_bytes(format);
        if !buf.is_backed() || buf.class < bytes {
            // The old block goes back first, so it may serve this very request: work runs
            // on one in-order stream, and nothing reads the old contents any more.
            if buf.is_backed() {
                self.allocator.give_back(buf.ptr, buf.class);
                buf.class = 0;
            }
            let (ptr, class) = self.allocator.take(bytes).map_err(|e| self.device(e))?;
            buf.ptr = ptr;
            buf.class = class;
        }
        buf.storage = format;
        Ok(())
    }

    /// For an operand an op reads: a buffer no op has written holds nothing to read.
    fn written(&self, op: &'static str, what: &'static str, buf: &GpuBuffer) -> Result<()> {
        if buf.is_backed() {
            Ok(())
        } else {
            Err(EngineError::InvalidParameter {
                op,
                reason: format!("{what} is read before any op wrote it"),
            })
        }
    }

    /// `buf` in `format`: itself when it is already, else a converted copy.
    fn in_format<'a>(&self, buf: &'a GpuBuffer, format: Precision) -> Result<Operand<'a>> {
        if buf.storage == format {
            return Ok(Operand::Borrowed(buf));
        }
        if buf.storage.is_reduced() && format.is_reduced() {
            let wide = self.in_format(buf, Precision::Fp32)?;
            return Ok(Operand::Converted(self.convert(&wide, format)?));
        }
        Ok(Operand::Converted(self.convert(buf, format)?))
    }

    /// A copy of `buf` (f32 or 16-bit) in `format` (16-bit or f32, the other one).
    fn convert(&self, buf: &GpuBuffer, format: Precision) -> Result<GpuBuffer> {
        let mut out = self.alloc(buf.len)?;
        self.convert_into(buf, &mut out, format)?;
        Ok(out)
    }

    fn convert_into(&self, src: &GpuBuffer, dst: &mut GpuBuffer, format: Precision) -> Result<()> {
        let kernel = if format.is_reduced() {
            format!("store_{}", format_suffix(format))
        } else {
            format!("load_{}", format_suffix(src.storage))
        };
        self.output(dst, format)?;
        self.elementwise(
            &kernel,
            src.len,
            &[
                KernelArg::Ptr(src.ptr),
                KernelArg::Ptr(dst.ptr),
                i64_arg(src.len),
            ],
        )
    }

    /// An activation operand as f32 values at this backend's storage precision: a 16-bit
    /// buffer widened (exactly), or an f32 buffer rounded through the 16-bit format.
    fn stored_as_f32<'a>(&self, buf: &'a GpuBuffer) -> Result<Operand<'a>> {
        if buf.storage == Precision::Fp32 && self.precision.is_reduced() {
            let mut copy = self.alloc(buf.len)?;
            self.copy(buf, &mut copy)?;
            self.round_to_storage(&copy)?;
            return Ok(Operand::Converted(copy));
        }
        self.in_format(buf, Precision::Fp32)
    }

    /// Rounds the f32 values of `buf` to this backend's 16-bit format, as a 16-bit result
    /// turned into f32 is (a weight gradient, an activation left in f32).
    fn round_to_storage(&self, buf: &GpuBuffer) -> Result<()> {
        if !self.precision.is_reduced() {
            return Ok(());
        }
        self.elementwise(
            &format!("round_{}", format_suffix(self.precision)),
            buf.len,
            &[KernelArg::Ptr(buf.ptr), i64_arg(buf.len)],
        )
    }

    /// Turns a 16-bit buffer into f32 in place (exactly), for an op that updates it in f32.
    fn widen_in_place(&self, buf: &mut GpuBuffer) -> Result<()> {
        if buf.storage == Precision::Fp32 {
            return Ok(());
        }
        let mut wide = self.convert(buf, Precision::Fp32)?;
        std::mem::swap(buf, &mut wide);
        Ok(())
    }

    /// For ops that compute in f32 only: `buf` must hold f32.
    fn require_f32(&self, op: &'static str, what: &'static str, buf: &GpuBuffer) -> Result<()> {
        if buf.storage == Precision::Fp32 {
            Ok(())
        } else {
            Err(EngineError::InvalidParameter {
                op,
                reason: format!("{what} holds {} values; this op takes f32", buf.storage),
            })
        }
    }

    /// The same device with every kernel and GEMM timed into `profile`.
    pub fn profiled(&self, profile: Arc<Profile>) -> Self {
        GpuBackend {
            profile: Some(profile),
            ..self.clone()
        }
    }

    fn timed<T>(&self, name: &str, work: impl FnOnce() -> Result<T>) -> Result<T> {
        let Some(profile) = &self.profile else {
            return work();
        };
        self.synchronize()?;
        let started = std::time::Instant::now();
        let out = work()?;
        self.synchronize()?;
        profile.add(name, started.elapsed().as_secs_f64());
        Ok(out)
    }

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

    fn device(&self, error: DriverError) -> EngineError {
        EngineError::Device {
            backend: self.name.clone(),
            reason: error.to_string(),
        }
    }

    fn launch(&self, kernel: &str, shape: LaunchShape, args: &[KernelArg]) -> Result<()> {
        self.timed(kernel, || {
            self.driver()
                .launch(kernel, shape, args)
                .map_err(|e| self.device(e))
        })
    }

    fn gemm(&self, gemm: Gemm) -> Result<()> {
        let name = format!(
            "gemm {}{}",
            if gemm.trans_a == Transpose::Yes {
                "T"
            } else {
                "N"
            },
            if gemm.trans_b == Transpose::Yes {
                "T"
            } else {
                "N"
            }
        );
        self.timed(&name, || {
            self.driver().gemm(&gemm).map_err(|e| self.device(e))
        })
    }

    /// An operand the op reads: on this device, of length `len`, and written.
    fn check(
        &self,
        op: &'static str,
        what: &'static str,
        buf: &GpuBuffer,
        len: usize,
    ) -> Result<()> {
        self.check_output(op, what, buf, len)?;
        self.written(op, what, buf)
    }

    /// A buffer the op writes: on this device and of length `len`.
    fn check_output(
        &self,
        op: &'static str,
        what: &'static str,
        buf: &GpuBuffer,
        len: usize,
    ) -> Result<()> {
        if !Arc::ptr_eq(&buf.allocator, &self.allocator) {
            return Err(EngineError::InvalidParameter {
                op,
                reason: format!("buffer {what} belongs to another device"),
            });
        }
        if buf.len != len {
            return Err(EngineError::BufferLength {
                op,
                what,
                expected: len,
                got: buf.len,
            });
        }
        Ok(())
    }

    fn elementwise(&self, kernel: &str, n: usize, args: &[KernelArg]) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch(kernel, launch::elementwise(n), args)
    }

    /// A kernel that handles four elements per thread.
    fn elementwise_vec4(&self, kernel: &str, n: usize, args: &[KernelArg]) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        self.launch(kernel, launch::elementwise(n.div_ceil(4)), args)
    }

    /// The element-wise kernel `f32_kernel`, or its 16-bit form, for buffers in `format`
    /// (four elements per thread in every format).
    fn storage_elementwise(
        &self,
        f32_kernel: &str,
        format: Precision,
        n: usize,
        args: &[KernelArg],
    ) -> Result<()> {
        self.elementwise_vec4(&storage_kernel(f32_kernel, format), n, args)
    }

    /// Weights in the DNN library's order (output channel slowest) and in `format`.
    fn weights_for_dnn(
        &self,
        p: &Conv2dParams,
        w: &GpuBuffer,
        format: Precision,
    ) -> Result<GpuBuffer> {
        self.require_f32("conv2d", "w", w)?;
        let out = self.scratch(p.weight_len(), format)?;
        dims_fit_i32("conv2d", &[p.weight_len()])?;
        self.elementwise(
            &storage_kernel("hwio_to_ohwi", format),
            p.weight_len(),
            &[
                KernelArg::Ptr(w.ptr),
                KernelArg::Ptr(out.ptr),
                i32_arg(p.kernel_h * p.kernel_w),
                i32_arg(p.in_c),
                i32_arg(p.out_c),
            ],
        )?;
        Ok(out)
    }

    fn dnn_conv(&self, name: &str, conv: DnnConv) -> Result<()> {
        self.timed(name, || {
            let ran = match self.driver().dnn_conv(&conv) {
                // The DNN library takes its workspace from the runtime, not from the allocator:
                // blocks the allocator caches may be what stands in its way.
                Err(DriverError::OutOfMemory { .. }) => {
                    self.allocator
                        .release_cached()
                        .map_err(|e| self.device(e))?;
                    self.driver()
                        .dnn_conv(&conv)
                        .map_err(|e| EngineError::Device {
                            backend: self.name.clone(),
                            reason: format!(
                                "{name}: the DNN library's workspace, with the allocator's cache \
                                 released: {e}"
                            ),
                        })?
                }
                other => other.map_err(|e| self.device(e))?,
            };
            match ran {
                true => Ok(()),
                false => Err(self.device(DriverError::InvalidArgument(
                    "the driver lost its DNN library".into(),
                ))),
            }
        })
    }

    /// The shape arguments of the im2col/col2im kernels, after `first_image` the number of
    /// images (or, for the whole-row im2col, output rows) the launch covers.
    fn conv_args(p: &Conv2dParams, first_image: usize, count: usize) -> Vec<KernelArg> {
        [
            first_image,
            count,
            p.in_h,
            p.in_w,
            p.in_c,
            p.kernel_h,
            p.kernel_w,
            p.stride,
            p.padding,
            p.out_h(),
            p.out_w(),
        ]
        .iter()
        .map(|&v| i32_arg(v))
        .collect()
    }

    /// Image chunks of a non-pointwise convolution and the column scratch they share, in
    /// `format`.
    fn conv_chunks(&self, p: &Conv2dParams, format: Precision) -> Result<(usize, GpuBuffer)> {
        let k = p.kernel_h * p.kernel_w * p.in_c;
        let rows_per_image = p.out_h() * p.out_w();
        let images = launch::im2col_images(p.batch, rows_per_image, k, IM2COL_BUDGET_ELEMS);
        let col = self.scratch(images * rows_per_image * k, format)?;
        Ok((images, col))
    }

    /// One pass of a convolution by its implicit-GEMM kernel (the form for this
    /// backend's storage), its operands `a` and `b` in that storage: `c` is y or dx in
    /// the storage format, or the f32 dW. The filter gradient's long depth is split over
    /// more blocks when its output alone has too few tiles to fill the device, the splits
    /// then summed in order.
    fn implicit_conv(
        &self,
        op: &'static str,
        pass: conv_gemm::Pass,
        p: &Conv2dParams,
        a: DevicePtr,
        b: DevicePtr,
        c: DevicePtr,
    ) -> Result<()> {
        dims_fit_i32(op, &[p.input_len(), p.output_len(), p.weight_len()])?;
        let (rows, cols, depth) = pass.dims(p);
        let (splits, split_depth) = if pass == conv_gemm::Pass::BackwardFilter {
            launch::implicit_splits(rows, cols, depth, self.driver().info().multiprocessors)
        } else {
            (
                1,
                depth.div_ceil(launch::IMPLICIT_SLICE).max(1) * launch::IMPLICIT_SLICE,
            )
        };
        dims_fit_i32(op, &[split_depth])?;
        let partial = match splits {
            1 => None,
            _ => Some(self.scratch(splits * rows * cols, Precision::Fp32)?),
        };
        let mut args = vec![
            KernelArg::Ptr(a),
            KernelArg::Ptr(b),
            KernelArg::Ptr(partial.as_ref().map_or(c, |buf| buf.ptr)),
        ];
        args.extend(
            [
                p.batch,
                p.in_h,
                p.in_w,
                p.in_c,
                p.out_c,
                p.kernel_h,
                p.kernel_w,
                p.stride,
                p.padding,
                p.out_h(),
                p.out_w(),
                split_depth,
            ]
            .map(i32_arg),
        );
        self.launch(
            &storage_kernel(pass.implicit_kernel(), self.precision),
            launch::implicit_gemm(rows, cols, splits),
            &args,
        )?;
        let Some(partial) = partial else {
            return Ok(());
        };
        self.elementwise(
            "conv_split_sum",
            rows * cols,
            &[
                KernelArg::Ptr(partial.ptr),
                KernelArg::Ptr(c),
                i32_arg(splits),
                i64_arg(rows * cols),
            ],
        )
    }

    /// `entries` copied to the device, for a kernel that reads them as a table.
    fn device_table<T: Copy>(&self, entries: &[T]) -> Result<GpuBuffer> {
        let bytes = multi_tensor::table_bytes(entries);
        let table = self.scratch(bytes.len().div_ceil(4), Precision::Fp32)?;
        self.driver()
            .copy_to_device(table.ptr, bytes)
            .map_err(|e| self.device(e))?;
        Ok(table)
    }

    /// The column matrix of `images` images from `first`, in x's format.
    fn im2col(
        &self,
        p: &Conv2dParams,
        x: &GpuBuffer,
        col: &GpuBuffer,
        first: usize,
        images: usize,
    ) -> Result<()> {
        let k = p.kernel_h * p.kernel_w * p.in_c;
        let rows = images * p.out_h() * p.out_w();
        let mut args = vec![KernelArg::Ptr(x.ptr), KernelArg::Ptr(col.ptr)];
        if p.in_c >= launch::IM2COL_ROWS_MIN_CHANNELS {
            args.extend(Self::conv_args(p, first, rows));
            let shape = launch::block_per_output_row(rows, p.kernel_w * p.in_c);
            return self.launch(&storage_kernel("im2col_rows", x.storage), shape, &args);
        }
        args.extend(Self::conv_args(p, first, images));
        self.elementwise(&storage_kernel("im2col", x.storage), rows * k, &args)
    }
}

/// What batch norm's element-wise pass applies after the affine map.
#[derive(Clone, Copy)]
enum BnEpilogue<'a> {
    None,
    Relu,
    /// ReLU of the sum with this residual (in the storage format).
    AddRelu(&'a GpuBuffer),
}

fn i32_arg(v: usize) -> KernelArg {
    KernelArg::I32(v.min(i32::MAX as usize) as i32)
}

fn i64_arg(v: usize) -> KernelArg {
    KernelArg::I64(v as i64)
}

fn dims_fit_i32(op: &'static str, dims: &[usize]) -> Result<()> {
    if dims.iter().all(|&d| d <= i32::MAX as usize) {
        Ok(())
    } else {
        Err(EngineError::InvalidParameter {
            op,
            reason: format!("dimensions {dims:?} exceed the kernels' 32-bit index range"),
        })
    }
}

fn as_bytes(values: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding and every byte pattern is a valid u8.
    unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    }
}

fn as_bytes_mut(values: &mut [f32]) -> &mut [u8] {
    // SAFETY: every byte pattern written is a valid f32 (the device wrote f32 values).
    unsafe {
        std::slice::from_raw_parts_mut(
            values.as_mut_ptr().cast::<u8>(),
            std::mem::size_of_val(values),
        )
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
        Ok(GpuBuffer {
            ptr: DevicePtr(0),
            len,
            class: 0,
            allocator: self.allocator.clone(),
            storage: self.precision,
        })
    }

    fn zeros(&self, len: usize) -> Result<GpuBuffer> {
        let buf = self.scratch(len, Precision::Fp32)?;
        if len > 0 {
            self.driver()
                .zero(buf.ptr, len * 4)
                .map_err(|e| self.device(e))?;
        }
        Ok(buf)
    }

    fn upload(&self, host: &[f32]) -> Result<GpuBuffer> {
        let buf = self.scratch(host.len(), Precision::Fp32)?;
        if !host.is_empty() {
            self.driver()
                .copy_to_device(buf.ptr, as_bytes(host))
                .map_err(|e| self.device(e))?;
        }
        Ok(buf)
    }

    fn download(&self, buf: &GpuBuffer, host: &mut [f32]) -> Result<()> {
        if host.len() != buf.len {
            return Err(EngineError::BufferLength {
                op: "download",
                what: "host destination",
                expected: buf.len,
                got: host.len(),
            });
        }
        self.check("download", "source", buf, buf.len)?;
        if host.is_empty() {
            return self.synchronize();
        }
        let buf = self.in_format(buf, Precision::Fp32)?;
        self.driver()
            .copy_to_host(as_bytes_mut(host), buf.ptr)
            .map_err(|e| self.device(e))
    }

    fn buffer_len(&self, buf: &GpuBuffer) -> usize {
        buf.len
    }

    fn copy(&self, src: &GpuBuffer, dst: &mut GpuBuffer) -> Result<()> {
        self.check("copy", "source", src, src.len)?;
        self.check_output("copy", "destination", dst, src.len)?;
        self.output(dst, src.storage)?;
        if src.len == 0 {
            return Ok(());
        }
        self.driver()
            .copy_on_device(dst.ptr, src.ptr, src.len * element_bytes(src.storage))
            .map_err(|e| self.device(e))
    }

    fn fill(&self, buf: &mut GpuBuffer, value: f32) -> Result<()> {
        self.check_output("fill", "buffer", buf, buf.len)?;
        self.output(buf, Precision::Fp32)?;
        self.elementwise_vec4(
            "fill_f32",
            buf.len,
            &[
                KernelArg::Ptr(buf.ptr),
                i64_arg(buf.len),
                KernelArg::F32(value),
            ],
        )
    }

    fn conv2d_forward(
        &self,
        p: &Conv2dParams,
        x: &GpuBuffer,
        w: &GpuBuffer,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "conv2d_forward";
        p.validate()?;
        self.check(OP, "x", x, p.input_len())?;
        self.check(OP, "w", w, p.weight_len())?;
        self.check_output(OP, "y", y, p.output_len())?;
        self.require_f32(OP, "w", w)?;
        let s = self.precision;
        let x = self.in_format(x, s)?;
        self.output(y, s)?;
        let cout = p.out_c;
        let rows_per_image = p.out_h() * p.out_w();
        if p.is_pointwise() {
            let w = self.in_format(w, s)?;
            return self.gemm(
                conv_gemm::forward(p, p.batch * rows_per_image, x.ptr, w.ptr, y.ptr)
                    .with_types(s, s),
            );
        }
        if self.conv == ConvPath::Dnn {
            let w_dnn = self.weights_for_dnn(p, w, s)?;
            return self.dnn_conv(
                "cudnn forward",
                DnnConv {
                    op: DnnConvOp::Forward,
                    shape: *p,
                    x: x.ptr,
                    w: w_dnn.ptr,
                    y: y.ptr,
                    dtype: s,
                },
            );
        }
        let w = self.in_format(w, s)?;
        if self.conv == ConvPath::ImplicitGemm {
            return self.implicit_conv(OP, conv_gemm::Pass::Forward, p, x.ptr, w.ptr, y.ptr);
        }
        let (chunk, col) = self.conv_chunks(p, s)?;
        for first in (0..p.batch).step_by(chunk) {
            let images = chunk.min(p.batch - first);
            self.im2col(p, &x, &col, first, images)?;
            self.gemm(
                conv_gemm::forward(
                    p,
                    images * rows_per_image,
                    col.ptr,
                    w.ptr,
                    y.at(first * rows_per_image * cout),
                )
                .with_types(s, s),
            )?;
        }
        Ok(())
    }

    fn conv2d_backward_data(
        &self,
        p: &Conv2dParams,
        dy: &GpuBuffer,
        w: &GpuBuffer,
        dx: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "conv2d_backward_data";
        p.validate()?;
        self.check(OP, "dy", dy, p.output_len())?;
        self.check(OP, "w", w, p.weight_len())?;
        self.check_output(OP, "dx", dx, p.input_len())?;
        self.require_f32(OP, "w", w)?;
        let s = self.precision;
        let dy = self.in_format(dy, s)?;
        self.output(dx, s)?;
        let cout = p.out_c;
        let rows_per_image = p.out_h() * p.out_w();
        if p.is_pointwise() {
            let w = self.in_format(w, s)?;
            return self.gemm(
                conv_gemm::backward_data(p, p.batch * rows_per_image, dy.ptr, w.ptr, dx.ptr)
                    .with_types(s, s),
            );
        }
        if self.conv == ConvPath::Dnn {
            let w_dnn = self.weights_for_dnn(p, w, s)?;
            return self.dnn_conv(
                "cudnn backward data",
                DnnConv {
                    op: DnnConvOp::BackwardData,
                    shape: *p,
                    x: dx.ptr,
                    w: w_dnn.ptr,
                    y: dy.ptr,
                    dtype: s,
                },
            );
        }
        let w = self.in_format(w, s)?;
        if self.conv == ConvPath::ImplicitGemm {
            // Summed in f32 and rounded once, as col2im does.
            return self.implicit_conv(OP, conv_gemm::Pass::BackwardData, p, dy.ptr, w.ptr, dx.ptr);
        }
        // The column gradient stays f32 so that col2im sums before the one rounding.
        let (chunk, dcol) = self.conv_chunks(p, Precision::Fp32)?;
        for first in (0..p.batch).step_by(chunk) {
            let images = chunk.min(p.batch - first);
            self.gemm(
                conv_gemm::backward_data(
                    p,
                    images * rows_per_image,
                    dy.at(first * rows_per_image * cout),
                    w.ptr,
                    dcol.ptr,
                )
                .with_types(s, Precision::Fp32),
            )?;
            let total = images * p.in_h * p.in_w * p.in_c;
            dims_fit_i32(OP, &[total])?;
            let mut args = vec![KernelArg::Ptr(dcol.ptr), KernelArg::Ptr(dx.ptr)];
            args.extend(Self::conv_args(p, first, images));
            self.elementwise(&storage_kernel("col2im", s), total, &args)?;
        }
        Ok(())
    }

    fn conv2d_backward_filter(
        &self,
        p: &Conv2dParams,
        x: &GpuBuffer,
        dy: &GpuBuffer,
        dw: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "conv2d_backward_filter";
        p.validate()?;
        self.check(OP, "x", x, p.input_len())?;
        self.check(OP, "dy", dy, p.output_len())?;
        self.check_output(OP, "dw", dw, p.weight_len())?;
        let s = self.precision;
        let x = self.in_format(x, s)?;
        let dy = self.in_format(dy, s)?;
        self.output(dw, Precision::Fp32)?;
        let cout = p.out_c;
        let rows_per_image = p.out_h() * p.out_w();
        // 16-bit products accumulate in an f32 dw, rounded once at the end, as the
        // gradient of a 16-bit convolution is before it reaches the f32 master weight.
        if p.is_pointwise() {
            self.gemm(
                conv_gemm::backward_filter(
                    p,
                    p.batch * rows_per_image,
                    x.ptr,
                    dy.ptr,
                    dw.ptr,
                    false,
                )
                .with_types(s, Precision::Fp32),
            )?;
            return self.round_to_storage(dw);
        }
        if self.conv == ConvPath::Dnn {
            let dw_dnn = self.scratch(p.weight_len(), s)?;
            self.dnn_conv(
                "cudnn backward filter",
                DnnConv {
                    op: DnnConvOp::BackwardFilter,
                    shape: *p,
                    x: x.ptr,
                    w: dw_dnn.ptr,
                    y: dy.ptr,
                    dtype: s,
                },
            )?;
            dims_fit_i32(OP, &[p.weight_len()])?;
            return self.elementwise(
                &storage_kernel("ohwi_to_hwio", s),
                p.weight_len(),
                &[
                    KernelArg::Ptr(dw_dnn.ptr),
                    KernelArg::Ptr(dw.ptr),
                    i32_arg(p.kernel_h * p.kernel_w),
                    i32_arg(p.in_c),
                    i32_arg(p.out_c),
                ],
            );
        }
        if self.conv == ConvPath::ImplicitGemm {
            self.implicit_conv(
                OP,
                conv_gemm::Pass::BackwardFilter,
                p,
                x.ptr,
                dy.ptr,
                dw.ptr,
            )?;
            return self.round_to_storage(dw);
        }
        let (chunk, col) = self.conv_chunks(p, s)?;
        for first in (0..p.batch).step_by(chunk) {
            let images = chunk.min(p.batch - first);
            self.im2col(p, &x, &col, first, images)?;
            self.gemm(
                conv_gemm::backward_filter(
                    p,
                    images * rows_per_image,
                    col.ptr,
                    dy.at(first * rows_per_image * cout),
                    dw.ptr,
                    first > 0,
                )
                .with_types(s, Precision::Fp32),
            )?;
        }
        self.round_to_storage(dw)
    }

    fn batch_norm_forward_train(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &mut BatchNormBuffers<GpuBuffer>,
        saved: &mut BatchNormSaved<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        self.bn_forward_train(p, x, bn, saved, y, BnEpilogue::None)
    }

    fn batch_norm_relu_forward_train(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &mut BatchNormBuffers<GpuBuffer>,
        saved: &mut BatchNormSaved<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        self.bn_forward_train(p, x, bn, saved, y, BnEpilogue::Relu)
    }

    fn batch_norm_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &BatchNormBuffers<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        self.bn_forward_eval(p, x, bn, y, BnEpilogue::None)
    }

    fn batch_norm_relu_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &BatchNormBuffers<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        self.bn_forward_eval(p, x, bn, y, BnEpilogue::Relu)
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
        self.bn_backward(p, x, None, None, dy, gamma, saved, dx, grads)
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
        self.bn_backward(p, x, Some(y), None, dy, gamma, saved, dx, grads)
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
        if !self.fused_bn {
            return unfused::batch_norm_add_relu_forward_train(self, p, x, residual, bn, saved, y);
        }
        self.bn_forward_train(p, x, bn, saved, y, BnEpilogue::AddRelu(residual))
    }

    fn batch_norm_add_relu_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        residual: &GpuBuffer,
        bn: &BatchNormBuffers<GpuBuffer>,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        if !self.fused_bn {
            return unfused::batch_norm_add_relu_forward_eval(self, p, x, residual, bn, y);
        }
        self.bn_forward_eval(p, x, bn, y, BnEpilogue::AddRelu(residual))
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
        if !self.fused_bn {
            return unfused::batch_norm_add_relu_backward(
                self, p, x, y, dy, gamma, saved, dx, grads,
            );
        }
        self.check("batch_norm_add_relu_backward", "dy", dy, dy.len)?;
        // The masked gradient is written over dy in the storage format.
        if dy.storage != self.precision {
            let mut stored = self.alloc(dy.len)?;
            self.convert_into(dy, &mut stored, self.precision)?;
            *dy = stored;
        }
        let masked = Some(dy.ptr);
        self.bn_backward(p, x, Some(y), masked, dy, gamma, saved, dx, grads)
    }

    /// In place, in whatever format x holds (ReLU selects stored values).
    fn relu_forward(&self, x: &mut GpuBuffer) -> Result<()> {
        self.check("relu_forward", "x", x, x.len)?;
        self.storage_elementwise(
            "relu_forward",
            x.storage,
            x.len,
            &[KernelArg::Ptr(x.ptr), i64_arg(x.len)],
        )
    }

    fn relu_backward(&self, y: &GpuBuffer, dy: &mut GpuBuffer) -> Result<()> {
        self.check("relu_backward", "y", y, y.len)?;
        self.check("relu_backward", "dy", dy, y.len)?;
        // The mask reads y as it is: formats that differ meet in f32, where nothing rounds.
        if y.storage != dy.storage {
            self.widen_in_place(dy)?;
        }
        let y = self.in_format(y, dy.storage)?;
        self.storage_elementwise(
            "relu_backward",
            dy.storage,
            y.len,
            &[
                KernelArg::Ptr(y.ptr),
                KernelArg::Ptr(dy.ptr),
                i64_arg(y.len),
            ],
        )
    }

    fn max_pool_forward(&self, p: &PoolParams, x: &GpuBuffer, y: &mut GpuBuffer) -> Result<()> {
        const OP: &str = "max_pool_forward";
        p.validate()?;
        self.check(OP, "x", x, p.input_len())?;
        self.check_output(OP, "y", y, p.output_len())?;
        dims_fit_i32(OP, &[p.batch, p.in_h, p.in_w, p.channels])?;
        let x = self.in_format(x, self.precision)?;
        self.output(y, self.precision)?;
        self.elementwise(
            &storage_kernel("max_pool_forward", self.precision),
            p.output_len(),
            &[
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(y.ptr),
                i32_arg(p.batch),
                i32_arg(p.in_h),
                i32_arg(p.in_w),
                i32_arg(p.channels),
                i32_arg(p.kernel),
                i32_arg(p.stride),
                i32_arg(p.padding),
                i32_arg(p.out_h()),
                i32_arg(p.out_w()),
            ],
        )
    }

    fn max_pool_backward(
        &self,
        p: &PoolParams,
        x: &GpuBuffer,
        dy: &GpuBuffer,
        dx: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "max_pool_backward";
        p.validate()?;
        self.check(OP, "x", x, p.input_len())?;
        self.check(OP, "dy", dy, p.output_len())?;
        self.check_output(OP, "dx", dx, p.input_len())?;
        dims_fit_i32(OP, &[p.input_len(), p.output_len()])?;
        let s = self.precision;
        let x = self.in_format(x, s)?;
        let dy = self.in_format(dy, s)?;
        self.output(dx, s)?;
        let shape_args = [
            i32_arg(p.batch),
            i32_arg(p.in_h),
            i32_arg(p.in_w),
            i32_arg(p.channels),
            i32_arg(p.kernel),
            i32_arg(p.stride),
            i32_arg(p.padding),
            i32_arg(p.out_h()),
            i32_arg(p.out_w()),
        ];
        // One i32 per window, held in an f32-sized buffer.
        let argmax = self.scratch(p.output_len(), Precision::Fp32)?;
        let mut args = vec![KernelArg::Ptr(x.ptr), KernelArg::Ptr(argmax.ptr)];
        args.extend(shape_args);
        self.elementwise(&storage_kernel("max_pool_argmax", s), p.output_len(), &args)?;
        let mut args = vec![
            KernelArg::Ptr(argmax.ptr),
            KernelArg::Ptr(dy.ptr),
            KernelArg::Ptr(dx.ptr),
        ];
        args.extend(shape_args);
        self.elementwise(
            &storage_kernel("max_pool_backward", s),
            p.input_len(),
            &args,
        )
    }

    fn global_avg_pool_forward(
        &self,
        p: &GlobalPoolParams,
        x: &GpuBuffer,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "global_avg_pool_forward";
        p.validate()?;
        self.check(OP, "x", x, p.batch * p.spatial * p.channels)?;
        self.check_output(OP, "y", y, p.batch * p.channels)?;
        dims_fit_i32(OP, &[p.batch, p.spatial, p.channels])?;
        let s = self.precision;
        let x = self.in_format(x, s)?;
        self.output(y, s)?;
        self.launch(
            &storage_kernel("global_avg_forward", s),
            launch::one_thread_each(p.batch * p.channels),
            &[
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(y.ptr),
                i32_arg(p.batch),
                i32_arg(p.spatial),
                i32_arg(p.channels),
            ],
        )
    }

    fn global_avg_pool_backward(
        &self,
        p: &GlobalPoolParams,
        dy: &GpuBuffer,
        dx: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "global_avg_pool_backward";
        p.validate()?;
        self.check(OP, "dy", dy, p.batch * p.channels)?;
        self.check_output(OP, "dx", dx, p.batch * p.spatial * p.channels)?;
        dims_fit_i32(OP, &[p.batch, p.spatial, p.channels])?;
        let s = self.precision;
        let dy = self.in_format(dy, s)?;
        self.output(dx, s)?;
        self.elementwise(
            &storage_kernel("global_avg_backward", s),
            p.batch * p.spatial * p.channels,
            &[
                KernelArg::Ptr(dy.ptr),
                KernelArg::Ptr(dx.ptr),
                i32_arg(p.batch),
                i32_arg(p.spatial),
                i32_arg(p.channels),
            ],
        )
    }

    fn linear_forward(
        &self,
        p: &LinearParams,
        x: &GpuBuffer,
        w: &GpuBuffer,
        b: &GpuBuffer,
        y: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "linear_forward";
        p.validate()?;
        let (batch, fin, fout) = (p.batch, p.in_features, p.out_features);
        self.check(OP, "x", x, batch * fin)?;
        self.check(OP, "w", w, fout * fin)?;
        self.check(OP, "b", b, fout)?;
        self.check_output(OP, "y", y, batch * fout)?;
        dims_fit_i32(OP, &[fout])?;
        self.require_f32(OP, "w", w)?;
        self.require_f32(OP, "b", b)?;
        // The classifier is f32: its input is widened, its logits are f32.
        let x = self.stored_as_f32(x)?;
        self.output(y, Precision::Fp32)?;
        self.elementwise(
            "broadcast_rows",
            batch * fout,
            &[
                KernelArg::Ptr(b.ptr),
                KernelArg::Ptr(y.ptr),
                i64_arg(batch),
                i32_arg(fout),
            ],
        )?;
        self.gemm(Gemm {
            m: batch,
            n: fout,
            k: fin,
            a: x.ptr,
            lda: fin,
            trans_a: Transpose::No,
            b: w.ptr,
            ldb: fin,
            trans_b: Transpose::Yes,
            c: y.ptr,
            ldc: fout,
            alpha: 1.0,
            beta: 1.0,
            types: GemmTypes::F32,
        })
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
        const OP: &str = "linear_backward";
        p.validate()?;
        let (batch, fin, fout) = (p.batch, p.in_features, p.out_features);
        self.check(OP, "x", x, batch * fin)?;
        self.check(OP, "w", w, fout * fin)?;
        self.check(OP, "dy", dy, batch * fout)?;
        self.check_output(OP, "dw", dw, fout * fin)?;
        self.check_output(OP, "db", db, fout)?;
        dims_fit_i32(OP, &[fout])?;
        self.require_f32(OP, "w", w)?;
        let x = self.stored_as_f32(x)?;
        let dy = self.in_format(dy, Precision::Fp32)?;
        self.output(dw, Precision::Fp32)?;
        self.output(db, Precision::Fp32)?;
        self.gemm(Gemm {
            m: fout,
            n: fin,
            k: batch,
            a: dy.ptr,
            lda: fout,
            trans_a: Transpose::Yes,
            b: x.ptr,
            ldb: fin,
            trans_b: Transpose::No,
            c: dw.ptr,
            ldc: fin,
            alpha: 1.0,
            beta: 0.0,
            types: GemmTypes::F32,
        })?;
        self.launch(
            "column_sums",
            launch::one_thread_each(fout),
            &[
                KernelArg::Ptr(dy.ptr),
                KernelArg::Ptr(db.ptr),
                i64_arg(batch),
                i32_arg(fout),
            ],
        )?;
        if let Some(dx) = dx {
            self.check_output(OP, "dx", dx, batch * fin)?;
            // The input gradient is an activation gradient: computed in f32, then stored in
            // the activation format.
            let wide = if self.precision.is_reduced() {
                Some(self.scratch(batch * fin, Precision::Fp32)?)
            } else {
                self.output(dx, Precision::Fp32)?;
                None
            };
            let target = wide.as_ref().unwrap_or(dx);
            self.gemm(Gemm {
                m: batch,
                n: fin,
                k: fout,
                a: dy.ptr,
                lda: fout,
                trans_a: Transpose::No,
                b: w.ptr,
                ldb: fin,
                trans_b: Transpose::No,
                c: target.ptr,
                ldc: fin,
                alpha: 1.0,
                beta: 0.0,
                types: GemmTypes::F32,
            })?;
            if let Some(wide) = wide {
                self.convert_into(&wide, dx, self.precision)?;
            }
        }
        Ok(())
    }

    fn cross_entropy_forward(
        &self,
        p: &CrossEntropyParams,
        logits: &GpuBuffer,
        labels: &GpuBuffer,
        loss: &mut GpuBuffer,
        correct: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy_forward";
        p.validate()?;
        self.check(OP, "logits", logits, p.batch * p.classes)?;
        self.check(OP, "labels", labels, p.batch)?;
        self.check_output(OP, "loss", loss, 1)?;
        self.check_output(OP, "correct", correct, p.batch)?;
        dims_fit_i32(OP, &[p.batch, p.classes])?;
        let logits = self.in_format(logits, Precision::Fp32)?;
        self.require_f32(OP, "labels", labels)?;
        self.output(loss, Precision::Fp32)?;
        self.output(correct, Precision::Fp32)?;
        let count = self.scratch(1, Precision::Fp32)?;
        self.launch(
            "ce_count_valid",
            launch::single_block(),
            &[
                KernelArg::Ptr(labels.ptr),
                i32_arg(p.batch),
                KernelArg::Ptr(count.ptr),
            ],
        )?;
        let sample_loss = self.scratch(p.batch, Precision::Fp32)?;
        self.launch(
            "ce_forward",
            launch::block_per_row(p.batch),
            &[
                KernelArg::Ptr(logits.ptr),
                KernelArg::Ptr(labels.ptr),
                i32_arg(p.classes),
                KernelArg::F32(p.label_smoothing),
                KernelArg::Ptr(sample_loss.ptr),
                KernelArg::Ptr(correct.ptr),
            ],
        )?;
        self.launch(
            "ce_mean",
            launch::single_block(),
            &[
                KernelArg::Ptr(sample_loss.ptr),
                i32_arg(p.batch),
                KernelArg::Ptr(count.ptr),
                KernelArg::Ptr(loss.ptr),
            ],
        )
    }

    fn cross_entropy_backward(
        &self,
        p: &CrossEntropyParams,
        logits: &GpuBuffer,
        labels: &GpuBuffer,
        dlogits: &mut GpuBuffer,
    ) -> Result<()> {
        const OP: &str = "cross_entropy_backward";
        p.validate()?;
        self.check(OP, "logits", logits, p.batch * p.classes)?;
        self.check(OP, "labels", labels, p.batch)?;
        self.check_output(OP, "dlogits", dlogits, p.batch * p.classes)?;
        dims_fit_i32(OP, &[p.batch, p.classes])?;
        let logits = self.in_format(logits, Precision::Fp32)?;
        self.require_f32(OP, "labels", labels)?;
        self.output(dlogits, Precision::Fp32)?;
        let count = self.scratch(1, Precision::Fp32)?;
        self.launch(
            "ce_count_valid",
            launch::single_block(),
            &[
                KernelArg::Ptr(labels.ptr),
                i32_arg(p.batch),
                KernelArg::Ptr(count.ptr),
            ],
        )?;
        self.launch(
            "ce_backward",
            launch::block_per_row(p.batch),
            &[
                KernelArg::Ptr(logits.ptr),
                KernelArg::Ptr(labels.ptr),
                i32_arg(p.classes),
                KernelArg::F32(p.label_smoothing),
                KernelArg::Ptr(count.ptr),
                KernelArg::Ptr(dlogits.ptr),
            ],
        )
    }

    /// An activation sum: in the activation format.
    fn add(&self, a: &GpuBuffer, b: &GpuBuffer, out: &mut GpuBuffer) -> Result<()> {
        self.check("add", "a", a, a.len)?;
        self.check("add", "second operand", b, a.len)?;
        self.check_output("add", "out", out, a.len)?;
        let s = self.precision;
        let (a, b) = (self.in_format(a, s)?, self.in_format(b, s)?);
        self.output(out, s)?;
        self.storage_elementwise(
            "add_f32",
            s,
            a.len,
            &[
                KernelArg::Ptr(a.ptr),
                KernelArg::Ptr(b.ptr),
                KernelArg::Ptr(out.ptr),
                i64_arg(a.len),
            ],
        )
    }

    /// In dst's format; an f32 dst of a 16-bit backend is rounded after, as an activation.
    fn add_assign(&self, dst: &mut GpuBuffer, src: &GpuBuffer) -> Result<()> {
        self.check("add_assign", "dst", dst, dst.len)?;
        self.check("add_assign", "src", src, dst.len)?;
        let src = if dst.storage == Precision::Fp32 {
            self.stored_as_f32(src)?
        } else {
            self.in_format(src, dst.storage)?
        };
        self.storage_elementwise(
            "add_assign_f32",
            dst.storage,
            dst.len,
            &[
                KernelArg::Ptr(dst.ptr),
                KernelArg::Ptr(src.ptr),
                i64_arg(dst.len),
            ],
        )?;
        if dst.storage == Precision::Fp32 {
            self.round_to_storage(dst)?;
        }
        Ok(())
    }

    /// In f32: a 16-bit x is widened first, as the CPU reference scales its stored values.
    fn scale(&self, x: &mut GpuBuffer, alpha: f32) -> Result<()> {
        self.check("scale", "x", x, x.len)?;
        self.widen_in_place(x)?;
        self.elementwise_vec4(
            "scale_f32",
            x.len,
            &[KernelArg::Ptr(x.ptr), i64_arg(x.len), KernelArg::F32(alpha)],
        )
    }

    fn axpy(&self, alpha: f32, x: &GpuBuffer, y: &mut GpuBuffer) -> Result<()> {
        self.check("axpy", "x", x, x.len)?;
        self.check("axpy", "y", y, x.len)?;
        self.widen_in_place(y)?;
        let x = self.in_format(x, Precision::Fp32)?;
        self.elementwise_vec4(
            "axpy_f32",
            x.len,
            &[
                KernelArg::F32(alpha),
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(y.ptr),
                i64_arg(x.len),
            ],
        )
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
        const OP: &str = "momentum_update";
        self.check(OP, "w", w, w.len)?;
        self.check(OP, "g", g, w.len)?;
        self.check(OP, "b", b, w.len)?;
        self.require_f32(OP, "w", w)?;
        self.require_f32(OP, "b", b)?;
        let g = self.in_format(g, Precision::Fp32)?;
        self.elementwise_vec4(
            "momentum_update",
            w.len,
            &[
                KernelArg::Ptr(w.ptr),
                KernelArg::Ptr(g.ptr),
                KernelArg::Ptr(b.ptr),
                i64_arg(w.len),
                KernelArg::F32(momentum),
                KernelArg::F32(step),
                KernelArg::F32(step * decay),
            ],
        )
    }

    fn sum_squares(&self, x: &GpuBuffer, out: &mut GpuBuffer, index: usize) -> Result<()> {
        self.check("sum_squares", "x", x, x.len)?;
        self.check_output("sum_squares", "out", out, out.len)?;
        if index >= out.len {
            return Err(EngineError::BufferLength {
                op: "sum_squares",
                what: "out (index past its end)",
                expected: index + 1,
                got: out.len,
            });
        }
        if out.is_backed() {
            // Earlier calls wrote other entries: the block is kept, so must be f32 already.
            self.require_f32("sum_squares", "out", out)?;
        } else {
            self.output(out, Precision::Fp32)?;
        }
        let x = self.in_format(x, Precision::Fp32)?;
        let shape = launch::reduction(x.len);
        let partials = self.scratch(shape.grid.0 as usize, Precision::Fp32)?;
        self.launch(
            "sum_squares_partial",
            shape,
            &[
                KernelArg::Ptr(x.ptr),
                i64_arg(x.len),
                KernelArg::Ptr(partials.ptr),
            ],
        )?;
        self.launch(
            "sum_partials",
            launch::single_block(),
            &[
                KernelArg::Ptr(partials.ptr),
                i32_arg(shape.grid.0 as usize),
                KernelArg::Ptr(out.ptr),
                i32_arg(index),
            ],
        )
    }

    fn momentum_update_many(
        &self,
        momentum: f32,
        updates: &mut [MomentumStep<'_, GpuBuffer>],
    ) -> Result<()> {
        const OP: &str = "momentum_update_many";
        if !self.multi_tensor_optimizer {
            for u in updates.iter_mut() {
                self.momentum_update(u.w, u.g, u.b, momentum, u.step, u.decay)?;
            }
            return Ok(());
        }
        let mut entries = Vec::with_capacity(updates.len());
        // 16-bit gradients widened for the update live until the launch has read them.
        let mut widened = Vec::new();
        for u in updates.iter() {
            let n = u.w.len;
            self.check(OP, "w", u.w, n)?;
            self.check(OP, "g", u.g, n)?;
            self.check(OP, "b", u.b, n)?;
            self.require_f32(OP, "w", u.w)?;
            self.require_f32(OP, "b", u.b)?;
            let g = match u.g.storage {
                Precision::Fp32 => u.g.ptr,
                _ => {
                    widened.push(self.convert(u.g, Precision::Fp32)?);
                    widened[widened.len() - 1].ptr
                }
            };
            if n > 0 {
                entries.push(multi_tensor::MomentumEntry::new(
                    u.w.ptr, g, u.b.ptr, n, u.step, u.decay,
                ));
            }
        }
        if entries.is_empty() {
            return Ok(());
        }
        let table = self.device_table(&entries)?;
        let largest = entries.iter().map(|e| e.n as usize).max().unwrap_or(0);
        self.launch(
            "momentum_update_multi",
            multi_tensor::shape(entries.len(), largest),
            &[KernelArg::Ptr(table.ptr), KernelArg::F32(momentum)],
        )
    }

    fn sum_squares_many(&self, xs: &[(&GpuBuffer, usize)], out: &mut GpuBuffer) -> Result<()> {
        const OP: &str = "sum_squares_many";
        if !self.multi_tensor_optimizer {
            for &(x, index) in xs {
                self.sum_squares(x, out, index)?;
            }
            return Ok(());
        }
        self.check_output(OP, "out", out, out.len)?;
        if out.is_backed() {
            self.require_f32(OP, "out", out)?;
        } else {
            self.output(out, Precision::Fp32)?;
        }
        let mut entries = Vec::with_capacity(xs.len());
        let mut indices = Vec::with_capacity(xs.len());
        let mut widened = Vec::new();
        for &(x, index) in xs {
            self.check(OP, "x", x, x.len)?;
            if index >= out.len {
                return Err(EngineError::BufferLength {
                    op: OP,
                    what: "out (index past its end)",
                    expected: index + 1,
                    got: out.len,
                });
            }
            dims_fit_i32(OP, &[index])?;
            let ptr = match x.storage {
                Precision::Fp32 => x.ptr,
                _ => {
                    widened.push(self.convert(x, Precision::Fp32)?);
                    widened[widened.len() - 1].ptr
                }
            };
            entries.push(multi_tensor::SquaresEntry {
                x: ptr.0,
                n: x.len as i64,
            });
            indices.push(index as i32);
        }
        if entries.is_empty() {
            return Ok(());
        }
        let table = self.device_table(&entries)?;
        let index_table = self.device_table(&indices)?;
        let largest = entries.iter().map(|e| e.n as usize).max().unwrap_or(0);
        let shape = multi_tensor::shape(entries.len(), largest);
        let per_tensor = shape.grid.0 as usize;
        let partials = self.scratch(per_tensor * entries.len(), Precision::Fp32)?;
        self.launch(
            "sum_squares_multi_partial",
            shape,
            &[KernelArg::Ptr(table.ptr), KernelArg::Ptr(partials.ptr)],
        )?;
        self.launch(
            "sum_partials_multi",
            launch::block_per_row(entries.len()),
            &[
                KernelArg::Ptr(partials.ptr),
                i32_arg(per_tensor),
                KernelArg::Ptr(index_table.ptr),
                KernelArg::Ptr(out.ptr),
            ],
        )
    }

    fn has_non_finite(&self, x: &GpuBuffer) -> Result<bool> {
        self.check("has_non_finite", "x", x, x.len)?;
        let x = self.in_format(x, Precision::Fp32)?;
        let flag = self.zeros(1)?;
        self.elementwise(
            "non_finite_flag",
            x.len,
            &[
                KernelArg::Ptr(x.ptr),
                i64_arg(x.len),
                KernelArg::Ptr(flag.ptr),
            ],
        )?;
        let mut host = [0.0f32];
        self.download(&flag, &mut host)?;
        Ok(host[0] != 0.0)
    }
}

impl GpuBackend {
    fn bn_forward_train(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &mut BatchNormBuffers<GpuBuffer>,
        saved: &mut BatchNormSaved<GpuBuffer>,
        y: &mut GpuBuffer,
        epilogue: BnEpilogue,
    ) -> Result<()> {
        const OP: &str = "batch_norm_forward_train";
        p.validate(true)?;
        let (rows, c) = (p.rows, p.channels);
        self.check(OP, "x", x, rows * c)?;
        self.check_output(OP, "y", y, rows * c)?;
        self.check_bn(OP, bn, c)?;
        self.check_output(OP, "saved mean", &saved.mean, c)?;
        self.check_output(OP, "saved inv_std", &saved.inv_std, c)?;
        dims_fit_i32(OP, &[c, launch::bn_slabs(rows)])?;
        let s = self.precision;
        let x = self.in_format(x, s)?;
        self.output(&mut saved.mean, Precision::Fp32)?;
        self.output(&mut saved.inv_std, Precision::Fp32)?;
        let slabs = launch::bn_slabs(rows);
        let p1 = self.scratch(slabs * c, Precision::Fp32)?;
        let p2 = self.scratch(slabs * c, Precision::Fp32)?;
        self.launch(
            &storage_kernel("bn_partial_sums", s),
            launch::bn_partials(rows, c),
            &[
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(x.ptr),
                i64_arg(rows),
                i32_arg(c),
                i32_arg(launch::BN_ROWS_PER_SLAB),
                KernelArg::I32(0),
                KernelArg::Ptr(p1.ptr),
                KernelArg::Ptr(p2.ptr),
            ],
        )?;
        let scale = self.scratch(c, Precision::Fp32)?;
        let shift = self.scratch(c, Precision::Fp32)?;
        self.launch(
            &storage_kernel("bn_forward_finalize", s),
            launch::one_thread_each(c),
            &[
                KernelArg::Ptr(p1.ptr),
                KernelArg::Ptr(p2.ptr),
                i32_arg(slabs),
                i64_arg(rows),
                i32_arg(c),
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(bn.gamma.ptr),
                KernelArg::Ptr(bn.beta.ptr),
                KernelArg::Ptr(bn.running_mean.ptr),
                KernelArg::Ptr(bn.running_var.ptr),
                KernelArg::F32(p.eps),
                KernelArg::F32(p.momentum),
                KernelArg::Ptr(saved.mean.ptr),
                KernelArg::Ptr(saved.inv_std.ptr),
                KernelArg::Ptr(scale.ptr),
                KernelArg::Ptr(shift.ptr),
            ],
        )?;
        self.channel_affine(OP, &x, &scale, &shift, y, rows, c, epilogue)
    }

    fn bn_forward_eval(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        bn: &BatchNormBuffers<GpuBuffer>,
        y: &mut GpuBuffer,
        epilogue: BnEpilogue,
    ) -> Result<()> {
        const OP: &str = "batch_norm_forward_eval";
        p.validate(false)?;
        let (rows, c) = (p.rows, p.channels);
        self.check(OP, "x", x, rows * c)?;
        self.check_output(OP, "y", y, rows * c)?;
        self.check_bn(OP, bn, c)?;
        dims_fit_i32(OP, &[c])?;
        let x = self.in_format(x, self.precision)?;
        let scale = self.scratch(c, Precision::Fp32)?;
        let shift = self.scratch(c, Precision::Fp32)?;
        self.launch(
            "bn_eval_coefficients",
            launch::one_thread_each(c),
            &[
                KernelArg::Ptr(bn.gamma.ptr),
                KernelArg::Ptr(bn.beta.ptr),
                KernelArg::Ptr(bn.running_mean.ptr),
                KernelArg::Ptr(bn.running_var.ptr),
                KernelArg::F32(p.eps),
                i32_arg(c),
                KernelArg::Ptr(scale.ptr),
                KernelArg::Ptr(shift.ptr),
            ],
        )?;
        self.channel_affine(OP, &x, &scale, &shift, y, rows, c, epilogue)
    }

    /// The batch-norm backward, through the ReLU whose output was `relu_out` when given;
    /// with `masked_dy`, dy masked by that ReLU is also stored there (dy's own buffer, in
    /// the storage format: the residual's gradient at the end of a block).
    #[allow(clippy::too_many_arguments)]
    fn bn_backward(
        &self,
        p: &BatchNormParams,
        x: &GpuBuffer,
        relu_out: Option<&GpuBuffer>,
        masked_dy: Option<DevicePtr>,
        dy: &GpuBuffer,
        gamma: &GpuBuffer,
        saved: &BatchNormSaved<GpuBuffer>,
        dx: &mut GpuBuffer,
        grads: &mut BatchNormGrads<GpuBuffer>,
    ) -> Result<()> {
        const OP: &str = "batch_norm_backward";
        p.validate(true)?;
        let (rows, c) = (p.rows, p.channels);
        self.check(OP, "x", x, rows * c)?;
        self.check(OP, "dy", dy, rows * c)?;
        self.check_output(OP, "dx", dx, rows * c)?;
        self.check(OP, "gamma", gamma, c)?;
        self.check(OP, "saved mean", &saved.mean, c)?;
        self.check(OP, "saved inv_std", &saved.inv_std, c)?;
        self.check_output(OP, "dgamma", &grads.gamma, c)?;
        self.check_output(OP, "dbeta", &grads.beta, c)?;
        if let Some(y) = relu_out {
            self.check(OP, "relu output", y, rows * c)?;
        }
        dims_fit_i32(OP, &[c, launch::bn_slabs(rows)])?;
        let s = self.precision;
        let x = self.in_format(x, s)?;
        let dy = self.in_format(dy, s)?;
        let relu_out = match relu_out {
            Some(y) => Some(self.in_format(y, s)?),
            None => None,
        };
        let relu_out = relu_out.as_deref();
        self.output(dx, s)?;
        self.output(&mut grads.gamma, Precision::Fp32)?;
        self.output(&mut grads.beta, Precision::Fp32)?;
        let slabs = launch::bn_slabs(rows);
        let p1 = self.scratch(slabs * c, Precision::Fp32)?;
        let p2 = self.scratch(slabs * c, Precision::Fp32)?;
        self.launch(
            &storage_kernel("bn_partial_sums", s),
            launch::bn_partials(rows, c),
            &[
                KernelArg::Ptr(x.ptr),
                KernelArg::Ptr(dy.ptr),
                KernelArg::Ptr(saved.mean.ptr),
                KernelArg::Ptr(relu_out.map_or(x.ptr, |y| y.ptr)),
                i64_arg(rows),
                i32_arg(c),
                i32_arg(launch::BN_ROWS_PER_SLAB),
                KernelArg::I32(if relu_out.is_some() { 2 } else { 1 }),
                KernelArg::Ptr(p1.ptr),
                KernelArg::Ptr(p2.ptr),
            ],
        )?;
        let coef = self.scratch(3 * c, Precision::Fp32)?;
        self.launch(
            "bn_backward_finalize",
            launch::one_thread_each(c),
            &[
                KernelArg::Ptr(p1.ptr),
                KernelArg::Ptr(p2.ptr),
                i32_arg(slabs),
                i64_arg(rows),
                i32_arg(c),
                KernelArg::Ptr(gamma.ptr),
                KernelArg::Ptr(saved.mean.ptr),
                KernelArg::Ptr(saved.inv_std.ptr),
                KernelArg::Ptr(grads.gamma.ptr),
                KernelArg::Ptr(grads.beta.ptr),
                KernelArg::Ptr(coef.ptr),
                KernelArg::Ptr(coef.at(c)),
                KernelArg::Ptr(coef.at(2 * c)),
            ],
        )?;
        dims_fit_i32(OP, &[rows * c])?;
        let mut args = vec![KernelArg::Ptr(x.ptr), KernelArg::Ptr(dy.ptr)];
        if let Some(y) = relu_out {
            args.push(KernelArg::Ptr(y.ptr));
        }
        args.extend([
            KernelArg::Ptr(coef.ptr),
            KernelArg::Ptr(coef.at(c)),
            KernelArg::Ptr(coef.at(2 * c)),
            KernelArg::Ptr(dx.ptr),
            i32_arg(rows * c),
            i32_arg(c),
        ]);
        if let Some(masked) = masked_dy {
            if masked != dy.ptr {
                return Err(EngineError::InvalidParameter {
                    op: OP,
                    reason: "the masked gradient goes into dy's own buffer".into(),
                });
            }
        }
        let kernel = match (relu_out.is_some(), masked_dy.is_some()) {
            (true, true) => "bn_backward_dx_relu_residual",
            (true, false) => "bn_backward_dx_relu",
            (false, _) => "bn_backward_dx",
        };
        self.elementwise_vec4(&storage_kernel(kernel, s), rows * c, &args)
    }

    fn check_bn(&self, op: &'static str, bn: &BatchNormBuffers<GpuBuffer>, c: usize) -> Result<()> {
        self.check(op, "gamma", &bn.gamma, c)?;
        self.check(op, "beta", &bn.beta, c)?;
        self.check(op, "running mean", &bn.running_mean, c)?;
        self.check(op, "running var", &bn.running_var, c)
    }

    #[allow(clippy::too_many_arguments)]
    fn channel_affine(
        &self,
        op: &'static str,
        x: &GpuBuffer,
        scale: &GpuBuffer,
        shift: &GpuBuffer,
        y: &mut GpuBuffer,
        rows: usize,
        c: usize,
        epilogue: BnEpilogue,
    ) -> Result<()> {
        dims_fit_i32("batch_norm", &[rows * c])?;
        let residual = match epilogue {
            BnEpilogue::AddRelu(r) => {
                self.check(op, "residual", r, rows * c)?;
                Some(self.in_format(r, x.storage)?)
            }
            _ => None,
        };
        self.output(y, x.storage)?;
        let kernel = match epilogue {
            BnEpilogue::None => "channel_affine",
            BnEpilogue::Relu => "channel_affine_relu",
            BnEpilogue::AddRelu(_) => "channel_affine_add_relu",
        };
        let mut args = vec![
            KernelArg::Ptr(x.ptr),
            KernelArg::Ptr(scale.ptr),
            KernelArg::Ptr(shift.ptr),
        ];
        if let Some(r) = &residual {
            args.push(KernelArg::Ptr(r.ptr));
        }
        args.extend([KernelArg::Ptr(y.ptr), i32_arg(rows * c), i32_arg(c)]);
        self.elementwise_vec4(&storage_kernel(kernel, x.storage), rows * c, &args)
    }
}
