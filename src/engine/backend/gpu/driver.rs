//! What a GPU backend needs from a vendor runtime: device memory, copies, kernel launches
//! and a row-major GEMM. The CUDA and HIP drivers implement it over their runtime
//! libraries, loaded at run time; everything above it is vendor-neutral.

use std::fmt;

use crate::engine::Precision;

/// A device address. Zero is never a live allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: usize) -> DevicePtr {
        DevicePtr(self.0 + bytes as u64)
    }
}

/// One kernel argument, passed by value as the kernel's C signature declares it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// A device address (`T*`).
    Ptr(DevicePtr),
    /// An `int`.
    I32(i32),
    /// A `long long`: element counts that may pass 2³¹.
    I64(i64),
    /// A `float`.
    F32(f32),
}

/// Argument storage for one launch: every value in its own 8-byte slot, as the runtimes'
/// launch calls read them through an array of pointers to the slots.
pub fn argument_slots(args: &[KernelArg]) -> Vec<[u8; 8]> {
    args.iter()
        .map(|arg| {
            let mut slot = [0u8; 8];
            match *arg {
                KernelArg::Ptr(p) => slot.copy_from_slice(&p.0.to_ne_bytes()),
                KernelArg::I64(v) => slot.copy_from_slice(&v.to_ne_bytes()),
                KernelArg::I32(v) => slot[..4].copy_from_slice(&v.to_ne_bytes()),
                KernelArg::F32(v) => slot[..4].copy_from_slice(&v.to_ne_bytes()),
            }
            slot
        })
        .collect()
}

/// Grid and block shape of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchShape {
    /// Blocks in x, y and z.
    pub grid: (u32, u32, u32),
    /// Threads of one block in x, y and z.
    pub block: (u32, u32, u32),
}

/// Whether an operand of a GEMM is read transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transpose {
    /// Read as stored.
    No,
    /// Read transposed.
    Yes,
}

/// `C[m, n] := alpha · op(A) · op(B) + beta · C`, every matrix row-major with the given
/// leading dimensions (elements between rows). `op(A)` is `[m, k]`, so A itself is
/// `[m, k]` or, transposed, `[k, m]`; likewise B is `[k, n]` or `[n, k]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    /// Rows of op(A) and of C.
    pub m: usize,
    /// Columns of op(B) and of C.
    pub n: usize,
    /// The summed dimension: columns of op(A), rows of op(B).
    pub k: usize,
    /// Address of A.
    pub a: DevicePtr,
    /// Elements between rows of A as stored.
    pub lda: usize,
    /// Whether A is stored as `[k, m]`.
    pub trans_a: Transpose,
    /// Address of B.
    pub b: DevicePtr,
    /// Elements between rows of B as stored.
    pub ldb: usize,
    /// Whether B is stored as `[n, k]`.
    pub trans_b: Transpose,
    /// Address of C, read (for `beta`) and written.
    pub c: DevicePtr,
    /// Elements between rows of C.
    pub ldc: usize,
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of C's old contents; 0 writes C without reading it.
    pub beta: f32,
    /// Element formats of A and B (shared) and of C; arithmetic is f32 either way.
    pub types: GemmTypes,
}

/// The element formats of a GEMM: A and B share one, C has its own (a 16-bit product may
/// write f32, as a weight gradient does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmTypes {
    /// The format of A and B.
    pub operands: Precision,
    /// The format of C.
    pub output: Precision,
}

impl GemmTypes {
    /// f32 operands and output: the vendor's plain SGEMM.
    pub const F32: GemmTypes = GemmTypes {
        operands: Precision::Fp32,
        output: Precision::Fp32,
    };

    /// Whether these are [`Self::F32`].
    pub fn is_f32(self) -> bool {
        self == Self::F32
    }
}

/// The same product in the column-major terms BLAS libraries take: row-major `C = A·B`
/// is column-major `Cᵀ = Bᵀ·Aᵀ`, so the operands swap and m and n with them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColumnMajorGemm {
    /// Whether the first operand (the row-major B) is read transposed.
    pub trans_first: Transpose,
    /// Whether the second operand (the row-major A) is read transposed.
    pub trans_second: Transpose,
    /// Rows of the column-major C: the row-major n.
    pub m: usize,
    /// Columns of the column-major C: the row-major m.
    pub n: usize,
    /// The summed dimension.
    pub k: usize,
    /// Address of the first operand (the row-major B).
    pub first: DevicePtr,
    /// The first operand's leading dimension.
    pub ld_first: usize,
    /// Address of the second operand (the row-major A).
    pub second: DevicePtr,
    /// The second operand's leading dimension.
    pub ld_second: usize,
    /// Address of C.
    pub c: DevicePtr,
    /// C's leading dimension.
    pub ldc: usize,
}

impl Gemm {
    /// The same product on operands in `operands` format, writing C in `output` format.
    pub fn with_types(self, operands: Precision, output: Precision) -> Gemm {
        Gemm {
            types: GemmTypes { operands, output },
            ..self
        }
    }

    /// This product as a column-major BLAS call takes it.
    pub fn column_major(&self) -> ColumnMajorGemm {
        ColumnMajorGemm {
            trans_first: self.trans_b,
            trans_second: self.trans_a,
            m: self.n,
            n: self.m,
            k: self.k,
            first: self.b,
            ld_first: self.ldb,
            second: self.a,
            ld_second: self.lda,
            c: self.c,
            ldc: self.ldc,
        }
    }

    /// Checks the shapes against the leading dimensions, so a wrong call is an error
    /// instead of a device fault.
    pub fn validate(&self) -> Result<(), DriverError> {
        let (a_cols, b_cols) = (
            match self.trans_a {
                Transpose::No => self.k,
                Transpose::Yes => self.m,
            },
            match self.trans_b {
                Transpose::No => self.n,
                Transpose::Yes => self.k,
            },
        );
        let fits_i32 = [self.m, self.n, self.k, self.lda, self.ldb, self.ldc]
            .iter()
            .all(|&d| d <= i32::MAX as usize);
        if self.lda < a_cols.max(1)
            || self.ldb < b_cols.max(1)
            || self.ldc < self.n.max(1)
            || !fits_i32
        {
            return Err(DriverError::InvalidArgument(format!(
                "GEMM {}×{}×{} with leading dimensions a {} b {} c {}",
                self.m, self.n, self.k, self.lda, self.ldb, self.ldc
            )));
        }
        let GemmTypes { operands, output } = self.types;
        if operands == Precision::Fp32 && output != Precision::Fp32 {
            return Err(DriverError::InvalidArgument(format!(
                "GEMM with f32 operands and a {output} output"
            )));
        }
        if operands.is_reduced() && output.is_reduced() && operands != output {
            return Err(DriverError::InvalidArgument(format!(
                "GEMM mixing {operands} operands and a {output} output"
            )));
        }
        Ok(())
    }
}

/// Which pass of a convolution a DNN library runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DnnConvOp {
    /// y := conv(x, w).
    Forward,
    /// x := convᵀ(y, w): the input gradient from the output gradient.
    BackwardData,
    /// w := x ⋆ y: the filter gradient.
    BackwardFilter,
}

/// One convolution through the vendor's DNN library: NHWC activations, weights in
/// output-channel-major order `[out_c, kernel_h, kernel_w, in_c]`. For the backward
/// passes `y` holds the output gradient and `x` or `w` receives the result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DnnConv {
    /// Which pass runs.
    pub op: DnnConvOp,
    /// The convolution's shape, as the engine's layers give it.
    pub shape: crate::engine::backend::Conv2dParams,
    /// NHWC input (written by the backward-data pass).
    pub x: DevicePtr,
    /// Weights (written by the backward-filter pass).
    pub w: DevicePtr,
    /// NHWC output, or the output gradient for the backward passes.
    pub y: DevicePtr,
    /// The element format of x, w and y (arithmetic is f32).
    pub dtype: Precision,
}

/// Operand precision of a matmul throughput measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MatmulPrecision {
    /// f32 operands and arithmetic (on NVIDIA: TF32 tensor cores when the driver's math
    /// mode allows them).
    F32,
    /// fp16 operands, f32 accumulation and output.
    F16,
}

/// What a device reports about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeviceInfo {
    /// The device's index among its runtime's devices.
    pub ordinal: usize,
    /// The name the runtime reports (`NVIDIA GeForce RTX 4090`).
    pub name: String,
    /// `sm_90` on CUDA, `gfx1100` on HIP: the target kernels are compiled for.
    pub arch: String,
    /// PCI address as sysfs spells it (`0000:01:00.0`), when the runtime tells it.
    pub pci_address: Option<String>,
    /// Device memory, in bytes.
    pub memory_bytes: u64,
    /// Streaming multiprocessors (CUDA) or compute units (HIP).
    pub multiprocessors: u32,
}

/// Device times of a run of identical `n`×`n`×`n` matmuls, in the order they ran.
#[derive(Debug, Clone, PartialEq)]
pub struct MatmulSeries {
    /// The side of the square matrices.
    pub n: usize,
    /// Device milliseconds of each product.
    pub times_ms: Vec<f64>,
}

/// Products at each end of a series compared by [`MatmulSeries::slowdown`]: a fifth.
const SERIES_END_FRACTION: usize = 5;
/// No series runs longer than this many products, however short each is.
const SERIES_MAX_PRODUCTS: usize = 100_000;

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(0.0)
}

impl MatmulSeries {
    /// Device time of the whole series.
    pub fn seconds(&self) -> f64 {
        self.times_ms.iter().sum::<f64>() / 1e3
    }

    /// TFLOP/s of the median product.
    pub fn median_tflops(&self) -> Result<f64, DriverError> {
        let median_ms = median(&self.times_ms);
        if median_ms.is_nan() || median_ms <= 0.0 {
            return Err(DriverError::InvalidArgument(format!(
                "timer reported {median_ms} ms for a {}³ matmul",
                self.n
            )));
        }
        Ok(2.0 * (self.n as f64).powi(3) / (median_ms * 1e-3) / 1e12)
    }

    /// How much longer the last fifth of the products took than the first fifth, as a
    /// fraction (0.1: 10 % slower at the end, as a GPU that heats up and lowers its clocks
    /// is); `None` under ten products.
    pub fn slowdown(&self) -> Option<f64> {
        let n = self.times_ms.len();
        if n < 2 * SERIES_END_FRACTION {
            return None;
        }
        let end = n / SERIES_END_FRACTION;
        let (first, last) = (
            median(&self.times_ms[..end]),
            median(&self.times_ms[n - end..]),
        );
        (first > 0.0).then(|| last / first - 1.0)
    }
}

/// Times `product` (an `n`×`n`×`n` matmul) after two warm-ups, at least `min_products`
/// times and until `seconds` of device time have passed.
pub fn timed_series<D: GpuDriver + ?Sized>(
    driver: &D,
    product: &mut dyn FnMut() -> Result<(), DriverError>,
    n: usize,
    min_products: usize,
    seconds: f64,
) -> Result<MatmulSeries, DriverError> {
    for _ in 0..2 {
        product()?;
    }
    let mut series = MatmulSeries {
        n,
        times_ms: Vec::with_capacity(min_products.max(1)),
    };
    let mut total_ms = 0.0;
    while series.times_ms.len() < min_products.max(1)
        || (total_ms < seconds * 1e3 && series.times_ms.len() < SERIES_MAX_PRODUCTS)
    {
        let ms = driver.time_ms(product)?;
        total_ms += ms.max(0.0);
        series.times_ms.push(ms);
    }
    Ok(series)
}

/// The median of `repeats` timings of `copy` (after one warm-up) as GB/s for `bytes`.
pub fn median_gbps<D: GpuDriver + ?Sized>(
    driver: &D,
    copy: &mut dyn FnMut() -> Result<(), DriverError>,
    bytes: usize,
    repeats: usize,
) -> Result<f64, DriverError> {
    copy()?;
    let mut times = Vec::with_capacity(repeats.max(1));
    for _ in 0..repeats.max(1) {
        times.push(driver.time_ms(copy)?);
    }
    times.sort_by(f64::total_cmp);
    let median_ms = times[times.len() / 2];
    if median_ms <= 0.0 {
        return Err(DriverError::InvalidArgument(format!(
            "timer reported {median_ms} ms for a copy of {bytes} bytes"
        )));
    }
    Ok(bytes as f64 / (median_ms * 1e-3) / 1e9)
}

/// The pattern a peer-copy check writes and expects back: a word per index.
pub fn peer_check_pattern(words: usize) -> Vec<u32> {
    (0..words as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ 0x5a5a_5a5a)
        .collect()
}

/// Why a driver could not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DriverError {
    /// A runtime library, or a symbol of one, is missing or failed to load.
    #[error("{0}")]
    LibraryMissing(String),
    /// The runtime has no device of that ordinal.
    #[error("no {runtime} device {ordinal} (the runtime sees {count})")]
    NoDevice {
        /// `CUDA` or `HIP`.
        runtime: &'static str,
        /// The device asked for.
        ordinal: usize,
        /// Devices the runtime sees.
        count: usize,
    },
    /// A vendor call returned a failure.
    #[error("{call} failed: {message}")]
    Call {
        /// The vendor's name of the call (`cuMemAlloc`, `hipMalloc`).
        call: &'static str,
        /// The status it returned, in the vendor's words.
        message: String,
    },
    /// The kernel compiler rejected the kernel source.
    #[error("kernel compilation failed for {arch}: {log}")]
    Compile {
        /// The architecture compiled for.
        arch: String,
        /// The compiler's log.
        log: String,
    },
    /// A launch named a kernel the compiled module lacks.
    #[error("kernel {0} is not in the compiled module")]
    UnknownKernel(String),
    /// The device has no room for an allocation of `bytes`.
    #[error("out of device memory allocating {bytes} bytes")]
    OutOfMemory {
        /// The bytes asked for.
        bytes: usize,
    },
    /// A request refused before any vendor call (a GEMM whose shapes do not fit, a peer
    /// of another runtime).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer copy check read back other data than it wrote.
    #[error("data copied from {from} to {to} came back wrong")]
    CorruptCopy {
        /// The device copied from (`cuda:0`).
        from: String,
        /// The device copied to.
        to: String,
    },
}

/// A vendor runtime bound to one device and one in-order stream. Every call is enqueued on
/// that stream; `synchronize` waits for all of it and reports a fault from any of it.
pub trait GpuDriver: Send + Sync + fmt::Debug + 'static {
    /// What the device reported about itself when the driver opened it.
    fn info(&self) -> &DeviceInfo;
    /// `cuda` or `hip`.
    fn runtime(&self) -> &'static str;
    /// The runtime's own handle of the driver's stream (`CUstream`, `hipStream_t`), for
    /// libraries that enqueue on it (NCCL, RCCL); null for a driver without one.
    fn native_stream(&self) -> *mut std::ffi::c_void;
    /// For operations between two devices of one runtime (peer copies).
    fn as_any(&self) -> &dyn std::any::Any;

    /// `bytes` of device memory (a block of at least one byte), or
    /// [`DriverError::OutOfMemory`].
    fn alloc(&self, bytes: usize) -> Result<DevicePtr, DriverError>;
    /// Gives a block back to the runtime.
    ///
    /// # Safety
    /// `ptr` came from `alloc` of this driver and no queued work still uses it.
    unsafe fn free(&self, ptr: DevicePtr);
    /// Copies `src` to `dst` and waits for the copy, so `src` may go right after.
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), DriverError>;
    /// Waits for the stream, then copies.
    fn copy_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<(), DriverError>;
    /// Enqueues a copy of `bytes` from `src` to `dst`, both on this device.
    fn copy_on_device(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// Enqueues setting `bytes` bytes from `dst` to zero.
    fn zero(&self, dst: DevicePtr, bytes: usize) -> Result<(), DriverError>;

    /// Launches one kernel of the engine's kernel source by name.
    fn launch(
        &self,
        kernel: &str,
        shape: LaunchShape,
        args: &[KernelArg],
    ) -> Result<(), DriverError>;
    /// f32 GEMM through the vendor BLAS.
    fn gemm(&self, gemm: &Gemm) -> Result<(), DriverError>;
    /// Waits for everything enqueued and reports the first fault among it.
    fn synchronize(&self) -> Result<(), DriverError>;

    /// Page-locked host memory, which copies reach the link's full speed from.
    fn alloc_pinned(&self, bytes: usize) -> Result<*mut u8, DriverError>;
    /// Gives page-locked memory back.
    ///
    /// # Safety
    /// `ptr` came from `alloc_pinned` of this driver and no copy still uses it.
    unsafe fn free_pinned(&self, ptr: *mut u8);
    /// Enqueues a copy between host memory and the device, in the direction given.
    ///
    /// # Safety
    /// `host` is valid for `bytes` until the stream has drained.
    unsafe fn copy_async(
        &self,
        to_device: bool,
        host: *mut u8,
        device: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// Lets this device reach `peer`'s memory directly where the hardware allows (already
    /// enabled counts); copies between them work either way.
    fn enable_peer_access(&self, peer: &dyn GpuDriver) -> Result<(), DriverError>;
    /// Enqueues a copy of `bytes` from `src` on this device to `dst` on `peer` (a device of
    /// the same runtime).
    fn copy_to_peer_async(
        &self,
        peer: &dyn GpuDriver,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
    ) -> Result<(), DriverError>;
    /// Enqueues one `n`×`n`×`n` product of `precision` operands `a` and `b` into the f32
    /// matrix `c` through the vendor BLAS.
    fn matmul_square(
        &self,
        precision: MatmulPrecision,
        n: usize,
        a: DevicePtr,
        b: DevicePtr,
        c: DevicePtr,
    ) -> Result<(), DriverError>;

    /// Matmul throughput on `n`×`n` matrices of generated data, in TFLOP/s: the median of
    /// `repeats` timed products after two warm-ups.
    fn matmul_tflops(
        &self,
        precision: MatmulPrecision,
        n: usize,
        repeats: usize,
    ) -> Result<f64, DriverError> {
        self.matmul_series(precision, n, repeats, 0.0)?
            .median_tflops()
    }

    /// Products of `n`×`n` matrices of generated data, timed one by one after two
    /// warm-ups: at least `min_products`, and for at least `seconds` of device time, so a
    /// card is measured under sustained load.
    fn matmul_series(
        &self,
        precision: MatmulPrecision,
        n: usize,
        min_products: usize,
        seconds: f64,
    ) -> Result<MatmulSeries, DriverError> {
        let (elem, kernel) = match precision {
            MatmulPrecision::F16 => (2, "fill_pattern_f16"),
            MatmulPrecision::F32 => (4, "fill_pattern_f32"),
        };
        let a = self.alloc(n * n * elem)?;
        let b = self.alloc(n * n * elem)?;
        let c = self.alloc(n * n * 4)?;
        let result = (|| {
            for (buf, seed) in [(a, 1), (b, 2)] {
                self.launch(
                    kernel,
                    super::launch::elementwise(n * n),
                    &[
                        KernelArg::Ptr(buf),
                        KernelArg::I64((n * n) as i64),
                        KernelArg::I32(seed),
                    ],
                )?;
            }
            timed_series(
                self,
                &mut || self.matmul_square(precision, n, a, b, c),
                n,
                min_products,
                seconds,
            )
        })();
        let _ = self.synchronize();
        // SAFETY: the stream drained above; the blocks are ours.
        unsafe {
            self.free(a);
            self.free(b);
            self.free(c);
        }
        result
    }

    /// Host↔device copy bandwidth with pinned host memory, GB/s (10⁹ bytes): the median
    /// of `repeats` copies of `bytes` after one warm-up.
    fn host_copy_gbps(
        &self,
        to_device: bool,
        bytes: usize,
        repeats: usize,
    ) -> Result<f64, DriverError> {
        let host = self.alloc_pinned(bytes)?;
        let result = self.alloc(bytes).and_then(|device| {
            // SAFETY: `host` and `device` hold `bytes`; the timing drains each copy.
            let gbps = median_gbps(
                self,
                &mut || unsafe { self.copy_async(to_device, host, device, bytes) },
                bytes,
                repeats,
            );
            let _ = self.synchronize();
            // SAFETY: the stream has drained.
            unsafe { self.free(device) };
            gbps
        });
        // SAFETY: no copy is in flight after the synchronisation above.
        unsafe { self.free_pinned(host) };
        result
    }

    /// Copy bandwidth from this device to `peer` (a device of the same runtime), GB/s,
    /// with peer access enabled where the devices allow it. The copied data is checked.
    fn peer_copy_gbps(
        &self,
        peer: &dyn GpuDriver,
        bytes: usize,
        repeats: usize,
    ) -> Result<f64, DriverError> {
        self.enable_peer_access(peer)?;
        let words = bytes / 4;
        let src = self.alloc(words * 4)?;
        let dst = match peer.alloc(words * 4) {
            Ok(dst) => dst,
            Err(e) => {
                // SAFETY: nothing was enqueued on `src`.
                unsafe { self.free(src) };
                return Err(e);
            }
        };
        let result = (|| {
            let pattern = peer_check_pattern(words);
            let pattern_bytes: Vec<u8> = pattern.iter().flat_map(|w| w.to_ne_bytes()).collect();
            self.copy_to_device(src, &pattern_bytes)?;
            let gbps = median_gbps(
                self,
                &mut || self.copy_to_peer_async(peer, dst, src, words * 4),
                words * 4,
                repeats,
            )?;
            self.synchronize()?;
            let mut back = vec![0u8; words * 4];
            peer.copy_to_host(&mut back, dst)?;
            if back != pattern_bytes {
                return Err(DriverError::CorruptCopy {
                    from: format!("{}:{}", self.runtime(), self.info().ordinal),
                    to: format!("{}:{}", peer.runtime(), peer.info().ordinal),
                });
            }
            Ok(gbps)
        })();
        let _ = self.synchronize();
        let _ = peer.synchronize();
        // SAFETY: both streams have drained.
        unsafe {
            self.free(src);
            peer.free(dst);
        }
        result
    }

    /// The vendor DNN library convolutions go through (`cuDNN 9.1.0`), if any.
    fn dnn_library(&self) -> Option<String> {
        None
    }

    /// Runs `conv` through the DNN library; `Ok(false)` when the driver has none, and the
    /// caller computes it another way.
    fn dnn_conv(&self, conv: &DnnConv) -> Result<bool, DriverError> {
        let _ = conv;
        Ok(false)
    }

    /// Milliseconds of device time that `work` enqueues, measured with device events.
    fn time_ms(
        &self,
        work: &mut dyn FnMut() -> Result<(), DriverError>,
    ) -> Result<f64, DriverError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(trans_a: Transpose, trans_b: Transpose) -> Gemm {
        Gemm {
            m: 2,
            n: 3,
            k: 4,
            a: DevicePtr(1),
            lda: if trans_a == Transpose::No { 4 } else { 2 },
            trans_a,
            b: DevicePtr(2),
            ldb: if trans_b == Transpose::No { 3 } else { 4 },
            trans_b,
            c: DevicePtr(3),
            ldc: 3,
            alpha: 1.0,
            types: GemmTypes::F32,
            beta: 0.0,
        }
    }

    #[test]
    fn argument_slots_hold_each_value_in_its_declared_width() {
        let slots = argument_slots(&[
            KernelArg::Ptr(DevicePtr(0x1122_3344_5566_7788)),
            KernelArg::I32(-2),
            KernelArg::I64(1 << 40),
            KernelArg::F32(1.5),
        ]);
        assert_eq!(u64::from_ne_bytes(slots[0]), 0x1122_3344_5566_7788);
        assert_eq!(i32::from_ne_bytes(slots[1][..4].try_into().unwrap()), -2);
        assert_eq!(i64::from_ne_bytes(slots[2]), 1 << 40);
        assert_eq!(f32::from_ne_bytes(slots[3][..4].try_into().unwrap()), 1.5);
    }

    #[test]
    fn row_major_product_swaps_operands_for_blas() {
        let g = gemm(Transpose::Yes, Transpose::No);
        let cm = g.column_major();
        assert_eq!((cm.m, cm.n, cm.k), (3, 2, 4));
        assert_eq!(cm.first, DevicePtr(2));
        assert_eq!(cm.second, DevicePtr(1));
        assert_eq!(cm.trans_first, Transpose::No);
        assert_eq!(cm.trans_second, Transpose::Yes);
        assert_eq!((cm.ld_first, cm.ld_second, cm.ldc), (3, 2, 3));
    }

    #[test]
    fn gemm_leading_dimensions_are_checked() {
        for ta in [Transpose::No, Transpose::Yes] {
            for tb in [Transpose::No, Transpose::Yes] {
                assert!(gemm(ta, tb).validate().is_ok());
            }
        }
        let mut bad = gemm(Transpose::No, Transpose::No);
        bad.lda = 3;
        assert!(bad.validate().is_err());
        let mut bad = gemm(Transpose::No, Transpose::Yes);
        bad.ldb = 3;
        assert!(bad.validate().is_err());
        let mut bad = gemm(Transpose::No, Transpose::No);
        bad.ldc = 2;
        assert!(bad.validate().is_err());
    }

    #[test]
    fn a_series_reports_its_median_and_how_much_its_end_slowed() {
        let steady = MatmulSeries {
            n: 1000,
            times_ms: vec![2.0; 20],
        };
        assert!((steady.median_tflops().unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(steady.slowdown(), Some(0.0));
        assert!((steady.seconds() - 0.04).abs() < 1e-12);
        // Clocks drop after the first half: the last fifth takes 25 % longer.
        let mut times = vec![2.0; 10];
        times.extend(vec![2.5; 10]);
        let throttled = MatmulSeries {
            n: 1000,
            times_ms: times,
        };
        assert!((throttled.slowdown().unwrap() - 0.25).abs() < 1e-12);
        let short = MatmulSeries {
            n: 1000,
            times_ms: vec![2.0; 9],
        };
        assert_eq!(short.slowdown(), None);
        let broken = MatmulSeries {
            n: 1000,
            times_ms: vec![0.0; 3],
        };
        assert!(broken.median_tflops().is_err());
    }

    #[test]
    fn gemm_formats_are_16_bit_operands_into_their_own_format_or_f32() {
        let g = gemm(Transpose::No, Transpose::No);
        for (operands, output, ok) in [
            (Precision::Fp16, Precision::Fp16, true),
            (Precision::Bf16, Precision::Fp32, true),
            (Precision::Fp32, Precision::Fp16, false),
            (Precision::Fp16, Precision::Bf16, false),
        ] {
            let typed = g.with_types(operands, output);
            assert_eq!(typed.validate().is_ok(), ok, "{operands} → {output}");
            assert_eq!(typed.column_major(), g.column_major());
        }
        assert!(g.types.is_f32());
    }
}
